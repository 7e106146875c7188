"""The claim step, the run of a task, and the polite lock acquisition: no state of their own.

Every path out of the queue ends in :func:`claim`, called once per future by whoever removed
its entry from the queue under the pool's lock: a worker about to run it, the timer or a
worker that found it expired, the cancel hook, an eviction, ``shutdown(cancel_futures=True)``,
or a broken pool. Where many futures are cancelled at once, :func:`cancel_all` settles every
one of them before any of their done-callbacks runs (see ``_futures``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, InvalidStateError
from typing import Any, Callable

from ._futures import cancel_quietly, run_callbacks

LOGGER = logging.getLogger("concurrent.futures")

#: How many times a thread yields the GIL and retries a contended lock before blocking on it.
LOCK_SPINS = 16

#: What :func:`run` reports, for the statistics.
CANCELLED, COMPLETED, FAILED = "cancelled", "completed", "failed"


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


def cancel_all(futures: list[Future[Any]]) -> list[Future[Any]]:
    """Cancel futures that just left the queue, and wake their waiters; run no callback.

    Every future is done, and its ``result()``, ``wait()`` and ``as_completed()`` waiters
    awake, before any user code runs, so no callback can delay another future's settling.

    Returns:
        The futures whose done-callbacks are still owed: run each with
        :func:`run_callbacks_guarded`, after the pool's lock is released.
    """
    owed = []
    for future in futures:
        if cancel_quietly(future):
            owed.append(future)
        claim(future, cancel=False)
    return owed


def run_callbacks_guarded(future: Future[Any]) -> None:
    """Run the callbacks that :func:`cancel_all` left owed, keeping the calling thread alive."""
    guard_callbacks(future, run_callbacks, future)


def run(
    future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> str:
    """Claim a task that a worker took from the queue and, if it won the claim, run it.

    Returns:
        ``CANCELLED`` if the claim was lost, else ``COMPLETED`` or ``FAILED``.
    """
    if not claim(future, cancel=False):
        return CANCELLED
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        guard_callbacks(future, future.set_exception, exc)
        # The traceback keeps this frame alive: break the cycle future -> exc -> frame -> future.
        del future, fn, args, kwargs
        return FAILED
    guard_callbacks(future, future.set_result, result)
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


def acquire_politely(lock: Any, spinners: set[int]) -> int:
    """Take a contended lock by yielding the GIL between tries, and block only as a last resort.

    A thread blocked on a lock becomes its owner the moment it is released, but can use it
    only once it gets the GIL back; meanwhile every other thread that wants the lock queues
    behind it, and each hand-off costs a context switch: a lock convoy. The pool's critical
    sections are short and run no user code, so a holder that was preempted by the GIL needs
    only a moment to finish: yielding to it breaks the convoy. In our benchmarks this halved
    the cost per task when four workers and a submitter shared the lock. It must take the
    lock in its spin: of several threads that merely saw it free, all but one would block
    in their acquire and queue up again (measured: contended throughput fell to 0.4x).

    While it yields, the thread is in ``spinners``, so that a worker releasing the lock
    yields the GIL to it in turn; otherwise a submitter could wait a whole GIL switch
    interval (5 ms) behind a worker running short tasks.

    It returns holding the lock and still in ``spinners``: the caller discards itself there
    first thing inside the ``try`` whose ``finally`` releases the lock, so that between the
    acquisition and that ``try`` there is a single instruction, where an asynchronous
    exception (a signal handler's) could still leave the lock held. A ``with`` statement
    would leave none, but blocks where this spins, and costs contended throughput its lead.

    Returns:
        The caller's thread id, for it to discard from ``spinners`` once inside its ``try``.
    """
    me = threading.get_ident()
    spinners.add(me)
    for _ in range(LOCK_SPINS):
        time.sleep(0)
        if lock.acquire(False):
            return me
    lock.acquire()
    return me


def log_clock_failure(exc: Exception) -> None:
    """Report a clock that raised; called with no lock held, since logging runs handlers."""
    LOGGER.critical("The pool's clock raised; deadlines wait until it works", exc_info=exc)
