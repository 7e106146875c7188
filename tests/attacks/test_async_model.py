"""AsyncPriorityScheduler against a reference model: random submits, cancels, deadlines, limits.

The model is the scheduler's contract in a few lines: a list of queued tasks, the running
ones, and a pump that starts the best queued task (highest priority, then the earliest
submitted) while fewer than ``concurrency`` run, expiring on the way any whose deadline has
come. After every random step the loop is left to settle, and the scheduler's start order,
queue, running set and counts must equal the model's.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from aio_support import LOOPS, accounted, drive, settle
from conftest import TIMEOUT, FakeClock
from priority_executor import AsyncPriorityScheduler


@dataclass
class Model:
    concurrency: int
    now: float
    queued: list[tuple[int, int, str, Optional[float]]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    started: list[str] = field(default_factory=list)
    expired: set[str] = field(default_factory=set)
    seq: int = 0

    def submit(self, name: str, priority: int, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else self.now + timeout
        if deadline is not None and self.now >= deadline:
            self.expired.add(name)
            return
        self.queued.append((-priority, self.seq, name, deadline))
        self.seq += 1
        self.pump()

    def pump(self) -> None:
        while len(self.running) < self.concurrency and self.queued:
            best = min(self.queued)
            self.queued.remove(best)
            name, deadline = best[2], best[3]
            if deadline is not None and self.now >= deadline:
                self.expired.add(name)
                continue
            self.running.add(name)
            self.started.append(name)

    def expire_due(self) -> None:
        due = [item for item in self.queued if item[3] is not None and self.now >= item[3]]
        for item in due:
            self.queued.remove(item)
            self.expired.add(item[2])
        self.pump()

    def cancel(self, name: str) -> None:
        self.queued = [item for item in self.queued if item[2] != name]
        self.end(name)

    def end(self, name: str) -> None:
        if name in self.running:
            self.running.remove(name)
            self.pump()


@pytest.mark.parametrize("kind", LOOPS)
@pytest.mark.parametrize("seed", range(16))
def test_the_scheduler_starts_what_the_model_starts(kind: str, seed: int) -> None:
    rng = random.Random(seed)

    async def main() -> None:
        clock = FakeClock()
        concurrency = rng.randint(1, 3)
        scheduler = AsyncPriorityScheduler(concurrency, clock=clock)
        model = Model(concurrency, clock.now)
        started: list[str] = []
        release: dict[str, asyncio.Event] = {}
        futures: dict[str, asyncio.Future[Any]] = {}

        async def task(name: str) -> str:
            started.append(name)
            await asyncio.wait_for(release[name].wait(), TIMEOUT)
            return name

        for step in range(300):
            action = rng.random()
            if action < 0.4:
                name = f"t{step}"
                priority = rng.choice((0, 1, 2))
                timeout = rng.choice((None, None, 0.0, 1.0, 3.0))
                release[name] = asyncio.Event()
                futures[name] = scheduler.submit(task, name, priority=priority, timeout=timeout)
                model.submit(name, priority, timeout)
            elif action < 0.6 and model.running:
                name = rng.choice(sorted(model.running))
                release[name].set()
                await settle(20)
                model.end(name)
            elif action < 0.75 and futures:
                name = rng.choice(sorted(futures))
                if futures[name].cancel():
                    model.cancel(name)
            elif action < 0.9:
                clock.advance(rng.choice((0.5, 1.0, 2.0)))
                model.now = clock.now
                scheduler._wake_timer()
                model.expire_due()
            else:
                concurrency = rng.randint(1, 4)
                scheduler.concurrency = concurrency
                model.concurrency = concurrency
                model.pump()
            await settle(20)
            assert started == model.started, f"start order differs at step {step}"
            assert scheduler.pending == len(model.queued), f"queue differs at step {step}"
            assert scheduler.active == len(model.running), f"running differs at step {step}"
            scheduler._check_invariants()
        for event in release.values():
            event.set()
        stats = await accounted(scheduler)
        assert stats.expired == len(model.expired)
        assert stats.submitted == len(futures)

    drive(kind, main)
