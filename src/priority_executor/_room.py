"""Waiting for room: a thread pool's or a front's submits that ``max_queued`` holds back.

What a full queue means for a new task is the core's decision (``Core.make_room``): refuse it
(``"raise"``), or evict the lowest-ranked queued task if it ranks below the new one
(``"evict"``), or wait (``"block"``). This is the wait, on :attr:`Room.cond`, until a task
leaves the queue. It counts toward the task's queue ``timeout``: if its deadline passes
first, it expires unqueued. It ends with the standard ``RuntimeError`` if the pool (or the
view submitting) shuts down meanwhile. From one of the pool's own threads it raises instead:
a task waiting for room could wait for itself, and once every worker did, no task would
leave the queue.

Every field is guarded by the pool's lock, and every ``*_locked`` method is called with it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Optional

from ._policy import is_due
from ._queue import Entry, ViewState
from ._stats import QueueFullError
from ._timer import CLOCK_RETRY, MAX_SLEEP

if TYPE_CHECKING:
    from ._admission import Admission
    from ._core import Core


class Room:
    """The submits of one pool that wait for room; see the module docstring."""

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)  # a task left the queue, or the pool stops
        self.blocked = 0  # submits waiting on ``cond``

    def wait_locked(
        self, admission: Admission[Any], entry: Entry, view_state: Optional[ViewState]
    ) -> bool:
        """Wait until the full queue has room for ``entry``: False; True if it expired first.

        Raises:
            QueueFullError: from one of the pool's own threads.
            RuntimeError: the pool or the view was shut down while this submit waited.
        """
        core = admission.core
        if admission.is_own_thread_locked(threading.current_thread()):
            core.reject(entry.priority)
            raise QueueFullError(
                f"cannot wait for room from one of the pool's own threads:"
                f" max_queued={core.max_queued} tasks wait"
            )
        while True:
            left: Optional[float] = None
            if entry.deadline is not None:
                now = core.read_clock()
                if isinstance(now, Exception):
                    left = CLOCK_RETRY
                elif is_due(entry.deadline, now):
                    return True
                else:
                    left = min(entry.deadline - now, MAX_SLEEP)
            if not core.full():  # re-read: a new key limit replaces the queue
                return False
            self.sleep_locked(core, left)
            admission.check_accepting_locked(entry.priority, view_state)

    def sleep_locked(self, core: Core, timeout: Optional[float]) -> bool:
        """Wait on :attr:`cond` for up to ``timeout``, counted blocked and among the core's
        ``watchers`` (so that a task leaving the queue wakes this); False if it timed out."""
        # One statement each way: an interrupt leaves both counted, or neither.
        self.blocked, core.watchers = self.blocked + 1, core.watchers + 1
        try:
            return self.cond.wait(timeout)
        finally:
            self.blocked, core.watchers = self.blocked - 1, core.watchers - 1

    def shrunk_locked(self) -> None:
        """A task left the queue: let the blocked submits look again."""
        if self.blocked:
            self.cond.notify(self.blocked)

    def wake_all_locked(self) -> None:
        """Make every blocked submit re-check whether it may still queue (a shutdown)."""
        if self.blocked:
            self.cond.notify_all()
