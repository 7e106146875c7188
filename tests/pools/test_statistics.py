"""``statistics()`` and ``repr()``: a frozen snapshot of the queue, the threads and the count of
every outcome, in which every accepted task is in exactly one state: ``submitted == queued +
running + completed + failed + cancelled + expired``.

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. Deadlines run on a :class:`FakeClock`, so a scripted scenario reaches
each outcome exactly and the whole expected snapshot can be written out; a seeded random run
checks the conservation law after every step. Nothing sleeps and every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import (
    ExecutorStatistics,
    Priority,
    PriorityThreadPoolExecutor,
    QueueFullError,
)
from priority_executor._queue import KEEP_ZEROS
from priority_executor._recording import OUTCOMES
from support import (
    FAR,
    SHUTDOWN_MESSAGE,
    Recorder,
    closing,
    exact,
    hold_worker,
    joined_promptly,
    run_to_idle,
    wait_until,
)


def assert_conserved(stats: ExecutorStatistics) -> None:
    """Every accepted task is in exactly one of the six states."""
    settled = stats.completed + stats.failed + stats.cancelled + stats.expired
    assert stats.submitted == stats.queued + stats.running + settled, stats
    assert stats.queued == sum(stats.queued_by_priority.values()), stats


def fail() -> None:
    raise ValueError("task failed")


def without_figures(stats: ExecutorStatistics) -> ExecutorStatistics:
    """``stats`` without the figures by priority class (``tests/pools/test_recording.py``'s)."""
    return dataclasses.replace(stats, wait={}, run={}, outcomes={})


def outcomes(**counts: int) -> dict[str, int]:
    """A class's outcome counts: those given, every other one 0."""
    return {name: counts.get(name, 0) for name in OUTCOMES}


# -- statistics -----------------------------------------------------------------------------


def test_statistics_is_a_frozen_snapshot(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        hold_worker(pool, gate)
        before = pool.statistics()
        assert isinstance(before, ExecutorStatistics)
        with pytest.raises(dataclasses.FrozenInstanceError):
            before.queued = 5  # type: ignore[misc]
        pool.submit(str, "queued", priority=Priority.HIGH)
        after = pool.statistics()
        assert (before.queued, before.submitted) == (0, 1)
        assert (after.queued, after.submitted) == (1, 2)
        assert after.queued_by_priority == {Priority.HIGH: 1}
        assert_conserved(before)
        assert_conserved(after)


def test_statistics_count_every_outcome_of_a_scripted_scenario(
    clock: FakeClock, gate: Gate
) -> None:
    second_gate = Gate()
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1, clock=clock)
    clock.attach(pool)
    with closing(pool, gate, second_gate):
        hold_worker(pool, gate)
        pool.submit(record, "ok-high", priority=Priority.HIGH)
        pool.submit(record, "ok-normal")
        failing = pool.submit(fail)
        cancelled = pool.submit(record, "cancelled", priority=Priority.LOW)
        assert cancelled.cancel()
        expiring = pool.submit(record, "expiring", priority=Priority.LOW, timeout=FAR)
        instant = pool.submit(record, "instant", timeout=0)
        assert instant.cancelled()
        pool._check_invariants()
        stats = pool.statistics()
        assert stats.outcomes == {0: outcomes(expired=1), -1: outcomes(cancelled=1)}
        assert stats.wait == {}  # the gate, running, is recorded when it ends
        assert without_figures(stats) == ExecutorStatistics(
            queued=4,
            queued_by_priority={1: 1, 0: 2, -1: 1},
            running=1,
            workers=1,
            idle_workers=0,
            paused=False,
            submitted=7,
            completed=0,
            failed=0,
            cancelled=1,
            expired=1,
            rejected=0,
            max_workers=1,
        )
        assert_conserved(stats)

        clock.advance(2 * FAR)
        assert expiring in wait([expiring], TIMEOUT).done
        pool.pause()
        stats = pool.statistics()
        assert (stats.queued, stats.expired, stats.paused) == (3, 2, True)
        assert stats.queued_by_priority == {1: 1, 0: 2}
        assert_conserved(stats)

        pool.resume()
        run_to_idle(pool, gate)
        assert isinstance(failing.exception(0), ValueError)
        wait_until(lambda: pool.statistics().idle_workers == 1, "the worker idles")
        stats = pool.statistics()
        assert stats.outcomes == {
            1: outcomes(completed=1),
            0: outcomes(completed=2, failed=1, expired=1),
            -1: outcomes(cancelled=1, expired=1),
        }
        assert {p: d.count for p, d in stats.wait.items()} == {1: 1, 0: 3}
        assert without_figures(stats) == ExecutorStatistics(
            queued=0,
            queued_by_priority={},
            running=0,
            workers=1,
            idle_workers=1,
            paused=False,
            submitted=7,
            completed=3,
            failed=1,
            cancelled=1,
            expired=2,
            rejected=0,
            max_workers=1,
        )

        hold_worker(pool, second_gate)
        doomed = [pool.submit(record, f"doomed-{i}", priority=Priority.LOW) for i in range(2)]
        pool.pause()
        assert pool.statistics().paused is True
        pool.shutdown(wait=False, cancel_futures=True)
        assert all(future.cancelled() for future in doomed)
        with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
            pool.submit(record, "rejected")
        stats = pool.statistics()
        assert (stats.queued, stats.running, stats.paused) == (0, 1, False)
        assert (stats.cancelled, stats.rejected) == (3, 1)
        assert_conserved(stats)
        second_gate.open()
        pool.shutdown(wait=True)
        stats = pool.statistics()
        assert stats.outcomes == {
            1: outcomes(completed=1),
            0: outcomes(completed=3, failed=1, expired=1, rejected=1),  # the gates: NORMAL
            -1: outcomes(cancelled=3, expired=1),
        }
        assert {p: d.count for p, d in stats.wait.items()} == {1: 1, 0: 4}
        assert without_figures(stats) == ExecutorStatistics(
            queued=0,
            queued_by_priority={},
            running=0,
            workers=0,
            idle_workers=0,
            paused=False,
            submitted=10,
            completed=4,
            failed=1,
            cancelled=3,
            expired=2,
            rejected=1,
            max_workers=1,
        )
        assert_conserved(stats)
        pool._check_invariants()
    assert record.ran == ["ok-high", "ok-normal"]


def test_statistics_conservation_law_holds_at_every_step(clock: FakeClock) -> None:
    rng = random.Random(7)
    pool = PriorityThreadPoolExecutor(2, clock=clock, max_queued=8, when_full="evict")
    clock.attach(pool)
    futures: list[Future[Any]] = []
    with closing(pool):
        for _ in range(60):
            action = rng.choice(["submit", "submit", "fail", "cancel", "advance", "pause"])
            if action in ("submit", "fail"):
                task: Callable[..., Any] = fail if action == "fail" else str
                priority, timeout = rng.randint(-2, 2), rng.choice([None, 1.0])
                with contextlib.suppress(QueueFullError):
                    futures.append(pool.submit(task, priority=priority, timeout=timeout))
            elif action == "cancel" and futures:
                rng.choice(futures).cancel()
            elif action == "advance":
                clock.advance(rng.choice([0.5, 2.0]))
            elif pool.paused:
                pool.resume()
            else:
                pool.pause()
            assert_conserved(pool.statistics())
            pool._check_invariants()
        pool.resume()
        assert joined_promptly(pool)
        stats = pool.statistics()
        assert_conserved(stats)
        assert (stats.queued, stats.running) == (0, 0)
        assert stats.submitted == len(futures)


# -- repr -----------------------------------------------------------------------------------


def test_repr_shows_the_state_and_live_counts(gate: Gate) -> None:
    pool = PriorityThreadPoolExecutor(1)
    name = type(pool).__name__
    assert repr(pool) == f"<{name} running max_workers=1 threads=0 queued=0 running=0>"
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.submit(str, "a")
        pool.submit(str, "b")
        assert repr(pool) == f"<{name} running max_workers=1 threads=1 queued=2 running=1>"
        pool.pause()
        assert repr(pool) == f"<{name} paused max_workers=1 threads=1 queued=2 running=1>"
        pool.resume()
        run_to_idle(pool, gate)
        pool.shutdown()
        assert repr(pool) == f"<{name} shutdown max_workers=1 threads=1 queued=0 running=0>"


def test_queued_by_priority_stays_small_when_every_priority_is_new() -> None:
    """Priorities that are all different (a timestamp) leave at most KEEP_ZEROS listed at zero."""
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        for round_ in range(3):
            gate = Gate()
            blocker = hold_worker(pool, gate)
            futures: list[Future[Any]] = [blocker]
            for i in range(3 * KEEP_ZEROS):
                futures.append(pool.submit(int, priority=round_ * 1000 + i + 0.5))
            assert len(pool.statistics().queued_by_priority) == 3 * KEEP_ZEROS
            gate.open()
            assert not wait(futures, TIMEOUT).not_done
            pool._check_invariants()  # it asserts that at most KEEP_ZEROS zero counts are kept
            assert len(pool._admission.core.queue.by_priority) <= KEEP_ZEROS
            assert pool.statistics().queued_by_priority == {}
