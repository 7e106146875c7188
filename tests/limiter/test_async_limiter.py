"""AsyncPriorityLimiter: the surface, point by point, on asyncio's loop and on uvloop.

Every test that waits runs on a fresh loop of each kind (``aio_support.drive``), which fails
it on anything the loop reports. Nothing sleeps to synchronise: a test holds units itself
(``take``), starts Tasks that record the order in which they enter their blocks
(``Waiters``), and lets the loop run its ready callbacks with ``settle()``.

Timeouts and rate slots are read from a ``FakeClock``. The limiter's timer is a
``loop.call_later`` whose delay, in real seconds, was computed from the fake clock when it
was armed; moving the fake clock does not move it. So a test that moves the clock calls the
timer's callback itself, on the loop (``fire_timer``), as the loop would once that delay had
passed. One test (``test_a_timeout_expires_on_the_real_clock_by_the_limiters_own_timer``)
lets the real timer do it.
"""

from __future__ import annotations

import asyncio
import math
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from aio_support import LOOPS, drive, new_loop, settle
from conftest import TIMEOUT, FakeClock
from limiter_support import accounted, fire_timer, take
from priority_executor import AsyncPriorityLimiter, Priority, RateLimit
from support import exact

LOOP = pytest.mark.parametrize("kind", LOOPS)

BOUND_MESSAGE = (
    "AsyncPriorityLimiter is bound to another event loop, where requests wait or hold units:"
    " use it from one loop at a time"
)
EXPIRED_MESSAGE = "acquire timed out: its timeout passed before a grant"
AT_ONCE_MESSAGE = "acquire timed out: no units free at once (timeout=0)"


# -- helpers -----------------------------------------------------------------------------------


class Waiters:
    """Tasks that acquire from a limiter, record the order they enter their blocks in, and
    hold their units until the test releases them (or not at all: ``hold=False``)."""

    def __init__(self, limiter: AsyncPriorityLimiter) -> None:
        self.limiter = limiter
        self.order: list[str] = []  # names, as they entered their blocks
        self.inside: dict[str, int] = {}  # name: cost, while inside its block
        self.most = 0  # the most units ever held inside blocks at once
        self.tasks: dict[str, asyncio.Task[str]] = {}
        self._release: dict[str, asyncio.Event] = {}

    def start(self, name: str, *, hold: bool = False, cost: int = 1, **options: Any) -> None:
        release = self._release[name] = asyncio.Event()
        if not hold:
            release.set()
        acquisition = self.limiter.acquire(cost=cost, **options)

        async def body() -> str:
            async with acquisition:
                self.order.append(name)
                self.inside[name] = cost
                self.most = max(self.most, self.units)
                try:
                    await asyncio.wait_for(release.wait(), TIMEOUT)
                finally:
                    del self.inside[name]
            return name

        self.tasks[name] = asyncio.get_running_loop().create_task(body())

    def release(self, name: str) -> None:
        self._release[name].set()

    @property
    def units(self) -> int:
        return sum(self.inside.values())

    async def finish(self) -> list[str]:
        """Release every waiter and wait for all; the order they entered their blocks in."""
        for release in self._release.values():
            release.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks.values()), TIMEOUT)
        return self.order


async def never_granted(limiter: AsyncPriorityLimiter, **options: Any) -> None:
    """Acquire from ``limiter``, which must raise rather than grant."""
    async with limiter.acquire(**options):
        raise AssertionError(f"granted: {limiter.statistics()}")


def waiting(limiter: AsyncPriorityLimiter) -> int:
    return limiter.statistics().waiting


# -- 1. granting, and giving back ----------------------------------------------------------------


@LOOP
def test_acquire_grants_free_units_at_once_and_gives_them_back_on_exit(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(3)
        async with limiter.acquire(cost=2):
            stats = limiter.statistics()
            assert (stats.in_use, stats.holding, stats.waiting) == (2, 1, 0)
            async with limiter.acquire():
                assert limiter.statistics().in_use == 3
            assert limiter.statistics().in_use == 2
        stats = accounted(limiter)
        assert (stats.requested, stats.completed) == (2, 2)

    drive(kind, main)


@LOOP
def test_waiters_are_granted_highest_priority_first_and_in_arrival_order_among_equals(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        waiters = Waiters(limiter)
        give_back = await take(limiter)
        for name, priority in [
            ("low", Priority.LOW),
            ("normal 1", Priority.NORMAL),
            ("high 1", Priority.HIGH),
            ("normal 2", Priority.NORMAL),
            ("high 2", Priority.HIGH),
            ("2.5", 2.5),
        ]:
            waiters.start(name, priority=priority)
        await settle()
        stats = limiter.statistics()
        assert stats.waiting == 6
        assert dict(stats.waiting_by_priority) == {2.5: 1, 1: 2, 0: 2, -1: 1}
        assert waiters.order == []
        await give_back()
        order = await waiters.finish()
        assert order == ["2.5", "high 1", "high 2", "normal 1", "normal 2", "low"]
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_ageing_lets_an_old_low_waiter_overtake_newer_higher_ones(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(1, clock=clock, ageing=1.0)
        waiters = Waiters(limiter)
        give_back = await take(limiter)
        waiters.start("old low", priority=0)
        await settle()
        clock.advance(5.0)  # five steps of priority: it ranks as 5 now
        waiters.start("new 3", priority=3)
        waiters.start("new 6", priority=6)
        await settle()
        await give_back()
        assert await waiters.finish() == ["new 6", "old low", "new 3"]
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_a_waiter_never_passes_a_better_one_whose_cost_does_not_fit_yet(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(4)
        waiters = Waiters(limiter)
        give_back = await take(limiter, cost=3)
        waiters.start("high, cost 2", priority=Priority.HIGH, cost=2, hold=True)
        waiters.start("normal, cost 1", cost=1, hold=True)  # 1 unit is free: it would fit
        await settle()
        stats = limiter.statistics()
        assert (stats.in_use, stats.waiting) == (3, 2), "the cheaper one passed the better one"
        assert waiters.order == []
        await give_back()
        await settle()
        # Both fit once 3 units come back: granted in order, both at once.
        assert waiters.order == ["high, cost 2", "normal, cost 1"]
        assert waiters.units == limiter.statistics().in_use == 3
        await waiters.finish()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_a_waiter_held_back_by_its_key_limit_lets_one_of_another_key_pass(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(4, key_limit=2)
        waiters = Waiters(limiter)
        give_back = await take(limiter, key="a", cost=2)
        waiters.start("high a", priority=Priority.HIGH, key="a", hold=True)
        waiters.start("normal b", key="b", cost=2, hold=True)
        await settle()
        assert waiters.order == ["normal b"]
        stats = limiter.statistics()
        assert (stats.in_use, stats.waiting, stats.held_by_key) == (4, 1, 1)
        await give_back()  # key a has room again; so has the limiter
        await settle()
        assert waiters.order == ["normal b", "high a"]
        await waiters.finish()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_key_limit_counts_units_not_grants(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(10, key_limit=3)
        waiters = Waiters(limiter)
        give_back = await take(limiter, key="a", cost=2)
        waiters.start("a costs 2", key="a", cost=2, hold=True)  # 2 + 2 > 3 units of key a
        await settle()
        assert waiters.order == []
        assert limiter.statistics().held_by_key == 1
        async with limiter.acquire(key="b", cost=3):  # another key is not held back
            assert limiter.statistics().in_use == 5
        await give_back()
        await settle()
        assert waiters.order == ["a costs 2"]
        async with limiter.acquire(key="a", cost=1):  # 2 + 1 units: within the limit
            assert limiter.statistics().in_use == 3
        await waiters.finish()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_raising_capacity_grants_waiters_at_once_in_order(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        waiters = Waiters(limiter)
        give_back = await take(limiter, cost=2)
        waiters.start("normal", hold=True)
        waiters.start("low", priority=Priority.LOW, hold=True)
        waiters.start("high", priority=Priority.HIGH, cost=2, hold=True)
        await settle()
        limiter.capacity = 5  # 3 free: high (2) and normal (1); low waits
        stats = limiter.statistics()
        assert (stats.capacity, stats.in_use, stats.waiting) == (5, 5, 1), "granted in the call"
        await settle()
        assert waiters.order == ["high", "normal"]
        limiter.capacity = math.inf
        await settle()
        assert waiters.order == ["high", "normal", "low"]
        await give_back()
        await waiters.finish()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_lowering_capacity_takes_nothing_back_and_a_waiter_that_no_longer_fits_waits(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(4)
        waiters = Waiters(limiter)
        give_back = await take(limiter, cost=3)
        waiters.start("high, cost 3", priority=Priority.HIGH, cost=3, hold=True)
        waiters.start("normal, cost 1", hold=True)
        await settle()
        limiter.capacity = 2
        stats = limiter.statistics()
        assert (stats.capacity, stats.in_use, stats.holding) == (2, 3, 1), "took units back"
        await give_back()
        await settle()
        # Cost 3 no longer fits capacity 2: it waits, and holds back the one below it.
        stats = limiter.statistics()
        assert (stats.in_use, stats.waiting) == (0, 2)
        assert waiters.order == []
        limiter._check_invariants()
        limiter.capacity = 3
        await settle()
        assert waiters.order == ["high, cost 3"]
        waiters.release("high, cost 3")
        await settle()
        assert waiters.order == ["high, cost 3", "normal, cost 1"]
        await waiters.finish()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_a_waiter_that_no_longer_fits_capacity_leaves_by_its_timeout_and_frees_those_below(
    kind: str,
) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(4, clock=clock)
        waiters = Waiters(limiter)
        give_back = await take(limiter, cost=4)
        waiters.start("big", priority=Priority.HIGH, cost=4, timeout=5.0)
        waiters.start("small", cost=1)
        await settle()
        limiter.capacity = 2
        await give_back()
        await settle()
        assert waiters.order == [], "cost 4 granted above capacity 2"
        clock.advance(5.0)
        fire_timer(limiter)
        await settle()
        with pytest.raises(TimeoutError, match=exact(EXPIRED_MESSAGE)):
            await waiters.tasks["big"]
        assert await waiters.tasks["small"] == "small"
        stats = accounted(limiter)
        assert (stats.expired, stats.completed) == (1, 2)

    drive(kind, main)


@LOOP
def test_a_keyed_acquire_granted_at_once_with_no_limit_set_gives_its_units_back(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        async with limiter.acquire(key="k"):
            assert limiter.statistics().in_use == 1
        assert accounted(limiter).completed == 1

    drive(kind, main)


@LOOP
def test_a_key_limit_set_while_keyed_units_are_held_counts_them(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(4)
        give_back = await take(limiter, key="k", cost=2)  # granted at once: no limit yet
        limiter.key_limit = 2  # key k is full
        with pytest.raises(TimeoutError, match=exact(AT_ONCE_MESSAGE)):
            await never_granted(limiter, key="k", timeout=0)
        await give_back()
        accounted(limiter)

    drive(kind, main)


# -- 2. arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"cost": 0}, ValueError, "cost must be a positive integer, got 0 (int)"),
        ({"cost": -1}, ValueError, "cost must be a positive integer, got -1 (int)"),
        ({"cost": 1.5}, TypeError, "cost must be a positive integer, got 1.5 (float)"),
        ({"cost": True}, TypeError, "cost must be a positive integer, got True (bool)"),
        ({"cost": "2"}, TypeError, "cost must be a positive integer, got '2' (str)"),
        (
            {"cost": 5},
            ValueError,
            "cost must be at most capacity=4, got 5 (int): it could never be granted",
        ),
        (
            {"cost": 3, "key": "k"},
            ValueError,
            "cost must be at most key_limit=2, got 3 (int): it could never be granted",
        ),
        ({"priority": "high"}, TypeError, "priority must be a real number, got 'high' (str)"),
        ({"timeout": -1}, ValueError, "timeout must be a non-negative number, got -1 (int)"),
        ({"key": []}, TypeError, "key must be hashable, got [] (list)"),
    ],
    ids=repr,
)
def test_a_bad_acquire_argument_is_refused_by_acquire_itself_with_an_exact_message(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    limiter = AsyncPriorityLimiter(4, key_limit=2)
    with pytest.raises(error, match=exact(message)):
        limiter.acquire(**options)  # no loop needed: refused before anything waits
    assert limiter.statistics().requested == 0
    limiter._check_invariants()


def test_a_cost_above_key_limit_is_refused_only_with_a_key() -> None:
    limiter = AsyncPriorityLimiter(4, key_limit=2)

    async def main() -> None:
        async with limiter.acquire(cost=3):  # no key: key_limit does not apply
            assert limiter.statistics().in_use == 3

    drive("asyncio", main)
    accounted(limiter)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"capacity": 0},
            ValueError,
            "capacity must be a positive integer or math.inf, got 0 (int)",
        ),
        (
            {"capacity": 1.5},
            ValueError,
            "capacity must be a positive integer or math.inf, got 1.5 (float)",
        ),
        (
            {"capacity": True},
            TypeError,
            "capacity must be a positive integer or math.inf, got True (bool)",
        ),
        (
            {"capacity": "1"},
            TypeError,
            "capacity must be a positive integer or math.inf, got '1' (str)",
        ),
        ({"clock": 1}, TypeError, "clock must be callable, got 1 (int)"),
        ({"ageing": 0}, ValueError, "ageing must be a positive number or None, got 0 (int)"),
        (
            {"rate_limit": (0, 1.0)},
            ValueError,
            "rate_limit starts must be a positive integer, got 0 (int)",
        ),
        (
            {"rate_limit": 5},
            TypeError,
            "rate_limit must be a RateLimit(starts, per) or None, got 5 (int)",
        ),
        ({"key_limit": 0}, ValueError, "key_limit must be a positive integer or None, got 0 (int)"),
        (
            {"key_rate_limit": (1, 0)},
            ValueError,
            "key_rate_limit per must be a positive number of seconds, got 0 (int)",
        ),
    ],
    ids=repr,
)
def test_a_bad_constructor_argument_is_refused_with_an_exact_message(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    arguments = {"capacity": 4, **options}
    with pytest.raises(error, match=exact(message)):
        AsyncPriorityLimiter(**arguments)


def test_settings_are_checked_when_set_and_a_refused_one_changes_nothing() -> None:
    limiter = AsyncPriorityLimiter(4)
    with pytest.raises(
        ValueError, match=exact("capacity must be a positive integer or math.inf, got 0 (int)")
    ):
        limiter.capacity = 0
    with pytest.raises(
        TypeError, match=exact("rate_limit must be a RateLimit(starts, per) or None, got 5 (int)")
    ):
        limiter.rate_limit = 5  # type: ignore[assignment]
    with pytest.raises(
        ValueError, match=exact("key_limit must be a positive integer or None, got -2 (int)")
    ):
        limiter.key_limit = -2
    assert (limiter.capacity, limiter.rate_limit, limiter.key_limit) == (4, None, None)
    limiter.key_rate_limit = (3, 2.0)
    assert limiter.key_rate_limit == RateLimit(3, 2.0)
    assert repr(limiter) == "<AsyncPriorityLimiter capacity=4 in_use=0 waiting=0>"
    limiter._check_invariants()


@LOOP
def test_entering_one_acquisition_twice_is_refused(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        acquisition = limiter.acquire()
        async with acquisition:
            with pytest.raises(
                RuntimeError, match=exact("this acquisition is held already: call acquire() again")
            ):
                await acquisition.__aenter__()
            assert limiter.statistics().in_use == 1
        async with acquisition:  # given back: it may be entered again
            assert limiter.statistics().in_use == 1
        stats = accounted(limiter)
        assert stats.completed == 2

    drive(kind, main)


# -- 3. timeouts ---------------------------------------------------------------------------------


@LOOP
def test_a_timeout_raises_the_builtin_timeout_error_and_leaves_nothing_held(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(1, clock=clock)
        give_back = await take(limiter)
        waiters = Waiters(limiter)
        waiters.start("timed", timeout=2.0)
        await settle()
        clock.advance(1.9)
        fire_timer(limiter)
        await settle()
        assert waiting(limiter) == 1, "expired before its timeout"
        clock.advance(0.1)
        fire_timer(limiter)
        await settle()
        error = waiters.tasks["timed"].exception()
        assert type(error) is TimeoutError  # the builtin (asyncio.TimeoutError is not, on 3.10)
        assert str(error) == EXPIRED_MESSAGE
        stats = limiter.statistics()
        assert (stats.in_use, stats.holding, stats.waiting, stats.expired) == (1, 1, 0, 1)
        await give_back()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_a_timeout_expires_on_the_real_clock_by_the_limiters_own_timer(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        give_back = await take(limiter)
        with pytest.raises(TimeoutError, match=exact(EXPIRED_MESSAGE)):
            async with limiter.acquire(timeout=0.01):
                raise AssertionError("granted while the unit was held")
        await give_back()
        assert accounted(limiter).expired == 1

    drive(kind, main)


@LOOP
def test_a_waiter_that_times_out_lets_go_the_waiters_it_was_holding_back(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(4, clock=clock)
        waiters = Waiters(limiter)
        give_back = await take(limiter, cost=3)
        waiters.start("high, cost 4", priority=Priority.HIGH, cost=4, timeout=1.0)
        waiters.start("normal, cost 1", hold=True)
        await settle()
        assert waiters.order == []
        clock.advance(1.0)
        fire_timer(limiter)
        await settle()
        assert waiters.order == ["normal, cost 1"]
        with pytest.raises(TimeoutError):
            await waiters.tasks.pop("high, cost 4")
        await give_back()
        await waiters.finish()
        assert accounted(limiter).expired == 1

    drive(kind, main)


@LOOP
def test_timeout_zero_is_granted_at_once_if_it_fits_and_nothing_better_waits(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(4)
        waiters = Waiters(limiter)
        async with limiter.acquire(timeout=0, cost=4):  # free: granted at once
            assert limiter.statistics().in_use == 4
        give_back = await take(limiter, cost=2)
        waiters.start("low, cost 3", priority=Priority.LOW, cost=3)
        await settle()
        # It fits, and only a worse one waits: granted.
        async with limiter.acquire(timeout=0, priority=Priority.HIGH, cost=2):
            assert limiter.statistics().in_use == 4
        # It fits, but an equal one ahead of it waits: refused at once.
        with pytest.raises(TimeoutError, match=exact(AT_ONCE_MESSAGE)):
            async with limiter.acquire(timeout=0, priority=Priority.LOW):
                raise AssertionError("passed a waiter ranked above it")
        # It does not fit: refused at once.
        with pytest.raises(TimeoutError, match=exact(AT_ONCE_MESSAGE)) as caught:
            async with limiter.acquire(timeout=0, priority=Priority.HIGH, cost=3):
                raise AssertionError("granted units that were not free")
        assert type(caught.value) is TimeoutError
        stats = limiter.statistics()
        assert (stats.expired, stats.waiting, stats.in_use) == (2, 1, 2)
        await give_back()
        assert await waiters.finish() == ["low, cost 3"]
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_timeout_zero_on_a_full_limiter_with_limits_set_is_refused_and_counted(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1, key_limit=1)  # no fast path: through the queue
        give_back = await take(limiter, key="a")
        with pytest.raises(TimeoutError, match=exact(AT_ONCE_MESSAGE)):
            async with limiter.acquire(timeout=0, key="b"):
                raise AssertionError("granted above capacity")
        await give_back()
        async with limiter.acquire(timeout=0, key="b"):
            assert limiter.statistics().in_use == 1
        stats = accounted(limiter)
        assert (stats.expired, stats.completed) == (1, 2)

    drive(kind, main)


# -- 4. cancellation -----------------------------------------------------------------------------


@LOOP
def test_a_cancelled_waiting_task_leaves_the_queue_at_once_and_is_counted(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        waiters = Waiters(limiter)
        give_back = await take(limiter)
        waiters.start("cancelled", priority=Priority.HIGH)
        waiters.start("next")
        await settle()
        assert waiting(limiter) == 2
        waiters.tasks["cancelled"].cancel()
        await asyncio.sleep(0)  # its Task's one step: it leaves as it resumes
        stats = limiter.statistics()
        assert (stats.waiting, stats.cancelled) == (1, 1)
        assert waiters.tasks["cancelled"].cancelled()
        await give_back()
        del waiters.tasks["cancelled"]
        assert await waiters.finish() == ["next"]
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_cancelling_a_waiter_that_did_not_fit_lets_the_ones_below_it_in(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        waiters = Waiters(limiter)
        give_back = await take(limiter)
        waiters.start("high, cost 2", priority=Priority.HIGH, cost=2)
        waiters.start("normal", hold=True)
        await settle()
        assert waiters.order == []
        waiters.tasks.pop("high, cost 2").cancel()
        await settle()
        assert waiters.order == ["normal"]
        await give_back()
        await waiters.finish()
        assert accounted(limiter).cancelled == 1

    drive(kind, main)


@LOOP
def test_a_grant_made_as_its_task_is_cancelled_passes_to_the_next_waiter(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        waiters = Waiters(limiter)
        give_back = await take(limiter)
        waiters.start("granted then cancelled")
        waiters.start("next", hold=True)
        await settle()
        await give_back()  # grants "granted then cancelled" its unit...
        assert limiter.statistics().in_use == 1
        waiters.tasks.pop("granted then cancelled").cancel()  # ...before its Task resumes
        await settle()
        assert waiters.order == ["next"]
        stats = limiter.statistics()
        assert (stats.in_use, stats.holding, stats.cancelled) == (1, 1, 1)
        await waiters.finish()
        stats = accounted(limiter)
        assert (stats.requested, stats.completed, stats.cancelled) == (3, 2, 1)

    drive(kind, main)


@LOOP
def test_asyncio_timeout_around_acquire_leaves_the_cancel_count_as_asyncio_expects(
    kind: str,
) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout and Task.cancelling() are 3.11+")

    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        give_back = await take(limiter)
        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await never_granted(limiter)
        assert task.cancelling() == 0, "the caller's cancel count was left changed"
        stats = limiter.statistics()
        assert (stats.waiting, stats.cancelled) == (0, 1)
        await give_back()
        # The caller may still use a TaskGroup normally.
        async with asyncio.TaskGroup() as group:
            group.create_task(_use(limiter))
        assert task.cancelling() == 0
        assert accounted(limiter).completed == 2

    drive(kind, main)


async def _use(limiter: AsyncPriorityLimiter) -> None:
    async with limiter.acquire():
        pass


async def task_group_with_a_failing_sibling(
    wait: Callable[[int, asyncio.Event], Awaitable[None]],
) -> tuple[list[str], int]:
    """Run, in a new Task, a TaskGroup of five ``wait(number, ready)`` children and one that
    fails once ``ready`` is set and the loop settled; the group's errors, and the cancel count
    its Task is left with (which differs between Pythons: 3.11 leaves 1)."""
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout and Task.cancelling() are 3.11+")

    async def failing(ready: asyncio.Event) -> None:
        await asyncio.wait_for(ready.wait(), TIMEOUT)
        await settle()
        raise ValueError("sibling failed")

    async def parent() -> tuple[list[str], int]:
        ready = asyncio.Event()
        try:
            async with asyncio.TaskGroup() as group:
                for number in range(5):
                    group.create_task(wait(number, ready))
                group.create_task(failing(ready))
        except Exception as error:
            group_error: Any = error
            errors = [type(e).__name__ for e in group_error.exceptions]
        else:
            errors = []
        task = asyncio.current_task()
        assert task is not None
        return errors, task.cancelling()

    return await asyncio.wait_for(asyncio.get_running_loop().create_task(parent()), TIMEOUT)


@LOOP
def test_a_task_group_whose_sibling_fails_cancels_its_waiters_cleanly(kind: str) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout and Task.cancelling() are 3.11+")

    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        entered: list[int] = []

        async def holder(number: int, ready: asyncio.Event) -> None:
            async with limiter.acquire():
                entered.append(number)
                if len(entered) == 2:
                    ready.set()
                await asyncio.wait_for(asyncio.Event().wait(), TIMEOUT)

        async def plain(number: int, ready: asyncio.Event) -> None:
            if number == 1:
                ready.set()
            await asyncio.wait_for(asyncio.Event().wait(), TIMEOUT)

        with_limiter = await task_group_with_a_failing_sibling(holder)
        without = await task_group_with_a_failing_sibling(plain)
        assert with_limiter == without, "the limiter changed what the TaskGroup does"
        assert with_limiter[0] == ["ValueError"]
        assert entered == [0, 1], "a waiter was granted as the group was cancelled"
        stats = accounted(limiter)
        # The two holders were cancelled inside their blocks: their blocks raised.
        assert (stats.failed, stats.cancelled, stats.completed) == (2, 3, 0)
        async with limiter.acquire(cost=2):  # nothing leaked
            pass

    drive(kind, main)


# -- 5. the block, and what is recorded ----------------------------------------------------------


@LOOP
def test_a_block_that_raises_gives_its_units_back_and_counts_failed(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        waiters = Waiters(limiter)

        async def block() -> None:
            async with limiter.acquire(cost=2):
                waiters.start("waiting")
                await settle()
                assert waiters.order == []
                raise KeyError("from the block")

        with pytest.raises(KeyError, match="from the block"):
            await block()
        assert await waiters.finish() == ["waiting"]
        stats = accounted(limiter)
        assert (stats.failed, stats.completed) == (1, 1)

    drive(kind, main)


@LOOP
def test_waits_holds_and_outcomes_are_recorded_per_priority_class(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(1, clock=clock)
        waiters = Waiters(limiter)
        give_back = await take(limiter)  # NORMAL, holds 2 s
        waiters.start("high", priority=Priority.HIGH, hold=True)
        waiters.start("low", priority=Priority.LOW, timeout=1.0)
        await settle()
        clock.advance(1.0)
        fire_timer(limiter)
        await settle()
        clock.advance(1.0)
        await give_back()
        await settle()
        clock.advance(3.0)  # high holds 3 s, having waited 2 s
        waiters.release("high")
        await waiters.tasks.pop("high")
        with pytest.raises(TimeoutError):
            await waiters.tasks.pop("low")
        with pytest.raises(RuntimeError):
            async with limiter.acquire(priority=Priority.HIGH):
                raise RuntimeError("failed")
        stats = accounted(limiter)
        high, normal, low = (stats.wait[p] for p in (1, 0, -1))
        assert (high.count, high.min, high.max) == (2, 0.0, 2.0)
        assert (normal.count, normal.max) == (1, 0.0)
        assert low.count == 0, "an expired request has no wait recorded"
        assert (stats.hold[1].count, stats.hold[1].max) == (2, 3.0)
        assert stats.hold[0].max == 2.0
        assert stats.outcomes[1]["completed"] == 1
        assert stats.outcomes[1]["failed"] == 1
        assert stats.outcomes[0]["completed"] == 1
        assert stats.outcomes[-1]["expired"] == 1

    drive(kind, main)


# -- 6. rate limits ------------------------------------------------------------------------------


@LOOP
def test_rate_limit_counts_grants_not_units_and_waits_for_the_next_slot(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(100, clock=clock, rate_limit=RateLimit(2, 1.0))
        waiters = Waiters(limiter)
        for name, cost in [("5 units", 5), ("50 units", 50), ("1 unit", 1), ("another", 1)]:
            waiters.start(name, cost=cost, hold=True)
        await settle()
        assert waiters.order == ["5 units", "50 units"]
        stats = limiter.statistics()
        assert (stats.in_use, stats.waiting, stats.rate_limited) == (55, 2, True)
        # The limiter's timer is a real loop timer, armed for the next slot: 1 fake second.
        loop = asyncio.get_running_loop()
        timer = limiter._timer
        assert timer is not None
        assert 0.25 < timer.when() - loop.time() <= 1.001  # uvloop: whole milliseconds
        clock.advance(0.5)
        fire_timer(limiter)  # too early: it re-arms for the rest, 0.5 fake seconds
        await settle()
        assert waiters.order == ["5 units", "50 units"]
        timer = limiter._timer
        assert timer is not None
        assert timer.when() - loop.time() <= 0.501
        clock.advance(0.5)
        fire_timer(limiter)
        await settle()
        assert waiters.order == ["5 units", "50 units", "1 unit", "another"]
        assert not limiter.statistics().rate_limited
        await waiters.finish()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_rate_limit_is_settable_and_removing_it_grants_at_once(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(10, clock=clock, rate_limit=RateLimit(1, 1.0))
        waiters = Waiters(limiter)
        for name in "abc":
            waiters.start(name)
        await settle()
        assert waiters.order == ["a"]
        limiter.rate_limit = None
        assert waiting(limiter) == 0, "not granted in the setter's call"
        assert await waiters.finish() == ["a", "b", "c"]
        limiter.rate_limit = RateLimit(1, 1.0)
        assert limiter.statistics().rate_limit == RateLimit(1, 1.0)
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_key_rate_limit_spaces_the_grants_of_each_key_apart(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(10, clock=clock, key_rate_limit=RateLimit(1, 1.0))
        waiters = Waiters(limiter)
        for name, key in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")]:
            waiters.start(name, key=key, priority=Priority.HIGH if key == "a" else 0)
        await settle()
        assert waiters.order == ["a1", "b1"]  # a2, rate-held, lets b1 pass
        assert limiter.statistics().held_by_key == 2
        clock.advance(1.0)
        fire_timer(limiter)
        await settle()
        assert waiters.order == ["a1", "b1", "a2", "b2"]
        await waiters.finish()
        accounted(limiter)

    drive(kind, main)


@LOOP
def test_an_open_rate_slot_does_not_let_a_waiter_pass_a_better_one_that_does_not_fit(
    kind: str,
) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(3, clock=clock, rate_limit=RateLimit(1, 1.0))
        waiters = Waiters(limiter)
        waiters.start("first", cost=2, hold=True)
        waiters.start("high, cost 2", priority=Priority.HIGH, cost=2)
        waiters.start("normal, cost 1")  # 1 unit is free: it would fit
        await settle()
        assert waiters.order == ["first"]
        assert limiter.statistics().rate_limited
        clock.advance(1.0)
        fire_timer(limiter)  # a slot opens, but the best waiter does not fit
        await settle()
        assert waiters.order == ["first"], "passed a better waiter that did not fit"
        assert not limiter.statistics().rate_limited
        waiters.release("first")
        await settle()
        assert waiters.order == ["first", "high, cost 2"]  # the open slot is high's
        clock.advance(1.0)
        fire_timer(limiter)
        assert await waiters.finish() == ["first", "high, cost 2", "normal, cost 1"]
        accounted(limiter)

    drive(kind, main)


# -- 7. the loop it is bound to ------------------------------------------------------------------


def run_on(kind: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main()`` on a new loop of ``kind``, in this thread."""
    loop = new_loop(kind)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def refused_elsewhere(kind: str, limiter: AsyncPriorityLimiter, **options: Any) -> list[str]:
    """Acquire from a new loop of ``kind`` run in another thread; what it raised."""
    errors: list[str] = []

    async def other() -> None:
        try:
            async with limiter.acquire(**options):
                errors.append("granted on another loop")
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=run_on, args=(kind, other))
    thread.start()
    thread.join(TIMEOUT)
    return errors


@LOOP
def test_another_loop_is_refused_while_units_are_held_even_if_it_would_not_wait(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        give_back = await take(limiter)
        assert refused_elsewhere(kind, limiter) == [BOUND_MESSAGE]  # 1 unit free
        assert refused_elsewhere(kind, limiter, cost=2, timeout=0) == [BOUND_MESSAGE]
        limiter._check_invariants()
        await give_back()
        assert accounted(limiter).requested == 1

    drive(kind, main)


@LOOP
def test_an_acquisition_refused_on_another_loop_can_be_entered_once_the_limiter_is_free(
    kind: str,
) -> None:
    limiter = AsyncPriorityLimiter(2)
    shared = limiter.acquire()
    outcomes: list[str] = []

    async def enter_shared() -> None:
        try:
            async with shared:
                outcomes.append("granted")
        except RuntimeError as error:
            outcomes.append(str(error))

    async def main() -> None:
        give_back = await take(limiter)
        thread = threading.Thread(target=run_on, args=(kind, enter_shared))
        thread.start()
        thread.join(TIMEOUT)
        await give_back()

    drive(kind, main)
    drive(kind, enter_shared)  # the limiter is idle: this loop may bind it
    assert outcomes == [BOUND_MESSAGE, "granted"]
    accounted(limiter)


@LOOP
def test_another_loop_is_refused_while_requests_wait(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(2, clock=clock, rate_limit=RateLimit(1, 1.0))
        waiters = Waiters(limiter)
        waiters.start("first")
        waiters.start("rate-held")
        await settle()
        stats = limiter.statistics()
        assert (stats.in_use, stats.waiting) == (0, 1), "only a waiter is left"
        assert refused_elsewhere(kind, limiter) == [BOUND_MESSAGE]
        clock.advance(1.0)
        fire_timer(limiter)
        assert await waiters.finish() == ["first", "rate-held"]
        accounted(limiter)

    drive(kind, main)


MODULE_LIMITER = AsyncPriorityLimiter(1)


@LOOP
def test_an_idle_limiter_serves_one_loop_after_another(kind: str) -> None:
    async def one_run(label: str) -> list[str]:
        waiters = Waiters(MODULE_LIMITER)
        give_back = await take(MODULE_LIMITER, timeout=60.0)  # arms the timer, on this loop
        waiters.start(f"{label} waiter", timeout=60.0)
        await settle()
        await give_back()
        return await waiters.finish()

    assert drive(kind, lambda: one_run("first")) == ["first waiter"]
    assert drive(kind, lambda: one_run("second")) == ["second waiter"]
    assert asyncio.run(one_run("third")) == ["third waiter"]
    accounted(MODULE_LIMITER)


@LOOP
def test_a_limiter_left_busy_by_a_closed_loop_refuses_the_next_loop(kind: str) -> None:
    limiter = AsyncPriorityLimiter(1)

    async def leave_holding() -> None:
        await take(limiter)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(leave_holding())
    loop.close()

    async def reuse() -> None:
        with pytest.raises(RuntimeError, match=exact(BOUND_MESSAGE)):
            async with limiter.acquire():
                raise AssertionError("granted on a second loop")

    drive(kind, reuse)
    assert limiter.statistics().in_use == 1


# -- 8. task factories -----------------------------------------------------------------------


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager task factories are 3.12+")
def test_order_and_cancellation_hold_under_an_eager_task_factory() -> None:
    # asyncio's loop only, as in tests/attacks/test_async_races.py: uvloop's create_task
    # takes no eager_start, which asyncio.eager_task_factory passes on 3.13+.

    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        limiter = AsyncPriorityLimiter(1)
        waiters = Waiters(limiter)
        waiters.start("eager", hold=True)
        assert waiters.order == ["eager"], "not granted within create_task"
        waiters.start("low", priority=Priority.LOW)
        waiters.start("cancelled", priority=Priority.HIGH)
        waiters.start("high", priority=Priority.HIGH)
        assert waiting(limiter) == 3
        waiters.tasks.pop("cancelled").cancel()
        await asyncio.sleep(0)
        assert waiting(limiter) == 2
        waiters.release("eager")
        assert await waiters.finish() == ["eager", "high", "low"]
        assert accounted(limiter).cancelled == 1

    drive("asyncio", main)
