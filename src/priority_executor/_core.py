"""The core: one scheduler's policy, a component every owner composes.

A :class:`Core` is the queue and everything that decides what leaves it: the ordering
(``_orders.py``, ``_keyed.py``), ageing, queue deadlines, ``max_queued`` and eviction,
capacity (how many tasks may run at once), pause, the rate and key limits
(``_limits.py``) and the counts (``_recording.py``). It has no lock, no thread, no event loop
and no Future type (a future is an opaque handle it hashes and asks ``done()``), and it runs
no user code. Its owner serialises every call: the thread pool and the front hold their one
lock (``_admission.Admission``), the asyncio scheduler makes every call on its loop's thread
(``_aio_owner.AsyncOwner``). None blocks.

It never calls its owner. A call that leaves something for the owner to do (wake takers,
re-arm a timer, wake who waits for the queue to shrink) adds it to :attr:`Core.todo`, a set
of bits the owner takes with :meth:`Core.take_todo` and applies, once its call is done:

- :data:`OPENED`: the clock opened a rate slot or a key's window at :attr:`Core.opened_at`;
  more tasks may start than the owner's takers know.
- :data:`TIMER`: the next rate slot moved; the owner's timer must wake by
  :meth:`Core.next_deadline`.
- :data:`SHRUNK`: a task left the queue or settled, while someone :attr:`Core.watchers`
  counts waits for that (a blocked submit, ``join()``).
- :data:`EMPTIED`: a task left the queue unstarted while stopping; a stopping owner whose
  queue is empty may stop.

The flows each owner follows: :meth:`stamp` ranks a new entry (and reads its deadline),
:meth:`make_room` decides what a full queue does with it, ``queue.push`` queues it;
:meth:`take` is the one place a task leaves the queue to start; :meth:`finish` counts how
it ended; :meth:`unqueue` removes a task its user cancelled; :meth:`pop_due` expires what
the clock has passed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Optional, Union

from ._claim import Outcome
from ._keyed import KeyedQueue
from ._limits import Limits
from ._orders import HeapQueue, TaskQueue
from ._policy import Number, WhenFull, is_due, rank_of, strict_rank
from ._queue import Entry, QueueBase
from ._rates import RateLimit
from ._recording import Tally
from ._stats import ExecutorStatistics, QueueFullError

#: The counts ``statistics()`` reports, by their names there.
COUNTED = ("submitted", "completed", "failed", "cancelled", "expired", "rejected", "taken")

#: Why a clock reading of NaN, which orders nothing, is refused.
NAN_READING = "the clock read nan: a deadline or ageing needs a number"

#: Bits of :attr:`Core.todo`: what the owner must do after a call (see the module docstring).
OPENED = 1
TIMER = 2
SHRUNK = 4
EMPTIED = 8


class Core:
    """A scheduler's queue and its rules; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        ageing: Optional[float],
        limits: Limits,
        capacity: float,
        max_queued: Optional[int] = None,
        when_full: WhenFull = "raise",
        weighed: bool = False,
    ) -> None:
        self.clock = clock
        # Entries take ``entry.cost`` units of capacity and of their key's limit, not 1 (a
        # limiter's requests), and none passes a better one that does not fit yet (see take).
        self.weighed = weighed
        self.ageing = ageing
        self.limits = limits
        self.capacity = capacity  # the most tasks running at once: take() starts no more
        self.max_queued = max_queued
        self.when_full = when_full
        self.evicts = max_queued is not None and when_full == "evict"
        self.todo = 0  # what the owner must do: OPENED | TIMER | SHRUNK | EMPTIED
        self.opened_at = 0.0  # with OPENED: the clock reading that opened keys or a slot
        self.watchers = 0  # owner's waiters for SHRUNK: blocked submits, join() calls
        self.fast_submit = False  # no bound, no limit: submit may take its fast path
        self.queue = self._new_queue()
        self.running = 0  # taken to start, outcome not yet reported
        self.settling = 0  # taken out unrun (expired, cancelled by shutdown), not yet settled
        self.undecided = 0  # of those, not yet counted (a broken pool fails them after)
        # Evicted to make room and counted, not yet settled; the owner cancels them outside
        # its lock. join() waits for them too.
        self.evicted: list[Entry] = []
        self.clock_errors: list[Exception] = []  # raised while serialised; logged after
        self.paused = False
        self.stopping = False  # no task will be queued again: drain, then stop
        self.tally = Tally()  # the counts, by priority class, and the wait and run times
        self.limits_changed()

    def _new_queue(self) -> QueueBase:
        if self.limits.keyed:  # either order: the lanes are heaps
            return KeyedQueue(self.evicts, set(self.limits.saturated_keys()))
        if self.ageing is None:
            return TaskQueue(track_worst=self.evicts)
        return HeapQueue(track_worst=self.evicts)

    def rebuilt(self) -> Core:
        """A core of this one's configuration (clock, ageing, the limits' settings, capacity,
        ``max_queued``), its counts, pause and stopping, and nothing queued, running, settling
        or waiting: the state of a fork child, where no task of the parent is anywhere."""
        limits = self.limits  # its running counts and windows are the parent's
        core = Core(
            clock=self.clock,
            ageing=self.ageing,
            limits=Limits(limits.rate_limit, limits.key_limit, limits.key_rate_limit),
            capacity=self.capacity,
            max_queued=self.max_queued,
            when_full=self.when_full,
            weighed=self.weighed,
        )
        core.tally, core.paused, core.stopping = self.tally, self.paused, self.stopping
        return core

    def take_todo(self) -> int:
        """What the owner must do after its last calls (bits, see the module docstring)."""
        todo, self.todo = self.todo, 0
        return todo

    # -- queueing ----------------------------------------------------------------------------

    def stamp(self, entry: Entry, timeout: Optional[float]) -> tuple[Number, bool]:
        """Stamp a new entry's time of submission and deadline: its rank, and if it is due.

        With neither a deadline nor ageing the clock decides nothing: if it raises, the
        error is listed in ``clock_errors`` and the task's wait goes unrecorded. Otherwise
        a clock that raises, or reads NaN (which orders nothing), makes the submit raise,
        before anything changed.
        """
        if timeout is None and self.ageing is None:
            self.arrived(entry)
            return strict_rank(entry.priority), False
        now = self.clock()
        if now != now:
            raise ValueError(NAN_READING)
        entry.queued_at = now
        rank = rank_of(entry.priority, now, self.ageing)
        if timeout is None:
            return rank, False
        entry.deadline = now + timeout
        return rank, is_due(entry.deadline, now)  # timeout=0: it may not wait at all

    def arrived(self, entry: Entry) -> None:
        """Stamp the time of submission of an entry whose clock reading decides nothing."""
        try:
            entry.queued_at = self.clock()
        except Exception as exc:
            self.clock_errors.append(exc)  # its wait goes unrecorded
            entry.queued_at = math.nan

    def startable(self) -> int:
        """How many queued tasks the limits and pause let start now, capacity aside."""
        if self.paused or self.limits.rate_until is not None:
            return 0
        return len(self.queue.entries) - self.queue.held

    def slot_free(self) -> bool:
        """Fewer than ``capacity`` tasks run: a take may start one (the first test of
        :meth:`take`, which makes it inline on every take)."""
        return self.running < self.capacity

    def full(self) -> bool:
        """``max_queued`` tasks wait: a new one needs :meth:`make_room` first."""
        return self.max_queued is not None and len(self.queue) >= self.max_queued

    def make_room(self, entry: Entry, rank: Number) -> Optional[Entry]:
        """Apply ``when_full`` for ``entry`` (of rank ``rank``) on a full queue.

        Returns:
            The queued entry to evict for it ("evict"; the caller removes it once nothing
            else can fail), or None: the owner waits for room ("block").

        Raises:
            QueueFullError: ``when_full`` is "raise", or "evict" and no queued task ranks
                below the new one.
        """
        if self.when_full == "evict":
            worst = self.queue.worst()
            if worst is not None and rank < worst.rank:
                return worst
        if self.when_full != "block":
            self.reject(entry.priority)
            raise QueueFullError(f"cannot queue the task: max_queued={self.max_queued} tasks wait")
        return None

    def reject(self, priority: Number) -> None:
        """Count a submit refused before it changed anything."""
        self.tally.add("rejected", priority)

    def requeue(self, future: Future[Any], priority: Number) -> bool:
        """Move a queued task to ``priority``; False if it is not queued here."""
        entry = self.queue.find(future)
        # A future its user has just cancelled stays queued until the cancel hook, which
        # runs after cancel() returns, removes it: it has not moved.
        if entry is None or future.done():
            return False
        self.queue.requeue(entry, rank_of(priority, entry.queued_at, self.ageing), priority)
        return True

    # -- starting ----------------------------------------------------------------------------

    def take(self, unrun: list[Entry], as_work_queue: bool = False) -> Optional[Entry]:
        """Take the best queued task to start it: the one place a task leaves the queue to start.

        It is the best task that every limit allows now (``_limits.py``), counted ``running``
        until its owner reports it by :meth:`finish`, and none while ``capacity`` run. One
        clock reading decides the deadline race: an entry due is counted expired and added to
        ``unrun``, for the caller to settle once unserialised, and the next one is taken. If
        the clock raises, the task starts (its deadline cannot be decided) and the error is
        listed in ``clock_errors``; under a rate limit, nothing starts until the timer can
        read the clock again.

        On a weighed core (a limiter's) the best request takes ``entry.cost`` units, and waits
        while they are not free: no request passes it (strict), except one of another key where
        its key's limits hold it back (:meth:`_pop_fitting`).

        Args:
            as_work_queue: take it as the standard pool's queue (``_work_queue``) gives it
                out, knowing neither pause, capacity nor limits; it is not counted as a start.

        Returns:
            None with nothing queued that may start, at capacity, or while paused.
        """
        if as_work_queue:
            pop, limited = self.queue.pop_any, False
        elif self.running >= self.capacity or self.paused:
            return None
        else:
            pop = (lambda: self._pop_fitting(unrun)) if self.weighed else self.queue.pop
            limited = self.limits.any_set
        limits, queue = self.limits, self.queue
        now = 0.0  # read only under a rate limit
        opened = False  # the clock opened a key or a slot: other takers may start now
        if limited and limits.timed:
            reading = self.read_clock()
            if isinstance(reading, Exception):
                self.clock_errors.append(reading)
                limits.hold_locked()
                self.todo |= TIMER
                return None
            now = reading
            opened = limits.release_locked(now, queue)
            if limits.rate_until is not None:  # the window is full
                self.todo |= TIMER
                if opened:
                    self._opened(now)
                return None
        entry = pop()
        while entry is not None and entry.deadline is not None:
            reading = self.read_clock()
            if isinstance(reading, Exception):
                self.clock_errors.append(reading)
                break
            if not is_due(entry.deadline, reading):
                break
            self._expired(entry, unrun)
            entry = pop()
        if entry is not None:
            cost = entry.cost
            self.running += cost
            # Its class is fixed as it starts, before a listener (the OpenTelemetry
            # exporter's) reads it, not when it ends: the class its times are recorded under.
            if entry.priority not in self.tally.classes:
                self.tally.of(entry.priority)
            if limited and limits.timed:  # the reading its rate windows count it at
                entry.started = now
            elif not as_work_queue:  # stamped for its wait and run, recorded when it ends
                try:
                    entry.started = self.clock()
                except Exception as exc:
                    self.clock_errors.append(exc)
                    entry.started = math.nan
            # Keyed tasks are counted running per key even with no limit set, so that a
            # key limit set later counts the tasks of the key already running.
            counted = not as_work_queue and (limited or entry.key is not None)
            if counted and limits.started_locked(entry.key, now, queue, cost):
                self.todo |= TIMER
            if self.watchers:
                self.todo |= SHRUNK
        if opened:
            self._opened(now)
        return entry

    def _expired(self, entry: Entry, unrun: list[Entry]) -> None:
        """Count an entry a take found past its deadline: ``unrun``, for its owner to settle."""
        self.tally.add("expired", entry.priority)
        self.settling += 1
        unrun.append(entry)
        if self.stopping:
            self.todo |= EMPTIED

    def _pop_fitting(self, unrun: list[Entry]) -> Optional[Entry]:
        """``queue.pop`` for a weighed core: the best request if its cost fits, or None.

        A request whose key has fewer units free than it costs is held back by its key (its
        key is closed until :meth:`~._limits.Limits.relieve_locked`), and the next is looked
        at; one that does not fit ``capacity`` holds back every request ranked below it, unless
        it is due: then it is expired into ``unrun`` here, and the next is looked at.
        """
        queue, limits = self.queue, self.limits
        while True:
            entry = queue.peek()
            if entry is None:
                return None
            if entry.key is not None and not limits.fits(entry.key, entry.cost):
                limits.short_locked(entry.key, queue)
                continue
            if self.running + entry.cost <= self.capacity:  # ints: exact, whatever their size
                return queue.pop()
            now = None if entry.deadline is None else self.read_clock()
            if now is None or isinstance(now, Exception) or not is_due(entry.deadline, now):
                return None  # it waits, and every request ranked below it with it
            queue.pop()
            self._expired(entry, unrun)

    def _opened(self, now: float) -> None:
        """The clock opened keys or a rate slot at ``now``: the owner gets takers for them."""
        self.todo |= OPENED
        self.opened_at = now

    def untake(self, entry: Entry) -> None:
        """Take back the start of a task taken by :meth:`take` that will not run (a limiter's
        grant its waiter gave up as it was made): its rate slots count no more. Its owner
        then reports it ``cancelled`` by :meth:`finish`."""
        limits = self.limits
        if not limits.timed:
            return
        reading = self.read_clock()
        if isinstance(reading, Exception):
            self.clock_errors.append(reading)  # the slots stay counted: none opens early
            return
        if limits.unstarted_locked(entry.key, entry.started, reading, self.queue):
            self._opened(reading)
        self.todo |= TIMER

    def finish(self, outcome: Outcome, entry: Entry, keyed: bool = True) -> None:
        """A task taken by :meth:`take` ran (or a cancel won its claim).

        ``entry``: the task's, detached: its key (the ``key`` of its view), for the key
        limits, and its priority and start, for the counts and the run time. ``keyed``:
        False for a task taken as ``_work_queue`` takes it, which no key counted.
        """
        cost = entry.cost
        self.running -= cost
        if outcome == "completed" or outcome == "failed":  # it ran: its times are recorded
            try:
                now = self.clock()
            except Exception as exc:
                self.clock_errors.append(exc)
                now = math.nan
            started = entry.started
            self.tally.ran(outcome, entry.priority, started - entry.queued_at, now - started)
        else:  # it never ran (a cancel won)
            self.tally.add(outcome, entry.priority)
        key = entry.key if keyed else None
        if key is not None:
            self.limits.finished_locked(key, self.queue, cost)
        if self.watchers:
            self.todo |= SHRUNK

    # -- leaving the queue unstarted -----------------------------------------------------------

    def unqueue(self, future: Future[Any], outcome: Outcome) -> Optional[Entry]:
        """Remove the entry of a future settled while it was queued (the cancel hook), or of
        a limiter's request that stops waiting.

        ``outcome``: how it is counted: ``"cancelled"``; ``"completed"`` if someone set a
        result on the queued future by hand; ``"expired"`` for a request that could not be
        granted at once. Returns the entry, for the caller to detach, or None if it was not
        queued.
        """
        entry = self.queue.discard(future)
        if entry is None:
            return None
        if self.weighed and entry.key is not None:
            self.limits.relieve_locked(entry.key, self.queue)
        self.tally.add(outcome, entry.priority)
        if self.watchers:
            self.todo |= SHRUNK
        if self.stopping:
            self.todo |= EMPTIED
        return entry

    def drain(self, outcome: Optional[Outcome]) -> list[Entry]:
        """Take every queued entry out unrun, counted as ``outcome`` (None: by its settler)."""
        drained = self.queue.drain()
        if outcome is None:
            self.undecided += len(drained)
        else:
            self.tally.add_each(outcome, [entry.priority for entry in drained])
        self.settling += len(drained)
        if self.watchers and drained:
            self.todo |= SHRUNK
        return drained

    def settled(self, count: int) -> None:
        """``count`` futures counted in ``settling`` are settled, callbacks included."""
        self.settling -= count
        if self.watchers and count:
            self.todo |= SHRUNK

    def quiet(self) -> bool:
        """Nothing queued, running or being settled: what join() waits for."""
        return not self.queue and not self.running and not self.settling and not self.evicted

    # -- time: deadlines and rate slots --------------------------------------------------------

    def take_clock_errors(self) -> list[Exception]:
        """What the clock raised since (``clock_errors``), taken out for the owner to log
        once unserialised, since logging runs handlers."""
        errors, self.clock_errors = self.clock_errors, []
        return errors

    def read_clock(self) -> Union[float, Exception]:
        """The clock, or the exception it raised, which the caller logs once unserialised.

        A failing clock must not kill what reads it: a worker would lose the task it holds,
        the timer every later deadline. Until the clock works again, tasks start, and the
        timer retries. A reading of NaN, which orders nothing (a timer would sleep for
        ``max(0, nan)``: not at all), is a failure too.
        """
        try:
            now = self.clock()
        except Exception as exc:
            return exc
        if now != now:
            return ValueError(NAN_READING)
        return now

    def pop_due(self, now: float) -> list[Entry]:
        """The timer's turn at ``now``: open what the limits allow, and take out the due entries.

        Those are counted expired (and ``settling``), for the caller to cancel.
        """
        limits = self.limits
        if limits.timed and limits.release_locked(now, self.queue) and not self.paused:
            self._opened(now)
        due = self.queue.pop_due(now)
        if due:
            if self.weighed:
                for entry in due:
                    if entry.key is not None:
                        self.limits.relieve_locked(entry.key, self.queue)
            self.tally.add_each("expired", [entry.priority for entry in due])
            self.settling += len(due)
            if self.watchers:
                self.todo |= SHRUNK
            if self.stopping:
                self.todo |= EMPTIED
        return due

    def room_of_due(self, now: float) -> list[Entry]:
        """The tasks of a full queue past their deadlines at ``now``, taken out expired.

        A submit to a full queue calls it with the clock reading it was stamped with: a task
        that this reading finds due waits no more, even if the timer has not had its turn, so
        it makes room as expired, rather than have the new task refused, or evict it (which
        would leave it unmarked). Counted as :meth:`pop_due` counts, for the caller
        to settle. None with a reading that failed (NaN).
        """
        if not self.queue.deadline_count or now != now:
            return []
        return self.pop_due(now)

    def next_deadline(self) -> Optional[float]:
        """When the timer must wake next: the earliest deadline, or rate slot while tasks wait."""
        deadline = self.queue.next_deadline()
        if not self.limits.timed or not self.queue:
            return deadline
        wake = self.limits.next_wake()
        if deadline is None or (wake is not None and wake < deadline):
            return wake
        return deadline

    # -- limits changed at run time ------------------------------------------------------------

    def change_limit(self, limit: str, value: Union[int, RateLimit, None]) -> None:
        """Set ``limit`` (``"rate_limit"``, ``"key_limit"``, ``"key_rate_limit"``), checked.

        If the clock raises, nothing changed and the error goes to the caller.
        """
        limits = self.limits
        if limit == "key_limit":
            assert not isinstance(value, RateLimit)
            limits.set_key_limit_locked(value)
        else:
            assert value is None or isinstance(value, RateLimit)
            now = self.clock()
            if limit == "rate_limit":
                limits.set_rate_limit_locked(value, now)
            else:
                limits.set_key_rate_limit_locked(value, now)
        self.limits_changed()

    def limits_changed(self) -> None:
        """After the limits changed: the queue's ordering, the fast path, the keys closed.

        A queue goes from one lane per key (``KeyedQueue``) to plain order, or back, in O(n),
        when the first key limit is set or the last one removed.
        """
        limits, queue = self.limits, self.queue
        if isinstance(queue, KeyedQueue):
            limits.reclose_keys_locked(queue)  # and if no key limit is left, it opens every key
        if limits.keyed != isinstance(queue, KeyedQueue):
            # Filled before it replaces the old one: the cancel hook reads ``queue.entries``
            # without the lock, and must find every queued task in whichever it reads.
            reordered = self._new_queue()
            queue.move_to(reordered)
            self.queue = reordered
        self.fast_submit = self.max_queued is None and not limits.any_set

    # -- what it reports -----------------------------------------------------------------------

    def statistics(self, **sizes: Union[int, float, None]) -> ExecutorStatistics:
        """The snapshot ``statistics()`` returns; ``sizes``: the owner's own fields."""
        counts, limits, queue = self.tally.totals(), self.limits, self.queue
        startable = 0 if self.paused else len(queue) - queue.held
        queued = {p: n for p, n in sorted(queue.by_priority.items(), reverse=True) if n}
        self.tally.classify(queued)  # so that the exporters count them in bounded classes
        wait, run, outcomes = self.tally.snapshot()
        return ExecutorStatistics(
            **sizes,  # type: ignore[arg-type]  # workers, idle_workers, a limit: the owner's
            queued=len(queue),
            queued_by_priority=queued,
            running=self.running,
            paused=self.paused,
            **{name: counts[name] for name in COUNTED},
            held_by_key=queue.held,
            rate_limited=limits.rate_until is not None and startable > 0,
            rate_limit=limits.rate_limit,
            key_limit=limits.key_limit,
            key_rate_limit=limits.key_rate_limit,
            wait=wait,
            run=run,
            outcomes=outcomes,
        )

    def check(self, in_flight: int) -> None:
        """Assert the policy's invariants in O(n), serialised; ``in_flight``: the owner's count.

        ``in_flight`` is every accepted task that is neither settled nor counted: queued,
        running, or taken out and not yet decided.
        """
        queue, limits = self.queue, self.limits
        queue._check_invariants()
        assert self.running >= 0, "more tasks finished than started"
        assert 0 <= self.undecided <= self.settling, "more futures settled than taken out"
        if self.max_queued is not None:
            assert len(queue) <= self.max_queued, "more tasks queued than max_queued"
        assert limits.keyed == isinstance(queue, KeyedQueue), "queue ordering vs key limits"
        assert self.fast_submit == (self.max_queued is None and not limits.any_set), "fast path"
        if isinstance(queue, KeyedQueue):
            limits.check(queue.closed)
        assert sum(state.running for state in limits.keys.values()) <= self.running
        self.tally.check()
        assert self.tally.submitted == self.tally.ended() + in_flight, "lost task"
