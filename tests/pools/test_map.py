"""``map`` beyond the standard pool's: ``priority`` and ``timeout`` for every call, ``buffersize``
refills at that priority and within ``max_queued``, pause and views are honoured, a view's map
loses nothing when the view is dropped, and every call goes through ``submit``, so that a
subclass overriding it sees each one. (What ``map`` shares with the standard pool:
test_behaviour.py.)

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. Nothing sleeps to synchronise: a state that no event announces (a call
queued by the iterator) is polled with ``wait_until``, and every wait has a timeout.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, TypeVar, Union, cast

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor, QueueFullError
from support import (
    AGEING,
    Recorder,
    assert_nothing_queued,
    closing,
    exact,
    held_pool,
    hold_worker,
    internals,
    joined_promptly,
    queue_full_message,
    wait_until,
)

T = TypeVar("T")


# -- priority and buffersize ----------------------------------------------------------------


def test_map_with_priority_runs_before_lower_priority_work(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        pool.submit(record, "normal")
        low = pool.map(record, ["low 1", "low 2"], priority=Priority.LOW)
        high = pool.map(record, ["high 1", "high 2"], priority=Priority.HIGH)
        gate.open()
        assert list(high) == ["high 1", "high 2"]
        assert list(low) == ["low 1", "low 2"]
    assert record.ran == ["high 1", "high 2", "normal", "low 1", "low 2"]


def test_map_with_buffersize_queues_refills_at_its_priority() -> None:
    record = Recorder()
    started = threading.Event()
    release = threading.Event()
    consumed: list[list[int]] = []

    def work(x: int) -> int:
        record(x)
        if x == 0:
            started.set()
            assert release.wait(TIMEOUT)
        return x

    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        try:
            results = pool.map(work, range(3), buffersize=1, priority=Priority.HIGH)
            assert started.wait(TIMEOUT)  # call 0 holds the only worker
            pool.submit(record, "normal")
            # The consumer's first next() queues call 1, then waits for call 0.
            consumer = threading.Thread(target=lambda: consumed.append(list(results)))
            consumer.start()
            wait_until(lambda: internals(pool).queued() == 2, "call 1 is queued")
        finally:
            release.set()
        consumer.join(TIMEOUT)
        assert not consumer.is_alive()
    assert consumed == [[0, 1, 2]]
    # Call 1, queued after "normal" but at a higher priority, ran first.
    assert record.ran[:2] == [0, 1]
    assert sorted(map(str, record.ran)) == ["0", "1", "2", "normal"]


def test_map_rejects_bad_buffersize_on_every_python() -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(TypeError, match=exact("buffersize must be an integer or None")):
            pool.map(int, ["1"], buffersize=cast(Any, "1"))
        with pytest.raises(ValueError, match=exact("buffersize must be None or > 0")):
            pool.map(int, ["1"], buffersize=0)
        assert_nothing_queued(pool)


def test_map_with_priority_honours_pause_and_resume() -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1)
    with closing(pool):
        pool.pause()
        pool.submit(record, "low", priority=Priority.LOW)
        results = pool.map(record, [1, 2, 3], priority=Priority.HIGH)
        view_results = pool.options(priority=Priority.NORMAL).map(record, ["v1", "v2"])
        stats = pool.statistics()
        assert stats.queued_by_priority == {1: 3, 0: 2, -1: 1}
        assert stats.running == 0
        assert record.ran == []
        pool.resume()
        assert list(results) == [1, 2, 3]
        assert list(view_results) == ["v1", "v2"]
        assert joined_promptly(pool)
        pool._check_invariants()
    assert record.ran == [1, 2, 3, "v1", "v2", "low"]


@pytest.mark.parametrize(("when_full", "buffersize"), [("raise", 1), ("block", 5)])
def test_map_with_buffersize_works_under_max_queued(when_full: Any, buffersize: int) -> None:
    # map keeps up to buffersize + 1 calls ahead of the consumer (it submits the next call
    # before waiting for the current one, as on 3.14): buffersize=1 fits max_queued=2 even
    # when the queue may not overflow; with "block" a larger window just waits for room.
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full=when_full)) as pool:
        results = pool.map(str, range(20), buffersize=buffersize, priority=Priority.HIGH)
        assert list(results) == [str(i) for i in range(20)]
        stats = pool.statistics()
        assert (stats.rejected, stats.submitted) == (0, 20)
        pool._check_invariants()


def test_map_under_raise_when_full_raises_queue_full_error(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full="raise"), gate) as pool:
        hold_worker(pool, gate)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
            pool.map(str, range(3), priority=Priority.HIGH)
        assert pool.statistics().rejected == 1
        pool._check_invariants()


# -- through a view -------------------------------------------------------------------------


# A view's map with buffersize loses nothing when the view itself is not kept: the iterator keeps
# the view alive, so it goes on submitting after the caller drops the view instead of ending
# after ``buffersize`` results.


@pytest.mark.parametrize("ageing", AGEING)
def test_map_of_a_view_that_is_not_kept_yields_every_result(ageing: Optional[float]) -> None:
    with PriorityThreadPoolExecutor(max_workers=2, ageing=ageing) as pool:
        results = pool.options(priority=3).map(abs, range(-20, 0), buffersize=2)
        gc.collect()  # the view is gone; the pool is alive
        assert list(results) == list(range(20, 0, -1))


def test_map_of_a_view_stops_submitting_once_its_pool_is_collected() -> None:
    # As the standard map with buffersize holds its executor only weakly, so does ours: the
    # iterator alone does not keep a dropped pool (and its threads) alive.
    pool = PriorityThreadPoolExecutor(max_workers=1)
    results = pool.options().map(abs, range(-10, 0), buffersize=2)
    pool_ref = weakref.ref(pool)
    del pool
    gc.collect()
    assert pool_ref() is None, "the map iterator keeps the pool alive"
    assert list(results) == [10, 9]


# -- through submit -------------------------------------------------------------------------


# map goes through submit, as the standard Executor.map calls self.submit, so a subclass
# overriding submit (to propagate a context, or to trace) sees every call. The standard pool's
# case is the reference.


class TracedStandardPool(ThreadPoolExecutor):
    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers)
        self.calls: list[tuple[Any, ...]] = []

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        self.calls.append(args)
        return super().submit(fn, *args, **kwargs)


class TracedPriorityPool(PriorityThreadPoolExecutor):
    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers)
        self.calls: list[tuple[Any, ...]] = []

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        self.calls.append(args)
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("pool_class", [TracedStandardPool, TracedPriorityPool])
def test_map_calls_an_overridden_submit_once_per_item(
    pool_class: Union[type[TracedStandardPool], type[TracedPriorityPool]],
) -> None:
    with pool_class(2) as pool:
        assert list(pool.map(abs, range(0, -5, -1))) == [0, 1, 2, 3, 4]
    assert pool.calls == [(0,), (-1,), (-2,), (-3,), (-4,)]


@pytest.mark.parametrize("buffersize", [None, 2])
def test_map_with_priority_or_buffersize_calls_an_overridden_submit(
    buffersize: Optional[int],
) -> None:
    with TracedPriorityPool(2) as pool:
        results = pool.map(abs, range(0, -5, -1), priority=3, buffersize=buffersize)
        assert list(results) == [0, 1, 2, 3, 4]
    assert pool.calls == [(0,), (-1,), (-2,), (-3,), (-4,)]
