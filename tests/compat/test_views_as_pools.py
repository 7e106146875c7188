"""A view is a ThreadPoolExecutor too, so that what insists on one accepts it.

``loop.set_default_executor`` refuses anything else on 3.11+ (3.9 and 3.10 warn), and
tornado and dask read the standard pool's attributes. ``asyncio.run`` then closes the
default executor on its way out: for a view that must close the view and wait for its
tasks, and leave the pool running.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from concurrent.futures import Executor, ThreadPoolExecutor

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor
from support import Recorder, wait_until


def test_a_view_is_a_thread_pool_executor() -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        view = pool.options(priority=Priority.LOW)
        assert isinstance(view, ThreadPoolExecutor)
        assert isinstance(view, Executor)


def test_a_view_shows_its_pools_standard_attributes(gate: Gate) -> None:
    with PriorityThreadPoolExecutor(max_workers=3, thread_name_prefix="web") as pool:
        view = pool.options()
        pool.submit(gate)
        gate.wait_started()
        assert view._max_workers == 3
        assert view._thread_name_prefix == "web"
        assert view._threads is pool._threads
        assert len(view._threads) == 1
        assert (view._shutdown, view._broken) == (False, False)
        gate.open()


def test_a_closed_view_reports_shutdown_and_its_pool_does_not() -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        view, other = pool.options(), pool.options()
        view.shutdown()
        assert (view._shutdown, other._shutdown, pool._shutdown) == (True, False, False)
    assert other._shutdown  # once the pool is shut down, every view refuses work


def test_the_views_standard_attributes_are_read_only() -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        view = pool.options()
        for name in ("_max_workers", "_threads", "_shutdown", "_broken", "_thread_name_prefix"):
            with pytest.raises(AttributeError):
                setattr(view, name, None)


def test_a_view_is_accepted_as_the_default_executor_without_a_warning() -> None:
    recorder = Recorder()

    async def main(view: Executor) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(view)
        await loop.run_in_executor(None, recorder, "run_in_executor")

    with PriorityThreadPoolExecutor(max_workers=1) as pool, warnings.catch_warnings():
        warnings.simplefilter("error")  # 3.9 and 3.10 warn for what is not a ThreadPoolExecutor
        asyncio.run(main(pool.options(priority=Priority.LOW)))
    assert recorder.ran == ["run_in_executor"]


def test_to_thread_runs_through_a_default_view_at_its_priority(gate: Gate) -> None:
    order = Recorder()

    async def main(pool: PriorityThreadPoolExecutor) -> None:
        asyncio.get_running_loop().set_default_executor(pool.options(priority=Priority.HIGH))
        pool.submit(gate)
        gate.wait_started()
        low = pool.submit(order, "low", priority=Priority.LOW)
        high = asyncio.ensure_future(asyncio.to_thread(order, "high"))
        await asyncio.sleep(0)  # let to_thread submit (an event-loop turn, not a wait for time)
        wait_until(lambda: pool.statistics().queued == 2, "both tasks are queued")
        gate.open()
        await high
        low.result(TIMEOUT)

    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        asyncio.run(main(pool))
    assert order.ran == ["high", "low"]


def test_asyncio_run_closes_the_default_view_waits_for_its_tasks_and_spares_the_pool() -> None:
    release = threading.Event()
    finished: list[str] = []

    def slow_task() -> None:
        assert release.wait(TIMEOUT)
        finished.append("view task")

    async def main(view: Executor) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(view)
        loop.run_in_executor(None, slow_task)  # not awaited: asyncio.run must wait for it

    with PriorityThreadPoolExecutor(max_workers=2) as pool:
        view = pool.options()

        def open_once_closing() -> None:  # once asyncio.run has begun to close the view
            wait_until(lambda: view._shutdown, "the view closes")
            release.set()

        opener = threading.Thread(target=open_once_closing)
        opener.start()
        asyncio.run(main(view))
        opener.join(TIMEOUT)
        assert finished == ["view task"]  # shutdown_default_executor waited for it
        assert view._shutdown
        assert not pool._shutdown
        assert pool.submit(str, "still open").result(TIMEOUT) == "still open"
