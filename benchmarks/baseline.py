"""The baseline: the priority pool a user writes in an afternoon on top of ``queue.PriorityQueue``.

It is the design most hand-rolled priority pools use, written plainly and without tricks, so
that the benchmarks can say what our pool buys over doing it yourself:

* every worker is started up front and blocks in ``PriorityQueue.get()``;
* ``submit`` puts ``(-priority, n, item)``, so higher priorities come out first and ``n``, one
  counter, keeps equal priorities in submission order (and keeps items from being compared);
* a queue ``timeout`` is checked when a worker takes the task, the usual way: a task past its
  deadline is cancelled then, and nothing happens at the deadline itself;
* ``cancel()`` on a queued future leaves its item in the heap until a worker pops and skips it;
* ``shutdown`` puts one sentinel per worker that sorts after every task, so queued work drains
  first unless ``cancel_futures`` empties the queue.
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, Optional, TypeVar

T = TypeVar("T")

# (future, fn, args, kwargs, deadline); None is the sentinel that stops a worker.
_Item = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any], Optional[float]]


class PriorityQueuePool(Executor):
    """A fixed pool of ``max_workers`` threads taking tasks from a ``queue.PriorityQueue``."""

    def __init__(self, max_workers: int) -> None:
        if max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        self._queue: queue.PriorityQueue[tuple[float, int, Optional[_Item]]] = queue.PriorityQueue()
        self._counter = itertools.count()
        self._lock = threading.Lock()  # makes shutdown and submit exclusive
        self._shutdown = False
        self._threads = [
            threading.Thread(target=self._work, name=f"PriorityQueuePool_{i}", daemon=True)
            for i in range(max_workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(  # type: ignore[override]
        # Like ours, it takes keywords of its own, which the standard ParamSpec signature forbids.
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        priority: float = 0,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; higher ``priority`` runs first, ties in order."""
        future: Future[T] = Future()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.put((-priority, next(self._counter), (future, fn, args, kwargs, deadline)))
        return future

    def _work(self) -> None:
        get = self._queue.get
        while True:
            item = get()[2]
            if item is None:
                return
            future, fn, args, kwargs, deadline = item
            del item
            if deadline is not None and time.monotonic() >= deadline:
                future.cancel()
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                    del result
            del future, fn, args, kwargs  # hold nothing of the last task while blocked in get()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers once the queue is empty; with ``cancel_futures``, empty it now."""
        drained: list[_Item] = []
        with self._lock:
            first = not self._shutdown
            self._shutdown = True
            sentinels = len(self._threads) if first else 0
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()[2]
                    except queue.Empty:
                        break
                    if item is None:
                        sentinels += 1  # put back below
                    else:
                        drained.append(item)
            for _ in range(sentinels):
                self._queue.put((math.inf, next(self._counter), None))
        for item in drained:
            item[0].cancel()
        if wait:
            for thread in self._threads:
                thread.join()
