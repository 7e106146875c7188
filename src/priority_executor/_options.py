"""``pool.options(...)``: an executor view that fixes priority and timeout for its submissions.

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
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, TypeVar, Union

from ._map import map_results
from ._policy import Number

if TYPE_CHECKING:
    from ._executor import PriorityThreadPoolExecutor

T = TypeVar("T")


class PoolView(ThreadPoolExecutor):
    """A :class:`~concurrent.futures.ThreadPoolExecutor` that submits to a pool with fixed options.

    Made by :meth:`PriorityThreadPoolExecutor.options`; safe to use from any thread. It
    queues through the pool's internal submit, not ``pool.submit``: that method keeps the
    ``priority`` and ``timeout`` keywords, which a view must pass on to ``fn``.
    """

    def __init__(
        self, pool: PriorityThreadPoolExecutor, priority: Number, timeout: Optional[float]
    ) -> None:
        # The base class's __init__ is deliberately not called: the view starts no thread.
        self._pool = pool
        self._priority = priority
        self._timeout = timeout
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # no submit through the view under way
        self._closed = False
        self._submitting = 0
        self._pending: set[Future[Any]] = set()
        # The done-callback reaches the view through a weak reference: a future kept by a
        # caller must not keep the view, and through it the pool and its threads, alive.
        self._forget = _forgetter(weakref.ref(self))

    @property
    def priority(self) -> Number:
        """The priority of every task submitted through this view."""
        return self._priority

    @property
    def timeout(self) -> Optional[float]:
        """How long, in seconds, each task submitted through this view may wait in the queue."""
        return self._timeout

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
        with self._lock:
            if self._closed:
                return True
        return self._pool._shutdown

    @property
    def _broken(self) -> Union[Literal[False], str]:  # type: ignore[override]  # bool in typeshed
        return self._pool._broken

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Submit ``fn(*args, **kwargs)`` to the pool with this view's priority and timeout.

        Every keyword goes to ``fn``. Blocks only as the pool's ``submit`` does (a full
        queue with ``when_full="block"``).

        Raises:
            RuntimeError: this view or its pool was shut down.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._submitting += 1
        # Not under the view's lock: the pool's submit may block on a full queue until a
        # task of this view finishes, and that task's done-callback takes the view's lock.
        future = None
        try:
            future = self._pool._submit(fn, args, kwargs, self._priority, self._timeout)
        finally:
            with self._lock:
                self._submitting -= 1
                if future is not None:
                    self._pending.add(future)
                self._settled.notify_all()
        future.add_done_callback(self._forget)
        return future

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
        this call. ``chunksize`` is ignored, as by the standard thread pool.
        """
        return map_results(self, _submit_args, fn, iterables, timeout, buffersize)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Close this view; the pool keeps running. Idempotent, safe from any thread.

        Args:
            wait: block until every task submitted through this view is done; from one of
                the pool's own threads it does not wait (it could wait for itself).
            cancel_futures: cancel the tasks submitted through this view that have not started.
        """
        own_thread = self._pool._scheduler.is_own_thread()
        with self._lock:
            self._closed = True
            if wait and not own_thread:
                self._settled.wait_for(lambda: not self._submitting)
            pending = list(self._pending)
        if cancel_futures:
            for future in pending:
                future.cancel()
        if wait and not own_thread:
            futures_wait(pending)

    def __repr__(self) -> str:
        return (
            f"<PoolView priority={self._priority!r} timeout={self._timeout!r}"
            f" closed={self._closed} of {self._pool!r}>"
        )


def _submit_args(view: PoolView, fn: Callable[..., T], args: tuple[Any, ...]) -> Future[T]:
    return view.submit(fn, *args)


def _forgetter(view_ref: weakref.ReferenceType[PoolView]) -> Callable[[Future[Any]], None]:
    def forget(future: Future[Any]) -> None:
        view = view_ref()
        if view is not None:
            with view._lock:
                view._pending.discard(future)

    return forget
