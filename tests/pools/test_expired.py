"""``expired(future)``: a task cancelled because its queue deadline passed, told from every
other way a future ends.

On the thread pool, its views and a front (``PriorityExecutor``), and on the asyncio
scheduler: every path by which a deadline cancels a task marks it (the timer, a take that
finds it due, a submit with ``timeout=0``, a submit whose deadline passed while it waited
for room, ``_work_queue``); nothing else does (a run, a failure, a user's cancel, an
eviction, a shutdown). The attacks put a user's ``cancel()`` at the worst moment: read from
the clock that decides the deadline, from a done-callback of a future expiring with it, and
from another thread as the clock moves; there must be one outcome each time.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
import weakref
from collections.abc import Callable, Container, Iterator
from concurrent.futures import CancelledError, Future, wait
from contextlib import contextmanager
from typing import Any, Optional

import pytest

from aio_support import LOOPS, OPTIONS, accounted, drive, ids, make, settle
from aio_support import Gate as AsyncGate
from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import (
    AsyncPriorityScheduler,
    Priority,
    PriorityThreadPoolExecutor,
    expired,
)
from support import (
    CONFIGS,
    FAR,
    KINDS,
    AnyPool,
    Config,
    assert_accounted,
    assert_done_promptly,
    exact,
    in_thread,
    internals,
    make_pool,
    wait_blocked,
    wait_until,
)


def held(pool: AnyPool, gate: Gate) -> Future[str]:
    """Occupy the pool's one worker (or the front's one slot) until ``gate`` opens."""
    blocker = pool.submit(gate)
    gate.wait_started()
    return blocker


class Seen:
    """A done-callback that records what ``expired`` and ``cancelled`` said when it ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, bool]] = []

    def __call__(self, future: Future[Any]) -> None:
        self.calls.append((expired(future), future.cancelled()))


class JumpsAsItDecides(FakeClock):
    """A fake clock that jumps ``FAR`` ahead at the reading that decides a watched task's
    deadline: the first one, made under the pool's lock, after the task left the queue to
    start. Then it runs ``then``, as a user's code could, at that moment.

    Until then, the timer can never find the task due; a take finds it due at once.
    """

    def __init__(self) -> None:
        super().__init__()
        self.watched: Optional[Any] = None
        self.queued: Callable[[Any], bool] = lambda future: True
        self.then: Callable[[], None] = lambda: None

    def watch(self, future: Any, entries: Callable[[], Container[Any]]) -> None:
        """Jump as the take of ``future`` reads the clock; ``entries``: the queued futures."""
        self.queued = lambda future: future in entries()
        self.watched = future

    def __call__(self) -> float:
        watched = self.watched
        if watched is not None and not self.queued(watched):
            self.watched = None
            with self._lock:  # not advance(): woken now, the timer would wait for the lock
                self.now += FAR
            self.then()
        return super().__call__()


def entries_of(pool: AnyPool) -> Callable[[], Container[Any]]:
    """What reads the futures queued in ``pool``, from whichever queue it has now."""
    pool_internals = internals(pool)
    return lambda: pool_internals.queue.entries


@contextmanager
def held_pool(config: Config, gate: Gate) -> Iterator[tuple[AnyPool, JumpsAsItDecides]]:
    """A pool of ``config`` on a jumping clock (attached), its one worker held by ``gate``."""
    clock = JumpsAsItDecides()
    pool = config.pool(clock)
    try:
        held(pool, gate)
        yield pool, clock
    finally:
        gate.open()
        pool.shutdown()


# -- the thread pool, its views and the front ---------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_only_a_task_whose_queue_deadline_passed_is_expired(config: Config, gate: Gate) -> None:
    with held_pool(config, gate) as (pool, clock):
        late = config.submit(pool, str, "late", timeout=5.0)
        seen = Seen()
        late.add_done_callback(seen)
        by_user = config.submit(pool, str, "cancelled", timeout=5.0)
        waiting = config.submit(pool, str, "waiting", timeout=FAR)
        assert not expired(late), "expired before its deadline"
        assert by_user.cancel()
        clock.advance(5.0)
        assert_done_promptly(late)
        assert late.cancelled()
        with pytest.raises(CancelledError):
            late.result()
        assert expired(late)
        assert not expired(by_user)
        assert not expired(waiting)
        gate.open()
        assert waiting.result(TIMEOUT) == "waiting"
        ran = config.submit(pool, str, "ran", timeout=FAR)
        failed = config.submit(pool, int, "not a number", timeout=FAR)
        assert ran.result(TIMEOUT) == "ran"
        assert isinstance(failed.exception(TIMEOUT), ValueError)
        assert [expired(f) for f in (ran, failed, waiting)] == [False, False, False]
        assert pool.statistics().expired == 1
        assert_accounted(pool)  # callbacks included: the timer hands them to another thread
        assert seen.calls == [(True, True)], "a done-callback saw the cancel before the mark"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("path", ["timer", "take", "submit", "room"])
def test_every_way_a_deadline_cancels_a_task_marks_it_before_its_callbacks_run(
    kind: str, path: str, gate: Gate
) -> None:
    # timer: the timer wakes as the clock moves. take: the clock moves as the worker (or
    # the dispatcher) takes the task, which finds it due. submit: timeout=0. room: the
    # deadline passes while the submit waits for room.
    clock = JumpsAsItDecides()
    pool = make_pool(kind, 1, clock=clock, max_queued=1, when_full="block")
    clock.attach(pool)
    seen = Seen()
    try:
        held(pool, gate)
        if path == "submit":
            late = pool.submit(str, "late", timeout=0)
        elif path == "room":
            pool.submit(str, "filler")
            blocked = in_thread(lambda: pool.submit(str, "late", timeout=0.02))
            wait_blocked(pool)
            clock.advance(1.0)
            late = blocked.result()
        else:
            late = pool.submit(str, "late", timeout=FAR)
            late.add_done_callback(seen)
            if path == "take":
                clock.watch(late, entries_of(pool))
                gate.open()
            else:
                clock.advance(FAR)
        assert_done_promptly(late)
        assert late.cancelled()
        assert expired(late)
        gate.open()
        assert pool.statistics().expired == 1
        assert_accounted(pool)  # callbacks included: the timer hands them to another thread
        late.add_done_callback(seen)  # on a done future: called at once, here
        expected = [(True, True)] * (2 if path in ("timer", "take") else 1)
        assert seen.calls == expected
    finally:
        gate.open()
        pool.shutdown(cancel_futures=True)


def test_a_task_expired_by_a_work_queue_get_is_expired(gate: Gate) -> None:
    clock = JumpsAsItDecides()
    with PriorityThreadPoolExecutor(1, clock=clock) as pool:
        held(pool, gate)
        late = pool.submit(str, "late", priority=Priority.HIGH, timeout=FAR)
        taken = pool.submit(str, "taken")
        clock.watch(late, entries_of(pool))
        assert pool._work_queue.get_nowait().future is taken
        assert late.cancelled()
        assert expired(late)
        assert not expired(taken)
        gate.open()


@pytest.mark.parametrize("kind", KINDS)
def test_evicted_and_shutdown_cancelled_tasks_with_deadlines_are_not_expired(
    kind: str, clock: FakeClock, gate: Gate
) -> None:
    pool = make_pool(kind, 1, clock=clock, max_queued=1, when_full="evict")
    clock.attach(pool)
    try:
        held(pool, gate)
        evicted = pool.submit(str, "low", priority=Priority.LOW, timeout=FAR)
        drained = pool.submit(str, "high", priority=Priority.HIGH, timeout=FAR)
        assert_done_promptly(evicted)
        assert evicted.cancelled()
        pool.shutdown(wait=False, cancel_futures=True)
        assert_done_promptly(drained)
        assert drained.cancelled()
        clock.advance(2 * FAR)  # their deadlines pass too, after they left
        assert [expired(evicted), expired(drained)] == [False, False]
        assert pool.statistics().expired == 0
    finally:
        gate.open()
        pool.shutdown()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_users_cancel_read_from_the_deciding_clock_wins_and_the_task_is_not_expired(
    config: Config, gate: Gate
) -> None:
    # The worst moment for a cancel: the task has left the queue, due, and the pool has
    # not yet cancelled it.
    with held_pool(config, gate) as (pool, clock):
        victim = config.submit(pool, str, "victim", timeout=FAR)
        seen = Seen()
        victim.add_done_callback(seen)
        cancelled: list[tuple[bool, bool]] = []  # what cancel() returned, and expired()
        clock.then = lambda: cancelled.append((victim.cancel(), expired(victim)))
        clock.watch(victim, entries_of(pool))
        gate.open()
        assert_done_promptly(victim)
        assert pool.join(TIMEOUT)
        assert cancelled == [(True, False)], "the user's cancel did not run at the take"
        assert seen.calls == [(False, True)], "the pool, not the user, cancelled it"
        assert victim.cancelled()
        assert not expired(victim), "marked expired after its user cancelled it"
        stats = pool.statistics()
        assert (stats.expired, stats.cancelled) == (0, 1), "counted as the deadline won"
        pool._check_invariants()


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("path", ["timer", "take"])
def test_a_cancel_from_the_callback_of_a_future_expiring_with_it_has_one_outcome(
    config: Config, path: str, gate: Gate
) -> None:
    with held_pool(config, gate) as (pool, clock):
        first = config.submit(pool, str, "first", timeout=FAR)
        second = config.submit(pool, str, "second", timeout=FAR)
        outcomes: list[tuple[str, bool, bool]] = []

        def cancel_the_other(future: Future[Any]) -> None:
            other = second if future is first else first
            outcomes.append(("cancel", other.cancel(), expired(other)))

        first.add_done_callback(cancel_the_other)
        second.add_done_callback(cancel_the_other)
        if path == "take":
            clock.watch(first, entries_of(pool))
            gate.open()
        else:
            clock.advance(FAR)
        assert_done_promptly(first, second)
        gate.open()
        assert pool.join(TIMEOUT)  # callbacks included
        # Both were cancelled by their deadline before either's callbacks ran: each cancel
        # from a callback finds the other already expired, and changes nothing (it returns
        # True, as the standard Future's cancel() of a cancelled future does).
        assert outcomes == [("cancel", True, True)] * 2
        assert [expired(first), expired(second)] == [True, True]
        assert pool.statistics().expired == 2
        assert_accounted(pool)


def record_thread(threads: list[threading.Thread], _: Future[Any]) -> None:
    threads.append(threading.current_thread())


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancel_from_another_thread_racing_the_deadline_has_one_outcome(
    kind: str, clock: FakeClock, gate: Gate
) -> None:
    pool = make_pool(kind, 1, clock=clock)
    clock.attach(pool)
    try:
        held(pool, gate)
        outcomes = {True: 0, False: 0}
        for _ in range(200):
            future = pool.submit(str, "raced", timeout=FAR)
            start = threading.Barrier(2, timeout=TIMEOUT)
            # Whoever cancels the future runs its callbacks: the user inside cancel(), in
            # the cancelling thread; the pool in a thread of its own.
            settled_in: list[threading.Thread] = []
            future.add_done_callback(functools.partial(record_thread, settled_in))

            def cancel(future: Future[str] = future, start: threading.Barrier = start) -> bool:
                start.wait()
                return future.cancel()

            canceller = in_thread(cancel)
            start.wait()
            clock.advance(FAR)
            assert canceller.result(), "cancel() of a queued or cancelled future is True"
            assert future in wait([future], TIMEOUT).done
            wait_until(functools.partial(bool, settled_in), "the callbacks ran")
            assert future.cancelled()
            won = settled_in == [canceller.thread]
            assert expired(future) is not won, f"the user's cancel won: {won}; so did expiry"
            outcomes[won] += 1
        stats = pool.statistics()
        assert (stats.expired, stats.cancelled) == (outcomes[False], outcomes[True])
        gate.open()
        assert_accounted(pool)
    finally:
        gate.open()
        pool.shutdown()


def test_the_mark_keeps_no_expired_task_alive(clock: FakeClock, gate: Gate) -> None:
    class Payload:
        pass

    with PriorityThreadPoolExecutor(1, clock=clock) as pool:
        clock.attach(pool)
        held(pool, gate)
        payload = Payload()
        late = pool.submit(id, payload, timeout=5.0)
        at_once = pool.submit(id, payload, timeout=0)
        clock.advance(5.0)
        assert_done_promptly(late)
        assert expired(late)
        assert expired(at_once)
        refs: list[weakref.ref[Any]] = [weakref.ref(f) for f in (late, at_once)]
        refs.append(weakref.ref(payload))
        del late, at_once, payload
        gc.collect()
        assert [ref() for ref in refs] == [None, None, None], "an expired task is kept"
        gate.open()


@pytest.mark.parametrize("value", ["future", None])
def test_expired_refuses_what_is_not_a_future(value: object) -> None:
    with pytest.raises(
        TypeError,
        match=exact(
            "future must be a concurrent.futures.Future or an asyncio.Future,"
            f" got {value!r} ({type(value).__name__})"
        ),
    ):
        expired(value)  # type: ignore[arg-type]


def test_a_future_no_scheduler_made_is_not_expired() -> None:
    future: Future[None] = Future()
    assert future.cancel()
    assert not expired(future)


# -- the asyncio scheduler -----------------------------------------------------------------


@pytest.mark.parametrize("kind", LOOPS)
def test_an_async_task_whose_deadline_passed_is_expired_and_its_error_says_after_how_long(
    kind: str,
) -> None:
    async def main() -> None:
        clock, gate = FakeClock(), AsyncGate()
        scheduler = AsyncPriorityScheduler(1, clock=clock)
        ran = scheduler.submit(gate, "ran", timeout=FAR)
        late = scheduler.submit(gate, "late", timeout=2.0)
        seen: list[tuple[bool, bool]] = []
        late.add_done_callback(lambda f: seen.append((expired(f), f.cancelled())))
        by_user = scheduler.submit(gate, "cancelled", timeout=2.0)
        at_once = scheduler.submit(gate, "at once", timeout=0)
        assert not expired(late)
        assert by_user.cancel("the user's own")
        clock.advance(2.0)
        scheduler._wake_timer()
        assert expired(late)
        with pytest.raises(
            asyncio.CancelledError, match=exact("queue deadline passed after 2.0 s")
        ):
            await late
        with pytest.raises(
            asyncio.CancelledError, match=exact("queue deadline passed after 2.0 s")
        ):
            late.result()
        with pytest.raises(
            asyncio.CancelledError, match=exact("queue deadline passed after 0.0 s")
        ):
            at_once.result()
        await settle()
        assert seen == [(True, True)]
        assert [expired(at_once), expired(by_user)] == [True, False]
        with pytest.raises(asyncio.CancelledError, match=exact("the user's own")):
            by_user.result()
        gate.open()
        assert await ran == "ran"
        assert not expired(ran)
        stats = await accounted(scheduler)
        assert (stats.expired, stats.cancelled, stats.completed) == (2, 1, 1)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_an_async_task_found_due_as_it_is_taken_is_expired(kind: str) -> None:
    async def main() -> None:
        clock, gate = FakeClock(), AsyncGate()
        scheduler = AsyncPriorityScheduler(1, clock=clock)
        held_task = scheduler.submit(gate)
        view = scheduler.options(timeout=FAR, priority=Priority.HIGH)
        due = view.submit(gate, "due")
        clock.advance(FAR)  # the timer has not fired; the take after the gate decides
        gate.open()
        await held_task
        await settle()
        assert due.cancelled()
        assert expired(due)
        with pytest.raises(
            asyncio.CancelledError, match=exact(f"queue deadline passed after {FAR} s")
        ):
            due.result()
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_evicted_and_aclose_cancelled_async_tasks_are_not_expired(kind: str) -> None:
    async def main() -> None:
        clock, gate = FakeClock(), AsyncGate()
        scheduler = AsyncPriorityScheduler(1, clock=clock, max_queued=1, when_full="evict")
        running = scheduler.submit(gate, "running", timeout=FAR)
        evicted = scheduler.submit(gate, "low", priority=Priority.LOW, timeout=FAR)
        drained = scheduler.submit(gate, "high", priority=Priority.HIGH, timeout=FAR)
        assert evicted.cancelled()
        closing = asyncio.ensure_future(scheduler.aclose(cancel_futures=True))
        await settle()
        assert drained.cancelled()
        clock.advance(2 * FAR)
        scheduler._wake_timer()
        gate.open()
        await closing
        assert [expired(f) for f in (running, evicted, drained)] == [False, False, False]
        stats = await accounted(scheduler)
        assert stats.expired == 0

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS, ids=ids)
@pytest.mark.parametrize("path", ["timer", "take"])
def test_an_async_cancel_from_the_callback_of_a_future_expiring_with_it_has_one_outcome(
    kind: str, options: dict[str, Any], path: str
) -> None:
    async def main() -> None:
        clock, gate = FakeClock(), AsyncGate()
        scheduler, through = make(options, clock=clock)
        held_task = scheduler.submit(gate)
        first = through.submit(gate, "first", timeout=FAR)
        second = through.submit(gate, "second", timeout=FAR)
        outcomes: list[tuple[bool, bool]] = []

        def cancel_the_other(future: asyncio.Future[Any]) -> None:
            other = second if future is first else first
            outcomes.append((other.cancel(), expired(other)))

        first.add_done_callback(cancel_the_other)
        second.add_done_callback(cancel_the_other)
        clock.advance(FAR)  # the loop's timer waits FAR real seconds: only a wake moves it
        if path == "timer":
            scheduler._wake_timer()
        gate.open()  # path "take": the take after the gate finds both due
        await held_task
        await settle()
        # Both were cancelled before either's callbacks ran: each cancel from a callback
        # finds the other expired, and fails (an asyncio future's cancel() of a done one).
        assert outcomes == [(False, True)] * 2
        assert [expired(first), expired(second)] == [True, True]
        stats = await accounted(scheduler)
        assert stats.expired == 2

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS, ids=ids)
def test_an_async_users_cancel_read_from_the_deciding_clock_wins(
    kind: str, options: dict[str, Any]
) -> None:
    async def main() -> None:
        clock, gate = JumpsAsItDecides(), AsyncGate()
        scheduler, through = make(options, clock=clock)
        held_task = scheduler.submit(gate)
        victim = through.submit(gate, "victim", timeout=FAR)
        cancelled: list[tuple[bool, bool]] = []
        clock.then = lambda: cancelled.append((victim.cancel(), expired(victim)))
        clock.watch(victim, lambda: scheduler._owner.core.queue.entries)
        gate.open()
        await held_task
        await settle()
        assert cancelled == [(True, False)]
        assert victim.cancelled()
        assert not expired(victim)
        with pytest.raises(asyncio.CancelledError, match=exact("")):
            victim.result()
        stats = await accounted(scheduler)
        assert (stats.expired, stats.cancelled) == (0, 1), "counted as the deadline won"

    drive(kind, main)
