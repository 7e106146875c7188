"""Model-based tests: seeded random operations checked step by step against a reference model.

Two models:

* The pool. One worker (``max_workers=1``) and a fake clock. Every task is a gate: when it
  runs it appends its number to a list and blocks until the test releases it, so the worker
  is always either idle or inside a known task, and releasing that task lets the worker
  claim exactly one more: the best queued entry. Operations are drawn at random (submit with
  a random priority and timeout, cancel a random future, advance the clock, release the
  running task, advance and release at once so that the timer and the worker race to expire
  the same entries, ``set_priority``, ``pause``/``resume``, shutdown with or without
  ``cancel_futures``) and, after each, the pool must agree with a sorted list: best =
  highest priority (or, with ``ageing``, smallest ``submit time - priority * ageing``), then
  earliest submission or move; a task has expired once ``clock >= submit time + timeout``;
  with ``max_queued`` a submit to a full queue raises ``QueueFullError`` or evicts the
  worst task. Each seed picks one of ``CONFIGS``. After every step the test compares the
  state of every future, the order in which tasks ran, the queue length, ``statistics()``,
  and calls ``pool._check_invariants()``.
* The queue alone. ``_queue.TaskQueue`` (strict priority) and ``_queue.HeapQueue`` (ageing)
  driven from one thread with no pool (push, pop, remove, pop_due, drain, requeue, worst,
  next_deadline, find) against a plain list sorted by ``(rank, seq)``, with
  ``_check_invariants()`` after every step and ``COMPACT_SLACK`` varied so sweeps run often.

A failure names its seed and the operations that led to it; rerun a single seed with
``-k 'seed_17]'`` (fast run) or ``-m slow -k 'seed_1017]'``.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, wait
from typing import Any, NamedTuple, Optional, Union

import pytest

from conftest import TIMEOUT, FakeClock
from priority_executor import Priority, PriorityThreadPoolExecutor, QueueFullError, _queue
from priority_executor._orders import HeapQueue, TaskQueue
from priority_executor._policy import Number, WhenFull, aged_rank, strict_rank
from priority_executor._queue import Entry, QueueBase
from support import SHUTDOWN_MESSAGE, exact, internals, queue_full_message

#: Seeds of the default run, and operations per seed.
FAST_SEEDS = range(50)
FAST_STEPS = 40
#: Seeds of the ``-m slow`` run, and operations per seed.
SLOW_SEEDS = range(1000, 1600)
SLOW_STEPS = 150
#: Seeds of the single-threaded queue model (default run, each for both queues), and steps.
QUEUE_SEEDS = range(100)
QUEUE_STEPS = 300

Prio = Union[int, float, Priority]

# Ties are frequent, ints, floats and Priority members mix, and extremes are included.
PRIORITIES: list[Prio] = [
    -2,
    -1,
    0,
    0,
    1,
    1,
    2,
    0.5,
    -0.5,
    1.0,
    Priority.LOW,
    Priority.NORMAL,
    Priority.HIGH,
    10**30,
    float("inf"),
    -float("inf"),
    5e-324,
]
# Multiples of 0.25 add exactly, so deadlines land exactly on clock readings.
TIMEOUTS: list[Optional[float]] = [None, None, None, None, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 4.0]
ADVANCES = [0.0, 0.25, 0.5, 0.75, 1.0, 2.0]


class Figures:
    """Seeds and operations run by this module, printed at its end (``-s`` shows them)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, name: str, value: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + value


@pytest.fixture(scope="module")
def figures() -> Iterator[Figures]:
    tally = Figures()
    yield tally
    if tally.counts:
        shown = " ".join(f"{name}={value}" for name, value in sorted(tally.counts.items()))
        print(f"\nmodel total: {shown}")


# -- the pool against a sorted list ----------------------------------------------------------


class Config(NamedTuple):
    """A pool configuration the model knows how to predict."""

    name: str
    ageing: Optional[float] = None
    max_queued: Optional[int] = None
    when_full: WhenFull = "block"


CONFIGS = [
    Config("strict"),
    Config("strict"),
    Config("ageing", ageing=0.5),
    Config("ageing", ageing=2.0),
    Config("max_queued-raise", max_queued=3, when_full="raise"),
    Config("max_queued-evict", max_queued=3, when_full="evict"),
    Config("ageing-evict", ageing=1.0, max_queued=4, when_full="evict"),
]


class GateTask:
    """A task that records that it ran, then blocks until the test releases it."""

    def __init__(self, ident: int, order: list[int], raises: bool) -> None:
        self.ident = ident
        self.order = order
        self.raises = raises
        self.started = threading.Event()
        self.released = threading.Event()

    def __call__(self) -> int:
        self.order.append(self.ident)
        self.started.set()
        if not self.released.wait(TIMEOUT):
            raise TimeoutError(f"task {self.ident} was never released")
        if self.raises:
            raise ValueError(self.ident)
        return self.ident


class ModelEntry:
    def __init__(
        self,
        ident: int,
        priority: Prio,
        queued_at: float,
        deadline: Optional[float],
        task: GateTask,
    ) -> None:
        self.ident = ident
        self.priority = priority
        self.queued_at = queued_at
        self.deadline = deadline
        self.task = task
        self.rank: Number = 0
        self.seq = 0


QUEUED, RUNNING, RAN, CANCELLED, EXPIRED, DRAINED, EVICTED = (
    "queued",
    "running",
    "ran",
    "cancelled",
    "expired",
    "drained",
    "evicted",
)


class PoolModel:
    """The reference: what one worker, an order of ranks and a clock must produce.

    The rank of a task is ``-priority``, or with ageing ``submit time - priority * ageing``;
    the smallest ``(rank, seq)`` runs first, and ``seq`` counts submissions and moves.
    """

    def __init__(self, now: float, config: Config) -> None:
        self.now = now
        self.config = config
        self.queued: list[ModelEntry] = []
        self.running: Optional[ModelEntry] = None
        self.state: dict[int, str] = {}
        self.order: list[int] = []  # tasks in the order they started
        self.paused = False
        self.shutdown = False
        self.seq = 0
        self.rejected = 0

    def place(self, entry: ModelEntry) -> None:
        """Give ``entry`` its rank for its priority, behind everything placed before."""
        ageing = self.config.ageing
        if ageing is None:
            entry.rank = -entry.priority
        else:
            entry.rank = entry.queued_at - entry.priority * ageing
        entry.seq = self.seq
        self.seq += 1

    def best(self) -> Optional[ModelEntry]:
        return min(self.queued, key=lambda e: (e.rank, e.seq)) if self.queued else None

    def worst(self) -> Optional[ModelEntry]:
        return max(self.queued, key=lambda e: (e.rank, e.seq)) if self.queued else None

    def expire_due(self) -> list[ModelEntry]:
        due = [e for e in self.queued if e.deadline is not None and self.now >= e.deadline]
        for entry in due:
            self.queued.remove(entry)
            self.state[entry.ident] = EXPIRED
        return due

    def start_next(self) -> Optional[ModelEntry]:
        """The worker, free now, takes the best queued task (none while paused)."""
        entry = None if self.paused else self.best()
        if entry is not None:
            self.queued.remove(entry)
            self.state[entry.ident] = RUNNING
            self.order.append(entry.ident)
        self.running = entry
        return entry

    def count(self, *states: str) -> int:
        return sum(state in states for state in self.state.values())


class PoolHarness:
    """Drives the real pool and the model with the same operations, and compares them."""

    def __init__(self, seed: int, clock: FakeClock) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = self.rng.choice(CONFIGS)
        self.clock = clock
        self.pool = PriorityThreadPoolExecutor(
            max_workers=1,
            clock=clock,
            ageing=self.config.ageing,
            max_queued=self.config.max_queued,
            when_full=self.config.when_full,
        )
        clock.attach(self.pool)
        self.model = PoolModel(clock.now, self.config)
        self.order: list[int] = []
        self.futures: dict[int, Future[int]] = {}
        self.tasks: dict[int, GateTask] = {}
        self.raises: dict[int, bool] = {}
        self.log: list[str] = [f"config {self.config}"]

    # -- operations ------------------------------------------------------------------------

    def submit(self) -> None:
        rng = self.rng
        model = self.model
        config = self.config
        ident = len(self.tasks)
        priority = rng.choice(PRIORITIES)
        timeout = rng.choice(TIMEOUTS)
        raises = rng.random() < 0.2
        self.log.append(f"submit #{ident} priority={priority!r} timeout={timeout!r}")
        task = GateTask(ident, self.order, raises)
        self.tasks[ident] = task
        self.raises[ident] = raises
        deadline = None if timeout is None else model.now + timeout
        entry = ModelEntry(ident, priority, model.now, deadline, task)
        evicted = None
        if model.shutdown:
            refusal: Optional[tuple[type[Exception], str]] = (RuntimeError, SHUTDOWN_MESSAGE)
        elif timeout == 0.0 or config.max_queued is None or len(model.queued) < config.max_queued:
            refusal = None
        else:
            model.place(entry)
            worst = model.worst()
            if config.when_full == "evict" and worst is not None and entry.rank < worst.rank:
                refusal, evicted = None, worst
            else:
                refusal = (QueueFullError, queue_full_message(config.max_queued))
        if refusal is not None:
            error, message = refusal
            with pytest.raises(error, match=exact(message)):
                self.pool.submit(task, priority=priority, timeout=timeout)
            model.rejected += 1
            del self.tasks[ident]
            return
        future = self.pool.submit(task, priority=priority, timeout=timeout)
        self.futures[ident] = future
        if timeout == 0.0:
            model.state[ident] = EXPIRED
            assert future.cancelled(), "a timeout=0 task was not cancelled at submit"
            return
        if evicted is not None:
            model.queued.remove(evicted)
            model.state[evicted.ident] = EVICTED
            assert self.futures[evicted.ident].cancelled(), f"#{evicted.ident} not evicted"
        else:
            model.place(entry)
        model.state[ident] = QUEUED
        model.queued.append(entry)
        if model.running is None and not model.paused:
            started = model.start_next()
            assert started is entry
            assert task.started.wait(TIMEOUT), f"idle worker did not start #{ident}"

    def cancel(self) -> None:
        if not self.futures:
            return
        ident = self.rng.choice(sorted(self.futures))
        self.log.append(f"cancel #{ident}")
        state = self.model.state[ident]
        expected = state in (QUEUED, CANCELLED, EXPIRED, DRAINED, EVICTED)
        assert self.futures[ident].cancel() is expected, f"cancel() of a {state} task"
        if state == QUEUED:
            entry = next(e for e in self.model.queued if e.ident == ident)
            self.model.queued.remove(entry)
            self.model.state[ident] = CANCELLED

    def set_priority(self) -> None:
        if not self.futures:
            return
        ident = self.rng.choice(sorted(self.futures))
        priority = self.rng.choice(PRIORITIES)
        self.log.append(f"set_priority #{ident} {priority!r}")
        model = self.model
        queued = next((e for e in model.queued if e.ident == ident), None)
        moved = self.pool.set_priority(self.futures[ident], priority)
        assert moved is (queued is not None), f"set_priority of a {model.state[ident]} task"
        if queued is not None:
            queued.priority = priority
            model.place(queued)

    def pause(self) -> None:
        self.log.append("pause")
        self.pool.pause()
        self.model.paused = True

    def resume(self) -> None:
        self.log.append("resume")
        self.pool.resume()
        self.model.paused = False
        self.start_if_idle()

    def start_if_idle(self) -> None:
        if self.model.running is None:
            entry = self.model.start_next()
            if entry is not None:
                assert entry.task.started.wait(TIMEOUT), f"idle worker did not start #{entry.ident}"

    def advance(self, release: bool = False) -> None:
        dt = self.rng.choice(ADVANCES)
        model = self.model
        running = model.running
        self.log.append(f"advance {dt}" + (" and release" if release and running else ""))
        model.now += dt
        due = model.expire_due()
        self.clock.advance(dt)
        assert self.clock.now == model.now
        if release and running is not None:
            # The timer and the worker now race to expire ``due``; either way it expires.
            running.task.released.set()
            self.finish(running)
        self.settle(due)

    def release(self) -> None:
        running = self.model.running
        if running is None:
            return
        self.log.append(f"release #{running.ident}")
        running.task.released.set()
        self.finish(running)

    def finish(self, running: ModelEntry) -> None:
        model = self.model
        model.state[running.ident] = RAN
        future = self.futures[running.ident]
        following = model.start_next()
        wait([future], timeout=TIMEOUT)
        assert future.done(), f"released task #{running.ident} did not finish"
        if following is not None:
            assert following.task.started.wait(TIMEOUT), (
                f"expected #{following.ident} to run next; ran {self.order}"
            )

    def shutdown(self) -> None:
        model = self.model
        cancel_futures = self.rng.random() < 0.5
        idle = model.running is None and (cancel_futures or not model.queued)
        self.log.append(f"shutdown(wait={idle}, cancel_futures={cancel_futures})")
        model.shutdown = True
        model.paused = False  # shutdown resumes a paused pool
        drained = []
        if cancel_futures:
            drained, model.queued = model.queued, []
            for entry in drained:
                model.state[entry.ident] = DRAINED
        self.pool.shutdown(wait=idle, cancel_futures=cancel_futures)
        for entry in drained:
            assert self.futures[entry.ident].cancelled(), "shutdown did not cancel a queued task"
        self.start_if_idle()

    def settle(self, due: list[ModelEntry]) -> None:
        """Wait until the expiries the model expects have happened."""
        futures = [self.futures[e.ident] for e in due]
        _done, not_done = wait(futures, timeout=TIMEOUT)
        assert not not_done, f"not expired: {sorted(e.ident for e in due)}"

    # -- the comparison --------------------------------------------------------------------

    def check(self) -> None:
        model = self.model
        self.pool._check_invariants()
        assert self.order == model.order, f"run order {self.order}, model {model.order}"
        assert internals(self.pool).queued() == len(model.queued), "queue length"
        finished = []
        for ident, future in self.futures.items():
            state = model.state[ident]
            if state == QUEUED:
                assert not future.done(), f"#{ident} should be queued"
                assert not future.running(), f"#{ident} should be queued"
            elif state == RUNNING:
                assert future.running(), f"#{ident} should be running"
            elif state == RAN:
                assert future.done(), f"#{ident} should have run"
                assert not future.cancelled(), f"#{ident} should have run"
                exc = future.exception(timeout=0)
                if self.raises[ident]:
                    assert isinstance(exc, ValueError), f"#{ident} raised {exc!r}"
                    assert exc.args == (ident,)
                else:
                    assert exc is None, f"#{ident} raised {exc!r}"
                    assert future.result(timeout=0) == ident
                finished.append(future)
            else:
                assert future.cancelled(), f"#{ident} should be {state}"
                assert not self.tasks[ident].started.is_set(), f"#{ident} {state} but ran"
                finished.append(future)
        # wait() sees every finished future, so cancelled ones woke their waiters.
        _done, not_done = wait(finished, timeout=0)
        assert not not_done, f"{len(not_done)} done futures not seen by wait()"
        self.check_statistics(final=False)

    def check_statistics(self, *, final: bool) -> None:
        """``statistics()`` agrees with the model.

        A worker counts a task's outcome when it next takes the lock, a moment after the
        future is done; until then the task still counts as running. So between steps only
        ``completed + failed + running`` is exact; after shutdown(wait=True) each one is.
        """
        model = self.model
        stats = self.pool.statistics()
        queued_by_priority = Counter(e.priority for e in model.queued)
        started = model.count(RAN, RUNNING)
        reported = {
            "submitted": stats.submitted,
            "rejected": stats.rejected,
            "queued": stats.queued,
            "queued_by_priority": dict(stats.queued_by_priority),
            "cancelled": stats.cancelled,
            "expired": stats.expired,
            "started": stats.completed + stats.failed + stats.running,
            "paused": stats.paused,
        }
        expected = {
            "submitted": len(self.futures),
            "rejected": model.rejected,
            "queued": len(model.queued),
            "queued_by_priority": dict(queued_by_priority),
            "cancelled": model.count(CANCELLED, DRAINED, EVICTED),
            "expired": model.count(EXPIRED),
            "started": started,
            "paused": model.paused,
        }
        if final:
            failed = sum(self.raises[i] for i, s in model.state.items() if s == RAN)
            reported.update(completed=stats.completed, failed=stats.failed, running=stats.running)
            expected.update(completed=started - failed, failed=failed, running=0)
        assert reported == expected, "statistics() differs from the model"

    def step(self, shutdown: bool) -> None:
        ops = [self.submit] * 5 + [self.cancel, self.cancel, self.advance, self.advance]
        ops += [self.release] * 3 + [lambda: self.advance(release=True), self.set_priority]
        if self.model.paused:
            ops.append(self.resume)
        elif not self.model.shutdown:  # pausing a pool that was shut down: see test_faults
            ops.append(self.pause)
        (self.shutdown if shutdown else self.rng.choice(ops))()
        self.check()

    def finish_all(self) -> None:
        """Shut down (if not yet) and let every queued task run or expire, as the model says."""
        if not self.model.shutdown:
            self.shutdown()
            self.check()
        while self.model.running is not None:
            self.release()
            self.check()
        self.log.append("shutdown(wait=True)")
        self.pool.shutdown(wait=True)
        assert not self.model.queued
        assert all(f.done() for f in self.futures.values()), "a future is not done at the end"
        self.check()
        self.check_statistics(final=True)


def run_pool_model(seed: int, steps: int, clock: FakeClock, figures: Figures) -> None:
    harness = PoolHarness(seed, clock)
    # Shut down mid-sequence in most seeds; the others shut down at the end.
    shutdown_at = harness.rng.randrange(steps // 3, steps + steps // 4)
    try:
        for step in range(steps):
            harness.step(shutdown=step == shutdown_at)
        harness.finish_all()
    except (AssertionError, pytest.fail.Exception) as exc:
        recent = "\n  ".join(harness.log[-20:])
        pytest.fail(
            f"seed {seed} ({harness.config}): {exc}\nlast operations:\n  {recent}", pytrace=True
        )
    finally:
        for task in harness.tasks.values():
            task.released.set()
        harness.pool.shutdown(wait=True, cancel_futures=True)
    model = harness.model
    figures.add("pool_seeds", 1)
    figures.add(f"pool_seeds_{harness.config.name}", 1)
    figures.add("pool_operations", len(harness.log) - 1)
    figures.add("pool_tasks_ran", model.count(RAN))
    figures.add("pool_tasks_expired", model.count(EXPIRED))
    figures.add("pool_tasks_cancelled", model.count(CANCELLED, DRAINED, EVICTED))
    figures.add("pool_submits_rejected", model.rejected)


@pytest.mark.parametrize("seed", FAST_SEEDS, ids=[f"seed_{s}" for s in FAST_SEEDS])
def test_pool_with_one_worker_matches_the_model(
    seed: int, clock: FakeClock, figures: Figures
) -> None:
    run_pool_model(seed, FAST_STEPS, clock, figures)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS, ids=[f"seed_{s}" for s in SLOW_SEEDS])
def test_pool_with_one_worker_matches_the_model_long(
    seed: int, clock: FakeClock, figures: Figures
) -> None:
    run_pool_model(seed, SLOW_STEPS, clock, figures)


# -- the queue against a plain list ----------------------------------------------------------


def noop() -> None:
    pass


class QueueHarness:
    """Drives a queue and a list of ``(rank, seq, deadline, entry)`` with the same operations.

    ``TaskQueue`` (strict priority) gets the ranks the pool gives it, ``-priority``;
    ``HeapQueue`` (ageing) gets aged ranks, ``queued_at - priority * ageing``, from a few
    submission times and rates so that ties are frequent.
    """

    def __init__(self, seed: int, queue: QueueBase) -> None:
        self.rng = random.Random(seed)
        self.queue = queue
        self.aged = isinstance(queue, HeapQueue)
        self.ref: list[tuple[Any, int, Optional[float], Entry]] = []
        self.next_seq = 0
        self.futures: list[Future[Any]] = []
        self.entry_of: dict[int, Entry] = {}  # id(future) -> its entry, queued or not
        self.log: list[str] = []
        self.ops = 0

    def leave(self, entry: Entry) -> None:
        """What the scheduler does with an entry it removed: take it, settle its future."""
        future = entry.detach()
        if self.rng.random() < 0.5:
            future.cancel()
        future.set_running_or_notify_cancel()

    def random_live(self) -> Optional[tuple[Any, int, Optional[float], Entry]]:
        return self.rng.choice(self.ref) if self.ref else None

    def rank(self, priority: Prio) -> Number:
        if not self.aged:
            return strict_rank(priority)
        if priority in (float("inf"), -float("inf")) or abs(priority) > 1e6:
            priority = 3  # inf * ageing and inf - inf are no ranks; ageing refuses none
        queued_at = self.rng.choice([0.0, 0.5, 1.0, 1.0, 2.0])
        return aged_rank(priority, queued_at, self.rng.choice([0.25, 0.5, 1.0]))

    def push(self) -> None:
        rng = self.rng
        future: Future[Any] = Future()
        priority = rng.choice(PRIORITIES)
        deadline = rng.choice([None, None, 1.0, 2.0, 2.0, 3.5, 10.0])
        entry = Entry(future, noop, (), {}, priority, deadline)
        rank = self.rank(priority)
        self.log.append(f"push priority={priority!r} deadline={deadline!r}")
        self.queue.push(entry, rank)
        self.ref.append((rank, self.next_seq, deadline, entry))
        self.next_seq += 1
        self.futures.append(future)
        self.entry_of[id(future)] = entry

    def pop(self) -> None:
        self.log.append("pop")
        expected = min(self.ref, key=lambda item: item[:2]) if self.ref else None
        got = self.queue.pop()
        if expected is None:
            assert got is None, "pop from an empty queue returned an entry"
            return
        assert got is expected[3], f"pop did not return the entry pushed as seq {expected[1]}"
        self.ref.remove(expected)
        self.leave(got)

    def remove(self) -> None:
        item = self.random_live()
        if item is None:
            return
        self.log.append(f"remove seq {item[1]}")
        self.queue.remove(item[3])
        self.ref.remove(item)
        self.leave(item[3])

    def pop_due(self) -> None:
        now = self.rng.choice([0.0, 1.0, 2.0, 3.0, 3.5, 20.0])
        self.log.append(f"pop_due({now})")
        expected = [item for item in self.ref if item[2] is not None and now >= item[2]]
        got = self.queue.pop_due(now)
        assert len(got) == len(expected), f"pop_due({now}) returned {len(got)} entries"
        assert {id(e) for e in got} == {id(item[3]) for item in expected}, "pop_due entries"
        for item in expected:
            self.ref.remove(item)
        for entry in got:
            self.leave(entry)

    def requeue(self) -> None:
        item = self.random_live()
        if item is None:
            return
        priority = self.rng.choice(PRIORITIES)
        rank = self.rank(priority)
        self.log.append(f"requeue seq {item[1]} rank={rank!r}")
        future = item[3].future
        successor = self.queue.requeue(item[3], rank)
        # The task continues in a successor entry; the old one is a tombstone.
        assert successor.future is future, "requeue lost the future"
        assert successor.deadline == item[2], "requeue changed the deadline"
        self.ref.remove(item)
        self.ref.append((rank, self.next_seq, item[2], successor))
        self.entry_of[id(future)] = successor
        self.next_seq += 1

    def evict(self) -> None:
        """What the pool does when full: find the entry that would run last, remove it."""
        self.log.append("evict")
        expected = max(self.ref, key=lambda item: item[:2]) if self.ref else None
        got = self.queue.worst()
        if expected is None:
            assert got is None, "worst() of an empty queue returned an entry"
            return
        assert got is expected[3], f"worst() is not the entry pushed as seq {expected[1]}"
        self.queue.remove(got)
        self.ref.remove(expected)
        self.leave(got)

    def drain(self) -> None:
        self.log.append("drain")
        expected = [item[3] for item in sorted(self.ref, key=lambda item: item[:2])]
        got = self.queue.drain()
        assert [id(e) for e in got] == [id(e) for e in expected], "drain is not best first"
        self.ref.clear()
        for entry in got:
            self.leave(entry)

    def look(self) -> None:
        """The read-only operations: len, next_deadline, find."""
        self.log.append("look")
        assert len(self.queue) == len(self.ref), "len"
        deadlines = [item[2] for item in self.ref if item[2] is not None]
        assert self.queue.next_deadline() == (min(deadlines) if deadlines else None)
        if self.futures:
            future = self.rng.choice(self.futures)
            live = {id(item[3].future) for item in self.ref}
            expected = self.entry_of[id(future)] if id(future) in live else None
            assert self.queue.find(future) is expected, "find"

    def step(self, growing: bool) -> None:
        ops = [self.push] * (6 if growing else 1) + [self.pop, self.remove] * (1 if growing else 3)
        ops += [self.pop_due, self.requeue, self.evict, self.look, self.look]
        if self.rng.random() < 0.01:
            ops = [self.drain]
        self.rng.choice(ops)()
        self.ops += 1
        self.queue._check_invariants()
        assert len(self.queue) == len(self.ref), "len"


@pytest.mark.parametrize("kind", [TaskQueue, HeapQueue], ids=["buckets", "heap"])
@pytest.mark.parametrize("seed", QUEUE_SEEDS, ids=[f"seed_{s}" for s in QUEUE_SEEDS])
def test_queue_matches_a_sorted_list(
    seed: int, kind: type[QueueBase], monkeypatch: pytest.MonkeyPatch, figures: Figures
) -> None:
    rng = random.Random(-seed)
    monkeypatch.setattr(_queue, "COMPACT_SLACK", rng.choice([0, 1, 3, 8, 64]))
    harness = QueueHarness(seed, kind())
    growing = True
    try:
        for step in range(QUEUE_STEPS):
            if step % 60 == 0:
                growing = not growing if step else True
            harness.step(growing)
    except AssertionError as exc:
        recent = "\n  ".join(harness.log[-20:])
        pytest.fail(
            f"seed {seed} (COMPACT_SLACK={_queue.COMPACT_SLACK}): {exc}\n"
            f"last operations:\n  {recent}"
        )
    figures.add("queue_seeds", 1)
    figures.add("queue_operations", harness.ops)
