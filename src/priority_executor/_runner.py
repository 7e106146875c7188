"""The contract between admission and what starts its tasks.

:class:`Runner` is what ``Admission`` needs from a runner (``_threads.ThreadRunner`` and
``_dispatch.DelegateRunner``); a runner calls back only ``Admission.take_locked`` (the one place
a task leaves the queue to start), ``finished_locked``, ``finished_later_locked``,
``drop_locked``, ``drained_locked``, ``break_locked``, ``withdraw_locked`` and the settler, and
reads the core (``Admission.core``: ``startable()``, ``running``, ``capacity``, which is the
runner's size). Declared here, below both, so that neither imports the other's implementation.
"""

from __future__ import annotations

import threading
from collections.abc import Sized
from typing import Optional, Protocol

from ._queue import Entry


class Runner(Protocol):
    """What admission needs from whatever starts its tasks; ``*_locked`` with the lock held."""

    @property
    def unstarted(self) -> Sized:
        """Threads counted in but not yet started; a hint for :meth:`start_pending`."""

    def queued_locked(self, waiting: int) -> None:
        """A task was queued, and ``waiting`` may start now: get someone to ``take_locked()``."""

    def resumed_locked(self, waiting: int) -> None:
        """The pool was resumed with ``waiting`` tasks queued: get as many takers as they need."""

    def stop_locked(self) -> None:
        """The pool is stopping: wake whatever sleeps, so that it drains the queue and exits."""

    def start_pending(self, entry: Optional[Entry]) -> None:
        """Start what was counted in under the lock; without it. ``entry``: the submit's."""

    def resync_locked(self) -> None:
        """Write off a thread that an asynchronous exception cut short as it was counted in.

        A thread counted in is listed in ``unstarted`` first: one listed there that the rest
        of the runner does not count is such a thread.
        """

    def owns_locked(self, thread: threading.Thread) -> bool:
        """One of the runner's threads (also one still starting)."""

    def staffed_locked(self) -> bool:
        """Some thread of the runner runs or is starting: what is queued will be taken."""

    def sizes_locked(self) -> tuple[int, int]:
        """(workers, idle workers), for the statistics."""

    def capacity_locked(self) -> dict[str, int]:
        """The runner's limit by its public name (``max_workers``, ``max_running``)."""

    def resize_locked(self, size: int) -> None:
        """Change that limit: surplus threads or slots go as their tasks finish."""

    def check_locked(self) -> None:
        """Assert the runner's invariants."""

    def join(self) -> None:
        """Wait for the runner's threads to exit, once the pool is stopping; without the lock."""

    def after_fork_in_child(self, lock: threading.Lock) -> bool:
        """Forget the threads, which do not exist in a fork child; True if any was started."""
