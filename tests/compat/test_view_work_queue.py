"""``view._work_queue``: a view answers for its pool's queue, and waits only for what it owns.

Code handed a view reaches into it as into the standard pool: google-cloud-pubsub's
``ThreadScheduler(executor=pool.options())`` drains ``executor._work_queue`` at shutdown, then
calls ``executor.shutdown(wait=...)``. The view has no queue of its own, so it shows its
pool's: every queued task of the pool. A task taken out through it is no longer the pool's
nor the view's: the view's ``shutdown(wait=True)`` must not wait for it (it may never run),
however the take and the shutdown interleave with submits through the view.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import Priority, PriorityExecutor, PriorityThreadPoolExecutor, QueueFullError
from priority_executor._work_queue import WorkItem
from support import Recorder


@contextlib.contextmanager
def paused_pool(**options: Any) -> Iterator[PriorityThreadPoolExecutor]:
    """A pool that starts nothing until the test resumes it; shut down when the test ends."""
    pool = PriorityThreadPoolExecutor(max_workers=2, **options)
    pool.pause()
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def in_thread(target: Callable[[], Any]) -> threading.Thread:
    """Run ``target`` in a thread the test joins with a timeout, so a hang fails the test."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def finishes(thread: threading.Thread) -> bool:
    thread.join(TIMEOUT)
    return not thread.is_alive()


def test_a_view_answers_with_its_pools_queue_and_all_of_its_tasks() -> None:
    with paused_pool() as pool:
        view = pool.options(priority=Priority.LOW)
        assert view._work_queue is pool._work_queue
        own = view.submit(str, "view")
        other = pool.submit(str, "pool", priority=Priority.HIGH)
        assert (view._work_queue.qsize(), view._work_queue.empty()) == (2, False)
        # The best task of the pool first, whichever way it was submitted.
        assert [view._work_queue.get_nowait().future for _ in range(2)] == [other, own]
        with pytest.raises(queue.Empty):
            view._work_queue.get_nowait()
        assert pool.statistics().taken == 2


def test_a_view_of_a_front_has_no_work_queue_as_its_front_has_none() -> None:
    with ThreadPoolExecutor(1) as delegate, PriorityExecutor(delegate) as front:
        view = front.options()
        assert not hasattr(front, "_work_queue")
        with pytest.raises(AttributeError, match="_work_queue"):
            view._work_queue  # noqa: B018  # the attribute read is the test


@pytest.mark.parametrize("cancel_futures", [False, True])
def test_view_shutdown_wait_does_not_wait_for_a_task_taken_out_and_never_run(
    cancel_futures: bool,
) -> None:
    with paused_pool() as pool:
        view = pool.options()
        taken_future = view.submit(str, "taken")
        kept = view.submit(str, "kept")
        assert pool._work_queue.get_nowait().future is taken_future
        closing = in_thread(lambda: view.shutdown(wait=True, cancel_futures=cancel_futures))
        if not cancel_futures:
            pool.resume()  # the kept task runs; the taken one never will
        assert finishes(closing), "the view's shutdown waited for a task taken out of the pool"
        assert kept.cancelled() if cancel_futures else kept.result(TIMEOUT) == "kept"
        # As the standard pool leaves a work item taken out of its queue: pending, untouched.
        assert not taken_future.done()


def test_pool_shutdown_wait_does_not_wait_for_a_task_taken_out_and_never_run() -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    pool.pause()
    taken_future = pool.options().submit(str, "taken")
    assert pool._work_queue.get_nowait().future is taken_future
    closing = in_thread(lambda: pool.shutdown(wait=True))
    assert finishes(closing), "the pool's shutdown waited for a task taken out of it"
    assert not taken_future.done()
    assert pool.statistics().taken == 1
    pool._check_invariants()


def test_a_task_taken_before_its_view_submit_returns_is_not_waited_for() -> None:
    """The take lands between the pool queueing the task and the view recording it."""
    with paused_pool() as pool:
        view = pool.options()
        taken: list[WorkItem] = []
        queue_it = pool._submit_checked

        def queue_then_take(*args: Any, **kwargs: Any) -> Future[Any]:
            future = queue_it(*args, **kwargs)
            taken.append(pool._work_queue.get_nowait())  # another thread's drain, just then
            return future

        pool._submit_checked = queue_then_take  # type: ignore[method-assign]
        future = view.submit(str, "raced")
        assert [item.future for item in taken] == [future]
        closing = in_thread(lambda: view.shutdown(wait=True))
        assert finishes(closing), "the view waited for a task taken before its submit returned"
        assert not future.done()


def test_pubsub_scheduler_over_a_view_drains_the_pool_and_shuts_the_view_down_waiting(
    gate: Gate,
) -> None:
    """What a subscriber with ``await_msg_callbacks=True`` does: it neither dies nor hangs."""
    scheduler_module = pytest.importorskip(
        "google.cloud.pubsub_v1.subscriber.scheduler",
        reason="google-cloud-pubsub is not installed (the clients extra)",
    )
    handled = Recorder()
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(gate)  # the one worker is busy with a task that is not the view's
        gate.wait_started()
        scheduler = scheduler_module.ThreadScheduler(executor=pool.options(key="subscription"))
        messages = [object() for _ in range(3)]
        for message in messages:
            scheduler.schedule(handled, message)
        dropped: list[Any] = []
        closing = in_thread(lambda: dropped.extend(scheduler.shutdown(await_msg_callbacks=True)))
        # The view waits for its own tasks only: all were drained, the gate is the pool's.
        assert finishes(closing), "the scheduler's shutdown hung on tasks it had drained"
        assert dropped == messages
        gate.open()
    assert handled.ran == []
    assert pool.statistics().taken == 3


# -- races --------------------------------------------------------------------------------

OPTIONS = [
    pytest.param(
        {"ageing": ageing, "max_queued": max_queued, "when_full": when_full},
        id=f"ageing={ageing}-max_queued={max_queued}-{when_full}",
    )
    for ageing in (None, 2.0)
    for max_queued in (None, 3)
    for when_full in (("block",) if max_queued is None else ("block", "raise", "evict"))
]


def race_view_shutdown_against_a_drain(options: dict[str, Any], seed: int, rounds: int) -> None:
    """A view shut down while a client drains ``_work_queue`` and another thread submits.

    Each round queues through a fresh view of the paused pool, then releases three threads at
    one barrier, as the pool resumes: a drainer taking tasks out until the queue is empty
    (against the pool's two workers), a submitter adding more through the view (until the view
    refuses it), and the view's ``shutdown(wait=True)`` with or without ``cancel_futures``.
    The shutdown must return; afterwards each of the view's futures is either taken (and
    never run by the pool) or done, and none ran twice.
    """
    rng = random.Random(seed)
    runs = Recorder()
    with PriorityThreadPoolExecutor(max_workers=2, **options) as pool:
        for round_ in range(rounds):
            race_round(pool, rng, runs, f"seed {seed} round {round_}")
            pool._check_invariants()
    assert len(runs.ran) == len(set(runs.ran)), f"seed {seed}: a task ran twice"
    stats = pool.statistics()
    settled = stats.completed + stats.failed + stats.cancelled + stats.expired + stats.taken
    assert stats.submitted == settled, f"seed {seed}: counts do not add up"


def race_round(
    pool: PriorityThreadPoolExecutor, rng: random.Random, runs: Recorder, where: str
) -> None:
    view = pool.options(priority=rng.choice([-1, 0, 1]), timeout=rng.choice([None, 1e-3]))
    futures: list[Future[Any]] = []
    taken: list[WorkItem] = []
    start = threading.Barrier(4, timeout=TIMEOUT)
    cancel = rng.random() < 0.5
    late = rng.randint(1, 3)

    def submit_some(n: int, prefix: str) -> None:
        for i in range(n):
            try:
                futures.append(view.submit(runs, f"{where}: {prefix}{i}"))
            except QueueFullError:  # "raise", or "evict" with nothing lower queued
                pass
            except RuntimeError:  # the view was closed meanwhile
                return

    def drain() -> None:
        start.wait()
        with contextlib.suppress(queue.Empty):
            while True:
                taken.append(pool._work_queue.get_nowait())

    def submitter() -> None:
        start.wait()
        submit_some(late, "late")

    def close() -> None:
        start.wait()
        view.shutdown(wait=True, cancel_futures=cancel)

    assert pool.join(TIMEOUT)
    pool.pause()
    submit_some(rng.randint(1, 3), "early")
    threads = [in_thread(drain), in_thread(submitter), in_thread(close)]
    start.wait()
    pool.resume()
    assert all(finishes(thread) for thread in threads), f"{where}: a thread hung"
    taken_futures = {id(item.future) for item in taken}
    for future in futures:
        assert future.done() or id(future) in taken_futures, f"{where}: a task lost"
    for item in taken:
        item.run()  # a drained task runs once, by whoever took it
    assert pool.join(TIMEOUT)


@pytest.mark.parametrize("options", OPTIONS)
def test_a_view_shut_down_while_a_client_drains_the_queue(options: dict[str, Any]) -> None:
    race_view_shutdown_against_a_drain(options, seed=3, rounds=40)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("options", OPTIONS)
def test_a_view_shut_down_while_a_client_drains_the_queue_long(
    options: dict[str, Any], seed: int
) -> None:
    race_view_shutdown_against_a_drain(options, seed=seed, rounds=400)
