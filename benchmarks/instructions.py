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
``benchmarks/results/<date>-py<version>-instructions.json``. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, Callable, Optional

import priority_executor
from contenders import CONTENDERS, STDLIB, TIMEOUT, noop, start_workers
from harness import fmt, fmt_ratio, log, save

HERE = Path(__file__).resolve().parent

WORKERS = 4
WARMUP = 2_000
TASKS = 25_000
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

FLOOR = "floor"
FLOOR_NAME = (
    "one thread, per task: Future(), deque append and popleft, set_running_or_notify_cancel(), "
    "fn(), set_result(None); then result() on each future"
)
NAMES = {**{c.key: c.name for c in CONTENDERS}, FLOOR: FLOOR_NAME}
#: Table order: the floor first, as the least any pool can do.
ORDER = (FLOOR, *(c.key for c in CONTENDERS))


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


def child(contender: str, tasks: int, collector: bool, switch: float) -> None:
    """Run one workload, print what was loaded as one JSON line, and leave without cleaning up."""
    sys.setswitchinterval(switch)
    if contender == FLOOR:
        _floor_workload(tasks, collector)
    else:
        make = next(c.make for c in CONTENDERS if c.key == contender)
        _pool_workload(make, tasks, collector)
    package = Path(priority_executor.__file__).resolve().parent
    print(json.dumps({"package_dir": str(package), "version": priority_executor.__version__}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the futures are not freed, the interpreter not finalized: not counted


# The parent: run the children under callgrind, take differences, tabulate.


def _child_command(args: argparse.Namespace, contender: str, tasks: int) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", contender]
    command += ["--tasks", str(tasks), "--switch", repr(args.switch)]
    return [*command, "--gc"] if args.gc else command


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
    """Run every child once natively with a few tasks: it works, loads the package meant, and
    has written its bytecode caches, so that no counted run compiles what another reads."""
    expected = (args.source or HERE.parent / "src").resolve() / "priority_executor"
    report: dict[str, Any] = {}
    for contender in args.contender:
        done = subprocess.run(
            _child_command(args, contender, 100),
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


def read_total(out_dir: Path) -> int:
    """The instruction count of a callgrind run: the ``totals:`` (or ``summary:``) line of
    each ``callgrind.out`` file in ``out_dir``, summed (one file unless threads are split)."""
    total = 0
    files = sorted(out_dir.glob("callgrind.out.*"))
    if not files:
        raise RuntimeError(f"callgrind wrote no output file in {out_dir}")
    for path in files:
        found: dict[str, int] = {}
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key in ("summary", "totals") and value.split():
                    found[key] = int(value.split()[0])
        if not found:
            raise RuntimeError(f"no totals: or summary: line in {path}")
        total += found.get("totals", found.get("summary", 0))
    return total


def count(args: argparse.Namespace, valgrind: str, contender: str, tasks: int) -> dict[str, Any]:
    """Instructions of one fresh callgrind process running ``tasks`` tasks of ``contender``."""
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        out_dir = Path(tmp)
        command = [
            valgrind,
            *VALGRIND_OPTIONS,
            f"--callgrind-out-file={out_dir / 'callgrind.out.%p'}",
            *_child_command(args, contender, tasks),
        ]
        started = time.perf_counter()
        done = subprocess.run(
            command, env=_child_env(args.source), capture_output=True, text=True, timeout=3600
        )
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(
                f"valgrind exited with {done.returncode} for {contender}, {tasks} tasks:\n"
                + done.stderr[-4000:]
            )
        total = read_total(out_dir)
    return {"tasks": tasks, "instructions": total, "seconds": round(seconds, 1)}


def measure(args: argparse.Namespace, valgrind: str, package_dir: Path) -> dict[str, Any]:
    """Every repetition's counts at N and 2N, and the per-task figures taken from them."""
    n = args.tasks
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in args.contender}
    for r in range(args.repeat):
        for contender in args.contender:
            digest = _package_digest(package_dir)
            one, two = (count(args, valgrind, contender, k) for k in (n, 2 * n))
            per_task = (two["instructions"] - one["instructions"]) / n
            fixed = 2 * one["instructions"] - two["instructions"]
            same_source = digest == _package_digest(package_dir)
            runs[contender].append(
                {
                    "n": one,
                    "2n": two,
                    "per_task": per_task,
                    "fixed": fixed,
                    "package_digest": digest if same_source else None,
                }
            )
            log(
                f"  rep {r + 1}/{args.repeat} {contender}: {fmt(per_task)} instructions per task"
                f" (I({n:,}) = {one['instructions']:,} in {one['seconds']:.0f} s,"
                f" I({2 * n:,}) = {two['instructions']:,} in {two['seconds']:.0f} s;"
                f" outside the counted part {fixed:,})"
            )
            if not same_source:
                log(f"  warning: the package's sources changed during the {contender} counts")
    return runs


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    reference = runs.get(STDLIB)
    for contender, reps in runs.items():
        values = [rep["per_task"] for rep in reps]
        median = statistics.median(values)
        ratio = None
        if reference is not None:
            # Paired, as in harness.py: the median of the ratios from the same repetition.
            ratio = statistics.median(
                rep["per_task"] / ref["per_task"] for rep, ref in zip(reps, reference)
            )
        totals = [rep[k]["instructions"] for rep in reps for k in ("n", "2n")]
        summary[contender] = {
            "per_task_median": median,
            "per_task_min": min(values),
            "per_task_max": max(values),
            "spread_percent": (max(values) - min(values)) / median * 100 if median else None,
            "ratio_vs_stdlib": ratio,
            "reps": len(values),
            "totals": totals,
            # False if the package's sources changed between a count at N and its 2N.
            "same_source": all(rep["package_digest"] is not None for rep in reps),
        }
    return summary


def render(summary: dict[str, dict[str, Any]], repeat: int) -> str:
    header = ["contender", "instructions per task", "÷ stdlib"]
    if repeat > 1:
        header.append(f"spread over {repeat} counts")
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
        lines.append("| " + " | ".join(cells) + " |")
    changed = [c for c in ORDER if c in summary and not summary[c]["same_source"]]
    if changed:
        lines.append("")
        lines.append(
            f"Warning: the package's sources changed during the counts of {', '.join(changed)};"
            " those figures mix two versions."
        )
    return "\n".join(lines)


def environment(valgrind: str, package: dict[str, Any], source: Optional[Path]) -> dict[str, Any]:
    """What produced the counts; the fields of ``run.py``'s ``environment()``, with the package
    as the counted children loaded it. run.py is not imported: it loads every scenario."""
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    version = subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout
    package_dir = Path(package["package_dir"])
    checkout = (HERE.parent / "src").resolve() / "priority_executor"
    return {
        "python_version": platform.python_version(),
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "in_virtualenv": sys.prefix != sys.base_prefix,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(affinity) if affinity is not None else None,
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "valgrind": version.strip(),
        "priority_executor_version": package["version"],
        # Which package was counted (no machine paths recorded).
        "priority_executor_from_checkout": package_dir == checkout,
        "priority_executor_from_source_option": source is not None,
        "git": _git_revision(package_dir.parent),
        "benchmarks_git": _git_revision(HERE) if source is not None else None,
    }


def _git_revision(directory: Path) -> Optional[dict[str, Any]]:
    """The commit of the checkout holding ``directory``, and whether it has changes there."""

    def git(*words: str) -> str:
        return subprocess.run(
            ["git", *words], cwd=directory, capture_output=True, text=True, check=True
        ).stdout

    try:
        return {
            "commit": git("rev-parse", "HEAD").strip(),
            "modified": bool(git("status", "--porcelain", "--", ".").strip()),
        }
    except (OSError, subprocess.CalledProcessError):
        return None


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    keys = list(ORDER)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks",
        type=int,
        default=TASKS,
        metavar="N",
        help=f"count runs of N and 2N tasks (default {TASKS:,})",
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
    args = parser.parse_args(argv)
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
        child(args.child, args.tasks, args.gc, args.switch)
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
    collector = "GC off"
    if args.gc:
        collector = "GC on (the figures include its passes, at moments its schedule sets)"
    log(
        f"priority-executor {package['version']}: instructions per task of W1 ({WORKERS}"
        f" workers, {args.tasks:,} and {2 * args.tasks:,} no-op tasks), {collector}, switch"
        f" interval {args.switch} s, {args.repeat} count(s) per contender; {env['valgrind']},"
        f" Python {env['python_version']}"
    )
    runs = measure(args, valgrind, Path(package["package_dir"]))
    seconds = time.perf_counter() - started
    env["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    # Another checkout's sources may be edited while the counts run (see same_source).
    env["git_at_end"] = _git_revision(Path(package["package_dir"]).parent)
    summary = summarize(runs)
    table = render(summary, args.repeat)
    record = {
        "measure": "instructions per task, (I(2N) - I(N)) / N, valgrind --tool=callgrind",
        "workload": {
            "name": "W1",
            "workers": WORKERS,
            "warmup_tasks": WARMUP,
            "tasks": [args.tasks, 2 * args.tasks],
            "gc": "on" if args.gc else "off",
            "switch_interval": args.switch,
            "pythonhashseed": HASH_SEED,
        },
        "valgrind_options": list(VALGRIND_OPTIONS),
        "repeat": args.repeat,
        "argv": sys.argv,
        "started_utc": started_at.isoformat(timespec="seconds"),
        "seconds": seconds,
        "environment": env,
        "contenders": {key: NAMES[key] for key in args.contender},
        "runs": runs,
        "summary": summary,
        "table": table,
    }
    output = args.output
    if output is None:
        name = f"{started_at:%Y-%m-%d}-py{sys.version_info[0]}.{sys.version_info[1]}-instructions"
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
        f" ({env['implementation']}), {env['valgrind']} {' '.join(VALGRIND_OPTIONS)};"
        f" W1: {WORKERS} workers, {args.tasks:,} and {2 * args.tasks:,} no-op tasks,"
        f" {collector}, switch interval {args.switch} s; instructions per task = (I(2N) - I(N)) / N"
        + (f", median [min, max] of {args.repeat} counts" if args.repeat > 1 else "")
        + "; ratios to stdlib."
    )
    save(output, record, heading, table)
    log(f"\n{seconds:.0f} s; raw counts in {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
