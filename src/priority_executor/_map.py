"""``Executor.map`` as Python 3.14 defines it, for every supported Python.

The standard semantics: without ``buffersize`` every call is submitted before ``map`` returns;
results come in input order; ``timeout`` counts from the call to ``map``; on an error, a
timeout or an early ``close()`` of the iterator, every call not yet yielded is cancelled.
With ``buffersize`` at most that many calls are queued or running ahead of the consumer, and
the iterator holds only a weak reference to the executor.
"""

from __future__ import annotations

import collections
import itertools
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Optional, TypeVar

T = TypeVar("T")
Owner = TypeVar("Owner")


def check_buffersize(buffersize: object) -> None:
    """Raise the standard pool's errors (3.14) for a bad ``buffersize``."""
    if buffersize is not None and not isinstance(buffersize, int):
        raise TypeError("buffersize must be an integer or None")
    if buffersize is not None and buffersize < 1:
        raise ValueError("buffersize must be None or > 0")


def map_results(
    owner: Owner,
    submit: Callable[[Owner, Callable[..., T], tuple[Any, ...]], Future[T]],
    fn: Callable[..., T],
    iterables: tuple[Iterable[Any], ...],
    timeout: Optional[float],
    buffersize: Optional[int],
) -> Iterator[T]:
    """Submit ``fn`` over ``zip(*iterables)`` through ``submit(owner, fn, args)``.

    Checks ``buffersize`` and submits the first calls now; returns the iterator of results.
    """
    check_buffersize(buffersize)
    end_time = None if timeout is None else timeout + time.monotonic()
    calls = zip(*iterables, strict=False)  # the shortest iterable ends it, as in map()
    if buffersize is None:
        futures = collections.deque(submit(owner, fn, args) for args in calls)
        owner_ref = None
    else:
        futures = collections.deque(
            submit(owner, fn, args) for args in itertools.islice(calls, buffersize)
        )
        owner_ref = weakref.ref(owner)
    del owner
    return _results(futures, end_time, calls, owner_ref, submit, fn)


def _results(
    futures: collections.deque[Future[T]],
    end_time: Optional[float],
    calls: Iterator[tuple[Any, ...]],
    owner_ref: Optional[weakref.ReferenceType[Any]],
    submit: Callable[[Any, Callable[..., T], tuple[Any, ...]], Future[T]],
    fn: Callable[..., T],
) -> Iterator[T]:
    try:
        while futures:
            if owner_ref is not None:
                owner = owner_ref()
                if owner is not None:
                    args = next(calls, None)
                    if args is not None:
                        futures.append(submit(owner, fn, args))
                del owner
            remaining = None if end_time is None else end_time - time.monotonic()
            # No local name for the future: while suspended here, this frame must not keep
            # the result alive (CPython issue 14406).
            yield _result_or_cancel(futures.popleft(), remaining)
    finally:
        for future in futures:
            future.cancel()


def _result_or_cancel(future: Future[T], timeout: Optional[float]) -> T:
    try:
        return future.result(timeout)
    finally:
        # Cancel the awaited call too if result() timed out; a no-op once it is done.
        future.cancel()
        del future
