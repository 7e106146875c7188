"""The exporters take a limiter like a pool: Prometheus and OpenTelemetry, read by the libraries.

Each test skips, and says why, where its library is not installed. A fake clock makes the
reported waits and holds exact; the script runs on one asyncio loop, so its order is fixed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import TIMEOUT, FakeClock
from priority_executor import AsyncPriorityLimiter, Priority, PriorityLimiter
from support import read, scrape


async def script(clock: FakeClock) -> tuple[AsyncPriorityLimiter, asyncio.Event, list[Any]]:
    """A limiter of 1 after a known script: a HIGH acquire waited 2 s and held 0.5 s; the
    NORMAL holder it waited for held 2 s; a LOW waiter was cancelled; a NORMAL block failed;
    then a NORMAL holder holds the unit, and two LOW acquires wait (until ``done`` is set)."""
    limiter = AsyncPriorityLimiter(1, clock=clock)
    holder = limiter.acquire()
    await holder.__aenter__()

    async def use(priority: int, hold: float) -> None:
        async with limiter.acquire(priority=priority):
            clock.advance(hold)

    high = asyncio.create_task(use(Priority.HIGH, 0.5))
    low = asyncio.create_task(use(Priority.LOW, 0.0))
    await asyncio.sleep(0)
    clock.advance(2.0)
    low.cancel()
    await asyncio.wait([low], timeout=TIMEOUT)
    await holder.__aexit__(None, None, None)
    await asyncio.wait_for(high, TIMEOUT)
    with pytest.raises(ZeroDivisionError):
        async with limiter.acquire():
            1 / 0  # noqa: B018
    done = asyncio.Event()

    async def hold_until_done() -> None:
        async with limiter.acquire():
            await done.wait()

    tasks = [asyncio.create_task(hold_until_done())]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(use(Priority.LOW, 0.0)) for _ in range(2)]
    await asyncio.sleep(0)
    return limiter, done, tasks


def test_a_prometheus_scrape_reports_a_limiters_waits_holds_backlog_and_outcomes(
    clock: FakeClock,
) -> None:
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (the prometheus extra)"
    )
    from priority_executor.prometheus import PoolCollector

    async def main() -> None:
        limiter, done, tasks = await script(clock)
        registry = prometheus_client.CollectorRegistry()
        registry.register(PoolCollector(limiter, name="api"))
        samples = scrape(registry)

        def sample(name: str, **labels: str) -> float:
            return samples[(name, tuple(sorted({"limiter": "api", **labels}.items())))]

        assert sample("limiter_wait_seconds_count", priority="1") == 1
        assert sample("limiter_wait_seconds_sum", priority="1") == 2.0
        assert sample("limiter_wait_seconds_bucket", priority="1", le="1.0") == 0
        assert sample("limiter_wait_seconds_bucket", priority="1", le="2.5") == 1
        assert sample("limiter_hold_seconds_sum", priority="1") == 0.5
        assert sample("limiter_hold_seconds_sum", priority="0") == 2.0  # and the failed block's 0
        assert sample("limiter_hold_seconds_count", priority="0") == 2
        assert sample("limiter_waiting", priority="-1") == 2
        assert sample("limiter_in_use") == 1
        assert sample("limiter_capacity") == 1
        assert sample("limiter_requests_total", priority="1", outcome="completed") == 1
        assert sample("limiter_requests_total", priority="0", outcome="completed") == 1
        assert sample("limiter_requests_total", priority="0", outcome="failed") == 1
        assert sample("limiter_requests_total", priority="-1", outcome="cancelled") == 1
        outcomes = {dict(labels)["outcome"] for name, labels in samples if "requests" in name}
        assert outcomes == {"completed", "failed", "cancelled", "expired"}
        assert not any(
            name.startswith("executor_") and "executor" in dict(labels) for name, labels in samples
        )
        done.set()
        await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
        limiter._check_invariants()

    asyncio.run(main())


def test_one_prometheus_collector_reports_a_pool_and_a_limiter_side_by_side() -> None:
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="prometheus_client is not installed (the prometheus extra)"
    )
    from priority_executor import PriorityThreadPoolExecutor
    from priority_executor.prometheus import PoolCollector

    limiter = PriorityLimiter(3)
    with PriorityThreadPoolExecutor(1, thread_name_prefix="api") as pool:
        collector = PoolCollector(pool)
        collector.add(limiter)
        registry = prometheus_client.CollectorRegistry()
        registry.register(collector)
        with limiter.acquire(cost=2):
            samples = scrape(registry)
        assert samples[("limiter_in_use", (("limiter", "limiter"),))] == 2
        assert samples[("limiter_capacity", (("limiter", "limiter"),))] == 3
        assert samples[("executor_active", (("executor", "api"),))] == 0


def test_opentelemetry_instruments_report_a_limiters_waits_holds_backlog_and_outcomes(
    clock: FakeClock, otel: tuple[Any, Any]
) -> None:
    from priority_executor.otel import instrument

    reader, provider = otel

    async def main() -> None:
        limiter, done, tasks = await script(clock)
        instrumentation = instrument(limiter, name="api", meter_provider=provider)
        points = read(reader)

        def point(name: str, **attributes: str) -> Any:
            wanted = {"limiter.name": "api", **attributes}
            found = [p for p in points[name] if dict(p.attributes) == wanted]
            assert len(found) == 1, (name, attributes, points[name])
            return found[0]

        assert point("limiter.waiting", priority="-1").value == 2
        assert point("limiter.in_use").value == 1
        assert point("limiter.requests", priority="-1", outcome="cancelled").value == 1
        assert point("limiter.requests", priority="0", outcome="failed").value == 1
        # The releases before instrument() are in the counts, not in the histograms.
        assert "limiter.wait" not in points
        clock.advance(3.0)
        done.set()
        await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
        points = read(reader)
        assert point("limiter.hold", priority="0").sum == 3.0
        assert point("limiter.wait", priority="-1").count == 2
        assert point("limiter.wait", priority="-1").sum == 6.0  # both waited the 3 s
        instrumentation.remove()
        async with limiter.acquire(priority=Priority.LOW):
            pass
        points = read(reader)
        assert point("limiter.wait", priority="-1").count == 2  # not recorded any more
        limiter._check_invariants()

    asyncio.run(main())
