"""What a scheduler counts and times: outcomes, and wait and run time, per priority class.

Every scheduler of the package keeps one :class:`Tally`, guarded by its lock. Outcomes are
counted by priority class only, in one step each (:meth:`Tally.add`), and the pool-wide
counts that ``statistics()`` reports are their sums (:meth:`Tally.totals`): the
two cannot disagree, even when an exception (a signal handler's) cuts a count short.
:meth:`Tally.ran` records how long a task waited and how long it ran, when it ends.

A task's priority class is the priority it was last given (at submit or by
``set_priority``; ageing does not change it), as a plain number: ``Priority.HIGH`` and ``10``
are one class. The first ``MAX_CLASSES`` distinct priorities get a class each; tasks of any
other priority are recorded together under ``OTHER``, so a scheduler fed arbitrary float
priorities keeps a bounded state. A priority gets its class when a task of it first starts
or is first counted, or when ``statistics()`` first reports it queued (best first): it keeps
it for good, so every per-priority series of the exporters has at most ``MAX_CLASSES + 1``
keys, and a listener told of a task's start reads the class its times are recorded under.

Per class, ``outcomes`` counts ``completed``, ``failed``, ``cancelled`` (by the user, by
``shutdown(cancel_futures=True)``, by a broken pool, or by eviction), ``evicted`` (the part
of ``cancelled`` that eviction made), ``expired``, ``taken`` (out through ``_work_queue``) and
``rejected`` (refused by ``submit``). Only tasks that started are in ``wait`` and ``run``.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Optional, TypeVar, Union, overload

from ._distribution import BATCH, EMPTY, Distribution, Histogram
from ._policy import Number

#: Distinct priorities that get a class of their own; the rest are recorded under OTHER.
MAX_CLASSES = 16
#: The class under which tasks of priorities beyond the first MAX_CLASSES are recorded.
OTHER = "other"

#: A key of ``statistics().wait``, ``.run`` and ``.outcomes``: a priority, or OTHER.
PriorityClass = Union[int, float, str]

#: The outcomes counted per priority class, in the order they are reported.
OUTCOMES = ("completed", "failed", "cancelled", "evicted", "expired", "taken", "rejected")
#: The outcomes of a task gone for good (``evicted`` is counted in ``cancelled`` too).
ENDED = ("completed", "failed", "cancelled", "expired", "taken")
#: What an eviction counts: a cancel, and an eviction.
EVICTION = ("cancelled", "evicted")

T = TypeVar("T")


class Counts(Counter[str]):
    """A ``Counter`` whose ``counts[name] += 1`` stores straight into the dict.

    ``Counter`` defines ``__delitem__`` (it does not raise ``KeyError``), so the type's
    item-assignment slot, which deletion shares, looks ``__setitem__`` up by name and calls
    it as a method on every store. With ``dict``'s own ``__delitem__`` the slot is dict's
    again: ``Tally.ran`` counts every task so. Measured with ``benchmarks/instructions.py
    --contender ours --source ... --repeat 2``: 62.75k instructions per W1 task before
    (62,664 and 62,838), 62.12k after (62,199 and 62,049). The only difference: deleting
    a name that is not counted raises ``KeyError``; nothing deletes one.
    """

    __slots__ = ()
    __delitem__ = dict.__delitem__  # type: ignore[assignment]


class ClassFigures:
    """The figures of one priority class."""

    __slots__ = ("outcomes", "priority_class", "run", "wait")

    def __init__(self, priority_class: PriorityClass) -> None:
        self.priority_class = priority_class
        self.wait = Histogram()
        self.run = Histogram()
        # Every name present, so that counting never calls Counter.__missing__.
        self.outcomes: Counter[str] = Counts(dict.fromkeys(OUTCOMES, 0))


class Tally:
    """A scheduler's counts and timings; its lock guards every call (see the module docstring)."""

    __slots__ = ("classes", "other", "submitted")

    def __init__(self) -> None:
        self.submitted = 0  # accepted by submit (a withdrawn submit is taken off again)
        self.classes: dict[Number, ClassFigures] = {}
        self.other = ClassFigures(OTHER)

    def of(self, priority: Number) -> ClassFigures:
        """The class that records tasks of ``priority``."""
        figures = self.classes.get(priority)
        if figures is None:
            priority_class = self.class_of(priority)
            if priority_class is OTHER:
                return self.other
            figures = self.classes[priority] = ClassFigures(priority_class)
        return figures

    def classify(self, priorities: Iterable[Number]) -> None:
        """Give each of ``priorities`` a class, in order, while fewer than MAX_CLASSES exist.

        ``statistics()`` calls it with the queued priorities, best first: after it, every
        priority reported queued has the class it keeps for good (its own, or OTHER once
        the classes are all given), so the queued tasks counted by class
        (:func:`count_by_class`) never make more than MAX_CLASSES + 1 series.
        """
        classes = self.classes
        for priority in priorities:
            if len(classes) >= MAX_CLASSES:
                return
            self.of(priority)

    def class_of(self, priority: Number) -> PriorityClass:
        """The class under which tasks of ``priority`` are (or will be) recorded.

        It only reads, and classes are never removed, so an exporter may call it without
        the lock: a priority with a class keeps it.
        """
        figures = self.classes.get(priority)
        if figures is not None:
            return figures.priority_class
        return OTHER if len(self.classes) >= MAX_CLASSES else plain_priority(priority)

    def add(self, outcome: str, priority: Number) -> None:
        """Count a task of ``priority`` that ended as ``outcome`` (or was refused)."""
        self.of(priority).outcomes[outcome] += 1

    def add_each(self, outcome: str, priorities: Iterable[Number]) -> None:
        """Count one task of each of ``priorities`` as ``outcome``."""
        for priority in priorities:
            self.add(outcome, priority)

    def evicted(self, priority: Number) -> None:
        """Count an eviction: a cancel, and an eviction, in one update (both or neither)."""
        self.of(priority).outcomes.update(EVICTION)

    def evictions(self, priority: Number) -> int:
        """The evictions counted in the class of ``priority``."""
        return self.of(priority).outcomes["evicted"]

    def overtaken(self, priority: Number, outcome: str) -> None:
        """Count as ``outcome`` a task counted expired whose user settled its future first."""
        outcomes = self.of(priority).outcomes
        outcomes["expired"] -= 1
        outcomes[outcome] += 1

    def totals(self) -> dict[str, int]:
        """The pool-wide counts: ``submitted``, and each outcome summed over the classes."""
        totals = dict.fromkeys(OUTCOMES, 0)
        for figures in (*self.classes.values(), self.other):
            for name, n in figures.outcomes.items():
                totals[name] += n
        totals["submitted"] = self.submitted
        return totals

    def ended(self) -> int:
        """The tasks counted as gone for good: settled, or taken out through ``_work_queue``
        (not the pool's to run). Every other accepted task is queued, running or undecided."""
        totals = self.totals()
        return sum(totals[name] for name in ENDED)

    def ran(self, outcome: str, priority: Number, waited: float, ran: float) -> None:
        """A task of ``priority`` that waited ``waited`` seconds ran ``ran`` seconds to ``outcome``.

        Both times are recorded when it ends, not when it starts, so that a task taken to
        start whose claim its user's cancel won is in neither: ``wait[p].count`` is always the
        number of tasks of the class that ran to an end. NaN (the clock raised): neither.
        This is every task's path: a list append per time, a fold per ``BATCH`` tasks.
        """
        figures = self.classes.get(priority) or self.of(priority)
        figures.outcomes[outcome] += 1
        if waited == waited and ran == ran:
            wait, run = figures.wait, figures.run
            wait.add(waited)
            run.add(ran)
            if len(run.pending) >= BATCH:
                wait.fold()
                run.fold()

    def snapshot(
        self,
    ) -> tuple[
        Mapping[PriorityClass, Distribution],
        Mapping[PriorityClass, Distribution],
        Mapping[PriorityClass, Mapping[str, int]],
    ]:
        """``(wait, run, outcomes)`` by class, frozen: what ``statistics()`` reports."""
        classes = list(self.classes.values())
        if self.other.wait.count or self.other.run.count or any(self.other.outcomes.values()):
            classes.append(self.other)
        wait = {c.priority_class: c.wait.snapshot() for c in classes if c.wait.count}
        run = {c.priority_class: c.run.snapshot() for c in classes if c.run.count}
        outcomes = {
            c.priority_class: MappingProxyType({name: c.outcomes[name] for name in OUTCOMES})
            for c in classes
            if any(c.outcomes.values())
        }
        return PerClass(wait, EMPTY), PerClass(run, EMPTY), PerClass(outcomes, NO_OUTCOMES)

    def check(self) -> None:
        """Assert what holds of every class; O(classes)."""
        for c in (*self.classes.values(), self.other):
            assert set(c.outcomes) == set(OUTCOMES), "an outcome counted that is none"
            assert min(c.outcomes.values()) >= 0, "an outcome counted below zero"
            assert c.outcomes["evicted"] <= c.outcomes["cancelled"], "evicted, not cancelled"
            assert c.wait.count == c.run.count, "a wait without its run, or the reverse"
        assert len(self.classes) <= MAX_CLASSES, "more classes than MAX_CLASSES"


#: What ``statistics().outcomes[p]`` reads for a class with nothing counted.
NO_OUTCOMES: Mapping[str, int] = MappingProxyType(dict.fromkeys(OUTCOMES, 0))

V = TypeVar("V")


class PerClass(Mapping[PriorityClass, V]):
    """A frozen mapping by priority class in which a class with no record reads as empty.

    ``statistics().wait[p]`` of a priority ``p`` (any real number, or ``"other"``) that
    has nothing recorded is ``empty`` (a Distribution of count 0, or every outcome 0), so
    that ``later.wait[p] - earlier.wait[p]`` works before and after a task of ``p`` ran.
    Everything else reads only the recorded classes: iteration, ``len``, ``in``, ``keys``,
    ``items``, ``get`` (None for a class with no record) and equality. A key that cannot be
    a class (a string other than ``"other"``, None, NaN) raises ``KeyError``.
    """

    __slots__ = ("_empty", "_recorded")

    def __init__(self, recorded: Mapping[PriorityClass, V], empty: V) -> None:
        self._recorded = recorded
        self._empty = empty

    def __getitem__(self, key: PriorityClass) -> V:
        try:
            return self._recorded[key]
        except KeyError:
            if key == OTHER or (
                isinstance(key, numbers.Real) and not isinstance(key, bool) and key == key
            ):
                return self._empty
            raise

    def __contains__(self, key: object) -> bool:
        return key in self._recorded

    @overload
    def get(self, key: PriorityClass, /) -> Optional[V]: ...

    @overload
    def get(self, key: PriorityClass, /, default: Union[V, T]) -> Union[V, T]: ...

    def get(self, key: PriorityClass, /, default: object = None) -> object:
        return self._recorded.get(key, default)

    def __iter__(self) -> Iterator[PriorityClass]:
        return iter(self._recorded)

    def __len__(self) -> int:
        return len(self._recorded)

    def __repr__(self) -> str:
        return repr(self._recorded)


def count_by_class(
    counts: Mapping[Number, int], class_of: Callable[[Number], PriorityClass]
) -> dict[PriorityClass, int]:
    """``counts`` by priority (``statistics().queued_by_priority``) summed by priority class.

    The exporters' queued gauge: ``class_of`` is the pool's ``Tally.class_of``, and the
    snapshot gave every queued priority its class (:meth:`Tally.classify`), so there are at
    most MAX_CLASSES + 1 classes, the same for every snapshot.
    """
    by_class: dict[PriorityClass, int] = {}
    for priority, count in counts.items():
        priority_class = class_of(priority)
        by_class[priority_class] = (
            by_class.get(priority_class, 0) + count
        )  # several priorities may be OTHER
    return by_class


def plain_priority(priority: Number) -> PriorityClass:
    """``priority`` as a plain int or float (an IntEnum member becomes its int): a class."""
    if isinstance(priority, int):
        return int(priority)
    value = float(priority)
    return int(value) if value.is_integer() and math.isfinite(value) else value
