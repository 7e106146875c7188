"""Urgent latency: one HIGH task submitted behind 20k LOW tasks that the workers are running.

The LOW no-op tasks are queued behind a gate, the gate opens, and once the workers have
finished the first ``RUNNING_FIRST`` of them (so they are busy with the backlog, and about 20k
are still queued) one HIGH task is submitted. The metric is the time from just before that
``submit`` call to the first line of the HIGH task. What is left is cancelled afterwards.

The standard pool has no priorities: its "HIGH" task is just another submit and waits for the
whole backlog, which is the problem priorities solve.
"""

from __future__ import annotations

import time
from typing import Optional

from contenders import CONTENDERS, TIMEOUT, Contender, Gate, gc_paused, noop, start_workers
from harness import Case, Config, Metric, Target
from priority_executor import Priority, PriorityThreadPoolExecutor

NAME = "urgent-latency"
SUMMARY = "1 HIGH task submitted behind 20k running LOW tasks: submit to start"

LOW_TASKS = 20_000
RUNNING_FIRST = 100  # LOW tasks finished before the HIGH one is submitted

LATENCY = Metric(
    "latency_ms",
    "HIGH submit → start",
    "ms",
    "lower",
    Target("median ≤ 0.2 ms", lambda median, ratio: median <= 0.2),
)


def trial(contender: Contender, workers: int, low_tasks: int) -> dict[str, float]:
    pool = contender.make(workers)
    gate: Optional[Gate] = None
    try:
        start_workers(pool, workers)
        gate = Gate.close(pool, workers)
        with gc_paused():
            lows = [contender.submit(pool, noop, Priority.LOW, None) for _ in range(low_tasks)]
        gate.release()
        lows[RUNNING_FIRST - 1].result(TIMEOUT)
        started_at = [0.0]

        def high() -> None:
            started_at[0] = time.perf_counter()

        submitted_at = time.perf_counter()
        urgent = contender.submit(pool, high, Priority.HIGH, None)
        urgent.result(TIMEOUT)
        # A sanity figure for the raw data: FIFO pools ran the whole backlog first.
        ran_before = sum(1 for f in lows if f.done() and not f.cancelled())
        # Ours also recorded the HIGH task's wait itself (submit to start, on its clock):
        # kept beside the measured latency in the raw results, where the two can be compared.
        recorded = _recorded_high_wait_ms(pool)
    finally:
        if gate is not None:
            gate.release()
        pool.shutdown(wait=True, cancel_futures=True)
    return {
        "latency_ms": (started_at[0] - submitted_at) * 1e3,
        "low_done_when_high_done": ran_before,
        **({} if recorded is None else {"recorded_wait_ms": recorded}),
    }


def _recorded_high_wait_ms(pool: object) -> Optional[float]:
    """The wait ``statistics()`` recorded for the one HIGH task, in ms; None for other pools."""
    if not isinstance(pool, PriorityThreadPoolExecutor):
        return None
    wait = pool.statistics().wait.get(Priority.HIGH)
    return None if wait is None or wait.max is None else wait.max * 1e3


def _case(workers: int) -> Case:
    plural = "s" if workers > 1 else ""
    return Case(
        NAME,
        f"urgent latency, {LOW_TASKS // 1000}k LOW queued, {workers} worker{plural}",
        [LATENCY],
        lambda c: trial(c, workers, LOW_TASKS),
        CONTENDERS,
        {"workers": workers, "low_tasks": LOW_TASKS, "running_first": RUNNING_FIRST},
        ["stdlib has no priorities: its 'HIGH' task is a plain submit behind the backlog"],
        warmup=lambda c: trial(c, workers, LOW_TASKS // 10),
    )


def cases(config: Config) -> list[Case]:
    return [_case(1), _case(4)]
