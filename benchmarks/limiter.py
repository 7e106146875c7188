"""PriorityLimiter and AsyncPriorityLimiter against the semaphores they replace.

Commands (from the checkout, with the package installed: ``pip install -e .``)::

    python benchmarks/limiter.py --quick               # smaller sizes: about 20 s
    python benchmarks/limiter.py                       # full sizes, 5 repetitions: 1 to 2 minutes
    python benchmarks/limiter.py --case async-uncontended --case urgent
    python benchmarks/limiter.py --repeat 9 --output PATH

Side by side in one run, with the method of ``front.py`` and ``aio.py`` (see ``harness.py``):
a warm-up trial of every contender a tenth of the size, then interleaved repetitions in an
order rotated each time; medians and [min, max]; ratios are medians of per-repetition ratios
to the first contender, the standard library's semaphore. Every asyncio trial runs on a fresh
event loop (``asyncio.run``), every trial on a fresh limiter. The cases (``--case NAME``):

- ``async-uncontended``: N times ``async with limiter.acquire(): pass`` in one Task, µs per
  acquire and release, against ``async with asyncio.Semaphore(1)``. Target: ≤ 1.5 x.
- ``async-throughput``: 100,000 Tasks (``--quick``: 20,000), all created at once and then
  gathered, each ``async with limiter.acquire(): await asyncio.sleep(0)`` through
  ``AsyncPriorityLimiter(64)``, against ``asyncio.Semaphore(64)``; tasks/s from the first
  ``create_task`` to the end of ``gather``. Target: ≥ 0.9 x.
- ``thread-uncontended``: N times ``with limiter.acquire(): pass`` in one thread, against
  ``threading.Semaphore(1)``. Target: ≤ 1.0 x (no slower).
- ``urgent``: capacity 1, held by the trial; 10,000 LOW waiters queued (asyncio Tasks; with
  threads, 200 waiting threads), then one HIGH one; the holder releases. Counted: the LOW
  waiters granted before the HIGH one (target: none, in every repetition), and the time from
  just before the release to the HIGH one's first line in its block. The semaphores have no
  priorities: their HIGH waiter is one more in line.

The uncontended cases also run the limiter with ``key_limit=1`` (``ours, no fast path``): a
key limit turns off ``Grants.at_once``, the grant without a trip through the queue when
nothing waits and no limit is set, so every acquire is queued and taken as under contention.
The difference between the two rows is what that fast path saves.

The table goes to stdout, progress to stderr, every raw number to
``benchmarks/results/<date>-py<version>-limiter[-quick].json`` (``--output PATH`` to choose),
with the machine, the git commit and the order the contenders ran in at every repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from front import Case, Run, run_case
from harness import Metric, Target, fmt, fmt_ratio, log, save
from priority_executor import AsyncPriorityLimiter, Priority, PriorityLimiter
from run import HERE, MIN_REPEAT

BASELINE, OURS, QUEUED = "baseline", "ours", "ours-queued"
CONCURRENCY = 64
SIZES = {
    "full": {"acquires": 200_000, "tasks": 100_000, "async_waiters": 10_000, "threads": 200},
    "quick": {"acquires": 50_000, "tasks": 20_000, "async_waiters": 10_000, "threads": 200},
}


# -- the contenders ------------------------------------------------------------------------------


def async_lock(key: str, capacity: int) -> Callable[[Priority], AbstractAsyncContextManager[None]]:
    """``enter(priority)``: what ``async with`` takes for one acquire of ``key``'s contender."""
    if key == BASELINE:
        semaphore = asyncio.Semaphore(capacity)
        return lambda priority: semaphore  # no priorities
    limiter = AsyncPriorityLimiter(capacity, key_limit=capacity if key == QUEUED else None)
    return lambda priority: limiter.acquire(priority=priority)


def waiting(lock: object) -> int:
    """Waiters on a limiter or on a semaphore (its private deque, from either module)."""
    if isinstance(lock, (AsyncPriorityLimiter, PriorityLimiter)):
        return lock.statistics().waiting
    fields = vars(lock)
    waiters = fields["_cond"]._waiters if "_cond" in fields else fields["_waiters"]
    return 0 if waiters is None else len(waiters)


# -- the trials ----------------------------------------------------------------------------------


def async_uncontended_trial(key: str, acquires: int) -> dict[str, float]:
    async def main() -> float:
        if key == BASELINE:
            semaphore = asyncio.Semaphore(1)
            started = time.perf_counter()
            for _ in range(acquires):
                async with semaphore:
                    pass
            return time.perf_counter() - started
        limiter = AsyncPriorityLimiter(1, key_limit=1 if key == QUEUED else None)
        started = time.perf_counter()
        for _ in range(acquires):
            async with limiter.acquire():
                pass
        elapsed = time.perf_counter() - started
        check(limiter.statistics().completed == acquires, "not every acquire completed")
        return elapsed

    return {"us_per_acquire": asyncio.run(main()) / acquires * 1e6}


def thread_uncontended_trial(key: str, acquires: int) -> dict[str, float]:
    if key == BASELINE:
        semaphore = threading.Semaphore(1)
        started = time.perf_counter()
        for _ in range(acquires):
            with semaphore:
                pass
        return {"us_per_acquire": (time.perf_counter() - started) / acquires * 1e6}
    limiter = PriorityLimiter(1, key_limit=1 if key == QUEUED else None)
    started = time.perf_counter()
    for _ in range(acquires):
        with limiter.acquire():
            pass
    elapsed = time.perf_counter() - started
    check(limiter.statistics().completed == acquires, "not every acquire completed")
    return {"us_per_acquire": elapsed / acquires * 1e6}


def throughput_trial(key: str, tasks: int) -> dict[str, float]:
    async def main() -> float:
        enter = async_lock(key, CONCURRENCY)

        async def one() -> None:
            async with enter(Priority.NORMAL):
                await asyncio.sleep(0)

        started = time.perf_counter()
        every = [asyncio.create_task(one()) for _ in range(tasks)]
        await asyncio.gather(*every)
        return time.perf_counter() - started

    return {"tasks_per_s": tasks / asyncio.run(main())}


def urgent_async_trial(key: str, waiters: int) -> dict[str, float]:
    async def main() -> dict[str, float]:
        order: list[Priority] = []
        granted_at = math.nan
        lock: object
        if key == BASELINE:
            lock = semaphore = asyncio.Semaphore(1)
            holder: AbstractAsyncContextManager[None] = semaphore

            def enter(priority: Priority) -> AbstractAsyncContextManager[None]:
                return semaphore

        else:
            lock = limiter = AsyncPriorityLimiter(1)
            holder = limiter.acquire()

            def enter(priority: Priority) -> AbstractAsyncContextManager[None]:
                return limiter.acquire(priority=priority)

        async def low() -> None:
            async with enter(Priority.LOW):
                order.append(Priority.LOW)

        async def high() -> None:
            nonlocal granted_at
            async with enter(Priority.HIGH):
                granted_at = time.perf_counter()
                order.append(Priority.HIGH)

        await holder.__aenter__()
        tasks = [asyncio.create_task(low()) for _ in range(waiters)]
        await asyncio.sleep(0)  # each runs to its wait
        tasks.append(asyncio.create_task(high()))
        await asyncio.sleep(0)
        check(waiting(lock) == waiters + 1, f"{waiting(lock)} waiting, not {waiters + 1}")
        everything = asyncio.gather(*tasks)  # its callbacks added before the clock starts
        released = time.perf_counter()
        await holder.__aexit__(None, None, None)
        await everything
        check(len(order) == waiters + 1, "not every waiter was granted")
        return {
            "grant_ms": (granted_at - released) * 1e3,
            "low_before": float(order.index(Priority.HIGH)),
        }

    return asyncio.run(main())


def urgent_thread_trial(key: str, waiters: int) -> dict[str, float]:
    order: list[Priority] = []
    granted_at = [math.nan]
    lock: object
    if key == BASELINE:
        lock = semaphore = threading.Semaphore(1)
        holder: AbstractContextManager[Any] = semaphore

        def enter(priority: Priority) -> AbstractContextManager[Any]:
            return semaphore

    else:
        lock = limiter = PriorityLimiter(1)
        holder = limiter.acquire()

        def enter(priority: Priority) -> AbstractContextManager[Any]:
            return limiter.acquire(priority=priority)

    def low() -> None:
        with enter(Priority.LOW):
            order.append(Priority.LOW)

    def high() -> None:
        with enter(Priority.HIGH):
            granted_at[0] = time.perf_counter()
            order.append(Priority.HIGH)

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 30.0
        while waiting(lock) < count:
            check(time.monotonic() < deadline, f"{waiting(lock)} waiting, not {count}")
            time.sleep(0.001)

    threads = [threading.Thread(target=low, daemon=True) for _ in range(waiters)]
    holder.__enter__()
    try:
        for thread in threads:
            thread.start()
        wait_for(waiters)
        threads.append(threading.Thread(target=high, daemon=True))
        threads[-1].start()
        wait_for(waiters + 1)
    finally:
        released = time.perf_counter()
        holder.__exit__(None, None, None)
        for thread in threads:
            if thread.ident is not None:  # started
                thread.join()
    check(len(order) == waiters + 1, "not every waiter was granted")
    return {
        "grant_ms": (granted_at[0] - released) * 1e3,
        "low_before": float(order.index(Priority.HIGH)),
    }


def check(condition: bool, what: str) -> None:
    """A sanity check of a trial; its failure ends the case, recorded as an error."""
    if not condition:
        raise RuntimeError(what)


# -- the cases -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Named:
    """A case and the ``--case`` name that selects it."""

    name: str
    case: Case


def at_most(ratio: float) -> Target:
    return Target(f"≤ {ratio} x semaphore", lambda worst, r: r is not None and r <= ratio)


def at_least(ratio: float) -> Target:
    return Target(f"≥ {ratio} x semaphore", lambda worst, r: r is not None and r >= ratio)


def cases(sizes: dict[str, int]) -> list[Named]:
    acquires, tasks = sizes["acquires"], sizes["tasks"]
    async_waiters, threads = sizes["async_waiters"], sizes["threads"]
    granted_next = Target("0 (every repetition)", lambda worst, r: worst == 0)
    per_acquire = "acquire + release, per acquire"
    urgent_metrics = [
        Metric("low_before", "LOW granted before the HIGH one", "waiters", "lower", granted_next),
        Metric("grant_ms", "release → HIGH's first line", "ms", "lower"),
    ]
    return [
        Named(
            "async-uncontended",
            Case(
                f"async-uncontended, {acquires:,} acquires in one Task",
                {
                    BASELINE: "asyncio.Semaphore(1)",
                    OURS: "AsyncPriorityLimiter(1)",
                    QUEUED: "AsyncPriorityLimiter(1, key_limit=1): no fast path",
                },
                lambda key, div: async_uncontended_trial(key, acquires // div),
                [Metric("us_per_acquire", per_acquire, "µs", "lower", at_most(1.5))],
                {"acquires": acquires},
            ),
        ),
        Named(
            "async-throughput",
            Case(
                f"async-throughput, {tasks:,} Tasks through a limit of {CONCURRENCY}",
                {
                    BASELINE: f"asyncio.Semaphore({CONCURRENCY})",
                    OURS: f"AsyncPriorityLimiter({CONCURRENCY})",
                },
                lambda key, div: throughput_trial(key, tasks // div),
                [Metric("tasks_per_s", "throughput", "tasks/s", "higher", at_least(0.9))],
                {"tasks": tasks, "concurrency": CONCURRENCY, "body": "await asyncio.sleep(0)"},
            ),
        ),
        Named(
            "thread-uncontended",
            Case(
                f"thread-uncontended, {acquires:,} acquires in one thread",
                {
                    BASELINE: "threading.Semaphore(1)",
                    OURS: "PriorityLimiter(1)",
                    QUEUED: "PriorityLimiter(1, key_limit=1): no fast path",
                },
                lambda key, div: thread_uncontended_trial(key, acquires // div),
                [Metric("us_per_acquire", per_acquire, "µs", "lower", at_most(1.0))],
                {"acquires": acquires},
            ),
        ),
        Named(
            "urgent",
            Case(
                f"urgent, asyncio, 1 HIGH behind {async_waiters:,} LOW waiting Tasks",
                {BASELINE: "asyncio.Semaphore(1)", OURS: "AsyncPriorityLimiter(1)"},
                lambda key, div: urgent_async_trial(key, async_waiters // div),
                urgent_metrics,
                {"waiters": async_waiters, "capacity": 1},
            ),
        ),
        Named(
            "urgent",
            Case(
                f"urgent, threads, 1 HIGH behind {threads:,} LOW waiting threads",
                {BASELINE: "threading.Semaphore(1)", OURS: "PriorityLimiter(1)"},
                lambda key, div: urgent_thread_trial(key, threads // div),
                urgent_metrics,
                {"waiters": threads, "capacity": 1},
            ),
        ),
    ]


# -- the table -----------------------------------------------------------------------------------


def render(chosen: Sequence[Case], records: Sequence[dict[str, Any]]) -> str:
    """One row per case, metric and contender other than the semaphore: both medians
    [min, max], the paired ratio, the target and whether it is met.

    A ratio target is judged on the median paired ratio; an absolute one must hold in every
    repetition (the worst of them is judged).
    """
    head = ["case", "metric", "ours", "baseline", "ours ÷ baseline", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, record in zip(chosen, records, strict=True):
        if record["error"] is not None:
            last = record["error"].strip().splitlines()[-1]
            lines.append(f"| {case.name} | failed: {last} |" + " |" * (len(head) - 2))
            continue
        summary = record["summary"]
        for metric in case.metrics:
            reference = summary[BASELINE][metric.key]
            for key in case.contenders:
                if key == BASELINE:
                    continue
                mine = summary[key][metric.key]
                ratio = mine["ratio_vs_direct"] if metric.paired_ratio else None
                target, met = "—", ""
                if metric.target is not None and key == OURS:
                    worst = mine["high"] if metric.better == "lower" else mine["low"]
                    target = metric.target.text
                    met = "yes" if metric.target.met(worst, ratio) else "**no**"
                cells = [
                    case.name if key == OURS else f"{case.name}: {case.contenders[key]}",
                    f"{metric.label}, {metric.unit} ({metric.better} is better)",
                    spread(mine),
                    spread(reference),
                    "—" if ratio is None else fmt_ratio(ratio),
                    target,
                    met,
                ]
                lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for case in chosen:
        names = case.contenders
        lines.append(f"* {case.name}: ours = `{names[OURS]}`, baseline = `{names[BASELINE]}`")
    return "\n".join(lines)


def spread(stats: dict[str, float]) -> str:
    return f"{fmt(stats['median'])} [{fmt(stats['low'])}, {fmt(stats['high'])}]"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    names = list(dict.fromkeys(named.name for named in cases(SIZES["quick"])))
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--repeat", type=int, default=MIN_REPEAT, metavar="N")
    parser.add_argument("--case", action="append", choices=names, help="only these cases")
    parser.add_argument("--output", type=Path, metavar="PATH", help="the raw JSON results")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    mode = "quick" if args.quick else "full"
    run = Run.begin(mode, args.repeat)
    log(f"limiter benchmarks, {mode}, {args.repeat} repetitions")
    chosen = [n.case for n in cases(SIZES[mode]) if not args.case or n.name in args.case]
    records = [run_case(case, args.repeat) for case in chosen]
    table = render(chosen, records)
    env = run.env
    env["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    kind = "limiter" + ("-quick" if args.quick else "")
    output = args.output or HERE / "results" / f"{run.started_at:%Y-%m-%d}-py{version}-{kind}.json"
    record: dict[str, Any] = {"mode": mode, "repeat": args.repeat, "argv": sys.argv}
    record.update(started_utc=run.started_at.isoformat(timespec="seconds"), environment=env)
    record.update(seconds=time.perf_counter() - run.started, sizes=SIZES[mode])
    record.update(cases=records, table=table)
    heading = (
        f"Python {env['python_version']} ({env['implementation']}), {env['cpu_count']} CPUs; "
        f"{mode} mode, {args.repeat} interleaved repetitions; median [min, max]; ratios are "
        "medians of per-repetition ratios to the semaphore (baseline)."
    )
    save(output, record, heading, table)
    log(f"\n{record['seconds']:.0f} s; raw results in {output}")
    return 1 if any(r["error"] is not None for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
