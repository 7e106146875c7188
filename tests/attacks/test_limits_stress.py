"""Stress: limits changed at random while threads submit, cancel and re-prioritise keyed tasks.

Each run (a seed, on either executor) starts ``SUBMITTERS`` threads that submit through views
of four keys and none, at random priorities and queue timeouts, for ``SECONDS`` of real time,
cancelling a fifth of their tasks at once and moving some with ``set_priority``. Meanwhile one
thread keeps changing every limit at random (``key_limit``, ``rate_limit``,
``key_rate_limit``, ``max_workers`` or ``max_running``) and pauses and resumes the pool; some
runs also have ``ageing``, a bounded queue under each ``when_full`` policy, or (thread pool)
an ``idle_timeout`` that makes workers come and go. Then every limit is removed, and:

* the pool becomes idle and its invariants hold (``pool._check_invariants()``);
* every future is done; each task ran at most once, and a future that reports cancelled
  never ran: ran + cancelled = accepted;
* ``statistics()`` agrees: submitted = completed + failed + cancelled + expired, nothing
  held back.

To see the figures of each run: ``python -m pytest -m slow tests/attacks/test_limits_stress.py -s``.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import pytest

from conftest import TIMEOUT
from priority_executor import PriorityExecutor, PriorityThreadPoolExecutor, RateLimit
from support import KINDS, AnyPool

SUBMITTERS = 4
SECONDS = 1.0
PACE = 0.003  # seconds between two changes of the limits: the pacing of the load, not a wait
SEEDS = range(6)


def make(kind: str, rnd: random.Random) -> AnyPool:
    options: dict[str, Any] = {
        "key_limit": rnd.choice([None, 1, 2]),
        "key_rate_limit": rnd.choice([None, RateLimit(3, 0.01)]),
        "rate_limit": rnd.choice([None, RateLimit(50, 0.01)]),
        "ageing": rnd.choice([None, 0.5]),
        "max_queued": rnd.choice([None, 50]),
        "when_full": rnd.choice(["block", "raise", "evict"]),
    }
    if kind == "threads":
        return PriorityThreadPoolExecutor(4, idle_timeout=rnd.choice([None, 0.002]), **options)
    return PriorityExecutor(ThreadPoolExecutor(4), **options)


class Load:
    """The submitters' and the changer's shared record."""

    def __init__(self, pool: AnyPool, seed: int) -> None:
        self.pool = pool
        self.seed = seed
        self.lock = threading.Lock()
        self.ran: list[tuple[int, int]] = []
        self.futures: list[Future[None]] = []
        self.until = time.monotonic() + SECONDS

    def task(self, tag: tuple[int, int]) -> None:
        with self.lock:
            self.ran.append(tag)

    def submit_for_a_while(self, thread: int) -> None:
        rnd = random.Random(self.seed * 100 + thread)
        views = [
            self.pool.options(
                key=key, priority=rnd.randint(-2, 2), timeout=rnd.choice([None, 0.005, 0.05])
            )
            for key in [None, "a", "b", "c", thread]
        ]
        count = 0
        while time.monotonic() < self.until:
            count += 1
            try:
                future = rnd.choice(views).submit(self.task, (thread, count))
            except RuntimeError:  # a full queue under "raise" or "evict"
                continue
            with self.lock:
                self.futures.append(future)
                other = rnd.choice(self.futures)
            draw = rnd.random()
            if draw < 0.2:
                future.cancel()
            elif draw < 0.25:
                self.pool.set_priority(other, rnd.randint(-3, 3))

    def change_for_a_while(self) -> None:
        rnd = random.Random(self.seed)
        pool = self.pool
        pace = threading.Event()
        while time.monotonic() < self.until:
            draw = rnd.random()
            if draw < 0.2:
                pool.key_limit = rnd.choice([None, 1, 3])
            elif draw < 0.4:
                pool.rate_limit = rnd.choice([None, RateLimit(20, 0.01), RateLimit(100, 0.005)])
            elif draw < 0.6:
                pool.key_rate_limit = rnd.choice([None, RateLimit(2, 0.01)])
            elif draw < 0.8:
                size = rnd.randint(1, 6)
                if isinstance(pool, PriorityThreadPoolExecutor):
                    pool.max_workers = size
                else:
                    pool.max_running = size
            elif draw < 0.9:
                pool.pause()
            else:
                pool.resume()
            pace.wait(PACE)
        pool.resume()


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_limits_changed_under_load_lose_nothing_and_run_nothing_twice(kind: str, seed: int) -> None:
    pool = make(kind, random.Random(seed))
    load = Load(pool, seed)
    threads = [
        threading.Thread(target=load.submit_for_a_while, args=(i,)) for i in range(SUBMITTERS)
    ]
    threads.append(threading.Thread(target=load.change_for_a_while))
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
            assert not thread.is_alive(), "a submitter or the changer is stuck"
        pool._check_invariants()
        pool.key_limit = pool.rate_limit = pool.key_rate_limit = None
        assert pool.join(TIMEOUT), f"the pool never became idle: {pool.statistics()}"
        pool._check_invariants()
    finally:
        pool.shutdown()
    assert wait(load.futures, TIMEOUT).not_done == set()
    cancelled = sum(future.cancelled() for future in load.futures)
    assert len(set(load.ran)) == len(load.ran), "a task ran twice"
    assert len(load.ran) + cancelled == len(load.futures), "a task was lost, or cancelled and run"
    stats = pool.statistics()
    assert stats.submitted == stats.completed + stats.failed + stats.cancelled + stats.expired
    assert stats.held_by_key == 0
    accepted, ran = len(load.futures), len(load.ran)
    print(f"seed {seed} {kind}: {accepted} accepted, {ran} ran, {cancelled} cancelled")
