"""Helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, TypeVar

from conftest import TIMEOUT

T = TypeVar("T")


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
