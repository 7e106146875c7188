"""Settling the futures of tasks taken out of the queue unrun.

Expired by the timer, cancelled by ``shutdown(cancel_futures=True)``, abandoned when no thread
can start, failed by a broken pool: in each case many futures settle at once, and each of
them was counted in ``settling`` under the pool's lock when it left the queue. Each function
here settles every future first (``cancel_all``: done, waiters awake) and only then runs the
done-callbacks, so that no callback delays another future's settling; then it reports them
settled, which is what ``join()`` waits for. Called without the pool's lock.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from ._callbacks import Job
from ._claim import LOGGER, cancel_all, claim, guard_callbacks, run_callbacks_guarded
from ._futures import cancel_once, has_user_callbacks, is_cancelled
from ._futures import expired as marked_expired
from ._queue import Entry
from ._timer import log_clock_failure

if TYPE_CHECKING:
    from ._admission import Admission


class Settler:
    """The bulk settling of one pool; see the module docstring."""

    def __init__(self, sink: Admission[Any]) -> None:
        self.sink = sink

    def settle_deferred(self) -> None:
        """Log the ``clock_errors`` and cancel the ``evicted`` entries left for after the lock.

        Called without the pool's lock. An entry stays listed until it is settled, callbacks
        included, so that if an exception interrupts its settler, the next submit, ``join()``
        or ``shutdown()`` settles it; settling twice is harmless (``cancel_once``).
        """
        sink = self.sink
        while sink.core.clock_errors:  # a hint, rechecked under the lock
            with sink.lock:
                errors = sink.core.take_clock_errors()
            for error in errors:
                log_clock_failure(error)
        while sink.core.evicted:
            with sink.lock:
                evicted = sink.core.evicted
                if not evicted:
                    return
                entry = evicted[-1]
                future = entry.future
            cancel_once(future)
            with sink.lock:
                mine = sink.evicted_settled_locked(entry)  # not settled by another thread
            if mine:
                entry.detach()

    def cancel(self, drained: list[Entry], expired: bool = False) -> None:
        """Cancel ``drained`` and run their callbacks in this thread.

        ``expired``: they left the queue because their deadline passed (see ``cancel_all``).
        """
        if not drained:
            return
        futures = [entry.detach() for entry in drained]
        try:
            for future in cancel_all(futures, expired):
                run_callbacks_guarded(future)
        finally:
            with self.sink.lock:
                if expired:
                    self._recount_locked(drained, futures)
                self.sink.settled_locked(len(drained))

    def abandon(self, drained: list[Entry]) -> None:
        """Cancel what no thread will ever run (none could start), and say so."""
        LOGGER.critical("no worker thread could start: %d queued tasks cancelled", len(drained))
        self.cancel(drained)

    def expired(self, due: list[Entry]) -> None:
        """Cancel ``due`` at once, and hand their callbacks to the callback threads.

        The timer calls this: a callback run on its thread could make it late for the next
        deadline.
        """
        futures = [entry.detach() for entry in due]
        owed = cancel_all(futures, expired=True)
        owed = [future for future in owed if has_user_callbacks(future)]
        with self.sink.lock:
            self._recount_locked(due, futures)
            self.sink.settled_locked(len(due) - len(owed))
        self.later([partial(run_callbacks_guarded, future) for future in owed])

    def _recount_locked(self, due: list[Entry], futures: list[Future[Any]]) -> None:
        """Count as its user settled it each task counted expired that its deadline did not
        cancel: its user's ``cancel()`` (or ``set_result``) came between the task's leaving
        the queue and its settling, so ``statistics()`` agrees with ``expired()``."""
        tally = self.sink.core.tally
        for entry, future in zip(due, futures, strict=True):
            if marked_expired(future):
                continue
            if is_cancelled(future):
                tally.overtaken(entry.priority, "cancelled")
            elif future.done():  # a result set by hand; one still pending was cut short
                tally.overtaken(entry.priority, "completed")

    def call_later(self, jobs: list[Job]) -> None:
        """:meth:`later` for jobs no future stands for (listeners): counted here first.

        ``join()`` waits for them, as for callbacks.
        """
        with self.sink.lock:
            self.sink.core.settling += len(jobs)
        self.later(jobs)

    def later(self, jobs: list[Job]) -> None:
        """Run ``jobs`` on the callback threads; each counted in ``settling`` until it has run.

        If no callback thread can start, the jobs run in this thread, and the failure is
        logged rather than raised.
        """
        if not jobs:
            return
        sink = self.sink
        with sink.lock:
            thread = sink.callbacks.add_locked(jobs)
        if thread is None:
            return
        try:
            thread.start()
        except BaseException as exc:
            # No thread for the jobs: run them here, late rather than never. The caller (the
            # timer, a dispatcher) must live on, so only an interrupt is raised again.
            with sink.lock:
                left = sink.callbacks.forget_locked(thread)
            try:
                for job in left:
                    job()
            finally:
                with sink.lock:
                    sink.settled_locked(len(left))
            if not isinstance(exc, Exception):
                raise
            LOGGER.critical("no callback thread could start: %d jobs ran late", len(left))

    def fail(self, drained: list[Entry], error: Callable[[], BaseException]) -> None:
        """Fail ``drained``, taken out uncounted (``undecided``), with ``error()`` each.

        A future its user cancelled meanwhile stays cancelled, and is counted so.
        """
        failed: list[Entry] = []
        try:
            for entry in drained:
                future: Future[Any] = entry.detach()
                if claim(future, cancel=False):
                    failed.append(entry)
                    guard_callbacks(future, future.set_exception, error())
        finally:
            sink = self.sink
            with sink.lock:
                core = sink.core
                core.tally.add_each("failed", [entry.priority for entry in failed])
                ids = {id(entry) for entry in failed}
                cancelled = [entry.priority for entry in drained if id(entry) not in ids]
                core.tally.add_each("cancelled", cancelled)
                core.undecided -= len(drained)
                sink.settled_locked(len(drained))
