"""``add_listener``: told of every start and end, outside the lock, surviving its own errors.

Run on both executors. Times are checked exactly on a fake clock; that no listener runs
under the pool's lock is checked by taking the lock inside the listener (it is not
reentrant: held by the calling thread, the take would time out).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import Priority, TaskInfo
from support import KINDS, exact, internals, make_pool


class Log:
    """Listeners that keep what they are told, and whether the pool's lock was free then."""

    def __init__(self, pool: Any) -> None:
        self.lock = internals(pool).lock
        self.starts: list[TaskInfo] = []
        self.finishes: list[TaskInfo] = []
        self.threads: list[str] = []
        self.free: list[bool] = []
        self.finished = threading.Event()

    def _free(self) -> None:
        took = self.lock.acquire(timeout=TIMEOUT)
        if took:
            self.lock.release()
        self.free.append(took)
        self.threads.append(threading.current_thread().name)

    def on_start(self, info: TaskInfo) -> None:
        self._free()
        self.starts.append(info)

    def on_finish(self, info: TaskInfo) -> None:
        self._free()
        self.finishes.append(info)
        self.finished.set()


def settle(pool: Any, log: Log, count: int) -> None:
    assert pool.join(TIMEOUT)  # join waits for a front's listener calls too
    assert len(log.finishes) == count, log.finishes


def boom() -> None:
    raise ValueError("boom")


@pytest.mark.parametrize("kind", KINDS)
def test_listeners_get_every_start_and_end_with_exact_times(kind: str, clock: FakeClock) -> None:
    pool = make_pool(kind, 1, clock=clock)
    clock.attach(pool)
    with pool:
        log = Log(pool)
        pool.add_listener(log.on_start, log.on_finish)
        pool.pause()
        view = pool.options(key="host", priority=Priority.HIGH)
        ok = view.submit(lambda: clock.advance(0.5))
        failing = pool.submit(boom)
        clock.advance(1.0)
        pool.resume()
        assert ok.result(TIMEOUT) is None
        assert isinstance(failing.exception(TIMEOUT), ValueError)
        settle(pool, log, 2)
    first, second = log.finishes
    assert first == TaskInfo(1, "host", 1000.0, 1001.0, 1001.5, "completed", None)
    assert (second.priority, second.key, second.started, second.outcome) == (
        0,
        None,
        1001.5,
        "failed",
    )
    assert isinstance(second.exception, ValueError)
    assert log.starts == [
        TaskInfo(1, "host", 1000.0, 1001.0),
        TaskInfo(0, None, 1000.0, 1001.5),
    ]
    assert all(log.free), "a listener ran with the pool's lock held"
    if kind == "threads":
        assert all(name.startswith(pool._thread_name_prefix) for name in log.threads)


@pytest.mark.parametrize("kind", KINDS)
def test_a_listener_that_raises_is_logged_and_counted_and_loses_nothing(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    def angry(info: TaskInfo) -> None:
        raise RuntimeError("listener")

    with make_pool(kind, 1) as pool:
        pool.add_listener(on_start=angry, on_finish=angry)
        with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
            results = [pool.submit(pow, 2, n).result(TIMEOUT) for n in range(3)]
            assert pool.join(TIMEOUT)
        stats = pool.statistics()
    assert results == [1, 2, 4]
    assert stats.listener_errors == 6
    assert stats.completed == 3
    assert sum("exception calling listener" in r.getMessage() for r in caplog.records) == 6


@pytest.mark.parametrize("kind", KINDS)
def test_removed_listeners_are_not_called_and_remove_is_idempotent(kind: str) -> None:
    with make_pool(kind, 1) as pool:
        log = Log(pool)
        handle = pool.add_listener(on_finish=log.on_finish)
        pool.submit(str).result(TIMEOUT)
        settle(pool, log, 1)
        handle.remove()
        handle.remove()
        pool.submit(str).result(TIMEOUT)
        assert pool.join(TIMEOUT)
    assert len(log.finishes) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_tasks_that_never_run_are_not_reported(kind: str, gate: Gate) -> None:
    with make_pool(kind, 1) as pool:
        log = Log(pool)
        pool.add_listener(log.on_start, log.on_finish)
        held = pool.submit(gate)
        gate.wait_started()
        pool.submit(str).cancel()
        pool.submit(str, timeout=0)
        gate.open()
        held.result(TIMEOUT)
        settle(pool, log, 1)
    assert len(log.starts) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_listener_that_cancels_the_next_task_and_submits_more_is_safe(
    kind: str, gate: Gate
) -> None:
    """The worst a listener can do at its moment: touch the pool it is called from."""
    with make_pool(kind, 1) as pool:
        victims: list[Future[Any]] = []
        extra: list[Future[Any]] = []

        def meddle(info: TaskInfo) -> None:
            if victims:
                victims.pop().cancel()
            if len(extra) < 3:
                extra.append(pool.submit(str, "extra"))

        pool.add_listener(on_start=meddle, on_finish=meddle)
        held = pool.submit(gate)
        gate.wait_started()
        victims.append(pool.submit(str, "victim"))
        gate.open()
        held.result(TIMEOUT)
        assert pool.join(TIMEOUT)
        pool._check_invariants()
        stats = pool.statistics()
    assert all(f.result(TIMEOUT) == "extra" for f in extra)
    assert stats.submitted == stats.completed + stats.cancelled


def test_bad_listeners_are_refused_with_exact_messages() -> None:
    with make_pool("threads", 1) as pool:
        with pytest.raises(
            TypeError, match=exact("on_start must be callable or None, got 1 (int)")
        ):
            pool.add_listener(on_start=1)  # type: ignore[arg-type]
        with pytest.raises(
            TypeError, match=exact("on_finish must be callable or None, got 'x' (str)")
        ):
            pool.add_listener(on_finish="x")  # type: ignore[arg-type]
        with pytest.raises(
            TypeError, match=exact("add_listener() needs on_start, on_finish or both")
        ):
            pool.add_listener()
