"""The scheduler: the lock, the queue, the worker threads and what they share.

Why the executor is split in two: worker threads must not keep the executor alive, or a pool
dropped without ``shutdown()`` would never be collected and its threads would never exit. So
everything the threads share lives here, in a :class:`Scheduler` that holds no reference to
the executor; the executor owns it and tells it when it is shut down or garbage-collected.

How a task travels: ``submit`` pushes an :class:`~._queue.Entry` on the queue and, if no
worker is already on its way to the queue, wakes one idle worker (or starts a thread). A
worker pops the best entry under the lock, then claims its future outside the lock and runs
it. Nobody polls: an idle worker sleeps on its own "park" lock until it is handed one
wake-up, and the :class:`~._timer.DeadlineTimer` sleeps until the earliest deadline.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, Callable, Literal, Optional, Protocol, Union

from . import _process
from ._callbacks import CallbackRunner
from ._claim import (
    LOGGER,
    acquire_politely,
    cancel_all,
    claim,
    guard_callbacks,
    log_clock_failure,
    run,
    run_callbacks_guarded,
)
from ._context import fresh_thread
from ._futures import cancel_once, has_user_callbacks
from ._policy import Number, WhenFull, aged_key, is_due, sort_key
from ._queue import NO_KWARGS, Entry, HeapQueue, QueueBase, TaskQueue
from ._stats import ExecutorStatistics, QueueFullError
from ._timer import CLOCK_RETRY, MAX_SLEEP, DeadlineTimer


class Gate(Protocol):
    """A view's open/closed state, read under the pool's lock by the submits made through it."""

    closed: bool


#: The counts that statistics() reports.
COUNT_NAMES = ("submitted", "completed", "failed", "cancelled", "expired", "rejected", "taken")

#: A worker's outcome for a task it found expired: it was cancelled, not run.
SETTLED = "settled"

#: The standard pool's message for a failed initializer, word for word.
BROKEN_BY_INITIALIZER = "A thread initializer failed, the thread pool is not usable anymore"


class Scheduler:
    """State shared by one pool's threads; see the module docstring."""

    def __init__(
        self,
        max_workers: int,
        thread_name_prefix: str,
        initializer: Optional[Callable[..., object]],
        initargs: tuple[Any, ...],
        clock: Callable[[], float],
        broken_type: type[BaseException],
        ageing: Optional[float] = None,
        max_queued: Optional[int] = None,
        when_full: WhenFull = "block",
    ) -> None:
        # The lock, and what it guards:
        # - guarded: queue (and every queued Entry), idle, wakes, threads, starting,
        #   arriving, newest, unstarted, evicted, running, settling, undecided, paused, shutdown,
        #   stopping, broken, the counts, blocked, joiners, the timer's state and the
        #   callback runner's;
        # - fixed after construction: max_workers, thread_name_prefix, initializer, initargs,
        #   clock, broken_type, ageing, max_queued, when_full.
        # Lock order: this lock may be held while a Future's own lock is taken (only to read
        # or claim it, which runs no callback), never the reverse; no other lock of the
        # package is taken while it is held.
        # No user code runs while it is held: not a task, not an initializer, not a
        # done-callback (those run inside Future.cancel, set_result and set_exception), not a
        # logging handler. Work that calls them is collected under the lock and done after.
        # The one exception is the clock, read under the lock so that one reading decides
        # each deadline race; it must be a plain function of time, like time.monotonic.
        # It is taken by a ``with`` statement, which no asynchronous exception (a signal
        # handler's) can split from its release, except on the two hot paths (submit and the
        # worker loop): see acquire_politely for why, and for the one instruction left open.
        self.lock = threading.Lock()
        # Threads yielding the GIL until the lock is free (see acquire_politely); a worker
        # that releases the lock while one waits yields too, so that it gets in promptly.
        # A hint read without the lock: set operations are atomic with or without the GIL.
        self.spinners: set[int] = set()
        self.room = threading.Condition(self.lock)  # for submits blocked on a full queue
        self.quiet = threading.Condition(self.lock)  # for join(): nothing queued or running
        self.max_workers = max_workers
        self.thread_name_prefix = thread_name_prefix
        self.initializer = initializer
        self.initargs = initargs
        self.clock = clock
        self.broken_type = broken_type
        self.ageing = ageing
        self.max_queued = max_queued
        self.when_full = when_full
        self.queue = self._new_queue()
        # Park locks of idle workers, most recently idle last; each is held, and its worker
        # is blocked acquiring it until someone pops it from here and releases it.
        self.idle: list[Any] = []
        # Idle workers woken (or yielding, see _work) that have not yet looked at the queue.
        # Idle workers are woken one at a time: a submit wakes one only if none is already
        # on its way, and each worker that takes a task passes the wake-up on while work and
        # idle workers remain. Invariant: unless paused, no task waits while a worker idles
        # and ``wakes == 0``. Threads are started as the standard pool starts them, when the
        # queued tasks outnumber the idle workers and those on their way (``wakes`` and
        # ``arriving``), up to ``max_workers``.
        self.wakes = 0
        self.threads: set[threading.Thread] = set()  # started workers, as the standard pool's
        self.starting: set[threading.Thread] = set()  # counted in, started after unlocking
        self.arriving = 0  # threads counted in that have not yet reached their loop
        self.newest: Optional[threading.Thread] = None  # the last worker counted in
        self.unstarted: list[threading.Thread] = []  # counted in, not yet handed to start()
        # Unqueued to make room, not yet settled; join() waits for them too.
        self.evicted: list[Entry] = []
        self.running = 0  # tasks taken by a worker whose outcome is not yet counted
        # Tasks taken out of the queue without running (expired, evicted, cancelled by
        # shutdown) whose futures are not yet settled, callbacks included: join() waits for
        # them as for running tasks.
        self.settling = 0
        # Of those, the ones not yet counted in the statistics: a broken pool fails its queue
        # after unlocking, and counts each as failed or, if its user won, cancelled.
        self.undecided = 0
        self.paused = False
        self.shutdown = False
        self.stopping = False  # shut down, executor collected, or interpreter exiting
        self.broken: Union[Literal[False], str] = False  # or the BrokenThreadPool message
        # submitted, completed, failed, ... (statistics); every key present, so that reading
        # one never calls Counter.__missing__ under the lock.
        self.counts: Counter[str] = Counter(dict.fromkeys(COUNT_NAMES, 0))
        self.blocked = 0  # submits waiting on ``room``
        self.joiners = 0  # join() calls waiting on ``quiet``
        self.timer = DeadlineTimer(self)
        self.callbacks = CallbackRunner(self, thread_name_prefix)
        self.owner: Optional[weakref.ReferenceType[Any]] = None  # set by the executor
        self.on_done = self._on_done  # one bound method for every future's done-callback
        _process.register(self)

    def _new_queue(self) -> QueueBase:
        evicts = self.max_queued is not None and self.when_full == "evict"
        if self.ageing is None:
            return TaskQueue(track_worst=evicts)
        return HeapQueue(track_worst=evicts)

    # -- submitting ------------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        timeout: Optional[float],
        gate: Optional[Gate] = None,
    ) -> Future[Any]:
        """Queue a task whose arguments the executor has already checked.

        ``gate`` is the view submitting it, if any: once the view is closed, the submit is
        refused as after shutdown, also while it waits for room.
        """
        future: Future[Any] = Future()
        # No empty dict per queued task: they add up, with millions queued.
        entry = Entry(future, fn, args, kwargs or NO_KWARGS, priority, None)
        future.add_done_callback(self.on_done)
        lock, polite = self.lock, 0
        if not lock.acquire(False):
            polite = acquire_politely(lock, self.spinners)
        # Nothing between the acquisition and this try but one instruction: see
        # acquire_politely for why this is not a with statement.
        try:
            if polite:
                self.spinners.discard(polite)
            self._admit_locked(entry, timeout, gate)
        finally:
            lock.release()
        try:
            if self.unstarted:  # a hint, taken under the lock
                self._start_unstarted(entry)
        finally:
            if self.evicted:  # a hint, taken under the lock
                self._settle_evicted()
        return future

    def _admit_locked(self, entry: Entry, timeout: Optional[float], gate: Optional[Gate]) -> None:
        """Check, key and queue (or expire, or make room for) a new entry, under the lock."""
        self._check_accepting_locked(gate)
        expired, evicted = False, None
        if timeout is None and self.ageing is None:
            key = sort_key(entry.priority)
        else:
            now = entry.queued_at = self.clock()  # if it raises, submit raises
            priority = entry.priority
            key = (
                sort_key(priority) if self.ageing is None else aged_key(priority, now, self.ageing)
            )
            if timeout is not None:
                entry.deadline = now + timeout
                # timeout=0: the task may not wait at all, and any hand-off waits.
                expired = is_due(entry.deadline, now)
        if not expired and self.max_queued is not None and len(self.queue) >= self.max_queued:
            evicted, expired = self._make_room_locked(entry, key, gate)
        if not expired and self.timer.needs_signal_locked(entry.deadline):
            self.timer.signal_locked(entry.deadline)  # may raise: nothing changed yet
        self._accept_locked(entry, key, expired, evicted)

    def _accept_locked(
        self, entry: Entry, key: Number, expired: bool, evicted: Optional[Entry]
    ) -> None:
        """Count and queue a checked submission: the only step of submit that changes state.

        If an asynchronous exception (a signal handler's) interrupts it, everything it did
        is rolled back before the exception goes on, so the counts stay consistent.
        """
        before = self._snapshot_locked()
        try:
            if expired:
                # Settled here, under the lock: no one has seen this future yet, so it has no
                # waiter and no done-callback but the pool's own, which has nothing to do.
                cancel_all([entry.future])
                self.counts["expired"] += 1
            else:
                if evicted is not None:
                    self.queue.remove(evicted)
                    self.counts["cancelled"] += 1
                    self.evicted.append(evicted)  # settled by _settle_evicted, after unlocking
                self._queue_locked(entry, key)
            self.counts["submitted"] += 1
        except BaseException:
            self._undo_submit_locked(before, entry, evicted)
            raise

    def _snapshot_locked(self) -> tuple[Any, ...]:
        """What a submit changes, for :meth:`_undo_submit_locked`."""
        counts = self.counts
        return (
            counts["submitted"],
            counts["expired"],
            counts["cancelled"],
            self.wakes,
            len(self.idle),
            self.arriving,
            self.newest,
        )

    def _undo_submit_locked(
        self, before: tuple[Any, ...], entry: Entry, evicted: Optional[Entry]
    ) -> None:
        """Roll back a submit interrupted part-way (O(n)): as if it had never been called."""
        submitted, expired, cancelled, wakes, idle, arriving, newest = before
        self.counts["submitted"] = submitted
        self.counts["expired"] = expired
        self.counts["cancelled"] = cancelled
        self.queue.repair(entry)
        if evicted is not None and self.queue.find(evicted.future) is not evicted:
            if evicted in self.evicted:
                self.evicted.remove(evicted)
            self.queue.restore(evicted)  # its removal may have stopped part-way
        if self.newest is not newest:  # a worker was counted in: write it off
            assert self.newest is not None
            self.starting.discard(self.newest)
            if self.newest in self.unstarted:
                self.unstarted.remove(self.newest)
            self.arriving = arriving
            self.newest = newest
        # A worker woken for the entry finds nothing and parks again; a wake-up counted
        # with no worker released would keep every later one from being given.
        self.wakes -= max(0, (self.wakes - wakes) - (idle - len(self.idle)))

    def _settle_evicted(self) -> None:
        """Cancel the evicted tasks, with their callbacks; call without the lock.

        An entry stays listed until it is settled, so that if an exception
        interrupts its evicting submit part-way, the next submit, ``join()`` or
        ``shutdown()`` settles it; settling twice is harmless (``cancel_once``).
        """
        while self.evicted:  # a hint, rechecked under the lock
            with self.lock:
                if not self.evicted:
                    return
                entry = self.evicted[-1]
                future = entry.future
            cancel_once(future)
            with self.lock:
                mine = entry in self.evicted  # not settled by another thread meanwhile
                if mine:
                    self.evicted.remove(entry)
                    self._after_shrink_locked()
            if mine:
                entry.detach()

    def settled_locked(self, count: int) -> None:
        """``count`` futures taken from the queue unrun are settled, callbacks included."""
        self.settling -= count
        self._after_shrink_locked()

    def _queue_locked(self, entry: Entry, key: Number) -> None:
        """Push ``entry`` and get a worker to it, counting in a new one if needed.

        As in the standard pool, a thread is started when the idle workers cannot take all
        the queued tasks. It is started once the lock is released (``_start_unstarted``),
        so that while ``start()`` waits for the new thread, that thread can take the lock.
        """
        self.queue.push(entry, key)
        if self.paused:
            return
        if self.idle and not self.wakes:
            self.wakes = 1
            self.idle.pop().release()
        if self._understaffed_locked():
            self._new_worker_locked()

    def _staff_locked(self) -> None:
        """Wake an idle worker and count in the threads the queue needs (after pause or stop)."""
        if self.broken:
            return  # a broken pool starts nothing; its queue was failed or dropped
        if self.idle and self.queue and not self.wakes:
            self.wakes = 1
            self.idle.pop().release()  # it passes the wake-up on
        while self._understaffed_locked():
            self._new_worker_locked()

    def _understaffed_locked(self) -> bool:
        """More tasks queued than workers on their way or idle, and room for another thread."""
        return (
            len(self.queue) > self.wakes + len(self.idle) + self.arriving
            and self.workers_locked() < self.max_workers
        )

    def _check_accepting_locked(self, gate: Optional[Gate] = None) -> None:
        """Raise what the standard pool raises, in its order, when no task may be queued."""
        if self.broken:
            self.counts["rejected"] += 1
            raise self.broken_type(self.broken)
        if self.shutdown:
            self.counts["rejected"] += 1
            raise RuntimeError("cannot schedule new futures after shutdown")
        if _process.exiting:
            self.counts["rejected"] += 1
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        if gate is not None and gate.closed:
            self.counts["rejected"] += 1
            raise RuntimeError("cannot schedule new futures after shutdown")

    def _make_room_locked(
        self, entry: Entry, key: Number, gate: Optional[Gate]
    ) -> tuple[Optional[Entry], bool]:
        """Apply ``when_full``: ``max_queued`` tasks wait already.

        Returns:
            The entry to evict to make room, if any (still queued: the caller removes it),
            and whether the new task's deadline passed while its submit waited for room (it
            must then expire, not be queued).

        Raises:
            QueueFullError: ``when_full`` is "raise", or "evict" and no queued task ranks
                below the new one.
            RuntimeError: the pool was shut down while this submit waited for room.
        """
        assert self.max_queued is not None
        queue = self.queue
        if self.when_full == "evict":
            worst = queue.worst()
            if worst is not None and key < worst.key:
                return worst, False  # the caller removes it once nothing else can fail
        if self.when_full != "block":
            self.counts["rejected"] += 1
            raise QueueFullError(f"cannot queue the task: max_queued={self.max_queued} tasks wait")
        if self._is_own_thread_locked(threading.current_thread()):
            # A task that waited for room could wait for itself: if every worker did, no
            # task would ever leave the queue.
            self.counts["rejected"] += 1
            raise QueueFullError(
                f"cannot wait for room from one of the pool's own threads:"
                f" max_queued={self.max_queued} tasks wait"
            )
        self.blocked += 1
        try:
            while True:
                left: Optional[float] = None
                if entry.deadline is not None:
                    now = self.read_clock()
                    if isinstance(now, Exception):
                        left = CLOCK_RETRY
                    elif is_due(entry.deadline, now):
                        return None, True  # its deadline passed while it waited for room
                    else:
                        left = min(entry.deadline - now, MAX_SLEEP)
                if len(queue) < self.max_queued:
                    return None, False
                self.room.wait(left)
                self._check_accepting_locked(gate)
        finally:
            self.blocked -= 1

    def _new_worker_locked(self) -> None:
        """Count a new worker in; ``_start_unstarted`` starts it after unlocking."""
        index = len(self.threads) + len(self.starting)
        thread = fresh_thread(f"{self.thread_name_prefix}_{index}", self._work)
        self.newest = thread  # first: an interrupted submit finds what it counted in here
        self.starting.add(thread)
        self.arriving += 1
        self.unstarted.append(thread)

    def _start_unstarted(self, entry: Optional[Entry] = None) -> None:
        """Start the workers counted in, whoever counted them in; call without the lock.

        Whoever counts a worker in starts it after unlocking; if an exception kept it from
        doing so, the next submit, ``resume()``, ``join()`` or ``shutdown()`` does.
        """
        while self.unstarted:  # a hint: _start_worker takes one under the lock
            self._start_worker(entry)

    def _start_worker(self, entry: Optional[Entry] = None) -> None:
        """Start one thread that ``_new_worker_locked`` counted in; if that fails, undo.

        ``start()`` may fail ("can't start new thread"), or be interrupted by a signal after
        the thread began. Either way, under the lock, a thread still ``starting`` is written
        off; if it runs after all, it finds that out when it arrives and exits at once. If
        other workers remain, they will run the queued work and a failure to start is
        absorbed. If none does, the submit that queued ``entry`` is undone and the error
        raised, as the standard pool raises it. An interrupt is always raised again.
        """
        thread = None
        try:
            # Taken inside the try, so that whatever interrupts this thread from here on,
            # the worker is either started or written off, never left counted in for ever.
            with self.lock:
                if not self.unstarted:
                    return
                thread = self.unstarted.pop()
            thread.start()
        except BaseException as exc:
            if thread is None:
                raise
            with self.lock:
                if thread in self.starting:
                    self.starting.discard(thread)
                    self.arriving -= 1
                    self.quiet.notify_all()  # join_threads() waits for no thread to be starting
                stranded = not self.threads and not self.starting
                undone = stranded and entry is not None and self.queue.find(entry.future) is entry
                if undone:
                    assert entry is not None
                    self.queue.remove(entry)
                    self.counts["submitted"] -= 1
                    self._after_shrink_locked()  # room for a blocked submit, or join() wakes
                elif not stranded and isinstance(exc, Exception):
                    return
            if undone:
                assert entry is not None
                entry.detach()  # its tombstone holds nothing of the task
            raise
        with self.lock:
            if thread in self.starting:  # it may have registered itself already
                self.starting.discard(thread)
                self.threads.add(thread)
                self.quiet.notify_all()

    def _arrive_locked(self) -> bool:
        """A new worker reaches its loop: register it; False if a failed start wrote it off."""
        me = threading.current_thread()
        if me in self.starting:
            self.starting.discard(me)
            self.threads.add(me)
            self.quiet.notify_all()
        elif me not in self.threads:
            return False
        self.arriving -= 1
        return True

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
        cancelled = future.cancelled()
        with self.lock:
            entry = self.queue.find(future)
            if entry is None:
                return
            self.queue.remove(entry)
            self.counts["cancelled" if cancelled else "completed"] += 1
            self._after_shrink_locked()
        entry.detach()  # its tombstone may stay in the queue a while; let it hold nothing
        if cancelled:
            claim(future, cancel=False)
        # Otherwise someone set a result on a queued future by hand; it is done, so dropping
        # its entry is all there is to do.

    def _after_shrink_locked(self) -> None:
        """Wake who waits for the queue to shrink: blocked submits, and join() once quiet."""
        if self.blocked:
            self.room.notify(self.blocked)
        if self.joiners and self._quiet_locked():
            self.quiet.notify_all()

    def _quiet_locked(self) -> bool:
        """Nothing queued, running or being settled: what join() waits for."""
        return not self.queue and not self.running and not self.settling and not self.evicted

    # -- workers ---------------------------------------------------------------------------

    def _work(self) -> None:
        """Body of every worker thread.

        Each turn of the loop takes the lock once: it counts the outcome of the previous
        task, pops the next entry, passes a wake-up on if work and idle workers remain, and
        decides, by one clock reading, whether a popped entry with a deadline has expired.
        With nothing to do, the worker first yields the GIL once (a submitter that holds it
        may be about to queue more; a worker that sleeps after every task costs a wake-up
        per task), then parks. While it yields it counts in ``wakes``, as on its way.
        """
        if self.initializer is not None:
            try:
                self.initializer(*self.initargs)
            except BaseException:
                LOGGER.critical("Exception in initializer:", exc_info=True)
                self._initializer_failed()
                return
        with self.lock:
            if not self._arrive_locked():
                return
        park = threading.Lock()
        park.acquire()
        woken = False  # took a wake-up (``wakes``) that it has not yet consumed
        lock, queue, idle, counts = self.lock, self.queue, self.idle, self.counts
        spinners = self.spinners
        pop = queue.pop
        # The outcome of the task this worker took last, not yet counted: COMPLETED, FAILED
        # or CANCELLED for one it claimed, SETTLED for one it found expired and cancelled.
        outcome: Optional[str] = None
        yielded = False  # found the queue empty and yielded once since its last task
        while True:
            expired: Union[bool, Exception] = False
            # As in submit, and see acquire_politely for why this is not a with statement.
            polite = 0
            if not lock.acquire(False):
                polite = acquire_politely(lock, spinners)
            try:
                if polite:
                    spinners.discard(polite)
                if woken:
                    self.wakes -= 1
                    woken = False
                if outcome is not None:
                    if outcome is SETTLED:
                        self.settling -= 1
                    else:
                        self.running -= 1
                        counts[outcome] += 1
                    outcome = None
                    if self.joiners:
                        self._after_shrink_locked()
                entry = None if self.paused else pop()
                if entry is not None and (self.blocked or self.joiners):
                    self._after_shrink_locked()
                if idle and not self.wakes and queue and not self.paused:
                    self.wakes = 1  # pass the wake-up on, one worker at a time
                    idle.pop().release()
                if entry is None:
                    if self.stopping and not queue:
                        self.timer.wake_locked()  # it may exit too, once no deadline is left
                        return
                    if yielded:
                        idle.append(park)
                    else:
                        self.wakes += 1
                        woken = True
                else:
                    if entry.deadline is not None:
                        expired = self._expired_locked(entry)
                    if expired is True:
                        self.settling += 1
                    else:
                        self.running += 1
            finally:
                lock.release()
            if spinners:
                time.sleep(0)  # let a thread that yielded for the lock have it, and the GIL
            if entry is None:
                if yielded:
                    park.acquire()  # until a submit or another worker hands it a wake-up
                    woken, yielded = True, False
                else:
                    time.sleep(0)
                    yielded = True
            elif expired is True:
                claim(entry.detach(), cancel=True)
                outcome = SETTLED
            else:
                if expired:  # the clock raised: the task runs, and the error is logged
                    log_clock_failure(expired)
                yielded = False
                fn, args, kwargs = entry.fn, entry.args, entry.kwargs
                # A tombstone of the entry may stay in a heap: let it hold nothing of the task.
                outcome = run(entry.detach(), fn, args, kwargs)
                del fn, args, kwargs
            entry = None  # nothing of the task stays referenced while this worker sleeps

    def _expired_locked(self, entry: Entry) -> Union[bool, Exception]:
        """Decide, by one clock reading under the lock, whether a popped entry has expired.

        Returns:
            True if it expired (and counts it), False if it may run, or the exception the
            clock raised: the task then runs, and the caller logs the error after unlocking.
        """
        assert entry.deadline is not None
        now = self.read_clock()
        if isinstance(now, Exception):
            return now
        if is_due(entry.deadline, now):
            self.counts["expired"] += 1
            return True
        return False

    def _initializer_failed(self) -> None:
        with self.lock:
            if not self._arrive_locked():
                return
            self.broken = BROKEN_BY_INITIALIZER
            drained = self.queue.drain()
            self.settling += len(drained)
            self.undecided += len(drained)
        failed = 0
        try:
            for entry in drained:
                future = entry.detach()
                if claim(future, cancel=False):  # False: its user cancelled it meanwhile
                    failed += 1
                    guard_callbacks(
                        future, future.set_exception, self.broken_type(BROKEN_BY_INITIALIZER)
                    )
        finally:
            with self.lock:
                self.counts["failed"] += failed
                self.counts["cancelled"] += len(drained) - failed
                self.undecided -= len(drained)
                self.settled_locked(len(drained))

    # -- deadlines -------------------------------------------------------------------------

    def read_clock(self) -> Union[float, Exception]:
        """The pool's clock, or the exception it raised, which the caller logs after unlocking.

        A failing clock must not kill the thread that reads it: a worker would lose the task
        it holds, the timer every later deadline. Until the clock works again, a worker runs
        the task it took, and the timer retries every ``_timer.CLOCK_RETRY`` seconds.
        """
        try:
            return self.clock()
        except Exception as exc:
            return exc

    def pop_due_locked(self, now: float) -> list[Entry]:
        """Remove the entries due at ``now``, for the timer to expire them."""
        due = self.queue.pop_due(now)
        if due:
            self.counts["expired"] += len(due)
            self.settling += len(due)
            self._after_shrink_locked()
        return due

    def settle_expired(self, due: list[Entry]) -> None:
        """Settle what ``pop_due_locked`` returned, without running any callback here.

        Called by the timer with no lock held. Every future is cancelled and its waiters
        woken at once; done-callbacks beyond the pool's own go to the callback threads, so
        that no callback can make the timer late for the next deadline.
        """
        owed = cancel_all([entry.detach() for entry in due])
        owed = [future for future in owed if has_user_callbacks(future)]
        thread = None
        with self.lock:
            self.settled_locked(len(due) - len(owed))
            if owed:
                thread = self.callbacks.add_locked(owed)
        if thread is not None:
            self._start_callback_thread(thread)

    def _start_callback_thread(self, thread: threading.Thread) -> None:
        try:
            thread.start()
        except BaseException:
            # No thread for the callbacks: run them here, late rather than never.
            with self.lock:
                left = self.callbacks.forget_locked(thread)
            try:
                for future in left:
                    run_callbacks_guarded(future)
            finally:
                with self.lock:
                    self.settled_locked(len(left))
            raise

    def wake_blocked(self) -> None:
        """Make submits blocked on a full queue re-check whether they may still queue."""
        with self.lock:
            if self.blocked:
                self.room.notify_all()

    def wake_timer(self) -> None:
        """Make the timer re-read the clock now (tests call this after moving a fake clock)."""
        with self.lock:
            self.timer.wake_locked()

    # -- features --------------------------------------------------------------------------

    def set_priority(self, future: Future[Any], priority: Number) -> bool:
        """Move a queued task to ``priority``; False if it is not queued in this pool."""
        with self.lock:
            entry = self.queue.find(future)
            # A future its user has just cancelled stays queued until the cancel hook, which
            # runs after cancel() returns, removes it: it has not moved.
            if entry is None or future.done():
                return False
            if self.ageing is None:
                key = sort_key(priority)
            else:  # it keeps its age
                key = aged_key(priority, entry.queued_at, self.ageing)
            entry.priority = priority
            self.queue.requeue(entry, key)
            return True

    def set_paused(self, paused: bool) -> None:
        """Pause or resume the start of queued tasks; resuming wakes the workers needed."""
        with self.lock:
            if self.stopping:
                return  # a stopping pool drains its queue: it cannot be paused again
            self.paused = paused
            if not paused:
                self._staff_locked()
        self._start_unstarted()

    def workers_locked(self) -> int:
        """Worker threads started or being started."""
        return len(self.threads) + len(self.starting)

    def is_own_thread(self) -> bool:
        """True when called from one of this pool's threads (see _is_own_thread_locked)."""
        with self.lock:
            return self._is_own_thread_locked(threading.current_thread())

    def _is_own_thread_locked(self, thread: threading.Thread) -> bool:
        """A worker (also while its initializer runs), the timer, or a callback thread."""
        return (
            thread in self.threads
            or thread in self.starting
            or thread is self.timer.thread
            or self.callbacks.owns_locked(thread)
        )

    def wait_quiet(self, timeout: Optional[float]) -> bool:
        """Block until nothing is queued, running or being settled; False on ``timeout``."""
        if self.is_own_thread():
            raise RuntimeError(
                "cannot join() from one of the pool's own threads: it would wait for itself"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        self._start_unstarted()  # the workers and evictions an interrupted submit left
        self._settle_evicted()
        with self.lock:
            self.joiners += 1
            try:
                while not self._quiet_locked():
                    # Lock timeouts overflow past threading.TIMEOUT_MAX: wait in slices.
                    left = MAX_SLEEP if deadline is None else deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.quiet.wait(min(left, MAX_SLEEP))
                return True
            finally:
                self.joiners -= 1

    def statistics(self) -> ExecutorStatistics:
        """A snapshot of the pool's state and counts, taken under the lock."""
        with self.lock:
            by_priority = Counter(entry.priority for entry in self.queue.entries.values())
            return ExecutorStatistics(
                queued=len(self.queue),
                queued_by_priority=dict(sorted(by_priority.items(), reverse=True)),
                running=self.running,
                workers=sum(thread.is_alive() for thread in self.threads),
                idle_workers=len(self.idle),
                paused=self.paused,
                submitted=self.counts["submitted"],
                completed=self.counts["completed"],
                failed=self.counts["failed"],
                cancelled=self.counts["cancelled"],
                expired=self.counts["expired"],
                rejected=self.counts["rejected"],
                taken=self.counts["taken"],
            )

    # -- stopping --------------------------------------------------------------------------

    def stop(self, *, shutdown: bool, cancel_futures: bool) -> None:
        """Let every thread exit once the queue is empty; never blocks, never runs tasks here.

        A paused pool is resumed, so that its queued tasks run (or are cancelled) and
        ``shutdown(wait=True)`` cannot hang on them.

        Args:
            shutdown: refuse new submissions from now on (``shutdown()``, not garbage collection).
            cancel_futures: cancel every queued task and wake its waiters.
        """
        with self.lock:
            if shutdown:
                self.shutdown = True
            self.stopping = True
            self.paused = False
            drained = self.queue.drain() if cancel_futures else []
            self.counts["cancelled"] += len(drained)
            self.settling += len(drained)
            parks = self.idle[:]
            self.idle.clear()  # in place: workers hold this list
            self.wakes += len(parks)
            self._staff_locked()  # a pool paused before it started any worker
            self.timer.wake_locked()
            self.room.notify_all()  # blocked submits raise the standard RuntimeError
            self._after_shrink_locked()
        for park in parks:
            park.release()
        self.settle_unrun(drained)
        try:
            self._start_unstarted()
        except Exception:
            # No worker can start (at interpreter exit, say) and none runs: cancel what
            # would otherwise wait for ever.
            self._abandon_queue()

    def _abandon_queue(self) -> None:
        with self.lock:
            if self.threads or self.starting:
                return
            drained = self.queue.drain()
            self.counts["cancelled"] += len(drained)
            self.settling += len(drained)
            self._after_shrink_locked()
        LOGGER.critical("no worker thread could start: %d queued tasks cancelled", len(drained))
        self.settle_unrun(drained)

    def settle_unrun(self, drained: list[Entry]) -> None:
        """Cancel entries taken out of the queue unrun and counted in ``settling``.

        Every future is settled first, then their callbacks run, in this thread; call
        without the lock.
        """
        if not drained:
            return
        try:
            for future in cancel_all([entry.detach() for entry in drained]):
                run_callbacks_guarded(future)
        finally:
            with self.lock:
                self.settled_locked(len(drained))

    def join_threads(self) -> None:
        """Wait for every thread of the pool to exit; from one of them, return at once.

        A pool thread cannot wait for the pool: it would wait for itself, or for a worker
        that waits for it (two tasks calling ``shutdown()`` at once), or keep the queue from
        draining while the timer it waits for sleeps until a deadline.
        """
        if self.is_own_thread():
            return
        self._start_unstarted()  # those an interrupted submit counted in and never started
        self._settle_evicted()
        with self.lock:
            # No thread can be counted in once the pool is stopping; wait for those starting.
            self.quiet.wait_for(lambda: not self.starting)
            threads = list(self.threads)
        for thread in threads:
            thread.join()
        self.timer.join()
        # The timer may have handed callbacks on until it exited; those threads end once
        # the callbacks are run.
        with self.lock:
            callback_threads = list(self.callbacks.threads)
        for thread in callback_threads:
            thread.join()

    def check_invariants(self) -> None:
        """Check the queue's and the scheduler's invariants in O(n); for tests only."""
        with self.lock:
            self.queue._check_invariants()
            assert self.wakes >= 0, "more wake-ups consumed than given"
            assert 0 <= self.arriving <= self.workers_locked(), "arriving count is off"
            assert self.running >= 0, "more tasks finished than started"
            assert 0 <= self.undecided <= self.settling, "more futures settled than taken out"
            assert self.callbacks.busy <= len(self.callbacks.threads), "callback count is off"
            assert len(self.idle) <= self.workers_locked(), "more idle workers than threads"
            assert self.workers_locked() <= self.max_workers, "more threads than max_workers"
            assert not self.threads & self.starting, "a thread both started and starting"
            assert set(self.unstarted) <= self.starting, "an unstarted thread is not counted in"
            if self.idle and self.queue and not self.paused:
                assert self.wakes > 0, "a task waits while every idle worker sleeps"
            if self.max_queued is not None:
                assert len(self.queue) <= self.max_queued, "more tasks queued than max_queued"
            if self.queue.deadline_count and not self.broken:
                earliest = self.queue.next_deadline()
                assert self.timer.thread is not None, "deadlines pending without a timer"
                assert self.timer.target is not None, "the timer sleeps with no target"
                assert earliest is not None, "deadline count without a deadline"
                assert self.timer.target <= earliest, "the timer would sleep past a deadline"
            counts = self.counts
            left = ("completed", "failed", "cancelled", "expired", "taken")  # taken: _work_queue
            settled = sum(counts[k] for k in left)
            in_flight = len(self.queue) + self.running + self.undecided
            assert counts["submitted"] == settled + in_flight, "lost task"

    def after_fork_in_child(self) -> None:
        """Make a pool inherited across ``fork()`` refuse work instead of hanging on it.

        Its threads do not exist in the child, and another thread may have held its lock. A
        pool that had started no thread has no such state to lose, and stays usable.
        """
        used = bool(self.threads or self.starting or self.queue) or self.timer.thread is not None
        self.lock = threading.Lock()
        self.spinners.clear()
        self.room = threading.Condition(self.lock)
        self.quiet = threading.Condition(self.lock)
        self.idle.clear()
        self.threads.clear()
        self.starting.clear()
        self.wakes = self.arriving = self.running = self.blocked = self.joiners = 0
        self.settling = self.undecided = 0
        self.newest = None
        self.unstarted = []
        self.evicted = []
        self.timer = DeadlineTimer(self)
        self.callbacks = CallbackRunner(self, self.thread_name_prefix)
        if used:
            # Its queue may have been caught mid-update: drop it. Its futures never settle
            # in the child, as with the standard pool, but join() and shutdown() return.
            self.queue = self._new_queue()
            self.broken = (
                "cannot use a pool inherited across os.fork(); create a new pool in the child"
            )

    def owner_gone(self, _ref: weakref.ReferenceType[Any]) -> None:
        """Weak-reference callback: the executor was collected without ``shutdown()``.

        The garbage collector may call this in any thread, at any allocation, even in one of
        the pool's own threads while it holds the pool's lock, which is not reentrant. So if
        the lock is not free at once, a short-lived thread waits for it instead.
        """
        if self.lock.acquire(False):
            self.lock.release()
            self.stop(shutdown=False, cancel_futures=False)
            return
        # If the interpreter is exiting, no thread can start; its exit hook stops every pool.
        with contextlib.suppress(RuntimeError):
            fresh_thread(
                f"{self.thread_name_prefix}_stop", self.stop, shutdown=False, cancel_futures=False
            ).start()
