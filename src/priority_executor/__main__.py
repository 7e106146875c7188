"""Command line: ``python -m priority_executor demo [--seconds S] [--workers N] [--json]``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Optional

from ._demo import format_report, run_demo
from ._demo_async import run_async_demo

#: The most workers the demo accepts; each one is a thread, and the flood grows with them.
MAX_WORKERS = 256


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seconds must be a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"seconds must be a positive number, got {text!r}")
    return value


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"workers must be an integer, got {text!r}") from None
    if not 1 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(
            f"workers must be between 1 and {MAX_WORKERS}, got {text!r}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m priority_executor",
        description="priority-executor: a drop-in ThreadPoolExecutor with priorities.",
    )
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="compare ThreadPoolExecutor and PriorityThreadPoolExecutor on a mixed workload",
        description=(
            "Run the same workload on ThreadPoolExecutor, then on PriorityThreadPoolExecutor"
            " with the same number of workers: a flood of LOW background jobs, some with a"
            " queue deadline, and a HIGH interactive request every few milliseconds. Prints"
            " wait (submit to start) and run (submit to done) latency per priority class."
        ),
    )
    demo.add_argument(
        "--seconds",
        type=_seconds,
        default=15.0,
        metavar="S",
        help="total time budget, split between the two pools (default: %(default)g)",
    )
    demo.add_argument(
        "--workers",
        type=_workers,
        default=4,
        metavar="N",
        help="worker threads in each pool (default: %(default)d)",
    )
    demo.add_argument(
        "--json", action="store_true", help="print only the results, as JSON, and no progress"
    )
    demo.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="the same workload on coroutines: asyncio.Semaphore, then AsyncPriorityScheduler,"
        " with --workers calls at once",
    )
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Run the command line; returns the exit status (argparse exits 2 on a usage error)."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args.seconds, args.workers, args.json, args.use_async)
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse refuses others


def _demo(seconds: float, workers: int, as_json: bool, use_async: bool) -> int:
    out = sys.stdout
    run = run_async_demo if use_async else run_demo
    if as_json:
        json.dump(run(workers, seconds), out, indent=2)
        out.write("\n")
        return 0
    print(f"Running for about {seconds:g} s ...", file=out, flush=True)
    results = run(workers, seconds, progress=out if out.isatty() else None)
    print(format_report(results), file=out)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)  # the demo has already stopped its threads and pools
    except BrokenPipeError:
        # Output piped into ``head``: stop quietly, as the Python docs recommend.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
