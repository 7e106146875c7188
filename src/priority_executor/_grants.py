"""What both priority limiters share: their requests on the one policy, with no lock and no loop.

A limiter holds ``capacity`` units. An ``acquire`` makes a :class:`Request` for ``cost`` of
them, which waits in a weighed :class:`~._core.Core` (the policy every scheduler of the
package composes) until it is *granted*: the core's take, the one place anything leaves its
queue to start, grants the best request whose cost fits, and no request passes a better one
that does not fit yet, unless that one's key or rate limit holds it back. A granted request
is *held* until its owner releases it; its wait (acquire to grant) and its hold (grant to
release) are recorded per priority class as a pool records a task's wait and run.

:class:`Grants` wraps the core with the calls a limiter makes, each of which returns what its
owner must do: the waiters it granted, the ones whose ``timeout`` passed, and whether its
timer must wake (:data:`~._core.TIMER`). The owners (``_limiter.PriorityLimiter`` with its
lock, ``_alimiter.AsyncPriorityLimiter`` on its loop) serialise every call, and wake their
waiters their own way. A waiter is the handle the queue maps to its request: it says
``done()`` once its owner has settled it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any, Optional, Protocol, Union

from ._claim import Outcome
from ._core import Core
from ._distribution import Distribution
from ._limits import Limits
from ._policy import Number, check_bound, check_key, check_task_options, describe
from ._queue import Entry
from ._rates import RateLimit
from ._recording import PriorityClass
from ._stats import _no_distributions, _no_outcomes


class Waiter(Protocol):
    """What the queue needs of a request's waiter: a hashable handle that says when it is
    settled (granted, expired or given up)."""

    def done(self) -> bool: ...


class Request(Entry):
    """One ``acquire``'s wait for ``cost`` units, from ``acquire`` until its release."""

    __slots__ = ("cost",)

    def __init__(self, waiter: Waiter, priority: Number, key: Hashable, cost: int) -> None:
        # Only the fields a request's flows read: no callable, arguments or view, which a
        # pool's task has (``Entry.__init__``). The queue holds thread-pool futures by type;
        # it only hashes them and asks done().
        self.future = waiter  # type: ignore[assignment]
        self.priority = priority
        self.key = key
        self.cost = cost
        self.deadline: Optional[float] = None
        self.queued = False
        self.rank: Number = 0


#: How a limiter's requests end, as ``statistics().outcomes`` and the exporters count them.
LIMITER_OUTCOMES = ("completed", "failed", "cancelled", "expired")


def _amount(value: Union[int, float]) -> str:
    """A capacity or limit for a message: its digits, or its size if it has thousands."""
    return str(value) if isinstance(value, float) or value.bit_length() < 1000 else describe(value)


@dataclasses.dataclass(frozen=True)
class LimiterStatistics:
    """A consistent snapshot of a limiter, taken by ``statistics()``.

    Counts since the limiter was made: ``requested`` calls of ``acquire`` entered their
    block's wait. Each ends up in exactly one of ``waiting``, ``holding`` (granted, not yet
    released), ``completed`` (released after the block returned), ``failed`` (released
    after the block raised), ``cancelled`` (the caller gave up waiting: a cancelled Task, an
    interrupted thread, or a grant it could no longer take) and ``expired`` (its
    ``timeout`` passed first, or with ``timeout=0``, it could not be granted at once).

    ``wait[p]`` is the :class:`Distribution` of the waits (``acquire`` to grant) of the
    requests of priority class ``p`` that were granted and released, ``hold[p]`` of their
    holds (grant to release), in seconds on the limiter's clock; ``outcomes[p]`` counts how
    they ended. Priority classes are those of ``ExecutorStatistics``.
    """

    #: The units the limiter grants at most at once (``math.inf`` for no bound).
    capacity: Union[int, float]
    #: Units held by granted requests now (the sum of their costs).
    in_use: Union[int, float]
    #: Requests waiting now.
    waiting: int
    #: ``waiting``, by priority (a plain number).
    waiting_by_priority: Mapping[float, int]
    #: Requests granted and not yet released.
    holding: int
    #: Calls of ``acquire`` that entered their wait.
    requested: int
    #: Released after their block returned.
    completed: int
    #: Released after their block raised.
    failed: int
    #: Gave up waiting (cancelled or interrupted).
    cancelled: int
    #: Their ``timeout`` passed before a grant.
    expired: int
    #: Waiting requests that could be granted but for ``key_limit`` or ``key_rate_limit``.
    held_by_key: int = 0
    #: True while ``rate_limit`` holds back a grant that nothing else holds back.
    rate_limited: bool = False
    #: The limits in force, or None.
    rate_limit: Optional[RateLimit] = None
    key_limit: Optional[int] = None
    key_rate_limit: Optional[RateLimit] = None
    #: Waits (acquire to grant) in seconds on the limiter's clock, by priority class.
    wait: Mapping[PriorityClass, Distribution] = dataclasses.field(
        default_factory=_no_distributions
    )
    #: Holds (grant to release) in seconds, by priority class.
    hold: Mapping[PriorityClass, Distribution] = dataclasses.field(
        default_factory=_no_distributions
    )
    #: A count per outcome of the requests that ended, by priority class.
    outcomes: Mapping[PriorityClass, Mapping[str, int]] = dataclasses.field(
        default_factory=_no_outcomes
    )


class Grants:
    """A limiter's policy: its core, and the calls its owner makes; see the module docstring."""

    def __init__(
        self,
        capacity: object,
        *,
        clock: Any,
        ageing: Optional[float],
        rate_limit: object,
        key_limit: object,
        key_rate_limit: object,
    ) -> None:
        self.core = Core(
            clock=clock,
            ageing=ageing,
            limits=Limits.checked(rate_limit, key_limit, key_rate_limit),
            capacity=check_bound("capacity", capacity),
            weighed=True,
        )
        self.holding = 0  # requests granted and not yet released

    def check(
        self, priority: object, timeout: object, key: object, cost: object
    ) -> tuple[Number, Optional[float], Hashable, int]:
        """An ``acquire``'s arguments, checked: every bad one is refused before it waits."""
        core = self.core
        level, seconds = check_task_options(priority, timeout, core.ageing)
        key = check_key(key)
        if type(cost) is not int:
            if isinstance(cost, bool) or not isinstance(cost, int):
                raise TypeError(f"cost must be a positive integer, got {describe(cost)}")
            cost = int(cost)
        if cost < 1:
            raise ValueError(f"cost must be a positive integer, got {describe(cost)}")
        key_limit = core.limits.key_limit
        for name, bound in (("capacity", core.capacity), ("key_limit", key_limit)):
            if bound is not None and cost > bound and (name == "capacity" or key is not None):
                raise ValueError(
                    f"cost must be at most {name}={_amount(bound)}, got {describe(cost)}: "
                    "it could never be granted"
                )
        return level, seconds, key, cost

    def request(
        self,
        request: Request,
        timeout: Optional[float],
        granted: list[Request],
        expired: list[Request],
    ) -> bool:
        """Queue ``request`` (checked by :meth:`check`, refused by :meth:`at_once`) and grant
        what may be granted now: into ``granted``, the new one too if it fits, and into
        ``expired`` the requests the grants found past their deadline. True if the new one
        waits.

        With ``timeout=0`` one that cannot be granted at once leaves at once, counted
        ``expired`` (not listed): the caller raises ``TimeoutError``. If the clock raises
        (with a timeout or ageing), nothing changed.
        """
        core = self.core
        rank, due = core.stamp(request, None if timeout == 0 else timeout)
        # Its own first grant pass, on a later clock reading, must not expire it: a timeout
        # too short to outlast that (or below the clock's resolution) means "only now".
        deadline, request.deadline = request.deadline, None
        core.tally.submitted += 1
        core.queue.push(request, rank)
        if request.key is not None and core.limits.keyed:
            core.limits.relieve_locked(request.key, core.queue)  # it may be its key's best
        self.grant(granted, expired)
        if request.queued:
            if timeout == 0 or due:
                core.unqueue(request.future, "expired")
            elif deadline is not None:
                core.queue.set_deadline(request, deadline)
        return request.queued

    def at_once(self, request: Request) -> bool:
        """Grant a request at once when nothing waits, no limit is set and its cost fits: the
        take that would grant it, without its trip through the queue, and with nothing else
        for its owner to do. False: :meth:`request` it. ``python benchmarks/limiter.py``
        (against its rows with ``key_limit=1``, which turn this off), CPython 3.11: an
        uncontended acquire and release takes 2.44 against 6.47 µs (asyncio) and 3.07
        against 7.13 µs (threads)."""
        core = self.core
        if (
            core.queue
            or not core.fast_submit
            or request.key is not None  # a key counts its units even with no limit set
            or core.running + request.cost > core.capacity
        ):
            return False
        try:
            request.started = request.queued_at = core.clock()
        except Exception:
            return False  # the queue's way records the error
        core.tally.submitted += 1
        core.running += request.cost
        if request.priority not in core.tally.classes:
            core.tally.of(request.priority)
        self.holding += 1
        return True

    def grant(self, granted: list[Request], expired: list[Request]) -> None:
        """Grant every request that may be granted now, best first, into ``granted``; the
        requests the grants found past their deadline go to ``expired`` (counted, settled)."""
        core = self.core
        if not core.queue:
            return  # the usual release: nothing waits
        unrun: list[Entry] = []
        while True:
            request = core.take(unrun)
            if request is None:
                break
            assert core.running <= core.capacity, "a grant beyond capacity"
            self.holding += 1
            granted.append(request)  # type: ignore[arg-type]  # the queue holds only requests
        if unrun:
            core.settled(len(unrun))
            expired.extend(unrun)  # type: ignore[arg-type]

    def release(
        self, request: Request, outcome: Outcome, granted: list[Request], expired: list[Request]
    ) -> None:
        """A granted request ends (``outcome``: completed, failed, or cancelled for a grant its
        waiter no longer takes); what its units let in goes to ``granted`` and ``expired``."""
        self.holding -= 1
        self.core.finish(outcome, request)
        self.grant(granted, expired)

    def expire(self, now: float, granted: list[Request], expired: list[Request]) -> None:
        """The timer's turn at ``now``: the requests past their deadline go to ``expired``
        (counted), and the grants the clock (a rate slot) or their leaving lets in, to
        ``granted``."""
        core = self.core
        due = core.pop_due(now)
        if due:
            core.settled(len(due))
            expired.extend(due)  # type: ignore[arg-type]
        self.grant(granted, expired)

    def abandon(self, request: Request, granted: list[Request], expired: list[Request]) -> None:
        """Its waiter gives up: a queued request leaves, a granted one gives its units back.
        Counted cancelled either way; what that lets in goes to ``granted`` and ``expired``."""
        core = self.core
        if request.queued:
            core.unqueue(request.future, "cancelled")
            self.grant(granted, expired)
        else:
            core.untake(request)  # the grant passes on whole: its rate slots too
            self.release(request, "cancelled", granted, expired)

    def statistics(self) -> LimiterStatistics:
        core = self.core
        stats = core.statistics(workers=0, idle_workers=0)
        return LimiterStatistics(
            capacity=core.capacity,
            in_use=core.running,
            waiting=stats.queued,
            waiting_by_priority=stats.queued_by_priority,
            holding=self.holding,
            requested=stats.submitted,
            completed=stats.completed,
            failed=stats.failed,
            cancelled=stats.cancelled,
            expired=stats.expired,
            held_by_key=stats.held_by_key,
            rate_limited=stats.rate_limited,
            rate_limit=stats.rate_limit,
            key_limit=stats.key_limit,
            key_rate_limit=stats.key_rate_limit,
            wait=stats.wait,
            hold=stats.run,
            outcomes=stats.outcomes,
        )

    def check_invariants(self) -> None:
        """Assert the limiter's invariants in O(n)."""
        core = self.core
        core.check(len(core.queue) + self.holding)
        assert core.settling == 0, "an expired request is left unsettled"
        assert (core.running == 0) == (self.holding == 0), "units held with no grant"
