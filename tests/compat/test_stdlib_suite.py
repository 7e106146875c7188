"""CPython's own thread-pool tests, run against PriorityThreadPoolExecutor (slow).

The standard library ships its tests in ``test.test_concurrent_futures`` (a package since
3.12). Every ThreadPoolExecutor test case there runs here with ``ThreadPoolExecutor``
replaced by ours, except three that start a child interpreter in isolated mode, which
imports the executor from ``concurrent.futures`` by name; tests/compat/test_integration.py covers
the same behaviour (interpreter exit, submit after exit, shutdown(wait=False) at exit).
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread
import gc
import importlib
import io
import unittest
from collections.abc import Iterator

import pytest

from priority_executor import PriorityThreadPoolExecutor

MODULES = ["test_thread_pool", "test_shutdown", "test_wait", "test_as_completed", "test_init"]
SUBPROCESS_BY_NAME = {"test_hang_gh83386", "test_interpreter_shutdown"}
SUBPROCESS_BY_NAME.add("test_submit_after_interpreter_shutdown")

# Each Python ships its own version of these tests: every Python in CI runs them whole.
pytestmark = [pytest.mark.slow, pytest.mark.whole_on_every_python]


@pytest.fixture
def ours_as_the_standard_pool() -> Iterator[None]:
    saved = concurrent.futures.ThreadPoolExecutor
    concurrent.futures.ThreadPoolExecutor = PriorityThreadPoolExecutor  # type: ignore[misc]
    concurrent.futures.thread.ThreadPoolExecutor = PriorityThreadPoolExecutor  # type: ignore[misc]
    try:
        yield
    finally:
        concurrent.futures.ThreadPoolExecutor = saved  # type: ignore[misc]
        concurrent.futures.thread.ThreadPoolExecutor = saved  # type: ignore[misc]


@pytest.fixture
def a_heap_as_small_as_cpythons_own_run() -> Iterator[None]:
    """Keep what the test session built out of the collector's way while the cases run.

    After every case CPython's ``threading_cleanup()`` collects garbage, up to a hundred
    times, until the case's threads are gone: a pool's objects refer to each other, so its
    stopped threads go with the next collection. Its own test run has a small heap; inside
    this session, whose earlier tests leave a large one, each collection walked all of it
    (3.9: 544 s for one module instead of 70 s). ``gc.freeze()`` sets what exists now aside,
    so the collections see only what the cases make, as in CPython's run.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def thread_pool_cases(module_name: str) -> list[unittest.TestCase]:
    # The module is imported with our class patched in, so its mixins use it.
    try:
        module = importlib.import_module(f"test.test_concurrent_futures.{module_name}")
    except ImportError:
        # Before 3.12 the tests are one module; it runs once, under the first name.
        try:
            module = importlib.import_module("test.test_concurrent_futures")
        except ImportError as exc:
            pytest.skip(f"this Python's test.test_concurrent_futures does not import: {exc}")
        if module_name != MODULES[0]:
            pytest.skip(f"this Python's tests are one module, run as {MODULES[0]}")
    cases: list[unittest.TestCase] = []
    loader = unittest.TestLoader()
    for name in dir(module):
        obj = getattr(module, name)
        if isinstance(obj, type) and issubclass(obj, unittest.TestCase) and "Thread" in name:
            for case in loader.loadTestsFromTestCase(obj):
                assert isinstance(case, unittest.TestCase)
                if case._testMethodName not in SUBPROCESS_BY_NAME:
                    cases.append(case)
    return cases


@pytest.mark.usefixtures("ours_as_the_standard_pool", "a_heap_as_small_as_cpythons_own_run")
@pytest.mark.parametrize("module_name", MODULES)
def test_cpython_thread_pool_tests_pass(module_name: str) -> None:
    cases = thread_pool_cases(module_name)
    assert cases, f"no ThreadPoolExecutor test case found in {module_name}"
    stream = io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=2).run(unittest.TestSuite(cases))
    assert result.wasSuccessful(), stream.getvalue()
    assert result.testsRun == len(cases)
