"""The public surface every priority executor shares, over its :class:`~._admission.Admission`.

:class:`PriorityFront` checks arguments (each task option by one function,
``_policy.check_task_options``) and forwards to the admission; it keeps no state of its own
beyond ``_admission``. ``PriorityThreadPoolExecutor`` adds what is particular to threads,
``PriorityExecutor`` what is particular to handing tasks to another executor.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import Future
from typing import Any, Literal, Optional, TypeVar, Union

from ._context import InContext
from ._control import AdmissionControl
from ._limits import CountSetting, Limits, RateSetting
from ._listeners import Listener, ListenerHandle
from ._map import map_results
from ._options import PoolView
from ._policy import (
    Number,
    Priority,
    check_key,
    check_limit,
    check_task_options,
    check_timeout,
    describe,
)
from ._queue import ViewState
from ._rates import RateLimit
from ._stats import ExecutorStatistics

T = TypeVar("T")


class PriorityFront:
    """Mixin of the public methods shared by the executors; see the module docstring."""

    _admission: AdmissionControl[Any]
    _copy_context = False  # run each task in a copy of its submitter's context
    # The standard pool's attributes that a view reads (see _options.ViewTarget).
    _thread_name_prefix: str
    _threads: AbstractSet[threading.Thread]

    @property
    def _max_workers(self) -> int:
        """The standard pool's name for the most tasks running at once; views read it."""
        raise NotImplementedError

    @property
    def _shutdown(self) -> bool:
        return self._admission.state().shutdown

    # typeshed says bool; the standard pool stores False or the message.
    @property
    def _broken(self) -> Union[Literal[False], str]:
        return self._admission.state().broken

    def submit(
        # PEP 612 allows no keyword between *args and **kwargs, so the standard
        # ParamSpec signature cannot take ``priority`` and ``timeout``.
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> Future[T]:
        """Schedule ``fn(*args, **kwargs)`` and return its Future.

        Does not block, unless ``max_queued`` tasks wait and ``when_full`` is ``"block"``:
        then it waits for room (from one of the pool's own threads it raises instead).

        Higher priority runs first; equal priorities run in submission order. ``priority``
        and ``timeout`` are not passed to ``fn``; use :meth:`options` to give ``fn`` keywords
        of those names.

        Args:
            fn: the callable to run.
            priority: any real number; :class:`Priority` names the usual three.
            timeout: how long the task may wait in the queue, in seconds on the pool's
                clock, counted from this call. A task still queued at its deadline is
                cancelled and never starts, and its waiters wake at once;
                :func:`~priority_executor.expired` tells it from a cancel by other means. A
                task that has started is never interrupted. ``0`` means it may not wait at
                all: it is cancelled at once. ``None`` means no deadline.

        Raises:
            TypeError: ``fn`` is not callable, or ``priority`` or ``timeout`` has a wrong type.
            ValueError: ``priority`` is NaN, or ``timeout`` is negative or NaN.
            RuntimeError: the pool was shut down, or the interpreter is exiting.
            BrokenThreadPool: an initializer failed. On a ``PriorityExecutor``: a copy of
                the error with which the wrapped executor refused a task (such as
                ``BrokenProcessPool``), once it has.
            QueueFullError: ``max_queued`` tasks wait and ``when_full`` is ``"raise"``, or
                ``"evict"`` with no queued task ranked below this one, or ``"block"`` from
                one of the pool's own threads.
        """
        level, timeout = check_task_options(priority, timeout, self._admission.core.ageing)
        return self._submit_checked(fn, args, kwargs, level, timeout)

    def _submit_checked(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        timeout: Optional[float],
        view_state: Optional[ViewState] = None,
    ) -> Future[T]:
        """Submit with options already checked (by ``submit``, or when a view was made)."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {describe(fn)}")
        if self._copy_context:
            fn = InContext(contextvars.copy_context(), fn)
        return self._admission.submit(fn, args, kwargs, priority, timeout, view_state)

    def options(
        self,
        *,
        priority: Number = Priority.NORMAL,
        timeout: Optional[float] = None,
        key: Hashable = None,
    ) -> PoolView:
        """A view of this pool whose ``submit`` and ``map`` forward every keyword to ``fn``.

        Tasks submitted through the view get this ``priority`` and queue ``timeout`` (as in
        :meth:`submit`), and this ``key``: ``key_limit`` and ``key_rate_limit`` count the
        tasks of each key (a host, a tenant) apart. Hand the view to code that forwards
        keyword arguments, such as a library that takes an executor, or to
        ``loop.run_in_executor``. Its ``shutdown()`` closes the view, not the pool.

        Args:
            priority: any real number, as for :meth:`submit`; default ``Priority.NORMAL``.
            timeout: the queue deadline of each task, in seconds on the pool's clock from
                its submit, as for :meth:`submit`; default None: no deadline.
            key: any hashable value; None (the default) for no key.

        Raises:
            TypeError: ``key`` is not hashable, or ``priority`` or ``timeout`` has a wrong type.
            ValueError: ``priority`` is NaN, or ``timeout`` is negative or NaN.
        """
        level, timeout = check_task_options(priority, timeout, self._admission.core.ageing)
        return PoolView(self, level, timeout, check_key(key))

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
        buffersize: Optional[int] = None,
        priority: Number = Priority.NORMAL,
    ) -> Iterator[T]:
        """``Executor.map`` with every call at ``priority``; the 3.14 semantics on every Python.

        Without ``buffersize`` every call is submitted before this returns. ``timeout`` is the
        standard one: seconds to wait for the results, counted from this call (it is not a
        queue deadline). ``chunksize`` is ignored, as by the standard thread pool. Calls not
        yet yielded are cancelled when the iterator fails, times out or is closed.

        Raises:
            TypeError: ``buffersize`` is not an int, or ``priority`` has a wrong type.
            ValueError: ``buffersize`` is below 1, or ``priority`` is NaN or, under ageing,
                an int beyond float range.
        """
        level, _ = check_task_options(priority, None, self._admission.core.ageing)
        # Through self.submit, as the standard map does, so that a subclass overriding
        # submit sees every call.
        return map_results(
            self,
            lambda pool, fn, args: pool.submit(fn, *args, priority=level),
            fn,
            iterables,
            timeout,
            buffersize,
        )

    def set_priority(self, future: Future[Any], priority: Number) -> bool:
        """Move a still-queued task to a new priority. O(log n); safe from any thread.

        The task goes behind the tasks already queued at that priority, as if submitted now;
        with ``ageing`` it keeps the age it has, counted from its submission.

        Returns:
            True if the task was queued and has moved; False if it has started, finished or
            been cancelled, or was not submitted to this pool.

        Raises:
            TypeError: ``future`` is not a Future, or ``priority`` is not a real number.
            ValueError: ``priority`` is NaN or, under ageing, an int beyond float range.
        """
        if not isinstance(future, Future):
            raise TypeError(f"future must be a concurrent.futures.Future, got {describe(future)}")
        level, _ = check_task_options(priority, None, self._admission.core.ageing)
        return self._admission.set_priority(future, level)

    rate_limit = RateSetting(
        """At most ``starts`` task starts in any ``per`` seconds of the pool's clock; settable.

        None for no limit. Set it to a :class:`RateLimit` (or a ``(starts, per)`` pair) or
        None while the pool runs: the starts already counted in the window still count.
        """
    )
    key_limit = CountSetting(
        """At most this many tasks of one key (see :meth:`options`) run at once; settable.

        None for no limit. A lower limit interrupts no running task.
        """
    )
    key_rate_limit = RateSetting(
        """At most ``starts`` starts of one key in any ``per`` seconds; settable, None for none.

        ``RateLimit(1, per=2.0)`` is a cooldown of two seconds between starts of a key.
        """
    )

    def _limits(self) -> Limits:
        return self._admission.core.limits

    def _set_limit(self, name: str, limit: Union[int, RateLimit, None]) -> None:
        self._admission.change_limit(name, limit)

    def _resize(self, name: str, value: object) -> None:
        """Set the executor's size (``max_workers``, ``max_running``), checked as ``name``."""
        size = check_limit(name, value, optional=False)
        assert size is not None
        self._admission.resize(size)

    def pause(self) -> None:
        """Start no queued task until :meth:`resume`. Does not block; idempotent.

        Running tasks finish, ``submit`` still queues, and queue deadlines still expire.
        ``shutdown()`` resumes a paused pool, so it cannot hang on the queued tasks; after
        it, ``pause()`` has no effect.
        """
        self._admission.set_paused(True)

    def resume(self) -> None:
        """Let queued tasks start again, waking as many workers as they need. Idempotent."""
        self._admission.set_paused(False)

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume` (or ``shutdown()``)."""
        return self._admission.state().paused

    def join(self, timeout: Optional[float] = None) -> bool:
        """Block until no task is queued or running. Safe to call from several threads.

        Args:
            timeout: the most seconds to wait (real time), or None to wait for as long as
                it takes.

        Returns:
            True once the pool is idle; False if ``timeout`` passed first.

        Raises:
            TypeError: ``timeout`` is neither None nor a real number.
            ValueError: ``timeout`` is negative or NaN.
            RuntimeError: called from one of the pool's own threads, which would wait for
                itself (on a ``PriorityExecutor``: see :meth:`shutdown`).
        """
        return self._admission.wait_quiet(check_timeout(timeout))

    def statistics(self) -> ExecutorStatistics:
        """A consistent snapshot of what is queued and running, and the counts so far.

        Also how long tasks waited and ran, and how they ended, by priority class
        (``wait``, ``run``, ``outcomes``): see :class:`ExecutorStatistics`. O(distinct
        priorities queued) under the lock, whatever the backlog; safe from any thread.
        """
        return self._admission.statistics()

    def add_listener(
        self,
        on_start: Optional[Listener] = None,
        on_finish: Optional[Listener] = None,
    ) -> ListenerHandle:
        """Call ``on_start`` as each task starts and ``on_finish`` as it ends, with a TaskInfo.

        ``on_start`` is called once the task has won its claim, before it runs;
        ``on_finish`` once its future is settled, done-callbacks included. On a thread
        pool both are called in the worker that runs the task; on a ``PriorityExecutor``,
        on the front's callback threads (never on its dispatcher, which they would slow
        down), in the order they happened unless one of those threads is stuck. Never with
        the pool's lock held. A listener that raises is logged and counted in
        ``statistics().listener_errors``; the task and the thread carry on. Only tasks
        that run are reported. Safe from any thread, at any time.

        Returns:
            A handle whose ``remove()`` stops the calls.

        Raises:
            TypeError: a listener given is not callable, or neither is given.
        """
        for name, listener in (("on_start", on_start), ("on_finish", on_finish)):
            if listener is not None and not callable(listener):
                raise TypeError(f"{name} must be callable or None, got {describe(listener)}")
        if on_start is None and on_finish is None:
            raise TypeError("add_listener() needs on_start, on_finish or both")
        return self._admission.listeners.add(on_start, on_finish)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new work, start what is queued, then let the pool's threads exit. Idempotent.

        Args:
            wait: block until every task has finished (all queued work done, unless
                cancelled) and the pool's threads have exited. Called from one of the
                pool's own threads (a task, or a done-callback run by one of them), it does
                not wait: the pool cannot wait for itself. The standard pool raises or
                deadlocks there instead. A ``PriorityExecutor`` counts as its own a thread
                of the wrapped executor while it settles one of the front's futures, and,
                over a thread pool, while it runs one of the front's tasks. A
                ``PriorityExecutor`` then shuts the wrapped executor down, unless made with
                ``shutdown_executor=False``.
            cancel_futures: cancel every task that has not started and wake its waiters.
                Running tasks always finish.
        """
        self._admission.stop(refuse_new=True, cancel_futures=cancel_futures)
        if wait:
            self._admission.join()

    def _check_invariants(self) -> None:
        """Assert every invariant of the queue, the admission and the runner, in O(n). For tests."""
        self._admission.check_invariants()

    def _is_own_thread(self) -> bool:
        """True in one of the pool's own threads (a view's ``shutdown`` must not wait there)."""
        return self._admission.is_own_thread()

    def _wake_blocked(self) -> None:
        """Make submits blocked on a full queue re-check their view (which just closed)."""
        self._admission.wake_blocked()
