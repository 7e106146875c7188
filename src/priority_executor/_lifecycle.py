"""Process-wide hooks: interpreter exit and ``os.fork()``.

Interpreter exit works like the standard pool's. Workers are ordinary (non-daemon) threads, so
a task is never killed half-way; just before the interpreter joins such threads, and before
``atexit`` handlers run, :func:`_at_exit` stops every live pool: queued work still drains, then
the workers exit and are joined. Submitting from then on raises the standard
``RuntimeError``. The hook is registered with ``threading._register_atexit``, the one private
function of the standard library this package uses: it is what the standard pool uses for the
same purpose, and ``atexit`` runs too late, after non-daemon threads have been joined. It runs
before the standard pools' own hooks, so that what our pools hand to them at exit is taken.

After ``fork()`` the child holds copies of every pool with none of their threads, and possibly
a lock that another thread held at the moment of the fork. The child marks each inherited pool
broken, so using it raises a clear ``BrokenThreadPool`` instead of hanging; new pools made in
the child work normally, since they share no lock with the parent's.
"""

from __future__ import annotations

# Imported here for the place of their exit hooks in the order: see the end of this module.
import concurrent.futures.process
import concurrent.futures.thread  # noqa: F401
import os
import threading
import weakref
from typing import Protocol

from ._claim import LOGGER


class Lifecycle(Protocol):
    """What interpreter exit and fork need of a pool (in practice its ``Admission``)."""

    def stop(self, *, refuse_new: bool, cancel_futures: bool) -> None:
        """Let the pool's threads exit once its queue is empty; never blocks."""

    def join(self) -> None:
        """Wait for every thread of the pool to exit."""

    def after_fork_in_child(self) -> None:
        """Make a pool inherited across ``fork()`` refuse work instead of hanging on it."""


#: Set once the interpreter has begun to exit; read by ``submit`` under its pool's lock.
exiting = False

_pools: weakref.WeakSet[Lifecycle] = weakref.WeakSet()
_registry_lock = threading.Lock()


def register(pool: Lifecycle) -> None:
    """Include a new pool in what interpreter exit and fork take care of."""
    with _registry_lock:
        _pools.add(pool)


def _live_pools() -> list[Lifecycle]:
    with _registry_lock:
        return list(_pools)


def _at_exit() -> None:
    global exiting
    with _registry_lock:
        exiting = True
    pools = _live_pools()
    # One pool that fails to stop must not keep the others from draining.
    for pool in pools:
        try:
            pool.stop(refuse_new=False, cancel_futures=False)
        except Exception:
            LOGGER.critical("could not stop a pool at interpreter exit", exc_info=True)
    for pool in pools:
        pool.join()


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for pool in list(_pools):
        pool.after_fork_in_child()


# Exit hooks run last-registered first. The standard pools' hooks are registered when their
# modules are first imported, which the imports above do now, so this one runs before them:
# every pool of this package drains while the standard pools it may hand work to still take
# it (a PriorityExecutor's process pool, a task's own ThreadPoolExecutor).
threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: _registry_lock.acquire(),
        after_in_parent=lambda: _registry_lock.release(),
        after_in_child=_after_fork_in_child,
    )
