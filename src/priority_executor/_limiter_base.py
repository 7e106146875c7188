"""What both limiters show: their constructor, ``acquire``'s checks, the settings, observers.

:class:`LimiterBase` is the public surface that ``PriorityLimiter`` (threads) and
``AsyncPriorityLimiter`` (asyncio) share; each owner adds its waiting, and its own way to
serialise a change (:meth:`LimiterBase._change`). :class:`Acquisition` is what ``acquire``
returns before the owner's ``with`` protocol: a request's checked options.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Optional, TypeVar, Union

from ._claim import LOGGER
from ._grants import Grants, Request, Waiter
from ._limits import CountSetting, Limits, RateSetting
from ._policy import PLAIN_PRIORITIES, Number, Priority, check_ageing, check_bound, check_clock
from ._rates import RateLimit
from ._timer import log_clock_failure

#: Told of each released grant, with no lock held: its priority, wait and hold in seconds.
Observer = Callable[[Number, float, float], None]


def log_clock_errors(errors: Sequence[Exception]) -> None:
    """Log what the limiter's clock raised; called with no lock held (logging runs handlers)."""
    for error in errors:
        log_clock_failure(error, "limiter")


def surely(step: Callable[..., None], *args: object) -> None:
    """Make ``step``, which does nothing twice, once more if an exception (an interrupt)
    cuts it short, then let that exception go on: a release or a leave that a signal
    handler interrupts still gives its units back."""
    try:
        step(*args)
    except BaseException:
        step(*args)
        raise


L = TypeVar("L", bound="LimiterBase")  # type: ignore[type-arg]
A = TypeVar("A", bound="Acquisition")  # type: ignore[type-arg]


class Acquisition(Generic[L]):
    """A request's checked options, and its :class:`~._grants.Request` while it is made,
    waits or is held (entered and not yet exited)."""

    __slots__ = ("_cost", "_key", "_limiter", "_priority", "_request", "_timeout")

    def __init__(
        self, limiter: L, priority: Number, timeout: Optional[float], key: Hashable, cost: int
    ) -> None:
        self._limiter = limiter
        self._priority = priority
        self._timeout = timeout
        self._key = key
        self._cost = cost
        self._request: Optional[Request] = None

    def _begin(self, waiter: Waiter) -> Request:
        """The request of an entry, held here before it can be granted: whatever then makes
        the entry raise (after which ``with`` calls no exit) gives back what it got."""
        if self._request is not None:
            raise RuntimeError("this acquisition is held already: call acquire() again")
        request = self._request = Request(waiter, self._priority, self._key, self._cost)
        return request

    def _held(self) -> Request:
        """The request the block held, as the block exits: it is the owner's to release."""
        request, self._request = self._request, None
        assert request is not None, "exit without entry"
        return request


class LimiterBase(Generic[A]):
    """The surface both limiters share; see the module docstring. ``_acquisition`` is the
    owner's :class:`Acquisition` type, with its ``with`` protocol."""

    _acquisition: Callable[..., A]
    #: Told of each release (the OpenTelemetry exporter's histograms); empty: no cost.
    _observers: tuple[Observer, ...] = ()

    def __init__(
        self,
        capacity: Union[int, float],
        *,
        clock: Optional[Callable[[], float]] = None,
        ageing: Optional[float] = None,
        rate_limit: Union[RateLimit, tuple[int, float], None] = None,
        key_limit: Optional[int] = None,
        key_rate_limit: Union[RateLimit, tuple[int, float], None] = None,
    ) -> None:
        self._grants = Grants(
            capacity,
            clock=time.monotonic if clock is None else check_clock(clock),
            ageing=check_ageing(ageing),
            rate_limit=rate_limit,
            key_limit=key_limit,
            key_rate_limit=key_rate_limit,
        )
        self._own()

    def _own(self) -> None:
        """Make the owner's own fields, once the policy is made."""
        raise NotImplementedError

    def acquire(
        self,
        *,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        key: Hashable = None,
        cost: int = 1,
    ) -> A:
        """A context manager that waits for ``cost`` units on entry and gives them back on
        exit, whatever the block raised (``with`` for ``PriorityLimiter``, ``async with`` for
        ``AsyncPriorityLimiter``). It may be entered again once exited.

        Args:
            priority: a real number; higher is granted first. Default ``Priority.NORMAL``.
            timeout: the seconds it may wait, on the limiter's clock (None: for ever). Past
                it, entry raises the built-in ``TimeoutError`` and holds nothing. ``0``: only
                if it can be granted now.
            key: the key of ``key_limit`` and ``key_rate_limit`` (hashable; None: no key).
            cost: the units it holds: a positive int, at most ``capacity`` (and ``key_limit``,
                with a key). Default 1.

        Raises:
            TypeError, ValueError: a bad argument, here rather than on entry.
        """
        if (  # the usual case, checked at once
            cost.__class__ is int
            and cost == 1
            and key is None
            and timeout is None
            and priority.__class__ in PLAIN_PRIORITIES
            and self._grants.core.ageing is None
        ):
            return self._acquisition(self, priority, None, None, 1)
        level, seconds, key, cost = self._grants.check(priority, timeout, key, cost)
        return self._acquisition(self, level, seconds, key, cost)

    def _change(self, change: Callable[[], None]) -> None:
        """Make ``change`` serialised with the rest, then grant what it lets in."""
        raise NotImplementedError

    def _observe(self, request: Request) -> None:
        """Tell the observers of a released grant; called with no lock held."""
        try:
            now = self._grants.core.clock()
            wait, hold = request.started - request.queued_at, now - request.started
            for observer in self._observers:
                observer(request.priority, wait, hold)
        except Exception:
            LOGGER.exception("A limiter's observer raised")

    # -- settings ------------------------------------------------------------------------------

    @property
    def capacity(self) -> Union[int, float]:
        """The units held at most at once, settable. A higher value grants at once, in
        order; a lower one takes nothing back (requests that no longer fit wait)."""
        return self._grants.core.capacity

    @capacity.setter
    def capacity(self, value: Union[int, float]) -> None:
        capacity = check_bound("capacity", value)
        self._change(lambda: setattr(self._grants.core, "capacity", capacity))

    rate_limit = RateSetting(
        "At most ``starts`` grants in any ``per`` seconds; settable (None for no limit)."
    )
    key_limit = CountSetting(
        "At most this many units held at once per key; settable (None for no limit)."
    )
    key_rate_limit = RateSetting("``rate_limit`` for each key apart; settable (None for no limit).")

    def _limits(self) -> Limits:
        return self._grants.core.limits

    def _set_limit(self, name: str, limit: Union[int, RateLimit, None]) -> None:
        self._change(lambda: self._grants.core.change_limit(name, limit))

    def __repr__(self) -> str:
        core = self._grants.core  # a racy read, for display only
        return (
            f"<{type(self).__name__} capacity={core.capacity} in_use={core.running} "
            f"waiting={len(core.queue)}>"
        )
