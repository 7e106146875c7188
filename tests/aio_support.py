"""Helpers for the tests of ``AsyncPriorityScheduler``: a loop per test, gates, a recorder.

Every test runs on a fresh loop of each kind (asyncio's, and uvloop's where it installs),
with an exception handler that fails the test on anything the loop reports: "Task exception
was never retrieved", "Task was destroyed but it is pending", a callback that raised.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, Optional, TypeVar

import pytest

from conftest import TIMEOUT
from priority_executor import AsyncPriorityScheduler, ExecutorStatistics

T = TypeVar("T")

LOOPS = ["asyncio", "uvloop"]


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed (the aio extra)")
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    return asyncio.new_event_loop()


def drive(kind: str, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` on a new loop of ``kind``, as ``asyncio.run`` would; fail on any report.

    Warnings (a coroutine never awaited) are errors, and the loop is closed and collected
    before the check, so that what the scheduler leaves behind is found.
    """
    loop = new_loop(kind)
    reported: list[Any] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    # A warning raised in a finalizer (a coroutine never awaited) is "unraisable": record it.
    hook, sys.unraisablehook = sys.unraisablehook, reported.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                result = loop.run_until_complete(asyncio.wait_for(main(), TIMEOUT))
            finally:
                loop.run_until_complete(_cancel_left())
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()
                gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not reported, f"the loop reported: {reported}"
    return result


async def _cancel_left() -> None:
    """What ``asyncio.run`` does at the end: cancel every task left, and let them end."""
    left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


class Gate:
    """A coroutine function whose calls wait until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.started: list[Any] = []
        self.finished: list[Any] = []

    async def __call__(self, name: Any = None) -> Any:
        self.started.append(name)
        try:
            await asyncio.wait_for(self.opened.wait(), TIMEOUT)
        finally:
            self.finished.append(name)
        return name

    def open(self) -> None:
        self.opened.set()


class Recorder:
    """A coroutine function that records its argument when it starts, and returns it."""

    def __init__(self) -> None:
        self.order: list[Any] = []

    async def __call__(self, name: Any) -> Any:
        self.order.append(name)
        return name


async def returning(value: T, seconds: float = 0) -> T:
    """A task that sleeps ``seconds`` and returns ``value``."""
    await asyncio.sleep(seconds)
    return value


async def settle(rounds: int = 5) -> None:
    """Let the loop run ``rounds`` iterations: what is ready runs, nothing waits on time."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def accounted(scheduler: AsyncPriorityScheduler) -> ExecutorStatistics:
    """Idle, consistent, and every submission settled in exactly one way."""
    assert await scheduler.join(TIMEOUT), "the scheduler never became idle"
    scheduler._check_invariants()
    stats = scheduler.statistics()
    settled = stats.completed + stats.failed + stats.cancelled + stats.expired
    assert stats.submitted == settled, f"lost or double-counted task: {stats}"
    assert stats.queued == stats.running == 0
    return stats


class Peak:
    """Counts the coroutines inside it at once, and the most there ever were."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def hold(self, seconds: Optional[float] = None, gate: Optional[Gate] = None) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            if gate is not None:
                await gate()
            else:
                await asyncio.sleep(0 if seconds is None else seconds)
        finally:
            self.now -= 1


# -- the options an attack runs across -------------------------------------------------------

#: ageing x max_queued/when_full x submitting through a view.
OPTIONS = [
    {"ageing": ageing, "max_queued": max_queued, "when_full": when_full, "view": view}
    for ageing, (max_queued, when_full), view in itertools.product(
        (None, 1.0), ((None, "raise"), (50, "raise"), (50, "evict")), (False, True)
    )
]


def ids(options: dict[str, Any]) -> str:
    return "-".join(f"{k}={v}" for k, v in options.items())


class Through:
    """Submits to a scheduler directly, or through a view made for each task's options."""

    def __init__(self, scheduler: AsyncPriorityScheduler, view: bool) -> None:
        self.scheduler = scheduler
        self.view = view

    def submit(self, fn: Any, *args: Any, timeout: Optional[float] = None) -> Any:
        if self.view:
            return self.scheduler.options(key="k", timeout=timeout).submit(fn, *args)
        return self.scheduler.submit(fn, *args, timeout=timeout)

    async def run(self, fn: Any, *args: Any) -> Any:
        return await self.submit(fn, *args)


def make(
    options: dict[str, Any], concurrency: int = 1, **more: Any
) -> tuple[AsyncPriorityScheduler, Through]:
    """A scheduler with ``options``, and what to submit through: itself or a view."""
    chosen = {k: v for k, v in options.items() if k != "view"}
    scheduler = AsyncPriorityScheduler(concurrency, **chosen, **more)
    return scheduler, Through(scheduler, options["view"])
