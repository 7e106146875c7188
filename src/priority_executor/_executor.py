"""PriorityThreadPoolExecutor: the public class, argument checks and the standard surface.

It subclasses :class:`concurrent.futures.ThreadPoolExecutor` so that ``isinstance`` checks and
``asyncio``'s ``loop.set_default_executor`` accept it, but it overrides every method that
touches work and never calls the base class's constructor or private helpers, which differ
from one Python version to the next. The public methods it shares with every priority
executor are in :class:`~._front.PriorityFront`; the queue and the lock live in an
:class:`~._admission.Admission`, and the threads in a :class:`~._threads.ThreadRunner`, which
hold no reference back to the executor, so a pool dropped without ``shutdown()`` is collected
and its threads exit.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.thread import BrokenThreadPool
from typing import Any, Optional

from ._control import AdmissionControl
from ._front import PriorityFront
from ._policy import WhenFull, check_flag, check_max_workers, check_seconds
from ._rates import RateLimitLike
from ._threads import ThreadRunner
from ._work_queue import WorkQueue


def _default_max_workers() -> int:
    # The standard pool's default; 3.13 counts the CPUs this process may use.
    cpu_count = getattr(os, "process_cpu_count", os.cpu_count)
    return min(32, (cpu_count() or 1) + 4)


def _max_workers(value: object) -> int:
    """``max_workers`` for the constructor and the setter alike: None for the default."""
    return _default_max_workers() if value is None else check_max_workers(value)


# mypy compares PriorityFront.submit, with its keywords, with ThreadPoolExecutor.submit.
class PriorityThreadPoolExecutor(PriorityFront, ThreadPoolExecutor):  # type: ignore[misc,override]
    """A drop-in ThreadPoolExecutor with priorities, queue deadlines and prompt cancellation.

    Higher priority runs first; equal priorities run in submission order, across all
    submitting threads. Every method is safe to call from any thread.

    Args:
        max_workers: the most threads the pool starts; default ``min(32, cpus + 4)``. As
            for the standard pool, any number above 0: one that is not an int is rounded
            up (2.5 starts up to 3 threads, as the standard pool does).
        thread_name_prefix: threads are named ``f"{prefix}_{i}"``; default
            ``"PriorityThreadPoolExecutor-N"``.
        initializer: called with ``initargs`` at the start of each worker thread. If it raises,
            the pool is broken: pending and later submissions get ``BrokenThreadPool``.
        initargs: arguments for ``initializer``.
        clock: the clock of queue deadlines, ageing and rate limits, seconds as a float;
            default ``time.monotonic``.
        ageing: seconds of waiting in the queue that raise a task's effective priority by
            one, against starvation: no task of a priority ``gap`` higher that arrives more
            than ``gap * ageing`` seconds after a task runs before it. A positive float;
            default None: strict priority.
        max_queued: the most tasks waiting in the queue (running ones do not count), a
            positive int; default None: no bound.
        when_full: what ``submit`` does while ``max_queued`` tasks wait. ``"block"`` (the
            default): wait for room; the wait counts toward the task's own ``timeout``, and
            from one of the pool's own threads it raises ``QueueFullError`` instead.
            ``"raise"``: raise ``QueueFullError``. ``"evict"``: cancel the lowest-ranked
            queued task (its waiters wake) if the new one outranks it, else raise
            ``QueueFullError``.
        copy_context: run each task in a copy of its submitter's ``contextvars`` context,
            taken at ``submit``, as ``asyncio.to_thread`` does (tracing spans, request-scoped
            values); what a task sets then stays in its copy. Default False: the standard
            pool's semantics, where tasks run in their worker thread's own context, which
            starts empty and keeps what the initializer and earlier tasks set.
        rate_limit: ``RateLimit(starts, per)`` or a ``(starts, per)`` pair: at most
            ``starts`` task starts in any ``per`` seconds of ``clock``, a sliding window.
            Default None: no limit.
        key_limit: at most this many tasks of one key (see :meth:`options`) run at once, a
            positive int. Default None: no limit.
        key_rate_limit: a ``RateLimit`` for the starts of each key. Default None: no limit.
        idle_timeout: a worker idle this many seconds exits; the next task that needs one
            starts a new one. A positive float; default None: workers live until shutdown,
            as in the standard pool.

    The limits (``max_workers`` too) are properties that can be set while the pool runs.

    Raises:
        ValueError: ``max_workers`` is not greater than 0, or is infinite or NaN;
            ``ageing``, ``idle_timeout`` or a limit is not positive (or not finite, or beyond
            float range); ``when_full`` is not ``"block"``, ``"raise"`` or ``"evict"``.
        TypeError: ``initializer`` or ``clock`` is not callable, ``copy_context`` is not
            a bool, or ``ageing``, ``idle_timeout`` or a limit has a wrong type.
    """

    #: What a broken pool raises; a subclass may change it, as on Python 3.14.
    BROKEN: type[BrokenThreadPool] = BrokenThreadPool

    _counter = itertools.count().__next__

    def __init__(
        self,
        max_workers: Optional[int] = None,
        thread_name_prefix: str = "",
        initializer: Optional[Callable[..., object]] = None,
        initargs: tuple[Any, ...] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        ageing: Optional[float] = None,
        max_queued: Optional[int] = None,
        when_full: WhenFull = "block",
        copy_context: bool = False,
        rate_limit: Optional[RateLimitLike] = None,
        key_limit: Optional[int] = None,
        key_rate_limit: Optional[RateLimitLike] = None,
        idle_timeout: Optional[float] = None,
    ) -> None:
        # The base class's __init__ is deliberately not called: it builds a queue, a
        # semaphore and, on 3.14, worker contexts that this class does not use.
        workers = _max_workers(max_workers)
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._copy_context = check_flag("copy_context", copy_context)
        idle = check_seconds("idle_timeout", idle_timeout)
        if idle is not None:
            idle = min(idle, threading.TIMEOUT_MAX)
        self._thread_name_prefix = (
            thread_name_prefix or f"PriorityThreadPoolExecutor-{self._counter()}"
        )
        initargs = tuple(initargs)
        self._admission: AdmissionControl[ThreadRunner] = AdmissionControl.for_front(
            self,
            name=self._thread_name_prefix,
            clock=clock,
            broken_type=type(self).BROKEN,
            ageing=ageing,
            max_queued=max_queued,
            when_full=when_full,
            rate_limit=rate_limit,
            key_limit=key_limit,
            key_rate_limit=key_rate_limit,
            make_runner=lambda admission: ThreadRunner(
                admission,
                max_workers=workers,
                initializer=initializer,
                initargs=initargs,
                idle_timeout=idle,
            ),
        )
        self._work_queue_reader = WorkQueue(self._admission)

    @property
    def max_workers(self) -> int:
        """The most worker threads the pool runs; settable while it runs.

        A higher value starts the threads that queued tasks need at once; a lower one
        interrupts no task: surplus workers exit as they finish (idle ones at once). It
        takes what the constructor takes, with the same errors: a number that is not an int
        is rounded up, and None is the default.
        """
        return self._admission.runner.max_workers

    @max_workers.setter
    def max_workers(self, value: Optional[int]) -> None:
        self._admission.resize(_max_workers(value))

    # The standard pool's attributes that tests and libraries read, with the same meaning.

    @property
    def _max_workers(self) -> int:  # type: ignore[override]  # read-only: set max_workers
        return self._admission.runner.max_workers

    @property
    def _threads(self) -> AbstractSet[threading.Thread]:  # type: ignore[override]  # read-only
        """The worker threads started so far (a live view; do not modify)."""
        return self._admission.runner.threads

    @property
    def _work_queue(self) -> WorkQueue:  # type: ignore[override]  # not a SimpleQueue
        """The queued tasks, read as the standard pool's queue is; see ``_work_queue.py``."""
        return self._work_queue_reader

    def __repr__(self) -> str:
        state = self._admission.state()
        return (
            f"<{type(self).__name__} {state.describe()} max_workers={self._max_workers}"
            f" threads={len(self._threads)} queued={state.queued} running={state.running}>"
        )
