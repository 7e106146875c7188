"""Attacks on the day's new guarantees, by a second reader.

``expired()`` against every racing cancel; a ``PriorityExecutor``'s own-task marks; the
statistics of unrecorded classes and the exporters' classes when many priorities arrive at
once; the asyncio scheduler's run timeouts on its clock. Written against the public API
(and the helpers of ``support``), so that renaming internals leaves them standing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import TIMEOUT
from support import KINDS, make_pool

#: The documented bound of the statistics' priority classes, and the key of the rest.
CLASSES = 16
OTHER = "other"


class Started:
    """Tasks that say they started, then wait until the test opens them all."""

    def __init__(self) -> None:
        self.count = 0
        self.cond = threading.Condition()
        self.opened = threading.Event()

    def __call__(self) -> None:
        with self.cond:
            self.count += 1
            self.cond.notify_all()
        assert self.opened.wait(TIMEOUT), "never opened"

    def wait_for(self, count: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.count >= count, TIMEOUT), "never started"


# -- the exporters' classes, with more priorities than classes running at once -------------


@pytest.fixture
def otel() -> Iterator[tuple[Any, Any]]:
    """``(reader, provider)``: an SDK MeterProvider read by an InMemoryMetricReader."""
    sdk_metrics = pytest.importorskip(
        "opentelemetry.sdk.metrics", reason="opentelemetry-sdk is not installed"
    )
    export = pytest.importorskip("opentelemetry.sdk.metrics.export")
    reader = export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    try:
        yield reader, provider
    finally:
        provider.shutdown()


def histogram_counts(reader: Any, name: str) -> dict[str, int]:
    """The count of each series of the OpenTelemetry histogram ``name``, by priority."""
    counts: dict[str, int] = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        counts[str(point.attributes["priority"])] = point.count
    return counts


@pytest.mark.parametrize("kind", KINDS)
def test_tasks_of_more_priorities_than_classes_started_at_once_are_timed_in_their_classes(
    kind: str, otel: tuple[Any, Any]
) -> None:
    """OpenTelemetry's histograms keep at most 16 classes and "other", the statistics' own,
    even when tasks of more priorities start before any of them ends (and so before any
    of them is counted)."""
    from priority_executor.otel import instrument

    reader, provider = otel
    many = CLASSES + 4
    pool = make_pool(kind, many)
    try:
        instrument(pool, name="many", meter_provider=provider)
        task = Started()
        futures = [pool.submit(task, priority=priority) for priority in range(many)]
        task.wait_for(many)
        task.opened.set()
        for future in futures:
            future.result(TIMEOUT)
        assert pool.join(TIMEOUT)
        stats = pool.statistics()
        for name, by_class in (
            ("executor.queue.wait", stats.wait),
            ("executor.task.duration", stats.run),
        ):
            exported = histogram_counts(reader, name)
            assert len(exported) <= CLASSES + 1, f"{name}: {sorted(exported)}"
            assert exported == {str(key): d.count for key, d in by_class.items()}, name
    finally:
        pool.shutdown(cancel_futures=True)
