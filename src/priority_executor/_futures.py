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

What it relies on, unchanged from Python 3.10 to 3.15: ``Future._condition`` (the future's
Condition), ``Future._state`` (the strings of ``concurrent.futures._base``),
``Future._result``, ``Future._exception``, ``Future._waiters`` (a list of the waiters of
``wait()`` and ``as_completed()``, with ``add_result`` and ``add_exception``),
``Future._done_callbacks`` (a list) and ``Future._invoke_callbacks()``. ``tests/test_futures.py``
checks each of them on every supported Python. If a future Python changes them,
:data:`TWO_PHASE` turns False at import and the pool falls back to the public ``cancel()``,
which is correct but runs each future's callbacks as it is cancelled; then adapt this module.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from concurrent.futures import _base as futures_base
from typing import Any, Callable


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


def cancel_quietly(future: Future[Any]) -> bool:
    """Cancel a pending future as ``cancel()`` does, but leave its done-callbacks to the caller.

    Wakes the threads blocked in ``result()`` or ``exception()``; ``wait()`` and
    ``as_completed()`` wake at the claim that follows. Runs no user code.

    Returns:
        True if this call cancelled the future: the caller owes it :func:`run_callbacks`.
        False if it was not pending (a user's ``cancel()`` won and runs them itself).
    """
    if not TWO_PHASE:
        future.cancel()  # the callbacks run here, inline
        return False
    condition = future._condition
    with condition:
        if future._state != _PENDING:
            return False
        future._state = _CANCELLED
        condition.notify_all()
    return True


def settle_quietly(future: Future[Any], ok: bool, value: Any) -> bool:
    """``set_result(value)`` (or ``set_exception``), but leave the done-callbacks to the caller.

    Wakes ``result()``, ``wait()`` and ``as_completed()``. Runs no user code.

    Returns:
        True if this call settled the future: the caller owes it :func:`run_callbacks`.
        False if it was already done (settled by hand), or on a Python without the
        internals, where the callbacks ran inline.
    """
    if not TWO_PHASE:
        with contextlib.suppress(futures_base.InvalidStateError):
            (future.set_result if ok else future.set_exception)(value)
        return False
    condition = future._condition
    with condition:
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
        condition.notify_all()
    return True


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
