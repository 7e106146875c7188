"""User code that a pool's own bookkeeping threads must not run, run on threads of its own.

The deadline timer settles every due future itself (:func:`~._futures.cancel_quietly` and the
claim: the future is done and its waiters awake), but never runs a done-callback: a callback
is user code, and one that sleeps would make every later deadline late. A front's dispatcher
must not run one either, or a slow callback would hold up every later hand-over. Such
*jobs* (running a future's callbacks, or settling it) go to the threads here instead. A new
thread starts whenever jobs arrive and every callback thread is inside one, up to
:data:`MAX_THREADS`, so a stuck job holds up only the jobs queued behind it, and never an
expiry. A thread with nothing left to run waits :data:`LINGER` seconds for more (a stream of
tasks settled one at a time would otherwise start a thread each), then exits, so an idle
pool keeps none; once the pool is joined, it exits at once.

Every field is guarded by the pool's lock, and every ``*_locked`` method is called with it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from ._context import fresh_thread

if TYPE_CHECKING:
    from ._admission import Admission


#: The most callback threads of one pool: beyond, jobs wait for one that is stuck to return.
MAX_THREADS = 4

#: How long a callback thread with nothing to run waits for more before it exits, in seconds.
LINGER = 0.1

#: A job: settles a future or runs its callbacks, and never raises (see ``_claim``).
Job = Callable[[], object]


class CallbackRunner:
    """The callback threads of one pool; see the module docstring."""

    def __init__(self, sink: Admission[Any], name: str) -> None:
        self.sink = sink
        self.name = name
        self.pending: deque[Job] = deque()
        self.threads: set[threading.Thread] = set()
        self.busy = 0  # threads inside a job
        self.lingering = 0  # threads waiting on ``arrived`` for more jobs
        self.arrived = threading.Condition(sink.lock)
        self.closing = False  # joined: threads exit as soon as nothing is left
        self.started = 0  # for thread names

    def add_locked(self, jobs: list[Job]) -> Optional[threading.Thread]:
        """Queue ``jobs``, each settled once run; return a new thread for the caller to start."""
        self.pending.extend(jobs)
        if self.lingering:
            self.arrived.notify(len(jobs))
        if len(self.threads) > self.busy or len(self.threads) >= MAX_THREADS:
            return None  # a thread between two jobs takes them, or the next one free
        thread = fresh_thread(f"{self.name}_callbacks_{self.started}", self._loop)
        self.started += 1
        self.threads.add(thread)
        return thread

    def forget_locked(self, thread: threading.Thread) -> list[Job]:
        """``thread`` could not start: write it off; return what is left for the caller to run."""
        self.threads.discard(thread)
        if self.threads:
            return []  # a thread still running takes them in turn
        left = list(self.pending)
        self.pending.clear()
        return left

    def owns_locked(self, thread: threading.Thread) -> bool:
        return thread in self.threads

    def check_locked(self) -> None:
        assert self.busy + self.lingering <= len(self.threads) <= MAX_THREADS, (
            "callback count is off"
        )

    def join(self) -> None:
        """Wait for the callback threads to finish what they were handed; without the lock."""
        with self.sink.lock:
            self.closing = True
            self.arrived.notify_all()
            threads = list(self.threads)
        for thread in threads:
            thread.join()

    def _loop(self) -> None:
        sink = self.sink
        me = threading.current_thread()
        ran = False  # a job, not yet reported
        while True:
            with sink.lock:
                if ran:
                    self.busy -= 1
                    sink.settled_locked(1)
                    ran = False
                if not self.pending and not self.closing:
                    self.lingering += 1
                    self.arrived.wait(LINGER)
                    self.lingering -= 1
                if not self.pending:
                    self.threads.discard(me)
                    return
                job = self.pending.popleft()
                self.busy += 1
            job()
            del job  # it holds a future and its result: nothing of it stays while lingering
            ran = True
