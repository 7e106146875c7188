"""Idle: the CPU an idle pool burns, with 32 workers started and nothing to do.

All 32 workers are started (by holding 32 tasks at once) and let go idle; after a short
settling pause the process's CPU time (``time.process_time()``, every thread of the process)
is read across a sleep of the main thread. The result is a percentage of one core. Only this
process is counted, so other programs on the machine do not disturb it.
"""

from __future__ import annotations

import time

from contenders import CONTENDERS, Contender, start_workers
from harness import Case, Config, Metric, Target

NAME = "idle"
SUMMARY = "CPU used by an idle pool with 32 started workers"

WORKERS = 32
WINDOW = 2.0
QUICK_WINDOW = 0.5
SETTLE = 0.1

CPU = Metric(
    "cpu_percent",
    "CPU of one core while idle",
    "%",
    "lower",
    Target("< 1 %", lambda median, ratio: median < 1.0),
    paired_ratio=False,  # every pool should be near zero; a ratio of noise means nothing
)


def trial(contender: Contender, window: float) -> dict[str, float]:
    pool = contender.make(WORKERS)
    try:
        start_workers(pool, WORKERS)
        time.sleep(SETTLE)
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        time.sleep(window)
        cpu_after, wall_after = time.process_time(), time.perf_counter()
    finally:
        pool.shutdown(wait=True)
    return {"cpu_percent": (cpu_after - cpu_before) / (wall_after - wall_before) * 100}


def cases(config: Config) -> list[Case]:
    window = QUICK_WINDOW if config.quick else WINDOW
    notes = [f"quick mode: measured over {window} s instead of {WINDOW} s"] if config.quick else []
    return [
        Case(
            NAME,
            f"idle, {WORKERS} workers, {window} s",
            [CPU],
            lambda c: trial(c, window),
            CONTENDERS,
            {"workers": WORKERS, "window_s": window, "settle_s": SETTLE},
            notes,
            warmup=lambda c: trial(c, 0.1),
        )
    ]
