"""Polite acquisition of a pool's lock: yield the GIL while the lock is taken, block last.

A thread blocked on a lock becomes its owner the moment it is released, but can use it only
once it gets the GIL back; meanwhile every other thread that wants the lock queues behind it,
and each hand-off costs a context switch: a lock convoy. A pool's critical sections are
short and run no user code, so a holder that was preempted by the GIL needs only a moment to
finish: yielding to it breaks the convoy. In our benchmarks this halved the cost per task
when four workers and a submitter shared the lock.

The hot paths (``Admission.submit``, a worker's turn, and a front's report of a task that
ended, ``DelegateRunner._report`` and its relay) take the lock with
``lock.acquire(False)`` first and call :func:`acquire_politely` only when that fails. They
do not use a ``with`` statement, which blocks where this spins (measured: it cost contended
throughput its lead, 2.5x). Every other path uses ``with``.

The thread that releases the lock does not yield in turn to those spinning for it. It once
did, so that a submitter would not wait a switch interval behind a worker; with 4 to 16
threads submitting, that yield kept the workers from the GIL (an urgent task waited 15 to
100 ms for one to take it), and contended throughput measured no worse without it.

Queue jumps
-----------
A thread that holds the GIL keeps it for the whole switch interval (5 ms) unless it blocks
or yields, and a thread that submits in a loop never blocks. So a task submitted ahead of
queued ones could wait a whole slice of every submitting thread before a worker gets the
GIL to take it: with 16 submitting threads, 50 to 190 ms (measured). So a submit that queues
a task ahead of every queued one opens a *jump window* (``Admission.yield_until``, the
monotonic time it closes), and until a runner takes a task (which is then that one, or a
better one), every submit yields the GIL once after unlocking: the GIL goes round the
threads in microseconds instead of slices, and reaches a worker.

The window lasts one switch interval, and a new jump does not extend it. A yield hands the
GIL to whichever thread wants it, for that thread's whole slice: if no runner can take the
task (every worker is in a long task, a front's slots are all in use), the yields hasten
nothing and each costs its submitter a slice. Bounded so, a jump costs a submitting thread
at most one slice, no more than the interpreter's own switch would have; submits of equal
priority never open one, and without a GIL (a free-threaded build) there is nothing to
yield and no window opens.
"""

from __future__ import annotations

import sys
import time
from time import monotonic  # looked up at each call: tests replace it
from typing import Any

_is_gil_enabled = getattr(sys, "_is_gil_enabled", None)  # 3.13+

#: How many times a thread yields the GIL and retries a contended lock before blocking on it.
LOCK_SPINS = 16


def acquire_politely(lock: Any) -> None:
    """Take a contended lock by yielding the GIL between tries, and block only as a last resort.

    It must take the lock in its spin: of several threads that merely saw it free, all but
    one would block in their acquire and queue up again (measured: contended throughput fell
    to 0.4x). It returns holding the lock: the caller's next instruction is the ``try`` whose
    ``finally`` releases it.
    """
    for _ in range(LOCK_SPINS):
        time.sleep(0)
        if lock.acquire(False):
            return
    lock.acquire()


def gil_enabled() -> bool:
    """Whether this interpreter runs with a GIL now (a free-threaded build can run without).

    Read where it is used, not once at import: on a free-threaded build, importing an extension
    that does not declare free-threading support turns the GIL on for the rest of the process.
    """
    return _is_gil_enabled is None or _is_gil_enabled()


def jump_window() -> float:
    """When a jump window opened now closes, on the monotonic clock; 0.0 without a GIL."""
    return monotonic() + sys.getswitchinterval() if gil_enabled() else 0.0


def yield_in_window(closes: float) -> None:
    """Let another thread have the GIL if the jump window closing at ``closes`` is open."""
    if monotonic() < closes:
        yield_gil()


def yield_gil() -> None:
    """Let another thread have the GIL, if one wants it."""
    time.sleep(0)
