"""``pool.options(priority=..., timeout=...)``: a view that submits to its pool with those options
(passing keywords of the same names on to ``fn``), and that shuts down on its own: it refuses
later submits, and the submits in flight or blocked on a full queue when it closes, waits for
its own tasks or cancels them, and leaves the pool and other views running. Its futures do not
keep the pool alive. (That a view is a ``ThreadPoolExecutor`` to what insists on one:
test_views_as_pools.py.)

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. Deadlines run on a :class:`FakeClock`. A race is not left to chance: a
wrapped view lock stops the submitting thread at the exact point and waits on an event for
``shutdown`` to act. Nothing sleeps and every wait has a timeout.
"""

from __future__ import annotations

import functools
import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, wait
from typing import Any, cast

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PoolView, Priority, PriorityThreadPoolExecutor
from support import (
    FAR,
    SHUTDOWN_MESSAGE,
    InThread,
    Recorder,
    assert_done_promptly,
    exact,
    held_pool,
    in_thread,
    internals,
    wait_until,
)

# -- options --------------------------------------------------------------------------------


def test_view_forwards_keywords_named_priority_and_timeout_to_fn() -> None:
    def echo(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return args, kwargs

    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        view = pool.options(priority=Priority.HIGH, timeout=FAR)
        future = view.submit(echo, 1, priority="p", timeout="t", fn="f")
        args, kwargs = future.result(timeout=TIMEOUT)
        assert args == (1,)
        assert kwargs == {"priority": "p", "timeout": "t", "fn": "f"}


def test_view_is_an_executor_with_its_options() -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        view = pool.options(priority=3, timeout=2)
        assert isinstance(view, Executor)
        assert isinstance(view, PoolView)
        assert view.priority == 3
        assert view.timeout == 2.0
        default = pool.options()
        assert default.priority == Priority.NORMAL
        assert default.timeout is None


def test_view_applies_its_priority(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        urgent = pool.options(priority=Priority.HIGH)
        pool.submit(record, "normal")
        urgent.submit(record, "urgent")
        pool.options(priority=Priority.LOW).submit(record, "low")
        pool.submit(record, "highest", priority=2)
        gate.open()
    assert record.ran == ["highest", "urgent", "normal", "low"]


def test_view_applies_its_queue_timeout(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate, clock) as pool:
        view = pool.options(timeout=FAR)
        expiring = view.submit(record, "view", timeout="for fn")
        staying = pool.submit(record, "pool")
        clock.advance(FAR)
        assert_done_promptly(expiring)
        assert expiring.cancelled()
        gate.open()
        assert staying.result(timeout=TIMEOUT) == "pool"
    assert record.ran == ["pool"]


def test_view_map_applies_its_priority_and_forwards_no_options(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        pool.submit(record, "normal")
        results = pool.options(priority=Priority.HIGH).map(record, ["a", "b"], timeout=TIMEOUT)
        gate.open()
        assert list(results) == ["a", "b"]
    assert record.ran == ["a", "b", "normal"]


# -- shutdown of a view ---------------------------------------------------------------------


def test_view_shutdown_closes_the_view_only() -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        view = pool.options(priority=Priority.HIGH)
        assert view.submit(int, "1").result(timeout=TIMEOUT) == 1
        view.shutdown()
        view.shutdown()  # idempotent
        with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
            view.submit(int, "2")
        assert not pool._shutdown
        assert pool.submit(int, "3").result(timeout=TIMEOUT) == 3
        assert pool.options().submit(int, "4").result(timeout=TIMEOUT) == 4


def test_view_context_manager_closes_the_view_and_waits_for_its_tasks(gate: Gate) -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(gate)
        with pool.options() as view:
            futures = [view.submit(int, str(i)) for i in range(3)]
            gate.open()
        assert [f.result(timeout=0) for f in futures] == [0, 1, 2]
        with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
            view.submit(int)
        assert pool.submit(int, "5").result(timeout=TIMEOUT) == 5


def test_view_shutdown_wait_returns_only_after_its_tasks_are_done(gate: Gate) -> None:
    seen: list[list[bool]] = []
    with held_pool(gate) as pool:
        view = pool.options()
        futures = [view.submit(int, str(i)) for i in range(3)]

        def close_view() -> None:
            view.shutdown(wait=True)
            seen.append([f.done() for f in futures])

        closer = threading.Thread(target=close_view)
        closer.start()
        gate.open()
        closer.join(TIMEOUT)
        assert not closer.is_alive()
    assert seen == [[True, True, True]]


def test_view_shutdown_cancel_futures_cancels_only_its_queued_tasks(gate: Gate) -> None:
    record = Recorder()
    with held_pool(gate) as pool:
        view = pool.options(priority=Priority.HIGH)
        direct = pool.submit(record, "direct")
        through_view = [view.submit(record, f"view {i}") for i in range(3)]
        other_view = pool.options(priority=Priority.HIGH).submit(record, "other view")
        view.shutdown(wait=False, cancel_futures=True)
        assert all(f.cancelled() for f in through_view)
        assert_done_promptly(*through_view)
        assert not direct.done()
        gate.open()
        assert direct.result(timeout=TIMEOUT) == "direct"
        assert other_view.result(timeout=TIMEOUT) == "other view"
        assert not pool._shutdown
    assert record.ran == ["other view", "direct"]


def test_view_of_a_shut_down_pool_refuses_work() -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    view = pool.options()
    pool.shutdown()
    with pytest.raises(RuntimeError, match=exact(SHUTDOWN_MESSAGE)):
        view.submit(int)


# -- shutdown of a view against its submits in flight ---------------------------------------


# PoolView.shutdown(wait=True) waits for a submit through the view in flight: a
# view.shutdown(wait=True) that wakes between view.submit counting itself out and recording its
# future still sees the submit, and does not return while the task is queued. A wrapped view lock
# stops the submitting thread right after the step that counts it out, until shutdown has taken
# its snapshot of the view's futures.


class HookedLock:
    """A lock that calls ``after_release()`` in the releasing thread, once it is free."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.after_release: Callable[[], None] = lambda: None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()
        self.after_release()

    def locked(self) -> bool:  # threading.Condition reads it from 3.14 on
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class SnapshotSet(set[Future[Any]]):
    """``PoolView._pending`` that reports when ``shutdown`` copies it."""

    def __init__(self) -> None:
        super().__init__()
        self.copied = threading.Event()

    def __iter__(self) -> Iterator[Future[Any]]:
        self.copied.set()
        return super().__iter__()


def submit_or_refusal(view: PoolView, fn: Callable[[], object]) -> object:
    """``view.submit(fn)``'s future, or the RuntimeError it raised."""
    try:
        return view.submit(fn)
    except RuntimeError as exc:
        return exc


def instrument(view: PoolView, monkeypatch: pytest.MonkeyPatch) -> tuple[HookedLock, SnapshotSet]:
    lock, pending = HookedLock(), SnapshotSet()
    state = view._state
    monkeypatch.setattr(state, "lock", lock)
    monkeypatch.setattr(state, "settled", threading.Condition(cast(Any, lock)))
    monkeypatch.setattr(state, "pending", pending)
    return lock, pending


def test_a_view_submit_in_flight_when_the_view_shuts_down_is_refused(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The submit has counted itself in with the view when shutdown(wait=True) closes it: the
    # pool refuses it (the view is its gate, checked under the pool's lock), shutdown waits
    # for it to count out, and nothing of it is queued or runs.
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        view = pool.options()
        lock, _pending = instrument(view, monkeypatch)
        pool.submit(gate)
        gate.wait_started()
        ran = threading.Event()

        submitter = InThread(functools.partial(submit_or_refusal, view, ran.set), "submitter")
        closer = InThread(lambda: view.shutdown(wait=True), "closer")
        closer_waits = threading.Event()
        counted_in: list[str] = []

        def after_release() -> None:
            me = threading.current_thread()
            if me is closer.thread and view._state.submitting:
                closer_waits.set()  # released in Condition.wait: it waits for the submit
            elif me is submitter.thread and not counted_in:
                counted_in.append(me.name)  # counted in: hold it until shutdown waits for it
                assert closer_waits.wait(TIMEOUT), "shutdown did not wait for the submit"

        lock.after_release = after_release
        submitter.start()
        closer.start()
        error = submitter.result()
        assert closer.result() is None
        assert counted_in == ["submitter"]
        assert type(error) is RuntimeError
        assert str(error) == SHUTDOWN_MESSAGE
        gate.open()
        assert pool.join(TIMEOUT)
        assert not ran.is_set()
        assert pool.statistics().rejected == 1
        pool._check_invariants()
    finally:
        gate.open()
        pool.shutdown()


@pytest.mark.parametrize("cancel_futures", [False, True])
@pytest.mark.parametrize("wait_", [False, True], ids=["nowait", "wait"])
def test_a_view_submit_blocked_on_a_full_queue_is_refused_when_the_view_shuts_down(
    gate: Gate, wait_: bool, cancel_futures: bool
) -> None:
    # The blocked submit does not escape the view's shutdown: it gets the standard RuntimeError,
    # as a blocked submit on the pool does when the pool shuts down, rather than queueing its
    # task once room appears and running it, even after cancel_futures=True.
    pool = PriorityThreadPoolExecutor(max_workers=1, max_queued=1, when_full="block")
    try:
        view = pool.options()
        pool.submit(gate)
        gate.wait_started()
        filler = pool.submit(str, "filler")  # the queue is full
        ran = threading.Event()

        submitter = in_thread(functools.partial(submit_or_refusal, view, ran.set), "submitter")
        wait_until(lambda: internals(pool).blocked() == 1, "the view's submit blocks for room")
        view.shutdown(wait=wait_, cancel_futures=cancel_futures)
        error = submitter.result()
        assert type(error) is RuntimeError
        assert str(error) == SHUTDOWN_MESSAGE
        assert not filler.done(), "the view's shutdown touched a task of the pool"
        gate.open()
        assert filler.result(TIMEOUT) == "filler"
        assert pool.join(TIMEOUT)
        assert not ran.is_set(), "the refused task ran"
        stats = pool.statistics()
        assert (stats.submitted, stats.completed, stats.rejected) == (2, 2, 1)
        pool._check_invariants()
    finally:
        gate.open()
        pool.shutdown()


# -- references -----------------------------------------------------------------------------


# Futures submitted through a view do not keep the pool alive: their done-callback does not hold
# the view, which holds the pool, so a caller keeping the futures does not keep the pool, and its
# threads, alive for ever.


def test_futures_of_a_view_do_not_keep_a_dropped_pool_or_its_threads_alive() -> None:
    def make() -> tuple[
        weakref.ref[PriorityThreadPoolExecutor], list[Future[str]], list[threading.Thread]
    ]:
        pool = PriorityThreadPoolExecutor(max_workers=2, thread_name_prefix="dropped")
        view = pool.options(priority=1, timeout=TIMEOUT)
        futures = [view.submit(str, i) for i in range(4)]
        assert wait(futures, TIMEOUT).not_done == set()
        # Read while the pool lives: once dropped, its workers may exit at any moment.
        workers = [t for t in threading.enumerate() if t.name.startswith("dropped_")]
        return weakref.ref(pool), futures, workers

    pool_ref, futures, workers = make()
    assert workers, "the pool started no thread"
    gc.collect()
    assert pool_ref() is None, "the futures keep the pool alive"
    for thread in workers:
        thread.join(TIMEOUT)
    assert [t.name for t in workers if t.is_alive()] == []
    assert [f.result(0) for f in futures] == ["0", "1", "2", "3"]
