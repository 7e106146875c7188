"""PriorityExecutor in front of other executors: ``python benchmarks/front.py [--quick] [--dask]``.

What the front buys and costs, side by side with the executor it wraps: a smaller warm-up
trial of every contender, then interleaved repetitions in an order rotated each time, medians,
and paired ratios against the executor used directly (see ``harness.py``). Every trial gets a
fresh executor. Urgent latency: 2,000 busy tasks of about 1 ms of CPU submitted at once, one
HIGH task (priority 10) right after them, and another once the first 5% have run (the front's
slots are full by then); from just before ``submit`` to the task's first line, both read with
``time.monotonic()``: on Linux ``CLOCK_MONOTONIC`` is one clock for the whole machine, so the
parent's and a worker process's readings compare. Throughput: tiny tasks, from the first
``submit`` to the last result. Both on ``ProcessPoolExecutor(4)`` and, with ``--dask``, on a
``distributed.LocalCluster`` of 2 single-thread worker processes; the front with its default
``max_running`` and with 2, 4, 8 and 64 times it. Then throughput at the sizes of the speed
targets (``ThreadPoolExecutor(4)``, 20,000 tasks; ``ProcessPoolExecutor(2)``, 5,000 tasks), and
the front's own cost per task, over an executor whose futures are done on return. Markdown
tables go to stdout, progress to stderr, raw numbers to
``benchmarks/results/<date>-py<version>-front[-dask][-quick].json``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import logging
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Optional, TypeVar

from contenders import TIMEOUT
from harness import Metric, Stats, Target, fmt, fmt_ratio, log, save
from priority_executor import PriorityExecutor
from run import HERE, MIN_REPEAT, environment

WORKERS = 4  # processes of the pool
TASK_SECONDS = 0.001  # CPU time of one backlog task
HIGH, LOW = 10, 0
DIRECT, FRONT = "direct", "front"
#: The front's contenders: max_running as a multiple of the executor's workers; the last
#: hands every task over at once, as good as no limit.
MULTIPLES = {FRONT: 1, "front-x2": 2, "front-x4": 4, "front-x8": 8, "front-x64": 64}
MULTIPLES["front-all"] = 10_000
WARM_UP = 10  # a warm-up trial is this many times smaller
SIZES = {  # urgent-latency backlog, throughput tasks (process pool, Dask), front's-cost submits
    "full": {"backlog": 2_000, "tasks": 20_000, "dask_tasks": 5_000, "noop": 100_000},
    "quick": {"backlog": 500, "tasks": 4_000, "dask_tasks": 1_000, "noop": 20_000},
}
#: The throughput targets' own executors: (what, its workers, tasks, front ÷ direct at least).
TARGETS = {
    "full": [("thread", 4, 20_000, 0.8), ("process", 2, 5_000, 0.9)],
    "quick": [("thread", 4, 4_000, 0.8), ("process", 2, 1_000, 0.9)],
}


def spin(n: int) -> float:
    """A busy loop of ``n`` steps; returns its own wall time in seconds."""
    start = time.monotonic()
    total = 0
    for i in range(n):
        total += i
    return time.monotonic() - start


def started_at() -> float:
    """The HIGH task: its first line reads the machine-wide monotonic clock."""
    return time.monotonic()


def echo(x: int) -> int:
    return x


def nap_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def nothing() -> None:
    pass


def scheduler_tasks(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


def cpu_time(n: int) -> float:
    """CPU seconds of ``spin(n)`` in this thread, which a preempting neighbour does not add to."""
    start = time.thread_time()
    spin(n)
    return time.thread_time() - start


def calibrate(seconds: float) -> int:
    """Steps of :func:`spin` whose median CPU time is ``seconds`` in this process."""
    n = 10_000
    for _ in range(3):
        n = max(1, round(n * seconds / statistics.median(cpu_time(n) for _ in range(21))))
    return n


@dataclass(frozen=True)
class Lane:
    """One contender: ``submit(fn, *args, priority=p)``, a bulk cancel, and a close that waits."""

    submit: Callable[..., Any]
    cancel: Callable[[list[Any]], None]
    close: Callable[[], None]


Trial = Callable[[Lane], dict[str, float]]


def executor_lane(executor: Executor) -> Lane:
    def plain(fn: Callable[..., Any], *args: Any, priority: int) -> Future[Any]:
        return executor.submit(fn, *args)  # no priorities: "HIGH" is one more task

    def cancel(futures: list[Any]) -> None:
        for future in futures:
            future.cancel()

    submit = executor.submit if isinstance(executor, PriorityExecutor) else plain
    return Lane(submit, cancel, lambda: executor.shutdown(wait=True))


PoolT = TypeVar("PoolT", ThreadPoolExecutor, ProcessPoolExecutor)


def warmed(pool: PoolT, workers: int) -> PoolT:
    """``pool`` with its ``workers`` started: each takes a warm-up nap (a process, its own)."""
    pids = set(pool.map(nap_pid, [0.05] * workers, timeout=TIMEOUT))
    if isinstance(pool, ProcessPoolExecutor) and len(pids) != workers:
        log(f"    warning: {len(pids)} of {workers} worker processes took a warm-up task")
    return pool


def pool_run(key: str, priorities: bool, trial: Trial) -> dict[str, float]:
    """``trial`` on a fresh process pool, all its processes started, directly or in a front."""
    pool = warmed(ProcessPoolExecutor(WORKERS), WORKERS)
    if key == DIRECT:
        return trial(executor_lane(pool))
    multiple = MULTIPLES[key]  # the default (None) is the pool's own _max_workers
    return trial(
        executor_lane(PriorityExecutor(pool, None if multiple == 1 else multiple * WORKERS))
    )


class Dask:
    """A LocalCluster of 2 worker processes with 1 thread each, and its client."""

    def __init__(self) -> None:
        distributed: Any = importlib.import_module("distributed")
        self.cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        self.client = distributed.Client(self.cluster)
        self.slots = sum(self.client.nthreads().values())

    def run(self, key: str, priorities: bool, trial: Trial) -> dict[str, float]:
        """``trial`` on ``client.submit`` (with ``priorities``), its executor, or a front."""
        client = self.client
        if key == DIRECT and priorities:
            values = trial(Lane(partial(client.submit, pure=False), client.cancel, lambda: None))
        else:
            executor = client.get_executor(pure=False)
            if key != DIRECT:
                executor = PriorityExecutor(executor, max_running=MULTIPLES[key] * self.slots)
            values = trial(executor_lane(executor))
        # The trial's futures are gone: wait until the scheduler has forgotten their tasks.
        deadline = time.monotonic() + 60.0
        while client.run_on_scheduler(scheduler_tasks):
            if time.monotonic() > deadline:
                log("    warning: the Dask scheduler still holds tasks 60 s after a trial")
                break
            time.sleep(0.01)
        return values

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


class Done(Executor):
    """Runs nothing: every future it returns is done, so the front's cost is all there is."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(None)
        return future


def latency_trial(lane: Lane, backlog: int, steps: int) -> dict[str, float]:
    low = [lane.submit(spin, steps, priority=LOW) for _ in range(backlog)]
    before = time.monotonic()
    first = lane.submit(started_at, priority=HIGH)
    durations = [future.result(timeout=TIMEOUT) for future in low[: max(1, backlog // 20)]]
    busy_before = time.monotonic()
    second = lane.submit(started_at, priority=HIGH)
    values = {
        "latency_ms": (first.result(timeout=TIMEOUT) - before) * 1e3,
        "busy_latency_ms": (second.result(timeout=TIMEOUT) - busy_before) * 1e3,
        "low_task_ms": statistics.median(durations) * 1e3,
    }
    lane.cancel(low)
    lane.close()
    return values


def throughput_trial(lane: Lane, tasks: int) -> dict[str, float]:
    start = time.perf_counter()
    futures = [lane.submit(echo, i, priority=LOW) for i in range(tasks)]
    results = [future.result(timeout=TIMEOUT) for future in futures]
    elapsed = time.perf_counter() - start
    lane.close()
    if results != list(range(tasks)):
        raise AssertionError("wrong results: not echo(i) for i in range(tasks)")
    return {"tasks_per_s": tasks / elapsed}


def executor_run(kind: str, workers: int, key: str, tasks: int) -> dict[str, float]:
    """Throughput on a fresh pool of ``kind``, its workers started, directly or in a front."""
    kinds = {"thread": ThreadPoolExecutor, "process": ProcessPoolExecutor}
    pool = warmed(kinds[kind](workers), workers)
    front = pool if key == DIRECT else PriorityExecutor(pool)  # its default max_running
    return throughput_trial(executor_lane(front), tasks)


def at_least(ratio: float) -> Target:
    """The throughput target: the front's tasks/s at least ``ratio`` times the direct one's."""
    return Target(f"≥ {ratio} x direct", lambda m, r: (r or 0) >= ratio)


def target_case(kind: str, workers: int, tasks: int, ratio: float) -> Case:
    pool = f"{'Thread' if kind == 'thread' else 'Process'}PoolExecutor({workers})"
    return Case(
        f"{pool}, throughput, {tasks:,} tiny tasks",
        {DIRECT: f"{pool} used directly", FRONT: f"PriorityExecutor({pool})"},
        lambda key, div: executor_run(kind, workers, key, tasks // div),
        [Metric("tasks_per_s", "throughput", "tasks/s", "higher", at_least(ratio))],
        {"tasks": tasks, "workers": workers, "executor": kind},
    )


def noop_trial(key: str, tasks: int) -> dict[str, float]:
    done, start = Done(), time.perf_counter()
    if key == DIRECT:
        for _ in range(tasks):
            done.submit(nothing)
        return {"us_per_task": (time.perf_counter() - start) / tasks * 1e6}
    front = PriorityExecutor(done, max_running=4)
    start = time.perf_counter()
    _, pending = wait([front.submit(nothing) for _ in range(tasks)], timeout=TIMEOUT)
    elapsed = time.perf_counter() - start
    front.shutdown()
    if pending:
        raise AssertionError(f"{len(pending)} futures not done after {TIMEOUT} s")
    return {"us_per_task": elapsed / tasks * 1e6}


@dataclass(frozen=True)
class Case:
    """One measured situation; the first contender is the reference of the paired ratios."""

    name: str
    contenders: dict[str, str]  # key: what it is
    trial: Callable[[str, int], dict[str, float]]  # (contender, size divisor)
    metrics: Sequence[Metric]  # a metric's target concerns the contender FRONT
    params: dict[str, object]


@dataclass(frozen=True)
class Backend:
    """An executor to put the front in front of, and how to run a trial on it."""

    title: str
    run: Callable[[str, bool, Trial], dict[str, float]]  # (contender, priorities, trial)
    directs: tuple[str, str]  # what "direct" is in the latency and the throughput case
    over: str  # the wrapped executor, for the front's names
    workers: int
    default: bool  # the front's first contender leaves max_running to its default
    at_least: float  # throughput target, front ÷ direct
    tasks: int


def backend_cases(backend: Backend, backlog: int, steps: int) -> list[Case]:
    """Urgent latency and throughput on ``backend``."""
    limit = TASK_SECONDS * 1e3 + 5.0  # the nominal task: the calibration's aim
    within = Target("≤ 1 task (1 ms) + 5 ms", lambda m, r: m <= limit)
    enough = at_least(backend.at_least)
    fronts = {
        key: f"PriorityExecutor({backend.over}"
        + (")" if key == FRONT and backend.default else f", max_running={m * backend.workers})")
        for key, m in MULTIPLES.items()
    }
    tasks, run = backend.tasks, backend.run
    return [
        Case(
            f"{backend.title}, urgent latency, {backlog:,} x 1 ms queued",
            {DIRECT: backend.directs[0], **fronts},
            lambda key, div: run(key, True, lambda ln: latency_trial(ln, backlog // div, steps)),
            [
                Metric("latency_ms", "HIGH right after the backlog", "ms", "lower", within),
                Metric("busy_latency_ms", "HIGH once 5% has run", "ms", "lower", within),
                Metric("low_task_ms", "1 backlog task", "ms", "lower", paired_ratio=False),
            ],
            {"backlog": backlog, "spin_steps": steps, "workers": backend.workers},
        ),
        Case(
            f"{backend.title}, throughput, {tasks:,} tiny tasks",
            {DIRECT: backend.directs[1], **fronts},
            lambda key, div: run(key, False, lambda ln: throughput_trial(ln, tasks // div)),
            [Metric("tasks_per_s", "throughput", "tasks/s", "higher", enough)],
            {"tasks": tasks, "workers": backend.workers},
        ),
    ]


def noop_case(tasks: int) -> Case:
    return Case(
        f"front's own cost, {tasks:,} submits to an executor of done futures",
        {DIRECT: "Done().submit called directly", FRONT: "PriorityExecutor(Done(), max_running=4)"},
        lambda key, div: noop_trial(key, tasks // div),
        [Metric("us_per_task", "submit → done, per task", "µs", "lower")],
        {"tasks": tasks, "max_running": 4},
    )


def paired(raw: dict[str, list[dict[str, float]]], key: str, metric: str) -> Optional[float]:
    """Median over repetitions of ``key``'s number over the reference's from the same one."""
    reference = raw[next(iter(raw))]
    ratios = [a[metric] / b[metric] for a, b in zip(raw[key], reference, strict=True) if b[metric]]
    return statistics.median(ratios) if ratios else None


def run_case(case: Case, repeat: int) -> dict[str, Any]:
    """Warm up every contender, then ``repeat`` repetitions, each in a rotated order."""
    keys = list(case.contenders)
    raw: dict[str, list[dict[str, float]]] = {key: [] for key in keys}
    record: dict[str, Any] = {"case": case.name, "params": case.params, "orders": []}
    record.update(contenders=case.contenders, raw=raw, error=None)
    started = time.perf_counter()
    log(f"[front] {case.name}")
    try:
        for key in keys:
            gc.collect()
            case.trial(key, WARM_UP)
        for r in range(repeat):
            order = keys[r % len(keys) :] + keys[: r % len(keys)]
            record["orders"].append(order)
            for key in order:
                gc.collect()
                raw[key].append(case.trial(key, 1))
            brief = ", ".join(f"{k} {fmt(raw[k][r][case.metrics[0].key])}" for k in keys)
            log(f"  rep {r + 1}/{repeat}: {brief}")
    except Exception:
        record["error"] = traceback.format_exc()
        log(record["error"])
    record["seconds"] = time.perf_counter() - started
    record["metrics"] = [{"key": m.key, "label": m.label, "unit": m.unit} for m in case.metrics]
    record["summary"] = {
        key: {
            m.key: {**vars(Stats.of(values)), "ratio_vs_direct": paired(raw, key, m.key)}
            for m in case.metrics
            if (values := [run[m.key] for run in raw[key]])
        }
        for key in keys
    }
    return record


def render(cases: Sequence[Case], records: Sequence[dict[str, Any]]) -> str:
    """A table per case: median [min, max] and paired ratio per metric; then its targets."""
    lines: list[str] = []
    for case, record in zip(cases, records, strict=True):
        lines += ["", f"**{case.name}**", ""]
        if record["error"] is not None:
            lines.append(f"failed: {record['error'].strip().splitlines()[-1]}")
            continue
        head = ["contender"]
        for m in case.metrics:
            head += [f"{m.label}, {m.unit}"] + (["÷ direct"] if m.paired_ratio else [])
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key, summary in record["summary"].items():
            cells = [case.contenders[key]]
            for m in case.metrics:
                s = summary[m.key]
                cells.append(f"{fmt(s['median'])} [{fmt(s['low'])}, {fmt(s['high'])}]")
                ratio = None if key == DIRECT else s["ratio_vs_direct"]
                cells += [("—" if ratio is None else fmt_ratio(ratio))] if m.paired_ratio else []
            lines.append("| " + " | ".join(cells) + " |")
        for m in case.metrics:
            s = record["summary"].get(FRONT, {}).get(m.key)
            if m.target is not None and s is not None:
                met = m.target.met(s["median"], s["ratio_vs_direct"])
                lines += ["", f"Target for `{case.contenders[FRONT]}`, {m.label}: {m.target.text}"]
                lines[-1] += ": met" if met else ": **not met**"
    return "\n".join(lines).strip()


def measure(
    mode: str, repeat: int, with_dask: bool
) -> tuple[list[Case], list[Any], dict[str, Any]]:
    """Calibrate the busy task, then run every case; returns them, their records, calibration."""
    sizes = SIZES[mode]
    steps = calibrate(TASK_SECONDS)
    task_ms = statistics.median(cpu_time(steps) for _ in range(51)) * 1e3
    log(f"front benchmarks, {mode}, {repeat} repetitions; 1 task = {steps:,} steps")
    pool = f"ProcessPoolExecutor({WORKERS})"
    directs = (f"{pool} used directly",) * 2
    title = f"process pool, {WORKERS} workers"
    process = Backend(title, pool_run, directs, pool, WORKERS, True, 0.9, sizes["tasks"])
    cases = backend_cases(process, sizes["backlog"], steps)
    cases += [target_case(*target) for target in TARGETS[mode]]
    cases.append(noop_case(sizes["noop"]))
    records = [run_case(case, repeat) for case in cases]
    calibration = {"spin_steps": steps, "task_cpu_ms_median": task_ms}
    if not with_dask:
        return cases, records, calibration
    try:
        dask = Dask()
    except ImportError as exc:
        log(f"--dask: skipping the Dask cases, distributed cannot be imported ({exc})")
        return cases, records, calibration
    try:
        over = "client.get_executor(pure=False)"
        directs = ("client.submit(priority=...) used directly", f"{over} used directly")
        title = f"Dask, {dask.slots} worker processes x 1 thread"
        backend = Backend(
            title, dask.run, directs, over, dask.slots, False, 0.8, sizes["dask_tasks"]
        )
        for case in backend_cases(backend, sizes["backlog"], steps):
            cases.append(case)
            records.append(run_case(case, repeat))
    finally:
        dask.close()
    return cases, records, calibration


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--repeat", type=int, default=MIN_REPEAT, metavar="N")
    parser.add_argument("--output", type=Path, metavar="PATH", help="the raw JSON results")
    parser.add_argument("--dask", action="store_true", help="also on a Dask LocalCluster")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    mode = "quick" if args.quick else "full"
    run = Run.begin(mode, args.repeat)
    cases, records, calibration = measure(mode, args.repeat, args.dask)
    suffix = ("-dask" if args.dask else "") + ("-quick" if args.quick else "")
    ratios = (
        f"the executor used directly; 1 busy task = "
        f"{fmt(calibration['task_cpu_ms_median'])} ms of CPU."
    )
    extra = {
        "calibration": calibration,
        "clock": "time.monotonic (CLOCK_MONOTONIC, one clock for all processes on Linux)",
    }
    return run.publish(f"front{suffix}", args.output, cases, records, ratios, extra)


@dataclass
class Run:
    """One run of a benchmark script: when it began, on what machine, to publish at the end."""

    mode: str
    repeat: int
    env: dict[str, Any]
    started_at: datetime.datetime
    started: float

    @classmethod
    def begin(cls, mode: str, repeat: int) -> Run:
        now = datetime.datetime.now(datetime.timezone.utc)
        return cls(mode, repeat, environment(), now, time.perf_counter())

    def publish(
        self,
        kind: str,
        output: Optional[Path],
        cases: Sequence[Case],
        records: Sequence[dict[str, Any]],
        ratios: str,
        extra: dict[str, Any],
    ) -> int:
        """Save the tables and the raw record (to ``output`` or the dated results file).

        ``kind`` names the results file; ``ratios`` says what the ratios are against.
        Returns the exit status: 1 if a case failed.
        """
        env = self.env
        env["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
        table = render(cases, records)
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        output = output or HERE / "results" / f"{self.started_at:%Y-%m-%d}-py{version}-{kind}.json"
        record: dict[str, Any] = {"mode": self.mode, "repeat": self.repeat, "argv": sys.argv}
        record.update(started_utc=self.started_at.isoformat(timespec="seconds"), environment=env)
        record.update(seconds=time.perf_counter() - self.started, **extra)
        record.update(cases=records, table=table)
        heading = (
            f"Python {env['python_version']} ({env['implementation']}), {env['cpu_count']} CPUs; "
            f"{self.mode} mode, {self.repeat} interleaved repetitions; median [min, max]; ratios"
            f" are medians of per-repetition ratios to {ratios}"
        )
        save(output, record, heading, table)
        log(f"\n{record['seconds']:.0f} s; raw results in {output}")
        return 1 if any(r["error"] is not None for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
