"""The Prometheus collector and the OpenTelemetry instruments, read by the real libraries.

Each test skips, and says why, where its library is not installed (``pip install -e
".[prometheus,otel]"``; the SDK comes with the ``clients`` extra). A fake clock makes the
reported waits and durations exact.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conftest import TIMEOUT, FakeClock
from priority_executor import Priority
from priority_executor._distribution import EXPORT_BOUNDS
from support import KINDS, AnyPool, make_pool, read, scrape


@pytest.fixture
def scripted(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[AnyPool]:
    """A pool after a known script: a HIGH task waited 2 s and ran 0.5 s; a NORMAL one
    waited 2.5 s and failed at once; one LOW was cancelled; two LOW are queued (paused)."""
    pool = make_pool(request.param, 1, clock=clock)
    clock.attach(pool)
    pool.pause()
    ok = pool.submit(lambda: clock.advance(0.5), priority=Priority.HIGH)
    failing = pool.submit(lambda: 1 / 0)
    pool.submit(str, priority=Priority.LOW).cancel()
    clock.advance(2.0)
    pool.resume()
    ok.result(TIMEOUT)
    failing.exception(TIMEOUT)
    assert pool.join(TIMEOUT)
    pool.pause()
    pool.submit(str, priority=Priority.LOW)
    pool.submit(str, priority=Priority.LOW)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


#: Both executors, for the ``scripted`` fixture.
pools = pytest.mark.parametrize("scripted", KINDS, indirect=True)


# -- Prometheus -----------------------------------------------------------------------------


@pools
def test_a_prometheus_scrape_reports_waits_durations_backlog_and_outcomes(
    scripted: AnyPool,
) -> None:
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (the prometheus extra)"
    )
    from priority_executor.prometheus import PoolCollector

    registry = prometheus_client.CollectorRegistry()
    registry.register(PoolCollector(scripted, name="api"))
    samples = scrape(registry)

    def sample(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted({"executor": "api", **labels}.items())))]

    assert sample("executor_queue_wait_seconds_count", priority="1") == 1
    assert sample("executor_queue_wait_seconds_sum", priority="1") == 2.0
    assert sample("executor_queue_wait_seconds_sum", priority="0") == 2.5
    assert sample("executor_queue_wait_seconds_bucket", priority="1", le="1.0") == 0
    assert sample("executor_queue_wait_seconds_bucket", priority="1", le="2.5") == 1
    assert sample("executor_queue_wait_seconds_bucket", priority="1", le="+Inf") == 1
    assert sample("executor_task_duration_seconds_sum", priority="1") == 0.5
    assert sample("executor_task_duration_seconds_bucket", priority="1", le="0.25") == 0
    assert sample("executor_task_duration_seconds_bucket", priority="1", le="0.5") == 1
    assert sample("executor_queued", priority="-1") == 2
    assert sample("executor_active") == 0
    assert sample("executor_tasks_total", priority="1", outcome="completed") == 1
    assert sample("executor_tasks_total", priority="0", outcome="failed") == 1
    assert sample("executor_tasks_total", priority="-1", outcome="cancelled") == 1
    bounds = {
        float(dict(labels)["le"])
        for name, labels in samples
        if name == "executor_queue_wait_seconds_bucket"
    }
    assert bounds == {*EXPORT_BOUNDS, float("inf")}


#: Distinct priorities queued by the tests of the queued gauge's series.
MANY = 2000


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("recorded", [0, 10])
def test_a_prometheus_scrape_of_many_queued_priorities_reports_at_most_sixteen_classes_and_other(
    kind: str, recorded: int
) -> None:
    """From the first scrape, whatever ran before: the best queued priorities get the free
    classes, the rest are summed under "other", and every series keeps its label."""
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (the prometheus extra)"
    )
    from priority_executor._recording import MAX_CLASSES, OTHER
    from priority_executor.prometheus import PoolCollector

    registry = prometheus_client.CollectorRegistry()
    pool = make_pool(kind, 1)
    try:
        registry.register(PoolCollector(pool, name="many"))
        for priority in range(-recorded, 0):  # classes given by tasks that ran
            pool.submit(str, priority=priority).result(TIMEOUT)
        assert pool.join(TIMEOUT)
        pool.pause()
        for priority in range(MANY):
            pool.submit(str, priority=priority)
        pool.submit(str, priority=-1)  # a recorded class, queued too

        def queued() -> dict[str, float]:
            return {
                dict(labels)["priority"]: value
                for (name, labels), value in scrape(registry).items()
                if name == "executor_queued"
            }

        best = {str(p): 1 for p in range(MANY - 1, MANY - 1 - (MAX_CLASSES - recorded), -1)}
        recorded_queued = {"-1": 1} if recorded else {}
        expected = {**best, **recorded_queued, OTHER: MANY - len(best) + (0 if recorded else 1)}
        assert queued() == expected
        assert sum(expected.values()) == MANY + 1
        assert len(expected) <= MAX_CLASSES + 1
        pool.resume()
        assert pool.join(TIMEOUT)
        # The tasks that ran are recorded under the classes their queued series had.
        outcomes = {str(key) for key in pool.statistics().outcomes}
        assert outcomes == {str(p) for p in range(-recorded, 0)} | set(best) | {OTHER}
        pool.pause()
        pool.submit(str, priority=MANY - 1)
        pool.submit(str, priority=MANY + 5)
        assert queued() == {str(MANY - 1): 1, OTHER: 1}
    finally:
        pool.shutdown(cancel_futures=True)


def test_one_prometheus_collector_reports_several_pools_and_forgets_dropped_ones() -> None:
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (the prometheus extra)"
    )
    from priority_executor.prometheus import PoolCollector

    registry = prometheus_client.CollectorRegistry()
    api, batch = make_pool("threads", 1), make_pool("front", 1)
    collector = PoolCollector(api, name="api")
    collector.add(batch, name="batch")
    with pytest.raises(ValueError, match="already reports an executor named 'api'"):
        collector.add(batch, name="api")
    registry.register(collector)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(PoolCollector(api, name="other"))
    api.submit(str).result(TIMEOUT)
    batch.submit(str).result(TIMEOUT)
    assert api.join(TIMEOUT)
    assert batch.join(TIMEOUT)
    names = {
        dict(labels)["executor"] for name, labels in scrape(registry) if name == "executor_active"
    }
    assert names == {"api", "batch"}
    batch.shutdown(wait=True)
    del batch
    gc.collect()
    names = {
        dict(labels)["executor"] for name, labels in scrape(registry) if name == "executor_active"
    }
    assert names == {"api"}
    api.shutdown(wait=True)


# -- OpenTelemetry --------------------------------------------------------------------------


@pools
def test_opentelemetry_instruments_report_waits_durations_backlog_and_outcomes(
    scripted: AnyPool, clock: FakeClock, otel: tuple[Any, Any]
) -> None:
    from priority_executor.otel import instrument

    reader, provider = otel
    instrumentation = instrument(scripted, name="api", meter_provider=provider)
    scripted.resume()
    assert scripted.join(TIMEOUT)  # the two LOW tasks run, instrumented, at once
    points = read(reader)

    def point(name: str, **attributes: str) -> Any:
        wanted = {"executor.name": "api", **attributes}
        found = [p for p in points[name] if dict(p.attributes) == wanted]
        assert len(found) == 1, (name, attributes, points[name])
        return found[0]

    wait = point("executor.queue.wait", priority="-1")
    assert (wait.count, wait.sum) == (2, 0.0)
    assert tuple(wait.explicit_bounds) == EXPORT_BOUNDS
    assert point("executor.task.duration", priority="-1").count == 2
    assert point("executor.active").value == 0
    assert point("executor.tasks", priority="1", outcome="completed").value == 1
    assert point("executor.tasks", priority="-1", outcome="completed").value == 2
    assert point("executor.tasks", priority="-1", outcome="cancelled").value == 1
    # The tasks run before instrument() are in the counts, not in the histograms.
    assert all(p.attributes["priority"] == "-1" for p in points["executor.queue.wait"])

    scripted.pause()
    scripted.submit(str, priority=Priority.LOW)
    assert "executor.queued" not in points  # nothing was queued when it was read
    points = read(reader)
    assert point("executor.queued", priority="-1").value == 1
    instrumentation.remove()
    scripted.resume()
    assert scripted.join(TIMEOUT)
    points = read(reader)
    assert point("executor.task.duration", priority="-1").count == 2  # not recorded any more


@pytest.mark.parametrize("kind", KINDS)
def test_opentelemetry_reports_many_queued_priorities_in_sixteen_classes_and_other_at_once(
    kind: str, otel: tuple[Any, Any]
) -> None:
    from priority_executor._recording import MAX_CLASSES, OTHER

    reader, provider = otel
    with instrumented(kind, provider) as pool:
        pool.pause()
        for priority in range(MANY):
            pool.submit(str, priority=priority)
        queued = {p.attributes["priority"]: p.value for p in read(reader)["executor.queued"]}
        best = {str(p): 1 for p in range(MANY - 1, MANY - 1 - MAX_CLASSES, -1)}
        assert queued == {**best, OTHER: MANY - MAX_CLASSES}


@contextmanager
def instrumented(kind: str, provider: Any) -> Iterator[AnyPool]:
    """A one-worker pool of ``kind`` instrumented as "many", shut down after (queue cancelled)."""
    from priority_executor.otel import instrument

    pool = make_pool(kind, 1)
    try:
        instrument(pool, name="many", meter_provider=provider)
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("kind", KINDS)
def test_opentelemetry_histograms_keep_statistics_classes_beyond_sixteen_priorities(
    kind: str, otel: tuple[Any, Any]
) -> None:
    """Arbitrary priorities cannot grow a histogram's series: past MAX_CLASSES, "other"."""
    from priority_executor._recording import MAX_CLASSES, OTHER

    reader, provider = otel
    with instrumented(kind, provider) as pool:
        for priority in range(MAX_CLASSES + 4):
            pool.submit(str, priority=priority).result(TIMEOUT)
        assert pool.join(TIMEOUT)
        points = read(reader)
        for name in ("executor.queue.wait", "executor.task.duration"):
            counts = {p.attributes["priority"]: p.count for p in points[name]}
            first = {str(priority): 1 for priority in range(MAX_CLASSES)}
            assert counts == {**first, OTHER: 4}, name
        stats = pool.statistics()
        assert {str(key): d.count for key, d in stats.wait.items()} == {**first, OTHER: 4}
        # Queued: the priorities past the first 16 are one series, their counts summed.
        pool.pause()
        for priority in range(MAX_CLASSES + 4):
            pool.submit(str, priority=priority)
        queued = {p.attributes["priority"]: p.value for p in read(reader)["executor.queued"]}
        assert queued == {**first, OTHER: 4}
