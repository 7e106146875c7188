"""Run the benchmarks of priority-executor: ``python benchmarks/run.py [--quick]``.

Prints a markdown table of results on stdout (progress goes to stderr) and writes every raw
number to ``benchmarks/results/<date>-py<version>-<quick|full>.json``. See
``benchmarks/README.md`` for the method and the caveats.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import priority_executor
from contenders import CONTENDERS
from harness import CaseResult, Config, git_revision, log, machine, render_table, run_case, save
from scenarios import SCENARIOS

HERE = Path(__file__).resolve().parent
MIN_REPEAT = 5


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    names = [module.NAME for module in SCENARIOS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes where the issue allows it; the whole run takes about three minutes",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=names,
        metavar="NAME",
        help=f"run only this scenario (repeatable): {', '.join(names)}",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=MIN_REPEAT,
        metavar="N",
        help=f"interleaved repetitions per measurement (default and minimum for a result: "
        f"{MIN_REPEAT})",
    )
    parser.add_argument(
        "--output", type=Path, metavar="PATH", help="where to write the raw JSON results"
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def environment() -> dict[str, Any]:
    """What produced the numbers: interpreter, machine, library and source revision."""
    revision = git_revision(HERE.parent / "src")
    return {
        **machine(),
        "priority_executor_version": priority_executor.__version__,
        # Whether the package under test is this checkout's src/ (no machine paths recorded).
        "priority_executor_from_checkout": HERE.parent / "src"
        in Path(priority_executor.__file__).parents,
        "git": None
        if revision is None
        else dict(zip(("commit", "src_modified"), revision, strict=True)),
    }


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.list:
        for module in SCENARIOS:
            print(f"{module.NAME:16} {module.SUMMARY}")
        return 0
    if args.repeat < MIN_REPEAT:
        log(f"warning: --repeat {args.repeat} is below {MIN_REPEAT}; not a result to publish")
    config = Config(quick=args.quick, repeat=args.repeat)
    chosen = [m for m in SCENARIOS if args.scenario is None or m.NAME in args.scenario]
    env = environment()
    mode = "quick" if args.quick else "full"
    log(
        f"priority-executor {env['priority_executor_version']} benchmarks, {mode} mode, "
        f"{args.repeat} repetitions; Python {env['python_version']} "
        f"({env['implementation']}), {env['cpu_count']} CPUs, {env['platform']}"
    )
    started_at = datetime.datetime.now(datetime.timezone.utc)
    started = time.perf_counter()
    results: list[CaseResult] = []
    for module in chosen:
        for case in module.cases(config):
            results.append(run_case(case, args.repeat))
    seconds = time.perf_counter() - started
    env["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    table = render_table(results, CONTENDERS)
    record = {
        "mode": mode,
        "repeat": args.repeat,
        "argv": sys.argv,
        "started_utc": started_at.isoformat(timespec="seconds"),
        "seconds": seconds,
        "environment": env,
        "contenders": {c.key: c.name for c in CONTENDERS},
        "cases": [result.to_json() for result in results],
        "table": table,
    }
    output = args.output
    if output is None:
        suffix = "" if args.scenario is None else "-" + "-".join(args.scenario)
        name = f"{started_at:%Y-%m-%d}-py{sys.version_info[0]}.{sys.version_info[1]}-{mode}"
        output = HERE / "results" / f"{name}{suffix}.json"
    heading = (
        f"Python {env['python_version']} ({env['implementation']}), {env['cpu_count']} CPUs, "
        f"{env['platform']}; {mode} mode, {args.repeat} interleaved repetitions; "
        f"median [min, max]; ratios are medians of per-repetition ratios to stdlib."
    )
    save(output, record, heading, table)
    log(f"\n{seconds:.0f} s; raw results in {output}")
    return 1 if any(result.error is not None for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
