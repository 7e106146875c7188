"""Shared test tools: a fake clock, a gate that holds workers, and a thread-leak check."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

#: Every blocking wait in the tests uses this, so a bug fails a test instead of hanging it.
TIMEOUT = 10.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--share",
        metavar="K/N",
        default=None,
        help="run the K-th of N shares (1 <= K <= N) of the selected tests: every N-th test"
        " in collection order from the K-th on, and every test marked whole_on_every_python."
        " .ci/run spreads the slow suite over the middle Pythons so, whose shares together"
        " are the whole suite",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "whole_on_every_python: never split into --share: what it checks differs by Python"
        " (CPython's own pool tests, which each version ships)",
    )


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    share = config.getoption("--share")
    if share is None:
        return
    k, n = parse_share(share)
    kept = take_share(
        items, k, n, whole=lambda t: t.get_closest_marker("whole_on_every_python") is not None
    )
    config.hook.pytest_deselected(items=[t for t in items if t not in kept])
    items[:] = kept


def take_share(items: list[T], k: int, n: int, whole: Callable[[T], bool]) -> list[T]:
    """The K-th of N shares of ``items``, in their order: every N-th of those not ``whole``
    from the K-th on, and every one that is ``whole``."""
    shared = [t for t in items if not whole(t)]
    mine = {id(t) for t in shared[k - 1 :: n]}
    return [t for t in items if whole(t) or id(t) in mine]


def parse_share(text: str) -> tuple[int, int]:
    """``"K/N"`` as ``(K, N)``; a usage error unless both are integers with 1 <= K <= N."""
    k, slash, n = text.partition("/")
    if slash and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n):
        return int(k), int(n)
    raise pytest.UsageError(f"--share must be K/N with 1 <= K <= N, got {text!r}")


class FakeClock:
    """A clock that moves only when told; pools attached to it re-read it at once."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def attach(self, pool: Any) -> None:
        """Wake ``pool``'s deadline timer whenever this clock moves."""
        from support import internals  # here: support imports this module

        self._listeners.append(internals(pool).wake_timer)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds
        for listener in self._listeners:
            listener()


class Gate:
    """A task that blocks a worker until the test opens the gate."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.opened = threading.Event()

    def __call__(self) -> str:
        self.started.set()
        if not self.opened.wait(TIMEOUT):
            raise TimeoutError("gate never opened")
        return "gate"

    def wait_started(self) -> None:
        assert self.started.wait(TIMEOUT), "the gate task never started"

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.open()  # never leave a worker blocked behind a failed test


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail any test that leaves a thread running (after a grace period to finish exiting)."""
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before]
    for thread in leaked:
        thread.join(TIMEOUT)
    alive = [t.name for t in leaked if t.is_alive()]
    assert not alive, f"threads left running: {alive}"


class LogRecords(logging.Handler):
    """Keeps every record logged to the logger it is attached to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def futures_log() -> Iterator[list[logging.LogRecord]]:
    """Everything ``concurrent.futures`` logs during the test (it only logs trouble)."""
    handler = LogRecords()
    logger = logging.getLogger("concurrent.futures")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def thread_deaths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names and errors of threads that die of an uncaught exception during the test."""
    deaths: list[str] = []

    def hook(args: Any) -> None:
        name = args.thread.name if args.thread is not None else "?"
        deaths.append(f"{name}: {args.exc_type.__name__}: {args.exc_value}")

    monkeypatch.setattr(threading, "excepthook", hook)
    return deaths


@pytest.fixture
def otel() -> Iterator[tuple[Any, Any]]:
    """``(reader, provider)``: an SDK MeterProvider read by an InMemoryMetricReader."""
    sdk_metrics = pytest.importorskip(
        "opentelemetry.sdk.metrics", reason="opentelemetry-sdk is not installed"
    )
    export = pytest.importorskip("opentelemetry.sdk.metrics.export")
    reader = export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    try:
        yield reader, provider
    finally:
        provider.shutdown()
