"""``set_priority(future, priority)``: a task still queued in this pool moves to its new priority,
behind the tasks already queued at it; under ageing it keeps its age; anything else (running,
done, cancelled, another pool's, not a future) is refused or returns False; and a ``cancel()``
racing the move is never missed.

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. Ageing runs on a :class:`FakeClock`. A race is not left to chance: a
wrapped queue method, container or cancel hook stops one thread at the exact point and waits on
an event for the other to act. Nothing sleeps and every wait has a timeout. (Bad arguments,
across every call that takes a priority: test_bad_input.py.)
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future, wait
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor
from priority_executor._policy import Number
from priority_executor._queue import Entry
from support import (
    CancelHook,
    InThread,
    Recorder,
    closing,
    exact,
    hold_worker,
    internals,
    run_to_idle,
)

# -- moving a queued task -------------------------------------------------------------------


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


# -- under ageing the task keeps its age ----------------------------------------------------


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


@pytest.mark.parametrize("ageing", [0.5, 1.0, 2.0])
@pytest.mark.parametrize(
    ("first", "then"),
    [
        (float("inf"), 1),
        (-float("inf"), 0),
        (10**30, 0),
        (1e20, 1),
        (0, float("inf")),
    ],
)
def test_set_priority_under_ageing_keeps_the_age(
    first: float, then: float, ageing: float, clock: FakeClock
) -> None:
    """A moved task's key is ``submit time - new priority * ageing``, exactly, as the model's.

    A key updated by adding ``(old - new) * ageing`` to the old one would be NaN after an
    infinite priority, which breaks the heap, and would lose the submit time after a huge one
    (the model's fast seeds 23 and 44 reach both).
    """
    with PriorityThreadPoolExecutor(max_workers=1, ageing=ageing, clock=clock) as pool:
        pool.pause()
        moved = pool.submit(str, "moved", priority=first)  # submitted at 1000
        clock.advance(4.0)
        # Keys 1004 + ageing, 1004, 1001 and 999: the moved task's key, 1000 - then * ageing,
        # falls among them for then = 0 or 1, and must not lose its submit time.
        priorities = [-1, 0, 3 / ageing, 5 / ageing]
        others = [pool.submit(str, f"other {p}", priority=p) for p in priorities]
        pool.set_priority(moved, then)
        pool._check_invariants()
        order: list[str] = []
        for future in [moved, *others]:
            future.add_done_callback(lambda f: order.append(f.result(timeout=0)))
        pool.resume()
        assert pool.join(TIMEOUT)
    ranks = {"moved": 1000.0 - then * ageing}
    ranks.update({f"other {p}": 1004.0 - p * ageing for p in priorities})
    # A moved task goes behind the tasks already queued with its rank.
    assert order == sorted(ranks, key=lambda name: (ranks[name], name == "moved"))


# -- against a concurrent cancel() ----------------------------------------------------------


# set_priority keeps a queued future mapped, so a concurrent cancel() is never missed (the
# queue's half: test_queue.py,
# test_requeue_keeps_the_future_mapped_while_it_pushes_the_successor). requeue() keeps the future
# in ``entries`` while it pushes the successor: the cancel hook, which reads ``entries`` without
# the lock, could otherwise look in between, decide that someone else had claimed the future, and
# return, leaving the cancelled task queued as live and its waiters never woken.


@pytest.mark.parametrize("ageing", [None, 1.0], ids=["buckets", "heap"])
def test_cancel_after_set_priority_unqueues_the_moved_task_and_wakes_waiters(
    gate: Gate, ageing: Optional[float]
) -> None:
    # Passed before the fix too: the sequential case, which the race below builds on.
    pool = PriorityThreadPoolExecutor(max_workers=1, ageing=ageing)
    try:
        pool.submit(gate)
        gate.wait_started()
        task = pool.submit(str, "task")
        assert pool.set_priority(task, 5)
        assert task.cancel()
        assert wait([task], timeout=0).done == {task}, "wait() was not woken"
        assert internals(pool).queued() == 0
        pool._check_invariants()
    finally:
        gate.open()
        pool.shutdown()


class WatchedEntries(dict[Future[Any], Entry]):
    """``queue.entries`` that reports when the cancel hook looks ``watched`` up."""

    def __init__(self, entries: dict[Future[Any], Entry], watched: Future[Any]) -> None:
        super().__init__(entries)
        self.watched = watched
        self.looked = threading.Event()
        self.answers: list[bool] = []

    def __contains__(self, key: object) -> bool:
        found = super().__contains__(key)
        if key is self.watched:
            self.answers.append(found)
            self.looked.set()
        return found


def test_cancel_while_set_priority_moves_the_task_unqueues_it_and_wakes_waiters(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(gate)
        gate.wait_started()
        task = pool.submit(str, "task")
        queue = internals(pool).queue
        entries = WatchedEntries(queue.entries, task)
        monkeypatch.setattr(queue, "entries", entries)
        canceller = InThread(task.cancel, "canceller")
        real_push = queue.push

        def push(entry: Entry, key: Number) -> None:
            # set_priority holds the pool's lock here, half-way through the move: cancel
            # from another thread, and let its hook look the future up before the push.
            if not canceller.thread.is_alive():
                canceller.start()
                assert entries.looked.wait(TIMEOUT), "the cancel hook never looked"
            real_push(entry, key)

        monkeypatch.setattr(queue, "push", push)
        assert pool.set_priority(task, 5)
        assert canceller.result() is True
        assert entries.answers == [True], "the hook found the future missing"
        assert wait([task], timeout=0).done == {task}, "wait() was not woken"
        assert len(queue) == 0, "the cancelled task stays queued"
        pool._check_invariants()
        assert pool.statistics().cancelled == 1
    finally:
        gate.open()
        pool.shutdown()


# set_priority returns False once its caller has seen the future cancelled, even between cancel()
# changing the state and the cancel hook unqueuing the task, while the task is still found
# queued.


def test_set_priority_of_a_future_seen_cancelled_returns_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    in_hook, release = threading.Event(), threading.Event()

    def slow_hook(real_hook: CancelHook, future: Future[Any]) -> None:  # held at its start
        in_hook.set()
        assert release.wait(TIMEOUT)
        real_hook(future)

    internals(pool).patch_cancel_hook(monkeypatch, slow_hook)
    try:
        pool.pause()
        future = pool.submit(str, "queued")
        canceller = threading.Thread(target=future.cancel)
        canceller.start()
        assert in_hook.wait(TIMEOUT)
        assert future.cancelled()
        assert pool.set_priority(future, 5) is False
        release.set()
        canceller.join(TIMEOUT)
        assert pool.statistics().cancelled == 1
        pool._check_invariants()
    finally:
        release.set()
        pool.shutdown()
