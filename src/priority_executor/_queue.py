"""The queue of waiting tasks: entries ordered by rank, and a heap of deadlines.

The queue is plain data with no lock and no thread: the executor's lock guards every call.
It can therefore be driven, and its invariants checked, from a single-threaded test.

Two orderings (in ``_orders.py``) share everything else. :class:`TaskQueue`, for strict
priority, keeps one FIFO ``deque`` per distinct rank and a small heap of those ranks: a heap
of all entries would pay O(log n) tuple comparisons on every pop, with a cache miss at each
level once the backlog is large, and a tuple per task for the garbage collector to trace, while
real workloads use a handful of priority levels. A push or a pop costs O(1) plus O(log L) for L
distinct levels, and submission order within a level is the order of the deque.
:class:`HeapQueue`, for ageing, where every entry has its own rank, is one heap of ``(rank, seq,
entry)``: O(log n). Tasks with a deadline are also kept in a heap by deadline. ``seq`` numbers
come from one counter: they break ties in submission order in both heaps, and are not stored in
entries, so that a queued task costs no int object in the common case.

Removal is lazy. A task that leaves the queue other than by a pop from the front (cancelled,
expired, evicted, re-prioritised) is forgotten at once, so the live count is always exact,
but its entry stays stored as a tombstone until a pop skips it or a sweep removes it. A sweep
runs when tombstones outnumber live entries by more than ``COMPACT_SLACK``, so storage stays
within twice the live size plus a constant, at O(1) amortised cost per removal.

Invariants, checked by :meth:`QueueBase._check_invariants`:

* an entry is live iff ``entry.queued``; each live entry is stored exactly once, and live
  entries come out in ``rank`` order (submission order among equal ranks);
* ``entries`` maps each live entry's future to that entry, so ``len(entries)`` is the live
  count; no live entry's future is done;
* each live entry with a deadline has exactly one item ``(deadline, seq, entry)`` in the
  deadline heap, which has the heap property; ``deadline_count`` counts them; the ``seq`` of
  every heap item is unique and below ``next_seq``;
* ``stored <= 2 * live + COMPACT_SLACK``, and likewise for the deadline heap;
* for :class:`TaskQueue`: ``levels`` is a heap holding each rank of ``buckets`` once; at most
  ``hollow + 1`` buckets are empty (a pop that empties the last level keeps it for the next
  push; an eviction that empties the worst level leaves it, counted in ``hollow``, until a
  pop reaches it or enough of them are dropped at once); with eviction, ``top`` is a heap of
  negated ranks holding every rank of ``levels``, so the worst level is found in O(log L).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future
from types import MappingProxyType
from typing import Any, Optional, Protocol

from ._policy import Number, is_due

#: Tombstones tolerated beyond the live count before the queue is swept.
COMPACT_SLACK = 64
#: Priorities whose queued count fell to zero that ``by_priority`` may keep listed.
KEEP_ZEROS = 64

#: The keyword arguments of every task submitted without any; never mutated (``**`` copies).
NO_KWARGS: Mapping[str, Any] = MappingProxyType({})


class ViewState(Protocol):
    """The state of the view a task came through (``_options._ViewState``); read under the lock."""

    closed: bool
    key: Hashable  # the key of every task submitted through the view (None: no key)

    def taken(self, future: Future[Any]) -> None:
        """``_work_queue.get()`` took this task out of the pool: it is no longer the view's."""


class Entry:
    """One submitted task, from ``submit`` until it leaves the queue."""

    __slots__ = (
        "args",
        "deadline",
        "fn",
        "future",
        "key",
        "kwargs",
        "priority",
        "queued",
        "queued_at",
        "rank",
        "started",
        "view_state",
    )

    started: float  # the clock when it started (NaN: unknown); set by the take that starts it
    #: The units of capacity it takes while it runs: 1 for every task of a pool; a limiter's
    #: ``Request`` holds its own.
    cost = 1

    def __init__(
        self,
        future: Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        priority: Number,
        deadline: Optional[float],
        key: Hashable = None,
        view_state: Optional[ViewState] = None,
    ) -> None:
        self.future = future
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.priority = priority
        self.deadline = deadline
        self.key = key  # the key of the view it came through (None: no key)
        self.view_state = view_state  # its view's state (None: submitted to the pool itself)
        self.rank: Number = 0  # the order it runs in: smaller first (see _policy.rank_of)
        self.queued = False  # True from push until it leaves the queue; then a tombstone
        self.queued_at = 0.0  # the clock at submit (NaN if it raised)

    def detach(self) -> Future[Any]:
        """Hand the future over to whoever removed this entry from the queue; keep nothing.

        A tombstone of the entry may stay in the queue a while: afterwards it holds neither
        the callable, nor its arguments, nor the future and its result.
        """
        future = self.future
        del self.future, self.fn, self.args, self.kwargs
        return future


def _successor(entry: Entry) -> Entry:
    """A new entry for ``entry``'s task, so that no entry is ever stored twice."""
    successor = Entry(
        entry.future,
        entry.fn,
        entry.args,
        entry.kwargs,
        entry.priority,
        entry.deadline,
        entry.key,
        entry.view_state,
    )
    successor.queued_at = entry.queued_at
    entry.detach()
    return successor


class QueueBase:
    """What both orderings share; see the module docstring for the invariants."""

    def __init__(self) -> None:
        self.stored = 0  # entries stored by the ordering, tombstones included
        self.entries: dict[Future[Any], Entry] = {}
        # Live entries by priority, so that statistics() and exporters read the backlog by
        # priority in O(distinct priorities), not O(n). A priority whose count falls to zero
        # stays listed (the next task of it would add it again) unless KEEP_ZEROS priorities
        # are listed so: priorities that are all different (a timestamp) cannot grow it for ever.
        self.by_priority: dict[Number, int] = {}
        self.deadlines: list[tuple[float, int, Entry]] = []
        self.deadline_count = 0
        self._counter = itertools.count()
        self.next_seq = 0
        self.held = 0  # live entries that a key's limits hold back (only KeyedQueue has any)

    def __len__(self) -> int:
        return len(self.entries)

    # The ordering: each subclass stores entries its own way.

    def _store(self, entry: Entry) -> bool:
        """Store a new live entry; True if it goes ahead of every entry queued before it.

        The answer is O(1) against the smallest rank stored, so it may be False for an entry
        that goes first while a tombstone with a smaller rank still leads (a missed jump,
        never a made-up one).
        """
        raise NotImplementedError

    def pop(self) -> Optional[Entry]:
        """Remove and return the best live entry, or None when nothing is queued."""
        raise NotImplementedError

    def peek(self) -> Optional[Entry]:
        """The entry :meth:`pop` would return, left queued (tombstones before it are dropped)."""
        raise NotImplementedError

    def worst(self) -> Optional[Entry]:
        """The live entry that would run last, or None if nothing is queued."""
        raise NotImplementedError

    def close(self, key: Hashable) -> None:
        """Hold back the tasks of ``key``: only a ``KeyedQueue`` can (see ``_keyed.py``)."""
        raise NotImplementedError("only a KeyedQueue holds the tasks of a key back")

    def open(self, key: Hashable) -> bool:
        """Let the tasks of ``key`` start again; False: none was held back."""
        return False

    def pop_any(self) -> Optional[Entry]:
        """:meth:`pop`, whatever a key's limits hold back (``_work_queue`` takes any task)."""
        return self.pop()

    def _live_in_order(self) -> list[Entry]:
        raise NotImplementedError

    def _sweep(self) -> None:
        raise NotImplementedError

    def _check_order(self) -> list[Entry]:
        raise NotImplementedError

    def _heap_seqs(self) -> list[int]:
        return []

    # The rest is common.

    def push(self, entry: Entry, rank: Number) -> bool:
        """Queue ``entry`` behind every queued entry with the same rank.

        Returns:
            True if it goes ahead of every entry queued before it (see :meth:`_store`).
        """
        entry.rank = rank
        entry.queued = True
        first = self._store(entry)
        self.stored += 1
        by_priority = self.by_priority
        by_priority[entry.priority] = by_priority.get(entry.priority, 0) + 1
        if entry.deadline is not None:
            heapq.heappush(self.deadlines, (entry.deadline, self._next_seq(), entry))
            self.deadline_count += 1
        self.entries[entry.future] = entry  # last: it is queued once mapped (see repair)
        return first

    def set_deadline(self, entry: Entry, deadline: float) -> None:
        """Give a queued entry that has no deadline ``deadline`` (a limiter's request, once
        its first grant pass is done)."""
        entry.deadline = deadline
        heapq.heappush(self.deadlines, (deadline, self._next_seq(), entry))
        self.deadline_count += 1

    def _next_seq(self) -> int:
        seq = next(self._counter)
        self.next_seq = seq + 1
        return seq

    def remove(self, entry: Entry) -> None:
        """Forget a queued entry; it stays stored as a tombstone until swept."""
        self._forget(entry)
        self._compact_if_sparse()

    def discard(self, future: Future[Any]) -> Optional[Entry]:
        """:meth:`remove` the entry of ``future`` and return it, or None if it is not queued."""
        entry = self.entries.get(future)
        if entry is not None:
            self._forget(entry)
            self._compact_if_sparse()
        return entry

    def requeue(self, entry: Entry, rank: Number, priority: Optional[Number] = None) -> Entry:
        """Move a queued entry to ``rank`` (and ``priority``), behind the entries already there.

        The old entry becomes a tombstone and the task continues in a new entry (returned),
        so that no entry is ever stored twice. The deadline and the time of submission are
        kept.
        """
        self._uncount(entry.priority)  # push() counts the successor
        if priority is not None:
            entry.priority = priority  # the successor's
        # The future stays in ``entries`` throughout, mapped to the successor by push(): the
        # cancel hook, which reads ``entries`` before taking the lock, must never find a
        # queued task missing.
        entry.queued = False
        if entry.deadline is not None:
            self.deadline_count -= 1
        successor = _successor(entry)
        self.push(successor, rank)
        self._compact_if_sparse()
        return successor

    def move_to(self, queue: QueueBase) -> None:
        """Queue every live entry in ``queue`` instead, in order, to change the ordering; O(n)."""
        for entry in self._live_in_order():
            queue.push(entry, entry.rank)

    def find(self, future: Future[Any]) -> Optional[Entry]:
        """The queued entry of ``future``, or None if it is not queued here."""
        return self.entries.get(future)

    def next_deadline(self) -> Optional[float]:
        """The earliest deadline among queued entries, or None if none has one."""
        deadlines = self.deadlines
        while deadlines:
            deadline, _seq, entry = deadlines[0]
            if entry.queued:
                return deadline
            heapq.heappop(deadlines)
        return None

    def pop_due(self, now: float) -> list[Entry]:
        """Remove and return every queued entry whose deadline has come at ``now``."""
        due = []
        deadlines = self.deadlines
        while deadlines and is_due(deadlines[0][0], now):
            _deadline, _seq, entry = heapq.heappop(deadlines)
            if entry.queued:
                self._forget(entry)
                due.append(entry)
        self._compact_if_sparse()
        return due

    def drain(self) -> list[Entry]:
        """Remove and return every queued entry, best first."""
        drained = self._live_in_order()
        for entry in drained:
            self._forget(entry)
        self._compact_if_sparse()
        return drained

    def repair(self, *changed: Entry) -> None:
        """Make the queue agree with ``entries`` again after a ``push`` or ``remove`` of the
        ``changed`` entries that an asynchronous exception may have cut short; O(n).

        ``entries`` is the truth: an entry is queued iff it maps its future (``push`` maps it
        last, ``remove`` unmaps it first). Every other count and order is made from it.
        """
        entries = self.entries
        for entry in changed:
            entry.queued = entries.get(entry.future) is entry
        self.deadline_count = sum(e.deadline is not None for e in entries.values())
        self.by_priority = dict(Counter(e.priority for e in entries.values()))  # no zeros
        heapq.heapify(self.deadlines)  # a sweep may have stopped before its heapify
        self._recount()
        self._compact_if_sparse()

    def _recount(self) -> None:
        """Set ``stored`` to what the ordering holds, and restore its heaps' order."""
        raise NotImplementedError

    def _forget(self, entry: Entry) -> None:
        del self.entries[entry.future]
        self._uncount(entry.priority)
        entry.queued = False
        if entry.deadline is not None:
            self.deadline_count -= 1

    def _uncount(self, priority: Number) -> None:
        by_priority = self.by_priority
        left = by_priority[priority] = by_priority[priority] - 1
        if not left and len(by_priority) > KEEP_ZEROS:
            del by_priority[priority]

    def _compact_if_sparse(self) -> None:
        # Each sweep is paid for by the removals that made the tombstones: O(1) amortised.
        if len(self.deadlines) > 2 * self.deadline_count + COMPACT_SLACK:
            self.deadlines = [item for item in self.deadlines if item[2].queued]
            heapq.heapify(self.deadlines)
        if self.stored > 2 * len(self.entries) + COMPACT_SLACK:
            self._sweep()
            self.stored = len(self.entries)

    def _check_invariants(self) -> None:
        """Check every invariant of the module docstring in O(n); raise AssertionError if not."""
        live = self._check_order()
        assert len({id(entry) for entry in live}) == len(live), "an entry is stored twice"
        assert len(live) == len(self.entries), "live count differs from what is stored"
        counted = Counter(entry.priority for entry in self.entries.values())
        by_priority = {p: n for p, n in self.by_priority.items() if n}
        assert by_priority == counted, "queued tasks by priority miscounted"
        zeros = len(self.by_priority) - len(by_priority)
        assert zeros <= KEEP_ZEROS, "more priorities kept at zero than KEEP_ZEROS"
        ranks = [entry.rank for entry in self._live_in_order()]
        assert ranks == sorted(ranks), "live entries do not come out in rank order"
        for entry in live:
            assert self.entries.get(entry.future) is entry, "live entry missing from entries"
            assert not entry.future.done(), "a queued task's future is already done"
        deadlines = self.deadlines
        for i in range(1, len(deadlines)):
            assert deadlines[(i - 1) // 2][:2] <= deadlines[i][:2], f"deadline heap broken at {i}"
        seqs = [item[1] for item in deadlines] + self._heap_seqs()
        assert len(set(seqs)) == len(seqs), "sequence numbers repeat"
        assert all(0 <= seq < self.next_seq for seq in seqs), "sequence number out of range"
        live_items = [item for item in deadlines if item[2].queued]
        with_deadline = [entry for entry in live if entry.deadline is not None]
        assert len(live_items) == len(with_deadline) == self.deadline_count, "deadline count"
        assert {id(item[2]) for item in live_items} == {id(e) for e in with_deadline}
        assert all(item[0] == item[2].deadline for item in live_items), "deadline changed"
        assert self.stored <= 2 * len(self.entries) + COMPACT_SLACK, "tombstones not swept"
        assert len(deadlines) <= 2 * self.deadline_count + COMPACT_SLACK, "deadlines not swept"
