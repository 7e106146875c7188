"""Two versions of this package side by side: ``python benchmarks/compare.py OTHER_SRC``.

``OTHER_SRC`` is the ``src`` folder of another checkout (``git worktree add ../before REV``
gives one). Its package is loaded under another name next to this checkout's, and the
throughput (1 submitter, 100,000 no-ops) and contended (8 submitters, 4,000 no-ops each)
scenarios of ``run.py`` run on both and on ``ThreadPoolExecutor``, interleaved in every
repetition. Each ratio is the median of the per-repetition ratios (see ``harness.py``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from pathlib import Path

import priority_executor

Make = Callable[[int], Executor]


def load_other(src: Path) -> Make:
    """``PriorityThreadPoolExecutor`` of the package under ``src``, imported under another name."""
    init = src / "priority_executor" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "priority_executor_other", init, submodule_search_locations=[str(init.parent)]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"no package at {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    pool_class: Make = module.PriorityThreadPoolExecutor
    return pool_class


def noop() -> None:
    """All cost is the pool's."""


def throughput(make: Make) -> float:
    """Tasks per second, one submitter, 100,000 no-ops, 4 workers."""
    pool = make(4)
    pool.submit(noop).result()
    start = time.perf_counter()
    wait([pool.submit(noop) for _ in range(100_000)])
    elapsed = time.perf_counter() - start
    pool.shutdown()
    return 100_000 / elapsed


def contended(make: Make) -> float:
    """Tasks per second, 8 submitters of 4,000 no-ops each, 4 workers."""
    pool = make(4)
    pool.submit(noop).result()
    go = threading.Barrier(9)
    futures = []

    def submitter() -> None:
        go.wait()
        futures.extend([pool.submit(noop) for _ in range(4_000)])

    threads = [threading.Thread(target=submitter) for _ in range(8)]
    for thread in threads:
        thread.start()
    go.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wait(futures)
    elapsed = time.perf_counter() - start
    pool.shutdown()
    return 32_000 / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the src folder of the other checkout")
    parser.add_argument("--repeat", type=int, default=9, help="interleaved repetitions")
    args = parser.parse_args()
    pools: dict[str, Make] = {
        "stdlib": ThreadPoolExecutor,
        "other": load_other(args.other),
        "this": priority_executor.PriorityThreadPoolExecutor,
    }
    for scenario in (throughput, contended):
        runs: dict[str, list[float]] = {name: [] for name in pools}
        for _ in range(args.repeat):
            for name, make in pools.items():
                gc.collect()
                runs[name].append(scenario(make))

        def ratio(a: str, b: str) -> float:
            return statistics.median(x / y for x, y in zip(runs[a], runs[b], strict=True))  # noqa: B023

        medians = ", ".join(f"{name} {statistics.median(v):,.0f}/s" for name, v in runs.items())
        print(
            f"{scenario.__name__}: {medians}; this/other {ratio('this', 'other'):.3f},"
            f" this/stdlib {ratio('this', 'stdlib'):.2f}, other/stdlib"
            f" {ratio('other', 'stdlib'):.2f}"
        )


if __name__ == "__main__":
    main()
