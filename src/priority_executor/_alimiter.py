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
from collections.abc import Callable
from typing import Optional

from . import _limiter_base
from ._grants import LimiterStatistics, Request
from ._limiter_base import LimiterBase, log_clock_errors
from ._timer import CLOCK_RETRY, MAX_SLEEP

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


class AsyncAcquisition(_limiter_base.Acquisition["AsyncPriorityLimiter"]):
    """What ``AsyncPriorityLimiter.acquire`` returns: ``async with`` waits for a grant and
    holds it for the block, then gives its units back, whatever the block raised."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        limiter = self._limiter
        limiter._bind()  # first: refused, it leaves this acquisition unheld
        request = self._begin(_Waiter())
        if limiter._grants.at_once(request):
            request.future.state = GRANTED  # type: ignore[attr-defined]
            return
        try:
            await self._limiter._acquire(request, self._timeout)
        except BaseException:
            self._request = None
            self._limiter._leave(request)
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._limiter._release(self._held(), exc_info[0] is not None)


class AsyncPriorityLimiter(LimiterBase[AsyncAcquisition]):
    """At most ``capacity`` units held at once by coroutines, granted to the most urgent first.

    ::

        limiter = AsyncPriorityLimiter(8, key_limit=2)
        async with limiter.acquire(priority=Priority.HIGH, timeout=2.0, key=host):
            response = await client.get(url)

    An ``asyncio.Semaphore`` with priorities: waiting Tasks are granted highest priority
    first, in arrival order among equals, and a grant is strict, as on
    :class:`PriorityLimiter`, whose arguments it takes, with the same checks. A Task
    cancelled while it waits leaves the queue at once; a grant made as it is cancelled
    passes to the next waiter. Used from one event loop at a time, like asyncio's own
    primitives (see the module docstring of ``_alimiter``).
    """

    _acquisition = AsyncAcquisition

    def _own(self) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._target: Optional[float] = None  # when the timer fires, on the limiter's clock

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

    async def _acquire(self, request: Request, timeout: Optional[float]) -> None:
        """Return once ``request`` is granted; raise TimeoutError if its timeout passes."""
        loop = self._loop
        assert loop is not None, "bound by __aenter__"
        waiter: _Waiter = request.future  # type: ignore[assignment]
        granted: list[Request] = []
        expired: list[Request] = []
        waits = self._grants.request(request, timeout, granted, expired)
        if granted or expired:
            self._settle(granted, expired)
        if not waits:
            if waiter.state == GRANTED:
                return
            waiter.state = EXPIRED
            raise TimeoutError("acquire timed out: no units free at once (timeout=0)")
        waiter.future = future = loop.create_future()
        if request.deadline is not None or self._grants.core.todo:
            self._tend()  # its deadline may come before the timer fires
        await future  # a cancel here: __aenter__ leaves
        if waiter.state == EXPIRED:
            raise TimeoutError("acquire timed out: its timeout passed before a grant")

    def _leave(self, request: Request) -> None:
        """``acquire`` raised (a cancel, a timeout, a failing clock): a queued request
        leaves, a granted one gives its units back; an expired one holds nothing."""
        waiter: _Waiter = request.future  # type: ignore[assignment]
        state, waiter.state = waiter.state, GONE  # settled: it takes no grant any more
        if state == GRANTED or request.queued:
            granted: list[Request] = []
            expired: list[Request] = []
            self._grants.abandon(request, granted, expired)
            self._settle(granted, expired)

    def _release(self, request: Request, failed: bool) -> None:
        granted: list[Request] = []
        expired: list[Request] = []
        grants = self._grants
        grants.release(request, "failed" if failed else "completed", granted, expired)
        if granted or expired or grants.core.todo or grants.core.clock_errors:
            self._settle(granted, expired)
        if self._observers:
            self._observe(request)

    def _settle(self, granted: list[Request], expired: list[Request]) -> None:
        """Wake the waiters the last calls granted or expired, and tend the timer if the
        core says the next rate slot moved (a request that leaves brings no wake-up
        forward: the timer may fire for nothing, never late)."""
        for requests, state in ((granted, GRANTED), (expired, EXPIRED)):
            for request in requests:
                waiter: _Waiter = request.future  # type: ignore[assignment]
                waiter.state = state
                future = waiter.future
                if future is not None and not future.done():
                    future.set_result(None)
        if self._grants.core.todo:
            self._tend()
        if self._grants.core.clock_errors:
            log_clock_errors(self._grants.core.take_clock_errors())

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
            log_clock_errors([now])
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
            log_clock_errors([now])
            if core.queue and self._loop is not None:
                self._timer = self._loop.call_later(CLOCK_RETRY, self._on_timer)
            return
        granted: list[Request] = []
        expired: list[Request] = []
        self._grants.expire(now, granted, expired)
        self._settle(granted, expired)
        self._tend()  # for the next deadline or slot

    def _change(self, change: Callable[[], None]) -> None:
        change()
        granted: list[Request] = []
        expired: list[Request] = []
        self._grants.grant(granted, expired)
        if self._loop is not None:
            self._settle(granted, expired)
            self._tend()  # a new rate limit may close a window

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
