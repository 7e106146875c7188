"""AsyncPriorityLimiter attacked: a cancel at the worst moment, on the loop, and a stress run.

The worst moment for a limiter on a loop is the iteration between a grant and its Task's
resuming: the grant is made (the waiter's Future has its result) and the Task is cancelled
before it runs. The units must pass on, once, and be counted once. Each race is made in one
loop iteration, with no sleep: a release, a capacity change, a cancel or a timer firing,
then ``task.cancel()``, before the test yields.

Timeouts and rate slots are read from a ``FakeClock``; the limiter's timer is a
``loop.call_later`` whose real delay was computed from the fake clock when it was armed, so
after moving the clock a test runs the timer's callback, ``limiter._on_timer()``, itself, on
the loop (``fire_timer``), as the loop would have once that delay passed.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
from typing import Any, Optional, Union

import pytest

from aio_support import LOOPS, drive, settle
from conftest import TIMEOUT, FakeClock
from limiter_support import accounted, fire_timer, take
from priority_executor import AsyncPriorityLimiter, Priority, RateLimit

# -- helpers (as in tests/limiter/test_async_limiter.py) ---------------------------------------


class Entries:
    """Tasks that acquire, record entering their blocks, and leave them at once."""

    def __init__(self, limiter: AsyncPriorityLimiter) -> None:
        self.limiter = limiter
        self.order: list[str] = []
        self.units = 0  # held inside blocks now
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, cost: int = 1, **options: Any) -> asyncio.Task[None]:
        acquisition = self.limiter.acquire(cost=cost, **options)

        async def body() -> None:
            async with acquisition:
                self.units += cost
                assert self.units <= self.limiter.statistics().in_use, "units lost"
                self.order.append(name)
                await asyncio.sleep(0)
                self.units -= cost

        task = self.tasks[name] = asyncio.get_running_loop().create_task(body())
        return task

    async def rest(self) -> None:
        """Wait for every task; those cancelled or timed out are left to the test to check."""
        await asyncio.wait_for(
            asyncio.gather(*self.tasks.values(), return_exceptions=True), TIMEOUT
        )


# -- the options a race runs across ----------------------------------------------------------

OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "key_limit": {"key_limit": 3},
    "ageing": {"ageing": 1.0},
    "rate_limit": {"rate_limit": RateLimit(100, 1.0)},
    "key_rate_limit": {"key_limit": 3, "key_rate_limit": RateLimit(100, 1.0)},
}

#: How the victim is granted, in the test's own loop iteration: its units given back, a
#: capacity raised, or the better waiter that did not fit leaving (cancelled, or timed out).
GRANTS = ["release", "capacity raised", "better waiter cancelled", "blocker timed out"]


async def grant_then_cancel(
    kind_of_grant: str, options: dict[str, Any], factory: Optional[str] = None
) -> None:
    if factory == "eager":
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
    clock = FakeClock()
    limiter = AsyncPriorityLimiter(4, clock=clock, **options)
    entries = Entries(limiter)
    give_back = await take(limiter, cost=4)
    blocker: Optional[asyncio.Task[None]] = None
    if kind_of_grant in ("better waiter cancelled", "blocker timed out"):
        timeout = 1.0 if kind_of_grant == "blocker timed out" else None
        blocker = entries.start("blocker", cost=4, priority=Priority.HIGH, timeout=timeout)
    victim = entries.start("victim", cost=2, key="k", timeout=5.0)
    entries.start("next", cost=3, key="k")  # fits only once the victim's units are back
    await settle()
    assert entries.order == []
    if kind_of_grant == "release":
        await give_back()  # 4 free: the victim takes 2
    else:
        limiter.capacity = 7  # 3 free: the victim takes 2, or the blocker (4) holds it back
        if kind_of_grant != "capacity raised":
            await settle()
            assert entries.order == [], "passed the blocker"
            if kind_of_grant == "better waiter cancelled":
                assert blocker is not None
                blocker.cancel()
                await asyncio.sleep(0)  # its Task leaves the queue: the victim is granted
            else:
                clock.advance(1.0)
                fire_timer(limiter)  # its timeout passes: the victim is granted
    held = 1 if kind_of_grant == "release" else 2  # the victim's grant, and ours if kept
    stats = limiter.statistics()
    assert stats.holding == held, "the scene is not the race"
    assert not victim.done()
    victim.cancel()  # in the iteration of the grant, before the victim's Task resumes
    await settle()
    assert entries.order == ["next"], "the cancelled grant did not pass on, or ran"
    await entries.rest()
    assert victim.cancelled()
    if kind_of_grant != "release":
        await give_back()
    stats = accounted(limiter)
    assert stats.cancelled == 1 + (kind_of_grant == "better waiter cancelled")
    assert stats.expired == (kind_of_grant == "blocker timed out")


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS)
@pytest.mark.parametrize("kind_of_grant", GRANTS)
def test_a_grant_cancelled_before_its_task_resumes_passes_its_units_to_the_next_waiter(
    kind: str, options: dict[str, Any], kind_of_grant: str
) -> None:
    drive(kind, lambda: grant_then_cancel(kind_of_grant, options))


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager task factories are 3.12+")
@pytest.mark.parametrize("kind_of_grant", GRANTS)
def test_a_grant_cancelled_before_its_task_resumes_passes_on_under_an_eager_task_factory(
    kind_of_grant: str,
) -> None:
    # asyncio's loop only: uvloop's create_task takes no eager_start, which
    # asyncio.eager_task_factory passes on 3.13+.
    drive("asyncio", lambda: grant_then_cancel(kind_of_grant, {}, "eager"))


@pytest.mark.parametrize("kind", LOOPS)
def test_two_grants_cancelled_in_the_iteration_of_one_release_pass_to_the_third(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        entries = Entries(limiter)
        give_back = await take(limiter, cost=2)
        first, second = entries.start("first"), entries.start("second")
        entries.start("third", cost=2)
        entries.start("fourth")
        await settle()
        await give_back()  # grants first and second, one unit each
        first.cancel()
        second.cancel()
        await settle()
        # third (cost 2) is granted both units at once, before fourth.
        assert entries.order[:1] == ["third"]
        await entries.rest()
        assert entries.order == ["third", "fourth"]
        assert accounted(limiter).cancelled == 2

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_asyncio_timeout_firing_in_the_iteration_of_the_grant_passes_it_on_and_uncancels(
    kind: str,
) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout and Task.cancelling() are 3.11+")

    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        entries = Entries(limiter)
        give_back = await take(limiter)
        scopes: list[Any] = []  # asyncio.Timeout, 3.11+
        outcome: list[tuple[str, int]] = []

        async def victim() -> None:
            task = asyncio.current_task()
            assert task is not None
            try:
                async with asyncio.timeout(None) as scope:
                    scopes.append(scope)
                    async with limiter.acquire():
                        entries.order.append("victim")
            except TimeoutError:
                outcome.append(("TimeoutError", task.cancelling()))

        timed = asyncio.get_running_loop().create_task(victim())
        entries.start("next")
        await settle()
        # The timeout's callback is queued first, then the grant wakes the victim: the
        # timeout cancels a Task whose grant is made and not yet taken.
        scopes[0].reschedule(asyncio.get_running_loop().time() - 1.0)
        await give_back()
        assert limiter.statistics().holding == 1, "the victim was not granted"
        await asyncio.wait_for(timed, TIMEOUT)
        await entries.rest()
        assert entries.order == ["next"]
        assert outcome == [("TimeoutError", 0)]
        assert accounted(limiter).cancelled == 1

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_an_expiry_and_a_cancel_in_one_iteration_are_counted_once(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(1, clock=clock)
        entries = Entries(limiter)
        give_back = await take(limiter)
        timed = entries.start("timed", timeout=1.0)
        await settle()
        clock.advance(1.0)
        fire_timer(limiter)  # expires it: its Future has its result...
        timed.cancel()  # ...and its Task is cancelled before it resumes
        await settle()
        assert timed.cancelled(), "the cancel the caller asked for was lost"
        stats = limiter.statistics()
        assert (stats.expired, stats.cancelled, stats.waiting) == (1, 0, 0)
        await give_back()
        accounted(limiter)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("cost", [1, 2], ids=["fits", "does not fit"])
def test_a_release_after_a_deadline_passed_but_before_the_timer_fired_expires_the_waiter(
    kind: str, cost: int
) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(2, clock=clock)
        entries = Entries(limiter)
        give_back = await take(limiter, cost=2)
        late = entries.start("late", cost=cost, priority=Priority.HIGH, timeout=1.0)
        entries.start("next")
        await settle()
        clock.advance(1.0)  # its deadline passes; the timer has not had its turn
        if cost == 1:
            await give_back()  # it fits, and is due: the grant's clock reading expires it
        else:
            limiter.capacity = 3  # 1 unit free: it does not fit, and is due: it goes
            await give_back()
        await entries.rest()
        assert entries.order == ["next"], "granted past its deadline"
        assert isinstance(late.exception(), TimeoutError)
        assert accounted(limiter).expired == 1

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_capacity_raise_and_a_cancel_in_one_iteration_grant_nothing_twice(kind: str) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        entries = Entries(limiter)
        give_back = await take(limiter)
        tasks = [entries.start(f"w{i}", priority=i % 3) for i in range(6)]
        await settle()
        limiter.capacity = 4  # grants three
        for task in tasks[::2]:
            task.cancel()
        limiter.capacity = 2  # takes nothing back
        stats = limiter.statistics()
        assert stats.in_use == 4
        await give_back()
        await entries.rest()
        survivors = [f"w{i}" for i in (5, 1, 3)]  # highest priority first, then by arrival
        assert entries.order == survivors
        stats = accounted(limiter)
        assert (stats.cancelled, stats.completed) == (3, 4)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_task_cancelled_inside_its_block_gives_its_units_back_counted_failed(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        entries = Entries(limiter)
        inside = asyncio.Event()

        async def holder() -> None:
            async with limiter.acquire():
                inside.set()
                await asyncio.wait_for(asyncio.Event().wait(), TIMEOUT)

        task = asyncio.get_running_loop().create_task(holder())
        await asyncio.wait_for(inside.wait(), TIMEOUT)
        entries.start("next")
        await settle()
        task.cancel()
        await entries.rest()
        assert task.cancelled()
        assert entries.order == ["next"]
        stats = accounted(limiter)
        assert (stats.failed, stats.completed, stats.cancelled) == (1, 1, 0)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_task_that_swallows_the_cancel_of_its_wait_waits_again_behind_its_equals(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(1)
        entries = Entries(limiter)
        give_back = await take(limiter)
        order = entries.order

        async def stubborn() -> None:
            try:
                async with limiter.acquire():
                    order.append("stubborn, first try")
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                if sys.version_info >= (3, 11):
                    task.uncancel()
            async with limiter.acquire():
                order.append("stubborn")

        task = asyncio.get_running_loop().create_task(stubborn())
        entries.start("other")
        await settle()
        task.cancel()
        await settle()
        stats = limiter.statistics()
        assert (stats.waiting, stats.cancelled) == (2, 1)
        await give_back()
        await asyncio.wait_for(task, TIMEOUT)
        await entries.rest()
        assert order == ["other", "stubborn"], "the retry did not wait behind its equal"
        accounted(limiter)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_grant_cancelled_before_its_task_resumes_passes_its_rate_slot_on(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(1, clock=clock, rate_limit=RateLimit(1, 1.0))
        entries = Entries(limiter)
        entries.start("first")
        await settle()
        victim, _ = entries.start("victim"), entries.start("next")
        await settle()
        assert entries.order == ["first"]
        clock.advance(1.0)
        fire_timer(limiter)  # the next slot: granted to victim...
        victim.cancel()  # ...whose Task is cancelled before it resumes
        await settle()
        assert entries.order == ["first", "next"], "the unused grant's slot did not pass on"
        await entries.rest()
        accounted(limiter)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_one_acquisition_entered_by_two_tasks_while_the_first_waits_leaks_nothing(
    kind: str,
) -> None:
    async def main() -> None:
        limiter = AsyncPriorityLimiter(2)
        shared = limiter.acquire()
        give_back = await take(limiter, cost=2)

        async def use() -> None:
            async with shared:
                await asyncio.sleep(0)

        tasks = [asyncio.get_running_loop().create_task(use()) for _ in range(2)]
        await settle()
        await give_back()
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), TIMEOUT)
        assert not [o for o in outcomes if isinstance(o, AssertionError)], outcomes
        accounted(limiter)

    drive(kind, main)


# -- stress ----------------------------------------------------------------------------------

STRESS: dict[str, dict[str, Any]] = {
    "plain": {},
    "key_limit": {"key_limit": 3},
    "ageing": {"ageing": 0.5},
    "rate_limits": {"rate_limit": RateLimit(40, 1.0), "key_rate_limit": RateLimit(15, 1.0)},
}


class Boom(Exception):
    """What a block raises on purpose."""


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", STRESS.values(), ids=STRESS)
@pytest.mark.parametrize("seed", [1, 2])
def test_200_random_tasks_never_exceed_capacity_and_leak_nothing(
    kind: str, options: dict[str, Any], seed: int
) -> None:
    async def main() -> None:
        rng = random.Random(seed)
        clock = FakeClock()
        limiter = AsyncPriorityLimiter(6, clock=clock, **options)
        key_limit = limiter.key_limit
        loop = asyncio.get_running_loop()
        inside: dict[Any, int] = {}  # units held inside blocks, by key
        # The units held when capacity was last changed: the most a lowering leaves held.
        bound: Union[int, float] = 0
        entered: list[int] = []
        outcomes: dict[str, int] = {"completed": 0, "boom": 0, "timeout": 0, "cancelled": 0}
        cancelled_inside = 0
        over = 0  # checks that found more units held than capacity, after a lowering
        exited = 0  # blocks left

        def check() -> None:
            nonlocal over
            stats = limiter.statistics()
            over += stats.in_use > stats.capacity
            units = sum(inside.values())
            assert units <= stats.in_use, "units held in blocks that the limiter lost"
            assert len(entered) - exited <= stats.holding, "a block runs on no grant"
            assert stats.in_use <= max(stats.capacity, bound), "granted beyond capacity"
            if key_limit is not None:
                for key, held in inside.items():
                    assert key is None or held <= key_limit, f"key {key!r} above key_limit"

        async def one(number: int) -> None:
            nonlocal cancelled_inside, exited
            cost = rng.randint(1, int(min(limiter.capacity, 3)))  # above it: refused
            key = rng.choice([None, "a", "b", "c"])
            timeout: Union[float, None] = rng.choice([None, None, 0, 0.5, 2.0])
            steps, fail = rng.randint(0, 3), rng.random() < 0.1
            acquisition = limiter.acquire(
                priority=rng.choice([-1, 0, 1, 2.5]), timeout=timeout, key=key, cost=cost
            )
            went_in = False
            try:
                async with acquisition:
                    went_in = True
                    entered.append(number)
                    inside[key] = inside.get(key, 0) + cost
                    check()
                    try:
                        for _ in range(steps):
                            await asyncio.sleep(0)
                        if fail:
                            raise Boom
                    finally:
                        inside[key] -= cost
                        exited += 1
                outcomes["completed"] += 1
            except Boom:
                outcomes["boom"] += 1
            except TimeoutError:
                outcomes["timeout"] += 1
            except asyncio.CancelledError:
                if went_in:
                    cancelled_inside += 1
                else:
                    outcomes["cancelled"] += 1
                raise

        tasks: list[asyncio.Task[None]] = []
        for phase in range(4):
            batch = [loop.create_task(one(50 * phase + i)) for i in range(50)]
            tasks += batch
            for step in range(100_000):
                pending = [task for task in batch if not task.done()]
                if not pending:
                    break
                choice = rng.random()
                in_use = limiter.statistics().in_use
                if step == 10 and in_use > 1:  # once a phase: lower it below what is held
                    bound, limiter.capacity = in_use, in_use - 1
                elif choice < 0.04:
                    rng.choice(pending).cancel()
                elif choice < 0.08 or step > 2000:  # late on, raise it so that all may end
                    bound = in_use
                    limiter.capacity = 10 if step > 2000 else rng.choice([2, 3, 4, 6, 10, math.inf])
                elif choice < 0.3:
                    clock.advance(rng.uniform(0.0, 0.3))
                    fire_timer(limiter)
                await asyncio.sleep(0)
                check()
            await asyncio.wait_for(asyncio.gather(*batch, return_exceptions=True), TIMEOUT)
            limiter._check_invariants()
            check()

        assert len(tasks) == 200
        assert len(set(entered)) == len(entered), "a request was granted twice"
        stats = accounted(limiter)
        assert stats.requested == 200
        assert stats.completed == outcomes["completed"]
        assert stats.failed == outcomes["boom"] + cancelled_inside
        assert stats.completed + stats.failed == len(entered)
        # A wait cancelled in the iteration its timeout passed is counted expired.
        assert stats.cancelled + stats.expired == outcomes["cancelled"] + outcomes["timeout"]
        assert stats.expired >= outcomes["timeout"]
        assert outcomes["timeout"] > 0
        assert outcomes["cancelled"] > 0
        assert outcomes["boom"] > 0
        assert sum(inside.values()) == 0
        assert over > 0, "capacity was never lowered below the units held"

    drive(kind, main)
