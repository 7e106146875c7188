"""Urgent work under a rate limit: a HIGH task behind 10,000 queued LOW ones takes the next slot.

The pool (4 workers, ``RateLimit(100, per=1.0)``) is paused, 10,000 LOW no-op tasks are
queued, and it is resumed: 100 start at once, then the rest as the window lets them, 100 a
second, so the queue stays about 10,000 deep for the whole trial. Once the first 100 have
started, each sample waits a random time, uniform over one window (a seeded draw: the only
sleep here, which places the submit at a random moment relative to the slots), submits one
HIGH task, and waits for it to start before the next sample.

As in rate-precision, two times are kept per start: the pool's *decision*, its own clock
reading when it let the task start (the pool's ``clock=`` is :class:`~contenders.ReadingClock`),
and the task's own *start*, its first line. Ordered by decision, for a HIGH task submitted at
``s`` (``time.monotonic()`` just before ``submit``): the first decision after ``s`` has index
``k``; it may come once decision ``k - 100`` is a full second old, so the next slot after the
submit is ``max(s, decision[k - 100] + 1.0)``, and the lag is the HIGH task's start minus that
slot. A pool that does what the issue asks lets the HIGH task start as decision ``k`` itself:
``passed``, the LOW tasks let start between ``s`` and the HIGH task, is 0 in every sample
(a LOW one let start in the µs between reading ``s`` and the HIGH task entering the queue
would count against the pool; slots come about 1 ms a second, so that is rare).

With the slots arriving in bursts (a sliding window refills where it emptied, here 100 at a
time about once a second) most submits fall between bursts and wait most of a second: that
wait (submit to start) is in the raw results as ``wait_ms``; the lag is what the pool adds.

The standard pool has neither priorities nor rate limits: its HIGH task would wait for the
whole backlog, 100 s at this rate, so only ours takes part.
"""

from __future__ import annotations

import bisect
import itertools
import random
import statistics
import threading
import time
from typing import Optional

from contenders import CONTENDERS, OURS, TIMEOUT, Contender, ReadingClock, gc_paused
from harness import Case, Config, Metric, Target
from priority_executor import Priority, PriorityThreadPoolExecutor, RateLimit

NAME = "urgent-rate"
SUMMARY = "RateLimit(100, per=1.0), 10k LOW queued: lag of a HIGH task behind the next slot"

WORKERS = 4
LIMIT = RateLimit(100, per=1.0)
LOW_TASKS = 10_000
SAMPLES = 5  # about one window each
QUICK_SAMPLES = 2
SEED = 13
LOW = -1  # the tag of a LOW task's start; a HIGH one's is its sample number

#: One stream of draws for the whole run: reproducible, and different moments in each trial.
_draws = random.Random(SEED)

LAG = Metric(
    "lag_ms", "lag of HIGH behind the next slot after its submit, median of samples", "ms", "lower"
)
LAG_MAX = Metric(
    "lag_max_ms",
    "lag of HIGH behind the next slot after its submit, max of samples",
    "ms",
    "lower",
    Target("≤ 2 ms (rate-precision's p99)", lambda median, ratio: median <= 2.0),
)
PASSED = Metric(
    "passed",
    "LOW starts between a HIGH submit and its start, all samples",
    "starts",
    "lower",
    Target("0", lambda median, ratio: median == 0),
)


Record = tuple[float, float, int]  # (decision, start, tag)


def analyse(records: list[Record], submitted: list[float], limit: RateLimit) -> dict[str, float]:
    """Lag, LOW tasks passing, and wait of each HIGH task; see the module docstring."""
    ordered = sorted(records)
    decided = [d for d, _, _ in ordered]
    where = {tag: i for i, (_, _, tag) in enumerate(ordered) if tag != LOW}
    lags, decision_lags, waits, passed = [], [], [], 0
    for sample, submit in enumerate(submitted):
        high = where[sample]
        first = bisect.bisect_right(decided, submit)
        slot = decided[first - limit.starts] + limit.per if first >= limit.starts else submit
        due = max(submit, slot)
        started = ordered[high][1]
        lags.append((started - due) * 1e3)
        decision_lags.append((decided[high] - due) * 1e3)
        waits.append((started - submit) * 1e3)
        passed += high - first
    return {
        "lag_ms": statistics.median(lags),
        "lag_max_ms": max(lags),
        "lag_min_ms": min(lags),
        "decision_lag_max_ms": max(decision_lags),
        "passed": passed,
        "wait_ms": statistics.median(waits),
        "samples": len(submitted),
        "starts": len(records),
    }


def trial(contender: Contender, samples: int) -> dict[str, float]:
    records: list[Record] = []
    submitted: list[float] = []
    unattributed: list[int] = []
    count = itertools.count(1).__next__
    first_burst = threading.Event()
    clock = ReadingClock()

    def record(tag: int) -> None:
        started = time.monotonic()
        decided: Optional[float] = clock.take()
        if decided is None:
            unattributed.append(tag)
        else:
            records.append((decided, started, tag))  # list.append is atomic

    def low() -> None:
        record(LOW)
        if count() == LIMIT.starts:
            first_burst.set()

    pool = PriorityThreadPoolExecutor(WORKERS, clock=clock, rate_limit=LIMIT)
    try:
        pool.pause()  # so that the whole backlog is queued before the first start
        with gc_paused():
            for _ in range(LOW_TASKS):
                pool.submit(low, priority=Priority.LOW)
        pool.resume()
        if not first_burst.wait(TIMEOUT):
            raise RuntimeError("the first LOW tasks never started")
        for sample in range(samples):
            started = threading.Event()

            def high(sample: int = sample, started: threading.Event = started) -> None:
                record(sample)
                started.set()

            time.sleep(_draws.uniform(0.0, LIMIT.per))  # pacing, not synchronisation
            submitted.append(time.monotonic())
            pool.submit(high, priority=Priority.HIGH)
            if not started.wait(TIMEOUT):
                raise RuntimeError(f"HIGH task {sample} never started")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if unattributed:
        raise RuntimeError(
            f"{len(unattributed)} tasks started with no clock reading by their worker since "
            "the last task: the pool's start times cannot be told (see ReadingClock)"
        )
    return analyse(records, submitted, LIMIT)


def cases(config: Config) -> list[Case]:
    samples = QUICK_SAMPLES if config.quick else SAMPLES
    notes = ["stdlib has no priorities and no rate limit: only ours takes part"]
    if config.quick:
        notes.append(f"quick mode: {samples} samples per trial instead of {SAMPLES}")
    return [
        Case(
            NAME,
            f"urgent under RateLimit({LIMIT.starts}, per={LIMIT.per}), "
            f"{LOW_TASKS // 1000}k LOW queued, {WORKERS} workers, {samples} samples",
            [LAG, LAG_MAX, PASSED],
            lambda c: trial(c, samples),
            [c for c in CONTENDERS if c.key == OURS],
            {
                "starts": LIMIT.starts,
                "per_s": LIMIT.per,
                "low_tasks": LOW_TASKS,
                "workers": WORKERS,
                "samples": samples,
                "seed": SEED,
            },
            notes,
            warmup=lambda c: trial(c, 1),
        )
    ]
