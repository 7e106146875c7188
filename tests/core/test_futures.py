"""The Future internals that ``_futures`` relies on, checked on every supported Python."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import FIRST_EXCEPTION, Future, as_completed, wait
from typing import Any

import pytest

from conftest import TIMEOUT
from priority_executor import _futures
from support import wait_until


def test_this_python_has_the_internals_of_two_phase_settling() -> None:
    assert _futures.TWO_PHASE, "Future's internals changed: adapt _futures.py"


def test_cancel_quietly_cancels_and_wakes_result_without_running_callbacks() -> None:
    future: Future[int] = Future()
    ran: list[str] = []
    future.add_done_callback(lambda _: ran.append("callback"))
    errors: list[BaseException] = []

    def wait_for_result() -> None:
        try:
            future.result(TIMEOUT)
        except BaseException as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait_for_result)
    waiter.start()
    assert _futures.cancel_quietly(future) is True
    waiter.join(TIMEOUT)
    assert not waiter.is_alive()
    assert [type(e).__name__ for e in errors] == ["CancelledError"]
    assert future.cancelled()
    assert ran == [], "a callback ran in the first phase"
    assert future.set_running_or_notify_cancel() is False
    assert wait([future], timeout=0).done == {future}
    _futures.run_callbacks(future)
    assert ran == ["callback"]


def test_cancel_quietly_leaves_a_future_that_is_not_pending() -> None:
    future: Future[int] = Future()
    future.set_result(1)
    assert _futures.cancel_quietly(future) is False
    assert future.result(0) == 1


def test_cancel_once_twice_logs_nothing(futures_log: list[logging.LogRecord]) -> None:
    future: Future[Any] = Future()
    ran: list[str] = []
    future.add_done_callback(lambda _: ran.append("callback"))
    _futures.cancel_once(future)
    _futures.cancel_once(future)
    assert future.cancelled()
    assert wait([future], timeout=0).done == {future}
    assert ran == ["callback"]
    assert futures_log == [], "a second settle logged 'Future in unexpected state'"


def test_has_user_callbacks_counts_those_after_the_pools_own() -> None:
    future: Future[Any] = Future()
    future.add_done_callback(lambda _: None)  # the pool's own, added first
    assert not _futures.has_user_callbacks(future)
    future.add_done_callback(lambda _: None)
    assert _futures.has_user_callbacks(future)


@pytest.mark.parametrize("ok", [True, False], ids=["result", "exception"])
def test_settle_quietly_settles_and_wakes_every_waiter_without_running_callbacks(
    ok: bool,
) -> None:
    future: Future[Any] = Future()
    assert future.set_running_or_notify_cancel()  # as a front's future is when it settles
    ran: list[str] = []
    future.add_done_callback(lambda _: ran.append("callback"))
    value: Any = "done" if ok else ValueError("failed")
    first = threading.Thread(target=lambda: wait([future], TIMEOUT, return_when=FIRST_EXCEPTION))
    results: list[Any] = []
    second = threading.Thread(target=lambda: results.extend(as_completed([future], TIMEOUT)))
    for thread in (first, second):
        thread.start()
    wait_until(lambda: len(future._waiters) == 2, "both waiters wait")
    assert _futures.settle_quietly(future, ok, value) is True
    for thread in (first, second):
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "a waiter was not woken"
    assert results == [future]
    assert ran == [], "a callback ran in the first phase"
    if ok:
        assert future.result(0) == "done"
    else:
        assert future.exception(0) is value
    _futures.run_callbacks(future)
    assert ran == ["callback"]


def test_settle_quietly_leaves_a_future_already_done() -> None:
    future: Future[int] = Future()
    future.set_result(1)
    assert _futures.settle_quietly(future, True, 2) is False
    assert future.result(0) == 1


@pytest.mark.parametrize("settle", ["result", "exception", "cancel"])
def test_a_first_callback_runs_first_however_the_future_is_settled(settle: str) -> None:
    future: Future[int] = Future()
    ran: list[str] = []
    _futures.add_first_callback(future, lambda f: ran.append("hook"))
    future.add_done_callback(lambda f: ran.append("user"))
    assert _futures.has_user_callbacks(future)
    if settle == "result":
        future.set_result(1)
    elif settle == "exception":
        future.set_exception(ValueError("x"))
    else:
        assert future.cancel()
    assert ran == ["hook", "user"]


def test_is_cancelled_reads_a_done_future_as_cancelled_does() -> None:
    cancelled: Future[int] = Future()
    cancelled.cancel()
    assert _futures.is_cancelled(cancelled)
    assert cancelled.set_running_or_notify_cancel() is False  # now CANCELLED_AND_NOTIFIED
    assert _futures.is_cancelled(cancelled)
    for settle in ("set_result", "set_exception"):
        done: Future[Any] = Future()
        getattr(done, settle)(ValueError() if settle == "set_exception" else 1)
        assert not _futures.is_cancelled(done)
        assert _futures.is_cancelled(done) == done.cancelled()


@pytest.mark.parametrize("two_phase", [True, False], ids=["internals", "public cancel()"])
def test_cancel_quietly_marks_expired_only_a_future_it_cancels(
    monkeypatch: pytest.MonkeyPatch, two_phase: bool
) -> None:
    monkeypatch.setattr(_futures, "TWO_PHASE", two_phase)
    seen: list[bool] = []
    expiring: Future[int] = Future()
    _futures.cancel_quietly(expiring, expired=True)
    expiring.add_done_callback(lambda f: seen.append(_futures.expired(f)))
    assert expiring.cancelled()
    assert _futures.expired(expiring)
    by_user: Future[int] = Future()
    by_user.add_done_callback(lambda f: seen.append(_futures.expired(f)))
    assert by_user.cancel()  # its user's cancel() comes first
    _futures.cancel_quietly(by_user, expired=True)
    assert not _futures.expired(by_user)
    ran: Future[int] = Future()
    assert ran.set_running_or_notify_cancel()
    _futures.cancel_quietly(ran, expired=True)
    assert not ran.cancelled()
    assert not _futures.expired(ran)
    assert seen == [True, False]


def test_without_the_internals_a_users_cancel_racing_the_mark_is_never_marked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The user's cancel() lands inside the pool's, between its callback and its cancel().
    monkeypatch.setattr(_futures, "TWO_PHASE", False)
    future: Future[int] = Future()
    real_add = future.add_done_callback

    def add_then_cancel_elsewhere(fn: Any) -> None:
        real_add(fn)
        canceller = threading.Thread(target=future.cancel)
        canceller.start()
        canceller.join(TIMEOUT)

    monkeypatch.setattr(future, "add_done_callback", add_then_cancel_elsewhere)
    _futures.cancel_quietly(future, expired=True)
    assert future.cancelled()
    assert not _futures.expired(future), "marked after its user cancelled it"
