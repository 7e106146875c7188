"""The relay: over a standard thread pool, the worker that frees a slot hands the next task over.

Which executors relay (``hands_over_inline``); who calls the thread pool's ``submit`` (the
dispatcher for the first task, then the worker whose task just finished); at most one relay at
a time; the relay hands over before it settles its own task, so a slow done-callback stalls no
hand-over; a task done at once during a relay has its callbacks run on a callback thread, not
on the relay; and the relay under deadlines, cancels, pause, a lowered ``max_running`` and a
shutdown. Nothing sleeps to synchronise: events and gates decide every order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import (
    BrokenExecutor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
)
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PriorityExecutor, PriorityThreadPoolExecutor
from priority_executor._delegating import hands_over_inline
from support import AGEING, internals, wait_until


class Callers:
    """Wraps a thread pool instance's ``submit`` (its type stays ``ThreadPoolExecutor``).

    Records who calls it and how many calls overlap; ``before_return`` runs inside each call.
    """

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.names: list[str] = []
        self.inside = self.peak = 0
        self.lock = threading.Lock()
        self.before_return: Callable[[Future[Any]], None] = lambda _: None
        self.submit = pool.submit
        pool.submit = self  # type: ignore[method-assign]

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self.lock:
            self.names.append(threading.current_thread().name)
            self.inside += 1
            self.peak = max(self.peak, self.inside)
        try:
            time.sleep(0)  # not to synchronise: it lets another caller overlap, if one can
            future = self.submit(fn, *args, **kwargs)
            self.before_return(future)
            return future
        finally:
            with self.lock:
                self.inside -= 1


def test_only_the_standard_thread_pool_is_relayed() -> None:
    class Bounded(ThreadPoolExecutor):  # a subclass's submit may wait for its own workers
        pass

    pools = [ThreadPoolExecutor(1), Bounded(1), PriorityThreadPoolExecutor(1)]
    processes = ProcessPoolExecutor(1)
    try:
        assert [hands_over_inline(pool) for pool in pools] == [True, False, False]
        assert not hands_over_inline(processes)
        assert not hands_over_inline(PriorityExecutor(ThreadPoolExecutor(1), max_running=1))
    finally:
        for pool in pools:
            pool.shutdown()
        processes.shutdown()


def asleep(front: PriorityExecutor) -> bool:
    """The dispatcher waits: it has added its callback to what it handed over."""
    return internals(front).dispatcher.asleep


def test_the_worker_whose_task_finished_hands_over_the_next_best(gate: Gate) -> None:
    pool = ThreadPoolExecutor(1)
    callers = Callers(pool)
    front = PriorityExecutor(pool, max_running=1)
    order: list[int] = []
    try:
        held = front.submit(gate)
        gate.wait_started()
        futures = [front.submit(order.append, p, priority=p) for p in range(5)]
        wait_until(lambda: asleep(front), "the dispatcher waits for a free slot")
        gate.open()
        held.result(TIMEOUT)
        for future in futures:
            future.result(TIMEOUT)
        assert front.join(TIMEOUT)
        front._check_invariants()
    finally:
        gate.open()
        front.shutdown()
    assert order == [4, 3, 2, 1, 0]
    dispatcher = f"{front._thread_name_prefix}_dispatcher"
    assert callers.names[0] == dispatcher
    assert len(callers.names) == 6
    assert all(name.startswith("ThreadPoolExecutor-") for name in callers.names[1:])


def test_at_most_one_relay_calls_submit_at_a_time_beside_the_dispatcher() -> None:
    pool = ThreadPoolExecutor(4)
    callers = Callers(pool)
    front = PriorityExecutor(pool, max_running=4)
    try:
        futures = [front.submit(abs, -i, priority=i % 3) for i in range(2_000)]
        assert [f.result(TIMEOUT) for f in futures] == list(range(2_000))
        assert front.join(TIMEOUT)
        front._check_invariants()
        assert internals(front).dispatcher.relay is None
    finally:
        front.shutdown()
    assert callers.peak <= 2, f"{callers.peak} threads called submit at once"
    relayed = sum(name.startswith("ThreadPoolExecutor-") for name in callers.names)
    assert relayed > 0, "no worker relayed"


def test_the_relay_hands_over_before_it_runs_its_own_tasks_callbacks() -> None:
    # The first task's done-callback waits for the second task to start. Were the relay to
    # settle its own task first (its callbacks included) and only then hand over, the two
    # would wait for each other until the timeout.
    pool = ThreadPoolExecutor(2)
    front = PriorityExecutor(pool, max_running=1)
    second_started = threading.Event()
    seen: list[bool] = []
    go = threading.Event()
    try:
        first = front.submit(go.wait, TIMEOUT)
        first.add_done_callback(lambda _: seen.append(second_started.wait(TIMEOUT)))
        second = front.submit(second_started.set)
        wait_until(lambda: asleep(front), "the dispatcher waits for a free slot")
        go.set()  # the first task ends after its hand-over: its worker relays
        assert second.result(TIMEOUT) is None
        wait_until(lambda: seen != [], "the first task's callback returns")
        assert front.join(TIMEOUT)
    finally:
        front.shutdown()
    assert seen == [True]


def test_a_task_done_at_once_during_a_relay_has_its_callbacks_on_a_callback_thread(
    gate: Gate,
) -> None:
    # Past the first hand-over, the wrapper returns each inner future only once it is done,
    # so the relay's add_done_callback settles ours at once, on the relay. The second task's
    # callback must not run there: it waits for the third task's start, which only the relay
    # or the dispatcher can hand over.
    pool = ThreadPoolExecutor(2)
    callers = Callers(pool)
    front = PriorityExecutor(pool, max_running=1)
    dispatcher = f"{front._thread_name_prefix}_dispatcher"

    def done_first(inner: Future[Any]) -> None:
        if threading.current_thread().name != dispatcher:
            inner.exception(TIMEOUT)

    callers.before_return = done_first
    third_started = threading.Event()
    ran_in: list[tuple[str, bool]] = []

    def slow_callback(_: Future[Any]) -> None:
        ran_in.append((threading.current_thread().name, third_started.wait(TIMEOUT)))

    try:
        held = front.submit(gate)
        gate.wait_started()
        second = front.submit(str, "second", priority=2)
        second.add_done_callback(slow_callback)
        third = front.submit(third_started.set, priority=1)
        wait_until(lambda: asleep(front), "the dispatcher waits for a free slot")
        gate.open()
        held.result(TIMEOUT)
        assert third.result(TIMEOUT) is None
        wait_until(lambda: ran_in != [], "the second task's callback returns")
        assert front.join(TIMEOUT)
        front._check_invariants()
    finally:
        gate.open()
        front.shutdown()
    assert ran_in == [(f"{front._thread_name_prefix}_callbacks_0", True)]
    assert callers.names[0] == dispatcher
    assert callers.names[1].startswith("ThreadPoolExecutor-"), callers.names


@pytest.mark.parametrize("via", ["submit", "view"])
@pytest.mark.parametrize("room", [(None, "block"), (50, "raise"), (20, "evict")])
@pytest.mark.parametrize("ageing", AGEING)
@pytest.mark.parametrize("attack", ["cancel", "deadline", "pause", "lower", "shutdown"])
def test_the_relay_meets_a_cancel_a_deadline_a_pause_a_resize_and_a_shutdown(
    attack: str,
    ageing: Optional[float],
    room: tuple[Optional[int], str],
    via: str,
    gate: Gate,
    clock: FakeClock,
) -> None:
    # The first task's done-callback, run on the relay's worker after the relay took the
    # best queued task, does the worst thing to the rest: nothing may be lost, run twice, or
    # both cancelled and run, and the invariants hold throughout. With max_queued=20 and
    # "evict", the later (higher) half of the rest evicts the earlier half as it is submitted.
    max_queued, when_full = room
    pool = ThreadPoolExecutor(2)
    front = PriorityExecutor(
        pool,
        max_running=2,
        clock=clock,
        ageing=ageing,
        max_queued=max_queued,
        when_full=when_full,  # type: ignore[arg-type]
    )
    clock.attach(front)
    ran: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> int:
        with lock:
            ran.append(i)
        return i

    def worst(_: Future[Any]) -> None:
        if attack == "cancel":
            for future in rest:
                future.cancel()
        elif attack == "deadline":  # every deadline of the rest passes at once
            clock.advance(10.0)
        elif attack == "pause":
            front.pause()
        elif attack == "lower":
            front.max_running = 1
        else:
            front.shutdown(wait=False, cancel_futures=True)
        front._check_invariants()

    go = threading.Event()
    timeout = 5.0 if attack == "deadline" else None
    try:
        held = front.submit(gate)
        gate.wait_started()
        first = front.submit(go.wait, TIMEOUT, priority=9)
        first.add_done_callback(worst)
        if via == "view":
            rest = [
                front.options(priority=i // 10, timeout=timeout).submit(task, i) for i in range(40)
            ]
        else:
            rest = [front.submit(task, i, priority=i // 10, timeout=timeout) for i in range(40)]
        wait_until(lambda: asleep(front), "the dispatcher waits for a free slot")
        go.set()  # the first task ends after its hand-over: its worker relays
        assert first.result(TIMEOUT) is True
        if attack == "pause":
            front._check_invariants()
            front.resume()
        gate.open()
        held.result(TIMEOUT)
        assert front.join(TIMEOUT)
        front._check_invariants()
    finally:
        gate.open()
        front.shutdown()
    for i, future in enumerate(rest):
        assert future.done()
        assert future.cancelled() != (i in ran), f"task {i}: cancelled and run, or neither"
    assert len(ran) == len(set(ran)), "a task ran twice"
    stats = front.statistics()
    assert stats.submitted == stats.completed + stats.failed + stats.cancelled + stats.expired
    assert internals(front).dispatcher.relay is None


# The thread pool settles the futures it cancels or fails itself while it holds its shutdown
# lock, which its submit takes, so the thread settling them does not relay: its submit would wait
# for itself for ever. The shutdown's cancel is tested in test_front.py
# (test_an_inner_future_cancelled_by_its_executor_raises_cancelled_error).


def test_no_relay_from_the_futures_a_failed_initializer_fails() -> None:
    started = threading.Event()

    def initializer() -> None:
        assert started.wait(TIMEOUT)
        raise ValueError("no connection")

    delegate = ThreadPoolExecutor(2, initializer=initializer)
    front = PriorityExecutor(delegate, max_running=2)
    try:
        futures = [front.submit(str, i) for i in range(5)]
        wait_until(lambda: front.statistics().queued == 3, "two tasks are handed over")
        started.set()  # the pool fails the two it holds, then refuses the rest
        for future in futures:
            with pytest.raises(BrokenExecutor):
                future.result(TIMEOUT)
        front.shutdown(wait=False)
        assert front.join(TIMEOUT)
        front._check_invariants()
    finally:
        started.set()
        front.shutdown(wait=False)  # were a relay stuck, join() above has timed out
