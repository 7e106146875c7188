"""``AsyncPriorityScheduler``: priorities, queue deadlines and limits for coroutines.

The asyncio twin of ``PriorityThreadPoolExecutor``, on the package's one policy
(``_core.py``), which ``_aio_owner.AsyncOwner`` runs on the event loop's thread; this module
checks the arguments and holds the public surface.

Everything runs on the one loop the scheduler is bound to, at its first ``submit``; nothing
here is thread-safe, as nothing in asyncio is. From another thread, submit through
``asyncio.run_coroutine_threadsafe(scheduler.run(...), loop)``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Any, Optional, TypeVar, Union, cast

from ._aio_loop import on_loop, running_loop
from ._aio_owner import AsyncOwner
from ._aio_task import TaskFunction, close_coroutine
from ._aio_view import SCHEDULER_DEFAULT, AsyncView, SchedulerDefault
from ._limits import CountSetting, Limits, RateSetting
from ._policy import (
    Number,
    Priority,
    check_ageing,
    check_async_when_full,
    check_bound,
    check_clock,
    check_key,
    check_limit,
    check_seconds,
    check_task_options,
    check_timeout,
    describe,
)
from ._rates import RateLimit
from ._stats import ExecutorStatistics

T = TypeVar("T")


class AsyncPriorityScheduler:
    """Run coroutines at most ``concurrency`` at once, the most urgent first.

    ::

        async with AsyncPriorityScheduler(concurrency=8) as scheduler:
            page = await scheduler.run(fetch, "/api/details", priority=Priority.HIGH)
            thumb = scheduler.submit(fetch, thumb_url, priority=Priority.LOW, timeout=2.0)

    Args:
        concurrency: the most coroutines running at once: a positive int, or ``math.inf``.
            Settable while it runs: a higher value starts queued tasks at once, a lower
            one interrupts nothing.
        clock: the clock of queue deadlines, run timeouts, ageing and rate limits, seconds
            as a float; default None: ``time.monotonic``.
        ageing: seconds of waiting that raise a task's effective priority by one, a
            positive float; default None: strict priority.
        max_queued: the most tasks waiting in the queue (running ones do not count), a
            positive int; default None: no bound.
        rate_limit: ``RateLimit(starts, per)`` or a ``(starts, per)`` pair: at most
            ``starts`` starts in any ``per`` seconds of ``clock``. Default None: no limit.
        key_limit: at most this many tasks of one key (see :meth:`options`) running at
            once, a positive int. Default None: no limit.
        key_rate_limit: a ``RateLimit`` for the starts of each key. Default None.
        when_full: with ``max_queued`` tasks queued, ``"raise"`` (or ``"reject"``) refuses
            a new one with ``QueueFullError``; ``"evict"`` cancels the lowest queued task if
            the new one ranks above it. ``"block"`` is refused: nothing may block the loop.
        run_timeout: seconds a coroutine may run, on ``clock``, counted from its start; one
            still running then is cancelled and its future raises ``TimeoutError``. None
            (the default) for no limit.

    Raises:
        TypeError: ``concurrency`` is not a number, ``clock`` is not callable, or
            ``ageing``, ``run_timeout`` or a limit has a wrong type.
        ValueError: ``concurrency`` is not a positive int nor ``math.inf``; ``ageing``,
            ``run_timeout`` or a limit is not positive (or not finite, or beyond float
            range); ``when_full`` is ``"block"`` or unknown.
    """

    def __init__(
        self,
        concurrency: Union[int, float] = 4,
        *,
        clock: Optional[Callable[[], float]] = None,
        ageing: Optional[float] = None,
        max_queued: Optional[int] = None,
        when_full: str = "raise",
        rate_limit: Union[RateLimit, tuple[int, float], None] = None,
        key_limit: Optional[int] = None,
        key_rate_limit: Union[RateLimit, tuple[int, float], None] = None,
        run_timeout: Optional[float] = None,
    ) -> None:
        self._owner = AsyncOwner(
            concurrency=check_bound("concurrency", concurrency),
            clock=time.monotonic if clock is None else check_clock(clock),
            ageing=check_ageing(ageing),
            max_queued=check_limit("max_queued", max_queued),
            when_full=check_async_when_full(when_full),
            limits=Limits.checked(rate_limit, key_limit, key_rate_limit),
            run_timeout=check_seconds("run_timeout", run_timeout),
        )

    # -- submitting ---------------------------------------------------------------------------

    def submit(
        self,
        fn: TaskFunction[T],
        /,
        *args: Any,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> asyncio.Future[T]:
        """Queue ``fn(*args, **kwargs)`` and return its Future at once; call it on the loop.

        ``fn`` is a coroutine function, or any callable that returns an awaitable, called
        only when the task starts, in a new Task running in a copy of the context current
        here. A coroutine object (``submit(fetch(url))``) is accepted too; if it never
        starts, or if this call raises, it is closed. ``priority`` and ``timeout`` are not
        passed to ``fn``; use :meth:`options` to give ``fn`` keywords of those names.

        Args:
            priority: any real number; higher starts first, equal ones in submission order.
            timeout: how long the task may wait in the queue, in seconds on the
                scheduler's clock, counted from now: one not started by then is cancelled
                and never starts; its future's CancelledError says "queue deadline passed
                after {timeout} s", and :func:`~priority_executor.expired` is True for it.
                ``0``: it may not wait at all. None: no deadline.

        Raises:
            TypeError: ``fn`` is neither callable nor a coroutine, or a bad option type.
            ValueError: ``priority`` is NaN, or ``timeout`` negative or NaN.
            RuntimeError: the scheduler is closing, or this is not its event loop.
            QueueFullError: ``max_queued`` tasks wait (see ``when_full``).
        """
        owner = self._owner
        try:
            level, timeout = check_task_options(priority, timeout, owner.core.ageing)
        except BaseException:
            close_coroutine(fn)
            raise
        return owner.submit(fn, args, kwargs, level, timeout, None, owner.run_timeout)

    async def run(
        self,
        fn: TaskFunction[T],
        /,
        *args: Any,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> T:
        """``await submit(...)``: the result, or what the task raised.

        Cancelling the caller cancels the task (a queued one never starts, a running one is
        cancelled); ``asyncio.shield`` opts out.
        """
        return await self.submit(fn, *args, priority=priority, timeout=timeout, **kwargs)

    def options(
        self,
        *,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        run_timeout: Union[float, SchedulerDefault, None] = SCHEDULER_DEFAULT,
        key: Hashable = None,
    ) -> AsyncView:
        """A view whose ``submit`` and ``run`` forward every keyword to ``fn``.

        Its tasks get this ``priority``, queue ``timeout``, ``run_timeout`` (by default the
        scheduler's) and ``key``, which ``key_limit`` and ``key_rate_limit`` count apart.

        Raises:
            TypeError: ``key`` is not hashable, or an option has a wrong type.
            ValueError: ``priority`` is NaN, ``timeout`` negative or NaN, or ``run_timeout``
                not a positive finite number.
        """
        level, timeout = check_task_options(priority, timeout, self._owner.core.ageing)
        if isinstance(run_timeout, SchedulerDefault):
            running = self._owner.run_timeout
        else:
            running = check_seconds("run_timeout", run_timeout)
        return AsyncView(self, level, timeout, running, check_key(key))

    def set_priority(self, future: asyncio.Future[Any], priority: Number) -> bool:
        """Move a still-queued task to a new priority; False if it is not queued here.

        Raises:
            TypeError: ``future`` is not an ``asyncio.Future``, or ``priority`` is not a
                real number.
            ValueError: ``priority`` is NaN.
            RuntimeError: called from another thread or loop than the scheduler's, as the
                setters of its limits are: the queue is the loop's alone.
        """
        if not isinstance(future, asyncio.Future):
            raise TypeError(f"future must be an asyncio.Future, got {describe(future)}")
        level, _ = check_task_options(priority, None, self._owner.core.ageing)
        owner = self._owner
        if owner.loop is not None and not owner.loop.is_closed():
            owner.bind("set_priority()")
        return owner.core.requeue(cast(Any, future), level)

    # -- limits -------------------------------------------------------------------------------

    @property
    def concurrency(self) -> Union[int, float]:
        """The most coroutines running at once; settable while it runs."""
        return self._owner.core.capacity

    @concurrency.setter
    def concurrency(self, value: Union[int, float]) -> None:
        concurrency = check_bound("concurrency", value)
        core = self._owner.core
        self._change("setting concurrency", lambda: setattr(core, "capacity", concurrency))

    rate_limit = RateSetting(
        "At most ``starts`` starts in any ``per`` seconds; settable (None for no limit)."
    )
    key_limit = CountSetting(
        "At most this many tasks of one key running at once; settable (None for no limit)."
    )
    key_rate_limit = RateSetting("``rate_limit`` for each key apart; settable (None for no limit).")

    def _limits(self) -> Limits:
        return self._owner.core.limits

    @property
    def run_timeout(self) -> Optional[float]:
        """The seconds a coroutine may run (None for no limit), unless its view sets its own."""
        return self._owner.run_timeout

    def _set_limit(self, name: str, limit: Union[int, RateLimit, None]) -> None:
        self._change(f"setting {name}", lambda: self._owner.core.change_limit(name, limit))

    def _change(self, what: str, change: Callable[[], None]) -> None:
        """Make a checked change on the scheduler's loop, then start what it now allows.

        The loop is checked before anything changes. Before the first submit, or once the
        loop has closed, there is nothing to start.
        """
        owner = self._owner
        running = owner.loop is not None and not owner.loop.is_closed()
        if running:
            owner.bind(what)
        change()
        if running:
            owner.restart()  # and the timer, for a rate slot

    # -- state --------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """How many tasks are queued."""
        return len(self._owner.core.queue)

    @property
    def active(self) -> int:
        """How many tasks have started and not yet finished (a cancelled one until it ends)."""
        return self._owner.core.running

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume`."""
        return self._owner.core.paused

    def pause(self) -> None:
        """Start no queued task until :meth:`resume`; running ones carry on."""
        core = self._owner.core
        if not core.stopping:  # a closing scheduler drains its queue
            core.paused = True

    def resume(self) -> None:
        """Start queued tasks again, as many as may start."""
        core = self._owner.core
        self._change("resume()", lambda: setattr(core, "paused", False))

    async def join(self, timeout: Optional[float] = None) -> bool:
        """Wait until nothing is queued or running, tasks submitted meanwhile included.

        Returns:
            True once quiet; False if ``timeout`` seconds passed first.

        Raises:
            TypeError: ``timeout`` is neither None nor a real number.
            ValueError: ``timeout`` is negative or NaN.
            RuntimeError: called from one of the scheduler's own tasks, which would wait
                for itself.
        """
        timeout = check_timeout(timeout)
        owner = self._owner
        core = owner.core
        if owner.loop is None or core.quiet():
            return True
        loop = owner.bind("join()")
        self._refuse_own_task("join()")
        owner.restart()  # a queue held since a Task was cancelled from outside moves on
        if core.quiet():  # what restart() found due has expired
            return True
        waiter: asyncio.Future[bool] = loop.create_future()
        owner.idle.append(waiter)
        core.watchers += 1
        timer = None if timeout is None else loop.call_later(timeout, _settle, waiter, False)
        try:
            return await waiter
        finally:
            core.watchers -= 1
            if timer is not None:
                timer.cancel()
            if waiter in owner.idle:
                owner.idle.remove(waiter)

    def _refuse_own_task(self, what: str) -> None:
        """Raise if one of the scheduler's own tasks calls ``what``, which waits for quiet.

        Call it in a coroutine, before anything changes.
        """
        owner = self._owner
        # While the pump runs, only a coroutine that an eager task factory started inside it
        # can call: one of ours, not yet listed.
        if owner.pumping or asyncio.current_task() in owner.active:
            raise RuntimeError(
                f"cannot {what} from one of the scheduler's own tasks: it would wait for itself"
            )

    def statistics(self) -> ExecutorStatistics:
        """A snapshot of the counts, as ``PriorityThreadPoolExecutor.statistics()`` has them.

        ``max_workers`` is ``concurrency`` (None for ``math.inf``), ``workers`` the running
        coroutines, ``idle_workers`` the free slots (``math.inf`` for ``math.inf``).

        Safe from any thread. From a thread other than the running loop's (a Prometheus
        server's, say) the snapshot is taken on the loop, between two of its callbacks, and
        this call blocks until it is: read half-way through the loop's bookkeeping, it
        would not add up, and taking it folds the recorded times, which only the loop may
        do. While no loop runs the scheduler (before its first submit, say) it is taken at
        once, and taken again on the loop if one began to meanwhile.
        """
        while True:
            loop = self._loop_elsewhere()
            if loop is not None:
                return on_loop(loop, self._snapshot)
            stats = self._snapshot()
            if self._loop_elsewhere() is None:  # still: no loop ran meanwhile
                return stats

    def _loop_elsewhere(self) -> Optional[asyncio.AbstractEventLoop]:
        """The scheduler's loop if it runs, and in a thread other than this one's; else None."""
        loop = self._owner.loop
        if loop is None or not loop.is_running() or running_loop() is loop:
            return None
        return loop

    def _snapshot(self) -> ExecutorStatistics:
        core = self._owner.core
        limit = core.capacity
        free = math.inf if limit == math.inf else max(0, int(limit) - core.running)
        return core.statistics(
            workers=core.running,
            idle_workers=free,
            max_workers=None if limit == math.inf else int(limit),
        )

    def __repr__(self) -> str:
        core = self._owner.core
        state = "closed" if core.stopping else "paused" if core.paused else "running"
        return (
            f"<{type(self).__name__} {state} concurrency={core.capacity}"
            f" queued={len(core.queue)} active={core.running}>"
        )

    # -- closing ------------------------------------------------------------------------------

    async def aclose(self, *, cancel_futures: bool = False) -> None:
        """Refuse new work, cancel what is queued if ``cancel_futures``, wait for the rest.

        Closing twice is harmless; a paused scheduler resumes, so its queued tasks run.

        Raises:
            RuntimeError: called from one of the scheduler's own tasks, which would wait
                for itself, or from another thread or loop; the scheduler is left as it
                was, still open.
        """
        owner = self._owner
        if owner.loop is None:
            owner.core.stopping = True
            return
        owner.bind("aclose()")
        self._refuse_own_task("aclose()")
        owner.close(cancel_futures)
        await self.join()

    async def __aenter__(self) -> AsyncPriorityScheduler:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        """Close; if the body raised, cancel what is queued and running first, then wait.

        From one of the scheduler's own tasks it raises as :meth:`aclose` does, and leaves
        the scheduler open.
        """
        if exc is None:
            await self.aclose()
            return
        owner = self._owner
        self._refuse_own_task("aclose()")
        owner.core.stopping = True
        if owner.loop is not None:
            owner.cancel_queued()
            owner.cancel_running()
            await self.join()

    def _check_invariants(self) -> None:
        """Check the scheduler's invariants in O(n); for tests."""
        self._owner.check_invariants()

    def _wake_timer(self) -> None:
        """Re-read the clock now (tests call this after moving a fake clock)."""
        self._owner.wake_timer()


def _settle(waiter: asyncio.Future[bool], value: bool) -> None:
    if not waiter.done():
        waiter.set_result(value)
