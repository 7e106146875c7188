"""Stress: many threads submit, cancel and shut down one pool at once; every task is accounted for.

Each run starts ``SUBMITTERS`` threads that submit their share of the run's tasks as fast as
they can, with random priorities (ints, floats, :class:`Priority`), random queue timeouts of 0
to ``MAX_TIMEOUT`` seconds on the real clock (``FRONT_MAX_TIMEOUT`` for a front), and some tasks
that raise. The submitters keep at most ``Run.in_flight`` futures unfinished between them, so
the queue stays about as long as the timeouts: deadlines fall around the moment a worker claims
the task, and many tasks with a timeout run while many others expire. ``CANCELLERS`` threads
take a random tenth of the futures just after they are submitted and cancel them, or move some
with ``set_priority``, racing the workers' claims; a shutdown thread calls
``shutdown(cancel_futures=...)`` when the stream is 70 to 95 % through (the last 2 % of each
submitter's share waits for it to begin), so later submissions are rejected. Some runs use
``ageing``, or ``max_queued`` with each ``when_full`` policy; some run a ``PriorityExecutor`` in
front of a ``ThreadPoolExecutor`` instead of the thread pool.

After each run, every submission is accounted for:

* submitted = ran + cancelled by the user + cancelled by shutdown + expired + evicted +
  rejected (after shutdown, or by a full queue with ``when_full="raise"`` or ``"evict"``);
* every future is done, and ``wait()`` sees it done (its waiters were woken);
* every task ran at most once, and a task ran iff its future holds its result or exception;
* no task both ran and reports cancelled;
* a task cancelled by the pool had a reason: its queue deadline had passed (and not before
  its submit), shutdown was asked to cancel futures, or a submit to a full queue evicted it;
* ``pool.statistics()`` agrees with these counts;
* no thread is left behind (the ``no_leaked_threads`` fixture), none died of an exception,
  nothing was logged by ``concurrent.futures`` at error level or above, and
  ``pool._check_invariants()`` passes.

Who cancelled a task is read from the done-callback this test adds to each future: callbacks
run in the thread that cancels the future, so a canceller thread means the user, the shutdown
thread means ``shutdown(cancel_futures=True)``, and one of the pool's threads means the
deadline. A future that was cancelled before its callback was added (a ``timeout=0`` task, or a
race between ``submit`` returning and the callback being added) calls back in its submitter's
thread; the deadline, the shutdown or an eviction then explains it, and when more than one
could, the task is counted as "pool_cancelled_ambiguous". A task evicted by another thread's
submit (``when_full="evict"``) calls back in that submitter's thread.

Run ``python -m pytest -m slow tests/attacks/test_stress.py -s`` to see the figures of each run.
"""

from __future__ import annotations

import functools
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import NamedTuple, Optional, Union

import pytest

from priority_executor import Priority, PriorityExecutor, PriorityThreadPoolExecutor, QueueFullError
from priority_executor._policy import WhenFull
from support import SHUTDOWN_MESSAGE, queue_full_message

#: Calls to ``submit`` per ``-m slow`` run of this module, over all of ``RUNS``. From 10 to 25 %
#: are refused (by the shutdown, or by a full queue, depending on thread scheduling), so over a
#: million tasks are accepted.
TOTAL_SUBMISSIONS = 1_360_000
SUBMITTERS = 8
CANCELLERS = 2
#: Queue timeouts are drawn from 0 to this many seconds (or are 0, or None).
MAX_TIMEOUT = 0.003
FRONT_MAX_TIMEOUT = 0.03
#: Every blocking wait of a stress run gives up after this long: a hang fails the test.
STRESS_TIMEOUT = 120.0
POOL_PREFIX = "stress-pool"


class Run(NamedTuple):
    seed: int
    max_workers: int
    # Futures not yet done that the submitters may have at once: this bounds the queue, so
    # that queue waits are about as long as the timeouts and deadlines race the claims.
    in_flight: int
    cancel_futures: bool
    shutdown_wait: bool
    ageing: Optional[float] = None
    max_queued: Optional[int] = None
    when_full: WhenFull = "block"
    front: bool = False  # a PriorityExecutor in front of a ThreadPoolExecutor of max_workers
    # A front takes longer to start a task (a hand-over between threads): its deadlines are
    # longer, so that they still race the claims instead of all passing in the queue.
    max_timeout: float = MAX_TIMEOUT


RUNS = [
    Run(seed=1, max_workers=1, in_flight=64, cancel_futures=False, shutdown_wait=True),
    Run(seed=2, max_workers=2, in_flight=256, cancel_futures=True, shutdown_wait=True),
    Run(3, max_workers=4, in_flight=128, cancel_futures=False, shutdown_wait=False, ageing=0.001),
    Run(seed=4, max_workers=8, in_flight=512, cancel_futures=True, shutdown_wait=False),
    Run(5, max_workers=2, in_flight=64, cancel_futures=False, shutdown_wait=True, max_queued=16),
    Run(
        seed=6,
        max_workers=3,
        in_flight=202,
        cancel_futures=True,
        shutdown_wait=True,
        max_queued=200,
        when_full="raise",
    ),
    Run(seed=7, max_workers=1, in_flight=256, cancel_futures=True, shutdown_wait=False),
    Run(
        seed=8,
        max_workers=16,
        in_flight=128,
        cancel_futures=False,
        shutdown_wait=False,
        max_queued=48,
        when_full="evict",
    ),
    Run(
        seed=9,
        max_workers=2,
        in_flight=128,
        cancel_futures=True,
        shutdown_wait=True,
        front=True,
        max_timeout=FRONT_MAX_TIMEOUT,
    ),
    Run(
        seed=10,
        max_workers=4,
        in_flight=64,
        cancel_futures=False,
        shutdown_wait=False,
        ageing=0.001,
        max_queued=32,
        when_full="evict",
        front=True,
        max_timeout=FRONT_MAX_TIMEOUT,
    ),
    Run(
        seed=11,
        max_workers=1,
        in_flight=96,
        cancel_futures=True,
        shutdown_wait=True,
        max_queued=64,
        when_full="raise",
        front=True,
        max_timeout=FRONT_MAX_TIMEOUT,
    ),
]
PER_RUN = TOTAL_SUBMISSIONS // len(RUNS)

Prio = Union[int, float, Priority]


class Totals:
    """Figures summed over the runs of this module, printed at its end."""

    def __init__(self) -> None:
        self.runs = 0
        self.figures: dict[str, int] = {}
        self.seconds = 0.0

    def add(self, figures: dict[str, int], seconds: float) -> None:
        self.runs += 1
        self.seconds += seconds
        for name, value in figures.items():
            self.figures[name] = self.figures.get(name, 0) + value


@pytest.fixture(scope="module")
def totals() -> Iterator[Totals]:
    tally = Totals()
    yield tally
    if tally.runs:
        figures = " ".join(f"{name}={value}" for name, value in tally.figures.items())
        print(
            f"\nstress total: {tally.runs} runs, seeds {[r.seed for r in RUNS]}, {figures}"
            f" in {tally.seconds:.1f}s"
        )


class ErrorLog(logging.Handler):
    """Records what ``concurrent.futures`` logs at error level or above."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def error_log() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    logger = logging.getLogger("concurrent.futures")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def random_priority(rng: random.Random) -> Prio:
    kind = rng.random()
    if kind < 0.4:
        return rng.randint(-5, 5)
    if kind < 0.7:
        return rng.uniform(-5.0, 5.0)
    return rng.choice(list(Priority))


def random_timeout(rng: random.Random, most: float) -> Optional[float]:
    kind = rng.random()
    if kind < 0.55:
        return None
    if kind < 0.62:
        return 0.0
    return rng.uniform(0.0, most)


class Stream:
    """One run's plan, and what each thread records; index ``i`` is one submission."""

    def __init__(self, run: Run, n: int) -> None:
        rng = random.Random(run.seed)
        self.run = run
        self.n = n
        self.priority = [random_priority(rng) for _ in range(n)]
        self.timeout = [random_timeout(rng, run.max_timeout) for _ in range(n)]
        self.raises = [rng.random() < 0.05 for _ in range(n)]
        # A tenth of the tasks are handed to the cancellers: most to cancel, some to move.
        self.to_cancel = [rng.random() < 0.10 for _ in range(n)]
        self.move_to: list[Optional[Prio]] = [
            random_priority(rng) if rng.random() < 0.3 else None for _ in range(n)
        ]
        # Shut down once every submitter has made this share of its submissions.
        self.trigger = rng.uniform(0.7, 0.95)
        self.submitted_at = [0.0] * n
        self.futures: list[Optional[Future[int]]] = [None] * n
        self.rejected: list[Optional[str]] = [None] * n
        self.runs = [0] * n
        self.runs_lock = threading.Lock()
        self.cancel_returned: list[Optional[bool]] = [None] * n
        self.moved = 0
        self.cancelled_in: list[Optional[str]] = [None] * n  # name of the cancelling thread
        self.done_at = [0.0] * n
        self.shutdown_began = threading.Event()
        self.trigger_reached = [threading.Event() for _ in range(SUBMITTERS)]
        self.in_flight = threading.BoundedSemaphore(run.in_flight)
        self.early_rejections: list[int] = []
        self.thread_errors: list[str] = []

    def work(self, i: int) -> int:
        with self.runs_lock:
            self.runs[i] += 1
        if self.raises[i]:
            raise ValueError(i)
        return i

    def on_done(self, i: int, future: Future[int]) -> None:
        self.done_at[i] = time.monotonic()
        if future.cancelled():
            self.cancelled_in[i] = threading.current_thread().name
        self.in_flight.release()


def guarded(stream: Stream, target: Callable[[], None]) -> Callable[[], None]:
    """Run ``target``, recording any exception so the test fails instead of losing it."""

    def body() -> None:
        try:
            target()
        except BaseException as exc:
            stream.thread_errors.append(f"{threading.current_thread().name}: {exc!r}")
            raise

    return body


def make_pool(run: Run) -> Union[PriorityThreadPoolExecutor, PriorityExecutor]:
    options = {"ageing": run.ageing, "max_queued": run.max_queued, "when_full": run.when_full}
    if run.front:
        inner = ThreadPoolExecutor(run.max_workers, thread_name_prefix=POOL_PREFIX)
        return PriorityExecutor(inner, **options)  # type: ignore[arg-type]
    return PriorityThreadPoolExecutor(
        max_workers=run.max_workers,
        thread_name_prefix=POOL_PREFIX,
        **options,  # type: ignore[arg-type]
    )


def run_stream(stream: Stream) -> Union[PriorityThreadPoolExecutor, PriorityExecutor]:
    """Submit, cancel and shut down concurrently; return the pool, shut down and joined."""
    run = stream.run
    pool = make_pool(run)
    cancel_queue: queue.SimpleQueue[Optional[int]] = queue.SimpleQueue()
    start = threading.Barrier(SUBMITTERS + 1, timeout=STRESS_TIMEOUT)

    def submitter(k: int) -> None:
        work = stream.work
        on_done = stream.on_done
        mine = range(k, stream.n, SUBMITTERS)
        trigger = mine[int(len(mine) * stream.trigger)]
        # The last few submissions of each thread wait until shutdown has begun, so that it
        # always lands mid-stream however the threads are scheduled.
        hold = mine[-len(mine) // 50]
        start.wait()
        for i in mine:
            if i == trigger:
                stream.trigger_reached[k].set()
            elif i == hold:
                assert stream.shutdown_began.wait(STRESS_TIMEOUT), "shutdown never began"
            assert stream.in_flight.acquire(timeout=STRESS_TIMEOUT), "futures never finish"
            stream.submitted_at[i] = time.monotonic()
            try:
                future = pool.submit(
                    work, i, priority=stream.priority[i], timeout=stream.timeout[i]
                )
            except RuntimeError as exc:
                stream.in_flight.release()
                stream.rejected[i] = str(exc)
                if not stream.shutdown_began.is_set() and not isinstance(exc, QueueFullError):
                    stream.early_rejections.append(i)
                continue
            stream.futures[i] = future
            future.add_done_callback(functools.partial(on_done, i))
            if stream.to_cancel[i]:
                cancel_queue.put(i)

    def canceller() -> None:
        moved = 0
        while (i := cancel_queue.get(timeout=STRESS_TIMEOUT)) is not None:
            future = stream.futures[i]
            assert future is not None
            priority = stream.move_to[i]
            if priority is None:
                stream.cancel_returned[i] = future.cancel()
            else:
                moved += pool.set_priority(future, priority)
        with stream.runs_lock:
            stream.moved += moved

    def shutter() -> None:
        for reached in stream.trigger_reached:
            assert reached.wait(STRESS_TIMEOUT), "a submitter never reached the trigger"
        stream.shutdown_began.set()
        pool.shutdown(wait=run.shutdown_wait, cancel_futures=run.cancel_futures)

    try:
        submitters = [
            threading.Thread(
                target=guarded(stream, functools.partial(submitter, k)),
                name=f"stress-submitter-{k}",
            )
            for k in range(SUBMITTERS)
        ]
        cancellers = [
            threading.Thread(target=guarded(stream, canceller), name=f"stress-canceller-{k}")
            for k in range(CANCELLERS)
        ]
        shutdown_thread = threading.Thread(target=guarded(stream, shutter), name="stress-shutdown")
        for thread in [*submitters, *cancellers, shutdown_thread]:
            thread.start()
        start.wait()
        for thread in submitters:
            thread.join(STRESS_TIMEOUT)
        for _ in cancellers:
            cancel_queue.put(None)
        for thread in [*submitters, *cancellers, shutdown_thread]:
            thread.join(STRESS_TIMEOUT)
            assert not thread.is_alive(), f"seed {run.seed}: {thread.name} hangs"
    finally:
        for reached in stream.trigger_reached:
            reached.set()  # never leave the shutdown thread waiting
        pool.shutdown(wait=True)
    return pool


def account(
    stream: Stream, pool: Union[PriorityThreadPoolExecutor, PriorityExecutor]
) -> dict[str, int]:
    """Check every submission's outcome; return the figures of the run."""
    run = stream.run
    problems: list[str] = []
    figures = dict.fromkeys(
        [
            "submitted",
            "accepted",
            "ran",
            "raised",
            "user_cancelled",
            "shutdown_cancelled",
            "expired",
            "evicted",
            "pool_cancelled_ambiguous",
            "rejected",
            "rejected_full",
            "ran_with_timeout",
            "moved",
        ],
        0,
    )
    figures["moved"] = stream.moved
    full_message = queue_full_message(run.max_queued)
    submitters = {f"stress-submitter-{k}" for k in range(SUBMITTERS)}
    cancellers = {f"stress-canceller-{k}" for k in range(CANCELLERS)}

    def problem(i: int, what: str) -> None:
        if len(problems) < 20:
            problems.append(
                f"task {i} (priority={stream.priority[i]!r}, timeout={stream.timeout[i]!r}): {what}"
            )

    accepted: list[Future[int]] = []
    for i in range(stream.n):
        figures["submitted"] += 1
        future = stream.futures[i]
        runs = stream.runs[i]
        if runs > 1:
            problem(i, f"ran {runs} times")
        if future is None:
            if runs:
                problem(i, "ran although submit raised")
            if stream.rejected[i] == SHUTDOWN_MESSAGE:
                figures["rejected"] += 1
            elif stream.rejected[i] == full_message and run.when_full in ("raise", "evict"):
                figures["rejected_full"] += 1
            else:
                problem(i, f"neither queued nor rejected as expected: {stream.rejected[i]!r}")
            continue
        accepted.append(future)
        if not future.done():
            problem(i, "future not done after shutdown(wait=True)")
            continue
        if future.cancelled():
            if runs:
                problem(i, "ran and reports cancelled")
            by = stream.cancelled_in[i]
            timeout = stream.timeout[i]
            if by in cancellers:
                if stream.cancel_returned[i] is not True:
                    problem(i, "cancelled in a canceller thread whose cancel() did not say so")
                figures["user_cancelled"] += 1
            elif by == "stress-shutdown":
                if not run.cancel_futures:
                    problem(i, "cancelled by shutdown(cancel_futures=False)")
                figures["shutdown_cancelled"] += 1
            elif by is not None and by.startswith((POOL_PREFIX, pool._thread_name_prefix)):
                if timeout is None:
                    problem(i, "expired without a timeout")
                elif stream.done_at[i] < stream.submitted_at[i] + timeout:
                    problem(i, "expired before its deadline")
                figures["expired"] += 1
            elif by == f"stress-submitter-{i % SUBMITTERS}":
                # Cancelled before its own submitter added the done-callback: at submit
                # (timeout=0, or a deadline that passed while submit waited for room), by
                # the timer or a worker just after, by shutdown, or evicted by another submit.
                reasons = [
                    name
                    for name, possible in [
                        ("expired", timeout is not None),
                        ("shutdown_cancelled", run.cancel_futures),
                        ("evicted", run.when_full == "evict"),
                    ]
                    if possible
                ]
                if timeout == 0.0:
                    figures["expired"] += 1
                elif not reasons:
                    problem(i, "cancelled without a reason")
                elif len(reasons) == 1:
                    figures[reasons[0]] += 1
                else:
                    figures["pool_cancelled_ambiguous"] += 1
            elif by in submitters:
                # Another submit made room by evicting this task.
                if run.when_full != "evict":
                    problem(i, f"cancelled by another submit: {by}")
                figures["evicted"] += 1
            else:
                problem(i, f"cancelled in an unexpected thread: {by!r}")
            continue
        if runs != 1:
            problem(i, "future holds an outcome but the task did not run")
        if stream.cancel_returned[i] is True:
            problem(i, "ran although cancel() returned True")
        exc = future.exception(timeout=0)
        if stream.raises[i]:
            if not (isinstance(exc, ValueError) and exc.args == (i,)):
                problem(i, f"expected ValueError({i}), got {exc!r}")
            figures["raised"] += 1
        elif exc is not None or future.result(timeout=0) != i:
            problem(i, f"expected result {i}, got {exc!r}")
        figures["ran"] += 1
        if stream.timeout[i] is not None:
            figures["ran_with_timeout"] += 1

    _done, not_done = wait(accepted, timeout=0)
    if not_done:
        problems.append(f"wait() does not see {len(not_done)} done futures as done")
    if stream.early_rejections:
        problems.append(f"rejected before shutdown: {stream.early_rejections[:5]}")
    problems.extend(stream.thread_errors)
    try:
        pool._check_invariants()
    except AssertionError as exc:
        problems.append(f"_check_invariants: {exc}")
    if len(pool._threads) > run.max_workers:
        problems.append(f"{len(pool._threads)} threads for max_workers={run.max_workers}")
    # The pool's own counts agree. It cannot tell a user's cancel() that wins the race with
    # an expiry from the expiry, so only the sum of cancelled and expired is compared.
    stats = pool.statistics()
    accepted_count = figures["submitted"] - figures["rejected"] - figures["rejected_full"]
    figures["accepted"] = accepted_count
    cancelled_or_expired = (
        figures["user_cancelled"]
        + figures["shutdown_cancelled"]
        + figures["expired"]
        + figures["evicted"]
        + figures["pool_cancelled_ambiguous"]
    )
    expected_stats = {
        "submitted": accepted_count,
        "rejected": figures["rejected"] + figures["rejected_full"],
        "completed": figures["ran"] - figures["raised"],
        "failed": figures["raised"],
        "cancelled + expired": cancelled_or_expired,
        "queued": 0,
        "running": 0,
    }
    reported = {
        "submitted": stats.submitted,
        "rejected": stats.rejected,
        "completed": stats.completed,
        "failed": stats.failed,
        "cancelled + expired": stats.cancelled + stats.expired,
        "queued": stats.queued,
        "running": stats.running,
    }
    if reported != expected_stats:
        problems.append(f"statistics() reports {reported}, the futures say {expected_stats}")
    outcomes = (
        figures["ran"] + cancelled_or_expired + figures["rejected"] + figures["rejected_full"]
    )
    if outcomes != figures["submitted"]:
        problems.append(f"{figures['submitted']} submitted but {outcomes} outcomes")
    assert not problems, f"seed {run.seed} ({run}):\n" + "\n".join(problems)
    return figures


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS, ids=[f"seed{r.seed}" for r in RUNS])
def test_every_submission_is_accounted_for_under_concurrent_load(
    run: Run, totals: Totals, error_log: ErrorLog, thread_deaths: list[str]
) -> None:
    began = time.perf_counter()
    stream = Stream(run, PER_RUN)
    pool = run_stream(stream)
    figures = account(stream, pool)
    seconds = time.perf_counter() - began
    assert not thread_deaths, f"seed {run.seed}: threads died: {thread_deaths}"
    logged = [f"{r.levelname}: {r.getMessage()}" for r in error_log.records]
    assert not logged, f"seed {run.seed}: concurrent.futures logged {logged}"
    # The deadlines must really have raced the claims: some tasks with a timeout ran, some expired.
    assert figures["ran_with_timeout"] > 0, f"seed {run.seed}: no task with a timeout ran"
    assert figures["expired"] > 0, f"seed {run.seed}: no task expired"
    assert figures["rejected"] > 0, f"seed {run.seed}: shutdown did not land mid-stream"
    totals.add(figures, seconds)
    shown = " ".join(f"{name}={value}" for name, value in figures.items())
    print(f"\nstress {run}: {shown} in {seconds:.1f}s ({stream.n / seconds:.0f} submissions/s)")
