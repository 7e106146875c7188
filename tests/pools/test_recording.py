"""Wait and run time and outcomes by priority class: exact on a fake clock, right under attack.

``statistics().wait[p]`` and ``.run[p]`` are distributions of the tasks of priority ``p``
that started (submit to start, start to end, on the pool's clock); ``.outcomes[p]`` counts
how every task of the class ended. On a fake clock, with tasks that advance it by known
amounts at one worker, every figure is known exactly. Under attack (tasks cancelled,
expired, evicted and re-prioritised from other threads while they are recorded), across the
executors and their options, the classes must still agree with what ran.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
from concurrent.futures import Future
from typing import Any, Optional

import pytest

from aio_support import accounted, drive, returning
from conftest import TIMEOUT, FakeClock
from priority_executor import (
    AsyncPriorityScheduler,
    ExecutorStatistics,
    Priority,
    PriorityThreadPoolExecutor,
    QueueFullError,
)
from priority_executor._distribution import EMPTY
from priority_executor._recording import MAX_CLASSES, OTHER, OUTCOMES
from support import AGEING, KINDS, make_pool


def outcomes(**counts: int) -> dict[str, int]:
    return {name: counts.get(name, 0) for name in OUTCOMES}


def advancing(clock: FakeClock, seconds: float) -> Any:
    """A task that takes ``seconds`` of the fake clock."""

    def task() -> float:
        clock.advance(seconds)
        return seconds

    return task


@pytest.mark.parametrize("kind", KINDS)
def test_wait_and_run_are_exact_on_a_fake_clock(kind: str, clock: FakeClock) -> None:
    pool = make_pool(kind, 1, clock=clock)
    clock.attach(pool)
    with pool:
        pool.pause()
        urgent = pool.submit(advancing(clock, 0.5), priority=Priority.HIGH)
        normal = [pool.submit(advancing(clock, s)) for s in (0.25, 1.0)]
        clock.advance(2.0)  # all three wait two seconds before anything starts
        pool.resume()
        assert [f.result(TIMEOUT) for f in (urgent, *normal)] == [0.5, 0.25, 1.0]
        assert pool.join(TIMEOUT)
        stats = pool.statistics()
    high, normal_wait = stats.wait[Priority.HIGH], stats.wait[0]
    assert (high.count, high.total, high.min, high.max, high.mean) == (1, 2.0, 2.0, 2.0, 2.0)
    # NORMAL's first starts as HIGH ends (2.5 s after submit), its second 0.25 s later.
    assert (normal_wait.count, normal_wait.total) == (2, 5.25)
    assert (normal_wait.min, normal_wait.max, normal_wait.mean) == (2.5, 2.75, 2.625)
    run = stats.run[0]
    assert (run.count, run.total, run.min, run.max) == (2, 1.25, 0.25, 1.0)
    assert stats.run[1].total == 0.5
    assert stats.outcomes == {1: outcomes(completed=1), 0: outcomes(completed=2)}
    # Priority members and their ints are one class; the keys are plain numbers.
    assert stats.wait[1] is stats.wait[Priority.HIGH]
    assert all(type(key) is int for key in stats.wait)


def test_a_zero_wait_is_recorded_like_any_other(clock: FakeClock) -> None:
    with PriorityThreadPoolExecutor(1, clock=clock) as pool:
        pool.submit(str).result(TIMEOUT)
        assert pool.join(TIMEOUT)
        wait = pool.statistics().wait[0]
    assert (wait.count, wait.total, wait.min, wait.max, wait.p50, wait.p99) == (1, 0, 0, 0, 0, 0)


def test_tasks_that_never_start_are_counted_by_outcome_not_in_wait(clock: FakeClock) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=1, when_full="evict")
    clock.attach(pool)
    with pool:
        pool.pause()
        pool.submit(str, priority=Priority.LOW).cancel()
        pool.submit(str, priority=Priority.LOW, timeout=1.0)
        evicting = pool.submit(str, priority=Priority.HIGH)  # evicts the LOW with a deadline
        with pytest.raises(QueueFullError):
            pool.submit(str, priority=Priority.LOW)
        assert pool._work_queue.get_nowait().future is evicting
        pool.submit(str, timeout=0)  # expired at once
        pool._check_invariants()
        stats = pool.statistics()
    assert stats.wait == {}
    assert stats.run == {}
    assert stats.outcomes == {
        -1: outcomes(cancelled=2, evicted=1, rejected=1),
        1: outcomes(taken=1),
        0: outcomes(expired=1),
    }


def test_priorities_beyond_the_first_sixteen_share_one_class() -> None:
    with PriorityThreadPoolExecutor(1) as pool:
        for priority in range(MAX_CLASSES + 5):
            pool.submit(str, priority=priority).result(TIMEOUT)
        assert pool.join(TIMEOUT)
        stats = pool.statistics()
        pool._check_invariants()
    assert len(stats.wait) == MAX_CLASSES + 1
    assert stats.wait[OTHER].count == 5
    assert stats.outcomes[OTHER] == outcomes(completed=5)
    assert all(stats.wait[p].count == 1 for p in range(MAX_CLASSES))


def test_set_priority_moves_a_task_to_its_new_class_and_ageing_does_not(clock: FakeClock) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock, ageing=0.5)
    clock.attach(pool)
    with pool:
        pool.pause()
        moved = pool.submit(str, priority=Priority.LOW)
        aged = pool.submit(str, priority=Priority.LOW)
        assert pool.set_priority(moved, Priority.HIGH)
        clock.advance(10.0)  # ages LOW far above HIGH's key: the class stays LOW
        pool.resume()
        assert pool.join(TIMEOUT)
        stats = pool.statistics()
    assert aged.done()
    assert {p: d.count for p, d in stats.wait.items()} == {1: 1, -1: 1}


def test_snapshots_do_not_change_once_taken(clock: FakeClock) -> None:
    with PriorityThreadPoolExecutor(1, clock=clock) as pool:
        pool.submit(str).result(TIMEOUT)
        assert pool.join(TIMEOUT)
        before = pool.statistics()
        frozen = (before.wait[0], before.wait[0].count, dict(before.outcomes[0]))
        for _ in range(3):
            pool.submit(str).result(TIMEOUT)
        assert pool.join(TIMEOUT)
        after = pool.statistics()
    assert (before.wait[0], before.wait[0].count, dict(before.outcomes[0])) == frozen
    assert (after.wait[0] - before.wait[0]).count == 3
    with pytest.raises(TypeError):
        before.wait[5] = before.wait[0]  # type: ignore[index]
    with pytest.raises(AttributeError, match="a Distribution is frozen: cannot set 'count'"):
        before.wait[0].count = 7


def read_interval(earlier: ExecutorStatistics, later: ExecutorStatistics) -> dict[str, Any]:
    """The README's interval pattern for HIGH, and what a class with no record reads as."""
    high = Priority.HIGH
    return {
        "waits": (later.wait[high] - earlier.wait[high]).count,
        "runs": (later.run[high] - earlier.run[high]).count,
        "completed": later.outcomes[high]["completed"] - earlier.outcomes[high]["completed"],
        "other": (later.wait[OTHER].count, later.outcomes[OTHER]["completed"]),
        "unrecorded": (later.wait[2.5], later.run[-7], dict(later.outcomes[10**400])),
        "recorded": (len(later.wait), list(later.wait), 3 in later.wait, later.wait.get(3)),
    }


#: What ``read_interval`` gives after one HIGH and one NORMAL task ran since ``earlier``.
ONE_HIGH_RAN = {
    "waits": 1,
    "runs": 1,
    "completed": 1,
    "other": (0, 0),
    "unrecorded": (EMPTY, EMPTY, outcomes()),
    "recorded": (2, [1, 0], False, None),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_priority_with_no_record_reads_as_empty_and_subtracts(kind: str) -> None:
    with make_pool(kind, 1) as pool:
        earlier = pool.statistics()  # nothing recorded yet: every class reads empty
        assert (earlier.wait[Priority.HIGH], earlier.wait[Priority.HIGH].count) == (EMPTY, 0)
        assert (len(earlier.wait), list(earlier.run), dict(earlier.outcomes)) == (0, [], {})
        pool.submit(str, priority=Priority.HIGH).result(TIMEOUT)
        pool.submit(str).result(TIMEOUT)
        assert pool.join(TIMEOUT)
        later = pool.statistics()
    assert read_interval(earlier, later) == ONE_HIGH_RAN
    assert later.wait[Priority.HIGH] - earlier.wait[Priority.HIGH] == later.wait[1]  # exact


def test_a_priority_with_no_record_reads_as_empty_on_the_asyncio_scheduler() -> None:
    async def main() -> dict[str, Any]:
        scheduler = AsyncPriorityScheduler(1)
        earlier = scheduler.statistics()
        await scheduler.submit(returning, "high", priority=Priority.HIGH)
        await scheduler.submit(returning, "normal")
        return read_interval(earlier, await accounted(scheduler))

    assert drive("asyncio", main) == ONE_HIGH_RAN


@pytest.mark.parametrize(
    ("key", "shown"), [("high", "'high'"), (None, "None"), (math.nan, "nan"), (True, "True")]
)
def test_a_key_that_cannot_be_a_priority_class_raises_key_error(key: Any, shown: str) -> None:
    with PriorityThreadPoolExecutor(1) as pool:
        stats = pool.statistics()
    for figures in (stats.wait, stats.run, stats.outcomes):
        with pytest.raises(KeyError) as raised:
            figures[key]
        assert str(raised.value) == shown


# -- under attack ---------------------------------------------------------------------------

LIMITS = [(None, "block"), (3, "block"), (3, "raise"), (3, "evict")]


def attack(kind: str, ageing: Optional[float], max_queued: Optional[int], when_full: str) -> None:
    """Submitters, a canceller and a re-prioritiser at once; the classes must agree with it all.

    Each task records its tag when it starts; its class is the priority the test last gave
    it (at submit, or by a ``set_priority`` that returned True, which it can only do before
    the task starts). At the end, for every class, the
    tasks that started are ``wait[p].count`` and ``run[p].count`` (the pool is idle), and
    ``completed`` of the class; the outcomes of every class add up to the pool's counts.
    """
    rng = random.Random(f"{kind}{ageing}{max_queued}{when_full}")
    pool = make_pool(kind, 2, ageing=ageing, max_queued=max_queued, when_full=when_full)
    given: dict[int, float] = {}  # the priority each task was last given, by tag
    lock = threading.Lock()
    started: list[int] = []
    futures: list[tuple[int, Future[Any]]] = []

    def task(tag: int) -> None:
        with lock:
            started.append(tag)

    def submitter(base: int, seed: int) -> None:
        local = random.Random(seed)
        for i in range(150):
            tag = base + i
            priority = local.choice([-1, 0, 1, 2.5])
            timeout = local.choice([None, None, 1e-4, 0.0])
            try:
                future = pool.submit(task, tag, priority=priority, timeout=timeout)
            except QueueFullError:
                continue
            with lock:  # read at the end only: a task may start before this
                given[tag] = priority
                futures.append((tag, future))

    def meddler(seed: int) -> None:
        local = random.Random(seed)
        try:
            meddle(local)
        finally:
            pool.resume()

    def meddle(local: random.Random) -> None:
        for _ in range(300):
            if local.random() < 0.1:  # a queue to cancel, evict and re-prioritise in
                if local.random() < 0.5:
                    pool.pause()
                else:
                    pool.resume()
            with lock:
                if not futures:
                    continue
                tag, future = local.choice(futures)
            if local.random() < 0.5:
                future.cancel()
                continue
            priority = local.choice([-1, 0, 1, 2.5])
            # True only while it is queued: it starts, if ever, with this priority.
            if pool.set_priority(future, priority):
                with lock:
                    given[tag] = priority

    threads = [threading.Thread(target=submitter, args=(n * 1000, rng.random())) for n in range(2)]
    threads.append(threading.Thread(target=meddler, args=(rng.random(),)))
    with pool:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
            assert not thread.is_alive()
        assert pool.join(TIMEOUT)
        pool._check_invariants()
        stats = pool.statistics()
    ran: dict[float, int] = {}
    for tag in started:
        ran[given[tag]] = ran.get(given[tag], 0) + 1
    assert {p: d.count for p, d in stats.wait.items()} == ran
    assert {p: d.count for p, d in stats.run.items()} == ran
    assert {p: o["completed"] for p, o in stats.outcomes.items() if o["completed"]} == ran
    totals = {name: sum(o[name] for o in stats.outcomes.values()) for name in OUTCOMES}
    expected = {name: getattr(stats, name) for name in OUTCOMES if hasattr(stats, name)}
    assert {name: totals[name] for name in expected} == expected
    assert stats.submitted == len(futures)
    for distribution in stats.wait.values():
        assert distribution.min is not None
        assert distribution.min >= 0


@pytest.mark.parametrize(
    ("kind", "ageing", "limits"), list(itertools.product(KINDS, AGEING, LIMITS))
)
def test_recording_agrees_with_what_ran_under_cancels_expiry_eviction_and_set_priority(
    kind: str, ageing: Optional[float], limits: tuple[Optional[int], str]
) -> None:
    attack(kind, ageing, *limits)
