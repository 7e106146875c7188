"""The policy alone: a :class:`~priority_executor._core.Core` driven directly, with a fake clock.

No pool, no thread, no event loop: each test plays the owner's part itself, single-threaded,
as ``_aio_owner.AsyncOwner`` and ``_admission.Admission`` do (stamp, make room, count, push;
take, finish; unqueue; pop the due), with plain ``concurrent.futures.Future`` objects as the
opaque handles the core only hashes and asks ``done()``. :class:`Owner` does those steps and
keeps its own count of the tasks in flight (queued, running, or taken out and not yet
decided), and every step of every test ends with ``Core.check`` against that count, so the
core's O(n) invariant check runs throughout.

What it proves, directly rather than through the thread pool or the asyncio scheduler: the
order (strict priority, FIFO among equals, ageing to the exact boundary of ``rank_of``),
capacity and pause, queue deadlines, ``max_queued`` with each ``when_full``, the rate and key
limits and their changes at run time, the ``todo`` bits each call leaves its owner, the
counts and the wait and run times on the fake clock, a failing clock, and, in a seeded
random walk, the same choices as a reference model of strict priority, FIFO and capacity.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable
from concurrent.futures import Future
from fractions import Fraction
from typing import Any, Optional

import pytest

from priority_executor import QueueFullError, RateLimit
from priority_executor._claim import Outcome
from priority_executor._core import EMPTIED, OPENED, SHRUNK, TIMER, Core
from priority_executor._keyed import KeyedQueue
from priority_executor._limits import Limits
from priority_executor._orders import HeapQueue, TaskQueue
from priority_executor._policy import Number, WhenFull, check_task_options, rank_of
from priority_executor._queue import NO_KWARGS, Entry
from priority_executor._recording import MAX_CLASSES, OTHER
from support import exact, queue_full_message

START = 1000.0


class Clock:
    """A fake clock: reads ``now``, or raises ``error`` while it is set."""

    def __init__(self, start: float = START) -> None:
        self.now = start
        self.error: Optional[Exception] = None
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def task(tag: object) -> object:
    return tag


def tag_of(entry: Optional[Entry]) -> object:
    assert entry is not None
    return entry.args[0]


class Owner:
    """An owner of a :class:`Core`, single-threaded: the steps the real owners take.

    ``in_flight`` is counted here, from what each call returned, not read from the core, so
    that ``core.check(in_flight)`` compares two independent counts.
    """

    def __init__(
        self,
        *,
        ageing: Optional[float] = None,
        capacity: float = math.inf,
        max_queued: Optional[int] = None,
        when_full: WhenFull = "raise",
        rate_limit: object = None,
        key_limit: object = None,
        key_rate_limit: object = None,
        clock: Optional[Clock] = None,
    ) -> None:
        self.clock = Clock() if clock is None else clock
        self.core = Core(
            clock=self.clock,
            ageing=ageing,
            limits=Limits.checked(rate_limit, key_limit, key_rate_limit),
            capacity=capacity,
            max_queued=max_queued,
            when_full=when_full,
        )
        self.in_flight = 0
        self.unrun: list[Entry] = []  # taken out expired by take(), not yet settled
        self.check()

    def check(self) -> None:
        self.core.check(self.in_flight)

    def submit(
        self,
        tag: object,
        priority: object = 0,
        timeout: Optional[float] = None,
        key: Hashable = None,
    ) -> Entry:
        """Check, stamp, make room, count and queue a task, as ``submit`` does; a task due at
        once is counted expired."""
        core = self.core
        level, timeout = check_task_options(priority, timeout, core.ageing)
        entry = Entry(Future(), task, (tag,), NO_KWARGS, level, None, key)
        rank, expired = core.stamp(entry, timeout)
        evict = None
        if not expired and core.full():
            self.settle(core.room_of_due(entry.queued_at))
            if core.full():
                evict = core.make_room(entry, rank)
                assert evict is not None, "the test does not block"
        core.tally.submitted += 1
        if expired:
            core.tally.add("expired", level)
            self.check()
            return entry
        if evict is not None:
            core.queue.remove(evict)
            core.tally.evicted(evict.priority)
            evict.future.cancel()
            self.in_flight -= 1
        core.queue.push(entry, rank)
        self.in_flight += 1
        self.check()
        return entry

    def settle(self, entries: list[Entry]) -> None:
        """Settle entries the core took out counted (expired, drained): ``Core.settled``."""
        for entry in entries:
            entry.future.cancel()
        self.in_flight -= len(entries)
        self.check()
        if entries:
            self.core.settled(len(entries))
        self.check()

    def take(self, as_work_queue: bool = False) -> Optional[Entry]:
        """``Core.take``, and the settling of the entries it found due."""
        entry = self.core.take(self.unrun, as_work_queue)
        expired, self.unrun = self.unrun, []
        self.in_flight -= len(expired)
        self.check()
        self.settle_unrun(expired)
        return entry

    def settle_unrun(self, expired: list[Entry]) -> None:
        for entry in expired:
            entry.future.cancel()
        if expired:
            self.core.settled(len(expired))
        self.check()

    def finish(self, entry: Entry, outcome: Outcome = "completed", keyed: bool = True) -> None:
        self.core.finish(outcome, entry, keyed)
        self.in_flight -= 1
        self.check()

    def cancel(self, entry: Entry) -> Optional[Entry]:
        """The user cancels a queued future: the cancel hook's ``unqueue``."""
        assert entry.future.cancel()
        removed = self.core.unqueue(entry.future, "cancelled")
        if removed is not None:
            self.in_flight -= 1
        self.check()
        return removed

    def pop_due(self) -> list[Entry]:
        """The timer's turn at the clock's reading."""
        due = self.core.pop_due(self.clock.now)
        self.in_flight -= len(due)
        self.check()
        self.settle_unrun(due)
        return due

    def take_tags(self) -> list[object]:
        """Take, and finish, every task that may start now: their tags in the order taken."""
        tags = []
        while (entry := self.take()) is not None:
            tags.append(tag_of(entry))
            self.finish(entry)
        return tags

    def stats(self) -> Any:
        return self.core.statistics(workers=0, idle_workers=0, max_workers=1)


NAN_CLOCK = "the clock read nan: a deadline or ageing needs a number"


# -- order ------------------------------------------------------------------------------------


def test_take_returns_higher_priority_first_and_fifo_among_equals() -> None:
    owner = Owner()
    priorities: list[Number] = [0, 3, -1, 3, 0, 10, -1, 3, 0, 10]
    for i, p in enumerate(priorities):
        owner.submit(i, p)
    expected = [i for _, i in sorted((-p, i) for i, p in enumerate(priorities))]
    assert owner.take_tags() == expected
    assert not owner.core.queue


def test_take_orders_mixed_int_float_and_fraction_priorities_as_numbers() -> None:
    owner = Owner()
    priorities: list[object] = [
        1,
        Fraction(3, 2),
        1.5,
        2,
        Fraction(1, 3),
        0.25,
        1.0,
        -2,
        Fraction(-5, 2),
        -2.5,
        1,
    ]
    for i, p in enumerate(priorities):
        owner.submit(i, p)
    # 3/2 == 1.5 and 1 == 1.0: one level each, in submission order.
    assert owner.stats().queued_by_priority == {
        2: 1,
        1.5: 2,
        1: 3,
        1 / 3: 1,
        0.25: 1,
        -2: 1,
        -2.5: 2,
    }
    assert owner.take_tags() == [3, 1, 2, 0, 6, 10, 4, 5, 7, 8, 9]


def test_take_keeps_strict_order_across_many_levels() -> None:
    owner = Owner()
    rng = random.Random(7)
    priorities = [rng.randrange(-50, 50) for _ in range(250)]
    for i, p in enumerate(priorities):
        owner.submit(i, p)
    assert isinstance(owner.core.queue, TaskQueue)
    expected = [i for _, i in sorted((-p, i) for i, p in enumerate(priorities))]
    assert owner.take_tags() == expected


# -- capacity and pause -----------------------------------------------------------------------


def test_take_returns_none_at_capacity_and_a_task_again_after_finish() -> None:
    owner = Owner(capacity=2)
    for i in range(4):
        owner.submit(i)
    first, second = owner.take(), owner.take()
    assert (tag_of(first), tag_of(second)) == (0, 1)
    assert owner.core.running == 2
    assert owner.take() is None
    assert len(owner.core.queue) == 2
    assert first is not None
    owner.finish(first)
    assert tag_of(owner.take()) == 2
    assert owner.take() is None


def test_raising_capacity_lets_more_start_and_lowering_it_holds_new_starts() -> None:
    owner = Owner(capacity=1)
    for i in range(5):
        owner.submit(i)
    running = [owner.take()]
    assert owner.take() is None
    owner.core.capacity = 3
    running += [owner.take(), owner.take()]
    assert [tag_of(e) for e in running] == [0, 1, 2]
    assert owner.take() is None
    owner.core.capacity = 1  # lowered below what runs: nothing starts until two finish
    for entry in running[:2]:
        assert entry is not None
        owner.finish(entry)
        assert owner.take() is None
    last = running[2]
    assert last is not None
    owner.finish(last)
    assert tag_of(owner.take()) == 3


def test_take_as_work_queue_ignores_capacity_pause_and_limits() -> None:
    owner = Owner(capacity=1, rate_limit=(1, 10.0), key_limit=1)
    a = owner.submit("a", 1, key="k")
    owner.submit("b", 0, key="k")
    owner.submit("c", 0)
    first = owner.take()
    assert first is not None
    assert first.future is a.future
    assert owner.core.queue.held == 1  # key k at its limit
    assert owner.core.limits.rate_until == START + 10.0
    owner.core.paused = True
    assert owner.take() is None
    reads = owner.clock.reads
    taken = owner.take(as_work_queue=True)
    assert tag_of(taken) == "b"  # held back by its key, and still given out
    assert owner.clock.reads == reads  # no start: no clock read, no stamp
    assert not hasattr(taken, "started")
    assert owner.core.running == 2
    assert owner.core.limits.keys["k"].running == 1  # not counted for its key
    assert taken is not None
    owner.finish(taken, "taken", keyed=False)
    assert owner.core.tally.totals()["taken"] == 1
    assert tag_of(owner.take(as_work_queue=True)) == "c"


def test_take_returns_none_while_paused() -> None:
    owner = Owner()
    owner.submit("x")
    owner.core.paused = True
    assert owner.take() is None
    assert owner.core.startable() == 0
    assert owner.stats().paused
    owner.core.paused = False
    assert owner.core.startable() == 1
    assert tag_of(owner.take()) == "x"


# -- ageing -----------------------------------------------------------------------------------


def test_ageing_lets_an_older_task_overtake_exactly_at_the_rank_boundary() -> None:
    ageing = 2.0
    for waited, first in [(1.5, "new"), (ageing, "old"), (2.5, "old")]:
        owner = Owner(ageing=ageing)
        assert isinstance(owner.core.queue, HeapQueue)
        old = owner.submit("old", 0)
        owner.clock.advance(waited)
        new = owner.submit("new", 1)
        assert old.rank == rank_of(0, START, ageing) == START
        assert new.rank == rank_of(1, START + waited, ageing) == START + waited - ageing
        # At the boundary the ranks are equal, and submission order decides.
        assert owner.take_tags()[0] == first, waited


def test_ageing_raises_a_waiting_task_one_priority_step_per_ageing_seconds() -> None:
    owner = Owner(ageing=1.0)
    owner.submit("low", -3)
    owner.clock.advance(2.0)
    owner.submit("mid", -1)  # rank 1003: the same as low's 1000 - (-3)
    owner.submit("high", 0)  # rank 1002
    assert owner.take_tags() == ["high", "low", "mid"]


# -- queue deadlines --------------------------------------------------------------------------


def test_stamp_with_timeout_zero_reports_the_task_due() -> None:
    owner = Owner()
    entry = Entry(Future(), task, ("x",), NO_KWARGS, 5, None)
    rank, due = owner.core.stamp(entry, 0.0)
    assert (rank, due) == (-5, True)
    assert entry.deadline == entry.queued_at == START
    rank, due = owner.core.stamp(entry, 0.5)
    assert (rank, due) == (-5, False)
    assert entry.deadline == START + 0.5
    expired = owner.submit("now", 5, timeout=0.0)
    assert not owner.core.queue
    assert owner.core.tally.totals()["expired"] == 1
    assert not expired.queued


def test_pop_due_returns_exactly_the_due_entries_counted_expired_and_settling() -> None:
    owner = Owner()
    owner.submit("a", 0, timeout=1.0)
    owner.submit("b", 1, timeout=3.0)
    owner.submit("c", 2, timeout=1.0)
    owner.submit("d", 3)
    assert owner.core.next_deadline() == START + 1.0
    owner.clock.now = math.nextafter(START + 1.0, 0.0)  # just before the deadline
    assert owner.core.pop_due(owner.clock.now) == []
    assert owner.core.take_todo() == 0
    owner.clock.now = START + 1.0  # exactly the deadline: due
    due = owner.core.pop_due(owner.clock.now)
    assert sorted(str(tag_of(e)) for e in due) == ["a", "c"]
    assert owner.core.settling == 2
    assert owner.core.tally.totals()["expired"] == 2
    assert owner.core.take_todo() == 0  # no one watches, not stopping
    assert not owner.core.quiet()
    owner.in_flight -= 2
    owner.check()
    owner.settle_unrun(due)
    assert owner.core.settling == 0
    assert owner.core.next_deadline() == START + 3.0
    assert owner.take_tags() == ["d", "b"]
    assert owner.core.next_deadline() is None
    assert owner.core.quiet()


def test_take_expires_a_due_best_entry_into_unrun_and_takes_the_next() -> None:
    owner = Owner()
    owner.submit("late", 9, timeout=1.0)
    owner.submit("also late", 8, timeout=2.0)
    owner.submit("fine", 7, timeout=5.0)
    owner.submit("last", 0)
    owner.clock.advance(2.0)
    unrun: list[Entry] = []
    entry = owner.core.take(unrun)
    assert tag_of(entry) == "fine"
    assert [tag_of(e) for e in unrun] == ["late", "also late"]
    assert owner.core.settling == 2
    assert owner.core.tally.totals()["expired"] == 2
    owner.in_flight -= 2
    owner.check()
    owner.settle_unrun(unrun)
    assert entry is not None
    assert entry.started == START + 2.0
    owner.finish(entry)
    assert owner.take_tags() == ["last"]


def test_take_that_finds_every_entry_due_returns_none() -> None:
    owner = Owner()
    owner.submit("a", 1, timeout=1.0)
    owner.submit("b", 0, timeout=1.0)
    owner.clock.advance(1.0)
    assert owner.take() is None
    assert owner.core.running == 0
    assert owner.core.tally.totals()["expired"] == 2
    assert owner.core.quiet()


def test_next_deadline_is_the_earliest_live_deadline() -> None:
    owner = Owner()
    assert owner.core.next_deadline() is None
    a = owner.submit("a", 0, timeout=2.0)
    owner.submit("b", 0, timeout=4.0)
    owner.submit("c", 0)
    assert owner.core.next_deadline() == START + 2.0
    owner.cancel(a)
    assert owner.core.next_deadline() == START + 4.0


# -- max_queued -------------------------------------------------------------------------------


def test_make_room_raise_refuses_with_the_exact_message_and_counts_rejected() -> None:
    owner = Owner(max_queued=2, when_full="raise")
    owner.submit("a")
    assert not owner.core.full()
    owner.submit("b")
    assert owner.core.full()
    assert not owner.core.fast_submit
    with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
        owner.submit("c", 7)
    assert owner.core.tally.totals()["rejected"] == 1
    assert owner.stats().outcomes[7]["rejected"] == 1
    assert owner.core.tally.submitted == 2
    owner.check()


def test_make_room_evict_returns_the_worst_only_for_a_task_that_ranks_above_it() -> None:
    owner = Owner(max_queued=3, when_full="evict")
    owner.submit("a", 5)
    low = owner.submit("low", 1)
    owner.submit("b", 3)
    probe = Entry(Future(), task, ("p",), NO_KWARGS, 1, None)
    with pytest.raises(QueueFullError, match=exact(queue_full_message(3))):
        owner.core.make_room(probe, rank_of(1, 0.0, None))  # the same rank: not above it
    assert owner.core.tally.totals()["rejected"] == 1
    assert owner.core.make_room(probe, rank_of(2, 0.0, None)) is low
    owner.submit("c", 2)  # evicts "low"
    assert low.future.cancelled()
    assert not low.queued
    totals = owner.core.tally.totals()
    assert (totals["cancelled"], totals["evicted"]) == (1, 1)
    assert owner.take_tags() == ["a", "b", "c"]


def test_make_room_block_returns_none() -> None:
    owner = Owner(max_queued=1, when_full="block")
    owner.submit("a")
    probe = Entry(Future(), task, ("p",), NO_KWARGS, 9, None)
    assert owner.core.make_room(probe, -9) is None
    assert owner.core.tally.totals()["rejected"] == 0
    owner.check()


def test_room_of_due_takes_out_the_tasks_due_at_the_reading_and_nothing_for_nan() -> None:
    owner = Owner(max_queued=2)
    owner.submit("a", 0, timeout=1.0)
    owner.submit("b", 0)
    assert owner.core.room_of_due(owner.clock.now) == []  # none due yet
    assert owner.core.room_of_due(math.nan) == []
    owner.clock.advance(1.0)
    # The submit finds the queue full, and "a" due at its own reading: room, not a refusal.
    owner.submit("c")
    totals = owner.core.tally.totals()
    assert (totals["expired"], totals["rejected"]) == (1, 0)
    assert owner.take_tags() == ["b", "c"]


def test_room_of_due_returns_nothing_without_deadlines() -> None:
    owner = Owner(max_queued=1)
    owner.submit("a")
    owner.clock.advance(100.0)
    assert owner.core.room_of_due(owner.clock.now) == []


# -- rate limits ------------------------------------------------------------------------------


def test_rate_limit_lets_n_starts_per_window_then_holds_and_sets_timer() -> None:
    owner = Owner(rate_limit=(2, 1.0))
    for i in range(5):
        owner.submit(i)
    assert owner.core.take_todo() == 0
    assert tag_of(owner.take()) == 0
    assert owner.core.take_todo() == 0
    assert tag_of(owner.take()) == 1
    assert owner.core.take_todo() == TIMER  # the window filled
    assert owner.core.limits.rate_until == START + 1.0
    assert owner.take() is None
    assert owner.core.take_todo() == TIMER
    assert owner.core.startable() == 0
    assert owner.stats().rate_limited
    assert owner.core.next_deadline() == START + 1.0
    owner.clock.advance(0.5)
    assert owner.take() is None
    assert owner.core.take_todo() == TIMER
    owner.clock.advance(0.5)  # the first start leaves the window
    assert owner.pop_due() == []
    assert owner.core.take_todo() == OPENED
    assert owner.core.opened_at == START + 1.0
    assert owner.core.limits.rate_until is None
    assert tag_of(owner.take()) == 2
    assert tag_of(owner.take()) == 3
    assert owner.core.take_todo() == TIMER
    assert owner.take() is None


def test_take_past_the_window_opens_the_slot_itself_and_sets_opened() -> None:
    owner = Owner(rate_limit=(1, 2.0))
    owner.submit("a")
    owner.submit("b")
    owner.submit("c")
    assert tag_of(owner.take()) == "a"
    assert owner.take() is None
    owner.core.take_todo()
    owner.clock.advance(2.0)
    assert tag_of(owner.take()) == "b"
    assert owner.core.take_todo() == OPENED | TIMER
    assert owner.core.opened_at == START + 2.0


def test_pop_due_opens_no_slot_for_takers_while_paused() -> None:
    owner = Owner(rate_limit=(1, 1.0))
    owner.submit("a")
    owner.submit("b")
    owner.take()
    owner.core.take_todo()
    owner.core.paused = True
    owner.clock.advance(1.0)
    owner.pop_due()
    assert owner.core.take_todo() == 0
    assert owner.core.limits.rate_until is None  # opened, but no taker is woken for it


def test_change_rate_limit_at_run_time_keeps_the_starts_counted() -> None:
    owner = Owner()
    for i in range(4):
        owner.submit(i)
    assert owner.core.fast_submit
    running = [owner.take(), owner.take()]
    assert all(entry is not None for entry in running)
    owner.core.change_limit("rate_limit", RateLimit(3, 1.0))
    owner.check()
    assert not owner.core.fast_submit
    # Starts before any rate limit was set are in no window: this is the first counted.
    assert tag_of(owner.take()) == 2
    assert owner.core.limits.rate_until is None
    owner.core.change_limit("rate_limit", RateLimit(1, 1.0))  # the start just counted fills it
    assert owner.core.limits.rate_until == START + 1.0
    owner.check()
    assert owner.take() is None
    owner.core.change_limit("rate_limit", None)
    owner.check()
    assert owner.core.fast_submit
    assert tag_of(owner.take()) == 3


def test_key_rate_limit_holds_a_key_until_its_window_passes() -> None:
    owner = Owner(key_rate_limit=(1, 1.0))
    assert isinstance(owner.core.queue, KeyedQueue)
    owner.submit("a1", 5, key="a")
    owner.submit("a2", 5, key="a")
    owner.submit("b1", 0, key="b")
    assert owner.take_tags() == ["a1", "b1"]
    assert owner.core.queue.held == 1
    assert owner.core.take_todo() & TIMER
    assert owner.core.next_deadline() == START + 1.0
    owner.clock.advance(1.0)
    owner.pop_due()
    assert owner.core.take_todo() == OPENED
    assert owner.take_tags() == ["a2"]


# -- key limits -------------------------------------------------------------------------------


def test_key_limit_holds_a_key_back_and_lets_a_lower_priority_other_key_start() -> None:
    owner = Owner(key_limit=1)
    assert isinstance(owner.core.queue, KeyedQueue)
    owner.submit("a1", 9, key="a")
    owner.submit("a2", 8, key="a")
    owner.submit("b1", 1, key="b")
    owner.submit("none", 0)  # no key: never held
    a1 = owner.take()
    assert tag_of(a1) == "a1"
    assert owner.core.queue.held == 1
    assert owner.stats().held_by_key == 1
    assert owner.core.startable() == 2
    b1 = owner.take()
    assert tag_of(b1) == "b1"
    assert tag_of(owner.take()) == "none"
    assert owner.take() is None
    assert owner.core.queue.held == 1
    assert a1 is not None
    owner.finish(a1)  # reopens key a
    assert owner.core.queue.held == 0
    assert owner.take_tags() == ["a2"]


def test_change_key_limit_switches_the_queue_to_keyed_lanes_and_back() -> None:
    owner = Owner()
    assert isinstance(owner.core.queue, TaskQueue)
    owner.submit("a1", 5, key="a")
    owner.submit("a2", 4, key="a")
    owner.submit("b1", 3, key="b")
    owner.submit("n", 2)
    a1 = owner.take()
    assert tag_of(a1) == "a1"
    # A key's running tasks are counted with no limit set, for a limit set later.
    assert owner.core.limits.keys["a"].running == 1
    owner.core.change_limit("key_limit", 1)
    owner.check()
    assert isinstance(owner.core.queue, KeyedQueue)
    assert owner.core.queue.held == 1  # a2, key a already runs one
    assert not owner.core.fast_submit
    owner.core.change_limit("key_limit", None)
    owner.check()
    assert isinstance(owner.core.queue, TaskQueue)
    assert owner.core.queue.held == 0
    assert owner.core.fast_submit
    assert [tag_of(e) for e in owner.core.queue._live_in_order()] == ["a2", "b1", "n"]
    owner.core.change_limit("key_limit", 2)
    owner.check()
    assert owner.core.queue.held == 0
    assert owner.take_tags() == ["a2", "b1", "n"]
    assert a1 is not None
    owner.finish(a1)
    assert owner.core.limits.keys == {}


def test_change_key_limit_on_keyed_lanes_recloses_and_reopens_keys() -> None:
    owner = Owner(key_limit=2, ageing=1.0)
    for i in range(4):
        owner.submit(f"a{i}", 0, key="a")
    running = [owner.take(), owner.take()]
    assert owner.core.queue.held == 2
    owner.core.change_limit("key_limit", 3)
    owner.check()
    assert owner.core.queue.held == 0
    owner.core.change_limit("key_limit", 1)
    owner.check()
    assert owner.core.queue.held == 2
    assert owner.take() is None
    for entry in running:
        assert entry is not None
        owner.finish(entry)
    assert owner.take_tags() == ["a2", "a3"]


def test_held_tasks_expire_are_evicted_moved_and_drained_with_the_held_count_kept() -> None:
    owner = Owner(key_limit=1, max_queued=4, when_full="evict")
    owner.submit("a1", 5, key="a")
    a2 = owner.submit("a2", 4, key="a", timeout=1.0)
    a3 = owner.submit("a3", 0, key="a")
    owner.submit("b1", 3, key="b")
    a1 = owner.take()
    assert tag_of(a1) == "a1"
    assert owner.core.queue.held == 2
    owner.submit("b2", 2, key="b")
    assert owner.core.full()
    owner.submit("b3", 1, key="b")  # evicts a3, held or not: it would run last
    assert a3.future.cancelled()
    assert owner.core.queue.held == 1
    assert owner.core.requeue(a2.future, 9)  # moved while held: still held
    owner.check()
    assert owner.core.queue.held == 1
    b1 = owner.take()
    assert tag_of(b1) == "b1"  # a2 ranks first, but its key is at its limit
    assert owner.core.queue.held == 3  # a2, and now b2 and b3
    owner.clock.advance(1.0)
    assert [tag_of(e) for e in owner.pop_due()] == ["a2"]
    assert owner.core.queue.held == 2
    drained = owner.core.drain("cancelled")
    assert [tag_of(e) for e in drained] == ["b2", "b3"]
    assert owner.core.queue.held == 0
    owner.in_flight -= 2
    owner.settle_unrun(drained)
    for entry in (a1, b1):
        assert entry is not None
        owner.finish(entry)
    assert owner.core.limits.keys == {}
    assert owner.core.quiet()


def test_change_limit_with_a_failing_clock_raises_and_changes_nothing() -> None:
    owner = Owner()
    owner.submit("a")
    owner.clock.error = OSError("clock down")
    for limit in ("rate_limit", "key_rate_limit"):
        with pytest.raises(OSError, match=exact("clock down")):
            owner.core.change_limit(limit, RateLimit(1, 1.0))
        owner.check()
        assert not owner.core.limits.any_set
        assert owner.core.fast_submit
        assert isinstance(owner.core.queue, TaskQueue)
    owner.core.change_limit("key_limit", 1)  # reads no clock
    owner.check()
    assert isinstance(owner.core.queue, KeyedQueue)


# -- todo bits --------------------------------------------------------------------------------


def test_shrunk_is_set_by_take_finish_and_unqueue_only_while_someone_watches() -> None:
    owner = Owner()
    owner.submit("a")
    b = owner.submit("b")
    owner.submit("c")
    taken = owner.take()
    assert taken is not None
    owner.finish(taken)
    owner.cancel(b)
    assert owner.core.take_todo() == 0
    owner.core.watchers = 1
    owner.submit("d")
    assert owner.core.take_todo() == 0  # pushing shrinks nothing
    taken = owner.take()
    assert owner.core.take_todo() == SHRUNK
    assert owner.core.take_todo() == 0  # taken: cleared
    assert taken is not None
    owner.finish(taken)
    assert owner.core.take_todo() == SHRUNK
    d = owner.core.queue._live_in_order()[0]
    owner.cancel(d)
    assert owner.core.take_todo() == SHRUNK
    assert owner.take() is None
    assert owner.core.take_todo() == 0  # a take that found nothing shrank nothing


def test_emptied_is_set_by_unqueue_pop_due_and_take_only_while_stopping() -> None:
    owner = Owner()
    a = owner.submit("a")
    owner.cancel(a)
    assert owner.core.take_todo() == 0
    owner.core.stopping = True
    b = owner.submit("b")
    owner.submit("c", timeout=1.0)
    owner.cancel(b)
    assert owner.core.take_todo() == EMPTIED
    owner.clock.advance(1.0)
    owner.pop_due()
    assert owner.core.take_todo() == EMPTIED
    assert owner.core.quiet()
    owner.core.stopping = False
    owner.submit("d", timeout=1.0)
    owner.core.stopping = True  # the last task expires as a take finds it due
    owner.clock.advance(1.0)
    assert owner.take() is None
    assert owner.core.take_todo() == EMPTIED


def test_drain_settled_and_pop_due_set_shrunk_only_while_someone_watches() -> None:
    owner = Owner()
    owner.submit("a")
    owner.submit("b", timeout=1.0)
    owner.clock.advance(1.0)
    owner.pop_due()
    assert owner.core.take_todo() == 0
    owner.core.settled(1)
    assert owner.core.take_todo() == 0
    owner.core.watchers = 1
    owner.core.settled(0)
    assert owner.core.take_todo() == 0  # nothing settled
    owner.core.drain("cancelled")
    assert owner.core.take_todo() == SHRUNK
    owner.core.settled(1)
    assert owner.core.take_todo() == SHRUNK


# -- leaving the queue unstarted --------------------------------------------------------------


def test_unqueue_removes_a_cancelled_handle_once_and_counts_it() -> None:
    owner = Owner()
    a = owner.submit("a", 3)
    owner.submit("b", 1)
    assert owner.cancel(a) is a
    assert not a.queued
    assert owner.core.unqueue(a.future, "cancelled") is None  # not queued any more
    owner.check()
    assert owner.stats().outcomes[3]["cancelled"] == 1
    assert owner.take_tags() == ["b"]


def test_unqueue_of_a_future_whose_result_was_set_counts_it_completed() -> None:
    owner = Owner()
    a = owner.submit("a", 2)
    a.future.set_result("by hand")
    assert owner.core.unqueue(a.future, "completed") is a
    owner.in_flight -= 1
    owner.check()
    assert owner.stats().outcomes[2]["completed"] == 1


def test_requeue_moves_a_task_to_a_new_priority_behind_its_equals() -> None:
    owner = Owner()
    a = owner.submit("a", 0)
    owner.submit("b", 5)
    owner.submit("c", 5)
    assert owner.core.requeue(a.future, 5)
    owner.check()
    assert owner.stats().queued_by_priority == {5: 3}
    assert owner.take_tags() == ["b", "c", "a"]


def test_requeue_under_ageing_keeps_the_time_of_submission() -> None:
    owner = Owner(ageing=1.0)
    a = owner.submit("a", 0)
    owner.clock.advance(3.0)
    owner.submit("b", 2)  # rank 1001 against a's 1000
    assert owner.core.requeue(a.future, -2)  # rank 1002: behind b
    owner.check()
    assert owner.take_tags() == ["b", "a"]


def test_requeue_returns_false_for_an_unknown_or_done_handle() -> None:
    owner = Owner()
    a = owner.submit("a", 0)
    owner.submit("b", 1)
    assert not owner.core.requeue(Future(), 9)
    a.future.cancel()  # cancelled, its hook not yet run: it has not moved
    assert not owner.core.requeue(a.future, 9)
    assert owner.core.unqueue(a.future, "cancelled") is not None
    owner.in_flight -= 1
    owner.check()
    taken = owner.take()
    assert taken is not None
    assert not owner.core.requeue(taken.future, 9)  # running: not queued
    owner.check()


def test_drain_with_an_outcome_counts_them_and_without_leaves_them_undecided() -> None:
    owner = Owner()
    for i, p in enumerate([1, 3, 2]):
        owner.submit(i, p)
    drained = owner.core.drain("cancelled")
    assert [tag_of(e) for e in drained] == [1, 2, 0]  # best first
    owner.in_flight -= 3
    owner.check()
    assert owner.core.settling == 3
    assert owner.core.tally.totals()["cancelled"] == 3
    assert not owner.core.quiet()
    owner.settle_unrun(drained)
    assert owner.core.quiet()
    for i in range(2):
        owner.submit(i, 4)
    undecided = owner.core.drain(None)
    assert owner.core.undecided == owner.core.settling == 2
    owner.check()  # still in flight: not counted yet
    owner.core.tally.add_each("failed", [e.priority for e in undecided])
    owner.core.undecided -= 2
    owner.in_flight -= 2
    owner.check()
    owner.settle_unrun(undecided)
    assert owner.core.quiet()


def test_quiet_waits_for_queued_running_settling_and_evicted() -> None:
    owner = Owner()
    assert owner.core.quiet()
    owner.submit("a")
    assert not owner.core.quiet()
    taken = owner.take()
    assert not owner.core.quiet()
    assert taken is not None
    owner.finish(taken)
    assert owner.core.quiet()
    owner.core.evicted.append(taken)
    assert not owner.core.quiet()
    owner.core.evicted.clear()
    owner.core.settling = 1
    assert not owner.core.quiet()
    owner.core.settled(1)
    assert owner.core.quiet()


# -- counts and times -------------------------------------------------------------------------


def test_totals_add_up_and_finish_records_wait_and_run_per_priority_class() -> None:
    owner = Owner()
    owner.submit("a", 2)
    owner.clock.advance(1.0)
    owner.submit("b", 2)
    owner.submit("c", 0)
    owner.clock.advance(2.0)
    a = owner.take()
    owner.clock.advance(4.0)
    b = owner.take()
    assert a is not None
    assert b is not None
    assert a.started == START + 3.0
    owner.clock.advance(8.0)
    owner.finish(a, "completed")
    owner.finish(b, "failed")
    stats = owner.stats()
    assert stats.wait[2].count == 2
    assert stats.wait[2].total == 3.0 + 6.0
    assert stats.run[2].total == 12.0 + 8.0
    assert stats.wait[0].count == 0
    assert stats.outcomes[2]["completed"] == stats.outcomes[2]["failed"] == 1
    assert (stats.submitted, stats.completed, stats.failed, stats.queued) == (3, 1, 1, 1)
    totals = owner.core.tally.totals()
    settled = sum(totals[k] for k in ("completed", "failed", "cancelled", "expired", "taken"))
    assert totals["submitted"] == settled + len(owner.core.queue) + owner.core.running


def test_finish_of_a_task_a_cancel_won_counts_it_without_times() -> None:
    owner = Owner()
    owner.submit("a", 1)
    taken = owner.take()
    assert taken is not None
    owner.finish(taken, "cancelled")
    stats = owner.stats()
    assert stats.outcomes[1]["cancelled"] == 1
    assert stats.wait[1].count == stats.run[1].count == 0


def test_nan_clock_readings_leave_the_times_unrecorded() -> None:
    owner = Owner()
    owner.clock.error = OSError("no clock")
    owner.submit("a", 1)  # no deadline, no ageing: its wait is unknown
    assert [str(e) for e in owner.core.clock_errors] == ["no clock"]
    owner.clock.error = None
    taken = owner.take()
    assert taken is not None
    assert math.isnan(taken.queued_at)
    owner.finish(taken)
    owner.submit("b", 1)
    taken = owner.take()
    assert taken is not None
    owner.clock.error = OSError("no clock at the end")
    owner.finish(taken)  # its run time unknown
    assert len(owner.core.clock_errors) == 2
    stats = owner.stats()
    assert stats.outcomes[1]["completed"] == 2
    assert stats.wait[1].count == stats.run[1].count == 0


def test_priorities_beyond_max_classes_are_counted_under_other() -> None:
    owner = Owner()
    for p in range(MAX_CLASSES + 3):
        owner.submit(p, p)
    owner.clock.advance(1.0)
    owner.take_tags()  # best first: the highest MAX_CLASSES priorities get a class each
    stats = owner.stats()
    assert set(stats.outcomes) == {*range(3, MAX_CLASSES + 3), OTHER}
    assert stats.outcomes[OTHER]["completed"] == 3
    assert stats.wait[OTHER].count == 3
    assert stats.wait[OTHER].total == 3.0


# -- a clock that raises ----------------------------------------------------------------------


def test_stamp_without_deadline_or_ageing_lists_a_clock_error_and_with_one_raises() -> None:
    owner = Owner()
    owner.clock.error = OSError("clock down")
    entry = owner.submit("a")
    assert math.isnan(entry.queued_at)
    assert owner.core.clock_errors == [owner.clock.error]
    probe = Entry(Future(), task, ("p",), NO_KWARGS, 0, None)
    with pytest.raises(OSError, match=exact("clock down")):
        owner.core.stamp(probe, 1.0)
    assert probe.deadline is None
    aged = Owner(ageing=1.0, clock=owner.clock)
    with pytest.raises(OSError, match=exact("clock down")):
        aged.core.stamp(probe, None)
    assert len(owner.core.clock_errors) == 1
    owner.check()


def test_a_clock_reading_nan_is_refused_where_it_would_order_deadlines_or_ageing() -> None:
    owner = Owner()
    owner.submit("before", timeout=1.0)
    owner.clock.now = math.nan
    for core, timeout in ((owner.core, 1.0), (Owner(ageing=1.0, clock=owner.clock).core, None)):
        probe = Entry(Future(), task, ("p",), NO_KWARGS, 0, None)
        with pytest.raises(ValueError, match=exact(NAN_CLOCK)):
            core.stamp(probe, timeout)
        assert probe.deadline is None
    plain = owner.submit("no deadline")  # a reading that decides nothing: its wait unrecorded
    assert math.isnan(plain.queued_at)
    owner.clock.now = START + 5.0
    assert [tag_of(entry) for entry in owner.pop_due()] == ["before"]
    owner.check()


def test_take_with_a_failing_clock_starts_a_task_whose_deadline_cannot_be_decided() -> None:
    owner = Owner()
    owner.submit("a", timeout=1.0)
    owner.clock.advance(5.0)
    owner.clock.error = OSError("clock down")
    taken = owner.take()
    assert tag_of(taken) == "a"
    assert taken is not None
    assert math.isnan(taken.started)
    assert len(owner.core.clock_errors) == 2  # the deadline's reading and the start's
    owner.clock.error = None
    owner.finish(taken)
    assert owner.stats().wait[0].count == 0


def test_take_under_a_rate_limit_with_a_failing_clock_holds_and_sets_timer() -> None:
    owner = Owner(rate_limit=(5, 1.0))
    owner.submit("a")
    owner.clock.error = OSError("clock down")
    assert owner.take() is None
    assert owner.core.take_todo() == TIMER
    assert owner.core.limits.rate_until == -math.inf
    assert owner.core.clock_errors == [owner.clock.error]
    assert owner.core.next_deadline() == -math.inf  # the timer retries at once
    assert owner.take() is None  # still down
    assert owner.core.take_todo() == TIMER
    assert len(owner.core.clock_errors) == 2
    owner.clock.error = None
    owner.pop_due()  # the timer reads it again
    assert owner.core.take_todo() == OPENED
    assert owner.take_tags() == ["a"]


# -- a random walk against a reference model --------------------------------------------------


class Model:
    """Strict priority, FIFO among equals, capacity, queue deadlines and a key limit, by brute
    force: the task that starts is the best queued task that every limit allows now."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.key_limit: Optional[int] = None
        # (priority, seq, deadline, future, key): seq counts pushes and moves.
        self.queued: list[tuple[Number, int, Optional[float], Future[Any], Hashable]] = []
        self.running: list[Entry] = []
        self.seq = 0

    def push(
        self, future: Future[Any], priority: Number, deadline: Optional[float], key: Hashable
    ) -> None:
        self.queued.append((priority, self.seq, deadline, future, key))
        self.seq += 1

    def requeue(self, index: int, priority: Number) -> Future[Any]:
        _, _, deadline, future, key = self.queued.pop(index)
        self.push(future, priority, deadline, key)
        return future

    def allowed(self, key: Hashable) -> bool:
        if key is None or self.key_limit is None:
            return True
        return sum(entry.key == key for entry in self.running) < self.key_limit

    def held(self) -> int:
        return sum(not self.allowed(item[4]) for item in self.queued)

    def take(self, now: float) -> tuple[Optional[Future[Any]], list[Future[Any]]]:
        """The future of the task to start, and those found due on the way."""
        if len(self.running) >= self.capacity:
            return None, []
        unrun = []
        for item in sorted(self.queued, key=lambda item: (-item[0], item[1])):
            if not self.allowed(item[4]):
                continue
            self.queued.remove(item)
            if item[2] is not None and now >= item[2]:
                unrun.append(item[3])
                continue
            return item[3], unrun
        return None, unrun

    def pop_due(self, now: float) -> list[Future[Any]]:
        due = [item for item in self.queued if item[2] is not None and now >= item[2]]
        for item in due:
            self.queued.remove(item)
        return [item[3] for item in due]


@pytest.mark.parametrize("keys", [False, True], ids=["no keys", "key limit"])
@pytest.mark.parametrize("seed", range(5))
def test_random_walk_makes_the_same_choices_as_a_reference_model(seed: int, keys: bool) -> None:
    """Submits, takes, finishes, cancels, moves, clock steps and (with keys) key limits set
    and removed at run time, against :class:`Model`: the same choices at every step."""
    rng = random.Random(seed)
    capacity = rng.randint(1, 4)
    owner = Owner(capacity=capacity)
    model = Model(capacity)
    levels: list[Number] = [-1, 0, 0.5, 1, 3]
    key_choices: list[Hashable] = [None, "a", "b", "c"] if keys else [None]
    counts = {"completed": 0, "failed": 0, "cancelled": 0, "expired": 0}
    submitted = 0
    for step in range(300):
        op = rng.random()
        now = owner.clock.now
        if op < 0.33:
            priority = rng.choice(levels)
            timeout = rng.choice([None, None, 0.0, 1.0, 2.5])
            key = rng.choice(key_choices)
            entry = owner.submit(step, priority, timeout, key)
            submitted += 1
            if timeout == 0.0:
                counts["expired"] += 1
            else:
                deadline = None if timeout is None else now + timeout
                model.push(entry.future, priority, deadline, key)
        elif op < 0.58:
            expected, expected_unrun = model.take(now)
            unrun: list[Entry] = []
            taken = owner.core.take(unrun)
            assert (taken and taken.future) is expected, step
            assert [e.future for e in unrun] == expected_unrun, step
            if taken is not None:
                model.running.append(taken)
            counts["expired"] += len(unrun)
            owner.in_flight -= len(unrun)
            owner.check()
            owner.settle_unrun(unrun)
        elif op < 0.76:
            if model.running:
                done = model.running.pop(rng.randrange(len(model.running)))
                outcome: Outcome = rng.choice(["completed", "failed"])
                owner.finish(done, outcome)
                counts[outcome] += 1
        elif op < 0.83:
            if model.queued:
                future = model.queued.pop(rng.randrange(len(model.queued)))[3]
                removed = owner.cancel(owner.core.queue.entries[future])
                assert removed is not None
                assert removed.future is future
                counts["cancelled"] += 1
        elif op < 0.88:
            if model.queued:
                priority = rng.choice(levels)
                future = model.requeue(rng.randrange(len(model.queued)), priority)
                assert owner.core.requeue(future, priority)
        elif op < 0.93 and keys:
            limit = rng.choice([None, 1, 2])
            model.key_limit = limit
            owner.core.change_limit("key_limit", limit)
            assert isinstance(owner.core.queue, KeyedQueue) == (limit is not None)
        else:
            owner.clock.advance(rng.choice([0.5, 1.0]))
            if rng.random() < 0.5:
                expected_due = model.pop_due(owner.clock.now)
                due = owner.pop_due()
                assert {id(e.future) for e in due} == {id(f) for f in expected_due}, step
                counts["expired"] += len(due)
        owner.check()
        assert len(owner.core.queue) == len(model.queued), step
        assert owner.core.queue.held == model.held(), step
        assert owner.core.running == len(model.running), step
        assert owner.in_flight == len(model.queued) + len(model.running), step
        totals = owner.core.tally.totals()
        assert {k: totals[k] for k in counts} == counts, step
        assert totals["submitted"] == submitted, step
    assert owner.core.clock_errors == []


def test_rebuilt_keeps_the_configuration_and_counts_with_nothing_queued_or_running() -> None:
    owner = Owner(ageing=2.0, capacity=3, max_queued=5, when_full="evict", key_limit=1)
    owner.submit("ran", key="k")
    owner.submit("queued", key="k")
    ran = owner.take()
    assert ran is not None
    owner.finish(ran)
    owner.take()  # running when the core is rebuilt
    owner.core.paused = True
    core = owner.core.rebuilt()
    assert (core.clock, core.ageing, core.capacity) == (owner.clock, 2.0, 3)
    assert (core.max_queued, core.when_full, core.limits.key_limit) == (5, "evict", 1)
    assert core.limits is not owner.core.limits
    assert not core.limits.keys  # no key counted running
    assert core.tally is owner.core.tally
    assert core.paused
    assert not core.stopping
    assert (len(core.queue), core.running, core.settling, core.watchers) == (0, 0, 0, 0)


def test_read_clock_reports_a_nan_reading_as_a_failure_so_no_timer_spins_on_it() -> None:
    clock = Clock()
    owner = Owner(clock=clock)
    assert owner.core.read_clock() == START
    clock.now = math.nan
    failure = owner.core.read_clock()
    assert isinstance(failure, ValueError)
    assert str(failure) == "the clock read nan: a deadline or ageing needs a number"
