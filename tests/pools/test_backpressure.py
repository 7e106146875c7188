"""Backpressure, ``max_queued`` and ``when_full``: what a submit to a full queue does. ``'block'``
waits until a task leaves the queue (it starts, is cancelled or expires) or the pool shuts down;
``'raise'`` raises :class:`QueueFullError`; ``'evict'`` cancels the lowest-ranked queued task if
the newcomer outranks it. Running tasks do not count. A blocked submit keeps its deadline, and
one made from a pool's own thread (a task, an initializer, a callback in the timer) raises
instead of waiting for room that only those threads could make.

Order is observed with a gate: one worker (``max_workers=1``) is held by a task waiting on an
event, the work under test is queued behind it, the gate opens, and the order in which the tasks
ran is read from a list. A submit that must block runs in a helper thread, and the test waits
for the pool to report it blocked before it makes room. Deadlines run on a :class:`FakeClock`.
Nothing sleeps to synchronise, every wait has a timeout, and ``_check_invariants()`` runs after
each step that changes the queue.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, wait
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor, QueueFullError
from support import (
    FAR,
    SHUTDOWN_MESSAGE,
    STUCK,
    InThread,
    Recorder,
    closing,
    exact,
    hold_worker,
    in_thread,
    queue_full_message,
    run_to_idle,
    timer_asleep,
    wait_blocked,
    wait_until,
)

# -- block ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["cancel", "start", "expire"])
def test_block_submit_returns_once_a_task_leaves_the_queue(
    clock: FakeClock, gate: Gate, how: str
) -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=2)
    clock.attach(pool)
    with closing(pool, gate):
        hold_worker(pool, gate)  # running: does not count toward max_queued
        first = pool.submit(record, "first", timeout=FAR if how == "expire" else None)
        pool.submit(record, "second")
        assert pool.statistics().queued == 2
        blocked = in_thread(lambda: pool.submit(record, "third"))
        wait_blocked(pool)
        assert not blocked.future.done()
        pool._check_invariants()
        if how == "cancel":
            assert first.cancel()
        elif how == "start":
            gate.open()
        else:
            clock.advance(2 * FAR)
        third = blocked.result()
        pool._check_invariants()
        run_to_idle(pool, gate)
        assert third.result(0) == "third"
    expected = ["first", "second", "third"] if how == "start" else ["second", "third"]
    assert record.ran == expected


def test_block_submit_raises_the_standard_error_if_the_pool_shuts_down_meanwhile(
    gate: Gate,
) -> None:
    with closing(PriorityThreadPoolExecutor(1, max_queued=1), gate) as pool:
        hold_worker(pool, gate)
        queued = pool.submit(str, "queued")
        blocked = in_thread(lambda: pool.submit(str, "blocked"))
        wait_blocked(pool)
        pool.shutdown(wait=False)
        error = blocked.exception()
        assert isinstance(error, RuntimeError)
        assert str(error) == SHUTDOWN_MESSAGE
        stats = pool.statistics()
        assert (stats.submitted, stats.rejected, stats.queued) == (2, 1, 1)
        pool._check_invariants()
        gate.open()
        pool.shutdown()
        assert queued.result(0) == "queued"


# -- raise ----------------------------------------------------------------------------------


def test_raise_when_full_raises_queue_full_error_and_queues_nothing(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full="raise"), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "a")
        pool.submit(record, "b", priority=Priority.LOW)
        assert issubclass(QueueFullError, RuntimeError)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
            pool.submit(record, "refused", priority=Priority.HIGH)
        with pytest.raises(RuntimeError, match=exact(queue_full_message(2))):
            pool.submit(record, "refused too")
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.submitted, stats.rejected) == (2, 3, 2)
        run_to_idle(pool, gate)
    assert record.ran == ["a", "b"]


def test_running_tasks_do_not_count_toward_max_queued() -> None:
    gates = [Gate(), Gate()]
    with closing(PriorityThreadPoolExecutor(2, max_queued=1, when_full="raise"), *gates) as pool:
        for gate in gates:
            hold_worker(pool, gate)
        queued = pool.submit(str, "queued")
        stats = pool.statistics()
        assert (stats.running, stats.queued) == (2, 1)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(1))):
            pool.submit(str, "one too many")
        gates[0].open()
        assert queued.result(TIMEOUT) == "queued"
        pool._check_invariants()


# -- evict ----------------------------------------------------------------------------------


def test_evict_cancels_the_lowest_ranked_queued_task_and_wakes_its_waiters(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=3, when_full="evict"), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "low-1", priority=Priority.LOW)
        evicted = pool.submit(record, "low-2", priority=Priority.LOW)  # runs last: the worst
        pool.submit(record, "normal")
        waiter = in_thread(lambda: wait([evicted], TIMEOUT))
        wait_until(lambda: bool(getattr(evicted, "_waiters", True)), "wait() waits")
        newcomer = pool.submit(record, "high", priority=Priority.HIGH)
        assert evicted.cancelled()
        assert evicted in wait([evicted], 0).done  # notified, not merely cancelled
        assert evicted in waiter.result().done
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.cancelled, stats.rejected) == (3, 1, 0)
        assert stats.queued_by_priority == {1: 1, 0: 1, -1: 1}
        run_to_idle(pool, gate)
        assert newcomer.result(0) == "high"
    assert record.ran == ["high", "normal", "low-1"]


def test_evict_refuses_a_task_that_does_not_outrank_the_lowest(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full="evict"), gate) as pool:
        hold_worker(pool, gate)
        pool.submit(record, "a")
        pool.submit(record, "b")
        for priority in (Priority.NORMAL, Priority.LOW):
            with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
                pool.submit(record, "refused", priority=priority)
        pool._check_invariants()
        stats = pool.statistics()
        assert (stats.queued, stats.cancelled, stats.rejected) == (2, 0, 2)
        run_to_idle(pool, gate)
    assert record.ran == ["a", "b"]


def test_evict_with_ageing_compares_effective_ranks(clock: FakeClock, gate: Gate) -> None:
    record = Recorder()
    pool = PriorityThreadPoolExecutor(1, clock=clock, ageing=1.0, max_queued=1, when_full="evict")
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.submit(record, "old-low", priority=Priority.LOW)  # key 1001
        clock.advance(3.0)
        with pytest.raises(QueueFullError, match=exact(queue_full_message(1))):
            pool.submit(record, "young-normal")  # key 1003: the old task outranks it
        pool.submit(record, "young-top", priority=3)  # key 1000: evicts
        pool._check_invariants()
        run_to_idle(pool, gate)
    assert record.ran == ["young-top"]


# Evicting costs O(log n), however many distinct priorities are queued (the cost is counted in
# test_queue.py, test_eviction_cost_grows_with_the_log_of_the_distinct_priorities), not the
# O(L log L) of sorting all the levels on every evicting submit.


def test_evicting_from_a_queue_of_distinct_float_priorities_keeps_the_order() -> None:
    with PriorityThreadPoolExecutor(max_workers=1, max_queued=100, when_full="evict") as pool:
        pool.pause()
        futures = [pool.submit(str, i, priority=i / 7) for i in range(300)]
        kept = [f for f in futures if not f.cancelled()]
        assert [f for f in futures if f.cancelled()] == futures[:200]
        pool._check_invariants()
        pool.resume()
        assert [f.result(TIMEOUT) for f in kept] == [str(i) for i in range(200, 300)]


# -- deadlines of blocked submits -----------------------------------------------------------


def test_blocked_submit_expires_if_its_deadline_passes_while_it_waits(
    clock: FakeClock, gate: Gate
) -> None:
    # The submit waits in real time for at most the deadline's distance on the pool's clock
    # (here 0.02 s) and then re-reads the clock, so moving the fake clock is enough.
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=1)
    clock.attach(pool)
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.submit(str, "queued")
        blocked = in_thread(lambda: pool.submit(str, "late", timeout=0.02))
        wait_blocked(pool)
        clock.advance(1.0)
        late = blocked.result()
        assert late.cancelled()
        assert late in wait([late], 0).done
        stats = pool.statistics()
        assert (stats.queued, stats.expired, stats.submitted) == (1, 1, 3)
        pool._check_invariants()


class SteppingClock:
    """A clock that moves one second forward each time it is read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = 1000.0

    def __call__(self) -> float:
        with self._lock:
            self._now += 1.0
            return self._now


def test_blocked_submit_whose_deadline_is_due_at_the_room_check_expires_at_once(
    gate: Gate,
) -> None:
    # The submit reads the clock for the deadline, then again when it finds the queue full:
    # by then the deadline has passed, so it returns an expired future without waiting.
    pool = PriorityThreadPoolExecutor(1, clock=SteppingClock(), max_queued=1)
    with closing(pool, gate):
        hold_worker(pool, gate)
        pool.submit(str, "queued")
        late = in_thread(lambda: pool.submit(str, "late", timeout=0.5)).result()
        assert late.cancelled()
        assert late in wait([late], 0).done
        stats = pool.statistics()
        assert (stats.queued, stats.expired) == (1, 1)
        pool._check_invariants()


def block_behind_a_filler(
    pool: PriorityThreadPoolExecutor,
) -> tuple[Future[str], InThread[Future[str]]]:
    """Pause ``pool`` (``max_queued=1``), fill its queue, and submit a task with a deadline
    from a helper thread; return the filler and that submit once it is blocked for room."""
    pool.pause()  # paused: no worker
    filler = pool.submit(str, "filler")
    blocked = in_thread(lambda: pool.submit(str, "late", timeout=FAR))
    wait_blocked(pool)
    timer_asleep(pool)  # it has looked for the blocked task's deadline and found none
    return filler, blocked


def test_blocked_submit_past_its_deadline_is_not_queued_when_room_appears(
    clock: FakeClock,
) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=1)
    with closing(pool):
        filler, blocked = block_behind_a_filler(pool)
        clock.advance(2 * FAR)  # not attached: only the blocked submit may notice
        assert filler.cancel()  # room appears only after the deadline
        late = blocked.result()
        assert late.cancelled(), "queued past its deadline"
        assert pool.statistics().expired == 1


def test_a_submit_that_waited_for_room_keeps_its_deadline_armed(clock: FakeClock) -> None:
    pool = PriorityThreadPoolExecutor(1, clock=clock, max_queued=1)
    clock.attach(pool)
    with closing(pool):
        filler, blocked = block_behind_a_filler(pool)
        assert filler.cancel()
        late = blocked.result()
        assert not late.done()
        pool._check_invariants()


# -- through views --------------------------------------------------------------------------


def test_view_submit_blocks_on_a_full_queue_until_room_appears(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=1), gate) as pool:
        view = pool.options(priority=Priority.HIGH)
        hold_worker(pool, gate)
        filler = pool.submit(record, "filler")
        blocked = in_thread(lambda: view.submit(record, "through-view"))
        wait_blocked(pool)
        assert filler.cancel()
        through_view = blocked.result()
        pool._check_invariants()
        run_to_idle(pool, gate)
        assert through_view.result(0) == "through-view"
    assert record.ran == ["through-view"]


def test_view_submit_blocked_on_a_full_queue_lets_the_views_tasks_finish(gate: Gate) -> None:
    with closing(PriorityThreadPoolExecutor(1, max_queued=1), gate) as pool:
        view = pool.options()
        view.submit(gate)
        gate.wait_started()
        queued = view.submit(str, "queued")
        blocked = in_thread(lambda: view.submit(str, "blocked"))
        wait_blocked(pool)
        gate.open()
        try:
            assert blocked.result(STUCK).result(TIMEOUT) == "blocked"
        finally:
            queued.cancel()  # breaks the deadlock if the bug holds: room for the blocked submit
            blocked.result()


def test_evict_through_views(gate: Gate) -> None:
    record = Recorder()
    with closing(PriorityThreadPoolExecutor(1, max_queued=2, when_full="evict"), gate) as pool:
        low = pool.options(priority=Priority.LOW)
        high = pool.options(priority=Priority.HIGH)
        hold_worker(pool, gate)
        low.submit(record, "low-1")
        evicted = low.submit(record, "low-2")
        with pytest.raises(QueueFullError, match=exact(queue_full_message(2))):
            low.submit(record, "refused")
        high.submit(record, "high")
        assert evicted.cancelled()
        assert evicted in wait([evicted], 0).done
        pool._check_invariants()
        run_to_idle(pool, gate)
        low.shutdown()  # returns: the evicted task no longer counts as pending
    assert record.ran == ["high", "low-1"]


# -- a blocking submit from one of the pool's own threads -----------------------------------


# A blocking submit from one of the pool's own threads raises QueueFullError: with
# when_full="block", a task (or a done-callback in the timer) that submits to a full queue would
# otherwise wait for room that only the pool's own threads can make, and once every worker did
# so, the pool would deadlock silently.


def own_thread_message(max_queued: int) -> str:
    return (
        "cannot wait for room from one of the pool's own threads:"
        f" max_queued={max_queued} tasks wait"
    )


def test_a_task_submitting_to_a_full_blocking_queue_gets_queue_full_error() -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, max_queued=1, when_full="block")
    children: list[Future[str]] = []

    def fan_out() -> Optional[BaseException]:
        children.append(pool.submit(str, "child"))  # the queue is full now
        try:
            pool.submit(str, "refused")
        except QueueFullError as exc:
            return exc
        return None

    try:
        parent = pool.submit(fan_out)
        assert wait([parent], TIMEOUT).done == {parent}, "the task blocked on the full queue"
        error = parent.result(0)
        assert type(error) is QueueFullError
        assert str(error) == own_thread_message(1)
        assert children[0].result(TIMEOUT) == "child"
        stats = pool.statistics()
        assert (stats.submitted, stats.rejected) == (2, 1)
        pool._check_invariants()
    finally:
        pool.shutdown()


def test_an_initializer_submitting_to_a_full_blocking_queue_gets_queue_full_error() -> None:
    # An initializer runs in the new worker thread before that thread takes a task: it would
    # wait for room that only its own thread could make, and the pool would hang.
    submitted: Future[Optional[BaseException]] = Future()

    def init() -> None:
        try:
            pool.submit(str, "refused")  # the first task still waits: the queue is full
        except BaseException as exc:
            submitted.set_result(exc)
        else:
            submitted.set_result(None)

    pool = PriorityThreadPoolExecutor(1, initializer=init, max_queued=1, when_full="block")
    try:
        first = pool.submit(str, "first")
        error = submitted.result(TIMEOUT)  # a TimeoutError here: the initializer waits for room
        assert type(error) is QueueFullError
        assert str(error) == own_thread_message(1)
        assert first.result(TIMEOUT) == "first"
        stats = pool.statistics()
        assert (stats.submitted, stats.rejected) == (1, 1)
        pool._check_invariants()
    finally:
        pool.shutdown(cancel_futures=True)  # wakes the initializer if the bug kept it waiting


def test_a_timer_callback_submitting_to_a_full_blocking_queue_gets_queue_full_error(
    clock: FakeClock, gate: Gate
) -> None:
    pool = PriorityThreadPoolExecutor(
        max_workers=1, max_queued=2, when_full="block", clock=clock, thread_name_prefix="full"
    )
    clock.attach(pool)
    outcome: list[object] = []
    done = threading.Event()

    def resubmit(_: Future[Any]) -> None:  # runs in a callback thread when ``expiring`` expires
        try:
            outcome.append(pool.submit(str, "fills the queue"))
            pool.submit(str, "refused")
        except QueueFullError as exc:
            outcome.append(exc)
        finally:
            outcome.append(threading.current_thread().name)
            done.set()

    try:
        pool.submit(gate)
        gate.wait_started()
        expiring = pool.submit(str, "expiring", timeout=1.0)
        pool.submit(str, "waiting")
        expiring.add_done_callback(resubmit)
        clock.advance(1.0)
        # Not a full TIMEOUT: the gate opens by itself then, and makes room.
        assert done.wait(TIMEOUT / 2), "the callback thread blocked on the full queue"
        refill, error, thread = outcome
        assert isinstance(refill, Future)
        assert type(error) is QueueFullError
        assert str(error) == own_thread_message(2)
        assert thread == "full_callbacks_0"
        gate.open()
        assert refill.result(TIMEOUT) == "fills the queue"
        pool._check_invariants()
    finally:
        gate.open()
        pool.shutdown()


# -- the options ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"max_queued": "x"},
            TypeError,
            "max_queued must be a positive integer or None, got 'x' (str)",
        ),
        (
            {"max_queued": 1.5},
            TypeError,
            "max_queued must be a positive integer or None, got 1.5 (float)",
        ),
        (
            {"max_queued": True},
            TypeError,
            "max_queued must be a positive integer or None, got True (bool)",
        ),
        (
            {"max_queued": 0},
            ValueError,
            "max_queued must be a positive integer or None, got 0 (int)",
        ),
        (
            {"max_queued": -3},
            ValueError,
            "max_queued must be a positive integer or None, got -3 (int)",
        ),
        (
            {"when_full": "drop"},
            ValueError,
            "when_full must be 'block', 'raise' or 'evict', got 'drop' (str)",
        ),
        (
            {"when_full": "BLOCK"},
            ValueError,
            "when_full must be 'block', 'raise' or 'evict', got 'BLOCK' (str)",
        ),
        (
            {"when_full": None},
            ValueError,
            "when_full must be 'block', 'raise' or 'evict', got None (NoneType)",
        ),
    ],
)
def test_bad_backpressure_options_are_refused_with_an_exact_message(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=exact(message)):
        PriorityThreadPoolExecutor(1, **kwargs)
