"""PriorityExecutor: priorities, queue deadlines and prompt cancellation in front of any executor.

The front keeps its own queue (an :class:`~._control.AdmissionControl`, as the thread pool
does) and hands tasks to the executor it wraps through a :class:`~._dispatch.DelegateRunner`,
at most ``max_running`` at a time. Its public methods are those of
:class:`~._front.PriorityFront`, with the thread pool's meaning and error messages.
"""

from __future__ import annotations

import itertools
import threading
import time
import warnings
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from concurrent import futures
from concurrent.futures import BrokenExecutor, Executor
from typing import Optional

from ._control import AdmissionControl
from ._dispatch import DelegateRunner
from ._front import PriorityFront
from ._options import PoolView
from ._policy import WhenFull, check_flag, check_limit, describe
from ._rates import RateLimitLike

#: Tasks handed to a pool of other processes or interpreters per worker, by default: one
#: running and one waiting in the pool, so that a worker that ends a task finds the next
#: without waiting for the front's hand-over (a round trip between the parent's threads).
PIPELINE = 2


def delegate_workers(executor: object) -> Optional[int]:
    """The executor's own ``_max_workers``, if it has a positive one (the standard pools)."""
    workers = getattr(executor, "_max_workers", None)
    if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0:
        return workers
    return None


def default_max_running(executor: object, max_running: object) -> int:
    """``max_running``, checked, or by default from the executor's own ``_max_workers``.

    That many for a thread pool (or any executor with ``_max_workers``), :data:`PIPELINE`
    times as many for a pool that runs tasks in other processes or interpreters.
    """
    if max_running is not None:
        limit = check_limit("max_running", max_running)
        assert limit is not None
        return limit
    workers = delegate_workers(executor)
    if workers is None:
        raise TypeError(
            f"max_running is required for {describe(executor)}: it has no positive _max_workers"
        )
    # Not again for a front over a front: its _max_workers is its max_running already.
    elsewhere = runs_elsewhere(executor) is not None and not isinstance(executor, PriorityExecutor)
    return workers * PIPELINE if elsewhere else workers


def runs_elsewhere(executor: object) -> Optional[str]:
    """What runs ``executor``'s tasks, and where, if not in this interpreter; else None.

    None for the executors known to run tasks here (thread pools) and for those it cannot
    tell, which get the benefit of the doubt. For a front, the executor under it.
    """
    while isinstance(executor, PriorityExecutor):
        executor = executor.executor
    name = type(executor).__name__
    interpreters = getattr(futures, "InterpreterPoolExecutor", None)  # Python 3.14
    if interpreters is not None and isinstance(executor, interpreters):
        return f"{name} runs them in other interpreters"
    if isinstance(executor, futures.ProcessPoolExecutor):
        return f"{name} runs them in other processes"
    if type(executor).__module__.split(".")[0] == "distributed":
        return f"{name} runs them on a Dask cluster's workers"
    return None


def hands_over_inline(executor: object) -> bool:
    """True if a done-callback of ``executor``'s futures may call its ``submit``.

    Only the standard thread pool's, whose ``submit`` never waits for a worker, for a
    future that one of its workers ran (``DelegateRunner._done`` relays from no other: the
    futures the pool cancels or fails itself it settles under the lock its ``submit``
    takes). Not a process pool's, whose callbacks run
    on its manager thread, which a ``submit`` from there can deadlock (CPython gh-105829),
    nor Dask's event loop, nor a subclass or wrapper whose ``submit`` may wait for one of
    the threads that would be calling it.
    """
    return type(executor) is futures.ThreadPoolExecutor


#: What ``PriorityExecutor`` warns of when made over a Dask executor that merges calls.
DASK_MERGES = (
    "executor is a Dask executor made without pure=False: identical calls (the same function"
    " and arguments) run once and all get that one result; make it with"
    " client.get_executor(pure=False), or pure=True if that is meant"
)


def merges_identical_calls(executor: object) -> bool:
    """True for a Dask executor left with Dask's default ``pure=True``.

    Dask then names a task by its function and arguments, so that identical calls are one
    task: the front would count each as run, of which one ran. An executor given ``pure``
    explicitly, either way, was made knowingly; one whose options the front cannot read
    (another version of ``distributed``) is given the benefit of the doubt.
    """
    if type(executor).__module__.split(".")[0] != "distributed":
        return False
    options = getattr(executor, "_kwargs", None)
    return isinstance(options, dict) and "pure" not in options


def marks_own_tasks(executor: object) -> bool:
    """True if ``executor`` runs tasks on threads of this interpreter, which a front can mark.

    A thread pool, the standard one or ours (a subclass, a view of one), or a front over
    one; not an interpreter pool, nor an executor the front cannot tell, whose tasks may go
    to another process, where a marked callable would have to be pickled.
    """
    while True:
        if isinstance(executor, PriorityExecutor):
            executor = executor.executor
        elif isinstance(executor, PoolView):
            executor = executor._pool
        else:
            break
    return isinstance(executor, futures.ThreadPoolExecutor) and runs_elsewhere(executor) is None


# mypy compares PriorityFront.submit, with its keywords, with Executor.submit.
class PriorityExecutor(PriorityFront, Executor):  # type: ignore[misc]
    """Priorities, queue deadlines and prompt cancellation in front of any executor.

    Tasks wait in this front's queue, best first (higher priority first, submission order
    among equals, across all submitting threads), and are handed to ``executor`` at most
    ``max_running`` at a time. A task *starts* when it is handed over: until then its
    ``cancel()`` succeeds and its queue ``timeout`` applies; from then on it is running, and
    its future settles with the wrapped future's result or exception (``CancelledError`` if
    the wrapped executor cancelled it). Every method is safe to call from any thread.

    Args:
        executor: any :class:`concurrent.futures.Executor`: a ``ProcessPoolExecutor``, an
            ``InterpreterPoolExecutor``, a Dask ``client.get_executor(pure=False)``. A Dask
            executor made without ``pure`` merges identical calls (the same function and
            arguments run once): the front warns (``UserWarning``), naming the fix.
        max_running: the most tasks handed over and not yet finished. By default the
            executor's ``_max_workers`` for a thread pool, twice that for a process or
            interpreter pool (so that a worker finds its next task waiting); required for
            an executor without ``_max_workers``.
        clock: the clock of queue deadlines, ageing and rate limits, seconds as a float;
            default ``time.monotonic``.
        ageing: seconds of waiting that raise a task's effective priority by one, a
            positive float; default None: strict priority (as on the thread pool).
        max_queued: the most tasks waiting in this front's queue (those handed over do not
            count), a positive int; default None: no bound.
        when_full: ``"block"`` (the default), ``"raise"`` or ``"evict"``: what ``submit``
            does while ``max_queued`` tasks wait, as on ``PriorityThreadPoolExecutor``.
        rate_limit: ``RateLimit(starts, per)`` or a ``(starts, per)`` pair: at most
            ``starts`` hand-overs in any ``per`` seconds of ``clock``. Default None.
        key_limit: at most this many tasks of one key (see :meth:`options`) handed over
            and not yet finished, a positive int. Default None: no limit.
        key_rate_limit: a ``RateLimit`` for the hand-overs of each key. Default None.
        shutdown_executor: ``shutdown()`` (and a front collected or left at exit) shuts
            ``executor`` down once every task handed to it has finished. False leaves it
            running, for its owner to shut down.
        copy_context: run each task in a copy of its submitter's ``contextvars`` context,
            taken at ``submit``, as ``PriorityThreadPoolExecutor(copy_context=True)`` does.
            Only for an executor that runs tasks in this interpreter (a thread pool): a
            process pool, an interpreter pool or a Dask cluster cannot carry a context.

    Raises:
        TypeError: ``executor`` has no ``submit``; ``max_running`` is not an int (or is
            missing, for an executor without ``_max_workers``); ``clock`` is not callable;
            ``shutdown_executor`` or ``copy_context`` is not a bool.
        ValueError: ``max_running`` is below 1; ``ageing`` or a limit is not positive (or
            not finite); ``when_full`` is not one of the three; ``copy_context=True`` for an
            executor that runs tasks elsewhere.
    """

    _counter = itertools.count().__next__

    def __init__(
        self,
        executor: Executor,
        max_running: Optional[int] = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        ageing: Optional[float] = None,
        max_queued: Optional[int] = None,
        when_full: WhenFull = "block",
        shutdown_executor: bool = True,
        rate_limit: Optional[RateLimitLike] = None,
        key_limit: Optional[int] = None,
        key_rate_limit: Optional[RateLimitLike] = None,
        copy_context: bool = False,
    ) -> None:
        if not callable(getattr(executor, "submit", None)):
            raise TypeError(
                f"executor must be a concurrent.futures.Executor, got {describe(executor)}"
            )
        limit = default_max_running(executor, max_running)
        close = check_flag("shutdown_executor", shutdown_executor)
        self._copy_context = check_flag("copy_context", copy_context)
        elsewhere = runs_elsewhere(executor)
        if self._copy_context and elsewhere is not None:
            raise ValueError(
                f"copy_context=True needs an executor that runs tasks in this interpreter:"
                f" {elsewhere}, where a contextvars.Context cannot go"
            )
        if merges_identical_calls(executor):
            warnings.warn(DASK_MERGES, UserWarning, stacklevel=2)
        self._executor = executor
        self._thread_name_prefix = f"PriorityExecutor-{self._counter()}"
        self._admission: AdmissionControl[DelegateRunner] = AdmissionControl.for_front(
            self,
            name=self._thread_name_prefix,
            clock=clock,
            broken_type=BrokenExecutor,
            ageing=ageing,
            max_queued=max_queued,
            when_full=when_full,
            rate_limit=rate_limit,
            key_limit=key_limit,
            key_rate_limit=key_rate_limit,
            make_runner=lambda admission: DelegateRunner(
                admission,
                delegate=executor,
                max_running=limit,
                close_delegate=close,
                inline=hands_over_inline(executor),
                workers=delegate_workers(executor),
                marks=marks_own_tasks(executor),
            ),
        )

    @property
    def executor(self) -> Executor:
        """The wrapped executor."""
        return self._executor

    @property
    def max_running(self) -> int:
        """The most tasks handed to the executor and not yet finished; settable while running.

        A higher value hands over at once what it now allows; a lower one interrupts
        nothing: no task is handed over until fewer than the new value are in flight.
        """
        return int(self._admission.core.capacity)

    @max_running.setter
    def max_running(self, value: int) -> None:
        self._resize("max_running", value)

    @property
    def _max_workers(self) -> int:
        """``max_running``, under the name that views and the standard pools use."""
        return int(self._admission.core.capacity)

    @property
    def _threads(self) -> AbstractSet[threading.Thread]:  # type: ignore[override]  # read-only
        """No worker threads of its own (views read this as they read the thread pool's)."""
        return frozenset()

    def __repr__(self) -> str:
        state = self._admission.state()
        return (
            f"<{type(self).__name__} {state.describe()} max_running={self.max_running}"
            f" queued={state.queued} running={state.running} executor={self._executor!r}>"
        )
