"""``PriorityExecutor``: a priority queue in front of any executor.

What is particular to the front: at most ``max_running`` tasks handed over, best first;
"started means handed over" (before it, ``cancel()`` succeeds and the deadline applies; after
it, the task runs and settles from the wrapped future); only the dispatcher thread calls the
``submit`` of a wrapped executor other than the standard thread pool (whose workers relay:
test_relay.py), even when a done-callback on the wrapped executor's thread submits more; faults
(one task refused, the executor broken or shut down); shutdown of the wrapped executor; a
dropped front; exit and fork. What both executors promise alike is in test_both_executors.py;
real process pools are at the end of this file, Dask in test_dask.py. Nothing sleeps to
synchronise; gates hold the wrapped executor's workers.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import multiprocessing
import os
import pickle
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import (
    BrokenExecutor,
    CancelledError,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, ClassVar, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PriorityExecutor, PriorityThreadPoolExecutor, QueueFullError
from priority_executor._callbacks import MAX_THREADS
from priority_executor._delegating import DASK_MERGES, marks_own_tasks
from support import (
    EXITING,
    FORKED_MESSAGE,
    SHUTDOWN_MESSAGE,
    Recorder,
    assert_clean_exit,
    assert_done_promptly,
    exact,
    in_thread,
    internals,
    run_script,
    wait_until,
)


class Recording(Executor):
    """A thread pool that records who calls its ``submit``, and can refuse some calls."""

    def __init__(
        self, workers: int = 1, refuse: Optional[Callable[[Any], Optional[BaseException]]] = None
    ) -> None:
        self.inner = ThreadPoolExecutor(workers)
        self.refuse = refuse
        self.callers: list[str] = []
        self.handed: list[tuple[Any, tuple[Any, ...]]] = []  # (fn, args) of each submit
        self.shutdowns = 0
        self.lock = threading.Lock()
        self.outstanding = self.peak = 0  # submitted and not yet done

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.callers.append(threading.current_thread().name)
        self.handed.append((fn, args))
        error = self.refuse(fn) if self.refuse is not None else None
        if error is not None:
            raise error
        with self.lock:
            self.outstanding += 1
            self.peak = max(self.peak, self.outstanding)
        future = self.inner.submit(fn, *args, **kwargs)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _: Future[Any]) -> None:
        with self.lock:
            self.outstanding -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.shutdowns += 1
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)


@contextmanager
def front_held(
    gate: Gate, delegate: Optional[Executor] = None, **options: Any
) -> Iterator[PriorityExecutor]:
    """A front with one slot, held by ``gate``; shut down (gate opened first) on the way out."""
    front = PriorityExecutor(delegate or ThreadPoolExecutor(1), max_running=1, **options)
    try:
        front.submit(gate)
        gate.wait_started()
        yield front
    finally:
        gate.open()
        front.shutdown()


def busy_front(delegate: Executor, gate: Gate) -> PriorityExecutor:
    """A one-slot front whose slot ``gate`` holds; the test shuts it down."""
    front = PriorityExecutor(delegate, max_running=1)
    front.submit(gate)
    gate.wait_started()
    return front


def dispatcher_name(front: PriorityExecutor) -> str:
    return f"{front._thread_name_prefix}_dispatcher"


# -- construction ---------------------------------------------------------------------------


def test_is_an_executor_and_not_a_thread_pool() -> None:
    with PriorityExecutor(ThreadPoolExecutor(2)) as front:
        assert isinstance(front, Executor)
        assert not isinstance(front, ThreadPoolExecutor)
        assert front.submit(pow, 2, 10).result(TIMEOUT) == 1024


@pytest.mark.parametrize("make", [ThreadPoolExecutor, PriorityThreadPoolExecutor])
def test_max_running_defaults_to_the_executors_max_workers(make: Callable[[int], Executor]) -> None:
    with PriorityExecutor(make(3)) as front:
        assert (front.max_running, front._max_workers) == (3, 3)
        assert front.statistics().workers == 3


def test_max_running_defaults_to_twice_a_process_pools_workers_and_not_again_in_a_front() -> None:
    pool = ProcessPoolExecutor(3)  # starts no process before its first submit
    inner = PriorityExecutor(pool)
    outer = PriorityExecutor(inner, shutdown_executor=False)
    try:
        assert (inner.max_running, outer.max_running) == (6, 6)
    finally:
        outer.shutdown()
        inner.shutdown()


class Pipelined(Recording):
    """A delegate that says it has 2 workers, but runs up to 4 tasks at once."""

    _max_workers = 2

    def __init__(self) -> None:
        super().__init__(workers=4)


def test_an_end_wakes_the_dispatcher_once_no_more_than_the_executors_workers_are_in_flight() -> (
    None
):
    # With more tasks handed over than the delegate has workers, an ending task leaves the
    # dispatcher asleep: the delegate's worker takes the next from its own queue. Once no more
    # than its workers are in flight, the next end wakes it, and it hands over in one go;
    # a new task with a slot free is handed over at once all along.
    delegate = Pipelined()
    front = PriorityExecutor(delegate, max_running=4)
    gates = [Gate() for _ in range(4)]
    try:
        held = [front.submit(gate) for gate in gates]
        for gate in gates:
            gate.wait_started()
        queued = [front.submit(str, name) for name in "abc"]
        # Asleep: else, still in its loop, it would take the slot that opens (as it may).
        wait_until(lambda: internals(front).dispatcher.asleep, "the dispatcher waits")
        gates[0].open()
        held[0].result(TIMEOUT)
        wait_until(lambda: front.statistics().running == 3, "the first task's slot is free")
        assert internals(front).dispatcher.asleep
        assert len(delegate.handed) == 4
        front._check_invariants()
        urgent = front.submit(str, "urgent", priority=1)  # a slot is free: handed over now
        assert urgent.result(TIMEOUT) == "urgent"
        wait_until(lambda: front.statistics().running == 3, "the urgent task's slot is free")
        assert [args for _, args in delegate.handed[4:]] == [("urgent",)]
        front._check_invariants()
        gates[1].open()  # two left in flight: the end wakes the dispatcher, which fills both
        held[1].result(TIMEOUT)
        assert [f.result(TIMEOUT) for f in queued[:2]] == ["a", "b"]
        assert [args for _, args in delegate.handed[5:7]] == [("a",), ("b",)]
        for gate in gates[2:]:
            gate.open()
        assert queued[2].result(TIMEOUT) == "c"
        assert front.join(TIMEOUT)
        front._check_invariants()
    finally:
        for gate in gates:
            gate.open()
        front.shutdown()


def test_an_end_always_wakes_the_dispatcher_for_an_executor_without_max_workers() -> None:
    # Such a front does not take its first max_running for the executor's workers, so once
    # max_running is raised, ends above the first value still wake the dispatcher.
    delegate = Recording(workers=4)
    front = PriorityExecutor(delegate, max_running=1)
    gates = [Gate() for _ in range(4)]
    try:
        front.max_running = 4
        held = [front.submit(gate) for gate in gates]
        for gate in gates:
            gate.wait_started()
        queued = front.submit(str, "queued")
        wait_until(lambda: internals(front).dispatcher.asleep, "the dispatcher waits")
        gates[0].open()
        held[0].result(TIMEOUT)
        assert queued.result(TIMEOUT) == "queued"
        assert not any(h.done() for h in held[1:]), "not handed over with three in flight"
        front._check_invariants()
    finally:
        for gate in gates:
            gate.open()
        front.shutdown()


def test_max_running_is_required_for_an_executor_without_max_workers() -> None:
    delegate = Recording()
    try:
        with pytest.raises(TypeError) as caught:
            PriorityExecutor(delegate)
        assert str(caught.value) == (
            f"max_running is required for {delegate!r} (Recording): it has no positive _max_workers"
        )
        with PriorityExecutor(delegate, 2, shutdown_executor=False) as front:
            assert front.max_running == 2
    finally:
        delegate.shutdown()


@pytest.mark.parametrize(
    ("value", "error", "shown"),
    [
        (0, ValueError, "0 (int)"),
        (-1, ValueError, "-1 (int)"),
        (1.5, TypeError, "1.5 (float)"),
        (True, TypeError, "True (bool)"),
        ("2", TypeError, "'2' (str)"),
    ],
)
def test_a_bad_max_running_is_refused(value: object, error: type[Exception], shown: str) -> None:
    with (
        ThreadPoolExecutor(1) as delegate,
        pytest.raises(
            error, match=exact(f"max_running must be a positive integer or None, got {shown}")
        ),
    ):
        PriorityExecutor(delegate, value)  # type: ignore[arg-type]


def test_other_bad_arguments_are_refused() -> None:
    with pytest.raises(
        TypeError, match=exact("executor must be a concurrent.futures.Executor, got 5 (int)")
    ):
        PriorityExecutor(5)  # type: ignore[arg-type]
    with ThreadPoolExecutor(1) as delegate:
        with pytest.raises(TypeError, match=exact("shutdown_executor must be a bool, got 1 (int)")):
            PriorityExecutor(delegate, shutdown_executor=1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=exact("clock must be callable, got 1.5 (float)")):
            PriorityExecutor(delegate, clock=1.5)  # type: ignore[arg-type]
        with pytest.raises(
            ValueError,
            match=exact("when_full must be 'block', 'raise' or 'evict', got 'drop' (str)"),
        ):
            PriorityExecutor(delegate, when_full="drop")  # type: ignore[arg-type]


def test_repr_and_statistics_show_the_slots(gate: Gate) -> None:
    delegate = ThreadPoolExecutor(1)
    with front_held(gate, delegate) as front:
        queued = front.submit(str, "queued")
        assert repr(front) == (
            f"<PriorityExecutor running max_running=1 queued=1 running=1 executor={delegate!r}>"
        )
        stats = front.statistics()
        assert (stats.workers, stats.idle_workers, stats.running, stats.queued) == (1, 0, 1, 1)
        gate.open()
        assert queued.result(TIMEOUT) == "queued"
    assert repr(front).startswith("<PriorityExecutor shutdown max_running=1 queued=0 running=0")
    assert front.statistics().idle_workers == 1


# -- at most max_running, best first --------------------------------------------------------


def test_at_most_max_running_are_handed_over_best_first() -> None:
    gates = [Gate(), Gate()]
    delegate = Recording(workers=4)
    front = PriorityExecutor(delegate, max_running=2)
    try:
        for g in gates:
            front.submit(g)
        for g in gates:
            g.wait_started()
        tasks = [("low-1", 1), ("high-1", 9), ("mid", 5), ("high-2", 9), ("low-2", 1)]
        futures = [front.submit(str, tag, priority=p) for tag, p in tasks]
        assert front.statistics().queued == 5, "handed over while both slots were busy"
        for g in gates:
            g.open()
        wait(futures, TIMEOUT)
        handed = [args[0] for fn, args in delegate.handed if fn is str]
        assert handed == ["high-1", "high-2", "mid", "low-1", "low-2"]
        # The wrapped pool has 4 workers: only the front keeps it to 2.
        assert delegate.peak == 2, "more tasks in flight than max_running"
        front._check_invariants()
    finally:
        for g in gates:
            g.open()
        front.shutdown()


def test_one_slot_runs_the_queue_in_priority_then_submission_order(gate: Gate) -> None:
    order = Recorder()
    with front_held(gate) as front:
        futures = [
            front.submit(order, tag, priority=p)
            for tag, p in [("a", 1), ("b", 3), ("c", 3), ("d", 2)]
        ]
        gate.open()
        wait(futures, TIMEOUT)
    assert order.ran == ["b", "c", "d", "a"]


# -- started means handed over ----------------------------------------------------------------


def test_a_queued_task_cancels_wakes_its_waiters_and_is_never_handed_over(gate: Gate) -> None:
    delegate = Recording()
    with front_held(gate, delegate, max_queued=None) as front:
        victim = front.submit(str, "victim")
        waiter = in_thread(lambda: wait([victim], TIMEOUT))
        assert victim.cancel()
        assert waiter.result().done == {victim}
        assert front.statistics().cancelled == 1
        gate.open()
        assert front.submit(str, "after").result(TIMEOUT) == "after"
    assert [args for fn, args in delegate.handed if fn is str] == [("after",)]


def test_a_handed_over_task_is_running_and_cannot_be_cancelled(gate: Gate) -> None:
    front = PriorityExecutor(ThreadPoolExecutor(1), max_running=1)
    try:
        held = front.submit(gate)
        gate.wait_started()
        assert held.running()
        assert not held.cancel()
        gate.open()
        assert held.result(TIMEOUT) == "gate"
        assert not held.cancelled()
    finally:
        gate.open()
        front.shutdown()


def test_handed_over_to_a_busy_executor_is_started_for_the_front(gate: Gate) -> None:
    # The wrapped pool has one worker, the front two slots: the second task waits in the
    # wrapped pool's queue, but it has been handed over, so it is running and it stays so.
    front = PriorityExecutor(ThreadPoolExecutor(1), max_running=2)
    try:
        front.submit(gate)
        gate.wait_started()
        second = front.submit(str, "second")
        wait_until(lambda: front.statistics().queued == 0, "the second task is handed over")
        assert second.running()
        assert not second.cancel()
        gate.open()
        assert second.result(TIMEOUT) == "second"
    finally:
        gate.open()
        front.shutdown()


def test_a_deadline_expires_in_the_queue_while_every_slot_is_busy(
    clock: FakeClock, gate: Gate
) -> None:
    delegate = Recording()
    with front_held(gate, delegate, clock=clock) as front:
        clock.attach(front)
        doomed = front.submit(str, "doomed", timeout=5)
        kept = front.submit(str, "kept")
        clock.advance(5)
        assert_done_promptly(doomed)
        assert doomed.cancelled()
        assert front.statistics().expired == 1
        gate.open()
        assert kept.result(TIMEOUT) == "kept"
    assert [args for fn, args in delegate.handed if fn is str] == [("kept",)]


def test_an_inner_future_cancelled_by_its_executor_raises_cancelled_error(gate: Gate) -> None:
    delegate = ThreadPoolExecutor(1)
    front = PriorityExecutor(delegate, max_running=2, shutdown_executor=False)
    try:
        front.submit(gate)
        gate.wait_started()
        second = front.submit(str, "second")
        wait_until(lambda: front.statistics().queued == 0, "the second task is handed over")
        # Queued: the slot the cancel frees is its. The pool cancels holding the lock its
        # submit takes, so the thread that cancels must not hand it over (test_relay.py):
        # it would wait there for itself. The dispatcher does, and the pool refuses it.
        third = front.submit(str, "third")
        delegate.shutdown(wait=False, cancel_futures=True)  # its owner cancels what it holds
        with pytest.raises(CancelledError):
            second.result(TIMEOUT)
        assert not second.cancelled(), "a task handed over is never reported cancelled"
        with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
            third.result(TIMEOUT)
        gate.open()
        assert front.join(TIMEOUT)
        assert front.statistics().failed == 2
        front._check_invariants()
    finally:
        gate.open()
        front.shutdown()


# -- the dispatcher is the only caller of the executor's submit -------------------------------


def test_only_the_dispatcher_submits_even_when_done_callbacks_submit_more() -> None:
    delegate = Recording(workers=2)
    front = PriorityExecutor(delegate, max_running=2)
    done = threading.Event()
    chain: list[Future[Any]] = []

    def more(_: Future[Any]) -> None:  # runs on the wrapped pool's worker, or a callback thread
        if len(chain) < 50:
            chain.append(front.submit(len, chain))
            chain[-1].add_done_callback(more)
        else:
            done.set()

    try:
        chain.append(front.submit(len, chain))
        chain[-1].add_done_callback(more)
        assert done.wait(TIMEOUT), "the chain of submits from done-callbacks stopped"
        assert front.join(TIMEOUT)
    finally:
        front.shutdown()
    assert len(delegate.callers) == 50
    assert set(delegate.callers) == {dispatcher_name(front)}


def test_join_and_shutdown_from_a_done_callback_on_the_executors_thread(gate: Gate) -> None:
    front = PriorityExecutor(ThreadPoolExecutor(1), max_running=1)
    seen: list[object] = []

    def callback(_: Future[Any]) -> None:
        try:
            front.join()
        except RuntimeError as exc:
            seen.append(str(exc))
        front.shutdown(wait=True)  # returns: it cannot wait for the thread it runs on
        seen.append("shutdown returned")

    try:
        front.pause()
        task = front.submit(str, "task")
        task.add_done_callback(callback)
        later = front.submit(gate)  # queued before the shutdown: it still runs after it
        front.resume()
        gate.open()
        assert later.result(TIMEOUT) == "gate"
        wait_until(lambda: len(seen) == 2, "the callback returns")
    finally:
        gate.open()
        front.shutdown()
    assert seen == [
        "cannot join() from one of the pool's own threads: it would wait for itself",
        "shutdown returned",
    ]


def test_a_blocking_submit_from_the_executors_thread_raises_queue_full(gate: Gate) -> None:
    # A done-callback on the wrapped executor's thread must not wait for room: the room is
    # made by completions, which may need that very thread (a process pool's manager).
    front = PriorityExecutor(ThreadPoolExecutor(1), max_running=1, max_queued=1)
    outcome: list[str] = []

    def callback(_: Future[Any]) -> None:
        try:
            front.submit(str, "no room")
            outcome.append("queued")
        except QueueFullError as exc:
            outcome.append(str(exc))

    try:
        first = front.submit(gate)
        gate.wait_started()
        first.add_done_callback(callback)
        front.submit(str, "fills the queue")
        front.pause()  # the queue stays full while the callback runs
        gate.open()
        wait_until(lambda: outcome != [], "the callback runs")
        assert outcome == [
            "cannot wait for room from one of the pool's own threads: max_queued=1 tasks wait"
        ]
        front.resume()
    finally:
        gate.open()
        front.shutdown()


JOIN_FROM_OWN_THREAD = "cannot join() from one of the pool's own threads: it would wait for itself"

#: Executors whose threads run a front's tasks in this interpreter, by how they are made.
THREAD_DELEGATES = ["thread pool", "priority pool", "view", "front"]


@contextmanager
def front_over(delegate: str, **options: Any) -> Iterator[PriorityExecutor]:
    """A front over a two-thread executor of the kind named, shut down (all of it) after."""
    pool = PriorityThreadPoolExecutor(2)
    makers: dict[str, Callable[[], Executor]] = {
        "thread pool": lambda: ThreadPoolExecutor(2),
        "priority pool": lambda: pool,
        "view": lambda: pool.options(priority=1),
        "front": lambda: PriorityExecutor(ThreadPoolExecutor(2)),
    }
    wrapped = makers[delegate]()
    front = PriorityExecutor(wrapped, max_running=2, **options)
    try:
        yield front
    finally:
        front.shutdown()
        pool.shutdown()


def refusal(call: Callable[[], object]) -> str:
    """What ``call()`` raised, as ``"Type: message"``; ``"returned"`` if it did not raise."""
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "returned"


@pytest.mark.parametrize("copy_context", [False, True])
@pytest.mark.parametrize("delegate", THREAD_DELEGATES)
def test_a_task_that_joins_its_own_front_is_refused(delegate: str, copy_context: bool) -> None:
    with front_over(delegate, copy_context=copy_context) as front:
        for timeout in (0, TIMEOUT, None):  # 0 first: a front that waited fails at once
            joined = front.submit(refusal, functools.partial(front.join, timeout))
            assert joined.result(TIMEOUT) == f"RuntimeError: {JOIN_FROM_OWN_THREAD}"
        assert front.join(TIMEOUT)


@pytest.mark.parametrize("delegate", THREAD_DELEGATES)
def test_a_task_that_shuts_its_own_front_down_does_not_wait_for_itself(
    delegate: str, gate: Gate
) -> None:
    with front_over(delegate) as front:
        front.pause()
        stopper = front.submit(front.shutdown, wait=True)
        later = front.submit(gate, priority=-1)  # queued before the shutdown: it still runs
        front.resume()
        assert stopper.result(TIMEOUT) is None
        with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
            front.submit(str, "refused")
        gate.open()
        assert later.result(TIMEOUT) == "gate"


def test_a_blocking_submit_from_a_task_of_the_front_raises_queue_full(gate: Gate) -> None:
    # A task waiting for room holds a slot that the queued tasks need to make it.
    started, full = threading.Event(), threading.Event()

    def submitter() -> str:
        started.set()
        assert full.wait(TIMEOUT)
        return refusal(lambda: front.submit(str, "no room"))

    with front_over("thread pool", max_queued=1) as front:
        front.submit(gate)
        gate.wait_started()
        submitted = front.submit(submitter)
        assert started.wait(TIMEOUT)
        front.submit(str, "fills the queue")  # both slots are busy: it stays queued
        full.set()
        assert submitted.result(TIMEOUT) == (
            "QueueFullError: cannot wait for room from one of the pool's own threads:"
            " max_queued=1 tasks wait"
        )
        gate.open()


def test_a_thread_is_the_fronts_own_only_while_it_runs_one_of_its_tasks() -> None:
    # One worker runs, in turn, a task of the front, a task given to the executor directly,
    # and a task of another front over it: only the first may not wait for the front.
    delegate = ThreadPoolExecutor(1)
    front = PriorityExecutor(delegate, shutdown_executor=False)
    other = PriorityExecutor(delegate, shutdown_executor=False)
    try:
        own = front.submit(refusal, lambda: front.join(0))
        assert own.result(TIMEOUT) == f"RuntimeError: {JOIN_FROM_OWN_THREAD}"
        assert delegate.submit(refusal, lambda: front.join(TIMEOUT)).result(TIMEOUT) == "returned"
        assert front.join(TIMEOUT)
        assert other.submit(front.join, TIMEOUT).result(TIMEOUT) is True
        nested = other.submit(refusal, lambda: other.join(0))  # its own front, still refused
        assert nested.result(TIMEOUT) == f"RuntimeError: {JOIN_FROM_OWN_THREAD}"
    finally:
        front.shutdown()
        other.shutdown()
        delegate.shutdown()


def test_a_joiner_elsewhere_waits_while_a_task_is_refused(gate: Gate) -> None:
    with front_over("thread pool") as front:
        task = front.submit(lambda: (gate(), refusal(lambda: front.join(TIMEOUT)))[1])
        gate.wait_started()
        joiner = in_thread(lambda: front.join(TIMEOUT))
        wait_until(lambda: internals(front).joiners() == 1, "the joiner waits")
        gate.open()
        assert task.result(TIMEOUT) == f"RuntimeError: {JOIN_FROM_OWN_THREAD}"
        assert joiner.result() is True


def test_a_process_pools_tasks_are_handed_over_unmarked() -> None:
    processes = ProcessPoolExecutor(1)
    try:
        assert not marks_own_tasks(processes)
        assert not marks_own_tasks(PriorityExecutor(processes, shutdown_executor=False))
    finally:
        processes.shutdown()
    assert marks_own_tasks(ThreadPoolExecutor(1))


def test_the_interpreter_exits_after_a_task_shut_its_front_down() -> None:
    result = run_script(
        """
        from concurrent.futures import ThreadPoolExecutor
        from priority_executor import PriorityExecutor

        front = PriorityExecutor(ThreadPoolExecutor(2))
        def stop():
            try:
                front.join()
            except RuntimeError as exc:
                print(exc)
            front.shutdown(wait=True)
            return "stopped"
        print(front.submit(stop).result(TIMEOUT))
        """
    )
    assert_clean_exit(result, [JOIN_FROM_OWN_THREAD, "stopped"])


class ClientExecutor(ThreadPoolExecutor):
    """Stands for Dask's ``client.get_executor(**options)``: its module and its options."""

    __module__ = "distributed.cfexecutor"

    def __init__(self, **options: Any) -> None:
        super().__init__(1)
        self._kwargs = options


@pytest.mark.parametrize(
    ("options", "warned"),
    [({}, True), ({"pure": False}, False), ({"pure": True}, False), ({"retries": 2}, True)],
    ids=["default", "pure-False", "pure-True", "retries"],
)
def test_a_dask_executor_that_merges_identical_calls_is_warned_of_naming_the_fix(
    options: dict[str, Any], warned: bool
) -> None:
    executor = ClientExecutor(**options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        front = PriorityExecutor(executor, max_running=1)
    front.shutdown()
    assert [(w.category, str(w.message), w.filename) for w in caught] == (
        [(UserWarning, DASK_MERGES, __file__)] if warned else []
    )


class Finished(Executor):
    """Runs each task inside ``submit``: its future is done before the front adds a callback."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_done_callbacks_of_a_task_already_done_at_hand_over_do_not_run_on_the_dispatcher() -> None:
    front = PriorityExecutor(Finished(), max_running=1)
    ran_in: list[str] = []
    try:
        front.pause()  # the callback is in place before the hand-over
        first = front.submit(str, "x")
        first.add_done_callback(lambda _: ran_in.append(threading.current_thread().name))
        front.resume()
        assert first.result(TIMEOUT) == "x"
        assert front.join(TIMEOUT)
    finally:
        front.shutdown()
    assert ran_in == [f"{front._thread_name_prefix}_callbacks_0"]


# The callbacks of tasks settled on behalf of the dispatcher: slow ones share a bounded number of
# callback threads instead of starting one each, and a callback thread that cannot start leaves
# the dispatcher alive, so no later task stays queued for ever.


def test_slow_callbacks_of_many_tasks_use_a_bounded_number_of_threads() -> None:
    front = PriorityExecutor(Finished(), max_running=1)
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow(_: Future[Any]) -> None:
        entered.release()
        assert release.wait(TIMEOUT)

    try:
        front.pause()
        futures = [front.submit(str, i) for i in range(20)]
        for future in futures:
            future.add_done_callback(slow)
        front.resume()
        for _ in range(MAX_THREADS):
            assert entered.acquire(timeout=TIMEOUT), "fewer callbacks run than threads allowed"
        assert wait(futures, TIMEOUT).not_done == set(), "a slow callback held up a settle"
        mine = [t for t in threading.enumerate() if t.name.startswith(front._thread_name_prefix)]
        assert len(mine) <= 1 + MAX_THREADS, [t.name for t in mine]
    finally:
        release.set()
        front.shutdown()
    assert front.statistics().completed == 20


def test_a_stream_of_callbacks_settled_for_the_dispatcher_reuses_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A callback thread stays for its next job once it has run one, so one task at a time does
    # not start a thread each (a thread per task costs 175 us a task instead of 25).
    real_start = threading.Thread.start
    started: list[str] = []

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with PriorityExecutor(Finished(), max_running=1) as front:
        for i in range(200):
            done = threading.Event()
            front.pause()  # the callback is in place before the hand-over
            future = front.submit(str, i)
            future.add_done_callback(lambda _: done.set())  # noqa: B023 (waited for below)
            front.resume()
            assert done.wait(TIMEOUT)
    callback_threads = [name for name in started if "_callbacks_" in name]
    assert 1 <= len(callback_threads) <= 20, f"{len(callback_threads)} threads for 200 tasks"


def test_the_dispatcher_survives_a_callback_thread_that_cannot_start(
    monkeypatch: pytest.MonkeyPatch, futures_log: list[Any]
) -> None:
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if "_callbacks_" in self.name:
            raise RuntimeError("can't start new thread")
        real_start(self)

    refused = ValueError("refused")
    delegate = Recording(refuse=lambda fn: refused if fn is repr else None)
    with PriorityExecutor(delegate, 1) as front:
        assert front.submit(str, 1).result(TIMEOUT) == "1"  # the dispatcher runs
        monkeypatch.setattr(threading.Thread, "start", start)
        # Refused, so settled on the dispatcher, whose callback thread cannot start.
        front.pause()
        bad = front.submit(repr, 2)
        called = threading.Event()
        bad.add_done_callback(lambda _: called.set())
        front.resume()
        assert bad.exception(TIMEOUT) is refused
        assert called.wait(TIMEOUT), "the callback never ran"
        monkeypatch.setattr(threading.Thread, "start", real_start)
        assert front.submit(str, 3).result(TIMEOUT) == "3"
    assert [r.getMessage() for r in futures_log] == [
        "no callback thread could start: 1 jobs ran late"
    ]


# -- faults -----------------------------------------------------------------------------------


def test_a_submit_that_raises_fails_only_that_task() -> None:
    class Unpicklable:
        def __call__(self) -> None:
            raise AssertionError("never called")

    refused = pickle.PicklingError("cannot pickle the task")
    delegate = Recording(refuse=lambda fn: refused if isinstance(fn, Unpicklable) else None)
    with PriorityExecutor(delegate, 1) as front:
        before = front.submit(str, "before")
        bad = front.submit(Unpicklable())
        after = front.submit(str, "after")
        assert bad.exception(TIMEOUT) is refused
        assert (before.result(TIMEOUT), after.result(TIMEOUT)) == ("before", "after")
        assert front.submit(str, "later").result(TIMEOUT) == "later"
        stats = front.statistics()
        assert (stats.failed, stats.completed) == (1, 3)
        assert not front._broken


@pytest.mark.parametrize(
    "refusal",
    [BrokenExecutor("the executor is gone"), RuntimeError(SHUTDOWN_MESSAGE)],
    ids=["broken", "shut-down"],
)
def test_a_broken_or_shut_down_executor_breaks_the_front(
    gate: Gate, refusal: BaseException
) -> None:
    delegate = Recording(refuse=lambda fn: refusal if fn is str else None)
    front = PriorityExecutor(delegate, 1)
    try:
        front.submit(gate)
        gate.wait_started()
        first = front.submit(str, "refused")
        queued = [front.submit(repr, i) for i in range(3)]
        waiter = in_thread(lambda: wait(queued, TIMEOUT))
        gate.open()
        assert first.exception(TIMEOUT) is refusal
        assert waiter.result().not_done == set()
        assert all(f.exception(0) is refusal for f in queued)
        with pytest.raises(type(refusal), match=exact(str(refusal))) as caught:
            front.submit(str, "too late")
        assert caught.value is not refusal, "a later submit raises a copy"
        assert front._broken == str(refusal)
        assert repr(front).startswith("<PriorityExecutor broken ")
        stats = front.statistics()
        assert (stats.failed, stats.completed, stats.rejected) == (4, 1, 1)
        front._check_invariants()
    finally:
        gate.open()
        front.shutdown()
    assert [fn for fn, _ in delegate.handed if fn is repr] == [], "handed over after a refusal"


def test_a_recursion_error_from_submit_concerns_one_task() -> None:
    delegate = Recording(refuse=lambda fn: RecursionError("too deep") if fn is repr else None)
    with PriorityExecutor(delegate, 1) as front:
        assert isinstance(front.submit(repr, 1).exception(TIMEOUT), RecursionError)
        assert front.submit(str, 2).result(TIMEOUT) == "2"
        assert not front._broken


class OwnBroken(BrokenExecutor):
    """A wrapped executor's own error class, which notes whether the front's lock is held."""

    locked: ClassVar[list[bool]] = []
    front: ClassVar[Optional[PriorityExecutor]] = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._note()

    def __str__(self) -> str:
        self._note()
        return "my pool is broken"

    def _note(self) -> None:
        if OwnBroken.front is not None:
            OwnBroken.locked.append(internals(OwnBroken.front).lock.locked())


def test_the_executors_error_class_runs_no_code_under_the_lock() -> None:
    class Refuses(Executor):
        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
            raise OwnBroken("gone")

    front = OwnBroken.front = PriorityExecutor(Refuses(), 1)
    try:
        assert isinstance(front.submit(str, 1).exception(TIMEOUT), OwnBroken)
        assert front.join(TIMEOUT)
        with pytest.raises(OwnBroken):
            front.submit(str, 2)
        assert front._broken == "my pool is broken"
        assert OwnBroken.locked, "the error class was never used"
        assert not any(OwnBroken.locked), "the error class's code ran under the pool's lock"
    finally:
        OwnBroken.front = None
        front.shutdown()


def test_a_broken_front_keeps_nothing_of_the_task_that_met_the_error() -> None:
    class Payload:
        pass

    class Refuses(Executor):
        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
            raise BrokenExecutor("gone")

    front = PriorityExecutor(Refuses(), 1)
    try:
        payload = Payload()
        ref = weakref.ref(payload)
        future = front.submit(str, payload)
        assert isinstance(future.exception(TIMEOUT), BrokenExecutor)
        assert front.join(TIMEOUT)
        del future, payload
        gc.collect()
        assert ref() is None, "the broken front keeps the task's arguments"
    finally:
        front.shutdown()


# -- shutdown ---------------------------------------------------------------------------------


def test_shutdown_returns_once_the_executor_is_shut_down() -> None:
    # The dispatcher forgets itself only once it has shut the executor down, so join() cannot
    # return first.
    closing, release = threading.Event(), threading.Event()

    class SlowToClose(Recording):
        def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
            closing.set()
            assert release.wait(TIMEOUT)
            super().shutdown(wait=wait)

    front = PriorityExecutor(SlowToClose(), 1)
    assert front.submit(str, 1).result(TIMEOUT) == "1"
    stopper = in_thread(front.shutdown)
    assert closing.wait(TIMEOUT)
    assert not stopper.future.done(), "shutdown(wait=True) returned before the executor's"
    release.set()
    stopper.result()


def test_shutdown_hands_over_what_is_queued_then_shuts_the_executor_down(gate: Gate) -> None:
    delegate = Recording()
    front = busy_front(delegate, gate)
    queued = [front.submit(str, i) for i in range(5)]
    stopper = in_thread(front.shutdown)
    wait_until(lambda: front._shutdown, "shutdown begins")
    with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
        front.submit(str, "refused")
    assert delegate.shutdowns == 0, "shut down before the queue was handed over"
    gate.open()
    stopper.result()
    assert [f.result(0) for f in queued] == ["0", "1", "2", "3", "4"]
    assert delegate.shutdowns == 1
    assert delegate.inner._shutdown


def test_shutdown_without_wait_still_hands_over_the_queue(gate: Gate) -> None:
    delegate = Recording()
    front = busy_front(delegate, gate)
    queued = [front.submit(str, i) for i in range(3)]
    front.shutdown(wait=False)
    gate.open()
    assert [f.result(TIMEOUT) for f in queued] == ["0", "1", "2"]
    wait_until(lambda: delegate.shutdowns == 1, "the dispatcher shuts the executor down")
    internals(front).dispatcher.join()


def test_shutdown_executor_false_leaves_the_executor_running() -> None:
    with ThreadPoolExecutor(1) as delegate:
        with PriorityExecutor(delegate, shutdown_executor=False) as front:
            assert front.submit(str, 1).result(TIMEOUT) == "1"
        assert delegate.submit(str, 2).result(TIMEOUT) == "2"


def test_shutdown_cancel_futures_cancels_the_queue_and_keeps_what_runs(gate: Gate) -> None:
    front = busy_front(ThreadPoolExecutor(1), gate)
    queued = [front.submit(str, i) for i in range(3)]
    front.shutdown(wait=False, cancel_futures=True)
    assert_done_promptly(*queued)
    assert all(f.cancelled() for f in queued)
    gate.open()
    assert front.join(TIMEOUT)
    front.shutdown()


def test_a_front_never_submitted_to_shuts_its_executor_down() -> None:
    delegate = Recording()
    PriorityExecutor(delegate, 1).shutdown()
    assert delegate.shutdowns == 1


def test_a_dropped_front_is_collected_and_its_threads_exit() -> None:
    delegate = Recording()
    front = PriorityExecutor(delegate, 2)
    assert front.submit(str, "x").result(TIMEOUT) == "x"
    dispatcher = internals(front).dispatcher.thread
    assert dispatcher is not None
    ref = weakref.ref(front)
    del front
    gc.collect()
    assert ref() is None, "the front's own threads keep it alive"
    dispatcher.join(TIMEOUT)
    assert not dispatcher.is_alive()
    assert delegate.shutdowns == 1


# -- thread start, fork and exit --------------------------------------------------------------


def test_a_dispatcher_that_cannot_start_withdraws_the_submit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.endswith("_dispatcher"):
            raise RuntimeError("can't start new thread")
        real_start(self)

    with PriorityExecutor(ThreadPoolExecutor(1)) as front:
        monkeypatch.setattr(threading.Thread, "start", start)
        with pytest.raises(RuntimeError, match=exact("can't start new thread")):
            front.submit(str, "lost")
        assert front.statistics().submitted == 0
        front._check_invariants()
        monkeypatch.setattr(threading.Thread, "start", real_start)
        assert front.submit(str, "later").result(TIMEOUT) == "later"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")
def test_a_front_inherited_across_fork_refuses_work_in_the_child() -> None:
    result = run_script(
        """
        import os, warnings
        from concurrent.futures import ThreadPoolExecutor
        from priority_executor import PriorityExecutor
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
        front = PriorityExecutor(ThreadPoolExecutor(1))
        front.submit(str, 1).result(TIMEOUT)
        pid = os.fork()
        if pid == 0:
            try:
                front.submit(str, 2)
            except Exception as exc:
                print(type(exc).__name__, exc, flush=True)
            fresh = PriorityExecutor(ThreadPoolExecutor(1))
            print(fresh.submit(str, 3).result(TIMEOUT), flush=True)
            fresh.shutdown()
            os._exit(0)
        os.waitpid(pid, 0)
        print(front.submit(str, 4).result(TIMEOUT))
        front.shutdown()
        """
    )
    assert_clean_exit(result, [f"BrokenExecutor {FORKED_MESSAGE}", "3", "4"])


def test_at_exit_a_front_never_shut_down_hands_its_queue_over() -> None:
    result = run_script(
        """
        from concurrent.futures import ThreadPoolExecutor
        from priority_executor import PriorityExecutor
        """,
        EXITING,
        """
        front = PriorityExecutor(ThreadPoolExecutor(1))
        front.submit(exiting.wait, TIMEOUT)  # busy until the interpreter exits
        futures = [front.submit(print, i, flush=True) for i in range(3)]
        """,
    )
    assert_clean_exit(result, ["0", "1", "2"])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the script's tasks need the fork start method")
def test_at_exit_a_process_pool_made_after_the_import_still_takes_the_queue() -> None:
    # Our exit hooks run before the standard pools', whichever module is imported first;
    # otherwise a process pool's would refuse every task still queued in the front.
    result = run_script(
        """
        import multiprocessing, threading
        from priority_executor import PriorityExecutor
        from concurrent.futures import ProcessPoolExecutor

        def remember(event):
            global exiting
            exiting = event

        def hold():
            return exiting.wait(TIMEOUT)

        event = multiprocessing.get_context("fork").Event()
        threading._register_atexit(event.set)  # runs first: the process is busy until exit
        pool = ProcessPoolExecutor(
            1, multiprocessing.get_context("fork"), initializer=remember, initargs=(event,)
        )
        front = PriorityExecutor(pool)
        # Warm: from 3.12 on, no thread or process can start once the interpreter exits.
        assert front.submit(abs, 0).result(TIMEOUT) == 0
        front.submit(hold)
        futures = [front.submit(abs, -i) for i in range(3)]
        for future in futures:
            future.add_done_callback(lambda f: print(f.result(), flush=True))
        """
    )
    assert_clean_exit(result, ["0", "1", "2"])


# -- real process pools -----------------------------------------------------------------------


def _square(x: int) -> int:
    return x * x


def _die() -> None:
    os._exit(3)


_released: Any = None  # in a worker process: the Event that _hold waits for


def _remember(event: Any) -> None:
    global _released
    _released = event


def _hold() -> str:
    if not _released.wait(TIMEOUT):
        raise TimeoutError("never released")
    return "released"


def gated_process_pool() -> tuple[ProcessPoolExecutor, Any]:
    """A one-process pool whose ``_hold`` tasks wait for the returned Event."""
    event = multiprocessing.get_context().Event()
    return ProcessPoolExecutor(1, initializer=_remember, initargs=(event,)), event


def test_a_process_pool_front_runs_tasks_and_leaves_no_process_behind() -> None:
    with PriorityExecutor(ProcessPoolExecutor(2)) as front:
        futures = [front.submit(_square, i) for i in range(40)]
        assert [f.result(TIMEOUT) for f in futures] == [i * i for i in range(40)]
        assert front.max_running == 4  # two a process, by default
    assert multiprocessing.active_children() == []


def test_done_callbacks_on_the_process_pools_manager_thread_submit_without_deadlock() -> None:
    # gh-105829: a submit from the manager thread, which runs the pool's done-callbacks, can
    # deadlock a ProcessPoolExecutor. Through the front it only queues.
    results: list[int] = []
    done = threading.Event()
    with PriorityExecutor(ProcessPoolExecutor(2)) as front:

        def more(future: Future[int]) -> None:
            results.append(future.result())
            if len(results) < 30:
                front.submit(_square, len(results)).add_done_callback(more)
            else:
                done.set()

        front.submit(_square, 0).add_done_callback(more)
        assert done.wait(TIMEOUT * 3), f"the chain stopped after {len(results)}"
    assert results == [i * i for i in range(30)]


def test_a_dead_worker_process_fails_what_the_pool_fails_and_breaks_the_front() -> None:
    front = PriorityExecutor(ProcessPoolExecutor(1), max_running=1)
    try:
        assert front.submit(_square, 3).result(TIMEOUT) == 9
        dying = front.submit(_die)
        queued = [front.submit(_square, i) for i in range(3)]
        with pytest.raises(BrokenProcessPool):
            dying.result(TIMEOUT)
        _done, not_done = wait(queued, TIMEOUT)
        assert not not_done
        assert all(isinstance(f.exception(0), BrokenProcessPool) for f in queued)
        with pytest.raises(BrokenProcessPool):
            front.submit(_square, 4)
        front._check_invariants()
    finally:
        front.shutdown()


def test_an_urgent_task_overtakes_a_process_pool_backlog() -> None:
    pool, release = gated_process_pool()
    order: list[str] = []

    def note(tag: str, _: Future[int]) -> None:
        order.append(tag)

    with PriorityExecutor(pool, max_running=1) as front:
        held = front.submit(_hold)
        backlog = [front.submit(_square, i) for i in range(20)]
        for i, f in enumerate(backlog):
            f.add_done_callback(functools.partial(note, f"low-{i}"))
        urgent = front.submit(_square, 99, priority=10)
        urgent.add_done_callback(functools.partial(note, "urgent"))
        release.set()
        assert held.result(TIMEOUT) == "released"
        assert urgent.result(TIMEOUT) == 99 * 99
        wait(backlog, TIMEOUT)
    assert order == ["urgent"] + [f"low-{i}" for i in range(20)]


def test_asyncio_runs_in_the_front_and_takes_a_view_as_its_default_executor() -> None:
    async def main(front: PriorityExecutor) -> list[str]:
        loop = asyncio.get_running_loop()
        direct = await loop.run_in_executor(front, str, "direct")
        # set_default_executor insists on a ThreadPoolExecutor (3.11+): a view is one.
        loop.set_default_executor(front.options(priority=5))
        via_view = await loop.run_in_executor(None, str, "view")
        threaded = await asyncio.to_thread(str, "to_thread")
        return [direct, via_view, threaded]

    with PriorityExecutor(ThreadPoolExecutor(2)) as front:
        assert asyncio.run(main(front)) == ["direct", "view", "to_thread"]
        assert front.statistics().completed == 3
