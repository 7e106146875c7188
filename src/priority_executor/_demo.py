"""``python -m priority_executor demo``: the same mixed workload on two pools, side by side.

The workload is a service with a few worker threads. Once a period a background job dumps a
flood of LOW jobs, enough to keep most workers busy for most of the period; one LOW job in
``DEADLINE_EVERY`` is worth doing only if it starts within a queue deadline. Meanwhile another
producer thread submits a HIGH interactive request every few milliseconds. Every job is
IO-like (a short sleep), so the result does not depend on the number of cores.

``ThreadPoolExecutor`` runs jobs in arrival order, so a HIGH request waits behind the flood
ahead of it. It has no deadlines: the demo emulates them as a user would, by skipping a job
found late when a worker picks it up. ``PriorityThreadPoolExecutor`` gets the same jobs with
``priority`` and ``timeout``.

Each pool gets half the budget, cut into whole periods so the last flood drains in time. After
at most ``SETTLE`` seconds more, whatever is still queued is cancelled and reported as dropped.
Times are ``time.perf_counter()`` readings: wait is submit to start, run is submit to done;
jobs that expired or were dropped count in neither.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Protocol, TextIO

from ._distribution import Distribution
from ._executor import PriorityThreadPoolExecutor
from ._policy import Priority
from ._recording import PriorityClass
from ._stats import ExecutorStatistics

#: A HIGH request arrives this often, in seconds, and takes this long (uniform, seconds).
HIGH_INTERVAL = 0.005
HIGH_WORK = (0.001, 0.003)
#: A LOW job takes this long (uniform, seconds).
LOW_WORK = (0.002, 0.008)
#: A flood of LOW jobs arrives about this often (seconds; the budget holds whole periods)...
BURST_PERIOD = 1.0
#: ...sized so that, with the HIGH requests, the workers are busy this share of the time.
BUSY_SHARE = 0.8
#: One LOW job in this many has a queue deadline of this share of the burst period.
DEADLINE_EVERY = 4
DEADLINE_SHARE = 0.25
#: After the last submission, how long the jobs in flight may take to finish, in seconds.
SETTLE = 0.1
#: How often the live progress line is redrawn, in seconds.
PROGRESS_INTERVAL = 0.1

CLASSES = ("HIGH", "LOW", "LOW+deadline")
POOLS = ("ThreadPoolExecutor", "PriorityThreadPoolExecutor")
Stats = dict[str, Any]


class Settled(Protocol):
    """A job's future, a thread pool's or an event loop's: all the summary asks of it."""

    def cancelled(self) -> bool: ...


class Job:
    """One submitted job and what happened to it. Each field has one writer at a time."""

    __slots__ = ("deadline", "done", "expired", "future", "kind", "started", "submitted", "work")

    def __init__(self, kind: str, work: float, deadline: Optional[float]) -> None:
        self.kind = kind
        self.work = work
        self.deadline = deadline
        self.submitted = 0.0
        self.started: Optional[float] = None
        self.done: Optional[float] = None
        self.expired = False
        self.future: Optional[Settled] = None


def _run(job: Job, emulate_deadline: bool) -> None:
    job.started = now = time.perf_counter()
    if emulate_deadline and job.deadline is not None and now - job.submitted >= job.deadline:
        job.expired = True  # what a user of the standard pool would do: check, then skip
        return
    time.sleep(job.work)


class Plan:
    """The workload of one phase, shared by the thread and the asyncio demos."""

    def __init__(self, workers: int, seconds: float) -> None:
        cfg = workload(workers, seconds)
        self.period: float = cfg["burst_period_s"]
        self.bursts: int = cfg["bursts"]
        self.burst: int = cfg["burst_jobs"]
        self.deadline: float = cfg["deadline_ms"] / 1000

    def high_jobs(self) -> Iterator[Job]:
        """The HIGH requests, one every HIGH_INTERVAL, for as long as the caller takes them."""
        rng = random.Random(1)  # the same requests in both phases
        while True:
            yield Job("HIGH", rng.uniform(*HIGH_WORK), None)

    def low_bursts(self) -> Iterator[tuple[float, list[Job]]]:
        """Each LOW burst: when it is due (seconds from the start) and its jobs."""
        rng = random.Random(2)
        count = 0
        for index in range(self.bursts):
            jobs = []
            for _ in range(self.burst):
                count += 1
                late = count % DEADLINE_EVERY == 0
                kind, deadline = ("LOW+deadline", self.deadline) if late else ("LOW", None)
                jobs.append(Job(kind, rng.uniform(*LOW_WORK), deadline))
            yield index * self.period, jobs


class Phase:
    """One pool under the workload: two producer threads, then a short settle."""

    def __init__(self, pool: ThreadPoolExecutor, workers: int, seconds: float) -> None:
        self.pool = pool
        self.name = type(pool).__name__
        self.seconds = seconds
        self.stop = threading.Event()
        self.jobs: list[Job] = []  # appended by both producers, read once they have exited
        self.cond = threading.Condition()  # guards jobs, submitted and finished
        self.submitted = 0
        self.finished = 0
        self.plan = Plan(workers, seconds)

    def submit(self, job: Job) -> None:
        with self.cond:
            self.jobs.append(job)
            self.submitted += 1
        job.submitted = time.perf_counter()
        if isinstance(self.pool, PriorityThreadPoolExecutor):
            level = Priority.HIGH if job.kind == "HIGH" else Priority.LOW
            future = self.pool.submit(_run, job, False, priority=level, timeout=job.deadline)
        else:
            future = self.pool.submit(_run, job, True)
        job.future = future
        future.add_done_callback(lambda _: self._finish(job))

    def _finish(self, job: Job) -> None:
        job.done = time.perf_counter()
        with self.cond:
            self.finished += 1
            if self.finished == self.submitted:
                self.cond.notify_all()

    def _produce_high(self) -> None:
        next_at = time.perf_counter()
        for job in self.plan.high_jobs():
            if self.stop.wait(max(0.0, next_at - time.perf_counter())):
                return
            self.submit(job)
            next_at += HIGH_INTERVAL

    def _produce_low(self) -> None:
        start = time.perf_counter()
        for at, jobs in self.plan.low_bursts():
            if self.stop.wait(max(0.0, start + at - time.perf_counter())):
                return
            for job in jobs:
                self.submit(job)

    def run(self, progress: Optional[Callable[[str], None]]) -> Stats:
        """Load the pool, let it settle, shut it down; every thread started here is joined."""
        start = time.perf_counter()
        producers = [
            threading.Thread(target=self._produce_low, name="demo-low-producer"),
            threading.Thread(target=self._produce_high, name="demo-high-producer"),
        ]
        try:
            try:
                for thread in producers:
                    thread.start()
                self._wait(start, start + self.seconds, "load", progress)
            finally:
                self.stop.set()
                for thread in producers:
                    if thread.ident is not None:
                        thread.join()
            self._wait(start, time.perf_counter() + SETTLE, "settle", progress)
        finally:
            stopped = time.perf_counter()
            self.pool.shutdown(wait=True, cancel_futures=True)
        result = summarise(self.jobs, stopped, time.perf_counter() - start)
        if isinstance(self.pool, PriorityThreadPoolExecutor):
            result["statistics"] = recorded(self.pool.statistics())
        return result

    def _wait(
        self, start: float, end: float, step: str, progress: Optional[Callable[[str], None]]
    ) -> None:
        """Wait until ``end`` (or, settling, until every job is done), redrawing the progress."""
        while (now := time.perf_counter()) < end:
            with self.cond:
                submitted, finished = self.submitted, self.finished
            if progress is not None:
                progress(
                    f"{self.name:<26} {step:<6} {now - start:5.1f}/{self.seconds:.1f} s"
                    f"  submitted {submitted:>6}  finished {finished:>6}"
                )
            if step != "settle":
                time.sleep(min(PROGRESS_INTERVAL, end - now))
                continue
            with self.cond:
                if self.cond.wait_for(
                    lambda: self.finished == self.submitted, min(PROGRESS_INTERVAL, end - now)
                ):
                    return


def summarise(jobs: list[Job], stopped: float, elapsed: float) -> Stats:
    """Per class (and "all"): count that ran, percentiles, expired, dropped, tasks/s."""
    groups: dict[str, list[Job]] = {kind: [] for kind in CLASSES}
    for job in jobs:
        groups[job.kind].append(job)
    groups["all"] = jobs
    result: Stats = {}
    for kind, members in groups.items():
        ran, expired, dropped = [], 0, 0
        for job in members:
            assert job.future is not None  # set by submit()
            assert job.done is not None  # every future is done after shutdown
            if job.expired or (job.future.cancelled() and job.done < stopped):
                expired += 1  # expired by the pool (ours) or skipped at start (emulated)
            elif job.future.cancelled():
                dropped += 1
            else:
                ran.append(job)
        waits = sorted(j.started - j.submitted for j in ran if j.started is not None)
        runs = sorted(j.done - j.submitted for j in ran if j.done is not None)
        result[kind] = {
            "submitted": len(members),
            "count": len(ran),
            "wait_ms": {"p50": _percentile(waits, 0.50), "p99": _percentile(waits, 0.99)},
            "run_ms": {"p50": _percentile(runs, 0.50), "p99": _percentile(runs, 0.99)},
            "expired": expired,
            "dropped": dropped,
            "tasks_per_s": round(len(ran) / elapsed, 1),
        }
    return {"elapsed_s": round(elapsed, 3), "classes": result}


def recorded(stats: ExecutorStatistics) -> Stats:
    """What the pool recorded itself, by priority class: waits, run times, outcomes (ms)."""

    def figures(distribution: Distribution) -> Stats:
        return {
            "count": distribution.count,
            **{
                name: None if value is None else round(value * 1000, 3)
                for name, value in (
                    ("mean", distribution.mean),
                    ("p50", distribution.p50),
                    ("p90", distribution.p90),
                    ("p99", distribution.p99),
                    ("max", distribution.max),
                )
            },
        }

    def name(key: PriorityClass) -> str:
        if isinstance(key, int) and key in {member.value for member in Priority}:
            return Priority(key).name
        return str(key)

    return {
        name(key): {
            "wait_ms": figures(stats.wait[key]) if key in stats.wait else None,
            "run_ms": figures(stats.run[key]) if key in stats.run else None,
            "outcomes": dict(stats.outcomes[key]),
        }
        for key in sorted(stats.outcomes, key=_highest_first)
    }


def _highest_first(key: PriorityClass) -> tuple[bool, float]:
    """The order of priority classes: highest priority first, the shared class last."""
    return (isinstance(key, str), 0.0 if isinstance(key, str) else -float(key))


def _percentile(sorted_seconds: list[float], q: float) -> Optional[float]:
    """Nearest-rank percentile, in milliseconds; None for no values."""
    if not sorted_seconds:
        return None
    rank = max(0, min(len(sorted_seconds) - 1, int(q * len(sorted_seconds) + 0.5) - 1))
    return round(sorted_seconds[rank] * 1000, 3)


def workload(workers: int, seconds: float) -> Stats:
    """The workload for one pool given ``seconds`` of its own, as plain numbers."""
    bursts = max(1, round(seconds / BURST_PERIOD))
    period = seconds / bursts
    high_busy = sum(HIGH_WORK) / 2 / HIGH_INTERVAL  # workers kept busy by HIGH requests
    low_busy = max(0.1 * workers, BUSY_SHARE * workers - high_busy)
    return {
        "workers": workers,
        "seconds_per_pool": seconds,
        "high_interval_ms": HIGH_INTERVAL * 1000,
        "bursts": bursts,
        "burst_period_s": round(period, 6),
        "burst_jobs": max(1, round(low_busy * period / (sum(LOW_WORK) / 2))),
        "deadline_every": DEADLINE_EVERY,
        "deadline_ms": round(DEADLINE_SHARE * period * 1000, 3),
    }


def run_demo(workers: int, seconds: float, progress: Optional[TextIO] = None) -> Stats:
    """Run the workload on both pools, ``seconds / 2`` each; return the results as plain data.

    Blocks for about ``seconds``; every thread it starts has exited when it returns. With
    ``progress``, a live status line is drawn on it and erased at the end.
    """

    def both(draw: Optional[ProgressLine]) -> dict[str, Stats]:
        return {
            make.__name__: Phase(make(workers), workers, seconds / 2).run(draw)
            for make in (ThreadPoolExecutor, PriorityThreadPoolExecutor)
        }

    deadlines = (
        "emulated: skipped if late when a worker starts it",
        "enforced by the pool: cancelled while queued",
    )
    return side_by_side(workload(workers, seconds / 2), both, deadlines, progress)


def side_by_side(
    work: Stats,
    both: Callable[[Optional[ProgressLine]], dict[str, Stats]],
    deadlines: tuple[str, str],
    progress: Optional[TextIO],
) -> Stats:
    """Run ``both`` phases (the baseline's, then ours), drawing progress; the results.

    ``deadlines`` says how each phase keeps queue deadlines. The conclusion compares the
    HIGH requests' p99 wait.
    """
    draw = None if progress is None else ProgressLine(progress)
    try:
        pools = both(draw)
    finally:
        if draw is not None:
            draw("")
    for name, how in zip(pools, deadlines, strict=True):
        pools[name]["deadlines"] = how
    before, after = (data["classes"]["HIGH"]["wait_ms"]["p99"] for data in pools.values())
    return {
        "workload": work,
        "pools": pools,
        "conclusion": f"HIGH p99 wait: {ms(before)} -> {ms(after)}",
    }


class ProgressLine:
    """Redraws one terminal line in place."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.width = 0

    def __call__(self, text: str) -> None:
        self.out.write("\r" + text.ljust(self.width) + ("\r" if not text else ""))
        self.out.flush()
        self.width = len(text)


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as text columns: the first left-aligned, the others right; one-cell rows as is."""
    widths = [max(len(row[i]) for row in rows if len(row) > 1) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row))
        for row in rows
    ]


def ms(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} ms"


def format_report(results: Stats) -> str:
    """The results as an aligned table, one section per pool, and a one-line conclusion."""
    w = results["workload"]
    baseline, ours = list(results["pools"])
    head = ("class", "count", "wait p50", "wait p99", "run p50", "run p99", "expired", "dropped")
    rows: list[tuple[str, ...]] = [(*head, "tasks/s")]
    for pool, data in results["pools"].items():
        rows.append((pool,))
        for kind, c in data["classes"].items():
            emulated = pool == baseline and kind == CLASSES[2]
            rows.append(
                (
                    "  " + kind,
                    str(c["count"]),
                    *(ms(c[m][p]) for m in ("wait_ms", "run_ms") for p in ("p50", "p99")),
                    f"{c['expired']}{'*' if emulated else ''}",
                    str(c["dropped"]),
                    f"{c['tasks_per_s']:.0f}",
                )
            )
    table = _aligned(rows)
    recorded_rows: list[tuple[str, ...]] = [
        ("priority", "started", "wait p50", "wait p90", "wait p99", "task p50", "outcomes")
    ]
    for level, figures in results["pools"][ours].get("statistics", {}).items():
        wait, task = figures["wait_ms"] or {}, figures["run_ms"] or {}
        outcomes = ", ".join(f"{n} {k}" for k, n in figures["outcomes"].items() if n)
        recorded_rows.append(
            (
                "  " + level,
                str(wait.get("count", 0)),
                *(ms(wait.get(p)) for p in ("p50", "p90", "p99")),
                ms(task.get("p50")),
                outcomes,
            )
        )
    recorded = (
        [
            "",
            f"{ours}.statistics(), as the pool recorded it by priority:",
            *_aligned(recorded_rows),
            "task: start to done, on the pool's clock; LOW includes LOW+deadline.",
        ]
        if len(recorded_rows) > 1
        else []
    )
    return "\n".join(
        [
            f"{w['workers']} {w.get('slots', 'workers')}, {w['seconds_per_pool']:g} s per pool:"
            f" a HIGH request every"
            f" {w['high_interval_ms']:g} ms; every {w['burst_period_s']:.2g} s a flood of",
            f"{w['burst_jobs']} LOW jobs, 1 in {w['deadline_every']} with a"
            f" {w['deadline_ms']:.0f} ms queue deadline (LOW+deadline).",
            "",
            *table,
            "",
            "wait: submit to start. run: submit to done. dropped: still queued at the end.",
            f"* {baseline} has no queue deadlines: emulated by skipping a job",
            "  found late when it starts.",
            *recorded,
            "",
            f"{results['conclusion']} ({baseline} -> {ours})",
        ]
    )
