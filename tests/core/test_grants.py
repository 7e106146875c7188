"""A limiter's policy alone: :class:`~priority_executor._grants.Grants` driven directly.

No thread, no loop, a fake clock: each test plays the limiter's part (request, release,
abandon, expire, change a setting) and checks what each call returned, the grants and the
expiries, with the invariants checked after every step. What it proves: grants are strict
(no request passes a better one that does not fit, unless that one's key holds it back),
costs count against ``capacity`` and ``key_limit`` in units, a key held back for want of
units is let go as soon as that can change, and ``timeout=0`` grants only at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable
from typing import Optional

import pytest

from priority_executor import RateLimit
from priority_executor._grants import Grants, Request
from priority_executor._policy import Number

START = 1000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class Waiter:
    """The handle a limiter queues: settled once granted or expired."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.settled = False

    def done(self) -> bool:
        return self.settled

    def __repr__(self) -> str:
        return self.name


class Limiter:
    """The owner's part, single-threaded: what each call granted and expired, by name."""

    def __init__(self, capacity: float, **limits: object) -> None:
        self.clock = Clock()
        self.grants = Grants(
            capacity,
            clock=self.clock,
            ageing=None,
            rate_limit=limits.get("rate_limit"),
            key_limit=limits.get("key_limit"),
            key_rate_limit=limits.get("key_rate_limit"),
        )
        self.requests: dict[str, Request] = {}
        self.granted: list[str] = []
        self.expired: list[str] = []

    def _settle(self, granted: list[Request], expired: list[Request]) -> None:
        for request in granted + expired:
            waiter = request.future
            assert isinstance(waiter, Waiter)
            waiter.settled = True
        self.granted += [str(request.future) for request in granted]
        self.expired += [str(request.future) for request in expired]
        self.grants.core.take_todo()
        self.grants.check_invariants()

    def request(
        self,
        name: str,
        priority: Number = 0,
        cost: int = 1,
        key: Hashable = None,
        timeout: Optional[float] = None,
    ) -> bool:
        """True if it waits."""
        level, seconds, key, cost = self.grants.check(priority, timeout, key, cost)
        request = self.requests[name] = Request(Waiter(name), level, key, cost)
        granted: list[Request] = []
        expired: list[Request] = []
        if self.grants.at_once(request):  # as the owners do: the way without the queue first
            granted.append(request)
            waits = False
        else:
            waits = self.grants.request(request, seconds, granted, expired)
        self._settle(granted, expired)
        return waits

    def release(self, name: str, outcome: str = "completed") -> None:
        granted: list[Request] = []
        expired: list[Request] = []
        self.grants.release(self.requests[name], outcome, granted, expired)  # type: ignore[arg-type]
        self._settle(granted, expired)

    def abandon(self, name: str) -> None:
        granted: list[Request] = []
        expired: list[Request] = []
        self.grants.abandon(self.requests[name], granted, expired)
        self._settle(granted, expired)

    def expire(self, advance: float) -> None:
        self.clock.now += advance
        granted: list[Request] = []
        expired: list[Request] = []
        self.grants.expire(self.clock.now, granted, expired)
        self._settle(granted, expired)

    def change(self, name: str, value: object) -> None:
        core = self.grants.core
        if name == "capacity":
            core.capacity = value  # type: ignore[assignment]
        else:
            core.change_limit(name, value)  # type: ignore[arg-type]
        granted: list[Request] = []
        expired: list[Request] = []
        self.grants.grant(granted, expired)
        self._settle(granted, expired)

    def take_grants(self) -> list[str]:
        granted, self.granted = self.granted, []
        return granted


def test_a_request_that_does_not_fit_holds_back_every_request_ranked_below_it() -> None:
    limiter = Limiter(3)
    assert not limiter.request("held", cost=2)
    assert limiter.request("big", priority=1, cost=2)
    assert limiter.request("small", priority=0, cost=1)  # one unit is free, but big is first
    assert limiter.take_grants() == ["held"]
    limiter.release("held")
    assert limiter.take_grants() == ["big", "small"]
    assert limiter.grants.core.running == 3


def test_costs_count_in_units_against_capacity() -> None:
    limiter = Limiter(4)
    for name, cost in [("a", 1), ("b", 2), ("c", 1)]:
        assert not limiter.request(name, cost=cost)
    assert limiter.request("d")
    assert limiter.grants.statistics().in_use == 4
    limiter.release("b")
    assert limiter.take_grants() == ["a", "b", "c", "d"]
    assert limiter.grants.statistics().in_use == 3


def test_a_request_its_key_holds_back_for_want_of_units_is_passed_by_other_keys() -> None:
    limiter = Limiter(10, key_limit=2)
    assert not limiter.request("a1", key="a")
    assert limiter.request("a2", priority=5, cost=2, key="a")  # a has 1 unit of 2 free
    assert not limiter.request("b1", key="b")  # passes a2: a's limit holds a2 back
    assert limiter.take_grants() == ["a1", "b1"]
    assert limiter.grants.statistics().held_by_key == 1
    limiter.release("a1")
    assert limiter.take_grants() == ["a2"]


def test_a_key_held_back_for_want_of_units_lets_its_next_request_go_once_the_first_leaves() -> None:
    limiter = Limiter(10, key_limit=2)
    limiter.request("a1", key="a")
    assert limiter.request("a-big", priority=5, cost=2, key="a")
    assert limiter.request("a-small", priority=0, cost=1, key="a")  # behind a-big in its key
    assert limiter.take_grants() == ["a1"]
    limiter.abandon("a-big")
    assert limiter.take_grants() == ["a-small"]


def test_a_key_held_back_for_want_of_units_lets_a_better_request_of_it_that_fits_go() -> None:
    limiter = Limiter(10, key_limit=2)
    limiter.request("a1", key="a")
    assert limiter.request("a-big", priority=0, cost=2, key="a")
    assert not limiter.request("a-urgent", priority=5, cost=1, key="a")
    assert limiter.take_grants() == ["a1", "a-urgent"]
    assert limiter.requests["a-big"].queued


def test_a_key_held_back_for_want_of_units_goes_on_when_its_first_expires() -> None:
    limiter = Limiter(10, key_limit=2)
    limiter.request("a1", key="a")
    assert limiter.request("a-big", priority=5, cost=2, key="a", timeout=1.0)
    assert limiter.request("a-small", cost=1, key="a")
    limiter.expire(1.0)
    assert limiter.expired == ["a-big"]
    assert limiter.take_grants() == ["a1", "a-small"]


def test_key_limit_lowered_below_a_queued_cost_holds_it_until_raised() -> None:
    limiter = Limiter(10, key_limit=2)
    limiter.request("a1", key="a")
    assert limiter.request("a-big", cost=2, key="a")  # 1 + 2 units of 2
    limiter.change("key_limit", 1)
    limiter.release("a1")
    assert limiter.take_grants() == ["a1"]  # 0 + 2 units of 1: it waits
    assert not limiter.request("b1", key="b")  # other keys go meanwhile
    limiter.change("key_limit", 2)
    assert limiter.take_grants() == ["b1", "a-big"]


def test_capacity_lowered_below_a_queued_cost_holds_it_until_raised_and_takes_nothing_back() -> (
    None
):
    limiter = Limiter(4)
    limiter.request("a", cost=3)
    limiter.change("capacity", 2)
    assert limiter.grants.core.running == 3  # nothing taken back
    assert limiter.request("big", priority=1, cost=2)
    assert limiter.request("small", priority=0, cost=1)
    limiter.release("a")
    assert limiter.take_grants() == ["a", "big"]  # big fits the new capacity; small waits
    limiter.change("capacity", 1)
    limiter.release("big")
    assert limiter.take_grants() == ["small"]
    assert limiter.request("two", cost=1)
    limiter.change("capacity", math.inf)
    assert limiter.take_grants() == ["two"]


def test_a_best_request_that_does_not_fit_and_is_due_expires_and_lets_the_next_go() -> None:
    limiter = Limiter(2)
    limiter.request("held", cost=1)
    assert limiter.request("big", priority=1, cost=2, timeout=1.0)
    assert limiter.request("small")
    limiter.clock.now += 1.0  # no timer turn yet: the next grant finds big due
    limiter.change("capacity", 2)
    assert limiter.expired == ["big"]
    assert limiter.take_grants() == ["held", "small"]


def test_timeout_zero_grants_only_at_once_and_counts_the_refusal_expired() -> None:
    limiter = Limiter(2)
    assert not limiter.request("a", timeout=0)
    assert limiter.request("b", priority=1, cost=2)
    assert not limiter.request("now", priority=0, timeout=0)  # one unit free, but b is first
    assert limiter.take_grants() == ["a"]
    stats = limiter.grants.statistics()
    assert (stats.expired, stats.waiting, stats.requested) == (1, 1, 3)
    assert not limiter.requests["now"].queued


def test_a_rate_limit_counts_grants_whatever_their_cost() -> None:
    limiter = Limiter(10, rate_limit=RateLimit(2, 1.0))
    limiter.request("a", cost=3)
    limiter.request("b", cost=3)
    assert limiter.request("c", cost=1)
    assert limiter.take_grants() == ["a", "b"]
    limiter.expire(1.0)
    assert limiter.take_grants() == ["c"]


@pytest.mark.parametrize(
    ("cost", "error", "message"),
    [
        (0, ValueError, "cost must be a positive integer, got 0 (int)"),
        (-1, ValueError, "cost must be a positive integer, got -1 (int)"),
        (1.0, TypeError, "cost must be a positive integer, got 1.0 (float)"),
        (True, TypeError, "cost must be a positive integer, got True (bool)"),
        ("2", TypeError, "cost must be a positive integer, got '2' (str)"),
        (5, ValueError, "cost must be at most capacity=4, got 5 (int): it could never be granted"),
    ],
)
def test_a_bad_cost_is_refused_with_an_exact_message(
    cost: object, error: type[Exception], message: str
) -> None:
    limiter = Limiter(4)
    with pytest.raises(error) as raised:
        limiter.grants.check(0, None, None, cost)
    assert str(raised.value) == message


def test_a_cost_above_key_limit_is_refused_only_with_a_key() -> None:
    limiter = Limiter(4, key_limit=2)
    message = "cost must be at most key_limit=2, got 3 (int): it could never be granted"
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        limiter.grants.check(0, None, "a", 3)
    assert str(raised.value) == message
    assert limiter.grants.check(0, None, None, 3)[3] == 3


def test_waits_and_holds_are_recorded_per_priority_class_on_the_limiters_clock() -> None:
    limiter = Limiter(1)
    limiter.request("first")  # granted at once: waited 0
    limiter.request("urgent", priority=1)
    limiter.clock.now += 2.0
    limiter.release("first")
    limiter.clock.now += 0.5
    limiter.release("urgent", "failed")
    stats = limiter.grants.statistics()
    assert (stats.wait[0].total, stats.hold[0].total) == (0.0, 2.0)
    assert (stats.wait[1].total, stats.hold[1].total) == (2.0, 0.5)
    assert stats.outcomes[1]["failed"] == 1
    assert (stats.completed, stats.failed, stats.in_use, stats.holding) == (1, 1, 0, 0)


def test_a_key_held_back_for_want_of_units_keeps_its_mark_past_its_rate_window() -> None:
    limiter = Limiter(10, key_limit=2, key_rate_limit=RateLimit(5, 10.0))
    limiter.request("a1", key="a")
    assert limiter.request("big", cost=2, key="a")
    limiter.change("key_limit", 1)  # big no longer fits its key: it waits until raised
    limiter.clock.now += 1.0
    limiter.release("a1")
    limiter.clock.now += 10.0  # a's starts leave its window: a take forgets idle keys
    assert not limiter.request("z", key="z")
    assert not limiter.request("small", priority=10, key="a")  # a holds 0 of its 1 unit
    assert limiter.take_grants() == ["a1", "z", "small"]
    limiter.abandon("big")
    limiter.release("small")
    limiter.release("z")
    assert limiter.grants.statistics().in_use == 0


@pytest.mark.parametrize("limits", [{}, {"key_limit": 3}, {"rate_limit": RateLimit(5, 1.0)}])
def test_a_timeout_too_short_to_outlast_its_stamping_is_granted_when_it_fits(
    limits: dict[str, object],
) -> None:
    limiter = Limiter(5, **limits)
    assert not limiter.request("tiny", timeout=1e-14)  # below the clock's resolution at 1000 s
    assert limiter.take_grants() == ["tiny"]
    assert limiter.request("big", priority=5, cost=5)
    assert not limiter.request("refused", priority=1, timeout=1e-14)  # big goes first
    assert limiter.take_grants() == []
    stats = limiter.grants.statistics()
    assert (stats.expired, stats.waiting, stats.holding) == (1, 1, 1)
