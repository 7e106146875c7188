"""Rate limits, key limits, limits changed at run time: on both executors, on a fake clock.

A start that must not happen is checked at a steady state, not after a sleep: once the timer
sleeps until the next slot (``timer_asleep``) and the pool's workers have parked, nothing can
start before the test moves the fake clock. Every limit is tested on both executors
(``KINDS``) and, where the queue's order matters, under both orderings (``AGEING``).
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import (
    Priority,
    PriorityExecutor,
    PriorityThreadPoolExecutor,
    RateLimit,
    _keyed,
)
from priority_executor._executor import _default_max_workers
from priority_executor._keyed import KeyedQueue
from priority_executor._queue import Entry
from support import (
    AGEING,
    KINDS,
    AnyPool,
    Recorder,
    assert_done_promptly,
    exact,
    internals,
    make_pool,
    timer_asleep,
    wait_until,
)

START = 1000.0  # the fake clock's first reading


@contextmanager
def running(pool: AnyPool, *gates: Gate) -> Iterator[AnyPool]:
    """Yield ``pool``; on the way out open ``gates``, check the invariants, shut it down."""
    try:
        yield pool
        pool._check_invariants()
    finally:
        for gate in gates:
            gate.open()
        pool.rate_limit = None  # so that shutdown(wait=True) does not wait out a window
        pool.shutdown(cancel_futures=True)


def clocked(kind: str, workers: int, clock: FakeClock, **options: Any) -> AnyPool:
    """``make_pool`` on ``clock``, whose moves wake the pool's timer."""
    pool = make_pool(kind, workers, clock=clock, **options)
    clock.attach(pool)
    return pool


def settled(pool: AnyPool, queued: int, started: Recorder, count: int) -> None:
    """Wait until ``count`` tasks have started and ``queued`` wait, and the pool is at rest."""
    wait_until(
        lambda: len(started.ran) == count and pool.statistics().queued == queued,
        f"{count} started, {queued} queued",
    )
    pool._check_invariants()


def gated(pool: Any, gate: Gate) -> Future[str]:
    """Submit ``gate`` (to a pool or a view) and wait until it runs."""
    future: Future[str] = pool.submit(gate)
    gate.wait_started()
    return future


# -- the rate limit -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ageing", AGEING)
def test_a_rate_limit_lets_starts_through_as_a_sliding_window(
    kind: str, ageing: Optional[float], clock: FakeClock
) -> None:
    started = Recorder()
    pool = clocked(kind, 4, clock, ageing=ageing, rate_limit=RateLimit(2, per=1.0))
    with running(pool):
        futures = [pool.submit(started, i) for i in range(6)]
        settled(pool, 4, started, 2)
        stats = pool.statistics()
        assert (stats.rate_limited, stats.rate_limit) == (True, RateLimit(2, 1.0))
        timer_asleep(pool, START + 1.0)  # the next slot, on the pool's clock
        clock.advance(0.5)
        timer_asleep(pool, START + 1.0)
        assert sorted(started.ran) == [0, 1]  # two workers: either may record first
        clock.advance(0.5)  # both starts at START leave the window (START, START + 1]
        settled(pool, 2, started, 4)
        assert sorted(started.ran[2:]) == [2, 3]
        timer_asleep(pool, START + 2.0)
        clock.advance(1.0)
        assert_done_promptly(*futures)
        assert sorted(started.ran[4:]) == [4, 5]
        assert pool.statistics().rate_limited is False


@pytest.mark.parametrize("kind", KINDS)
def test_a_rate_limit_lets_no_double_burst_through_at_a_window_edge(
    kind: str, clock: FakeClock
) -> None:
    """A bucket refilled each second would let two starts through at START + 1; the window one."""
    started = Recorder()
    pool = clocked(kind, 4, clock, rate_limit=RateLimit(2, per=1.0))
    with running(pool):
        pool.submit(started, "first")
        settled(pool, 0, started, 1)
        clock.advance(0.75)
        for i in range(3):
            pool.submit(started, i)
        settled(pool, 2, started, 2)  # one more fits in (START - 0.25, START + 0.75]
        timer_asleep(pool, START + 1.0)
        clock.advance(0.25)
        settled(pool, 1, started, 3)  # "first" left the window; the start at 0.75 did not
        timer_asleep(pool, START + 1.75)
        assert started.ran == ["first", 0, 1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ageing", AGEING)
def test_the_best_task_queued_when_a_slot_opens_takes_it(
    kind: str, ageing: Optional[float], clock: FakeClock
) -> None:
    started = Recorder()
    pool = clocked(kind, 2, clock, ageing=ageing, rate_limit=RateLimit(1, per=1.0))
    with running(pool):
        pool.submit(started, "low-0", priority=Priority.LOW)
        pool.submit(started, "low-1", priority=Priority.LOW)
        settled(pool, 1, started, 1)
        pool.submit(started, "high", priority=Priority.HIGH)
        timer_asleep(pool, START + 1.0)
        clock.advance(1.0)
        settled(pool, 1, started, 2)
        clock.advance(1.0)
        settled(pool, 0, started, 3)
        assert started.ran == ["low-0", "high", "low-1"]


@pytest.mark.parametrize("kind", KINDS)
def test_raising_a_rate_limit_starts_what_it_allows_at_once_and_none_lifts_it(
    kind: str, clock: FakeClock
) -> None:
    started = Recorder()
    pool = clocked(kind, 4, clock, rate_limit=(1, 10.0))
    with running(pool):
        for i in range(5):
            pool.submit(started, i)
        settled(pool, 4, started, 1)
        assert pool.rate_limit == RateLimit(1, 10.0)
        pool.rate_limit = RateLimit(3, 10.0)  # the start counted so far still counts
        settled(pool, 2, started, 3)
        assert pool.statistics().rate_limited is True
        pool.rate_limit = None
        settled(pool, 0, started, 5)
        assert (pool.rate_limit, pool.statistics().rate_limit) == (None, None)


@pytest.mark.parametrize("kind", KINDS)
def test_a_rate_limit_set_on_a_running_pool_starts_its_timer(kind: str, clock: FakeClock) -> None:
    started = Recorder()
    pool = clocked(kind, 2, clock)
    with running(pool):
        assert internals(pool).timer.thread is None
        pool.rate_limit = RateLimit(1, 1.0)
        pool.submit(started, 0)
        pool.submit(started, 1)
        settled(pool, 1, started, 1)
        timer_asleep(pool, START + 1.0)
        clock.advance(1.0)
        settled(pool, 0, started, 2)


class FailingClock(FakeClock):
    """A fake clock that raises while ``failing`` is set."""

    failing = False

    def __call__(self) -> float:
        if self.failing:
            raise OSError("clock unavailable")
        return super().__call__()


@pytest.mark.parametrize("kind", KINDS)
def test_a_clock_that_raises_holds_rate_limited_starts_back_until_it_works(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FailingClock()
    started = Recorder()
    pool = clocked(kind, 2, clock, rate_limit=RateLimit(5, 1.0))
    with running(pool), caplog.at_level(logging.CRITICAL, "concurrent.futures"):
        pool.submit(started, "before")
        settled(pool, 0, started, 1)
        clock.failing = True
        future = pool.submit(started, "during")
        wait_until(lambda: "clock raised" in caplog.text, "the failure is logged")
        assert started.ran == ["before"]  # no start it could not count
        clock.failing = False
        clock.advance(0.0)  # the timer reads it again at once
        assert_done_promptly(future)
        assert started.ran == ["before", "during"]


# -- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ageing", AGEING)
def test_a_task_held_by_its_key_keeps_its_place(kind: str, ageing: Optional[float]) -> None:
    """Held back, "a-high" starts as soon as its key has room, before lower-ranked tasks."""
    hold_a, hold_other = Gate(), Gate()
    started = Recorder()
    pool = make_pool(kind, 2, ageing=ageing, key_limit=1)
    with running(pool, hold_a, hold_other):
        a_high = pool.options(key="a", priority=Priority.HIGH)
        a_low = pool.options(key="a", priority=Priority.LOW)
        gated(pool.options(key="a"), hold_a)
        gated(pool, hold_other)
        a_high.submit(started, "a-high")
        pool.submit(started, "normal")
        a_low.submit(started, "a-low")
        stats = pool.statistics()
        assert (stats.queued, stats.held_by_key, stats.key_limit) == (3, 2, 1)
        hold_a.open()  # the only free worker, and key "a" has room again
        wait_until(lambda: len(started.ran) == 3, "all three start")
        assert started.ran == ["a-high", "normal", "a-low"]
        assert pool.statistics().held_by_key == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_low_task_of_an_idle_key_starts_before_a_high_task_of_a_saturated_key(
    kind: str,
) -> None:
    hold = Gate()
    started = Recorder()
    pool = make_pool(kind, 2, key_limit=1)
    with running(pool, hold):
        gated(pool.options(key="busy"), hold)
        pool.options(key="busy", priority=Priority.HIGH).submit(started, "high")
        low = pool.options(key="idle", priority=Priority.LOW).submit(started, "low")
        assert_done_promptly(low)
        assert started.ran == ["low"]
        assert pool.statistics().held_by_key == 1
        hold.open()
        wait_until(lambda: started.ran == ["low", "high"], "the held task starts")


@pytest.mark.parametrize("kind", KINDS)
def test_key_limit_counts_each_key_apart_and_none_is_no_key(kind: str) -> None:
    gates = [Gate() for _ in range(5)]
    pool = make_pool(kind, 6, key_limit=2)
    with running(pool, *gates):
        view = pool.options(key=("host", 1))
        for gate in gates[:2]:
            gated(view, gate)
        held = view.submit(Recorder(), "third")
        for gate in gates[2:]:
            gated(pool, gate)  # no key: no key limit
        assert pool.statistics().held_by_key == 1
        assert not held.done()
        gates[0].open()
        assert_done_promptly(held)


@pytest.mark.parametrize("kind", KINDS)
def test_cancelling_a_held_task_wakes_its_waiters_and_frees_its_place(kind: str) -> None:
    hold = Gate()
    started = Recorder()
    pool = make_pool(kind, 2, key_limit=1)
    with running(pool, hold):
        view = pool.options(key="a")
        gated(view, hold)
        doomed = view.submit(started, "doomed")
        after = view.submit(started, "after")
        waiter = threading.Thread(target=wait, args=([doomed], TIMEOUT))
        waiter.start()
        assert doomed.cancel()
        waiter.join(TIMEOUT)
        assert not waiter.is_alive()
        stats = pool.statistics()
        assert (stats.held_by_key, stats.cancelled) == (1, 1)
        pool._check_invariants()
        hold.open()
        assert_done_promptly(after)
        assert started.ran == ["after"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ageing", AGEING)
def test_a_held_task_expires_at_its_queue_deadline(
    kind: str, ageing: Optional[float], clock: FakeClock
) -> None:
    hold = Gate()
    pool = clocked(kind, 2, clock, ageing=ageing, key_limit=1)
    with running(pool, hold):
        gated(pool.options(key="a"), hold)
        doomed = pool.options(key="a", timeout=5.0).submit(Recorder(), "doomed")
        assert pool.statistics().held_by_key == 1
        clock.advance(5.0)
        assert_done_promptly(doomed)
        assert doomed.cancelled()
        stats = pool.statistics()
        assert (stats.held_by_key, stats.expired, stats.queued) == (0, 1, 0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ageing", AGEING)
def test_set_priority_moves_a_held_task_within_its_key(kind: str, ageing: Optional[float]) -> None:
    hold = Gate()
    started = Recorder()
    pool = make_pool(kind, 1 if kind == "threads" else 2, ageing=ageing, key_limit=1)
    if isinstance(pool, PriorityExecutor):
        pool.max_running = 1
    with running(pool, hold):
        view = pool.options(key="a")
        gated(view, hold)
        view.submit(started, "first")
        last = view.submit(started, "moved")
        assert pool.set_priority(last, Priority.HIGH)
        pool._check_invariants()
        assert pool.statistics().held_by_key == 2
        hold.open()
        wait_until(lambda: len(started.ran) == 2, "both start")
        assert started.ran == ["moved", "first"]


@pytest.mark.parametrize("kind", KINDS)
def test_pause_holds_a_key_that_opens_until_resume(kind: str) -> None:
    hold = Gate()
    started = Recorder()
    pool = make_pool(kind, 2, key_limit=1)
    with running(pool, hold):
        view = pool.options(key="a")
        blocker = gated(view, hold)
        pool.pause()
        held = view.submit(started, "held")
        hold.open()
        assert_done_promptly(blocker)
        wait_until(lambda: pool.statistics().held_by_key == 0, "the key opens")
        assert pool.statistics().queued == 1
        assert started.ran == []
        pool.resume()
        assert_done_promptly(held)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ageing", AGEING)
def test_eviction_reaches_a_held_task(kind: str, ageing: Optional[float]) -> None:
    hold = Gate()
    pool = make_pool(kind, 1, ageing=ageing, key_limit=1, max_queued=2, when_full="evict")
    with running(pool, hold):
        view = pool.options(key="a", priority=Priority.LOW)
        gated(pool.options(key="a"), hold)
        worst = view.submit(Recorder(), "worst")
        pool.submit(Recorder(), "kept")
        assert pool.statistics().held_by_key == 1
        pool.submit(Recorder(), "newcomer")
        assert_done_promptly(worst)
        assert worst.cancelled()
        assert pool.statistics().held_by_key == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_rate_limit_is_a_cooldown_per_key(kind: str, clock: FakeClock) -> None:
    started = Recorder()
    pool = clocked(kind, 4, clock, key_rate_limit=RateLimit(1, per=2.0))
    with running(pool):
        host = pool.options(key="host")
        host.submit(started, "host-1")
        host.submit(started, "host-2")
        pool.options(key="other").submit(started, "other-1")
        settled(pool, 1, started, 2)
        stats = pool.statistics()
        assert (stats.held_by_key, stats.rate_limited) == (1, False)
        timer_asleep(pool, START + 2.0)
        clock.advance(1.0)
        timer_asleep(pool, START + 2.0)
        assert pool.statistics().held_by_key == 1
        clock.advance(1.0)
        settled(pool, 0, started, 3)
        assert started.ran[-1] == "host-2"


@pytest.mark.parametrize("kind", KINDS)
def test_per_key_state_goes_once_a_key_has_nothing_queued_running_or_in_its_window(
    kind: str, clock: FakeClock
) -> None:
    pool = clocked(kind, 4, clock, key_limit=1, key_rate_limit=RateLimit(1, 1.0))
    pool_internals = internals(pool)
    with running(pool):
        futures = [pool.options(key=i).submit(Recorder(), i) for i in range(200)]
        assert_done_promptly(*futures)
        assert pool.join(TIMEOUT)
        assert pool_internals.lanes() == 0
        assert pool_internals.key_states() == 200  # their starts are inside the window
        clock.advance(1.0)
        wait_until(lambda: pool_internals.key_states() == 0, "the idle keys are dropped")
        pool._check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_a_keyed_task_is_counted_running_even_with_no_key_limit(kind: str) -> None:
    """So that a key limit set later counts the tasks of its key already running."""
    gates = [Gate(), Gate()]
    started = Recorder()
    pool = make_pool(kind, 4)
    pool_internals = internals(pool)
    with running(pool, *gates):
        view = pool.options(key="a")
        for gate in gates:
            gated(view, gate)
        assert pool_internals.key_states() == 1
        pool.key_limit = 2
        held = view.submit(started, "held")
        assert pool.statistics().held_by_key == 1
        gates[0].open()
        assert_done_promptly(held)
        gates[1].open()
        assert pool.join(TIMEOUT)
        assert pool_internals.key_states() == 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ageing", AGEING)
def test_setting_and_removing_key_limits_keeps_the_queue_order(
    kind: str, ageing: Optional[float]
) -> None:
    hold = Gate()
    started = Recorder()
    pool = make_pool(kind, 1, ageing=ageing)
    with running(pool, hold):
        gated(pool, hold)
        tags = []
        for i, priority in enumerate([0, 2, 1, 2, 0, 1]):
            tag = f"{priority}-{i}"
            pool.options(key=i % 2, priority=priority).submit(started, tag)
            tags.append((-priority, i, tag))
        pool.key_limit = 3
        assert isinstance(internals(pool).queue, KeyedQueue)
        pool._check_invariants()
        pool.key_rate_limit = RateLimit(10, 1.0)
        pool.key_limit = None
        pool._check_invariants()
        pool.key_rate_limit = None
        assert not isinstance(internals(pool).queue, KeyedQueue)
        pool._check_invariants()
        hold.open()
        wait_until(lambda: len(started.ran) == 6, "all start")
        assert started.ran == [tag for _, _, tag in sorted(tags)]


@pytest.mark.parametrize("kind", KINDS)
def test_raising_a_key_limit_starts_the_held_tasks_at_once(kind: str) -> None:
    hold = Gate()
    pool = make_pool(kind, 4, key_limit=1)
    with running(pool, hold):
        view = pool.options(key="a")
        gated(view, hold)
        held = [view.submit(Recorder(), i) for i in range(2)]
        assert pool.statistics().held_by_key == 2
        pool.key_limit = 3
        assert_done_promptly(*held)
        pool.key_limit = None
        assert pool.key_limit is None


# -- no scan over held-back tasks ----------------------------------------------------------


class CountingHeapq:
    """``heapq`` with its push and pop calls counted."""

    def __init__(self) -> None:
        self.calls = 0

    def heappush(self, heap: list[Any], item: Any) -> None:
        self.calls += 1
        heapq.heappush(heap, item)

    def heappop(self, heap: list[Any]) -> Any:
        self.calls += 1
        return heapq.heappop(heap)

    def heapify(self, heap: list[Any]) -> None:
        self.calls += len(heap)
        heapq.heapify(heap)


def _heap_calls_per_start(monkeypatch: pytest.MonkeyPatch, held: int) -> float:
    """Heap calls per pop of a free task while ``held`` better tasks wait on 999 closed keys."""
    queue = KeyedQueue(track_worst=False)
    for key in range(999):
        queue.close(key)
    for i in range(held):
        entry = Entry(Future(), print, (), {}, Priority.HIGH, None, i % 999)
        queue.push(entry, -Priority.HIGH)
    for _ in range(100):
        queue.push(Entry(Future(), print, (), {}, Priority.LOW, None, "free"), -Priority.LOW)
    counting = CountingHeapq()
    monkeypatch.setattr(_keyed, "heapq", counting)
    for _ in range(100):
        free = queue.pop()
        assert free is not None
        assert free.key == "free"
    monkeypatch.undo()
    assert queue.pop() is None  # what is left is all held
    assert queue.held == held
    queue._check_invariants()
    return counting.calls / 100


def test_choosing_a_task_never_scans_the_tasks_held_back(monkeypatch: pytest.MonkeyPatch) -> None:
    few, many = (_heap_calls_per_start(monkeypatch, held) for held in (1_000, 100_000))
    assert few == many <= 3  # a pop from the ready heap and the lane, a push of the next head


# -- max_workers, max_running, idle_timeout -----------------------------------------------


def test_lowering_max_workers_interrupts_nothing_and_the_surplus_exits() -> None:
    gates = [Gate() for _ in range(3)]
    pool = PriorityThreadPoolExecutor(3)
    with running(pool, *gates):
        blockers = [gated(pool, gate) for gate in gates]
        pool.max_workers = 1
        assert (pool.max_workers, pool._max_workers) == (1, 1)
        assert pool.statistics().workers == 3
        pool._check_invariants()
        for gate in gates:
            gate.open()
        assert_done_promptly(*blockers)
        wait_until(lambda: pool.statistics().workers == 1, "the surplus workers exit")
        stats = pool.statistics()
        assert (stats.max_workers, stats.max_running) == (1, None)
        hold, second = Gate(), Gate()
        gated(pool, hold)
        waiting = pool.submit(second)
        assert pool.statistics().queued == 1  # one worker only
        pool.max_workers = 2  # starts the thread the queued task needs, at once
        second.wait_started()
        assert pool.statistics().workers == 2
        hold.open()
        second.open()
        assert_done_promptly(waiting)


def test_lowering_max_workers_wakes_the_idle_surplus_to_exit() -> None:
    pool = PriorityThreadPoolExecutor(4)
    with running(pool):
        gates = [Gate() for _ in range(4)]
        for gate in gates:
            gated(pool, gate)
        for gate in gates:
            gate.open()
        wait_until(lambda: internals(pool).idle_workers() == 4, "all four park")
        pool.max_workers = 2
        wait_until(lambda: pool.statistics().workers == 2, "two idle workers exit")
        pool._check_invariants()


def test_lowering_max_running_hands_nothing_over_until_fewer_are_in_flight() -> None:
    gates = [Gate() for _ in range(3)]
    started = Recorder()
    pool = make_pool("front", 3)
    assert isinstance(pool, PriorityExecutor)
    with running(pool, *gates):
        for gate in gates:
            gated(pool, gate)
        pool.max_running = 2
        assert (pool.max_running, pool._max_workers) == (2, 2)
        later = pool.submit(started, "later")
        gates[0].open()
        pool._check_invariants()
        assert pool.statistics().queued == 1  # two still in flight: at the new limit
        gates[1].open()
        assert_done_promptly(later)
        assert pool.statistics().max_running == 2


def test_an_idle_worker_exits_after_idle_timeout_and_a_new_one_starts_on_demand() -> None:
    gates = [Gate(), Gate()]
    pool = PriorityThreadPoolExecutor(2, idle_timeout=0.01)
    with running(pool, *gates):
        blockers = [gated(pool, gate) for gate in gates]
        for gate in gates:
            gate.open()
        assert_done_promptly(*blockers)
        wait_until(lambda: pool.statistics().workers == 0, "the idle workers exit")
        assert len(pool._threads) == 0
        assert pool.submit(str, "again").result(TIMEOUT) == "again"
        assert pool.statistics().workers <= 1


def test_a_worker_woken_as_its_idle_timeout_runs_out_takes_the_wake_up() -> None:
    pool = PriorityThreadPoolExecutor(1, idle_timeout=60.0)
    with running(pool):
        runner = internals(pool)._threads
        park = threading.Lock()  # released by whoever popped it from ``idle``
        with internals(pool).lock:
            assert runner._timed_out_locked(park) is False
        assert park.locked(), "it holds its park again, to sleep on next time"


# -- bad values, house style ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate_limit": 5}, TypeError, "rate_limit must be a RateLimit(starts, per) or None, got 5 (int)"),  # noqa: E501
        ({"rate_limit": (1, 2, 3)}, TypeError, "rate_limit must be a RateLimit(starts, per) or None, got (1, 2, 3) (tuple)"),  # noqa: E501
        ({"rate_limit": RateLimit(0, 1.0)}, ValueError, "rate_limit starts must be a positive integer, got 0 (int)"),  # noqa: E501
        ({"rate_limit": (1.5, 1.0)}, TypeError, "rate_limit starts must be a positive integer, got 1.5 (float)"),  # noqa: E501
        ({"rate_limit": (True, 1.0)}, TypeError, "rate_limit starts must be a positive integer, got True (bool)"),  # noqa: E501
        ({"rate_limit": (1, 0)}, ValueError, "rate_limit per must be a positive number of seconds, got 0 (int)"),  # noqa: E501
        ({"rate_limit": (1, float("inf"))}, ValueError, "rate_limit per must be a positive number of seconds, got inf (float)"),  # noqa: E501
        ({"key_rate_limit": (1, "2")}, TypeError, "key_rate_limit per must be a positive number of seconds, got '2' (str)"),  # noqa: E501
        ({"key_limit": 0}, ValueError, "key_limit must be a positive integer or None, got 0 (int)"),
        ({"key_limit": 1.0}, TypeError, "key_limit must be a positive integer or None, got 1.0 (float)"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_limits_are_refused_with_exact_messages(
    kind: str, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=exact(message)):
        make_pool(kind, 1, **options)
    pool = make_pool(kind, 1)
    with running(pool):
        name, value = next(iter(options.items()))
        with pytest.raises(error, match=exact(message)):
            setattr(pool, name, value)
        assert getattr(pool, name) is None
        assert pool.statistics().rate_limit is None


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "max_running must be a positive integer, got 0 (int)"),
        (None, TypeError, "max_running must be a positive integer, got None (NoneType)"),
        (2.0, TypeError, "max_running must be a positive integer, got 2.0 (float)"),
    ],
)
def test_a_bad_max_running_is_refused_while_running(
    value: object, error: type[Exception], message: str
) -> None:
    front = PriorityExecutor(ThreadPoolExecutor(2))
    with running(front):
        with pytest.raises(error, match=exact(message)):
            front.max_running = value  # type: ignore[assignment]
        assert front._max_workers == 2


def answer(call: Callable[[], object]) -> object:
    """What ``call()`` returns, or the type and message of what it raises."""
    try:
        return call()
    except Exception as exc:
        return (type(exc), str(exc))


def constructed(value: object) -> object:
    pool = PriorityThreadPoolExecutor(value)  # type: ignore[arg-type]
    try:
        return pool.max_workers
    finally:
        pool.shutdown()


def set_later(value: object) -> object:
    with running(PriorityThreadPoolExecutor(2)) as pool:
        assert isinstance(pool, PriorityThreadPoolExecutor)
        pool.max_workers = value  # type: ignore[assignment]
        return pool.max_workers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3),
        (2.5, 3),  # the standard pool starts threads while it has fewer: 3 of them
        (2.0, 2),
        (Decimal("1.2"), 2),
        (True, 1),
        (None, _default_max_workers()),
        (0, (ValueError, "max_workers must be greater than 0")),
        (-0.5, (ValueError, "max_workers must be greater than 0")),
        ("2", answer(lambda: ThreadPoolExecutor("2"))),  # type: ignore[call-overload]
        (math.inf, (ValueError, "max_workers must be a finite number, got inf (float)")),
        (math.nan, (ValueError, "max_workers must be a finite number, got nan (float)")),
    ],
    ids=repr,
)
def test_the_constructor_and_the_max_workers_setter_give_the_same_answer(
    value: object, expected: object
) -> None:
    assert answer(lambda: constructed(value)) == expected
    assert answer(lambda: set_later(value)) == expected
    if not isinstance(expected, tuple) and value is not None:  # the standard pool takes it
        ThreadPoolExecutor(value).shutdown()  # type: ignore[call-overload]


@pytest.mark.parametrize("make", [ThreadPoolExecutor, PriorityThreadPoolExecutor])
def test_a_max_workers_between_integers_starts_the_next_integer_of_threads(
    make: Callable[[Any], ThreadPoolExecutor],
) -> None:
    started, release = threading.Semaphore(0), threading.Event()

    def hold() -> None:
        started.release()
        assert release.wait(TIMEOUT)

    pool = make(2.5)
    try:
        tasks = [pool.submit(hold) for _ in range(4)]
        for _ in range(3):
            assert started.acquire(timeout=TIMEOUT)
        # Threads start in submit: the three are all there are, and the fourth task waits.
        assert len(pool._threads) == 3
        assert [task.running() for task in tasks] == [True, True, True, False]
    finally:
        release.set()
        pool.shutdown()
    assert all(task.exception() is None for task in tasks)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "idle_timeout must be a positive number or None, got 0 (int)"),
        ("1", TypeError, "idle_timeout must be a positive number or None, got '1' (str)"),
    ],
)
def test_a_bad_idle_timeout_is_refused(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=exact(message)):
        PriorityThreadPoolExecutor(1, idle_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_an_unhashable_key_is_refused_by_options(kind: str) -> None:
    pool = make_pool(kind, 1)
    with running(pool):
        with pytest.raises(TypeError, match=exact("key must be hashable, got [1] (list)")):
            pool.options(key=[1])  # type: ignore[arg-type]
        view = pool.options(key=("host", 443))
        assert view.key == ("host", 443)
        assert "key=('host', 443)" in repr(view)


def test_rate_limit_is_a_named_pair() -> None:
    limit = RateLimit(10, per=2.0)
    assert (limit.starts, limit.per) == (10, 2.0)
    assert limit == (10, 2.0)


# -- the worst moment for each change ---------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("change", [RateLimit(1, 0.5), None])
def test_lowering_or_removing_a_key_rate_limit_opens_a_key_whose_window_it_empties(
    kind: str, change: Optional[RateLimit], clock: FakeClock
) -> None:
    pool = clocked(kind, 2, clock, key_limit=5, key_rate_limit=RateLimit(1, 10.0))
    with running(pool):
        view = pool.options(key="a")
        assert view.submit(str, "first").result(TIMEOUT) == "first"
        held = view.submit(str, "second")
        assert pool.statistics().held_by_key == 1
        clock.advance(1.0)  # the first start leaves a window of 0.5 s, not one of 10 s
        pool.key_rate_limit = change
        assert_done_promptly(held)
        assert pool.statistics().held_by_key == 0


def test_a_window_raised_to_more_starts_keeps_counting_the_starts_inside_it(
    clock: FakeClock,
) -> None:
    started = Recorder()
    pool = clocked("threads", 4, clock, rate_limit=RateLimit(2, 10.0))
    with running(pool):
        for i in range(5):
            pool.submit(started, i)
        settled(pool, 3, started, 2)
        pool.rate_limit = RateLimit(3, 10.0)  # both starts still count: one more fits
        settled(pool, 2, started, 3)
        timer_asleep(pool, START + 10.0)


def test_a_wider_key_window_keeps_an_idle_key_until_it_passes(clock: FakeClock) -> None:
    pool = clocked("threads", 1, clock, key_rate_limit=RateLimit(1, 10.0))
    pool_internals = internals(pool)
    with running(pool):
        assert pool.options(key="a").submit(str, "a").result(TIMEOUT) == "a"
        assert pool.join(TIMEOUT)
        clock.advance(1.0)
        pool.key_rate_limit = RateLimit(1, 100.0)
        clock.advance(50.0)  # past the old window, inside the new one
        timer_asleep(pool, None)
        assert pool_internals.key_states() == 1
        clock.advance(50.0)
        wait_until(lambda: pool_internals.key_states() == 0, "the key's state is dropped")


def test_shutdown_waits_for_a_rate_held_task_even_when_every_worker_idled_out(
    clock: FakeClock,
) -> None:
    started = Recorder()
    pool = PriorityThreadPoolExecutor(
        1, clock=clock, idle_timeout=0.01, rate_limit=RateLimit(1, 1.0)
    )
    clock.attach(pool)
    assert pool.submit(started, "first").result(TIMEOUT) == "first"
    last = pool.submit(started, "last")
    wait_until(lambda: pool.statistics().workers == 0, "the only worker idles out")
    stopping = threading.Thread(target=pool.shutdown)
    stopping.start()
    wait_until(lambda: internals(pool).idle_workers() == 1, "a worker waits for the slot")
    assert stopping.is_alive()
    clock.advance(1.0)
    stopping.join(TIMEOUT)
    assert not stopping.is_alive()
    assert last.done()
    assert started.ran == ["first", "last"]


def test_a_submit_blocked_on_a_full_queue_sees_the_queue_a_new_key_limit_makes() -> None:
    hold = Gate()
    pool = PriorityThreadPoolExecutor(1, max_queued=1)
    with running(pool, hold):
        blocker = gated(pool, hold)
        pool.submit(str, "queued")
        blocked = threading.Thread(target=pool.submit, args=(str, "blocked"))
        blocked.start()
        wait_until(lambda: internals(pool).blocked() == 1, "the third submit blocks")
        pool.key_limit = 1  # a new queue, with lanes
        hold.open()
        assert_done_promptly(blocker)
        blocked.join(TIMEOUT)
        assert not blocked.is_alive()


def test_a_take_that_opens_several_keys_starts_the_workers_they_need(clock: FakeClock) -> None:
    hold_x, hold_a = Gate(), Gate()
    started = Recorder()
    pool = PriorityThreadPoolExecutor(1, clock=clock, key_rate_limit=RateLimit(1, 10.0))
    with running(pool, hold_x, hold_a):  # not attached: the worker's take reads the clock first
        views = {key: pool.options(key=key) for key in "abc"}
        for view in views.values():
            assert view.submit(str, "once").result(TIMEOUT) == "once"
        views["a"].submit(hold_a)
        views["b"].submit(started, "b")
        views["c"].submit(started, "c")
        assert pool.statistics().held_by_key == 3
        pool.max_workers = 3  # nothing may start yet: no thread is needed
        x = gated(pool, hold_x)
        clock.now += 10.0  # no timer wake-up: the worker finishing x is first to see it
        hold_x.open()
        assert_done_promptly(x)
        hold_a.wait_started()
        wait_until(lambda: sorted(started.ran) == ["b", "c"], "b and c start beside a")


@pytest.mark.parametrize("kind", KINDS)
def test_a_rate_limit_set_after_the_timer_exited_starts_a_new_one(kind: str) -> None:
    hold = Gate()
    clock = FakeClock()
    pool = clocked(kind, 1, clock)
    try:
        blocker = gated(pool, hold)
        pool.submit(str, "deadline", timeout=100.0).cancel()  # starts the timer
        queued = [pool.submit(str, i) for i in range(2)]
        pool.shutdown(wait=False)
        wait_until(lambda: internals(pool).timer.thread is None, "the timer exits")
        pool.rate_limit = RateLimit(1, 1.0)
        hold.open()
        assert_done_promptly(blocker, queued[0])
        clock.advance(1.0)
        assert_done_promptly(queued[1])
    finally:
        hold.open()
        pool.shutdown()


def test_work_queue_get_takes_a_held_task_as_the_standard_queue_would() -> None:
    hold = Gate()
    pool = PriorityThreadPoolExecutor(2, key_limit=1)
    with running(pool, hold):
        view = pool.options(key="a")
        gated(view, hold)
        held = view.submit(str, "held")
        assert pool.statistics().held_by_key == 1
        item = pool._work_queue.get_nowait()
        assert item.future is held
        stats = pool.statistics()
        assert (stats.held_by_key, stats.queued, stats.taken) == (0, 0, 1)
        pool._check_invariants()
        item.run()
        assert held.result(TIMEOUT) == "held"


class Refusing(ThreadPoolExecutor):
    """A delegate that refuses the task whose first argument is "refused", once."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        if args and args[0] == "refused":
            raise ValueError("refused by the delegate")
        return super().submit(fn, *args, **kwargs)


def test_a_keyed_task_the_delegate_refuses_frees_its_key() -> None:
    front = PriorityExecutor(Refusing(2), key_limit=1)
    with running(front):
        view = front.options(key="a")
        refused = view.submit(str, "refused")
        assert isinstance(refused.exception(TIMEOUT), ValueError)
        assert view.submit(str, "next").result(TIMEOUT) == "next"
        assert front.join(TIMEOUT)
        assert internals(front).key_states() == 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("leaves", ["cancel", "expire", "work_queue"])
def test_shutdown_returns_once_the_last_rate_held_task_leaves_unstarted(
    kind: str, leaves: str, clock: FakeClock
) -> None:
    """The worker (or dispatcher) waiting for that task's slot must learn the queue drained."""
    if leaves == "work_queue" and kind == "front":
        pytest.skip("a PriorityExecutor has no _work_queue")
    pool = clocked(kind, 1, clock, rate_limit=RateLimit(1, 1000.0))
    assert pool.submit(str, "first").result(TIMEOUT) == "first"
    held = pool.submit(str, "held", timeout=10.0)
    stopping = threading.Thread(target=pool.shutdown)
    stopping.start()
    wait_until(lambda: internals(pool).timer_sleeps_until(START + 10.0), "the pool waits")
    if leaves == "cancel":
        assert held.cancel()
    elif leaves == "expire":
        clock.advance(10.0)
    else:
        assert isinstance(pool, PriorityThreadPoolExecutor)
        assert pool._work_queue.get_nowait().future is held
    stopping.join(TIMEOUT)
    assert not stopping.is_alive(), "shutdown(wait=True) hangs"
    assert leaves == "work_queue" or held.cancelled()


def test_a_rate_slot_brings_in_as_many_workers_as_may_start_not_one_per_queued_task(
    clock: FakeClock,
) -> None:
    started = Recorder()
    pool = clocked("threads", 8, clock, rate_limit=RateLimit(2, 1.0))
    with running(pool):
        for i in range(8):
            pool.submit(started, i)
        settled(pool, 6, started, 2)
        assert pool.statistics().workers <= 2
        timer_asleep(pool, START + 1.0)
        clock.advance(1.0)
        settled(pool, 4, started, 4)
        assert pool.statistics().workers <= 2  # two slots: two takers, not six
