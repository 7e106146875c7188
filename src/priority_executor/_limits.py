"""Rate and key limits: which queued tasks may start now, decided where a task leaves the queue.

:class:`Limits` holds a pool's ``rate_limit`` (one :class:`~._rates.Window` of starts for the
whole pool), ``key_limit`` (at most that many tasks of one key running at once) and
``key_rate_limit`` (a window per key), and the state of each key. ``Admission.take_locked``, the
one place a task leaves the queue to start, asks it first (:meth:`Limits.release_locked`,
``rate_until``) and tells it after (:meth:`Limits.started_locked`); a runner's report of a
finished task reaches it through ``Admission.finished_locked`` (:meth:`Limits.finished_locked`).
A key at one of its limits is *closed* in the queue (``_keyed.KeyedQueue.close``), which keeps
its tasks in place; it is opened again the moment it has room. So choosing the next task never
looks at a held-back task.

Time. Starts are counted on the pool's clock, read once per take while a rate limit is set.
A window that is full says when its next slot opens (``rate_until`` for the pool, ``until``
for a key, listed in ``wakes``); the pool's timer sleeps until the earliest of those and its
deadlines, then calls :meth:`release_locked`, which opens what the clock has reached. A
clock that raises holds every start back (``rate_until`` = -inf) until the timer reads it
again: a start the pool cannot place in time could break the limit.

Per-key state (:class:`KeyState`) lives while the key has a task running or a start inside its
rate window; the queue's lane of a key lives while it has tasks queued. Neither outlives its
use, so memory does not grow with the number of keys ever seen. A key that falls idle with
starts inside its window is listed in ``quiet`` and dropped once the clock passes them.

Plain data, no lock, no thread: the pool's lock guards every call, and nothing here runs
user code.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Hashable, Iterator
from typing import Any, Generic, Optional, Protocol, TypeVar, Union, overload

from ._policy import check_limit, is_due
from ._rates import RateLimit, RateLimitLike, Window, check_rate_limit, rewindow

T = TypeVar("T")  # what it reads
S = TypeVar("S")  # what it may be set to


class LimitSetting(Generic[T, S]):
    """A limit (``rate_limit``, ``key_limit``, ``key_rate_limit``, by the attribute's name)
    as a settable attribute of a scheduler: read from ``owner._limits()``, checked, then set
    by ``owner._set_limit(name, value)``, which each owner serialises its own way.

    ``RateSetting("doc")`` or ``CountSetting("doc")`` in a class body: the docstring is
    the owner's, since what a limit counts (starts, grants, units) is the owner's word.
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> LimitSetting[T, S]: ...

    @overload
    def __get__(self, obj: object, owner: Optional[type] = None) -> T: ...

    def __get__(self, obj: object, owner: Optional[type] = None) -> Union[T, LimitSetting[T, S]]:
        if obj is None:
            return self
        return getattr(obj._limits(), self.name)  # type: ignore[attr-defined,no-any-return]

    def __set__(self, obj: Any, value: S) -> None:
        name = self.name
        checked = check_limit(name, value) if name == "key_limit" else check_rate_limit(name, value)
        obj._set_limit(name, checked)


#: ``rate_limit`` and ``key_rate_limit``: a :class:`RateLimit`, a ``(starts, per)`` pair, None.
RateSetting = LimitSetting[Optional[RateLimit], Optional[RateLimitLike]]
#: ``key_limit``: a positive int, or None.
CountSetting = LimitSetting[Optional[int], Optional[int]]


class LimitedQueue(Protocol):
    """The queue as the limits see it: it holds back, and lets go, the tasks of a key."""

    def close(self, key: Hashable) -> None: ...

    def open(self, key: Hashable) -> bool: ...


class KeyedLimitedQueue(LimitedQueue, Protocol):
    """A queue that says which keys it holds closed (``_keyed.KeyedQueue``)."""

    closed: set[Hashable]


class KeyState:
    """What one key's limits need to know: its running tasks and its recent starts."""

    __slots__ = ("running", "short", "until", "window")

    def __init__(self, window: Optional[Window]) -> None:
        self.running = 0  # units taken to start and not yet reported finished (1 per task)
        # Its best queued request wants more units than key_limit leaves it (a limiter's requests
        # have a cost): held back until a unit of it comes back, that request leaves, or a
        # better one of it queues, or key_limit changes (see relieve_locked).
        self.short = False
        self.window = window  # its starts, under key_rate_limit
        self.until: Optional[float] = None  # its window is full until then (listed in wakes)


class Limits:
    """The rate and key limits of one pool; see the module docstring."""

    @classmethod
    def checked(cls, rate_limit: object, key_limit: object, key_rate_limit: object) -> Limits:
        """The limits of a new scheduler, from its constructor's arguments, checked."""
        return cls(
            check_rate_limit("rate_limit", rate_limit),
            check_limit("key_limit", key_limit),
            check_rate_limit("key_rate_limit", key_rate_limit),
        )

    def __init__(
        self,
        rate_limit: Optional[RateLimit],
        key_limit: Optional[int],
        key_rate_limit: Optional[RateLimit],
    ) -> None:
        self.rate_limit: Optional[RateLimit] = None
        self.key_limit = key_limit
        self.key_rate_limit = key_rate_limit
        self.window: Optional[Window] = None  # the pool's starts, under rate_limit
        self.rate_until: Optional[float] = None  # the pool's window is full until then
        self.keys: dict[Hashable, KeyState] = {}
        self.wakes: list[tuple[float, int, Hashable]] = []  # (until, seq, key), stale ones too
        self.quiet: list[tuple[float, int, Hashable]] = []  # idle keys, by end of window
        self._seq = itertools.count().__next__
        self.set_rate_limit_locked(rate_limit, -math.inf)
        self._flags()

    def _flags(self) -> None:
        #: A rate limit is set: each take reads the clock.
        self.timed = self.rate_limit is not None or self.key_rate_limit is not None
        #: A key limit is set: the queue keeps a lane per key (``_keyed.KeyedQueue``).
        self.keyed = self.key_limit is not None or self.key_rate_limit is not None
        #: Any limit is set: a take goes through the limits.
        self.any_set = self.timed or self.keyed

    # -- deciding --------------------------------------------------------------------------

    def saturated(self, state: KeyState) -> bool:
        """The key of ``state`` may start no task now: the one test of a key's limits."""
        return (
            state.until is not None
            or state.short
            or (self.key_limit is not None and state.running >= self.key_limit)
        )

    def saturated_keys(self) -> Iterator[Hashable]:
        return (key for key, state in self.keys.items() if self.saturated(state))

    def next_wake(self) -> Optional[float]:
        """When the clock next opens something: the pool's next slot, or a key's; or None."""
        wakes = self.wakes
        while wakes and self._stale(wakes[0]):
            heapq.heappop(wakes)
        times = [t for t in (self.rate_until, wakes[0][0] if wakes else None) if t is not None]
        return min(times) if times else None

    def _stale(self, wake: tuple[float, int, Hashable]) -> bool:
        state = self.keys.get(wake[2])
        return state is None or state.until != wake[0]

    # -- what the take and the timer report --------------------------------------------------

    def release_locked(self, now: float, queue: LimitedQueue) -> bool:
        """Open what the clock has reached at ``now``; True if a start may now be allowed."""
        opened = False
        if self.rate_until is not None and is_due(self.rate_until, now):
            self.rate_until = None
            opened = True
        wakes = self.wakes
        while wakes and is_due(wakes[0][0], now):
            wake = heapq.heappop(wakes)
            if self._stale(wake):
                continue
            state = self.keys[wake[2]]
            state.until = None
            if not self.saturated(state):
                opened = queue.open(wake[2]) or opened
        quiet = self.quiet
        while quiet and is_due(quiet[0][0], now):
            key = heapq.heappop(quiet)[2]
            idle = self.keys.get(key)
            if idle is not None and self._idle(idle, now):
                del self.keys[key]
        return opened

    def allowed_locked(self, waiting: int, now: float) -> int:
        """Of ``waiting`` tasks that no key holds back, how many the pool's window lets start."""
        return waiting if self.window is None else min(waiting, self.window.free(now))

    def hold_locked(self) -> None:
        """Hold every start back until the timer can read the clock (which just raised)."""
        self.rate_until = -math.inf

    def fits(self, key: Hashable, cost: int) -> bool:
        """A task of ``key`` that takes ``cost`` units stays within ``key_limit``."""
        if self.key_limit is None:
            return True
        state = self.keys.get(key)
        return (0 if state is None else state.running) + cost <= self.key_limit

    def short_locked(self, key: Hashable, queue: LimitedQueue) -> None:
        """The best queued request of ``key`` does not fit its ``key_limit``: hold the key back."""
        state = self.keys.get(key)
        if state is None:
            state = self.keys[key] = self._new_state()
        state.short = True
        queue.close(key)

    def relieve_locked(self, key: Hashable, queue: LimitedQueue) -> None:
        """A request of ``key`` left its queue, or a new one queued: if the key was held back
        for want of units, let the next take look at its best request again."""
        state = self.keys.get(key)
        if state is None or not state.short:
            return
        state.short = False
        if not self.saturated(state):
            queue.open(key)
        if not state.running:  # it was kept for its mark only
            self._rest_locked(key, state)

    def started_locked(self, key: Hashable, now: float, queue: LimitedQueue, cost: int = 1) -> bool:
        """A task of ``key`` taking ``cost`` units started at ``now``; True if a window filled
        (wake the timer)."""
        filled = False
        if self.window is not None:
            until = self.window.record(now)
            if until is not None:
                self.rate_until = until
                filled = True
        if key is None:
            return filled
        state = self.keys.get(key)
        if state is None:
            state = self.keys[key] = self._new_state()
        state.running += cost
        if state.window is not None:
            filled = self._fill_locked(key, state, state.window.record(now)) or filled
        if self.saturated(state):
            queue.close(key)
        return filled

    def unstarted_locked(self, key: Hashable, at: float, now: float, queue: LimitedQueue) -> bool:
        """A start of ``key`` counted at ``at`` is taken back (the task will not run): its
        slots in the windows open again at ``now``; True if that opened a start."""
        opened = False
        if self.window is not None:
            self.window.unrecord(at)
            if self.rate_until is not None and self.rate_until != -math.inf:
                self.rate_until = self.window.closed_until(now)
                opened = self.rate_until is None
        state = self.keys.get(key) if key is not None else None
        if state is not None and state.window is not None:
            was = self.saturated(state)
            state.window.unrecord(at)
            self._fill_locked(key, state, state.window.closed_until(now))
            if was and not self.saturated(state):
                opened = queue.open(key) or opened
        return opened

    def _fill_locked(self, key: Hashable, state: KeyState, until: Optional[float]) -> bool:
        """Set the key's ``until`` (its window is full until then, or None); True if full."""
        state.until = until
        if until is None:
            return False
        heapq.heappush(self.wakes, (until, self._seq(), key))
        return True

    def finished_locked(self, key: Hashable, queue: LimitedQueue, cost: int = 1) -> None:
        """A task of ``key`` that took ``cost`` units finished: open it if that gave it room."""
        state = self.keys[key]
        was = self.saturated(state)
        state.running -= cost
        state.short = False
        if was and not self.saturated(state):
            queue.open(key)
        if not state.running:
            self._rest_locked(key, state)

    def _rest_locked(self, key: Hashable, state: KeyState) -> None:
        """``key`` runs nothing: drop its state, or list it ``quiet`` until its window empties."""
        if state.window is None or not state.window.times:
            del self.keys[key]
        else:
            heapq.heappush(self.quiet, (state.window.quiet_from(), self._seq(), key))

    def _idle(self, state: KeyState, now: float) -> bool:
        window = state.window
        return (
            not state.running
            and not state.short  # its mark keeps its key closed: relieve_locked drops it
            and (window is None or is_due(window.quiet_from(), now))
        )

    def _new_state(self) -> KeyState:
        limit = self.key_rate_limit
        return KeyState(None if limit is None else Window(limit))

    # -- changed while the pool runs ---------------------------------------------------------

    def set_rate_limit_locked(self, limit: Optional[RateLimit], now: float) -> None:
        """Set the pool's rate limit; the starts counted so far still count under a new one."""
        self.rate_limit = limit
        self.window = rewindow(self.window, limit)
        self.rate_until = None if self.window is None else self.window.closed_until(now)
        self._flags()

    def set_key_limit_locked(self, limit: Optional[int]) -> None:
        """Set ``key_limit``; the caller then recloses the queue's keys."""
        self.key_limit = limit
        self._flags()

    def set_key_rate_limit_locked(self, limit: Optional[RateLimit], now: float) -> None:
        """Set ``key_rate_limit``, keeping each key's starts; the caller then recloses keys."""
        self.key_rate_limit = limit
        for key, state in list(self.keys.items()):
            state.window = rewindow(state.window, limit)
            window = state.window
            self._fill_locked(key, state, None if window is None else window.closed_until(now))
            if self._idle(state, now):
                del self.keys[key]  # reclose_keys_locked opens it if it was closed
            elif not state.running and state.window is not None:
                heapq.heappush(self.quiet, (state.window.quiet_from(), self._seq(), key))
        self._flags()

    def reclose_keys_locked(self, queue: KeyedLimitedQueue) -> None:
        """Close the keys now at a limit and open the others; O(keys with state)."""
        for key in [key for key, state in self.keys.items() if state.short]:
            self.relieve_locked(key, queue)  # the next take looks at their requests again
        for key in [key for key in queue.closed if not self._holds(key)]:
            queue.open(key)
        for key in self.saturated_keys():
            queue.close(key)

    def _holds(self, key: Hashable) -> bool:
        state = self.keys.get(key)
        return state is not None and self.saturated(state)

    def check(self, closed: set[Hashable]) -> None:
        """Assert the limits' invariants against the queue's ``closed`` keys."""
        assert set(self.saturated_keys()) == closed, "a key is closed iff it is at a limit"
        for key, state in self.keys.items():
            assert state.running >= 0, f"key {key!r} finished more tasks than it started"
            assert (state.window is None) == (self.key_rate_limit is None), "key window"
            assert not state.short or self.key_limit is not None, "short of units, no key limit"
            if state.until is not None:
                assert (state.until, key) in {(w[0], w[2]) for w in self.wakes}, "no wake"
