"""Throughput: no-op tasks submitted from one thread to 4 workers, first submit to last result.

All cost is the pool's: creating a future, queueing it, handing it to a worker, running a
no-op, setting and reading the result. Workers are started before the clock starts.
"""

from __future__ import annotations

import time

from contenders import CONTENDERS, TIMEOUT, Contender, noop, start_workers
from harness import Case, Config, Metric, Target

NAME = "throughput"
SUMMARY = "no-op tasks from 1 thread, 4 workers, first submit to last result"

WORKERS = 4
TASKS = 100_000
QUICK_TASKS = 30_000

TASKS_PER_S = Metric(
    "tasks_per_s",
    "tasks per second",
    "tasks/s",
    "higher",
    Target("≥ 1.2 x stdlib", lambda median, ratio: ratio is not None and ratio >= 1.2),
)


def trial(contender: Contender, tasks: int) -> dict[str, float]:
    pool = contender.make(WORKERS)
    try:
        start_workers(pool, WORKERS)
        submit = pool.submit
        started = time.perf_counter()
        futures = [submit(noop) for _ in range(tasks)]
        for future in futures:
            future.result(TIMEOUT)
        elapsed = time.perf_counter() - started
    finally:
        pool.shutdown(wait=True)
    return {"tasks_per_s": tasks / elapsed, "seconds": elapsed}


def cases(config: Config) -> list[Case]:
    tasks = QUICK_TASKS if config.quick else TASKS
    notes = [f"quick mode: {tasks:,} tasks instead of {TASKS:,}"] if config.quick else []
    return [
        Case(
            NAME,
            f"throughput, {tasks // 1000}k tasks, {WORKERS} workers",
            [TASKS_PER_S],
            lambda c: trial(c, tasks),
            CONTENDERS,
            {"tasks": tasks, "workers": WORKERS},
            notes,
            warmup=lambda c: trial(c, tasks // 4),
        )
    ]
