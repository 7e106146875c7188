"""Expiry: how late a queued task's future becomes done after its queue deadline passes.

One worker is kept busy for 0.5 s; meanwhile 1k tasks are submitted with a 50 ms queue
timeout. None can start before its deadline, so each should be cancelled at its deadline.
Lateness = the moment the future becomes done (a done-callback reads ``time.monotonic()``)
minus its deadline (``time.monotonic()`` read just before ``submit`` plus 50 ms, which is at
most the pool's own deadline, so lateness is if anything overstated by a few µs).

The standard pool has no queue deadlines. It is emulated the way one does it by hand: the task
checks its deadline when a worker starts it and raises instead of running. The baseline checks
at dequeue too. Both therefore finish their expired futures only when the busy worker frees up.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import Any

from contenders import CONTENDERS, TIMEOUT, Contender, noop, start_workers
from harness import Case, Config, Metric, Target, percentile
from priority_executor import Priority

NAME = "expiry"
SUMMARY = "1k tasks with a 50 ms queue timeout behind a worker busy for 0.5 s: lateness"

TASKS = 1_000
QUEUE_TIMEOUT = 0.050
BUSY = 0.5

P50 = Metric("p50_ms", "lateness p50", "ms", "lower")
P99 = Metric(
    "p99_ms",
    "lateness p99",
    "ms",
    "lower",
    Target("p99 ≤ 5 ms", lambda median, ratio: median <= 5.0),
)


class ExpiredInQueue(Exception):
    """Raised by the emulated deadline check of the standard pool."""


def _expire_at_start(deadline: float) -> None:
    if time.monotonic() >= deadline:
        raise ExpiredInQueue


def _record(done_at: list[float], i: int, _future: Future[Any]) -> None:
    done_at[i] = time.monotonic()


def trial(contender: Contender, tasks: int, busy_seconds: float) -> dict[str, float]:
    pool = contender.make(1)
    try:
        start_workers(pool, 1)
        busy = pool.submit(time.sleep, busy_seconds)
        while not busy.running():  # wait until the worker has taken it; a few µs
            time.sleep(0.0005)
        deadlines = [0.0] * tasks
        done_at = [0.0] * tasks
        futures = []
        for i in range(tasks):
            now = time.monotonic()
            deadlines[i] = now + QUEUE_TIMEOUT
            if contender.deadlines:
                future = contender.submit(pool, noop, Priority.NORMAL, QUEUE_TIMEOUT)
            else:
                future = pool.submit(_expire_at_start, deadlines[i])
            future.add_done_callback(functools.partial(_record, done_at, i))
            futures.append(future)
        _, pending = futures_wait(futures, TIMEOUT)
        if pending:
            raise RuntimeError(f"{len(pending)} futures never finished")
        busy.result(TIMEOUT)
    finally:
        pool.shutdown(wait=True)
    lateness = [(done - deadline) * 1e3 for done, deadline in zip(done_at, deadlines, strict=True)]
    expired = sum(1 for f in futures if f.cancelled() or isinstance(f.exception(), ExpiredInQueue))
    return {
        "p50_ms": percentile(lateness, 50),
        "p99_ms": percentile(lateness, 99),
        "max_ms": max(lateness),
        "expired": expired,
    }


def cases(config: Config) -> list[Case]:
    return [
        Case(
            NAME,
            f"expiry, {TASKS:,} tasks, timeout {QUEUE_TIMEOUT * 1e3:.0f} ms, worker busy {BUSY} s",
            [P50, P99],
            lambda c: trial(c, TASKS, BUSY),
            CONTENDERS,
            {"tasks": TASKS, "queue_timeout_s": QUEUE_TIMEOUT, "busy_s": BUSY, "workers": 1},
            [
                "stdlib has no queue deadlines: emulated by a check when the task starts, "
                "which raises; the baseline checks at dequeue"
            ],
            warmup=lambda c: trial(c, TASKS // 10, BUSY / 5),
        )
    ]
