"""AsyncPriorityScheduler against what async code uses instead: ``benchmarks/aio.py [--quick]``.

Side by side in one run, as ``front.py`` runs its cases (a smaller warm-up trial of every
contender, interleaved repetitions in a rotated order, medians, paired ratios against the
first contender); every trial runs on a fresh event loop (``asyncio.run``).

- **Throughput**: no-op coroutines at concurrency 64, from the first submit to the last
  result. Against ``asyncio.Semaphore`` with one Task per call and ``gather`` (no priority),
  aiometer's ``run_all`` (where it installs), and the seed's design: a sorted list and a pump.
- **Urgent latency**: 100,000 LOW coroutines queued (each ``await asyncio.sleep(0.001)``) at
  concurrency 64; a HIGH one submitted every 5 ms while they run, 40 in all; from just before
  its submit to its first line (``time.perf_counter``).
- **Memory**: traced bytes per queued task (``tracemalloc``), 100,000 of them queued behind
  one running task; the Semaphore pattern's tasks have each reached ``acquire()``.
- **Scaling**: the scheduler's cost per task (submit, start, end), with 1e3 and 1e6 tasks
  queued at once (``--quick``: 1e5), with the cyclic garbage collector paused, as the thread
  pool's backlog-scaling scenario measures it (``scenarios/backlog_scaling.py`` says why); and
  again with it running, where every full collection traverses the whole backlog.

Markdown tables go to stdout, progress to stderr, raw numbers to
``benchmarks/results/<date>-py<version>-aio[-quick].json``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import gc
import importlib
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any, Optional

from contenders import gc_paused
from front import DIRECT, FRONT, Case, Run, at_least, run_case
from harness import Metric, Target, fmt, log
from priority_executor import AsyncPriorityScheduler
from run import MIN_REPEAT

CONCURRENCY = 64
HIGH, LOW = 10, 0
SIZES = {
    "full": {"tasks": 100_000, "backlog": 100_000, "queued": 100_000, "scale": 1_000_000},
    "quick": {"tasks": 20_000, "backlog": 20_000, "queued": 20_000, "scale": 100_000},
}
SAMPLES = 40  # HIGH coroutines per latency trial
SAMPLE_EVERY = 0.005  # seconds between them


async def noop() -> None:
    pass


async def nap() -> None:
    await asyncio.sleep(0.001)


class SortedPump:
    """The seed's design: a list kept sorted by ``bisect.insort``, and a pump of Tasks."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: list[tuple[int, int, Callable[[], Any], asyncio.Future[Any]]] = []
        self.running = 0
        self.seq = 0

    def submit(self, fn: Callable[[], Any], priority: int = 0) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        bisect.insort(self.items, (-priority, self.seq, fn, future))
        self.seq += 1
        self.pump()
        return future

    def pump(self) -> None:
        while self.running < self.limit and self.items:
            _, _, fn, future = self.items.pop(0)
            self.running += 1
            task = asyncio.ensure_future(fn())
            task.add_done_callback(functools.partial(self._done, future))

    def _done(self, future: asyncio.Future[Any], task: asyncio.Task[Any]) -> None:
        self.running -= 1
        if task.cancelled():
            future.cancel()
        elif task.exception() is not None:
            future.set_exception(task.exception())  # type: ignore[arg-type]
        else:
            future.set_result(task.result())
        self.pump()


class Submitter:
    """One contender's way to run ``fn()`` at a priority: ``submit`` returns an awaitable."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.tasks: list[asyncio.Future[Any]] = []
        if key == FRONT:
            self.scheduler = AsyncPriorityScheduler(CONCURRENCY)
        elif key == "seed":
            self.pump = SortedPump(CONCURRENCY)
        else:
            self.semaphore = asyncio.Semaphore(CONCURRENCY)

    def submit(self, fn: Callable[[], Any], priority: int) -> asyncio.Future[Any]:
        if self.key == FRONT:
            future = self.scheduler.submit(fn, priority=priority)
        elif self.key == "seed":
            future = self.pump.submit(fn, priority)
        else:
            future = asyncio.ensure_future(self._guarded(fn))
        self.tasks.append(future)
        return future

    async def _guarded(self, fn: Callable[[], Any]) -> Any:
        async with self.semaphore:
            return await fn()

    async def cancel_all(self) -> None:
        for future in self.tasks:
            future.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


# -- the trials ----------------------------------------------------------------------------------


def throughput_trial(key: str, tasks: int) -> dict[str, float]:
    async def main() -> float:
        if key == "aiometer":
            aiometer = importlib.import_module("aiometer")  # where it installs: see cases()

            started = time.perf_counter()
            await aiometer.run_all([noop] * tasks, max_at_once=CONCURRENCY)
            return time.perf_counter() - started
        submitter = Submitter(key)
        started = time.perf_counter()
        await asyncio.gather(*[submitter.submit(noop, LOW) for _ in range(tasks)])
        return time.perf_counter() - started

    return {"tasks_per_s": tasks / asyncio.run(main())}


def latency_trial(key: str, backlog: int) -> dict[str, float]:
    async def main() -> list[float]:
        submitter = Submitter(key)
        for _ in range(backlog):
            submitter.submit(nap, LOW)
        waits: list[float] = []
        pending: list[asyncio.Future[None]] = []
        for _ in range(SAMPLES):
            await asyncio.sleep(SAMPLE_EVERY)
            submitted = time.perf_counter()

            async def high(submitted: float = submitted) -> None:
                waits.append(time.perf_counter() - submitted)

            pending.append(submitter.submit(high, HIGH))
        await asyncio.gather(*pending)
        await submitter.cancel_all()
        return waits

    waits = sorted(asyncio.run(main()))
    return {
        "median_ms": statistics.median(waits) * 1e3,
        "p99_ms": waits[min(len(waits) - 1, int(0.99 * len(waits)))] * 1e3,
    }


def memory_trial(key: str, queued: int) -> dict[str, float]:
    async def main() -> float:
        release = asyncio.Event()

        async def hold() -> None:
            await release.wait()

        limit = 1
        scheduler = AsyncPriorityScheduler(limit)
        semaphore = asyncio.Semaphore(limit)

        async def guarded() -> None:
            async with semaphore:
                await noop()

        holder: Any = scheduler.submit(hold) if key == FRONT else asyncio.ensure_future(hold())
        if key != FRONT:
            await semaphore.acquire()  # the holder's slot, so every task below waits
        await asyncio.sleep(0)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        if key == FRONT:
            futures: list[Any] = [scheduler.submit(noop) for _ in range(queued)]
        else:
            futures = [asyncio.ensure_future(guarded()) for _ in range(queued)]
            await asyncio.sleep(0)  # each runs to its acquire(), as a real call would
        per_task = (tracemalloc.get_traced_memory()[0] - before) / queued
        tracemalloc.stop()
        if key != FRONT:
            semaphore.release()
        release.set()
        await asyncio.gather(holder, *futures)
        return per_task

    return {"bytes_per_task": asyncio.run(main())}


def scaling_trial(queued: int, total: int, collector: bool) -> dict[str, float]:
    """Cost per task with ``queued`` tasks submitted at once, ``total`` tasks in all."""
    if not collector:
        with gc_paused():
            return scaling_trial(queued, total, True)

    async def main() -> float:
        scheduler = AsyncPriorityScheduler(CONCURRENCY)
        started = time.perf_counter()
        for _ in range(total // queued):
            scheduler.pause()
            futures = [scheduler.submit(noop) for _ in range(queued)]
            scheduler.resume()
            await asyncio.gather(*futures)
        return time.perf_counter() - started

    return {"us_per_task": asyncio.run(main()) / total * 1e6}


# -- the cases -----------------------------------------------------------------------------------


def at_most(ratio: float) -> Target:
    return Target(f"≤ {ratio} x the reference", lambda m, r: r is not None and r <= ratio)


def cases(sizes: dict[str, int]) -> list[Case]:
    semaphore = "asyncio.Semaphore(64), a Task per call, gather"
    ours = "AsyncPriorityScheduler(64)"
    throughput = {DIRECT: semaphore, FRONT: ours, "seed": "the seed's design: sorted list + pump"}
    try:
        importlib.import_module("aiometer")
    except ImportError:
        log("[aio] aiometer does not import: its contender is left out")
    else:
        throughput["aiometer"] = "aiometer.run_all(max_at_once=64)"
    tasks, backlog, queued, scale = (
        sizes["tasks"],
        sizes["backlog"],
        sizes["queued"],
        sizes["scale"],
    )
    within = Target("median ≤ 1 ms", lambda m, r: m <= 1.0)
    p99 = Target("p99 ≤ 5 ms", lambda m, r: m <= 5.0)
    return [
        Case(
            f"throughput, {tasks:,} no-op coroutines at concurrency {CONCURRENCY}",
            throughput,
            lambda key, div: throughput_trial(key, tasks // div),
            [Metric("tasks_per_s", "throughput", "tasks/s", "higher", at_least(1.2))],
            {"tasks": tasks, "concurrency": CONCURRENCY},
        ),
        Case(
            f"urgent latency, HIGH behind {backlog:,} queued LOW coroutines of 1 ms",
            {DIRECT: semaphore, FRONT: ours},
            lambda key, div: latency_trial(key, backlog // div),
            [
                Metric("median_ms", "HIGH start, median", "ms", "lower", within),
                Metric("p99_ms", "HIGH start, p99", "ms", "lower", p99),
            ],
            {"backlog": backlog, "samples": SAMPLES, "every_s": SAMPLE_EVERY},
        ),
        Case(
            f"memory, {queued:,} queued tasks",
            {DIRECT: semaphore, FRONT: ours},
            lambda key, div: memory_trial(key, queued // div),
            [Metric("bytes_per_task", "traced bytes per queued task", "B", "lower", at_most(0.5))],
            {"queued": queued},
        ),
        *(
            Case(
                f"scaling, cost per task with 1,000 and {scale:,} tasks queued at once,"
                f" garbage collector {'on' if collector else 'paused'}",
                {DIRECT: f"{ours}, 1,000 queued", FRONT: f"{ours}, {scale:,} queued"},
                functools.partial(scaling_case_trial, scale, collector),
                [Metric("us_per_task", "submit to end, per task", "µs", "lower", at_most(1.3))],
                {"small": 1_000, "large": scale, "collector": collector},
            )
            for collector in (False, True)
        ),
    ]


def scaling_case_trial(scale: int, collector: bool, key: str, div: int) -> dict[str, float]:
    return scaling_trial(1_000 if key == DIRECT else scale // div, scale // div, collector)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--repeat", type=int, default=MIN_REPEAT, metavar="N")
    parser.add_argument("--case", action="append", metavar="WORD", help="only cases naming it")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    mode = "quick" if args.quick else "full"
    run = Run.begin(mode, args.repeat)
    chosen = [c for c in cases(SIZES[mode]) if not args.case or any(w in c.name for w in args.case)]
    records = [run_case(case, args.repeat) for case in chosen]
    ratios = f"the first contender ({fmt(1.0)} = the same)."
    return run.publish(f"aio{'-quick' if args.quick else ''}", None, chosen, records, ratios, {})


if __name__ == "__main__":
    sys.exit(main())
