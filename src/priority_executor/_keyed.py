"""The keyed ordering: one lane per key, so that a key at its limit holds back only its own tasks.

With ``key_limit`` or ``key_rate_limit`` set, the queue is a :class:`KeyedQueue`. Each key
(``None`` for the tasks submitted without one) has a *lane*: a heap of ``(rank, seq, entry)``,
best first, where ``rank`` is the rank of the entry and ``seq`` its number in submission
order. A key whose limits hold its tasks back is *closed* (``closed``), the others are open.
The *ready* heap lists the head of every open lane that has live entries, so that the best
task that may start is ``ready[0]``: a pop costs O(log n), however many keys are closed and
however many tasks they hold. A closed lane keeps its entries in place; when its key opens
again, its head is listed again and competes with everything else by priority and then
submission order, as if it had never been held. This is the order rule of the README: the
task that starts is the best queued task that every limit allows now.

Lanes are made for a key's first queued task and dropped with its last, so a queue never
holds more lanes than keys with something queued. ``closed`` is the limits' business
(``_limits.Limits`` closes and opens keys); it holds no more keys than are at their limit.

Every lane heap item is also the one listed in ``ready`` (the same tuple), and each open lane
remembers which item of it is listed (``Lane.listed``): an item in ``ready`` that is not its
lane's ``listed`` is stale and skipped. ``ready`` is rebuilt once it holds more stale items
than ``COMPACT_SLACK`` beyond twice the number of lanes.

Invariants, beyond those of :class:`~._queue.QueueBase` (checked by ``_check_order``):

* each lane is a heap holding each of its stored items once; ``lane.live`` counts its live
  entries, which all have ``entry.key`` equal to the lane's key; no lane is empty of live
  entries; ``stored`` counts the items of every lane;
* an open lane's ``listed`` is its best live item, and is in ``ready``; a closed lane lists
  nothing; ``held`` is the number of live entries in closed lanes;
* with eviction, ``worst_heap`` holds ``(-rank, -seq, entry)`` of every live entry.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Optional

from . import _queue  # _queue.COMPACT_SLACK is read at each use: tests vary it
from ._policy import Number
from ._queue import Entry, QueueBase

Item = tuple[Number, int, Entry]


class Lane:
    """The queued tasks of one key: a heap of items, best first; see the module docstring."""

    __slots__ = ("closed", "heap", "listed", "live")

    def __init__(self, closed: bool) -> None:
        self.heap: list[Item] = []
        self.live = 0
        self.closed = closed
        self.listed: Optional[Item] = None  # the item of this lane in ``ready``, if open


class KeyedQueue(QueueBase):
    """A lane per key, and a heap of the heads of the open lanes; see the module docstring."""

    def __init__(self, track_worst: bool = True, closed: Optional[set[Hashable]] = None) -> None:
        super().__init__()
        self.lanes: dict[Hashable, Lane] = {}
        self.ready: list[Item] = []
        self.closed: set[Hashable] = set() if closed is None else closed
        self.held = 0
        self.worst_heap: Optional[list[Item]] = [] if track_worst else None

    # -- opening and closing keys, for the limits ------------------------------------------

    def close(self, key: Hashable) -> None:
        """Hold back the tasks of ``key`` (queued now or later) until :meth:`open`."""
        if key in self.closed:
            return
        self.closed.add(key)
        lane = self.lanes.get(key)
        if lane is not None:
            lane.closed = True
            lane.listed = None  # its item in ``ready`` is stale from now on
            self.held += lane.live

    def open(self, key: Hashable) -> bool:
        """Let the tasks of ``key`` start again; True if it has any queued."""
        if key not in self.closed:
            return False
        self.closed.discard(key)
        lane = self.lanes.get(key)
        if lane is None:
            return False
        lane.closed = False
        self.held -= lane.live
        self._list(lane)
        return True

    # -- the ordering ------------------------------------------------------------------------

    def _store(self, entry: Entry) -> bool:
        item = (entry.rank, self._next_seq(), entry)
        lane = self.lanes.get(entry.key)
        if lane is None:
            lane = self.lanes[entry.key] = Lane(entry.key in self.closed)
        heapq.heappush(lane.heap, item)
        lane.live += 1
        if self.worst_heap is not None:
            heapq.heappush(self.worst_heap, (-entry.rank, -item[1], entry))
        if lane.closed:
            self.held += 1
            return False
        listed = lane.listed
        if listed is not None and listed[:2] < item[:2]:
            return False
        # ready[0] is at most every open lane's head: going before it goes before them all.
        first = bool(self.ready) and item[:2] < self.ready[0][:2]
        self._list(lane, item)
        return first

    def _head(self, lane: Lane) -> Optional[Item]:
        """The best live item of ``lane``, dropping the tombstones above it; None if none."""
        heap = lane.heap
        while heap and not heap[0][2].queued:
            heapq.heappop(heap)
            self.stored -= 1
        return heap[0] if heap else None

    def _list(self, lane: Lane, item: Optional[Item] = None) -> None:
        """List ``item`` (default: the lane's head) in ``ready`` as the head of an open lane."""
        if item is None:
            item = self._head(lane)
        lane.listed = item
        if item is not None:
            self._bound_ready()
            heapq.heappush(self.ready, item)

    def _bound_ready(self) -> None:
        """Rebuild ``ready`` once stale items outnumber the lanes: O(1) amortised."""
        if len(self.ready) > 2 * len(self.lanes) + _queue.COMPACT_SLACK:
            self._rebuild_ready()

    def _rebuild_ready(self) -> None:
        self.ready = [lane.listed for lane in self.lanes.values() if lane.listed is not None]
        heapq.heapify(self.ready)

    def pop(self) -> Optional[Entry]:
        """Remove and return the best live entry of an open key, or None if there is none."""
        ready = self.ready
        lanes = self.lanes
        while ready:
            item = heapq.heappop(ready)
            entry = item[2]
            lane = lanes.get(entry.key) if entry.queued else None
            if lane is not None and lane.listed is item:
                self._take(lane, item)
                return entry
        return None

    def peek(self) -> Optional[Entry]:
        """The entry :meth:`pop` would return, left queued (stale ``ready`` items dropped)."""
        ready, lanes = self.ready, self.lanes
        while ready:
            entry = ready[0][2]
            lane = lanes.get(entry.key) if entry.queued else None
            if lane is not None and lane.listed is ready[0]:
                return entry
            heapq.heappop(ready)
        return None

    def pop_any(self) -> Optional[Entry]:
        """The best live entry whatever its key's limits (for ``_work_queue``); O(keys)."""
        heads = [(head, lane) for lane in self.lanes.values() if (head := self._head(lane))]
        if not heads:
            return None
        item, lane = min(heads, key=lambda pair: pair[0][:2])
        self._take(lane, item)
        return item[2]

    def _take(self, lane: Lane, item: Item) -> None:
        """Take ``item``, the best live item of ``lane``, out of the queue."""
        heap = lane.heap
        while heap[0] is not item:  # only tombstones rank above a lane's best live item
            heapq.heappop(heap)
            self.stored -= 1
        heapq.heappop(heap)
        self.stored -= 1
        self._forget(item[2])
        self._compact_if_sparse()

    def _forget(self, entry: Entry) -> None:
        super()._forget(entry)
        self._unqueued(entry)

    def _unqueued(self, entry: Entry) -> None:
        """``entry`` left its lane: count it out, list the next head, drop an empty lane."""
        lane = self.lanes[entry.key]
        lane.live -= 1
        if lane.closed:
            self.held -= 1
        if not lane.live:
            self.stored -= len(lane.heap)
            del self.lanes[entry.key]
        elif lane.listed is not None and lane.listed[2] is entry:
            self._list(lane)

    def requeue(self, entry: Entry, rank: Number, priority: Optional[Number] = None) -> Entry:
        # The lane loses the old entry and gains its successor, in super().requeue's push.
        # The successor is pushed first, so the lane is not dropped in between.
        successor = super().requeue(entry, rank, priority)
        self._unqueued(entry)
        return successor

    def worst(self) -> Optional[Entry]:
        """The live entry that would run last, whatever its key: O(log n) amortised."""
        worst = self.worst_heap
        assert worst is not None, "worst() needs a queue made with track_worst=True"
        while worst and not worst[0][2].queued:
            heapq.heappop(worst)
        return worst[0][2] if worst else None

    def _compact_if_sparse(self) -> None:
        super()._compact_if_sparse()
        self._bound_ready()
        worst = self.worst_heap
        if worst is not None and len(worst) > 2 * len(self.entries) + _queue.COMPACT_SLACK:
            self.worst_heap = [item for item in worst if item[2].queued]
            heapq.heapify(self.worst_heap)

    def _heap_seqs(self) -> list[int]:
        return [item[1] for lane in self.lanes.values() for item in lane.heap]

    def _items(self) -> list[Item]:
        return [item for lane in self.lanes.values() for item in lane.heap if item[2].queued]

    def _live_in_order(self) -> list[Entry]:
        return [item[2] for item in sorted(self._items(), key=lambda item: item[:2])]

    def _sweep(self) -> None:
        for lane in self.lanes.values():
            lane.heap = [item for item in lane.heap if item[2].queued]
            heapq.heapify(lane.heap)
        self._rebuild_ready()

    def _recount(self) -> None:
        """Recount every lane from what it holds, after an interrupted push; O(n)."""
        for key, lane in list(self.lanes.items()):
            lane.live = sum(item[2].queued for item in lane.heap)
            if not lane.live:
                del self.lanes[key]
            elif not lane.closed:
                lane.listed = self._head(lane)
        self.held = sum(lane.live for lane in self.lanes.values() if lane.closed)
        self.stored = sum(len(lane.heap) for lane in self.lanes.values())
        self._rebuild_ready()
        if self.worst_heap is not None:
            self.worst_heap = [(-item[0], -item[1], item[2]) for item in self._items()]
            heapq.heapify(self.worst_heap)

    def _check_order(self) -> list[Entry]:
        ready_ids = {id(item) for item in self.ready}
        held = 0
        for key, lane in self.lanes.items():
            heap = lane.heap
            for i in range(1, len(heap)):
                assert heap[(i - 1) // 2][:2] <= heap[i][:2], f"lane heap broken at {i}"
            live = [item for item in heap if item[2].queued]
            assert lane.live == len(live) > 0, "a lane's live count is off"
            assert all(item[2].key == key for item in live), "an entry in the wrong lane"
            assert all(item[0] == item[2].rank for item in live), "rank changed"
            assert lane.closed == (key in self.closed), "a lane closed differs from its key"
            if lane.closed:
                held += lane.live
                assert lane.listed is None, "a closed lane is listed as ready"
            else:
                best = min(live, key=lambda item: item[:2])
                assert lane.listed is best, "an open lane does not list its best task"
                assert id(best) in ready_ids, "an open lane's best task is not ready"
        assert held == self.held, "held count is off"
        assert self.stored == sum(len(lane.heap) for lane in self.lanes.values()), "stored"
        assert len(self.ready) <= 2 * len(self.lanes) + _queue.COMPACT_SLACK + 1, "ready"
        if self.worst_heap is not None:
            worst = self.worst_heap
            for i in range(1, len(worst)):
                assert worst[(i - 1) // 2][:2] <= worst[i][:2], f"worst heap broken at {i}"
            listed = {id(item[2]) for item in worst if item[2].queued}
            assert listed == {id(item[2]) for item in self._items()}, "worst heap is off"
        return [item[2] for item in self._items()]
