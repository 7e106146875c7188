"""The queue of waiting tasks: a heap ordered by priority, and a heap of deadlines.

The queue is plain data with no lock and no thread: the executor's lock guards every call.
It can therefore be driven, and its invariants checked, from a single-threaded test.

Removal is lazy. A task that leaves the queue other than through :meth:`TaskQueue.pop`
(cancelled by its user, expired, drained by shutdown) is forgotten at once, so the count of
live tasks is always exact, but its heap item stays behind as a tombstone until a pop skips it
or a compaction sweeps it away. A compaction runs when tombstones outnumber live items by
more than ``COMPACT_SLACK``, so each heap stays within twice its live size plus a constant and
the sweep costs O(1) amortised per removal.

Invariants, checked by :meth:`TaskQueue._check_invariants`:

* every heap item is ``(key, seq, entry)`` and both heaps have the heap property;
* an item is live iff ``item[1] == item[2].seq``; each live entry has exactly one live item in
  the task heap, and one in the deadline heap iff it has a deadline;
* ``entries`` maps each live entry's future to that entry, so ``len(entries)`` is the live count;
* sequence numbers are unique and below ``next_seq``;
* ``len(heap) <= 2 * live + COMPACT_SLACK`` (likewise for deadlines) after every operation.
"""

from __future__ import annotations

import heapq
import itertools
from concurrent.futures import Future
from typing import Any, Callable, Optional

from ._policy import Number, is_due

#: Tombstones tolerated beyond the live count before a heap is rebuilt.
COMPACT_SLACK = 64

#: ``Entry.seq`` of an entry that is no longer queued.
GONE = -1


class Entry:
    """One submitted task, from ``submit`` until a worker takes it."""

    __slots__ = ("args", "deadline", "fn", "future", "kwargs", "priority", "seq")

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
        self.seq = GONE

    def take(self) -> tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """Hand over the task to whoever removed this entry from the queue.

        The entry keeps nothing afterwards, so a tombstone of it left in a heap holds neither
        the callable, nor its arguments, nor the future and its result.
        """
        task = self.future, self.fn, self.args, self.kwargs
        del self.future, self.fn, self.args, self.kwargs
        return task


_Item = tuple[Number, int, Entry]


class TaskQueue:
    """Queued entries, best first; see the module docstring for the invariants."""

    def __init__(self) -> None:
        self.heap: list[_Item] = []
        self.deadlines: list[tuple[float, int, Entry]] = []
        self.entries: dict[Future[Any], Entry] = {}
        self.deadline_count = 0
        self._counter = itertools.count()
        self.next_seq = 0

    def __len__(self) -> int:
        return len(self.entries)

    def push(self, entry: Entry, key: Number) -> None:
        """Queue ``entry`` behind every queued entry with the same key."""
        seq = entry.seq = next(self._counter)
        self.next_seq = seq + 1
        heapq.heappush(self.heap, (key, seq, entry))
        self.entries[entry.future] = entry
        if entry.deadline is not None:
            heapq.heappush(self.deadlines, (entry.deadline, seq, entry))
            self.deadline_count += 1

    def requeue(self, entry: Entry, key: Number) -> None:
        """Give a queued entry a new key; it goes behind the entries that already have that key."""
        seq = entry.seq = next(self._counter)
        self.next_seq = seq + 1
        heapq.heappush(self.heap, (key, seq, entry))
        self._compact_if_sparse()

    def pop(self) -> Optional[Entry]:
        """Remove and return the best live entry, or None when nothing is queued."""
        heap = self.heap
        while heap:
            _key, seq, entry = heapq.heappop(heap)
            if entry.seq == seq:
                self._forget(entry)
                if entry.deadline is not None:
                    self._compact_if_sparse()
                return entry
        return None

    def remove(self, entry: Entry) -> None:
        """Forget a queued entry; its heap items become tombstones."""
        self._forget(entry)
        self._compact_if_sparse()

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
        if due:
            self._compact_if_sparse()
        return due

    def drain(self) -> list[Entry]:
        """Remove and return every queued entry, best first."""
        drained = []
        while (entry := self.pop()) is not None:
            drained.append(entry)
        self.deadlines.clear()
        return drained

    def _forget(self, entry: Entry) -> None:
        del self.entries[entry.future]
        entry.seq = GONE
        if entry.deadline is not None:
            self.deadline_count -= 1

    def _compact_if_sparse(self) -> None:
        live = len(self.entries)
        if len(self.heap) > 2 * live + COMPACT_SLACK:
            self.heap = [item for item in self.heap if item[1] == item[2].seq]
            heapq.heapify(self.heap)
        if len(self.deadlines) > 2 * self.deadline_count + COMPACT_SLACK:
            self.deadlines = [item for item in self.deadlines if item[2].seq != GONE]
            heapq.heapify(self.deadlines)

    def _check_invariants(self) -> None:
        """Check every invariant of the module docstring in O(n); raise AssertionError if broken."""
        for heap in (self.heap, self.deadlines):
            for i in range(1, len(heap)):
                parent = heap[(i - 1) // 2]
                assert parent[:2] <= heap[i][:2], f"heap property broken at {i}"
        live_items = [item for item in self.heap if item[1] == item[2].seq]
        live_entries = [item[2] for item in live_items]
        assert len(set(map(id, live_entries))) == len(live_entries), "entry queued twice"
        assert len(live_entries) == len(self.entries), "live count differs from the heap"
        for entry in live_entries:
            assert self.entries.get(entry.future) is entry, "live entry missing from entries"
            assert 0 <= entry.seq < self.next_seq, "sequence number out of range"
            assert not entry.future.done(), "a queued task's future is already done"
        seqs = [item[1] for item in self.heap]
        assert len(set(seqs)) == len(seqs), "sequence numbers repeat"
        live_deadlines = [item for item in self.deadlines if item[2].seq != GONE]
        with_deadline = [e for e in live_entries if e.deadline is not None]
        assert len(live_deadlines) == len(with_deadline) == self.deadline_count, "deadline count"
        assert all(item[0] == item[2].deadline for item in live_deadlines), "deadline changed"
        assert len(self.heap) <= 2 * len(self.entries) + COMPACT_SLACK, "task heap not compacted"
        assert len(self.deadlines) <= 2 * self.deadline_count + COMPACT_SLACK, "deadlines not compacted"
