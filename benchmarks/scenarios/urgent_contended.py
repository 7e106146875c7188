"""Urgent latency under contention: one HIGH task while K threads flood the pool with LOW ones.

One sample: 4 workers are held by a gate and 20k LOW no-ops are queued; K threads start
submitting LOW no-ops in a loop; the gate opens; submitter 0, after its 500th submit, submits
one HIGH task itself (so with K = 1 one thread does all the submitting). The latency is the
time from just before that ``submit`` to the first line of the HIGH task. The submitters stop
once it has started, and what is left is cancelled.

Unlike ``urgent-latency``, the pool never gets a quiet moment: the HIGH task competes for the
pool's lock and for the GIL with every submitter. This is where most users live: many request
threads submitting at once. A trial takes ``SAMPLES`` samples on fresh pools and reports their
median and their 90th percentile; the table gives the median of those over the repetitions.

The LOW task is a C-level counter (``itertools.count().__next__``) so that the raw results can
say how many LOW tasks started while the HIGH one waited (with a 20k backlog that is zero only
if no worker took anything), and about how many were still queued when it was submitted: a
pool whose submits are slow under contention lets its workers drain the backlog meanwhile, so
its HIGH task may wait behind little.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Optional

from contenders import CONTENDERS, TIMEOUT, Contender, Gate, gc_paused, start_workers
from harness import Case, Config, Metric, Target, percentile
from priority_executor import Priority

NAME = "urgent-contended"
SUMMARY = "1 HIGH task while K threads submit LOW ones behind a 20k backlog: submit to start"

WORKERS = 4
LOW_TASKS = 20_000
SUBMITS_BEFORE = 500  # LOW submits of submitter 0 before its HIGH one
SAMPLES = 10
QUICK_SAMPLES = 4

#: The targets of the issue, per number of submitters: (median, p90) in ms.
TARGETS: dict[int, tuple[float, Optional[float]]] = {
    1: (0.2, None),
    4: (1.0, None),
    16: (5.0, 10.0),
}


def _latency_metric(key: str, statistic: str, bound: Optional[float]) -> Metric:
    target = None
    if bound is not None:
        target = Target(f"{statistic} ≤ {bound:g} ms", lambda median, ratio: median <= bound)
    return Metric(key, f"HIGH submit → start, {statistic} of samples", "ms", "lower", target)


#: Context for the latency: a pool whose HIGH task waited behind a short queue had an easy test.
BACKLOG = Metric(
    "backlog_at_high",
    "LOW tasks queued at the HIGH submit, about",
    "tasks",
    "higher",
    paired_ratio=False,
)


def _flood(
    pool: Executor,
    low: Callable[[], object],
    go: threading.Event,
    stop: threading.Event,
    urgent: Optional[Callable[[], None]],
    submitted: list[int],
    index: int,
) -> None:
    submit = pool.submit
    go.wait(TIMEOUT)
    if urgent is not None:
        for _ in range(SUBMITS_BEFORE):
            submit(low)
            submitted[index] += 1
        urgent()
    while not stop.is_set():
        submit(low)
        submitted[index] += 1


def sample(contender: Contender, submitters: int) -> tuple[float, int, int]:
    """One sample on a fresh pool: the latency in ms, the LOW tasks started meanwhile, and
    about how many LOW tasks were queued when the HIGH one was submitted."""
    pool = contender.make(WORKERS)
    counter = itertools.count()
    low = counter.__next__
    gate: Optional[Gate] = None
    go, stop, started = threading.Event(), threading.Event(), threading.Event()
    times = [0.0, 0.0]
    ran = [0, 0]
    submitted = [0] * submitters  # LOW submits of each flooding thread
    backlog = [0]
    threads: list[threading.Thread] = []

    def high() -> None:
        times[1] = time.perf_counter()
        ran[1] = next(counter)
        started.set()

    def urgent() -> None:
        ran[0] = next(counter)
        backlog[0] = LOW_TASKS + sum(submitted) - ran[0]  # the others' counts may lag a bit
        times[0] = time.perf_counter()
        contender.submit(pool, high, Priority.HIGH, None)

    try:
        start_workers(pool, WORKERS)
        gate = Gate.close(pool, WORKERS)
        with gc_paused():
            for _ in range(LOW_TASKS):
                pool.submit(low)
        for i in range(submitters):
            first = urgent if i == 0 else None
            args = (pool, low, go, stop, first, submitted, i)
            thread = threading.Thread(target=_flood, args=args)
            thread.start()
            threads.append(thread)
        gate.release()
        go.set()
        if not started.wait(TIMEOUT):
            raise RuntimeError("the HIGH task never started")
    finally:
        stop.set()
        go.set()
        for thread in threads:
            thread.join(TIMEOUT)
        if gate is not None:
            gate.release()
        pool.shutdown(wait=True, cancel_futures=True)
    return (times[1] - times[0]) * 1e3, ran[1] - ran[0] - 1, backlog[0]


def trial(contender: Contender, submitters: int, samples: int) -> dict[str, float]:
    results = [sample(contender, submitters) for _ in range(samples)]
    latencies = [latency for latency, _, _ in results]
    return {
        "latency_ms": statistics.median(latencies),
        "p90_ms": percentile(latencies, 90),
        "max_ms": max(latencies),
        "low_started_while_waiting": statistics.median(ran for _, ran, _ in results),
        "backlog_at_high": statistics.median(backlog for _, _, backlog in results),
    }


def _case(submitters: int, samples: int, quick: bool) -> Case:
    notes = ["stdlib has no priorities: its 'HIGH' task is a plain submit behind the backlog"]
    if quick:
        notes.append(f"quick mode: {samples} samples per trial instead of {SAMPLES}")
    plural = "s" if submitters > 1 else ""
    return Case(
        NAME,
        f"urgent under contention, {submitters} submitter{plural}, {WORKERS} workers",
        [
            _latency_metric("latency_ms", "median", TARGETS[submitters][0]),
            _latency_metric("p90_ms", "p90", TARGETS[submitters][1]),
            BACKLOG,
        ],
        lambda c: trial(c, submitters, samples),
        CONTENDERS,
        {
            "submitters": submitters,
            "workers": WORKERS,
            "low_tasks": LOW_TASKS,
            "submits_before": SUBMITS_BEFORE,
            "samples": samples,
        },
        notes,
        warmup=lambda c: trial(c, submitters, 1),
    )


def cases(config: Config) -> list[Case]:
    samples = QUICK_SAMPLES if config.quick else SAMPLES
    return [_case(k, samples, config.quick) for k in sorted(TARGETS)]
