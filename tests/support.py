"""Helpers shared by the test modules (fixtures live in conftest.py).

:func:`internals` is the one way a test reads a pool's private state: every test that needs a
lock, a queue or a count of waiting threads goes through it, so that the day that state moves
(the pool's core split into several objects, say) only this module changes.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Optional, TypeVar, Union

import pytest

from conftest import TIMEOUT
from priority_executor import PoolView, PriorityThreadPoolExecutor
from priority_executor._queue import QueueBase
from priority_executor._scheduler import Scheduler
from priority_executor._timer import DeadlineTimer

T = TypeVar("T")

#: What a pool's cancel hook is called with: the future that was settled.
CancelHook = Callable[[Future[Any]], None]


def exact(message: str) -> str:
    """A ``match=`` pattern that accepts ``message`` and nothing else."""
    return f"^{re.escape(message)}$"


class Recorder:
    """A task that records its argument, so a test can check what ran and in which order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ran: list[Any] = []

    def __call__(self, tag: T) -> T:
        with self._lock:
            self._ran.append(tag)
        return tag

    @property
    def ran(self) -> list[Any]:
        """A copy of what ran so far, in order."""
        with self._lock:
            return list(self._ran)


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Poll a state that no event announces (a worker parking, a submit blocking), up to TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    pause = threading.Event()
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        pause.wait(0.001)


# -- the pool's private state ------------------------------------------------------------------


class Internals:
    """The private state of a pool that tests read; the one place that knows where it lives.

    It holds the pool's core, not the pool, so keeping it (or one of its bound methods, as
    :meth:`FakeClock.attach <conftest.FakeClock.attach>` does) does not keep a dropped pool
    alive. The methods that return a number read it under the pool's lock, so they must not be
    called with that lock held.
    """

    def __init__(self, core: Scheduler) -> None:
        self._core = core

    @property
    def lock(self) -> threading.Lock:
        """The pool's lock: it guards the queue, the counts and the thread bookkeeping."""
        return self._core.lock

    @property
    def queue(self) -> QueueBase:
        """The queue object (``len()``, ``entries``, ``deadline_count``, ``next_deadline()``)."""
        return self._core.queue

    @property
    def timer(self) -> DeadlineTimer:
        """The deadline timer (``park``, ``target``, ``thread``, guarded by the lock)."""
        return self._core.timer

    def queued(self) -> int:
        """How many tasks are queued."""
        with self._core.lock:
            return len(self._core.queue)

    def blocked(self) -> int:
        """How many submits wait for room in a full queue."""
        with self._core.lock:
            return self._core.blocked

    def joiners(self) -> int:
        """How many ``join()`` calls wait."""
        with self._core.lock:
            return self._core.joiners

    def idle_workers(self) -> int:
        """How many worker threads are parked, waiting for a task."""
        with self._core.lock:
            return len(self._core.idle)

    def idle_and_started(self) -> tuple[int, int]:
        """``(parked workers, started workers)``, read together."""
        with self._core.lock:
            return len(self._core.idle), len(self._core.threads)

    def worker_counts(self) -> tuple[int, int, int]:
        """``(wakes, arriving, starting)``: wake-ups not yet taken, threads counted in that
        have not reached their loop, threads counted in but not yet started."""
        with self._core.lock:
            return self._core.wakes, self._core.arriving, len(self._core.starting)

    def timer_sleeps_until(self, target: Optional[float]) -> bool:
        """True if the timer has handled every wake-up and sleeps until ``target``."""
        with self._core.lock:
            return self._core.timer.park.locked() and self._core.timer.target == target

    def wake_timer(self) -> None:
        """Make the deadline timer re-read the clock now."""
        self._core.wake_timer()

    def patch_cancel_hook(
        self, monkeypatch: pytest.MonkeyPatch, wrapper: Callable[[CancelHook, Future[Any]], None]
    ) -> None:
        """Route the done-callback that the pool adds to each future it accepts through
        ``wrapper(real_hook, future)``, for the futures submitted from now on."""
        real_hook: CancelHook = self._core.on_done

        def hook(future: Future[Any]) -> None:
            wrapper(real_hook, future)

        monkeypatch.setattr(self._core, "on_done", hook)


def internals(pool: Union[PriorityThreadPoolExecutor, PoolView]) -> Internals:
    """The private state of ``pool``, or of the pool behind a view."""
    if isinstance(pool, PoolView):
        pool = pool._pool
    return Internals(pool._scheduler)
