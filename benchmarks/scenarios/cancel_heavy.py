"""Cancel-heavy: 100k tasks queued behind a blocked pool, 90% of them cancelled, then drained.

Three numbers per run, all taken with the pool's worker held by a gate until the drain:

* the cost of one ``cancel()``: the time of a loop cancelling every task whose index is not a
  multiple of 10, divided by the number cancelled;
* the drain: from opening the gate until every surviving task has run, divided by the number
  of tasks that were queued (cancelled ones included, since a pool may still have to skip them);
* the queue's size after the cancels, per live task: ours reports what its queue stores
  (tombstones included; see ``_our_queue``), the standard pool its ``SimpleQueue``,
  the baseline its ``PriorityQueue``. Ours promises at most ``2 x live + 64``
  (``COMPACT_SLACK``).
"""

from __future__ import annotations

import time
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Optional

from baseline import PriorityQueuePool
from contenders import CONTENDERS, TIMEOUT, Contender, Gate, gc_paused, noop, start_workers
from harness import Case, Config, Metric, Target
from priority_executor import PriorityThreadPoolExecutor

NAME = "cancel-heavy"
SUMMARY = "100k queued, 90% cancelled: cost per cancel(), drain cost, queue size"

WORKERS = 1
TASKS = 100_000
QUICK_TASKS = 30_000
KEEP_EVERY = 10  # tasks 0, 10, 20, ... survive

CANCEL = Metric(
    "cancel_us",
    "cost per cancel()",
    "µs",
    "lower",
    Target("≤ 1.5 µs", lambda median, ratio: median <= 1.5),
)
DRAIN = Metric(
    "drain_us_per_task",
    "drain per queued task",
    "µs",
    "lower",
    Target("≤ stdlib", lambda median, ratio: ratio is not None and ratio <= 1.0),
)


def _entries_metric(live: int) -> Metric:
    limit = (2 * live + 64) / live
    return Metric(
        "queue_entries_per_live",
        "queue entries per live task after the cancels",
        "entries",
        "lower",
        Target(f"≤ 2 x live + 64 (= {limit:.4g} per live)", lambda median, ratio: median <= limit),
    )


def _our_queue(pool: PriorityThreadPoolExecutor) -> object:
    """Our pool's private queue object, or None where it is not found.

    The one place in the benchmarks that knows where the queue lives, as ``tests/support.py``
    (``internals``) is for the tests: benchmarks cannot import the tests, so when the pool's
    core moves, change both.
    """
    return getattr(getattr(pool, "_admission", None), "queue", None)


def queue_entries(pool: Executor) -> Optional[int]:
    """Items the pool's queue holds, cancelled ones included; None if it cannot tell.

    This reads private attributes. Ours has changed its queue's layout before, so it is
    read defensively: ``stored`` (FIFO buckets) or ``len(heap)`` (one heap).
    """
    if isinstance(pool, PriorityThreadPoolExecutor):
        task_queue = _our_queue(pool)
        stored = getattr(task_queue, "stored", None)
        if isinstance(stored, int):
            return stored
        heap = getattr(task_queue, "heap", None)
        return len(heap) if isinstance(heap, list) else None
    if isinstance(pool, PriorityQueuePool):
        return pool._queue.qsize()
    if isinstance(pool, ThreadPoolExecutor):
        return pool._work_queue.qsize()
    return None


def trial(contender: Contender, tasks: int) -> dict[str, float]:
    pool = contender.make(WORKERS)
    gate: Optional[Gate] = None
    try:
        start_workers(pool, WORKERS)
        gate = Gate.close(pool, WORKERS)
        submit = pool.submit
        with gc_paused():
            futures = [submit(noop) for _ in range(tasks)]
        doomed = [f for i, f in enumerate(futures) if i % KEEP_EVERY]
        live = futures[::KEEP_EVERY]
        started = time.perf_counter()
        for future in doomed:
            future.cancel()
        cancel_seconds = time.perf_counter() - started
        entries = queue_entries(pool)
        started = time.perf_counter()
        gate.release()
        for future in live:
            future.result(TIMEOUT)
        drain_seconds = time.perf_counter() - started
        if not all(f.cancelled() for f in doomed):
            raise RuntimeError("a cancel() failed on a queued task")
    finally:
        if gate is not None:
            gate.release()
        pool.shutdown(wait=True, cancel_futures=True)
    values = {
        "cancel_us": cancel_seconds / len(doomed) * 1e6,
        "drain_us_per_task": drain_seconds / tasks * 1e6,
        "live": len(live),
    }
    if entries is not None:
        values["queue_entries"] = entries
        values["queue_entries_per_live"] = entries / len(live)
    return values


def cases(config: Config) -> list[Case]:
    tasks = QUICK_TASKS if config.quick else TASKS
    notes = [f"quick mode: {tasks:,} queued tasks instead of {TASKS:,}"] if config.quick else []
    return [
        Case(
            NAME,
            f"cancel-heavy, {tasks // 1000}k queued, 90% cancelled",
            [CANCEL, DRAIN, _entries_metric(len(range(0, tasks, KEEP_EVERY)))],
            lambda c: trial(c, tasks),
            CONTENDERS,
            {"tasks": tasks, "keep_every": KEEP_EVERY, "workers": WORKERS},
            notes,
            warmup=lambda c: trial(c, tasks // 10),
        )
    ]
