"""The asyncio scheduler's core: the package's backlog, run on one event loop's thread.

:class:`AsyncCore` is a :class:`~._backlog.Backlog` (the queue, its orderings, ageing, the
limits and the counts, shared with the thread pool) whose owner is an event loop. Every call
is made on the loop's thread, so it needs no lock; it has no thread and no timer thread of
its own, only one ``loop.call_later`` handle for the next deadline or rate slot. No user code
runs inside its bookkeeping: a coroutine runs in its own Task, and a future's done-callbacks
are scheduled by the loop (``call_soon``), never called from here.

The flows
---------
1. **Submit.** :meth:`AsyncCore.submit` makes a :class:`ScheduledFuture` and its ``Entry``,
   stamps it (``Backlog.stamp_locked``), makes room (``Room``), queues it, arms the timer for
   its deadline and pumps.
2. **Start.** :meth:`AsyncCore.pump` is the one place a task leaves the queue to start: while
   fewer than ``concurrency`` tasks run it calls ``Backlog.take_locked`` and starts a Task for
   what it took (:meth:`AsyncCore._start`). The start is counted (``running``) before the Task
   exists, so an eager task factory, which runs the coroutine inside ``create_task``, finds
   it counted; a submit from that coroutine queues, and the pump already running takes it.
3. **Settle.** The Task's done-callback (:meth:`AsyncCore.reap`) settles the future from the Task
   (whose exception is always retrieved), reports the outcome (``finished_locked``) and pumps:
   a slot is freed only when the coroutine has really finished.
4. **Cancel.** :meth:`ScheduledFuture.cancel` settles the future at once; a queued task then
   leaves the queue in O(1) (``unqueue_locked``) and never starts, a running one has its Task
   cancelled, and its slot stays taken until the coroutine ends.
5. **Time.** :meth:`AsyncCore._on_timer` expires what the clock has passed and opens rate
   slots (``pop_due_locked``), times out the running tasks past their ``run_timeout``
   (``run_deadlines``), re-arms for the next, and pumps. Both kinds of deadline are on the
   scheduler's clock; the handle waits the difference on the loop's. Every expiry (there,
   at a submit with ``timeout=0``, or at a take that finds a task due) goes through
   :meth:`AsyncCore._expire`, which marks the future expired, then cancels it with
   :func:`deadline_message`.

Every accepted task is in exactly one place: ``submitted == completed + failed + cancelled +
expired + queued + running`` (:meth:`AsyncCore.check_invariants`: "lost task").
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
from types import FunctionType
from typing import Any, Optional, TypeVar, Union

from ._backlog import Backlog
from ._claim import Outcome
from ._futures import EXPIRED_MARK, mark_expired
from ._limits import Limits
from ._policy import Number, WhenFull, describe, is_due
from ._queue import NO_KWARGS, Entry
from ._room import Room
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
        "_core",
        "_entry",
        "_queue_timeout",
        "_run_id",
        "_run_timeout",
        "_task",
        "_timed_out",
        "_timer",
    )

    _core: Optional[AsyncCore]  # None once the scheduler is done with it
    _context: contextvars.Context  # the context of the submit, for the Task
    _queue_timeout: Optional[float]  # its submit's timeout, for the CancelledError's message
    _run_timeout: Optional[float]
    _entry: Optional[Entry]  # set (detached) when it starts: its key, priority and times
    _task: Optional[asyncio.Task[Any]]  # its Task, once made
    _run_id: Optional[int]  # its entry in the core's run deadlines, while it runs
    _timer: Optional[asyncio.TimerHandle]  # its run_timeout on the loop's clock (see _start)
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
        core = self._core
        if core is not None:
            core.cancelled(self)
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
        core = self._core
        if core is not None and self._entry is None:  # queued; a running one runs on
            core.unqueue(self, cancelled=False)

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
        task.cancel()


def deadline_message(timeout: float) -> str:
    """The message of the CancelledError of a task whose queue deadline passed."""
    return f"queue deadline passed after {timeout} s"


#: Settle a scheduled future as the scheduler does, past its by-hand hooks.
_set_result = asyncio.Future.set_result
_set_exception = asyncio.Future.set_exception


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """The coroutine of a started task's Task: call ``fn`` there, in the submit's context."""
    awaitable = fn(*args, **kwargs)
    if not inspect.isawaitable(awaitable):
        raise TypeError(
            f"fn must return an awaitable, got {describe(awaitable)}: for a blocking function,"
            " use loop.run_in_executor(pool.options(...), fn) with a PriorityThreadPoolExecutor"
        )
    return await awaitable


if sys.version_info >= (3, 11):

    def _create_task(
        loop: asyncio.AbstractEventLoop, coro: Any, context: contextvars.Context
    ) -> asyncio.Task[Any]:
        return loop.create_task(coro, context=context)

else:

    def _create_task(
        loop: asyncio.AbstractEventLoop, coro: Any, context: contextvars.Context
    ) -> asyncio.Task[Any]:
        return context.run(loop.create_task, coro)  # the Task copies the context it runs in


class AsyncCore(Backlog):
    """The backlog of one ``AsyncPriorityScheduler``; see the module docstring."""

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
        super().__init__(
            clock=clock, ageing=ageing, limits=limits, room=Room(None, max_queued, when_full)
        )
        self.concurrency = concurrency
        self.run_timeout = run_timeout
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.active: dict[asyncio.Task[Any], ScheduledFuture[Any]] = {}  # by running Task
        self.pumping = False  # pump() is taking: a pump called meanwhile leaves it to it
        # A Task of ours was cancelled from outside the scheduler, as asyncio.run cancels
        # every task when its main coroutine returns: start nothing in its place until the
        # scheduler is called again (see held_locked), or a Task created in the loop's
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
        self.limits_changed_locked()

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
            self.loop is None or (self.loop.is_closed() and self.quiet_locked())
        ):
            self.loop, self.timer, self.timer_at = loop, None, None
            return loop
        raise RuntimeError(
            f"{what} must be called on the event loop the scheduler runs on; from another"
            " thread or loop, use asyncio.run_coroutine_threadsafe(scheduler.run(...), loop)"
        )

    # -- 1. submit ----------------------------------------------------------------------------

    def check_accepting_locked(self, priority: Number, view_state: Any = None) -> None:
        """Refuse new work once closing, as the standard pool does after shutdown."""
        if self.stopping:
            self.tally.add("rejected", priority)
            raise RuntimeError("cannot schedule new futures after shutdown")

    def is_own_thread_locked(self, thread: object) -> bool:
        return False  # for Room: a submit here never blocks ("block" is refused when made)

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
        """Queue a task whose options are checked; ``args`` is ``AWAIT`` for a coroutine."""
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
        future._core, future._context = self, contextvars.copy_context()
        future._run_timeout, future._entry = run_timeout, None
        future._queue_timeout = timeout
        future._task = future._timer = None
        future._timed_out = False
        # The queue holds thread-pool futures by type; it only hashes them and asks done().
        entry = Entry(future, fn, args, kwargs or NO_KWARGS, priority, None, key)  # type: ignore[arg-type]
        try:
            if self.stopping:
                self.check_accepting_locked(priority)
            rank, expired = self.stamp_locked(entry, timeout)
            evict = None
            if (
                self.room.max_queued is not None
                and not expired
                and self.room.full_locked(self.queue)
            ):
                due = self.room_of_due_locked(entry.queued_at)
                for late in due:
                    self._expire(late)
                if due:
                    self.settled_locked(len(due))
                if self.room.full_locked(self.queue):
                    evict, _ = self.room.make_room_locked(self, entry, rank, None)
        except BaseException:
            self._discard(entry)
            raise
        self.tally.submitted += 1
        if expired:
            self.tally.add("expired", priority)
            self._expire(entry)
            return future
        if evict is not None:
            self.queue.remove(evict)
            self.tally.evicted(evict.priority)
            self._discard(evict).cancel()
        self.queue.push(entry, rank)
        if args is AWAIT:
            self.coroutines.add(fn)
        self.halted = False
        if entry.deadline is not None or self.limits.timed:
            self.arm()
        if self.running < self.concurrency:
            self.pump()
        return future

    # -- 2. start -----------------------------------------------------------------------------

    def pump(self) -> None:
        """Start the best queued tasks while slots are free: the one place a task starts."""
        if self.pumping or self.halted:
            return
        self.pumping = True
        unrun = self.unrun
        try:
            while self.running < self.concurrency:
                entry = self.take_locked(unrun)
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
                self.settled_locked(len(expired))
            if self.clock_errors:
                self._log_clock_errors()

    def _start(self, entry: Entry) -> None:
        """Start a Task for a task taken from the queue, counted ``running``."""
        future: ScheduledFuture[Any] = entry.future  # type: ignore[assignment]  # see submit
        if future.done():  # its result was set by hand while it was queued
            self._discard(entry)
            self.finished_locked("cancelled" if future.cancelled() else "completed", entry)
            return
        loop = self.loop
        assert loop is not None
        fn, args, kwargs = entry.fn, entry.args, entry.kwargs
        if args is AWAIT:
            self.coroutines.discard(fn)
        entry.detach()  # the future keeps what it needs: the entry's key, priority and times
        future._entry, future._run_id = entry, None
        coro: Any = None
        try:
            if args is AWAIT:
                coro = fn
            elif type(fn) is FunctionType and fn.__code__.co_flags & CO_COROUTINE:
                coro = fn(*args, **kwargs)  # an async def: calling it runs none of its code
            else:
                coro = _call(fn, args, kwargs)
            task = future._task = _create_task(loop, coro, future._context)
        except Exception as exc:  # a task factory that raised, say
            future._core = future._entry = None
            if inspect.iscoroutine(coro):
                coro.close()  # it will never run: no "never awaited" warning
            if not future.done():
                _set_exception(future, exc)
            self.finished_locked("failed", entry)
            return
        self.active[task] = future
        task.add_done_callback(self.reap)
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

    def reap(self, task: asyncio.Task[Any]) -> None:
        """A started task's Task is done: settle its future, free its slot, start the next."""
        future = self.active.pop(task)
        entry = future._entry
        assert entry is not None
        if future._timer is not None:
            future._timer.cancel()
        if future._run_id is not None:
            self._forget_run(future._run_id)
        future._core = future._entry = future._task = future._timer = future._run_id = None
        error = None if task.cancelled() else task.exception()  # retrieved, whatever comes
        outcome: Outcome
        if future._timed_out:
            outcome = "failed"  # it raised TimeoutError at its run_timeout
        elif future.cancelled():
            outcome = "cancelled"  # by its user, or by its own coroutine
        elif future.done():
            outcome = "completed"  # its result was set by hand while it ran
        elif task.cancelled():
            future.cancel()  # its core is gone: this settles it, and does nothing else
            outcome = "cancelled"
            if _cancelled_from_outside(task):
                self.halted = True
        elif error is None:
            _set_result(future, task.result())
            outcome = "completed"
        else:
            _set_exception(future, error)
            outcome = "failed"
        self.finished_locked(outcome, entry)
        if self.queue.entries:
            self.pump()

    # -- 4. cancel ----------------------------------------------------------------------------

    def cancelled(self, future: ScheduledFuture[Any]) -> None:
        """``future`` was cancelled by its user: unqueue its task, or cancel its Task."""
        if future._entry is None:
            self.unqueue(future, cancelled=True)
        elif future._task is not None:
            future._task.cancel()  # its slot is freed when the coroutine ends

    def unqueue(self, future: ScheduledFuture[Any], cancelled: bool) -> None:
        """Take out the task of a future settled while queued, by a cancel or by hand."""
        entry = self.unqueue_locked(future, cancelled)  # type: ignore[arg-type]  # see submit
        if entry is not None:
            self._discard(entry)

    # -- the hooks of the backlog --------------------------------------------------------------

    def opened_locked(self, now: float) -> None:
        """Keys or a rate slot opened: the pump that follows every call starts them."""

    def wake_timer_locked(self) -> None:
        self.arm()

    def shrunk_locked(self) -> None:
        if self.joiners and self.quiet_locked():
            for waiter in self.idle:
                if not waiter.done():
                    waiter.set_result(True)
            self.idle.clear()

    def emptied_locked(self) -> None:
        """Nothing to do: a closing scheduler's ``aclose()`` waits for quiet by ``join()``."""

    # -- 5. time ------------------------------------------------------------------------------

    def arm(self) -> None:
        """Have the timer fire by the next deadline, run deadline or rate slot, if it would
        fire later."""
        when = self.next_deadline_locked()
        run = self.next_run_deadline()
        if run is not None and (when is None or run < when):
            when = run
        if when is None or (self.timer_at is not None and self.timer_at <= when):
            return  # nothing to wait for, or an earlier call comes: it re-arms
        loop = self.loop
        assert loop is not None
        now = self.read_clock()
        delay = CLOCK_RETRY if isinstance(now, Exception) else max(0.0, when - now)
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = when
        self.timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        """Expire what is due, open the rate slots passed, re-arm, and start what may start."""
        self.timer = self.timer_at = None
        now = self.read_clock()
        if isinstance(now, Exception):
            log_clock_failure(now)
            loop = self.loop
            assert loop is not None
            self.timer_at = -math.inf  # any later arm() waits for this retry
            self.timer = loop.call_later(CLOCK_RETRY, self._on_timer)
            return
        due = self.pop_due_locked(now)
        for entry in due:
            self._expire(entry)
        if due:
            self.settled_locked(len(due))
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
        while self.clock_errors:
            log_clock_failure(self.clock_errors.pop(0))

    # -- 6. closing ---------------------------------------------------------------------------

    def close(self, cancel_futures: bool) -> None:
        """Refuse new work; cancel what is queued if asked; a paused scheduler resumes."""
        self.stopping = True
        self.halted = False
        if cancel_futures:
            self.cancel_queued()
        self.paused = False
        self.pump()

    def cancel_queued(self) -> None:
        drained = self.drain_locked("cancelled")
        for entry in drained:
            self._discard(entry).cancel()
        self.settled_locked(len(drained))

    def cancel_running(self) -> None:
        """Cancel every running task, also one whose future is already settled."""
        for task, future in list(self.active.items()):
            future.cancel()
            task.cancel()

    def _expire(self, entry: Entry) -> None:
        """Cancel the future of a task whose queue deadline passed, marked so, with its reason.

        The mark comes first: the future's awaiters and done-callbacks, which the loop runs
        later, find it expired (``_futures.expired``). A future its user settled after the
        task left the queue (from the clock, say) is counted as the user settled it.
        """
        future = self._discard(entry)
        if future.done():
            self.tally.overtaken(entry.priority, "cancelled" if future.cancelled() else "completed")
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
        future._core = None
        if args is AWAIT:
            self.coroutines.discard(awaitable)
            awaitable.close()  # type: ignore[attr-defined]  # a coroutine, as AWAIT says
        return future

    def check_invariants(self) -> None:
        """Check the backlog's and the core's invariants in O(n); for tests."""
        self.check_backlog(len(self.queue) + self.running)
        assert len(self.active) <= self.running, "a Task runs that is not counted"
        assert self.running <= len(self.active), "a start is counted with no Task"
        if not self.paused:
            assert self.running >= min(self.concurrency, self.running + self.waiting_locked()) or (
                self.pumping
            ), "a slot is free while a task that may start waits"
        earliest = self.next_deadline_locked()  # a deadline, or a rate slot tasks wait for
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

    def _cancelled_from_outside(task: asyncio.Task[Any]) -> bool:
        """A ``cancel()`` of the Task itself, as ``asyncio.run``'s end makes: not of ours.

        Every cancel of ours goes through the task's future, which is cancelled first; a
        Task that ends with a CancelledError it raised itself (an awaited future was
        cancelled) has had no ``cancel()`` at all.
        """
        return task.cancelling() > 0

else:

    def _cancelled_from_outside(task: asyncio.Task[Any]) -> bool:
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
