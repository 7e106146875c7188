"""Start rates: :class:`RateLimit`, its argument check, and the sliding window that enforces it.

A rate limit of ``starts`` per ``per`` seconds lets a task start at time ``t`` only if fewer
than ``starts`` tasks started in the half-open window ``(t - per, t]`` of the pool's clock. A
:class:`Window` keeps the times of the starts inside the window, oldest first (at most
``starts`` of them, but after a limit is lowered): a start is allowed at ``t`` iff fewer than
``starts`` are kept or the ``starts``-th latest is at least ``per`` before ``t``, so the next
slot opens at that start plus ``per``. That is a true sliding window: no bucket edge lets two
bursts through back to back. A new limit keeps the starts kept under the old one: all of them
if only ``starts`` changes, the latest ``per`` seconds of them if ``per`` grows. Plain data, no
lock: the pool's lock guards it.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections import deque
from typing import NamedTuple, Optional, Union

from ._policy import describe, is_due, to_float


class RateLimit(NamedTuple):
    """At most ``starts`` task starts in any ``per`` seconds (a sliding window)."""

    #: How many starts the window allows, a positive int.
    starts: int
    #: The window's length, in seconds on the pool's clock, positive and finite.
    per: float


#: What a ``rate_limit`` or ``key_rate_limit`` argument may be: a :class:`RateLimit`, or the
#: plain ``(starts, per)`` pair it is made from (None, beside it, for no limit).
RateLimitLike = Union[RateLimit, tuple[int, float]]


def check_rate_limit(name: str, value: object) -> Optional[RateLimit]:
    """Return ``value`` as a :class:`RateLimit`, or None for no limit.

    Raises:
        TypeError: ``value`` is not a pair, or ``starts`` is not an int or ``per`` not a
            real number.
        ValueError: ``starts`` is below 1, or ``per`` is not a positive finite number
            (also a number beyond float range, such as ``10**400``).
    """
    if value is None:
        return None
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError(f"{name} must be a RateLimit(starts, per) or None, got {describe(value)}")
    starts, per = value
    if isinstance(starts, bool) or not isinstance(starts, int):
        raise TypeError(f"{name} starts must be a positive integer, got {describe(starts)}")
    if starts < 1:
        raise ValueError(f"{name} starts must be a positive integer, got {describe(starts)}")
    if isinstance(per, bool) or not isinstance(per, numbers.Real):
        raise TypeError(f"{name} per must be a positive number of seconds, got {describe(per)}")
    seconds = math.nan if per <= 0 else to_float(f"{name} per", per)
    if not 0.0 < seconds < math.inf:
        raise ValueError(f"{name} per must be a positive number of seconds, got {describe(per)}")
    return RateLimit(int(starts), seconds)


class Window:
    """The last starts under one :class:`RateLimit`; see the module docstring."""

    __slots__ = ("limit", "times")

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self.times: deque[float] = deque()

    def next_slot(self) -> Optional[float]:
        """When the next start is allowed: None if one is allowed at any time from now."""
        starts = self.limit.starts
        if len(self.times) < starts:
            return None
        return self.times[-starts] + self.limit.per

    def closed_until(self, now: float) -> Optional[float]:
        """When the next start is allowed, if none is at ``now``; None if one is."""
        slot = self.next_slot()
        return slot if slot is not None and not is_due(slot, now) else None

    def record(self, now: float) -> Optional[float]:
        """Count a start at ``now``; return :meth:`closed_until` after it."""
        self.times.append(now)
        self._forget(now)
        return self.closed_until(now)

    def unrecord(self, at: float) -> None:
        """Take back a start counted at ``at``, if the window still holds it."""
        with contextlib.suppress(ValueError):  # out of the window already
            self.times.remove(at)

    def free(self, now: float) -> int:
        """How many starts the window allows at ``now``."""
        self._forget(now)
        return max(0, self.limit.starts - len(self.times))

    def _forget(self, now: float) -> None:
        """Forget the starts out of the window at ``now``: they no longer count."""
        times, per = self.times, self.limit.per
        while times and times[0] + per <= now:
            times.popleft()

    def quiet_from(self) -> float:
        """When no start counted here is inside the window any more (-inf if none is)."""
        return self.times[-1] + self.limit.per if self.times else -math.inf


def rewindow(window: Optional[Window], limit: Optional[RateLimit]) -> Optional[Window]:
    """``window`` under a new ``limit``, keeping the starts it counts; None for no limit."""
    if limit is None:
        return None
    new = Window(limit)
    if window is not None:
        new.times.extend(window.times)
    return new
