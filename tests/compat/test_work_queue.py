"""``pool._work_queue``: read and drained as the standard pool's queue is.

Code that takes an executor reaches into the standard pool's private queue:
google-cloud-pubsub drains it with ``get(block=False)`` at shutdown to nack the messages that
never ran, and monitoring reads ``qsize()``. Taking a task out must follow the pool's rule
that whoever removes an entry under the lock alone claims it, keep the counts consistent,
and wake what waits for the queue to shrink. The race tests run with the option cross
product, where the queue's ordering and the full-queue policy change the removal paths.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import random
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor, QueueFullError
from priority_executor._work_queue import WorkItem
from support import Recorder, exact, internals, wait_until


def blocked_pool(gate: Gate, **options: Any) -> PriorityThreadPoolExecutor:
    """A pool whose single worker is held by ``gate``."""
    pool = PriorityThreadPoolExecutor(max_workers=1, **options)
    pool.submit(gate)
    gate.wait_started()
    return pool


def take(pool: PriorityThreadPoolExecutor) -> WorkItem:
    return pool._work_queue.get_nowait()


class Payload:
    """An argument whose lifetime a test can follow with a weak reference."""


class TestReading:
    def test_qsize_and_empty_count_queued_tasks_not_running_ones(self, gate: Gate) -> None:
        with blocked_pool(gate) as pool:
            assert (pool._work_queue.qsize(), pool._work_queue.empty()) == (0, True)
            futures = [pool.submit(str, i) for i in range(3)]
            assert (pool._work_queue.qsize(), pool._work_queue.empty()) == (3, False)
            futures[1].cancel()
            assert pool._work_queue.qsize() == 2
            gate.open()
        assert pool._work_queue.qsize() == 0

    def test_the_work_queue_is_one_object_per_pool(self) -> None:
        with PriorityThreadPoolExecutor(max_workers=1) as pool:
            assert pool._work_queue is pool._work_queue

    @pytest.mark.parametrize(
        "get",
        [
            lambda q: q.get(block=False),
            lambda q: q.get_nowait(),
            lambda q: q.get(),  # never waits for a submit: see the module docstring
            lambda q: q.get(timeout=0.5),
        ],
        ids=["get-block-false", "get_nowait", "get", "get-timeout"],
    )
    def test_get_from_an_empty_queue_raises_queue_empty(self, get: Any) -> None:
        with PriorityThreadPoolExecutor(max_workers=1) as pool, pytest.raises(queue.Empty):
            get(pool._work_queue)

    def test_the_standard_pool_raises_queue_empty_too(self) -> None:
        with ThreadPoolExecutor(max_workers=1) as pool, pytest.raises(queue.Empty):
            pool._work_queue.get(block=False)

    def test_a_negative_timeout_is_refused_as_queue_refuses_it(self) -> None:
        with PriorityThreadPoolExecutor(max_workers=1) as pool:
            with pytest.raises(ValueError, match=exact("'timeout' must be a non-negative number")):
                pool._work_queue.get(timeout=-1)
            with pytest.raises(ValueError, match=exact("'timeout' must be a non-negative number")):
                queue.Queue().get(timeout=-1)


class TestTaking:
    def test_get_takes_the_best_task_with_the_standard_attributes(self, gate: Gate) -> None:
        recorder = Recorder()
        with blocked_pool(gate) as pool:
            pool.submit(recorder, "low", priority=Priority.LOW)
            high = pool.submit(recorder, "high", priority=Priority.HIGH)
            pool.options().submit(recorder, "kw", priority=5)  # priority goes to the task
            item = take(pool)
            assert item.future is high
            assert (item.fn, item.args, item.kwargs) == (recorder, ("high",), {})
            assert item.task == (recorder, ("high",), {})
            assert type(item.kwargs) is dict
            view_item = take(pool)
            assert view_item.kwargs == {"priority": 5}
            assert not high.done()
            gate.open()
        # The pool never runs a task taken out of it; its future waits for the caller.
        assert recorder.ran == ["low"]
        assert not high.done()
        stats = pool.statistics()
        assert (stats.taken, stats.completed, stats.queued) == (2, 2, 0)
        pool._check_invariants()

    def test_run_runs_the_task_and_settles_its_future(self, gate: Gate) -> None:
        with blocked_pool(gate) as pool:
            ok = pool.submit(pow, 2, 10)
            failing = pool.submit(int, "x")
            take(pool).run()
            take(pool).run()
            assert ok.result(TIMEOUT) == 1024
            with pytest.raises(ValueError, match="invalid literal"):
                failing.result(TIMEOUT)
            gate.open()
        assert pool.statistics().taken == 2  # not completed: the pool did not run them
        pool._check_invariants()

    def test_run_of_a_task_cancelled_after_it_was_taken_wakes_its_waiters(self, gate: Gate) -> None:
        recorder = Recorder()
        with blocked_pool(gate) as pool:
            future = pool.submit(recorder, "cancelled")
            item = take(pool)
            assert future.cancel()
            item.run()
            done, _ = wait([future], timeout=TIMEOUT)
            assert done == {future}
            gate.open()
        assert recorder.ran == []

    def test_run_with_a_worker_context_runs_the_task_through_it(self, gate: Gate) -> None:
        class WorkerContext:  # the shape of the standard 3.14 worker's context
            def __init__(self) -> None:
                self.tasks: list[Any] = []

            def run(self, task: Any) -> Any:
                self.tasks.append(task)
                fn, args, kwargs = task
                return fn(*args, **kwargs)

        ctx = WorkerContext()
        with blocked_pool(gate) as pool:
            future = pool.submit(divmod, 7, 2)
            take(pool).run(ctx)
            assert future.result(TIMEOUT) == (3, 1)
            assert ctx.tasks == [(divmod, (7, 2), {})]
            gate.open()

    def test_a_taken_task_leaves_nothing_of_itself_in_the_pool(self, gate: Gate) -> None:
        with blocked_pool(gate) as pool:
            payload = Payload()
            alive = weakref.ref(payload)
            pool.submit(id, payload, timeout=3600)  # a tombstone stays in the deadline heap
            item = take(pool)
            del payload
            assert alive() is not None  # the caller's work item holds it
            del item
            gc.collect()
            assert alive() is None
            gate.open()

    def test_put_none_is_accepted_and_does_nothing(self, gate: Gate) -> None:
        with blocked_pool(gate) as pool:
            pool.submit(str, 1)
            pool._work_queue.put(None)
            pool._work_queue.put_nowait(None)
            assert pool._work_queue.qsize() == 1
            gate.open()

    def test_put_refuses_anything_but_none(self) -> None:
        with PriorityThreadPoolExecutor(max_workers=1) as pool:
            with pytest.raises(
                TypeError,
                match=exact(
                    "_work_queue.put() takes only None (a wake-up, which this pool's workers"
                    " do not need), got 5 (int); queue tasks with submit()"
                ),
            ):
                pool._work_queue.put(5)
            assert pool._work_queue.qsize() == 0


class TestSettlingOnTheWay:
    def test_get_expires_a_task_past_its_deadline_and_takes_the_next(
        self, gate: Gate, clock: FakeClock
    ) -> None:
        recorder = Recorder()
        with blocked_pool(gate, clock=clock) as pool:
            late = pool.submit(recorder, "late", priority=Priority.HIGH, timeout=5)
            later = pool.submit(recorder, "next")
            clock.advance(10)  # not attached: the timer does not wake, get finds it due
            item = take(pool)
            assert item.future is later
            assert late.cancelled()
            done, _ = wait([late], timeout=TIMEOUT)  # its waiters were woken
            assert done == {late}
            stats = pool.statistics()
            assert (stats.expired, stats.taken, stats.queued) == (1, 1, 0)
            pool._check_invariants()
            gate.open()
        assert recorder.ran == []

    def test_a_task_due_exactly_now_is_expired_not_taken(
        self, gate: Gate, clock: FakeClock
    ) -> None:
        with blocked_pool(gate, clock=clock) as pool:
            due = pool.submit(str, timeout=5)
            clock.advance(5)
            with pytest.raises(queue.Empty):
                take(pool)
            assert due.cancelled()
            gate.open()

    def test_a_clock_that_raises_lets_get_take_the_task_and_is_logged(
        self, gate: Gate, futures_log: list[Any]
    ) -> None:
        broken = threading.Event()

        def clock() -> float:
            if broken.is_set():
                raise OSError("clock failed")
            return 0.0

        with blocked_pool(gate, clock=clock) as pool:
            future = pool.submit(str, 1, timeout=100)
            broken.set()
            item = take(pool)
            broken.clear()
            assert item.future is future
            gate.open()
        # The timer may have read the broken clock too; get logs in the thread that called it.
        mine = [r.getMessage() for r in futures_log if r.thread == threading.get_ident()]
        assert mine == ["The pool's clock raised; deadlines wait until it works"]


class TestWaking:
    def test_get_makes_room_for_a_blocked_submit(self, gate: Gate) -> None:
        with blocked_pool(gate, max_queued=1, when_full="block") as pool:
            pool.submit(str, "queued")
            submitted: list[Future[Any]] = []
            submitter = threading.Thread(target=lambda: submitted.append(pool.submit(str, "in")))
            submitter.start()
            wait_until(
                lambda: internals(pool).blocked() == 1, "the submit blocks on the full queue"
            )
            take(pool)
            submitter.join(TIMEOUT)
            assert not submitter.is_alive()
            assert len(submitted) == 1
            gate.open()
            assert submitted[0].result(TIMEOUT) == "in"

    def test_get_wakes_join_once_nothing_is_queued(self) -> None:
        with PriorityThreadPoolExecutor(max_workers=1) as pool:
            pool.pause()
            pool.submit(str, 1)
            pool.submit(str, 2)
            joined: list[bool] = []
            joiner = threading.Thread(target=lambda: joined.append(pool.join(TIMEOUT)))
            joiner.start()
            wait_until(lambda: internals(pool).joiners() == 1, "join() waits")
            take(pool)
            assert joiner.is_alive()  # one task is still queued
            take(pool)
            joiner.join(TIMEOUT)
            assert joined == [True]


# -- races --------------------------------------------------------------------------------

OPTIONS = [
    pytest.param(
        {"ageing": ageing, "max_queued": max_queued, "when_full": when_full},
        id=f"ageing={ageing}-max_queued={max_queued}-{when_full}",
    )
    for ageing in (None, 2.0)
    for max_queued in (None, 4)
    for when_full in (("block",) if max_queued is None else ("block", "raise", "evict"))
]


def getter(
    pool: PriorityThreadPoolExecutor, start: threading.Barrier, count: int, taken: list[WorkItem]
) -> None:
    start.wait()
    for _ in range(count):
        try:
            taken.append(pool._work_queue.get_nowait())
        except queue.Empty:
            return


def canceller(start: threading.Barrier, victims: list[Future[Any]]) -> None:
    start.wait()
    for future in victims:
        future.cancel()


def race(options: dict[str, Any], rounds: int, seed: int, futures_log: list[Any]) -> None:
    """Race ``get_nowait()`` against workers, user cancels and deadlines landing at once.

    Each round queues a few tasks on the paused pool, then at one barrier resumes it (its two
    workers pop), takes tasks out and cancels some, while short deadlines fall due.

    Every future must end settled exactly once (run at most once, by a worker or by the
    test running what it took), and the counts must add up.
    """
    rng = random.Random(seed)
    runs: dict[int, int] = {}
    runs_lock = threading.Lock()

    def task(tag: int) -> int:
        with runs_lock:
            runs[tag] = runs.get(tag, 0) + 1
        return tag

    taken: list[WorkItem] = []
    futures: list[Future[Any]] = []
    with PriorityThreadPoolExecutor(max_workers=2, **options) as pool:
        for round_ in range(rounds):
            start = threading.Barrier(3, timeout=TIMEOUT)
            batch: list[Future[Any]] = []
            # A paused pool's queue only fills: start each round with it empty, and queue at
            # most max_queued tasks, or a blocking submit would wait for ever.
            assert pool.join(TIMEOUT)
            pool.pause()
            for i in range(rng.randint(1, 4)):
                timeout: Optional[float] = rng.choice([None, None, 0.0, 2e-4, 1e-3])
                with contextlib.suppress(QueueFullError):  # "raise", or "evict" finding no lower
                    batch.append(
                        pool.submit(
                            task, round_ * 10 + i, priority=rng.choice([-1, 0, 1]), timeout=timeout
                        )
                    )
            futures.extend(batch)

            victims = rng.sample(batch, min(len(batch), 2))
            threads = [
                threading.Thread(target=getter, args=(pool, start, rng.randint(1, 3), taken)),
                threading.Thread(target=canceller, args=(start, victims)),
            ]
            for thread in threads:
                thread.start()
            start.wait()
            pool.resume()
            for thread in threads:
                thread.join(TIMEOUT)
                assert not thread.is_alive()
        assert pool.join(TIMEOUT)
        pool._check_invariants()
        for n, item in enumerate(taken):
            if n % 2:
                item.future.cancel()
            item.run()
    for future in futures:
        assert future.done(), f"seed {seed}: a future was never settled"
    assert all(count == 1 for count in runs.values()), f"seed {seed}: a task ran twice"
    assert len({id(item.future) for item in taken}) == len(taken), f"seed {seed}: taken twice"
    stats = pool.statistics()
    settled = stats.completed + stats.failed + stats.cancelled + stats.expired + stats.taken
    assert stats.submitted == settled == len(futures), f"seed {seed}: counts do not add up"
    assert stats.taken == len(taken)
    assert not [r.getMessage() for r in futures_log], f"seed {seed}: something was logged"
    pool._check_invariants()


@pytest.mark.parametrize("options", OPTIONS)
def test_get_races_workers_cancels_and_deadlines(
    options: dict[str, Any], futures_log: list[Any]
) -> None:
    race(options, rounds=150, seed=12, futures_log=futures_log)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("options", OPTIONS)
def test_get_races_workers_cancels_and_deadlines_long(
    options: dict[str, Any], seed: int, futures_log: list[Any]
) -> None:
    race(options, rounds=2000, seed=seed, futures_log=futures_log)
