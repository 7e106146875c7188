"""``PriorityLimiter`` attacked: interrupts at the worst moment, many threads, a reference model.

* Interrupts. A ``KeyboardInterrupt`` raised in a waiting thread: from a signal handler in
  the main thread (whose lock waits a signal interrupts), sent only once that thread is
  parked (:func:`parked`), and with ``PyThreadState_SetAsyncExc`` in another thread (raised
  when it next runs bytecode, that is once it is woken). The interrupted request leaves the
  queue at once; a grant made as it is interrupted passes to the next waiter; no unit is
  ever leaked, granted twice, or held beyond capacity.
* Stress. Many threads acquire random costs at random priorities and keys, some with
  timeouts, some raising in their block, while another thread changes the capacity. Each
  block checks, under a lock of the test, that the units held never exceed the largest
  capacity in force since the oldest holder asked (a lower capacity takes nothing back)
  and that no key holds more than ``key_limit`` units; at the end nothing is held and every
  request ended in exactly one way.
* Model. The policy, ``_grants.Grants``, driven from one thread on a fake clock by seeded
  random steps (request, release, abandon, capacity change, clock move), each grant
  compared with a reference model written here: best rank first (ageing as the pool's),
  strict (stop at the first request that does not fit), a key whose best request does not
  fit its ``key_limit`` skipped whole, a request past its deadline expired. Broken models
  (FIFO, greedy, no key limit) are shown to diverge, so the comparison can fail.

A failure names its seed; rerun one with ``-k 'seed_7]'`` (fast run) or ``-m slow``.
"""

from __future__ import annotations

import ctypes
import linecache
import math
import random
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, FakeClock
from limiter_support import accounted
from priority_executor import LimiterStatistics, Priority, PriorityLimiter
from priority_executor._grants import Grants, Request
from support import InThread, in_thread, wait_until

needs_signals = pytest.mark.skipif(
    not hasattr(signal, "pthread_kill") or not hasattr(signal, "SIGUSR1"),
    reason="needs signal.pthread_kill and SIGUSR1",
)


def waiting(limiter: PriorityLimiter, count: int) -> LimiterStatistics:
    wait_until(lambda: limiter.statistics().waiting == count, f"{count} requests wait")
    limiter._check_invariants()
    return limiter.statistics()


def parked(ident: Optional[int]) -> bool:
    """True if the thread ``ident`` is parked in the limiter, waiting for its grant."""
    frame = sys._current_frames().get(ident)  # type: ignore[arg-type]
    if frame is None:
        return False
    code = frame.f_code
    line = linecache.getline(code.co_filename, frame.f_lineno)
    return code.co_filename.endswith("_limiter.py") and "park.acquire(" in line


def wait_parked(ident: Optional[int], what: str) -> None:
    wait_until(lambda: parked(ident), f"{what} is parked in the limiter")


class Holder:
    """A thread that holds ``cost`` units from its grant until :meth:`leave`; it records
    whether it was granted."""

    def __init__(self, limiter: PriorityLimiter, **options: Any) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.limiter = limiter
        self.options = options
        self.task: InThread[None] = in_thread(self._run)

    def _run(self) -> None:
        with self.limiter.acquire(**self.options):
            self.entered.set()
            assert self.released.wait(TIMEOUT)

    def wait_entered(self) -> None:
        assert self.entered.wait(TIMEOUT), "never granted"

    def leave(self) -> None:
        self.released.set()
        self.task.result()


@contextmanager
def holders() -> Iterator[list[Holder]]:
    """A list for the test's holders; on the way out every one is let go and joined."""
    made: list[Holder] = []
    try:
        yield made
    finally:
        for holder in made:  # grant whatever still waits
            limiter = holder.limiter
            limiter.rate_limit = limiter.key_limit = limiter.key_rate_limit = None
            limiter.capacity = math.inf
            holder.released.set()
        for holder in made:
            holder.task.thread.join(TIMEOUT)


@contextmanager
def on_signal(handler: Callable[[], None]) -> Iterator[None]:
    """Run ``handler`` in the main thread when it receives SIGUSR1."""

    def handle(signum: int, frame: Optional[FrameType]) -> None:
        handler()

    previous = signal.signal(signal.SIGUSR1, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def interrupt_main_once_parked() -> InThread[None]:
    """A thread that sends SIGUSR1 to the main thread once it is parked in the limiter."""
    main = threading.main_thread().ident

    def send() -> None:
        wait_parked(main, "the main thread")
        signal.pthread_kill(main, signal.SIGUSR1)  # type: ignore[arg-type]

    return in_thread(send)


def interrupt() -> None:
    raise KeyboardInterrupt


def acquire_interrupted(
    limiter: PriorityLimiter, handler: Callable[[], None], **options: Any
) -> None:
    """Acquire in the main thread, where ``handler`` runs from a signal once it is parked,
    and raises: the acquire must end in that KeyboardInterrupt, never in its block."""
    sender = interrupt_main_once_parked()
    with on_signal(handler), pytest.raises(KeyboardInterrupt), limiter.acquire(**options):
        pytest.fail("entered the block despite its interrupt")
    sender.result()


# -- interrupts -------------------------------------------------------------------------------


@needs_signals
@pytest.mark.parametrize("timeout", [None, 100.0], ids=["no-timeout", "timeout"])
def test_an_interrupted_waiter_leaves_the_queue_at_once(
    timeout: Optional[float], clock: FakeClock
) -> None:
    limiter = PriorityLimiter(1, clock=clock)
    with holders() as made:
        holder = Holder(limiter)
        made.append(holder)
        holder.wait_entered()
        behind = Holder(limiter, priority=Priority.LOW)
        made.append(behind)
        waiting(limiter, 1)
        acquire_interrupted(limiter, interrupt, priority=Priority.HIGH, timeout=timeout)
        stats = waiting(limiter, 1)  # at once: behind is left, and nothing else changed
        assert (stats.cancelled, stats.in_use, stats.holding) == (1, 1, 1)
        assert stats.outcomes[Priority.HIGH]["cancelled"] == 1
        holder.leave()
        behind.wait_entered()
        behind.leave()
    stats = accounted(limiter)
    assert (stats.completed, stats.cancelled) == (2, 1)


@needs_signals
@pytest.mark.parametrize("cost", [1, 2])
def test_a_grant_made_as_its_waiter_is_interrupted_passes_to_the_next_waiter(cost: int) -> None:
    limiter = PriorityLimiter(2)
    held = limiter.acquire(cost=2)
    held.__enter__()  # released from the signal handler, in this thread

    def grant_then_interrupt() -> None:
        held.__exit__(None, None, None)  # grants the waiting main thread, and wakes it
        assert limiter.statistics().holding == 1  # it holds the grant now
        raise KeyboardInterrupt

    with holders() as made:
        behind = Holder(limiter, priority=Priority.LOW, cost=2)
        made.append(behind)
        waiting(limiter, 1)
        acquire_interrupted(limiter, grant_then_interrupt, priority=Priority.HIGH, cost=cost)
        behind.wait_entered()  # the units passed on
        stats = limiter.statistics()
        assert (stats.in_use, stats.holding, stats.waiting, stats.cancelled) == (2, 1, 0, 1)
        limiter._check_invariants()
        behind.leave()
    stats = accounted(limiter)
    assert (stats.completed, stats.cancelled) == (2, 1)


@needs_signals
def test_an_interrupted_keeper_passes_the_time_keeping_on(clock: FakeClock) -> None:
    limiter = PriorityLimiter(1, clock=clock)
    with holders() as made:
        holder = Holder(limiter)
        made.append(holder)
        holder.wait_entered()
        later: InThread[None] = InThread(lambda: None)

        def start_later() -> None:  # once the main thread keeps time, a shorter deadline
            nonlocal later
            wait_until(lambda: limiter._keeper is not None, "the main thread keeps time")

            def short() -> None:
                with limiter.acquire(priority=Priority.LOW, timeout=0.05):
                    pytest.fail("granted while the units were held")

            later = in_thread(short)
            waiting(limiter, 2)
            wait_parked(threading.main_thread().ident, "the main thread")
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)  # type: ignore[arg-type]

        starter = in_thread(start_later)
        with (
            on_signal(interrupt),
            pytest.raises(KeyboardInterrupt),
            limiter.acquire(priority=Priority.HIGH, timeout=1000.0),
        ):
            pytest.fail("granted while the units were held")
        starter.result()
        clock.advance(0.05)  # only a keeper can see it: the one left must keep time
        assert isinstance(later.exception(), TimeoutError)
        stats = limiter.statistics()
        assert (stats.cancelled, stats.expired, stats.waiting, stats.in_use) == (1, 1, 0, 1)
        holder.leave()
    accounted(limiter)


@needs_signals
def test_a_grant_made_as_its_waiter_is_interrupted_passes_its_rate_slot_on(
    clock: FakeClock,
) -> None:
    limiter = PriorityLimiter(1, clock=clock, rate_limit=(1, 60.0))
    with limiter.acquire():
        pass  # the window is full for 60 s

    def open_slot_then_interrupt() -> None:
        clock.advance(60.0)
        limiter.capacity = 1  # a grant pass: the slot opens, the main thread is granted
        assert limiter.statistics().holding == 1
        raise KeyboardInterrupt

    with holders() as made:
        behind = Holder(limiter, priority=Priority.LOW)
        made.append(behind)
        waiting(limiter, 1)
        acquire_interrupted(limiter, open_slot_then_interrupt, priority=Priority.HIGH)
        stats = limiter.statistics()  # the interrupted thread's leaving granted what it let in
        assert stats.cancelled == 1
        assert stats.holding == 1, "the unused grant's rate slot did not pass on"
        behind.leave()
    accounted(limiter)


def test_one_acquisition_entered_by_two_threads_while_the_first_waits_is_refused() -> None:
    limiter = PriorityLimiter(2)
    shared = limiter.acquire()
    entered = threading.Event()

    def use() -> None:
        with shared:
            entered.set()

    with holders() as made:
        holder = Holder(limiter, cost=2)
        made.append(holder)
        holder.wait_entered()
        first = in_thread(use)
        waiting(limiter, 1)
        second = in_thread(use)
        error = second.exception()
        assert isinstance(error, RuntimeError)
        assert str(error) == "this acquisition is held already: call acquire() again"
        assert limiter.statistics().requested == 2  # the second never asked
        holder.leave()
        first.result()
    assert entered.is_set()
    stats = accounted(limiter)
    assert (stats.completed, stats.cancelled) == (2, 0)


@needs_signals
@pytest.mark.parametrize("seed", range(3))
def test_grants_and_interrupts_racing_never_leak_a_unit(seed: int) -> None:
    """A grant and an interrupt sent at once, in either order, round after round."""
    rng = random.Random(seed)
    limiter = PriorityLimiter(1)
    main = threading.main_thread().ident
    rounds, interrupted_in_block = 20, 0
    fired = threading.Event()

    def handler() -> None:
        fired.set()
        raise KeyboardInterrupt

    with on_signal(handler), holders() as made:
        for _ in range(rounds):
            fired.clear()
            holder = Holder(limiter)
            made.append(holder)
            holder.wait_entered()
            behind = Holder(limiter, priority=Priority.LOW)
            made.append(behind)
            waiting(limiter, 1)
            grant_first = rng.random() < 0.5

            def race(grant_first: bool = grant_first, holder: Holder = holder) -> None:
                wait_parked(main, "the main thread")
                if grant_first:
                    holder.released.set()
                signal.pthread_kill(main, signal.SIGUSR1)  # type: ignore[arg-type]
                if not grant_first:
                    holder.released.set()

            racer = in_thread(race)
            try:
                with limiter.acquire(priority=Priority.HIGH):
                    assert limiter.statistics().in_use <= 1
                    # Granted before the interrupt landed: it lands here.
                    fired.wait(TIMEOUT)
                    pytest.fail("the interrupt never came")
            except KeyboardInterrupt:
                pass
            racer.result()
            holder.task.result()
            behind.wait_entered()  # whatever the main thread got passed on
            stats = limiter.statistics()
            assert (stats.in_use, stats.holding, stats.waiting) == (1, 1, 0), stats
            limiter._check_invariants()
            behind.leave()
            interrupted_in_block = stats.failed
    stats = accounted(limiter)
    assert stats.completed == 2 * rounds
    assert stats.cancelled + stats.failed == rounds
    assert stats.failed == interrupted_in_block


def raise_in(thread: threading.Thread, error: type[BaseException]) -> None:
    """Raise ``error`` in ``thread`` the next time it runs bytecode."""
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    assert thread.ident is not None
    assert set_async_exc(ctypes.c_ulong(thread.ident), ctypes.py_object(error)) == 1


def test_an_exception_raised_in_a_waiting_keeper_takes_it_out_of_the_queue(
    clock: FakeClock,
) -> None:
    limiter = PriorityLimiter(1, clock=clock)
    with holders() as made:
        holder = Holder(limiter)
        made.append(holder)
        holder.wait_entered()
        keeper = Holder(limiter, priority=Priority.HIGH, timeout=1000.0)
        made.append(keeper)
        waiting(limiter, 1)
        wait_parked(keeper.task.thread.ident, "the keeper")
        raise_in(keeper.task.thread, KeyboardInterrupt)
        # A shorter deadline wakes the keeper, which runs bytecode and meets its exception.
        short = Holder(limiter, priority=Priority.LOW, timeout=1.0)
        made.append(short)
        assert isinstance(keeper.task.exception(), KeyboardInterrupt)
        assert not keeper.entered.is_set()
        stats = waiting(limiter, 1)
        assert (stats.cancelled, stats.in_use) == (1, 1)
        holder.leave()
        short.wait_entered()
        short.leave()
    stats = accounted(limiter)
    assert (stats.completed, stats.cancelled) == (2, 1)


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit, ValueError])
def test_an_exception_raised_in_a_thread_as_it_is_granted_never_leaks_its_grant(
    error: type[BaseException],
) -> None:
    limiter = PriorityLimiter(2)
    with holders() as made:
        holder = Holder(limiter, cost=2)
        made.append(holder)
        holder.wait_entered()
        victim = Holder(limiter, priority=Priority.HIGH, cost=2)
        made.append(victim)
        behind = Holder(limiter, priority=Priority.LOW, cost=2)
        made.append(behind)
        waiting(limiter, 2)
        wait_parked(victim.task.thread.ident, "the victim")
        raise_in(victim.task.thread, error)
        holder.leave()  # grants the victim, which wakes and meets its exception
        assert isinstance(victim.task.exception(), error)
        behind.wait_entered()
        stats = limiter.statistics()
        assert (stats.in_use, stats.holding, stats.waiting) == (2, 1, 0)
        # Met before its block (its grant cancelled) or at its start (failed): never both.
        assert stats.cancelled + stats.failed == 1
        assert stats.failed == int(victim.entered.is_set())
        behind.leave()
    accounted(limiter)


# -- many threads -----------------------------------------------------------------------------


@dataclass
class Tracker:
    """What the threads of the stress test hold, checked at each grant under ``lock``."""

    key_limit: int
    caps: list[int]
    lock: threading.Lock = field(default_factory=threading.Lock)
    held: int = 0
    by_key: dict[Optional[str], int] = field(default_factory=dict)
    holders: dict[int, int] = field(default_factory=dict)  # thread -> epoch asked in
    errors: list[str] = field(default_factory=list)
    peak: int = 0

    def epoch(self) -> int:
        with self.lock:
            return len(self.caps) - 1

    def set_capacity(self, limiter: PriorityLimiter, capacity: int) -> None:
        with self.lock:
            self.caps.append(capacity)  # recorded before it is in force
        limiter.capacity = capacity

    def enter(self, asked: int, cost: int, key: Optional[str]) -> None:
        with self.lock:
            self.held += cost
            self.peak = max(self.peak, self.held)
            self.holders[threading.get_ident()] = asked
            oldest = min(self.holders.values())
            bound = max(self.caps[max(0, oldest - 1) :])
            if self.held > bound:
                self.errors.append(f"{self.held} units held, capacity at most {bound}")
            if key is not None:
                units = self.by_key[key] = self.by_key.get(key, 0) + cost
                if units > self.key_limit:
                    self.errors.append(f"{units} units of key {key!r} held")

    def leave(self, cost: int, key: Optional[str]) -> None:
        with self.lock:
            self.held -= cost
            del self.holders[threading.get_ident()]
            if key is not None:
                self.by_key[key] -= cost


class Failure(Exception):
    pass


def stress(seed: int, threads: int, acquires: int) -> None:
    rng = random.Random(seed)
    key_limit = 3
    caps = [2, 3, 4, 6, 8]
    limiter = PriorityLimiter(8, key_limit=key_limit, ageing=rng.choice([None, 0.01]))
    tracker = Tracker(key_limit, [8])
    counts = {"completed": 0, "failed": 0, "expired": 0, "refused": 0}
    counts_lock = threading.Lock()
    done = threading.Event()
    start = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        local = random.Random(seed * 1000 + index)
        hold = threading.Event()  # never set: its wait is a pause that lets others run
        mine = dict.fromkeys(counts, 0)
        start.wait(TIMEOUT)
        for _ in range(acquires):
            cost = local.choice([1, 1, 1, 2, 3])
            key = local.choice([None, "a", "b", "c"])
            priority = local.choice([-1, 0, 0, 1, 2.5])
            timeout = local.choice([None, None, None, 0, 0.002])
            asked = tracker.epoch()
            try:
                acquisition = limiter.acquire(
                    priority=priority, key=key, cost=cost, timeout=timeout
                )
            except ValueError:  # cost above a lowered capacity
                mine["refused"] += 1
                continue
            fail = local.random() < 0.1
            try:
                with acquisition:
                    tracker.enter(asked, cost, key)
                    try:
                        if local.random() < 0.3:
                            hold.wait(0.0002)  # the work: others queue meanwhile
                        if fail:
                            raise Failure
                    finally:
                        tracker.leave(cost, key)
            except TimeoutError:
                mine["expired"] += 1
            except Failure:
                mine["failed"] += 1
            else:
                mine["completed"] += 1
        with counts_lock:
            for name, count in mine.items():
                counts[name] += count

    def changer() -> None:
        pace = threading.Event()
        start.wait(TIMEOUT)
        while not done.is_set():
            tracker.set_capacity(limiter, rng.choice(caps))
            pace.wait(0.0005)
        tracker.set_capacity(limiter, 8)

    workers = [in_thread(lambda i=i: worker(i)) for i in range(threads)]  # type: ignore[misc]
    changing = in_thread(changer)
    try:
        for task in workers:
            task.result(4 * TIMEOUT)
    finally:
        done.set()
        changing.result()
    assert tracker.errors == []
    assert tracker.held == 0
    stats = accounted(limiter)
    assert stats.completed == counts["completed"]
    assert stats.failed == counts["failed"]
    assert stats.expired == counts["expired"]
    assert stats.cancelled == 0
    assert stats.requested == threads * acquires - counts["refused"]
    assert tracker.peak > 1  # the threads did hold units together
    assert sum(d.count for d in stats.wait.values()) == stats.completed + stats.failed


@pytest.mark.parametrize("seed", range(2))
def test_many_threads_never_hold_more_than_capacity_and_leak_nothing(seed: int) -> None:
    stress(seed, threads=16, acquires=200)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 105))
def test_many_threads_never_hold_more_than_capacity_and_leak_nothing_slow(seed: int) -> None:
    stress(seed, threads=32, acquires=1000)


# -- the policy against a reference model -----------------------------------------------------


class FakeWaiter:
    """A request's handle, settled by the test as an owner settles its waiters."""

    __slots__ = ("settled",)

    def __init__(self) -> None:
        self.settled = False

    def done(self) -> bool:
        return self.settled


@dataclass
class Claim:
    """The model's view of one request."""

    ident: int
    priority: float
    key: Optional[str]
    cost: int
    rank: float
    seq: int
    deadline: Optional[float]


#: The models: the right one, and broken ones that the comparison must catch.
MODELS = ["right", "fifo", "greedy", "no-key-limit"]


class Model:
    """The grants as the README states them, written as plainly as possible."""

    def __init__(self, variant: str, capacity: int, key_limit: Optional[int]) -> None:
        self.variant = variant
        self.capacity = capacity
        self.key_limit = key_limit
        self.waiting: list[Claim] = []
        self.held: dict[int, Claim] = {}

    def units(self, key: Optional[str] = None) -> int:
        return sum(c.cost for c in self.held.values() if key is None or c.key == key)

    def order(self) -> list[Claim]:
        if self.variant == "fifo":
            return sorted(self.waiting, key=lambda c: c.seq)
        return sorted(self.waiting, key=lambda c: (c.rank, c.seq))

    def grant(self, now: float) -> tuple[list[int], list[int]]:
        """Grant what may be granted, best first: (granted, expired) in that order."""
        granted: list[int] = []
        expired: list[int] = []
        while True:
            chosen: Optional[Claim] = None
            blocked: set[Optional[str]] = set()
            for claim in self.order():
                if claim.key is not None and claim.key in blocked:
                    continue  # its key's best waits for units: the key is held back whole
                limit = None if self.variant == "no-key-limit" else self.key_limit
                if (
                    claim.key is not None
                    and limit is not None
                    and self.units(claim.key) + claim.cost > limit
                ):
                    blocked.add(claim.key)
                    continue
                if claim.cost <= self.capacity - self.units():
                    chosen = claim
                    break
                if claim.deadline is not None and now >= claim.deadline:
                    chosen = claim  # due: it leaves, and the next is looked at
                    break
                if self.variant != "greedy":
                    break  # strict: nothing ranked below it passes it
            if chosen is None:
                return granted, expired
            self.waiting.remove(chosen)
            if chosen.deadline is not None and now >= chosen.deadline:
                expired.append(chosen.ident)
            else:
                self.held[chosen.ident] = chosen
                granted.append(chosen.ident)

    def expire(self, now: float) -> list[int]:
        due = [c for c in self.waiting if c.deadline is not None and now >= c.deadline]
        for claim in due:
            self.waiting.remove(claim)
        return [c.ident for c in due]


def run_model(seed: int, steps: int, variant: str) -> Optional[str]:
    """Drive ``Grants`` and the model side by side; the first divergence, or None."""
    rng = random.Random(seed)
    clock = FakeClock()
    capacity = rng.randint(1, 5)
    key_limit = rng.choice([None, 2, 3])
    ageing = rng.choice([None, 1.0])
    grants = Grants(
        capacity,
        clock=clock,
        ageing=ageing,
        rate_limit=None,
        key_limit=key_limit,
        key_rate_limit=None,
    )
    model = Model(variant, capacity, key_limit)
    requests: dict[int, Request] = {}
    waiters: dict[int, FakeWaiter] = {}
    idents: dict[int, int] = {}  # id(request) -> ident
    tally = {"completed": 0, "failed": 0, "cancelled": 0, "expired": 0}
    log: list[str] = []

    def settle(granted: list[Request], expired: list[Request]) -> tuple[list[int], list[int]]:
        for request in [*granted, *expired]:
            waiters[idents[id(request)]].settled = True
        return [idents[id(r)] for r in granted], sorted(idents[id(r)] for r in expired)

    def compare(
        what: str, real: tuple[list[int], list[int]], want: tuple[list[int], list[int]]
    ) -> Optional[str]:
        expected = (want[0], sorted(want[1]))
        tally["expired"] += len(want[1])
        if real != expected:
            return f"seed {seed}: {what}: granted, expired {real}, model {expected}; " + "; ".join(
                log
            )
        return None

    for step in range(steps):
        now = clock()
        choice = rng.random()
        holders = list(model.held)
        waiters_now = [c.ident for c in model.waiting]
        if choice < 0.45:
            top = min(capacity, key_limit or capacity)
            cost = rng.randint(1, max(1, min(3, top)))
            key = rng.choice([None, "a", "b"])
            if key is not None and key_limit is not None and cost > key_limit:
                cost = key_limit
            priority = rng.choice([-1, 0, 0, 1, 2])
            timeout = rng.choice([None, None, 0, 1.0, 2.5])
            level, seconds, checked, cost = grants.check(priority, timeout, key, cost)
            assert checked == key
            waiter = FakeWaiter()
            request = Request(waiter, level, key, cost)
            requests[step], waiters[step], idents[id(request)] = request, waiter, step
            rank = -priority if ageing is None else now - priority * ageing
            deadline = None if seconds is None or seconds == 0 else now + seconds
            model.waiting.append(Claim(step, priority, key, cost, rank, step, deadline))
            log.append(f"{step}: request p={priority} key={key} cost={cost} timeout={timeout}")
            granted: list[Request] = []
            expired: list[Request] = []
            grants.request(request, seconds, granted, expired)
            want = model.grant(now)
            if seconds == 0 and any(c.ident == step for c in model.waiting):
                model.waiting = [c for c in model.waiting if c.ident != step]
                tally["expired"] += 1
        elif choice < 0.65 and holders:
            ident = rng.choice(holders)
            outcome = rng.choice(["completed", "failed"])
            log.append(f"{step}: release {ident} {outcome}")
            tally[outcome] += 1
            granted, expired = [], []
            grants.release(requests[ident], outcome, granted, expired)  # type: ignore[arg-type]
            del model.held[ident]
            want = model.grant(now)
        elif choice < 0.75 and (holders or waiters_now):
            ident = rng.choice(holders + waiters_now)
            log.append(f"{step}: abandon {ident}")
            tally["cancelled"] += 1
            waiters[ident].settled = True
            granted, expired = [], []
            grants.abandon(requests[ident], granted, expired)
            if ident in model.held:
                del model.held[ident]
            else:
                model.waiting = [c for c in model.waiting if c.ident != ident]
            want = model.grant(now)
        elif choice < 0.85:
            capacity = rng.randint(1, 5)
            log.append(f"{step}: capacity {capacity}")
            grants.core.capacity = capacity
            model.capacity = capacity
            granted, expired = [], []
            grants.grant(granted, expired)
            want = model.grant(now)
        else:
            seconds = rng.choice([0.5, 1.0, 2.0])
            clock.advance(seconds)
            now = clock()
            log.append(f"{step}: advance {seconds}")
            granted, expired = [], []
            grants.expire(now, granted, expired)
            gone = model.expire(now)
            more, later = model.grant(now)
            want = (more, gone + later)
        mismatch = compare(log[-1], settle(granted, expired), want)
        if mismatch is not None:
            return mismatch
        grants.check_invariants()
        stats = grants.statistics()
        mine = (len(model.waiting), len(model.held), model.units())
        if (stats.waiting, stats.holding, stats.in_use) != mine:
            return f"seed {seed}: waiting, holding, in use {stats}, model {mine}"
        counted = {name: getattr(stats, name) for name in tally}
        if counted != tally:
            return f"seed {seed}: counts {counted}, model {tally}"
    return None


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed_{s}") for s in range(40)])
def test_the_grants_follow_the_reference_model(seed: int) -> None:
    assert run_model(seed, 120, "right") is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed_{s}") for s in range(1000, 1200)])
def test_the_grants_follow_the_reference_model_slow(seed: int) -> None:
    assert run_model(seed, 400, "right") is None


@pytest.mark.parametrize("variant", [m for m in MODELS if m != "right"])
def test_a_broken_model_diverges_so_the_comparison_can_fail(variant: str) -> None:
    diverged = []
    for seed in range(40):  # the seeds of the fast run of the right model
        if run_model(seed, 120, variant) is not None:
            diverged.append(seed)
            if len(diverged) == 3:
                break
    assert len(diverged) == 3, f"{variant} diverged only on seeds {diverged}"


# -- an interrupt inside the bookkeeping --------------------------------------------------------
# A trace function that raises stands for a signal handler that raises at that line: it runs
# in the main thread only, once, and then takes itself off.


def test_an_interrupt_in_the_keepers_turn_still_wakes_whom_the_turn_granted() -> None:
    limiter = PriorityLimiter(5, rate_limit=(1, 0.5))
    with limiter.acquire():
        pass  # the window is full for 0.5 s: the next waiter keeps time until then
    granted = threading.Event()

    def other() -> None:
        with limiter.acquire(priority=5, timeout=TIMEOUT):
            granted.set()

    def start_other() -> None:
        wait_until(lambda: limiter.statistics().waiting == 1, "the main thread waits")
        others.append(in_thread(other))

    others: list[InThread[None]] = []
    starter = in_thread(start_other)

    def in_turn(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_locals.get("granted"):
            sys.settrace(None)
            raise KeyboardInterrupt  # the turn granted the other thread, and has not woken it
        return in_turn

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        return in_turn if frame.f_code.co_name == "_keep_time_locked" else None

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt), limiter.acquire(timeout=TIMEOUT):
            pytest.fail("the keeper was granted: the other one ranks above it")
    finally:
        sys.settrace(None)
    starter.result()
    assert granted.wait(TIMEOUT), "the thread the interrupted turn granted was never woken"
    others[0].result()
    accounted(limiter)


def test_an_interrupt_at_the_start_of_a_release_still_gives_the_units_back() -> None:
    limiter = PriorityLimiter(1)

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call" and frame.f_code.co_name == "_release":
            sys.settrace(None)
            raise KeyboardInterrupt  # as a signal handler would, at the release's first line
        return None

    try:
        with pytest.raises(KeyboardInterrupt), limiter.acquire():
            sys.settrace(tracer)
    finally:
        sys.settrace(None)
    stats = limiter.statistics()
    assert (stats.in_use, stats.holding, stats.completed) == (0, 0, 1)
    with limiter.acquire(timeout=0):  # the unit is free
        pass
    accounted(limiter)
