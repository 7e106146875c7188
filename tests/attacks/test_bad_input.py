"""Bad input: every public parameter given a wrong type or value.

Each bad call must raise a clear error with an exact message, and leave the pool as it was:
nothing queued, no thread started or lost, ``_check_invariants()`` passing, and a following
valid call working. Where we mirror the standard pool (``max_workers``, ``initializer``,
``buffersize``, and errors Python itself raises for it) the message is the standard pool's.

Each case runs twice: against a fresh pool (the bad call must not start a thread), and against
a busy one whose single worker is held by a gate while one task waits in the queue (the bad
call must not disturb either).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple, Optional

import pytest

from conftest import TIMEOUT, FakeClock, Gate
from priority_executor import (
    AsyncPriorityScheduler,
    PriorityExecutor,
    PriorityThreadPoolExecutor,
    RateLimit,
)
from support import HUGE, exact, internals, make_pool


def echo(value: Any = "ok") -> Any:
    return value


def bad(value: object) -> Any:
    """``value``, typed ``Any`` so the type checker lets a test pass it where it does not fit."""
    return value


class Case(NamedTuple):
    name: str
    call: Callable[[PriorityThreadPoolExecutor], object]
    error: type[Exception]
    message: str


def stdlib_message(call: Callable[[], object]) -> str:
    """The message of the error that ``call`` (on the standard pool) raises."""
    with pytest.raises(Exception) as info:  # noqa: PT011 - any error; its text is the point
        call()
    return str(info.value)


def submit_case(name: str, error: type[Exception], message: str, **kwargs: Any) -> Case:
    return Case(f"submit-{name}", lambda pool: pool.submit(echo, **kwargs), error, message)


NaN = float("nan")

SUBMIT_CASES = [
    Case(
        "submit-fn-int",
        lambda pool: pool.submit(bad(5)),
        TypeError,
        "fn must be callable, got 5 (int)",
    ),
    Case(
        "submit-fn-None",
        lambda pool: pool.submit(bad(None)),
        TypeError,
        "fn must be callable, got None (NoneType)",
    ),
    Case(
        "submit-fn-str",
        lambda pool: pool.submit(bad("echo"), priority=1),
        TypeError,
        "fn must be callable, got 'echo' (str)",
    ),
    submit_case(
        "priority-str",
        TypeError,
        "priority must be a real number, got 'high' (str)",
        priority=bad("high"),
    ),
    submit_case(
        "priority-None",
        TypeError,
        "priority must be a real number, got None (NoneType)",
        priority=None,
    ),
    submit_case(
        "priority-NaN", ValueError, "priority must not be NaN, got nan (float)", priority=NaN
    ),
    submit_case(
        "priority-True",
        TypeError,
        "priority must be a real number, got True (bool)",
        priority=True,
    ),
    submit_case(
        "priority-False",
        TypeError,
        "priority must be a real number, got False (bool)",
        priority=False,
    ),
    submit_case(
        "priority-complex",
        TypeError,
        "priority must be a real number, got 1j (complex)",
        priority=1j,
    ),
    submit_case(
        "priority-Decimal",
        TypeError,
        "priority must be a real number, got Decimal('1') (Decimal)",
        priority=Decimal("1"),
    ),
    submit_case(
        "priority-list",
        TypeError,
        "priority must be a real number, got [1] (list)",
        priority=[1],
    ),
    submit_case(
        "timeout-str",
        TypeError,
        "timeout must be a real number or None, got 'x' (str)",
        timeout=bad("x"),
    ),
    submit_case(
        "timeout-negative",
        ValueError,
        "timeout must be a non-negative number, got -1 (int)",
        timeout=-1,
    ),
    submit_case(
        "timeout-negative-float",
        ValueError,
        "timeout must be a non-negative number, got -0.001 (float)",
        timeout=-0.001,
    ),
    submit_case(
        "timeout-minus-inf",
        ValueError,
        "timeout must be a non-negative number, got -inf (float)",
        timeout=float("-inf"),
    ),
    submit_case(
        "timeout-NaN",
        ValueError,
        "timeout must be a non-negative number, got nan (float)",
        timeout=NaN,
    ),
    submit_case(
        "timeout-True",
        TypeError,
        "timeout must be a real number or None, got True (bool)",
        timeout=True,
    ),
    submit_case(
        "timeout-complex",
        TypeError,
        "timeout must be a real number or None, got 1j (complex)",
        timeout=1j,
    ),
    submit_case(
        "timeout-Decimal",
        TypeError,
        "timeout must be a real number or None, got Decimal('1') (Decimal)",
        timeout=Decimal("1"),
    ),
]

MAP_CASES = [
    Case(
        "map-buffersize-str",
        lambda pool: pool.map(echo, [1], buffersize=bad("x")),
        TypeError,
        "buffersize must be an integer or None",
    ),
    Case(
        "map-buffersize-float",
        lambda pool: pool.map(echo, [1], buffersize=bad(1.5)),
        TypeError,
        "buffersize must be an integer or None",
    ),
    Case(
        "map-buffersize-zero",
        lambda pool: pool.map(echo, [1], buffersize=0),
        ValueError,
        "buffersize must be None or > 0",
    ),
    Case(
        "map-buffersize-negative",
        lambda pool: pool.map(echo, [1], buffersize=-1),
        ValueError,
        "buffersize must be None or > 0",
    ),
    Case(
        "map-priority-str",
        lambda pool: pool.map(echo, [1], priority=bad("high")),
        TypeError,
        "priority must be a real number, got 'high' (str)",
    ),
    Case(
        "map-priority-NaN",
        lambda pool: pool.map(echo, [1], priority=NaN),
        ValueError,
        "priority must not be NaN, got nan (float)",
    ),
    Case(
        "map-priority-True",
        lambda pool: pool.map(echo, [1], priority=True),
        TypeError,
        "priority must be a real number, got True (bool)",
    ),
    Case(
        "map-fn-int",
        lambda pool: pool.map(bad(5), [1, 2, 3]),
        TypeError,
        "fn must be callable, got 5 (int)",
    ),
    Case(
        "map-iterable-int",
        lambda pool: pool.map(echo, bad(5)),
        TypeError,
        stdlib_message(lambda: ThreadPoolExecutor(1).map(echo, bad(5))),
    ),
    Case(
        "map-timeout-str",
        lambda pool: pool.map(echo, [1], timeout=bad("x")),
        TypeError,
        stdlib_message(lambda: ThreadPoolExecutor(1).map(echo, [], timeout=bad("x"))),
    ),
]

OPTIONS_CASES = [
    Case(
        "options-priority-str",
        lambda pool: pool.options(priority=bad("high")),
        TypeError,
        "priority must be a real number, got 'high' (str)",
    ),
    Case(
        "options-priority-None",
        lambda pool: pool.options(priority=bad(None)),
        TypeError,
        "priority must be a real number, got None (NoneType)",
    ),
    Case(
        "options-priority-NaN",
        lambda pool: pool.options(priority=NaN),
        ValueError,
        "priority must not be NaN, got nan (float)",
    ),
    Case(
        "options-priority-True",
        lambda pool: pool.options(priority=True),
        TypeError,
        "priority must be a real number, got True (bool)",
    ),
    Case(
        "options-priority-complex",
        lambda pool: pool.options(priority=bad(1j)),
        TypeError,
        "priority must be a real number, got 1j (complex)",
    ),
    Case(
        "options-timeout-str",
        lambda pool: pool.options(timeout=bad("x")),
        TypeError,
        "timeout must be a real number or None, got 'x' (str)",
    ),
    Case(
        "options-timeout-negative",
        lambda pool: pool.options(timeout=-1),
        ValueError,
        "timeout must be a non-negative number, got -1 (int)",
    ),
    Case(
        "options-timeout-NaN",
        lambda pool: pool.options(timeout=NaN),
        ValueError,
        "timeout must be a non-negative number, got nan (float)",
    ),
    Case(
        "options-timeout-True",
        lambda pool: pool.options(timeout=True),
        TypeError,
        "timeout must be a real number or None, got True (bool)",
    ),
    Case(
        "view-submit-fn-int",
        lambda pool: pool.options(priority=1).submit(bad(5)),
        TypeError,
        "fn must be callable, got 5 (int)",
    ),
    Case(
        "view-map-fn-int",
        lambda pool: pool.options(priority=1).map(bad(5), [1]),
        TypeError,
        "fn must be callable, got 5 (int)",
    ),
    Case(
        "view-map-buffersize-str",
        lambda pool: pool.options(timeout=1).map(echo, [1], buffersize=bad("x")),
        TypeError,
        "buffersize must be an integer or None",
    ),
    Case(
        "view-map-buffersize-zero",
        lambda pool: pool.options(timeout=1).map(echo, [1], buffersize=0),
        ValueError,
        "buffersize must be None or > 0",
    ),
]

SET_PRIORITY_CASES = [
    Case(
        "set_priority-future-int",
        lambda pool: pool.set_priority(bad(5), 1),
        TypeError,
        "future must be a concurrent.futures.Future, got 5 (int)",
    ),
    Case(
        "set_priority-future-None",
        lambda pool: pool.set_priority(bad(None), 1),
        TypeError,
        "future must be a concurrent.futures.Future, got None (NoneType)",
    ),
    Case(
        "set_priority-priority-str",
        lambda pool: pool.set_priority(Future(), bad("high")),
        TypeError,
        "priority must be a real number, got 'high' (str)",
    ),
    Case(
        "set_priority-priority-NaN",
        lambda pool: pool.set_priority(Future(), NaN),
        ValueError,
        "priority must not be NaN, got nan (float)",
    ),
    Case(
        "set_priority-priority-True",
        lambda pool: pool.set_priority(Future(), True),
        TypeError,
        "priority must be a real number, got True (bool)",
    ),
]

CALL_CASES = SUBMIT_CASES + MAP_CASES + OPTIONS_CASES + SET_PRIORITY_CASES


class Busy:
    """A pool whose one worker is held by a gate while one task waits in the queue."""

    def __init__(self, pool: PriorityThreadPoolExecutor, gate: Gate) -> None:
        self.pool = pool
        self.gate = gate
        self.held = pool.submit(gate)
        gate.wait_started()
        self.waiting = pool.submit(echo, "waiting", priority=-5, timeout=TIMEOUT * 10)
        self.threads = set(pool._threads)


@pytest.fixture
def busy(gate: Gate) -> Iterator[Busy]:
    pool = PriorityThreadPoolExecutor(max_workers=1)
    try:
        yield Busy(pool, gate)
    finally:
        gate.open()
        pool.shutdown(wait=True)


def assert_pool_works(pool: PriorityThreadPoolExecutor) -> None:
    """A valid submit, a valid map and a valid view all still work."""
    assert pool.submit(echo, "after", priority=3, timeout=TIMEOUT * 10).result(TIMEOUT) == "after"
    assert list(pool.map(echo, [1, 2], timeout=TIMEOUT, buffersize=1)) == [1, 2]
    assert pool.options(priority=2, timeout=TIMEOUT * 10).submit(echo, 7).result(TIMEOUT) == 7
    pool._check_invariants()


@pytest.mark.parametrize("case", CALL_CASES, ids=[c.name for c in CALL_CASES])
def test_bad_call_on_a_fresh_pool_raises_and_starts_nothing(case: Case) -> None:
    with PriorityThreadPoolExecutor(max_workers=2) as pool:
        before = set(threading.enumerate())
        with pytest.raises(case.error, match=exact(case.message)):
            case.call(pool)
        assert internals(pool).queued() == 0, "a bad call queued something"
        assert not pool._threads, "a bad call started a worker"
        assert set(threading.enumerate()) == before, "a bad call started a thread"
        pool._check_invariants()
        assert_pool_works(pool)


@pytest.mark.parametrize("case", CALL_CASES, ids=[c.name for c in CALL_CASES])
def test_bad_call_on_a_busy_pool_leaves_it_as_it_was(case: Case, busy: Busy) -> None:
    pool = busy.pool
    with pytest.raises(case.error, match=exact(case.message)):
        case.call(pool)
    assert internals(pool).queued() == 1, "a bad call changed the queue"
    assert pool._threads == busy.threads, "a bad call changed the threads"
    assert not busy.waiting.done()
    assert busy.held.running()
    pool._check_invariants()
    busy.gate.open()
    assert busy.held.result(TIMEOUT) == "gate"
    assert busy.waiting.result(TIMEOUT) == "waiting"
    assert_pool_works(pool)


@pytest.mark.parametrize(
    ("priority", "error", "message"),
    [
        ("high", TypeError, "priority must be a real number, got 'high' (str)"),
        (None, TypeError, "priority must be a real number, got None (NoneType)"),
        (NaN, ValueError, "priority must not be NaN, got nan (float)"),
        (True, TypeError, "priority must be a real number, got True (bool)"),
    ],
)
def test_a_bad_new_priority_leaves_the_queued_task_where_it_was(
    priority: object, error: type[Exception], message: str, busy: Busy
) -> None:
    pool = busy.pool
    with pytest.raises(error, match=exact(message)):
        pool.set_priority(busy.waiting, bad(priority))
    pool._check_invariants()
    assert internals(pool).queued() == 1
    order: list[str] = []
    busy.waiting.add_done_callback(lambda _: order.append("waiting"))
    first = pool.submit(order.append, "first", priority=-4)  # ahead of the waiting one at -5
    busy.gate.open()
    assert busy.waiting.result(TIMEOUT) == "waiting"
    assert first.result(TIMEOUT) is None
    assert order == ["first", "waiting"]


# -- the constructor -------------------------------------------------------------------------


class Ctor(NamedTuple):
    name: str
    kwargs: dict[str, Any]
    error: type[Exception]
    message: str


CTOR_CASES = [
    Ctor("max_workers-0", {"max_workers": 0}, ValueError, "max_workers must be greater than 0"),
    Ctor("max_workers--1", {"max_workers": -1}, ValueError, "max_workers must be greater than 0"),
    Ctor(
        "max_workers-str",
        {"max_workers": "x"},
        TypeError,
        stdlib_message(lambda: ThreadPoolExecutor(max_workers=bad("x"))),
    ),
    Ctor("initializer-int", {"initializer": 5}, TypeError, "initializer must be a callable"),
    Ctor("initializer-str", {"initializer": "f"}, TypeError, "initializer must be a callable"),
    Ctor("clock-int", {"clock": 5}, TypeError, "clock must be callable, got 5 (int)"),
    Ctor("clock-None", {"clock": None}, TypeError, "clock must be callable, got None (NoneType)"),
    Ctor("clock-float", {"clock": 1.5}, TypeError, "clock must be callable, got 1.5 (float)"),
    Ctor(
        "ageing-str",
        {"ageing": "x"},
        TypeError,
        "ageing must be a positive number or None, got 'x' (str)",
    ),
    Ctor(
        "ageing-True",
        {"ageing": True},
        TypeError,
        "ageing must be a positive number or None, got True (bool)",
    ),
    Ctor(
        "ageing-zero",
        {"ageing": 0},
        ValueError,
        "ageing must be a positive number or None, got 0 (int)",
    ),
    Ctor(
        "ageing-negative",
        {"ageing": -1.5},
        ValueError,
        "ageing must be a positive number or None, got -1.5 (float)",
    ),
    Ctor(
        "ageing-inf",
        {"ageing": float("inf")},
        ValueError,
        "ageing must be a positive number or None, got inf (float)",
    ),
    Ctor(
        "ageing-NaN",
        {"ageing": NaN},
        ValueError,
        "ageing must be a positive number or None, got nan (float)",
    ),
    Ctor(
        "max_queued-str",
        {"max_queued": "x"},
        TypeError,
        "max_queued must be a positive integer or None, got 'x' (str)",
    ),
    Ctor(
        "max_queued-float",
        {"max_queued": 1.5},
        TypeError,
        "max_queued must be a positive integer or None, got 1.5 (float)",
    ),
    Ctor(
        "max_queued-True",
        {"max_queued": True},
        TypeError,
        "max_queued must be a positive integer or None, got True (bool)",
    ),
    Ctor(
        "max_queued-zero",
        {"max_queued": 0},
        ValueError,
        "max_queued must be a positive integer or None, got 0 (int)",
    ),
    Ctor(
        "max_queued-negative",
        {"max_queued": -3},
        ValueError,
        "max_queued must be a positive integer or None, got -3 (int)",
    ),
    Ctor(
        "when_full-unknown",
        {"when_full": "drop"},
        ValueError,
        "when_full must be 'block', 'raise' or 'evict', got 'drop' (str)",
    ),
    Ctor(
        "when_full-None",
        {"when_full": None},
        ValueError,
        "when_full must be 'block', 'raise' or 'evict', got None (NoneType)",
    ),
    Ctor(
        "when_full-int",
        {"when_full": 1},
        ValueError,
        "when_full must be 'block', 'raise' or 'evict', got 1 (int)",
    ),
    # The standard pool accepts this and fails in each worker; ours refuses it at once.
    Ctor(
        "initargs-int",
        {"initializer": echo, "initargs": 5},
        TypeError,
        stdlib_message(lambda: tuple(bad(5))),
    ),
]


@pytest.mark.parametrize("case", CTOR_CASES, ids=[c.name for c in CTOR_CASES])
def test_bad_constructor_argument_raises_and_starts_nothing(case: Ctor) -> None:
    before = set(threading.enumerate())
    with pytest.raises(case.error, match=exact(case.message)):
        PriorityThreadPoolExecutor(**case.kwargs)
    assert set(threading.enumerate()) <= before, "a refused pool started a thread"
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        assert_pool_works(pool)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_workers": 0}, "max_workers must be greater than 0"),
        ({"initializer": 5}, "initializer must be a callable"),
    ],
)
def test_constructor_errors_match_the_standard_pool(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception) as standard:  # noqa: PT011 - compared below
        ThreadPoolExecutor(**kwargs)
    with pytest.raises(Exception) as ours:  # noqa: PT011 - compared below
        PriorityThreadPoolExecutor(**kwargs)
    assert type(ours.value) is type(standard.value)
    assert str(ours.value) == str(standard.value) == message


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        ("x", TypeError, "timeout must be a real number or None, got 'x' (str)"),
        (True, TypeError, "timeout must be a real number or None, got True (bool)"),
        (1j, TypeError, "timeout must be a real number or None, got 1j (complex)"),
        (NaN, ValueError, "timeout must be a non-negative number, got nan (float)"),
        (-1, ValueError, "timeout must be a non-negative number, got -1 (int)"),
    ],
    ids=["str", "True", "complex", "NaN", "negative"],
)
def test_join_refuses_a_bad_timeout(timeout: object, error: type[Exception], message: str) -> None:
    with PriorityThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(error, match=exact(message)):
            pool.join(timeout=bad(timeout))
        assert pool.join(timeout=TIMEOUT) is True
        assert_pool_works(pool)


# -- numbers beyond float range ------------------------------------------------------------

#: An int beyond float range (``float(HUGE)`` overflows), as it is told in messages.
HUGE_SHOWN = "an int of 1329 bits"


def owner_calls() -> list[tuple[str, Callable[[], object], str]]:
    """Every argument a pool turns into a float, given HUGE: (id, call, message)."""

    def threads(**kwargs: Any) -> Callable[[], object]:
        return lambda: PriorityThreadPoolExecutor(1, **kwargs)

    def front(**kwargs: Any) -> Callable[[], object]:
        return lambda: PriorityExecutor(ThreadPoolExecutor(1), **kwargs)

    def scheduler(**kwargs: Any) -> Callable[[], object]:
        return lambda: AsyncPriorityScheduler(1, **kwargs)

    def set_limit(name: str) -> Callable[[], object]:
        def call() -> None:
            with PriorityThreadPoolExecutor(1) as pool:
                setattr(pool, name, (1, HUGE))

        return call

    def on_pool(call: Callable[[PriorityThreadPoolExecutor], object]) -> Callable[[], object]:
        def run() -> None:
            with PriorityThreadPoolExecutor(1) as pool:
                call(pool)

        return run

    per = f"per must fit in a float, got {HUGE_SHOWN}"
    cases = []
    for owner, make in (("threads", threads), ("front", front), ("async", scheduler)):
        cases += [
            (f"{owner}-rate_limit", make(rate_limit=(1, HUGE)), f"rate_limit {per}"),
            (f"{owner}-key_rate_limit", make(key_rate_limit=(1, HUGE)), f"key_rate_limit {per}"),
            (f"{owner}-ageing", make(ageing=HUGE), f"ageing must fit in a float, got {HUGE_SHOWN}"),
        ]
    return [
        *cases,
        ("RateLimit", threads(rate_limit=RateLimit(1, HUGE)), f"rate_limit {per}"),
        ("set-rate_limit", set_limit("rate_limit"), f"rate_limit {per}"),
        ("set-key_rate_limit", set_limit("key_rate_limit"), f"key_rate_limit {per}"),
        (
            "idle_timeout",
            threads(idle_timeout=HUGE),
            f"idle_timeout must fit in a float, got {HUGE_SHOWN}",
        ),
        (
            "idle_timeout-negative",
            threads(idle_timeout=-HUGE),
            "idle_timeout must be a positive number or None, got a negative int of 1329 bits",
        ),
        (
            "run_timeout",
            scheduler(run_timeout=HUGE),
            f"run_timeout must fit in a float, got {HUGE_SHOWN}",
        ),
        (
            "view-run_timeout",
            lambda: AsyncPriorityScheduler(1).options(run_timeout=HUGE),
            f"run_timeout must fit in a float, got {HUGE_SHOWN}",
        ),
        (
            "priority-Fraction",
            on_pool(lambda pool: pool.submit(echo, priority=bad(Fraction(HUGE)))),
            "priority must fit in a float, got a Fraction beyond float range",
        ),
        (
            "max_queued-far-beyond-repr",
            threads(max_queued=-(10**5000)),
            "max_queued must be a positive integer or None, got a negative int of 16610 bits",
        ),
    ]


OWNER_CALLS = owner_calls()


@pytest.mark.parametrize(
    ("call", "message"), [c[1:] for c in OWNER_CALLS], ids=[c[0] for c in OWNER_CALLS]
)
def test_a_number_beyond_float_range_is_refused_with_a_sentence(
    call: Callable[[], object], message: str
) -> None:
    # Where infinity is refused (a rate window, ageing, an idle or run timeout), so is a
    # number that would be infinite as a float: refused with the house sentence.
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match=exact(message)):
        call()
    assert set(threading.enumerate()) <= before, "a refused call started a thread"


@pytest.mark.parametrize("kind", ["threads", "front"])
def test_a_wait_beyond_float_range_means_no_deadline(kind: str) -> None:
    # Where infinity means "no deadline" (a queue timeout, join's timeout), so does HUGE.
    with make_pool(kind, 1) as pool:
        assert pool.submit(echo, "patient", timeout=HUGE).result(TIMEOUT) == "patient"
        assert pool.join(timeout=HUGE) is True
        assert pool.options(timeout=HUGE).timeout is None


# -- values that validation accepts but the pool cannot honour -------------------------------


@pytest.mark.parametrize("huge", [float("inf"), 1e10], ids=["inf", "1e10"])
def test_a_huge_timeout_does_not_stop_other_deadlines(
    huge: float, clock: FakeClock, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set by the expiry of ``later``, or by a pool thread dying: whichever comes first.
    settled = threading.Event()
    deaths: list[str] = []

    def hook(args: Any) -> None:
        deaths.append(f"{args.thread.name}: {args.exc_type.__name__}: {args.exc_value}")
        settled.set()

    monkeypatch.setattr(threading, "excepthook", hook)
    pool = PriorityThreadPoolExecutor(max_workers=1, clock=clock)
    clock.attach(pool)
    try:
        held = pool.submit(gate)
        gate.wait_started()
        patient: Optional[Future[Any]]
        try:
            patient = pool.submit(echo, timeout=huge)
        except (ValueError, OverflowError):
            patient = None  # refusing it with a clear error would be a fix too
        later = pool.submit(echo, timeout=0.25)
        later.add_done_callback(lambda _: settled.set())
        clock.advance(0.25)
        assert settled.wait(TIMEOUT / 2), "the later deadline never expired"
        assert not deaths, f"a pool thread died: {deaths}"
        assert later.cancelled(), "the deadline after the huge one did not expire"
        assert held.running(), "the expiry waited for the worker"
        gate.open()
        if patient is not None:
            assert patient.result(TIMEOUT) == "ok"
    finally:
        gate.open()
        pool.shutdown(wait=True)


def test_a_clock_reading_nan_refuses_a_submit_with_a_deadline_or_ageing_on_every_owner() -> None:
    message = "the clock read nan: a deadline or ageing needs a number"
    nan_clock: Callable[[], float] = lambda: math.nan  # noqa: E731
    with PriorityThreadPoolExecutor(1, clock=nan_clock) as pool:
        with pytest.raises(ValueError, match=exact(message)):
            pool.submit(int, timeout=1.0)
        assert pool.statistics().submitted == 0
    with (
        PriorityThreadPoolExecutor(1, clock=nan_clock, ageing=1.0) as pool,
        pytest.raises(ValueError, match=exact(message)),
    ):
        pool.submit(int)

    async def main() -> None:
        async def task() -> None:
            pass

        scheduler = AsyncPriorityScheduler(1, clock=nan_clock)
        with pytest.raises(ValueError, match=exact(message)):
            scheduler.submit(task, timeout=1.0)
        assert scheduler.statistics().submitted == 0

    asyncio.run(main())
