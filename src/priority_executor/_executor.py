"""PriorityThreadPoolExecutor: the public class, argument checks and the standard surface.

It subclasses :class:`concurrent.futures.ThreadPoolExecutor` so that ``isinstance`` checks and
``asyncio``'s ``loop.set_default_executor`` accept it, but it overrides every method that
touches work and never calls the base class's constructor or private helpers, which differ
from one Python version to the next. The threads, the queue and the lock live in a
:class:`~._scheduler.Scheduler`, which the threads share and which holds no reference back to
the executor, so a pool dropped without ``shutdown()`` is collected and its threads exit.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.thread import BrokenThreadPool
from typing import Any, Callable, Literal, Optional, TypeVar, Union

from ._context import InContext
from ._map import map_results
from ._options import PoolView
from ._policy import (
    Number,
    Priority,
    WhenFull,
    check_aged_priority,
    check_ageing,
    check_max_queued,
    check_priority,
    check_timeout,
    check_when_full,
    describe,
)
from ._scheduler import Gate, Scheduler
from ._stats import ExecutorStatistics
from ._work_queue import WorkQueue

T = TypeVar("T")


def _default_max_workers() -> int:
    # The standard pool's default; 3.13 counts the CPUs this process may use.
    cpu_count = getattr(os, "process_cpu_count", os.cpu_count)
    return min(32, (cpu_count() or 1) + 4)


class PriorityThreadPoolExecutor(ThreadPoolExecutor):
    """A drop-in ThreadPoolExecutor with priorities, queue deadlines and prompt cancellation.

    Higher priority runs first; equal priorities run in submission order, across all
    submitting threads. Every method is safe to call from any thread.

    Args:
        max_workers: the most threads the pool starts; default ``min(32, cpus + 4)``.
        thread_name_prefix: threads are named ``f"{prefix}_{i}"``; default
            ``"PriorityThreadPoolExecutor-N"``.
        initializer: called with ``initargs`` at the start of each worker thread. If it raises,
            the pool is broken: pending and later submissions get ``BrokenThreadPool``.
        initargs: arguments for ``initializer``.
        clock: the clock of queue deadlines, seconds as a float; default ``time.monotonic``.
        copy_context: run each task in a copy of its submitter's ``contextvars`` context,
            taken at ``submit``, as ``asyncio.to_thread`` does (tracing spans, request-scoped
            values); what a task sets then stays in its copy. Default False: the standard
            pool's semantics, where tasks run in their worker thread's own context, which
            starts empty and keeps what the initializer and earlier tasks set.

    Raises:
        ValueError: ``max_workers`` is not greater than 0.
        TypeError: ``initializer`` or ``clock`` is not callable, or ``copy_context`` is not
            a bool.
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
    ) -> None:
        # The base class's __init__ is deliberately not called: it builds a queue, a
        # semaphore and, on 3.14, worker contexts that this class does not use.
        if max_workers is None:
            max_workers = _default_max_workers()
        if max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if not callable(clock):
            raise TypeError(f"clock must be callable, got {describe(clock)}")
        if type(copy_context) is not bool:
            raise TypeError(f"copy_context must be a bool, got {describe(copy_context)}")
        self._copy_context = copy_context
        self._max_workers = max_workers
        self._thread_name_prefix = (
            thread_name_prefix or f"PriorityThreadPoolExecutor-{self._counter()}"
        )
        self._scheduler = Scheduler(
            max_workers,
            self._thread_name_prefix,
            initializer,
            tuple(initargs),
            clock,
            type(self).BROKEN,
            ageing=check_ageing(ageing),
            max_queued=check_max_queued(max_queued),
            when_full=check_when_full(when_full),
        )
        # Kept by the scheduler, not by self: a weak reference that dies in the same garbage
        # cycle as its referent never calls back.
        self._scheduler.owner = weakref.ref(self, self._scheduler.owner_gone)
        self._work_queue_reader = WorkQueue(self._scheduler)

    # The standard pool's attributes that tests and libraries read, with the same meaning.

    @property
    def _threads(self) -> AbstractSet[threading.Thread]:  # type: ignore[override]  # read-only
        """The worker threads started so far (a live view; do not modify)."""
        return self._scheduler.threads

    @property
    def _work_queue(self) -> WorkQueue:  # type: ignore[override]  # not a SimpleQueue
        """The queued tasks, read as the standard pool's queue is; see ``_work_queue.py``."""
        return self._work_queue_reader

    @property
    def _shutdown(self) -> bool:
        with self._scheduler.lock:
            return self._scheduler.shutdown

    @_shutdown.setter
    def _shutdown(self, value: bool) -> None:
        with self._scheduler.lock:
            self._scheduler.shutdown = value

    # typeshed says bool; the standard pool stores False or the message.
    @property  # type: ignore[override]
    def _broken(self) -> Union[Literal[False], str]:
        with self._scheduler.lock:
            return self._scheduler.broken

    @_broken.setter
    def _broken(self, value: Union[Literal[False], str]) -> None:
        with self._scheduler.lock:
            self._scheduler.broken = value

    def submit(  # type: ignore[override]
        # PEP 612 allows no keyword between *args and **kwargs, so the standard
        # ParamSpec signature cannot take ``priority`` and ``timeout``.
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> Future[T]:
        """Schedule ``fn(*args, **kwargs)`` and return its Future.

        Does not block, unless ``max_queued`` tasks wait and ``when_full`` is ``"block"``:
        then it waits for room (from one of the pool's own threads it raises instead).

        Higher priority runs first; equal priorities run in submission order. ``priority``
        and ``timeout`` are not passed to ``fn``; use :meth:`options` to give ``fn`` keywords
        of those names.

        Args:
            fn: the callable to run in a worker thread.
            priority: any real number; :class:`Priority` names the usual three.
            timeout: how long the task may wait in the queue, in seconds on the pool's
                clock, counted from this call. A task still queued at its deadline is
                cancelled and never starts, and its waiters wake at once; a task that has
                started is never interrupted. ``0`` means it may not wait at all: it is
                cancelled at once. ``None`` means no deadline.

        Raises:
            TypeError: ``fn`` is not callable, or ``priority`` or ``timeout`` has a wrong type.
            ValueError: ``priority`` is NaN, or ``timeout`` is negative or NaN.
            RuntimeError: the pool was shut down, or the interpreter is exiting.
            BrokenThreadPool: an initializer failed.
            QueueFullError: ``max_queued`` tasks wait and ``when_full`` is ``"raise"``, or
                ``"evict"`` with no queued task ranked below this one, or ``"block"`` from
                one of the pool's own threads.
        """
        if type(priority) is not int and type(priority) is not Priority:  # fast path first
            priority = check_priority(priority)
        if self._scheduler.ageing is not None:
            check_aged_priority(priority)
        if timeout is not None:
            timeout = check_timeout(timeout)
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {describe(fn)}")
        if self._copy_context:
            fn = InContext(contextvars.copy_context(), fn)
        return self._scheduler.submit(fn, args, kwargs, priority, timeout)

    def _submit(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        timeout: Optional[float],
        gate: Optional[Gate] = None,
    ) -> Future[T]:
        """Submit for a view, whose options were checked when it was made."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {describe(fn)}")
        if self._copy_context:
            fn = InContext(contextvars.copy_context(), fn)
        return self._scheduler.submit(fn, args, kwargs, priority, timeout, gate)

    def options(
        self, *, priority: Number = Priority.NORMAL, timeout: Optional[float] = None
    ) -> PoolView:
        """A view of this pool whose ``submit`` and ``map`` forward every keyword to ``fn``.

        Tasks submitted through the view get this ``priority`` and queue ``timeout`` (as in
        :meth:`submit`). Hand the view to code that forwards keyword arguments, such as a
        library that takes an executor, or to ``loop.run_in_executor``. Its ``shutdown()``
        closes the view, not the pool.
        """
        return PoolView(self, check_priority(priority), check_timeout(timeout))

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
        buffersize: Optional[int] = None,
        priority: Number = Priority.NORMAL,
    ) -> Iterator[T]:
        """``Executor.map`` with every call at ``priority``; the 3.14 semantics on every Python.

        Without ``buffersize`` every call is submitted before this returns. ``timeout`` is the
        standard one: seconds to wait for the results, counted from this call (it is not a
        queue deadline). ``chunksize`` is ignored, as by the standard thread pool. Calls not
        yet yielded are cancelled when the iterator fails, times out or is closed.

        Raises:
            TypeError: ``buffersize`` is not an int, or ``priority`` has a wrong type.
            ValueError: ``buffersize`` is below 1, or ``priority`` is NaN.
        """
        level = check_priority(priority)
        # Through self.submit, as the standard map does, so that a subclass overriding
        # submit sees every call.
        return map_results(
            self,
            lambda pool, fn, args: pool.submit(fn, *args, priority=level),
            fn,
            iterables,
            timeout,
            buffersize,
        )

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new work and let the threads exit once the queue is empty. Idempotent.

        Args:
            wait: block until every worker has exited (all queued work done, unless
                cancelled). Called from one of the pool's own threads (a task, or a
                done-callback run by a worker), it does not wait: the pool cannot wait for
                itself. The standard pool raises or deadlocks there instead.
            cancel_futures: cancel every task that has not started and wake its waiters.
                Running tasks always finish.
        """
        self._scheduler.stop(shutdown=True, cancel_futures=cancel_futures)
        if wait:
            self._scheduler.join_threads()

    # Beyond the standard pool.

    def set_priority(self, future: Future[Any], priority: Number) -> bool:
        """Move a still-queued task to a new priority. O(log n); safe from any thread.

        The task goes behind the tasks already queued at that priority, as if submitted now;
        with ``ageing`` it keeps the age it has, counted from its submission.

        Returns:
            True if the task was queued and has moved; False if it has started, finished or
            been cancelled, or was not submitted to this pool.

        Raises:
            TypeError: ``future`` is not a Future, or ``priority`` is not a real number.
            ValueError: ``priority`` is NaN.
        """
        if not isinstance(future, Future):
            raise TypeError(f"future must be a concurrent.futures.Future, got {describe(future)}")
        level = check_priority(priority)
        if self._scheduler.ageing is not None:
            check_aged_priority(level)
        return self._scheduler.set_priority(future, level)

    def pause(self) -> None:
        """Start no queued task until :meth:`resume`. Does not block; idempotent.

        Running tasks finish, ``submit`` still queues, and queue deadlines still expire.
        ``shutdown()`` resumes a paused pool, so it cannot hang on the queued tasks; after
        it, ``pause()`` has no effect.
        """
        self._scheduler.set_paused(True)

    def resume(self) -> None:
        """Let queued tasks start again, waking as many workers as they need. Idempotent."""
        self._scheduler.set_paused(False)

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume` (or ``shutdown()``)."""
        with self._scheduler.lock:
            return self._scheduler.paused

    def join(self, timeout: Optional[float] = None) -> bool:
        """Block until no task is queued or running. Safe to call from several threads.

        Args:
            timeout: the most seconds to wait (real time), or None to wait for as long as
                it takes.

        Returns:
            True once the pool is idle; False if ``timeout`` passed first.

        Raises:
            TypeError: ``timeout`` is neither None nor a real number.
            ValueError: ``timeout`` is negative or NaN.
            RuntimeError: called from one of the pool's own threads, which would wait for
                itself.
        """
        return self._scheduler.wait_quiet(check_timeout(timeout))

    def statistics(self) -> ExecutorStatistics:
        """A consistent snapshot of what is queued and running, and the counts so far."""
        return self._scheduler.statistics()

    def _check_invariants(self) -> None:
        """Assert every invariant of the queue and the scheduler, in O(n). For tests."""
        self._scheduler.check_invariants()

    def __repr__(self) -> str:
        scheduler = self._scheduler
        with scheduler.lock:
            if scheduler.broken:
                state = "broken"
            elif scheduler.shutdown:
                state = "shutdown"
            else:
                state = "paused" if scheduler.paused else "running"
            queued, running = len(scheduler.queue), scheduler.running
            threads = len(scheduler.threads)
        return (
            f"<{type(self).__name__} {state} max_workers={self._max_workers}"
            f" threads={threads} queued={queued} running={running}>"
        )
