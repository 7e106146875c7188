"""Pure scheduling policy: argument checks, sort keys and deadlines.

Nothing here takes a lock, starts a thread or reads a clock by itself: each function turns
values into other values, so the rules can be tested without a pool.

The heap orders entries by ``(key, seq)``, smallest first. With strict priority the key is
``-priority``, so higher priorities come out first and ``seq``, one global counter, keeps equal
priorities in submission order.
"""

from __future__ import annotations

import enum
import math
import numbers
from typing import Optional, Union

Number = Union[int, float]


class Priority(enum.IntEnum):
    """Named priorities; any real number works too, and higher runs first."""

    LOW = -1
    NORMAL = 0
    HIGH = 1


def describe(value: object) -> str:
    """Say what a bad argument was, for error messages: ``'high' (str)``."""
    return f"{value!r} ({type(value).__name__})"


def check_priority(priority: object) -> Number:
    """Return ``priority`` as a number that orders safely in a heap.

    Raises:
        TypeError: ``priority`` is not a real number (``bool`` is refused as a likely mistake).
        ValueError: ``priority`` is NaN, which compares false with everything.
    """
    if type(priority) is int or type(priority) is Priority:
        return priority  # type: ignore[return-value]
    if isinstance(priority, bool) or not isinstance(priority, numbers.Real):
        raise TypeError(f"priority must be a real number, got {describe(priority)}")
    if isinstance(priority, int):
        return int(priority)
    value = float(priority)
    if math.isnan(value):
        raise ValueError(f"priority must not be NaN, got {describe(priority)}")
    return value


def check_timeout(timeout: object) -> Optional[float]:
    """Return a queue timeout in seconds as a float, or None for no deadline (also for inf).

    Raises:
        TypeError: ``timeout`` is neither None nor a real number.
        ValueError: ``timeout`` is negative or NaN.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a real number or None, got {describe(timeout)}")
    value = float(timeout)
    if not value >= 0.0:  # also true for NaN
        raise ValueError(f"timeout must be a non-negative number, got {describe(timeout)}")
    return None if value == math.inf else value


def sort_key(priority: Number) -> Number:
    """The heap key of an entry: smaller keys run first."""
    return -priority


def is_due(deadline: Optional[float], now: float) -> bool:
    """True when a task with this deadline may no longer start at clock reading ``now``."""
    return deadline is not None and now >= deadline
