"""Integration and race tests: the pool among asyncio, the garbage collector and faults, and
the races that decide whether a queued task runs. (The interpreter's exit and ``fork``:
test_lifecycle.py.)

The races run thousands of iterations each, on real threads and (for deadlines) the real
clock, and check only what must hold whatever the interleaving: no task is both cancelled and
run, every future is done, a ``cancel()`` that returned True means the task never ran, and
``concurrent.futures`` logged nothing (``Future in unexpected state`` is logged at critical
level when the claim step is taken twice).

Tests whose failure mode is a deadlock run a script in a subprocess, so a hang fails that test
instead of freezing the whole run.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import random
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, as_completed, wait
from concurrent.futures.thread import BrokenThreadPool
from contextlib import contextmanager
from typing import Any, Optional, TypeVar

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor
from support import (
    BROKEN_MESSAGE,
    SHUTDOWN_MESSAGE,
    Recorder,
    assert_clean_exit,
    internals,
    run_script,
    wait_until,
)

T = TypeVar("T")


# -- helpers -------------------------------------------------------------------------------


def messages(records: list[logging.LogRecord]) -> list[str]:
    return [record.getMessage() for record in records]


def all_parked(pool: PriorityThreadPoolExecutor) -> bool:
    idle, started = internals(pool).idle_and_started()
    return idle == started


def pool_threads(pool: PriorityThreadPoolExecutor) -> list[threading.Thread]:
    """Every live thread of the pool (workers, deadline timer): their names carry its prefix."""
    prefix = f"{pool._thread_name_prefix}_"
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(TIMEOUT)
    assert [t.name for t in threads if t.is_alive()] == []


# -- asyncio -------------------------------------------------------------------------------


def test_run_in_executor_runs_the_call_in_the_pool() -> None:
    async def main(pool: PriorityThreadPoolExecutor) -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        name = await loop.run_in_executor(pool, lambda: threading.current_thread().name)
        joined = await loop.run_in_executor(pool, "-".join, ["a", "b"])
        return name, joined

    with PriorityThreadPoolExecutor(max_workers=2, thread_name_prefix="aio") as pool:
        assert asyncio.run(main(pool)) == ("aio_0", "a-b")


def test_run_in_executor_with_an_options_view_applies_its_priority(gate: Gate) -> None:
    recorder = Recorder()

    async def main(pool: PriorityThreadPoolExecutor) -> list[str]:
        loop = asyncio.get_running_loop()
        blocker = loop.run_in_executor(pool, gate)
        gate.wait_started()
        # run_in_executor submits at once, so the submission order is the order of the calls.
        low = loop.run_in_executor(pool.options(priority=Priority.LOW), recorder, "low")
        normal = loop.run_in_executor(pool, recorder, "normal")
        high = loop.run_in_executor(pool.options(priority=Priority.HIGH), recorder, "high")
        gate.open()
        await asyncio.wait_for(asyncio.gather(blocker, low, normal, high), TIMEOUT)
        return list(recorder.ran)

    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        assert asyncio.run(main(pool)) == ["high", "normal", "low"]


def test_to_thread_uses_the_default_executor_and_propagates_contextvars() -> None:
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")
    pool = PriorityThreadPoolExecutor(max_workers=2, thread_name_prefix="default")

    def where() -> tuple[str, str]:
        return threading.current_thread().name, request_id.get()

    async def main() -> tuple[str, str]:
        asyncio.get_running_loop().set_default_executor(pool)
        request_id.set("request-42")
        return await asyncio.to_thread(where)

    try:
        assert asyncio.run(main()) == ("default_0", "request-42")
        # asyncio.run shuts the default executor down when the loop closes.
        assert pool._shutdown
        join_all(pool_threads(pool))
    finally:
        pool.shutdown()


def test_shutdown_default_executor_drains_the_pool_and_joins_it(gate: Gate) -> None:
    recorder = Recorder()
    pool = PriorityThreadPoolExecutor(max_workers=1)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(pool)
        blocker = loop.run_in_executor(None, gate)
        gate.wait_started()
        queued = [loop.run_in_executor(None, recorder, i) for i in range(5)]
        if sys.version_info >= (3, 12):
            shutting_down = asyncio.ensure_future(loop.shutdown_default_executor(TIMEOUT))
        else:
            shutting_down = asyncio.ensure_future(loop.shutdown_default_executor())
        gate.open()
        await asyncio.wait_for(shutting_down, TIMEOUT)
        # The executor is joined: every call already ran; their asyncio futures follow.
        assert recorder.ran == [0, 1, 2, 3, 4]
        results = await asyncio.wait_for(asyncio.gather(blocker, *queued), TIMEOUT)
        assert list(results) == ["gate", 0, 1, 2, 3, 4]

    threads: list[threading.Thread] = []
    try:
        with warnings.catch_warnings():
            # 3.12+ warns if the executor did not finish joining within the timeout.
            warnings.simplefilter("error", RuntimeWarning)
            asyncio.run(main())
        threads = list(pool._threads)
        assert pool._shutdown
        assert threads
        assert not any(t.is_alive() for t in threads)
    finally:
        pool.shutdown()


class RecordingPool(PriorityThreadPoolExecutor):
    """Keeps every Future its ``submit`` returns, so a test can reach the one asyncio wraps."""

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers=max_workers)
        self.submitted: list[Future[Any]] = []

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future = super().submit(fn, *args, **kwargs)
        self.submitted.append(future)
        return future


def test_cancelling_the_awaiting_task_cancels_the_queued_call(gate: Gate) -> None:
    recorder = Recorder()

    async def main(pool: RecordingPool) -> Future[Any]:
        loop = asyncio.get_running_loop()
        blocker = loop.run_in_executor(pool, gate)
        gate.wait_started()

        async def call() -> str:
            return await loop.run_in_executor(pool, recorder, "cancelled")

        task = asyncio.ensure_future(call())
        await asyncio.sleep(0)  # one turn of the loop: the task submits, then awaits
        assert len(pool.submitted) == 2
        call_future = pool.submitted[-1]
        assert not call_future.done()  # queued behind the gate
        assert task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, TIMEOUT)
        assert wait([call_future], timeout=TIMEOUT).not_done == set()
        assert call_future.cancelled()
        after = loop.run_in_executor(pool, recorder, "after")
        gate.open()
        results = await asyncio.wait_for(asyncio.gather(blocker, after), TIMEOUT)
        assert list(results) == ["gate", "after"]
        return call_future

    with RecordingPool(max_workers=1) as pool:
        call_future = asyncio.run(main(pool))
        assert len(pool.submitted) == 3
    assert call_future.cancelled()
    assert recorder.ran == ["after"]


# -- deadlocks (subprocesses) ---------------------------------------------------------------


def test_pool_collected_by_its_own_thread_while_it_holds_the_lock_does_not_deadlock() -> None:
    # Any allocation may run the cyclic garbage collector, in whichever thread makes it,
    # including one of the pool's threads holding the pool's lock. If the executor is garbage
    # in a reference cycle at that moment, its weak-reference callback runs right there. The
    # clock is the hook that makes the collection happen there for certain: the timer reads
    # it under the lock.
    result = run_script(
        """
        import gc, os, threading, time
        from priority_executor import PriorityThreadPoolExecutor
        from support import internals

        collect_next_reading = threading.Event()

        def clock():
            if collect_next_reading.is_set():
                collect_next_reading.clear()
                gc.collect()
            return time.monotonic()

        class Service:
            def __init__(self):
                self.pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock)
                self.me = self  # a reference cycle, as many real objects have

        service = Service()
        core = internals(service.pool)  # holds the pool's core, not the pool
        gate = threading.Event()
        started = threading.Event()
        service.pool.submit(lambda: (started.set(), gate.wait(TIMEOUT)))
        assert started.wait(TIMEOUT)
        later = service.pool.submit(print, "queued task ran", flush=True, timeout=100 * TIMEOUT)
        prefix = service.pool._thread_name_prefix + "_"
        threads = [t for t in threading.enumerate() if t.name.startswith(prefix)]
        del service
        collect_next_reading.set()
        core.wake_timer()  # the timer reads the clock, under the lock
        gate.set()
        try:
            later.result(TIMEOUT)
        except Exception as exc:
            print("stuck:", type(exc).__name__, flush=True)
            os._exit(1)
        for thread in threads:
            thread.join(TIMEOUT)
        print("threads alive:", [t.name for t in threads if t.is_alive()], flush=True)
        """
    )
    assert_clean_exit(result, ["queued task ran", "threads alive: []"])


def test_shutdown_from_two_tasks_at_once_does_not_deadlock() -> None:
    result = run_script(
        """
        import os, threading
        from concurrent.futures import wait
        from priority_executor import PriorityThreadPoolExecutor

        pool = PriorityThreadPoolExecutor(max_workers=2)
        both_running = threading.Barrier(2)

        def stop_pool():
            both_running.wait(TIMEOUT)
            pool.shutdown()
            return "returned"

        futures = [pool.submit(stop_pool) for _ in range(2)]
        done, not_done = wait(futures, timeout=TIMEOUT)
        if not_done:
            print("deadlocked", flush=True)
            os._exit(1)
        print([f.result() for f in futures], flush=True)
        pool.shutdown()
        """
    )
    assert_clean_exit(result, ["['returned', 'returned']"])


def test_view_shutdown_from_a_task_of_the_view_does_not_deadlock() -> None:
    # A library handed ``pool.options(...)`` as its executor may shut it down from a task it
    # submitted through it; waiting for "every task of the view" then includes this very task.
    result = run_script(
        """
        import os
        from concurrent.futures import wait
        from priority_executor import Priority, PriorityThreadPoolExecutor

        pool = PriorityThreadPoolExecutor(max_workers=2)
        view = pool.options(priority=Priority.HIGH)

        def stop_view():
            view.shutdown()
            return "returned"

        future = view.submit(stop_view)
        if wait([future], timeout=TIMEOUT).not_done:
            print("deadlocked", flush=True)
            os._exit(1)
        print(future.result(), flush=True)
        pool.shutdown()
        """
    )
    assert_clean_exit(result, ["returned"])


def test_view_shutdown_from_a_done_callback_in_the_only_worker_does_not_deadlock() -> None:
    result = run_script(
        """
        import os, threading
        from concurrent.futures import wait
        from priority_executor import PriorityThreadPoolExecutor

        pool = PriorityThreadPoolExecutor(max_workers=1)
        view = pool.options()
        release = threading.Event()
        first = view.submit(release.wait, TIMEOUT)
        second = view.submit(print, "second ran", flush=True)
        first.add_done_callback(lambda _: view.shutdown())  # runs in the only worker
        release.set()
        if wait([first, second], timeout=TIMEOUT).not_done:
            print("deadlocked", flush=True)
            os._exit(1)
        pool.shutdown()
        """
    )
    assert_clean_exit(result, ["second ran"])


# -- initializer -----------------------------------------------------------------------------


def test_initializer_runs_in_each_worker_with_initargs() -> None:
    calls = Recorder()

    def init(tag: str, number: int) -> None:
        calls((tag, number, threading.current_thread().name))

    both = threading.Barrier(2)

    def task() -> str:
        both.wait(TIMEOUT)  # two tasks at once: two threads
        return threading.current_thread().name

    with PriorityThreadPoolExecutor(
        max_workers=2, thread_name_prefix="init", initializer=init, initargs=("tag", 7)
    ) as pool:
        names = sorted(f.result(TIMEOUT) for f in [pool.submit(task), pool.submit(task)])
    assert names == ["init_0", "init_1"]
    assert sorted(calls.ran) == [("tag", 7, "init_0"), ("tag", 7, "init_1")]


class CustomBroken(BrokenThreadPool):
    pass


class CustomPool(PriorityThreadPoolExecutor):
    BROKEN = CustomBroken


@pytest.mark.parametrize("pool_class", [PriorityThreadPoolExecutor, CustomPool])
def test_failing_initializer_breaks_the_pool(
    pool_class: type[PriorityThreadPoolExecutor], futures_log: list[logging.LogRecord]
) -> None:
    broken = CustomBroken if pool_class is CustomPool else BrokenThreadPool
    release = threading.Event()

    def init() -> None:
        assert release.wait(TIMEOUT)
        raise ValueError("no database")

    pool = pool_class(max_workers=1, initializer=init)
    try:
        # Queued while the only worker is still in its initializer.
        pending = [
            pool.submit(abs, -1),
            pool.submit(abs, -2, priority=Priority.HIGH),
            pool.submit(abs, -3, timeout=10 * TIMEOUT),
        ]
        release.set()
        for future in pending:
            error = future.exception(TIMEOUT)
            assert type(error) is broken
            assert str(error) == BROKEN_MESSAGE
        with pytest.raises(broken) as raised:
            pool.submit(abs, -4)
        assert type(raised.value) is broken
        assert str(raised.value) == BROKEN_MESSAGE
        assert pool._broken
        pool._check_invariants()
    finally:
        pool.shutdown()
    assert [(r.levelno, r.getMessage()) for r in futures_log] == [
        (logging.CRITICAL, "Exception in initializer:")
    ]
    exc_info = futures_log[0].exc_info
    assert exc_info is not None
    assert exc_info[0] is ValueError


# -- faults in tasks and callbacks ---------------------------------------------------------


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_task_raising_a_base_exception_stores_it_and_the_worker_survives(
    exc_type: type[BaseException], futures_log: list[logging.LogRecord]
) -> None:
    def fail() -> None:
        raise exc_type("from the task")

    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        worker = pool.submit(threading.get_ident).result(TIMEOUT)
        failed = pool.submit(fail)
        after = pool.submit(threading.get_ident)
        error = failed.exception(TIMEOUT)
        assert type(error) is exc_type
        assert error is not None
        assert error.args == ("from the task",)
        assert after.result(TIMEOUT) == worker  # same thread, still serving
        assert len(pool._threads) == 1
    assert futures_log == []


def test_raising_done_callbacks_are_logged_and_the_worker_and_timer_survive(
    clock: FakeClock, gate: Gate, futures_log: list[logging.LogRecord]
) -> None:
    def explode(_: Future[Any]) -> None:
        raise ValueError("callback failed")

    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock)
    clock.attach(pool)
    try:
        worker = pool.submit(threading.get_ident).result(TIMEOUT)
        pool.submit(gate)
        gate.wait_started()
        # Expired by the timer, whose callback thread calls the raising callback.
        expired = pool.submit(abs, -1, timeout=1.0)
        expired.add_done_callback(explode)
        clock.advance(1.0)
        assert wait([expired], timeout=TIMEOUT).not_done == set()
        wait_until(lambda: len(futures_log) == 1, "the callback of the expired task ran")
        wait_until(lambda: len(pool_threads(pool)) == 2, "the callback thread exited")
        threads = pool_threads(pool)  # the worker, held by the gate, and the timer
        # The timer still expires tasks: the only worker is held by the gate.
        expired_later = pool.submit(abs, -2, timeout=1.0)
        clock.advance(1.0)
        assert wait([expired_later], timeout=TIMEOUT).not_done == set()
        assert expired.cancelled()
        assert expired_later.cancelled()
        assert pool_threads(pool) == threads
        # Run by the worker, which calls the raising callback, then goes on.
        finished = pool.submit(abs, -3)
        finished.add_done_callback(explode)
        after = pool.submit(threading.get_ident)
        gate.open()
        assert after.result(TIMEOUT) == worker
        assert finished.result() == 3
        pool._check_invariants()
    finally:
        pool.shutdown()
    assert messages(futures_log) == [
        f"exception calling callback for {expired!r}",
        f"exception calling callback for {finished!r}",
    ]
    assert [r.levelno for r in futures_log] == [logging.ERROR, logging.ERROR]
    for record in futures_log:
        assert record.exc_info is not None
        assert record.exc_info[0] is ValueError


def exit_from_callback(_: Future[Any]) -> None:
    sys.exit("a done-callback asked to exit")


def test_done_callback_raising_system_exit_in_a_worker_leaves_the_pool_working(
    gate: Gate,
) -> None:
    # Future._invoke_callbacks catches Exception only, so a SystemExit from a callback
    # escapes from set_result into the thread that completed the future.
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(gate)
        gate.wait_started()
        first = pool.submit(abs, -1)
        first.add_done_callback(exit_from_callback)
        second = pool.submit(abs, -2)
        gate.open()
        assert first.result(TIMEOUT) == 1
        assert second.result(TIMEOUT) == 2
        assert pool.submit(abs, -3).result(TIMEOUT) == 3


def test_done_callback_raising_system_exit_in_the_timer_leaves_deadlines_working(
    clock: FakeClock, gate: Gate
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock)
    clock.attach(pool)
    try:
        pool.submit(gate)
        gate.wait_started()
        first = pool.submit(abs, -1, timeout=1.0)
        first.add_done_callback(exit_from_callback)
        clock.advance(1.0)  # the timer expires it and runs the callback
        assert wait([first], timeout=TIMEOUT).not_done == set()
        second = pool.submit(abs, -2, timeout=1.0)
        clock.advance(1.0)  # the worker is held by the gate: only the timer can expire it
        assert wait([second], timeout=TIMEOUT).not_done == set()
        assert first.cancelled()
        assert second.cancelled()
        gate.open()
    finally:
        pool.shutdown()


# -- shutdown from inside the pool -----------------------------------------------------------


def test_shutdown_from_a_task_returns_and_queued_work_still_runs(
    gate: Gate, futures_log: list[logging.LogRecord]
) -> None:
    recorder = Recorder()
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        blocker = pool.submit(gate)
        gate.wait_started()
        stopper = pool.submit(pool.shutdown, priority=Priority.HIGH)
        queued = [pool.submit(recorder, i) for i in range(3)]
        gate.open()
        assert stopper.result(TIMEOUT) is None
        assert [f.result(TIMEOUT) for f in queued] == [0, 1, 2]
        assert blocker.result() == "gate"
        with pytest.raises(RuntimeError) as raised:
            pool.submit(abs, -1)
        assert str(raised.value) == SHUTDOWN_MESSAGE
    finally:
        pool.shutdown()
    assert futures_log == []


def test_shutdown_from_a_task_while_another_worker_is_busy(gate: Gate) -> None:
    # Whether shutdown() called from a pool thread waits for the other threads or returns at
    # once, it must return, and the work already queued must still run.
    recorder = Recorder()
    go = threading.Event()

    def stop(pool: PriorityThreadPoolExecutor) -> str:
        assert go.wait(TIMEOUT)
        pool.shutdown(wait=True)
        recorder("shutdown returned")
        return "stopped"

    pool = PriorityThreadPoolExecutor(max_workers=2)
    try:
        pool.submit(gate)
        gate.wait_started()
        stopper = pool.submit(stop, pool)
        queued = pool.submit(recorder, "queued")  # both workers are busy: it waits
        threads = pool_threads(pool)
        go.set()
        gate.open()
        assert stopper.result(TIMEOUT) == "stopped"
        assert queued.result(TIMEOUT) == "queued"
        join_all(threads)
        assert sorted(recorder.ran) == ["queued", "shutdown returned"]
    finally:
        pool.shutdown()


def test_shutdown_from_a_task_does_not_wait_for_deadlines_of_queued_tasks(gate: Gate) -> None:
    # The queued task has a queue timeout the worker will easily meet once the shutdown task
    # returns; shutdown() must not keep the only worker waiting for that deadline.
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(gate)
        gate.wait_started()
        stopper = pool.submit(pool.shutdown)
        queued = pool.submit(abs, -1, timeout=TIMEOUT / 2)
        gate.open()
        assert stopper.result(TIMEOUT) is None
        assert not queued.cancelled()
        assert queued.result(TIMEOUT) == 1
    finally:
        pool.shutdown()


def test_shutdown_cancel_futures_from_a_task_cancels_the_queue_and_wakes_waiters(
    gate: Gate,
) -> None:
    recorder = Recorder()
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(gate)
        gate.wait_started()
        stopper = pool.submit(lambda: pool.shutdown(cancel_futures=True), priority=1)
        queued = [pool.submit(recorder, i) for i in range(3)]
        gate.open()
        assert stopper.result(TIMEOUT) is None
        assert wait(queued, timeout=TIMEOUT).not_done == set()
        assert all(f.cancelled() for f in queued)
    assert recorder.ran == []


def test_shutdown_from_a_done_callback_in_a_worker(
    gate: Gate, futures_log: list[logging.LogRecord]
) -> None:
    recorder = Recorder()
    release_first = threading.Event()
    in_callback = threading.Event()

    def first_task() -> str:
        assert release_first.wait(TIMEOUT)
        return recorder("first")

    def stop_pool(_: Future[Any]) -> None:
        in_callback.set()
        pool.shutdown()
        recorder("callback returned")

    pool = PriorityThreadPoolExecutor(max_workers=2)
    try:
        pool.submit(gate)
        gate.wait_started()
        first = pool.submit(first_task)
        first.add_done_callback(stop_pool)
        queued = pool.submit(recorder, "queued")  # both workers are busy: it waits
        threads = pool_threads(pool)
        release_first.set()
        assert in_callback.wait(TIMEOUT)  # in the worker that ran first_task
        gate.open()
        assert queued.result(TIMEOUT) == "queued"
        join_all(threads)
        assert recorder.ran[0] == "first"
        assert sorted(recorder.ran[1:]) == ["callback returned", "queued"]
    finally:
        pool.shutdown()
    assert futures_log == []


def test_shutdown_from_a_done_callback_in_the_timer(
    clock: FakeClock, gate: Gate, futures_log: list[logging.LogRecord]
) -> None:
    recorder = Recorder()
    in_callback = threading.Event()

    def stop_pool(_: Future[Any]) -> None:
        in_callback.set()
        pool.shutdown()
        recorder("callback returned")

    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock)
    clock.attach(pool)
    try:
        pool.submit(gate)
        gate.wait_started()
        expiring = pool.submit(recorder, "expired", timeout=1.0)
        expiring.add_done_callback(stop_pool)
        queued = pool.submit(recorder, "queued")
        threads = pool_threads(pool)
        assert len(threads) == 2
        clock.advance(1.0)
        assert in_callback.wait(TIMEOUT)  # in the timer thread
        gate.open()
        assert queued.result(TIMEOUT) == "queued"
        join_all(threads)
        assert expiring.cancelled()
        assert sorted(recorder.ran) == ["callback returned", "queued"]
    finally:
        pool.shutdown()
    assert futures_log == []


# -- garbage collection and references -------------------------------------------------------


def test_a_dropped_pool_finishes_its_queue_and_its_threads_exit(gate: Gate) -> None:
    recorder = Recorder()
    pool = PriorityThreadPoolExecutor(max_workers=1)
    pool.submit(gate)
    gate.wait_started()
    futures = [
        pool.submit(recorder, "low", priority=Priority.LOW),
        pool.submit(recorder, "high", priority=Priority.HIGH),
        pool.submit(recorder, "deadline", timeout=100 * TIMEOUT),  # starts the timer
    ]
    threads = pool_threads(pool)
    assert len(threads) == 2
    pool_ref = weakref.ref(pool)
    del pool
    gc.collect()
    assert pool_ref() is None
    gate.open()
    join_all(threads)
    assert recorder.ran == ["high", "deadline", "low"]
    assert [f.result() for f in futures] == ["low", "high", "deadline"]


class Payload:
    """A result or argument whose collection a weak reference can watch."""


class Task:
    """A callable whose collection a weak reference can watch; returns a fresh Payload."""

    def __call__(self, argument: Payload) -> Payload:
        return Payload()


@pytest.mark.parametrize("timeout", [None, 100 * TIMEOUT])
def test_the_pool_keeps_no_reference_to_a_finished_task(timeout: Optional[float]) -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        task, argument = Task(), Payload()
        future = pool.submit(task, argument, timeout=timeout)
        result = future.result(TIMEOUT)
        refs = [weakref.ref(x) for x in (task, argument, result, future)]
        del task, argument, result, future
        # The worker has left the task behind once it has run the next one.
        pool.submit(abs, -1).result(TIMEOUT)
        gc.collect()
        assert [r() for r in refs] == [None, None, None, None]


def test_the_pool_keeps_no_reference_to_a_cancelled_task(gate: Gate) -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(gate)
        gate.wait_started()
        task, argument = Task(), Payload()
        future = pool.submit(task, argument, timeout=100 * TIMEOUT)
        assert future.cancel()
        # Still queued behind the gate, as a tombstone at most.
        refs = [weakref.ref(x) for x in (task, argument, future)]
        del task, argument, future
        gc.collect()
        assert [r() for r in refs] == [None, None, None]
        gate.open()


def test_the_pool_keeps_no_reference_to_an_expired_task(clock: FakeClock, gate: Gate) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock)
    clock.attach(pool)
    try:
        pool.submit(gate)
        gate.wait_started()
        task, argument = Task(), Payload()
        future = pool.submit(task, argument, timeout=1.0)
        clock.advance(1.0)
        assert wait([future], timeout=TIMEOUT).not_done == set()
        assert future.cancelled()
        refs = [weakref.ref(x) for x in (task, argument, future)]
        del task, argument, future
        gc.collect()
        assert [r() for r in refs] == [None, None, None]
        gate.open()
    finally:
        pool.shutdown()


# -- idle ------------------------------------------------------------------------------------


class CountingClock:
    """Counts the readings of a FakeClock: the timer reads the clock every time it wakes."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.readings = 0

    def __call__(self) -> float:
        with self._lock:
            self.readings += 1
        return self.clock()


def test_an_idle_pool_has_every_worker_parked_and_a_timer_that_sleeps(
    clock: FakeClock, gate: Gate
) -> None:
    counting = CountingClock(clock)
    pool = PriorityThreadPoolExecutor(max_workers=3, clock=counting)
    clock.attach(pool)
    try:
        # Every worker holds a task, so the task with a deadline stays queued until it expires.
        holding = threading.Barrier(4)

        def hold() -> None:
            holding.wait(TIMEOUT)
            gate()

        holders = [pool.submit(hold) for _ in range(3)]
        holding.wait(TIMEOUT)
        # Start the timer, and leave it with no deadline pending.
        expired = pool.submit(abs, -1, timeout=1.0)
        clock.advance(1.0)
        assert wait([expired], timeout=TIMEOUT).not_done == set()
        assert expired.cancelled()
        gate.open()
        assert wait(holders, timeout=TIMEOUT).not_done == set()
        wait_until(lambda: all_parked(pool), "every worker is parked")
        # Every worker is blocked on its own park lock, with no timeout.
        assert internals(pool).idle_and_started() == (3, 3)
        assert len(pool_threads(pool)) == 4  # and the timer
        wait_until(internals(pool).timer_asleep, "the timer sleeps until signalled")
        # The timer, with no deadline to wait for, does not wake: it would read the clock.
        # (An observation window, not a synchronisation.)
        readings = counting.readings
        threading.Event().wait(0.2)
        assert counting.readings == readings
        assert all_parked(pool)
        pool._check_invariants()
    finally:
        pool.shutdown()


# -- races -----------------------------------------------------------------------------------


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Hand the GIL over every microsecond, so threads interleave at a much finer grain."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def spin(rng: random.Random) -> None:
    """Busy-wait for a random few microseconds, to land the next step around a worker's claim.

    Waking a parked worker takes tens of microseconds; without this, the thread that submits
    nearly always cancels first and the race is rarely run.
    """
    for _ in range(rng.randrange(3000)):
        pass


class Runs:
    """Counts, per task index, how often the task ran; tasks may run on any thread."""

    def __init__(self, count: int) -> None:
        self._lock = threading.Lock()
        self.counts = [0] * count

    def __call__(self, index: int) -> int:
        with self._lock:
            self.counts[index] += 1
        return index


def check_outcomes(futures: list[Future[int]], runs: Runs) -> None:
    """Every future done; a task ran exactly once iff its future is not cancelled; and the race
    was run: some tasks ran and some were cancelled."""
    assert wait(futures, timeout=TIMEOUT).not_done == set()
    ran = cancelled = 0
    for index, future in enumerate(futures):
        if future.cancelled():
            assert runs.counts[index] == 0, f"task {index} was cancelled and ran"
            cancelled += 1
        else:
            assert runs.counts[index] == 1, f"task {index} ran {runs.counts[index]} times"
            assert future.result() == index
            ran += 1
    assert ran > 0
    assert cancelled > 0


@contextmanager
def racing_pool(futures_log: list[logging.LogRecord]) -> Iterator[PriorityThreadPoolExecutor]:
    """A two-worker pool for a race; once it is shut down, its invariants hold and
    ``concurrent.futures`` logged nothing."""
    pool = PriorityThreadPoolExecutor(max_workers=2)
    try:
        yield pool
    finally:
        pool.shutdown()
    pool._check_invariants()
    assert messages(futures_log) == []


@pytest.mark.usefixtures("fast_switching")
def test_race_user_cancel_against_worker_claim(futures_log: list[logging.LogRecord]) -> None:
    # Small batches, each submitted then cancelled a random moment later while the woken
    # workers claim them; the next batch waits until this one is done, so every cancel()
    # meets a worker on its way to the task rather than a long queue.
    batches = 5000
    rng = random.Random(20240601)
    runs = Runs(4 * batches)
    futures: list[Future[int]] = []
    cancel_returned: dict[int, bool] = {}
    with racing_pool(futures_log) as pool:
        for number in range(batches):
            batch = [
                pool.submit(runs, len(futures) + k, priority=rng.randrange(3))
                for k in range(rng.randrange(1, 5))
            ]
            first = len(futures)
            futures.extend(batch)
            spin(rng)
            if number % 3:
                for index, future in enumerate(batch, start=first):
                    cancel_returned[index] = future.cancel()
            assert wait(batch, timeout=TIMEOUT).not_done == set()
        check_outcomes(futures, runs)
        for index, returned in cancel_returned.items():
            if returned:
                assert futures[index].cancelled()
                assert runs.counts[index] == 0, f"cancel() returned True, task {index} ran"
            else:
                assert not futures[index].cancelled()
                assert runs.counts[index] == 1
        pool._check_invariants()


@pytest.mark.usefixtures("fast_switching")
def test_race_queue_deadline_against_worker_claim(futures_log: list[logging.LogRecord]) -> None:
    # Real clock, queue timeouts from a microsecond to a millisecond (log-uniform): a worker
    # claims a task a few tens of microseconds after submit, so deadlines land on both sides
    # of the claim, and the timer and the workers race to take the same entries. The user
    # cancels some tasks too.
    batches = 4000
    rng = random.Random(20240602)
    runs = Runs(4 * batches)
    futures: list[Future[int]] = []
    ran_while_cancelled: list[int] = []

    def task(index: int, holder: list[Future[int]]) -> int:
        # A task that runs must not belong to a future that already reports cancelled.
        if any(f.cancelled() for f in holder):
            ran_while_cancelled.append(index)
        return runs(index)

    with racing_pool(futures_log) as pool:
        for number in range(batches):
            batch = []
            for _ in range(rng.randrange(1, 5)):
                holder: list[Future[int]] = []
                timeout = 0.0 if number % 50 == 0 else 10 ** rng.uniform(-6, -3)
                future = pool.submit(
                    task, len(futures), holder, priority=rng.randrange(3), timeout=timeout
                )
                holder.append(future)
                futures.append(future)
                batch.append(future)
            spin(rng)
            if number % 5 == 0:
                batch[-1].cancel()
            # Waiters of expired futures are woken too, each future exactly once.
            assert len(set(as_completed(batch, timeout=TIMEOUT))) == len(batch)
        check_outcomes(futures, runs)
        assert ran_while_cancelled == []
        pool._check_invariants()


SUBMITTERS = 3
#: Room for each submitter's task indexes; shutdown comes long before any runs out.
PER_SUBMITTER = 10_000


def shutdown_race_round(seed: int) -> None:
    """Three threads submit until refused while the main thread shuts down, cancelling."""
    runs = Runs(SUBMITTERS * PER_SUBMITTER)
    pool = PriorityThreadPoolExecutor(max_workers=2)
    started = threading.Barrier(SUBMITTERS + 1)
    under_way = threading.Event()
    futures: list[list[Future[int]]] = [[] for _ in range(SUBMITTERS)]
    rejections: list[str] = []

    def submit_until_refused(k: int) -> None:
        rng = random.Random(seed * SUBMITTERS + k)
        mine = futures[k]
        started.wait(TIMEOUT)
        for index in range(k * PER_SUBMITTER, (k + 1) * PER_SUBMITTER):
            timeout = rng.choice([None, None, 1e-4, 10 * TIMEOUT])
            try:
                future = pool.submit(runs, index, priority=rng.randrange(3), timeout=timeout)
            except RuntimeError as exc:
                rejections.append(str(exc))
                return
            mine.append(future)
            if len(mine) == 50:
                under_way.set()

    threads = [threading.Thread(target=submit_until_refused, args=(k,)) for k in range(SUBMITTERS)]
    for thread in threads:
        thread.start()
    started.wait(TIMEOUT)
    assert under_way.wait(TIMEOUT)
    pool.shutdown(wait=True, cancel_futures=True)
    join_all(threads)
    # Every future ever returned is done the moment shutdown() and the submits have returned.
    assert [f for mine in futures for f in mine if not f.done()] == []
    assert rejections == [SHUTDOWN_MESSAGE] * SUBMITTERS
    for k, mine in enumerate(futures):
        for index, future in enumerate(mine, start=k * PER_SUBMITTER):
            if future.cancelled():
                assert runs.counts[index] == 0, f"task {index} was cancelled and ran"
            else:
                assert runs.counts[index] == 1, f"task {index} ran {runs.counts[index]} times"
                assert future.result() == index
    assert sum(runs.counts) == sum(1 for mine in futures for f in mine if not f.cancelled())
    pool._check_invariants()


@pytest.mark.usefixtures("fast_switching")
def test_race_shutdown_cancel_futures_against_submits(
    futures_log: list[logging.LogRecord],
) -> None:
    for seed in range(100):
        shutdown_race_round(seed)
    assert messages(futures_log) == []
