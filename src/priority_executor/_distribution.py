"""Distributions of durations: a log-linear histogram, recorded in O(1), read as quantiles.

A scheduler records how long each task waited and ran. Keeping every value would grow with the
tasks; keeping a sample would lose the tail that matters. So each value is counted in one bucket
of a fixed log-linear layout, as HdrHistogram does: every power of two from ``LOWEST`` (2**-20
s, about 0.95 µs) up to 2**12 s (about 68 minutes) is split into ``SUB_BUCKETS`` equal parts.
A bucket is then at most 1/32 of its lower bound wide, so its midpoint is within 1/64 (1.6 %)
of any value in it: a quantile is the midpoint of the bucket that holds it, clamped to the
exact minimum and maximum. Values below ``LOWEST`` (zero waits among them) share one bucket,
values from 2**12 s up another; for those a quantile is only bounded by the minimum and
maximum.

Recording is one list append: values are counted in their buckets a sorted batch at a time
(``BATCH``), so no more than a batch is ever held.
``count``, ``total``, ``min`` and ``max`` are kept exactly beside the buckets.

:class:`Histogram` is the mutable recorder, guarded by its scheduler's lock;
:class:`Distribution` is the frozen snapshot users read, subtract (an interval between two
snapshots) and add (a merge).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from typing import Optional

#: Linear sub-buckets per power of two: a midpoint is within 1/(2 * SUB_BUCKETS) of its values.
SUB_BUCKETS = 32
#: The lowest value with a bucket of its own, in seconds (2**-20, about 0.95 µs).
LOWEST = 2.0**-20
#: The powers of two covered, from LOWEST: up to 2**12 s, about 68 minutes.
OCTAVES = 32
#: Buckets: one below LOWEST, SUB_BUCKETS per octave, one at 2**12 s and above.
BUCKETS = OCTAVES * SUB_BUCKETS + 2
_TOP = BUCKETS - 1

#: The bucket bounds the exporters (``prometheus``, ``otel``) report, in seconds: suited to
#: queue waits, from 1 µs to an hour (not the 10 s at which the usual default ones stop).
EXPORT_BOUNDS = (
    1e-6, 1e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
# frexp(LOWEST) == (0.5, -19): bucket 1 starts there. For value = m * 2**e (0.5 <= m < 1):
# index = e * SUB_BUCKETS + int(m * 2 * SUB_BUCKETS) + _OFFSET.
_OFFSET = 1 + 19 * SUB_BUCKETS - SUB_BUCKETS


def bucket_of(value: float) -> int:
    """The index of the bucket that counts ``value`` in seconds (below LOWEST, negatives too: 0)."""
    if value < LOWEST:
        return 0
    m, e = math.frexp(value)
    index = e * SUB_BUCKETS + int(m * (2 * SUB_BUCKETS)) + _OFFSET
    return index if index < _TOP else _TOP


def bucket_bounds(index: int) -> tuple[float, float]:
    """The values ``[low, high)`` that bucket ``index`` counts (the outer two are open-ended)."""
    if index <= 0:
        return 0.0, LOWEST
    if index >= _TOP:
        return math.ldexp(LOWEST, OCTAVES), math.inf
    octave, sub = divmod(index - 1, SUB_BUCKETS)
    base = math.ldexp(LOWEST, octave)
    return base * (1 + sub / SUB_BUCKETS), base * (1 + (sub + 1) / SUB_BUCKETS)


#: Each bucket's upper bound (open): where the next bucket starts.
_UPPER = tuple(bucket_bounds(index)[1] for index in range(BUCKETS))


#: Values a Histogram holds as they came before it counts them in its buckets. Counting a
#: sorted batch takes one ``bisect`` per bucket the batch spans, where counting values one by
#: one takes a bucket computation each: recording a task is then one list append.
BATCH = 512


class Histogram:
    """A distribution being recorded; not thread-safe: its scheduler's lock guards it.

    ``add(value)`` (a bound ``list.append``: no Python frame) records one value, in seconds;
    whoever adds calls :meth:`fold` once ``pending`` holds ``BATCH`` values or more, so that
    a histogram never holds more than that many values. A negative value (a clock gone back)
    counts as zero.
    """

    __slots__ = ("_count", "add", "buckets", "max", "min", "pending", "total")

    def __init__(self) -> None:
        self.buckets = [0] * BUCKETS
        self._count = 0  # folded into the buckets
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf
        self.pending: list[float] = []
        self.add = self.pending.append

    @property
    def count(self) -> int:
        """The values recorded, folded or pending."""
        return self._count + len(self.pending)

    def record(self, value: float) -> None:
        """Record one value, folding a full batch (``Tally.ran`` adds to two at once instead)."""
        self.add(value)
        if len(self.pending) >= BATCH:
            self.fold()

    def fold(self) -> None:
        """Count the pending values: in the buckets, ``count``, ``total``, ``min`` and ``max``."""
        pending = self.pending
        if not pending:
            return
        pending.sort()
        n = len(pending)
        negative = bisect_left(pending, 0.0)  # a clock gone back: counted as zero
        self.total += math.fsum(pending[negative:]) if negative else math.fsum(pending)
        self.min = min(self.min, max(pending[0], 0.0))
        self.max = max(self.max, pending[-1], 0.0)
        buckets, start = self.buckets, 0
        while start < n:
            index = bucket_of(pending[start])  # bucket 0 for a negative value too
            end = n if index == _TOP else bisect_left(pending, _UPPER[index], start)
            buckets[index] += end - start
            start = end
        self._count += n
        pending.clear()

    def snapshot(self) -> Distribution:
        """A frozen copy of what was recorded so far."""
        self.fold()
        if not self._count:
            return EMPTY
        return Distribution(tuple(self.buckets), self._count, self.total, self.min, self.max)


class Distribution:
    """A frozen distribution of durations in seconds: exact count, total, min, max and mean,
    and quantiles within 1.6 % for values from about 1 µs to an hour.

    Read from ``statistics()``: ``st.wait[priority]`` and ``st.run[priority]``. ``later -
    earlier`` is the distribution of what was recorded between two snapshots of the same
    scheduler; ``a + b`` merges two. An empty distribution has ``count == 0``, ``total ==
    0.0``, and None for ``min``, ``max``, ``mean`` and every quantile: it never makes a
    number up. The ``min`` and ``max`` of a difference are not known exactly: they are those
    of its lowest and highest buckets, within the later snapshot's.
    """

    __slots__ = ("_buckets", "_max", "_min", "count", "total")

    _buckets: tuple[int, ...]
    _min: float  # exact; meaningless while count == 0
    _max: float
    #: How many values were recorded.
    count: int
    #: Their sum, in seconds.
    total: float

    def __init__(
        self, buckets: Sequence[int], count: int, total: float, minimum: float, maximum: float
    ) -> None:
        object.__setattr__(self, "_buckets", tuple(buckets))
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "_min", minimum)
        object.__setattr__(self, "_max", maximum)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Distribution is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Distribution is frozen: cannot delete {name!r}")

    @property
    def min(self) -> Optional[float]:
        """The smallest value, in seconds; None if empty."""
        return self._min if self.count else None

    @property
    def max(self) -> Optional[float]:
        """The largest value, in seconds; None if empty."""
        return self._max if self.count else None

    @property
    def mean(self) -> Optional[float]:
        """The exact mean, in seconds; None if empty."""
        return self.total / self.count if self.count else None

    @property
    def buckets(self) -> tuple[tuple[float, int], ...]:
        """``(upper bound, count)`` of every non-empty bucket, lowest first (for exporters)."""
        return tuple((bucket_bounds(index)[1], n) for index, n in enumerate(self._buckets) if n)

    def quantile(self, q: float) -> Optional[float]:
        """The ``q``-quantile (nearest rank), in seconds; None if empty.

        ``quantile(0)`` is the minimum and ``quantile(1)`` the maximum, exactly.

        Raises:
            ValueError: ``q`` is not a number from 0 to 1.
        """
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
            raise ValueError(f"q must be a number from 0 to 1, got {q!r}")
        if not self.count:
            return None
        if q == 0:
            return self._min
        if q == 1:
            return self._max
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index, n in enumerate(self._buckets):
            seen += n
            if seen >= rank:
                return self._estimate(index)
        return self._max  # not reached: the buckets hold count values

    def at_most(self, bounds: Sequence[float]) -> list[int]:
        """How many values are at most each of ``bounds`` (ascending), as exporters count them.

        A value counts as its bucket's estimate (the one quantiles give): exact where a
        bound falls between buckets, within 1.6 % of the bound otherwise.
        """
        counts, seen, index = [], 0, 0
        buckets = self._buckets
        for bound in bounds:
            while index < len(buckets) and (not buckets[index] or self._estimate(index) <= bound):
                seen += buckets[index]
                index += 1
            counts.append(seen)
        return counts

    def _estimate(self, index: int) -> float:
        """The midpoint of bucket ``index``, within the exact minimum and maximum."""
        low, high = bucket_bounds(index)
        middle = (low + high) / 2 if high != math.inf else low
        return min(max(middle, self._min), self._max)

    @property
    def p50(self) -> Optional[float]:
        """The median, in seconds; None if empty."""
        return self.quantile(0.5)

    @property
    def p90(self) -> Optional[float]:
        """The 90th percentile, in seconds; None if empty."""
        return self.quantile(0.9)

    @property
    def p99(self) -> Optional[float]:
        """The 99th percentile, in seconds; None if empty."""
        return self.quantile(0.99)

    def __add__(self, other: Distribution) -> Distribution:
        if not isinstance(other, Distribution):
            return NotImplemented
        if not other.count:
            return self
        if not self.count:
            return other
        return Distribution(
            [a + b for a, b in zip(self._buckets, other._buckets, strict=True)],
            self.count + other.count,
            self.total + other.total,
            min(self._min, other._min),
            max(self._max, other._max),
        )

    def __sub__(self, earlier: Distribution) -> Distribution:
        """What was recorded after ``earlier`` and up to this snapshot.

        Raises:
            ValueError: ``earlier`` holds values this one does not (not an earlier snapshot
                of the same distribution).
        """
        if not isinstance(earlier, Distribution):
            return NotImplemented
        if not earlier.count:  # such as a class with no record yet: all of this one, exactly
            return self
        buckets = [a - b for a, b in zip(self._buckets, earlier._buckets, strict=True)]
        if any(n < 0 for n in buckets) or earlier.count > self.count:
            raise ValueError("the distribution subtracted is not an earlier snapshot of this one")
        count = self.count - earlier.count
        if not count:
            return EMPTY
        nonempty = [index for index, n in enumerate(buckets) if n]
        low = bucket_bounds(nonempty[0])[0]
        high = bucket_bounds(nonempty[-1])[1]
        return Distribution(
            buckets,
            count,
            max(self.total - earlier.total, 0.0),
            min(max(low, self._min), self._max),
            min(high, self._max),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Distribution):
            return NotImplemented
        return (self._buckets, self.count, self.total, self.min, self.max) == (
            other._buckets,
            other.count,
            other.total,
            other.min,
            other.max,
        )

    def __hash__(self) -> int:
        return hash((self._buckets, self.count, self.total))

    def __repr__(self) -> str:
        if not self.count:
            return "<Distribution empty>"
        return (
            f"<Distribution count={self.count} mean={self.mean:.6g} p50={self.p50:.6g}"
            f" p99={self.p99:.6g} max={self.max:.6g}>"
        )


#: The distribution with nothing recorded.
EMPTY = Distribution([0] * BUCKETS, 0, 0.0, math.inf, -math.inf)
