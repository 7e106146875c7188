"""What the limiters' tests share: the end-of-test account, and, for the asyncio limiter, a
grant held by the test's own Task and the timer's callback run by hand."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Union

from priority_executor import AsyncPriorityLimiter, LimiterStatistics, PriorityLimiter


def accounted(limiter: Union[PriorityLimiter, AsyncPriorityLimiter]) -> LimiterStatistics:
    """Nothing held or waiting, every request ended in exactly one way, invariants hold."""
    limiter._check_invariants()
    stats = limiter.statistics()
    assert (stats.in_use, stats.holding, stats.waiting) == (0, 0, 0), stats
    ended = stats.completed + stats.failed + stats.cancelled + stats.expired
    assert stats.requested == ended, f"lost or double-counted request: {stats}"
    return stats


async def take(limiter: AsyncPriorityLimiter, **options: Any) -> Callable[[], Awaitable[None]]:
    """Acquire from ``limiter`` in the test's own Task; return what gives the units back.

    Giving back never suspends: what follows it runs in the same loop iteration.
    """
    acquisition = limiter.acquire(**options)
    await acquisition.__aenter__()

    async def give_back() -> None:
        await acquisition.__aexit__(None, None, None)

    return give_back


def fire_timer(limiter: AsyncPriorityLimiter) -> None:
    """Run the limiter's timer callback now, on the loop, as the loop would once the timer's
    real delay had passed: that delay was computed from the (fake) clock when the timer was
    armed, so a moved fake clock is only seen when the callback runs. The armed handle is
    cancelled first, so that it does not run a second time later."""
    timer = limiter._timer
    if timer is not None:
        timer.cancel()
    limiter._on_timer()
