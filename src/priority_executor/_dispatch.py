"""The delegate runner: a front's tasks handed to another executor, by its dispatcher or a relay.

``PriorityExecutor`` keeps its queue in an ``Admission``, as the thread pool does, and starts
a task by handing it to the executor it wraps (the *delegate*): a process pool, an interpreter
pool, a Dask client's executor. One thread per front, the dispatcher, takes the best queued
task (``Admission.take_locked``) whenever fewer than ``max_running`` are in flight (the core's
``capacity``: the take decides), claims its
future (from then on ``cancel()`` returns False: *started means handed over*) and submits it.

The delegate settles its own future (the *inner* one) on a thread of its own: a process
pool's manager thread, Dask's event loop, a thread pool's worker. There,
:meth:`DelegateRunner._done` frees the slot and counts the outcome under the pool's lock,
wakes the dispatcher if a task waits, and only then settles ours, whose done-callbacks run
there, as with the delegate used directly. While it settles a future of ours that thread
counts as one of the pool's own, so a callback that calls ``join()`` or
``shutdown(wait=True)`` gets the documented refusal instead of waiting for the thread it
stops. An inner future that is done before the dispatcher has added its callback is counted
and settled there (``_futures.settle_quietly``), and its callbacks run on a callback thread,
so that no user code holds up a hand-over. (The one exception: a front that the delegate's
refusal breaks fails its queue on the thread that met the refusal, which has nothing left to
hand over.)

The relay. Waking the dispatcher for every task that ends costs a switch between threads
that share the GIL. So where the delegate's ``submit`` is safe to call from its own
callbacks (the standard thread pool's: ``_delegating.hands_over_inline``), the worker that
ran a task, as it frees the slot, takes the next task in the same hold of the lock and hands
it over itself, before it settles its own task's future, and goes on while slots free up
(:meth:`_relay`).
One thread relays at a time (``relay``); several calling the delegate's ``submit`` at once
would queue on its lock, each hand-off another switch. The relay settles the tasks whose
inner future is done at once as the dispatcher does, so no user callback runs while it holds
the role, and the dispatcher is not woken for starts meanwhile. A process pool's manager
thread never relays (a ``submit`` from there can deadlock it, CPython gh-105829), nor Dask's
event loop: a callback that submits to the front there only queues.

A task of the front runs on a thread of the delegate, or in another process. Over a thread
pool (``_delegating.marks_own_tasks``) each task is handed over wrapped in an
:class:`OwnTask`, which marks the thread as the front's own while the task runs: a task that
would wait for the front (``join()``, ``shutdown(wait=True)``, a blocking ``submit`` to a
full queue) gets the refusal a thread pool gives its own workers, instead of waiting for
itself. Over any other executor the front cannot tell its tasks' threads from others, and
such a task waits for itself, as it would with the delegate used directly.

Faults. A ``submit`` that raises fails that task. If it raises ``BrokenExecutor`` (such as
``BrokenProcessPool``) or a plain ``RuntimeError`` (shut down), the delegate will take nothing
more: the front breaks, its queue fails with that error and later submits raise a copy.

Stopping. Once the front is stopping, the dispatcher hands over what is queued, waits for
every task in flight to settle, shuts the delegate down (``shutdown_executor``) and exits.

Every field is guarded by the pool's lock (``Admission.lock``); every ``*_locked`` method is
called with it held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, CancelledError, Executor, Future
from functools import partial
from typing import Any, Optional

from ._admission import Admission, error_template
from ._claim import (
    CANCELLED,
    COMPLETED,
    FAILED,
    LOGGER,
    Outcome,
    claim,
    guard_callbacks,
    run_callbacks_guarded,
)
from ._context import fresh_thread
from ._futures import has_user_callbacks, settle_quietly
from ._listeners import Watch
from ._lock import acquire_politely
from ._queue import Entry

#: The most tasks one relay (``DelegateRunner._relay``) hands over after the one it took
#: with its own task's slot, before it settles its own.
RELAY = 16


def breaks_front(error: BaseException) -> bool:
    """A refusal of ``delegate.submit`` that no later task can get past: broken, or shut down.

    A plain ``RuntimeError`` is what every standard executor raises once shut down; its
    subclasses (``RecursionError``, ``NotImplementedError``, ``QueueFullError``) concern one
    task.
    """
    return isinstance(error, BrokenExecutor) or type(error) is RuntimeError


class DelegateRunner:
    """The dispatcher of one front; see the module docstring."""

    def __init__(
        self,
        admission: Admission[DelegateRunner],
        *,
        delegate: Executor,
        max_running: int,
        close_delegate: bool,
        inline: bool = False,
        workers: Optional[int] = None,
        marks: bool = False,
    ) -> None:
        self.admission = admission
        self.delegate = delegate
        # The delegate runs tasks on threads of this interpreter: each task marks its
        # thread as the front's own while it runs (OwnTask), in ``tasks``.
        self.marks = marks
        self.tasks = threading.local()
        # The delegate's done-callbacks run where its submit is safe (a thread pool's
        # workers), so the thread that frees a slot hands the next task over: see _report.
        self.inline = inline
        # The delegate's own workers, if it says (its _max_workers): see _wake_locked.
        self.workers = workers
        admission.core.capacity = max_running  # the most in flight: no take beyond it
        self.peak = max_running  # the most in flight allowed since the last lowering
        self.close_delegate = close_delegate  # shut the delegate down once stopped and drained
        self.thread: Optional[threading.Thread] = None  # the dispatcher, started or counted in
        self.arrived = False  # the dispatcher has begun its loop
        self.unstarted: list[threading.Thread] = []  # counted in, not yet handed to start()
        self.asleep = False  # the dispatcher waits on ``ready``
        self.ready = threading.Condition(admission.lock)
        self.settlers: dict[threading.Thread, int] = {}  # delegate threads settling ours now
        self.closed = False  # a dispatcher has set out to shut the delegate down
        self.relay: Optional[threading.Thread] = None  # a delegate's thread handing over

    # -- what admission calls --------------------------------------------------------------

    def queued_locked(self, waiting: int) -> None:
        self._wake_locked()

    def resumed_locked(self, waiting: int) -> None:
        self._wake_locked()

    def stop_locked(self) -> None:
        self._wake_locked()

    def resync_locked(self) -> None:
        self.unstarted[:] = [thread for thread in self.unstarted if thread is self.thread]

    def owns_locked(self, thread: threading.Thread) -> bool:
        """The dispatcher, a delegate's thread settling a future of ours, or running a task."""
        if thread is self.thread or thread in self.settlers:
            return True
        return thread is threading.current_thread() and getattr(self.tasks, "depth", 0) > 0

    def staffed_locked(self) -> bool:
        return self.thread is not None

    def sizes_locked(self) -> tuple[int, int]:
        """(``max_running``, free slots): the front's "workers" are its slots."""
        core = self.admission.core
        max_running = int(core.capacity)
        return max_running, max(0, max_running - core.running)

    def capacity_locked(self) -> dict[str, int]:
        return {"max_running": int(self.admission.core.capacity)}

    def resize_locked(self, size: int) -> None:
        """Set ``max_running``; tasks in flight beyond it finish, and no more start till then."""
        core = self.admission.core
        self.peak = max(size, min(self.peak, core.running))
        core.capacity = size
        self._wake_locked()

    def check_locked(self) -> None:
        core = self.admission.core
        assert 0 <= core.running <= max(core.capacity, self.peak), (
            "more tasks in flight than max_running"
        )
        assert set(self.unstarted) <= {self.thread}, "an unstarted dispatcher is not counted in"
        assert all(count > 0 for count in self.settlers.values()), "settler count is off"
        assert self.relay is None or self.relay in self.settlers, "a relay that is not settling"
        if self.asleep:
            assert self.thread is not None, "asleep without a dispatcher"
            free = core.slot_free() and not self._filling_locked()
            if self.relay is None and free:
                assert not core.startable(), "a task waits while a slot is free"

    def start_pending(self, entry: Optional[Entry]) -> None:
        """Start the dispatcher counted in (``Admission.start_thread``)."""
        if self.unstarted:  # a hint, rechecked under the lock
            self.admission.start_thread(self.unstarted, entry, self._write_off_locked)

    def _write_off_locked(self, thread: threading.Thread) -> bool:
        """A dispatcher whose start failed: unless it arrived, it exits when it does."""
        if self.thread is thread and not self.arrived:
            self.thread = None
        return self.thread is None

    def join(self) -> None:
        """Wait for the dispatcher: it exits once stopped, drained and nothing is in flight."""
        with self.admission.lock:
            thread = self.thread
        if thread is not None and thread.ident is not None:
            thread.join()

    def after_fork_in_child(self, lock: threading.Lock) -> bool:
        used = self.thread is not None
        self.thread = None
        self.arrived = self.asleep = False
        self.closed = True  # the delegate is the parent's to shut down, not this copy's
        self.unstarted.clear()
        self.ready = threading.Condition(lock)
        self.settlers.clear()
        self.relay = None
        self.tasks = threading.local()
        return used

    # -- the dispatcher --------------------------------------------------------------------

    def _wake_locked(self, ended: bool = False) -> None:
        """Make the dispatcher look again, if it may find something to do; count one in if none.

        ``ended``: a task in flight just ended. While the delegate has more in flight than
        its own workers, a worker that ends a task takes the next from the delegate's
        queue, so the dispatcher is left asleep until it would run dry: then each wake
        hands over several tasks, not one (:meth:`_filling_locked`).
        """
        admission = self.admission
        core = admission.core
        if self.thread is None:
            closing = core.stopping and self.close_delegate and not self.closed
            if core.startable() or closing:
                thread = fresh_thread(f"{admission.name}_dispatcher", self._dispatch)
                self.unstarted.append(thread)  # first: see resync_locked
                self.arrived = False
                self.thread = thread
        elif self.asleep and (
            core.stopping
            or (
                self.relay is None  # else the relay takes what may start
                and core.slot_free()
                and not (ended and self._filling_locked())
                and core.startable()
            )
        ):
            # Notify first: a dispatcher woken while still marked asleep is woken again at
            # worst, but one marked awake and never notified would sleep for ever.
            self.ready.notify()
            self.asleep = False

    def _filling_locked(self) -> bool:
        """More in flight than the delegate's own workers: a worker that ends a task finds
        the next in the delegate's queue (False for a delegate that does not say)."""
        return self.workers is not None and self.admission.core.running > self.workers

    def _dispatch(self) -> None:
        """Body of the dispatcher thread: hand over, best first, while a slot is free."""
        admission = self.admission
        me = threading.current_thread()
        with admission.lock:
            if self.thread is not me:  # written off when its start() failed
                return
            self.arrived = True
        expired: list[Entry] = []  # what take_locked() found past its deadline
        while True:
            with admission.lock:
                entry = self._next_locked(expired)
                done = entry is None and not expired
                if done and (self.closed or not self.close_delegate):
                    self.thread = None
                    return
                if done:
                    self.closed = True
            if done:
                # Still the dispatcher while it closes the delegate, so that join() waits
                # for this; then it looks once more.
                self._close_delegate()
                continue
            self._start(entry, expired)
            expired, entry = [], None

    def _start(self, entry: Optional[Entry], expired: list[Entry]) -> None:
        """After a take (by the dispatcher or a settling thread): settle what it found
        expired, log the clock's errors, and hand over the task taken; without the lock."""
        admission = self.admission
        try:
            if expired:
                admission.settle_expired(expired)  # callbacks to the callback threads
            if admission.core.clock_errors:
                admission.settler.settle_deferred()
            if entry is not None:
                self._hand_over(entry)
        except BaseException:
            # A done-callback raising SystemExit from a cancel, say: the front's dispatcher,
            # or the delegate's thread, must live on (and that one must settle ours after).
            LOGGER.critical("exception handing over a task of %s", admission.name, exc_info=True)

    def _close_delegate(self) -> None:
        try:
            self.delegate.shutdown(wait=True)
        except Exception:
            LOGGER.exception("exception shutting down %r", self.delegate)

    def _next_locked(self, expired: list[Entry]) -> Optional[Entry]:
        """Wait until a task can be handed over, or expired ones cancelled; None: exit."""
        admission = self.admission
        while True:
            entry = admission.take_locked(expired)  # none while max_running are in flight
            if entry is not None or expired:
                return entry
            if admission.drained_locked() and not admission.core.running and not self.settlers:
                return None
            self.asleep = True
            self.ready.wait()
            self.asleep = False

    def _hand_over(self, entry: Entry) -> None:
        """Claim a task taken from the queue and submit it to the delegate; without the lock."""
        fn, args, kwargs = entry.fn, entry.args, entry.kwargs
        future = entry.detach()  # what is left of it: its key, priority and start
        if not claim(future, cancel=False):  # its user cancelled it first
            with self.admission.lock:
                self.admission.finished_locked(CANCELLED, entry)
            return
        watch = self.admission.listeners.watch(entry)
        if watch is not None:  # user code: never on the dispatcher
            self.admission.settler.call_later([watch.started])
        if self.marks:
            fn = OwnTask(fn, self.tasks)
        try:
            inner = self.delegate.submit(fn, *args, **kwargs)
            inner.add_done_callback(partial(self._done, future, entry, watch))
        except BaseException as exc:
            error = exc
        else:
            return
        finally:
            del fn, args, kwargs  # a broken front keeps the error, and its traceback this frame
        self._refused(future, entry, watch, error)

    def _refused(
        self, future: Future[Any], entry: Entry, watch: Optional[Watch], error: BaseException
    ) -> None:
        """The delegate's ``submit`` raised: fail the task, and break the front if it must.

        A broken front fails its queue here, callbacks included: it has nothing left to hand
        over.
        """
        self._report(future, entry, watch, False, error)
        if not breaks_front(error):
            return
        message, template = str(error) or type(error).__name__, error_template(error)
        admission = self.admission
        with admission.lock:
            drained = [] if admission.broken else admission.break_locked(message, template)
        admission.settler.fail(drained, lambda: error)

    # -- settling ------------------------------------------------------------------------

    def _done(
        self, future: Future[Any], entry: Entry, watch: Optional[Watch], inner: Future[Any]
    ) -> None:
        """Done-callback of an inner future, on the delegate's thread: settle ours from it."""
        ok, value, ran = False, None, self.inline  # type: tuple[bool, Any, bool]
        try:
            value = inner.exception()  # raises CancelledError if its executor cancelled it
            if value is None:
                ok, value = True, inner.result()
        except CancelledError:  # ours is running, so it cannot be cancelled: settle it so
            value, ran = CancelledError(), False
        except BaseException as exc:  # a future that is not quite a Future
            value = exc
        # A thread pool settles a future it did not run (cancelled by its shutdown, failed
        # by a broken initializer) while it holds its own lock, which its submit takes: a
        # relay there would wait for itself. So only a task that ran relays.
        ran = ran and not isinstance(value, BrokenExecutor)
        self._report(future, entry, watch, ok, value, ran)

    def _report(
        self,
        future: Future[Any],
        entry: Entry,
        watch: Optional[Watch],
        ok: bool,
        value: Any,
        successor: bool = False,
    ) -> None:
        """Free the task's slot and count its outcome, then settle its future with ``value``.

        ``successor``: this thread may call the delegate's ``submit`` (see ``inline``). If no
        other thread relays, it takes the best queued task into the slot it frees, in the
        same hold of the lock, and relays (:meth:`_relay`) before it settles ours.
        """
        admission, me = self.admission, threading.current_thread()
        expired: list[Entry] = []  # what the successor's take found past its deadline
        taken = None
        lock = admission.lock  # a hot path: see _lock.py
        if not lock.acquire(False):
            acquire_politely(lock)
        try:
            admission.finished_later_locked(COMPLETED if ok else FAILED, entry)
            quiet = me is self.thread or me is self.relay  # no user code on either
            if not quiet:
                if (
                    successor
                    and self.relay is None
                    and me not in self.settlers  # not a user's callback that submits
                ):
                    taken = admission.take_locked(expired)
                    if taken is not None or expired:
                        self.relay = me
                self.settlers[me] = self.settlers.get(me, 0) + 1
            self._wake_locked(ended=True)
        finally:
            lock.release()
        if quiet:  # the callbacks go to a callback thread
            if settle_quietly(future, ok, value) and has_user_callbacks(future):
                admission.settler.later([partial(run_callbacks_guarded, future)])
            else:
                with admission.lock:
                    admission.settled_locked(1)
            if watch is not None:
                admission.settler.call_later([partial(watch.finished, *_ending(ok, value))])
            return
        try:
            if self.relay is me:
                self._relay(taken, expired)
            guard_callbacks(future, future.set_result if ok else future.set_exception, value)
        finally:
            if not lock.acquire(False):
                acquire_politely(lock)
            try:
                left = self.settlers.pop(me) - 1
                if left:
                    self.settlers[me] = left
                admission.settled_locked(1)
                self._wake_locked(ended=True)
            finally:
                lock.release()
            if watch is not None:  # after its start, on the callback threads: see _listeners
                admission.settler.call_later([partial(watch.finished, *_ending(ok, value))])

    def _relay(self, entry: Optional[Entry], expired: list[Entry]) -> None:
        """Hand over, from the delegate's thread that took ``entry``, while slots free up.

        At most one thread relays at a time (``relay``): several calling the delegate's
        ``submit`` at once would queue on its lock, each hand-off a context switch. The
        dispatcher is not woken meanwhile. After :data:`RELAY` more hand-overs, or when nothing
        more may start, the relay ends and wakes the dispatcher if a task may start.
        """
        admission, lock = self.admission, self.admission.lock
        try:
            for _ in range(RELAY):
                self._start(entry, expired)
                entry, expired = None, []
                if not lock.acquire(False):
                    acquire_politely(lock)
                try:
                    entry = admission.take_locked(expired)  # none while max_running run
                    if entry is None and not expired:
                        self.relay = None
                        self._wake_locked()
                        return
                finally:
                    lock.release()
            self._start(entry, expired)
        finally:
            if self.relay is threading.current_thread():  # only this thread clears its own
                with lock:
                    self.relay = None
                    self._wake_locked()


class OwnTask:
    """A task's callable that marks the thread running it as the front's own meanwhile.

    ``marks.depth`` counts the front's tasks running in the current thread: a count, not a
    flag, so that a task that ends inside another (an executor that runs tasks inline)
    leaves the other one marked.
    """

    __slots__ = ("fn", "marks")

    def __init__(self, fn: Callable[..., Any], marks: threading.local) -> None:
        self.fn = fn
        self.marks = marks

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        marks = self.marks
        marks.depth = getattr(marks, "depth", 0) + 1
        try:
            return self.fn(*args, **kwargs)
        finally:
            marks.depth -= 1

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        """The task's own callable, for ``inspect.unwrap`` and code that looks through."""
        return self.fn

    def __repr__(self) -> str:
        return f"<OwnTask {self.fn!r}>"


def _ending(ok: bool, value: Any) -> tuple[Outcome, Optional[BaseException]]:
    """A listener's ``outcome`` and ``exception`` for a task settled with ``value``."""
    return (COMPLETED, None) if ok else (FAILED, value)
