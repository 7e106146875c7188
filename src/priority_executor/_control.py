"""Admission control: what the public methods beyond ``submit`` do to a pool's admission.

:class:`AdmissionControl` is the :class:`~._admission.Admission` a front holds: the core, plus
``set_priority``, pause, ``join()``, the statistics, stopping (``shutdown()``, collection of
the executor, interpreter exit) and ``fork()``. The lock's rules and the flows are those told
at the top of ``_admission.py``.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal, NamedTuple, Optional, TypeVar, Union

from . import _lifecycle
from ._admission import Admission
from ._callbacks import CallbackRunner
from ._context import fresh_thread
from ._limits import Limits
from ._policy import Number, check_ageing, check_clock, check_limit, check_when_full
from ._rates import RateLimit
from ._room import Room
from ._runner import Runner
from ._stats import ExecutorStatistics
from ._timer import MAX_SLEEP, DeadlineTimer

RunnerT = TypeVar("RunnerT", bound=Runner)


class PoolState(NamedTuple):
    """What ``repr`` and the standard pool's private flags show, in one snapshot."""

    broken: Union[Literal[False], str]
    shutdown: bool
    paused: bool
    queued: int
    running: int

    def describe(self) -> str:
        if self.broken:
            return "broken"
        if self.shutdown:
            return "shutdown"
        return "paused" if self.paused else "running"


class AdmissionControl(Admission[RunnerT]):
    """A pool's admission with its controls; see the module docstring."""

    @classmethod
    def for_front(
        cls,
        owner: object,
        *,
        name: str,
        clock: object,
        broken_type: type[BaseException],
        ageing: object,
        max_queued: object,
        when_full: object,
        rate_limit: object,
        key_limit: object,
        key_rate_limit: object,
        make_runner: Callable[[Admission[RunnerT]], RunnerT],
    ) -> AdmissionControl[RunnerT]:
        """Check a front's queue options and make its admission, adopted by ``owner``."""
        limits = Limits.checked(rate_limit, key_limit, key_rate_limit)
        admission: AdmissionControl[RunnerT] = cls(
            name=name,
            clock=check_clock(clock),
            broken_type=broken_type,
            ageing=check_ageing(ageing),
            max_queued=check_limit("max_queued", max_queued),
            when_full=check_when_full(when_full),
            limits=limits,
            make_runner=make_runner,
        )
        admission.adopt(owner)
        return admission

    def adopt(self, owner: object) -> None:
        """Serve ``owner``, the front: stop when it is collected; stop at exit; mind fork.

        The weak reference is kept here, not by the front: one that dies in the same garbage
        cycle as its referent never calls back.
        """
        self.owner_ref = weakref.ref(owner, self.owner_gone)
        _lifecycle.register(self)

    def wake_timer(self) -> None:
        """Make the timer re-read the clock now (tests call this after moving a fake clock)."""
        with self.lock:
            self.timer.wake_locked()

    def wake_blocked(self) -> None:
        """Make submits blocked on a full queue re-check whether they may still queue."""
        with self.lock:
            self.room.wake_all_locked()

    # -- limits changed at run time --------------------------------------------------------

    def change_limit(self, limit: str, value: Union[int, RateLimit, None]) -> None:
        """Set ``limit`` to a checked ``value`` under the lock, then start what it allows.

        A higher limit starts at once what it now allows; a lower one interrupts nothing.
        The starts already counted in a window still count under a new rate limit. A new
        rate limit needs the timer, started first: if it cannot start, nothing changes.
        """
        with self.lock:
            if isinstance(value, RateLimit):
                self.timer.start_locked()  # may raise: nothing changed yet
            self.core.change_limit(limit, value)  # if the clock raises, nothing changed
            self._restaffed_locked()
        self.runner.start_pending(None)

    def resize(self, size: int) -> None:
        """Set ``max_workers`` (or the front's ``max_running``), checked by the caller."""
        with self.lock:
            self.runner.resize_locked(size)
            self._restaffed_locked()
        self.runner.start_pending(None)

    def _restaffed_locked(self) -> None:
        """After a limit changed: wake the timer for a new slot, and the takers for new room."""
        core = self.core
        if core.limits.timed:
            self.wake_timer_locked()
        if not core.paused:
            self.runner.resumed_locked(core.startable())

    # -- set_priority, pause, join, statistics ---------------------------------------------

    def set_priority(self, future: Future[Any], priority: Number) -> bool:
        """Move a queued task to ``priority``; False if it is not queued in this pool."""
        with self.lock:
            return self.core.requeue(future, priority)

    def set_paused(self, paused: bool) -> None:
        """Pause or resume the start of queued tasks; resuming wakes the workers needed."""
        with self.lock:
            core = self.core
            if core.stopping:
                return  # a stopping pool drains its queue: it cannot be paused again
            core.paused = paused
            if paused:
                self.yield_until = 0.0  # nothing starts: yielding would not hasten anything
            else:
                self.runner.resumed_locked(core.startable())
        self.runner.start_pending(None)

    def is_own_thread(self) -> bool:
        """True when called from one of this pool's threads (see is_own_thread_locked)."""
        with self.lock:
            return self.is_own_thread_locked(threading.current_thread())

    def wait_quiet(self, timeout: Optional[float]) -> bool:
        """Block until nothing is queued, running or being settled; False on ``timeout``."""
        if self.is_own_thread():
            raise RuntimeError(
                "cannot join() from one of the pool's own threads: it would wait for itself"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        self._finish_interrupted()
        with self.lock:
            core = self.core
            # One statement each way: an interrupt leaves both counted, or neither.
            self.joiners, core.watchers = self.joiners + 1, core.watchers + 1
            try:
                while not core.quiet():
                    # Lock timeouts overflow past threading.TIMEOUT_MAX: wait in slices.
                    left = MAX_SLEEP if deadline is None else deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.quiet.wait(min(left, MAX_SLEEP))
                return True
            finally:
                self.joiners, core.watchers = self.joiners - 1, core.watchers - 1

    def _finish_interrupted(self) -> None:
        """Start the threads and settle the evictions that an interrupted submit left."""
        self.runner.start_pending(None)
        self.settler.settle_deferred()

    def statistics(self) -> ExecutorStatistics:
        """A snapshot of the pool's state and counts, taken under the lock."""
        with self.lock:
            workers, idle = self.runner.sizes_locked()
            return self.core.statistics(
                workers=workers,
                idle_workers=idle,
                listener_errors=self.listeners.errors,
                **self.runner.capacity_locked(),
            )

    def state(self) -> PoolState:
        """The pool's flags and sizes, read together under the lock."""
        with self.lock:
            core = self.core
            return PoolState(
                self.broken,
                self.shutdown,
                core.paused,
                len(core.queue),
                core.running,
            )

    # -- 6. stopping -----------------------------------------------------------------------

    def stop(self, *, refuse_new: bool, cancel_futures: bool) -> None:
        """Let every thread exit once the queue is empty; never blocks, never runs tasks here.

        A paused pool is resumed, so that its queued tasks run (or are cancelled) and
        ``shutdown(wait=True)`` cannot hang on them.

        Args:
            refuse_new: refuse new submissions from now on (``shutdown()``, not collection).
            cancel_futures: cancel every queued task and wake its waiters.
        """
        with self.lock:
            if refuse_new:
                self.shutdown = True
            self.core.stopping = True
            self.core.paused = False
            drained = self.drain_locked("cancelled") if cancel_futures else []
            self.runner.stop_locked()
            self.timer.wake_locked()
            self.room.wake_all_locked()  # blocked submits raise the standard RuntimeError
        self.settler.cancel(drained)
        try:
            self.runner.start_pending(None)
        except Exception:
            # No thread can start (at interpreter exit, say) and none runs: cancel what
            # would otherwise wait for ever.
            with self.lock:
                drained = [] if self.runner.staffed_locked() else self.drain_locked("cancelled")
            if drained:
                self.settler.abandon(drained)

    def join(self) -> None:
        """Wait for every thread of the pool to exit; from one of them, return at once.

        A pool thread cannot wait for the pool: it would wait for itself, or for a worker
        that waits for it (two tasks calling ``shutdown()`` at once), or keep the queue from
        draining while the timer it waits for sleeps until a deadline.
        """
        if self.is_own_thread():
            return
        self._finish_interrupted()
        self.runner.join()
        self.timer.join()
        self.callbacks.join()  # those the timer handed callbacks to, until it exited

    def owner_gone(self, _ref: weakref.ReferenceType[Any]) -> None:
        """Weak-reference callback: the executor was collected without ``shutdown()``.

        The garbage collector may call this in any thread, at any allocation, even in one of
        the pool's own threads while it holds the pool's lock, which is not reentrant. So if
        the lock is not free at once, a short-lived thread waits for it instead.
        """
        if self.lock.acquire(False):
            self.lock.release()
            self.stop(refuse_new=False, cancel_futures=False)
            return
        # If the interpreter is exiting, no thread can start; its exit hook stops every pool.
        with contextlib.suppress(RuntimeError):
            fresh_thread(
                f"{self.name}_stop", self.stop, refuse_new=False, cancel_futures=False
            ).start()

    def after_fork_in_child(self) -> None:
        """Make a pool inherited across ``fork()`` refuse work instead of hanging on it.

        Its threads do not exist in the child, and another thread may have held its lock. A
        pool that had started no thread has no such state to lose, and stays usable.
        """
        self.lock = threading.Lock()
        used = self.runner.after_fork_in_child(self.lock)
        used = used or bool(self.core.queue) or self.timer.thread is not None
        self.quiet = threading.Condition(self.lock)
        self.room = Room(self.lock)
        self.joiners = 0
        self.yield_until = 0.0
        # A used pool's queue may have been caught mid-update: nothing is queued in the
        # child. Its futures never settle there, as with the standard pool, but join() and
        # shutdown() return.
        self.core = self.core.rebuilt()
        self.timer = DeadlineTimer(self)
        self.callbacks = CallbackRunner(self, self.name)
        if used:
            self.broken_error = None
            self.broken = (
                "cannot use a pool inherited across os.fork(); create a new pool in the child"
            )
