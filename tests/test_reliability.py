"""Defects found by attacking the pool (issue 8), each pinned where a hostile caller hits it.

Every test here failed before its fix. Method, as everywhere: gates, events, a fake clock and
recorded order, never a sleep; where a behaviour depends on the pool's options, the test runs
over their cross product (ageing x max_queued/when_full x submitting through a view).
"""

from __future__ import annotations

import functools
import gc
import itertools
import linecache
import sys
import threading
import types
import weakref
from concurrent.futures import Future, wait
from typing import Any, Callable, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import PriorityThreadPoolExecutor
from priority_executor._queue import Entry, TaskQueue
from priority_executor._stats import QueueFullError
from support import CancelHook, exact, internals, wait_until

AGEING = [None, 2.0]
#: (max_queued, when_full): unbounded, and each policy on a small queue.
LIMITS = [(None, "block"), (4, "block"), (4, "raise"), (4, "evict")]
CONFIGS = [
    pytest.param(ageing, max_queued, when_full, view, id=f"{ageing}-{max_queued}-{when_full}-{v}")
    for ageing, (max_queued, when_full), (view, v) in itertools.product(
        AGEING, LIMITS, [(False, "pool"), (True, "view")]
    )
]


def make_pool(
    ageing: Optional[float], max_queued: Optional[int], when_full: Any, **kwargs: Any
) -> PriorityThreadPoolExecutor:
    return PriorityThreadPoolExecutor(
        ageing=ageing, max_queued=max_queued, when_full=when_full, **kwargs
    )


def submitter(
    pool: PriorityThreadPoolExecutor, view: bool, **options: Any
) -> Callable[..., Future[Any]]:
    """``pool.submit`` with ``options``, or the same through a view."""
    if view:
        return pool.options(**options).submit
    return lambda fn, *args: pool.submit(fn, *args, **options)


class Payload:
    """An argument and a result that a test can watch being freed."""


def consume(payload: Payload) -> Payload:
    return payload


# -- 1. nothing of a settled task stays referenced, in every configuration --------------------
# Before: with ageing and when_full="evict", the worst-entry heap kept every popped entry,
# and the entry its future, function, arguments and result, up to live + 64 of them.


@pytest.mark.parametrize(("ageing", "max_queued", "when_full", "view"), CONFIGS)
def test_the_pool_keeps_no_reference_to_a_task_once_it_has_settled(
    ageing: Optional[float], max_queued: Optional[int], when_full: Any, view: bool, gate: Gate
) -> None:
    pool = make_pool(ageing, max_queued, when_full, max_workers=1)
    try:
        refs: list[weakref.ref[Any]] = []
        for timeout in (None, 60.0):  # without and with a deadline: tasks that ran
            submit = submitter(pool, view, timeout=timeout)
            payload = Payload()
            future = submit(consume, payload)
            assert future.result(TIMEOUT) is payload
            refs += [weakref.ref(payload), weakref.ref(future)]
        pool.submit(gate)
        gate.wait_started()
        payload = Payload()
        cancelled = submit(consume, payload)
        assert cancelled.cancel()
        refs += [weakref.ref(payload), weakref.ref(cancelled)]
        gate.open()
        assert pool.join(TIMEOUT)
        del payload, future, cancelled
        gc.collect()
        assert [ref() for ref in refs] == [None] * len(refs), "the pool keeps a settled task"
        pool._check_invariants()
    finally:
        pool.shutdown()


# -- 2. a view's map with buffersize loses nothing when the view itself is not kept -----------
# Before: the iterator held the view weakly; once the view was collected it stopped
# submitting and ended after ``buffersize`` results.


@pytest.mark.parametrize("ageing", AGEING)
def test_map_of_a_view_that_is_not_kept_yields_every_result(ageing: Optional[float]) -> None:
    with PriorityThreadPoolExecutor(max_workers=2, ageing=ageing) as pool:
        results = pool.options(priority=3).map(abs, range(-20, 0), buffersize=2)
        gc.collect()  # the view is gone; the pool is alive
        assert list(results) == list(range(20, 0, -1))


def test_map_of_a_view_stops_submitting_once_its_pool_is_collected() -> None:
    # As the standard map with buffersize holds its executor only weakly, so does ours: the
    # iterator alone does not keep a dropped pool (and its threads) alive.
    pool = PriorityThreadPoolExecutor(max_workers=1)
    results = pool.options().map(abs, range(-10, 0), buffersize=2)
    pool_ref = weakref.ref(pool)
    del pool
    gc.collect()
    assert pool_ref() is None, "the map iterator keeps the pool alive"
    assert list(results) == [10, 9]


# -- 4. join() returns True only once every earlier future is done, callbacks included --------
# Before: the removal of expired (and shut-down-cancelled) tasks woke join() before their
# futures were settled and their callbacks had run.


@pytest.mark.parametrize("ageing", AGEING)
@pytest.mark.parametrize("how", ["expired by the timer", "cancelled by shutdown"])
def test_join_waits_for_futures_the_pool_takes_out_of_the_queue_to_settle(
    ageing: Optional[float], how: str, clock: FakeClock
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, ageing=ageing)
    clock.attach(pool)
    in_callback, release = threading.Event(), threading.Event()

    def slow_callback(_: Future[Any]) -> None:
        in_callback.set()
        assert release.wait(TIMEOUT)

    closer = None
    try:
        pool.pause()
        future = pool.submit(str, "never runs", timeout=1.0)
        future.add_done_callback(slow_callback)
        if how == "expired by the timer":
            clock.advance(1.0)
        else:
            closer = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
            closer.start()
        assert in_callback.wait(TIMEOUT)
        assert future.cancelled()
        assert pool.join(timeout=0) is False, "join() returned while a callback still ran"
        release.set()
        assert pool.join(TIMEOUT)
        pool._check_invariants()
    finally:
        release.set()
        if closer is not None:
            closer.join(TIMEOUT)
        pool.shutdown()


# -- 5. no user callback delays the settling of another future --------------------------------
# Before: the timer ran the callbacks of what it expired, one after another, so a callback
# that slept made every other expiry, and the timer's next deadlines, late.


@pytest.mark.parametrize("ageing", AGEING)
def test_a_stuck_callback_on_an_expired_future_delays_no_other_expiry(
    ageing: Optional[float], clock: FakeClock
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock, ageing=ageing)
    clock.attach(pool)
    in_callback, release = threading.Event(), threading.Event()

    def stuck(_: Future[Any]) -> None:
        in_callback.set()
        assert release.wait(3 * TIMEOUT)  # longer than any wait of the test below

    try:
        pool.pause()
        first = pool.submit(str, "first", timeout=1.0)
        first.add_done_callback(stuck)
        same_batch = pool.submit(str, "same batch", timeout=1.0)
        later = pool.submit(str, "later", timeout=2.0)
        later_called = threading.Event()
        later.add_done_callback(lambda _: later_called.set())
        clock.advance(1.0)
        assert in_callback.wait(TIMEOUT)
        # Settled while the first one's callback is stuck: done, and its waiters awake.
        assert wait([same_batch], timeout=TIMEOUT).not_done == set()
        clock.advance(1.0)
        assert wait([later], timeout=TIMEOUT).not_done == set()
        assert later_called.wait(TIMEOUT), "a later expiry's callback waited for a stuck one"
        assert not release.is_set()
        release.set()
        assert pool.join(TIMEOUT)
        stats = pool.statistics()
        assert (stats.expired, stats.submitted) == (3, 3)
        pool._check_invariants()
    finally:
        release.set()
        pool.shutdown()


@pytest.mark.parametrize("ageing", AGEING)
def test_shutdown_cancel_futures_settles_every_future_before_any_callback_runs(
    ageing: Optional[float],
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1, ageing=ageing)
    in_callback, release = threading.Event(), threading.Event()
    seen: list[bool] = []
    futures: list[Future[Any]] = []

    def stuck(_: Future[Any]) -> None:
        seen.append(all(f.done() for f in futures))
        in_callback.set()
        assert release.wait(TIMEOUT)

    pool.pause()
    futures += [pool.submit(str, i) for i in range(5)]
    futures[0].add_done_callback(stuck)
    closer = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    closer.start()
    try:
        assert in_callback.wait(TIMEOUT)
        assert seen == [True]
        assert wait(futures, timeout=TIMEOUT).not_done == set()
    finally:
        release.set()
        closer.join(TIMEOUT)
    assert not closer.is_alive()
    pool._check_invariants()


# -- 6. evicting costs O(log n), however many distinct priorities are queued ------------------
# Before: every evicting submit sorted all the levels: O(L log L).


class CountedKey(float):
    """A sort key that counts the comparisons made on it."""

    compared = 0

    def __lt__(self, other: object) -> bool:
        CountedKey.compared += 1
        return float(self) < float(other)  # type: ignore[arg-type]


def comparisons_per_eviction(levels: int) -> float:
    queue = TaskQueue(track_worst=True)
    for i in range(levels):
        entry = Entry(Future(), abs, (i,), {}, 0, None)
        queue.push(entry, CountedKey(i))
    CountedKey.compared = 0
    evictions = 50
    for _ in range(evictions):
        worst = queue.worst()
        assert worst is not None
        queue.remove(worst)
        queue.push(Entry(Future(), abs, (0,), {}, 0, None), CountedKey(-1))
    per_eviction = CountedKey.compared / evictions
    queue._check_invariants()
    return per_eviction


def test_eviction_cost_grows_with_the_log_of_the_distinct_priorities() -> None:
    small, large = comparisons_per_eviction(200), comparisons_per_eviction(20_000)
    # log2 grows from 7.6 to 14.3; a sort of the levels would grow a hundredfold.
    assert large <= 2.5 * small + 10, f"{small:.1f} then {large:.1f} comparisons per eviction"


def test_evicting_from_a_queue_of_distinct_float_priorities_keeps_the_order() -> None:
    with PriorityThreadPoolExecutor(max_workers=1, max_queued=100, when_full="evict") as pool:
        pool.pause()
        futures = [pool.submit(str, i, priority=i / 7) for i in range(300)]
        kept = [f for f in futures if not f.cancelled()]
        assert [f for f in futures if f.cancelled()] == futures[:200]
        pool._check_invariants()
        pool.resume()
        assert [f.result(TIMEOUT) for f in kept] == [str(i) for i in range(200, 300)]


# -- 7. set_priority returns False once its caller has seen the future cancelled --------------
# Before: between cancel() changing the state and the cancel hook unqueuing the task,
# set_priority found it queued and returned True.


def test_set_priority_of_a_future_seen_cancelled_returns_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    in_hook, release = threading.Event(), threading.Event()

    def slow_hook(real_hook: CancelHook, future: Future[Any]) -> None:  # held at its start
        in_hook.set()
        assert release.wait(TIMEOUT)
        real_hook(future)

    internals(pool).patch_cancel_hook(monkeypatch, slow_hook)
    try:
        pool.pause()
        future = pool.submit(str, "queued")
        canceller = threading.Thread(target=future.cancel)
        canceller.start()
        assert in_hook.wait(TIMEOUT)
        assert future.cancelled()
        assert pool.set_priority(future, 5) is False
        release.set()
        canceller.join(TIMEOUT)
        assert pool.statistics().cancelled == 1
        pool._check_invariants()
    finally:
        release.set()
        pool.shutdown()


# -- 8. join() with a huge timeout waits instead of raising OverflowError ---------------------


@pytest.mark.parametrize("timeout", [1e20, float(threading.TIMEOUT_MAX) * 2, 10**30])
def test_join_with_a_timeout_beyond_what_a_lock_takes_waits(timeout: float, gate: Gate) -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        assert pool.join(timeout) is True
        pool.submit(gate)
        gate.wait_started()
        joined: list[bool] = []
        joiner = threading.Thread(target=lambda: joined.append(pool.join(timeout)))
        joiner.start()
        wait_until(lambda: internals(pool).joiners() == 1, "join() waits")
        gate.open()
        joiner.join(TIMEOUT)
        assert joined == [True]


# -- 9. an asynchronous exception inside submit leaves no lock held and the counts right ------
# Before: the lock was taken outside the try that released it, and an interrupt between
# counting a submission and queueing it left ``submitted`` above the other counts for good.
# Here a tracer raises KeyboardInterrupt at the n-th line, call or return that the pool's own
# code executes during one submit, for every n until a submit completes untouched.

PACKAGE_DIR = str(__import__("priority_executor").__file__).rsplit("/", 1)[0]


class Interrupt:
    """A tracer that raises at the ``n``-th event in the package's code, then is unset.

    It skips the line events where a tracer can raise but a signal handler cannot (the
    interpreter runs handlers after a call returns, at a function's start and at backward
    jumps, never before a line's first instruction): a ``with`` line (from 3.11 on, CPython
    emits one as the block ends normally, before ``__exit__``), a ``try:`` (a NOP there), and
    a ``finally`` clause's ``lock.release()``, which a signal cannot keep from running.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.fired = False

    def __call__(self, frame: types.FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE_DIR):
            return None
        if event == "line":
            text = linecache.getline(code.co_filename, frame.f_lineno).strip()
            if text.startswith("with ") or text == "try:" or text == "lock.release()":
                return self
        self.n -= 1
        if self.n < 0:
            self.fired = True
            raise KeyboardInterrupt("injected")
        return self


def has_an_idle_worker(pool: PriorityThreadPoolExecutor) -> bool:
    return pool.statistics().idle_workers == 1


SITUATIONS = ["first submit", "idle worker", "deadline", "timeout=0", "full queue"]


@pytest.mark.parametrize("situation", SITUATIONS)
@pytest.mark.parametrize("ageing", AGEING)
@pytest.mark.parametrize("when_full", ["block", "raise", "evict"])
def test_an_exception_raised_anywhere_inside_submit_leaves_the_pool_consistent(
    situation: str, ageing: Optional[float], when_full: Any, gate: Gate
) -> None:
    if situation == "full queue" and when_full == "block":
        pytest.skip("this submit would wait for room for ever: the queue is paused full")
    for n in range(10_000):
        pool = PriorityThreadPoolExecutor(
            max_workers=1, ageing=ageing, max_queued=2, when_full=when_full
        )
        try:
            futures: list[Future[Any]] = []
            if situation != "first submit":
                assert pool.submit(str, "warm").result(TIMEOUT) == "warm"
                wait_until(functools.partial(has_an_idle_worker, pool), "the worker idles")
            if situation == "full queue":
                pool.pause()
                futures += [pool.submit(str, i, priority=-1) for i in range(2)]
            timeout = {"deadline": 60.0, "timeout=0": 0.0}.get(situation)
            interrupt = Interrupt(n)
            sys.settrace(interrupt)
            try:
                futures.append(pool.submit(str, "probe", priority=1, timeout=timeout))
            except (KeyboardInterrupt, QueueFullError):
                pass
            finally:
                sys.settrace(None)
            assert not internals(pool).lock.locked(), f"the lock stayed held (event {n})"
            pool._check_invariants()
            pool.resume()
            assert pool.join(TIMEOUT), f"event {n}"
            assert pool.submit(str, "after").result(TIMEOUT) == "after", f"event {n}"
            assert pool.join(TIMEOUT)
            pool._check_invariants()
            stats = pool.statistics()
            settled = stats.completed + stats.failed + stats.cancelled + stats.expired
            assert stats.submitted == settled, f"counts off after event {n}: {stats}"
            assert all(f.done() for f in futures)
        finally:
            sys.settrace(None)
            pool.shutdown(cancel_futures=True)
        if not interrupt.fired:
            break
    else:
        pytest.fail("submit never completed untouched")
    assert n > 5, "the tracer saw too few events to test anything"


# -- 10. initializer failure and a thread that cannot start --------------------------------


def test_a_task_cancelled_while_a_failed_initializer_fails_the_queue_counts_as_cancelled(
    gate: Gate,
) -> None:
    go = threading.Event()

    def initializer() -> None:
        assert go.wait(TIMEOUT)
        raise ValueError("no connection")

    pool = PriorityThreadPoolExecutor(max_workers=1, initializer=initializer)
    try:
        first = pool.submit(str, "first")
        second = pool.submit(str, "second")
        # first's callback runs while the pool fails the queue: it cancels second in between.
        first.add_done_callback(lambda _: second.cancel())
        go.set()
        assert wait([first, second], timeout=TIMEOUT).not_done == set()
        assert second.cancelled()
        assert pool.join(TIMEOUT)
        stats = pool.statistics()
        assert (stats.failed, stats.cancelled) == (1, 1)
        pool._check_invariants()
    finally:
        pool.shutdown()


def test_an_undone_submit_wakes_a_blocked_submitter_and_frees_its_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = PriorityThreadPoolExecutor(
        max_workers=1, max_queued=1, when_full="block", thread_name_prefix="nostart"
    )
    real_start = threading.Thread.start
    calls: list[str] = []

    second: list[Future[Any]] = []
    blocked = threading.Thread(target=lambda: second.append(pool.submit(str, "second")))

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("nostart_") and not calls:
            calls.append(thread.name)
            # The queue is full with the first task: let a second submit block for room.
            real_start(blocked)
            wait_until(lambda: internals(pool).blocked() == 1, "a submit blocks for room")
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    refs: list[weakref.ref[Payload]] = []
    try:

        def first_submit() -> None:
            payload = Payload()
            refs.append(weakref.ref(payload))
            pool.submit(consume, payload)

        with pytest.raises(RuntimeError, match=exact("can't start new thread")):
            first_submit()
        blocked.join(TIMEOUT)
        assert not blocked.is_alive(), "the blocked submit was never woken"
        assert second[0].result(TIMEOUT) == "second"
        gc.collect()
        assert refs[0]() is None, "the undone task's payload is still referenced"
        stats = pool.statistics()
        assert (stats.submitted, stats.completed) == (1, 1)
        pool._check_invariants()
    finally:
        pool.shutdown()
