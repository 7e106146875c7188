"""Memory: bytes that each queued task costs, its Future included, measured with tracemalloc.

One worker is held by a gate; then tracing starts and the tasks are submitted, and the traced
memory still allocated afterwards, divided by the number of tasks, is the cost of one. The
list that keeps the futures is allocated before tracing starts, so it is not counted; the
futures are, since a caller holds on to them.
"""

from __future__ import annotations

import tracemalloc
from concurrent.futures import Future
from typing import Any, Optional

from contenders import CONTENDERS, Contender, Gate, gc_paused, noop, start_workers
from harness import Case, Config, Metric, Target

NAME = "memory"
SUMMARY = "tracemalloc bytes per queued task, its Future included"

TASKS = 200_000
QUICK_TASKS = 20_000

BYTES = Metric(
    "bytes_per_task",
    "traced bytes per queued task",
    "bytes",
    "lower",
    Target("≤ stdlib", lambda median, ratio: ratio is not None and ratio <= 1.0),
)


def trial(contender: Contender, tasks: int) -> dict[str, float]:
    pool = contender.make(1)
    gate: Optional[Gate] = None
    try:
        start_workers(pool, 1)
        gate = Gate.close(pool, 1)
        submit = pool.submit
        futures: list[Optional[Future[Any]]] = [None] * tasks
        with gc_paused():  # nothing to collect; it only slows the traced loop down
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for i in range(tasks):
                    futures[i] = submit(noop)
                after = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
    finally:
        if gate is not None:
            gate.release()
        pool.shutdown(wait=True, cancel_futures=True)
    return {"bytes_per_task": (after - before) / tasks}


def cases(config: Config) -> list[Case]:
    tasks = QUICK_TASKS if config.quick else TASKS
    notes = [f"quick mode: {tasks:,} queued tasks instead of {TASKS:,}"] if config.quick else []
    return [
        Case(
            NAME,
            f"memory, {tasks // 1000}k queued",
            [BYTES],
            lambda c: trial(c, tasks),
            CONTENDERS,
            {"tasks": tasks, "workers": 1},
            notes,
            warmup=lambda c: trial(c, tasks // 10),
        )
    ]
