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
import weakref
from concurrent.futures import Future
from typing import Any, Callable, Optional

from . import _process
from ._policy import Number, is_due, sort_key
from ._queue import Entry, TaskQueue

LOGGER = logging.getLogger("concurrent.futures")

#: The standard pool's message for a failed initializer, word for word.
BROKEN_BY_INITIALIZER = "A thread initializer failed, the thread pool is not usable anymore"


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
        # Workers woken or started that have not yet looked at the queue. A submit wakes a
        # worker only while the queue holds more entries than this, so a burst of submits
        # wakes as many workers as it needs and no more.
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
        future.add_done_callback(self._on_done)
        with self.lock:
            if self.broken:
                raise self.broken_type(self.broken)
            if self.shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _process.exiting:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            if timeout is not None:
                now = self.clock()
                entry.deadline = deadline = now + timeout
                if is_due(deadline, now):
                    expired = True
                else:
                    expired = False
                    if self.timer_target is None or deadline < self.timer_target:
                        self._signal_timer_locked(deadline)
            else:
                expired = False
            if not expired:
                self.queue.push(entry, sort_key(priority))
                if self.wakes < len(self.queue):
                    self._wake_worker_locked(entry)
        if expired:
            # timeout=0: the task may not wait at all, and any hand-off to a worker waits.
            claim(future, cancel=True)
        return future

    def _wake_worker_locked(self, entry: Entry) -> None:
        if self.idle:
            self.wakes += 1
            self.idle.pop().release()
        elif len(self.threads) < self.max_workers:
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
            self.timer_thread = threading.Thread(
                name=f"{self.thread_name_prefix}_timer", target=self._time
            )
            self.timer_thread.start()
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
        clock = self.clock
        while True:
            expired = []
            with lock:
                if woken:
                    self.wakes -= 1
                    woken = False
                entry = queue.pop()
                # One clock reading under the lock decides between running and expiring.
                while entry is not None and entry.deadline is not None:
                    if not is_due(entry.deadline, clock()):
                        break
                    expired.append(entry)
                    entry = queue.pop()
                if entry is None:
                    if self.stopping:
                        if self.timer_thread is not None:
                            self._signal_timer_locked(None)
                        return_after_settling = True
                    else:
                        self.idle.append(park)
                        return_after_settling = False
            for gone in expired:
                claim(gone.take()[0], cancel=True)
            del expired
            if entry is not None:
                run(*entry.take())
                del entry  # nothing of the task stays referenced while this worker sleeps
                continue
            if return_after_settling:
                return
            park.acquire()
            woken = True

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
                now = self.clock()
                due = queue.pop_due(now)
                deadline = queue.next_deadline()
                self.timer_target = deadline
                done = deadline is None and self.stopping
                if done:
                    self.timer_thread = None
            for entry in due:
                claim(entry.take()[0], cancel=True)
            del due
            if done:
                return
            if deadline is None:
                signalled = self.timer_park.acquire()
            else:
                signalled = self.timer_park.acquire(timeout=max(0.0, deadline - now))

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
            parks, self.idle = self.idle, []
            self.wakes += len(parks)
            if self.timer_thread is not None:
                self._signal_timer_locked(self.timer_target)
        for park in parks:
            park.release()
        for entry in drained:
            claim(entry.take()[0], cancel=True)

    def join(self) -> None:
        """Wait for every thread of the pool except the calling one to exit."""
        with self.lock:
            threads = list(self.threads)
            timer = self.timer_thread
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join()
        with self.lock:
            if self.timer_thread is not None:
                self._signal_timer_locked(self.timer_target)
            timer = self.timer_thread
        if timer is not None and timer is not current:
            timer.join()

    def check_invariants(self) -> None:
        """Check the queue's and the scheduler's invariants in O(n); for tests only."""
        with self.lock:
            self.queue._check_invariants()
            assert self.wakes >= 0, "more wake-ups consumed than given"
            assert len(self.idle) <= len(self.threads), "more idle workers than threads"
            assert len(self.threads) <= self.max_workers, "more threads than max_workers"
            if self.idle:
                assert len(self.queue) <= self.wakes, "a task waits while a worker sleeps"
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
        self.idle = []
        self.timer_thread = None
        self.broken = "cannot use a pool inherited across os.fork(); create a new pool in the child"

    def owner_gone(self, _ref: weakref.ReferenceType[Any]) -> None:
        """Weak-reference callback: the executor was collected without ``shutdown()``."""
        self.stop(shutdown=False, cancel_futures=False)
