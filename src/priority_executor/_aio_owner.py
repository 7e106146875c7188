"""The asyncio owner: the package's :class:`~._core.Core`, run on one event loop's thread.

:class:`AsyncOwner` holds a ``Core`` (the queue, its orderings, ageing, capacity, the limits
and the counts, shared with the thread pool) and owns only what a loop adds: binding to the
loop, the Tasks, one ``loop.call_later`` handle for the next deadline or rate slot, and the
``join()`` waiters. Every call is made on the loop's thread, so nothing needs a lock. No user
code runs inside its bookkeeping: a coroutine runs in its own Task, and a future's
done-callbacks are scheduled by the loop (``call_soon``), never called from here.

The flows
---------
1. **Submit.** :meth:`AsyncOwner.submit` makes a :class:`ScheduledFuture` and its ``Entry``;
   every check that can raise runs first (closing, the clock, a full queue); then the entry
   is queued and counted, the timer armed for its deadline, and the pump run.
2. **Start.** :meth:`AsyncOwner.pump` is the one place a task leaves the queue to start: it
   calls ``Core.take`` (which starts none beyond ``capacity``) and starts a Task for what it
   took (:meth:`AsyncOwner._start`). The start is counted (``running``) before the Task
   exists, so an eager task factory, which runs the coroutine inside ``create_task``, finds
   it counted; a submit from that coroutine queues, and the pump already running takes it.
3. **Settle.** The Task's coroutine (:func:`_run`) calls the task, then, as its last step,
   :meth:`AsyncOwner.ended`, which settles the future, reports the outcome (``Core.finish``)
   and pumps: a slot is freed only when the coroutine has really finished.
4. **Cancel.** :meth:`ScheduledFuture.cancel` settles the future at once; a queued task then
   leaves the queue in O(1) (``Core.unqueue``) and never starts, a running one has its Task
   cancelled, and its slot stays taken until the coroutine ends.
5. **Time.** :meth:`AsyncOwner._on_timer` expires what the clock has passed and opens rate
   slots (``Core.pop_due``), times out the running tasks past their ``run_timeout``, re-arms
   for the next, and pumps. Both kinds of deadline are on the scheduler's clock; the handle
   waits the difference on the loop's. Every expiry goes through :meth:`AsyncOwner._expire`,
   which marks the future expired, then cancels it with :func:`deadline_message`.

What the core leaves to do (``Core.todo``) is applied by :meth:`AsyncOwner._apply`: the
timer is re-armed, ``join()`` is woken once quiet; the pump that follows every call starts
what a limit opened.

Every accepted task is in exactly one place: ``submitted == completed + failed + cancelled +
expired + queued + running`` (:meth:`AsyncOwner.check_invariants`: "lost task").
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import inspect
import itertools
import math
import sys
import weakref
from collections.abc import Awaitable, Callable, Hashable, Mapping
from inspect import CO_COROUTINE
from types import CoroutineType, FunctionType
from typing import Any, Optional, TypeVar, Union

from ._claim import Outcome
from ._core import SHRUNK, TIMER, Core
from ._futures import EXPIRED_MARK, mark_expired
from ._limits import Limits
from ._policy import Number, WhenFull, describe, is_due
from ._queue import NO_KWARGS, Entry
from ._timer import CLOCK_RETRY, log_clock_failure

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
        "_run_id",
        "_running",
        "_run_timeout",
        "_task",
        "_timed_out",
        "_timer",
    )

    _owner: Optional[AsyncOwner]  # None once the scheduler is done with it
    _context: contextvars.Context  # the context of the submit, for the Task
    _queue_timeout: Optional[float]  # its submit's timeout, for the CancelledError's message
    _run_timeout: Optional[float]
    _entry: Optional[Entry]  # set (detached) when it starts: its key, priority and times
    _task: Optional[asyncio.Task[Any]]  # its Task, once made
    _running: bool  # its Task has begun: a cancel reaches the coroutine through the Task
    _run_id: Optional[int]  # its entry in the owner's run deadlines, while it runs
    # With a run_timeout, from its start: its timer on the loop's clock (see _time_run), and
    # whether it timed out.
    _timer: Optional[asyncio.TimerHandle]
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
            owner.unqueue(self, cancelled=False)

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
_set_result = asyncio.Future.set_result
_set_exception = asyncio.Future.set_exception


async def _run(
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
        task.remove_done_callback(owner.abandoned)
    if args is AWAIT:
        owner.coroutines.discard(fn)  # kept until now: closed if this never begins
    if future.done():
        if args is AWAIT:
            fn.close()  # it will never run: no "never awaited" warning
        owner.ended(future, None, None)
        return
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
    except BaseException as exc:
        owner.ended(future, exc, None)
        if not isinstance(exc, Exception):
            raise  # a CancelledError ends the Task cancelled; KeyboardInterrupt goes on
    else:
        owner.ended(future, None, result)


if sys.version_info >= (3, 11):
    _STANDARD_CREATE_TASK = asyncio.BaseEventLoop.create_task

    def _create_task(
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

    def _create_task(
        loop: asyncio.AbstractEventLoop, coro: Any, context: contextvars.Context
    ) -> asyncio.Task[Any]:
        return context.run(loop.create_task, coro)  # the Task copies the context it runs in


class AsyncOwner:
    """The loop's side of one ``AsyncPriorityScheduler``; see the module docstring."""

    def __init__(
        self,
        *,
        concurrency: Union[int, float],
        clock: Callable[[], float],
        ageing: Optional[float],
        max_queued: Optional[int],
        when_full: WhenFull,
        limits: Limits,
        run_timeout: Optional[float],
    ) -> None:
        self.core = Core(
            clock=clock,
            ageing=ageing,
            limits=limits,
            capacity=concurrency,
            max_queued=max_queued,
            when_full=when_full,
        )
        self.run_timeout = run_timeout
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.active: dict[asyncio.Task[Any], ScheduledFuture[Any]] = {}  # by running Task
        self.pumping = False  # pump() is taking: a pump called meanwhile leaves it to it
        # A Task of ours was cancelled from outside the scheduler, as asyncio.run cancels
        # every task when its main coroutine returns: start nothing in its place until the
        # scheduler is called again (see restart), or a Task created in the loop's
        # teardown would be destroyed pending.
        self.halted = False
        # The coroutine objects queued (submit(coro)), closed if the scheduler is collected
        # with them unstarted, so that none warns "never awaited".
        self.coroutines: set[Any] = set()
        weakref.finalize(self, _close_all, self.coroutines)
        self.unrun: list[Entry] = []  # what pump()'s takes found expired, for it to cancel
        self.timer: Optional[asyncio.TimerHandle] = None
        self.timer_at: Optional[float] = None  # on the scheduler's clock
        self.idle: list[asyncio.Future[bool]] = []  # join() waiters, woken once quiet
        # The run deadlines of the running tasks with a run_timeout, on the scheduler's
        # clock: a heap of (deadline, run id), and the future of each run id until its task ends.
        # The heap holds no future, so a task that ended is kept alive by nothing here.
        self.run_deadlines: list[tuple[float, int]] = []
        self.running_until: dict[int, ScheduledFuture[Any]] = {}
        self.run_ids = itertools.count()

    # -- the loop -----------------------------------------------------------------------------

    def bind(self, what: str) -> asyncio.AbstractEventLoop:
        """The running loop, to which the scheduler is bound at its first submit.

        A scheduler whose loop was closed rebinds to the running one if it is idle (reused
        across two ``asyncio.run`` calls); otherwise a call from another loop or thread is
        refused, naming the fix.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None and loop is self.loop:
            return loop
        if loop is not None and (
            self.loop is None or (self.loop.is_closed() and self.core.quiet())
        ):
            self.loop, self.timer, self.timer_at = loop, None, None
            return loop
        raise RuntimeError(
            f"{what} must be called on the event loop the scheduler runs on; from another"
            " thread or loop, use asyncio.run_coroutine_threadsafe(scheduler.run(...), loop)"
        )

    def _apply(self, todo: int) -> None:
        """Do what the core left to do (``Core.todo``); the pump that follows starts tasks."""
        if todo & TIMER:
            self.arm()
        if todo & SHRUNK and self.idle and self.core.quiet():
            for waiter in self.idle:
                if not waiter.done():
                    waiter.set_result(True)
            self.idle.clear()

    # -- 1. submit ----------------------------------------------------------------------------

    def submit(
        self,
        fn: TaskFunction[T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        timeout: Optional[float],
        key: Hashable,
        run_timeout: Optional[float],
    ) -> ScheduledFuture[T]:
        """Queue a task whose options are checked (``fn`` may be a coroutine object).

        A coroutine object whose submit is refused, by any check, is closed: it never runs.
        """
        if isinstance(fn, CoroutineType):
            if args or kwargs:
                fn.close()
                raise TypeError("a coroutine object takes no arguments: pass them to its function")
            args = AWAIT
        elif not callable(fn):
            raise TypeError(f"fn must be a coroutine function or a coroutine, got {describe(fn)}")
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is None or running is not loop:
            try:
                loop = self.bind("submit()")
            except BaseException:
                close_coroutine(fn)  # refused: it will never run
                raise
        future: ScheduledFuture[T] = ScheduledFuture(loop=loop)
        future._owner, future._context = self, contextvars.copy_context()
        future._run_timeout, future._queue_timeout = run_timeout, timeout
        future._entry = future._task = None
        # The queue holds thread-pool futures by type; it only hashes them and asks done().
        entry = Entry(future, fn, args, kwargs or NO_KWARGS, priority, None, key)  # type: ignore[arg-type]
        core = self.core
        # Decide: every check that can raise runs before anything changes.
        try:
            if core.stopping:
                core.reject(priority)
                raise RuntimeError("cannot schedule new futures after shutdown")
            rank, expired = core.stamp(entry, timeout)
            evict = None
            if core.max_queued is not None and not expired and core.full():
                self._expire_all(core.room_of_due(entry.queued_at))
                if core.full():
                    evict = core.make_room(entry, rank)  # "block" is refused when made
        except BaseException:
            self._discard(entry)
            raise
        # Commit.
        core.tally.submitted += 1
        if expired:
            core.tally.add("expired", priority)
            self._expire(entry)
            return future
        if evict is not None:
            core.queue.remove(evict)
            core.tally.evicted(evict.priority)
            self._discard(evict).cancel()
        core.queue.push(entry, rank)
        if args is AWAIT:
            self.coroutines.add(fn)
        self.halted = False
        if entry.deadline is not None or core.limits.timed:
            self.arm()
        if core.running < core.capacity:
            self.pump()
        return future

    # -- 2. start -----------------------------------------------------------------------------

    def pump(self) -> None:
        """Start the best queued tasks while the core lets them: the one place a task starts."""
        if self.pumping or self.halted:
            return
        self.pumping = True
        core, unrun = self.core, self.unrun
        try:
            while True:
                entry = core.take(unrun)
                if entry is None:
                    break
                self._start(entry)
        finally:
            self.pumping = False
            if unrun:  # expired as they were taken
                expired = unrun[:]
                del unrun[:]
                for entry in expired:
                    self._expire(entry)
                core.settled(len(expired))
            if core.todo:
                self._apply(core.take_todo())
            if core.clock_errors:
                self._log_clock_errors()

    def _start(self, entry: Entry) -> None:
        """Start a Task for a task taken from the queue, counted ``running``."""
        future: ScheduledFuture[Any] = entry.future  # type: ignore[assignment]  # see submit
        if future.done():  # its result was set by hand while it was queued
            self._discard(entry)
            self.core.finish("cancelled" if future.cancelled() else "completed", entry)
            return
        loop = self.loop
        assert loop is not None
        fn, args, kwargs = entry.fn, entry.args, entry.kwargs
        # The future keeps its entry (its key, priority and times) until it ends.
        future._entry, future._running = entry, False
        coro = _run(self, future, fn, args, kwargs)
        try:
            task = _create_task(loop, coro, future._context)
        except Exception as exc:  # a task factory that raised, say
            future._owner = future._entry = None
            coro.close()
            if args is AWAIT:
                self.coroutines.discard(fn)
                close_coroutine(fn)  # it will never run: no "never awaited" warning
            if not future.done():
                _set_exception(future, exc)
            self.core.finish("failed", entry)
            return
        if task.done():
            return  # an eager task factory ran it to its end, settled, inside create_task
        future._task = task
        self.active[task] = future
        if not future._running:  # see _run
            task.add_done_callback(self.abandoned)
        if future._run_timeout is not None:
            future._timer = future._run_id = None
            future._timed_out = False
        if future.cancelled():  # by its own coroutine, started by an eager task factory
            task.cancel()
        elif future._run_timeout is not None:
            self._time_run(future, entry.started)

    def _time_run(self, future: ScheduledFuture[Any], started: float) -> None:
        """Have the timer time ``future``'s coroutine out ``run_timeout`` seconds after
        ``started``, on the scheduler's clock, as it times queue deadlines.

        If the clock failed as the task started, the loop's clock times it instead.
        """
        timeout = future._run_timeout
        assert timeout is not None
        if math.isnan(started):
            loop = self.loop
            assert loop is not None
            future._timer = loop.call_later(timeout, future._time_out)
            return
        run_id = future._run_id = next(self.run_ids)
        self.running_until[run_id] = future
        heapq.heappush(self.run_deadlines, (started + timeout, run_id))
        self.arm()

    def _end_run(self, future: ScheduledFuture[Any]) -> None:
        """A task with a ``run_timeout`` ended: forget its timer or its run deadline."""
        if future._timer is not None:
            future._timer.cancel()
            future._timer = None
        if future._run_id is not None:
            self._forget_run(future._run_id)
            future._run_id = None

    def _forget_run(self, run_id: int) -> None:
        """A task with a run deadline ended; drop its deadline's entry once they pile up."""
        del self.running_until[run_id]
        deadlines = self.run_deadlines
        if len(deadlines) > 2 * len(self.running_until) + COMPACT_SLACK:
            live = self.running_until
            self.run_deadlines = [entry for entry in deadlines if entry[1] in live]
            heapq.heapify(self.run_deadlines)

    def next_run_deadline(self) -> Optional[float]:
        """The earliest run deadline of a running task, or None."""
        deadlines, live = self.run_deadlines, self.running_until
        while deadlines and deadlines[0][1] not in live:
            heapq.heappop(deadlines)  # its task has ended
        return deadlines[0][0] if deadlines else None

    def _time_out_runs(self, now: float) -> None:
        """Time out every running task whose run deadline has come at clock reading ``now``."""
        deadlines, live = self.run_deadlines, self.running_until
        while deadlines and is_due(deadlines[0][0], now):
            _, run_id = heapq.heappop(deadlines)
            future = live.pop(run_id, None)
            if future is not None:
                future._run_id = None
                future._time_out()  # settles the future, cancels its Task: no user code

    # -- 3. settle ----------------------------------------------------------------------------

    def ended(
        self, future: ScheduledFuture[Any], error: Optional[BaseException], result: Any
    ) -> None:
        """A started task's coroutine ended (with ``error`` or ``result``), in its Task: settle
        its future, free its slot, start the next."""
        task = future._task
        if task is not None:
            del self.active[task]
        entry = future._entry
        assert entry is not None
        timed = future._run_timeout is not None and task is not None
        if timed:
            self._end_run(future)
        future._owner = future._entry = future._task = None
        outcome: Outcome
        if future.done():  # settled while it ran
            if timed and future._timed_out:
                outcome = "failed"  # it raised TimeoutError at its run_timeout
            elif future.cancelled():
                outcome = "cancelled"  # by its user, or by its own coroutine
            else:
                outcome = "completed"  # its result was set by hand
        elif error is None:
            _set_result(future, result)
            outcome = "completed"
        elif isinstance(error, asyncio.CancelledError):
            future.cancel()  # its owner is gone: this settles it, and does nothing else
            outcome = "cancelled"
            if _cancelled_from_outside():
                self.halted = True
        else:
            _set_exception(future, error)
            outcome = "failed"
        core = self.core
        core.finish(outcome, entry)
        if core.queue.entries:
            self.pump()
        elif core.todo:
            self._apply(core.take_todo())

    def abandoned(self, task: asyncio.Task[Any]) -> None:
        """Done-callback of a Task until it begins: one cancelled from outside before its first
        step never ran :func:`_run`, so its task is settled here, as cancelled from outside."""
        future = self.active.get(task)
        if future is not None and not future._running:
            self.halted = True
            self.ended(future, asyncio.CancelledError(), None)

    # -- 4. cancel ----------------------------------------------------------------------------

    def cancelled(self, future: ScheduledFuture[Any]) -> None:
        """``future`` was cancelled by its user: unqueue its task, or cancel its Task."""
        if future._entry is None:
            self.unqueue(future, cancelled=True)
        elif future._running and future._task is not None:
            future._task.cancel()  # its slot is freed when the coroutine ends

    def unqueue(self, future: ScheduledFuture[Any], cancelled: bool) -> None:
        """Take out the task of a future settled while queued, by a cancel or by hand."""
        core = self.core
        entry = core.unqueue(future, cancelled)  # type: ignore[arg-type]  # see submit
        if entry is not None:
            self._discard(entry)
        if core.todo:
            self._apply(core.take_todo())

    # -- 5. time ------------------------------------------------------------------------------

    def arm(self) -> None:
        """Have the timer fire by the next deadline, run deadline or rate slot, if it would
        fire later."""
        when = self.core.next_deadline()
        run = self.next_run_deadline()
        if run is not None and (when is None or run < when):
            when = run
        if when is None or (self.timer_at is not None and self.timer_at <= when):
            return  # nothing to wait for, or an earlier call comes: it re-arms
        loop = self.loop
        assert loop is not None
        now = self.core.read_clock()
        delay = CLOCK_RETRY if isinstance(now, Exception) else max(0.0, when - now)
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = when
        self.timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        """Expire what is due, open the rate slots passed, re-arm, and start what may start."""
        self.timer = self.timer_at = None
        now = self.core.read_clock()
        if isinstance(now, Exception):
            log_clock_failure(now)
            loop = self.loop
            assert loop is not None
            self.timer_at = -math.inf  # any later arm() waits for this retry
            self.timer = loop.call_later(CLOCK_RETRY, self._on_timer)
            return
        self._expire_all(self.core.pop_due(now))
        if self.run_deadlines:
            self._time_out_runs(now)
        self.arm()
        self.pump()

    def restart(self) -> None:
        """The scheduler was called: start what may start, halted or not; wake the timer."""
        self.halted = False
        self.arm()
        self.pump()

    def wake_timer(self) -> None:
        """Re-read the clock now (tests call this after moving a fake clock)."""
        if self.timer is not None:
            self.timer.cancel()
        self._on_timer()

    def _log_clock_errors(self) -> None:
        errors = self.core.clock_errors
        while errors:
            log_clock_failure(errors.pop(0))

    # -- 6. closing ---------------------------------------------------------------------------

    def close(self, cancel_futures: bool) -> None:
        """Refuse new work; cancel what is queued if asked; a paused scheduler resumes."""
        self.core.stopping = True
        self.halted = False
        if cancel_futures:
            self.cancel_queued()
        self.core.paused = False
        self.pump()

    def cancel_queued(self) -> None:
        core = self.core
        drained = core.drain("cancelled")
        for entry in drained:
            self._discard(entry).cancel()
        core.settled(len(drained))
        self._apply(core.take_todo())

    def cancel_running(self) -> None:
        """Cancel every running task, also one whose future is already settled."""
        for task, future in list(self.active.items()):
            future.cancel()
            if future._running:  # a Task yet to begin finds its future cancelled
                task.cancel()

    def _expire_all(self, due: list[Entry]) -> None:
        """Expire the entries the core took out as due, and count them settled."""
        if due:
            for entry in due:
                self._expire(entry)
            self.core.settled(len(due))

    def _expire(self, entry: Entry) -> None:
        """Cancel the future of a task whose queue deadline passed, marked so, with its reason.

        The mark comes first: the future's awaiters and done-callbacks, which the loop runs
        later, find it expired (``_futures.expired``). A future its user settled after the
        task left the queue (from the clock, say) is counted as the user settled it.
        """
        future = self._discard(entry)
        if future.done():
            outcome = "cancelled" if future.cancelled() else "completed"
            self.core.tally.overtaken(entry.priority, outcome)
            return
        timeout = future._queue_timeout
        assert timeout is not None, "a task with no deadline expired"
        mark_expired(future)
        future.cancel(deadline_message(timeout))

    def _discard(self, entry: Entry) -> ScheduledFuture[Any]:
        """Detach an entry that will never start; close its coroutine object, if it has one.

        So a coroutine submitted as an object and never started raises no "never awaited"
        warning.
        """
        awaitable, args = entry.fn, entry.args
        future: ScheduledFuture[Any] = entry.detach()  # type: ignore[assignment]  # see submit
        future._owner = None
        if args is AWAIT:
            self.coroutines.discard(awaitable)
            awaitable.close()  # type: ignore[attr-defined]  # a coroutine, as AWAIT says
        return future

    def check_invariants(self) -> None:
        """Check the core's and the owner's invariants in O(n); for tests."""
        core = self.core
        core.check(len(core.queue) + core.running)
        assert not core.todo or self.pumping, "the core left something undone"
        assert len(self.active) <= core.running, "a Task runs that is not counted"
        assert core.running <= len(self.active), "a start is counted with no Task"
        if not core.paused:
            free = core.capacity - core.running
            assert free <= 0 or not core.startable() or self.pumping or self.halted, (
                "a slot is free while a task that may start waits"
            )
        earliest = core.next_deadline()  # a deadline, or a rate slot tasks wait for
        live = self.running_until
        runs = [deadline for deadline, run_id in self.run_deadlines if run_id in live]
        assert len(runs) == len(live), "a running task's run deadline is lost"
        if runs and (earliest is None or min(runs) < earliest):
            earliest = min(runs)
        if earliest is not None:
            assert self.timer is not None, "deadlines pending without a timer"
            assert self.timer_at is not None, "a timer with no target"
            assert self.timer_at <= earliest, "the timer would fire past a deadline"


if sys.version_info >= (3, 11):

    def _cancelled_from_outside() -> bool:
        """The running Task (ours) had a ``cancel()`` of its own, as ``asyncio.run``'s end makes.

        Every cancel of ours goes through the task's future, which is cancelled first; a
        Task that ends with a CancelledError it raised itself (an awaited future was
        cancelled) has had no ``cancel()`` at all.
        """
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0

else:

    def _cancelled_from_outside() -> bool:
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


def _close_all(coroutines: set[Any]) -> None:
    """Close the coroutine objects still queued in a scheduler that is being collected."""
    for coroutine in coroutines:
        coroutine.close()


#: What ``submit`` accepts as ``fn``.
TaskFunction = Union[Callable[..., Awaitable[T]], Awaitable[T]]
