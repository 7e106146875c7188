"""A task that goes ahead of queued ones: submitters yield the GIL until a runner takes one.

Under many submitting threads an urgent task would otherwise wait a GIL slice of each of them
before a worker could take it (see "Queue jumps" in ``_lock.py``). What is checked here is the
mechanism, deterministically: which submits set the hint, which yield, what clears it. How
much it buys is measured by ``benchmarks/scenarios/urgent_contended.py``, not asserted.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import _lock
from priority_executor._orders import HeapQueue, TaskQueue
from priority_executor._queue import Entry, QueueBase
from support import AGEING, KINDS, AnyPool, internals, make_pool


def _entry(priority: float = 0) -> Entry:
    return Entry(Future(), print, (), {}, priority, None)


class Monotonic:
    """The monotonic clock of the jump windows, moved by the test."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def monotonic(monkeypatch: pytest.MonkeyPatch) -> Monotonic:
    clock = Monotonic()
    monkeypatch.setattr(_lock, "monotonic", clock)
    return clock


@pytest.fixture
def yields(monkeypatch: pytest.MonkeyPatch, monotonic: Monotonic) -> list[None]:
    """Every GIL yield of a submit, recorded instead of made; the windows' clock stands still."""
    if not _lock.gil_enabled():
        pytest.skip("no GIL: no jump window opens")
    made: list[None] = []
    monkeypatch.setattr(_lock, "yield_gil", lambda: made.append(None))
    return made


@contextmanager
def held(kind: str, gate: Gate, **options: Any) -> Iterator[AnyPool]:
    """A pool of one worker (or one slot in front of one thread) held by ``gate``; on the way
    out the gate opens and the pool shuts down."""
    pool = make_pool(kind, 1, **options)
    try:
        pool.submit(gate)
        gate.wait_started()
        yield pool
    finally:
        gate.open()
        pool.shutdown()


# -- the queue's answer --------------------------------------------------------------------


@pytest.mark.parametrize("queue_type", [TaskQueue, HeapQueue])
def test_a_push_says_whether_it_went_ahead_of_every_queued_entry(
    queue_type: type[QueueBase],
) -> None:
    queue = queue_type()
    assert not queue.push(_entry(), 0), "nothing queued: nothing to go ahead of"
    assert not queue.push(_entry(), 5)
    assert not queue.push(_entry(), 0), "an equal rank queues behind, in submission order"
    assert not queue.push(_entry(), 3)
    assert queue.push(_entry(), -1)
    assert queue.push(_entry(), -2)
    queue._check_invariants()


@pytest.mark.parametrize("queue_type", [TaskQueue, HeapQueue])
def test_a_tombstone_in_front_can_only_hide_a_jump(queue_type: type[QueueBase]) -> None:
    """The answer is O(1) against the smallest rank stored, so a removed entry that still
    leads may hide a jump (a missed yield), but never makes one up."""
    queue = queue_type()
    first = _entry()
    queue.push(first, -5)
    queue.push(_entry(), 0)
    queue.remove(first)
    assert not queue.push(_entry(), -5), "hidden by the tombstone of rank -5"
    assert queue.push(_entry(), -6)
    queue._check_invariants()


# -- which submits yield -------------------------------------------------------------------


@pytest.mark.parametrize("ageing", AGEING)
@pytest.mark.parametrize("kind", KINDS)
def test_submits_yield_from_a_jump_until_a_runner_takes_a_task(
    kind: str, ageing: Optional[float], gate: Gate, yields: list[None], clock: FakeClock
) -> None:
    with held(kind, gate, ageing=ageing, clock=clock) as pool:
        state = internals(pool)
        lows = [pool.submit(int, priority=0) for _ in range(3)]
        assert not yields, "equal priorities jump nothing"
        assert not state.jump_window_open()
        urgent = pool.submit(int, priority=10)
        assert state.jump_window_open()
        assert len(yields) == 1, "the urgent submit itself yields"
        lows.append(pool.submit(int, priority=0))
        pool.submit(int, priority=10)  # behind the first urgent one: no jump of its own
        assert len(yields) == 3, "every submit yields while the urgent task waits"
        pool._admission.check_invariants()
        gate.open()
        urgent.result(TIMEOUT)
        assert not state.jump_window_open(), "taking the best task clears it"
        for future in lows:
            future.result(TIMEOUT)
        pool.submit(int, priority=0).result(TIMEOUT)
        assert len(yields) == 3
        pool._admission.check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_whether_a_jump_opens_a_window_follows_the_gil_as_it_is_at_that_jump(
    kind: str, gate: Gate, yields: list[None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free-threaded build can turn its GIL on after import (an extension that does not
    declare free-threading support): the window opens exactly while a GIL is there."""
    gil = [False]
    monkeypatch.setattr(_lock, "_is_gil_enabled", lambda: gil[0])
    with held(kind, gate) as pool:
        state = internals(pool)
        pool.submit(int, priority=0)
        pool.submit(int, priority=10)
        assert not state.jump_window_open(), "no GIL: nothing to yield, no window"
        assert not yields
        gil[0] = True
        pool.submit(int, priority=20)
        assert state.jump_window_open(), "the GIL came back: a jump opens a window"
        assert len(yields) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_into_an_empty_queue_jumps_nothing(
    kind: str, gate: Gate, yields: list[None]
) -> None:
    with held(kind, gate) as pool:
        pool.submit(int, priority=100)
        assert not yields
        assert not internals(pool).jump_window_open()


@pytest.mark.parametrize("kind", KINDS)
def test_a_paused_pool_makes_no_submit_yield(kind: str, gate: Gate, yields: list[None]) -> None:
    """Nothing starts while paused, so yielding would hasten nothing: pausing clears the
    hint, and a jump while paused does not set it."""
    with held(kind, gate) as pool:
        state = internals(pool)
        pool.submit(int, priority=0)
        pool.submit(int, priority=5)
        assert state.jump_window_open()
        assert len(yields) == 1
        pool.pause()
        assert not state.jump_window_open()
        pool.submit(int, priority=9)
        pool.submit(int, priority=0)
        assert not state.jump_window_open()
        assert len(yields) == 1
        pool._admission.check_invariants()
        pool.resume()
        gate.open()
        pool.join()
        assert not state.jump_window_open()


@pytest.mark.parametrize("kind", KINDS)
def test_a_jumped_task_cancelled_or_expired_leaves_only_a_hint(
    kind: str, gate: Gate, yields: list[None], clock: FakeClock
) -> None:
    """The hint outlives a jumped task that left the queue unrun; it costs a yield per submit
    until the runner's next take clears it, and nothing else: order and counts are intact."""
    with held(kind, gate, clock=clock) as pool:
        clock.attach(pool)
        state = internals(pool)
        low = pool.submit(int, priority=0)
        cancelled = pool.submit(int, priority=5)
        expiring = pool.submit(int, priority=6, timeout=1.0)
        assert cancelled.cancel()
        clock.advance(2.0)
        wait([expiring], TIMEOUT)
        assert expiring.cancelled()
        assert state.jump_window_open()
        later = pool.submit(int, priority=0)
        assert len(yields) == 3
        gate.open()
        assert low.result(TIMEOUT) == 0
        assert later.result(TIMEOUT) == 0
        assert not state.jump_window_open()
        stats = pool.statistics()
        assert (stats.cancelled, stats.expired) == (1, 1)
        pool._admission.check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_a_jump_that_no_runner_takes_costs_submits_one_window(
    kind: str, gate: Gate, yields: list[None], monotonic: Monotonic
) -> None:
    """With every worker (or slot) in a long task no runner can take the jumped task, and a
    yield would hand the GIL to that task for a whole slice per submit: a submit yielding until
    a take would cost about 5 ms behind a CPU-bound task. So the window closes after
    one switch interval, and a later jump does not reopen it until a runner takes a task."""
    with held(kind, gate) as pool:
        pool.submit(int, priority=0)
        pool.submit(int, priority=5)
        pool.submit(int, priority=0)
        assert len(yields) == 2
        monotonic.now += sys.getswitchinterval()
        for priority in (0, 9, 0):
            pool.submit(int, priority=priority)
        assert len(yields) == 2, "the window has closed"
        gate.open()
        pool.join()
        assert not internals(pool).jump_window_open(), "the take closed it for good"
        pool._admission.check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_a_submit_rolled_back_leaves_no_window_open(
    kind: str, gate: Gate, yields: list[None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception raised (by a signal handler, say) after the jump was recorded rolls the
    submit back, the window with it: no window stays open for a task not queued."""
    with held(kind, gate) as pool:
        runner = pool._admission.runner
        real = runner.queued_locked

        def interrupted(waiting: int) -> None:
            real(waiting)
            raise KeyboardInterrupt

        pool.submit(int, priority=0)
        with monkeypatch.context() as patch:
            patch.setattr(runner, "queued_locked", interrupted)
            with pytest.raises(KeyboardInterrupt):
                pool.submit(int, priority=5)
        assert not internals(pool).jump_window_open()
        assert internals(pool).queued() == 1
        pool._admission.check_invariants()
