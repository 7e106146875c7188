"""``pause()`` and ``resume()``: a paused pool starts no queued task while its running tasks
finish, still queues what is submitted and still expires queue deadlines; ``resume()`` staffs
the queue again, waking idle workers and starting the missing ones; ``shutdown()`` of a paused
pool drains its queue (or cancels it, with ``cancel_futures``); after ``shutdown()`` ``pause()``
has no effect.

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. Deadlines run on a :class:`FakeClock`. Nothing sleeps to synchronise: a
state that no event announces (a worker coming back) is polled with ``wait_until``, and every
wait has a timeout. (``pause()`` racing ``shutdown()``: test_faults.py.)
"""

from __future__ import annotations

import threading
from concurrent.futures import wait

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PriorityThreadPoolExecutor
from support import (
    FAR,
    STUCK,
    Recorder,
    closing,
    hold_worker,
    in_thread,
    joined_promptly,
    run_to_idle,
    wait_until,
)

# -- pause and resume -----------------------------------------------------------------------


def test_pause_starts_no_queued_task_while_running_tasks_finish(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        blocker = hold_worker(pool, gate)
        assert pool.paused is False
        pool.pause()
        pool.pause()  # idempotent
        assert pool.paused is True
        futures = [pool.submit(record, i, priority=i) for i in range(3)]  # submit still queues
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.running, stats.paused) == (3, 1, True)

        gate.open()
        assert blocker.result(TIMEOUT) == "gate"  # the running task finishes
        assert pool.join(0.05) is False  # and nothing queued starts
        # ``running`` drops when the worker comes back for its next task.
        wait_until(lambda: pool.statistics().running == 0, "the worker comes back")
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.running, stats.completed) == (3, 0, 1)
        assert record.ran == []
        assert not any(future.done() for future in futures)

        pool.resume()
        pool.resume()  # idempotent
        assert pool.paused is False
        assert joined_promptly(pool)
        pool._check_invariants()
    assert record.ran == [2, 1, 0]


def test_queue_deadlines_expire_while_paused(clock: FakeClock, gate: Gate) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock)
    clock.attach(pool)
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.pause()
        doomed = pool.submit(str, "doomed", timeout=FAR)
        kept = pool.submit(str, "kept")
        clock.advance(2 * FAR)
        assert doomed in wait([doomed], TIMEOUT).done  # woken, not merely cancelled
        assert doomed.cancelled()
        assert pool.paused is True
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.expired, stats.queued) == (1, 1)
        pool.resume()
        run_to_idle(pool, gate)
        assert kept.result(TIMEOUT) == "kept"


class Blocker:
    """A task that sets the event it is given once it starts, then waits for ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, started: threading.Event) -> None:
        started.set()
        assert self.release.wait(TIMEOUT)


def test_resume_starts_as_many_workers_as_the_queue_needs() -> None:
    block = Blocker()
    started = [threading.Event() for _ in range(3)]
    pool = PriorityThreadPoolExecutor(max_workers=3)
    try:
        pool.pause()
        futures = [pool.submit(block, event) for event in started]
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.running, stats.workers) == (3, 0, 0)
        pool.resume()
        for event in started:
            assert event.wait(TIMEOUT), "a queued task did not start after resume()"
        stats = pool.statistics()
        assert (stats.queued, stats.running, stats.workers) == (0, 3, 3)
        pool._check_invariants()
    finally:
        block.release.set()
        pool.shutdown()
    assert all(future.exception(TIMEOUT) is None for future in futures)


def test_resume_wakes_idle_workers_and_starts_the_missing_ones() -> None:
    block = Blocker()
    started = [threading.Event() for _ in range(3)]
    pool = PriorityThreadPoolExecutor(max_workers=3)
    try:
        warm = [threading.Event() for _ in range(2)]
        warming = [pool.submit(block, event) for event in warm]
        assert all(event.wait(TIMEOUT) for event in warm)
        block.release.set()
        assert pool.join(TIMEOUT)
        wait_until(lambda: pool.statistics().idle_workers == 2, "both workers idle")
        block.release.clear()
        pool.pause()
        for event in started:
            pool.submit(block, event)
        pool.resume()
        assert all(event.wait(TIMEOUT) for event in started[:2])
        assert started[2].wait(STUCK), "the third task waits although max_workers allows it"
    finally:
        block.release.set()
        pool.shutdown()
    assert all(future.exception(TIMEOUT) is None for future in warming)


# -- shutdown of a paused pool --------------------------------------------------------------


def test_shutdown_of_a_paused_pool_runs_its_queued_tasks(gate: Gate) -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1)
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.pause()
        futures = [pool.submit(record, i) for i in range(3)]
        gate.open()
        shutting = in_thread(pool.shutdown)  # wait=True: it must not hang on the paused queue
        assert shutting.result() is None
        assert pool.paused is False
        assert [future.result(0) for future in futures] == [0, 1, 2]
    assert record.ran == [0, 1, 2]


def test_shutdown_of_a_pool_paused_before_it_started_a_worker_runs_its_tasks() -> None:
    pool = PriorityThreadPoolExecutor(2)
    pool.pause()
    future = pool.submit(str, "queued")
    pool.shutdown(wait=True)
    assert future.done(), "shutdown(wait=True) returned with a task still queued"
    assert future.result(0) == "queued"


def test_shutdown_cancel_futures_of_a_paused_pool_cancels_its_queued_tasks(gate: Gate) -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1)
    with closing(pool, gate):
        blocker = hold_worker(pool, gate)
        pool.pause()
        futures = [pool.submit(record, i) for i in range(3)]
        pool.shutdown(wait=False, cancel_futures=True)
        assert set(wait(futures, TIMEOUT).done) == set(futures)
        assert all(future.cancelled() for future in futures)
        assert pool.statistics().cancelled == 3
        pool._check_invariants()
        gate.open()
        pool.shutdown()
        assert blocker.result(0) == "gate"
    assert record.ran == []


def test_pause_after_shutdown_has_no_effect() -> None:
    pool = PriorityThreadPoolExecutor(1)
    pool.shutdown()
    pool.pause()
    assert pool.paused is False
    assert pool.statistics().paused is False
    assert "shutdown" in repr(pool)
