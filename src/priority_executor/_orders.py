"""The two orderings of the queue, over :class:`~._queue.QueueBase` (see its docstring).

:class:`TaskQueue`, for strict priority, keeps one FIFO ``deque`` per distinct rank and a
small heap of those ranks; :class:`HeapQueue`, for ageing, where every entry has its own rank,
is one heap of ``(rank, seq, entry)``. Both are plain data, guarded by the pool's lock.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Optional

from . import _queue  # _queue.COMPACT_SLACK is read at each use: tests vary it
from ._policy import Number
from ._queue import Entry, QueueBase


class TaskQueue(QueueBase):
    """Strict priority: a FIFO bucket per rank, and a heap of the ranks."""

    def __init__(self, track_worst: bool = True) -> None:
        super().__init__()
        self.levels: list[Number] = []
        self.buckets: dict[Number, deque[Entry]] = {}
        # With eviction, a max-heap of the levels (negated ranks; stale ones are skipped), so
        # that finding the worst entry costs O(log L), not a sort of every level.
        self.top: Optional[list[Number]] = [] if track_worst else None
        self.hollow = 0  # empty buckets left by worst(), at most; see the module docstring

    def _store(self, entry: Entry) -> bool:
        bucket = self.buckets.get(entry.rank)
        first = False
        if bucket is None:
            # Only a new level can go first: levels[0] is the smallest rank of every bucket.
            first = bool(self.entries) and entry.rank < self.levels[0]
            bucket = self.buckets[entry.rank] = deque()
            heapq.heappush(self.levels, entry.rank)
            if self.top is not None:
                self._list_as_worst(entry.rank)
        elif self.top is not None and not bucket:
            self._list_as_worst(entry.rank)  # worst() may have skipped it while it was empty
        bucket.append(entry)
        return first

    def _list_as_worst(self, rank: Number) -> None:
        top = self.top
        assert top is not None
        if len(top) > 2 * len(self.levels) + _queue.COMPACT_SLACK:
            # Stale and repeated ranks: rebuild from the levels, in O(L) once per L pushes.
            self.top = top = [-level for level in self.levels]
            heapq.heapify(top)
        heapq.heappush(top, -rank)

    def pop(self) -> Optional[Entry]:
        """Remove and return the best live entry, or None when nothing is queued."""
        levels = self.levels
        buckets = self.buckets
        while levels:
            bucket = buckets[levels[0]]
            while bucket:
                entry = bucket.popleft()
                self.stored -= 1
                if entry.queued:
                    if not bucket and len(levels) > 1:
                        del buckets[heapq.heappop(levels)]
                    # _forget() and the sweep check, inlined on the hottest path.
                    del self.entries[entry.future]
                    by_priority = self.by_priority  # _uncount(), inlined
                    left = by_priority[entry.priority] = by_priority[entry.priority] - 1
                    if not left and len(by_priority) > _queue.KEEP_ZEROS:
                        del by_priority[entry.priority]
                    entry.queued = False
                    if entry.deadline is not None:
                        self.deadline_count -= 1
                        self._compact_if_sparse()
                    elif self.stored > 2 * len(self.entries) + _queue.COMPACT_SLACK:
                        self._compact_if_sparse()
                    return entry
            if len(levels) == 1:
                break  # keep the last bucket: the next push will most likely reuse it
            del buckets[heapq.heappop(levels)]
        return None

    def peek(self) -> Optional[Entry]:
        """The entry :meth:`pop` would return, left queued."""
        levels, buckets = self.levels, self.buckets
        while levels:
            bucket = buckets[levels[0]]
            while bucket and not bucket[0].queued:
                bucket.popleft()
                self.stored -= 1
            if bucket:
                return bucket[0]
            if len(levels) == 1:
                break  # kept for the next push, as pop() keeps it
            del buckets[heapq.heappop(levels)]
        return None

    def worst(self) -> Optional[Entry]:
        """The live entry that would run last, or None: O(log L) amortised, with eviction."""
        top = self.top
        assert top is not None, "worst() needs a queue made with track_worst=True"
        buckets = self.buckets
        while top:
            bucket = buckets.get(-top[0])
            if bucket is None:  # a level that has gone since
                heapq.heappop(top)
                continue
            # Tombstones at the tail of the worst bucket go now, so that evicting one task
            # after another costs O(1) each, not a rescan of the ones evicted before.
            while bucket and not bucket[-1].queued:
                bucket.pop()
                self.stored -= 1
            if bucket:
                return bucket[-1]
            # Empty: leave it (removing a rank from the middle of ``levels`` costs O(L)) and
            # skip it from now on; drop all such buckets at once when they add up.
            heapq.heappop(top)
            self.hollow += 1
            if self.hollow > len(buckets) // 2 + _queue.COMPACT_SLACK:
                self._drop_empty_buckets()
        return None

    def _recount(self) -> None:
        self._drop_empty_buckets()  # and rebuild the level heaps, which push may have cut short
        self.stored = sum(map(len, self.buckets.values()))

    def _drop_empty_buckets(self) -> None:
        """Remove every empty bucket, in O(L)."""
        for rank in [rank for rank, bucket in self.buckets.items() if not bucket]:
            del self.buckets[rank]
        self._rebuild_levels()

    def _rebuild_levels(self) -> None:
        self.levels = list(self.buckets)
        heapq.heapify(self.levels)
        if self.top is not None:
            self.top = [-rank for rank in self.levels]
            heapq.heapify(self.top)
        self.hollow = 0

    def _live_in_order(self) -> list[Entry]:
        return [
            entry for rank in sorted(self.levels) for entry in self.buckets[rank] if entry.queued
        ]

    def _sweep(self) -> None:
        for rank, bucket in list(self.buckets.items()):
            live = deque(entry for entry in bucket if entry.queued)
            if live:
                self.buckets[rank] = live
            else:
                del self.buckets[rank]
        self._rebuild_levels()

    def _check_order(self) -> list[Entry]:
        levels = self.levels
        for i in range(1, len(levels)):
            assert levels[(i - 1) // 2] <= levels[i], f"level heap broken at {i}"
        assert sorted(levels) == sorted(self.buckets), "levels differ from buckets"
        assert len(set(levels)) == len(levels), "a level is listed twice"
        empty = sum(not bucket for bucket in self.buckets.values())
        assert empty <= self.hollow + 1, "empty buckets pile up"
        if self.top is not None:
            top = self.top
            for i in range(1, len(top)):
                assert top[(i - 1) // 2] <= top[i], f"worst-level heap broken at {i}"
            listed = {-rank for rank in top}
            # A level emptied by worst() may have left ``top``; every other must be in it.
            missing = [k for k in levels if k not in listed and self.buckets[k]]
            assert not missing, "a level with tasks is missing from the worst-level heap"
        assert self.stored == sum(map(len, self.buckets.values())), "stored count is off"
        live = []
        for rank, bucket in self.buckets.items():
            for entry in bucket:
                if entry.queued:
                    assert entry.rank == rank, "an entry sits in the wrong bucket"
                    live.append(entry)
        return live


class HeapQueue(QueueBase):
    """Any ranks, such as ageing's ``queued_at - priority * ageing``: one heap of all entries."""

    def _heap_seqs(self) -> list[int]:
        return [item[1] for item in self.heap]

    def __init__(self, track_worst: bool = True) -> None:
        super().__init__()
        self.heap: list[tuple[Number, int, Entry]] = []
        # With eviction, a second heap finds the worst entry in O(log n) instead of O(n).
        self.worst_heap: Optional[list[tuple[Number, int, Entry]]] = [] if track_worst else None

    def _store(self, entry: Entry) -> bool:
        first = bool(self.entries) and entry.rank < self.heap[0][0]
        seq = self._next_seq()
        heapq.heappush(self.heap, (entry.rank, seq, entry))
        if self.worst_heap is not None:
            heapq.heappush(self.worst_heap, (-entry.rank, -seq, entry))
        return first

    def pop(self) -> Optional[Entry]:
        """Remove and return the best live entry, or None when nothing is queued."""
        heap = self.heap
        while heap:
            _key, _seq, entry = heapq.heappop(heap)
            self.stored -= 1
            if entry.queued:
                self._forget(entry)
                self._compact_if_sparse()
                return entry
        return None

    def peek(self) -> Optional[Entry]:
        """The entry :meth:`pop` would return, left queued."""
        heap = self.heap
        while heap and not heap[0][2].queued:
            heapq.heappop(heap)
            self.stored -= 1
        return heap[0][2] if heap else None

    def _compact_if_sparse(self) -> None:
        super()._compact_if_sparse()
        worst = self.worst_heap
        if worst is not None and len(worst) > 2 * len(self.entries) + _queue.COMPACT_SLACK:
            self.worst_heap = [item for item in worst if item[2].queued]
            heapq.heapify(self.worst_heap)

    def worst(self) -> Optional[Entry]:
        """The live entry that would run last, or None: O(log n) amortised, with eviction."""
        assert self.worst_heap is not None, "worst() needs a queue made with track_worst=True"
        while self.worst_heap and not self.worst_heap[0][2].queued:
            heapq.heappop(self.worst_heap)
        return self.worst_heap[0][2] if self.worst_heap else None

    def _recount(self) -> None:
        heapq.heapify(self.heap)  # a sweep may have stopped before its heapify
        if self.worst_heap is not None:
            heapq.heapify(self.worst_heap)
        self.stored = len(self.heap)

    def _live_in_order(self) -> list[Entry]:
        return [item[2] for item in sorted(self.heap) if item[2].queued]

    def _sweep(self) -> None:
        self.heap = [item for item in self.heap if item[2].queued]
        heapq.heapify(self.heap)

    def _check_order(self) -> list[Entry]:
        heap = self.heap
        for i in range(1, len(heap)):
            assert heap[(i - 1) // 2][:2] <= heap[i][:2], f"heap property broken at {i}"
        assert self.stored == len(heap), "stored count is off"
        if self.worst_heap is not None:
            worst = self.worst_heap
            for i in range(1, len(worst)):
                assert worst[(i - 1) // 2][:2] <= worst[i][:2], f"worst heap broken at {i}"
            in_worst = [item[2] for item in worst if item[2].queued]
            assert {id(e) for e in in_worst} == {id(item[2]) for item in heap if item[2].queued}
            assert len(worst) <= 2 * len(self.entries) + _queue.COMPACT_SLACK, (
                "worst heap not swept"
            )
        live = [item[2] for item in heap if item[2].queued]
        assert all(item[0] == item[2].rank for item in heap if item[2].queued), "rank changed"
        return live
