"""Static type tests: ``assert_type`` lines that only mypy checks.

The file name does not start with ``test_``, so pytest never collects it, and nothing here
runs: each check is a function that is never called. ``mypy --strict`` (which warns about
unused ``type: ignore`` comments) fails if an inferred type changes or if a call marked as
rejected starts being accepted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Literal, Optional, Union

from typing_extensions import assert_type

from priority_executor import (
    AsyncPriorityScheduler,
    PoolView,
    Priority,
    PriorityExecutor,
    PriorityThreadPoolExecutor,
    RateLimit,
    expired,
)


def make_bytes(size: int, *, fill: bytes = b"x") -> bytes:
    return fill * size


def add(a: int, b: int) -> int:
    return a + b


def check_submit(pool: PriorityThreadPoolExecutor) -> None:
    assert_type(pool.submit(int, "1"), Future[int])
    assert_type(pool.submit(make_bytes, 3, fill=b"y"), Future[bytes])
    assert_type(pool.submit(str, 1, priority=Priority.HIGH), Future[str])
    assert_type(pool.submit(str, 1, priority=5, timeout=1.5), Future[str])
    assert_type(pool.submit(str, priority=-2.5, timeout=None), Future[str])
    assert_type(pool.submit(lambda: None), Future[None])


def check_map(pool: PriorityThreadPoolExecutor) -> None:
    assert_type(pool.map(str, [1, 2]), Iterator[str])
    assert_type(pool.map(add, [1], [2], timeout=1.0), Iterator[int])
    assert_type(pool.map(add, [1], [2], chunksize=4, buffersize=2), Iterator[int])
    assert_type(pool.map(str, [1], priority=Priority.LOW), Iterator[str])


def check_options(pool: PriorityThreadPoolExecutor) -> None:
    view = pool.options(priority=Priority.HIGH, timeout=5)
    assert_type(view, PoolView)
    assert_type(pool.options(), PoolView)
    assert_type(view.submit(make_bytes, 2, fill=b"z"), Future[bytes])
    assert_type(view.map(add, [1], [2], timeout=3.0), Iterator[int])
    assert_type(view.priority, Union[int, float])
    assert_type(view.timeout, Optional[float])


def check_pool_shape(pool: PriorityThreadPoolExecutor) -> None:
    with pool as entered:
        assert_type(entered, PriorityThreadPoolExecutor)
    assert_type(pool.shutdown(wait=False, cancel_futures=True), None)
    assert_type(pool._max_workers, int)
    # Ours goes wherever the standard pool or any executor is expected.
    standard: ThreadPoolExecutor = pool
    executor: Executor = pool.options()
    assert_type(standard, ThreadPoolExecutor)
    assert_type(executor, Executor)


def check_priority_enum() -> None:
    assert_type(Priority.HIGH, Literal[Priority.HIGH])
    assert_type(int(Priority.LOW), int)
    assert_type(Priority.HIGH + 1, int)
    assert_type(
        PriorityThreadPoolExecutor(max_workers=2, clock=lambda: 0.0), PriorityThreadPoolExecutor
    )


def check_expired(pool: PriorityThreadPoolExecutor, scheduler: AsyncPriorityScheduler) -> None:
    assert_type(expired(pool.submit(str, 1, timeout=0)), bool)
    assert_type(expired(scheduler.submit(asyncio.sleep, 0, timeout=0)), bool)
    expired(pool)  # type: ignore[arg-type]


def check_rejected(pool: PriorityThreadPoolExecutor) -> None:
    pool.submit(int, priority="high")  # type: ignore[arg-type]
    pool.submit(int, timeout="5")  # type: ignore[arg-type]
    pool.options(priority=None)  # type: ignore[arg-type]
    pool.map(str, [1], priority="low")  # type: ignore[arg-type]
    PriorityThreadPoolExecutor(clock=1.0)  # type: ignore[arg-type]


def check_rate_limits_take_a_pair_on_every_owner(
    pool: PriorityThreadPoolExecutor, front: PriorityExecutor, scheduler: AsyncPriorityScheduler
) -> None:
    # Read, it is always a RateLimit (or None).
    assert_type(pool.rate_limit, Optional[RateLimit])
    assert_type(front.key_rate_limit, Optional[RateLimit])
    assert_type(scheduler.rate_limit, Optional[RateLimit])
    # The documented (starts, per) pair, where a RateLimit goes: constructors and setters.
    PriorityThreadPoolExecutor(rate_limit=(5, 1.0), key_rate_limit=(1, 2))
    PriorityExecutor(ThreadPoolExecutor(2), rate_limit=(5, 1.0), key_rate_limit=(1, 2))
    AsyncPriorityScheduler(2, rate_limit=(5, 1.0), key_rate_limit=(1, 2))
    PriorityThreadPoolExecutor(rate_limit=RateLimit(5, 1.0), key_rate_limit=None)
    pool.rate_limit = (5, 1.0)
    pool.key_rate_limit = RateLimit(1, 2.0)
    front.rate_limit = (5, 1)
    front.key_rate_limit = None
    scheduler.rate_limit = (5, 1.0)
    scheduler.key_rate_limit = (1, 2.0)
    # max_workers: the setter takes what the constructor takes, None (the default) too.
    pool.max_workers = None
    assert_type(pool.max_workers, int)


def check_rate_limits_rejected(pool: PriorityThreadPoolExecutor, front: PriorityExecutor) -> None:
    PriorityThreadPoolExecutor(rate_limit=(5, "1"))  # type: ignore[arg-type]
    PriorityExecutor(ThreadPoolExecutor(2), rate_limit=5)  # type: ignore[arg-type]
    pool.rate_limit = (5,)  # type: ignore[assignment]
    front.key_rate_limit = (1.5, 2.0)  # type: ignore[assignment]
