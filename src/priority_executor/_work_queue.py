"""``pool._work_queue``: the standard pool's private queue, for the code that reaches into it.

The standard pool keeps its waiting tasks in ``_work_queue``, a ``queue.SimpleQueue`` of work
items, and real code reads it: google-cloud-pubsub's ``ThreadScheduler.shutdown()`` drains it
with ``get(block=False)`` until ``queue.Empty`` to nack the messages that never ran (their
message is the task's first argument), and monitoring or backpressure code reads
``qsize()``. This pool keeps its tasks in a priority queue under its own lock, so
``_work_queue`` is a small reader of that queue with the same surface:

* ``qsize()`` and ``empty()``: how many tasks are queued now (running ones are not).
* ``get(block=False)`` and ``get_nowait()`` take the best queued task out of the pool for
  good, as the standard pool's next worker would have taken it, and return a work item with
  the standard attributes (``future``, ``fn``, ``args``, ``kwargs``, and ``task``, which is
  ``(fn, args, kwargs)`` as on 3.14) and ``run()``. The pool will not run it: it runs only if
  the caller calls ``run()``; its future stays pending until then, as with the standard
  pool. Such a task is counted as ``taken`` in the statistics. With nothing queued they
  raise ``queue.Empty``.
* ``get()`` with ``block=True`` does not wait for a task to be submitted: waiting would cost
  a signal on every submit, and the pool's own workers would take a new task first unless
  every one of them is busy. With nothing queued it raises ``queue.Empty`` at once.
* ``put(None)``, which some code uses to wake the standard pool's workers, is accepted and
  does nothing (this pool's workers need no such wake-up); anything else is refused: tasks
  go in through ``submit``.

Taking a task out follows the pool's rule for every removal: whoever removes an entry from
the queue, under the pool's lock, is the only one that settles or claims its future. A task
found past its queue deadline is expired (and its waiters woken), and one whose user just
cancelled it is unqueued as the cancel hook would; ``get`` then moves on to the next. The
entry keeps nothing of the task, and blocked submits and ``join()`` are woken, as after any
other removal. A task taken out of a view's queue is no longer the view's: its
``shutdown(wait=True)`` does not wait for it (as the standard pool's ``shutdown`` does not wait
for a work item taken out of its queue), and its ``cancel_futures=True`` does not cancel it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import queue
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Optional

from ._claim import run
from ._context import InContext
from ._control import AdmissionControl
from ._policy import describe
from ._queue import Entry


@dataclasses.dataclass(eq=False, repr=False)
class WorkItem:
    """A task taken out of the pool by ``_work_queue.get()``, shaped as the standard one."""

    __slots__ = ("args", "context", "fn", "future", "kwargs")

    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    context: Optional[contextvars.Context]  # the submitter's, with copy_context=True; else None

    @property
    def task(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """``(fn, args, kwargs)``, as the standard work item holds it on Python 3.14."""
        return self.fn, self.args, self.kwargs

    def run(self, ctx: Any = None) -> None:
        """Claim the future and, unless it was cancelled, run the task and settle the future.

        As the standard work item's ``run``: a cancelled future is only marked notified (its
        waiters wake); otherwise the result or exception goes to the future. ``ctx``, which
        the standard 3.14 worker passes, is a worker context whose ``run(task)`` runs it.
        """
        fn: Callable[..., Any] = self.fn
        if self.context is not None:
            fn = InContext(self.context, fn)
        if ctx is None:
            run(self.future, fn, self.args, self.kwargs)
        else:
            run(self.future, ctx.run, ((fn, self.args, self.kwargs),), {})

    def __repr__(self) -> str:
        return f"<WorkItem {self.fn!r} of {self.future!r}>"


class WorkQueue:
    """The reader behind ``pool._work_queue``; see the module docstring. Safe from any thread."""

    __slots__ = ("_admission",)

    def __init__(self, admission: AdmissionControl[Any]) -> None:
        self._admission = admission

    def qsize(self) -> int:
        """The number of tasks queued now, not counting running ones."""
        return self._admission.state().queued

    def empty(self) -> bool:
        """True if no task is queued now."""
        return not self.qsize()

    def get(self, block: bool = True, timeout: Optional[float] = None) -> WorkItem:
        """Take the best queued task out of the pool, which will not run it; never waits.

        Raises:
            queue.Empty: no task is queued.
            ValueError: ``timeout`` is negative (with ``block``), as for ``queue.Queue``.
        """
        if block and timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        entry = self._take()
        if entry is None:
            raise queue.Empty
        fn, args, kwargs, view_state = entry.fn, entry.args, entry.kwargs, entry.view_state
        future = entry.detach()  # a tombstone of it may stay in a heap: it holds nothing
        if view_state is not None:
            view_state.taken(future)  # its view's shutdown(wait=True) no longer waits for it
        context = None
        if isinstance(fn, InContext):
            context, fn = fn.context, fn.fn
        return WorkItem(future, fn, args, dict(kwargs), context)

    def get_nowait(self) -> WorkItem:
        """``get(block=False)``."""
        return self.get(block=False)

    def put(self, item: object, block: bool = True, timeout: Optional[float] = None) -> None:
        """Accept ``None``, the standard wake-up, and do nothing; refuse anything else.

        Raises:
            TypeError: ``item`` is not None.
        """
        if item is not None:
            raise TypeError(
                "_work_queue.put() takes only None (a wake-up, which this pool's workers"
                f" do not need), got {describe(item)}; queue tasks with submit()"
            )

    def put_nowait(self, item: object) -> None:
        """``put(item, block=False)``."""
        self.put(item, block=False)

    def _take(self) -> Optional[Entry]:
        """Take the best live entry as a worker would, and count it taken, not running."""
        admission = self._admission
        due: list[Entry] = []  # expired on the way
        dropped: list[Entry] = []  # cancelled by their users just now
        with admission.lock:
            while True:
                entry = admission.take_locked(due, True)
                if entry is None or not entry.future.cancelled():
                    break
                # Cancelled just now, its hook not yet run: settled as the hook would.
                admission.drop_locked(entry, "cancelled", dropped)
            if entry is not None:
                admission.finished_locked("taken", entry, keyed=False)
            admission.emptied_locked()
        admission.settler.settle_deferred()  # a clock error on the way
        try:
            admission.settler.cancel(due, expired=True)  # wakes their waiters, counts them
        finally:
            admission.settler.cancel(dropped)
        return entry
