"""What only PriorityThreadPoolExecutor does: priorities, queue deadlines, prompt cancellation,
shutdown and compaction of the queue's storage. (Each of its other features has a file of its
own: test_ageing.py, test_set_priority.py, test_pause.py, test_join.py, test_statistics.py,
test_backpressure.py, test_view.py for the options view and test_map.py.)

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the
tasks ran is read from a list. Deadlines run on the injected :class:`FakeClock`, so a test
moves time by exactly the amount it means to and never waits for it.
"""

from __future__ import annotations

import math
import random
import sys
import threading
from collections.abc import Callable
from concurrent.futures import (
    FIRST_COMPLETED,
    CancelledError,
    Future,
    ThreadPoolExecutor,
    as_completed,
    wait,
)
from fractions import Fraction
from typing import Any, Optional, cast

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor
from priority_executor._queue import COMPACT_SLACK
from support import (
    FAR,
    HUGE,
    PROMPT,
    SHUTDOWN_MESSAGE,
    Recorder,
    assert_done_promptly,
    assert_nothing_queued,
    exact,
    held_pool,
    hold_worker,
    internals,
)


def fake_clock_pool(clock: FakeClock, max_workers: int = 1) -> PriorityThreadPoolExecutor:
    pool = PriorityThreadPoolExecutor(max_workers=max_workers, clock=clock)
    clock.attach(pool)
    return pool


# -- class shape ----------------------------------------------------------------------------


def test_is_a_thread_pool_executor() -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        assert isinstance(pool, ThreadPoolExecutor)
    finally:
        pool.shutdown()


def test_priority_names_low_normal_high() -> None:
    assert [(p.name, int(p)) for p in Priority] == [("LOW", -1), ("NORMAL", 0), ("HIGH", 1)]
    assert Priority.HIGH > Priority.NORMAL > Priority.LOW


# -- priority order -------------------------------------------------------------------------


def test_higher_priority_runs_first(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        for level in (1, 3, 2):
            pool.submit(record, level, priority=level)
        pool._check_invariants()
        gate.open()
    assert record.ran == [3, 2, 1]


def test_default_priority_is_normal(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        pool.submit(record, "low", priority=Priority.LOW)
        pool.submit(record, "default")
        pool.submit(record, "normal", priority=Priority.NORMAL)
        pool.submit(record, "high", priority=Priority.HIGH)
        gate.open()
    assert record.ran == ["high", "default", "normal", "low"]


def test_equal_priorities_run_in_submission_order(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        for i in range(50):
            pool.submit(record, i, priority=Priority.HIGH)
        gate.open()
    assert record.ran == list(range(50))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_order_is_priority_then_submission(gate: Gate, seed: int) -> None:
    rng = random.Random(seed)
    levels = [rng.choice([-2, -1, 0, 0.5, 1, 7]) for _ in range(200)]
    record = Recorder()
    with held_pool(gate) as pool:
        for i, level in enumerate(levels):
            pool.submit(record, i, priority=level)
        pool._check_invariants()
        gate.open()
    expected = sorted(range(len(levels)), key=lambda i: (-levels[i], i))
    assert record.ran == expected, f"seed={seed}"


def test_any_real_number_is_a_priority(gate: Gate) -> None:
    levels: list[Any] = [
        0,
        -math.inf,
        2.5,
        Priority.HIGH,
        sys.maxsize,
        -3,
        math.inf,
        Fraction(3, 2),
        -sys.maxsize,
        1,  # ties with Priority.HIGH, submitted after it
        0.0,  # ties with 0
        -2.75,
        10**30,  # an int beyond any float's exact range still orders exactly
    ]
    record = Recorder()
    with held_pool(gate) as pool:
        for i, level in enumerate(levels):
            pool.submit(record, i, priority=level)
        pool._check_invariants()
        gate.open()
    expected = sorted(range(len(levels)), key=lambda i: (-levels[i], i))
    assert record.ran == expected
    assert [levels[i] for i in record.ran][:4] == [math.inf, 10**30, sys.maxsize, 2.5]


def test_priority_five_outranks_high(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        pool.submit(record, "high", priority=Priority.HIGH)
        pool.submit(record, "five", priority=5)
        gate.open()
    assert record.ran == ["five", "high"]


def run_producers(produce: Callable[[int], None], count: int) -> None:
    """Run ``produce(0)`` to ``produce(count - 1)``, each in a thread of its own, to the end."""
    producers = [threading.Thread(target=produce, args=(p,)) for p in range(count)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join(TIMEOUT)
        assert not thread.is_alive()


def test_equal_priorities_from_several_threads_follow_one_global_sequence(gate: Gate) -> None:
    record = Recorder()
    order_lock = threading.Lock()
    submitted: list[tuple[int, int]] = []

    def produce(producer: int) -> None:
        for i in range(100):
            # The lock only lets the test know the global order of the submit calls.
            with order_lock:
                submitted.append((producer, i))
                pool.submit(record, (producer, i), priority=Priority.LOW)

    with held_pool(gate) as pool:
        run_producers(produce, 4)
        pool._check_invariants()
        gate.open()
    assert len(record.ran) == 400
    assert record.ran == submitted


def test_concurrent_producers_keep_their_own_order_at_each_priority(gate: Gate) -> None:
    record = Recorder()
    start = threading.Barrier(4, timeout=TIMEOUT)

    def produce(producer: int) -> None:
        start.wait()
        for i in range(150):
            pool.submit(record, (producer, i), priority=i % 3)

    with held_pool(gate) as pool:
        run_producers(produce, 4)
        pool._check_invariants()
        gate.open()
    levels = [i % 3 for _producer, i in record.ran]
    assert levels == sorted(levels, reverse=True), "a lower priority ran before a higher one"
    for producer in range(4):
        mine = [i for p, i in record.ran if p == producer]
        assert mine == sorted(mine, key=lambda i: (-(i % 3), i)), f"producer {producer}"
        assert len(mine) == 150


# -- bad arguments --------------------------------------------------------------------------

BAD_PRIORITIES = [
    ("high", TypeError, "priority must be a real number, got 'high' (str)"),
    (None, TypeError, "priority must be a real number, got None (NoneType)"),
    (True, TypeError, "priority must be a real number, got True (bool)"),
    (1j, TypeError, "priority must be a real number, got 1j (complex)"),
    (math.nan, ValueError, "priority must not be NaN, got nan (float)"),
]

BAD_TIMEOUTS = [
    ("5", TypeError, "timeout must be a real number or None, got '5' (str)"),
    (False, TypeError, "timeout must be a real number or None, got False (bool)"),
    ([1], TypeError, "timeout must be a real number or None, got [1] (list)"),
    (-1, ValueError, "timeout must be a non-negative number, got -1 (int)"),
    (-0.5, ValueError, "timeout must be a non-negative number, got -0.5 (float)"),
    (-math.inf, ValueError, "timeout must be a non-negative number, got -inf (float)"),
    (math.nan, ValueError, "timeout must be a non-negative number, got nan (float)"),
]


@pytest.mark.parametrize(("priority", "error", "message"), BAD_PRIORITIES)
def test_bad_priority_is_rejected_at_submit_and_nothing_is_queued(
    priority: object, error: type[Exception], message: str
) -> None:
    record = Recorder()
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(error, match=exact(message)):
            pool.submit(record, 1, priority=cast(Any, priority))
        with pytest.raises(error, match=exact(message)):
            pool.map(record, [1], priority=cast(Any, priority))
        with pytest.raises(error, match=exact(message)):
            pool.options(priority=cast(Any, priority))
        assert_nothing_queued(pool)
    assert record.ran == []


@pytest.mark.parametrize(("timeout", "error", "message"), BAD_TIMEOUTS)
def test_bad_timeout_is_rejected_at_submit_and_nothing_is_queued(
    timeout: object, error: type[Exception], message: str
) -> None:
    record = Recorder()
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(error, match=exact(message)):
            pool.submit(record, 1, timeout=cast(Any, timeout))
        with pytest.raises(error, match=exact(message)):
            pool.options(timeout=cast(Any, timeout))
        assert_nothing_queued(pool)
    assert record.ran == []


def test_non_callable_fn_is_rejected_at_submit() -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(TypeError, match=exact("fn must be callable, got 'text' (str)")):
            pool.submit(cast(Any, "text"), priority=Priority.HIGH)
        with pytest.raises(TypeError, match=exact("fn must be callable, got None (NoneType)")):
            pool.options().submit(cast(Any, None))
        assert_nothing_queued(pool)


def test_clock_must_be_callable() -> None:
    with pytest.raises(TypeError, match=exact("clock must be callable, got 1.5 (float)")):
        PriorityThreadPoolExecutor(max_workers=1, clock=cast(Any, 1.5))


# -- queue deadlines ------------------------------------------------------------------------


def test_task_queued_past_its_deadline_is_cancelled_and_never_runs(
    clock: FakeClock, gate: Gate
) -> None:
    record = Recorder()
    with held_pool(gate, clock) as pool:
        future = pool.submit(record, "late", timeout=FAR)
        pool._check_invariants()
        clock.advance(FAR + 1)
        assert_done_promptly(future)  # while the only worker is still busy
        assert future.cancelled()
        with pytest.raises(CancelledError):
            future.result(timeout=0)
        assert list(as_completed([future], timeout=0)) == [future]
        assert internals(pool).queued() == 0
        pool._check_invariants()
        gate.open()
    assert record.ran == []


def test_expiry_wakes_result_and_as_completed_waiters_while_every_worker_is_busy(
    clock: FakeClock, gate: Gate
) -> None:
    second_gate = Gate()
    outcomes: list[str] = []

    def wait_for_result(future: Future[Any]) -> None:
        try:
            future.result(timeout=TIMEOUT)
        except CancelledError:
            outcomes.append("cancelled")

    def wait_in_as_completed(future: Future[Any]) -> None:
        for done in as_completed([future], timeout=TIMEOUT):
            outcomes.append("as_completed" if done.cancelled() else "not cancelled")

    pool = fake_clock_pool(clock, max_workers=2)
    try:
        pool.submit(gate)
        pool.submit(second_gate)
        gate.wait_started()
        second_gate.wait_started()
        future = pool.submit(int, timeout=FAR)
        waiters = [
            threading.Thread(target=wait_for_result, args=(future,)),
            threading.Thread(target=wait_in_as_completed, args=(future,)),
        ]
        for thread in waiters:
            thread.start()
        clock.advance(FAR)
        for thread in waiters:
            thread.join(PROMPT)
            assert not thread.is_alive(), "a waiter was not woken by the expiry"
        assert sorted(outcomes) == ["as_completed", "cancelled"]
    finally:
        gate.open()
        second_gate.open()
        pool.shutdown()


def test_task_runs_when_the_clock_stops_short_of_its_deadline(clock: FakeClock, gate: Gate) -> None:
    with held_pool(gate, clock) as pool:
        future = pool.submit(int, "9", timeout=0.5)
        clock.advance(0.25)
        gate.open()
        assert future.result(timeout=TIMEOUT) == 9


def test_deadline_equal_to_the_clock_reading_expires(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate, clock) as pool:
        future = pool.submit(record, "due", timeout=0.5)
        clock.advance(0.5)  # 1000.0 + 0.5: exactly the deadline, no rounding
        assert_done_promptly(future)
        assert future.cancelled()
        gate.open()
    assert record.ran == []


def test_only_tasks_whose_deadline_has_come_expire(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate, clock) as pool:
        short = pool.submit(record, "short", timeout=10)
        never = pool.submit(record, "no deadline")
        long = pool.submit(record, "long", timeout=30)
        clock.advance(20)
        assert_done_promptly(short)
        assert short.cancelled()
        assert not long.done()
        assert not never.done()
        pool._check_invariants()
        gate.open()
        assert long.result(timeout=TIMEOUT) == "long"
    assert record.ran == ["no deadline", "long"]


@pytest.mark.parametrize("timeout", [0, 0.0, Fraction(0)])
def test_timeout_zero_cancels_at_once_even_with_an_idle_worker(
    clock: FakeClock, timeout: Any
) -> None:
    record = Recorder()
    called_back: list[Future[Any]] = []
    with fake_clock_pool(clock, max_workers=2) as pool:
        pool.submit(int).result(timeout=TIMEOUT)  # a worker is now idle
        future = pool.submit(record, "never", timeout=timeout)
        assert future.cancelled()
        future.add_done_callback(called_back.append)
        assert called_back == [future]
        done, _ = wait([future], timeout=0)
        assert done == {future}
        pool._check_invariants()
    assert record.ran == []


def test_started_task_is_never_interrupted_by_its_deadline(clock: FakeClock) -> None:
    started = threading.Event()
    release = threading.Event()

    def long_task() -> str:
        started.set()
        assert release.wait(TIMEOUT)
        return "finished"

    with fake_clock_pool(clock) as pool:
        try:
            running = pool.submit(long_task, timeout=5)
            assert started.wait(TIMEOUT)
            queued = pool.submit(int, timeout=5)
            clock.advance(10)
            assert_done_promptly(queued)  # the timer has seen the new time
            assert queued.cancelled()
            assert running.running()
            assert not running.cancel()
        finally:
            release.set()
        assert running.result(timeout=TIMEOUT) == "finished"


def test_worker_reaching_an_expired_entry_before_the_timer_cancels_it(
    gate: Gate, clock: FakeClock
) -> None:
    record = Recorder()
    # Not attached: moving the clock does not wake the timer, which sleeps for FAR real
    # seconds, so the worker is the first to see this deadline has passed.
    with held_pool(gate, clock, attach=False) as pool:
        expired = pool.submit(record, "expired", timeout=FAR)
        later = pool.submit(record, "later")
        clock.advance(FAR)
        gate.open()
        assert later.result(timeout=TIMEOUT) == "later"
        assert expired.cancelled()
        done, _ = wait([expired], timeout=0)
        assert done == {expired}
    assert record.ran == ["later"]


def test_later_earlier_deadline_rearms_the_timer(clock: FakeClock, gate: Gate) -> None:
    with held_pool(gate, clock) as pool:
        slow = pool.submit(int, timeout=10 * FAR)
        soon = pool.submit(int, timeout=FAR)
        clock.advance(FAR)
        assert_done_promptly(soon)
        assert soon.cancelled()
        assert not slow.done()
        pool._check_invariants()
        gate.open()
        assert slow.result(timeout=TIMEOUT) == 0


@pytest.mark.parametrize("timeout", [math.inf, 1e300, threading.TIMEOUT_MAX * 2])
def test_huge_timeout_never_expires_and_keeps_other_deadlines_working(
    clock: FakeClock, gate: Gate, timeout: float
) -> None:
    crash: Future[BaseException] = Future()
    previous_hook = threading.excepthook

    def record_thread_failure(args: Any) -> None:
        if not crash.done():
            crash.set_result(args.exc_value)

    threading.excepthook = record_thread_failure
    try:
        with held_pool(gate, clock) as pool:
            patient = pool.submit(int, "1", timeout=timeout)
            expired = []
            for _ in range(2):
                other = pool.submit(int, "2", timeout=FAR)
                clock.advance(FAR)
                watched: list[Future[Any]] = [other, crash]
                wait(watched, timeout=PROMPT, return_when=FIRST_COMPLETED)
                assert not crash.done(), f"a pool thread died: {crash.result()!r}"
                expired.append(other.cancelled())
            assert expired == [True, True]
            gate.open()
            assert patient.result(timeout=TIMEOUT) == 1
    finally:
        threading.excepthook = previous_hook


# An int timeout beyond float range means "no deadline" instead of raising OverflowError.


@pytest.mark.parametrize("ageing", [None, 1.0])
def test_a_timeout_beyond_float_range_means_no_deadline(
    clock: FakeClock, gate: Gate, ageing: Optional[float]
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, ageing=ageing)
    clock.attach(pool)
    try:
        pool.submit(gate)
        gate.wait_started()
        patient = pool.submit(str, "patient", timeout=HUGE)
        pool_internals = internals(pool)
        with pool_internals.lock:
            assert pool_internals.queue.deadline_count == 0
            assert pool_internals.timer.thread is None, "a deadline timer was started"
        clock.advance(1e300)
        assert not patient.done()
        pool._check_invariants()
        gate.open()
        assert patient.result(TIMEOUT) == "patient"
    finally:
        gate.open()
        pool.shutdown()


# -- cancellation ---------------------------------------------------------------------------


def test_cancel_of_queued_task_is_seen_by_wait_while_the_worker_is_busy(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        future = pool.submit(record, "cancelled", priority=Priority.LOW)
        assert future.cancel()
        assert_done_promptly(future)
        assert list(as_completed([future], timeout=PROMPT)) == [future]
        assert internals(pool).queued() == 0
        pool._check_invariants()
        gate.open()
    assert record.ran == []


def test_cancel_of_low_task_behind_high_stream_wakes_its_waiter(gate: Gate) -> None:
    with held_pool(gate) as pool:
        low = pool.submit(int, priority=Priority.LOW)
        highs = [pool.submit(int, priority=Priority.HIGH) for _ in range(20)]
        waiter_saw: list[bool] = []
        waiter = threading.Thread(
            target=lambda: waiter_saw.append(bool(wait([low], timeout=TIMEOUT).done))
        )
        waiter.start()
        assert low.cancel()
        waiter.join(PROMPT)
        assert not waiter.is_alive()
        assert waiter_saw == [True]
        assert not any(f.done() for f in highs)
        gate.open()


def test_cancel_after_start_fails_and_the_task_finishes(gate: Gate) -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        blocker = hold_worker(pool, gate)
        cancelled = blocker.cancel()
        gate.open()
        assert not cancelled
        assert blocker.result(timeout=TIMEOUT) == "gate"


# -- shutdown -------------------------------------------------------------------------------


def test_shutdown_cancel_futures_wakes_waiters_already_blocked(gate: Gate) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        blocker = hold_worker(pool, gate)
        queued = [pool.submit(int, priority=i) for i in range(5)]
        woke: list[int] = []
        waiters = [
            threading.Thread(target=lambda: woke.append(len(wait(queued, timeout=TIMEOUT).done)))
            for _ in range(3)
        ]
        for thread in waiters:
            thread.start()
        pool.shutdown(wait=False, cancel_futures=True)
        for thread in waiters:
            thread.join(PROMPT)
            assert not thread.is_alive(), "a waiter was not woken by shutdown(cancel_futures)"
        assert woke == [5, 5, 5]
        assert all(f.cancelled() for f in queued)
        assert not blocker.done()
        gate.open()
        pool.shutdown(wait=True)
        assert blocker.result(timeout=0) == "gate"
    finally:
        gate.open()
        pool.shutdown()


def test_every_future_is_done_after_shutdown_cancel_futures(clock: FakeClock, gate: Gate) -> None:
    pool = fake_clock_pool(clock, max_workers=1)
    futures: list[Future[Any]] = []
    try:
        futures.append(hold_worker(pool, gate))
        for i in range(30):
            futures.append(pool.submit(int, priority=i % 4, timeout=None if i % 2 else FAR))
        futures[5].cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        gate.open()
        pool.shutdown(wait=True)
        assert all(f.done() for f in futures)
        assert all(f.cancelled() for f in futures[1:])
    finally:
        gate.open()
        pool.shutdown()


def test_done_callback_submitting_during_shutdown_cancel_futures_gets_runtime_error(
    gate: Gate,
) -> None:
    errors: list[BaseException] = []
    pool = PriorityThreadPoolExecutor(max_workers=1)

    def resubmit(_: Future[Any]) -> None:
        try:
            pool.submit(int)
        except BaseException as exc:
            errors.append(exc)

    try:
        hold_worker(pool, gate)
        queued = [pool.submit(int) for _ in range(3)]
        for future in queued:
            future.add_done_callback(resubmit)
        # The standard pool deadlocks here; run it on a thread so a regression fails, not hangs.
        stopper = threading.Thread(
            target=pool.shutdown, kwargs={"wait": False, "cancel_futures": True}
        )
        stopper.start()
        stopper.join(TIMEOUT)
        assert not stopper.is_alive(), "shutdown(cancel_futures=True) deadlocked"
        assert [type(e) for e in errors] == [RuntimeError] * 3
        assert [str(e) for e in errors] == [SHUTDOWN_MESSAGE] * 3
        assert all(f.cancelled() for f in queued)
    finally:
        gate.open()
        pool.shutdown()


def test_shutdown_without_cancel_runs_queued_tasks_in_priority_order(gate: Gate) -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        hold_worker(pool, gate)
        for level in (0, 2, 1, 2):
            pool.submit(record, level, priority=level)
        pool.shutdown(wait=False)
        with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
            pool.submit(record, 9, priority=9)
        gate.open()
        pool.shutdown(wait=True)
    finally:
        gate.open()
        pool.shutdown()
    assert record.ran == [2, 2, 1, 0]


def test_shutdown_wait_from_inside_a_task_returns_without_waiting_for_the_pool() -> None:
    release = threading.Event()
    other_started = threading.Event()

    def other() -> str:
        other_started.set()
        assert release.wait(TIMEOUT)
        return "other"

    def stop_pool() -> str:
        # A pool thread cannot wait for the pool; the standard pool raises or deadlocks here.
        pool.shutdown(wait=True)
        return "returned"

    pool = PriorityThreadPoolExecutor(max_workers=2)
    try:
        other_future = pool.submit(other)
        assert other_started.wait(TIMEOUT)
        assert pool.submit(stop_pool).result(timeout=TIMEOUT) == "returned"
        assert not other_future.done()  # it returned while the other worker was still busy
        assert pool._shutdown
        release.set()
        assert other_future.result(timeout=TIMEOUT) == "other"
    finally:
        release.set()
        pool.shutdown()
    assert not any(t.is_alive() for t in pool._threads)


# -- invariants and memory ------------------------------------------------------------------


def test_invariants_hold_after_every_step(clock: FakeClock, gate: Gate) -> None:
    pool = fake_clock_pool(clock, max_workers=2)
    second_gate = Gate()
    try:
        pool._check_invariants()
        pool.submit(gate)
        pool._check_invariants()
        pool.submit(second_gate)
        gate.wait_started()
        second_gate.wait_started()
        pool._check_invariants()
        futures = [
            pool.submit(int, priority=i % 3, timeout=(i + 1) * 10 if i % 2 else None)
            for i in range(20)
        ]
        pool._check_invariants()
        for future in futures[::3]:
            future.cancel()
            pool._check_invariants()
        clock.advance(45)
        assert_done_promptly(*[f for i, f in enumerate(futures) if i % 2 and (i + 1) * 10 <= 45])
        pool._check_invariants()
        gate.open()
        pool._check_invariants()
        second_gate.open()
        wait(futures, timeout=TIMEOUT)
        pool._check_invariants()
        pool.shutdown(wait=True)
        pool._check_invariants()
    finally:
        gate.open()
        second_gate.open()
        pool.shutdown()


def test_heap_stays_proportional_to_live_tasks_after_mass_cancel(gate: Gate) -> None:
    rng = random.Random(13)
    with held_pool(gate) as pool:
        futures = [pool.submit(int, priority=rng.randint(-5, 5)) for _ in range(2000)]
        victims = rng.sample(futures, 1800)
        for step, future in enumerate(victims):
            assert future.cancel()
            if step % 200 == 0:
                pool._check_invariants()
        queue = internals(pool).queue
        live = len(queue)
        assert live == 200
        assert queue.stored <= 2 * live + COMPACT_SLACK
        pool._check_invariants()
        gate.open()
        survivors = [f for f in futures if not f.cancelled()]
        assert wait(survivors, timeout=TIMEOUT).not_done == set()


def test_heap_is_compacted_after_mass_expiry(clock: FakeClock, gate: Gate) -> None:
    with held_pool(gate, clock) as pool:
        expiring = [pool.submit(int, timeout=FAR) for _ in range(1000)]
        staying = [pool.submit(int) for _ in range(10)]
        clock.advance(FAR)
        assert_done_promptly(*expiring)
        queue = internals(pool).queue
        assert len(queue) == 10
        assert queue.stored <= 2 * 10 + COMPACT_SLACK
        assert len(queue.deadlines) <= COMPACT_SLACK
        pool._check_invariants()
        gate.open()
        assert wait(staying, timeout=TIMEOUT).not_done == set()
