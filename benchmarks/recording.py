"""What watching a pool costs: ``python benchmarks/recording.py [--repeat R] [--source SRC]``.

Two measurements, both of ``PriorityThreadPoolExecutor``:

1. **``statistics()`` with a backlog.** One worker held by a gate; N no-op tasks queued over
   ``PRIORITIES`` distinct priorities (N = 1e3 .. 1e6); the median time of ``CALLS`` calls
   of ``statistics()``. With ``--source`` (the ``src`` folder of another checkout, as for
   ``compare.py``) the other version is measured at each N too, on its own fresh pool.
2. **Throughput of an instrumented pool**, W1 (one submitter, ``TASKS`` no-ops, 4 workers),
   interleaved in every repetition: the plain pool, the pool with a listener that does
   nothing (``add_listener(on_start=..., on_finish=...)``), and the pool instrumented by
   ``priority_executor.otel.instrument`` on an SDK ``MeterProvider`` with an
   ``InMemoryMetricReader`` (skipped, with a note, where the SDK is not installed). Each
   ratio is the median of the per-repetition ratios to the plain pool.

The markdown tables go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import wait
from pathlib import Path
from typing import Any, Optional

import priority_executor
from compare import Make, load_other, noop
from priority_executor import PriorityThreadPoolExecutor, TaskInfo

SIZES = (1_000, 10_000, 100_000, 1_000_000)
PRIORITIES = 5
CALLS = 21
TASKS = 100_000
WORKERS = 4

Setup = Callable[[PriorityThreadPoolExecutor], Callable[[], None]]  # returns its undo


def statistics_seconds(make: Make, queued: int) -> float:
    """The median time of one ``statistics()`` call with ``queued`` tasks queued."""
    pool: Any = make(1)
    gate = threading.Event()
    try:
        pool.submit(gate.wait, 600)
        for i in range(queued):
            pool.submit(noop, priority=i % PRIORITIES)
        times = []
        for _ in range(CALLS):
            started = time.perf_counter()
            snapshot = pool.statistics()
            times.append(time.perf_counter() - started)
        assert snapshot.queued == queued, snapshot.queued
        return statistics.median(times)
    finally:
        gate.set()
        pool.shutdown(wait=True, cancel_futures=True)


def _plain(pool: PriorityThreadPoolExecutor) -> Callable[[], None]:
    return lambda: None


def _listening(pool: PriorityThreadPoolExecutor) -> Callable[[], None]:
    def nothing(info: TaskInfo) -> None:
        pass

    return pool.add_listener(on_start=nothing, on_finish=nothing).remove


def _otel() -> Optional[Setup]:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        from priority_executor.otel import instrument
    except ImportError:
        return None

    def setup(pool: PriorityThreadPoolExecutor) -> Callable[[], None]:
        provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        return instrument(pool, name="bench", meter_provider=provider).remove

    return setup


def throughput(setup: Setup) -> float:
    """Tasks per second of W1 on a fresh pool prepared by ``setup``."""
    pool = PriorityThreadPoolExecutor(WORKERS)
    undo = setup(pool)
    try:
        wait([pool.submit(noop) for _ in range(WORKERS * 10)])
        started = time.perf_counter()
        wait([pool.submit(noop) for _ in range(TASKS)])
        elapsed = time.perf_counter() - started
    finally:
        undo()
        pool.shutdown(wait=True)
    return TASKS / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="interleaved repetitions")
    parser.add_argument("--source", type=Path, help="the src folder of another checkout")
    args = parser.parse_args()
    print(f"priority-executor {priority_executor.__version__}, Python {sys.version.split()[0]}")

    makes: dict[str, Make] = {"this": PriorityThreadPoolExecutor}
    if args.source is not None:
        makes["other"] = load_other(args.source)
    print(f"\n`statistics()`, median of {CALLS} calls, {PRIORITIES} priorities queued\n")
    print("| queued | " + " | ".join(makes) + " |")
    print("| --- |" + " --- |" * len(makes))
    for size in SIZES:
        cells = []
        for name, make in makes.items():
            print(f"statistics: {name} with {size:,} queued", file=sys.stderr)
            gc.collect()
            cells.append(f"{statistics_seconds(make, size) * 1e6:,.1f} µs")
        print(f"| {size:,} | " + " | ".join(cells) + " |")

    setups: dict[str, Setup] = {"plain": _plain, "listener": _listening}
    otel = _otel()
    if otel is not None:
        setups["otel"] = otel
    runs: dict[str, list[float]] = {name: [] for name in setups}
    for r in range(args.repeat):
        names = list(setups)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            print(f"throughput: {name}, repetition {r + 1}/{args.repeat}", file=sys.stderr)
            gc.collect()
            runs[name].append(throughput(setups[name]))
    print(f"\nW1 ({TASKS:,} no-ops, {WORKERS} workers), {args.repeat} interleaved repetitions\n")
    print("| pool | tasks/s (median) | ÷ plain (paired median) | extra per task |")
    print("| --- | --- | --- | --- |")
    plain = statistics.median(runs["plain"])
    for name, values in runs.items():
        ratio = statistics.median(x / y for x, y in zip(values, runs["plain"], strict=True))
        extra = (1 / statistics.median(values) - 1 / plain) * 1e6
        print(f"| {name} | {statistics.median(values):,.0f} | {ratio:.3f} | {extra:+.2f} µs |")
    if otel is None:
        print("\nopentelemetry-sdk is not installed: the instrumented pool was not measured.")


if __name__ == "__main__":
    main()
