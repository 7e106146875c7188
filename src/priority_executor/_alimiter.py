"""``AsyncPriorityLimiter``: a priority semaphore for coroutines, on the package's one policy.

The policy is ``_grants.Grants`` over a weighed ``Core``; this module owns the waiting, on
one event loop, as asyncio's own primitives do: nothing here is thread-safe. A waiting
request's waiter holds a loop Future, which its grant or its expiry settles; the limiter's
one timer (``loop.call_later``) wakes by the next deadline or rate slot
(``core.next_deadline()``), expires what is due and grants what the clock lets in.

The limiter is bound to the loop of its first ``acquire`` while anything waits or is held
on it; once idle, the next ``acquire`` may bind it to another loop (a new ``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Optional, Union

from ._grants import Grants, LimiterSettings, LimiterStatistics, Request
from ._policy import Number, Priority, check_ageing, check_clock
from ._rates import RateLimit
from ._timer import CLOCK_RETRY, MAX_SLEEP, log_clock_failure

LOGGER = logging.getLogger("priority_executor")

#: A waiter's states: waiting, granted, expired (its timeout passed) or gone (it gave up).
WAITING, GRANTED, EXPIRED, GONE = 0, 1, 2, 3


class _Waiter:
    """One ``acquire`` that waits: its state, and the Future its Task awaits."""

    __slots__ = ("future", "state")

    def __init__(self) -> None:
        self.state = WAITING
        self.future: Optional[asyncio.Future[None]] = None

    def done(self) -> bool:
        return self.state != WAITING


class AsyncAcquisition:
    """What ``AsyncPriorityLimiter.acquire`` returns: ``async with`` waits for a grant and
    holds it for the block, then gives its units back, whatever the block raised."""

    __slots__ = ("_cost", "_key", "_limiter", "_priority", "_request", "_timeout")

    def __init__(
        self,
        limiter: AsyncPriorityLimiter,
        priority: Number,
        timeout: Optional[float],
        key: Hashable,
        cost: int,
    ) -> None:
        self._limiter = limiter
        self._priority = priority
        self._timeout = timeout
        self._key = key
        self._cost = cost
        self._request: Optional[Request] = None

    async def __aenter__(self) -> None:
        if self._request is not None:
            raise RuntimeError("this acquisition is held already: call acquire() again")
        self._request = await self._limiter._acquire(
            self._priority, self._timeout, self._key, self._cost
        )

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        request, self._request = self._request, None
        assert request is not None, "__aexit__ without __aenter__"
        self._limiter._release(request, exc_type is not None)


class AsyncPriorityLimiter(LimiterSettings):
    """At most ``capacity`` units held at once by coroutines, granted to the most urgent first.

    ::

        limiter = AsyncPriorityLimiter(8, key_limit=2)
        async with limiter.acquire(priority=Priority.HIGH, timeout=2.0, key=host):
            response = await client.get(url)

    An ``asyncio.Semaphore`` with priorities: waiting Tasks are granted highest priority
    first, in arrival order among equals, and a grant is strict: no request passes a better
    one whose ``cost`` does not fit yet, unless that one's key or rate limit holds it back.
    A Task cancelled while it waits leaves the queue at once; a grant made as it is
    cancelled passes to the next waiter.

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

    def __init__(
        self,
        capacity: Union[int, float],
        *,
        clock: Optional[Callable[[], float]] = None,
        ageing: Optional[float] = None,
        rate_limit: Union[RateLimit, tuple[int, float], None] = None,
        key_limit: Optional[int] = None,
        key_rate_limit: Union[RateLimit, tuple[int, float], None] = None,
    ) -> None:
        self._grants = Grants(
            capacity,
            clock=time.monotonic if clock is None else check_clock(clock),
            ageing=check_ageing(ageing),
            rate_limit=rate_limit,
            key_limit=key_limit,
            key_rate_limit=key_rate_limit,
        )
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._target: Optional[float] = None  # when the timer fires, on the limiter's clock

    def acquire(
        self,
        *,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        key: Hashable = None,
        cost: int = 1,
    ) -> AsyncAcquisition:
        """An async context manager that waits for ``cost`` units on entry and gives them
        back on exit.

        Args:
            priority: a real number; higher is granted first. Default ``Priority.NORMAL``.
            timeout: the seconds it may wait, on the limiter's clock (None: for ever). Past
                it, ``async with`` raises ``TimeoutError`` and holds nothing. ``0``: only if
                it can be granted now.
            key: the key of ``key_limit`` and ``key_rate_limit`` (hashable; None: no key).
            cost: the units it holds: a positive int, at most ``capacity`` (and ``key_limit``
                with a key).

        Raises:
            TypeError, ValueError: a bad argument, here rather than on entry.
        """
        level, seconds, key, cost = self._grants.check(priority, timeout, key, cost)
        return AsyncAcquisition(self, level, seconds, key, cost)

    # -- waiting -------------------------------------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The running loop, to which the limiter is bound while anything waits or is held."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            core = self._grants.core
            if self._loop is not None and (core.queue or core.running):
                raise RuntimeError(
                    f"{type(self).__name__} is bound to another event loop, where requests "
                    "wait or hold units: use it from one loop at a time"
                )
            if self._timer is not None:
                self._timer.cancel()
                self._timer = self._target = None
            self._loop = loop
        return loop

    async def _acquire(
        self, priority: Number, timeout: Optional[float], key: Hashable, cost: int
    ) -> Request:
        loop = self._bind()
        waiter = _Waiter()
        request = Request(waiter, priority, key, cost)
        granted: list[Request] = []
        expired: list[Request] = []
        waits = self._grants.request(request, timeout, granted, expired)
        if granted or expired:
            self._settle(granted, expired)
        if not waits:
            if waiter.state == GRANTED:
                return request
            raise TimeoutError("acquire timed out: no units free at once (timeout=0)")
        waiter.future = future = loop.create_future()
        self._tend()
        try:
            await future
        except BaseException:
            if waiter.state == WAITING or waiter.state == GRANTED:
                waiter.state = GONE
                granted, expired = [], []
                self._grants.abandon(request, granted, expired)
                self._settle(granted, expired)
            raise
        if waiter.state == EXPIRED:
            raise TimeoutError("acquire timed out: its timeout passed before a grant")
        return request

    def _release(self, request: Request, failed: bool) -> None:
        granted: list[Request] = []
        expired: list[Request] = []
        self._grants.release(request, "failed" if failed else "completed", granted, expired)
        if granted or expired:
            self._settle(granted, expired)

    def _settle(self, granted: list[Request], expired: list[Request]) -> None:
        """Wake the waiters the last calls granted or expired, then tend the timer."""
        for request in granted:
            waiter: _Waiter = request.future  # type: ignore[assignment]
            waiter.state = GRANTED
            future = waiter.future
            if future is not None and not future.done():
                future.set_result(None)
        for request in expired:
            waiter = request.future  # type: ignore[assignment]
            waiter.state = EXPIRED
            future = waiter.future
            if future is not None and not future.done():
                future.set_result(None)
        self._tend()
        errors = self._grants.core.clock_errors
        if errors:
            for error in errors:
                LOGGER.critical("The limiter's clock raised", exc_info=error)
            errors.clear()

    def _tend(self) -> None:
        """Have the timer fire by the next deadline or rate slot, if it would fire later."""
        core = self._grants.core
        core.take_todo()  # its TIMER bit is what next_deadline() now says
        wake = core.next_deadline()
        if wake is None or (self._target is not None and self._target <= wake):
            return
        loop = self._loop
        assert loop is not None
        now = core.read_clock()
        if isinstance(now, Exception):
            log_clock_failure(now)
            delay = CLOCK_RETRY
        else:
            delay = min(max(0.0, wake - now), MAX_SLEEP)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(delay, self._on_timer)
        self._target = wake

    def _on_timer(self) -> None:
        """The timer's turn: expire what is due, grant what the clock lets in, re-arm."""
        self._timer = self._target = None
        core = self._grants.core
        now = core.read_clock()
        if isinstance(now, Exception):
            log_clock_failure(now)
            if core.queue and self._loop is not None:
                self._timer = self._loop.call_later(CLOCK_RETRY, self._on_timer)
            return
        granted: list[Request] = []
        expired: list[Request] = []
        self._grants.expire(now, granted, expired)
        self._settle(granted, expired)

    def _change(self, change: Callable[[], None]) -> None:
        change()
        granted: list[Request] = []
        expired: list[Request] = []
        self._grants.grant(granted, expired)
        if granted or expired or self._loop is not None:
            self._settle(granted, expired)

    # -- what it reports -----------------------------------------------------------------------

    def statistics(self) -> LimiterStatistics:
        """A snapshot of the limiter's counts, waits and holds."""
        return self._grants.statistics()

    def _check_invariants(self) -> None:
        """Assert the limiter's invariants in O(n) (for tests)."""
        self._grants.check_invariants()
        for request in self._grants.core.queue.entries.values():
            waiter: _Waiter = request.future  # type: ignore[assignment]
            assert waiter.future is not None, "a waiting request has no Future to wake"
