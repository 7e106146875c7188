"""AsyncPriorityScheduler: the surface, point by point, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from aio_support import LOOPS, Gate, Peak, Recorder, accounted, drive, returning, settle
from conftest import TIMEOUT, FakeClock
from priority_executor import (
    AsyncPriorityScheduler,
    AsyncView,
    ExecutorStatistics,
    Priority,
    QueueFullError,
    RateLimit,
)
from support import exact, queue_full_message

pytestmark = pytest.mark.parametrize("kind", LOOPS)

REQUEST = contextvars.ContextVar("REQUEST", default="none")


# -- 1. submit ---------------------------------------------------------------------------------


def test_submit_returns_an_asyncio_future_at_once_and_calls_fn_only_when_it_starts(
    kind: str,
) -> None:
    async def main() -> None:
        gate, calls = Gate(), []

        async def task(name: str) -> str:
            calls.append(name)
            return name

        scheduler = AsyncPriorityScheduler(1)
        held = scheduler.submit(gate, "held")
        future = scheduler.submit(task, "queued")
        assert isinstance(future, asyncio.Future)
        assert not future.done()
        await settle()
        assert calls == [], "fn was called while its task was queued"
        gate.open()
        assert await future == "queued"
        assert await held == "held"
        await accounted(scheduler)

    drive(kind, main)


def test_the_task_runs_in_a_copy_of_the_context_of_its_submit(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)
        scheduler.submit(gate)

        async def task() -> str:
            seen = REQUEST.get()
            REQUEST.set("changed by the task")
            return seen

        REQUEST.set("at submit")
        future = scheduler.submit(task)
        REQUEST.set("after submit")
        gate.open()
        assert await future == "at submit"
        assert REQUEST.get() == "after submit", "the task's change leaked out"
        await accounted(scheduler)

    drive(kind, main)


def test_a_coroutine_object_is_accepted_and_closed_if_it_never_starts(kind: str) -> None:
    async def main() -> None:
        gate, ran = Gate(), []

        async def task(name: str) -> str:
            ran.append(name)
            return name

        scheduler = AsyncPriorityScheduler(1, clock=FakeClock())
        scheduler.submit(gate)
        started = scheduler.submit(task("started"))
        cancelled = scheduler.submit(task("cancelled"))
        expired = scheduler.submit(task("expired"), timeout=0)
        drained = scheduler.submit(task("drained"))
        assert cancelled.cancel()
        assert expired.cancelled()
        gate.open()
        assert await started == "started"
        await scheduler.join(TIMEOUT)
        assert drained.done()
        await scheduler.aclose()
        assert ran == ["started", "drained"]
        # drive() turns a "coroutine was never awaited" warning into an error.

    drive(kind, main)


def test_a_coroutine_object_left_in_the_queue_by_aclose_is_closed(kind: str) -> None:
    async def main() -> None:
        gate = Gate()

        async def never() -> None:
            raise AssertionError("a cancelled task ran")

        scheduler = AsyncPriorityScheduler(1)
        running = scheduler.submit(gate)
        queued = scheduler.submit(never())
        await settle()
        closing = asyncio.ensure_future(scheduler.aclose(cancel_futures=True))
        await settle()
        assert queued.cancelled()
        gate.open()
        await closing
        assert running.result() is None

    drive(kind, main)


def test_a_coroutine_object_whose_submit_is_refused_is_closed_by_every_refusal(
    kind: str, thread_deaths: list[str]
) -> None:
    async def never() -> None:
        raise AssertionError("a refused coroutine ran")

    def refused(submit: Callable[[Any], object], error: type[BaseException]) -> None:
        coro = never()
        with pytest.raises(error):
            submit(coro)
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED, "left unclosed"

    async def main() -> None:
        scheduler = AsyncPriorityScheduler(1, max_queued=1)
        view = scheduler.options(priority=Priority.HIGH)
        # The argument checks, which come before anything changes:
        refused(lambda coro: scheduler.submit(coro, priority=math.nan), ValueError)
        refused(lambda coro: scheduler.submit(coro, priority="high"), TypeError)  # type: ignore[arg-type]
        refused(lambda coro: scheduler.submit(coro, timeout=-1.0), ValueError)
        refused(lambda coro: scheduler.submit(coro, "an argument"), TypeError)
        refused(lambda coro: view.submit(coro, "an argument"), TypeError)
        stats = scheduler.statistics()
        assert (stats.submitted, stats.rejected) == (0, 0), "a refused check changed the counts"
        # The wrong thread, and another loop:
        elsewhere = [
            lambda: refused(scheduler.submit, RuntimeError),
            lambda: refused(view.submit, RuntimeError),
            lambda: asyncio.run(_in_coroutine(refused, scheduler.submit, RuntimeError)),
        ]
        await scheduler.run(asyncio.sleep, 0)  # bound to this loop from now on
        for attempt in elsewhere:
            thread = threading.Thread(target=attempt)  # its failure is the thread's death
            thread.start()
            thread.join(TIMEOUT)
        assert not thread_deaths
        # A full queue, and a closed scheduler:
        scheduler.pause()
        scheduler.submit(asyncio.sleep, 0)
        refused(scheduler.submit, QueueFullError)
        closing = asyncio.ensure_future(scheduler.aclose())
        await settle()
        refused(scheduler.submit, RuntimeError)
        await closing
        await accounted(scheduler)
        # drive() turns a "coroutine was never awaited" warning into an error.

    drive(kind, main)


async def _in_coroutine(fn: Callable[..., None], *args: Any) -> None:
    fn(*args)


def test_fn_that_returns_no_awaitable_fails_its_future_naming_run_in_executor(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(2)
        future: asyncio.Future[Any] = scheduler.submit(len, "abc")  # type: ignore[arg-type]
        message = (
            "fn must return an awaitable, got 3 (int): for a blocking function, use"
            " loop.run_in_executor(pool.options(...), fn) with a PriorityThreadPoolExecutor"
        )
        with pytest.raises(TypeError, match=exact(message)):
            await future
        stats = await accounted(scheduler)
        assert stats.failed == 1

    drive(kind, main)


def test_bad_fn_and_bad_options_are_refused_with_exact_messages(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(2)
        with pytest.raises(
            TypeError, match=exact("fn must be a coroutine function or a coroutine, got 3 (int)")
        ):
            scheduler.submit(3)  # type: ignore[arg-type]
        with pytest.raises(
            TypeError, match=exact("priority must be a real number, got 'high' (str)")
        ):
            scheduler.submit(asyncio.sleep, 0, priority="high")  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match=exact("timeout must be a non-negative number, got -1 (int)")
        ):
            scheduler.submit(asyncio.sleep, 0, timeout=-1)

        async def task() -> None:
            pass

        coro = task()
        with pytest.raises(
            TypeError,
            match=exact("a coroutine object takes no arguments: pass them to its function"),
        ):
            scheduler.submit(coro, 1)
        with pytest.raises(TypeError, match=exact("key must be hashable, got [] (list)")):
            scheduler.options(key=[])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=exact("future must be an asyncio.Future, got 3 (int)")):
            scheduler.set_priority(3, 1)  # type: ignore[arg-type]
        stats = await accounted(scheduler)
        assert stats.submitted == 0

    drive(kind, main)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "concurrency must be a positive integer or math.inf, got 0 (int)"),
        (-2, ValueError, "concurrency must be a positive integer or math.inf, got -2 (int)"),
        (2.5, ValueError, "concurrency must be a positive integer or math.inf, got 2.5 (float)"),
        (
            math.nan,
            ValueError,
            "concurrency must be a positive integer or math.inf, got nan (float)",
        ),
        (True, TypeError, "concurrency must be a positive integer or math.inf, got True (bool)"),
        ("4", TypeError, "concurrency must be a positive integer or math.inf, got '4' (str)"),
        (
            None,
            TypeError,
            "concurrency must be a positive integer or math.inf, got None (NoneType)",
        ),
    ],
)
def test_bad_concurrency_is_refused_when_made_and_when_set(
    kind: str, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=exact(message)):
        AsyncPriorityScheduler(value)
    scheduler = AsyncPriorityScheduler(3)
    with pytest.raises(error, match=exact(message)):
        scheduler.concurrency = value
    assert scheduler.concurrency == 3


def test_constructor_options_are_checked_as_on_the_thread_pool(kind: str) -> None:
    with pytest.raises(
        ValueError, match=exact("when_full must be 'raise', 'reject' or 'evict', got 'drop' (str)")
    ):
        AsyncPriorityScheduler(max_queued=2, when_full="drop")
    block = (
        "when_full must be 'raise', 'reject' or 'evict', got 'block' (str):"
        " a submit never blocks the event loop"
    )
    with pytest.raises(ValueError, match=exact(block)):
        AsyncPriorityScheduler(max_queued=2, when_full="block")
    for accepted in ("raise", "reject", "evict"):
        AsyncPriorityScheduler(max_queued=2, when_full=accepted)
    with pytest.raises(
        ValueError, match=exact("max_queued must be a positive integer or None, got 0 (int)")
    ):
        AsyncPriorityScheduler(max_queued=0)
    with pytest.raises(TypeError, match=exact("clock must be callable, got 3 (int)")):
        AsyncPriorityScheduler(clock=3)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=exact("run_timeout must be a positive number or None, got 0 (int)")
    ):
        AsyncPriorityScheduler(run_timeout=0)
    with pytest.raises(
        ValueError, match=exact("ageing must be a positive number or None, got -1 (int)")
    ):
        AsyncPriorityScheduler(ageing=-1)
    assert AsyncPriorityScheduler(max_queued=1, when_full="reject")._owner.core.when_full == "raise"


# -- 2. run, and cancelling the caller ---------------------------------------------------------


def test_run_returns_the_result_or_raises_what_the_task_raised(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(2)

        async def double(x: int) -> int:
            await asyncio.sleep(0)
            return 2 * x

        async def fail() -> None:
            raise KeyError("boom")

        assert await scheduler.run(double, 21) == 42
        with pytest.raises(KeyError, match="boom"):
            await scheduler.run(fail)
        stats = await accounted(scheduler)
        assert (stats.completed, stats.failed) == (1, 1)

    drive(kind, main)


def test_cancelling_the_caller_of_run_cancels_a_queued_task_which_never_starts(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        scheduler.submit(gate)
        caller = asyncio.ensure_future(scheduler.run(recorder, "queued"))
        await settle()
        assert scheduler.pending == 1
        caller.cancel()
        await asyncio.wait([caller], timeout=TIMEOUT)
        assert caller.cancelled()
        assert scheduler.pending == 0
        gate.open()
        stats = await accounted(scheduler)
        assert recorder.order == []
        assert stats.cancelled == 1

    drive(kind, main)


def test_cancelling_the_caller_of_run_cancels_a_running_coroutine(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)
        caller = asyncio.ensure_future(scheduler.run(gate, "running"))
        await settle()
        assert gate.started == ["running"]
        caller.cancel()
        await asyncio.wait([caller], timeout=TIMEOUT)
        assert caller.cancelled()
        stats = await accounted(scheduler)
        assert gate.finished == ["running"], "the coroutine was not cancelled"
        assert stats.cancelled == 1

    drive(kind, main)


def test_shield_keeps_the_task_running_when_its_caller_is_cancelled(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)
        future = scheduler.submit(gate, "shielded")
        caller = asyncio.ensure_future(asyncio.shield(future))
        await settle()
        caller.cancel()
        await asyncio.wait([caller], timeout=TIMEOUT)
        assert not future.done()
        gate.open()
        assert await future == "shielded"
        await accounted(scheduler)

    drive(kind, main)


def test_cancelling_the_caller_under_asyncio_timeout_leaves_its_cancel_count_as_asyncio_expects(
    kind: str,
) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout and Task.cancelling() are 3.11+")

    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await scheduler.run(gate, "slow")
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0, "the caller's cancellation state was left changed"
        # And the caller can still await, and be cancelled by a TaskGroup, normally.
        async with asyncio.TaskGroup() as group:
            group.create_task(scheduler.run(asyncio.sleep, 0))
        assert task.cancelling() == 0
        await accounted(scheduler)

    drive(kind, main)


# -- 3. concurrency ----------------------------------------------------------------------------


def test_never_more_than_concurrency_coroutines_run_at_once(kind: str) -> None:
    async def main() -> None:
        peak = Peak()
        scheduler = AsyncPriorityScheduler(3)
        futures = [scheduler.submit(peak.hold, priority=i % 4) for i in range(200)]
        await asyncio.gather(*futures)
        assert peak.most == 3
        stats = await accounted(scheduler)
        assert stats.completed == 200

    drive(kind, main)


def test_a_cancelled_coroutine_keeps_its_slot_until_its_finally_blocks_end(kind: str) -> None:
    async def main() -> None:
        cleanup, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        entered = asyncio.Event()

        async def stubborn() -> None:
            try:
                entered.set()
                await asyncio.sleep(TIMEOUT)
            finally:
                await cleanup("finally")  # still running after its cancel

        running = scheduler.submit(stubborn)
        queued = scheduler.submit(recorder, "next")
        await asyncio.wait_for(entered.wait(), TIMEOUT)
        assert running.cancel()
        assert running.cancelled()
        await settle()
        assert scheduler.active == 1
        assert recorder.order == [], "a task started while the cancelled one still ran"
        cleanup.open()
        assert await queued == "next"
        await accounted(scheduler)

    drive(kind, main)


def test_a_coroutine_that_suppresses_its_cancel_keeps_its_slot_until_it_returns(kind: str) -> None:
    async def main() -> None:
        release, recorder = asyncio.Event(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        entered = asyncio.Event()

        async def deaf() -> str:
            entered.set()
            try:
                await asyncio.sleep(TIMEOUT)
            except asyncio.CancelledError:
                await asyncio.wait_for(release.wait(), TIMEOUT)
            return "suppressed"

        running = scheduler.submit(deaf)
        queued = scheduler.submit(recorder, "next")
        await asyncio.wait_for(entered.wait(), TIMEOUT)
        running.cancel()
        await settle()
        assert scheduler.active == 1
        assert recorder.order == []
        release.set()
        assert await queued == "next"
        assert running.cancelled()
        stats = await accounted(scheduler)
        assert stats.cancelled == 1

    drive(kind, main)


def test_raising_concurrency_starts_queued_tasks_at_once_and_lowering_interrupts_nothing(
    kind: str,
) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)
        futures = [scheduler.submit(gate, i) for i in range(6)]
        await settle()
        assert gate.started == [0]
        scheduler.concurrency = 4
        assert scheduler.active == 4, "a higher concurrency did not start tasks at once"
        scheduler.concurrency = 2
        await settle()
        assert scheduler.active == 4, "a lower concurrency interrupted a running task"
        assert gate.finished == []
        scheduler.concurrency = math.inf
        assert scheduler.active == 6
        gate.open()
        assert await asyncio.gather(*futures) == list(range(6))
        stats = await accounted(scheduler)
        assert stats.max_workers is None  # no limit

    drive(kind, main)


def test_lowering_concurrency_while_full_starts_nothing_until_below_the_new_value(
    kind: str,
) -> None:
    async def main() -> None:
        peak, gate = Peak(), Gate()
        scheduler = AsyncPriorityScheduler(4)
        held = [scheduler.submit(peak.hold, gate=gate) for _ in range(4)]
        rest = [scheduler.submit(peak.hold) for _ in range(10)]
        await settle()
        scheduler.concurrency = 1
        peak.most = peak.now  # from now on, at most one may start at a time
        gate.open()
        await asyncio.gather(*held, *rest)
        assert peak.most == 4  # the four already running, none added
        # Lowered, then raised: as many start as there are free slots, never more.
        scheduler.concurrency = 2
        peak.most = 0
        await asyncio.gather(*[scheduler.submit(peak.hold) for _ in range(20)])
        assert peak.most == 2
        await accounted(scheduler)

    drive(kind, main)


# -- 4. order ----------------------------------------------------------------------------------


def test_higher_priority_starts_first_and_equal_priorities_in_submission_order(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        scheduler.submit(gate)
        plan: list[tuple[float, str]] = [(Priority.LOW, "l1"), (Priority.HIGH, "h1")]
        plan += [(Priority.NORMAL, "n1")]
        plan += [(Priority.HIGH, "h2"), (Priority.LOW, "l2"), (2.5, "top")]
        futures = [scheduler.submit(recorder, name, priority=p) for p, name in plan]
        scheduler._check_invariants()
        gate.open()
        await asyncio.gather(*futures)
        assert recorder.order == ["top", "h1", "h2", "n1", "l1", "l2"]
        await accounted(scheduler)

    drive(kind, main)


def test_set_priority_moves_a_queued_task_and_refuses_a_started_one(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        running = scheduler.submit(gate)
        a = scheduler.submit(recorder, "a")
        b = scheduler.submit(recorder, "b")
        assert scheduler.set_priority(b, Priority.HIGH)
        assert not scheduler.set_priority(running, Priority.HIGH)
        other = AsyncPriorityScheduler(1)
        assert not other.set_priority(a, Priority.HIGH)
        gate.open()
        await asyncio.gather(a, b)
        assert recorder.order == ["b", "a"]
        assert not scheduler.set_priority(a, Priority.HIGH)
        await accounted(scheduler)

    drive(kind, main)


def test_ageing_lets_an_old_low_task_overtake_new_high_ones(kind: str) -> None:
    async def main() -> None:
        clock, gate, recorder = FakeClock(), Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1, clock=clock, ageing=1.0)
        scheduler.submit(gate)
        old = scheduler.submit(recorder, "old low", priority=0)
        clock.advance(5.0)  # five steps of priority
        new = [scheduler.submit(recorder, f"new {p}", priority=p) for p in (3, 6)]
        gate.open()
        await asyncio.gather(old, *new)
        assert recorder.order == ["new 6", "old low", "new 3"]
        await accounted(scheduler)

    drive(kind, main)


# -- 5. cancel ---------------------------------------------------------------------------------


def test_cancel_of_a_queued_task_settles_it_at_once_and_it_never_starts(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        scheduler.submit(gate)
        doomed = scheduler.submit(recorder, "doomed")
        kept = scheduler.submit(recorder, "kept")
        assert doomed.cancel()
        assert doomed.cancelled()
        assert scheduler.pending == 1, "the cancelled task is still queued"
        scheduler._check_invariants()
        assert not doomed.cancel()  # a second cancel is refused, as on any Future
        gate.open()
        await kept
        assert recorder.order == ["kept"]
        stats = await accounted(scheduler)
        assert stats.cancelled == 1

    drive(kind, main)


def test_cancel_of_a_running_task_cancels_its_coroutine_and_settles_its_future(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)
        future = scheduler.submit(gate, "running")
        await settle()
        assert future.cancel()
        assert future.cancelled()
        await scheduler.join(TIMEOUT)
        assert gate.finished == ["running"]
        stats = await accounted(scheduler)
        assert stats.cancelled == 1

    drive(kind, main)


# -- 6. timeout and run_timeout ----------------------------------------------------------------


def test_a_task_not_started_by_its_deadline_expires_and_never_starts(kind: str) -> None:
    async def main() -> None:
        clock, gate, recorder = FakeClock(), Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1, clock=clock)
        scheduler.submit(gate)
        late = scheduler.submit(recorder, "late", timeout=5.0)
        fine = scheduler.submit(recorder, "fine", timeout=50.0)
        scheduler._check_invariants()
        clock.advance(5.0)
        scheduler._wake_timer()
        assert late.cancelled()
        assert not fine.done()
        gate.open()
        await fine
        assert recorder.order == ["fine"]
        stats = await accounted(scheduler)
        assert stats.expired == 1

    drive(kind, main)


def test_a_deadline_wakes_its_awaiter_promptly_while_every_slot_is_busy(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(2)
        for _ in range(2):
            scheduler.submit(gate)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(asyncio.CancelledError):
            await scheduler.submit(gate, timeout=0.02)
        waited = loop.time() - started
        assert 0.015 <= waited < 1.0, f"woke after {waited:.3f} s"
        gate.open()
        await accounted(scheduler)

    drive(kind, main)


def test_a_deadline_and_a_free_slot_at_the_same_clock_reading_expire_the_task(kind: str) -> None:
    async def main() -> None:
        clock, gate, recorder = FakeClock(), Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1, clock=clock)
        held = scheduler.submit(gate)
        due = scheduler.submit(recorder, "due", timeout=5.0)
        clock.advance(5.0)  # the deadline has come; the timer has not fired yet
        gate.open()
        await held
        await settle()
        assert due.cancelled(), "a task started at its deadline"
        assert recorder.order == []
        stats = await accounted(scheduler)
        assert stats.expired == 1

    drive(kind, main)


def test_timeout_zero_expires_at_once_and_counts(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(1)
        future = scheduler.submit(asyncio.sleep, 0, timeout=0)
        assert future.cancelled()
        stats = await accounted(scheduler)
        assert (stats.submitted, stats.expired) == (1, 1)

    drive(kind, main)


def test_run_timeout_cancels_a_coroutine_that_runs_too_long_and_raises_timeout_error(
    kind: str,
) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1, run_timeout=0.02)
        slow = scheduler.submit(gate, "slow")
        with pytest.raises(asyncio.TimeoutError, match=exact("the task ran past run_timeout=0.02")):
            await slow
        assert await scheduler.join(TIMEOUT)  # the coroutine ends after its future settled
        assert gate.finished == ["slow"]
        # A view may set its own, or none.
        unbounded = scheduler.options(run_timeout=None)
        assert unbounded.run_timeout is None
        quick = await unbounded.run(returning, "done", 0.04)
        assert quick == "done"
        stats = await accounted(scheduler)
        assert (stats.failed, stats.completed) == (1, 1)

    drive(kind, main)


def test_run_timeout_follows_the_schedulers_clock_as_queue_deadlines_do(kind: str) -> None:
    async def main() -> None:
        clock, gate = FakeClock(), Gate()
        scheduler = AsyncPriorityScheduler(3, clock=clock, run_timeout=5.0)
        slow = scheduler.submit(gate, "slow")
        own = scheduler.options(run_timeout=8.0).submit(gate, "own")
        quick = scheduler.submit(returning, "quick")
        assert await quick == "quick"  # ended before its deadline: nothing of it is timed
        await settle()
        assert gate.started == ["slow", "own"]
        scheduler._check_invariants()
        clock.advance(4.5)
        scheduler._wake_timer()
        assert not slow.done(), "timed out before its run_timeout on the scheduler's clock"
        clock.advance(0.5)
        scheduler._wake_timer()  # the timer is due: 5 s on the scheduler's clock
        with pytest.raises(asyncio.TimeoutError, match=exact("the task ran past run_timeout=5.0")):
            slow.result()
        assert not own.done()
        await settle()
        assert gate.finished == ["slow"], "its coroutine was not cancelled"
        clock.advance(3.0)
        scheduler._wake_timer()
        with pytest.raises(asyncio.TimeoutError, match=exact("the task ran past run_timeout=8.0")):
            await own
        stats = await accounted(scheduler)
        assert (stats.failed, stats.completed) == (2, 1)

    drive(kind, main)


def test_a_run_timeout_whose_start_the_clock_could_not_stamp_runs_on_the_loops_clock(
    kind: str, futures_log: list[Any]
) -> None:
    async def main() -> None:
        failing = False

        def clock() -> float:
            if failing:
                raise OSError("the clock failed")
            return 1000.0

        gate = Gate()
        scheduler = AsyncPriorityScheduler(1, clock=clock, run_timeout=0.02)
        failing = True
        slow = scheduler.submit(gate, "slow")
        failing = False
        with pytest.raises(asyncio.TimeoutError, match=exact("the task ran past run_timeout=0.02")):
            await slow
        await accounted(scheduler)

    drive(kind, main)
    # Read at the submit and at the start.
    failure = "The pool's clock raised; deadlines wait until it works"
    assert [r.getMessage() for r in futures_log] == [failure] * 2


# -- 7. failures -------------------------------------------------------------------------------


def test_a_failure_before_or_inside_the_coroutine_fails_its_future_and_frees_the_slot(
    kind: str,
) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(1)

        def broken() -> None:
            raise ValueError("before the awaitable")

        async def inside() -> None:
            await asyncio.sleep(0)
            raise OSError("inside")

        first: asyncio.Future[Any] = scheduler.submit(broken)  # type: ignore[arg-type]
        second = scheduler.submit(inside)
        third = scheduler.run(returning, "after")
        with pytest.raises(ValueError, match="before the awaitable"):
            await first
        with pytest.raises(OSError, match="inside"):
            await second
        assert await third == "after"
        stats = await accounted(scheduler)
        assert (stats.failed, stats.completed) == (2, 1)
        # drive() fails the test if a Task's exception was never retrieved.

    drive(kind, main)


# -- 8. views and limits -----------------------------------------------------------------------


def test_a_view_forwards_every_keyword_to_fn_and_takes_its_options_from_itself(kind: str) -> None:
    async def main() -> None:
        gate, seen = Gate(), []

        async def fetch(url: str, **kwargs: Any) -> str:
            seen.append((url, kwargs))
            return url

        scheduler = AsyncPriorityScheduler(1)
        scheduler.submit(gate)
        api = scheduler.options(priority=Priority.HIGH, key="api.example.com")
        assert isinstance(api, AsyncView)
        low = scheduler.submit(fetch, "/low", priority=Priority.LOW)
        high = api.submit(fetch, "/high", timeout=3, priority="forwarded")
        gate.open()
        await asyncio.gather(low, high)
        assert seen == [("/high", {"timeout": 3, "priority": "forwarded"}), ("/low", {})]
        await accounted(scheduler)

    drive(kind, main)


def test_key_limit_holds_back_a_key_and_the_best_task_that_may_start_starts(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(3, key_limit=1)
        a, b = scheduler.options(key="a"), scheduler.options(key="b")
        held = a.submit(gate, "a held")
        a_next = scheduler.options(key="a", priority=Priority.HIGH).submit(recorder, "a next")
        b_task = b.submit(recorder, "b")
        assert await b_task == "b"
        assert recorder.order == ["b"], "a task of a full key started"
        assert scheduler.statistics().held_by_key == 1
        scheduler.key_limit = 2  # settable: the held task starts at once
        assert await a_next == "a next"
        gate.open()
        await held
        await accounted(scheduler)

    drive(kind, main)


def test_rate_limit_spaces_starts_on_the_clock_and_is_settable(kind: str) -> None:
    async def main() -> None:
        clock, recorder = FakeClock(), Recorder()
        scheduler = AsyncPriorityScheduler(10, clock=clock, rate_limit=RateLimit(2, 1.0))
        futures = [scheduler.submit(recorder, i) for i in range(5)]
        await settle()
        assert recorder.order == [0, 1]
        assert scheduler.statistics().rate_limited
        scheduler._check_invariants()
        clock.advance(1.0)
        scheduler._wake_timer()
        await settle()
        assert recorder.order == [0, 1, 2, 3]
        scheduler.rate_limit = None
        await asyncio.gather(*futures)
        assert recorder.order == [0, 1, 2, 3, 4]
        await accounted(scheduler)

    drive(kind, main)


def test_max_queued_raises_or_evicts_the_lowest(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        raising = AsyncPriorityScheduler(1, max_queued=1)
        raising.submit(gate)
        raising.submit(gate)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(1))):
            raising.submit(gate)
        evicting = AsyncPriorityScheduler(1, max_queued=1, when_full="evict")
        evicting.submit(gate)
        low = evicting.submit(gate, priority=Priority.LOW)
        high = evicting.submit(gate, priority=Priority.HIGH)
        assert low.cancelled()
        with pytest.raises(QueueFullError):
            evicting.submit(gate, priority=Priority.LOW)
        gate.open()
        await high
        for scheduler in (raising, evicting):
            stats = await accounted(scheduler)
            assert stats.rejected == 1
        assert evicting.statistics().outcomes[Priority.LOW]["evicted"] == 1

    drive(kind, main)


# -- 9. lifecycle ------------------------------------------------------------------------------


def test_pending_active_pause_resume_and_repr(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(2)
        scheduler.pause()
        assert scheduler.paused
        futures = [scheduler.submit(gate, i) for i in range(3)]
        await settle()
        assert (scheduler.pending, scheduler.active) == (3, 0)
        assert repr(scheduler) == "<AsyncPriorityScheduler paused concurrency=2 queued=3 active=0>"
        scheduler.resume()
        assert (scheduler.pending, scheduler.active) == (1, 2)
        assert repr(scheduler) == "<AsyncPriorityScheduler running concurrency=2 queued=1 active=2>"
        gate.open()
        await asyncio.gather(*futures)
        await scheduler.aclose()
        assert repr(scheduler) == "<AsyncPriorityScheduler closed concurrency=2 queued=0 active=0>"

    drive(kind, main)


def test_join_waits_for_tasks_submitted_meanwhile_and_returns_false_on_timeout(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        assert await scheduler.join()  # nothing yet
        scheduler.submit(gate)
        assert not await scheduler.join(timeout=0.01)

        async def parent() -> None:
            await gate()
            scheduler.submit(recorder, "child")  # submitted while join() waits

        scheduler.submit(parent)
        joining = asyncio.ensure_future(scheduler.join())
        await settle()
        gate.open()
        assert await joining
        assert recorder.order == ["child"]
        await accounted(scheduler)

    drive(kind, main)


def test_join_from_inside_a_task_is_refused(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(2)

        async def inner() -> bool:
            return await scheduler.join()

        message = "cannot join() from one of the scheduler's own tasks: it would wait for itself"
        with pytest.raises(RuntimeError, match=exact(message)):
            await scheduler.run(inner)
        await accounted(scheduler)

    drive(kind, main)


ACLOSE_MESSAGE = "cannot aclose() from one of the scheduler's own tasks: it would wait for itself"


def test_aclose_from_inside_a_task_is_refused_and_leaves_the_scheduler_open(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)

        async def closes() -> None:
            await scheduler.aclose(cancel_futures=True)

        async def leaves_async_with() -> None:
            async with scheduler:
                raise LookupError("the body failed")

        closing = scheduler.submit(closes)
        leaving = scheduler.submit(leaves_async_with)
        queued = scheduler.submit(gate, "queued")
        with pytest.raises(RuntimeError, match=exact(ACLOSE_MESSAGE)):
            await closing
        with pytest.raises(RuntimeError, match=exact(ACLOSE_MESSAGE)):
            await leaving
        assert not queued.done(), "the refused aclose() cancelled what was queued"
        assert repr(scheduler).startswith("<AsyncPriorityScheduler running")
        later = scheduler.submit(returning, "later")  # still open
        gate.open()
        assert await queued == "queued"
        assert await later == "later"
        await scheduler.aclose()
        stats = await accounted(scheduler)
        assert (stats.failed, stats.completed, stats.cancelled) == (2, 2, 0)

    drive(kind, main)


def test_statistics_are_the_thread_pools_type_with_max_workers_meaning_concurrency(
    kind: str,
) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(3)
        scheduler.pause()
        futures = [scheduler.submit(gate, priority=p) for p in (0, 0, 1, 1, 2)]
        scheduler.resume()  # the best three start: 2, 1 and 1
        stats = scheduler.statistics()
        assert isinstance(stats, ExecutorStatistics)
        assert (stats.max_workers, stats.workers, stats.idle_workers) == (3, 3, 0)
        assert (stats.queued, stats.running, stats.submitted) == (2, 3, 5)
        assert stats.queued_by_priority == {0: 2}
        gate.open()
        await asyncio.gather(*futures)
        stats = await accounted(scheduler)
        assert stats.completed == 5
        assert stats.wait[2].count == 1
        assert stats.run[0].count == 2

    drive(kind, main)


def test_an_unbounded_scheduler_reports_its_free_slots_as_infinite(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(math.inf)
        futures = [scheduler.submit(gate, n) for n in range(3)]
        stats = scheduler.statistics()
        assert (stats.max_workers, stats.workers, stats.running) == (None, 3, 3)
        assert stats.idle_workers == math.inf, "reads as saturated"
        gate.open()
        await asyncio.gather(*futures)
        stats = await accounted(scheduler)
        assert (stats.workers, stats.idle_workers) == (0, math.inf)

    drive(kind, main)


def test_aclose_refuses_new_work_cancels_queued_if_asked_and_waits_for_the_rest(
    kind: str,
) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(1)
        running = scheduler.submit(gate, "running")
        queued = scheduler.submit(gate, "queued")
        await settle()
        closing = asyncio.ensure_future(scheduler.aclose(cancel_futures=True))
        await settle()
        assert queued.cancelled()
        assert not closing.done(), "aclose() returned before the running task ended"
        with pytest.raises(RuntimeError, match=exact("cannot schedule new futures after shutdown")):
            scheduler.submit(gate)
        gate.open()
        await closing
        assert running.result() == "running"
        await scheduler.aclose()  # twice is harmless
        stats = await accounted(scheduler)
        assert (stats.completed, stats.cancelled, stats.rejected) == (1, 1, 1)

    drive(kind, main)


def test_aclose_resumes_a_paused_scheduler_so_its_queued_tasks_run(kind: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        scheduler = AsyncPriorityScheduler(1)
        scheduler.pause()
        futures = [scheduler.submit(recorder, i) for i in range(3)]
        await scheduler.aclose()
        assert [f.result() for f in futures] == [0, 1, 2]
        await accounted(scheduler)

    drive(kind, main)


def test_async_with_closes_on_exit_and_cancels_everything_if_the_body_raises(kind: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        async with AsyncPriorityScheduler(2) as scheduler:
            futures = [scheduler.submit(recorder, i) for i in range(4)]
        assert [f.result() for f in futures] == [0, 1, 2, 3]

        gate = Gate()
        failing = AsyncPriorityScheduler(1)
        running = failing.submit(gate, "running")
        queued = failing.submit(gate, "queued")
        await settle()

        async def body() -> None:
            async with failing:
                raise LookupError("the body failed")

        with pytest.raises(LookupError, match="the body failed"):
            await body()
        assert running.cancelled()
        assert queued.cancelled()
        assert gate.started == ["running"]
        assert gate.finished == ["running"]
        assert failing.active == 0
        await accounted(failing)

    drive(kind, main)


# -- 10. one loop ------------------------------------------------------------------------------

LOOP_MESSAGE = (
    "submit() must be called on the event loop the scheduler runs on; from another thread or"
    " loop, use asyncio.run_coroutine_threadsafe(scheduler.run(...), loop)"
)


def test_a_submit_from_another_thread_or_loop_is_refused_naming_the_fix(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(1)
        await scheduler.run(asyncio.sleep, 0)
        errors: list[BaseException] = []

        def elsewhere() -> None:
            try:
                scheduler.submit(asyncio.sleep, 0)
            except RuntimeError as exc:
                errors.append(exc)

            async def other_loop() -> None:
                scheduler.submit(asyncio.sleep, 0)

            try:
                asyncio.run(other_loop())
            except RuntimeError as exc:
                errors.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(TIMEOUT)
        assert [str(e) for e in errors] == [LOOP_MESSAGE, LOOP_MESSAGE]
        # The documented way in, from another thread:
        loop = asyncio.get_running_loop()
        outcome: list[Any] = []
        thread = threading.Thread(
            target=lambda: outcome.append(
                asyncio.run_coroutine_threadsafe(
                    scheduler.run(returning, "via the loop"), loop
                ).result(TIMEOUT)
            )
        )
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.001)
        assert outcome == ["via the loop"]
        await accounted(scheduler)

    drive(kind, main)


def test_an_idle_scheduler_rebinds_to_a_new_loop_and_a_busy_one_refuses(kind: str) -> None:
    scheduler = AsyncPriorityScheduler(1)

    async def first() -> str:
        return await scheduler.run(returning, "first")

    async def second() -> str:
        return await scheduler.run(returning, "second")

    assert drive(kind, first) == "first"
    assert drive(kind, second) == "second"  # idle: rebound to the new loop

    stuck = AsyncPriorityScheduler(1)
    gate = Gate()

    async def leave_running() -> None:
        stuck.pause()  # so the task stays queued when the loop closes
        stuck.submit(gate)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(leave_running())
    loop.close()

    async def reuse() -> None:
        with pytest.raises(RuntimeError, match=exact(LOOP_MESSAGE)):
            stuck.submit(asyncio.sleep, 0)

    drive(kind, reuse)
