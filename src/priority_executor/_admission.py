"""Admission: everything a task meets from ``submit`` until it starts, and the pool's lock.

A pool is two objects, wired together by its public class: an :class:`Admission`, which owns the
queue, the deadlines, backpressure, the counts and the pool's one lock, and a *runner*
(:class:`Runner`), which starts tasks: ``_threads.ThreadRunner`` with worker threads, or
``_dispatch.DelegateRunner``, which hands them to another executor. Admission starts nothing
itself. It tells the runner when tasks wait, and the runner calls :meth:`Admission.take_locked`,
the one place where a task leaves the queue to start. Neither holds a reference to the public
executor: the pool's threads must not keep it alive, or a pool dropped without ``shutdown()``
would never be collected and its threads never exit.

The lock
--------
``Admission.lock`` is the pool's only lock. The runner, the timer, the callback threads and
backpressure (``Room``) use it; none keeps a copy, since ``after_fork_in_child`` replaces it.

- Guarded: the queue and every queued ``Entry``; ``running``, ``settling``, ``undecided``,
  ``evicted``, ``clock_errors``, ``paused``, ``shutdown``, ``stopping``, ``broken``,
  ``broken_error``, ``tally``, ``joiners``, ``simple``; the state of the limits
  (``_limits.Limits``), the room, the timer, the callback threads and the runner.
- Fixed after construction: ``clock``, ``ageing``, ``broken_type``, ``name``, the room's limits.
  The rate and key limits and the runner's size change only under the lock
  (``_limits_changed_locked``, ``Runner.resize_locked``).
- Lock order: it may be held while a Future's own lock is taken (only to read or claim it,
  which runs no callback), never the reverse; no other lock of the package is taken while it
  is held. Park locks (an idle worker's, the timer's) are only released under it.
- No user code runs while it is held: not a task, an initializer, a done-callback (those run
  inside ``Future.cancel``, ``set_result`` and ``set_exception``) or a logging handler. The one
  exception is the clock, read under the lock so that one reading decides each deadline
  race; it must be a plain function of time, like ``time.monotonic``.
- Every ``*_locked`` method is called with it held and never blocks (but
  ``Room.make_room_locked``, which waits on a Condition of this lock). What must happen after
  unlocking (a claim, a cancel, ``Thread.start``) is listed under the lock and done by the
  caller after. The lists (``evicted``, ``clock_errors``, the runner's ``unstarted``) are read
  as hints without the lock, so that if an exception cuts the caller short, the next
  ``submit``, ``join()`` or ``shutdown()`` finishes the job.
- It is taken by a ``with`` statement, except on the two hot paths (``submit`` and a
  worker's turn): see ``_lock.py``.

The flows
---------
1. **Submit to start.** :meth:`submit` makes the Future and its ``Entry`` and, under the lock,
   :meth:`_admit_locked` checks the pool accepts work (:meth:`check_accepting_locked`), keys
   the entry (``_policy.queue_key``), applies backpressure (``Room.make_room_locked``) and
   signals the timer for an earlier deadline; :meth:`_accept_locked` then queues and counts
   it and calls ``Runner.queued_locked``. After unlocking, ``Runner.start_pending``
   starts a thread counted in, and ``Settler.owed`` cancels an evicted task.
2. **Start.** The runner calls :meth:`take_locked`: the best entry that every limit allows
   (``_limits.py``; under key limits the queue is a ``_keyed.KeyedQueue``), counted
   ``running``; an entry found past its deadline on the way is counted expired, for the
   runner to cancel. The runner reports the task's key back with its outcome
   (:meth:`finished_locked`), which may open the key for the next take.
3. **Run to settle.** The runner claims the future outside the lock (``_claim.run``), runs the
   task, settles the future, and reports the outcome by :meth:`finished_locked`.
4. **Cancel.** ``Future.cancel()`` runs :meth:`_on_done`, every future's first done-callback,
   which unqueues the entry under the lock and then wakes ``wait()`` by the claim step.
5. **Expire, and rate slots.** The timer calls :meth:`pop_due_locked`, which opens what the
   clock's reading lets start (a rate slot, a key's window) and wakes the runner for it, then
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
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, Callable, Generic, Literal, Optional, TypeVar, Union

from . import _lifecycle
from ._callbacks import CallbackRunner
from ._claim import LOGGER, Outcome, cancel_all, claim
from ._futures import add_first_callback, is_cancelled
from ._keyed import KeyedQueue
from ._limits import Limits
from ._listeners import Listeners
from ._lock import acquire_politely, jump_window, yield_in_window
from ._orders import HeapQueue, TaskQueue
from ._policy import Number, WhenFull, is_due, queue_key, sort_key
from ._queue import NO_KWARGS, Entry, Gate, QueueBase
from ._recording import Tally
from ._room import Room
from ._runner import Runner
from ._settle import Settler
from ._timer import DeadlineTimer


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
        self.room = Room(self.lock, max_queued, when_full)
        self.name = name
        self.clock = clock
        self.broken_type = broken_type
        self.ageing = ageing
        self.limits = limits
        self.simple = False  # no bound and no limit: see _limits_changed_locked
        self.queue = self._new_queue()
        self.running = 0  # taken by the runner, outcome not yet reported
        self.settling = 0  # taken out unrun (expired, cancelled by shutdown), not yet settled
        self.undecided = 0  # of those, not yet counted (a broken pool fails them after)
        # Evicted to make room and counted, not yet settled: Settler.owed() cancels them after
        # unlocking. join() waits for them too.
        self.evicted: list[Entry] = []
        self.clock_errors: list[Exception] = []  # raised under the lock; logged after
        self.paused = False
        # A task went ahead of queued ones and no runner has taken a task since: until this
        # monotonic time, submitters yield the GIL (see "Queue jumps" in _lock.py); 0.0 for
        # none. A hint, also read without the lock.
        self.jumped = 0.0
        self.shutdown = False
        self.stopping = False  # shut down, executor collected, or interpreter exiting
        self.broken: Union[Literal[False], str] = False  # or the message broken_type takes
        self.broken_error: Optional[BaseException] = None  # see break_locked
        # The counts, by priority class, and the wait and run times.
        self.tally = Tally()
        self.listeners = Listeners(lambda: self.lock, clock)
        self.joiners = 0  # join() calls waiting on ``quiet``
        self.timer = DeadlineTimer(self)
        self.callbacks = CallbackRunner(self, name)
        self.settler = Settler(self)
        self.owner_ref: Optional[weakref.ReferenceType[Any]] = None  # see AdmissionControl.adopt
        self.on_done = self._on_done  # one bound method for every future, not one per submit
        self.runner = make_runner(self)
        self._limits_changed_locked()

    def _new_queue(self) -> QueueBase:
        if self.limits.keyed:  # either order: the lanes are heaps
            return KeyedQueue(self.room.evicts, set(self.limits.saturated_keys()))
        if self.ageing is None:
            return TaskQueue(track_worst=self.room.evicts)
        return HeapQueue(track_worst=self.room.evicts)

    # -- 1. submit -------------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        timeout: Optional[float],
        gate: Optional[Gate] = None,
    ) -> Future[Any]:
        """Queue a task whose arguments the front has checked; ``gate``: the view, if any."""
        future: Future[Any] = Future()
        # No empty dict per queued task: they add up, with millions queued.
        group = None if gate is None else gate.key
        entry = Entry(future, fn, args, kwargs or NO_KWARGS, priority, None, group, gate)
        add_first_callback(future, self.on_done)
        lock = self.lock
        if not lock.acquire(False):
            acquire_politely(lock)
        try:
            self._admit_locked(entry, timeout, gate)
        finally:
            lock.release()
        try:
            if self.runner.unstarted:  # hints, taken under the lock
                self.runner.start_pending(entry)
        finally:
            if self.evicted:
                self.settler.owed()
        if self.jumped:  # a hint: see "Queue jumps" in _lock.py
            yield_in_window(self.jumped)
        return future

    def _admit_locked(self, entry: Entry, timeout: Optional[float], gate: Optional[Gate]) -> None:
        """Check, key and queue (or expire, or make room for) a new entry."""
        self.check_accepting_locked(entry.priority, gate)
        expired, evict = False, None
        if timeout is None and self.ageing is None:
            key = sort_key(entry.priority)
            try:  # for the wait it will have; the clock decides nothing here
                entry.queued_at = self.clock()
            except Exception as exc:
                self.clock_errors.append(exc)  # logged by the next Settler.owed()
                entry.queued_at = math.nan  # its wait goes unrecorded
            if self.simple:  # the common case: no deadline, no bound, no limit
                self._accept_locked(entry, key, False, None)
                return
        else:
            now = entry.queued_at = self.clock()  # if it raises, submit raises
            key = queue_key(entry.priority, now, self.ageing)
            if timeout is not None:
                entry.deadline = now + timeout
                expired = is_due(entry.deadline, now)  # timeout=0: it may not wait at all
        if not expired and self.room.full_locked(self.queue):
            evict, expired = self.room.make_room_locked(self, entry, key, gate)
        if not expired and self.timer.needs_signal_locked(entry.deadline):
            self.timer.signal_locked(entry.deadline)  # may raise: nothing changed yet
        elif self.limits.timed:  # the timer wakes takers at rate slots
            self.timer.start_locked()  # may raise: nothing changed yet
            self._wake_timer_locked()  # a slot it stopped waiting for with nothing queued
        self._accept_locked(entry, key, expired, evict)

    def _accept_locked(
        self, entry: Entry, key: Number, expired: bool, evict: Optional[Entry]
    ) -> None:
        """Count and queue a checked entry: the only step of submit that changes state.

        If an asynchronous exception (a signal handler's) interrupts it, what it did is
        rolled back before the exception goes on, so the counts stay consistent.
        """
        tally = self.tally
        before = tally.submitted
        classes_before = None
        if expired or evict is not None:  # counted by class too
            classes_before = tally.save(entry, evict)
        runner_before, jumped_before = self.runner.snapshot_locked(), self.jumped
        try:
            if expired:
                # No one has seen this future yet: it has no waiter and no callback but
                # the pool's own, which has nothing to do. So it is settled here.
                cancel_all([entry.future])
                tally.add("expired", entry.priority)
            else:
                if evict is not None:
                    self.queue.remove(evict)
                    tally.evicted(evict.priority)
                    self.evicted.append(evict)
                jumps = self.queue.push(entry, key)
                if not self.paused:
                    if jumps and not self.jumped:
                        self.jumped = jump_window()
                    waiting = len(self.queue.entries)
                    if self.limits.on:
                        waiting = self.waiting_locked()
                    self.runner.queued_locked(waiting)
            tally.submitted += 1
        except BaseException:
            tally.submitted = before
            if classes_before is not None:
                tally.restore(classes_before)
            self.queue.repair(entry)
            if evict is not None and self.queue.find(evict.future) is not evict:
                if evict in self.evicted:
                    self.evicted.remove(evict)
                self.queue.restore(evict)  # its removal may have stopped part-way
            self.runner.rollback_locked(runner_before)
            self.jumped = jumped_before
            raise

    def check_accepting_locked(self, priority: Number, gate: Optional[Gate] = None) -> None:
        """Raise what the standard pool raises, in its order, when no task may be queued.

        ``priority``: the refused task's, for the counts by class.
        """
        if self.broken:
            message: Optional[str] = None
        elif self.shutdown:
            message = "cannot schedule new futures after shutdown"
        elif _lifecycle.exiting:
            message = "cannot schedule new futures after interpreter shutdown"
        elif gate is not None and gate.closed:
            message = "cannot schedule new futures after shutdown"
        else:
            return
        self.tally.add("rejected", priority)
        if message is None:
            if self.broken_error is None:
                raise self.broken_type(self.broken)
            # The same template each time; its traceback is the one of this raise only.
            raise self.broken_error.with_traceback(None)
        raise RuntimeError(message)

    def withdraw_locked(self, entry: Entry) -> bool:
        """Undo the submit of ``entry`` if it is still queued (no thread could start for it)."""
        if self.queue.find(entry.future) is not entry:
            return False
        self.queue.remove(entry)
        self.tally.submitted -= 1
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

    def waiting_locked(self) -> int:
        """How many queued tasks may start now."""
        if self.paused or self.limits.rate_until is not None:
            return 0
        return len(self.queue.entries) - self.queue.held

    def take_locked(self, unrun: list[Entry], as_work_queue: bool = False) -> Optional[Entry]:
        """Take the best queued task to start it: the one place a task leaves the queue to start.

        It is the best task that every limit allows now (``_limits.py``), counted ``running``
        until the runner reports it by :meth:`finished_locked`. One clock reading decides the
        deadline race: an entry due is counted expired and added to ``unrun``, for the caller
        to cancel by ``Settler.cancel`` after unlocking (so its callbacks run in the runner's
        thread), and the next one is taken. If the clock raises, the task starts (its
        deadline cannot be decided) and the error is listed for ``Settler.owed``; under a
        rate limit, nothing starts until the timer can read the clock again.

        Args:
            as_work_queue: take it as the standard pool's queue (``_work_queue``) gives it
                out, knowing neither pause nor limits; it is not counted as a start.

        Returns:
            None with nothing queued that may start, or while paused.
        """
        limits, queue = self.limits, self.queue
        if as_work_queue:
            pop, limited = queue.pop_any, False
        elif self.paused:
            return None
        else:
            pop, limited = queue.pop, limits.on
        now = 0.0  # read only under a rate limit
        opened = False  # the clock opened a key or a slot: other takers may start now
        if limited and limits.timed:
            reading = self.read_clock()
            if isinstance(reading, Exception):
                self.clock_errors.append(reading)
                limits.hold_locked()
                self._wake_timer_locked()
                return None
            now = reading
            opened = limits.release_locked(now, queue)
            if limits.rate_until is not None:  # the pool's window is full
                self._wake_timer_locked()
                return None
        entry = pop()
        while entry is not None and entry.deadline is not None:
            reading = self.read_clock()
            if isinstance(reading, Exception):
                self.clock_errors.append(reading)
                break
            if not is_due(entry.deadline, reading):
                break
            self.tally.add("expired", entry.priority)
            self.settling += 1
            unrun.append(entry)
            entry = pop()
        if entry is not None:
            self.running += 1
            self.jumped = 0.0  # the best task has left the queue
            if not as_work_queue:  # stamped for its wait and run, recorded when it ends
                try:
                    entry.started = self.clock()
                except Exception as exc:
                    self.clock_errors.append(exc)
                    entry.started = math.nan
            # Keyed tasks are counted running per key even with no limit set, so that a
            # key limit set later counts the tasks of the key already running.
            counted = not as_work_queue and (limited or entry.group is not None)
            if counted and limits.started_locked(entry.group, now, queue):
                self._wake_timer_locked()
        if opened:  # the runner starts the threads it counts in, after unlocking
            self._opened_locked(now)
        if self.room.blocked or self.joiners:
            self.shrunk_locked()
        return entry

    def _opened_locked(self, now: float) -> None:
        """The clock opened keys or a rate slot at ``now``: get the takers for what may start.

        As many as may start now, not one per queued task: each slot would bring in
        threads up to max_workers for one start (and with idle_timeout, they would retire
        and be made again at the next slot).
        """
        self.runner.resumed_locked(self.limits.allowed_locked(self.waiting_locked(), now))

    def _wake_timer_locked(self) -> None:
        """Have the timer wake when the clock next opens a start (a rate slot)."""
        wake = self.limits.next_wake()
        if self.timer.needs_signal_locked(wake):
            self.timer.signal_locked(wake)  # its thread runs: this starts none, cannot raise

    def finished_locked(self, outcome: Outcome, entry: Entry, keyed: bool = True) -> None:
        """A task taken by :meth:`take_locked` ran (or was claimed by its user's cancel).

        ``entry``: the task's, detached: its key (the ``key`` of its view), for the key
        limits, and its priority and start, for the counts and the run time. ``keyed``:
        False for a task taken as ``_work_queue`` takes it, which no key counted.
        """
        self.running -= 1
        self._ended_locked(outcome, entry)
        group = entry.group if keyed else None
        if group is not None:
            self.limits.finished_locked(group, self.queue)
        if self.joiners:
            self.shrunk_locked()

    def finished_later_locked(self, outcome: Outcome, entry: Entry, keyed: bool = True) -> None:
        """:meth:`finished_locked` for a future settled after unlocking, by :meth:`settled_locked`.

        ``join()`` waits for it until then, callbacks included.
        """
        self.running -= 1
        self._ended_locked(outcome, entry)
        self.settling += 1
        group = entry.group if keyed else None
        if group is not None:
            self.limits.finished_locked(group, self.queue)

    def _ended_locked(self, outcome: Outcome, entry: Entry) -> None:
        """Count a started task's outcome, and its run time if it ran."""
        if outcome != "completed" and outcome != "failed":  # it never ran (a cancel won)
            self.tally.add(outcome, entry.priority)
            return
        try:
            now = self.clock()
        except Exception as exc:
            self.clock_errors.append(exc)
            now = math.nan
        started = entry.started
        self.tally.ran(outcome, entry.priority, started - entry.queued_at, now - started)

    def drop_locked(self, entry: Entry, outcome: Outcome, unrun: list[Entry]) -> None:
        """A task taken as ``_work_queue`` takes it will not run: count it for the caller."""
        self.finished_later_locked(outcome, entry, keyed=False)
        unrun.append(entry)

    def drained_locked(self) -> bool:
        """True once the pool is stopping with nothing queued: a runner's threads may exit."""
        if not self.stopping or self.queue:
            return False
        self.timer.wake_locked()  # it may exit too, once no deadline is left
        return True

    def emptied_locked(self) -> None:
        """A task left the queue unstarted: if that drained a stopping pool, wake its sleepers.

        Threads that a limit kept waiting for the last queued tasks would otherwise sleep on
        (a worker parked until a slot, the dispatcher, the timer) and ``shutdown(wait=True)``
        with them.
        """
        if self.stopping and not self.queue:
            self.runner.stop_locked()
            self.timer.wake_locked()

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

    def drain_locked(self, outcome: Optional[Outcome]) -> list[Entry]:
        """Take every queued entry out unrun, counted as ``outcome`` (None: by its settler)."""
        drained = self.queue.drain()
        if outcome is None:
            self.undecided += len(drained)
        else:
            self.tally.add_each(outcome, [entry.priority for entry in drained])
        self.settling += len(drained)
        self.shrunk_locked()
        return drained

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
        if future not in self.queue.entries:
            return
        cancelled = is_cancelled(future)
        with self.lock:
            entry = self.queue.discard(future)
            if entry is None:
                return
            self.tally.add("cancelled" if cancelled else "completed", entry.priority)
            if self.room.blocked or self.joiners:  # as in take_locked: see shrunk_locked
                self.shrunk_locked()
            if self.stopping:
                self.emptied_locked()
        entry.detach()  # its tombstone may stay in the queue a while; let it hold nothing
        if cancelled:
            claim(future, cancel=False)
        # Otherwise someone set a result on a queued future by hand; it is done, so dropping
        # its entry is all there is to do.

    def settled_locked(self, count: int) -> None:
        """``count`` futures counted in ``settling`` are settled, callbacks included."""
        self.settling -= count
        self.shrunk_locked()

    def shrunk_locked(self) -> None:
        """Wake who waits for the queue to shrink: blocked submits, and join() once quiet.

        There is someone only if ``self.room.blocked or self.joiners``; the two hot paths
        (a take and a cancel) test that before calling, which saves a call per task.
        """
        self.room.shrunk_locked()
        if self.joiners and self._quiet_locked():
            self.quiet.notify_all()

    def _quiet_locked(self) -> bool:
        """Nothing queued, running or being settled: what join() waits for."""
        return not self.queue and not self.running and not self.settling and not self.evicted

    # -- 5. deadlines ----------------------------------------------------------------------

    def read_clock(self) -> Union[float, Exception]:
        """The pool's clock, or the exception it raised, which the caller logs after unlocking.

        A failing clock must not kill the thread that reads it: a worker would lose the task
        it holds, the timer every later deadline. Until the clock works again, tasks start,
        and the timer retries every ``_timer.CLOCK_RETRY`` seconds.
        """
        try:
            return self.clock()
        except Exception as exc:
            return exc

    def pop_due_locked(self, now: float) -> list[Entry]:
        """The timer's turn at ``now``: open what the limits allow, and take out the due entries.

        Those are counted expired, for the timer to settle by :meth:`settle_expired`.
        """
        limits = self.limits
        if limits.timed and limits.release_locked(now, self.queue) and not self.paused:
            self._opened_locked(now)  # the threads it counts in: see settle_expired
        due = self.queue.pop_due(now)
        if due:
            self.tally.add_each("expired", [entry.priority for entry in due])
            self.settling += len(due)
            self.shrunk_locked()
            self.emptied_locked()
        return due

    def next_deadline_locked(self) -> Optional[float]:
        """When the timer must wake next: the earliest deadline, or rate slot while tasks wait."""
        deadline = self.queue.next_deadline()
        if not self.limits.timed or not self.queue:
            return deadline
        wake = self.limits.next_wake()
        if deadline is None or (wake is not None and wake < deadline):
            return wake
        return deadline

    def timer_done_locked(self) -> bool:
        """The timer may exit once no deadline or slot can come: stopping (and drained if timed)."""
        return self.stopping and not (self.limits.timed and self.queue)

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

    def is_own_thread_locked(self, thread: threading.Thread) -> bool:
        """A thread of the runner (also while it starts), the timer, or a callback thread."""
        return (
            self.runner.owns_locked(thread)
            or thread is self.timer.thread
            or self.callbacks.owns_locked(thread)
        )

    def _limits_changed_locked(self) -> None:
        """After the limits changed: the queue's ordering, the fast path, the keys closed.

        A queue goes from one lane per key (``KeyedQueue``) to plain order, or back, in O(n),
        when the first key limit is set or the last one removed.
        """
        limits, queue = self.limits, self.queue
        if isinstance(queue, KeyedQueue):
            limits.regate_locked(queue)  # and if no key limit is left, it opens every key
        if limits.keyed != isinstance(queue, KeyedQueue):
            # Filled before it replaces the old one: the cancel hook reads ``queue.entries``
            # without the lock, and must find every queued task in whichever it reads.
            reordered = self._new_queue()
            queue.move_to(reordered)
            self.queue = reordered
        self.simple = self.room.max_queued is None and not limits.on

    def check_invariants(self) -> None:
        """Check the queue's, admission's and the runner's invariants in O(n); for tests."""
        with self.lock:
            self.queue._check_invariants()
            self.runner.check_locked()
            self.callbacks.check_locked()
            assert self.running >= 0, "more tasks finished than started"
            assert not (self.jumped and self.paused), "submitters yield to a paused pool"
            assert 0 <= self.undecided <= self.settling, "more futures settled than taken out"
            if self.room.max_queued is not None:
                assert len(self.queue) <= self.room.max_queued, "more tasks queued than max_queued"
            limits, queue = self.limits, self.queue
            assert limits.keyed == isinstance(queue, KeyedQueue), "queue ordering vs key limits"
            assert self.simple == (self.room.max_queued is None and not limits.on), "fast path"
            if isinstance(queue, KeyedQueue):
                limits.check(queue.closed)
            assert sum(state.running for state in limits.keys.values()) <= self.running
            if limits.timed and queue and not self.broken:
                assert self.timer.thread is not None, "a rate limit without a timer"
                wake = limits.next_wake()
                if wake is not None:
                    assert self.timer.target is not None, "the timer sleeps past a rate slot"
                    assert self.timer.target <= wake, "the timer would sleep past a rate slot"
            if self.queue.deadline_count and not self.broken:
                earliest = self.queue.next_deadline()
                assert self.timer.thread is not None, "deadlines pending without a timer"
                assert self.timer.target is not None, "the timer sleeps with no target"
                assert earliest is not None, "deadline count without a deadline"
                assert self.timer.target <= earliest, "the timer would sleep past a deadline"
            self.tally.check()
            counts = self.tally.totals()
            settled = sum(counts[k] for k in ("completed", "failed", "cancelled", "expired"))
            settled += counts["taken"]  # taken out through _work_queue: not ours to run
            in_flight = len(self.queue) + self.running + self.undecided
            assert counts["submitted"] == settled + in_flight, "lost task"
