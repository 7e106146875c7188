"""Rate precision: ``RateLimit(200, per=1.0)`` on the real clock, the pool saturated throughout.

The pool (4 workers) is paused, ``200 x (duration + 1) + SPARE`` no-op tasks are queued, and
it is resumed: 200 start at once, then each further one as soon as the window lets it, until
``200 x (duration + 1)`` have started, which takes ``duration`` seconds (5 s; 2 s in quick
mode); the rest, at least ``SPARE`` (1,500) still queued, is cancelled.

Two times are kept per start. The *decision*: the pool's own reading of its clock when it let
the task start, the one its window counts (the pool's ``clock=`` is
:class:`~contenders.ReadingClock`, ``time.monotonic`` remembering its last reading per
thread, and the task picks up the one its worker made as it took the task). The *start*:
the task's own ``time.monotonic()``, its first line, a few µs to a GIL switch later. From
them, ordered by decision:

* the most decisions in any half-open window ``(t - 1, t]``, which the limit says is at most
  200. Decisions, not starts: a start read late by a GIL switch, followed by one read
  promptly, would put 201 starts in a window without the pool breaking anything (the
  hand-written limiter below, correct by construction, shows 201 on its tasks' readings
  about every other run);
* the lag of each start behind its slot: with the queue never empty, the ``i``-th start
  (``i >= 200``) may happen once the decision ``i - 200`` is a full second old, so its slot
  is ``decision[i - 200] + 1.0`` and its lag ``start[i] - slot``: what the task sees, the
  pool's timer and the hand-over to a worker included; p50, p99 (target ≤ 2 ms) and max.
  The raw results split it: ``decision_lag_*`` (decision - slot, below zero exactly where a
  window holds 201) and ``handoff_*`` (start - decision); ``most_in_window_by_start`` counts
  the tasks' readings instead.

The standard pool has no rate limit. It is compared with what one writes by hand: the task
first calls a sliding-window limiter (:class:`SlidingWindowLimiter`: the same window under a
lock; a caller that finds it full waits out the time to the next slot, outside the lock),
which holds the worker while it waits; its decision is the limiter's reading.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Optional

from contenders import CONTENDERS, OURS, STDLIB, TIMEOUT, Contender, ReadingClock
from harness import Case, Config, Metric, Target, percentile
from priority_executor import PriorityThreadPoolExecutor, RateLimit

NAME = "rate-precision"
SUMMARY = "RateLimit(200, per=1.0), saturated, 5 s: most starts in a 1 s window, lag behind slot"

WORKERS = 4
LIMIT = RateLimit(200, per=1.0)
DURATION = 5.0  # seconds of starts after the first burst
QUICK_DURATION = 2.0
SPARE = 1_500  # tasks still queued when the run stops: the pool is saturated throughout

MOST = Metric(
    "most_in_window",
    f"most starts decided in any window (t - {LIMIT.per:g} s, t]",
    "starts",
    "lower",
    Target(f"≤ {LIMIT.starts}", lambda median, ratio: median <= LIMIT.starts),
    paired_ratio=False,
)
P50 = Metric("lag_p50_ms", "lag of a start behind its slot, p50", "ms", "lower")
P99 = Metric(
    "lag_p99_ms",
    "lag of a start behind its slot, p99",
    "ms",
    "lower",
    Target("≤ 2 ms", lambda median, ratio: median <= 2.0),
)
MAX = Metric("lag_max_ms", "lag of a start behind its slot, max", "ms", "lower")


class SlidingWindowLimiter:
    """The hand-written limiter: at most ``limit.starts`` acquisitions in any ``limit.per`` s.

    The times of the last ``starts`` acquisitions are kept, oldest first, under a lock; a
    caller finding the window full waits (outside the lock) until the oldest is ``per`` old,
    then tries again. :meth:`acquire` returns its reading of the clock that let the caller
    through; :meth:`stop` wakes every waiter, and :meth:`acquire` returns None.
    """

    def __init__(self, limit: RateLimit) -> None:
        self._limit = limit
        self._times: deque[float] = deque()
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def acquire(self) -> Optional[float]:
        starts, per = self._limit
        while not self._stopped.is_set():
            with self._lock:
                now = time.monotonic()
                times = self._times
                if len(times) < starts or times[0] <= now - per:
                    times.append(now)
                    if len(times) > starts:
                        times.popleft()
                    return now
                delay = times[0] + per - now
            self._stopped.wait(delay)
        return None

    def stop(self) -> None:
        self._stopped.set()


def _most_in_window(times: list[float], per: float) -> int:
    """The most of the sorted ``times`` in any half-open window ``(t - per, t]``."""
    most = oldest = 0
    for newest, t in enumerate(times):
        while times[oldest] <= t - per:
            oldest += 1
        most = max(most, newest - oldest + 1)
    return most


def analyse(records: list[tuple[float, float]], limit: RateLimit) -> dict[str, float]:
    """The window count and the lags of the module docstring, from (decision, start) pairs."""
    ordered = sorted(records)
    decided = [d for d, _ in ordered]
    started = [s for _, s in ordered]
    starts, per = limit
    slots = [decided[i - starts] + per for i in range(starts, len(ordered))]
    lags = [(s - slot) * 1e3 for s, slot in zip(started[starts:], slots, strict=True)]
    decision_lags = [(d - slot) * 1e3 for d, slot in zip(decided[starts:], slots, strict=True)]
    handoffs = [(s - d) * 1e3 for d, s in ordered]
    return {
        "most_in_window": _most_in_window(decided, per),
        "lag_p50_ms": percentile(lags, 50),
        "lag_p99_ms": percentile(lags, 99),
        "lag_max_ms": max(lags),
        "lag_min_ms": min(lags),
        "decision_lag_p50_ms": percentile(decision_lags, 50),
        "decision_lag_p99_ms": percentile(decision_lags, 99),
        "decision_lag_min_ms": min(decision_lags),
        "handoff_p50_ms": percentile(handoffs, 50),
        "handoff_p99_ms": percentile(handoffs, 99),
        "handoff_max_ms": max(handoffs),
        "most_in_window_by_start": _most_in_window(sorted(started), per),
        "starts": len(ordered),
        "lagged_starts": len(lags),
        "seconds": decided[-1] - decided[0],
    }


def trial(contender: Contender, duration: float) -> dict[str, float]:
    stop_after = math.ceil(LIMIT.starts * (duration + 1))
    tasks = stop_after + SPARE
    records: list[tuple[float, float]] = []  # (decision, start)
    count = itertools.count(1).__next__
    enough = threading.Event()
    unattributed: list[float] = []

    def record(decided: Optional[float], started: float) -> None:
        if decided is None:
            unattributed.append(started)
        else:
            records.append((decided, started))  # list.append is atomic
        if count() == stop_after:
            enough.set()

    pool: Executor
    if contender.key == OURS:
        clock = ReadingClock()

        def work() -> None:
            started = time.monotonic()
            record(clock.take(), started)

        pool = PriorityThreadPoolExecutor(WORKERS, clock=clock, rate_limit=LIMIT)
        try:
            pool.pause()  # so that every task is queued before the first start
            for _ in range(tasks):
                pool.submit(work)
            pool.resume()
            if not enough.wait(duration + TIMEOUT):
                raise RuntimeError(f"only {len(records)} of {stop_after} tasks started")
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    else:
        limiter = SlidingWindowLimiter(LIMIT)

        def limited() -> None:
            decided = limiter.acquire()
            if decided is not None:
                record(decided, time.monotonic())

        pool = ThreadPoolExecutor(WORKERS)
        try:
            for _ in range(tasks):
                pool.submit(limited)
            if not enough.wait(duration + TIMEOUT):
                raise RuntimeError(f"only {len(records)} of {stop_after} tasks started")
        finally:
            limiter.stop()
            pool.shutdown(wait=True, cancel_futures=True)
    if unattributed:
        raise RuntimeError(
            f"{len(unattributed)} tasks started with no clock reading by their worker since "
            "the last task: the pool's start times cannot be told (see ReadingClock)"
        )
    return analyse(records, LIMIT)


def cases(config: Config) -> list[Case]:
    duration = QUICK_DURATION if config.quick else DURATION
    notes = [
        "stdlib has no rate limit: each task first waits on a hand-written sliding-window "
        "limiter (benchmarks/scenarios/rate_precision.py), holding its worker meanwhile"
    ]
    if config.quick:
        notes.append(f"quick mode: {duration:g} s of starts instead of {DURATION:g} s")
    return [
        Case(
            NAME,
            f"rate precision, RateLimit({LIMIT.starts}, per={LIMIT.per}), {duration:g} s, "
            f"{WORKERS} workers",
            [MOST, P50, P99, MAX],
            lambda c: trial(c, duration),
            [c for c in CONTENDERS if c.key in (STDLIB, OURS)],
            {
                "starts": LIMIT.starts,
                "per_s": LIMIT.per,
                "duration_s": duration,
                "workers": WORKERS,
                "spare": SPARE,
            },
            notes,
            warmup=lambda c: trial(c, 1.0),
        )
    ]
