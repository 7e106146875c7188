"""``AsyncView``: a view of an ``AsyncPriorityScheduler`` with fixed options for its tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from ._aio_task import TaskFunction
from ._policy import Number

if TYPE_CHECKING:
    from ._aio import AsyncPriorityScheduler

T = TypeVar("T")


class SchedulerDefault:
    """The ``run_timeout`` of a view that did not set one: its scheduler's."""

    def __repr__(self) -> str:
        return "<the scheduler's run_timeout>"


SCHEDULER_DEFAULT = SchedulerDefault()


class AsyncView:
    """A view of an :class:`AsyncPriorityScheduler` with fixed options for its tasks.

    Made by :meth:`AsyncPriorityScheduler.options`. Its :meth:`submit` and :meth:`run`
    forward every keyword to ``fn`` (``timeout=3`` reaches ``fn``), and take the priority,
    queue timeout, run timeout and key from the view: its attributes ``priority``,
    ``timeout`` and ``run_timeout`` (seconds, or None) and ``key``.
    """

    __slots__ = ("_scheduler", "key", "priority", "run_timeout", "timeout")

    def __init__(
        self,
        scheduler: AsyncPriorityScheduler,
        priority: Number,
        timeout: Optional[float],
        run_timeout: Optional[float],
        key: Hashable,
    ) -> None:
        self._scheduler = scheduler
        self.priority = priority
        self.timeout = timeout
        self.run_timeout = run_timeout
        self.key = key

    def submit(self, fn: TaskFunction[T], /, *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args, **kwargs)`` with the view's options; see the scheduler's."""
        return self._scheduler._owner.submit(
            fn, args, kwargs, self.priority, self.timeout, self.key, self.run_timeout
        )

    async def run(self, fn: TaskFunction[T], /, *args: Any, **kwargs: Any) -> T:
        """``await submit(...)``."""
        return await self.submit(fn, *args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"<AsyncView priority={self.priority!r} timeout={self.timeout!r}"
            f" run_timeout={self.run_timeout!r} key={self.key!r} of {self._scheduler!r}>"
        )
