"""Listeners: user functions told when each task starts and ends, for logs and tracing.

``pool.add_listener(on_start=None, on_finish=None)`` adds a pair; each is called with a frozen
:class:`TaskInfo` in the thread that starts or ends the task (a worker; for a
``PriorityExecutor``, its dispatcher and the wrapped executor's thread), never with the
pool's lock held: after the task's claim and before it runs, and after its future is settled
(done-callbacks included). Only tasks that run are reported; the statistics count the others.
A listener that raises is logged (``concurrent.futures``'s logger, as a callback's error is)
and counted in ``statistics().listener_errors``; the task and the thread carry on.

The listeners are a tuple replaced whole under the pool's lock by ``add`` and ``remove``, and
read without it: a runner with none pays one test per task and makes nothing.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable
from typing import Optional

from ._claim import LOGGER, Outcome
from ._policy import Number
from ._queue import Entry

#: What ``on_start`` and ``on_finish`` are called with.
Listener = Callable[["TaskInfo"], object]


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """One task, as a listener sees it; times in seconds on the pool's clock (NaN: unknown).

    ``priority`` is the one it was last given, ``key`` its view's (None: none);
    ``finished``, ``outcome`` (``"completed"`` or ``"failed"``) and ``exception`` are None
    in ``on_start``.
    """

    #: The priority the task was last given.
    priority: Number
    #: Its view's key; None for no key.
    key: Hashable
    #: When it was submitted, in seconds on the pool's clock.
    submitted: float
    #: When it started, in seconds on the pool's clock.
    started: float
    #: When it ended, in seconds on the pool's clock; None in ``on_start``.
    finished: Optional[float] = None
    #: ``"completed"`` or ``"failed"``; None in ``on_start``.
    outcome: Optional[str] = None
    #: What the task raised, if it failed; else None.
    exception: Optional[BaseException] = None


class ListenerHandle:
    """What ``add_listener`` returns: ``remove()`` takes the pair off (idempotent)."""

    __slots__ = ("_listeners", "_pair")

    def __init__(self, listeners: Listeners, pair: tuple[Optional[Listener], Optional[Listener]]):
        self._listeners = listeners
        self._pair = pair

    def remove(self) -> None:
        """Stop calling this pair; a call already under way finishes."""
        self._listeners.remove(self._pair)


class Listeners:
    """A pool's listeners; ``lock()`` gives the pool's lock (replaced in a fork child)."""

    __slots__ = ("clock", "errors", "finishes", "lock", "pairs", "starts")

    def __init__(self, lock: Callable[[], threading.Lock], clock: Callable[[], float]) -> None:
        self.lock = lock
        self.clock = clock
        self.pairs: tuple[tuple[Optional[Listener], Optional[Listener]], ...] = ()
        self.starts: tuple[Listener, ...] = ()
        self.finishes: tuple[Listener, ...] = ()
        self.errors = 0  # listener calls that raised; guarded by the pool's lock

    def add(self, on_start: Optional[Listener], on_finish: Optional[Listener]) -> ListenerHandle:
        """Add a pair; see ``add_listener``."""
        pair = (on_start, on_finish)
        with self.lock():
            self._set_locked((*self.pairs, pair))
        return ListenerHandle(self, pair)

    def remove(self, pair: tuple[Optional[Listener], Optional[Listener]]) -> None:
        with self.lock():
            self._set_locked(tuple(p for p in self.pairs if p is not pair))

    def _set_locked(self, pairs: tuple[tuple[Optional[Listener], Optional[Listener]], ...]) -> None:
        self.pairs = pairs
        self.starts = tuple(start for start, _ in pairs if start is not None)
        self.finishes = tuple(finish for _, finish in pairs if finish is not None)

    def watch(self, entry: Entry) -> Optional[Watch]:
        """A watch for the task of ``entry`` (detached), or None with no listener."""
        if not self.pairs:
            return None
        return Watch(self, entry)

    def call(self, listeners: tuple[Listener, ...], info: TaskInfo) -> None:
        for listener in listeners:
            try:
                listener(info)
            except BaseException:
                LOGGER.exception("exception calling listener %r for %r", listener, info)
                with self.lock():
                    self.errors += 1


class Watch:
    """Tells a pool's listeners of one task's start and end (a ``_claim.RunObserver``).

    Made only when the pool has listeners.
    """

    __slots__ = ("info", "listeners")

    def __init__(self, listeners: Listeners, entry: Entry) -> None:
        self.listeners = listeners
        self.info = TaskInfo(entry.priority, entry.key, entry.queued_at, entry.started)

    def started(self) -> None:
        """The task won its claim and is about to run (or was handed over)."""
        if self.listeners.starts:
            self.listeners.call(self.listeners.starts, self.info)

    def finished(self, outcome: Outcome, exception: Optional[BaseException]) -> None:
        """The task ended as ``outcome`` and its future is settled."""
        listeners = self.listeners
        if not listeners.finishes:
            return
        try:
            now = listeners.clock()
        except Exception:
            now = float("nan")
        done = dataclasses.replace(self.info, finished=now, outcome=outcome, exception=exception)
        listeners.call(listeners.finishes, done)
