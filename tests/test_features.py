"""The features beyond the standard pool (issue 5): ageing, ``set_priority``, pause and
resume, ``join``, ``statistics``, backpressure, and how ``options()`` views and ``map`` honour
them.

Every test is deterministic. Order is observed with a gate: one worker (``max_workers=1``) is
held by a task waiting on an event, the work under test is queued behind it, the gate opens,
and the order in which the tasks ran is read from a list. Time is a :class:`FakeClock` that
moves only when a test says so. A submit that must block runs in a helper thread, and the test
waits for the pool to report it blocked before it makes room. Every wait has a timeout, and
``_check_invariants()`` runs after each step that changes the queue.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any, Callable, Optional, TypeVar

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import (
    ExecutorStatistics,
    Priority,
    PriorityThreadPoolExecutor,
    QueueFullError,
)
from support import (
    SHUTDOWN_MESSAGE,
    Recorder,
    exact,
    in_thread,
    internals,
    queue_full_message,
    wait_until,
)

T = TypeVar("T")

JOIN_FROM_WORKER_MESSAGE = (
    "cannot join() from one of the pool's own threads: it would wait for itself"
)

#: A queue deadline far enough ahead, in fake seconds, that only a moved clock reaches it; a
#: timer that slept until it in real seconds would fail the test instead of passing it late.
FAR = 100.0

#: How long a test waits for what a correct pool does in milliseconds: short, so that a
#: regression fails fast instead of waiting out TIMEOUT.
STUCK = 1.0


def wait_blocked(pool: PriorityThreadPoolExecutor, count: int = 1) -> None:
    """Wait until ``count`` submits are blocked on the pool's full queue."""
    pool_internals = internals(pool)
    wait_until(
        lambda: pool_internals.blocked() == count, f"{count} submit(s) block on the full queue"
    )


def timer_asleep(pool: PriorityThreadPoolExecutor, target: Optional[float] = None) -> None:
    """Wait until the deadline timer has handled every wake-up and sleeps until ``target``."""
    pool_internals = internals(pool)
    wait_until(
        lambda: pool_internals.timer_sleeps_until(target), f"the timer sleeps until {target}"
    )


@contextmanager
def closing(pool: PriorityThreadPoolExecutor, *gates: Gate) -> Iterator[PriorityThreadPoolExecutor]:
    """Yield ``pool``; on the way out open ``gates`` and shut it down, cancelling what waits."""
    try:
        yield pool
    finally:
        for gate in gates:
            gate.open()
        pool.shutdown(cancel_futures=True)


def hold_worker(pool: PriorityThreadPoolExecutor, gate: Gate) -> Future[str]:
    """Occupy one worker until ``gate`` opens."""
    blocker = pool.submit(gate)
    gate.wait_started()
    return blocker


def run_to_idle(pool: PriorityThreadPoolExecutor, gate: Gate) -> None:
    """Open ``gate`` and wait until nothing is queued or running."""
    gate.open()
    assert joined_promptly(pool), "the pool did not become idle"
    pool._check_invariants()


def joined_promptly(pool: PriorityThreadPoolExecutor) -> bool:
    """``pool.join(TIMEOUT)``, True only if it returned before its timeout.

    On a timeout ``join`` re-checks and may return True, so only the time taken tells that
    it was woken when the pool became idle rather than at the end of its timeout.
    """
    started = time.monotonic()
    idle = pool.join(TIMEOUT)
    return idle and time.monotonic() - started < TIMEOUT


def assert_conserved(stats: ExecutorStatistics) -> None:
    """Every accepted task is in exactly one of the six states."""
    settled = stats.completed + stats.failed + stats.cancelled + stats.expired
    assert stats.submitted == stats.queued + stats.running + settled, stats
    assert stats.queued == sum(stats.queued_by_priority.values()), stats


def fail() -> None:
    raise ValueError("task failed")


# -- 1. ageing ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_ageing_orders_by_queued_at_minus_priority_times_ageing(
    clock: FakeClock, gate: Gate, seed: int
) -> None:
    # Times, priorities and ageing are exact binary fractions, so the keys are exact too.
    rng = random.Random(seed)
    ageing = rng.choice([0.25, 0.5, 1.0, 2.0])
    record = Recorder()
    submitted: list[tuple[float, int]] = []  # (key, submission index)
    with closing(PriorityThreadPoolExecutor(1, clock=clock, ageing=ageing), gate) as pool:
        hold_worker(pool, gate)
        for index in range(40):
            clock.advance(rng.choice([0.0, 0.25, 0.5, 1.0]))
            priority = rng.randint(-2, 2)
            pool.submit(record, index, priority=priority)
            submitted.append((clock() - priority * ageing, index))
            pool._check_invariants()
        run_to_idle(pool, gate)
    expected = [index for _key, index in sorted(submitted)]
    assert record.ran == expected, f"seed={seed} ageing={ageing}"


def test_ageing_keeps_submission_order_among_equal_keys(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, clock=clock, ageing=1.0), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "a", priority=0)  # key 1000
        pool.submit(record, "later", priority=-1)  # key 1001
        clock.advance(1.0)
        pool.submit(record, "b", priority=1)  # key 1000
        pool.submit(record, "c", priority=Priority.HIGH)  # key 1000
        clock.advance(1.0)
        pool.submit(record, "d", priority=2)  # key 1000
        pool.submit(record, "first", priority=3)  # key 999
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["first", "a", "b", "c", "d", "later"]


@pytest.mark.parametrize("ageing", [0.5, 1.0, 2.0])
def test_ageing_bound_low_task_runs_before_high_tasks_arriving_gap_times_ageing_later(
    clock: FakeClock, gate: Gate, ageing: float
) -> None:
    gap = Priority.HIGH - Priority.LOW
    record = Recorder()
    arrived: dict[str, float] = {}  # HIGH task -> seconds after the LOW task arrived
    with closing(PriorityThreadPoolExecutor(1, clock=clock, ageing=ageing), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "high-before", priority=Priority.HIGH)
        low_at = clock()
        pool.submit(record, "low", priority=Priority.LOW)
        for i in range(32):  # a HIGH task every quarter second, for 8 s > gap * ageing
            clock.advance(0.25)
            pool.submit(record, f"high-{i}", priority=Priority.HIGH)
            arrived[f"high-{i}"] = clock() - low_at
        pool._check_invariants()
        run_to_idle(pool, gate)
    order = record.ran
    low = order.index("low")
    assert order.index("high-before") < low
    for tag, delay in arrived.items():
        if delay < gap * ageing:
            assert order.index(tag) < low, f"{tag} arrived {delay} s after LOW, within the gap"
        else:
            assert order.index(tag) > low, f"{tag} arrived {delay} s after LOW, overtook it"
    assert 0 < low < len(order) - 1


def test_ageing_none_is_strict_priority(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, clock=clock), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "low", priority=Priority.LOW)
        for i in range(10):
            clock.advance(1000.0)
            pool.submit(record, i, priority=Priority.HIGH)
        run_to_idle(pool, gate)
    assert record.ran == [*range(10), "low"]


@pytest.mark.parametrize("ageing", [None, 1.0])
def test_ageing_bound_holds_under_a_never_ending_high_stream(
    clock: FakeClock, gate: Gate, ageing: Optional[float]
) -> None:
    # Each HIGH task moves the clock by STEP and submits the next HIGH task, so a HIGH task
    # is always queued: without ageing the LOW task would wait for as long as the stream
    # lasts. With ageing it waits at most its gap times ``ageing`` plus the running task.
    step, limit, gap = 0.5, 40, Priority.HIGH - Priority.LOW
    started: list[tuple[str, float]] = []  # (task, fake time it started); one worker writes
    arrived: dict[str, float] = {}
    pool = PriorityThreadPoolExecutor(1, clock=clock, ageing=ageing)

    def high(n: int) -> None:
        started.append((f"high-{n}", clock()))
        if n + 1 < limit:
            clock.advance(step)
            arrived[f"high-{n + 1}"] = clock()
            pool.submit(high, n + 1, priority=Priority.HIGH)

    def low() -> None:
        started.append(("low", clock()))

    with closing(pool, gate):
        hold_worker(pool, gate)
        arrived["low"] = arrived["high-0"] = clock()
        pool.submit(low, priority=Priority.LOW)
        pool.submit(high, 0, priority=Priority.HIGH)
        run_to_idle(pool, gate)
    order = [tag for tag, _at in started]
    assert len(order) == limit + 1
    low_index = order.index("low")
    if ageing is None:
        assert low_index == limit, "strict priority: LOW runs after the whole stream"
        return
    for tag in order:
        delay = arrived[tag] - arrived["low"]
        if tag != "low":
            assert (order.index(tag) < low_index) == (delay < gap * ageing), (tag, delay)
    low_started = dict(started)["low"]
    assert low_started - arrived["low"] <= gap * ageing + step


@pytest.mark.parametrize(
    ("ageing", "error", "message"),
    [
        ("x", TypeError, "ageing must be a positive number or None, got 'x' (str)"),
        (True, TypeError, "ageing must be a positive number or None, got True (bool)"),
        (0, ValueError, "ageing must be a positive number or None, got 0 (int)"),
        (-1.5, ValueError, "ageing must be a positive number or None, got -1.5 (float)"),
        (math.inf, ValueError, "ageing must be a positive number or None, got inf (float)"),
        (math.nan, ValueError, "ageing must be a positive number or None, got nan (float)"),
    ],
)
def test_bad_ageing_is_refused_with_an_exact_message(
    ageing: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=exact(message)):
        PriorityThreadPoolExecutor(1, ageing=ageing)


def test_ageing_accepts_any_positive_real_number() -> None:
    for ageing in (1, 0.001, 1e9):
        PriorityThreadPoolExecutor(1, ageing=ageing).shutdown()


# -- 2. set_priority ------------------------------------------------------------------------


def test_set_priority_moves_a_queued_task_behind_those_at_its_new_priority(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        hold_worker(pool, gate)
        a = pool.submit(record, "a", priority=Priority.LOW)
        b = pool.submit(record, "b", priority=Priority.LOW)
        pool.submit(record, "c", priority=Priority.NORMAL)
        pool.submit(record, "d", priority=Priority.HIGH)
        assert pool.set_priority(a, Priority.HIGH) is True
        pool._check_invariants()
        assert pool.set_priority(b, 0.5) is True
        pool._check_invariants()
        assert pool.statistics().queued_by_priority == {1: 2, 0.5: 1, 0: 1}
        run_to_idle(pool, gate)
    assert record.ran == ["d", "a", "b", "c"]


def test_set_priority_to_the_same_priority_moves_the_task_to_the_back(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        hold_worker(pool, gate)
        first = pool.submit(record, "first")
        pool.submit(record, "second")
        assert pool.set_priority(first, Priority.NORMAL) is True
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["second", "first"]


def test_set_priority_returns_false_unless_the_task_is_queued_in_this_pool(gate: Gate) -> None:
    other_gate = Gate()
    record = Recorder()
    with (
        closing(PriorityThreadPoolExecutor(1), gate) as pool,
        closing(PriorityThreadPoolExecutor(1), other_gate) as other,
    ):
        finished = pool.submit(record, "finished")
        assert finished.result(TIMEOUT) == "finished"
        running = hold_worker(pool, gate)
        cancelled = pool.submit(record, "cancelled")
        assert cancelled.cancel()
        hold_worker(other, other_gate)
        foreign = other.submit(record, "foreign", priority=Priority.LOW)
        other.submit(record, "other-high", priority=Priority.HIGH)

        assert pool.set_priority(running, Priority.HIGH) is False
        assert pool.set_priority(finished, Priority.HIGH) is False
        assert pool.set_priority(cancelled, Priority.HIGH) is False
        assert pool.set_priority(foreign, Priority.HIGH) is False
        assert pool.set_priority(Future(), Priority.HIGH) is False
        pool._check_invariants()
        other._check_invariants()
        run_to_idle(other, other_gate)
        assert record.ran == ["finished", "other-high", "foreign"]  # untouched by pool
        run_to_idle(pool, gate)
    assert not cancelled.running()


def test_set_priority_refuses_what_is_not_a_future_with_an_exact_message() -> None:
    pool = PriorityThreadPoolExecutor(1)
    try:
        bad: Any = 5
        with pytest.raises(
            TypeError, match=exact("future must be a concurrent.futures.Future, got 5 (int)")
        ):
            pool.set_priority(bad, Priority.HIGH)
        high: Any = "high"
        with pytest.raises(
            TypeError, match=exact("priority must be a real number, got 'high' (str)")
        ):
            pool.set_priority(Future(), high)
        with pytest.raises(ValueError, match=exact("priority must not be NaN, got nan (float)")):
            pool.set_priority(Future(), math.nan)
    finally:
        pool.shutdown()


def test_set_priority_with_ageing_keeps_the_task_age(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, clock=clock, ageing=1.0), gate) as pool:
        hold_worker(pool, gate)
        old = pool.submit(record, "old", priority=Priority.LOW)  # key 1001
        pool.submit(record, "old-high", priority=Priority.HIGH)  # key 999
        clock.advance(1.5)
        pool.submit(record, "young-normal", priority=Priority.NORMAL)  # key 1001.5
        pool.submit(record, "young-high", priority=Priority.HIGH)  # key 1000.5
        # Keeping its age, "old" at NORMAL has key 1000: ahead of both young tasks. Were it
        # treated as submitted now (key 1001.5) it would run last.
        assert pool.set_priority(old, Priority.NORMAL) is True
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["old-high", "old", "young-high", "young-normal"]


def test_set_priority_with_ageing_lands_behind_a_task_of_the_same_age_and_priority(
    clock: FakeClock, gate: Gate
) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, clock=clock, ageing=1.0), gate) as pool:
        hold_worker(pool, gate)
        moved = pool.submit(record, "moved", priority=Priority.LOW)
        pool.submit(record, "there", priority=Priority.HIGH)  # same age, same key once moved
        assert pool.set_priority(moved, Priority.HIGH) is True
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["there", "moved"]


def test_set_priority_with_a_fractional_ageing_still_lands_behind_equal_age_tasks(
    clock: FakeClock, gate: Gate
) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, clock=clock, ageing=0.1), gate) as pool:
        hold_worker(pool, gate)
        moved = pool.submit(record, "moved", priority=1)
        pool.submit(record, "there", priority=3)
        assert pool.set_priority(moved, 3) is True
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["there", "moved"]


def test_set_priority_with_ageing_back_from_an_infinite_priority(
    clock: FakeClock, gate: Gate
) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, clock=clock, ageing=1.0), gate) as pool:
        hold_worker(pool, gate)
        moved = pool.submit(record, "moved", priority=math.inf)
        for tag in ("a", "b", "c", "d", "e"):
            pool.submit(record, tag, priority=Priority.LOW)  # key 1001, like "moved" at LOW
        pool.submit(record, "normal")  # key 1000
        assert pool.set_priority(moved, Priority.LOW) is True
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["normal", "a", "b", "c", "d", "e", "moved"]


# -- 3. pause and resume --------------------------------------------------------------------


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


def test_resume_starts_as_many_workers_as_the_queue_needs() -> None:
    release = threading.Event()
    started = [threading.Event() for _ in range(3)]

    def block(event: threading.Event) -> None:
        event.set()
        assert release.wait(TIMEOUT)

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
        release.set()
        pool.shutdown()
    assert all(future.exception(TIMEOUT) is None for future in futures)


def test_resume_wakes_idle_workers_and_starts_the_missing_ones() -> None:
    release = threading.Event()
    started = [threading.Event() for _ in range(3)]

    def block(event: threading.Event) -> None:
        event.set()
        assert release.wait(TIMEOUT)

    pool = PriorityThreadPoolExecutor(max_workers=3)
    try:
        warm = [threading.Event() for _ in range(2)]
        warming = [pool.submit(block, event) for event in warm]
        assert all(event.wait(TIMEOUT) for event in warm)
        release.set()
        assert pool.join(TIMEOUT)
        wait_until(lambda: pool.statistics().idle_workers == 2, "both workers idle")
        release.clear()
        pool.pause()
        for event in started:
            pool.submit(block, event)
        pool.resume()
        assert all(event.wait(TIMEOUT) for event in started[:2])
        assert started[2].wait(STUCK), "the third task waits although max_workers allows it"
    finally:
        release.set()
        pool.shutdown()
    assert all(future.exception(TIMEOUT) is None for future in warming)


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


# -- 4. join --------------------------------------------------------------------------------


def test_join_returns_true_at_once_when_idle() -> None:
    pool = PriorityThreadPoolExecutor(2)
    try:
        assert pool.join() is True  # never used
        assert pool.join(0) is True
        futures = [pool.submit(str, i) for i in range(10)]
        assert joined_promptly(pool)
        assert all(future.done() for future in futures)
        stats = pool.statistics()
        assert (stats.queued, stats.running, stats.completed) == (0, 0, 10)
        pool.pause()
        assert pool.join(0) is True  # paused but empty is idle
    finally:
        pool.shutdown()


def test_join_returns_false_on_timeout_while_a_task_runs(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        hold_worker(pool, gate)
        assert pool.join(0.05) is False
        assert pool.join(0) is False
        gate.open()
        assert joined_promptly(pool)


def test_join_from_several_threads_returns_true_in_each(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(str, "queued")
        joiners = [in_thread(lambda: joined_promptly(pool)) for _ in range(4)]
        wait_until(lambda: internals(pool).joiners() == 4, "four threads wait in join()")
        assert not any(joiner.future.done() for joiner in joiners)
        gate.open()
        assert [joiner.result() for joiner in joiners] == [True] * 4


def test_join_from_a_task_raises_instead_of_waiting_for_itself() -> None:
    # With a timeout, so that a pool that let the task wait for itself fails this test
    # instead of hanging it.
    pool = PriorityThreadPoolExecutor(1)
    try:
        for timeout in (TIMEOUT, 0):
            joined = pool.submit(pool.join, timeout)
            error = joined.exception(2 * TIMEOUT)
            assert isinstance(error, RuntimeError)
            assert str(error) == JOIN_FROM_WORKER_MESSAGE
        with_timeout = pool.submit(pool.join, TIMEOUT)
        with pytest.raises(RuntimeError, match=exact(JOIN_FROM_WORKER_MESSAGE)):
            with_timeout.result(2 * TIMEOUT)
    finally:
        pool.shutdown()


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        ("x", TypeError, "timeout must be a real number or None, got 'x' (str)"),
        (True, TypeError, "timeout must be a real number or None, got True (bool)"),
        (-1, ValueError, "timeout must be a non-negative number, got -1 (int)"),
        (math.nan, ValueError, "timeout must be a non-negative number, got nan (float)"),
    ],
)
def test_join_refuses_a_bad_timeout_with_an_exact_message(
    timeout: Any, error: type[Exception], message: str
) -> None:
    pool = PriorityThreadPoolExecutor(1)
    try:
        with pytest.raises(error, match=exact(message)):
            pool.join(timeout)
    finally:
        pool.shutdown()


def test_join_wakes_when_a_worker_expires_the_last_queued_task(
    clock: FakeClock, gate: Gate
) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock)  # not attached: the timer stays asleep
    with closing(pool, gate):
        hold_worker(pool, gate)
        late = pool.submit(str, "late", timeout=FAR)
        timer_asleep(pool, clock() + FAR)
        clock.advance(2 * FAR)  # the worker, not the timer, will find the task expired
        joiner = in_thread(lambda: pool.join(TIMEOUT))
        wait_until(lambda: internals(pool).joiners() == 1, "join() waits")
        gate.open()
        assert late in wait([late], TIMEOUT).done
        assert late.cancelled()
        assert pool.statistics().expired == 1
        try:
            assert joiner.result(STUCK) is True
        finally:
            pool.shutdown()  # wakes the joiner if the bug kept it waiting


# -- 5. statistics --------------------------------------------------------------------------


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
        assert stats == ExecutorStatistics(
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
        assert stats == ExecutorStatistics(
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
        assert stats == ExecutorStatistics(
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


# -- 6. backpressure ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["cancel", "start", "expire"])
def test_block_submit_returns_once_a_task_leaves_the_queue(
    clock: FakeClock, gate: Gate, how: str
) -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=2)
    clock.attach(pool)
    with closing(pool, gate):
        hold_worker(pool, gate)  # running: does not count toward max_queued
        first = pool.submit(record, "first", timeout=FAR if how == "expire" else None)
        pool.submit(record, "second")
        assert pool.statistics().queued == 2
        blocked = in_thread(lambda: pool.submit(record, "third"))
        wait_blocked(pool)
        assert not blocked.future.done()
        pool._check_invariants()
        if how == "cancel":
            assert first.cancel()
        elif how == "start":
            gate.open()
        else:
            clock.advance(2 * FAR)
        third = blocked.result()
        pool._check_invariants()
        run_to_idle(pool, gate)
        assert third.result(0) == "third"
    expected = ["first", "second", "third"] if how == "start" else ["second", "third"]
    assert record.ran == expected


def test_block_submit_raises_the_standard_error_if_the_pool_shuts_down_meanwhile(
    gate: Gate,
) -> None:
    with closing(PriorityThreadPoolExecutor(1, max_queued=1), gate) as pool:
        hold_worker(pool, gate)
        queued = pool.submit(str, "queued")
        blocked = in_thread(lambda: pool.submit(str, "blocked"))
        wait_blocked(pool)
        pool.shutdown(wait=False)
        error = blocked.exception()
        assert isinstance(error, RuntimeError)
        assert str(error) == SHUTDOWN_MESSAGE
        stats = pool.statistics()
        assert (stats.submitted, stats.rejected, stats.queued) == (2, 1, 1)
        pool._check_invariants()
        gate.open()
        pool.shutdown()
        assert queued.result(0) == "queued"


def test_raise_when_full_raises_queue_full_error_and_queues_nothing(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full="raise"), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "a")
        pool.submit(record, "b", priority=Priority.LOW)
        assert issubclass(QueueFullError, RuntimeError)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
            pool.submit(record, "refused", priority=Priority.HIGH)
        with pytest.raises(RuntimeError, match=exact(queue_full_message(2))):
            pool.submit(record, "refused too")
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.submitted, stats.rejected) == (2, 3, 2)
        run_to_idle(pool, gate)
    assert record.ran == ["a", "b"]


def test_running_tasks_do_not_count_toward_max_queued() -> None:
    gates = [Gate(), Gate()]
    with closing(PriorityThreadPoolExecutor(2, max_queued=1, when_full="raise"), *gates) as pool:
        for gate in gates:
            hold_worker(pool, gate)
        queued = pool.submit(str, "queued")
        stats = pool.statistics()
        assert (stats.running, stats.queued) == (2, 1)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(1))):
            pool.submit(str, "one too many")
        gates[0].open()
        assert queued.result(TIMEOUT) == "queued"
        pool._check_invariants()


def test_evict_cancels_the_lowest_ranked_queued_task_and_wakes_its_waiters(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=3, when_full="evict"), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "low-1", priority=Priority.LOW)
        evicted = pool.submit(record, "low-2", priority=Priority.LOW)  # runs last: the worst
        pool.submit(record, "normal")
        waiter = in_thread(lambda: wait([evicted], TIMEOUT))
        wait_until(lambda: bool(getattr(evicted, "_waiters", True)), "wait() waits")
        newcomer = pool.submit(record, "high", priority=Priority.HIGH)
        assert evicted.cancelled()
        assert evicted in wait([evicted], 0).done  # notified, not merely cancelled
        assert evicted in waiter.result().done
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.cancelled, stats.rejected) == (3, 1, 0)
        assert stats.queued_by_priority == {1: 1, 0: 1, -1: 1}
        run_to_idle(pool, gate)
        assert newcomer.result(0) == "high"
    assert record.ran == ["high", "normal", "low-1"]


def test_evict_refuses_a_task_that_does_not_outrank_the_lowest(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full="evict"), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "a")
        pool.submit(record, "b")
        for priority in (Priority.NORMAL, Priority.LOW):
            with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
                pool.submit(record, "refused", priority=priority)
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.cancelled, stats.rejected) == (2, 0, 2)
        run_to_idle(pool, gate)
    assert record.ran == ["a", "b"]


def test_evict_with_ageing_compares_effective_ranks(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1, clock=clock, ageing=1.0, max_queued=1, when_full="evict")
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.submit(record, "old-low", priority=Priority.LOW)  # key 1001
        clock.advance(3.0)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(1))):
            pool.submit(record, "young-normal")  # key 1003: the old task outranks it
        pool.submit(record, "young-top", priority=3)  # key 1000: evicts
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["young-top"]


def test_blocked_submit_expires_if_its_deadline_passes_while_it_waits(
    clock: FakeClock, gate: Gate
) -> None:
    # The submit waits in real time for at most the deadline's distance on the pool's clock
    # (here 0.02 s) and then re-reads the clock, so moving the fake clock is enough.
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=1)
    clock.attach(pool)
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.submit(str, "queued")
        blocked = in_thread(lambda: pool.submit(str, "late", timeout=0.02))
        wait_blocked(pool)
        clock.advance(1.0)
        late = blocked.result()
        assert late.cancelled()
        assert late in wait([late], 0).done
        stats = pool.statistics()
        assert (stats.queued, stats.expired, stats.submitted) == (1, 1, 3)
        pool._check_invariants()


class SteppingClock:
    """A clock that moves one second forward each time it is read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = 1000.0

    def __call__(self) -> float:
        with self._lock:
            self._now += 1.0
            return self._now


def test_blocked_submit_whose_deadline_is_due_at_the_room_check_expires_at_once(
    gate: Gate,
) -> None:
    # The submit reads the clock for the deadline, then again when it finds the queue full:
    # by then the deadline has passed, so it returns an expired future without waiting.
    pool = PriorityThreadPoolExecutor(1, clock=SteppingClock(), max_queued=1)
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.submit(str, "queued")
        late = in_thread(lambda: pool.submit(str, "late", timeout=0.5)).result()
        assert late.cancelled()
        assert late in wait([late], 0).done
        stats = pool.statistics()
        assert (stats.queued, stats.expired) == (1, 1)
        pool._check_invariants()


def test_blocked_submit_past_its_deadline_is_not_queued_when_room_appears(
    clock: FakeClock,
) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=1)  # paused: no worker
    with closing(pool):
        pool.pause()
        filler = pool.submit(str, "filler")
        blocked = in_thread(lambda: pool.submit(str, "late", timeout=FAR))
        wait_blocked(pool)
        timer_asleep(pool)  # it has looked for the blocked task's deadline and found none
        clock.advance(2 * FAR)  # not attached: only the blocked submit may notice
        assert filler.cancel()  # room appears only after the deadline
        late = blocked.result()
        assert late.cancelled(), "queued past its deadline"
        assert pool.statistics().expired == 1


def test_a_submit_that_waited_for_room_keeps_its_deadline_armed(clock: FakeClock) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=1)
    clock.attach(pool)
    with closing(pool):
        pool.pause()
        filler = pool.submit(str, "filler")
        blocked = in_thread(lambda: pool.submit(str, "late", timeout=FAR))
        wait_blocked(pool)
        timer_asleep(pool)  # it has looked for the blocked task's deadline and found none
        assert filler.cancel()
        late = blocked.result()
        assert not late.done()
        pool._check_invariants()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"max_queued": "x"},
            TypeError,
            "max_queued must be a positive integer or None, got 'x' (str)",
        ),
        (
            {"max_queued": 1.5},
            TypeError,
            "max_queued must be a positive integer or None, got 1.5 (float)",
        ),
        (
            {"max_queued": True},
            TypeError,
            "max_queued must be a positive integer or None, got True (bool)",
        ),
        (
            {"max_queued": 0},
            ValueError,
            "max_queued must be a positive integer or None, got 0 (int)",
        ),
        (
            {"max_queued": -3},
            ValueError,
            "max_queued must be a positive integer or None, got -3 (int)",
        ),
        (
            {"when_full": "drop"},
            ValueError,
            "when_full must be 'block', 'raise' or 'evict', got 'drop' (str)",
        ),
        (
            {"when_full": "BLOCK"},
            ValueError,
            "when_full must be 'block', 'raise' or 'evict', got 'BLOCK' (str)",
        ),
        (
            {"when_full": None},
            ValueError,
            "when_full must be 'block', 'raise' or 'evict', got None (NoneType)",
        ),
    ],
)
def test_bad_backpressure_options_are_refused_with_an_exact_message(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=exact(message)):
        PriorityThreadPoolExecutor(1, **kwargs)


# -- 7. options() views and map -------------------------------------------------------------


def test_view_submit_blocks_on_a_full_queue_until_room_appears(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=1), gate) as pool:
        view = pool.options(priority=Priority.HIGH)
        hold_worker(pool, gate)
        filler = pool.submit(record, "filler")
        blocked = in_thread(lambda: view.submit(record, "through-view"))
        wait_blocked(pool)
        assert filler.cancel()
        through_view = blocked.result()
        pool._check_invariants()
        run_to_idle(pool, gate)
        assert through_view.result(0) == "through-view"
    assert record.ran == ["through-view"]


def test_view_submit_blocked_on_a_full_queue_lets_the_views_tasks_finish(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1, max_queued=1), gate) as pool:
        view = pool.options()
        view.submit(gate)
        gate.wait_started()
        queued = view.submit(str, "queued")
        blocked = in_thread(lambda: view.submit(str, "blocked"))
        wait_blocked(pool)
        gate.open()
        try:
            assert blocked.result(STUCK).result(TIMEOUT) == "blocked"
        finally:
            queued.cancel()  # breaks the deadlock if the bug holds: room for the blocked submit
            blocked.result()


def test_evict_through_views(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full="evict"), gate) as pool:
        low = pool.options(priority=Priority.LOW)
        high = pool.options(priority=Priority.HIGH)
        hold_worker(pool, gate)
        low.submit(record, "low-1")
        evicted = low.submit(record, "low-2")
        with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
            low.submit(record, "refused")
        high.submit(record, "high")
        assert evicted.cancelled()
        assert evicted in wait([evicted], 0).done
        pool._check_invariants()
        run_to_idle(pool, gate)
        low.shutdown()  # returns: the evicted task no longer counts as pending
    assert record.ran == ["high", "low-1"]


def test_set_priority_moves_a_task_submitted_through_a_view(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        view = pool.options(priority=Priority.LOW)
        hold_worker(pool, gate)
        pool.submit(record, "normal")
        moved = view.submit(record, "moved")
        assert pool.set_priority(moved, Priority.HIGH) is True
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["moved", "normal"]


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
