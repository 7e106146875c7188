"""Process-wide hooks: interpreter exit and ``os.fork()``.

Interpreter exit works like the standard pool's. Workers are ordinary (non-daemon) threads, so
a task is never killed half-way; just before the interpreter joins such threads, and before
``atexit`` handlers run, :func:`_at_exit` stops every live pool: queued work still drains, then
the workers exit and are joined. Submitting from then on raises the standard
``RuntimeError``. The hook is registered with ``threading._register_atexit``, the one private
function of the standard library this package uses: it is what the standard pool uses for the
same purpose, and ``atexit`` runs too late, after non-daemon threads have been joined.

After ``fork()`` the child holds copies of every pool with none of their threads, and possibly
a lock that another thread held at the moment of the fork. The child marks each inherited pool
broken, so using it raises a clear ``BrokenThreadPool`` instead of hanging; new pools made in
the child work normally, since they share no lock with the parent's.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._scheduler import Scheduler

LOGGER = logging.getLogger("concurrent.futures")

#: Set once the interpreter has begun to exit; read by ``submit`` under its pool's lock.
exiting = False

_schedulers: weakref.WeakSet[Scheduler] = weakref.WeakSet()
_registry_lock = threading.Lock()


def register(scheduler: Scheduler) -> None:
    """Include a new pool in what interpreter exit and fork take care of."""
    with _registry_lock:
        _schedulers.add(scheduler)


def _live_schedulers() -> list[Scheduler]:
    with _registry_lock:
        return list(_schedulers)


def _at_exit() -> None:
    global exiting
    with _registry_lock:
        exiting = True
    schedulers = _live_schedulers()
    # One pool that fails to stop must not keep the others from draining.
    for scheduler in schedulers:
        try:
            scheduler.stop(shutdown=False, cancel_futures=False)
        except Exception:
            LOGGER.critical("could not stop a pool at interpreter exit", exc_info=True)
    for scheduler in schedulers:
        scheduler.join_threads()


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for scheduler in list(_schedulers):
        scheduler.after_fork_in_child()


threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: _registry_lock.acquire(),
        after_in_parent=lambda: _registry_lock.release(),
        after_in_child=_after_fork_in_child,
    )
