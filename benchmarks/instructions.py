"""Instructions per task under callgrind: ``python benchmarks/instructions.py [--tasks N]``.

Timings on a small, shared machine move by tens of percent from run to run; the number of
instructions a task costs barely moves, so it can tell apart two versions of the pool that
differ by a few percent. This script counts them with ``valgrind --tool=callgrind`` on the
workload of the throughput scenario ("W1"): a pool of 4 workers, started first; 2,000 no-op
tasks as a warm-up; ``gc.collect()``; then the counted part: N no-ops submitted from one
thread, the futures kept, ``result()`` read on each, and ``shutdown()``.

Callgrind counts a whole process, and the standard library offers no way to switch its
counting on and off around a section (that takes the client requests of ``valgrind.h``, a C
extension). So the count is differential: each contender runs in a fresh callgrind process
twice, with N and with 2N tasks, everything else the same (interpreter start-up, imports, the
pool's start, the warm-up, the shutdown), and ``(I(2N) - I(N)) / N`` is the cost of one task
of the counted part. The child process is this script in its hidden ``--child`` mode; it
leaves with ``os._exit`` right after the shutdown, so freeing the N futures and finalizing
the interpreter, which the timed section does not include either, are not counted.

``--workload cancel`` counts one ``cancel()`` of a queued task the same way: a pool of 1
worker held by a gate, ``gc.collect()``, N no-ops submitted and their futures kept; one run
then calls ``cancel()`` on each, the other does not, and ``(I(submit + cancel) - I(submit))
/ N`` is the cost of one cancel. Both leave with ``os._exit`` right there, the gate still
closed: ``shutdown(cancel_futures=True)`` would cancel the N futures of the run that only
submits and so take much of the difference away. A cancel's time also depends on its cache
misses, which a count of instructions does not show; ``--cache-sim`` has callgrind simulate
the caches (``--cache-sim=yes``) and adds the I1 and D1 misses per task or cancel.

The cyclic garbage collector is disabled for the counted part unless ``--gc`` is given: its
passes over the live futures come at moments set by allocation counts, so with it on the
figure includes them and depends on where their schedule falls between N and 2N. The child
sets a GIL switch interval of 0.15 s (``--switch``): code runs about 30 times slower under
valgrind, and 30 times the default 5 ms keeps the number of forced GIL switches per task
close to a native run's. Valgrind runs one thread at a time; it is asked to let them take
turns in order (``--fair-sched=yes``), without which the count of a pool varies by tens of
percent from run to run; with it, a few percent remain (the GIL's timed waits follow the
clock), so compare versions with ``--repeat``.

The markdown table goes to stdout, progress to stderr, the raw counts to
``benchmarks/results/<date>-py<version>-instructions[-cancel].json``. See
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional

import priority_executor
from contenders import BASELINE, CONTENDERS, STDLIB, TIMEOUT, Gate, noop, start_workers
from harness import fmt, fmt_ratio, git_revision, log, machine, save

HERE = Path(__file__).resolve().parent

WORKERS = 4
WARMUP = 2_000
TASKS = 25_000
#: N of the cancel workload.
CANCEL_TASKS = 10_000
#: The GIL switch interval of the child, seconds (the interpreter's default is 0.005).
SWITCH = 0.15
#: Fixed, so that the N and 2N runs hash strings alike and repeated counts can agree.
HASH_SEED = "0"
#: Valgrind runs one thread at a time. By default a thread that gives up valgrind's lock can
#: take it straight back, so how often the GIL changes hands, and with it the count, varies
#: from run to run (48k to 68k instructions per task for the standard pool in six counts);
#: with fair scheduling threads take turns in order, and the standard pool's counts stayed
#: between 52.0k and 53.3k in eight.
VALGRIND_OPTIONS = ("--tool=callgrind", "--fair-sched=yes")
CACHE_SIM = "--cache-sim=yes"
#: The cache misses that --cache-sim reports: level-1 instruction, data read, data write.
MISSES = {"I1mr": "I1 misses", "D1mr": "D1 read misses", "D1mw": "D1 write misses"}

FLOOR = "floor"
#: Table order: the floor first, as the least any pool can do.
ORDER = (FLOOR, *(c.key for c in CONTENDERS))

THROUGHPUT = "throughput"
CANCEL = "cancel"


class Run(NamedTuple):
    """One of a contender's two counts: what its child does."""

    key: str  # its name in the raw results
    tasks: int
    cancel: bool = False  # the cancel workload: cancel() every task once all are submitted


@dataclass(frozen=True)
class Workload:
    """What a figure is the cost of, and the two counts whose difference gives it."""

    unit: str  # what the figure is the cost of one of
    formula: str
    tasks: int  # the default N
    floor: str  # what the floor contender does
    runs: Callable[[int], tuple[Run, Run]]  # the two counts for N; (I(2nd) - I(1st)) / N
    describe: Callable[[int], str]


WORKLOADS = {
    THROUGHPUT: Workload(
        "task",
        "(I(2N) - I(N)) / N",
        TASKS,
        "one thread, per task: Future(), deque append and popleft, "
        "set_running_or_notify_cancel(), fn(), set_result(None); then result() on each future",
        lambda n: (Run("n", n), Run("2n", 2 * n)),
        lambda n: f"W1: {WORKERS} workers, {n:,} and {2 * n:,} no-op tasks",
    ),
    CANCEL: Workload(
        "cancel",
        "(I(submit + cancel) - I(submit)) / N",
        CANCEL_TASKS,
        "one thread: cancel() and set_running_or_notify_cancel() on each of N pending Future()",
        lambda n: (Run("submit", n), Run("submit+cancel", n, cancel=True)),
        lambda n: f"cancel: 1 worker held by a gate, {n:,} no-op tasks queued, cancel() on each",
    ),
}


# The child: one workload, run under callgrind.


def _pool_workload(make: Callable[[int], Executor], tasks: int, collector: bool) -> None:
    pool = make(WORKERS)
    start_workers(pool, WORKERS)
    submit = pool.submit
    for future in [submit(noop) for _ in range(WARMUP)]:
        future.result(TIMEOUT)
    gc.collect()
    if not collector:
        gc.disable()
    # The counted part: the timed section of scenarios/throughput.py, and the shutdown.
    futures = [submit(noop) for _ in range(tasks)]
    for future in futures:
        future.result(TIMEOUT)
    pool.shutdown(wait=True)


def _floor_steps(tasks: int) -> None:
    queue: deque[Future[None]] = deque()
    futures: list[Future[None]] = []
    keep = futures.append
    for _ in range(tasks):
        future: Future[None] = Future()
        queue.append(future)
        claimed = queue.popleft()
        if claimed.set_running_or_notify_cancel():
            noop()
            claimed.set_result(None)
        keep(future)
    for future in futures:
        future.result(TIMEOUT)


def _floor_workload(tasks: int, collector: bool) -> None:
    _floor_steps(WARMUP)
    gc.collect()
    if not collector:
        gc.disable()
    _floor_steps(tasks)


def _cancel_workload(
    make: Callable[[int], Executor], tasks: int, cancel: bool, collector: bool
) -> None:
    pool = make(1)
    Gate.close(pool, 1)  # never released: the child leaves with its worker held
    submit = pool.submit
    gc.collect()
    if not collector:
        gc.disable()
    futures = [submit(noop) for _ in range(tasks)]
    if cancel:  # the counted part
        for future in futures:
            if not future.cancel():
                raise RuntimeError("cancel() of a queued task returned False")


def _floor_cancel(tasks: int, cancel: bool, collector: bool) -> None:
    gc.collect()
    if not collector:
        gc.disable()
    futures: list[Future[None]] = [Future() for _ in range(tasks)]
    if cancel:
        for future in futures:
            if not future.cancel():
                raise RuntimeError("cancel() of a pending Future returned False")
            future.set_running_or_notify_cancel()


def child(args: argparse.Namespace) -> None:
    """Run one workload, print what was loaded as one JSON line, and leave without cleaning up."""
    sys.setswitchinterval(args.switch)
    cancel = args.workload == CANCEL
    if args.child == FLOOR and cancel:
        _floor_cancel(args.tasks, args.child_cancel, args.gc)
    elif args.child == FLOOR:
        _floor_workload(args.tasks, args.gc)
    else:
        make = next(c.make for c in CONTENDERS if c.key == args.child)
        if cancel:
            _cancel_workload(make, args.tasks, args.child_cancel, args.gc)
        else:
            _pool_workload(make, args.tasks, args.gc)
    package = Path(priority_executor.__file__).resolve().parent
    print(json.dumps({"package_dir": str(package), "version": priority_executor.__version__}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the futures are not freed, the interpreter not finalized: not counted


# The parent: run the children under callgrind, take differences, tabulate.


def _child_command(args: argparse.Namespace, contender: str, run: Run) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", contender]
    command += ["--workload", args.workload, "--tasks", str(run.tasks)]
    command += ["--switch", repr(args.switch)]
    if args.gc:
        command.append("--gc")
    if run.cancel:
        command.append("--child-cancel")
    return command


def _child_env(source: Optional[Path]) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED=HASH_SEED)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(source), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    return env


def _package_digest(package_dir: Path) -> str:
    """A digest of the package's sources, to notice if they change during a measurement."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def check_children(args: argparse.Namespace) -> dict[str, Any]:
    """Run every child once natively with a few tasks (its second count's, with N = 100): it
    works, loads the package meant, and has written its bytecode caches, so that no counted run
    compiles what another reads."""
    expected = (args.source or HERE.parent / "src").resolve() / "priority_executor"
    run = WORKLOADS[args.workload].runs(100)[1]
    report: dict[str, Any] = {}
    for contender in args.contender:
        done = subprocess.run(
            _child_command(args, contender, run),
            env=_child_env(args.source),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        if done.returncode != 0:
            raise SystemExit(f"the {contender} workload failed natively:\n{done.stderr}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        if args.source is not None and Path(report["package_dir"]) != expected:
            raise SystemExit(
                f"the child loaded priority_executor from {report['package_dir']}, not {expected}"
            )
    return report


def read_events(out_dir: Path) -> dict[str, int]:
    """The event counts of a callgrind run (``Ir``, instructions, and with ``--cache-sim=yes``
    the misses ``I1mr``, ``D1mr``, ``D1mw``, ...): the ``totals:`` (or ``summary:``) line of
    each ``callgrind.out`` file in ``out_dir``, named by its ``events:`` line, summed (one file
    unless threads are split)."""
    totals: dict[str, int] = {}
    files = sorted(out_dir.glob("callgrind.out.*"))
    if not files:
        raise RuntimeError(f"callgrind wrote no output file in {out_dir}")
    for path in files:
        found: dict[str, list[str]] = {}
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key in ("events", "summary", "totals") and value.split():
                    found[key] = value.split()
        values = found.get("totals", found.get("summary"))
        if values is None or "events" not in found:
            raise RuntimeError(f"no events: line, or no totals: or summary: line, in {path}")
        for event, value in zip(found["events"], values, strict=True):
            totals[event] = totals.get(event, 0) + int(value)
    return totals


def _valgrind_options(args: argparse.Namespace) -> list[str]:
    return [*VALGRIND_OPTIONS, CACHE_SIM] if args.cache_sim else list(VALGRIND_OPTIONS)


def count(args: argparse.Namespace, valgrind: str, contender: str, run: Run) -> dict[str, Any]:
    """The events of one fresh callgrind process running ``run`` of ``contender``."""
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        out_dir = Path(tmp)
        command = [
            valgrind,
            *_valgrind_options(args),
            f"--callgrind-out-file={out_dir / 'callgrind.out.%p'}",
            *_child_command(args, contender, run),
        ]
        started = time.perf_counter()
        done = subprocess.run(
            command, env=_child_env(args.source), capture_output=True, text=True, timeout=3600
        )
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(
                f"valgrind exited with {done.returncode} for {contender}, {run.key} run:\n"
                + done.stderr[-4000:]
            )
        events = read_events(out_dir)
    return {
        "tasks": run.tasks,
        "instructions": events["Ir"],
        "events": events,
        "seconds": round(seconds, 1),
    }


def measure(args: argparse.Namespace, valgrind: str, package_dir: Path) -> dict[str, Any]:
    """Every repetition's two counts, and the figures per task (or cancel) taken from them."""
    n = args.tasks
    workload = WORKLOADS[args.workload]
    first, second = workload.runs(n)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in args.contender}
    for r in range(args.repeat):
        for contender in args.contender:
            digest = _package_digest(package_dir)
            one, two = (count(args, valgrind, contender, run) for run in (first, second))
            per_task = (two["instructions"] - one["instructions"]) / n
            same_source = digest == _package_digest(package_dir)
            rep: dict[str, Any] = {first.key: one, second.key: two, "per_task": per_task}
            note = ""
            if args.cache_sim:
                misses = {e: (two["events"][e] - one["events"][e]) / n for e in MISSES}
                rep["misses_per_task"] = misses
                note += "".join(f", {fmt(misses[e])} {MISSES[e]}" for e in MISSES)
            if args.workload == THROUGHPUT:
                rep["fixed"] = 2 * one["instructions"] - two["instructions"]
                note += f"; outside the counted part {rep['fixed']:,}"
            rep["package_digest"] = digest if same_source else None
            runs[contender].append(rep)
            log(
                f"  rep {r + 1}/{args.repeat} {contender}: {fmt(per_task)} instructions per"
                f" {workload.unit} (I({first.key}) = {one['instructions']:,} in"
                f" {one['seconds']:.0f} s, I({second.key}) = {two['instructions']:,} in"
                f" {two['seconds']:.0f} s{note})"
            )
            if not same_source:
                log(f"  warning: the package's sources changed during the {contender} counts")
    return runs


def summarize(
    runs: dict[str, list[dict[str, Any]]], keys: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Median, range and paired ratio of each contender's figures; ``keys`` name its counts."""
    summary: dict[str, dict[str, Any]] = {}
    reference = runs.get(STDLIB)
    for contender, reps in runs.items():
        values = [rep["per_task"] for rep in reps]
        median = statistics.median(values)
        ratio = None
        if reference is not None:
            # Paired, as in harness.py: the median of the ratios from the same repetition.
            ratio = statistics.median(
                rep["per_task"] / ref["per_task"] for rep, ref in zip(reps, reference, strict=True)
            )
        totals = [rep[k]["instructions"] for rep in reps for k in keys]
        summary[contender] = {
            "per_task_median": median,
            "per_task_min": min(values),
            "per_task_max": max(values),
            "spread_percent": (max(values) - min(values)) / median * 100 if median else None,
            "ratio_vs_stdlib": ratio,
            "reps": len(values),
            "totals": totals,
            # False if the package's sources changed between the two counts of a repetition.
            "same_source": all(rep["package_digest"] is not None for rep in reps),
        }
        if "misses_per_task" in reps[0]:
            summary[contender]["misses_per_task_median"] = {
                e: statistics.median(rep["misses_per_task"][e] for rep in reps) for e in MISSES
            }
    return summary


def render(summary: dict[str, dict[str, Any]], repeat: int, workload: str) -> str:
    unit = WORKLOADS[workload].unit
    cache_sim = any("misses_per_task_median" in s for s in summary.values())
    header = ["contender", f"instructions per {unit}", "÷ stdlib"]
    if repeat > 1:
        header.append(f"spread over {repeat} counts")
    if cache_sim:
        header += [f"{label} per {unit}" for label in MISSES.values()]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for contender in (c for c in ORDER if c in summary):
        s = summary[contender]
        cells = [contender, fmt(s["per_task_median"])]
        if repeat > 1:
            cells[1] += f" [{fmt(s['per_task_min'])}, {fmt(s['per_task_max'])}]"
        ratio = s["ratio_vs_stdlib"]
        cells.append("—" if ratio is None else fmt_ratio(ratio))
        if repeat > 1:
            cells.append(f"{s['spread_percent']:.2g} %")
        if cache_sim:
            cells += [fmt(s["misses_per_task_median"][e]) for e in MISSES]
        lines.append("| " + " | ".join(cells) + " |")
    if workload == CANCEL and {STDLIB, BASELINE} & summary.keys():
        lines.append("")
        lines.append(
            "stdlib and baseline: cancel() only marks the Future cancelled; the task stays in"
            " the queue, and wait() and as_completed() are not woken, until a worker reaches it."
            " Ours removes it and wakes them."
        )
    changed = [c for c in ORDER if c in summary and not summary[c]["same_source"]]
    if changed:
        lines.append("")
        lines.append(
            f"Warning: the package's sources changed during the counts of {', '.join(changed)};"
            " those figures mix two versions."
        )
    return "\n".join(lines)


def environment(valgrind: str, package: dict[str, Any], source: Optional[Path]) -> dict[str, Any]:
    """What produced the counts: ``harness.machine()``, valgrind, and the package as the
    counted children loaded it."""
    version = subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout
    package_dir = Path(package["package_dir"])
    checkout = (HERE.parent / "src").resolve() / "priority_executor"
    return {
        **machine(),
        "valgrind": version.strip(),
        "priority_executor_version": package["version"],
        # Which package was counted (no machine paths recorded).
        "priority_executor_from_checkout": package_dir == checkout,
        "priority_executor_from_source_option": source is not None,
        "git": _git_revision(package_dir.parent),
        "benchmarks_git": _git_revision(HERE) if source is not None else None,
    }


def _git_revision(directory: Path) -> Optional[dict[str, Any]]:
    revision = git_revision(directory)
    return None if revision is None else dict(zip(("commit", "modified"), revision, strict=True))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    keys = list(ORDER)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        choices=list(WORKLOADS),
        default=THROUGHPUT,
        help=f"what to count the cost of: {THROUGHPUT}, a task of W1 (the default), or"
        f" {CANCEL}, a cancel() of a queued task",
    )
    parser.add_argument(
        "--tasks",
        type=int,
        metavar="N",
        help=f"{THROUGHPUT}: count runs of N and 2N tasks (default {TASKS:,}); {CANCEL}: of"
        f" N tasks, cancelled or not (default {CANCEL_TASKS:,})",
    )
    parser.add_argument(
        "--contender",
        action="append",
        choices=keys,
        metavar="NAME",
        help=f"count only this contender (repeatable): {', '.join(keys)}",
    )
    parser.add_argument(
        "--gc",
        action="store_true",
        help="leave the cyclic garbage collector on in the counted part (the figure then "
        "includes its passes and depends on their schedule)",
    )
    parser.add_argument(
        "--cache-sim",
        action="store_true",
        help=f"simulate the caches too ({CACHE_SIM}, slower) and report level-1 misses",
    )
    parser.add_argument(
        "--switch",
        type=float,
        default=SWITCH,
        metavar="S",
        help=f"sys.setswitchinterval() of the child, seconds (default {SWITCH})",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="R",
        help="count every contender R times, to see whether the counts repeat (default 1)",
    )
    parser.add_argument(
        "--source",
        type=Path,
        metavar="PATH",
        help="the src folder of another version of the package, counted instead of the "
        "installed one",
    )
    parser.add_argument(
        "--output", type=Path, metavar="PATH", help="where to write the raw JSON results"
    )
    parser.add_argument("--child", choices=keys, help=argparse.SUPPRESS)
    parser.add_argument("--child-cancel", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tasks is None:
        args.tasks = WORKLOADS[args.workload].tasks
    if args.tasks < 1:
        parser.error("--tasks must be at least 1")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not args.switch > 0:
        parser.error("--switch must be greater than 0")
    if args.contender is None:
        args.contender = keys
    else:
        args.contender = [k for k in keys if k in args.contender]
    if args.source is not None:
        args.source = args.source.resolve()
        if not (args.source / "priority_executor" / "__init__.py").is_file():
            parser.error(f"--source: no priority_executor package in {args.source}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        child(args)
        return 0  # not reached: the child leaves with os._exit
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit(
            "valgrind is not installed (or not on PATH); this script counts instructions with"
            " valgrind --tool=callgrind: install it (apt-get install valgrind) and run again"
        )
    started_at = datetime.datetime.now(datetime.timezone.utc)
    started = time.perf_counter()
    package = check_children(args)
    env = environment(valgrind, package, args.source)
    workload = WORKLOADS[args.workload]
    first, second = workload.runs(args.tasks)
    options = _valgrind_options(args)
    collector = "GC off"
    if args.gc:
        collector = "GC on (the figures include its passes, at moments its schedule sets)"
    log(
        f"priority-executor {package['version']}: instructions per {workload.unit} of"
        f" {workload.describe(args.tasks)}, {collector}, switch interval {args.switch} s,"
        f" {args.repeat} count(s) per contender; {env['valgrind']} {' '.join(options)},"
        f" Python {env['python_version']}"
    )
    runs = measure(args, valgrind, Path(package["package_dir"]))
    seconds = time.perf_counter() - started
    env["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    # Another checkout's sources may be edited while the counts run (see same_source).
    env["git_at_end"] = _git_revision(Path(package["package_dir"]).parent)
    summary = summarize(runs, [first.key, second.key])
    table = render(summary, args.repeat, args.workload)
    names = {**{c.key: c.name for c in CONTENDERS}, FLOOR: workload.floor}
    cancel = args.workload == CANCEL
    record = {
        "measure": f"instructions per {workload.unit}, {workload.formula},"
        " valgrind --tool=callgrind",
        "workload": {
            "name": "cancel" if cancel else "W1",
            "workers": 1 if cancel else WORKERS,
            "warmup_tasks": 0 if cancel else WARMUP,
            "tasks": [first.tasks, second.tasks],
            "cancelled": [run.tasks if run.cancel else 0 for run in (first, second)],
            "gc": "on" if args.gc else "off",
            "switch_interval": args.switch,
            "pythonhashseed": HASH_SEED,
        },
        "valgrind_options": options,
        "repeat": args.repeat,
        "argv": sys.argv,
        "started_utc": started_at.isoformat(timespec="seconds"),
        "seconds": seconds,
        "environment": env,
        "contenders": {key: names[key] for key in args.contender},
        "runs": runs,
        "summary": summary,
        "table": table,
    }
    output = args.output
    if output is None:
        name = f"{started_at:%Y-%m-%d}-py{sys.version_info[0]}.{sys.version_info[1]}-instructions"
        if cancel:
            name += "-cancel"
        if args.gc:
            name += "-gc"
        if args.source is not None:
            name += "-source"
        if len(args.contender) < len(ORDER):
            name += "-" + "-".join(args.contender)
        output = HERE / "results" / f"{name}.json"
    source = " (--source)" if args.source is not None else ""
    heading = (
        f"priority-executor {package['version']}{source}; Python {env['python_version']}"
        f" ({env['implementation']}), {env['valgrind']} {' '.join(options)};"
        f" {workload.describe(args.tasks)}, {collector}, switch interval {args.switch} s;"
        f" instructions per {workload.unit} = {workload.formula}"
        + (f", median [min, max] of {args.repeat} counts" if args.repeat > 1 else "")
        + "; ratios to stdlib."
    )
    save(output, record, heading, table)
    log(f"\n{seconds:.0f} s; raw counts in {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
