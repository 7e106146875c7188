"""Pure scheduling policy: argument checks, ranks and deadlines.

Nothing here takes a lock, starts a thread or reads a clock by itself: each function turns
values into other values, so the rules can be tested without a pool.

The heap orders entries by ``(rank, seq)``, smallest first. With strict priority the rank is
``-priority``, so higher priorities come out first and ``seq``, one global counter, keeps equal
priorities in submission order.
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Callable, Hashable
from typing import Literal, Optional, Union, get_args

Number = Union[int, float]


class Priority(enum.IntEnum):
    """Named priorities; any real number works too, and higher runs first."""

    #: Background work, -1.
    LOW = -1
    #: The default of ``submit``, 0.
    NORMAL = 0
    #: Urgent work, 1.
    HIGH = 1


def describe(value: object) -> str:
    """Say what a bad argument was, for error messages: ``'high' (str)``.

    A number beyond float range is told by its size, not by its hundreds of digits (which
    ``repr`` refuses past 4,300): ``an int of 1329 bits``.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            negative = value < 0
            if isinstance(value, int):
                size = f"int of {int(value).bit_length()} bits"
                return f"a negative {size}" if negative else f"an {size}"
            return f"a {'negative ' if negative else ''}{type(value).__name__} beyond float range"
        except Exception:  # a number type of the user's own making: its repr says it
            pass
    return f"{value!r} ({type(value).__name__})"


def to_float(name: str, value: numbers.Real) -> float:
    """``value`` as a float.

    Raises:
        ValueError: ``value`` is beyond float range (an int of more than 1024 bits, say).
    """
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} must fit in a float, got {describe(value)}") from None


#: The types of priority that :func:`check_priority` returns unchanged.
PLAIN_PRIORITIES = frozenset((int, Priority))


def check_priority(priority: object) -> Number:
    """Return ``priority`` as a number that orders safely in a heap.

    Raises:
        TypeError: ``priority`` is not a real number (``bool`` is refused as a likely mistake).
        ValueError: ``priority`` is NaN, which compares false with everything.
    """
    if type(priority) in PLAIN_PRIORITIES:
        return priority  # type: ignore[return-value]
    if isinstance(priority, bool) or not isinstance(priority, numbers.Real):
        raise TypeError(f"priority must be a real number, got {describe(priority)}")
    if isinstance(priority, int):
        return int(priority)
    value = to_float("priority", priority)
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
    try:
        value = float(timeout)
    except OverflowError:  # an int beyond float range
        value = math.inf if timeout > 0 else -math.inf  # type: ignore[operator]
    if not value >= 0.0:  # also true for NaN
        raise ValueError(f"timeout must be a non-negative number, got {describe(timeout)}")
    return None if value == math.inf else value


def check_ageing(ageing: object) -> Optional[float]:
    """Return ``ageing`` (seconds of waiting per priority step) as a float, or None."""
    return check_seconds("ageing", ageing)


def check_seconds(name: str, value: object) -> Optional[float]:
    """Return a positive finite number of seconds (``ageing``, ``idle_timeout``), or None.

    Infinity is refused, and so is a number beyond float range (``10**400``), which would be
    infinite as a float.

    Raises:
        TypeError: ``value`` is neither None nor a real number.
        ValueError: ``value`` is not positive, is infinite or NaN, or does not fit in a float.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number or None, got {describe(value)}")
    seconds = math.nan if value <= 0 else to_float(name, value)
    if not 0.0 < seconds < math.inf:
        raise ValueError(f"{name} must be a positive number or None, got {describe(value)}")
    return seconds


def check_limit(name: str, value: object, optional: bool = True) -> Optional[int]:
    """Return a limit (``max_queued``, ``key_limit``) as an int, or None for no limit.

    With ``optional=False`` (``max_workers`` set on a running pool) None is refused too.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        error = ValueError if isinstance(value, int) and not isinstance(value, bool) else TypeError
        what = "a positive integer or None" if optional else "a positive integer"
        raise error(f"{name} must be {what}, got {describe(value)}")
    return int(value)


def check_max_workers(value: object) -> int:
    """Return ``max_workers`` as the standard pool takes it: any number above 0, rounded up.

    The standard pool refuses only ``max_workers <= 0``, and starts threads while it has
    fewer than ``max_workers``: given 2.5, it starts up to 3. So the constructor and the
    ``max_workers`` setter take any number above 0 and round it up. Infinity and NaN, with
    which the standard pool would start a thread for every waiting task or none at all,
    are refused.

    Raises:
        ValueError: ``value`` is not greater than 0 (the standard pool's message), or is
            infinite or NaN.
        TypeError: ``value`` cannot be compared with 0 (the standard pool's error).
    """
    if value <= 0:  # type: ignore[operator]  # the standard pool's check, and its TypeError
        raise ValueError("max_workers must be greater than 0")
    if type(value) is int:
        return value
    try:
        rounded: int = math.ceil(value)  # type: ignore[call-overload]  # TypeError if no number
    except (OverflowError, ValueError):
        raise ValueError(f"max_workers must be a finite number, got {describe(value)}") from None
    return rounded


def check_key(key: object) -> Hashable:
    """Return a view's ``key`` if it is hashable (None: no key)."""
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"key must be hashable, got {describe(key)}") from None
    return key


def check_clock(clock: object) -> Callable[[], float]:
    """Return ``clock`` if it can be called."""
    if not callable(clock):
        raise TypeError(f"clock must be callable, got {describe(clock)}")
    return clock


def check_flag(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (1 and None are not)."""
    if type(value) is not bool:
        raise TypeError(f"{name} must be a bool, got {describe(value)}")
    return value


#: What ``submit`` does when ``max_queued`` tasks wait.
WhenFull = Literal["block", "raise", "evict"]
WHEN_FULL: tuple[WhenFull, ...] = get_args(WhenFull)


def check_when_full(when_full: object) -> WhenFull:
    """Return ``when_full`` if it is one of ``WHEN_FULL``."""
    for choice in WHEN_FULL:
        if when_full == choice:
            return choice
    raise ValueError(f"when_full must be 'block', 'raise' or 'evict', got {describe(when_full)}")


def strict_rank(priority: Number) -> Number:
    """The rank of an entry under strict priority: smaller ranks run first."""
    return -priority


def check_aged_priority(priority: Number) -> None:
    """Refuse a priority that ageing cannot turn into a rank (an int beyond float range)."""
    try:
        float(priority)
    except OverflowError:
        size = int(priority).bit_length()
        raise ValueError(
            f"priority must fit in a float when ageing is set, got an int of {size} bits"
        ) from None


def aged_rank(priority: Number, queued_at: float, ageing: float) -> float:
    """The rank of an entry under ageing: smaller ranks run first.

    Waiting ``ageing`` seconds raises a task's effective priority by one. The rate is the same
    for every task, so ``queued_at - priority * ageing`` stays constant while the task waits
    and the heap never needs re-sorting: a task outranks any task of priority up to ``gap``
    higher that arrives more than ``gap * ageing`` seconds after it.
    """
    return queued_at - priority * ageing


def rank_of(priority: Number, queued_at: float, ageing: Optional[float]) -> Number:
    """The rank of an entry queued at ``queued_at`` (read only under ageing)."""
    if ageing is None:
        return strict_rank(priority)
    return aged_rank(priority, queued_at, ageing)


def check_task_options(
    priority: object, timeout: object, ageing: Optional[float]
) -> tuple[Number, Optional[float]]:
    """Check a task's ``priority`` and queue ``timeout`` for a pool with this ``ageing``.

    The one check of ``submit``, ``options``, ``map`` and ``set_priority``: every bad value is
    refused here, with an exact message, before anything is queued.
    """
    if timeout is None and ageing is None and type(priority) in PLAIN_PRIORITIES:
        return priority, None  # type: ignore[return-value]  # the common case, at once
    level = check_priority(priority)
    if ageing is not None:
        check_aged_priority(level)
    return level, check_timeout(timeout)


def is_due(deadline: Optional[float], now: float) -> bool:
    """True when a task with this deadline may no longer start at clock reading ``now``."""
    return deadline is not None and now >= deadline


def check_bound(name: str, value: object) -> Union[int, float]:
    """Return a bound of units (the asyncio scheduler's ``concurrency``, a limiter's
    ``capacity``): a positive int, or ``math.inf`` for no bound."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive integer or math.inf, got {describe(value)}")
    if value == math.inf:
        return math.inf
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer or math.inf, got {describe(value)}")
    return int(value)


def check_async_when_full(value: object) -> WhenFull:
    """``when_full`` for async code: ``"raise"`` (or its synonym ``"reject"``) or ``"evict"``.

    ``"block"`` is refused: a submit never blocks the loop, and a caller that awaits
    ``run()`` is already paced.
    """
    if value == "raise" or value == "reject":
        return "raise"
    if value == "evict":
        return "evict"
    why = ": a submit never blocks the event loop" if value == "block" else ""
    raise ValueError(f"when_full must be 'raise', 'reject' or 'evict', got {describe(value)}{why}")
