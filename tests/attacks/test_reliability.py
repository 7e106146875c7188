"""What holds when a hostile caller attacks the pool, pinned where the caller hits it.

The attacks that concern one behaviour are pinned in that behaviour's file (the comment after
the first section says where); those left here attack the pool across its options. Method, as
everywhere: gates, events, a fake clock and recorded order, never a sleep; where a behaviour
depends on the pool's options, the test runs over their cross product (ageing x
max_queued/when_full x submitting through a view x both executors).
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
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, Optional

import pytest

from conftest import TIMEOUT, Gate
from priority_executor import PriorityThreadPoolExecutor
from priority_executor._lock import acquire_politely
from priority_executor._stats import QueueFullError
from support import AGEING, KINDS, AnyPool, exact, internals, make_pool, wait_until

#: (max_queued, when_full): unbounded, and each policy on a small queue.
LIMITS = [(None, "block"), (4, "block"), (4, "raise"), (4, "evict")]
CONFIGS = [
    pytest.param(ageing, max_queued, when_full, view, id=f"{ageing}-{max_queued}-{when_full}-{v}")
    for ageing, (max_queued, when_full), (view, v) in itertools.product(
        AGEING, LIMITS, [(False, "pool"), (True, "view")]
    )
]


def submitter(pool: AnyPool, view: bool, **options: Any) -> Callable[..., Future[Any]]:
    """``pool.submit`` with ``options``, or the same through a view."""
    if view:
        return pool.options(**options).submit
    return lambda fn, *args: pool.submit(fn, *args, **options)


class Payload:
    """An argument and a result that a test can watch being freed."""


def consume(payload: Payload) -> Payload:
    return payload


# -- nothing of a settled task stays referenced, in every configuration -----------------------
# The worst-entry heap (ageing with when_full="evict") keeps no popped entry, nor through it the
# entry's future, function, arguments and result.


@pytest.mark.parametrize(("ageing", "max_queued", "when_full", "view"), CONFIGS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_pool_keeps_no_reference_to_a_task_once_it_has_settled(
    kind: str,
    ageing: Optional[float],
    max_queued: Optional[int],
    when_full: Any,
    view: bool,
    gate: Gate,
) -> None:
    pool = make_pool(kind, 1, ageing=ageing, max_queued=max_queued, when_full=when_full)
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


# -- attacks on one behaviour, in that behaviour's file ---------------------------------------
# A view's map that is not kept: test_map.py; a view's submit blocked when the view shuts down:
# test_view.py; join: test_join.py; no callback delays another future's settling: test_claim.py;
# the cost of evicting: test_queue.py and test_backpressure.py; set_priority of a future seen
# cancelled: test_set_priority.py.


# -- an asynchronous exception inside submit leaves no lock held and the counts right ---------
# The lock is taken inside the try that releases it, and an interrupt between counting a
# submission and queueing it leaves no count (``submitted`` above the others) wrong for good.
# Here a tracer raises KeyboardInterrupt at the n-th line, call or return that the pool's own
# code executes during one submit, for every n until a submit completes untouched.

PACKAGE_DIR = str(__import__("priority_executor").__file__).rsplit("/", 1)[0]
POLITE = acquire_politely.__code__


class Interrupt:
    """A tracer that raises at the ``n``-th event in the package's code, then is unset.

    It skips the line events where a tracer can raise but a signal handler cannot (the
    interpreter runs handlers after a call returns, at a function's start and at backward
    jumps, never before a line's first instruction): a ``with`` line (from 3.11 on, CPython
    emits one as the block ends normally, before ``__exit__``), a ``try:`` (a NOP there), and
    a ``finally`` clause's ``lock.release()``, which a signal cannot keep from running.

    It does not raise inside :func:`~priority_executor._lock.acquire_politely`, which runs
    only when another thread holds the lock: an exception raised as that contended acquire
    returns leaves the lock held, the one window the semantics page documents. The pool's own
    threads (its deadline timer, a front's dispatcher) may hold the lock for a moment at the
    submit, and the test would then find that window by chance.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.fired = False
        self.future: Optional[Future[Any]] = None  # what the submit returned, if it did

    def __call__(self, frame: types.FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE_DIR) or code is POLITE:
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


def check_not_left_held(lock: threading.Lock, n: int) -> None:
    """Fail the test if ``lock`` cannot be taken within ``TIMEOUT``: it was left held.

    ``lock.locked()`` would not do: the pool's own threads take the lock too, and the timer
    that a submit with a deadline starts may hold it at this very moment. A lock left held is
    released before failing, so that the pool shuts down and the test fails, not hangs.
    """
    if lock.acquire(timeout=TIMEOUT):
        lock.release()
        return
    lock.release()
    pytest.fail(f"the lock stayed held (event {n})")


def submit_interrupted(pool: AnyPool, n: int, submit: Callable[[], Future[Any]]) -> Interrupt:
    """Call ``submit`` with :class:`Interrupt` raising at its ``n``-th event, and check that
    the pool's lock was not left held; the tracer, with what ``submit`` returned in
    ``future`` (None if it raised)."""
    interrupt = Interrupt(n)
    sys.settrace(interrupt)
    try:
        interrupt.future = submit()
    except (KeyboardInterrupt, QueueFullError):
        pass
    finally:
        sys.settrace(None)
    check_not_left_held(internals(pool).lock, n)
    return interrupt


def has_an_idle_worker(pool: AnyPool) -> bool:
    return pool.statistics().idle_workers == 1


SITUATIONS = ["first submit", "idle worker", "deadline", "timeout=0", "full queue"]


@pytest.mark.parametrize("situation", SITUATIONS)
@pytest.mark.parametrize("ageing", AGEING)
@pytest.mark.parametrize("when_full", ["block", "raise", "evict"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_exception_raised_anywhere_inside_submit_leaves_the_pool_consistent(
    kind: str, situation: str, ageing: Optional[float], when_full: Any, gate: Gate
) -> None:
    if situation == "full queue" and when_full == "block":
        pytest.skip("this submit would wait for room for ever: the queue is paused full")
    for n in range(10_000):
        pool = make_pool(kind, 1, ageing=ageing, max_queued=2, when_full=when_full)
        try:
            futures: list[Future[Any]] = []
            if situation != "first submit":
                assert pool.submit(str, "warm").result(TIMEOUT) == "warm"
                wait_until(functools.partial(has_an_idle_worker, pool), "the worker idles")
            if situation == "full queue":
                pool.pause()
                futures += [pool.submit(str, i, priority=-1) for i in range(2)]
            timeout = {"deadline": 60.0, "timeout=0": 0.0}.get(situation)
            interrupt = submit_interrupted(
                pool, n, functools.partial(pool.submit, str, "probe", priority=1, timeout=timeout)
            )
            if interrupt.future is not None:
                futures.append(interrupt.future)
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


# -- initializer failure and a thread that cannot start ---------------------------------------


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
