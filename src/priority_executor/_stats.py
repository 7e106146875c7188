"""What a pool reports about itself: the statistics snapshot and the queue-full error."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


class QueueFullError(RuntimeError):
    """Raised by ``submit`` when ``max_queued`` tasks wait and the pool may not take more.

    A subclass of RuntimeError, like the standard pool's refusal after shutdown, so existing
    ``except RuntimeError`` clauses keep working.
    """


@dataclasses.dataclass(frozen=True)
class ExecutorStatistics:
    """A consistent snapshot of a pool, taken under its lock by ``statistics()``.

    Counts since the pool was made: ``submitted`` tasks were accepted by ``submit`` and
    ``rejected`` ones refused (shut down, broken, or queue full). Each accepted task ends up
    in exactly one of ``queued``, ``running``, ``completed`` (returned), ``failed`` (raised,
    or failed by a broken pool), ``cancelled`` (by its user, by ``shutdown(cancel_futures=
    True)`` or by eviction), ``expired`` (its queue deadline passed) and ``taken`` (taken
    out of the pool through ``_work_queue.get()``: the pool will never run it, whoever holds
    it may).
    """

    queued: int
    queued_by_priority: Mapping[float, int]
    running: int
    workers: int
    idle_workers: int
    paused: bool
    submitted: int
    completed: int
    failed: int
    cancelled: int
    expired: int
    rejected: int
    taken: int = 0
