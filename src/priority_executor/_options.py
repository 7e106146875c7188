"""``pool.options(...)``: an executor view that fixes priority, timeout and key for its tasks.

The standard ``submit(fn, /, *args, **kwargs)`` hands every keyword to ``fn``; ours keeps
``priority`` and ``timeout`` for itself. Code that forwards keywords it does not know about,
``pool.submit(requests.get, url, timeout=5)`` or a library handed an executor, must get the
standard contract back: a view's ``submit`` and ``map`` forward every keyword to ``fn``
untouched and take the priority and queue timeout from the view.

A view does not own the pool. Its ``shutdown()`` closes the view only: later submissions
through it raise the standard ``RuntimeError``, ``wait=True`` waits for the tasks submitted
through this view, ``cancel_futures=True`` cancels those of them still queued. The pool, and
work submitted to it otherwise, carry on.

A view is a :class:`~concurrent.futures.ThreadPoolExecutor` too, as the pool is, so that what
insists on one accepts it: ``loop.set_default_executor`` (a ``TypeError`` otherwise on 3.11+),
tornado's ``IOLoop.set_default_executor``, dask's ``pool=`` setting. Like the pool it never
calls the base class's constructor; the standard pool's attributes that such code reads
(``_max_workers``, ``_threads``, ``_shutdown``, ``_broken``, ``_thread_name_prefix``) are
read-only properties that read the pool's. So ``asyncio.run``, closing, calls
``shutdown(wait=True)`` on a view set as its default executor: the view closes and its tasks
are waited for, and the pool carries on.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, Optional, Protocol, TypeVar, Union

from ._map import map_results
from ._policy import Number
from ._queue import NO_KWARGS

T = TypeVar("T")


class ViewTarget(Protocol):
    """What a view needs of the executor it submits to (``_front.PriorityFront`` has it)."""

    @property
    def _max_workers(self) -> int: ...

    @property
    def _thread_name_prefix(self) -> Optional[str]: ...

    @property
    def _threads(self) -> AbstractSet[threading.Thread]: ...

    @property
    def _shutdown(self) -> bool: ...

    @property
    def _broken(self) -> Union[Literal[False], str]: ...

    def _submit_checked(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        timeout: Optional[float],
        view_state: Any = None,
    ) -> Future[T]:
        """Submit with options already checked; refused once ``view_state.closed`` is set."""

    def _is_own_thread(self) -> bool: ...

    def _wake_blocked(self) -> None: ...


class PoolView(ThreadPoolExecutor):
    """A :class:`~concurrent.futures.ThreadPoolExecutor` that submits to a pool with fixed options.

    Made by :meth:`PriorityThreadPoolExecutor.options`; safe to use from any thread. It
    queues through the pool's internal submit, not ``pool.submit``: that method keeps the
    ``priority`` and ``timeout`` keywords, which a view must pass on to ``fn``.
    """

    def __init__(
        self, pool: ViewTarget, priority: Number, timeout: Optional[float], key: Hashable = None
    ) -> None:
        # The base class's __init__ is deliberately not called: the view starts no thread.
        self._pool = pool
        self._state = _ViewState(priority, timeout, key)

    @property
    def priority(self) -> Number:
        """The priority of every task submitted through this view."""
        return self._state.priority

    @property
    def key(self) -> Hashable:
        """The key of every task submitted through this view (None for no key)."""
        return self._state.key

    @property
    def timeout(self) -> Optional[float]:
        """How long, in seconds, each task submitted through this view may wait in the queue."""
        return self._state.timeout

    # The standard pool's attributes, read from the pool; typeshed declares them writable.

    @property
    def _max_workers(self) -> int:  # type: ignore[override]  # read-only
        return self._pool._max_workers

    @property
    def _thread_name_prefix(self) -> Optional[str]:  # type: ignore[override]  # read-only
        return self._pool._thread_name_prefix

    @property
    def _threads(self) -> AbstractSet[threading.Thread]:  # type: ignore[override]  # read-only
        """The pool's worker threads (a live view; do not modify)."""
        return self._pool._threads

    @property
    def _shutdown(self) -> bool:  # type: ignore[override]  # read-only
        """True once this view is closed or its pool shut down: it refuses submissions."""
        with self._state.lock:
            if self._state.closed:
                return True
        return self._pool._shutdown

    @property
    def _broken(self) -> Union[Literal[False], str]:  # type: ignore[override]  # bool in typeshed
        return self._pool._broken

    @property
    def _work_queue(self) -> Any:  # type: ignore[override]  # read-only
        """The pool's ``_work_queue``: every queued task of the pool, not only this view's.

        As the standard pool's queue would give them to code handed the view: a view has no
        queue of its own. A front over another executor has none, and neither has its view.
        """
        pool: Any = self._pool
        return pool._work_queue

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Submit ``fn(*args, **kwargs)`` to the pool with this view's priority and timeout.

        Every keyword goes to ``fn``. Blocks only as the pool's ``submit`` does (a full
        queue with ``when_full="block"``).

        Raises:
            TypeError: ``fn`` is not callable.
            RuntimeError: this view or its pool was shut down (also while it waited for room).
            QueueFullError: the pool's queue is full, as for the pool's ``submit``.
            BrokenThreadPool: the pool is broken, as for the pool's ``submit``.
        """
        return self._state.submit(self._pool, fn, args, kwargs)

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
        buffersize: Optional[int] = None,
    ) -> Iterator[T]:
        """Like :meth:`concurrent.futures.Executor.map`, with this view's priority and timeout.

        ``timeout`` here is the standard one: seconds to wait for the results, counted from
        this call. ``chunksize`` is ignored, as by the standard thread pool. With
        ``buffersize``, the iterator holds the pool only weakly, as the standard one holds its
        executor, but keeps what it needs of the view: a view dropped meanwhile loses nothing.
        """
        return map_results(self._pool, self._state.submit_args, fn, iterables, timeout, buffersize)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Close this view; the pool keeps running. Idempotent, safe from any thread.

        A submit through this view that is still waiting for room in a full queue is
        refused with the standard ``RuntimeError``; one that is just being queued is
        cancelled with the rest when ``cancel_futures`` is True.

        Args:
            wait: block until every task submitted through this view is done; from one of
                the pool's own threads it does not wait (it could wait for itself).
            cancel_futures: cancel the tasks submitted through this view that have not started.
        """
        own_thread = self._pool._is_own_thread()
        state = self._state
        with state.lock:
            state.closed = True
            state.cancelling = state.cancelling or cancel_futures
        self._pool._wake_blocked()  # blocked submits through this view see it closed
        with state.lock:
            if wait and not own_thread:
                state.settled.wait_for(lambda: not state.submitting)
            pending = list(state.pending)
        if cancel_futures:
            for future in pending:
                future.cancel()
        if wait and not own_thread:
            # Not a wait on the futures: one taken out through _work_queue meanwhile may
            # never run, and leaves ``pending`` then (``_ViewState.taken``).
            with state.lock:
                state.settled.wait_for(lambda: not state.pending)

    def __repr__(self) -> str:
        state = self._state
        return (
            f"<PoolView priority={state.priority!r} timeout={state.timeout!r}"
            f" key={state.key!r} closed={state.closed} of {self._pool!r}>"
        )


class _ViewState:
    """What a view owns, apart from its pool: a ``map`` iterator keeps this, not the pool.

    It is also the ``_queue.ViewState`` the pool's submit checks under the pool's lock: once
    ``closed`` is set (under this lock, then the pool's lock taken to wake blocked submits),
    no task is queued through the view.
    """

    def __init__(self, priority: Number, timeout: Optional[float], key: Hashable) -> None:
        self.priority = priority
        self.timeout = timeout
        self.key = key
        self.lock = threading.Lock()
        # Notified, once the view is closed, when no submit is under way or a task leaves.
        self.settled = threading.Condition(self.lock)
        self.closed = False
        self.cancelling = False  # shut down with cancel_futures=True
        self.submitting = 0
        self.pending: set[Future[Any]] = set()
        # Taken out through _work_queue before their submit recorded them (submitting > 0).
        self.taken_early: set[Future[Any]] = set()
        # The done-callback reaches this state through a weak reference: a future kept by a
        # caller must not keep the view alive.
        self.forget = _forgetter(weakref.ref(self))

    def submit(
        self,
        pool: ViewTarget,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Future[T]:
        with self.lock:
            if self.closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self.submitting += 1
        # Not under the view's lock: the pool's submit may block on a full queue until a
        # task of this view finishes, and that task's done-callback takes the view's lock.
        future = None
        try:
            future = pool._submit_checked(fn, args, kwargs, self.priority, self.timeout, self)
        finally:
            with self.lock:
                self.submitting -= 1
                taken = bool(self.taken_early) and future in self.taken_early
                if not self.submitting:
                    self.taken_early.clear()
                # Queued while the view was being shut down with cancel_futures=True, too
                # late for shutdown() to see it: cancel it here, as shutdown() would have.
                cancel = future is not None and self.cancelling and not taken
                if future is not None and not cancel and not taken:
                    self.pending.add(future)
                self.settled.notify_all()
        if cancel:
            future.cancel()
        else:
            future.add_done_callback(self.forget)
        return future

    def submit_args(
        self, pool: ViewTarget, fn: Callable[..., T], args: tuple[Any, ...]
    ) -> Future[T]:
        return self.submit(pool, fn, args, NO_KWARGS)

    def taken(self, future: Future[Any]) -> None:
        """``_work_queue.get()`` took ``future``'s task out of the pool: not ours to wait for."""
        with self.lock:
            if self.submitting:  # perhaps its own submit, which has not recorded it yet
                self.taken_early.add(future)
            self._discard_locked(future)

    def discard(self, future: Future[Any]) -> None:
        """Forget ``future``, which is done (a done-callback)."""
        with self.lock:
            self._discard_locked(future)

    def _discard_locked(self, future: Future[Any]) -> None:
        self.pending.discard(future)
        if self.closed:  # shutdown(wait=True) may be waiting for the last one to go
            self.settled.notify_all()


def _forgetter(state_ref: weakref.ReferenceType[_ViewState]) -> Callable[[Future[Any]], None]:
    def forget(future: Future[Any]) -> None:
        state = state_ref()
        if state is not None:
            state.discard(future)

    return forget
