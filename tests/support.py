"""Helpers shared by the test modules (fixtures live in conftest.py).

:func:`internals` is the one way a test reads a pool's private state: every test that needs a
lock, a queue or a count of waiting threads goes through it, so that the day that state moves
(the pool's core split into several objects, say) only this module changes.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, NamedTuple, Optional, TypeVar, Union

import pytest

import priority_executor
from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PoolView, PriorityExecutor, PriorityThreadPoolExecutor
from priority_executor._control import AdmissionControl
from priority_executor._dispatch import DelegateRunner
from priority_executor._keyed import KeyedQueue
from priority_executor._limits import Limits
from priority_executor._queue import QueueBase
from priority_executor._threads import ThreadRunner
from priority_executor._timer import DeadlineTimer

T = TypeVar("T")

#: What a pool's cancel hook is called with: the future that was settled.
CancelHook = Callable[[Future[Any]], None]

# The standard pool's messages, word for word, and ours for a pool inherited across fork.
SHUTDOWN_MESSAGE = "cannot schedule new futures after shutdown"
EXIT_MESSAGE = "cannot schedule new futures after interpreter shutdown"
BROKEN_MESSAGE = "A thread initializer failed, the thread pool is not usable anymore"
FORKED_MESSAGE = "cannot use a pool inherited across os.fork(); create a new pool in the child"


#: An int beyond the range of a float: ``float(HUGE)`` raises OverflowError.
HUGE = 10**400

#: ``ageing=None`` and an ageing: the queue's two orderings (FIFO buckets, one heap), for a
#: test that must hold under both.
AGEING = [None, 2.0]

#: A queue deadline far enough ahead, in fake seconds, that only a moved clock reaches it; a
#: timer that slept until it in real seconds would fail the test instead of passing it late.
FAR = 100.0

#: How long a test waits for something that must happen "promptly" after the clock moves.
PROMPT = 2.0

#: How long a test waits for what a correct pool does in milliseconds: short, so that a
#: regression fails fast instead of waiting out TIMEOUT.
STUCK = 1.0


def queue_full_message(max_queued: Optional[int]) -> str:
    """What a submit to a full queue raises, as :class:`QueueFullError`, when it may not wait."""
    return f"cannot queue the task: max_queued={max_queued} tasks wait"


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


class InThread(Generic[T]):
    """Run ``fn()`` in a thread of its own, once started; its outcome lands in ``self.future``.

    Made unstarted, so that a test can compare ``self.thread`` with the current thread from a
    hook before it starts; :func:`in_thread` makes one and starts it.
    """

    def __init__(self, fn: Callable[[], T], name: Optional[str] = None) -> None:
        self.future: Future[T] = Future()
        self.thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            result = fn()
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)

    def start(self) -> InThread[T]:
        self.thread.start()
        return self

    def result(self, timeout: float = TIMEOUT) -> T:
        """What ``fn()`` returned (or raise what it raised), waiting up to ``timeout``."""
        return self.future.result(timeout)

    def exception(self, timeout: float = TIMEOUT) -> Optional[BaseException]:
        """What ``fn()`` raised, or None, waiting up to ``timeout``."""
        return self.future.exception(timeout)


def in_thread(fn: Callable[[], T], name: Optional[str] = None) -> InThread[T]:
    """Start running ``fn()`` in a thread of its own."""
    return InThread(fn, name).start()


# -- the pool's private state ---------------------------------------------------------------


class Internals:
    """The private state of a pool that tests read; the one place that knows where it lives.

    It holds the pool's admission, not the pool, so keeping it (or one of its bound methods, as
    :meth:`FakeClock.attach <conftest.FakeClock.attach>` does) does not keep a dropped pool
    alive. The methods that return a number read it under the pool's lock, so they must not be
    called with that lock held.
    """

    def __init__(self, admission: AdmissionControl[Any]) -> None:
        self._admission = admission
        self._runner = admission.runner

    @property
    def _threads(self) -> ThreadRunner:
        """The thread pool's runner (a front's questions about workers have no answer)."""
        assert isinstance(self._runner, ThreadRunner), "not a thread pool"
        return self._runner

    @property
    def dispatcher(self) -> DelegateRunner:
        """A front's runner: its dispatcher thread and slots."""
        assert isinstance(self._runner, DelegateRunner), "not a PriorityExecutor"
        return self._runner

    @property
    def lock(self) -> threading.Lock:
        """The pool's lock: it guards the queue, the counts and the thread bookkeeping."""
        return self._admission.lock

    @property
    def queue(self) -> QueueBase:
        """The queue object (``len()``, ``entries``, ``deadline_count``, ``next_deadline()``)."""
        return self._admission.core.queue

    @property
    def timer(self) -> DeadlineTimer:
        """The deadline timer (``park``, ``target``, ``thread``, guarded by the lock)."""
        return self._admission.timer

    def queued(self) -> int:
        """How many tasks are queued."""
        with self._admission.lock:
            return len(self._admission.core.queue)

    def blocked(self) -> int:
        """How many submits wait for room in a full queue."""
        with self._admission.lock:
            return self._admission.room.blocked

    def jump_window_open(self) -> bool:
        """Whether a jump window is open: a task went ahead of queued ones, none taken since."""
        with self._admission.lock:
            return bool(self._admission.yield_until)

    def joiners(self) -> int:
        """How many ``join()`` calls wait."""
        with self._admission.lock:
            return self._admission.joiners

    def idle_workers(self) -> int:
        """How many worker threads are parked, waiting for a task."""
        with self._admission.lock:
            return len(self._threads.idle)

    def idle_and_started(self) -> tuple[int, int]:
        """``(parked workers, started workers)``, read together."""
        with self._admission.lock:
            return len(self._threads.idle), len(self._threads.threads)

    def worker_counts(self) -> tuple[int, int, int]:
        """``(wakes, arriving, starting)``: wake-ups not yet taken, threads counted in that
        have not reached their loop, threads counted in but not yet started."""
        with self._admission.lock:
            runner = self._threads
            return runner.wakes, len(runner.arriving), len(runner.starting)

    @property
    def limits(self) -> Limits:
        """The rate and key limits (``keys``: the state of each key), guarded by the lock."""
        return self._admission.core.limits

    def key_states(self) -> int:
        """How many keys the limits keep state for (a task running, or starts in a window)."""
        with self._admission.lock:
            return len(self._admission.core.limits.keys)

    def lanes(self) -> int:
        """How many keys have a lane in the queue (tasks queued); 0 for a queue without lanes."""
        with self._admission.lock:
            queue = self._admission.core.queue
            return len(queue.lanes) if isinstance(queue, KeyedQueue) else 0

    def held(self) -> int:
        """How many queued tasks their key's limits hold back."""
        with self._admission.lock:
            return self._admission.core.queue.held

    def timer_sleeps_until(self, target: Optional[float]) -> bool:
        """True if the timer has handled every wake-up and sleeps until ``target``."""
        with self._admission.lock:
            return self._admission.timer.park.locked() and self._admission.timer.target == target

    def timer_asleep(self) -> bool:
        """True if the deadline timer sleeps until signalled: it reads no clock until then."""
        with self._admission.lock:
            return self._admission.timer.asleep

    def wake_timer(self) -> None:
        """Make the deadline timer re-read the clock now."""
        self._admission.wake_timer()

    def patch_cancel_hook(
        self, monkeypatch: pytest.MonkeyPatch, wrapper: Callable[[CancelHook, Future[Any]], None]
    ) -> None:
        """Route the done-callback that the pool adds to each future it accepts through
        ``wrapper(real_hook, future)``, for the futures submitted from now on."""
        real_hook: CancelHook = self._admission.on_done

        def hook(future: Future[Any]) -> None:
            wrapper(real_hook, future)

        monkeypatch.setattr(self._admission, "on_done", hook)


def internals(pool: Union[PriorityThreadPoolExecutor, PriorityExecutor, PoolView]) -> Internals:
    """The private state of ``pool`` (either executor), or of the pool behind a view."""
    target = pool._pool if isinstance(pool, PoolView) else pool
    assert isinstance(target, (PriorityThreadPoolExecutor, PriorityExecutor)), (
        f"not a pool: {target!r}"
    )
    return Internals(target._admission)


# -- either executor ------------------------------------------------------------------------

#: The two executors, for tests of what both promise: ``make_pool(kind, ...)``.
KINDS = ["threads", "front"]

AnyPool = Union[PriorityThreadPoolExecutor, PriorityExecutor]


def make_pool(kind: str, workers: int = 1, **options: Any) -> AnyPool:
    """A ``PriorityThreadPoolExecutor`` of ``workers`` threads, or (``"front"``) a
    ``PriorityExecutor`` in front of a ``ThreadPoolExecutor`` of as many."""
    if kind == "threads":
        return PriorityThreadPoolExecutor(max_workers=workers, **options)
    assert kind == "front", kind
    return PriorityExecutor(ThreadPoolExecutor(workers), **options)


#: (max_queued, when_full): unbounded, and each policy on a queue of four.
LIMITS = [(None, "block"), (4, "block"), (4, "raise"), (4, "evict")]


class Config(NamedTuple):
    """One combination of the options a guarantee of both executors must hold across."""

    kind: str
    ageing: Optional[float]
    max_queued: Optional[int]
    when_full: str
    view: bool

    def pool(self, clock: Optional[FakeClock] = None, workers: int = 1) -> AnyPool:
        options: dict[str, Any] = {"ageing": self.ageing, "max_queued": self.max_queued}
        options["when_full"] = self.when_full
        if clock is not None:
            options["clock"] = clock
        pool = make_pool(self.kind, workers, **options)
        if clock is not None:
            clock.attach(pool)
        return pool

    def submit(
        self,
        pool: AnyPool,
        fn: Callable[..., Any],
        *args: Any,
        priority: float = 0,
        timeout: Optional[float] = None,
    ) -> Future[Any]:
        """``pool.submit`` with these options, or the same through a view."""
        if self.view:
            return pool.options(priority=priority, timeout=timeout).submit(fn, *args)
        return pool.submit(fn, *args, priority=priority, timeout=timeout)


CONFIGS = [
    pytest.param(
        Config(kind, ageing, queued, full, view),
        id=f"{kind}-{ageing}-{queued}-{full}-{'view' if view else 'pool'}",
    )
    for kind, ageing, (queued, full), view in itertools.product(
        KINDS, AGEING, LIMITS, [False, True]
    )
]


# -- a pool held by a gate ------------------------------------------------------------------


def hold_worker(pool: PriorityThreadPoolExecutor, gate: Gate) -> Future[str]:
    """Occupy one worker (with ``max_workers=1``, the pool's only one) until ``gate`` opens."""
    blocker = pool.submit(gate)
    gate.wait_started()
    return blocker


@contextmanager
def held_pool(
    gate: Gate, clock: Optional[FakeClock] = None, *, attach: bool = True
) -> Iterator[PriorityThreadPoolExecutor]:
    """A one-worker pool whose worker is held by ``gate`` until the test opens it.

    On the way out the gate opens before the pool shuts down, so a failing test never waits
    for the gate to time out. With ``attach``, moving ``clock`` wakes the pool's timer.
    """
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock or time.monotonic)
    if clock is not None and attach:
        clock.attach(pool)
    try:
        hold_worker(pool, gate)
        yield pool
    finally:
        gate.open()
        pool.shutdown()


@contextmanager
def closing(pool: PriorityThreadPoolExecutor, *gates: Gate) -> Iterator[PriorityThreadPoolExecutor]:
    """Yield ``pool``; on the way out open ``gates`` and shut it down, cancelling what waits."""
    try:
        yield pool
    finally:
        for gate in gates:
            gate.open()
        pool.shutdown(cancel_futures=True)


def joined_promptly(pool: PriorityThreadPoolExecutor) -> bool:
    """``pool.join(TIMEOUT)``, True only if it returned before its timeout.

    On a timeout ``join`` re-checks and may return True, so only the time taken tells that
    it was woken when the pool became idle rather than at the end of its timeout.
    """
    started = time.monotonic()
    idle = pool.join(TIMEOUT)
    return idle and time.monotonic() - started < TIMEOUT


def run_to_idle(pool: PriorityThreadPoolExecutor, gate: Gate) -> None:
    """Open ``gate`` and wait until nothing is queued or running."""
    gate.open()
    assert joined_promptly(pool), "the pool did not become idle"
    pool._check_invariants()


def assert_done_promptly(*futures: Future[Any]) -> None:
    """Every one of ``futures`` is done within PROMPT seconds."""
    started = time.perf_counter()
    not_done = wait(futures, timeout=PROMPT).not_done
    assert not not_done, f"not done within {PROMPT} s: {not_done}"
    assert time.perf_counter() - started < PROMPT


def assert_accounted(pool: AnyPool) -> None:
    """Idle, consistent, and every submission settled in exactly one way."""
    assert pool.join(TIMEOUT), "the pool never became idle"
    pool._check_invariants()
    stats = pool.statistics()
    settled = stats.completed + stats.failed + stats.cancelled + stats.expired
    assert stats.submitted == settled, f"lost or double-counted task: {stats}"
    assert stats.held_by_key == 0, f"tasks held back in an idle pool: {stats}"


def assert_nothing_queued(pool: PriorityThreadPoolExecutor) -> None:
    """Nothing is queued, no thread was started, and the invariants hold."""
    assert internals(pool).queued() == 0
    assert len(pool._threads) == 0
    pool._check_invariants()


def wait_blocked(pool: AnyPool, count: int = 1) -> None:
    """Wait until ``count`` submits are blocked on the pool's full queue."""
    pool_internals = internals(pool)
    wait_until(
        lambda: pool_internals.blocked() == count, f"{count} submit(s) block on the full queue"
    )


def timer_asleep(pool: AnyPool, target: Optional[float] = None) -> None:
    """Wait until the deadline timer has handled every wake-up and sleeps until ``target``."""
    pool_internals = internals(pool)
    wait_until(
        lambda: pool_internals.timer_sleeps_until(target), f"the timer sleeps until {target}"
    )


# -- scripts in a fresh interpreter ---------------------------------------------------------

#: The directories that hold the package under test and these helpers, for the subprocesses'
#: ``sys.path``.
SRC = Path(priority_executor.__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

#: Sets ``exiting`` as the interpreter starts to exit. Hooks registered with
#: ``threading._register_atexit`` run last-registered first, so this one runs before the
#: pool's own exit hook, registered when ``priority_executor`` was imported: a task waiting
#: on ``exiting`` is still running when the pool learns that the interpreter exits.
EXITING = """
import threading
exiting = threading.Event()
threading._register_atexit(exiting.set)
"""


def run_script(*parts: str, watchdog: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the script made of ``parts`` (each dedented) in a fresh interpreter.

    The interpreter imports the package under test from the same directory as this run, and
    can import this directory's helpers (``from support import internals``).
    ``TIMEOUT`` is defined for the script. With ``watchdog``, a script still running after
    twice that dumps every thread's traceback to stderr and exits with status 1.
    """
    header = f"TIMEOUT = {TIMEOUT!r}\n"
    if watchdog:
        header += (
            f"import faulthandler\nfaulthandler.dump_traceback_later({2 * TIMEOUT!r}, exit=True)\n"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), str(TESTS), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", header + "".join(textwrap.dedent(part) for part in parts)],
        capture_output=True,
        text=True,
        timeout=3 * TIMEOUT,
        env=env,
        check=False,
    )


def assert_clean_exit(result: subprocess.CompletedProcess[str], stdout: list[str]) -> None:
    """Exit status 0, exactly ``stdout``, and nothing at all on stderr."""
    assert (result.returncode, result.stdout.splitlines(), result.stderr) == (0, stdout, "")


# -- the exporters, read back by their libraries ---------------------------------------------


def scrape(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, parsed back by prometheus_client's own parser."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(registry).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def read(reader: Any) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points
