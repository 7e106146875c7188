"""Real libraries that take an executor, run against the pool and against the standard pool.

They come with the ``clients`` extra (``pip install -e ".[clients]"``); each test skips, and
says why, where its library is not installed. Each check runs the standard pool first, so a
failure shows whether the library or the pool changed.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Union

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import Priority, PriorityThreadPoolExecutor
from support import Recorder

AnyPool = Union[ThreadPoolExecutor, PriorityThreadPoolExecutor]

POOLS: list[Any] = [
    pytest.param(lambda: ThreadPoolExecutor(max_workers=1), id="ThreadPoolExecutor"),
    pytest.param(lambda: PriorityThreadPoolExecutor(max_workers=1), id="Priority"),
]


def held(make: Callable[[], AnyPool], gate: Gate) -> AnyPool:
    """A one-worker pool busy with ``gate``."""
    pool = make()
    pool.submit(gate)
    gate.wait_started()
    return pool


# -- google-cloud-pubsub ------------------------------------------------------------------


@pytest.mark.parametrize("make", POOLS)
def test_pubsub_scheduler_shutdown_returns_the_messages_that_never_ran_and_nacks_them(
    make: Callable[[], AnyPool], gate: Gate
) -> None:
    scheduler_module = pytest.importorskip(
        "google.cloud.pubsub_v1.subscriber.scheduler",
        reason="google-cloud-pubsub is not installed (the clients extra)",
    )
    message_module = pytest.importorskip("google.cloud.pubsub_v1.subscriber.message")
    types = pytest.importorskip("google.cloud.pubsub_v1.types")
    requests: queue.Queue[Any] = queue.Queue()  # where the subscriber's nacks go
    messages = [
        message_module.Message(
            types.PubsubMessage(data=b"payload", message_id=str(i))._pb,
            f"ack-{i}",
            0,
            requests,
        )
        for i in range(4)
    ]
    handled = Recorder()
    pool = held(make, gate)
    scheduler = scheduler_module.ThreadScheduler(executor=pool)
    for message in messages:
        scheduler.schedule(handled, message)
    # What the subscriber's StreamingPullManager does on shutdown: drain, then nack.
    dropped = scheduler.shutdown(await_msg_callbacks=False)
    for message in dropped:
        message.nack()
    gate.open()
    pool.shutdown(wait=True)
    assert dropped == messages
    assert handled.ran == []
    nacked = [requests.get_nowait() for _ in range(requests.qsize())]
    assert [request.ack_id for request in nacked] == [f"ack-{i}" for i in range(4)]
    if isinstance(pool, PriorityThreadPoolExecutor):
        assert pool.statistics().taken == 4
        pool._check_invariants()


@pytest.mark.parametrize("make", POOLS)
def test_pubsub_scheduler_runs_callbacks_and_shuts_down_waiting(
    make: Callable[[], AnyPool],
) -> None:
    scheduler_module = pytest.importorskip(
        "google.cloud.pubsub_v1.subscriber.scheduler",
        reason="google-cloud-pubsub is not installed (the clients extra)",
    )
    done = [threading.Event() for _ in range(3)]
    pool = make()
    scheduler = scheduler_module.ThreadScheduler(executor=pool)
    for event in done:
        scheduler.schedule(event.set)
    assert all(event.wait(TIMEOUT) for event in done)
    assert scheduler.shutdown(await_msg_callbacks=True) == []
    assert pool._shutdown


# -- OpenTelemetry ------------------------------------------------------------------------


@pytest.fixture
def tracing() -> Iterator[Any]:
    """An in-memory tracer with OpenTelemetry's threading instrumentation switched on."""
    instrumentation = pytest.importorskip(
        "opentelemetry.instrumentation.threading",
        reason="opentelemetry-instrumentation-threading is not installed (the clients extra)",
    )
    sdk_trace = pytest.importorskip(
        "opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed"
    )
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    instrumentor = instrumentation.ThreadingInstrumentor()
    instrumentor.instrument()
    try:
        yield provider.get_tracer("test"), exporter
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def task_parents(make: Callable[[], AnyPool], tracing: Any) -> dict[str, Any]:
    """Run three requests, each submitting a task that opens a span; map task to parent."""
    tracer, exporter = tracing

    def task(n: int) -> None:
        with tracer.start_as_current_span(f"task-{n}"):
            pass

    with make() as pool:
        for n in range(3):  # one at a time: the one worker serves every request
            with tracer.start_as_current_span(f"request-{n}"):
                pool.submit(task, n).result(TIMEOUT)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    return {
        f"task-{n}": (
            None
            if spans[f"task-{n}"].parent is None
            else next(
                name
                for name, span in spans.items()
                if span.context.span_id == spans[f"task-{n}"].parent.span_id
            )
        )
        for n in range(3)
    }


OWN_REQUEST = {f"task-{n}": f"request-{n}" for n in range(3)}


def test_otel_standard_pool_parents_each_task_span_to_its_own_request(tracing: Any) -> None:
    assert task_parents(lambda: ThreadPoolExecutor(max_workers=1), tracing) == OWN_REQUEST


def test_otel_with_copy_context_each_task_span_has_its_own_request_as_parent(
    tracing: Any,
) -> None:
    parents = task_parents(
        lambda: PriorityThreadPoolExecutor(max_workers=1, copy_context=True), tracing
    )
    assert parents == OWN_REQUEST


def test_otel_without_copy_context_task_spans_start_their_own_traces(tracing: Any) -> None:
    # The instrumentation wraps ThreadPoolExecutor.submit, which this pool overrides, and the
    # worker's fresh context hides the span of the request that started it: no parent at
    # all, rather than the first request's span for every task.
    parents = task_parents(lambda: PriorityThreadPoolExecutor(max_workers=1), tracing)
    assert parents == {f"task-{n}": None for n in range(3)}


# -- tornado ------------------------------------------------------------------------------


def test_tornado_run_on_executor_with_a_view_passes_every_keyword_to_the_method() -> None:
    tornado_concurrent = pytest.importorskip(
        "tornado.concurrent", reason="tornado is not installed (the clients extra)"
    )
    ioloop = pytest.importorskip("tornado.ioloop")

    with PriorityThreadPoolExecutor(max_workers=1) as pool:

        def fetch_url(self: Any, url: str, timeout: float, priority: str) -> tuple[str, float, str]:
            return url, timeout, priority

        class Handler:
            executor = pool.options(priority=Priority.HIGH)
            fetch = tornado_concurrent.run_on_executor(fetch_url)  # as @run_on_executor does

        async def main() -> tuple[str, float, str]:
            ioloop.IOLoop.current().set_default_executor(pool.options(priority=Priority.LOW))
            await ioloop.IOLoop.current().run_in_executor(None, str)
            result: tuple[str, float, str] = await Handler().fetch(
                "http://x", timeout=5.0, priority="user's"
            )
            return result

        assert asyncio.run(main()) == ("http://x", 5.0, "user's")


def test_tornado_run_on_executor_on_the_pool_itself_loses_the_keywords() -> None:
    # The documented collision: without a view, the pool keeps timeout= and priority=.
    tornado_concurrent = pytest.importorskip(
        "tornado.concurrent", reason="tornado is not installed (the clients extra)"
    )

    with PriorityThreadPoolExecutor(max_workers=1) as pool:

        def fetch_url(self: Any, url: str, timeout: float = -1.0) -> tuple[str, float]:
            return url, timeout

        class Handler:
            executor = pool
            fetch = tornado_concurrent.run_on_executor(fetch_url)  # as @run_on_executor does

        async def main() -> tuple[str, float]:
            result: tuple[str, float] = await Handler().fetch("http://x", timeout=5.0)
            return result

        assert asyncio.run(main()) == ("http://x", -1.0)


# -- dask ---------------------------------------------------------------------------------


@pytest.mark.parametrize("view", [False, True], ids=["pool", "view"])
def test_dask_threaded_scheduler_takes_the_pool_or_a_view(view: bool) -> None:
    dask = pytest.importorskip("dask", reason="dask is not installed (the clients extra)")
    with PriorityThreadPoolExecutor(max_workers=2) as pool:
        executor = pool.options(priority=Priority.LOW) if view else pool
        total = dask.delayed(sum)([dask.delayed(pow)(n, 2) for n in range(5)])
        with dask.config.set(pool=executor):
            assert total.compute(scheduler="threads") == 30
        assert pool.statistics().completed >= 6
