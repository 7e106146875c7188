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
import math
import weakref
from collections.abc import Callable, Hashable, Mapping
from types import CoroutineType
from typing import Any, Optional, TypeVar, Union

from ._aio_task import (
    AWAIT,
    RunDeadlines,
    ScheduledFuture,
    TaskFunction,
    cancelled_from_outside,
    close_all,
    close_coroutine,
    create_task,
    deadline_message,
    run_task,
    set_exception,
    set_result,
)
from ._claim import Outcome
from ._core import SHRUNK, TIMER, Core
from ._futures import mark_expired
from ._limits import Limits
from ._policy import Number, WhenFull, describe
from ._queue import NO_KWARGS, Entry
from ._timer import CLOCK_RETRY, log_clock_failure

T = TypeVar("T")


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
        weakref.finalize(self, close_all, self.coroutines)
        self.unrun: list[Entry] = []  # what pump()'s takes found expired, for it to cancel
        self.timer: Optional[asyncio.TimerHandle] = None
        self.timer_at: Optional[float] = None  # on the scheduler's clock
        self.idle: list[asyncio.Future[bool]] = []  # join() waiters, woken once quiet
        self.runs = RunDeadlines()
        self.on_abandoned = self.abandoned  # one bound method, added to and removed from Tasks

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
        if core.slot_free():
            self.pump()
        return future

    # -- 2. start -----------------------------------------------------------------------------

    def pump(self) -> None:
        """Start the best queued tasks while the core lets them: the one place a task starts."""
        if self.pumping:
            return
        if self.halted:  # start nothing; what the core left to do is done all the same
            if self.core.todo:
                self._apply(self.core.take_todo())
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
                self._expire_all(expired)
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
        coro = run_task(self, future, fn, args, kwargs)
        try:
            task = create_task(loop, coro, future._context)
        except Exception as exc:  # a task factory that raised, say
            future._owner = future._entry = None
            coro.close()
            self.drop_unrun(fn, args)
            if not future.done():
                set_exception(future, exc)
            self.core.finish("failed", entry)
            return
        if task.done():
            return  # an eager task factory ran it to its end, settled, inside create_task
        future._task = task
        self.active[task] = future
        if not future._running:  # see _run
            task.add_done_callback(self.on_abandoned)
        if future._run_timeout is not None:
            future._run_deadline = None
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
            future._run_deadline = loop.call_later(timeout, future._time_out)
            return
        self.runs.add(future, started + timeout)
        self.arm()

    def _end_run(self, future: ScheduledFuture[Any]) -> None:
        """A task with a ``run_timeout`` ended: forget its timer or its run deadline."""
        deadline, future._run_deadline = future._run_deadline, None
        if isinstance(deadline, int):
            self.runs.remove(deadline)
        elif deadline is not None:
            deadline.cancel()

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
            set_result(future, result)
            outcome = "completed"
        elif isinstance(error, asyncio.CancelledError):
            future.cancel()  # its owner is gone: this settles it, and does nothing else
            outcome = "cancelled"
            if cancelled_from_outside():
                self._halt()
        else:
            set_exception(future, error)
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
        if future is None or future._running:
            return
        entry = future._entry
        if entry is not None:
            self.drop_unrun(entry.fn, entry.args)
        self._halt()
        self.ended(future, asyncio.CancelledError(), None)

    def _halt(self) -> None:
        """A Task of ours was cancelled from outside: start nothing until the next call.

        Not while ``join()`` waits: that call is under way, and it would wait for ever.
        """
        if not self.idle:
            self.halted = True

    # -- 4. cancel ----------------------------------------------------------------------------

    def cancelled(self, future: ScheduledFuture[Any]) -> None:
        """``future`` was cancelled by its user: unqueue its task, or cancel its Task."""
        if future._entry is None:
            self.unqueue(future, "cancelled")
        elif future._running and future._task is not None:
            future._task.cancel()  # its slot is freed when the coroutine ends

    def unqueue(self, future: ScheduledFuture[Any], outcome: Outcome) -> None:
        """Take out the task of a future settled while queued, by a cancel or by hand
        (``outcome``: ``"cancelled"`` or ``"completed"``)."""
        core = self.core
        entry = core.unqueue(future, outcome)  # type: ignore[arg-type]  # see submit
        if entry is not None:
            self._discard(entry)
        if core.todo:
            self._apply(core.take_todo())

    # -- 5. time ------------------------------------------------------------------------------

    def arm(self) -> None:
        """Have the timer fire by the next deadline, run deadline or rate slot, if it would
        fire later."""
        when = self.core.next_deadline()
        run = self.runs.next()
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
        if self.runs.live:
            self.runs.time_out(now)
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
        for error in self.core.take_clock_errors():
            log_clock_failure(error)

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
        fn, args = entry.fn, entry.args
        future: ScheduledFuture[Any] = entry.detach()  # type: ignore[assignment]  # see submit
        future._owner = None
        self.drop_unrun(fn, args)
        return future

    def drop_unrun(self, fn: Any, args: tuple[Any, ...]) -> None:
        """A task that will never run: close its coroutine object, if it is one (``args`` is
        ``AWAIT``), so that it never warns "never awaited"."""
        if args is AWAIT:
            self.coroutines.discard(fn)
            fn.close()

    def check_invariants(self) -> None:
        """Check the core's and the owner's invariants in O(n); for tests."""
        core = self.core
        core.check(len(core.queue) + core.running)
        assert not core.todo or self.pumping, "the core left something undone"
        assert len(self.active) <= core.running, "a Task runs that is not counted"
        assert core.running <= len(self.active), "a start is counted with no Task"
        if not core.paused and core.slot_free():
            assert not core.startable() or self.pumping or self.halted, (
                "a slot is free while a task that may start waits"
            )
        earliest = core.next_deadline()  # a deadline, or a rate slot tasks wait for
        earliest = self.runs.check(earliest)
        if earliest is not None:
            assert self.timer is not None, "deadlines pending without a timer"
            assert self.timer_at is not None, "a timer with no target"
            assert self.timer_at <= earliest, "the timer would fire past a deadline"
