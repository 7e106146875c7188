"""``PriorityLimiter``: each behaviour of the thread limiter, one thread per waiter.

A waiter is a :class:`Claim`: a thread in ``with limiter.acquire(...)`` that records its tag
when it is granted and holds its units until the test lets it leave. A grant that must not
happen is checked at a steady state, not after a sleep: every grant is made under the
limiter's lock by the call that allows it (``acquire``, a release, a setter), so once
``statistics()`` counts a waiter as waiting and the call that could have granted it has
returned, it was not granted. Time is a :class:`FakeClock` where a deadline is involved; a
waiter that keeps time parks in real seconds, so the few tests where only the time keeper
can notice a passed deadline use timeouts of a few hundredths of a fake second.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock
from limiter_support import accounted
from priority_executor import LimiterStatistics, Priority, PriorityLimiter, RateLimit
from support import exact, in_thread, wait_until

START = 1000.0  # the fake clock's first reading


class Claim:
    """A thread in ``with limiter.acquire(**options)``: on its grant it appends ``tag`` to
    ``granted`` and, with ``hold``, holds its units until :meth:`leave`."""

    def __init__(
        self,
        limiter: PriorityLimiter,
        tag: str,
        granted: list[str],
        hold: bool,
        options: dict[str, Any],
    ) -> None:
        self.limiter = limiter
        self.tag = tag
        self.granted = granted
        self.hold = hold
        self.options = options
        self.entered = threading.Event()
        self.released = threading.Event()
        self.task = in_thread(self._run, name=f"claim-{tag}")

    def _run(self) -> str:
        with self.limiter.acquire(**self.options):
            self.granted.append(self.tag)
            self.entered.set()
            if self.hold:
                assert self.released.wait(TIMEOUT), f"{self.tag} was never let go"
        return self.tag

    def wait_entered(self) -> None:
        assert self.entered.wait(TIMEOUT), f"{self.tag} was never granted"

    def leave(self) -> None:
        """Let it give its units back, and wait until it has."""
        self.released.set()
        assert self.task.result() == self.tag


class Claims:
    """The claims of one test; on the way out every one is let go, whatever the test did."""

    def __init__(self) -> None:
        self.granted: list[str] = []
        self.all: list[Claim] = []
        self.limiters: list[PriorityLimiter] = []

    def start(
        self, limiter: PriorityLimiter, tag: str, *, hold: bool = True, **options: Any
    ) -> Claim:
        """Start a claim and wait until it waits or holds (``statistics()`` counts it)."""
        before = limiter.statistics()
        claim = Claim(limiter, tag, self.granted, hold, options)
        self.all.append(claim)
        if limiter not in self.limiters:
            self.limiters.append(limiter)
        requested = before.requested + 1
        wait_until(
            lambda: limiter.statistics().requested == requested or claim.task.future.done(),
            f"{tag} has made its request",
        )
        return claim

    def holding(self, limiter: PriorityLimiter, tag: str, **options: Any) -> Claim:
        """Start a claim that is granted at once, and wait until it is inside its block."""
        claim = self.start(limiter, tag, **options)
        claim.wait_entered()
        return claim

    def close(self) -> None:
        for limiter in self.limiters:  # grant whatever still waits
            limiter.key_limit = limiter.rate_limit = limiter.key_rate_limit = None
            limiter.capacity = math.inf
        for claim in self.all:
            claim.released.set()
        for claim in self.all:
            claim.task.thread.join(TIMEOUT)


@pytest.fixture
def claims() -> Iterator[Claims]:
    every = Claims()
    try:
        yield every
    finally:
        every.close()


def waiting(limiter: PriorityLimiter, count: int) -> LimiterStatistics:
    """Wait until ``count`` requests wait; the statistics then, with the invariants checked."""
    wait_until(lambda: limiter.statistics().waiting == count, f"{count} requests wait")
    limiter._check_invariants()
    return limiter.statistics()


def poke(limiter: PriorityLimiter) -> None:
    """Make the limiter look at its queue again (a grant pass), as any setter does."""
    limiter.capacity = limiter.capacity


# -- holding and giving back ------------------------------------------------------------------


def test_a_grant_holds_its_cost_for_the_block_and_gives_it_back_on_exit() -> None:
    limiter = PriorityLimiter(4)
    with limiter.acquire(cost=3):
        stats = limiter.statistics()
        assert (stats.in_use, stats.holding, stats.waiting, stats.requested) == (3, 1, 0, 1)
        with limiter.acquire(cost=1):
            assert limiter.statistics().in_use == 4
        assert limiter.statistics().in_use == 3
    stats = accounted(limiter)
    assert (stats.completed, stats.failed) == (2, 0)
    assert repr(limiter) == "<PriorityLimiter capacity=4 in_use=0 waiting=0>"


def test_a_block_that_raises_gives_its_units_back_and_counts_failed() -> None:
    limiter = PriorityLimiter(2)
    with pytest.raises(KeyError, match="boom"), limiter.acquire(cost=2, priority=Priority.HIGH):
        raise KeyError("boom")
    stats = accounted(limiter)
    assert (stats.completed, stats.failed) == (0, 1)
    assert stats.outcomes[Priority.HIGH]["failed"] == 1
    with limiter.acquire(cost=2):  # both units are back
        pass
    assert accounted(limiter).completed == 1


def test_an_acquisition_cannot_be_entered_twice_at_once_but_can_be_reused() -> None:
    limiter = PriorityLimiter(2)
    acquisition = limiter.acquire()
    with acquisition:
        with pytest.raises(
            RuntimeError, match=exact("this acquisition is held already: call acquire() again")
        ):
            acquisition.__enter__()
        assert limiter.statistics().in_use == 1
    with acquisition:
        assert limiter.statistics().in_use == 1
    assert accounted(limiter).completed == 2


def test_waits_and_holds_are_recorded_per_priority_class_on_the_limiters_clock(
    clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(1, clock=clock)
    holder = claims.holding(limiter, "holder", priority=Priority.LOW)
    clock.advance(2.0)
    high = claims.start(limiter, "high", priority=Priority.HIGH)
    waiting(limiter, 1)
    clock.advance(3.0)
    holder.leave()  # held 5 s; high waited 3 s
    high.wait_entered()
    clock.advance(7.0)
    high.leave()  # held 7 s
    stats = accounted(limiter)
    low_wait, low_hold = stats.wait[Priority.LOW], stats.hold[Priority.LOW]
    high_wait, high_hold = stats.wait[Priority.HIGH], stats.hold[Priority.HIGH]
    assert (low_wait.count, low_wait.max, low_hold.count, low_hold.max) == (1, 0.0, 1, 5.0)
    assert (high_wait.count, high_wait.max, high_hold.count, high_hold.max) == (1, 3.0, 1, 7.0)
    assert stats.wait[Priority.NORMAL].count == 0
    assert stats.outcomes[Priority.HIGH]["completed"] == 1
    assert stats.outcomes[Priority.LOW]["completed"] == 1


# -- order ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ageing", [None, 60.0])
def test_waiters_are_granted_best_priority_first_and_in_arrival_order_among_equals(
    ageing: Optional[float], clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(1, clock=clock, ageing=ageing)
    holder = claims.holding(limiter, "holder")
    arrivals = [("low", -1), ("n1", 0), ("high", 1), ("n2", 0), ("big", 10), ("n3", 0)]
    for count, (tag, priority) in enumerate(arrivals, 1):
        claims.start(limiter, tag, hold=False, priority=priority)
        waiting(limiter, count)
    assert limiter.statistics().waiting_by_priority == {10: 1, 1: 1, 0: 3, -1: 1}
    holder.leave()
    wait_until(lambda: len(claims.granted) == 7, "every waiter was granted")
    assert claims.granted == ["holder", "big", "high", "n1", "n2", "n3", "low"]
    accounted(limiter)


@pytest.mark.parametrize(("waited", "first"), [(3.0, "old-low"), (1.0, "new-high")])
def test_ageing_raises_a_waiters_priority_by_one_per_ageing_seconds(
    waited: float, first: str, clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(1, clock=clock, ageing=1.0)
    holder = claims.holding(limiter, "holder")
    claims.start(limiter, "old-low", hold=False, priority=Priority.LOW)
    clock.advance(waited)  # LOW waits as HIGH once 2 s have passed, and better after
    claims.start(limiter, "new-high", hold=False, priority=Priority.HIGH)
    waiting(limiter, 2)
    holder.leave()
    wait_until(lambda: len(claims.granted) == 3, "both were granted")
    assert claims.granted[1] == first
    accounted(limiter)


def test_a_waiter_never_passes_a_better_one_that_does_not_fit(claims: Claims) -> None:
    limiter = PriorityLimiter(4)
    holder = claims.holding(limiter, "holder", cost=3)
    claims.start(limiter, "big-high", hold=False, priority=Priority.HIGH, cost=4)
    claims.start(limiter, "small-low", hold=False, priority=Priority.LOW, cost=1)
    stats = waiting(limiter, 2)  # one unit is free and small-low fits it: it still waits
    assert (stats.in_use, stats.holding) == (3, 1)
    holder.leave()
    wait_until(lambda: len(claims.granted) == 3, "both were granted")
    assert claims.granted == ["holder", "big-high", "small-low"]
    accounted(limiter)


def test_a_waiter_that_fits_passes_only_worse_ones(claims: Claims) -> None:
    limiter = PriorityLimiter(4)
    holder = claims.holding(limiter, "holder", cost=3)
    claims.start(limiter, "big-low", priority=Priority.LOW, cost=2)
    small = claims.start(limiter, "small-high", priority=Priority.HIGH, cost=1)
    small.wait_entered()  # it ranks above the one that does not fit: it takes the free unit
    stats = waiting(limiter, 1)
    assert (stats.in_use, stats.waiting_by_priority) == (4, {-1: 1})
    holder.leave()
    small.leave()
    wait_until(lambda: len(claims.granted) == 3, "big-low was granted")
    assert claims.granted == ["holder", "small-high", "big-low"]


def test_a_waiter_passes_a_better_one_its_key_limit_holds_back(claims: Claims) -> None:
    limiter = PriorityLimiter(4, key_limit=2)
    holder = claims.holding(limiter, "holder-a", key="a", cost=2)
    claims.start(limiter, "a-high", priority=Priority.HIGH, key="a", cost=1)
    stats = waiting(limiter, 1)
    assert stats.held_by_key == 1
    other = claims.start(limiter, "b-low", priority=Priority.LOW, key="b", cost=1)
    other.wait_entered()
    unkeyed = claims.start(limiter, "none-low", priority=Priority.LOW, cost=1)
    unkeyed.wait_entered()  # no key: no key limit
    assert limiter.statistics().in_use == 4
    holder.leave()  # key a has room now, and two units are free
    wait_until(lambda: "a-high" in claims.granted, "a-high was granted")
    assert claims.granted == ["holder-a", "b-low", "none-low", "a-high"]
    for claim in claims.all[1:]:
        claim.leave()
    accounted(limiter)


def test_a_key_limit_counts_units_and_is_strict_within_its_key(claims: Claims) -> None:
    limiter = PriorityLimiter(10, key_limit=3)
    holder = claims.holding(limiter, "holder-a", key="a", cost=2)
    claims.start(limiter, "a-2", key="a", cost=2)  # 2 + 2 > 3 units of key a
    stats = waiting(limiter, 1)
    assert (stats.held_by_key, stats.in_use) == (1, 2)
    # 2 + 1 <= 3, but a better claim of its own key waits for units: it does not pass it.
    claims.start(limiter, "a-1", priority=Priority.LOW, key="a", cost=1)
    other = claims.start(limiter, "b-3", priority=Priority.LOW, key="b", cost=3)
    other.wait_entered()  # another key passes both
    stats = waiting(limiter, 2)
    assert (stats.held_by_key, stats.in_use) == (2, 5)
    holder.leave()  # key a: 0 of 3 units held: a-2 and a-1 both go, in one grant pass
    wait_until(lambda: len(claims.granted) == 4, "a-2 and a-1 were granted")
    assert claims.granted[:2] == ["holder-a", "b-3"]
    assert sorted(claims.granted[2:]) == ["a-1", "a-2"]
    assert limiter.statistics().in_use == 6
    for claim in claims.all[1:]:
        claim.leave()
    accounted(limiter)


def test_a_key_is_released_by_a_limiter_without_key_limits(claims: Claims) -> None:
    limiter = PriorityLimiter(1)
    with limiter.acquire(key="a"):
        behind = claims.start(limiter, "behind")
        waiting(limiter, 1)
    behind.wait_entered()  # the release woke it
    behind.leave()
    accounted(limiter)


def test_a_cost_above_the_key_limit_is_refused() -> None:
    limiter = PriorityLimiter(10, key_limit=3)
    with pytest.raises(
        ValueError,
        match=exact("cost must be at most key_limit=3, got 4 (int): it could never be granted"),
    ):
        limiter.acquire(key="a", cost=4)
    with limiter.acquire(cost=4):  # no key: the key limit does not count it
        assert limiter.statistics().in_use == 4
    assert accounted(limiter).requested == 1


def test_a_waiter_passes_a_better_one_its_key_rate_limit_holds_back(
    clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(4, clock=clock, key_rate_limit=RateLimit(1, 60.0))
    with limiter.acquire(key="a"):
        pass
    claims.start(limiter, "a-high", hold=False, priority=Priority.HIGH, key="a")
    assert waiting(limiter, 1).held_by_key == 1
    claims.holding(limiter, "b-low", priority=Priority.LOW, key="b")
    clock.advance(59.9)
    poke(limiter)
    assert waiting(limiter, 1).in_use == 1
    clock.advance(0.1)
    poke(limiter)  # the window of key a has room again
    wait_until(lambda: "a-high" in claims.granted, "a-high was granted")
    assert claims.granted == ["b-low", "a-high"]


def test_a_rate_limit_counts_grants_and_lets_the_next_in_when_its_slot_opens(
    clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(10, clock=clock, rate_limit=(2, 10.0))
    with limiter.acquire(cost=5), limiter.acquire(cost=5):
        pass
    claims.start(limiter, "low", hold=False, priority=Priority.LOW)
    clock.advance(5.0)
    claims.start(limiter, "high", hold=False, priority=Priority.HIGH)
    stats = waiting(limiter, 2)
    assert stats.rate_limited
    assert stats.rate_limit == RateLimit(2, 10.0)
    clock.advance(4.9)
    poke(limiter)
    waiting(limiter, 2)
    limiter.rate_limit = (1, 10.0)  # the two grants counted so far still count
    clock.advance(0.1)
    poke(limiter)  # one slot opens: the best goes
    wait_until(lambda: claims.granted == ["high"], "high was granted")
    assert waiting(limiter, 1).rate_limited
    clock.advance(10.0)
    poke(limiter)
    wait_until(lambda: len(claims.granted) == 2, "low was granted")
    assert claims.granted == ["high", "low"]
    accounted(limiter)


# -- capacity changed at run time -------------------------------------------------------------


def test_raising_capacity_grants_at_once_in_order(claims: Claims) -> None:
    limiter = PriorityLimiter(1)
    holder = claims.holding(limiter, "holder")
    low = claims.start(limiter, "low", priority=Priority.LOW)
    high = claims.start(limiter, "high", priority=Priority.HIGH)
    normal = claims.start(limiter, "normal")
    waiting(limiter, 3)
    limiter.capacity = 3  # the setter grants before it returns
    stats = limiter.statistics()
    assert (stats.capacity, stats.in_use, stats.holding) == (3, 3, 3)
    assert stats.waiting_by_priority == {-1: 1}
    high.wait_entered()
    normal.wait_entered()
    assert not low.entered.is_set()
    holder.leave()
    low.wait_entered()
    for claim in (low, high, normal):
        claim.leave()
    accounted(limiter)


def test_lowering_capacity_takes_nothing_back(claims: Claims) -> None:
    limiter = PriorityLimiter(3)
    holders = [claims.holding(limiter, f"holder-{i}") for i in range(3)]
    limiter.capacity = 1
    stats = limiter.statistics()
    assert (stats.capacity, stats.in_use, stats.holding) == (1, 3, 3)
    late = claims.start(limiter, "late")
    waiting(limiter, 1)
    holders[0].leave()
    holders[1].leave()
    assert waiting(limiter, 1).in_use == 1  # 1 + 1 > capacity 1: it waits
    holders[2].leave()
    late.wait_entered()
    late.leave()
    accounted(limiter)


def test_a_waiter_above_a_lowered_capacity_waits_until_it_is_raised_and_holds_back_the_rest(
    claims: Claims,
) -> None:
    limiter = PriorityLimiter(4)
    holder = claims.holding(limiter, "holder", cost=4)
    big = claims.start(limiter, "big", priority=Priority.HIGH, cost=3)
    small = claims.start(limiter, "small", priority=Priority.LOW, cost=1)
    waiting(limiter, 2)
    limiter.capacity = 2
    holder.leave()
    stats = waiting(limiter, 2)  # nothing held, big does not fit 2, small may not pass it
    assert (stats.in_use, stats.holding) == (0, 0)
    limiter.capacity = 3
    big.wait_entered()
    assert waiting(limiter, 1).in_use == 3
    big.leave()
    small.wait_entered()
    small.leave()
    accounted(limiter)


def test_a_waiter_above_a_lowered_capacity_leaves_when_its_timeout_passes(
    clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(4, clock=clock)
    holder = claims.holding(limiter, "holder", cost=4)
    big = claims.start(limiter, "big", priority=Priority.HIGH, cost=3, timeout=5.0)
    small = claims.start(limiter, "small", priority=Priority.LOW, cost=1)
    waiting(limiter, 2)
    limiter.capacity = 2
    holder.leave()
    clock.advance(4.9)
    poke(limiter)
    waiting(limiter, 2)
    clock.advance(0.1)
    poke(limiter)  # big is due: it leaves, and what it held back goes
    with pytest.raises(
        TimeoutError, match=exact("acquire timed out: its timeout passed before a grant")
    ):
        big.task.result()
    small.wait_entered()
    assert not big.entered.is_set()
    small.leave()
    stats = accounted(limiter)
    assert (stats.expired, stats.completed) == (1, 2)
    assert stats.outcomes[Priority.HIGH]["expired"] == 1


def test_math_inf_capacity_grants_every_request_at_once() -> None:
    limiter = PriorityLimiter(math.inf)
    with limiter.acquire(cost=10**6), limiter.acquire(cost=10**6):
        stats = limiter.statistics()
        assert (stats.capacity, stats.in_use) == (math.inf, 2 * 10**6)
    accounted(limiter)


def test_a_cost_beyond_float_range_never_breaks_an_infinite_limiter() -> None:
    limiter = PriorityLimiter(math.inf)
    try:
        huge = limiter.acquire(cost=10**400)
    except (TypeError, ValueError):
        return  # refused at acquire(): fine
    with huge, limiter.acquire():
        assert limiter.statistics().holding == 2


# -- timeouts ---------------------------------------------------------------------------------


def test_a_timeout_raises_timeouterror_holds_nothing_and_lets_what_it_held_back_go(
    clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(4, clock=clock)
    holder = claims.holding(limiter, "holder", cost=3)
    big = claims.start(limiter, "big", priority=Priority.HIGH, cost=2, timeout=5.0)
    small = claims.start(limiter, "small", priority=Priority.LOW, cost=1)
    waiting(limiter, 2)
    clock.advance(5.0)
    poke(limiter)
    with pytest.raises(TimeoutError):
        big.task.result()
    small.wait_entered()
    stats = limiter.statistics()
    assert (stats.in_use, stats.holding, stats.expired) == (4, 2, 1)
    holder.leave()
    small.leave()
    accounted(limiter)


def test_deadlines_are_read_on_the_limiters_clock_not_in_real_time(
    clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(1, clock=clock)
    holder = claims.holding(limiter, "holder")
    claims.start(limiter, "high", priority=Priority.HIGH)
    # A waiter keeps time for its deadline: it wakes each 0.01 real s to read the clock,
    # which does not move, so the timeout never passes.
    keeper = claims.start(limiter, "keeper", priority=Priority.LOW, timeout=0.01)
    waiting(limiter, 2)
    assert not threading.Event().wait(0.1)  # ten of its wakes, in real time
    assert waiting(limiter, 2).expired == 0
    clock.advance(0.01)  # its own next wake sees the deadline passed
    with pytest.raises(TimeoutError):
        keeper.task.result()
    assert limiter.statistics().expired == 1
    holder.leave()
    wait_until(lambda: "high" in claims.granted, "high was granted")


def test_the_time_keeping_passes_on_when_the_keeper_is_granted(
    clock: FakeClock, claims: Claims
) -> None:
    limiter = PriorityLimiter(1, clock=clock)
    holder = claims.holding(limiter, "holder")
    # The first waiter with a deadline keeps time for every waiter.
    first = claims.start(limiter, "first", priority=Priority.HIGH, timeout=1000.0)
    waiting(limiter, 1)
    wait_until(lambda: limiter._keeper is not None, "a waiter keeps time")
    later = claims.start(limiter, "later", priority=Priority.LOW, timeout=0.05)
    waiting(limiter, 2)
    holder.leave()  # first is granted and stops keeping time: later must keep its own
    first.wait_entered()
    clock.advance(0.05)
    with pytest.raises(TimeoutError):
        later.task.result()
    first.leave()
    stats = accounted(limiter)
    assert (stats.expired, stats.completed) == (1, 2)


def test_a_real_timeout_expires_a_waiter_behind_one_that_does_not_fit(claims: Claims) -> None:
    limiter = PriorityLimiter(2)
    holder = claims.holding(limiter, "holder", cost=2)
    claims.start(limiter, "big", priority=Priority.HIGH, cost=2)
    late = claims.start(limiter, "late", priority=Priority.LOW, timeout=0.05)
    with pytest.raises(TimeoutError):
        late.task.result()
    assert waiting(limiter, 1).expired == 1
    holder.leave()
    wait_until(lambda: "big" in claims.granted, "big was granted")


def test_timeout_zero_is_granted_when_it_fits_and_nothing_better_waits(claims: Claims) -> None:
    limiter = PriorityLimiter(4, key_limit=4)  # a limit: the request goes through the queue
    with limiter.acquire(timeout=0, cost=4):
        assert limiter.statistics().in_use == 4
    holder = claims.holding(limiter, "holder", cost=3)
    claims.start(limiter, "big-low", priority=Priority.LOW, cost=2)
    waiting(limiter, 1)
    with limiter.acquire(timeout=0, priority=Priority.HIGH):  # it ranks above big-low
        assert limiter.statistics().in_use == 4
    holder.leave()
    wait_until(lambda: "big-low" in claims.granted, "big-low was granted")
    assert limiter.statistics().expired == 0


@pytest.mark.parametrize("limits", [{}, {"key_limit": 4}], ids=["no-limit", "key-limit"])
def test_timeout_zero_fails_at_once_when_it_does_not_fit_or_a_better_one_waits(
    limits: dict[str, Any], claims: Claims
) -> None:
    limiter = PriorityLimiter(4, **limits)
    message = exact("acquire timed out: no units free at once (timeout=0)")
    holder = claims.holding(limiter, "holder", cost=3)
    with pytest.raises(TimeoutError, match=message), limiter.acquire(timeout=0, cost=2):
        pytest.fail("granted beyond capacity")
    claims.start(limiter, "big-high", priority=Priority.HIGH, cost=2)
    waiting(limiter, 1)
    with pytest.raises(TimeoutError, match=message), limiter.acquire(timeout=0):
        pytest.fail("passed a better waiter that does not fit")  # 1 unit is free
    stats = waiting(limiter, 1)
    assert (stats.expired, stats.in_use, stats.requested) == (2, 3, 4)
    assert stats.outcomes[Priority.NORMAL]["expired"] == 2
    holder.leave()
    wait_until(lambda: "big-high" in claims.granted, "big-high was granted")


# -- parked, not polling ----------------------------------------------------------------------


class CountingClock:
    """A fake clock that counts its readings."""

    def __init__(self) -> None:
        self.now = START
        self.reads = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.reads += 1
            return self.now

    def count(self) -> int:
        with self._lock:
            return self.reads


def test_a_waiter_without_a_deadline_parks_and_reads_no_clock(claims: Claims) -> None:
    clock = CountingClock()
    limiter = PriorityLimiter(1, clock=clock)
    holder = claims.holding(limiter, "holder")
    claims.start(limiter, "waiter")
    waiting(limiter, 1)
    assert limiter._keeper is None  # nobody parks with a timeout
    reads = clock.count()
    assert not threading.Event().wait(0.1)
    assert clock.count() == reads
    holder.leave()
    wait_until(lambda: "waiter" in claims.granted, "the waiter was granted")


def test_a_keeper_reads_the_clock_only_when_its_deadline_comes(claims: Claims) -> None:
    clock = CountingClock()
    limiter = PriorityLimiter(1, clock=clock)
    holder = claims.holding(limiter, "holder")
    claims.start(limiter, "far", timeout=100.0)  # in real time too: it parks for 100 s
    waiting(limiter, 1)
    wait_until(lambda: limiter._keeper is not None, "a waiter keeps time")
    reads = clock.count()
    assert not threading.Event().wait(0.1)
    assert clock.count() == reads
    holder.leave()
    wait_until(lambda: "far" in claims.granted, "far was granted")


# -- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"cost": 5},
            ValueError,
            "cost must be at most capacity=4, got 5 (int): it could never be granted",
        ),
        ({"cost": 0}, ValueError, "cost must be a positive integer, got 0 (int)"),
        ({"cost": -2}, ValueError, "cost must be a positive integer, got -2 (int)"),
        ({"cost": 1.0}, TypeError, "cost must be a positive integer, got 1.0 (float)"),
        ({"cost": True}, TypeError, "cost must be a positive integer, got True (bool)"),
        ({"cost": "2"}, TypeError, "cost must be a positive integer, got '2' (str)"),
        ({"cost": None}, TypeError, "cost must be a positive integer, got None (NoneType)"),
        ({"priority": "high"}, TypeError, "priority must be a real number, got 'high' (str)"),
        ({"priority": True}, TypeError, "priority must be a real number, got True (bool)"),
        ({"priority": math.nan}, ValueError, "priority must not be NaN, got nan (float)"),
        ({"timeout": -1}, ValueError, "timeout must be a non-negative number, got -1 (int)"),
        (
            {"timeout": math.nan},
            ValueError,
            "timeout must be a non-negative number, got nan (float)",
        ),
        ({"timeout": "1"}, TypeError, "timeout must be a real number or None, got '1' (str)"),
        ({"timeout": False}, TypeError, "timeout must be a real number or None, got False (bool)"),
        ({"key": []}, TypeError, "key must be hashable, got [] (list)"),
        ({"key": {"a": 1}}, TypeError, "key must be hashable, got {'a': 1} (dict)"),
    ],
)
def test_a_bad_acquire_argument_is_refused_with_the_pools_message_before_it_waits(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    limiter = PriorityLimiter(4)
    with pytest.raises(error, match=exact(message)):
        limiter.acquire(**options)
    assert limiter.statistics().requested == 0
    limiter._check_invariants()


def test_a_priority_beyond_float_range_is_refused_only_under_ageing() -> None:
    with pytest.raises(
        ValueError,
        match=exact("priority must fit in a float when ageing is set, got an int of 1329 bits"),
    ):
        PriorityLimiter(1, ageing=1.0).acquire(priority=10**400)
    limiter = PriorityLimiter(1)
    with limiter.acquire(priority=10**400):
        assert limiter.statistics().holding == 1


def test_an_int_subclass_is_a_good_cost_and_is_held_as_a_plain_int() -> None:
    limiter = PriorityLimiter(2)
    with limiter.acquire(cost=Priority.HIGH):  # an IntEnum: 1
        in_use = limiter.statistics().in_use
        assert (in_use, type(in_use)) == (1, int)
    accounted(limiter)


def test_a_cost_too_large_to_print_is_refused_with_the_limiters_message() -> None:
    message = "cost must be at most capacity=4, got an int of 16610 bits: it could never be granted"
    with pytest.raises(ValueError, match=exact(message)):
        PriorityLimiter(4).acquire(cost=10**5000)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"capacity": 0},
            ValueError,
            "capacity must be a positive integer or math.inf, got 0 (int)",
        ),
        (
            {"capacity": -1},
            ValueError,
            "capacity must be a positive integer or math.inf, got -1 (int)",
        ),
        (
            {"capacity": 1.5},
            ValueError,
            "capacity must be a positive integer or math.inf, got 1.5 (float)",
        ),
        (
            {"capacity": 2.0},
            ValueError,
            "capacity must be a positive integer or math.inf, got 2.0 (float)",
        ),
        (
            {"capacity": math.nan},
            ValueError,
            "capacity must be a positive integer or math.inf, got nan (float)",
        ),
        (
            {"capacity": True},
            TypeError,
            "capacity must be a positive integer or math.inf, got True (bool)",
        ),
        (
            {"capacity": "x"},
            TypeError,
            "capacity must be a positive integer or math.inf, got 'x' (str)",
        ),
        (
            {"capacity": None},
            TypeError,
            "capacity must be a positive integer or math.inf, got None (NoneType)",
        ),
        ({"clock": 5}, TypeError, "clock must be callable, got 5 (int)"),
        ({"ageing": 0}, ValueError, "ageing must be a positive number or None, got 0 (int)"),
        (
            {"ageing": math.inf},
            ValueError,
            "ageing must be a positive number or None, got inf (float)",
        ),
        ({"ageing": "1"}, TypeError, "ageing must be a positive number or None, got '1' (str)"),
        ({"key_limit": 0}, ValueError, "key_limit must be a positive integer or None, got 0 (int)"),
        (
            {"key_limit": 1.5},
            TypeError,
            "key_limit must be a positive integer or None, got 1.5 (float)",
        ),
        (
            {"key_limit": True},
            TypeError,
            "key_limit must be a positive integer or None, got True (bool)",
        ),
        (
            {"rate_limit": 5},
            TypeError,
            "rate_limit must be a RateLimit(starts, per) or None, got 5 (int)",
        ),
        (
            {"rate_limit": (0, 1.0)},
            ValueError,
            "rate_limit starts must be a positive integer, got 0 (int)",
        ),
        (
            {"rate_limit": (1, 0)},
            ValueError,
            "rate_limit per must be a positive number of seconds, got 0 (int)",
        ),
        (
            {"key_rate_limit": (1, "s")},
            TypeError,
            "key_rate_limit per must be a positive number of seconds, got 's' (str)",
        ),
    ],
)
def test_a_bad_constructor_argument_is_refused_with_the_pools_message(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    arguments: dict[str, Any] = {"capacity": 1, **options}
    capacity = arguments.pop("capacity")
    with pytest.raises(error, match=exact(message)):
        PriorityLimiter(capacity, **arguments)


def test_a_bad_setting_is_refused_and_changes_nothing() -> None:
    limiter = PriorityLimiter(3, key_limit=2)
    with pytest.raises(
        ValueError, match=exact("capacity must be a positive integer or math.inf, got 0 (int)")
    ):
        limiter.capacity = 0
    with pytest.raises(
        TypeError, match=exact("key_limit must be a positive integer or None, got '2' (str)")
    ):
        limiter.key_limit = "2"  # type: ignore[assignment]
    with pytest.raises(
        TypeError, match=exact("rate_limit must be a RateLimit(starts, per) or None, got 1 (int)")
    ):
        limiter.rate_limit = 1  # type: ignore[assignment]
    assert (limiter.capacity, limiter.key_limit, limiter.rate_limit) == (3, 2, None)
    limiter.rate_limit = (5, 1.0)
    limiter.key_rate_limit = RateLimit(2, 3.0)
    stats = limiter.statistics()
    assert (stats.rate_limit, stats.key_rate_limit, stats.key_limit) == (
        RateLimit(5, 1.0),
        RateLimit(2, 3.0),
        2,
    )
    limiter._check_invariants()


def test_a_log_handler_that_reads_the_limiter_while_its_clock_raises_does_not_deadlock(
    claims: Claims,
) -> None:
    class Failing:
        broken = True

        def __call__(self) -> float:
            if self.broken:
                raise OSError("no clock")
            return 0.0

    clock = Failing()
    limiter = PriorityLimiter(1, clock=clock)
    seen: list[int] = []

    class Reader(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(limiter.statistics().requested)  # takes the limiter's lock

    handler = Reader(level=logging.CRITICAL)
    logger = logging.getLogger("concurrent.futures")  # the package logs where the pool's does
    logger.addHandler(handler)
    try:
        holder = claims.holding(limiter, "holder")
        waiter = claims.start(limiter, "waiter")  # its stamp reads the failing clock
        waiting(limiter, 1)
        holder.leave()
        waiter.wait_entered()
        waiter.leave()
    finally:
        logger.removeHandler(handler)
        clock.broken = False
    assert seen, "the clock's failure was not logged"
    accounted(limiter)
