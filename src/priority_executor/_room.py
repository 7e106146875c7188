"""Backpressure: what ``submit`` does when ``max_queued`` tasks wait (``when_full``).

* ``"raise"``: refuse the task with :class:`~._stats.QueueFullError`.
* ``"evict"``: if the lowest-ranked queued task ranks below the new one, it makes room (it is
  cancelled, and its waiters wake); otherwise the new task is refused.
* ``"block"``: wait on :attr:`Room.cond` until a task leaves the queue. The wait counts
  toward the task's queue ``timeout``: if its deadline passes first, it expires unqueued. It
  ends with the standard ``RuntimeError`` if the pool (or the view submitting) shuts down
  meanwhile. From one of the pool's own threads it raises instead: a task waiting for room
  could wait for itself, and once every worker did, no task would leave the queue.

Every field is guarded by the pool's lock, and every ``*_locked`` method is called with it.
"""

from __future__ import annotations

import threading
from collections.abc import Sized
from typing import Any, NamedTuple, Optional, Protocol, Union

from ._policy import Number, WhenFull, is_due
from ._queue import Entry
from ._recording import Tally
from ._stats import QueueFullError
from ._timer import CLOCK_RETRY, MAX_SLEEP


class Host(Protocol):
    """What backpressure needs of the pool; every call is made with the pool's lock held."""

    tally: Tally

    @property
    def queue(self) -> Any:  # Sized, with worst()
        """The pool's queue."""

    def read_clock(self) -> Union[float, Exception]:
        """The pool's clock, or the exception it raised."""

    def check_accepting_locked(self, priority: Number, view_state: Any) -> None:
        """Raise what the standard pool raises when no task may be queued."""

    def is_own_thread_locked(self, thread: threading.Thread) -> bool:
        """True for the pool's workers, its timer and its callback threads."""


class Decision(NamedTuple):
    """What a full queue means for a new task."""

    evict: Optional[Entry]  # still queued: the caller removes it once nothing else can fail
    expired: bool  # its deadline passed while its submit waited for room: expire it unqueued


#: Room freed up while a blocked submit waited: queue its task, evicting nothing.
ROOM_FREED = Decision(None, False)


class Room:
    """The ``max_queued`` limit of one pool; see the module docstring."""

    def __init__(
        self, lock: Optional[threading.Lock], max_queued: Optional[int], when_full: WhenFull
    ):
        self.max_queued = max_queued
        self.when_full = when_full
        self.evicts = max_queued is not None and when_full == "evict"
        # A task left the queue, or the pool stops; None: a scheduler whose submits never
        # block (the asyncio scheduler's), which refuses "block" when it is made.
        self.cond = None if lock is None else threading.Condition(lock)
        self.blocked = 0  # submits waiting on ``cond``

    def full_locked(self, queue: Sized) -> bool:
        """``max_queued`` tasks wait: a new one needs :meth:`make_room_locked` first."""
        return self.max_queued is not None and len(queue) >= self.max_queued

    def make_room_locked(self, host: Host, entry: Entry, rank: Number, view_state: Any) -> Decision:
        """Apply ``when_full`` for ``entry`` (of rank ``rank``) on a full queue.

        Raises:
            QueueFullError: ``when_full`` is "raise", or "evict" and no queued task ranks
                below the new one, or "block" from one of the pool's own threads.
            RuntimeError: the pool or the view was shut down while this submit waited.
        """
        if self.when_full == "evict":
            worst = host.queue.worst()
            if worst is not None and rank < worst.rank:
                return Decision(worst, False)
        if self.when_full != "block":
            host.tally.add("rejected", entry.priority)
            raise QueueFullError(f"cannot queue the task: max_queued={self.max_queued} tasks wait")
        if host.is_own_thread_locked(threading.current_thread()):
            host.tally.add("rejected", entry.priority)
            raise QueueFullError(
                f"cannot wait for room from one of the pool's own threads:"
                f" max_queued={self.max_queued} tasks wait"
            )
        assert self.cond is not None, "a scheduler without blocking submits was made to block"
        self.blocked += 1
        try:
            while True:
                left: Optional[float] = None
                if entry.deadline is not None:
                    now = host.read_clock()
                    if isinstance(now, Exception):
                        left = CLOCK_RETRY
                    elif is_due(entry.deadline, now):
                        return Decision(None, True)
                    else:
                        left = min(entry.deadline - now, MAX_SLEEP)
                if not self.full_locked(host.queue):  # re-read: a new key limit replaces it
                    return ROOM_FREED
                self.cond.wait(left)
                host.check_accepting_locked(entry.priority, view_state)
        finally:
            self.blocked -= 1

    def shrunk_locked(self) -> None:
        """A task left the queue: let the blocked submits look again."""
        if self.blocked:
            assert self.cond is not None
            self.cond.notify(self.blocked)

    def wake_all_locked(self) -> None:
        """Make every blocked submit re-check whether it may still queue (a shutdown)."""
        if self.blocked:
            assert self.cond is not None
            self.cond.notify_all()
