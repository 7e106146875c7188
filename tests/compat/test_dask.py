"""``PriorityExecutor`` in front of a Dask cluster: the recipe of the README, on a real cluster.

A ``distributed.LocalCluster`` of two worker processes, started once for this module and
closed at its end. Tasks are held on the workers by a ``distributed.Event``, the cluster's own
gate; the order of hand-over is read from a recording wrapper around the client's executor.
Skipped, with the reason, where ``distributed`` is not installed (``pip install -e
".[dask]"``).
"""

from __future__ import annotations

import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, wait
from typing import Any

import pytest

from conftest import TIMEOUT, FakeClock
from priority_executor import PriorityExecutor
from priority_executor._delegating import DASK_MERGES
from support import assert_done_promptly, exact, wait_until

distributed = pytest.importorskip(
    "distributed", reason="distributed is not installed (pip install -e '.[dask]')"
)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """The front's own threads exit (Dask keeps threads of its own for the module's cluster)."""
    yield
    ours = [t for t in threading.enumerate() if t.name.startswith("PriorityExecutor-")]
    for thread in ours:
        thread.join(TIMEOUT)
    alive = [t.name for t in ours if t.is_alive()]
    assert not alive, f"threads left running: {alive}"


def hold(name: str) -> str:
    """Run on a worker until the cluster-wide event ``name`` is set."""
    if not distributed.Event(name).wait(TIMEOUT):
        raise TimeoutError(f"event {name} never set")
    return "released"


def fresh() -> str:
    """A different value at every call: shows whether a call ran or was deduplicated."""
    return uuid.uuid4().hex


def fresh_after(name: str) -> str:
    """:func:`fresh`, once the cluster-wide event ``name`` is set."""
    hold(name)
    return fresh()


def keywords(**kwargs: Any) -> dict[str, Any]:
    return kwargs


def fail() -> None:
    raise ValueError("raised on a worker")


class Recording(Executor):
    """The client's executor, recording the arguments of every hand-over."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.handed: list[tuple[Any, ...]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.handed.append(args)
        return self.inner.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait)


def wait_handed(delegate: Recording, count: int) -> None:
    wait_until(lambda: len(delegate.handed) >= count, f"{count} task(s) handed over")


def recipe(client: Any, **options: Any) -> PriorityExecutor:
    """The README's recipe: every worker thread of the cluster is a slot."""
    slots = sum(client.nthreads().values())
    return PriorityExecutor(client.get_executor(pure=False), max_running=slots, **options)


def test_the_recipe_counts_the_clusters_threads(client: Any) -> None:
    with recipe(client) as front:
        assert front.max_running == 2
        futures = [front.submit(pow, 2, n) for n in range(6)]
        assert [f.result(TIMEOUT) for f in futures] == [1, 2, 4, 8, 16, 32]


def test_tasks_are_handed_over_best_first_then_in_submission_order(client: Any) -> None:
    event = f"gate-{uuid.uuid4().hex}"
    delegate = Recording(client.get_executor(pure=False))
    front = PriorityExecutor(delegate, max_running=1)
    try:
        held = front.submit(hold, event)
        wait_handed(delegate, 1)
        tasks = [("low", 1), ("high-1", 9), ("mid", 5), ("high-2", 9)]
        futures = [front.submit(str, tag, priority=p) for tag, p in tasks]
        distributed.Event(event, client=client).set()
        assert held.result(TIMEOUT) == "released"
        assert [f.result(TIMEOUT) for f in futures] == ["low", "high-1", "mid", "high-2"]
        assert delegate.handed[1:] == [("high-1",), ("high-2",), ("mid",), ("low",)]
    finally:
        distributed.Event(event, client=client).set()
        front.shutdown()


def test_pure_false_runs_identical_calls_each_time(client: Any) -> None:
    # Dask's default names a task by its function and arguments: identical calls are one.
    # Dask merges calls while the first is still held: all four are handed over before any
    # can end, so that the merge does not depend on timing.
    event = f"gate-{uuid.uuid4().hex}"
    with pytest.warns(UserWarning, match=exact(DASK_MERGES)):
        deduplicated = PriorityExecutor(client.get_executor(), max_running=4)
    with deduplicated:
        try:
            calls = [deduplicated.submit(fresh_after, event) for _ in range(4)]
            wait_until(lambda: deduplicated.statistics().running == 4, "4 tasks handed over")
        finally:
            distributed.Event(event, client=client).set()
        assert len({call.result(TIMEOUT) for call in calls}) == 1
    with recipe(client) as front:
        calls = [front.submit(fresh) for _ in range(4)]
        assert len({call.result(TIMEOUT) for call in calls}) == 4


@pytest.mark.parametrize("pure", [False, True, None])
def test_a_dask_executor_given_pure_either_way_makes_no_warning(client: Any, pure: Any) -> None:
    # pure=True: the merge is meant (calls that are truly pure); None is Dask's "not pure".
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        front = PriorityExecutor(client.get_executor(pure=pure), max_running=2)
    with front:
        assert front.submit(str, 1).result(TIMEOUT) == "1"


def test_a_queued_task_cancels_or_expires_and_is_never_handed_over(
    client: Any, clock: FakeClock
) -> None:
    event = f"gate-{uuid.uuid4().hex}"
    delegate = Recording(client.get_executor(pure=False))
    front = PriorityExecutor(delegate, max_running=2, clock=clock)
    clock.attach(front)
    try:
        held = [front.submit(hold, event) for _ in range(2)]
        wait_handed(delegate, 2)
        cancelled = front.submit(str, "cancelled")
        expired = front.submit(str, "expired", timeout=2.0)
        kept = front.submit(str, "kept")
        assert cancelled.cancel()
        clock.advance(2.0)
        assert_done_promptly(cancelled, expired)
        assert expired.cancelled()
        distributed.Event(event, client=client).set()
        assert kept.result(TIMEOUT) == "kept"
        assert wait(held, TIMEOUT).not_done == set()
        assert ("cancelled",) not in delegate.handed
        assert ("expired",) not in delegate.handed
        stats = front.statistics()
        assert (stats.cancelled, stats.expired, stats.completed) == (1, 1, 3)
    finally:
        distributed.Event(event, client=client).set()
        front.shutdown()


def test_an_error_on_a_worker_fails_that_task(client: Any) -> None:
    with recipe(client) as front:
        with pytest.raises(ValueError, match="raised on a worker"):
            front.submit(fail).result(TIMEOUT)
        assert front.submit(str, 1).result(TIMEOUT) == "1"


def test_shutdown_closes_the_clients_executor_and_leaves_the_client(client: Any) -> None:
    executor = client.get_executor(pure=False)
    with PriorityExecutor(executor, max_running=2) as front:
        assert front.submit(str, 1).result(TIMEOUT) == "1"
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        executor.submit(str, 2)
    assert client.submit(str, 3, pure=False).result(TIMEOUT) == "3"
    kept = client.get_executor(pure=False)
    with PriorityExecutor(kept, max_running=2, shutdown_executor=False) as front:
        assert front.submit(str, 4).result(TIMEOUT) == "4"
    assert kept.submit(str, 5).result(TIMEOUT) == "5"
    kept.shutdown()


def test_a_view_cannot_forward_keywords_that_dask_consumes(client: Any) -> None:
    with recipe(client) as front:
        view = front.options(priority=1)
        assert view.submit(keywords, colour="red").result(TIMEOUT) == {"colour": "red"}
        # Dask's submit takes ``priority`` (and ``key``, ``workers``, ``pure``, ``retries``)
        # for itself: the task never sees it.
        assert view.submit(keywords, priority=5).result(TIMEOUT) == {}


def test_copy_context_is_refused_in_front_of_a_cluster(client: Any) -> None:
    """A ``contextvars.Context`` cannot be pickled to a worker: the front says so at once."""
    executor = client.get_executor(pure=False)
    try:
        with pytest.raises(ValueError, match=r"runs them on a Dask cluster's workers, where"):
            PriorityExecutor(executor, max_running=2, copy_context=True)
    finally:
        executor.shutdown()
