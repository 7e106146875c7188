"""The one module that touches ``concurrent.futures.Future``'s private internals.

Why: ``Future.cancel()`` changes the state, wakes ``result()`` and then runs every
done-callback, all in one call. When the pool settles many futures at once (the deadline
timer expiring what is due, ``shutdown(cancel_futures=True)``), one slow or stuck callback
would then hold up every future settled after it, and the timer's next deadlines. So the pool
settles in two phases: :func:`cancel_quietly` first makes each future cancelled and wakes its
waiters (no user code runs), and only then :func:`run_callbacks` runs each one's callbacks.

The same two phases serve a front's dispatcher, which settles a future without running its
callbacks (:func:`settle_quietly`) and leaves them to a callback thread.

The pool's hook, every future's first done-callback, is appended to the list of a future not
yet handed out (:func:`add_first_callback`), without the Condition ``add_done_callback`` takes.

A future cancelled because its queue deadline passed is marked so (:data:`EXPIRED_MARK`) in
the step that cancels it, which the public :func:`expired` reads: an attribute of the future
itself, so that telling costs no lookup and keeps nothing alive.

What it relies on, unchanged from Python 3.10 to 3.15: ``Future._condition`` (the future's
Condition), ``Future._state`` (the strings of ``concurrent.futures._base``),
``Future._result``, ``Future._exception``, ``Future._waiters`` (a list of the waiters of
``wait()`` and ``as_completed()``, with ``add_result`` and ``add_exception``),
``Future._done_callbacks`` (a list) and ``Future._invoke_callbacks()``.
``tests/core/test_futures.py`` checks each of them on every supported Python. If a future
Python changes them, :data:`TWO_PHASE` turns False at import and the pool falls back to the
public ``cancel()``, which is correct but runs each future's callbacks as it is cancelled;
then adapt this module.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import _base as futures_base
from typing import Any

from ._policy import describe


def _has_internals() -> bool:
    probe: Future[None] = Future()
    return (
        hasattr(probe, "_condition")
        and getattr(probe, "_state", None) == getattr(futures_base, "PENDING", None)
        and isinstance(getattr(probe, "_done_callbacks", None), list)
        and isinstance(getattr(probe, "_waiters", None), list)
        and hasattr(probe, "_result")
        and hasattr(probe, "_exception")
        and callable(getattr(probe, "_invoke_callbacks", None))
        and isinstance(getattr(probe._condition, "_waiters", None), collections.deque)
        and callable(getattr(probe._condition, "acquire", None))
        and callable(getattr(probe._condition, "release", None))
        and hasattr(futures_base, "CANCELLED")
        and hasattr(futures_base, "FINISHED")
    )


#: Whether this Python's Future has the internals the two-phase settling relies on.
TWO_PHASE = _has_internals()

_PENDING = getattr(futures_base, "PENDING", "PENDING")
_RUNNING = getattr(futures_base, "RUNNING", "RUNNING")
_CANCELLED = getattr(futures_base, "CANCELLED", "CANCELLED")
_FINISHED = getattr(futures_base, "FINISHED", "FINISHED")
_CANCELLED_STATES = frozenset(
    (_CANCELLED, getattr(futures_base, "CANCELLED_AND_NOTIFIED", "CANCELLED_AND_NOTIFIED"))
)


def cancel_quietly(future: Future[Any], expired: bool = False) -> bool:
    """Cancel a pending future as ``cancel()`` does, but leave its done-callbacks to the caller.

    Wakes the threads blocked in ``result()`` or ``exception()``; ``wait()`` and
    ``as_completed()`` wake at the claim that follows. Runs no user code.

    Args:
        expired: the future's queue deadline passed: if this call cancels it, it is marked
            so (:func:`expired`) under its Condition, in the step that cancels it, so that
            whoever sees it cancelled sees the mark too, and a user's ``cancel()`` that won
            the Condition first leaves it unmarked.

    Returns:
        True if this call cancelled the future: the caller owes it :func:`run_callbacks`.
        False if it was not pending (a user's ``cancel()`` won and runs them itself).
    """
    if not TWO_PHASE:
        if expired:
            _cancel_marked(future)
        else:
            future.cancel()  # the callbacks run here, inline
        return False
    condition = future._condition
    with condition:
        if future._state != _PENDING:
            return False
        future._state = _CANCELLED
        if expired:
            mark_expired(future)
        condition.notify_all()
    return True


def _cancel_marked(future: Future[Any]) -> None:
    """``cancel()``, marking the future expired if this call is the one that cancels it.

    Without the internals, who cancelled a future shows only in where its callbacks run:
    inline, in the thread whose ``cancel()`` changed its state. ``cancel()`` itself returns
    True for a future a user cancelled first, so the mark is made by a callback added just
    before, which marks only if it runs inside this call. Callbacks added before it see the
    future unmarked.
    """
    thread = threading.get_ident()
    cancelling = False

    def mark(done: Future[Any]) -> None:
        if cancelling and threading.get_ident() == thread:
            mark_expired(done)

    future.add_done_callback(mark)  # a done future: called at once, and marks nothing
    cancelling = True
    try:
        future.cancel()
    finally:
        cancelling = False


#: The attribute that marks a future its scheduler cancelled because its queue deadline
#: passed: set once, never cleared, and only by the step that cancels the future.
EXPIRED_MARK = "_priority_executor_expired"


def mark_expired(future: Future[Any] | asyncio.Future[Any]) -> None:
    """Mark a future that its scheduler is cancelling because its queue deadline passed."""
    setattr(future, EXPIRED_MARK, True)


def expired(future: Future[Any] | asyncio.Future[Any]) -> bool:
    """Whether ``future`` was cancelled by its scheduler because its queue deadline passed.

    True exactly when a ``PriorityThreadPoolExecutor`` (or one of its views), a
    ``PriorityExecutor`` or an ``AsyncPriorityScheduler`` cancelled ``future`` because it
    was still queued when the ``timeout`` given to ``submit`` (or to ``options``) ran out,
    measured on the scheduler's clock from the moment ``submit`` was called. False for a
    future that is not done, that ran (even one that failed or was cancelled while it ran),
    that its user cancelled, that was evicted from a full queue (``when_full="evict"``) or
    cancelled by ``shutdown(cancel_futures=True)`` or ``aclose(cancel_futures=True)``, and
    for a future no scheduler of this package made. On an ``AsyncPriorityScheduler`` the
    expired future's ``CancelledError`` also says so: "queue deadline passed after 2.0 s"
    for ``timeout=2.0``.

    The mark is made in the step that cancels the future, before ``result()``, ``wait()``
    or any done-callback can see it cancelled: a done-callback that calls ``expired`` sees
    True. A user's ``cancel()`` racing the deadline has one outcome: if it cancelled the
    future first, ``expired`` is False for ever; otherwise ``expired`` is True, and the
    user's ``cancel()`` changed nothing (on a ``concurrent.futures.Future`` it returns True
    all the same, as it does for any cancelled future; on an asyncio one, False). The
    statistics count the future the same way (``expired`` or ``cancelled``). A future
    marked expired never ran.

    It does not block, keeps no reference to ``future``, and is safe to call from any
    thread, also while the future settles.

    Args:
        future: a ``concurrent.futures.Future`` or an ``asyncio.Future``.

    Returns:
        True if the future's queue deadline passed before it started, and it was cancelled
        for that; False otherwise.

    Raises:
        TypeError: ``future`` is neither a ``concurrent.futures.Future`` nor an
            ``asyncio.Future``.
    """
    if not isinstance(future, (Future, asyncio.Future)):
        raise TypeError(
            "future must be a concurrent.futures.Future or an asyncio.Future,"
            f" got {describe(future)}"
        )
    return getattr(future, EXPIRED_MARK, False) is True


def settle_quietly(future: Future[Any], ok: bool, value: Any) -> bool:
    """``set_result(value)`` (or ``set_exception``), but leave the done-callbacks to the caller.

    Wakes ``result()``, ``wait()`` and ``as_completed()``. Runs no user code.

    It is also a worker's settling of every task that completes (``_claim.run``), so it
    takes the Condition's lock by the ``acquire`` and ``release`` it exports, without the
    two Python frames of ``with``, and calls ``notify_all()`` (two more) only if a thread
    waits on the Condition, which is what ``notify_all()`` checks itself first. See
    :func:`start_claimed` for the gain.

    Returns:
        True if this call settled the future: the caller owes it :func:`run_callbacks`
        (if :func:`has_user_callbacks`). False if it was already done (settled by hand), or
        on a Python without the internals, where the callbacks ran inline.
    """
    if not TWO_PHASE:
        with contextlib.suppress(futures_base.InvalidStateError):
            (future.set_result if ok else future.set_exception)(value)
        return False
    condition = future._condition
    condition.acquire()
    try:
        if future._state not in (_PENDING, _RUNNING):
            return False
        if ok:
            future._result = value
        else:
            future._exception = value
        future._state = _FINISHED
        for waiter in future._waiters:
            if ok:
                waiter.add_result(future)
            else:
                waiter.add_exception(future)
        if condition._waiters:  # type: ignore[attr-defined]
            condition.notify_all()
    finally:
        condition.release()
    return True


def start_claimed(future: Future[Any]) -> bool:
    """``set_running_or_notify_cancel()`` of a pending future: True if it is now RUNNING.

    False if it is not pending (cancelled, or settled by hand) or on a Python without the
    internals: the caller then calls ``set_running_or_notify_cancel()`` itself, which wakes
    the waiters of a cancelled future, or logs and raises as it always did.

    The worker's fast path (with :func:`settle_quietly`): the Condition's lock is taken by
    the ``acquire`` and ``release`` it exports, without the two Python frames of ``with``.
    Measured with ``benchmarks/instructions.py --contender ours [--source] --repeat 2``:
    76.7k instructions per W1 task before, 66.6k with both (66,667 and 66,606).
    """
    if not TWO_PHASE:
        return False
    condition = future._condition
    condition.acquire()
    try:
        if future._state != _PENDING:
            return False
        future._state = _RUNNING
        return True
    finally:
        condition.release()


def cancel_once(future: Future[Any]) -> None:
    """``cancel()`` and then wake ``wait()`` waiters, harmlessly if another thread did either.

    Calling ``set_running_or_notify_cancel()`` a second time would log "Future in unexpected
    state" at critical level; here the state is checked first, under the future's own
    (reentrant) Condition that ``set_running_or_notify_cancel()`` takes too.
    """
    future.cancel()  # runs the callbacks if this call cancels it; a no-op otherwise
    if not TWO_PHASE:  # without the internals a second call logs, but harms nothing
        with contextlib.suppress(RuntimeError):
            future.set_running_or_notify_cancel()
        return
    with future._condition:
        if future._state == _CANCELLED:
            future.set_running_or_notify_cancel()


def is_cancelled(future: Future[Any]) -> bool:
    """``future.cancelled()`` for a future that is done, read without taking its Condition.

    A done future's state no longer changes but from CANCELLED to CANCELLED_AND_NOTIFIED, both
    of which mean cancelled; the cancel hook reads it on every ``cancel()``.
    """
    if not TWO_PHASE:
        return future.cancelled()
    return future._state in _CANCELLED_STATES


def add_first_callback(future: Future[Any], fn: Callable[[Future[Any]], object]) -> None:
    """``future.add_done_callback(fn)`` for a new future that no other thread has seen yet.

    Nothing can settle such a future or add a callback to it meanwhile, so the pool's hook
    goes straight into the list, without the Condition that ``add_done_callback`` takes (it
    was a twelfth of the instructions a task costs).
    """
    if TWO_PHASE:
        future._done_callbacks.append(fn)  # type: ignore[attr-defined]
    else:
        future.add_done_callback(fn)


def has_user_callbacks(future: Future[Any]) -> bool:
    """True if ``future`` has done-callbacks beyond the one the pool added first."""
    if not TWO_PHASE:
        return True
    return len(future._done_callbacks) > 1  # type: ignore[attr-defined]


def run_callbacks(future: Future[Any]) -> None:
    """Run the done-callbacks of a future that :func:`cancel_quietly` cancelled.

    Each callback's ``Exception`` is logged and swallowed by ``Future``, as always; the
    caller guards against a ``BaseException`` escaping.
    """
    future._invoke_callbacks()  # type: ignore[attr-defined]
