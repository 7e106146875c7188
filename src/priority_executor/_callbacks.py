"""Done-callbacks of the futures the deadline timer expires, run off the timer's thread.

The timer settles every due future itself (:func:`~._futures.cancel_quietly` and the claim:
the future is done and its waiters awake), but never runs a done-callback: a callback is user
code, and one that sleeps would make every later deadline late. The callbacks go to the
threads here instead. A new thread starts whenever callbacks arrive and every callback thread
is inside a callback, so a stuck callback holds up only the callbacks queued behind it in the
same batch, never a later expiry; a thread exits as soon as nothing is left to run, so an idle
pool keeps none.

Every field is guarded by the pool's lock, and every ``*_locked`` method is called with it.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Optional, Protocol

from ._claim import run_callbacks_guarded
from ._context import fresh_thread


class CallbackSink(Protocol):
    """What the runner needs from the pool: its lock, and where to report settled futures."""

    lock: threading.Lock

    def settled_locked(self, count: int) -> None:
        """``count`` futures taken from the queue have been settled, callbacks included."""


class CallbackRunner:
    """The callback threads of one pool; see the module docstring."""

    def __init__(self, sink: CallbackSink, name: str) -> None:
        self.sink = sink
        self.name = name
        self.pending: deque[Future[Any]] = deque()
        self.threads: set[threading.Thread] = set()
        self.busy = 0  # threads inside a callback
        self.started = 0  # for thread names

    def add_locked(self, futures: list[Future[Any]]) -> Optional[threading.Thread]:
        """Queue the callbacks of ``futures``; return a new thread for the caller to start."""
        self.pending.extend(futures)
        if len(self.threads) > self.busy:
            return None  # a thread between two callbacks takes them
        thread = fresh_thread(f"{self.name}_callbacks_{self.started}", self._loop)
        self.started += 1
        self.threads.add(thread)
        return thread

    def forget_locked(self, thread: threading.Thread) -> list[Future[Any]]:
        """``thread`` could not start: write it off; return what is left for the caller to run."""
        self.threads.discard(thread)
        if len(self.threads) > self.busy:
            return []
        left = list(self.pending)
        self.pending.clear()
        return left

    def owns_locked(self, thread: threading.Thread) -> bool:
        return thread in self.threads

    def check_locked(self) -> None:
        assert self.busy <= len(self.threads), "callback count is off"

    def join(self) -> None:
        """Wait for the callback threads to finish what they were handed; without the lock."""
        with self.sink.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join()

    def _loop(self) -> None:
        sink = self.sink
        me = threading.current_thread()
        future: Optional[Future[Any]] = None
        while True:
            with sink.lock:
                if future is not None:
                    self.busy -= 1
                    sink.settled_locked(1)
                if not self.pending:
                    self.threads.discard(me)
                    return
                future = self.pending.popleft()
                self.busy += 1
            run_callbacks_guarded(future)
