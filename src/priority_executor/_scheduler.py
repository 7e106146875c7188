"""The scheduler: the lock, the queue, the worker threads, the deadline timer, the claim step.

Why the executor is split in two: worker threads must not keep the executor alive, or a pool
dropped without ``shutdown()`` would never be collected and its threads would never exit. So
everything the threads share lives here, in a :class:`Scheduler` that holds no reference to
the executor; the executor owns it and tells it when it is shut down or garbage-collected.

How a task travels: ``submit`` pushes an :class:`~._queue.Entry` on the heap and, if no worker
is already on its way to the queue, wakes one idle worker (or starts a thread). A worker pops
the best entry under the lock, then claims its future outside the lock and runs it. Nobody
polls: an idle worker sleeps on its own "park" lock until it is handed one wake-up, and the
timer thread, started with the first deadline, sleeps until the earliest deadline.

Every path out of the queue ends in :func:`claim`, called once per future by whoever removed
its entry from the queue under the lock: a worker about to run it, the timer or a worker that
found it expired, the cancel hook, ``shutdown(cancel_futures=True)``, or a broken pool.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any, Callable, Optional, Union

from . import _process
from ._policy import Number, is_due, sort_key
from ._queue import Entry, TaskQueue

LOGGER = logging.getLogger("concurrent.futures")

#: Seconds between two tries of a clock that raised (see Scheduler.read_clock).
CLOCK_RETRY = 1.0

#: The longest the timer sleeps in one go; lock timeouts overflow beyond threading.TIMEOUT_MAX.
MAX_SLEEP = min(3600.0, threading.TIMEOUT_MAX)

#: How many times a thread yields the GIL and retries a contended lock before blocking on it.
LOCK_SPINS = 16

#: The standard pool's message for a failed initializer, word for word.
BROKEN_BY_INITIALIZER = "A thread initializer failed, the thread pool is not usable anymore"


def acquire_politely(lock: Any) -> None:
    """Take a contended lock by yielding the GIL between tries, and block only as a last resort.

    A thread blocked on a lock becomes its owner the moment it is released, but can use it
    only once it gets the GIL back; meanwhile every other thread that wants the lock queues
    behind it, and each hand-off costs a context switch: a lock convoy. The pool's critical
    sections are short and run no user code, so a holder that was preempted by the GIL needs
    only a moment to finish: yielding to it breaks the convoy. In benchmarks this halved the
    cost per task under contention.
    """
    for _ in range(LOCK_SPINS):
        time.sleep(0)
        if lock.acquire(False):
            return
    lock.acquire()


def log_clock_failure(exc: Exception) -> None:
    """Report a clock that raised; called with no lock held, since logging runs handlers."""
    LOGGER.critical("The pool's clock raised; deadlines wait until it works", exc_info=exc)


def claim(future: Future[Any], *, cancel: bool) -> bool:
    """Decide, once and for all, whether a task that just left the queue runs.

    The caller must have removed the task's entry from the queue while holding the pool's
    lock; that removal makes it the only caller for this future, so
    ``set_running_or_notify_cancel()`` is called exactly once per future, and never while the
    pool's lock is held (``cancel()`` runs done-callbacks, which are user code).

    1. With ``cancel=True`` (the deadline passed, or shutdown drained the queue) the future is
       cancelled first. The deadline race was already decided under the pool's lock by one
       clock reading: a worker that pops an entry at or past its deadline cancels it here
       rather than running it, and the timer never touches an entry a worker has popped.
    2. ``set_running_or_notify_cancel()`` is the atomic step, taken under the future's own
       lock. If a user's ``cancel()`` took that lock first, the future is cancelled: this call
       wakes every ``wait()`` and ``as_completed()`` waiter and returns False, and the task
       never runs. Otherwise the future becomes RUNNING, a later ``cancel()`` returns False,
       and the caller must run the task.

    Returns:
        True if the caller must now run the task; False if it was cancelled and waiters woken.
    """
    if cancel:
        future.cancel()
    return future.set_running_or_notify_cancel()


def run(
    future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Claim a task that a worker took from the queue and, if it won the claim, run it."""
    if not claim(future, cancel=False):
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        future.set_exception(exc)
        # The traceback keeps this frame alive: break the cycle future -> exc -> frame -> future.
        del future, fn, args, kwargs
    else:
        future.set_result(result)


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
    ) -> None:
        # The lock, and what it guards:
        # - guarded: queue, idle, wakes, threads, shutdown, stopping, broken, timer_thread,
        #   timer_target, timer_signalled, and the state of every Entry while it is queued;
        # - fixed after construction: max_workers, thread_name_prefix, initializer,
        #   initargs, clock, broken_type, timer_park.
        # Lock order: this lock may be held while a Future's own lock is taken (only to read
        # its state), never the reverse; it is never held while another pool's lock is taken.
        # No user code runs while it is held: not a task, not an initializer, not a
        # done-callback (those run inside Future.cancel, set_result and set_exception). Work
        # that calls them is collected under the lock and done after releasing it.
        self.lock = threading.Lock()
        self.max_workers = max_workers
        self.thread_name_prefix = thread_name_prefix
        self.initializer = initializer
        self.initargs = initargs
        self.clock = clock
        self.broken_type = broken_type
        self.queue = TaskQueue()
        # Park locks of idle workers, most recently idle last; each is held, and its worker
        # is blocked acquiring it until someone pops it from here and releases it.
        self.idle: list[Any] = []
        # Workers woken or started that have not yet looked at the queue. Idle workers are
        # woken one at a time: a submit wakes one only if none is already on its way, and
        # each worker that takes a task passes the wake-up on while work and idle workers
        # remain. Invariant: a task never waits while a worker idles with ``wakes == 0``.
        # Threads are started as the standard pool starts them: by submit, when no worker
        # is idle and fewer are on their way than tasks are queued.
        self.wakes = 0
        self.threads: set[threading.Thread] = set()
        self.shutdown = False
        self.stopping = False  # shut down, executor collected, or interpreter exiting
        self.broken: Any = False  # False, or the message of the BrokenThreadPool to raise
        self.timer_thread: Optional[threading.Thread] = None
        self.timer_target: Optional[float] = None  # the deadline the timer sleeps until
        self.timer_signalled = False
        self.timer_park = threading.Lock()
        self.timer_park.acquire()
        self.owner: Optional[weakref.ReferenceType[Any]] = None  # set by the executor
        self.on_done = self._on_done  # one bound method for every future's done-callback
        _process.register(self)

    # -- submitting ------------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        priority: Number,
        timeout: Optional[float],
    ) -> Future[Any]:
        """Queue a task whose arguments the executor has already checked."""
        future: Future[Any] = Future()
        entry = Entry(future, fn, args, kwargs, priority, None)
        key = sort_key(priority)
        future.add_done_callback(self.on_done)
        lock = self.lock
        if not lock.acquire(False):
            acquire_politely(lock)
        try:
            if self.broken:
                raise self.broken_type(self.broken)
            if self.shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _process.exiting:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            expired = False
            if timeout is not None:
                now = self.clock()
                entry.deadline = deadline = now + timeout
                if is_due(deadline, now):
                    # timeout=0: the task may not wait at all, and any hand-off waits.
                    expired = True
                elif self.timer_target is None or deadline < self.timer_target:
                    self._signal_timer_locked(deadline)
            if not expired:
                self.queue.push(entry, key)
                if self.idle:
                    if not self.wakes:
                        self.wakes = 1
                        self.idle.pop().release()
                elif self.wakes < len(self.queue) and len(self.threads) < self.max_workers:
                    self._start_worker_locked(entry)
        finally:
            lock.release()
        if expired:
            claim(future, cancel=True)
        return future

    def _start_worker_locked(self, entry: Entry) -> None:
        name = f"{self.thread_name_prefix}_{len(self.threads)}"
        thread = threading.Thread(name=name, target=self._work)
        self.threads.add(thread)
        self.wakes += 1
        try:
            thread.start()
        except BaseException:
            # Leave the pool as it was before this submit: nothing half-queued.
            self.threads.discard(thread)
            self.wakes -= 1
            self.queue.remove(entry)
            raise

    def _signal_timer_locked(self, deadline: Optional[float]) -> None:
        self.timer_target = deadline
        if self.timer_thread is None:
            thread = threading.Thread(name=f"{self.thread_name_prefix}_timer", target=self._time)
            thread.start()  # if this raises, submit raises and nothing is queued
            self.timer_thread = thread
        elif not self.timer_signalled:
            self.timer_signalled = True
            self.timer_park.release()

    def _on_done(self, future: Future[Any]) -> None:
        """Done-callback of every future: unqueue a task cancelled by its user, wake waiters.

        ``Future.cancel()`` does not wake ``wait()`` or ``as_completed()``; only the claim step
        does. Without this hook a cancelled task would keep its waiters asleep until a worker
        popped its entry, which, behind a stream of higher priorities, may be never.
        """
        # A future leaves ``entries`` only under the lock, and whoever removes it claims it;
        # so if it is absent here, someone else has claimed or will claim it. A stale
        # "present" is rechecked under the lock. Reading a dict without the lock is safe
        # with or without the GIL.
        if future not in self.queue.entries:
            return
        with self.lock:
            entry = self.queue.find(future)
            if entry is None:
                return
            self.queue.remove(entry)
        entry.take()  # its tombstone may stay in the heap a while; let it hold nothing
        if future.cancelled():
            claim(future, cancel=False)
        # Otherwise someone set a result on a queued future by hand; it is done, so dropping
        # its entry is all there is to do.

    # -- workers ---------------------------------------------------------------------------

    def _work(self) -> None:
        """Body of every worker thread."""
        if self.initializer is not None:
            try:
                self.initializer(*self.initargs)
            except BaseException:
                LOGGER.critical("Exception in initializer:", exc_info=True)
                self._initializer_failed()
                return
        park = threading.Lock()
        park.acquire()
        woken = True  # a started thread was counted in ``wakes``, like a woken one
        lock = self.lock
        queue = self.queue
        pop = queue.pop
        idle = self.idle
        now: Union[float, Exception, None] = None
        while True:
            if not lock.acquire(False):
                acquire_politely(lock)
            try:
                if woken:
                    self.wakes -= 1
                    woken = False
                entry = pop()
                if idle and not self.wakes and queue:
                    # Pass the wake-up on: idle workers are woken one at a time, each by the
                    # previous one, so a burst costs one wake-up per worker actually needed.
                    self.wakes = 1
                    idle.pop().release()
                if entry is None:
                    if self.stopping:
                        if self.timer_thread is not None:
                            self._signal_timer_locked(None)
                        return
                    idle.append(park)
                elif entry.deadline is None:
                    expired = False
                else:
                    # One clock reading, under the lock, decides between running and expiring.
                    now = self.read_clock()
                    expired = not isinstance(now, Exception) and is_due(entry.deadline, now)
            finally:
                lock.release()
            if now is not None:
                if isinstance(now, Exception):
                    log_clock_failure(now)
                now = None
            if entry is None:
                park.acquire()
                woken = True
            elif expired:
                claim(entry.take()[0], cancel=True)
            else:
                run(entry.future, entry.fn, entry.args, entry.kwargs)
                if entry.deadline is not None:
                    entry.take()  # a tombstone of it may stay in the deadline heap
            entry = None  # nothing of the task stays referenced while this worker sleeps

    def _initializer_failed(self) -> None:
        with self.lock:
            self.wakes -= 1
            self.broken = BROKEN_BY_INITIALIZER
            drained = self.queue.drain()
        for entry in drained:
            future = entry.take()[0]
            if claim(future, cancel=False):
                future.set_exception(self.broken_type(BROKEN_BY_INITIALIZER))

    # -- the deadline timer ----------------------------------------------------------------

    def _time(self) -> None:
        """Body of the timer thread: expire queued tasks whose deadline has come."""
        lock = self.lock
        queue = self.queue
        signalled = False
        while True:
            with lock:
                if signalled:
                    self.timer_signalled = False
                now = self.read_clock()
                due = [] if isinstance(now, Exception) else queue.pop_due(now)
                deadline = queue.next_deadline()
                self.timer_target = deadline
                done = deadline is None and self.stopping
                if done:
                    self.timer_thread = None
            for entry in due:
                claim(entry.take()[0], cancel=True)
            del due
            if isinstance(now, Exception):
                log_clock_failure(now)
            if done:
                return
            if deadline is None:
                signalled = self.timer_park.acquire()
            else:
                delay = CLOCK_RETRY if isinstance(now, Exception) else deadline - now
                signalled = self.timer_park.acquire(timeout=min(max(0.0, delay), MAX_SLEEP))

    def read_clock(self) -> Union[float, Exception]:
        """The pool's clock, or the exception it raised, which the caller logs after unlocking.

        A failing clock must not kill the thread that reads it: a worker would lose the task
        it holds, the timer every later deadline. Until the clock works again, a worker runs
        the task it took, and the timer retries every ``CLOCK_RETRY`` seconds.
        """
        try:
            return self.clock()
        except Exception as exc:
            return exc

    def wake_timer(self) -> None:
        """Make the timer re-read the clock now (tests call this after moving a fake clock)."""
        with self.lock:
            if self.timer_thread is not None:
                self._signal_timer_locked(self.timer_target)

    # -- stopping --------------------------------------------------------------------------

    def stop(self, *, shutdown: bool, cancel_futures: bool) -> None:
        """Let every thread exit once the queue is empty; never blocks, never runs tasks here.

        Args:
            shutdown: refuse new submissions from now on (``shutdown()``, not garbage collection).
            cancel_futures: cancel every queued task and wake its waiters.
        """
        with self.lock:
            if shutdown:
                self.shutdown = True
            self.stopping = True
            drained = self.queue.drain() if cancel_futures else []
            parks = self.idle[:]
            self.idle.clear()  # in place: workers hold this list
            self.wakes += len(parks)
            if self.timer_thread is not None:
                self._signal_timer_locked(self.timer_target)
        for park in parks:
            park.release()
        for entry in drained:
            claim(entry.take()[0], cancel=True)

    def join(self) -> None:
        """Wait for every thread of the pool to exit; from one of them, return at once.

        A pool thread cannot wait for the pool: it would wait for itself, or for a worker
        that waits for it (two tasks calling ``shutdown()`` at once), or keep the queue from
        draining while the timer it waits for sleeps until a deadline.
        """
        current = threading.current_thread()
        with self.lock:
            threads = list(self.threads)
            if current in self.threads or current is self.timer_thread:
                return
        for thread in threads:
            thread.join()
        with self.lock:
            if self.timer_thread is not None:
                self._signal_timer_locked(self.timer_target)
            timer = self.timer_thread
        if timer is not None:
            timer.join()

    def check_invariants(self) -> None:
        """Check the queue's and the scheduler's invariants in O(n); for tests only."""
        with self.lock:
            self.queue._check_invariants()
            assert self.wakes >= 0, "more wake-ups consumed than given"
            assert len(self.idle) <= len(self.threads), "more idle workers than threads"
            assert len(self.threads) <= self.max_workers, "more threads than max_workers"
            if self.idle and self.queue:
                assert self.wakes > 0, "a task waits while every idle worker sleeps"
            if self.queue.deadline_count and not self.broken:
                earliest = self.queue.next_deadline()
                assert self.timer_thread is not None, "deadlines pending without a timer"
                assert self.timer_target is not None and earliest is not None
                assert self.timer_target <= earliest, "the timer would sleep past a deadline"

    def after_fork_in_child(self) -> None:
        """Make a pool inherited across ``fork()`` refuse work instead of hanging on it.

        Its threads do not exist in the child, and another thread may have held its lock.
        """
        self.lock = threading.Lock()
        self.idle.clear()
        self.threads.clear()
        self.timer_thread = None
        self.broken = "cannot use a pool inherited across os.fork(); create a new pool in the child"

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
        try:
            threading.Thread(
                name=f"{self.thread_name_prefix}_stop",
                target=self.stop,
                kwargs={"shutdown": False, "cancel_futures": False},
            ).start()
        except RuntimeError:
            # The interpreter is exiting: its exit hook stops every pool anyway.
            pass
