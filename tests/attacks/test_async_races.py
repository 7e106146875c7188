"""AsyncPriorityScheduler attacked: the worst thing at the worst moment, on the loop.

Each test puts a cancel, a done-callback, a deadline, a limit change or a closing at the
moment where a scheduler (or one of the libraries it replaces) has gone wrong, across the
options (ageing x max_queued x when_full x views), and checks the invariants after.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref
from typing import Any, Optional

import pytest

from aio_support import (
    LOOPS,
    OPTIONS,
    Gate,
    Peak,
    Recorder,
    accounted,
    drive,
    ids,
    make,
    returning,
    settle,
)
from conftest import TIMEOUT, FakeClock
from priority_executor import AsyncPriorityScheduler, ExecutorStatistics, Priority
from priority_executor._aio_task import COMPACT_SLACK
from support import exact


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS, ids=ids)
def test_cancel_in_the_same_loop_iteration_as_the_start_never_runs_fn(
    kind: str, options: dict[str, Any]
) -> None:
    async def main() -> None:
        ran: list[str] = []

        async def task(name: str) -> None:
            ran.append(name)

        scheduler, target = make(options, clock=FakeClock())
        # A free slot: the task starts inside submit (its Task is made), and is cancelled
        # before the loop runs a single step of it.
        future = target.submit(task, "cancelled at its start")
        assert scheduler.active == 1
        assert future.cancel()
        assert future.cancelled()
        after = target.submit(task, "after")
        await after
        assert ran == ["after"]
        stats = await accounted(scheduler)
        assert stats.cancelled == 1

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS, ids=ids)
def test_a_done_callback_that_cancels_the_next_task_lets_the_one_after_start(
    kind: str, options: dict[str, Any]
) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler, target = make(options, clock=FakeClock())
        first = target.submit(gate, "first")
        second = target.submit(recorder, "second")
        third = target.submit(recorder, "third")
        first.add_done_callback(lambda _: second.cancel())
        gate.open()
        assert await third == "third"
        assert second.cancelled()
        assert recorder.order == ["third"]
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS, ids=ids)
def test_the_caller_cancelled_while_its_task_starts(kind: str, options: dict[str, Any]) -> None:
    async def main() -> None:
        gate, ran = Gate(), []

        async def task() -> None:
            ran.append("ran")
            await asyncio.sleep(TIMEOUT)

        scheduler, target = make(options, clock=FakeClock())
        held = target.submit(gate)
        caller = asyncio.ensure_future(target.run(task))
        await settle()
        # The slot frees (gate) and the caller is cancelled in the same iteration: either
        # the task never starts, or it starts and is cancelled; never left running.
        gate.open()
        caller.cancel()
        await asyncio.wait([caller, held], timeout=TIMEOUT)
        assert caller.cancelled()
        stats = await accounted(scheduler)
        assert stats.cancelled == 1
        assert len(ran) <= 1

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS, ids=ids)
def test_a_deadline_and_a_cancel_and_a_free_slot_at_one_clock_reading(
    kind: str, options: dict[str, Any]
) -> None:
    async def main() -> None:
        clock, gate, recorder = FakeClock(), Gate(), Recorder()
        scheduler, target = make(options, clock=clock)
        held = target.submit(gate)
        due = target.submit(recorder, "due", timeout=2.0)
        cancelled = target.submit(recorder, "cancelled", timeout=2.0)
        kept = target.submit(recorder, "kept", timeout=3.0)
        clock.advance(2.0)
        cancelled.cancel()
        gate.open()
        await held
        scheduler._wake_timer()
        assert await kept == "kept"
        assert due.cancelled()
        assert recorder.order == ["kept"]
        stats = await accounted(scheduler)
        assert (stats.expired, stats.cancelled, stats.completed) == (1, 1, 2)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("options", OPTIONS, ids=ids)
def test_aclose_while_running_tasks_submit_more(kind: str, options: dict[str, Any]) -> None:
    async def main() -> None:
        gate = Gate()
        refused: list[str] = []
        scheduler, target = make(options, concurrency=2)

        async def spawner(depth: int) -> None:
            await gate()
            try:
                target.submit(spawner, depth + 1)
            except RuntimeError as exc:
                refused.append(str(exc))

        futures = [target.submit(spawner, 0) for _ in range(4)]
        await settle()
        closing = asyncio.ensure_future(scheduler.aclose())
        await settle()
        gate.open()
        await closing
        await asyncio.gather(*futures)
        assert refused == ["cannot schedule new futures after shutdown"] * 4
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_cancelled_queued_task_never_lets_two_run_at_a_limit_of_one(kind: str) -> None:
    """aiojobs' bug: a queued job cancelled while the limit is full let two run at once."""

    async def main() -> None:
        peak, gate = Peak(), Gate()
        scheduler = AsyncPriorityScheduler(1)
        futures = [scheduler.submit(peak.hold, gate=gate) for _ in range(6)]
        await settle()
        for future in futures[1:4]:
            assert future.cancel()
        await settle()
        assert peak.most == 1
        gate.open()
        await asyncio.gather(*futures, return_exceptions=True)
        assert peak.most == 1
        stats = await accounted(scheduler)
        assert (stats.cancelled, stats.completed) == (3, 3)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_slot_granted_to_a_task_cancelled_before_its_first_step_is_passed_on_once(
    kind: str,
) -> None:
    """CPython's Semaphore and anyio #947: a wake-up given to a cancelled waiter leaked."""

    async def main() -> None:
        peak, gate = Peak(), Gate()
        scheduler = AsyncPriorityScheduler(2)
        held = [scheduler.submit(peak.hold, gate=gate) for _ in range(2)]
        waiting = [scheduler.submit(peak.hold) for _ in range(6)]
        await settle()
        held[0].cancel()  # frees a slot: waiting[0] starts, its Task not yet stepped
        assert scheduler.active == 2
        waiting[0].cancel()  # cancelled before its first step
        await settle()
        assert peak.most == 2
        gate.open()
        await asyncio.gather(*held, *waiting, return_exceptions=True)
        assert peak.most == 2
        stats = await accounted(scheduler)
        assert (stats.cancelled, stats.completed) == (2, 6)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_lowering_and_raising_concurrency_never_over_grants(kind: str) -> None:
    """anyio #1170 and #1223: lower then raise the limit, and it granted too many."""

    async def main() -> None:
        peak, gate = Peak(), Gate()
        scheduler = AsyncPriorityScheduler(3)
        futures = [scheduler.submit(peak.hold, gate=gate) for _ in range(3)]
        futures += [scheduler.submit(peak.hold) for _ in range(20)]
        await settle()
        scheduler.concurrency = 1
        scheduler.concurrency = 2
        scheduler.concurrency = 1
        scheduler.concurrency = 4
        assert scheduler.active == 4, "a raise starts as many as there are free slots"
        await settle()
        assert peak.most == 4
        gate.open()
        await asyncio.gather(*futures)
        assert peak.most == 4
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_run_timeout_frees_the_slot_only_when_the_coroutine_ends(kind: str) -> None:
    """p-queue's bug: a timeout settled the caller and freed the slot while fn still ran."""

    async def main() -> None:
        cleanup, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1, run_timeout=0.01)

        async def slow() -> None:
            try:
                await asyncio.sleep(TIMEOUT)
            finally:
                await cleanup("cleanup")

        timed_out = scheduler.submit(slow)
        nxt = scheduler.submit(recorder, "next")
        with pytest.raises(asyncio.TimeoutError):
            await timed_out
        await settle()
        assert scheduler.active == 1
        assert recorder.order == []
        cleanup.open()
        assert await nxt == "next"
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_coroutine_that_ends_as_its_run_deadline_comes_keeps_its_result(kind: str) -> None:
    async def main() -> None:
        clock = FakeClock()
        scheduler = AsyncPriorityScheduler(1, clock=clock, run_timeout=5.0)

        def deadline_comes() -> None:  # after the coroutine returned, before its reaping
            clock.advance(5.0)
            scheduler._wake_timer()

        async def ends_in_time() -> str:
            asyncio.get_running_loop().call_soon(deadline_comes)
            return "in time"

        assert await scheduler.run(ends_in_time) == "in time"
        stats = await accounted(scheduler)
        assert (stats.completed, stats.failed) == (1, 0)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_run_deadlines_of_ended_tasks_neither_pile_up_nor_keep_their_futures(kind: str) -> None:
    async def main() -> None:
        gate = Gate()
        scheduler = AsyncPriorityScheduler(2, clock=FakeClock(), run_timeout=5.0)
        held = scheduler.submit(gate)  # its deadline stays the earliest: the others end under it
        ended = [scheduler.submit(returning, n) for n in range(10 * COMPACT_SLACK)]
        await asyncio.gather(*ended)
        await settle()
        assert len(scheduler._owner.runs.heap) <= 2 + COMPACT_SLACK + 1
        kept = [weakref.ref(future) for future in ended]
        del ended
        gc.collect()
        assert [ref() for ref in kept] == [None] * len(kept), "an ended task's future is kept"
        gate.open()
        await held
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager task factories are 3.12+")
def test_an_eager_task_factory_finds_the_start_counted_before_the_first_line() -> None:
    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        scheduler = AsyncPriorityScheduler(2)
        seen: list[int] = []
        children: list[asyncio.Future[Any]] = []

        async def parent(name: int) -> None:
            seen.append(scheduler.active)  # runs inside create_task, eagerly
            if name < 3:
                children.append(scheduler.submit(parent, name + 10))
            await asyncio.sleep(0)

        async def cancel_myself() -> None:
            me = scheduler_futures[-1]
            me.cancel()
            await asyncio.sleep(TIMEOUT)

        futures = [scheduler.submit(parent, i) for i in range(6)]
        scheduler_futures: list[asyncio.Future[Any]] = []
        scheduler_futures.append(scheduler.submit(cancel_myself))
        await asyncio.gather(*futures)
        await asyncio.gather(*children)
        assert all(1 <= active <= 2 for active in seen), seen
        assert scheduler_futures[0].cancelled()
        await accounted(scheduler)

    drive("asyncio", main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_loop_closed_with_tasks_queued_leaves_no_warning(kind: str) -> None:
    scheduler = AsyncPriorityScheduler(1)
    gate = Gate()

    async def main() -> None:
        async def never() -> None:
            raise AssertionError("ran")

        scheduler.pause()
        scheduler.submit(never)
        scheduler.submit(gate)

    drive(kind, main)  # drive() fails on any warning or loop report
    assert scheduler.pending == 2


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("priority_of_view", [Priority.LOW, Priority.HIGH])
def test_rate_and_key_limits_with_cancels_at_each_slot_keep_their_counts(
    kind: str, priority_of_view: int
) -> None:
    async def main() -> None:
        clock, recorder = FakeClock(), Recorder()
        scheduler = AsyncPriorityScheduler(
            4, clock=clock, key_limit=1, key_rate_limit=(2, 1.0), rate_limit=(3, 1.0)
        )
        views = [scheduler.options(key=k, priority=priority_of_view) for k in "ab"]
        futures = [views[i % 2].submit(recorder, i) for i in range(12)]
        cancelled: Optional[asyncio.Future[Any]] = None
        for _ in range(12):
            await settle()
            scheduler._check_invariants()
            pending = [f for f in futures if not f.done()]
            if pending and cancelled is None:
                cancelled = pending[-1]
                cancelled.cancel()
            clock.advance(0.5)
            scheduler._wake_timer()
        await asyncio.gather(*futures, return_exceptions=True)
        assert len(recorder.order) == 11
        stats = await accounted(scheduler)
        assert stats.cancelled == 1

    drive(kind, main)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() is 3.11+")
@pytest.mark.parametrize("kind", LOOPS)
def test_asyncio_run_returning_with_tasks_queued_starts_none_in_the_loops_teardown(
    kind: str,
) -> None:
    """asyncio.run cancels every task at the end: no Task may be started in their place."""
    started: list[int] = []
    figures: list[ExecutorStatistics] = []

    async def work(i: int) -> None:
        started.append(i)
        await asyncio.sleep(TIMEOUT)

    async def main() -> None:
        scheduler = AsyncPriorityScheduler(2)
        for i in range(8):
            scheduler.submit(work, i)
        scheduler.submit(work(100))  # a coroutine object, queued when the loop closes
        await settle()
        asyncio.get_running_loop().call_soon(lambda: figures.append(scheduler.statistics()))

    # drive() cancels what is left, as asyncio.run does, closes the loop and collects the
    # scheduler, with its coroutine object queued; it fails on "Task was destroyed but it
    # is pending!" and on "coroutine was never awaited".
    drive(kind, main)
    assert started == [0, 1]
    (stats,) = figures
    assert (stats.queued, stats.running) == (7, 2)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() is 3.11+")
@pytest.mark.parametrize("kind", LOOPS)
def test_a_task_cancelled_from_outside_holds_the_queue_until_the_next_call(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        running = scheduler.submit(gate, "running")
        queued = scheduler.submit(recorder, "queued")
        await settle()
        (task,) = scheduler._owner.active  # what asyncio.all_tasks() hands a shutdown
        task.cancel()
        await settle()
        assert running.cancelled()
        assert recorder.order == [], "a Task was started in place of one cancelled from outside"
        assert scheduler.pending == 1
        assert await scheduler.join(TIMEOUT)  # any call moves the queue on
        assert queued.result() == "queued"
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_coroutine_that_lets_a_cancelled_error_of_its_own_escape_does_not_stall_the_queue(
    kind: str,
) -> None:
    async def main() -> None:
        shared: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        recorder = Recorder()
        scheduler = AsyncPriorityScheduler(1)

        async def waits_on_shared() -> None:
            await shared

        first = scheduler.submit(waits_on_shared)
        second = scheduler.submit(recorder, "second")
        await settle()
        shared.cancel()  # the coroutine ends with CancelledError; nobody cancelled its Task
        assert await asyncio.wait_for(second, TIMEOUT) == "second"
        assert first.cancelled()
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_result_set_by_hand_on_a_queued_future_takes_its_task_out(kind: str) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        scheduler.submit(gate)
        by_hand = scheduler.submit(recorder, "never")
        failed = scheduler.submit(recorder, "never either")
        by_hand.set_result("by hand")
        failed.set_exception(LookupError("by hand"))
        assert scheduler.pending == 0
        scheduler._check_invariants()
        gate.open()
        stats = await accounted(scheduler)
        assert recorder.order == []
        assert await by_hand == "by hand"
        with pytest.raises(LookupError):
            await failed
        assert stats.completed == 3  # the gate, and the two settled by hand

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_result_set_by_hand_on_a_running_future_keeps_the_slot_until_the_end(
    kind: str,
) -> None:
    async def main() -> None:
        gate, recorder = Gate(), Recorder()
        scheduler = AsyncPriorityScheduler(1)
        running = scheduler.submit(gate, "ran")
        nxt = scheduler.submit(recorder, "next")
        await settle()
        running.set_result("by hand")
        await settle()
        assert scheduler.active == 1
        assert recorder.order == []
        gate.open()
        assert await nxt == "next"
        assert running.result() == "by hand"
        assert gate.finished == ["ran"]
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_finished_coroutine_is_settled_in_its_own_step_and_cancel_then_returns_false(
    kind: str,
) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(2)
        ran: list[str] = []
        futures: list[asyncio.Future[Any]] = []

        async def quick() -> str:
            ran.append("quick")
            return "done"

        async def canceller() -> None:
            # Both started in one pump: quick's first (and only) step ran just before this
            # one, in the same loop iteration, and settled its future as it ended.
            assert ran == ["quick"]
            assert futures[0].done(), "a finished coroutine left its future pending"
            assert not futures[0].cancel(), "a task that ran was reported cancelled"

        futures.append(scheduler.submit(quick))
        futures.append(scheduler.submit(canceller))
        await asyncio.gather(*futures)
        assert futures[0].result() == "done"
        assert ran == ["quick"]
        stats = await accounted(scheduler)
        assert stats.cancelled == 0

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_task_factory_that_raises_fails_the_task_and_closes_its_coroutine(kind: str) -> None:
    async def main() -> None:
        def refuse(loop: Any, coro: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no tasks today")

        asyncio.get_running_loop().set_task_factory(refuse)
        scheduler = AsyncPriorityScheduler(2)

        async def work(i: int) -> int:
            return i

        by_function = scheduler.submit(work, 1)
        by_object = scheduler.submit(work(2))
        for future in (by_function, by_object):
            with pytest.raises(RuntimeError, match="no tasks today"):
                await future
        stats = await accounted(scheduler)
        assert stats.failed == 2
        asyncio.get_running_loop().set_task_factory(None)
        # drive() fails on "coroutine was never awaited".

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_aexit_on_an_error_cancels_a_timed_out_coroutine_still_cleaning_up(kind: str) -> None:
    async def main() -> None:
        entered = asyncio.Event()
        cleaned: list[str] = []
        scheduler = AsyncPriorityScheduler(1, run_timeout=0.01)

        async def stubborn() -> None:
            try:
                await asyncio.sleep(TIMEOUT)
            except asyncio.CancelledError:
                entered.set()  # in its clean-up: a second cancel reaches it here
                try:
                    await asyncio.sleep(TIMEOUT)  # swallows its run_timeout, cleans up long
                finally:
                    cleaned.append("cancelled again")

        future = scheduler.submit(stubborn)
        with pytest.raises(asyncio.TimeoutError):
            await future
        await asyncio.wait_for(entered.wait(), TIMEOUT)

        async def body() -> None:
            async with scheduler:
                raise KeyError("the body failed")

        with pytest.raises(KeyError):
            await asyncio.wait_for(body(), TIMEOUT / 2)
        assert cleaned == ["cancelled again"]
        assert scheduler.active == 0

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_setter_called_off_the_loop_raises_and_changes_nothing(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(2, key_limit=3)
        await scheduler.run(Recorder(), "bound")
        errors: list[BaseException] = []

        def elsewhere() -> None:
            for name, value in (("concurrency", 5), ("key_limit", 1)):
                try:
                    setattr(scheduler, name, value)
                except RuntimeError as exc:
                    errors.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(TIMEOUT)
        assert len(errors) == 2
        assert (scheduler.concurrency, scheduler.key_limit) == (2, 3)
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager task factories are 3.12+")
def test_join_from_an_eagerly_started_first_step_is_refused() -> None:
    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        scheduler = AsyncPriorityScheduler(2)

        async def joins_itself() -> bool:
            return await scheduler.join()

        with pytest.raises(RuntimeError, match="it would wait for itself"):
            await scheduler.submit(joins_itself)
        await accounted(scheduler)

    drive("asyncio", main)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager task factories are 3.12+")
def test_aclose_from_an_eagerly_started_first_step_is_refused_and_leaves_it_open() -> None:
    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        scheduler = AsyncPriorityScheduler(2)

        async def closes() -> None:
            await scheduler.aclose()

        message = "cannot aclose() from one of the scheduler's own tasks: it would wait for itself"
        with pytest.raises(RuntimeError, match=exact(message)):
            await scheduler.submit(closes)
        assert await scheduler.run(returning, "still open") == "still open"
        await accounted(scheduler)

    drive("asyncio", main)


# -- a Task made but not yet begun ----------------------------------------------------------------
# A started task's Task settles it as its own last step; a Task cancelled before its first step
# would end without running that step, so until it begins, a cancel or a run_timeout settles the
# future alone, and the Task, when it begins, finds it settled and never calls the function.


@pytest.mark.parametrize("kind", LOOPS)
def test_a_task_cancelled_before_its_task_begins_never_runs_and_frees_its_slot(kind: str) -> None:
    async def main() -> None:
        recorder = Recorder()
        scheduler = AsyncPriorityScheduler(1)
        first = scheduler.submit(recorder, "first")  # started: its Task has not had a step
        second = scheduler.submit(recorder, "second")
        assert (scheduler.active, scheduler.pending) == (1, 1)
        assert first.cancel()
        assert await asyncio.wait_for(second, TIMEOUT) == "second"
        assert first.cancelled()
        assert recorder.order == ["second"]
        stats = await accounted(scheduler)
        assert (stats.cancelled, stats.completed) == (1, 1)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_run_timeout_passed_before_the_task_begins_fails_it_unrun(kind: str) -> None:
    async def main() -> None:
        clock, recorder = FakeClock(), Recorder()
        scheduler = AsyncPriorityScheduler(1, clock=clock)
        late = scheduler.options(run_timeout=1.0).submit(recorder, "late")
        clock.advance(2.0)
        scheduler._wake_timer()  # the Task made at submit has not begun yet
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(late, TIMEOUT)
        assert recorder.order == []
        stats = await accounted(scheduler)
        assert stats.failed == 1

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_task_cancelled_from_outside_before_it_begins_is_counted_and_holds_the_queue(
    kind: str,
) -> None:
    async def main() -> None:
        recorder = Recorder()
        scheduler = AsyncPriorityScheduler(1)
        never = scheduler.submit(recorder, "never")  # its Task has not had a step
        queued = scheduler.submit(recorder, "queued")
        (task,) = scheduler._owner.active
        task.cancel()  # what asyncio.run's end does to every Task left
        await settle()
        assert task.cancelled()
        assert never.cancelled()
        assert recorder.order == [], "a Task was started in place of one cancelled from outside"
        assert (scheduler.active, scheduler.pending) == (0, 1)
        assert await scheduler.join(TIMEOUT)  # any call moves the queue on
        assert queued.result() == "queued"
        stats = await accounted(scheduler)
        assert (stats.cancelled, stats.completed) == (1, 1)

    drive(kind, main)


def test_a_task_destroyed_unfinished_with_its_loop_and_scheduler_runs_no_bookkeeping() -> None:
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, _context: None)  # "Task was destroyed": expected
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append

    async def forever() -> None:
        await asyncio.sleep(3600)

    async def main() -> weakref.ref[AsyncPriorityScheduler]:
        scheduler = AsyncPriorityScheduler(1)
        scheduler.submit(forever).add_done_callback(lambda _: None)  # settling it needs the loop
        scheduler.submit(forever)  # queued behind it
        await settle()
        return weakref.ref(scheduler)

    try:
        dropped = loop.run_until_complete(main())
        loop.close()  # its Task still pending: closed with GeneratorExit once collected
        del loop
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert dropped() is None
    assert unraisable == [], "closing the Task ran the scheduler's bookkeeping on a closed loop"


@pytest.mark.parametrize("kind", LOOPS)
def test_join_waiting_as_tasks_are_cancelled_from_outside_before_they_begin_returns(
    kind: str,
) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(1)
        futures = [scheduler.submit(returning, n) for n in range(3)]
        futures.append(scheduler.options(timeout=0.05).submit(returning, "expires"))
        joined = asyncio.ensure_future(scheduler.join(TIMEOUT))
        await asyncio.sleep(0)  # join() waits; the first Task has not had a step yet
        (task,) = scheduler._owner.active
        task.cancel()  # from outside, as a "cancel every other task" helper does
        assert await joined, "join() waited for a scheduler that had stopped starting tasks"
        assert futures[0].cancelled()
        assert [future.result() for future in futures[1:3]] == [1, 2]
        assert futures[3].cancelled() or futures[3].result() == "expires"
        await accounted(scheduler)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_coroutine_raising_generator_exit_itself_fails_its_future_and_frees_its_slot(
    kind: str,
) -> None:
    async def raises() -> None:
        await asyncio.sleep(0)
        raise GeneratorExit("raised by the task")

    async def main() -> None:
        scheduler = AsyncPriorityScheduler(1)
        failed = scheduler.submit(raises)
        after = scheduler.submit(returning, "after")
        await asyncio.wait([failed], timeout=TIMEOUT)  # its GeneratorExit is not raised here
        error = failed.exception()
        assert isinstance(error, GeneratorExit)
        assert str(error) == "raised by the task"
        assert await asyncio.wait_for(after, TIMEOUT) == "after"
        stats = await accounted(scheduler)
        assert (stats.failed, stats.completed) == (1, 1)

    drive(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_coroutine_object_whose_task_is_cancelled_before_it_begins_is_closed(kind: str) -> None:
    async def main() -> None:
        scheduler = AsyncPriorityScheduler(1)
        never = scheduler.submit(returning("never"))  # a coroutine object
        (task,) = scheduler._owner.active
        task.cancel()
        await settle()
        assert never.cancelled()
        assert scheduler._owner.coroutines == set()
        await accounted(scheduler)

    # drive() fails on a "coroutine ... was never awaited" warning.
    drive(kind, main)


def test_a_keyboard_interrupt_in_a_task_fails_its_future_and_stops_the_loop() -> None:
    reported: list[Any] = []
    scheduler = AsyncPriorityScheduler(1)
    futures: list[asyncio.Future[Any]] = []

    async def interrupts() -> None:
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(context)
        )
        futures.append(scheduler.submit(interrupts))
        futures.append(scheduler.submit(returning, "queued"))
        await asyncio.sleep(TIMEOUT)

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())  # its end cancels what is left, as after any KeyboardInterrupt
    gc.collect()
    assert isinstance(futures[0].exception(), KeyboardInterrupt)
    assert scheduler.active == 0
    assert reported == [], "the loop reported an error of the scheduler's"
