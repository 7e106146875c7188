"""Reaching an asyncio scheduler's loop from another thread.

The scheduler's state is the loop's alone: a call from another thread (``statistics()``
from a Prometheus server's thread, say) is made on the loop, between two of its callbacks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Optional, TypeVar, cast

T = TypeVar("T")


#: How often a call waiting for the loop (:func:`on_loop`) checks that it still runs.
LOOP_POLL = 0.05


def running_loop() -> Optional[asyncio.AbstractEventLoop]:
    """The running loop of this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
    """``fn()``, called on ``loop``'s thread between two of its callbacks, from another
    thread; called here instead if the loop stops (or closes) before it gets to it."""
    done = threading.Event()
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:
            outcome.append((False, exc))
        finally:
            done.set()

    try:
        loop.call_soon_threadsafe(call)
    except RuntimeError:  # closed meanwhile
        return fn()
    while not done.wait(LOOP_POLL):
        if not loop.is_running():  # stopped before it called: nothing else runs there now
            return fn()
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)
