"""Context variables: fresh contexts for the pool's threads, and ``copy_context=True``.

A worker must never run in the context of the submit that started it: that caller's values
(a user id, a tracing span) would be seen by every later task on the thread. Python makes a
new thread inherit its starter's context on free-threaded 3.14 and where instrumentation
wraps ``Thread.run``; the ``inheriting_threads`` fixture imitates that on every Python.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Union

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import PriorityExecutor, PriorityThreadPoolExecutor
from support import KINDS, exact, make_pool
from support import AnyPool as OurPool

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")

AnyPool = Union[ThreadPoolExecutor, PriorityThreadPoolExecutor]


def read_request() -> str:
    return REQUEST.get()


def tagged(tag: str) -> tuple[str, str]:
    return tag, REQUEST.get()


def set_request(value: str) -> str:
    REQUEST.set(value)
    return value


@pytest.fixture
def inheriting_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every new thread run in a copy of its starter's context, as 3.14t does."""
    start, run = threading.Thread.start, threading.Thread.run

    def inheriting_start(self: threading.Thread) -> None:
        self._starter_context = contextvars.copy_context()  # type: ignore[attr-defined]
        start(self)

    def inheriting_run(self: threading.Thread) -> None:
        self._starter_context.run(run, self)  # type: ignore[attr-defined]

    monkeypatch.setattr(threading.Thread, "start", inheriting_start)
    monkeypatch.setattr(threading.Thread, "run", inheriting_run)


class TestFreshThreads:
    @pytest.mark.usefixtures("inheriting_threads")
    def test_a_worker_never_runs_in_the_context_of_the_submit_that_started_it(self) -> None:
        with PriorityThreadPoolExecutor(max_workers=1) as pool:
            REQUEST.set("first request")
            try:
                assert pool.submit(read_request).result(TIMEOUT) == "none"
            finally:
                REQUEST.set("none")
            assert pool.submit(read_request).result(TIMEOUT) == "none"

    @pytest.mark.usefixtures("inheriting_threads")
    def test_the_fixture_does_make_threads_inherit(self) -> None:
        # Without the pool's fresh contexts, the second request's task would see the first's.
        with ThreadPoolExecutor(max_workers=1) as pool:
            token = REQUEST.set("first request")
            try:
                pool.submit(str).result(TIMEOUT)
            finally:
                REQUEST.reset(token)
            assert pool.submit(read_request).result(TIMEOUT) == "first request"

    @pytest.mark.usefixtures("inheriting_threads")
    def test_the_timer_thread_starts_in_a_fresh_context(self) -> None:
        seen: set[str] = set()
        timer_read = threading.Event()

        def clock() -> float:  # the only code of the user's that the timer runs
            if threading.current_thread().name.endswith("_timer"):
                seen.add(REQUEST.get())
                timer_read.set()
            return 0.0

        with PriorityThreadPoolExecutor(max_workers=1, clock=clock) as pool:
            token = REQUEST.set("submitter")
            try:
                pool.submit(str, timeout=60)  # starts the timer
            finally:
                REQUEST.reset(token)
            assert timer_read.wait(TIMEOUT)
        assert seen == {"none"}


@pytest.mark.parametrize("make", [ThreadPoolExecutor, PriorityThreadPoolExecutor])
class TestDefaultSemantics:
    """``copy_context=False``: the standard pool's semantics, checked against it."""

    def test_an_initializers_values_are_seen_by_later_tasks(self, make: type[AnyPool]) -> None:
        with make(max_workers=1, initializer=set_request, initargs=("init",)) as pool:
            assert pool.submit(read_request).result(TIMEOUT) == "init"
            assert pool.submit(read_request).result(TIMEOUT) == "init"

    def test_what_a_task_sets_is_seen_by_the_next_task_on_its_thread(
        self, make: type[AnyPool]
    ) -> None:
        with make(max_workers=1) as pool:
            pool.submit(set_request, "task one").result(TIMEOUT)
            assert pool.submit(read_request).result(TIMEOUT) == "task one"

    def test_the_submitters_values_are_not_seen(self, make: type[AnyPool]) -> None:
        with make(max_workers=1) as pool:
            pool.submit(str).result(TIMEOUT)  # the worker exists before the value is set
            token = REQUEST.set("submitter")
            try:
                assert pool.submit(read_request).result(TIMEOUT) == "none"
            finally:
                REQUEST.reset(token)


@pytest.mark.parametrize("kind", KINDS)
class TestCopyContext:
    """``copy_context=True``, on the pool and on a front over a thread pool alike."""

    def test_each_task_sees_its_submitters_values_as_they_were_at_submit(
        self, kind: str, gate: Gate
    ) -> None:
        with make_pool(kind, 1, copy_context=True) as pool:
            pool.submit(gate)
            gate.wait_started()
            futures = []
            for name in ("alice", "bob"):
                token = REQUEST.set(name)
                try:
                    futures.append(pool.submit(read_request))
                finally:
                    REQUEST.reset(token)
            gate.open()
            assert [f.result(TIMEOUT) for f in futures] == ["alice", "bob"]

    def test_what_a_task_sets_does_not_leak_into_the_next_task(self, kind: str) -> None:
        with make_pool(kind, 1, copy_context=True) as pool:
            pool.submit(set_request, "task one").result(TIMEOUT)
            assert pool.submit(read_request).result(TIMEOUT) == "none"
        assert REQUEST.get() == "none"  # nor into the submitter

    def test_tasks_run_in_the_copy_not_in_the_initializers_context(self, kind: str) -> None:
        initialised = (
            PriorityThreadPoolExecutor(
                max_workers=1, copy_context=True, initializer=set_request, initargs=("init",)
            )
            if kind == "threads"
            else PriorityExecutor(
                ThreadPoolExecutor(1, initializer=set_request, initargs=("init",)),
                copy_context=True,
            )
        )
        with initialised as pool:
            assert pool.submit(read_request).result(TIMEOUT) == "none"

    def test_views_and_map_copy_the_context_too(self, kind: str) -> None:
        with make_pool(kind, 2, copy_context=True) as pool:
            token = REQUEST.set("caller")
            try:
                view = pool.options(priority=1)
                assert view.submit(read_request).result(TIMEOUT) == "caller"
                assert list(view.map(lambda _: REQUEST.get(), [1])) == ["caller"]
                assert list(pool.map(lambda _: REQUEST.get(), [1, 2])) == ["caller"] * 2
            finally:
                REQUEST.reset(token)

    def test_run_in_executor_carries_the_context_as_to_thread_does(self, kind: str) -> None:
        async def request(pool: OurPool, name: str) -> str:
            REQUEST.set(name)  # in this asyncio task's own context
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(pool, read_request)

        async def main(pool: OurPool) -> list[str]:
            return list(await asyncio.gather(request(pool, "a"), request(pool, "b")))

        with make_pool(kind, 1, copy_context=True) as pool:
            assert asyncio.run(main(pool)) == ["a", "b"]

    @pytest.mark.parametrize(
        ("value", "shown"), [("yes", "'yes' (str)"), (1, "1 (int)"), (None, "None (NoneType)")]
    )
    def test_copy_context_must_be_a_bool(self, kind: str, value: Any, shown: str) -> None:
        with pytest.raises(TypeError, match=exact(f"copy_context must be a bool, got {shown}")):
            make_pool(kind, 1, copy_context=value)


class TestCopyContextOnThreads:
    def test_a_taken_task_runs_in_its_submitters_context(self, gate: Gate) -> None:
        with PriorityThreadPoolExecutor(max_workers=1, copy_context=True) as pool:
            pool.submit(gate)
            gate.wait_started()
            token = REQUEST.set("submitter")
            try:
                future = pool.submit(tagged, "message")
            finally:
                REQUEST.reset(token)
            item = pool._work_queue.get_nowait()
            # The standard attributes show the task as submitted, not the context wrapper.
            assert (item.fn, item.args) == (tagged, ("message",))
            gate.open()
        item.run()
        assert future.result(TIMEOUT) == ("message", "submitter")


class TestCopyContextOnAFront:
    def test_is_refused_for_an_executor_that_runs_tasks_in_other_processes(self) -> None:
        message = (
            "copy_context=True needs an executor that runs tasks in this interpreter:"
            " ProcessPoolExecutor runs them in other processes, where a contextvars.Context"
            " cannot go"
        )
        processes = ProcessPoolExecutor(1)
        try:
            with pytest.raises(ValueError, match=exact(message)):
                PriorityExecutor(processes, copy_context=True)
            front = PriorityExecutor(processes, shutdown_executor=False)  # off: accepted
            with pytest.raises(ValueError, match=exact(message)):  # nor through a front
                PriorityExecutor(front, max_running=1, copy_context=True)
            front.shutdown()
        finally:
            processes.shutdown()

    @pytest.mark.skipif(
        not hasattr(concurrent.futures, "InterpreterPoolExecutor"),
        reason="concurrent.futures has no InterpreterPoolExecutor (it came in 3.14)",
    )
    def test_is_refused_for_an_interpreter_pool(self) -> None:
        interpreters = concurrent.futures.InterpreterPoolExecutor(1)  # type: ignore[attr-defined]
        try:
            with pytest.raises(ValueError, match="runs them in other interpreters"):
                PriorityExecutor(interpreters, copy_context=True)
        finally:
            interpreters.shutdown()

    def test_off_the_front_passes_tasks_as_submitted(self) -> None:
        """Without the option the delegate gets the task itself, not a context wrapper
        (over a thread pool, in the wrapper that marks its thread as the front's own)."""
        seen: list[Any] = []

        class Recording(ThreadPoolExecutor):
            def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                seen.append(fn)
                return super().submit(fn, *args, **kwargs)

        with PriorityExecutor(Recording(1)) as front:
            assert front.submit(read_request).result(TIMEOUT) == "none"
        assert [inspect.unwrap(fn) for fn in seen] == [read_request]
        assert [type(fn).__name__ for fn in seen] == ["OwnTask"]
