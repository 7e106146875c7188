"""Admission: everything a task meets from ``submit`` until it starts, and the pool's lock.

A pool is two objects, wired together by its public class: an :class:`Admission`, which owns the
queue, the deadlines, backpressure, the counts and the pool's one lock, and a *runner*
(:class:`Runner`), which starts tasks: ``_threads.ThreadRunner`` with worker threads, or
``_dispatch.DelegateRunner``, which hands them to another executor. Admission starts nothing
itself. It tells the runner when tasks wait, and the runner calls :meth:`Admission.take_locked`,
the one place where a task leaves the queue to start. Neither holds a reference to the public
executor: the pool's threads must not keep it alive, or a pool dropped without ``shutdown()``
would never be collected and its threads never exit.

The policy itself (the ordering, ageing, ``max_queued``, capacity, the limits, the take, the
counts) is a :class:`~._core.Core`, ``Admission.core``, the component the asyncio scheduler
composes too; Admission adds what threads need: the lock, the timer thread, the wait of a
blocking submit (``Room``), the jump window (``yield_until``), the callback threads and the
runner. Every core call is made under the lock. A core call that leaves work for the owner
(``Core.todo``: wake takers, re-arm the timer, wake waiters) is followed, still under the
lock, by :meth:`Admission.act_locked`, which does it; so the owner's calls that wrap one
(:meth:`take_locked`, :meth:`finished_locked`, :meth:`settled_locked`, :meth:`drain_locked`,
:meth:`pop_due_locked`) are what the runner and the settler call. A worker thread's turn
(``_threads.ThreadRunner._turn_locked``) inlines the first two, in one hold of the lock.

The lock
--------
``Admission.lock`` is the pool's only lock. The runner, the timer, the callback threads and
backpressure (``Room``) use it; none keeps a copy, since ``after_fork_in_child`` replaces it.

- Guarded: the core (its queue and every queued ``Entry``, ``running``, ``settling``,
  ``undecided``, ``evicted``, ``clock_errors``, ``paused``, ``stopping``, ``tally``,
  ``fast_submit``, ``watchers``, ``todo``, ``capacity`` and the state of its limits,
  ``_limits.Limits``); ``shutdown``, ``broken``, ``broken_error``, ``joiners``,
  ``yield_until``; the room, the timer, the callback threads and the runner.
- Fixed after construction: ``broken_type``, ``name``, and the core's ``clock``, ``ageing``,
  ``max_queued`` and ``when_full``. The rate and key limits and the runner's size (the
  core's ``capacity``) change only under the lock (``Core.change_limit``,
  ``Runner.resize_locked``).
- ``core.watchers`` is ``room.blocked + joiners``, changed with them in one statement: the
  core asks for a wake-up (``SHRUNK``) from its hot paths only while someone waits for one.
- Lock order: it may be held while a Future's own lock is taken (only to read or claim it,
  which runs no callback), never the reverse; no other lock of the package is taken while it
  is held. Park locks (an idle worker's, the timer's) are only released under it.
- No user code runs while it is held: not a task, an initializer, a done-callback (those run
  inside ``Future.cancel``, ``set_result`` and ``set_exception``) or a logging handler. The one
  exception is the clock, read under the lock so that one reading decides each deadline
  race; it must be a plain function of time, like ``time.monotonic``.
- Every ``*_locked`` method, and every call of the core, is made with it held and never
  blocks (but ``Room.wait_locked`` and ``Room.sleep_locked``, which wait on a Condition of
  this lock). What must happen after unlocking (a claim, a cancel, ``Thread.start``) is
  listed under the lock and done by the caller after. The lists (the core's ``evicted`` and
  ``clock_errors``, the runner's ``unstarted``) are read as hints without the lock, so that
  if an exception cuts the caller short, the next ``submit``, ``join()`` or ``shutdown()``
  finishes the job.
- It is taken by a ``with`` statement, except on the hot paths (``submit``, a worker's
  turn, a front's report of a task that ended): see ``_lock.py``.

The flows
---------
1. **Submit to start.** :meth:`submit` makes the Future and its ``Entry`` and, under the lock,
   :meth:`_admit_locked` checks the pool accepts work (:meth:`check_accepting_locked`), ranks
   the entry (``Core.stamp``), applies backpressure (``Core.make_room``, and
   ``Room.wait_locked`` for "block") and signals the timer for an earlier deadline;
   :meth:`_accept_locked` then queues and counts it and calls ``Runner.queued_locked``: the
   commit, ordered so that if an asynchronous exception cuts it, :meth:`_resync_locked` makes
   the state consistent again from the queue (``queue.entries`` maps what is queued).
   After unlocking, ``Runner.start_pending`` starts a thread counted in, and
   ``Settler.settle_deferred`` cancels an evicted task.
2. **Start.** The runner calls :meth:`take_locked`: the best entry that every limit allows
   (``_limits.py``; under key limits the queue is a ``_keyed.KeyedQueue``), counted
   ``running``; an entry found past its deadline on the way is counted expired, for the
   runner to cancel. The runner reports the task's key back with its outcome
   (:meth:`finished_locked`, ``Core.finish``), which may open the key for the next take.
3. **Run to settle.** The runner claims the future outside the lock (``_claim.run``), runs the
   task, settles the future, and reports the outcome by :meth:`finished_locked`.
4. **Cancel.** ``Future.cancel()`` runs :meth:`_on_done`, every future's first done-callback,
   which unqueues the entry under the lock (``Core.unqueue``) and then wakes ``wait()`` by
   the claim step.
5. **Expire, and rate slots.** The timer calls :meth:`pop_due_locked` (``Core.pop_due``), which
   opens what the clock's reading lets start (a rate slot, a key's window) and wakes the
   runner for it, then
   :meth:`settle_expired`, which cancels every due future before any callback runs, hands
   callbacks to callback threads, and starts the threads the runner counted in.
6. **Shutdown.** :meth:`stop` sets the flags, drains the queue if cancelling, and has the
   runner wake every idle thread; :meth:`join` waits for the runner's threads, the timer and
   the callback threads.

Every accepted task is in exactly one place: ``submitted == completed + failed + cancelled +
expired + taken + queued + running + undecided`` (``check_invariants``: "lost task").
"""

from __future__ import annotations

import copy
import math
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Generic, Literal, Optional, TypeVar, Union

from . import _lifecycle
from ._callbacks import CallbackRunner
from ._claim import LOGGER, Outcome, cancel_all, claim
from ._core import EMPTIED, OPENED, SHRUNK, TIMER, Core
from ._futures import add_first_callback, is_cancelled
from ._limits import Limits
from ._listeners import Listeners
from ._lock import acquire_politely, jump_window, yield_in_window
from ._policy import Number, WhenFull, is_due, strict_rank
from ._queue import NO_KWARGS, Entry, ViewState
from ._room import Room
from ._runner import Runner
from ._settle import Settler
from ._timer import CLOCK_RETRY, DeadlineTimer


def error_template(error: BaseException) -> Optional[BaseException]:
    """A copy of ``error`` for a broken pool to raise, or None if it cannot be copied.

    Made without the pool's lock (copying runs the error's class's code), and without the
    traceback, which would keep the frames it went through alive, and with them the
    arguments of the task that met the error, for as long as the pool lives.
    """
    try:
        template = copy.copy(error)  # its type, arguments and attributes
    except Exception:
        return None
    if type(template) is not type(error):
        return None
    template.__traceback__ = template.__cause__ = template.__context__ = None
    return template


RunnerT = TypeVar("RunnerT", bound=Runner)


class Admission(Generic[RunnerT]):
    """The queue, its rules and the pool's lock; see the module docstring."""

    def __init__(
        self,
        *,
        name: str,
        clock: Callable[[], float],
        broken_type: type[BaseException],
        ageing: Optional[float],
        max_queued: Optional[int],
        when_full: WhenFull,
        limits: Limits,
        make_runner: Callable[[Admission[RunnerT]], RunnerT],
    ) -> None:
        self.lock = threading.Lock()
        self.quiet = threading.Condition(self.lock)  # join(): nothing queued, running, settling
        # The runner sets ``capacity``, its size; until then it is unbounded.
        self.core = Core(
            clock=clock,
            ageing=ageing,
            limits=limits,
            capacity=math.inf,
            max_queued=max_queued,
            when_full=when_full,
        )
        self.room = Room(self.lock)
        self.joiners = 0  # join() calls waiting for quiet
        # A task went ahead of queued ones and no take has happened since: until this
        # monotonic time, submitters yield the GIL (see "Queue jumps" in _lock.py); 0.0 for
        # none. A hint, also read without the lock.
        self.yield_until = 0.0
        self.name = name
        self.broken_type = broken_type
        self.shutdown = False
        self.broken: Union[Literal[False], str] = False  # or the message broken_type takes
        self.broken_error: Optional[BaseException] = None  # see break_locked
        self.listeners = Listeners(lambda: self.lock, clock)
        self.timer = DeadlineTimer(self)
        self.callbacks = CallbackRunner(self, name)
        self.settler = Settler(self)
        self.owner_ref: Optional[weakref.ReferenceType[Any]] = None  # see AdmissionControl.adopt
        self.on_done = self._on_done  # one bound method for every future, not one per submit
        self.runner = make_runner(self)

    # -- 1. submit -------------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        timeout: Optional[float],
        view_state: Optional[ViewState] = None,
    ) -> Future[Any]:
        """Queue a task whose arguments the front has checked; ``view_state``: its view's."""
        future: Future[Any] = Future()
        # No empty dict per queued task: they add up, with millions queued.
        key = None if view_state is None else view_state.key
        entry = Entry(future, fn, args, kwargs or NO_KWARGS, priority, None, key, view_state)
        add_first_callback(future, self.on_done)
        lock = self.lock
        if not lock.acquire(False):
            acquire_politely(lock)
        try:
            self._admit_locked(entry, timeout, view_state)
        finally:
            lock.release()
        try:
            if self.runner.unstarted:  # hints, taken under the lock
                self.runner.start_pending(entry)
        finally:
            if self.core.evicted:
                self.settler.settle_deferred()
        if self.yield_until:  # a hint: see "Queue jumps" in _lock.py
            yield_in_window(self.yield_until)
        return future

    def _admit_locked(
        self, entry: Entry, timeout: Optional[float], view_state: Optional[ViewState]
    ) -> None:
        """Check, rank and queue (or expire, or make room for) a new entry."""
        core = self.core
        self.check_accepting_locked(entry.priority, view_state)
        if core.fast_submit and timeout is None and core.ageing is None:
            core.arrived(entry)  # the common case: no deadline, no bound, no limit
            self._accept_locked(entry, strict_rank(entry.priority), False, None)
            return
        rank, expired = core.stamp(entry, timeout)
        evict = None
        if not expired and core.full():
            self._await_due_locked(entry, view_state)
        if not expired and core.full():
            evict, expired = self._make_room_locked(entry, rank, view_state)
        if not expired and self.timer.needs_signal_locked(entry.deadline):
            self.timer.signal_locked(entry.deadline)  # may raise: nothing changed yet
        elif core.limits.timed:  # the timer wakes takers at rate slots
            self.timer.start_locked()  # may raise: nothing changed yet
            self.wake_timer_locked()  # a slot it stopped waiting for with nothing queued
        self._accept_locked(entry, rank, expired, evict)

    def _await_due_locked(self, entry: Entry, view_state: Optional[ViewState]) -> None:
        """Let the timer expire the queued tasks past their deadlines at the clock reading of
        a submit that found the queue full (``entry``'s), before that submit's room is decided.

        Such a task waits no more, even if the timer has not yet had its turn: it makes room
        as expired, rather than have the new task refused, or evict it (which would leave it
        unmarked). The timer stays the one that expires queued tasks, so a submit interrupted
        meanwhile has changed nothing; this waits for the timer's turn, which runs no user
        code, and at most ``CLOCK_RETRY`` seconds, as late as a timer whose clock raised
        retries. The pool (or the view of ``view_state``) may shut down meanwhile: then it
        raises what a submit after shutdown raises.
        """
        now = entry.queued_at
        core, timer = self.core, self.timer
        while (
            core.full()
            and core.queue.deadline_count
            and is_due(core.queue.next_deadline(), now)
            and timer.thread is not None
            and timer.thread is not threading.current_thread()  # a callback it ran late
        ):
            timer.wake_locked()
            # Counted blocked, so that the timer's turn, as it shrinks the queue, wakes this.
            woken = self.room.sleep_locked(core, CLOCK_RETRY)
            self.check_accepting_locked(entry.priority, view_state)
            if not woken:
                return

    def _make_room_locked(
        self, entry: Entry, rank: Number, view_state: Optional[ViewState]
    ) -> tuple[Optional[Entry], bool]:
        """Apply ``when_full`` for ``entry`` on a full queue: (the entry to evict, expired).

        The entry to evict is still queued: the caller removes it once nothing else can fail.
        ``expired``: its deadline passed while its submit waited for room ("block").
        """
        evict = self.core.make_room(entry, rank)  # raises for "raise" or a failed "evict"
        if evict is not None:
            return evict, False
        return None, self.room.wait_locked(self, entry, view_state)

    def _accept_locked(
        self, entry: Entry, rank: Number, expired: bool, evict: Optional[Entry]
    ) -> None:
        """Count and queue a checked entry: the commit, the only step of submit that changes state.

        Its statements are ordered so that wherever an asynchronous exception (a signal
        handler's) cuts it, one :meth:`_resync_locked` makes the state consistent again, before
        the exception goes on: ``evict`` leaves ``queue.entries`` first, ``push`` maps the
        entry last.
        """
        core = self.core
        queue, tally = core.queue, core.tally
        evictions = 0 if evict is None else tally.evictions(evict.priority)
        try:
            if expired:
                self._expire_locked(entry)
                return
            if evict is not None:
                queue.remove(evict)
                tally.evicted(evict.priority)
                core.evicted.append(evict)
            jumps = queue.push(entry, rank)
            tally.submitted += 1
            if not core.paused:
                if jumps and not self.yield_until:
                    self.yield_until = jump_window()
                waiting = len(queue.entries)
                if core.limits.any_set:
                    waiting = core.startable()
                self.runner.queued_locked(waiting)
        except BaseException:
            self._resync_locked(entry, expired, evict, evictions)
            raise

    def _expire_locked(self, entry: Entry) -> None:
        """Count a new entry expired at its submit (``timeout=0``, or a block that ran out)."""
        tally = self.core.tally
        tally.add("expired", entry.priority)
        tally.submitted += 1
        # No one has seen this future yet: it has no waiter and no callback but the pool's
        # own, which has nothing to do. So it is settled here.
        cancel_all([entry.future], expired=True)

    def _resync_locked(
        self, entry: Entry, expired: bool, evict: Optional[Entry], evictions: int
    ) -> None:
        """Make the state consistent again after an asynchronous exception cut the commit.

        The queue is the truth: an entry is queued iff ``queue.entries`` maps it. The submit
        raises, so ``entry`` leaves the queue if it got there (an expired one is cancelled,
        counted or not); ``evict``, if it left ``queue.entries``, stays evicted, counted once
        (``evictions``: its class's count before the commit) and listed for its settler.
        What derives from that is made again: the queue's own counts (``repair``),
        ``submitted`` from where every task is, and the runner's threads (a thread counted
        in part-way is written off; one counted in whole takes what is queued). The jump
        window, a hint, closes.
        """
        core = self.core
        queue, tally = core.queue, core.tally
        queue.repair(*(e for e in (entry, evict) if e is not None))
        if entry.queued:
            queue.remove(entry)
        if evict is not None and not evict.queued:
            if tally.evictions(evict.priority) == evictions:
                tally.evicted(evict.priority)
            if evict not in core.evicted:
                core.evicted.append(evict)
        if expired and not entry.future.done():
            cancel_all([entry.future], expired=True)
        tally.submitted = self.accounted_locked()
        self.runner.resync_locked()
        self.yield_until = 0.0
        self.shrunk_locked()

    def accounted_locked(self) -> int:
        """Every accepted task, counted where it is: settled, queued, running or undecided."""
        core = self.core
        return core.tally.ended() + len(core.queue) + core.running + core.undecided

    def check_accepting_locked(
        self, priority: Number, view_state: Optional[ViewState] = None
    ) -> None:
        """Raise what the standard pool raises, in its order, when no task may be queued.

        ``priority``: the refused task's, for the counts by class.
        """
        if self.broken:
            message: Optional[str] = None
        elif self.shutdown:
            message = "cannot schedule new futures after shutdown"
        elif _lifecycle.exiting:
            message = "cannot schedule new futures after interpreter shutdown"
        elif view_state is not None and view_state.closed:
            message = "cannot schedule new futures after shutdown"
        else:
            return
        self.core.reject(priority)
        if message is None:
            if self.broken_error is None:
                raise self.broken_type(self.broken)
            # The same template each time; its traceback is the one of this raise only.
            raise self.broken_error.with_traceback(None)
        raise RuntimeError(message)

    def withdraw_locked(self, entry: Entry) -> bool:
        """Undo the submit of ``entry`` if it is still queued (no thread could start for it)."""
        core = self.core
        if core.queue.find(entry.future) is not entry:
            return False
        core.queue.remove(entry)
        core.tally.submitted -= 1
        self.shrunk_locked()
        return True

    def start_thread(
        self,
        unstarted: list[threading.Thread],
        entry: Optional[Entry],
        write_off_locked: Callable[[threading.Thread], bool],
    ) -> Optional[threading.Thread]:
        """Start one of a runner's threads counted in under the lock; call without it.

        ``start()`` may fail ("can't start new thread"), or be interrupted by a signal after
        the thread began. Either way the runner writes the thread off under the lock
        (``write_off_locked``; if the thread runs after all, it finds that out and exits at
        once), and says whether it is left with no thread at all. If it has one, that one
        runs the queued work and a failure to start is absorbed. If not, the submit that
        queued ``entry`` is withdrawn and the error raised, as the standard pool raises it.
        An interrupt is always raised again.

        Returns:
            The thread started, or None if none was left to start (or a failure absorbed).
        """
        thread = None
        try:
            # Taken inside the try, so that whatever interrupts this thread from here on,
            # the thread is either started or written off, never left counted in for ever.
            with self.lock:
                if not unstarted:
                    return None
                thread = unstarted.pop()
            thread.start()
        except BaseException as exc:
            if thread is None:
                raise
            with self.lock:
                stranded = write_off_locked(thread)
                withdrawn = stranded and entry is not None and self.withdraw_locked(entry)
                if not stranded and isinstance(exc, Exception):
                    return None
            if withdrawn:
                assert entry is not None
                entry.detach()  # its tombstone holds nothing of the task
            raise
        return thread

    # -- 2 and 3. start, and report --------------------------------------------------------

    def take_locked(self, unrun: list[Entry], as_work_queue: bool = False) -> Optional[Entry]:
        """``Core.take``, the one place a task leaves the queue to start, and what follows.

        A task taken closes the jump window: it is the best one queued, or better.
        """
        core = self.core
        entry = core.take(unrun, as_work_queue)
        if entry is not None:
            self.yield_until = 0.0
        if core.todo:
            self.act_locked()
        return entry

    def finished_locked(self, outcome: Outcome, entry: Entry, keyed: bool = True) -> None:
        """``Core.finish``: a task taken by :meth:`take_locked` ran (or a cancel won its claim)."""
        core = self.core
        core.finish(outcome, entry, keyed)
        if core.todo:
            self.act_locked()

    def finished_later_locked(self, outcome: Outcome, entry: Entry, keyed: bool = True) -> None:
        """:meth:`finished_locked` for a future settled after unlocking, by :meth:`settled_locked`.

        ``join()`` waits for it until then, callbacks included.
        """
        core = self.core
        core.finish(outcome, entry, keyed)
        core.settling += 1
        if core.todo:
            self.act_locked()

    def drop_locked(self, entry: Entry, outcome: Outcome, unrun: list[Entry]) -> None:
        """A task taken as ``_work_queue`` takes it will not run: count it for the caller."""
        self.finished_later_locked(outcome, entry, keyed=False)
        unrun.append(entry)

    def drained_locked(self) -> bool:
        """True once the pool is stopping with nothing queued: a runner's threads may exit."""
        if not self.core.stopping or self.core.queue:
            return False
        self.timer.wake_locked()  # it may exit too, once no deadline is left
        return True

    def break_locked(self, message: str, error: Optional[BaseException] = None) -> list[Entry]:
        """Break the pool (an initializer failed, a delegate refused): refuse work from now on.

        Args:
            message: what ``_broken`` shows, and the argument of ``broken_type`` that a
                later submit raises.
            error: what later submits raise instead, if given: a delegate's
                ``BrokenProcessPool``, say, as :func:`error_template` copies it.

        Returns:
            The queued entries, for :meth:`Settler.fail` after unlocking, which counts them.
        """
        self.broken, self.broken_error = message, error
        return self.drain_locked(None)

    # -- what the core leaves to its owner (Core.todo) -------------------------------------

    def act_locked(self) -> None:
        """Do what the core's calls since the last time left to the owner: see ``_core.py``."""
        core = self.core
        todo = core.take_todo()
        if todo & TIMER:
            self.wake_timer_locked()
        if todo & OPENED:
            self.opened_locked(core.opened_at)
        if todo & SHRUNK:
            self.shrunk_locked()
        if todo & EMPTIED:
            self.emptied_locked()

    def wake_timer_locked(self) -> None:
        """Have the timer wake when the clock next opens a start (a rate slot)."""
        wake = self.core.limits.next_wake()
        if self.timer.needs_signal_locked(wake):
            self.timer.signal_locked(wake)  # its thread runs: this starts none, cannot raise

    def opened_locked(self, now: float) -> None:
        """The clock opened keys or a rate slot at ``now``: get the takers for what may start.

        As many as may start now, not one per queued task: each slot would bring in
        threads up to max_workers for one start (and with idle_timeout, they would retire
        and be made again at the next slot).
        """
        core = self.core
        self.runner.resumed_locked(core.limits.allowed_locked(core.startable(), now))

    def shrunk_locked(self) -> None:
        """Wake who waits for the queue to shrink: blocked submits, and join() once quiet."""
        self.room.shrunk_locked()
        if self.joiners and self.core.quiet():
            self.quiet.notify_all()

    def emptied_locked(self) -> None:
        """A task left the queue unstarted: if that drained a stopping pool, wake its sleepers.

        Threads that a limit kept waiting for the last queued tasks would otherwise sleep on
        (a worker parked until a slot, the dispatcher, the timer) and ``shutdown(wait=True)``
        with them.
        """
        if self.core.stopping and not self.core.queue:
            self.runner.stop_locked()
            self.timer.wake_locked()

    # -- 4. cancel, and settling what left the queue unrun ---------------------------------

    def _on_done(self, future: Future[Any]) -> None:
        """Done-callback of every future: unqueue a task cancelled by its user, wake waiters.

        ``Future.cancel()`` does not wake ``wait()`` or ``as_completed()``; only the claim step
        does. Without this hook a cancelled task would keep its waiters asleep until a worker
        popped its entry, which, behind a stream of higher priorities, may be never.
        """
        # A future leaves ``entries`` only under the lock, when its task leaves the queue
        # (requeue() keeps it mapped throughout), and whoever removes it claims it; so if it
        # is absent here, someone else has claimed or will claim it. A stale "present" is
        # rechecked under the lock. Reading a dict without the lock is safe with or without
        # the GIL.
        core = self.core
        if future not in core.queue.entries:
            return
        cancelled = is_cancelled(future)
        with self.lock:
            entry = core.unqueue(future, "cancelled" if cancelled else "completed")
            if entry is None:
                return
            if core.todo:
                self.act_locked()
        entry.detach()  # its tombstone may stay in the queue a while; let it hold nothing
        if cancelled:
            claim(future, cancel=False)
        # Otherwise someone set a result on a queued future by hand; it is done, so dropping
        # its entry is all there is to do.

    def drain_locked(self, outcome: Optional[Outcome]) -> list[Entry]:
        """``Core.drain``: every queued entry out unrun, counted as ``outcome`` (None: later)."""
        drained = self.core.drain(outcome)
        self.act_locked()
        return drained

    def settled_locked(self, count: int) -> None:
        """``Core.settled``: ``count`` futures counted in ``settling`` are settled."""
        self.core.settled(count)
        self.act_locked()

    def evicted_settled_locked(self, entry: Entry) -> bool:
        """An evicted ``entry`` is settled: False if another thread settled it first."""
        evicted = self.core.evicted
        if entry not in evicted:
            return False
        evicted.remove(entry)
        self.shrunk_locked()
        return True

    # -- 5. the timer ----------------------------------------------------------------------

    def pop_due_locked(self, now: float) -> list[Entry]:
        """``Core.pop_due``: the timer's turn at ``now``; the due entries, for the settler."""
        due = self.core.pop_due(now)
        self.act_locked()
        return due

    def timer_done_locked(self) -> bool:
        """The timer may exit once no deadline or slot can come: stopping (and drained if timed)."""
        core = self.core
        return core.stopping and not (core.limits.timed and core.queue)

    def settle_expired(self, due: list[Entry]) -> None:
        """After a turn of the timer: settle what expired, start the threads it counted in."""
        if due:
            self.settler.expired(due)
        if self.runner.unstarted:
            try:
                self.runner.start_pending(None)
            except Exception:
                # No thread could start: the next submit tries again. The timer lives on.
                LOGGER.exception("could not start a thread for %s", self.name)

    # -- the pool's threads, and its invariants --------------------------------------------

    def is_own_thread_locked(self, thread: threading.Thread) -> bool:
        """A thread of the runner (also while it starts), the timer, or a callback thread."""
        return (
            self.runner.owns_locked(thread)
            or thread is self.timer.thread
            or self.callbacks.owns_locked(thread)
        )

    def check_invariants(self) -> None:
        """Check the queue's, admission's and the runner's invariants in O(n); for tests."""
        with self.lock:
            core = self.core
            core.check(len(core.queue) + core.running + core.undecided)
            assert not (self.yield_until and core.paused), "submitters yield to a paused pool"
            assert core.watchers == self.room.blocked + self.joiners, "watchers count is off"
            assert not core.todo, "the core left work undone"
            self.runner.check_locked()
            self.callbacks.check_locked()
            limits, queue = core.limits, core.queue
            if limits.timed and queue and not self.broken:
                assert self.timer.thread is not None, "a rate limit without a timer"
                wake = limits.next_wake()
                if wake is not None:
                    assert self.timer.target is not None, "the timer sleeps past a rate slot"
                    assert self.timer.target <= wake, "the timer would sleep past a rate slot"
            if queue.deadline_count and not self.broken:
                earliest = queue.next_deadline()
                assert self.timer.thread is not None, "deadlines pending without a timer"
                assert self.timer.target is not None, "the timer sleeps with no target"
                assert earliest is not None, "deadline count without a deadline"
                assert self.timer.target <= earliest, "the timer would sleep past a deadline"
