"""The deadline timer: one thread per pool, started with the first deadline, never polling.

It sleeps until the earliest queued deadline (or, under a rate limit with tasks queued, the
next rate slot: ``Core.next_deadline``), expires every task due by then,
lets the pool open what the slot allows, and sleeps again; with nothing to wait for it sleeps
until signalled. A submit with an earlier deadline
than the one it sleeps until signals it. So a task expires within the timer's wake-up latency
of its deadline even when every worker is busy with long tasks, and an idle pool costs
nothing. Workers also check the deadline of each entry they pop, so an entry popped after its
deadline is expired even if the timer has not woken yet.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Optional

from ._claim import LOGGER
from ._context import fresh_thread

if TYPE_CHECKING:
    from ._admission import Admission

#: Seconds between two tries of a clock that raised.
CLOCK_RETRY = 1.0

#: The longest the timer sleeps in one go; lock timeouts overflow beyond threading.TIMEOUT_MAX.
MAX_SLEEP = min(3600.0, threading.TIMEOUT_MAX)


def log_clock_failure(exc: Exception, owner: str = "pool") -> None:
    """Report a clock that raised (a pool's, or a limiter's); called with no lock held,
    since logging runs handlers."""
    LOGGER.critical("The %s's clock raised; deadlines wait until it works", owner, exc_info=exc)


class DeadlineTimer:
    """The timer of one pool. Every method but ``join`` is called with the pool's lock held."""

    def __init__(self, source: Admission[Any]) -> None:
        self.source = source
        # Guarded by the pool's lock:
        self.thread: Optional[threading.Thread] = None
        self.target: Optional[float] = None  # the deadline it sleeps until, None for ever
        self.exited: Optional[threading.Thread] = None  # the last timer, which has left its loop
        # True from the moment the timer, with nothing due and no signal pending, decides to
        # sleep until signalled, to the next signal: in between it reads no clock.
        self.asleep = False
        # The timer blocks acquiring this lock; releasing it once wakes the timer. It is
        # released only under the pool's lock, so "unlocked" means "signalled, not yet woken".
        self.park = threading.Lock()
        self.park.acquire()

    def needs_signal_locked(self, deadline: Optional[float]) -> bool:
        """True if a task queued with ``deadline`` is due before the timer would wake."""
        return deadline is not None and (self.target is None or deadline < self.target)

    def signal_locked(self, deadline: Optional[float]) -> None:
        """Make the timer wake and re-read the queue; start it if it has not started."""
        if self.thread is None:
            thread = fresh_thread(f"{self.source.name}_timer", self._loop)
            self.thread = thread  # first, so that a started timer is never lost track of
            try:
                thread.start()
            except BaseException:
                if thread.ident is None:  # it never began: submit raises, nothing changed
                    self.thread = None
                raise
        self.target = deadline
        self.asleep = False
        if self.park.locked():
            self.park.release()

    def start_locked(self) -> None:
        """Start the timer if it does not run (for rate slots); it then reads the queue."""
        if self.thread is None:
            self.signal_locked(self.target)

    def wake_locked(self) -> None:
        """Wake a running timer, so it re-reads the clock and the queue; no-op if none runs."""
        if self.thread is not None:
            self.signal_locked(self.target)

    def _loop(self) -> None:
        source = self.source
        while True:
            with source.lock:
                now = source.core.read_clock()
                due = [] if isinstance(now, Exception) else source.pop_due_locked(now)
                deadline = source.core.next_deadline()
                self.target = deadline
                self.asleep = deadline is None and self.park.locked()
                # Once the pool is stopping, no deadline can be added: exit when none is left.
                done = deadline is None and source.timer_done_locked()
                if done:  # a rate limit set after this starts a new timer; join() waits for this
                    self.exited, self.thread = self.thread, None
            source.settle_expired(due)  # runs no callback on this thread
            del due
            if isinstance(now, Exception):
                log_clock_failure(now)
            if done:
                return
            if deadline is None:
                self.park.acquire()
            else:
                delay = CLOCK_RETRY if isinstance(now, Exception) else deadline - now
                self.park.acquire(timeout=min(max(0.0, delay), MAX_SLEEP))

    def join(self) -> None:
        """Wait for the timer to exit, once the pool is stopping. Call without the lock."""
        with self.source.lock:
            self.wake_locked()
            threads = [thread for thread in (self.thread, self.exited) if thread is not None]
        for thread in threads:
            thread.join()
