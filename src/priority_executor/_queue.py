"""The queue of waiting tasks: FIFO buckets by priority, and a heap of deadlines.

The queue is plain data with no lock and no thread: the executor's lock guards every call.
It can therefore be driven, and its invariants checked, from a single-threaded test.

Why buckets and not one heap of ``(key, seq, entry)``: a heap pays O(log n) tuple comparisons
on every pop, with a cache miss at each level once the backlog is large, and a tuple per task
for the garbage collector to trace. Real workloads use a handful of priority levels, so the
queue keeps one FIFO ``deque`` per distinct sort key and a small heap of those keys. A push or
a pop costs O(1) plus O(log L) for L distinct levels, and submission order within a level is
the order of the deque. Tasks with a deadline are also kept in a heap ordered by deadline.

Removal is lazy. A task that leaves the queue other than through :meth:`TaskQueue.pop`
(cancelled by its user, expired, re-prioritised) is forgotten at once, so the live count is
always exact, but the entry stays in its bucket as a tombstone until a pop skips it or a
compaction sweeps it away. A compaction runs when tombstones outnumber live entries by more
than ``COMPACT_SLACK``, so storage stays within twice the live size plus a constant, at O(1)
amortised cost per removal.

Invariants, checked by :meth:`TaskQueue._check_invariants`:

* ``levels`` is a heap holding each key of ``buckets`` exactly once; at most one bucket is
  empty (a pop that empties the last level keeps its bucket for the next push to reuse);
* an entry is live iff its ``seq`` is not ``GONE``; each live entry sits in exactly one bucket,
  the one of its key, and the live entries of a bucket have increasing ``seq``;
* ``entries`` maps each live entry's future to that entry, so ``len(entries)`` is the live
  count; no live entry's future is done;
* each live entry with a deadline has exactly one item ``(deadline, seq, entry)`` in the
  deadline heap, which has the heap property; ``deadline_count`` counts them;
* ``stored <= 2 * live + COMPACT_SLACK``, likewise for the deadline heap.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Optional

from ._policy import Number, is_due

#: Tombstones tolerated beyond the live count before the queue is swept.
COMPACT_SLACK = 64

#: ``Entry.seq`` of an entry that is no longer queued.
GONE = -1


class Entry:
    """One submitted task, from ``submit`` until it leaves the queue."""

    __slots__ = ("args", "deadline", "fn", "future", "key", "kwargs", "priority", "seq")

    def __init__(
        self,
        future: Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        priority: Number,
        deadline: Optional[float],
    ) -> None:
        self.future = future
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.priority = priority
        self.deadline = deadline
        self.key: Number = 0
        self.seq = GONE

    def take(self) -> tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """Hand the task over to whoever removed this entry from the queue.

        The entry keeps nothing afterwards, so a tombstone of it left in the queue holds
        neither the callable, nor its arguments, nor the future and its result.
        """
        task = self.future, self.fn, self.args, self.kwargs
        del self.future, self.fn, self.args, self.kwargs
        return task


class TaskQueue:
    """Queued entries, best first; see the module docstring for the invariants."""

    def __init__(self) -> None:
        self.levels: list[Number] = []
        self.buckets: dict[Number, deque[Entry]] = {}
        self.stored = 0  # entries in buckets, tombstones included
        self.entries: dict[Future[Any], Entry] = {}
        self.deadlines: list[tuple[float, int, Entry]] = []
        self.deadline_count = 0
        self._counter = itertools.count()
        self.next_seq = 0

    def __len__(self) -> int:
        return len(self.entries)

    def push(self, entry: Entry, key: Number) -> None:
        """Queue ``entry`` behind every queued entry with the same key."""
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = deque()
            heapq.heappush(self.levels, key)
        bucket.append(entry)
        self.stored += 1
        entry.key = key
        seq = entry.seq = next(self._counter)
        self.next_seq = seq + 1
        self.entries[entry.future] = entry
        if entry.deadline is not None:
            heapq.heappush(self.deadlines, (entry.deadline, seq, entry))
            self.deadline_count += 1

    def pop(self) -> Optional[Entry]:
        """Remove and return the best live entry, or None when nothing is queued."""
        levels = self.levels
        buckets = self.buckets
        while levels:
            bucket = buckets[levels[0]]
            while bucket:
                entry = bucket.popleft()
                self.stored -= 1
                if entry.seq != GONE:
                    if not bucket and len(levels) > 1:
                        del buckets[heapq.heappop(levels)]
                    # _forget() and _compact_if_sparse(), inlined on the hottest path.
                    del self.entries[entry.future]
                    entry.seq = GONE
                    if entry.deadline is not None:
                        self.deadline_count -= 1
                        self._compact_if_sparse()
                    elif self.stored > 2 * len(self.entries) + COMPACT_SLACK:
                        self._compact_if_sparse()
                    return entry
            if len(levels) == 1:
                break  # keep the last bucket: the next push will most likely reuse it
            del buckets[heapq.heappop(levels)]
        return None

    def remove(self, entry: Entry) -> None:
        """Forget a queued entry; it stays in its bucket as a tombstone."""
        self._forget(entry)
        self._compact_if_sparse()

    def requeue(self, entry: Entry, key: Number) -> Entry:
        """Move a queued entry to ``key``, behind the entries already there; return its successor.

        The old entry becomes a tombstone and the task continues in a new entry, so that no
        bucket ever holds one entry twice. The deadline is kept.
        """
        self._forget(entry)
        successor = Entry(*entry.take(), entry.priority, entry.deadline)
        self.push(successor, key)
        self._compact_if_sparse()
        return successor

    def find(self, future: Future[Any]) -> Optional[Entry]:
        """The queued entry of ``future``, or None if it is not queued here."""
        return self.entries.get(future)

    def next_deadline(self) -> Optional[float]:
        """The earliest deadline among queued entries, or None if none has one."""
        deadlines = self.deadlines
        while deadlines:
            deadline, _seq, entry = deadlines[0]
            if entry.seq != GONE:
                return deadline
            heapq.heappop(deadlines)
        return None

    def pop_due(self, now: float) -> list[Entry]:
        """Remove and return every queued entry whose deadline has come at ``now``."""
        due = []
        deadlines = self.deadlines
        while deadlines and is_due(deadlines[0][0], now):
            _deadline, _seq, entry = heapq.heappop(deadlines)
            if entry.seq != GONE:
                self._forget(entry)
                due.append(entry)
        self._compact_if_sparse()
        return due

    def drain(self) -> list[Entry]:
        """Remove and return every queued entry, best first."""
        drained = []
        for key in sorted(self.levels):
            drained.extend(entry for entry in self.buckets[key] if entry.seq != GONE)
        for entry in drained:
            self._forget(entry)
        self.levels.clear()
        self.buckets.clear()
        self.stored = 0
        self.deadlines.clear()
        return drained

    def _forget(self, entry: Entry) -> None:
        del self.entries[entry.future]
        entry.seq = GONE
        if entry.deadline is not None:
            self.deadline_count -= 1

    def _compact_if_sparse(self) -> None:
        # Each sweep is paid for by the removals that made the tombstones: O(1) amortised.
        if len(self.deadlines) > 2 * self.deadline_count + COMPACT_SLACK:
            self.deadlines = [item for item in self.deadlines if item[2].seq != GONE]
            heapq.heapify(self.deadlines)
        if self.stored > 2 * len(self.entries) + COMPACT_SLACK:
            for key, bucket in list(self.buckets.items()):
                live = deque(entry for entry in bucket if entry.seq != GONE)
                if live:
                    self.buckets[key] = live
                else:
                    del self.buckets[key]
            self.levels = list(self.buckets)
            heapq.heapify(self.levels)
            self.stored = len(self.entries)

    def _check_invariants(self) -> None:
        """Check every invariant of the module docstring in O(n); raise AssertionError if not."""
        levels = self.levels
        for i in range(1, len(levels)):
            assert levels[(i - 1) // 2] <= levels[i], f"level heap broken at {i}"
        assert sorted(levels) == sorted(self.buckets), "levels differ from buckets"
        assert len(set(levels)) == len(levels), "a level is listed twice"
        live: list[Entry] = []
        assert sum(not bucket for bucket in self.buckets.values()) <= 1, "empty buckets pile up"
        for key, bucket in self.buckets.items():
            seqs = [entry.seq for entry in bucket if entry.seq != GONE]
            assert seqs == sorted(seqs), f"bucket {key!r} is not in submission order"
            live.extend(entry for entry in bucket if entry.seq != GONE)
            assert all(entry.key == key for entry in bucket if entry.seq != GONE), "wrong bucket"
        assert self.stored == sum(map(len, self.buckets.values())), "stored count is off"
        assert len({id(entry) for entry in live}) == len(live), "an entry is queued twice"
        assert len(live) == len(self.entries), "live count differs from the buckets"
        seqs = [entry.seq for entry in live]
        assert len(set(seqs)) == len(seqs), "sequence numbers repeat"
        for entry in live:
            assert self.entries.get(entry.future) is entry, "live entry missing from entries"
            assert 0 <= entry.seq < self.next_seq, "sequence number out of range"
            assert not entry.future.done(), "a queued task's future is already done"
        deadlines = self.deadlines
        for i in range(1, len(deadlines)):
            assert deadlines[(i - 1) // 2][:2] <= deadlines[i][:2], f"deadline heap broken at {i}"
        live_items = [item for item in deadlines if item[2].seq != GONE]
        with_deadline = [entry for entry in live if entry.deadline is not None]
        assert len(live_items) == len(with_deadline) == self.deadline_count, "deadline count"
        assert {id(item[2]) for item in live_items} == {id(e) for e in with_deadline}
        assert all(item[0] == item[2].deadline for item in live_items), "deadline changed"
        assert self.stored <= 2 * len(self.entries) + COMPACT_SLACK, "buckets not compacted"
        assert len(deadlines) <= 2 * self.deadline_count + COMPACT_SLACK, "deadlines not compacted"
