"""Faults: a clock that goes backwards or raises, a thread that cannot start, a late pause().

The pool reads its clock (``time.monotonic`` unless another is given) in three places: in
``submit``, for a task with a timeout, to fix its deadline; in a worker, when it takes a task
that has a deadline, to decide between running and expiring it; and in the deadline timer.
Deadlines are absolute readings of that clock, fixed at submit.

Documented outcomes, each tested below:

* A clock that goes backwards delays expiry: a deadline is not moved, so a task expires only
  once the clock reaches its deadline again, and a worker that claims a task while the clock
  reads earlier than its deadline runs it. No task is lost, none runs twice.
* A clock that raises in ``submit``: the exception propagates from ``submit`` and nothing is
  queued; the pool carries on once the clock works again. Without ``ageing``, a task
  without a timeout does not read the clock.
* A clock that raises in a worker or in the timer: no task is lost, no thread dies, and the
  error is logged at critical level by ``concurrent.futures``. A worker that cannot read the
  clock runs the task it took; the timer expires nothing until the clock works again, and
  then expires everything due.
* ``threading.Thread.start`` raising inside ``submit``, after the arguments were checked:
  for the only worker, or for the deadline timer, the exception propagates, nothing is
  half-queued, ``_check_invariants()`` passes and a later ``submit`` works (after a timer
  that could not start, later deadlines still expire on time); for a second worker while
  the first works, the failure is absorbed and the task waits for the first.
* ``pause()`` after ``shutdown()`` does not stop the queue from draining, or a
  ``shutdown(wait=True)`` waiting in another thread would hang.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from typing import Any

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PriorityThreadPoolExecutor
from support import internals


class ClockBroke(OSError):
    pass


class FaultyClock(FakeClock):
    """A fake clock that raises ``ClockBroke`` while ``failing(thread name)`` says so."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: Callable[[str], bool] = lambda name: False
        self.failures = 0

    def __call__(self) -> float:
        if self.failing(threading.current_thread().name):
            self.failures += 1
            raise ClockBroke("the clock broke")
        return super().__call__()


class OrderLog:
    """Records the order tasks ran in; ``task(name)`` makes a task that returns its name.

    Its tasks take no argument, unlike those of ``support.Recorder``, which record the one
    they are given.
    """

    def __init__(self) -> None:
        self.order: list[str] = []
        self._lock = threading.Lock()

    def task(self, name: str) -> Callable[[], str]:
        def run() -> str:
            with self._lock:
                self.order.append(name)
            return name

        return run


class Watch:
    """Pool-thread deaths and ``concurrent.futures`` errors; ``event`` is set on either."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.deaths: list[str] = []
        self.records: list[logging.LogRecord] = []


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Watch]:
    seen = Watch()

    def hook(args: Any) -> None:
        name = args.thread.name if args.thread is not None else "?"
        seen.deaths.append(f"{name}: {args.exc_type.__name__}: {args.exc_value}")
        seen.event.set()

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.records.append(record)
            seen.event.set()

    monkeypatch.setattr(threading, "excepthook", hook)
    handler = Handler(level=logging.ERROR)
    logger = logging.getLogger("concurrent.futures")
    logger.addHandler(handler)
    yield seen
    logger.removeHandler(handler)


def all_done(futures: list[Future[Any]], event: threading.Event) -> None:
    """Set ``event`` once every future in ``futures`` is done."""
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future[Any]) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                event.set()

    for future in futures:
        future.add_done_callback(one_done)


# -- a clock that goes backwards ---------------------------------------------------------------


def test_a_clock_going_backwards_delays_expiry_and_loses_nothing(
    clock: FakeClock, gate: Gate
) -> None:
    """Deadlines are absolute: after the clock jumps back, tasks expire only when it returns."""
    log = OrderLog()
    with PriorityThreadPoolExecutor(max_workers=1, clock=clock) as pool:
        clock.attach(pool)
        held = pool.submit(gate)
        gate.wait_started()
        first = pool.submit(log.task("first"), timeout=1.0)  # deadline 1001
        second = pool.submit(log.task("second"), priority=1, timeout=2.0)  # deadline 1002
        plain = pool.submit(log.task("plain"), priority=2)
        clock.advance(-10.0)  # 990: every deadline is now 11 to 12 seconds away
        pool._check_invariants()
        clock.advance(10.5)  # 1000.5: back, but before both deadlines
        assert not first.done()
        assert not second.done()
        clock.advance(0.5)  # 1001: the first deadline, exactly
        assert wait([first], timeout=TIMEOUT / 2).done == {first}
        assert first.cancelled()
        assert not second.done()
        assert held.running(), "the expiry waited for the worker"
        pool._check_invariants()
        gate.open()
        assert plain.result(TIMEOUT) == "plain"
        assert second.result(TIMEOUT) == "second"
    assert log.order == ["plain", "second"]


def test_a_clock_behind_the_deadline_at_claim_time_lets_the_task_run(
    clock: FakeClock, gate: Gate
) -> None:
    """The worker's one clock reading decides: before the deadline, the task runs."""
    log = OrderLog()
    with PriorityThreadPoolExecutor(max_workers=1, clock=clock) as pool:
        clock.attach(pool)
        pool.submit(gate)
        gate.wait_started()
        futures = [pool.submit(log.task(f"t{i}"), timeout=0.5) for i in range(5)]
        clock.advance(-100.0)  # far behind every deadline
        gate.open()
        assert [f.result(TIMEOUT) for f in futures] == [f"t{i}" for i in range(5)]
        pool._check_invariants()
    assert log.order == [f"t{i}" for i in range(5)]


def test_deadlines_set_while_the_clock_was_behind_keep_their_order(
    clock: FakeClock, gate: Gate
) -> None:
    """A deadline fixed after a backwards jump may come before earlier tasks' deadlines."""
    with PriorityThreadPoolExecutor(max_workers=1, clock=clock) as pool:
        clock.attach(pool)
        pool.submit(gate)
        gate.wait_started()
        early = pool.submit(str, timeout=5.0)  # deadline 1005
        clock.advance(-3.0)
        late = pool.submit(str, timeout=5.0)  # deadline 1002, though submitted later
        clock.advance(5.0)  # 1002
        assert wait([late], timeout=TIMEOUT).done == {late}
        assert not early.done()
        clock.advance(3.0)  # 1005
        assert wait([early], timeout=TIMEOUT).done == {early}
        assert early.cancelled()
        assert late.cancelled()
        pool._check_invariants()
        gate.open()


# -- a clock that raises -----------------------------------------------------------------------


def test_a_clock_raising_in_submit_propagates_and_queues_nothing() -> None:
    clock = FaultyClock()
    with PriorityThreadPoolExecutor(max_workers=1, clock=clock) as pool:
        clock.failing = lambda name: True
        with pytest.raises(ClockBroke, match=r"^the clock broke$"):
            pool.submit(str, timeout=1.0)
        assert internals(pool).queued() == 0
        assert not pool._threads, "a failed submit started a worker"
        pool._check_invariants()
        # Without ageing, a task without a timeout does not read the clock: it still runs.
        assert pool.submit(str, 1).result(TIMEOUT) == "1"
        clock.failing = lambda name: False
        assert pool.submit(str, 2, timeout=1.0).result(TIMEOUT) == "2"
        pool._check_invariants()


def test_a_clock_raising_in_submit_leaves_a_busy_pool_as_it_was(gate: Gate) -> None:
    clock = FaultyClock()
    with PriorityThreadPoolExecutor(max_workers=1, clock=clock) as pool:
        clock.attach(pool)
        pool.submit(gate)
        gate.wait_started()
        waiting = pool.submit(str, "waiting", timeout=1.0)
        clock.failing = lambda name: name == "MainThread"
        with pytest.raises(ClockBroke):
            pool.submit(str, "lost", timeout=1.0)
        assert internals(pool).queued() == 1
        pool._check_invariants()
        clock.failing = lambda name: False
        clock.advance(1.0)
        assert wait([waiting], timeout=TIMEOUT).done == {waiting}
        assert waiting.cancelled()
        gate.open()
        assert pool.submit(str, "after", timeout=1.0).result(TIMEOUT) == "after"


def test_a_clock_raising_in_a_worker_loses_no_task(gate: Gate, watch: Watch) -> None:
    """The worker survives a clock that raises at its claim, runs the task, and logs it."""
    clock = FaultyClock()
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, thread_name_prefix="faulty")
    try:
        pool.submit(gate)
        gate.wait_started()
        timed = pool.submit(str, "timed", timeout=5.0)
        plain = pool.submit(str, "plain", priority=-1)
        all_done([timed, plain], watch.event)
        # Fail once, in the worker: the claim of ``timed`` reads the clock.
        clock.failing = lambda name: name == "faulty_0" and clock.failures == 0
        gate.open()
        assert watch.event.wait(TIMEOUT), "nothing happened"
        assert not watch.deaths, f"a pool thread died: {watch.deaths}"
        assert wait([timed, plain], timeout=TIMEOUT).not_done == set(), "a task was lost"
        # Without a clock reading the worker cannot tell that the deadline passed: it runs.
        assert timed.result(0) == "timed"
        assert plain.result(0) == "plain"
        assert clock.failures == 1
        critical = [r for r in watch.records if r.levelno == logging.CRITICAL]
        assert any(r.exc_info and isinstance(r.exc_info[1], ClockBroke) for r in critical)
        assert pool.submit(str, "after", timeout=1.0).result(TIMEOUT) == "after"
        pool._check_invariants()
    finally:
        gate.open()
        clock.failing = lambda name: False
        pool.shutdown(wait=True)


def test_a_clock_raising_in_the_timer_loses_no_deadline(gate: Gate, watch: Watch) -> None:
    """The timer survives a clock that raises, logs it, and expires once it works again."""
    clock = FaultyClock()
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, thread_name_prefix="faulty")
    clock.attach(pool)
    try:
        held = pool.submit(gate)
        gate.wait_started()
        first = pool.submit(str, "first", timeout=1.0)
        later = pool.submit(str, "later", timeout=2.0)
        # Fail in the timer, whenever it reads the clock, from now until told otherwise.
        clock.failing = lambda name: name == "faulty_timer"
        clock.advance(1.0)
        assert watch.event.wait(TIMEOUT), "the failure was neither logged nor fatal"
        assert not watch.deaths, f"a pool thread died: {watch.deaths}"
        assert clock.failures >= 1
        assert any(r.exc_info and isinstance(r.exc_info[1], ClockBroke) for r in watch.records)
        assert not first.done(), "expired although the clock could not be read"
        # The clock works again: the next reading expires both, with the gate still shut.
        clock.failing = lambda name: False
        clock.advance(1.0)
        assert wait([first, later], timeout=TIMEOUT / 2).not_done == set(), "a deadline was lost"
        assert first.cancelled()
        assert later.cancelled()
        assert held.running(), "the expiry waited for the worker"
        pool._check_invariants()
    finally:
        gate.open()
        clock.failing = lambda name: False
        pool.shutdown(wait=True)


# -- Thread.start raising inside submit --------------------------------------------------------


@pytest.fixture
def failing_start(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the next ``threading.Thread.start`` raise; returns the names it refused."""
    refused: list[str] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if not refused:
            refused.append(self.name)
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return refused


def test_a_worker_that_cannot_start_leaves_nothing_queued(failing_start: list[str]) -> None:
    with PriorityThreadPoolExecutor(max_workers=2, thread_name_prefix="nostart") as pool:
        with pytest.raises(RuntimeError, match=r"^can't start new thread$"):
            pool.submit(str, "refused")
        assert failing_start == ["nostart_0"]
        assert internals(pool).queued() == 0
        assert not pool._threads
        pool._check_invariants()
        assert pool.submit(str, "later").result(TIMEOUT) == "later"
        pool._check_invariants()


def test_a_worker_that_cannot_start_is_absorbed_while_another_works(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a worker left to run it, the task stays queued and submit does not raise."""
    log = OrderLog()
    with PriorityThreadPoolExecutor(max_workers=2, thread_name_prefix="nostart") as pool:
        held = pool.submit(gate)
        gate.wait_started()
        threads = set(pool._threads)
        refused: list[str] = []
        real_start = threading.Thread.start

        def start(self: threading.Thread) -> None:
            refused.append(self.name)
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", start)
        waiting = pool.submit(log.task("waiting"))
        assert refused == ["nostart_1"]
        assert internals(pool).queued() == 1
        assert pool._threads == threads
        pool._check_invariants()
        monkeypatch.setattr(threading.Thread, "start", real_start)
        gate.open()
        assert held.result(TIMEOUT) == "gate"
        assert waiting.result(TIMEOUT) == "waiting"
        pool._check_invariants()
    assert log.order == ["waiting"]


def test_a_timer_that_cannot_start_leaves_the_pool_usable(
    failing_start: list[str], clock: FakeClock, gate: Gate
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, thread_name_prefix="nostart")
    clock.attach(pool)
    try:
        with pytest.raises(RuntimeError, match=r"^can't start new thread$"):
            pool.submit(str, "refused", timeout=1.0)
        assert failing_start == ["nostart_timer"]
        assert internals(pool).queued() == 0
        pool._check_invariants()
        held = pool.submit(gate)
        gate.wait_started()
        later = pool.submit(str, "later", timeout=1.0)  # the same deadline as the refused one
        pool._check_invariants()
        clock.advance(1.0)
        assert wait([later], timeout=TIMEOUT / 2).done == {later}, "the deadline never expired"
        assert later.cancelled()
        assert held.running(), "the expiry waited for the worker"
        gate.open()
        pool.shutdown(wait=True)
    finally:
        gate.open()
        pool.shutdown(wait=True)


# -- pause() racing shutdown() -----------------------------------------------------------------


def test_pause_after_shutdown_cannot_stop_the_queue_draining(gate: Gate) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        held = pool.submit(gate)
        gate.wait_started()
        queued = pool.submit(str, "queued")
        pool.shutdown(wait=False)  # another thread may be in shutdown(wait=True) by now
        with contextlib.suppress(RuntimeError):  # refusing to pause would be a fix too
            pool.pause()
        assert not pool.paused, "a pool that was shut down paused again"
        gate.open()
        assert held.result(TIMEOUT) == "gate"
        assert queued.result(TIMEOUT) == "queued"
    finally:
        pool.resume()
        gate.open()
        pool.shutdown(wait=True)


# A submit counts in one thread the queue lacks, not every one: after a start failure is
# absorbed, the next submit starts one thread, as the standard pool does, so an interrupt there
# has exactly one to write off.
def test_a_submit_after_an_absorbed_start_failure_starts_one_thread(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PriorityThreadPoolExecutor(max_workers=3, thread_name_prefix="onestart") as pool:
        held = pool.submit(gate)
        gate.wait_started()
        real_start = threading.Thread.start

        def start(self: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", start)
        first = pool.submit(str, "first")  # its thread fails; the held worker will run it
        monkeypatch.setattr(threading.Thread, "start", real_start)
        assert len(pool._threads) == 1
        second = pool.submit(str, "second")
        assert len(pool._threads) == 2, "one submit, one thread, as the standard pool"
        pool._check_invariants()
        gate.open()
        assert held.result(TIMEOUT) == "gate"
        assert (first.result(TIMEOUT), second.result(TIMEOUT)) == ("first", "second")
        pool._check_invariants()
