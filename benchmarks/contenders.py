"""The three pools under test, and the small tools every scenario uses to drive them.

Scenarios submit plain tasks with ``pool.submit(fn)``, which all three pools accept, so the
measured path is each pool's own ``submit`` with nothing of ours around it. Only where a
priority or a queue timeout matters do they go through :attr:`Contender.submit`.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from baseline import PriorityQueuePool
from priority_executor import PriorityThreadPoolExecutor

#: Every blocking wait of the benchmarks gives up after this many seconds, so that a broken
#: pool fails its scenario instead of hanging the run.
TIMEOUT = 600.0

STDLIB = "stdlib"
BASELINE = "baseline"
OURS = "ours"

Task = Callable[[], object]


@dataclass(frozen=True)
class Contender:
    """A pool under test."""

    key: str
    short: str  # column header
    name: str
    make: Callable[[int], Executor]  # a new pool with this many workers
    #: ``submit(pool, fn, priority, timeout)``: submit ``fn()`` with a priority and a queue
    #: timeout, for the pools that have them (see ``priorities`` and ``deadlines``).
    submit: Callable[[Executor, Task, int, Optional[float]], Future[Any]]
    priorities: bool
    deadlines: bool


def _submit_stdlib(
    pool: Executor, fn: Task, priority: int, timeout: Optional[float]
) -> Future[Any]:
    if timeout is not None:
        raise ValueError("ThreadPoolExecutor has no queue timeout")
    return pool.submit(fn)  # no priorities: a "HIGH" task is just another submit


def _submit_baseline(
    pool: Executor, fn: Task, priority: int, timeout: Optional[float]
) -> Future[Any]:
    assert isinstance(pool, PriorityQueuePool)
    return pool.submit(fn, priority=priority, timeout=timeout)


def _submit_ours(pool: Executor, fn: Task, priority: int, timeout: Optional[float]) -> Future[Any]:
    assert isinstance(pool, PriorityThreadPoolExecutor)
    return pool.submit(fn, priority=priority, timeout=timeout)


CONTENDERS = (
    Contender(
        STDLIB,
        "stdlib",
        "concurrent.futures.ThreadPoolExecutor",
        ThreadPoolExecutor,
        _submit_stdlib,
        priorities=False,
        deadlines=False,
    ),
    Contender(
        BASELINE,
        "baseline",
        "queue.PriorityQueue pool (benchmarks/baseline.py)",
        PriorityQueuePool,
        _submit_baseline,
        priorities=True,
        deadlines=True,
    ),
    Contender(
        OURS,
        "ours",
        "priority_executor.PriorityThreadPoolExecutor",
        PriorityThreadPoolExecutor,
        _submit_ours,
        priorities=True,
        deadlines=True,
    ),
)


def noop() -> None:
    """The task of the throughput scenarios: all cost is the pool's."""


class Gate:
    """Occupies ``workers`` workers of a pool until released: the "blocked pool" of the scenarios.

    ``Gate.close(pool, workers)`` submits the gate tasks and returns once every one of them is
    running, so every worker is busy and whatever is submitted next stays queued. A gate can
    also be queued behind other work (:meth:`submit_to`) and waited for later
    (:meth:`wait_held`), to stop the workers after the work ahead of it.
    """

    def __init__(self, workers: int) -> None:
        self._open = threading.Event()
        self._barrier = threading.Barrier(workers + 1)
        self.workers = workers
        self._held = False
        self.futures: list[Future[None]] = []

    @classmethod
    def close(cls, pool: Executor, workers: int) -> Gate:
        gate = cls(workers)
        gate.submit_to(pool)
        gate.wait_held()
        return gate

    def submit_to(self, pool: Executor) -> None:
        submit = pool.submit
        self.futures.extend(submit(self._hold) for _ in range(self.workers))

    def _hold(self) -> None:
        self._barrier.wait(TIMEOUT)
        self._open.wait(TIMEOUT)

    def wait_held(self) -> None:
        """Block until every gate task is running, that is, every worker is held."""
        self._barrier.wait(TIMEOUT)
        self._held = True

    def release(self) -> None:
        """Let the gate tasks return.

        If :meth:`wait_held` never returned, the barrier cannot complete, so it is broken to
        free any gate task waiting there (it raises BrokenBarrierError). Once it has
        returned, breaking it would also hit gate tasks still waking up from it, so it is not.
        """
        self._open.set()
        if not self._held:
            self._barrier.abort()

    def join(self) -> None:
        """Release and wait until every gate task has finished, leaving its worker idle."""
        self.release()
        for future in self.futures:
            future.result(TIMEOUT)


def start_workers(pool: Executor, workers: int) -> None:
    """Make sure ``workers`` threads exist and are idle, so no trial times thread start-up.

    The standard pool and ours start threads on demand; holding ``workers`` tasks at a barrier
    at once forces each pool to start them all.
    """
    Gate.close(pool, workers).join()


class ReadingClock:
    """``time.monotonic`` for a pool's ``clock=``, remembering the last reading on each thread.

    Under a rate limit our pool reads its clock once each time a worker takes a task (that
    reading is the start the window counts), in the worker that then runs the task. So a
    task's first call of :meth:`take` gives the pool's own start time of that task, where the
    task's own reading of the clock comes a few µs to a GIL switch later. :meth:`take`
    forgets the reading, so a task run without a reading on its thread since the last one
    gets None instead of a stale time: the scenarios then fail rather than guess.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> float:
        now = time.monotonic()
        self._local.reading = now
        return now

    def take(self) -> Optional[float]:
        """The last reading made on this thread since the last :meth:`take`, or None."""
        reading: Optional[float] = getattr(self._local, "reading", None)
        self._local.reading = None
        return reading


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for untimed set-up that allocates a lot.

    Queueing 1e5 tasks with the collector on triggers about ten full collections, each
    traversing every queued future: 1.4 s instead of 0.2 s, and it finds nothing to free. On
    exit a full collection moves what was allocated meanwhile to the oldest generation, where
    long-lived objects are; left in the youngest, it would all be traversed by the next young
    collection, which may fall in a timed section.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        if enabled:
            gc.enable()
