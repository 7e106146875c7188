"""The claim step and settling: a queued future is settled once, by whoever takes it first (a
worker claiming it, its user cancelling it, the timer expiring it, shutdown cancelling it), even
when a library settles it by hand meanwhile; and every future the pool takes out of the queue
together is settled, its waiters woken, before any of their callbacks runs, so that no callback
delays or pre-empts the settling of another future.

A race is not left to chance: a profile hook stops the worker between its pop and its claim, or
a callback that never returns holds a thread, and the test acts meanwhile. Deadlines run on a
:class:`FakeClock`. Nothing sleeps to synchronise and every wait has a timeout; what
``concurrent.futures`` logs and every thread that dies are recorded.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, InvalidStateError, wait
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PriorityThreadPoolExecutor
from priority_executor._claim import claim
from support import AGEING, KINDS, internals, make_pool, timer_asleep, wait_until


def unexpected_state(future: Future[Any]) -> tuple[int, str]:
    """What ``Future.set_running_or_notify_cancel`` logs for a future settled by hand."""
    return logging.CRITICAL, f"Future {id(future)} in unexpected state: FINISHED"


def levels_and_messages(records: list[logging.LogRecord]) -> list[tuple[int, str]]:
    return [(record.levelno, record.getMessage()) for record in records]


# -- a future settled by hand while it is queued or being claimed ---------------------------


# A future settled by hand while it is queued or being claimed: claim() returns False instead of
# letting the RuntimeError of set_running_or_notify_cancel() escape. Were it to escape, a worker
# that had popped such a future would die with the task counted as running (join() would hang),
# and the deadline timer would die with it, after which no deadline would expire while workers
# were busy.


@pytest.mark.parametrize("cancel", [False, True])
def test_claim_of_a_future_settled_by_hand_returns_false(
    cancel: bool, futures_log: list[logging.LogRecord]
) -> None:
    future: Future[str] = Future()
    future.set_result("by hand")
    assert claim(future, cancel=cancel) is False
    assert future.result(0) == "by hand"
    assert levels_and_messages(futures_log) == [unexpected_state(future)]


def test_a_worker_survives_a_future_settled_by_hand_between_pop_and_claim(
    futures_log: list[logging.LogRecord], thread_deaths: list[str]
) -> None:
    popped, settled = threading.Event(), threading.Event()

    def hook(frame: Any, event: str, arg: object) -> None:
        # In the new worker: the call of _claim.run, after the pop and before the claim.
        code = frame.f_code
        if (
            event == "call"
            and code.co_name == "run"
            and code.co_filename.endswith("_claim.py")
            and not popped.is_set()
        ):
            popped.set()
            assert settled.wait(TIMEOUT)

    pool = PriorityThreadPoolExecutor(max_workers=1, thread_name_prefix="handset")
    threading.setprofile(hook)  # for the worker that the next submit starts
    try:
        future = pool.submit(str, "never runs")
        assert popped.wait(TIMEOUT), "the worker never reached the claim"
        threading.setprofile(None)
        future.set_result("by hand")  # a library resolving a stale request, say
        settled.set()
        assert pool.join(TIMEOUT), "the task stays counted as running"
        assert thread_deaths == []
        assert future.result(0) == "by hand"
        assert pool.submit(str, "next").result(TIMEOUT) == "next"
        assert [t.name for t in pool._threads] == ["handset_0"]
        pool._check_invariants()
        assert levels_and_messages(futures_log) == [unexpected_state(future)]
    finally:
        threading.setprofile(None)
        settled.set()
        pool.shutdown()


# -- settled before any callback runs -------------------------------------------------------


def test_the_timer_settles_every_due_future_before_any_of_their_callbacks_runs(
    clock: FakeClock, gate: Gate, futures_log: list[logging.LogRecord], thread_deaths: list[str]
) -> None:
    # The timer cancels every due future and wakes its waiters before it runs any of their
    # callbacks: were they cancelled one by one, each with its callbacks, the first one's
    # callback could still settle the second by hand, and a slow one would make the rest late.
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, thread_name_prefix="handset")
    clock.attach(pool)
    try:
        pool.submit(gate)
        gate.wait_started()
        first = pool.submit(str, "first", timeout=1.0)
        second = pool.submit(str, "second", timeout=1.0)
        first.add_done_callback(lambda _: second.set_result("by hand"))
        clock.advance(1.0)
        assert wait([first, second], timeout=TIMEOUT).not_done == set()
        assert first.cancelled()
        assert second.cancelled(), "a callback of the first settled the second by hand"
        wait_until(lambda: len(futures_log) == 1, "the callback of the first ran")
        later = pool.submit(str, "later", timeout=1.0)
        clock.advance(1.0)
        assert wait([later], timeout=TIMEOUT).done == {later}, "the timer died"
        assert later.cancelled()
        assert thread_deaths == []
        (record,) = futures_log
        assert record.getMessage() == f"exception calling callback for {first!r}"
        assert record.exc_info is not None
        assert record.exc_info[0] is InvalidStateError
    finally:
        gate.open()
        pool.shutdown()
    pool._check_invariants()


# No user callback delays the settling of another future: the timer hands the callbacks of what
# it expires to callback threads, so a callback that sleeps makes no other expiry, nor the
# timer's next deadlines, late.


@pytest.mark.parametrize("ageing", AGEING)
def test_a_stuck_callback_on_an_expired_future_delays_no_other_expiry(
    ageing: Optional[float], clock: FakeClock
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, ageing=ageing)
    clock.attach(pool)
    in_callback, release = threading.Event(), threading.Event()

    def stuck(_: Future[Any]) -> None:
        in_callback.set()
        assert release.wait(3 * TIMEOUT)  # longer than any wait of the test below

    try:
        pool.pause()
        first = pool.submit(str, "first", timeout=1.0)
        first.add_done_callback(stuck)
        same_batch = pool.submit(str, "same batch", timeout=1.0)
        later = pool.submit(str, "later", timeout=2.0)
        later_called = threading.Event()
        later.add_done_callback(lambda _: later_called.set())
        clock.advance(1.0)
        assert in_callback.wait(TIMEOUT)
        # Settled while the first one's callback is stuck: done, and its waiters awake.
        assert wait([same_batch], timeout=TIMEOUT).not_done == set()
        clock.advance(1.0)
        assert wait([later], timeout=TIMEOUT).not_done == set()
        assert later_called.wait(TIMEOUT), "a later expiry's callback waited for a stuck one"
        assert not release.is_set()
        release.set()
        assert pool.join(TIMEOUT)
        stats = pool.statistics()
        assert (stats.expired, stats.submitted) == (3, 3)
        pool._check_invariants()
    finally:
        release.set()
        pool.shutdown()


@pytest.mark.parametrize("ageing", AGEING)
def test_shutdown_cancel_futures_settles_every_future_before_any_callback_runs(
    ageing: Optional[float],
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, ageing=ageing)
    in_callback, release = threading.Event(), threading.Event()
    seen: list[bool] = []
    futures: list[Future[Any]] = []

    def stuck(_: Future[Any]) -> None:
        seen.append(all(f.done() for f in futures))
        in_callback.set()
        assert release.wait(TIMEOUT)

    pool.pause()
    futures += [pool.submit(str, i) for i in range(5)]
    futures[0].add_done_callback(stuck)
    closer = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    closer.start()
    try:
        assert in_callback.wait(TIMEOUT)
        assert seen == [True]
        assert wait(futures, timeout=TIMEOUT).not_done == set()
    finally:
        release.set()
        closer.join(TIMEOUT)
    assert not closer.is_alive()
    pool._check_invariants()


# A worker whose take found only expired tasks does not count itself on its way to the queue
# while it runs their done-callbacks, so a submit meanwhile wakes an idle worker instead of
# waiting for those callbacks to return.
def test_a_worker_running_the_callbacks_of_tasks_it_found_expired_keeps_no_wake_up(
    clock: FakeClock,
) -> None:
    with PriorityThreadPoolExecutor(max_workers=2, clock=clock) as pool:
        both = threading.Barrier(2)
        assert list(pool.map(lambda _: both.wait(TIMEOUT), range(2))) in ([0, 1], [1, 0])
        wait_until(lambda: internals(pool).idle_workers() == 2, "both workers idle")
        pool.pause()
        doomed = pool.submit(str, "doomed", timeout=10.0)
        entered, release = threading.Event(), threading.Event()

        def stuck(_: Future[Any]) -> None:
            entered.set()
            release.wait(TIMEOUT)

        doomed.add_done_callback(stuck)
        timer_asleep(pool, clock() + 10.0)
        clock.advance(20.0)  # past its deadline; the timer, not attached, sleeps on
        pool.resume()  # a worker takes it, finds it expired, and runs its callback
        try:
            assert entered.wait(TIMEOUT), "the expired task's callback never ran"
            assert pool.submit(str, "quick").result(TIMEOUT) == "quick"
        finally:
            release.set()
        assert doomed.cancelled()
        pool._check_invariants()


@pytest.mark.parametrize("kind", KINDS)
def test_the_timer_survives_a_callback_thread_that_cannot_start(
    kind: str,
    clock: FakeClock,
    gate: Gate,
    monkeypatch: pytest.MonkeyPatch,
    futures_log: list[logging.LogRecord],
    thread_deaths: list[str],
) -> None:
    # When no callback thread can start, the timer runs the callbacks itself and survives the
    # error, so later deadlines still expire (a front's dispatcher, which expires tasks too,
    # survives the same way).
    pool = make_pool(kind, 1, clock=clock)
    clock.attach(pool)
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if "_callbacks_" in self.name:
            raise RuntimeError("can't start new thread")
        real_start(self)

    try:
        pool.submit(gate)
        gate.wait_started()
        first = pool.submit(str, "first", timeout=1.0)
        called = threading.Event()
        first.add_done_callback(lambda _: called.set())
        timer_asleep(pool, clock.now + 1.0)
        monkeypatch.setattr(threading.Thread, "start", start)
        clock.advance(1.0)
        assert called.wait(TIMEOUT), "the callback never ran"
        monkeypatch.setattr(threading.Thread, "start", real_start)
        later = pool.submit(str, "later", timeout=1.0)
        clock.advance(1.0)
        assert wait([later], timeout=TIMEOUT).done == {later}, "the timer died"
        assert later.cancelled()
        assert thread_deaths == []
        assert [r.getMessage() for r in futures_log] == [
            "no callback thread could start: 1 jobs ran late"
        ]
    finally:
        gate.open()
        pool.shutdown()
    pool._check_invariants()
