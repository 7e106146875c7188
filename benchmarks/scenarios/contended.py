"""Contended: 8 threads submit no-op tasks at once to 4 workers, first submit to last result.

The submitting threads are started beforehand and released together by a barrier; each
submits its share, then reads its own futures' results. The clock stops when all have done so.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor, Future

from contenders import CONTENDERS, TIMEOUT, Contender, noop, start_workers
from harness import Case, Config, Metric, Target

NAME = "contended"
SUMMARY = "8 submitting threads, 4 workers, no-op tasks"

WORKERS = 4
SUBMITTERS = 8
PER_SUBMITTER = 12_500
QUICK_PER_SUBMITTER = 4_000

TASKS_PER_S = Metric(
    "tasks_per_s",
    "tasks per second",
    "tasks/s",
    "higher",
    Target("≥ 1.5 x stdlib", lambda median, ratio: ratio is not None and ratio >= 1.5),
)


def _submitter(pool: Executor, barrier: threading.Barrier, tasks: int) -> None:
    submit = pool.submit
    barrier.wait(TIMEOUT)
    futures: list[Future[None]] = [submit(noop) for _ in range(tasks)]
    for future in futures:
        future.result(TIMEOUT)


def trial(contender: Contender, per_submitter: int) -> dict[str, float]:
    pool = contender.make(WORKERS)
    try:
        start_workers(pool, WORKERS)
        barrier = threading.Barrier(SUBMITTERS + 1)
        threads = [
            threading.Thread(target=_submitter, args=(pool, barrier, per_submitter))
            for _ in range(SUBMITTERS)
        ]
        for thread in threads:
            thread.start()
        barrier.wait(TIMEOUT)
        started = time.perf_counter()
        for thread in threads:
            thread.join(TIMEOUT)
        elapsed = time.perf_counter() - started
        if any(thread.is_alive() for thread in threads):
            raise RuntimeError("a submitting thread did not finish")
    finally:
        pool.shutdown(wait=True)
    return {"tasks_per_s": SUBMITTERS * per_submitter / elapsed, "seconds": elapsed}


def cases(config: Config) -> list[Case]:
    per = QUICK_PER_SUBMITTER if config.quick else PER_SUBMITTER
    notes = (
        [f"quick mode: {SUBMITTERS} x {per:,} tasks instead of {SUBMITTERS} x {PER_SUBMITTER:,}"]
        if config.quick
        else []
    )
    return [
        Case(
            NAME,
            f"contended, {SUBMITTERS} submitters x {per:,}, {WORKERS} workers",
            [TASKS_PER_S],
            lambda c: trial(c, per),
            CONTENDERS,
            {"submitters": SUBMITTERS, "tasks_per_submitter": per, "workers": WORKERS},
            notes,
            warmup=lambda c: trial(c, per // 4),
        )
    ]
