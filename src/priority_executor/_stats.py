"""What a pool reports about itself: the statistics snapshot and the queue-full error."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Optional, Union

from ._distribution import EMPTY, Distribution
from ._rates import RateLimit
from ._recording import NO_OUTCOMES, PerClass, PriorityClass


def _no_distributions() -> Mapping[PriorityClass, Distribution]:
    return PerClass({}, EMPTY)


def _no_outcomes() -> Mapping[PriorityClass, Mapping[str, int]]:
    return PerClass({}, NO_OUTCOMES)


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

    ``workers`` are the threads (or running tasks, on a ``PriorityExecutor`` and an
    ``AsyncPriorityScheduler``) and ``idle_workers`` those free to start a task now: a
    count, or ``math.inf`` on an ``AsyncPriorityScheduler`` with ``concurrency=math.inf``,
    whose free slots never run out.

    Why tasks wait: ``held_by_key`` queued tasks could start but for ``key_limit`` or
    ``key_rate_limit``; ``rate_limited`` is True while the pool's ``rate_limit`` holds back
    a start that nothing else holds back. The limits in force: ``max_workers`` (a thread
    pool's; None on a ``PriorityExecutor``) or ``max_running`` (a ``PriorityExecutor``'s;
    None on a thread pool), ``rate_limit``, ``key_limit`` and ``key_rate_limit`` (None where
    unset).

    How long tasks waited and ran, by priority class (see ``_recording.py``): ``wait[p]``
    is the :class:`Distribution` of the queue waits (submit to start) of the tasks of
    priority ``p`` that started, ``run[p]`` of their run times (start until the pool has
    settled the future, done-callbacks included), both in seconds on the pool's clock, and
    ``outcomes[p]`` counts how their tasks ended (``completed``, ``failed``, ``cancelled``,
    ``evicted``, a part of ``cancelled``, ``expired``, ``taken`` and ``rejected``). ``p``
    is the priority a task was last given, as a plain number; the first 16 distinct ones
    (counted, or reported queued here, best first) have a class each, the rest share the
    class ``"other"``. A class with nothing recorded is absent from iteration, ``len``,
    ``in`` and ``get``, but ``wait[p]`` and ``run[p]`` read as an empty
    :class:`Distribution` (count 0) and ``outcomes[p]`` as a 0 for every outcome, so that
    ``later.wait[p] - earlier.wait[p]`` works before a task of ``p`` has run (``p``: any
    real number, or ``"other"``; another key raises ``KeyError``). ``listener_errors``
    counts the calls of listeners (``add_listener``) that raised.
    """

    #: Tasks waiting in the queue now.
    queued: int
    #: ``queued``, by priority (a plain number), for the priorities that have tasks queued.
    queued_by_priority: Mapping[float, int]
    #: Tasks started and not yet finished.
    running: int
    #: Worker threads alive; a ``PriorityExecutor``'s ``max_running``; the asyncio
    #: scheduler's running coroutines.
    workers: int
    #: Idle worker threads; on a ``PriorityExecutor`` or the asyncio scheduler, free slots
    #: (``math.inf`` on an unbounded asyncio scheduler).
    idle_workers: Union[int, float]
    #: True between ``pause()`` and ``resume()``.
    paused: bool
    #: Tasks accepted by ``submit`` so far.
    submitted: int
    #: Tasks that returned.
    completed: int
    #: Tasks that raised, or were failed by a broken pool.
    failed: int
    #: Tasks cancelled before they started (by their user, by
    #: ``shutdown(cancel_futures=True)`` or by eviction).
    cancelled: int
    #: Tasks whose queue deadline passed before they started.
    expired: int
    #: Calls of ``submit`` refused (shut down, broken, or queue full).
    rejected: int
    #: Tasks taken out of the pool through ``_work_queue.get()``.
    taken: int = 0
    #: Queued tasks that could start but for ``key_limit`` or ``key_rate_limit``.
    held_by_key: int = 0
    #: True while ``rate_limit`` holds back a start that nothing else holds back.
    rate_limited: bool = False
    #: A thread pool's ``max_workers``, the asyncio scheduler's ``concurrency`` (None for
    #: ``math.inf``); None on a ``PriorityExecutor``.
    max_workers: Optional[int] = None
    #: A ``PriorityExecutor``'s ``max_running``; None on the others.
    max_running: Optional[int] = None
    #: The pool's rate limit in force, or None.
    rate_limit: Optional[RateLimit] = None
    #: The key limit in force, or None.
    key_limit: Optional[int] = None
    #: The per-key rate limit in force, or None.
    key_rate_limit: Optional[RateLimit] = None
    #: Queue waits (submit to start) in seconds on the pool's clock, by priority class.
    wait: Mapping[PriorityClass, Distribution] = dataclasses.field(
        default_factory=_no_distributions
    )
    #: Run times (start until the future is settled) in seconds, by priority class.
    run: Mapping[PriorityClass, Distribution] = dataclasses.field(default_factory=_no_distributions)
    #: A count per outcome of the tasks that ended, by priority class.
    outcomes: Mapping[PriorityClass, Mapping[str, int]] = dataclasses.field(
        default_factory=_no_outcomes
    )
    #: Calls of listeners (``add_listener``) that raised.
    listener_errors: int = 0
