"""One scheduled coroutine: its future, the coroutine of its Task, and its run deadline.

The pieces of the asyncio owner (``_aio_owner.py``) that belong to a single task:
:class:`ScheduledFuture`, the future ``submit`` returns, which carries its task's state;
:func:`run_task`, the coroutine of a started task's Task, which calls the task and then, as
its own last step, has the owner settle it; :func:`create_task`, which makes that Task; and
:class:`RunDeadlines`, the ``run_timeout`` of the running tasks on the scheduler's clock.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import inspect
import itertools
import sys
from collections.abc import Awaitable, Callable, Mapping
from inspect import CO_COROUTINE
from types import FunctionType
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from ._futures import EXPIRED_MARK
from ._policy import describe, is_due
from ._queue import Entry

if TYPE_CHECKING:
    from ._aio_owner import AsyncOwner

T = TypeVar("T")

#: The ``args`` of an entry whose ``fn`` is a coroutine object to await, not a function.
AWAIT: tuple[Any, ...] = ("<await>",)

#: Run deadlines of ended tasks left in the heap, beyond twice the running ones, before it
#: is rebuilt without them.
COMPACT_SLACK = 16

#: What a coroutine that ran past its ``run_timeout`` raises (the builtin on 3.11+).
RunTimeoutError = asyncio.TimeoutError


class ScheduledFuture(asyncio.Future[T]):
    """The future of one scheduled task: cancelling it takes the task out at once.

    It carries its task's state, so that a start costs no object more than its Task.
    """

    __slots__ = (
        EXPIRED_MARK,
        "_context",
        "_entry",
        "_owner",
        "_queue_timeout",
        "_run_deadline",
        "_running",
        "_run_timeout",
        "_task",
        "_timed_out",
    )

    _owner: Optional[AsyncOwner]  # None once the scheduler is done with it
    _context: contextvars.Context  # the context of the submit, for the Task
    _queue_timeout: Optional[float]  # its submit's timeout, for the CancelledError's message
    _run_timeout: Optional[float]
    _entry: Optional[Entry]  # set (detached) when it starts: its key, priority and times
    _task: Optional[asyncio.Task[Any]]  # its Task, once made
    _running: bool  # its Task has begun: a cancel reaches the coroutine through the Task
    # With a run_timeout, from its start: its run deadline while it runs (its id in the
    # owner's RunDeadlines, or a timer on the loop's clock if the scheduler's clock failed as
    # it started), and whether it timed out.
    _run_deadline: Union[int, asyncio.TimerHandle, None]
    _timed_out: bool

    def cancel(self, msg: Any = None) -> bool:
        """Cancel the task: it never starts if queued; a running coroutine is cancelled.

        The future is cancelled at once. A running coroutine's slot is freed only when it
        has finished (its ``finally`` blocks run, or it suppresses the cancel). False once
        the coroutine has finished, also before the scheduler has settled the future.
        """
        task = self._task
        if task is not None and task.done():
            return False  # it ran to an end: its outcome is the future's, one step later
        if not super().cancel(msg):
            return False
        owner = self._owner
        if owner is not None:
            owner.cancelled(self)
        return True

    def set_result(self, result: T) -> None:
        """Settle the future by hand: a queued task then never starts (as ``cancel``)."""
        super().set_result(result)
        self._settled_by_hand()

    def set_exception(self, exception: Union[type, BaseException]) -> None:
        """Settle the future by hand: a queued task then never starts (as ``cancel``)."""
        super().set_exception(exception)
        self._settled_by_hand()

    def _settled_by_hand(self) -> None:
        owner = self._owner
        if owner is not None and self._entry is None:  # queued; a running one runs on
            owner.unqueue(self, "completed")

    def _time_out(self) -> None:
        """``run_timeout`` passed: the future raises TimeoutError now; the coroutine is cancelled.

        Its slot stays taken until the coroutine has finished.
        """
        task = self._task
        if task is None or task.done():
            return  # it finished as its time ran out: its outcome stands
        if not self.done():
            self._timed_out = True
            error = RunTimeoutError(f"the task ran past run_timeout={self._run_timeout}")
            asyncio.Future.set_exception(self, error)
        if self._running:
            task.cancel()


def deadline_message(timeout: float) -> str:
    """The message of the CancelledError of a task whose queue deadline passed."""
    return f"queue deadline passed after {timeout} s"


#: Settle a scheduled future as the scheduler does, past its by-hand hooks.
set_result = asyncio.Future.set_result
set_exception = asyncio.Future.set_exception


async def run_task(
    owner: AsyncOwner,
    future: ScheduledFuture[Any],
    fn: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> None:
    """The coroutine of a started task's Task: run the task, then settle it and start the next.

    The settling is the last step of the Task itself, not a done-callback, so that the loop
    runs one callback per task less; the slot is freed once ``fn``'s coroutine has finished.
    A future settled before the Task began (cancelled, timed out, set by hand) never calls
    ``fn``: the scheduler cancels a Task only once it has begun (``_running``), since a Task
    cancelled before its first step ends without running this at all. Until it begins, a
    done-callback (:meth:`AsyncOwner.abandoned`) stands in for that case: a cancel from
    outside the scheduler, as ``asyncio.run``'s end makes.
    """
    future._running = True
    task = future._task
    if task is not None:  # None when an eager task factory runs this inside create_task
        task.remove_done_callback(owner.on_abandoned)
    if future.done():
        owner.drop_unrun(fn, args)
        owner.ended(future, None, None)
        return
    if args is AWAIT:
        owner.coroutines.discard(fn)  # kept until now: closed if this never begins
    try:
        if args is AWAIT:
            result = await fn
        elif type(fn) is FunctionType and fn.__code__.co_flags & CO_COROUTINE:
            # An async def: no need to check what it returns. An empty ``**`` would copy
            # NO_KWARGS into a new dict.
            result = await (fn(*args, **kwargs) if kwargs else fn(*args))
        else:
            awaitable = fn(*args, **kwargs)
            if not inspect.isawaitable(awaitable):
                raise TypeError(
                    f"fn must return an awaitable, got {describe(awaitable)}: for a blocking"
                    " function, use loop.run_in_executor(pool.options(...), fn) with a"
                    " PriorityThreadPoolExecutor"
                )
            result = await awaitable
    except GeneratorExit as exc:
        if asyncio._get_running_loop() is not owner.loop:
            raise  # closed unfinished with its loop gone: nothing can be settled
        owner.ended(future, exc, None)  # raised by the task itself: its future fails
    except BaseException as exc:
        owner.ended(future, exc, None)
        if isinstance(exc, Exception):
            return
        if not isinstance(exc, asyncio.CancelledError):  # KeyboardInterrupt, SystemExit
            task = asyncio.current_task()
            if task is not None:  # its future has it: the Task's copy is not "never retrieved"
                task.add_done_callback(_retrieve)
        raise  # the Task ends cancelled, or the loop stops, as without the scheduler
    else:
        owner.ended(future, None, result)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark what ``task`` raised as retrieved: its scheduled future already holds it."""
    if not task.cancelled():
        task.exception()


if sys.version_info >= (3, 11):
    _STANDARD_CREATE_TASK = asyncio.BaseEventLoop.create_task

    def create_task(
        loop: asyncio.AbstractEventLoop, coro: Any, context: contextvars.Context
    ) -> asyncio.Task[Any]:
        """``loop.create_task(coro, context=context)``, without its Python frame where it has one.

        On asyncio's own loops with no task factory set, ``create_task`` makes the same
        ``Task`` from a Python method; making it here saves that call: 3 to 4 % of the
        throughput of 100,000 no-op coroutines at concurrency 64 (``python
        benchmarks/aio.py --case hroughput``, CPython 3.11). Any other loop (uvloop) or a
        task factory gets the call itself.
        """
        if type(loop).create_task is _STANDARD_CREATE_TASK and loop.get_task_factory() is None:
            return asyncio.Task(coro, loop=loop, context=context)
        return loop.create_task(coro, context=context)

else:

    def create_task(
        loop: asyncio.AbstractEventLoop, coro: Any, context: contextvars.Context
    ) -> asyncio.Task[Any]:
        return context.run(loop.create_task, coro)  # the Task copies the context it runs in


class RunDeadlines:
    """The run deadlines of the running tasks with a ``run_timeout``, on the scheduler's clock.

    A heap of ``(deadline, run id)``, and the future of each run id until its task ends. The
    heap holds no future, so a task that ended is kept alive by nothing here; the entries of
    ended tasks are dropped as they reach the top, or all at once when they pile up.
    """

    def __init__(self) -> None:
        self.heap: list[tuple[float, int]] = []
        self.live: dict[int, ScheduledFuture[Any]] = {}
        self.ids = itertools.count()

    def add(self, future: ScheduledFuture[Any], deadline: float) -> None:
        """Time ``future``'s coroutine out at ``deadline``."""
        run_id = future._run_deadline = next(self.ids)
        self.live[run_id] = future
        heapq.heappush(self.heap, (deadline, run_id))

    def remove(self, run_id: int) -> None:
        """The task of ``run_id`` ended: forget its deadline (its heap entry goes later)."""
        del self.live[run_id]
        if len(self.heap) > 2 * len(self.live) + COMPACT_SLACK:
            self.heap = [item for item in self.heap if item[1] in self.live]
            heapq.heapify(self.heap)

    def next(self) -> Optional[float]:
        """The earliest run deadline of a running task, or None."""
        heap, live = self.heap, self.live
        while heap and heap[0][1] not in live:
            heapq.heappop(heap)  # its task has ended
        return heap[0][0] if heap else None

    def time_out(self, now: float) -> None:
        """Time out every running task whose run deadline has come at clock reading ``now``."""
        heap, live = self.heap, self.live
        while heap and is_due(heap[0][0], now):
            _, run_id = heapq.heappop(heap)
            future = live.pop(run_id, None)
            if future is not None:
                future._run_deadline = None
                future._time_out()  # settles the future, cancels its Task: no user code

    def check(self, earliest: Optional[float]) -> Optional[float]:
        """Assert every live deadline is in the heap; the earlier of ``earliest`` and them."""
        runs = [deadline for deadline, run_id in self.heap if run_id in self.live]
        assert len(runs) == len(self.live), "a running task's run deadline is lost"
        if runs and (earliest is None or min(runs) < earliest):
            return min(runs)
        return earliest


if sys.version_info >= (3, 11):

    def cancelled_from_outside() -> bool:
        """The running Task (ours) had a ``cancel()`` of its own, as ``asyncio.run``'s end makes.

        Every cancel of ours goes through the task's future, which is cancelled first; a
        Task that ends with a CancelledError it raised itself (an awaited future was
        cancelled) has had no ``cancel()`` at all.
        """
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0

else:

    def cancelled_from_outside() -> bool:
        """Before 3.11 a Task does not say whether it was cancelled: never taken to be.

        asyncio.run's end may then start a Task in a cancelled one's place, which the loop's
        closing leaves pending (a warning, no more); holding the queue instead would stall
        a scheduler whose coroutine let a CancelledError of its own escape.
        """
        return False


def close_coroutine(fn: object) -> None:
    """Close ``fn`` if it is a coroutine object whose submit was refused, so that it never
    warns "never awaited"; a coroutine function needs nothing."""
    if inspect.iscoroutine(fn):
        fn.close()


def close_all(coroutines: set[Any]) -> None:
    """Close the coroutine objects still queued in a scheduler that is being collected."""
    for coroutine in coroutines:
        coroutine.close()


#: What ``submit`` accepts as ``fn``.
TaskFunction = Union[Callable[..., Awaitable[T]], Awaitable[T]]
