"""Ageing: with ``ageing=a``, a queued task ranks by ``queued_at - priority * a`` (lower first), so
a task gains one priority level for every ``a`` seconds it waits and no stream of higher-
priority work starves it; equal ranks run in submission order. Without ageing, priority is
strict.

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. Time is a :class:`FakeClock` that moves only when a test says so, and
times, priorities and ageing are exact binary fractions, so every rank is exact. Nothing sleeps,
every wait has a timeout, and ``_check_invariants()`` runs after the steps that change the
queue.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor
from support import HUGE, Recorder, closing, exact, hold_worker, internals, run_to_idle

# -- the order ageing gives -----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_ageing_orders_by_queued_at_minus_priority_times_ageing(
    clock: FakeClock, gate: Gate, seed: int
) -> None:
    # Times, priorities and ageing are exact binary fractions, so the ranks are exact too.
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


# -- the ageing option ----------------------------------------------------------------------


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


# -- a priority beyond float range ----------------------------------------------------------


HUGE_PRIORITY_MESSAGE = "priority must fit in a float when ageing is set, got an int of 1329 bits"


# An int priority beyond float range under ageing is refused with an exact message, by
# submit(priority=10**400) and set_priority(f, 10**400) alike, and never as an OverflowError from
# deep in the scheduler (set_priority would raise it under the pool's lock).


@pytest.mark.parametrize("priority", [HUGE, -HUGE], ids=["huge", "-huge"])
def test_a_priority_beyond_float_range_under_ageing_is_refused_with_an_exact_message(
    clock: FakeClock, gate: Gate, priority: int
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, ageing=1.0)
    try:
        with pytest.raises(ValueError, match=exact(HUGE_PRIORITY_MESSAGE)):
            pool.submit(str, "refused", priority=priority)
        assert pool.statistics().submitted == 0
        pool.submit(gate)
        gate.wait_started()
        queued = pool.submit(str, "queued", priority=2)
        with pytest.raises(ValueError, match=exact(HUGE_PRIORITY_MESSAGE)):
            pool.set_priority(queued, priority)
        assert pool.statistics().queued_by_priority == {2: 1}
        pool._check_invariants()
        gate.open()
        assert queued.result(TIMEOUT) == "queued"
    finally:
        gate.open()
        pool.shutdown()


@pytest.mark.parametrize(
    "call",
    [
        lambda pool: pool.options(priority=10**400),
        lambda pool: pool.map(str, [1], priority=10**400),
    ],
    ids=["options", "map"],
)
def test_a_priority_beyond_float_range_under_ageing_is_refused_by_options_and_map(
    clock: FakeClock, call: Callable[[PriorityThreadPoolExecutor], object]
) -> None:
    # The same refusal as submit's, before any view exists or any task is queued: a view
    # made with such a priority could never queue a task under ageing.
    message = (
        "priority must fit in a float when ageing is set,"
        f" got an int of {(10**400).bit_length()} bits"
    )
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, ageing=1.0)
    try:
        with pytest.raises(ValueError, match=exact(message)):
            call(pool)
        assert internals(pool).queued() == 0
        stats = pool.statistics()
        assert (stats.submitted, stats.rejected) == (0, 0)
        pool._check_invariants()
    finally:
        pool.shutdown()


def test_a_huge_priority_without_ageing_still_orders_exactly(gate: Gate) -> None:
    # Not a regression (this always worked); shows that the refusal above is ageing's only.
    order: list[str] = []
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(gate)
        gate.wait_started()
        pool.submit(order.append, "normal")
        pool.submit(order.append, "huge", priority=HUGE)
        pool.submit(order.append, "huger", priority=HUGE + 1)
        gate.open()
    assert order == ["huger", "huge", "normal"]
