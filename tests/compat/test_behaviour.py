"""One behaviour suite for ``ThreadPoolExecutor`` and ``PriorityThreadPoolExecutor``.

Every test takes the ``pool_class`` fixture and runs against both classes, so whatever the
standard pool does and ours claims to match is checked against the real thing on the running
Python. A test that only holds for ours skips the standard pool and says why.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Generator, Iterator
from concurrent.futures import (
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    CancelledError,
    Future,
    ThreadPoolExecutor,
    as_completed,
    wait,
)
from concurrent.futures import TimeoutError as FuturesTimeoutError
from concurrent.futures.thread import BrokenThreadPool
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import PriorityThreadPoolExecutor
from support import BROKEN_MESSAGE, SHUTDOWN_MESSAGE, Recorder, exact, internals, wait_until

T = TypeVar("T")
PoolClass = type[ThreadPoolExecutor]


@pytest.fixture(params=[ThreadPoolExecutor, PriorityThreadPoolExecutor], ids=["stdlib", "priority"])
def pool_class(request: pytest.FixtureRequest) -> PoolClass:
    cls: PoolClass = request.param
    return cls


def skip_stdlib(pool_class: PoolClass, why: str) -> None:
    if pool_class is ThreadPoolExecutor:
        pytest.skip(f"ThreadPoolExecutor: {why}")


@contextmanager
def opens_on_exit(*gates: Gate) -> Iterator[None]:
    """Open ``gates`` on the way out, so a failing test does not wait for them to time out.

    List it after the pool in a ``with`` statement: it then exits first, before the pool's
    shutdown waits for the gated task.
    """
    try:
        yield
    finally:
        for gate in gates:
            gate.open()


def current_thread_name() -> str:
    return threading.current_thread().name


def idle_workers(pool: ThreadPoolExecutor) -> int:
    """How many of ``pool``'s workers are idle, as each class counts them."""
    if isinstance(pool, PriorityThreadPoolExecutor):
        return internals(pool).idle_workers()
    return pool._idle_semaphore._value


def map_with_buffersize(pool: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> Iterator[Any]:
    # typeshed only knows ``buffersize`` when checking for 3.14.
    return cast(Iterator[Any], cast(Any, pool).map(*args, **kwargs))


def pulled_from(source: list[int], pulled: list[int]) -> Iterator[int]:
    """Yield ``source``, recording in ``pulled`` each item as the consumer takes it."""
    for item in source:
        pulled.append(item)
        yield item


# -- submit and results ---------------------------------------------------------------------


def test_submit_returns_future_with_the_result(pool_class: PoolClass) -> None:
    with pool_class(max_workers=2) as pool:
        future = pool.submit(pow, 2, 10)
        assert isinstance(future, Future)
        assert future.result(timeout=TIMEOUT) == 1024
        assert future.done()
        assert not future.cancelled()


def test_submit_passes_positional_and_keyword_arguments(pool_class: PoolClass) -> None:
    def join(*args: str, sep: str = "", end: str = "") -> str:
        return sep.join(args) + end

    with pool_class(max_workers=1) as pool:
        future = pool.submit(join, "a", "b", sep="-", end="!")
        assert future.result(timeout=TIMEOUT) == "a-b!"


def test_keyword_named_fn_reaches_the_task(pool_class: PoolClass) -> None:
    def echo(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    with pool_class(max_workers=1) as pool:
        assert pool.submit(echo, fn=1, self=2).result(timeout=TIMEOUT) == {"fn": 1, "self": 2}


def test_exception_raised_by_task_is_stored_and_reraised(pool_class: PoolClass) -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pool_class(max_workers=1) as pool:
        future = pool.submit(fail)
        error = future.exception(timeout=TIMEOUT)
        assert isinstance(error, ValueError)
        with pytest.raises(ValueError, match=exact("boom")):
            future.result(timeout=TIMEOUT)


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_base_exception_raised_by_task_is_stored_and_worker_survives(
    pool_class: PoolClass, exc_type: type[BaseException]
) -> None:
    def fail() -> str:
        raise exc_type("from the task")

    with pool_class(max_workers=1) as pool:
        failed = pool.submit(fail)
        error = failed.exception(timeout=TIMEOUT)
        assert type(error) is exc_type
        assert str(error) == "from the task"
        # One worker at most: the next task runs only if that worker is still alive.
        first_thread = next(iter(pool._threads))
        assert pool.submit(current_thread_name).result(timeout=TIMEOUT) == first_thread.name
        assert first_thread.is_alive()
        assert len(pool._threads) == 1


def test_raising_done_callback_is_logged_and_worker_keeps_running(
    pool_class: PoolClass, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    def bad_callback(_: Future[Any]) -> None:
        raise ValueError("callback failed")

    caplog.set_level(logging.ERROR, logger="concurrent.futures")
    with pool_class(max_workers=1) as pool, opens_on_exit(gate):
        blocker = pool.submit(gate)
        gate.wait_started()
        future = pool.submit(int, "7")
        future.add_done_callback(bad_callback)
        gate.open()
        assert future.result(timeout=TIMEOUT) == 7
        # The same single worker ran the callback before taking this task.
        assert pool.submit(int, "8").result(timeout=TIMEOUT) == 8
        assert blocker.result(timeout=TIMEOUT) == "gate"
    messages = [r.getMessage() for r in caplog.records if r.name == "concurrent.futures"]
    assert any(m.startswith("exception calling callback for <Future") for m in messages)


def test_task_may_submit_more_work_to_its_own_pool(pool_class: PoolClass) -> None:
    with pool_class(max_workers=2) as pool:

        def parent() -> Future[int]:
            return pool.submit(int, "5")

        child = pool.submit(parent).result(timeout=TIMEOUT)
        assert child.result(timeout=TIMEOUT) == 5


# -- constructor --------------------------------------------------------------------------


@pytest.mark.parametrize("max_workers", [0, -1])
def test_max_workers_must_be_greater_than_zero(pool_class: PoolClass, max_workers: int) -> None:
    with pytest.raises(ValueError, match=exact("max_workers must be greater than 0")):
        pool_class(max_workers=max_workers)


def test_initializer_must_be_callable(pool_class: PoolClass) -> None:
    with pytest.raises(TypeError, match=exact("initializer must be a callable")):
        pool_class(max_workers=1, initializer=cast(Any, "not callable"))


@pytest.mark.parametrize(("cpus", "expected"), [(1, 5), (4, 8), (28, 32), (64, 32), (None, 5)])
def test_default_max_workers_is_cpus_plus_four_capped_at_32(
    pool_class: PoolClass, monkeypatch: pytest.MonkeyPatch, cpus: int | None, expected: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    if hasattr(os, "process_cpu_count"):  # 3.13+ counts the CPUs this process may use
        monkeypatch.setattr(os, "process_cpu_count", lambda: cpus)
    pool = pool_class()
    try:
        assert pool._max_workers == expected
    finally:
        pool.shutdown()


def test_pool_keeps_standard_private_attributes(pool_class: PoolClass) -> None:
    pool = pool_class(max_workers=3)
    try:
        assert pool._max_workers == 3
        assert not pool._shutdown
        assert not pool._broken
        assert len(pool._threads) == 0
        pool.submit(int).result(timeout=TIMEOUT)
        assert all(isinstance(t, threading.Thread) for t in pool._threads)
        assert len(pool._threads) == 1
    finally:
        pool.shutdown()
    assert pool._shutdown


def test_initializer_runs_once_in_each_worker_with_initargs(pool_class: PoolClass) -> None:
    calls = Recorder()
    barrier = threading.Barrier(3, timeout=TIMEOUT)

    def init(tag: str) -> None:
        calls((tag, threading.current_thread().name))

    with pool_class(max_workers=2, initializer=init, initargs=("hello",)) as pool:
        # Two tasks that wait for each other need two workers.
        futures = [pool.submit(barrier.wait) for _ in range(2)]
        barrier.wait()
        wait(futures, timeout=TIMEOUT)
        pool.submit(int).result(timeout=TIMEOUT)
        names = {t.name for t in pool._threads}
    assert sorted(calls.ran) == sorted(("hello", name) for name in names)
    assert len(calls.ran) == 2


def test_failing_initializer_breaks_the_pool_for_pending_and_later_submits(
    pool_class: PoolClass, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    def init() -> None:
        assert release.wait(TIMEOUT)
        raise ValueError("initializer failed")

    caplog.set_level(logging.CRITICAL, logger="concurrent.futures")
    with pool_class(max_workers=1, initializer=init) as pool:
        pending = [pool.submit(int, "1"), pool.submit(int, "2")]
        release.set()
        assert wait(pending, timeout=TIMEOUT).not_done == set()
        for future in pending:
            error = future.exception(timeout=0)
            assert type(error) is BrokenThreadPool
            assert str(error) == BROKEN_MESSAGE
        with pytest.raises(BrokenThreadPool, match=exact(BROKEN_MESSAGE)):
            pool.submit(int, "3")
        assert pool._broken
    assert "Exception in initializer:" in [r.getMessage() for r in caplog.records]


# -- threads --------------------------------------------------------------------------------


def test_threads_are_started_lazily(pool_class: PoolClass) -> None:
    with pool_class(max_workers=4) as pool:
        assert len(pool._threads) == 0
        pool.submit(int).result(timeout=TIMEOUT)
        assert len(pool._threads) == 1


def test_sequential_submits_reuse_one_idle_thread(pool_class: PoolClass) -> None:
    with pool_class(max_workers=4, thread_name_prefix="seq") as pool:
        names = []
        for _ in range(5):
            names.append(pool.submit(current_thread_name).result(timeout=TIMEOUT))
            # The result is set before the worker goes idle; submit only once it has.
            wait_until(lambda: idle_workers(pool) >= 1, "the worker is idle")
        assert names == ["seq_0"] * 5
        assert len(pool._threads) == 1


@pytest.mark.parametrize("max_workers", [1, 3])
def test_burst_starts_up_to_max_workers_and_never_more(
    pool_class: PoolClass, max_workers: int
) -> None:
    barrier = threading.Barrier(max_workers + 1, timeout=TIMEOUT)
    hold = threading.Event()

    def busy() -> str:
        barrier.wait()
        assert hold.wait(TIMEOUT)
        return current_thread_name()

    with pool_class(max_workers=max_workers, thread_name_prefix="burst") as pool:
        busy_futures = [pool.submit(busy) for _ in range(max_workers)]
        barrier.wait()  # every worker is now busy in its own thread
        assert len(pool._threads) == max_workers
        queued = [pool.submit(current_thread_name) for _ in range(10)]
        assert len(pool._threads) == max_workers
        hold.set()
        names = {f.result(timeout=TIMEOUT) for f in busy_futures + queued}
        assert len(pool._threads) == max_workers
    assert names == {f"burst_{i}" for i in range(max_workers)}


def test_threads_are_named_prefix_underscore_index(pool_class: PoolClass) -> None:
    barrier = threading.Barrier(3, timeout=TIMEOUT)

    def name_after_barrier() -> str:
        barrier.wait()
        return current_thread_name()

    with pool_class(max_workers=2, thread_name_prefix="worker") as pool:
        futures = [pool.submit(name_after_barrier) for _ in range(2)]
        barrier.wait()
        assert {f.result(timeout=TIMEOUT) for f in futures} == {"worker_0", "worker_1"}
        assert {t.name for t in pool._threads} == {"worker_0", "worker_1"}


def test_default_thread_name_is_class_name_counter_and_index(pool_class: PoolClass) -> None:
    with pool_class(max_workers=1) as pool:
        name = pool.submit(current_thread_name).result(timeout=TIMEOUT)
    assert re.fullmatch(rf"{pool_class.__name__}-\d+_0", name), name


# -- context manager and shutdown ------------------------------------------------------------


def test_context_manager_returns_the_pool_and_drains_it_on_exit(
    pool_class: PoolClass, gate: Gate
) -> None:
    record = Recorder()
    with pool_class(max_workers=1) as pool, opens_on_exit(gate):
        assert isinstance(pool, pool_class)
        pool.submit(gate)
        gate.wait_started()
        futures = [pool.submit(record, i) for i in range(3)]
        gate.open()
    assert pool._shutdown
    assert all(f.done() for f in futures)
    assert record.ran == [0, 1, 2]
    with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
        pool.submit(int)


def test_context_manager_lets_exceptions_propagate_after_shutting_down(
    pool_class: PoolClass,
) -> None:
    pool = pool_class(max_workers=1)
    futures: list[Future[int]] = []

    def use_pool() -> None:
        with pool:
            futures.append(pool.submit(int, "3"))
            raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        use_pool()
    assert pool._shutdown
    assert futures[0].result(timeout=0) == 3


def test_submit_after_shutdown_raises_runtime_error(pool_class: PoolClass) -> None:
    pool = pool_class(max_workers=1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
        pool.submit(int)


def test_shutdown_is_idempotent(pool_class: PoolClass) -> None:
    pool = pool_class(max_workers=2)
    future = pool.submit(int, "4")
    pool.shutdown(wait=False)
    pool.shutdown()
    pool.shutdown(wait=True, cancel_futures=True)
    pool.shutdown(wait=False)
    assert future.result(timeout=TIMEOUT) == 4
    assert not any(t.is_alive() for t in pool._threads)


def test_shutdown_wait_runs_queued_work_first(pool_class: PoolClass, gate: Gate) -> None:
    record = Recorder()
    pool = pool_class(max_workers=1)
    try:
        pool.submit(gate)
        gate.wait_started()
        futures = [pool.submit(record, i) for i in range(5)]
        pool.shutdown(wait=False)  # the five are definitely still queued here
        gate.open()
        pool.shutdown(wait=True)
        assert [f.result(timeout=0) for f in futures] == [0, 1, 2, 3, 4]
        assert record.ran == [0, 1, 2, 3, 4]
        assert not any(t.is_alive() for t in pool._threads)
    finally:
        gate.open()
        pool.shutdown()


def test_shutdown_cancel_futures_cancels_queued_tasks_and_lets_running_finish(
    pool_class: PoolClass, gate: Gate
) -> None:
    record = Recorder()
    pool = pool_class(max_workers=1)
    try:
        blocker = pool.submit(gate)
        gate.wait_started()
        queued = [pool.submit(record, i) for i in range(5)]
        pool.shutdown(wait=False, cancel_futures=True)
        assert all(f.cancelled() for f in queued)
        assert blocker.running()
        gate.open()
        pool.shutdown(wait=True)
        assert blocker.result(timeout=0) == "gate"
        assert record.ran == []
        assert blocker.done()
        assert all(f.done() for f in queued)
        with pytest.raises(CancelledError):
            queued[0].result(timeout=0)
    finally:
        gate.open()
        pool.shutdown()


def test_shutdown_wait_false_returns_while_a_task_still_runs(
    pool_class: PoolClass, gate: Gate
) -> None:
    pool = pool_class(max_workers=1)
    try:
        blocker = pool.submit(gate)
        gate.wait_started()
        pool.shutdown(wait=False)
        assert blocker.running()
        gate.open()
        assert blocker.result(timeout=TIMEOUT) == "gate"
    finally:
        gate.open()
        pool.shutdown()


# -- cancel, wait, as_completed -------------------------------------------------------------


def test_cancel_before_start_means_the_task_never_runs(pool_class: PoolClass, gate: Gate) -> None:
    record = Recorder()
    with pool_class(max_workers=1) as pool, opens_on_exit(gate):
        blocker = pool.submit(gate)
        gate.wait_started()
        future = pool.submit(record, "cancelled")
        after = pool.submit(record, "after")
        assert future.cancel()
        assert future.cancel()  # cancelling twice still reports success
        assert future.cancelled()
        assert future.done()
        assert not blocker.cancel()  # already running
        gate.open()
        assert after.result(timeout=TIMEOUT) == "after"
    assert record.ran == ["after"]
    with pytest.raises(CancelledError):
        future.result(timeout=0)
    done, _ = wait([future], timeout=0)
    assert done == {future}


def test_wait_returns_on_first_completed(pool_class: PoolClass, gate: Gate) -> None:
    with pool_class(max_workers=2) as pool, opens_on_exit(gate):
        blocker = pool.submit(gate)
        gate.wait_started()
        quick = pool.submit(int, "1")
        futures: list[Future[Any]] = [blocker, quick]
        done, not_done = wait(futures, timeout=TIMEOUT, return_when=FIRST_COMPLETED)
        assert done == {quick}
        assert not_done == {blocker}
        gate.open()


def test_wait_returns_on_first_exception(pool_class: PoolClass, gate: Gate) -> None:
    with pool_class(max_workers=3) as pool, opens_on_exit(gate):
        blocker = pool.submit(gate)
        gate.wait_started()
        fine = pool.submit(int, "1")
        assert fine.result(timeout=TIMEOUT) == 1
        failing = pool.submit(int, "x")
        futures: list[Future[Any]] = [blocker, fine, failing]
        done, not_done = wait(futures, timeout=TIMEOUT, return_when=FIRST_EXCEPTION)
        assert done == {fine, failing}
        assert not_done == {blocker}
        gate.open()


def test_wait_all_completed_and_as_completed_see_every_future_once(
    pool_class: PoolClass,
) -> None:
    with pool_class(max_workers=3) as pool:
        futures = [pool.submit(pow, i, 2) for i in range(20)]
        done, not_done = wait(futures, timeout=TIMEOUT)
        assert done == set(futures)
        assert not not_done
        seen = list(as_completed(futures, timeout=TIMEOUT))
        assert sorted(map(id, seen)) == sorted(map(id, futures))
        assert sorted(f.result() for f in seen) == [i * i for i in range(20)]


def test_as_completed_yields_futures_as_they_finish(pool_class: PoolClass, gate: Gate) -> None:
    with pool_class(max_workers=2) as pool, opens_on_exit(gate):
        blocker = pool.submit(gate)
        gate.wait_started()
        quick = pool.submit(int, "2")
        futures: list[Future[Any]] = [blocker, quick]
        iterator = as_completed(futures, timeout=TIMEOUT)
        assert next(iterator) is quick
        gate.open()
        assert next(iterator) is blocker


# -- map ------------------------------------------------------------------------------------


def test_map_yields_results_in_input_order_not_completion_order(pool_class: PoolClass) -> None:
    first_may_finish = threading.Event()
    finished = Recorder()

    def work(x: int) -> int:
        if x == 0:
            assert first_may_finish.wait(TIMEOUT)
        finished(x)
        if x == 1:
            first_may_finish.set()
        return x * 10

    with pool_class(max_workers=2) as pool:
        assert list(pool.map(work, [0, 1], timeout=TIMEOUT)) == [0, 10]
    assert finished.ran == [1, 0]


def test_map_over_several_iterables_stops_at_the_shortest(pool_class: PoolClass) -> None:
    with pool_class(max_workers=2) as pool:
        assert list(pool.map(pow, [2, 3, 4], [5, 6], timeout=TIMEOUT)) == [32, 729]
        assert list(pool.map(pow, [], [], timeout=TIMEOUT)) == []


def test_map_submits_every_call_before_returning(pool_class: PoolClass, gate: Gate) -> None:
    record = Recorder()
    pulled: list[int] = []
    with pool_class(max_workers=1) as pool, opens_on_exit(gate):
        pool.submit(gate)
        gate.wait_started()
        results = pool.map(record, pulled_from([0, 1, 2, 3], pulled))
        assert pulled == [0, 1, 2, 3]
        assert record.ran == []
        gate.open()
        assert list(results) == [0, 1, 2, 3]


def test_map_ignores_chunksize(pool_class: PoolClass) -> None:
    with pool_class(max_workers=2) as pool:
        assert list(pool.map(abs, range(-5, 5), chunksize=3)) == [5, 4, 3, 2, 1, 0, 1, 2, 3, 4]


def test_map_timeout_counts_from_the_map_call(
    pool_class: PoolClass, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = Recorder()
    now = [100.0]
    # Both classes read time.monotonic() for the map deadline; the pools themselves do not.
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    with pool_class(max_workers=1) as pool, opens_on_exit(gate):
        pool.submit(gate)
        gate.wait_started()
        results = pool.map(record, [1, 2, 3], timeout=30.0)
        now[0] += 31.0  # time passes between the call and the first next()
        started = time.perf_counter()
        with pytest.raises(FuturesTimeoutError):
            next(results)
        assert time.perf_counter() - started < TIMEOUT / 2
        gate.open()
    assert record.ran == []


def test_map_cancels_remaining_calls_when_a_call_raises(pool_class: PoolClass) -> None:
    record = Recorder()
    hold = threading.Event()

    def work(x: int) -> int:
        record(x)
        if x == 0:
            raise ValueError("boom")
        assert hold.wait(TIMEOUT)
        return x

    with pool_class(max_workers=1) as pool:
        results = pool.map(work, range(4))
        with pytest.raises(ValueError, match=exact("boom")):
            next(results)
        hold.set()
    # The worker, free again once call 0 failed, races the cancelling: it may start one of
    # the later calls, which then holds it until every other call has been cancelled.
    assert record.ran[0] == 0
    assert len(record.ran) <= 2


def test_map_cancels_remaining_calls_when_closed_early(pool_class: PoolClass) -> None:
    record = Recorder()
    hold = threading.Event()

    def work(x: int) -> int:
        record(x)
        if x > 0:
            assert hold.wait(TIMEOUT)
        return x

    with pool_class(max_workers=1) as pool:
        results = pool.map(work, range(4))
        assert isinstance(results, Generator)
        assert next(results) == 0
        results.close()
        hold.set()
    # As above, at most one later call started before the rest were cancelled.
    assert record.ran[0] == 0
    assert len(record.ran) <= 2


@pytest.mark.parametrize(
    ("buffersize", "error", "message"),
    [
        ("2", TypeError, "buffersize must be an integer or None"),
        (2.0, TypeError, "buffersize must be an integer or None"),
        (0, ValueError, "buffersize must be None or > 0"),
        (-1, ValueError, "buffersize must be None or > 0"),
    ],
)
def test_map_rejects_bad_buffersize(
    pool_class: PoolClass, buffersize: object, error: type[Exception], message: str
) -> None:
    if sys.version_info < (3, 14):
        skip_stdlib(pool_class, "map has no buffersize before Python 3.14")
    with pool_class(max_workers=1) as pool:
        with pytest.raises(error, match=exact(message)):
            map_with_buffersize(pool, int, ["1"], buffersize=buffersize)
        assert len(pool._threads) == 0


def test_map_with_buffersize_submits_only_that_many_ahead(pool_class: PoolClass) -> None:
    if sys.version_info < (3, 14):
        skip_stdlib(pool_class, "map has no buffersize before Python 3.14")
    pulled: list[int] = []
    with pool_class(max_workers=2) as pool:
        results = map_with_buffersize(pool, str, pulled_from(list(range(10)), pulled), buffersize=2)
        assert pulled == [0, 1]
        assert list(results) == [str(i) for i in range(10)]
        assert pulled == list(range(10))


# -- ours only: where the standard pool differs on purpose -----------------------------------


def test_submit_rejects_a_non_callable_at_once(pool_class: PoolClass) -> None:
    skip_stdlib(pool_class, "accepts any fn and fails only when a worker calls it")
    with pool_class(max_workers=1) as pool:
        with pytest.raises(TypeError, match=exact("fn must be callable, got 42 (int)")):
            pool.submit(cast(Any, 42))
        assert len(pool._threads) == 0


def test_cancelled_queued_task_wakes_wait_while_the_worker_is_busy(
    pool_class: PoolClass, gate: Gate
) -> None:
    skip_stdlib(pool_class, "notifies wait() only when a worker pops the entry (gh-87893)")
    with pool_class(max_workers=1) as pool, opens_on_exit(gate):
        pool.submit(gate)
        gate.wait_started()
        future = pool.submit(int)
        assert future.cancel()
        done, _ = wait([future], timeout=TIMEOUT)
        assert done == {future}
        gate.open()


def test_shutdown_cancel_futures_wakes_waiters(pool_class: PoolClass, gate: Gate) -> None:
    skip_stdlib(pool_class, "shutdown(cancel_futures=True) never notifies wait() (PITFALLS 1.8)")
    with pool_class(max_workers=1) as pool, opens_on_exit(gate):
        pool.submit(gate)
        gate.wait_started()
        queued = [pool.submit(int) for _ in range(3)]
        pool.shutdown(wait=False, cancel_futures=True)
        done, _ = wait(queued, timeout=TIMEOUT)
        assert done == set(queued)
        gate.open()
