"""The thread runner: the worker threads that start a pool's tasks, and how they are woken.

Threads are started as the standard pool starts them: when the queued tasks outnumber the
idle workers and those on their way, up to ``max_workers``. A thread is counted in under the
pool's lock (``starting``, ``arriving``, ``unstarted``) and started after unlocking
(:meth:`ThreadRunner.start_pending`), so that while ``start()`` waits for the new thread,
that thread can take the lock. Whoever counts a thread in starts it; if an exception kept it
from doing so, the next submit, ``resume()``, ``join()`` or ``shutdown()`` does.

The wake-up protocol. Nobody polls: an idle worker sleeps on its own *park* lock, which it
holds and blocks acquiring again until someone pops it from ``idle`` and releases it. Idle
workers are woken one at a time: a submit wakes one only if none is already on its way
(``wakes``), and each worker that takes a task passes the wake-up on while work and idle
workers remain (:meth:`ThreadRunner._wake_one_locked`, the one place a worker is woken for a
task; :meth:`ThreadRunner._release_idle_locked` wakes idle workers to exit, when the pool
stops or ``max_workers`` is lowered).
Invariant: unless paused, no task waits while a worker idles and ``wakes == 0``. A worker
that finds nothing to do first yields the GIL once, counted in ``wakes`` as on its way (a
submitter holding the GIL may be about to queue more, and parking after every task costs a
wake-up per task), and only then parks.

Every field is guarded by the pool's lock (``Admission.lock``), and every ``*_locked``
method is called with it held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from ._admission import Admission
from ._claim import LOGGER, Outcome, run
from ._context import fresh_thread
from ._listeners import Watch
from ._lock import acquire_politely, yield_gil
from ._queue import Entry

#: The standard pool's message for a failed initializer, word for word.
BROKEN_BY_INITIALIZER = "A thread initializer failed, the thread pool is not usable anymore"


#: What a worker's turn that took no task says to do next (``_Worker.next``).
AGAIN, YIELD, PARK, EXIT = range(4)


class _Worker:
    """What one worker thread carries from one turn to the next (see ``ThreadRunner._work``)."""

    __slots__ = ("expired", "next", "outcome", "park", "ran", "woken", "yielded")

    def __init__(self) -> None:
        self.park = threading.Lock()  # held: acquiring it again sleeps until released
        self.park.acquire()
        self.expired: list[Entry] = []  # what its take found past its deadline, to cancel
        self.woken = False  # took a wake-up (``wakes``) that it has not yet consumed
        self.yielded = False  # found the queue empty and yielded once since its last task
        self.outcome: Optional[Outcome] = None  # of the task it ran last, not yet reported
        self.ran: Optional[Entry] = None  # and what is left of its entry (key, priority, start)
        self.next = AGAIN  # with no task taken: what its turn said to do

    def cancel_expired(self, admission: Admission[ThreadRunner]) -> None:
        """Cancel what the last take found expired, callbacks included, in this thread."""
        admission.settler.cancel(self.expired, True)
        self.expired.clear()


class ThreadRunner:
    """The worker threads of one pool; see the module docstring."""

    def __init__(
        self,
        admission: Admission[ThreadRunner],
        *,
        max_workers: int,
        initializer: Optional[Callable[..., object]],
        initargs: tuple[Any, ...],
        idle_timeout: Optional[float] = None,
    ) -> None:
        self.admission = admission
        self.max_workers = max_workers
        admission.core.capacity = max_workers  # no worker takes a task beyond it
        self.peak = max_workers  # the most workers allowed since the last lowering
        self.shrinking = False  # max_workers was lowered below the workers: some must exit
        self.idle_timeout = idle_timeout  # seconds an idle worker waits before it exits
        self.initializer = initializer
        self.initargs = initargs
        self.idle: list[threading.Lock] = []  # park locks of idle workers, latest last
        self.wakes = 0  # idle workers woken (or yielding) that have not yet looked
        self.threads: set[threading.Thread] = set()  # started, as the standard pool's
        self.starting: set[threading.Thread] = set()  # counted in, not yet registered
        self.arriving: set[threading.Thread] = set()  # counted in, not yet in their loop
        self.unstarted: list[threading.Thread] = []  # counted in, not yet handed to start()
        self.started = threading.Condition(admission.lock)  # a thread left ``starting``
        self.retired: list[threading.Thread] = []  # left ``threads``, maybe not yet exited

    # -- what admission calls --------------------------------------------------------------

    def queued_locked(self, waiting: int) -> None:
        self._wake_one_locked(waiting)
        if self._understaffed_locked(waiting):  # one thread at most, as the standard pool
            self._count_in_locked()

    def resumed_locked(self, waiting: int) -> None:
        self._wake_one_locked(waiting)
        while self._understaffed_locked(waiting):
            self._count_in_locked()

    def stop_locked(self) -> None:
        self._wake_all_locked()
        # Paused before it had a worker, or every worker retired: one is needed to drain
        # the queue, even if a limit holds its tasks back for now.
        self.resumed_locked(len(self.admission.core.queue))

    def _wake_all_locked(self) -> None:
        self._release_idle_locked(len(self.idle))

    def _release_idle_locked(self, count: int) -> None:
        """Wake the ``count`` latest idle workers, counted on their way (``wakes``)."""
        self.wakes += count
        for _ in range(count):
            self.idle.pop().release()  # in place: workers hold this list

    def resync_locked(self) -> None:
        for thread in [t for t in self.unstarted if t not in self.starting]:
            self.unstarted.remove(thread)
            self.arriving.discard(thread)

    def owns_locked(self, thread: threading.Thread) -> bool:
        return thread in self.threads or thread in self.starting

    def staffed_locked(self) -> bool:
        return bool(self.threads or self.starting)

    def sizes_locked(self) -> tuple[int, int]:
        return sum(thread.is_alive() for thread in self.threads), len(self.idle)

    def capacity_locked(self) -> dict[str, int]:
        return {"max_workers": self.max_workers}

    def resize_locked(self, size: int) -> None:
        """Set ``max_workers``; idle surplus workers are woken to exit, busy ones exit after."""
        self.peak = max(size, min(self.peak, self._workers_locked()))
        self.max_workers = self.admission.core.capacity = size
        self.shrinking = self._surplus_locked()
        surplus = self._workers_locked() - size
        self._release_idle_locked(max(0, min(surplus, len(self.idle))))

    def check_locked(self) -> None:
        workers = self._workers_locked()
        assert self.wakes >= 0, "more wake-ups consumed than given"
        assert self.arriving <= self.starting | self.threads, "arriving count is off"
        assert len(self.idle) <= workers, "more idle workers than threads"
        assert workers <= max(self.max_workers, self.peak), "more threads than max_workers"
        assert self.admission.core.capacity == self.max_workers, "capacity is not max_workers"
        assert not self.threads & self.starting, "a thread both started and starting"
        assert set(self.unstarted) <= self.starting, "an unstarted thread is not counted in"
        if self.idle and self.admission.core.startable():
            assert self.wakes > 0, "a task waits while every idle worker sleeps"

    def join(self) -> None:
        # A stopping pool still counts threads in for queued tasks that a limit held back
        # (the timer does, at a rate slot): join until none is left alive.
        while True:
            with self.admission.lock:
                self.started.wait_for(lambda: not self.starting)
                threads = [t for t in (*self.threads, *self.retired) if t.is_alive()]
            if not threads:
                return
            for thread in threads:
                thread.join()

    def after_fork_in_child(self, lock: threading.Lock) -> bool:
        used = bool(self.threads or self.starting)
        self.idle.clear()
        self.threads.clear()
        self.starting.clear()
        self.wakes = 0
        self.arriving.clear()
        self.unstarted.clear()
        self.retired.clear()
        self.started = threading.Condition(lock)
        return used

    # -- starting threads ------------------------------------------------------------------

    def _wake_one_locked(self, waiting: int) -> None:
        """Wake one idle worker if tasks wait and none is on its way: see the protocol."""
        if waiting and self.idle and not self.wakes:
            # One statement: an asynchronous exception cannot come between the count and
            # the release (a wake-up counted with no worker released would keep every later
            # one from being given).
            self.wakes, _ = 1, self.idle.pop().release()  # type: ignore[func-returns-value]

    def _understaffed_locked(self, waiting: int) -> bool:
        """More tasks wait than workers idle or on their way, and room for another thread."""
        return (
            waiting > self.wakes + len(self.idle) + len(self.arriving)
            and self._workers_locked() < self.max_workers
        )

    def _workers_locked(self) -> int:
        """Worker threads started or being started."""
        return len(self.threads) + len(self.starting)

    def _count_in_locked(self) -> None:
        """Count a new worker in; :meth:`start_pending` starts it after unlocking."""
        index = self._workers_locked()
        thread = fresh_thread(f"{self.admission.name}_{index}", self._work)
        self.unstarted.append(thread)  # first: see resync_locked
        self.arriving.add(thread)
        self.starting.add(thread)  # last: counted in

    def start_pending(self, entry: Optional[Entry]) -> None:
        """Start the workers counted in, whoever counted them in; call without the lock."""
        while self.unstarted:  # a hint: _start_one takes one under the lock
            self._start_one(entry)

    def _start_one(self, entry: Optional[Entry]) -> None:
        """Start one thread counted in (``Admission.start_thread``); register it once started."""
        thread = self.admission.start_thread(self.unstarted, entry, self._write_off_locked)
        if thread is not None:
            with self.admission.lock:
                self._register_locked(thread)  # unless it registered itself already

    def _write_off_locked(self, thread: threading.Thread) -> bool:
        """A thread whose start failed: unless it registered, it exits when it arrives."""
        if thread in self.starting:
            self.starting.discard(thread)
            self.arriving.discard(thread)
            self.started.notify_all()
        return not self.staffed_locked()

    def _register_locked(self, thread: threading.Thread) -> bool:
        """Move a started thread from ``starting`` to ``threads``; False if it is in neither."""
        if thread in self.starting:
            self.starting.discard(thread)
            self.threads.add(thread)
            self.started.notify_all()
            return True
        return thread in self.threads

    def _surplus_locked(self) -> bool:
        """More workers than ``max_workers`` (lowered): one that asks exits."""
        return self._workers_locked() > self.max_workers

    def _retire_locked(self) -> None:
        """The calling worker exits: it leaves ``threads``, and passes its wake-up on."""
        me = threading.current_thread()
        self.threads.discard(me)
        # Join what retired before, so that the list holds only threads still exiting.
        self.retired = [thread for thread in self.retired if thread.is_alive()]
        self.retired.append(me)
        self.shrinking = self._surplus_locked()
        self._wake_one_locked(self.admission.core.startable())

    def _park(self, park: threading.Lock) -> bool:
        """Sleep on ``park`` until woken: True; False if ``idle_timeout`` ran out and it retires."""
        timeout = self.idle_timeout
        if timeout is None:
            park.acquire()
            return True
        while not park.acquire(timeout=timeout):
            with self.admission.lock:
                retires = self._timed_out_locked(park)
            if retires is not None:
                return not retires
        return True

    def _timed_out_locked(self, park: threading.Lock) -> Optional[bool]:
        """An idle worker's wait ran out: True if it retires, False if it was woken after all,
        None if it waits on.

        It waits on while the pool is stopping with tasks queued (a limit holds them back for
        now): ``shutdown(wait=True)`` waits for its threads, which must drain the queue.
        """
        if park not in self.idle:
            park.acquire()  # released by whoever popped it from ``idle``: does not block
            return False
        core = self.admission.core
        if core.stopping and core.queue:
            return None
        self.idle.remove(park)
        self._retire_locked()
        return True

    def _arrive_locked(self) -> bool:
        """A new worker reaches its loop: register it; False if a failed start wrote it off."""
        me = threading.current_thread()
        if not self._register_locked(me):
            return False
        self.arriving.discard(me)
        return True

    # -- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        """Body of every worker thread: a turn under the lock, then what the turn said to do.

        The turn (:meth:`_turn_locked`) reports the task run last and takes the next one in
        one hold of the lock; the task runs here, without the lock, with its ``Entry``
        detached first (a tombstone of it may stay in a heap: let it hold nothing of the
        task); anything else is :meth:`_rest`. See the wake-up protocol in the module
        docstring.
        """
        if self.initializer is not None and not self._initialize():
            return
        admission = self.admission
        with admission.lock:
            if not self._arrive_locked():
                return
        worker = _Worker()
        lock, core, listeners = admission.lock, admission.core, admission.listeners
        turn_locked = self._turn_locked
        while True:
            if not lock.acquire(False):
                acquire_politely(lock)
            try:
                entry = turn_locked(worker)
            finally:
                lock.release()
            if self.unstarted:  # counted in by this take, which let more tasks start
                self.start_pending(None)
            if core.clock_errors:  # the clock raised as it took (or held back) a task
                admission.settler.settle_deferred()
            if entry is not None:
                if worker.expired:
                    worker.cancel_expired(admission)
                watch = Watch(listeners, entry) if listeners.pairs else None
                future, fn, args, kwargs = entry.future, entry.fn, entry.args, entry.kwargs
                del entry.future, entry.fn, entry.args, entry.kwargs  # Entry.detach, inlined
                worker.outcome = run(future, fn, args, kwargs, watch)
                del future, fn, args, kwargs, watch
                worker.ran, entry = entry, None  # holds nothing of the task while it sleeps
            elif not self._rest(worker):
                return

    def _turn_locked(self, worker: _Worker) -> Optional[Entry]:
        """A worker's turn: report its last task, take the next; the entry to run, or None.

        With None, ``worker.next`` says what to do: cancel what the take found expired and
        look again (it does not count itself on its way or idle while their callbacks run),
        yield the GIL once (counted on its way in ``wakes``), park (listed ``idle``), or exit.

        ``Admission.finished_locked`` and ``take_locked`` are inlined (their copies are the
        three lines each below, which must say what those say), so that the turn costs one
        Python frame, not three: ``benchmarks/instructions.py --contender ours --repeat 2``
        counts 62.35k instructions per W1 task, against 63.36k calling the two. The state it
        reads from ``worker`` is as fast as the loop of 8 locals it replaced (66.46k against
        66.64k, before the optimisations below and in ``_futures``).
        It reads ``core.startable()`` to pass a wake-up on only if one may be passed (idle
        workers, none on its way), as :meth:`_wake_one_locked` checks: 62.49k against 64.18k
        (62,395 and 62,580; 64,294 and 64,059), the workers idle often under callgrind.
        """
        admission = self.admission
        core = admission.core
        if worker.woken:
            self.wakes -= 1
            worker.woken = False
        if worker.outcome is not None:
            core.finish(worker.outcome, worker.ran)  # type: ignore[arg-type]
            worker.outcome = worker.ran = None
            if core.todo:
                admission.act_locked()
        if self.shrinking and self._surplus_locked():
            self._retire_locked()
            worker.next = EXIT
            return None
        expired = worker.expired
        entry = core.take(expired)  # Admission.take_locked, inlined
        if entry is not None and admission.yield_until:
            admission.yield_until = 0.0  # a task taken closes the jump window
        if core.todo:
            admission.act_locked()
        if self.idle and not self.wakes:  # what _wake_one_locked checks, before startable()
            self._wake_one_locked(core.startable())  # pass the wake-up on
        if entry is not None:
            worker.yielded = False
            return entry
        if expired:
            worker.yielded = False
            worker.next = AGAIN
        elif admission.drained_locked():
            if self.idle:  # parked while a limit held the last tasks back
                self._wake_all_locked()
            worker.next = EXIT
        elif worker.yielded:
            self.idle.append(worker.park)
            worker.next = PARK
        else:
            self.wakes += 1
            worker.woken = True
            worker.next = YIELD
        return None

    def _rest(self, worker: _Worker) -> bool:
        """Do what a turn that took no task said (``worker.next``); False: the worker exits."""
        step = worker.next
        if step == AGAIN:
            worker.cancel_expired(self.admission)
        elif step == YIELD:
            yield_gil()
            worker.yielded = True
        elif step == PARK:
            if not self._park(worker.park):  # until a submit or another worker wakes it
                return False
            worker.woken, worker.yielded = True, False
        else:
            return False
        return True

    def _initialize(self) -> bool:
        """Run the initializer; if it raises, break the pool and fail its queue."""
        assert self.initializer is not None
        try:
            self.initializer(*self.initargs)
            return True
        except BaseException:
            LOGGER.critical("Exception in initializer:", exc_info=True)
        admission = self.admission
        with admission.lock:
            if not self._arrive_locked():
                return False
            drained = admission.break_locked(BROKEN_BY_INITIALIZER)
        admission.settler.fail(drained, lambda: admission.broken_type(BROKEN_BY_INITIALIZER))
        return False
