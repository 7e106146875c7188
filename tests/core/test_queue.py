"""Unit tests of the queues in ``priority_executor._queue``: no pool, no threads.

Both orderings, :class:`TaskQueue` (a FIFO bucket per rank) and :class:`HeapQueue` (one heap),
promise the same thing: entries come out by ``(rank, submission order)``. The ``queue``
fixture runs each shared test against both. Every operation goes through
:class:`CheckedQueue`, which runs ``_check_invariants()`` after each call, so a test that
drives a queue also checks it after every step (the regression tests that wrap a queue's own
methods drive it directly, and call the checker themselves). The last tests corrupt a queue on
purpose to show that the checker can fail.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Optional

import pytest

from priority_executor._orders import HeapQueue, TaskQueue
from priority_executor._policy import Number
from priority_executor._queue import COMPACT_SLACK, Entry, QueueBase
from support import exact


def task(tag: object) -> object:
    return tag


def make_entry(tag: object, deadline: Optional[float] = None, priority: Number = 0) -> Entry:
    return Entry(Future(), task, (tag,), {}, priority, deadline)


def tag_of(entry: Optional[Entry]) -> object:
    assert entry is not None
    return entry.args[0]


class CheckedQueue:
    """A TaskQueue whose invariants are checked after every operation."""

    def __init__(self, queue: QueueBase) -> None:
        self.queue = queue
        self.queue._check_invariants()

    def __len__(self) -> int:
        return len(self.queue)

    def push(self, entry: Entry, rank: Number) -> Entry:
        self.queue.push(entry, rank)
        self.queue._check_invariants()
        return entry

    def add(self, tag: object, rank: Number = 0, deadline: Optional[float] = None) -> Entry:
        return self.push(make_entry(tag, deadline), rank)

    def pop(self) -> Optional[Entry]:
        entry = self.queue.pop()
        self.queue._check_invariants()
        return entry

    def worst(self) -> Optional[Entry]:
        entry = self.queue.worst()
        self.queue._check_invariants()
        return entry

    def pop_tags(self) -> list[object]:
        tags = []
        while (entry := self.pop()) is not None:
            tags.append(tag_of(entry))
        return tags

    def remove(self, entry: Entry) -> None:
        self.queue.remove(entry)
        self.queue._check_invariants()

    def discard(self, future: Future[Any]) -> Optional[Entry]:
        entry = self.queue.discard(future)
        self.queue._check_invariants()
        return entry

    def requeue(self, entry: Entry, rank: Number) -> Entry:
        successor = self.queue.requeue(entry, rank)
        self.queue._check_invariants()
        return successor

    def pop_due(self, now: float) -> list[Entry]:
        due = self.queue.pop_due(now)
        self.queue._check_invariants()
        return due

    def next_deadline(self) -> Optional[float]:
        deadline = self.queue.next_deadline()
        self.queue._check_invariants()
        return deadline

    def drain(self) -> list[Entry]:
        drained = self.queue.drain()
        self.queue._check_invariants()
        return drained

    def stored(self) -> int:
        """Entries held, tombstones included (the checker compares it with the real count)."""
        return self.queue.stored


@pytest.fixture(params=[TaskQueue, HeapQueue], ids=["buckets", "heap"])
def queue(request: pytest.FixtureRequest) -> CheckedQueue:
    queue_class: type[QueueBase] = request.param
    return CheckedQueue(queue_class())


# -- push and pop ---------------------------------------------------------------------------


def test_empty_queue_has_nothing_to_give(queue: CheckedQueue) -> None:
    assert len(queue) == 0
    assert queue.pop() is None
    assert queue.next_deadline() is None
    assert queue.pop_due(math.inf) == []
    assert queue.drain() == []


def test_pop_returns_the_smallest_key_first(queue: CheckedQueue) -> None:
    for rank in (3, 1, 2, -5, 0.5):
        queue.add(rank, rank)
    assert queue.pop_tags() == [-5, 0.5, 1, 2, 3]
    assert len(queue) == 0


def test_equal_keys_pop_in_push_order(queue: CheckedQueue) -> None:
    for i in range(100):
        queue.add(i, rank=-1)
    assert queue.pop_tags() == list(range(100))


def test_int_and_float_keys_that_compare_equal_share_one_submission_order(
    queue: CheckedQueue,
) -> None:
    queue.add("int", -1)
    queue.add("float", -1.0)
    queue.add("int again", -1)
    queue.add("zero", 0)
    queue.add("negative zero", -0.0)
    assert queue.pop_tags() == ["int", "float", "int again", "zero", "negative zero"]


def test_infinite_and_huge_keys_order_exactly(queue: CheckedQueue) -> None:
    queue.add("+inf", math.inf)
    queue.add("huge int", 10**30)
    queue.add("nearest float", 1e30)  # exactly 10**30 + 19884624838656: a larger rank
    queue.add("-inf", -math.inf)
    assert queue.pop_tags() == ["-inf", "huge int", "nearest float", "+inf"]


@pytest.mark.parametrize("seed", range(5))
def test_pops_follow_key_then_push_order(queue: CheckedQueue, seed: int) -> None:
    rng = random.Random(seed)
    ranks = [rng.choice([-2, -1, 0, 0.5, 1, 3]) for _ in range(200)]
    for i, rank in enumerate(ranks):
        queue.add(i, rank)
    expected = sorted(range(len(ranks)), key=lambda i: (ranks[i], i))
    assert queue.pop_tags() == expected, f"seed={seed}"


def test_push_after_emptying_reuses_the_queue(queue: CheckedQueue) -> None:
    queue.add("a", 1)
    assert queue.pop_tags() == ["a"]
    queue.add("b", 1)
    queue.add("c", 2)
    queue.add("d", 1)
    assert queue.pop_tags() == ["b", "d", "c"]


def test_len_and_find_track_live_entries(queue: CheckedQueue) -> None:
    a = queue.add("a")
    b = queue.add("b")
    assert len(queue) == 2
    assert queue.queue.find(a.future) is a
    assert queue.queue.find(Future()) is None
    queue.remove(b)
    assert len(queue) == 1
    assert queue.queue.find(b.future) is None
    assert queue.pop() is a
    assert queue.queue.find(a.future) is None
    assert len(queue) == 0


def test_popped_entry_still_holds_its_task_until_detached(queue: CheckedQueue) -> None:
    entry = queue.add("payload")
    future = entry.future
    popped = queue.pop()
    assert popped is entry
    assert not entry.queued
    assert (entry.fn, entry.args, entry.kwargs) == (task, ("payload",), {})
    assert entry.detach() is future
    for name in ("future", "fn", "args", "kwargs"):
        assert not hasattr(entry, name), f"a detached entry still holds {name}"


# -- remove ---------------------------------------------------------------------------------


def test_removed_entry_is_skipped_by_pop(queue: CheckedQueue) -> None:
    a = queue.add("a")
    b = queue.add("b")
    c = queue.add("c")
    queue.remove(b)
    assert not b.queued
    assert not b.future.done()  # the queue never settles a future; the scheduler does
    assert queue.pop() is a
    assert queue.pop() is c
    assert queue.pop() is None


def test_discard_removes_by_future_once(queue: CheckedQueue) -> None:
    a = queue.add("a", 0, 5.0)
    b = queue.add("b", 0, 6.0)
    assert queue.discard(a.future) is a
    assert not a.queued
    assert queue.discard(a.future) is None, "a second discard finds nothing"
    assert queue.discard(Future()) is None, "a future never queued here"
    assert queue.next_deadline() == 6.0
    assert queue.pop() is b
    assert queue.discard(b.future) is None, "popped: no longer queued"


def test_removing_every_entry_of_the_best_key_falls_through_to_the_next(
    queue: CheckedQueue,
) -> None:
    best = [queue.add(f"best {i}", -1) for i in range(3)]
    queue.add("next", 0)
    for entry in best:
        queue.remove(entry)
    assert queue.pop_tags() == ["next"]


def test_removing_most_entries_compacts_storage(queue: CheckedQueue) -> None:
    rng = random.Random(3)
    entries = [queue.add(i, rng.randint(-3, 3), 10.0 if i % 2 else None) for i in range(400)]
    victims = rng.sample(entries, 360)
    for entry in victims:
        queue.remove(entry)
        live = len(queue)
        assert queue.stored() <= 2 * live + COMPACT_SLACK
        assert len(queue.queue.deadlines) <= 2 * queue.queue.deadline_count + COMPACT_SLACK
    assert len(queue) == 40
    order = {id(e): i for i, e in enumerate(entries)}  # submission order
    survivors = sorted((e for e in entries if e.queued), key=lambda e: (e.rank, order[id(e)]))
    assert queue.pop_tags() == [tag_of(e) for e in survivors]


# -- deadlines ------------------------------------------------------------------------------


def test_next_deadline_is_the_earliest_live_deadline(queue: CheckedQueue) -> None:
    queue.add("none")
    five = queue.add("five", deadline=5.0)
    three = queue.add("three", deadline=3.0)
    queue.add("nine", deadline=9.0)
    assert queue.next_deadline() == 3.0
    queue.remove(three)
    assert queue.next_deadline() == 5.0
    queue.remove(five)
    assert queue.next_deadline() == 9.0


def test_pop_due_returns_entries_whose_deadline_has_come_in_deadline_order(
    queue: CheckedQueue,
) -> None:
    queue.add("ten", deadline=10.0)
    queue.add("five", deadline=5.0)
    queue.add("none")
    queue.add("seven", deadline=7.0)
    queue.add("also seven", deadline=7.0)
    assert queue.pop_due(4.999) == []
    assert [tag_of(e) for e in queue.pop_due(7.0)] == ["five", "seven", "also seven"]
    assert len(queue) == 2
    assert [tag_of(e) for e in queue.pop_due(10.0)] == ["ten"]  # due at exactly its deadline
    assert queue.next_deadline() is None
    assert queue.pop_due(math.inf) == []
    assert queue.pop_tags() == ["none"]


def test_pop_due_skips_entries_that_already_left(queue: CheckedQueue) -> None:
    popped = queue.add("popped", rank=-1, deadline=1.0)
    removed = queue.add("removed", deadline=2.0)
    queue.add("due", deadline=3.0)
    assert queue.pop() is popped
    queue.remove(removed)
    assert [tag_of(e) for e in queue.pop_due(5.0)] == ["due"]
    assert len(queue) == 0


def test_infinite_deadline_is_never_due(queue: CheckedQueue) -> None:
    queue.add("forever", deadline=math.inf)
    assert queue.pop_due(1e308) == []
    assert queue.next_deadline() == math.inf
    assert queue.pop_tags() == ["forever"]


def test_mass_expiry_compacts_storage(queue: CheckedQueue) -> None:
    for i in range(500):
        queue.add(i, rank=i % 5, deadline=float(i))
    queue.add("stays")
    due = queue.pop_due(449.0)
    assert [tag_of(e) for e in due] == list(range(450))
    assert len(queue) == 51
    assert queue.stored() <= 2 * 51 + COMPACT_SLACK
    assert len(queue.queue.deadlines) <= 2 * 50 + COMPACT_SLACK


# -- worst ----------------------------------------------------------------------------------


def test_worst_is_the_entry_that_would_run_last(queue: CheckedQueue) -> None:
    assert queue.worst() is None
    queue.add("best", -1)
    first_in = queue.add("worst rank, first in", 2)
    queue.add("middle", 0)
    last_in = queue.add("worst rank, last in", 2)
    assert queue.worst() is last_in
    assert len(queue) == 4  # worst() only looks
    queue.remove(last_in)
    assert queue.worst() is first_in
    queue.remove(first_in)
    assert queue.pop_tags() == ["best", "middle"]
    assert queue.worst() is None


def test_worst_skips_entries_that_already_left(queue: CheckedQueue) -> None:
    kept = queue.add("kept", 0)
    removed = queue.add("removed", 1, deadline=5.0)
    queue.remove(removed)
    assert queue.worst() is kept


# The worst queued entry, for eviction: TaskQueue.worst() does not rescan the tombstones left by
# earlier evictions on every call (which would make eviction quadratic), and HeapQueue, given
# ``track_worst``, keeps a second heap instead of scanning the whole heap. The random test checks
# the answer of both, "buckets" and "heap-tracked".


def test_task_queue_worst_drops_trailing_tombstones() -> None:
    queue = TaskQueue()
    best = [make_entry(f"best{i}") for i in range(2)]
    rest = [make_entry(f"rest{i}") for i in range(5)]
    for entry in best:
        queue.push(entry, -1)
    for entry in rest:
        queue.push(entry, 0)
    for entry in rest[2:]:
        queue.remove(entry)  # three tombstones at the tail of the worst bucket
    assert queue.stored == 7
    assert queue.worst() is rest[1]
    assert queue.stored == 4, "the tombstones behind the worst entry were kept"
    queue._check_invariants()
    # Evicting one after another: each worst() finds the next at the tail at once.
    for expected, stored in [(rest[1], 3), (rest[0], 2), (best[1], 1)]:
        worst = queue.worst()
        assert worst is expected
        queue.remove(worst)
        assert queue.worst() is not expected
        assert queue.stored == stored
        queue._check_invariants()
    assert queue.worst() is best[0]
    assert [e.args[0] for e in iter(queue.pop, None)] == ["best0"]
    queue._check_invariants()


@pytest.mark.parametrize(
    "make_queue", [TaskQueue, lambda: HeapQueue(track_worst=True)], ids=["buckets", "heap-tracked"]
)
@pytest.mark.parametrize("seed", range(4))
def test_worst_matches_a_scan_of_the_live_entries_on_random_operations(
    make_queue: Callable[[], QueueBase], seed: int
) -> None:
    rng = random.Random(seed)
    queue = make_queue()
    order = iter(range(10**9))
    # The model: each queued future's (rank, order of its latest push or requeue).
    model: dict[Future[Any], tuple[Number, int]] = {}
    for step in range(600):
        op = rng.random()
        if op < 0.45 or not model:
            rank: Number = rng.choice([-2, -1, 0, 0.5, 1, 3])
            entry = make_entry(step, deadline=rng.choice([None, 5.0]))
            queue.push(entry, rank)
            model[entry.future] = (rank, next(order))
        elif op < 0.6:
            future = rng.choice(list(model))
            found = queue.find(future)
            assert found is not None
            queue.remove(found)
            del model[future]
        elif op < 0.7:
            future = rng.choice(list(model))
            found = queue.find(future)
            assert found is not None
            rank = rng.choice([-2, -1, 0, 0.5, 1, 3])
            queue.requeue(found, rank)
            model[future] = (rank, next(order))
        elif op < 0.8:
            popped = queue.pop()
            assert popped is not None
            assert popped.future is min(model, key=model.__getitem__)
            del model[popped.future]
        else:  # evict, as submit does on a full queue
            worst = queue.worst()
            assert worst is not None
            assert worst.future is max(model, key=model.__getitem__), f"seed={seed} {step=}"
            if isinstance(queue, HeapQueue):
                assert worst is max(item for item in queue.heap if item[2].queued)[2]
            queue.remove(worst)
            del model[worst.future]
        queue._check_invariants()
        assert len(queue) == len(model)


# Evicting costs O(log n), however many distinct priorities are queued (through a pool:
# test_backpressure.py), not the O(L log L) of sorting all the levels on every evicting submit.


class CountedRank(float):
    """A rank that counts the comparisons made on it."""

    compared = 0

    def __lt__(self, other: object) -> bool:
        CountedRank.compared += 1
        return float(self) < float(other)  # type: ignore[arg-type]


def comparisons_per_eviction(levels: int) -> float:
    queue = TaskQueue(track_worst=True)
    for i in range(levels):
        entry = Entry(Future(), abs, (i,), {}, 0, None)
        queue.push(entry, CountedRank(i))
    CountedRank.compared = 0
    evictions = 50
    for _ in range(evictions):
        worst = queue.worst()
        assert worst is not None
        queue.remove(worst)
        queue.push(Entry(Future(), abs, (0,), {}, 0, None), CountedRank(-1))
    per_eviction = CountedRank.compared / evictions
    queue._check_invariants()
    return per_eviction


def test_eviction_cost_grows_with_the_log_of_the_distinct_priorities() -> None:
    small, large = comparisons_per_eviction(200), comparisons_per_eviction(20_000)
    # log2 grows from 7.6 to 14.3; a sort of the levels would grow a hundredfold.
    assert large <= 2.5 * small + 10, f"{small:.1f} then {large:.1f} comparisons per eviction"


# -- drain and requeue ----------------------------------------------------------------------


def test_drain_returns_live_entries_best_first_and_empties_the_queue(queue: CheckedQueue) -> None:
    queue.add("low", 1, deadline=5.0)
    gone = queue.add("removed", 0)
    queue.add("high a", -1)
    queue.add("normal", 0, deadline=3.0)
    queue.add("high b", -1)
    queue.remove(gone)
    assert [tag_of(e) for e in queue.drain()] == ["high a", "high b", "normal", "low"]
    assert len(queue) == 0
    assert queue.queue.deadline_count == 0
    assert queue.next_deadline() is None
    assert queue.pop() is None
    queue.add("after", 2)
    assert queue.pop_tags() == ["after"]


def test_requeue_moves_a_task_behind_the_entries_of_its_new_key(queue: CheckedQueue) -> None:
    moved = queue.add("moved", 0)
    queue.add("b", 1)
    queue.add("c", 1)
    future = moved.future
    successor = queue.requeue(moved, 1)
    assert successor is not moved
    assert successor.future is future
    assert not moved.queued
    assert not hasattr(moved, "fn"), "the tombstone still holds the task"
    assert queue.queue.find(future) is successor
    assert len(queue) == 3
    assert queue.pop_tags() == ["b", "c", "moved"]


def test_requeue_keeps_the_deadline(queue: CheckedQueue) -> None:
    entry = queue.add("moved", 0, deadline=5.0)
    successor = queue.requeue(entry, -1)
    assert successor.deadline == 5.0
    assert queue.next_deadline() == 5.0
    assert queue.pop_due(5.0) == [successor]


def test_repeated_requeue_stays_within_the_compaction_bound(queue: CheckedQueue) -> None:
    entries = [queue.add(i, 0, deadline=100.0 + i) for i in range(3)]
    for step in range(600):
        i = step % 3
        entries[i] = queue.requeue(entries[i], step % 7)
        assert queue.stored() <= 2 * 3 + COMPACT_SLACK
        assert len(queue.queue.deadlines) <= 2 * 3 + COMPACT_SLACK
    assert sorted(tag_of(e) for e in queue.drain()) == [0, 1, 2]  # type: ignore[type-var]


# set_priority keeps a queued future mapped, so a concurrent cancel() is never missed (through a
# pool: test_set_priority.py). requeue() keeps the future in ``entries`` while it pushes the
# successor: the cancel hook, which reads ``entries`` without the lock, could otherwise look in
# between, decide that someone else had claimed the future, and return, leaving the cancelled
# task queued as live and its waiters never woken.


@pytest.mark.parametrize("queue_class", [TaskQueue, HeapQueue])
def test_requeue_keeps_the_future_mapped_while_it_pushes_the_successor(
    queue_class: type[QueueBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = queue_class()
    entry = make_entry("moved", deadline=5.0)
    queue.push(entry, 0)
    queue.push(make_entry("other"), 0)
    future = entry.future
    mapped_at_push: list[bool] = []
    real_push = queue.push

    def push(successor: Entry, rank: Number) -> None:
        mapped_at_push.append(future in queue.entries)
        real_push(successor, rank)

    monkeypatch.setattr(queue, "push", push)
    successor = queue.requeue(entry, -1)
    assert mapped_at_push == [True], "the future left `entries` during requeue"
    assert queue.find(future) is successor
    assert successor.deadline == 5.0
    queue._check_invariants()
    assert [e.args[0] for e in iter(queue.pop, None)] == ["moved", "other"]


# -- seeded random operations against a model -----------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_random_operations_match_a_simple_model(queue: CheckedQueue, seed: int) -> None:
    """Drive the queue with random operations and compare with a sorted list."""
    rng = random.Random(seed)
    # The model: live entries with (rank, order, deadline); order grows with every push.
    model: dict[int, tuple[Number, int, Optional[float], Entry]] = {}
    order = 0
    now = 0.0
    for step in range(400):
        context = f"seed={seed} step={step}"
        op = rng.random()
        if op < 0.45 or not model:
            rank = rng.choice([-1, 0, 0.0, 1, 2.5])
            deadline = now + rng.choice([1.0, 5.0, 20.0]) if rng.random() < 0.4 else None
            entry = queue.add(order, rank, deadline)
            model[order] = (rank, order, deadline, entry)
            order += 1
        elif op < 0.65:
            popped = queue.pop()
            best = min(model.values(), key=lambda item: (item[0], item[1]))
            assert popped is best[3], context
            del model[tag_of(popped)]  # type: ignore[arg-type]
        elif op < 0.72:
            tag = rng.choice(list(model))
            queue.remove(model.pop(tag)[3])
        elif op < 0.8:
            worst = queue.worst()
            expected_worst = max(model.values(), key=lambda item: (item[0], item[1]))
            assert worst is expected_worst[3], context
            queue.remove(expected_worst[3])
            del model[tag_of(worst)]  # type: ignore[arg-type]
        elif op < 0.9:
            now += rng.choice([0.5, 2.0, 6.0])
            due = queue.pop_due(now)
            expected = sorted(
                (item for item in model.values() if item[2] is not None and item[2] <= now),
                key=lambda item: (item[2], item[1]),
            )
            assert due == [item[3] for item in expected], context
            for item in expected:
                del model[tag_of(item[3])]  # type: ignore[arg-type]
        elif op < 0.98:
            tag = rng.choice(list(model))
            rank = rng.choice([-1, 0, 1])
            _old_key, _order, deadline, entry = model.pop(tag)
            successor = queue.requeue(entry, rank)
            # The task keeps its tag and deadline but moves to the back of its new rank.
            model[tag] = (rank, order, deadline, successor)
            order += 1
        else:
            drained = queue.drain()
            expected = sorted(model.values(), key=lambda item: (item[0], item[1]))
            assert drained == [item[3] for item in expected], context
            model.clear()
        assert len(queue) == len(model), context
        live_deadlines = [item[2] for item in model.values() if item[2] is not None]
        assert queue.next_deadline() == min(live_deadlines, default=None), context


# -- the checker itself can fail ------------------------------------------------------------


def filled(queue: QueueBase) -> QueueBase:
    for i, rank in enumerate((1, 2, 3)):
        queue.push(make_entry(i, deadline=10.0 + i), rank)
        queue.push(make_entry(f"{i} again", deadline=20.0 + i), rank)
    queue._check_invariants()
    return queue


@pytest.fixture(params=[TaskQueue, HeapQueue], ids=["buckets", "heap"])
def full_queue(request: pytest.FixtureRequest) -> QueueBase:
    """A queue holding six entries with deadlines at three ranks, with no checker around it."""
    queue_class: type[QueueBase] = request.param
    return filled(queue_class())


def test_check_invariants_passes_on_a_healthy_queue(full_queue: QueueBase) -> None:
    full_queue._check_invariants()


def test_check_invariants_fails_on_a_broken_level_heap() -> None:
    queue = filled(TaskQueue())
    assert isinstance(queue, TaskQueue)
    queue.levels.reverse()  # [3, 2, 1]: the root is no longer the smallest rank
    with pytest.raises(AssertionError, match=exact("level heap broken at 1")):
        queue._check_invariants()


def test_check_invariants_fails_on_a_broken_entry_heap() -> None:
    queue = filled(HeapQueue())
    assert isinstance(queue, HeapQueue)
    queue.heap.reverse()
    with pytest.raises(AssertionError, match=exact("heap property broken at 1")):
        queue._check_invariants()


def test_check_invariants_fails_on_a_level_heap_out_of_order() -> None:
    # Submission order within a bucket is structural (appended at the right, popped at the
    # left); what the checker can see is the order of the levels.
    queue = filled(TaskQueue())
    assert isinstance(queue, TaskQueue)
    queue.levels.sort(reverse=True)
    with pytest.raises(AssertionError, match=exact("level heap broken at 1")):
        queue._check_invariants()


def test_check_invariants_fails_when_an_entry_is_lost_from_the_index(
    full_queue: QueueBase,
) -> None:
    full_queue.entries.popitem()
    with pytest.raises(AssertionError, match=exact("live count differs from what is stored")):
        full_queue._check_invariants()


def test_check_invariants_fails_on_a_wrong_stored_count(full_queue: QueueBase) -> None:
    full_queue.stored += 1
    with pytest.raises(AssertionError, match=exact("stored count is off")):
        full_queue._check_invariants()


def test_check_invariants_fails_when_a_queued_future_is_done(full_queue: QueueBase) -> None:
    entry = next(iter(full_queue.entries.values()))
    entry.future.set_result(None)
    with pytest.raises(AssertionError, match=exact("a queued task's future is already done")):
        full_queue._check_invariants()


def test_check_invariants_fails_on_a_broken_deadline_heap(full_queue: QueueBase) -> None:
    full_queue.deadlines.reverse()
    with pytest.raises(AssertionError, match=exact("deadline heap broken at 1")):
        full_queue._check_invariants()


def test_check_invariants_fails_on_a_wrong_deadline_count(full_queue: QueueBase) -> None:
    full_queue.deadline_count += 1
    with pytest.raises(AssertionError, match=exact("deadline count")):
        full_queue._check_invariants()


@pytest.mark.parametrize("queue_class", [TaskQueue, HeapQueue], ids=["buckets", "heap"])
def test_check_invariants_fails_when_tombstones_are_never_swept(
    queue_class: type[QueueBase],
) -> None:
    # Without eviction's worst-entry heap, whose own sweep check would fire first.
    queue = queue_class(track_worst=False)  # type: ignore[call-arg]
    entries = [make_entry(i) for i in range(COMPACT_SLACK + 10)]
    for entry in entries:
        queue.push(entry, 0)
    for entry in entries[1:]:
        queue._forget(entry)  # removal without the sweep that remove() does
    with pytest.raises(AssertionError, match=exact("tombstones not swept")):
        queue._check_invariants()


def test_check_invariants_fails_when_an_entry_is_stored_twice() -> None:
    queue = filled(TaskQueue())
    assert isinstance(queue, TaskQueue)
    bucket = queue.buckets[1]
    bucket.insert(1, bucket[0])  # right behind itself, so the bucket still looks ordered
    queue.stored += 1
    with pytest.raises(AssertionError, match=exact("an entry is stored twice")):
        queue._check_invariants()
