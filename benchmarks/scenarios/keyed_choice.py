"""Keyed choice: the cost of one start while 999 of 1,000 keys are at their limit, N queued.

The pool is ``PriorityThreadPoolExecutor(max_workers=1000, key_limit=1)``. Keys 0 to 998 each
have one task running for the whole trial (a gate task blocked on an event), so every one of
them is at its limit, and a backlog of N tasks (N = 1e3, 1e4, 1e5) spread over them round
robin is held back. The 1,000th key, ``FREE_KEY``, feeds the one idle worker the no-op tasks
that are timed. The held tasks are queued at HIGH and the free ones at LOW: every task that
starts ranks below every held one, so a pool that found the next task by passing over the
held ones would pay O(N) per start, and this would show it. With ``key_limit=1`` the free key
itself is at its limit whenever its task runs, so each start also closes and reopens a key.

One round, as in backlog-scaling, with the free worker held by a gate task of the free key:
submit ``PERIOD`` no-ops of the free key and a new gate behind them (untimed), then time from
opening the gate in front until the worker is held by the new one, which is the moment the
``PERIOD`` no-ops in between have run (choice, key bookkeeping, run, result). µs per start =
that time ÷ ``PERIOD``. While it is measured about N + ``PERIOD`` tasks are queued, N of
them held.

The baseline, *no keys*, is the same pool without ``key_limit``, set up alike: 999 workers
blocked on the same kind of gate, the same N tasks queued, the same ``PERIOD`` starts timed on
the one idle worker. Its backlog is queued at LOW and its timed tasks at HIGH, so the backlog
never runs and no task is passed over: what one start costs with N queued when nothing is held
back. Keyed ÷ no keys is what the keys cost (target: within 2x); keyed at 1e5 ÷ keyed at 1e3
says whether that cost grows with the backlog (target: flat, taken as ≤ 1.5 as in
backlog-scaling).

Both pools live through the whole trial (2,000 threads, nearly all blocked) and grow their
backlog size by size; their rounds alternate, the first of each pair flipping every round, so
a drift of the machine lands on both, and the ratios are paired within the trial. Each size
is checked before and after its rounds through ``statistics()``: the keyed pool must hold the
whole backlog back (``held_by_key``) and the plain one must still have it queued, or the
numbers would not mean what the table says. The cyclic garbage collector is off for the
trial, as in backlog-scaling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Optional

from contenders import CONTENDERS, OURS, Gate, gc_paused, noop
from harness import Case, Config, Metric, Target
from priority_executor import Priority, PriorityThreadPoolExecutor

NAME = "keyed-choice"
SUMMARY = "µs per start with 1e3 .. 1e5 queued, 999 of 1,000 keys at key_limit, vs no keys"

HELD_KEYS = 999
FREE_KEY = HELD_KEYS  # the 1,000th key: keys are 0 .. 999
WORKERS = HELD_KEYS + 1  # one worker per held key, and one for the free key
PERIOD = 250
SIZES = (1_000, 10_000, 100_000)
ROUNDS = 20
QUICK_ROUNDS = 6


def _label(size: int) -> str:
    return f"1e{len(str(size)) - 1}"


class _Bench:
    """One pool of the trial: its occupied workers, its backlog and its one free worker."""

    def __init__(self, keyed: bool) -> None:
        self.keyed = keyed
        self.pool = PriorityThreadPoolExecutor(WORKERS, key_limit=1 if keyed else None)
        self.holders: list[Gate] = []
        self.gate: Optional[Gate] = None
        self.backlog = 0
        self.backlog_submits: list[Callable[[Callable[[], None]], object]] = []
        self.free: Executor = self.pool

    def start(self) -> None:
        """Occupy 999 workers (one per held key when keyed), then hold the free worker."""
        pool = self.pool
        if self.keyed:
            for key in range(HELD_KEYS):
                view = pool.options(key=key, priority=Priority.HIGH)
                self.holders.append(Gate.close(view, 1))
                self.backlog_submits.append(view.submit)
            self.free = pool.options(key=FREE_KEY, priority=Priority.LOW)
        else:
            self.holders.append(Gate.close(pool, HELD_KEYS))
            self.backlog_submits.append(pool.options(priority=Priority.LOW).submit)
            self.free = pool.options(priority=Priority.HIGH)
        self.gate = Gate.close(self.free, 1)

    def grow(self, size: int) -> None:
        """Queue backlog tasks until ``size`` are queued, spread over the held keys."""
        submits = self.backlog_submits
        for i in range(self.backlog, size):
            submits[i % len(submits)](noop)
        self.backlog = size

    def check(self, size: int) -> None:
        """Raise unless the whole backlog is still queued, and held back when keyed."""
        stats = self.pool.statistics()
        waiting = stats.held_by_key if self.keyed else stats.queued
        if waiting < size:
            what = "held back by their keys" if self.keyed else "queued"
            raise RuntimeError(f"only {waiting} of the {size} backlog tasks are {what}")

    def round(self) -> float:
        """Seconds for ``PERIOD`` starts of free no-ops; see the module docstring."""
        submit = self.free.submit
        for _ in range(PERIOD):
            submit(noop)
        front, behind = self.gate, Gate(1)
        assert front is not None
        behind.submit_to(self.free)
        self.gate = behind
        started = time.perf_counter()
        front.release()
        behind.wait_held()
        return time.perf_counter() - started

    def close(self) -> None:
        for gate in (*self.holders, self.gate):
            if gate is not None:
                gate.release()
        self.pool.shutdown(wait=True, cancel_futures=True)


def trial(sizes: tuple[int, ...], rounds: int) -> dict[str, float]:
    values: dict[str, float] = {}
    with gc_paused():  # until both backlogs are gone, so no collection traverses them
        benches: list[_Bench] = []
        try:
            for keyed in (True, False):
                benches.append(_Bench(keyed))
                benches[-1].start()
            for size in sizes:
                seconds = {True: 0.0, False: 0.0}
                for bench in benches:
                    bench.grow(size)
                    bench.check(size)
                for r in range(rounds):
                    for bench in benches if r % 2 == 0 else reversed(benches):
                        seconds[bench.keyed] += bench.round()
                for bench in benches:
                    bench.check(size)
                starts = rounds * PERIOD
                keyed_us, plain_us = seconds[True] / starts * 1e6, seconds[False] / starts * 1e6
                label = _label(size)
                values[f"keyed_us_at_{label}"] = keyed_us
                values[f"plain_us_at_{label}"] = plain_us
                values[f"ratio_at_{label}"] = keyed_us / plain_us
        finally:
            for bench in benches:
                bench.close()
            del benches
    first, last = _label(sizes[0]), _label(sizes[-1])
    values["scaling"] = values[f"keyed_us_at_{last}"] / values[f"keyed_us_at_{first}"]
    values["plain_scaling"] = values[f"plain_us_at_{last}"] / values[f"plain_us_at_{first}"]
    return values


def cases(config: Config) -> list[Case]:
    rounds = QUICK_ROUNDS if config.quick else ROUNDS
    metrics: list[Metric] = []
    for size in SIZES:
        label = _label(size)
        metrics.append(
            Metric(
                f"keyed_us_at_{label}",
                f"µs per start, 999 keys held, {label} queued",
                "µs",
                "lower",
            )
        )
    for size in SIZES:
        label = _label(size)
        metrics.append(
            Metric(f"plain_us_at_{label}", f"µs per start, no keys, {label} queued", "µs", "lower")
        )
    for size in SIZES:
        label = _label(size)
        metrics.append(
            Metric(
                f"ratio_at_{label}",
                f"keyed ÷ no keys, {label} queued (same trial)",
                "x",
                "lower",
                Target("≤ 2", lambda median, ratio: median <= 2.0),
            )
        )
    first, last = _label(SIZES[0]), _label(SIZES[-1])
    metrics.append(
        Metric(
            "scaling",
            f"keyed at {last} ÷ keyed at {first} (same trial)",
            "x",
            "lower",
            Target("≤ 1.5 (flat)", lambda median, ratio: median <= 1.5),
        )
    )
    notes = [f"quick mode: {rounds} rounds instead of {ROUNDS}"] if config.quick else []
    return [
        Case(
            NAME,
            f"keyed choice, key_limit=1, {HELD_KEYS} of {HELD_KEYS + 1:,} keys held, "
            f"{rounds} x {PERIOD} timed starts per size",
            metrics,
            lambda c: trial(SIZES, rounds),
            [c for c in CONTENDERS if c.key == OURS],
            {
                "sizes": list(SIZES),
                "rounds": rounds,
                "period": PERIOD,
                "workers": WORKERS,
                "held_keys": HELD_KEYS,
                "key_limit": 1,
            },
            notes,
            warmup=lambda c: trial(SIZES[:1], 2),
        )
    ]
