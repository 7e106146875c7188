"""``PriorityLimiter``: a priority semaphore for threads, on the package's one policy.

The policy (order, ageing, deadlines, limits, recording) is ``_grants.Grants`` over a weighed
``Core``; this module owns the waiting. The rules of its lock, ``_lock``:

- It guards the grants (and through them the core) and ``_keeper``/``_target``; it is held
  only for bookkeeping: no user code runs under it but the clock (as in the pools), nothing
  blocks under it, and what the clock raised is logged once it is released.
- A waiting thread parks on its own lock (``_Waiter.park``, made and held under ``_lock``
  once it has to wait), which only a holder of ``_lock`` releases (:meth:`_Waiter.wake`): a
  grant, an expiry, or a call to keep time. So "released" means "woken, not yet back", and
  a wake is never lost.
- An interrupt (a signal handler's exception) while it waits, in its keeper's turn, or at
  the start of a release, loses nothing: what a call granted is woken in a ``finally``, and
  a leave or a release cut short is made again (``surely``), doing nothing twice.
- One waiting thread at most, the *keeper*, parks with a timeout: until the next deadline
  or rate slot (``core.next_deadline()``, noted in ``_target``). On waking it expires what
  is due and grants what the clock lets in (:meth:`_keep_time_locked`). When it leaves, it
  hands the role to another waiter while anything still waits for the clock; a change that
  brings the next wake-up forward wakes it (:meth:`_tend_locked`). No thread polls, and
  the limiter has no thread of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Optional

from . import _limiter_base
from ._grants import LimiterStatistics, Request
from ._limiter_base import LimiterBase, log_clock_errors, surely
from ._timer import CLOCK_RETRY, MAX_SLEEP

#: A waiter's states: waiting, granted, expired (its timeout passed, or it gave up),
#: released (its block is done).
WAITING, GRANTED, EXPIRED, RELEASED = 0, 1, 2, 3


class _Waiter:
    """One thread in ``acquire``: parked on its own lock until granted or expired."""

    __slots__ = ("park", "state")

    def __init__(self) -> None:
        self.state = WAITING
        self.park: Optional[threading.Lock] = None  # made, held, when it has to wait

    def done(self) -> bool:
        return self.state != WAITING

    def wake(self) -> None:
        """Wake it, once; called under the limiter's lock."""
        park = self.park
        if park is not None and park.locked():
            park.release()


class Acquisition(_limiter_base.Acquisition["PriorityLimiter"]):
    """What ``PriorityLimiter.acquire`` returns: ``with`` waits for a grant and holds it for
    the block, then gives its units back, whatever the block raised."""

    __slots__ = ()

    def __enter__(self) -> None:
        request = self._begin(_Waiter())
        try:
            self._limiter._acquire(request, self._timeout)
        except BaseException:
            self._request = None
            surely(self._limiter._leave, request)
            raise

    def __exit__(self, *exc_info: object) -> None:
        surely(self._limiter._release, self._held(), exc_info[0] is not None)


class PriorityLimiter(LimiterBase[Acquisition]):
    """At most ``capacity`` units held at once by threads, granted to the most urgent first.

    ::

        limiter = PriorityLimiter(4)
        with limiter.acquire(priority=Priority.HIGH, timeout=2.0):
            call_api()

    A ``threading.Semaphore`` with priorities: waiting threads are granted highest priority
    first, in arrival order among equals, and a grant is strict: no request passes a better
    one whose ``cost`` does not fit yet, unless that one's key or rate limit holds it back.
    Safe to use from any thread.

    Args:
        capacity: the units held at most at once: a positive int, or ``math.inf``.
            Settable at run time: a higher value grants at once, in order; a lower one takes
            nothing back.
        clock: the clock of timeouts, ageing and rate limits, seconds as a float; default
            None: ``time.monotonic``.
        ageing: seconds of waiting that raise a request's priority by one (None: never), as
            on the pool.
        rate_limit: at most ``RateLimit(grants, per)`` grants in any ``per`` seconds (None:
            no limit).
        key_limit: at most this many units held at once per ``key`` (None: no limit).
        key_rate_limit: ``rate_limit`` for each key apart (None: no limit).

    Raises:
        TypeError, ValueError: a bad argument, with the pool's messages.
    """

    _acquisition = Acquisition

    def _own(self) -> None:
        self._lock = threading.Lock()
        self._keeper: Optional[_Waiter] = None  # the waiter that keeps time, if any
        self._target: Optional[float] = None  # when the keeper wakes (None: when woken)

    # -- waiting -------------------------------------------------------------------------------

    def _acquire(self, request: Request, timeout: Optional[float]) -> None:
        """Return once ``request`` is granted; raise TimeoutError if its timeout passes."""
        waiter: _Waiter = request.future  # type: ignore[assignment]
        grants = self._grants
        granted: list[Request] = []
        expired: list[Request] = []
        errors: Sequence[Exception] = ()
        with self._lock:
            if grants.at_once(request):
                waiter.state = GRANTED
                return
            try:
                waits = grants.request(request, timeout, granted, expired)
                if waits:
                    waiter.park = park = threading.Lock()
                    park.acquire()
            finally:
                errors = self._settle_locked(granted, expired)
        log_clock_errors(errors)
        if not waits:
            if waiter.state == GRANTED:
                return
            waiter.state = EXPIRED
            raise TimeoutError("acquire timed out: no units free at once (timeout=0)")
        lock, core = self._lock, self._grants.core
        while True:
            with lock:
                if waiter.state != WAITING:
                    break
                timeout = -1.0
                if self._keeper is None and core.next_deadline() is not None:
                    self._keeper = waiter
                if self._keeper is waiter:
                    timeout, errors = self._keep_time_locked()
                    if waiter.state != WAITING:
                        break
            log_clock_errors(errors)
            errors = ()
            park.acquire(timeout=timeout)
        log_clock_errors(errors)
        if waiter.state == EXPIRED:
            raise TimeoutError("acquire timed out: its timeout passed before a grant")

    def _leave(self, request: Request) -> None:
        """``acquire`` raised (an interrupt, a timeout, a failing clock): a queued request
        leaves, a granted one gives its units back; an expired one holds nothing. Called
        again if an interrupt cuts it short, it does nothing twice."""
        waiter: _Waiter = request.future  # type: ignore[assignment]
        granted: list[Request] = []
        expired: list[Request] = []
        errors: Sequence[Exception] = ()
        with self._lock:
            state, waiter.state = waiter.state, EXPIRED  # settled: it takes no grant any more
            if state == GRANTED or request.queued:
                try:
                    self._grants.abandon(request, granted, expired)
                finally:
                    errors = self._settle_locked(granted, expired)
        log_clock_errors(errors)

    def _release(self, request: Request, failed: bool) -> None:
        """The block is done: give the units back, and grant what they let in. Called again
        if an interrupt cuts it short, it does nothing twice."""
        waiter: _Waiter = request.future  # type: ignore[assignment]
        granted: list[Request] = []
        expired: list[Request] = []
        errors: Sequence[Exception] = ()
        grants = self._grants
        with self._lock:
            if waiter.state != GRANTED:
                return  # released already
            waiter.state = RELEASED
            try:
                grants.release(request, "failed" if failed else "completed", granted, expired)
            finally:
                if granted or expired or grants.core.todo or grants.core.clock_errors:
                    errors = self._settle_locked(granted, expired)
        log_clock_errors(errors)
        if self._observers:
            self._observe(request)

    def _change(self, change: Callable[[], None]) -> None:
        granted: list[Request] = []
        expired: list[Request] = []
        with self._lock:
            try:
                change()
                self._grants.grant(granted, expired)
            finally:
                errors = self._settle_locked(granted, expired)
        log_clock_errors(errors)

    def _keep_time_locked(self) -> tuple[float, Sequence[Exception]]:
        """The keeper's turn: expire what is due, grant what that and the clock let in; the
        seconds until it must look again (-1: until woken), and clock errors to log."""
        core = self._grants.core
        now = core.read_clock()
        if isinstance(now, Exception):
            self._target = None
            return CLOCK_RETRY, [now]
        granted: list[Request] = []
        expired: list[Request] = []
        try:
            self._grants.expire(now, granted, expired)
            self._target = core.next_deadline()  # first: settling wakes no keeper that knows it
        finally:
            errors = self._settle_locked(granted, expired)
        if self._target is None:
            return -1.0, errors
        return min(max(0.0, self._target - now), MAX_SLEEP), errors

    def _settle_locked(self, granted: list[Request], expired: list[Request]) -> list[Exception]:
        """Wake the waiters the last calls granted or expired, and tend the keeper; the clock
        errors to log once the lock is free."""
        for requests, state in ((granted, GRANTED), (expired, EXPIRED)):
            for request in requests:
                waiter: _Waiter = request.future  # type: ignore[assignment]
                waiter.state = state
                waiter.wake()
        if self._keeper is not None and self._keeper.state != WAITING:
            self._keeper = self._target = None  # it leaves: another takes its role
        self._tend_locked()
        return self._grants.core.take_clock_errors()

    def _tend_locked(self) -> None:
        """Make sure a waiter wakes by the next deadline or rate slot: wake the keeper if it
        must wake sooner than it knows, or make one if there is none."""
        core = self._grants.core
        core.take_todo()  # its TIMER bit is what next_deadline() now says
        wake = core.next_deadline()
        if wake is None:
            return
        keeper = self._keeper
        if keeper is None:
            entries = core.queue.entries
            if not entries:
                return
            keeper = next(iter(entries))  # type: ignore[assignment]  # a waiter, by construction
            self._keeper = keeper
        elif self._target is not None and self._target <= wake:
            return  # it wakes in time, and then reads the queue
        self._target = None  # it reads the clock and sets it
        assert keeper is not None
        keeper.wake()

    # -- what it reports -----------------------------------------------------------------------

    def statistics(self) -> LimiterStatistics:
        """A consistent snapshot of the limiter's counts, waits and holds."""
        with self._lock:
            return self._grants.statistics()

    def _check_invariants(self) -> None:
        """Assert the limiter's invariants in O(n), under its lock (for tests)."""
        with self._lock:
            self._grants.check_invariants()
            keeper = self._keeper
            if keeper is not None:
                assert keeper.state == WAITING, "the keeper is not waiting"
