"""The claim step and the run of a task: no state of their own.

Every path out of the queue ends in :func:`claim`, called once per future by whoever removed
its entry from the queue under the pool's lock: a worker about to run it, the timer or a
worker that found it expired, the cancel hook, an eviction, ``shutdown(cancel_futures=True)``,
or a broken pool. Where many futures are cancelled at once, :func:`cancel_all` settles every
one of them before any of their done-callbacks runs (see ``_futures``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError
from typing import Any, Literal, Optional, Protocol

from ._futures import (
    TWO_PHASE,
    cancel_quietly,
    has_user_callbacks,
    run_callbacks,
    settle_quietly,
    start_claimed,
)

LOGGER = logging.getLogger("concurrent.futures")

#: What became of a task that left the queue, as the statistics count it.
Outcome = Literal["completed", "failed", "cancelled", "expired", "taken"]

#: What :func:`run` reports.
CANCELLED: Outcome = "cancelled"
COMPLETED: Outcome = "completed"
FAILED: Outcome = "failed"


def claim(future: Future[Any], *, cancel: bool) -> bool:
    """Decide, once and for all, whether a task that just left the queue runs.

    The caller must have removed the task's entry from the queue while holding the pool's
    lock; that removal makes it the only caller for this future, so
    ``set_running_or_notify_cancel()`` is called exactly once per future, and never while the
    pool's lock is held (``cancel()`` runs done-callbacks, which are user code).

    1. With ``cancel=True`` (the deadline passed, the task was evicted, or shutdown drained
       the queue) the future is cancelled first. The deadline race was already decided under
       the pool's lock by one clock reading: a worker that pops an entry at or past its
       deadline cancels it here rather than running it, and the timer never touches an entry
       a worker has popped.
    2. ``set_running_or_notify_cancel()`` is the atomic step, taken under the future's own
       lock. If a user's ``cancel()`` took that lock first, the future is cancelled: this call
       wakes every ``wait()`` and ``as_completed()`` waiter and returns False, and the task
       never runs. Otherwise the future becomes RUNNING, a later ``cancel()`` returns False,
       and the caller must run the task.

    Returns:
        True if the caller must now run the task; False if it was cancelled and waiters woken.
    """
    if cancel:
        guard_callbacks(future, future.cancel)
        if not future.done():  # an exception cut cancel() short before it took effect
            future.cancel()
    try:
        return future.set_running_or_notify_cancel()
    except RuntimeError:
        # Someone settled the future by hand while it was queued (Future logged it): there is
        # nothing left to run, and the thread must survive.
        return False


def cancel_all(futures: list[Future[Any]], expired: bool = False) -> list[Future[Any]]:
    """Cancel futures that just left the queue, and wake their waiters; run no callback.

    Every future is done, and its ``result()``, ``wait()`` and ``as_completed()`` waiters
    awake, before any user code runs, so no callback can delay another future's settling.
    ``expired``: they left because their queue deadline passed; each one this call cancels
    is marked so (``_futures.expired``), one its user cancelled first is not.

    Returns:
        The futures whose done-callbacks are still owed: run each with
        :func:`run_callbacks_guarded`, after the pool's lock is released.
    """
    owed = []
    for future in futures:
        if cancel_quietly(future, expired):
            owed.append(future)
        claim(future, cancel=False)
    return owed


def run_callbacks_guarded(future: Future[Any]) -> None:
    """Run the callbacks that :func:`cancel_all` left owed, keeping the calling thread alive."""
    guard_callbacks(future, run_callbacks, future)


class RunObserver(Protocol):
    """What :func:`run` tells of a task's start and end: a pool's ``_listeners.Watch``."""

    def started(self) -> None: ...

    def finished(self, outcome: Outcome, exception: Optional[BaseException]) -> None: ...


def run(
    future: Future[Any],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    observer: Optional[RunObserver] = None,
) -> Outcome:
    """Claim a task that a worker took from the queue and, if it won the claim, run it.

    ``observer``, if given, is told once the claim is won, and once the future is settled.

    Returns:
        ``CANCELLED`` if the claim was lost, else ``COMPLETED`` or ``FAILED``.
    """
    # The claim and the settling of a task that completes take the fast path of
    # ``_futures.start_claimed`` and ``settle_quietly``, else the public methods (see there).
    if not start_claimed(future) and not claim(future, cancel=False):
        return CANCELLED
    if observer is not None:
        observer.started()
    try:
        # ``**`` copies any mapping but a dict into a new dict, the shared empty one too
        # (``_queue.NO_KWARGS``, a mappingproxy): a task without keyword arguments is called
        # without. Measured with ``benchmarks/instructions.py --contender ours --source ...
        # --repeat 2``: 64.83k instructions per W1 task before, 62.75k after (the ``**`` cost
        # 7 % of a worker's instructions, in ``dict_merge``).
        result = fn(*args, **kwargs) if kwargs else fn(*args)
    except BaseException as exc:
        guard_callbacks(future, future.set_exception, exc)
        # The traceback keeps this frame alive: break the cycle future -> exc -> frame -> future.
        del future, fn, args, kwargs
        if observer is not None:
            observer.finished(FAILED, exc)
        return FAILED
    if TWO_PHASE and settle_quietly(future, True, result):
        if has_user_callbacks(future):  # the pool's own does nothing for a claimed future
            guard_callbacks(future, run_callbacks, future)
    else:  # settled by hand meanwhile (set_result logs it), or no internals to use
        guard_callbacks(future, future.set_result, result)
    if observer is not None:
        del result
        observer.finished(COMPLETED, None)
    return COMPLETED


def guard_callbacks(future: Future[Any], settle: Callable[..., object], *args: object) -> None:
    """Call a Future method that runs its done-callbacks, and keep the calling thread alive.

    ``Future`` logs a callback's ``Exception`` and carries on, but lets a ``BaseException``
    such as ``SystemExit`` escape, which would kill the worker or the timer that settled the
    future: log that too, in the standard words, and carry on.
    """
    try:
        settle(*args)
    except InvalidStateError:
        LOGGER.critical("%r was settled by someone else while the pool ran it", future)
    except BaseException:
        LOGGER.exception("exception calling callback for %r", future)
