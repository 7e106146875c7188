"""``join(timeout=None)``: wait until nothing is queued or running, and every future the pool took
out of the queue (expired, cancelled by shutdown) is settled, callbacks included; True then,
False on a timeout. It returns at once on an idle pool, wakes every thread that waits in it,
refuses to wait from one of the pool's own threads, and takes any timeout a lock cannot.

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. Deadlines run on a :class:`FakeClock`. A join that must wait runs in a
helper thread, and the test waits until the pool counts it among its joiners before it lets the
pool become idle. Nothing sleeps and every wait has a timeout.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future, wait
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PriorityThreadPoolExecutor
from support import (
    AGEING,
    FAR,
    STUCK,
    closing,
    exact,
    hold_worker,
    in_thread,
    internals,
    joined_promptly,
    timer_asleep,
    wait_until,
)

JOIN_FROM_WORKER_MESSAGE = (
    "cannot join() from one of the pool's own threads: it would wait for itself"
)


# -- join -----------------------------------------------------------------------------------


def test_join_returns_true_at_once_when_idle() -> None:
    pool = PriorityThreadPoolExecutor(2)
    try:
        assert pool.join() is True  # never used
        assert pool.join(0) is True
        futures = [pool.submit(str, i) for i in range(10)]
        assert joined_promptly(pool)
        assert all(future.done() for future in futures)
        stats = pool.statistics()
        assert (stats.queued, stats.running, stats.completed) == (0, 0, 10)
        pool.pause()
        assert pool.join(0) is True  # paused but empty is idle
    finally:
        pool.shutdown()


def test_join_returns_false_on_timeout_while_a_task_runs(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        hold_worker(pool, gate)
        assert pool.join(0.05) is False
        assert pool.join(0) is False
        gate.open()
        assert joined_promptly(pool)


def test_join_from_several_threads_returns_true_in_each(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(str, "queued")
        joiners = [in_thread(lambda: joined_promptly(pool)) for _ in range(4)]
        wait_until(lambda: internals(pool).joiners() == 4, "four threads wait in join()")
        assert not any(joiner.future.done() for joiner in joiners)
        gate.open()
        assert [joiner.result() for joiner in joiners] == [True] * 4


def test_join_from_a_task_raises_instead_of_waiting_for_itself() -> None:
    # With a timeout, so that a pool that let the task wait for itself fails this test
    # instead of hanging it.
    pool = PriorityThreadPoolExecutor(1)
    try:
        for timeout in (TIMEOUT, 0):
            joined = pool.submit(pool.join, timeout)
            error = joined.exception(2 * TIMEOUT)
            assert isinstance(error, RuntimeError)
            assert str(error) == JOIN_FROM_WORKER_MESSAGE
        with_timeout = pool.submit(pool.join, TIMEOUT)
        with pytest.raises(RuntimeError, match=exact(JOIN_FROM_WORKER_MESSAGE)):
            with_timeout.result(2 * TIMEOUT)
    finally:
        pool.shutdown()


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        ("x", TypeError, "timeout must be a real number or None, got 'x' (str)"),
        (True, TypeError, "timeout must be a real number or None, got True (bool)"),
        (-1, ValueError, "timeout must be a non-negative number, got -1 (int)"),
        (math.nan, ValueError, "timeout must be a non-negative number, got nan (float)"),
    ],
)
def test_join_refuses_a_bad_timeout_with_an_exact_message(
    timeout: Any, error: type[Exception], message: str
) -> None:
    pool = PriorityThreadPoolExecutor(1)
    try:
        with pytest.raises(error, match=exact(message)):
            pool.join(timeout)
    finally:
        pool.shutdown()


# -- waiting for what the pool settles ------------------------------------------------------


def test_join_wakes_when_a_worker_expires_the_last_queued_task(
    clock: FakeClock, gate: Gate
) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock)  # not attached: the timer stays asleep
    with closing(pool, gate):
        hold_worker(pool, gate)
        late = pool.submit(str, "late", timeout=FAR)
        timer_asleep(pool, clock() + FAR)
        clock.advance(2 * FAR)  # the worker, not the timer, will find the task expired
        joiner = in_thread(lambda: pool.join(TIMEOUT))
        wait_until(lambda: internals(pool).joiners() == 1, "join() waits")
        gate.open()
        assert late in wait([late], TIMEOUT).done
        assert late.cancelled()
        assert pool.statistics().expired == 1
        try:
            assert joiner.result(STUCK) is True
        finally:
            pool.shutdown()  # wakes the joiner if the bug kept it waiting


# join() returns True only once every earlier future is done, callbacks included: the removal of
# expired (and shut-down-cancelled) tasks wakes join() only after their futures are settled and
# their callbacks have run.


@pytest.mark.parametrize("ageing", AGEING)
@pytest.mark.parametrize("how", ["expired by the timer", "cancelled by shutdown"])
def test_join_waits_for_futures_the_pool_takes_out_of_the_queue_to_settle(
    ageing: Optional[float], how: str, clock: FakeClock
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, ageing=ageing)
    clock.attach(pool)
    in_callback, release = threading.Event(), threading.Event()

    def slow_callback(_: Future[Any]) -> None:
        in_callback.set()
        assert release.wait(TIMEOUT)

    closer = None
    try:
        pool.pause()
        future = pool.submit(str, "never runs", timeout=1.0)
        future.add_done_callback(slow_callback)
        if how == "expired by the timer":
            clock.advance(1.0)
        else:
            closer = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
            closer.start()
        assert in_callback.wait(TIMEOUT)
        assert future.cancelled()
        assert pool.join(timeout=0) is False, "join() returned while a callback still ran"
        release.set()
        assert pool.join(TIMEOUT)
        pool._check_invariants()
    finally:
        release.set()
        if closer is not None:
            closer.join(TIMEOUT)
        pool.shutdown()


# -- a timeout beyond what a lock takes -----------------------------------------------------


# join() with a huge timeout waits instead of raising OverflowError.


@pytest.mark.parametrize("timeout", [1e20, float(threading.TIMEOUT_MAX) * 2, 10**30])
def test_join_with_a_timeout_beyond_what_a_lock_takes_waits(timeout: float, gate: Gate) -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        assert pool.join(timeout) is True
        pool.submit(gate)
        gate.wait_started()
        joined: list[bool] = []
        joiner = threading.Thread(target=lambda: joined.append(pool.join(timeout)))
        joiner.start()
        wait_until(lambda: internals(pool).joiners() == 1, "join() waits")
        gate.open()
        joiner.join(TIMEOUT)
        assert joined == [True]
