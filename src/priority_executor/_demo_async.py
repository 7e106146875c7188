"""``python -m priority_executor demo --async``: the demo's workload on coroutines.

The same service as ``_demo.py`` (a flood of LOW jobs once a period, one in
``DEADLINE_EVERY`` with a queue deadline, a HIGH request every few milliseconds; every job a
short ``asyncio.sleep``), now an asyncio service that caps its calls at ``concurrency`` at
once: first with ``asyncio.Semaphore`` and a Task per call, which serves calls in arrival
order (and, having no deadlines, skips a job found late when it gets the semaphore), then with
``AsyncPriorityScheduler``. Both run on one event loop, one after the other, with the same
jobs; the report is the thread demo's (``_demo.format_report``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Optional, TextIO

from ._aio import AsyncPriorityScheduler
from ._demo import (
    HIGH_INTERVAL,
    PROGRESS_INTERVAL,
    SETTLE,
    Job,
    Plan,
    ProgressLine,
    Stats,
    recorded,
    side_by_side,
    summarise,
    workload,
)
from ._policy import Priority

POOLS = ("asyncio.Semaphore", "AsyncPriorityScheduler")


async def _run(job: Job, emulate_deadline: bool) -> None:
    job.started = now = time.perf_counter()
    if emulate_deadline and job.deadline is not None and now - job.submitted >= job.deadline:
        job.expired = True  # what a user of a semaphore would do: check, then skip
        return
    await asyncio.sleep(job.work)


class AsyncPhase:
    """One way of capping the calls, under the workload: two producers, then a short settle."""

    def __init__(self, name: str, concurrency: int, seconds: float) -> None:
        self.name = name
        self.seconds = seconds
        self.jobs: list[Job] = []
        self.finished = 0
        self.semaphore = asyncio.Semaphore(concurrency)
        self.scheduler = AsyncPriorityScheduler(concurrency)
        self.plan = Plan(concurrency, seconds)

    def submit(self, job: Job) -> None:
        self.jobs.append(job)
        job.submitted = time.perf_counter()
        if self.name == POOLS[1]:
            level = Priority.HIGH if job.kind == "HIGH" else Priority.LOW
            future: asyncio.Future[None] = self.scheduler.submit(
                _run, job, False, priority=level, timeout=job.deadline
            )
        else:
            future = asyncio.ensure_future(self._guarded(job))
        job.future = future
        future.add_done_callback(lambda _: self._finish(job))

    async def _guarded(self, job: Job) -> None:
        async with self.semaphore:
            await _run(job, True)

    def _finish(self, job: Job) -> None:
        job.done = time.perf_counter()
        self.finished += 1

    async def _produce_high(self, until: float) -> None:
        next_at = time.perf_counter()
        for job in self.plan.high_jobs():
            if next_at >= until:
                return
            self.submit(job)
            next_at += HIGH_INTERVAL
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

    async def _produce_low(self) -> None:
        start = time.perf_counter()
        for at, jobs in self.plan.low_bursts():
            await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
            for job in jobs:
                self.submit(job)

    async def run(self, progress: Optional[Callable[[str], None]]) -> Stats:
        """Load, settle, then cancel what is left; every Task started here has ended."""
        start = time.perf_counter()
        producers = [
            asyncio.ensure_future(self._produce_low()),
            asyncio.ensure_future(self._produce_high(start + self.seconds)),
        ]
        try:
            await self._wait(start, start + self.seconds, "load", progress)
        finally:
            for producer in producers:
                producer.cancel()
            await asyncio.gather(*producers, return_exceptions=True)
        await self._wait(start, time.perf_counter() + SETTLE, "settle", progress)
        stopped = time.perf_counter()
        left = [job.future for job in self.jobs if job.done is None]
        for future in left:
            assert future is not None
            future.cancel()  # type: ignore[attr-defined]  # an asyncio.Future
        await self.scheduler.aclose()
        await asyncio.sleep(0)  # the done-callbacks of what was cancelled
        result = summarise(self.jobs, stopped, time.perf_counter() - start)
        if self.name == POOLS[1]:
            result["statistics"] = recorded(self.scheduler.statistics())
        return result

    async def _wait(
        self, start: float, end: float, step: str, progress: Optional[Callable[[str], None]]
    ) -> None:
        """Wait until ``end`` (or, settling, until every job is done), redrawing the progress."""
        while (now := time.perf_counter()) < end:
            if progress is not None:
                progress(
                    f"{self.name:<26} {step:<6} {now - start:5.1f}/{self.seconds:.1f} s"
                    f"  submitted {len(self.jobs):>6}  finished {self.finished:>6}"
                )
            if step == "settle" and self.finished == len(self.jobs):
                return
            await asyncio.sleep(min(PROGRESS_INTERVAL if step == "load" else 0.005, end - now))


def run_async_demo(concurrency: int, seconds: float, progress: Optional[TextIO] = None) -> Stats:
    """Run the workload with both, ``seconds / 2`` each, on a new event loop; as ``run_demo``."""

    def both(draw: Optional[ProgressLine]) -> dict[str, Stats]:
        async def phases() -> dict[str, Stats]:
            return {
                name: await AsyncPhase(name, concurrency, seconds / 2).run(draw) for name in POOLS
            }

        return asyncio.run(phases())

    work = workload(concurrency, seconds / 2)
    work["slots"] = "at once"
    deadlines = (
        "emulated: skipped if late when it starts",
        "enforced by the scheduler: cancelled while queued",
    )
    return side_by_side(work, both, deadlines, progress)
