"""Request threads: 16 threads that each submit a HIGH or a LOW task, then block about 1 ms.

This is a web back end's pattern: each request thread hands work to the pool, then waits on
I/O (here ``time.sleep(0.001)``) before its next request. One task in ``HIGH_EVERY`` is HIGH
(which ones is fixed by a seed, the same for every contender); the metric is the wait of the
HIGH tasks, from just before their ``submit`` to their first line, over every HIGH task of the
trial: its median and its 99th percentile.

Two cases. *Light*: a LOW task is a few microseconds of Python, the workers keep up and the
queue stays short, so the wait is the pool's own hand-off under 16 threads waking and
submitting. *Overloaded*: a LOW task blocks 1 ms (I/O-like), four workers run 4 a millisecond
while the threads submit about 14, so a LOW backlog builds up; a pool without priorities makes
HIGH tasks wait behind all of it.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from contenders import CONTENDERS, TIMEOUT, Contender, start_workers
from harness import Case, Config, Metric, percentile
from priority_executor import Priority

NAME = "requests"
SUMMARY = "16 request threads submit a HIGH or LOW task each, then block 1 ms: HIGH wait"

WORKERS = 4
THREADS = 16
PER_THREAD = 200
QUICK_PER_THREAD = 60
HIGH_EVERY = 8  # on average one task in 8 is HIGH
IO_SECONDS = 0.001


def _light() -> int:
    return sum(range(200))


def _overloaded() -> None:
    time.sleep(IO_SECONDS)


LOW_TASKS: dict[str, Callable[[], object]] = {"light": _light, "overloaded": _overloaded}

P50 = Metric("high_wait_ms", "HIGH submit → start, median", "ms", "lower")
P99 = Metric("high_wait_p99_ms", "HIGH submit → start, p99", "ms", "lower")


def _requests(
    contender: Contender,
    pool: Any,
    low: Callable[[], object],
    seed: int,
    tasks: int,
    barrier: threading.Barrier,
    waits: list[float],
    futures: list[Future[Any]],
) -> None:
    draw = random.Random(seed)
    barrier.wait(TIMEOUT)
    for _ in range(tasks):
        if draw.randrange(HIGH_EVERY) == 0:
            submitted = time.perf_counter()

            def high(submitted: float = submitted) -> None:
                waits.append(time.perf_counter() - submitted)  # list.append is atomic

            futures.append(contender.submit(pool, high, Priority.HIGH, None))
        else:
            futures.append(contender.submit(pool, low, Priority.LOW, None))
        time.sleep(IO_SECONDS)


def trial(contender: Contender, load: str, per_thread: int) -> dict[str, float]:
    pool = contender.make(WORKERS)
    waits: list[float] = []
    futures: list[Future[Any]] = []
    try:
        start_workers(pool, WORKERS)
        barrier = threading.Barrier(THREADS)
        threads = [
            threading.Thread(
                target=_requests,
                args=(contender, pool, LOW_TASKS[load], seed, per_thread, barrier, waits, futures),
            )
            for seed in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        if any(thread.is_alive() for thread in threads):
            raise RuntimeError("a request thread did not finish")
        for future in futures:
            future.result(TIMEOUT)
    finally:
        pool.shutdown(wait=True)
    milliseconds = [wait * 1e3 for wait in waits]
    return {
        "high_wait_ms": statistics.median(milliseconds),
        "high_wait_p99_ms": percentile(milliseconds, 99),
        "high_tasks": len(milliseconds),
    }


def _case(load: str, per: int, notes: list[str]) -> Case:
    return Case(
        NAME,
        f"{THREADS} request threads x {per}, {load} LOW tasks, {WORKERS} workers",
        [P50, P99],
        lambda c: trial(c, load, per),
        CONTENDERS,
        {
            "threads": THREADS,
            "requests_per_thread": per,
            "workers": WORKERS,
            "high_every": HIGH_EVERY,
            "io_seconds": IO_SECONDS,
            "low_task": load,
        },
        notes,
        warmup=lambda c: trial(c, load, per // 4),
    )


def cases(config: Config) -> list[Case]:
    per = QUICK_PER_THREAD if config.quick else PER_THREAD
    notes = ["stdlib has no priorities: its 'HIGH' tasks queue behind the LOW ones"]
    if config.quick:
        notes.append(f"quick mode: {THREADS} x {per} requests instead of {THREADS} x {PER_THREAD}")
    return [_case(load, per, notes) for load in LOW_TASKS]
