"""A Prometheus collector for the package's executors (the ``prometheus`` extra).

    from prometheus_client import REGISTRY
    from priority_executor.prometheus import PoolCollector

    REGISTRY.register(PoolCollector(pool, name="api"))

Everything is read at scrape time from one ``statistics()`` snapshot per pool: the collector
costs the pool nothing per task. Several pools go in one collector (``collector.add(other,
name="batch")``), since a registry takes each metric name once. A collector holds its pools
weakly: a pool that is gone is no longer reported.

==================================  =========  =======  =======================================
metric                              kind       unit     labels
==================================  =========  =======  =======================================
``executor_queue_wait_seconds``     histogram  seconds  ``executor``, ``priority``
``executor_task_duration_seconds``  histogram  seconds  ``executor``, ``priority``
``executor_queued``                 gauge      tasks    ``executor``, ``priority``
``executor_active``                 gauge      tasks    ``executor``
``executor_workers``                gauge      threads  ``executor``
``executor_tasks_total``            counter    tasks    ``executor``, ``priority``, ``outcome``
==================================  =========  =======  =======================================

The ``priority`` label of every metric is the priority class of ``statistics()``: a task's
priority as a plain number for the first 16 distinct priorities, ``"other"`` for the rest,
so no metric has more than 17 series per executor, however many priorities are used; the
queued tasks of several priorities in ``"other"`` are summed.

The histograms' buckets (``BUCKETS``) run from 1 µs to an hour, read off the pool's own
histogram: a count at a bound is exact to the pool's resolution (1.6 %).

A collector reports a ``PriorityLimiter`` or an ``AsyncPriorityLimiter`` too (``add`` it as
a pool; default name ``"limiter"``), under metrics of its own, labelled ``limiter`` and
``priority`` as above:

================================  =========  =======  =========================================
metric                            kind       unit     what
================================  =========  =======  =========================================
``limiter_wait_seconds``          histogram  seconds  from ``acquire`` to the grant
``limiter_hold_seconds``          histogram  seconds  from the grant to the release
``limiter_waiting``               gauge      calls    waiting now, by ``priority``
``limiter_in_use``                gauge      units    held now (labelled ``limiter`` only)
``limiter_capacity``              gauge      units    the capacity (+Inf: none)
``limiter_requests_total``        counter    calls    ended, by ``priority`` and ``outcome``
================================  =========  =======  =========================================
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Optional

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from ._distribution import EXPORT_BOUNDS, Distribution
from ._grants import LIMITER_OUTCOMES, LimiterStatistics
from ._limiter_base import LimiterBase
from ._policy import Number
from ._recording import OUTCOMES, PriorityClass, count_by_class

#: The histograms' upper bounds, in seconds, for queue waits from 1 µs to an hour.
BUCKETS = EXPORT_BOUNDS

#: A pool's ``Tally.class_of``: the priority class under which a priority is reported.
ClassOf = Callable[[Number], PriorityClass]


class PoolCollector(Collector):
    """Collects the metrics of the module docstring from one or more pools."""

    def __init__(self, pool: Optional[Any] = None, *, name: Optional[str] = None) -> None:
        """``pool``: a ``PriorityThreadPoolExecutor``, ``PriorityExecutor``,
        ``AsyncPriorityScheduler`` or a limiter (or none yet); ``name``: its ``executor``
        label (default: its thread name prefix, or ``"executor"``), or its ``limiter`` label
        (default ``"limiter"``).
        """
        # Each pool with its label and its Tally.class_of, which holds no reference to it.
        self._pools: list[tuple[weakref.ReferenceType[Any], str, ClassOf]] = []
        if pool is not None:
            self.add(pool, name=name)

    def add(self, pool: Any, *, name: Optional[str] = None) -> None:
        """Report ``pool`` too, under ``name``.

        Raises:
            ValueError: a pool of this collector already has that name.
        """
        label = name if name is not None else _default_name(pool)
        if any(taken == label for _, taken, _ in self._pools):
            raise ValueError(f"this collector already reports an executor named {label!r}")
        self._pools.append((weakref.ref(pool), label, _class_of(pool)))

    def describe(self) -> list[Any]:
        """The metric names, for the registry's check that no other collector has them."""
        return list(self._families().values())

    def collect(self) -> Iterator[Any]:
        """One snapshot of every pool, as metric families."""
        families = self._families()
        for ref, label, class_of in self._pools:
            pool = ref()
            if pool is None:
                continue
            stats = pool.statistics()
            layout = LIMITER if isinstance(stats, LimiterStatistics) else POOL
            _fill(families, label, stats, class_of, layout)
        yield from families.values()

    def _families(self) -> dict[str, Any]:
        families = self._pool_families()
        if any(isinstance(ref(), LimiterBase) for ref, _, _ in self._pools):
            families.update(_limiter_families())
        return families

    def _pool_families(self) -> dict[str, Any]:
        by_priority = ["executor", "priority"]
        return {
            "wait": HistogramMetricFamily(
                "executor_queue_wait_seconds",
                "How long tasks waited in the queue, from submit to start.",
                labels=by_priority,
                unit="seconds",
            ),
            "run": HistogramMetricFamily(
                "executor_task_duration_seconds",
                "How long tasks ran, from start until their future was settled.",
                labels=by_priority,
                unit="seconds",
            ),
            "queued": GaugeMetricFamily(
                "executor_queued", "Tasks waiting in the queue now.", labels=by_priority
            ),
            "active": GaugeMetricFamily(
                "executor_active", "Tasks running now.", labels=["executor"]
            ),
            "workers": GaugeMetricFamily(
                "executor_workers",
                "Worker threads started and not exited (for a thread pool).",
                labels=["executor"],
            ),
            "tasks": CounterMetricFamily(
                "executor_tasks",
                "Tasks that ended (or were refused), by how.",
                labels=[*by_priority, "outcome"],
            ),
        }


def _limiter_families() -> dict[str, Any]:
    by_priority = ["limiter", "priority"]
    return {
        "limiter_wait": HistogramMetricFamily(
            "limiter_wait_seconds",
            "How long acquires waited, from acquire to grant.",
            labels=by_priority,
            unit="seconds",
        ),
        "limiter_hold": HistogramMetricFamily(
            "limiter_hold_seconds",
            "How long grants were held, from grant to release.",
            labels=by_priority,
            unit="seconds",
        ),
        "limiter_waiting": GaugeMetricFamily(
            "limiter_waiting", "Acquires waiting now.", labels=by_priority
        ),
        "limiter_in_use": GaugeMetricFamily(
            "limiter_in_use", "Units held now.", labels=["limiter"]
        ),
        "limiter_capacity": GaugeMetricFamily(
            "limiter_capacity", "The units held at most at once.", labels=["limiter"]
        ),
        "limiter_requests": CounterMetricFamily(
            "limiter_requests",
            "Acquires that ended, by how.",
            labels=[*by_priority, "outcome"],
        ),
    }


class Layout(NamedTuple):
    """Which fields of a snapshot fill which families: histograms by priority class, a
    gauge by priority class, gauges of totals, and a counter of outcomes."""

    histograms: tuple[tuple[str, str], ...]
    by_priority: tuple[str, str]
    totals: tuple[tuple[str, str], ...]
    counter: str
    outcomes: tuple[str, ...]


POOL = Layout(
    (("wait", "wait"), ("run", "run")),
    ("queued", "queued_by_priority"),
    (("active", "running"), ("workers", "workers")),
    "tasks",
    OUTCOMES,
)
LIMITER = Layout(
    (("limiter_wait", "wait"), ("limiter_hold", "hold")),
    ("limiter_waiting", "waiting_by_priority"),
    (("limiter_in_use", "in_use"), ("limiter_capacity", "capacity")),
    "limiter_requests",
    LIMITER_OUTCOMES,
)


def _fill(
    families: dict[str, Any], label: str, stats: Any, class_of: ClassOf, layout: Layout
) -> None:
    for family, field in layout.histograms:
        for priority_class, distribution in getattr(stats, field).items():
            _histogram(families[family], [label, str(priority_class)], distribution)
    family, field = layout.by_priority
    for priority_class, count in count_by_class(getattr(stats, field), class_of).items():
        families[family].add_metric([label, str(priority_class)], count)
    for family, field in layout.totals:
        families[family].add_metric([label], getattr(stats, field))
    _outcomes(families[layout.counter], label, stats.outcomes, layout.outcomes)


def _histogram(family: Any, labels: list[str], distribution: Distribution) -> None:
    cumulative = distribution.at_most(BUCKETS)
    buckets = [(_bound(b), n) for b, n in zip(BUCKETS, cumulative, strict=True)]
    buckets.append(("+Inf", distribution.count))
    family.add_metric(labels, buckets, sum_value=distribution.total)


def _outcomes(
    family: Any,
    label: str,
    outcomes: Mapping[PriorityClass, Mapping[str, int]],
    names: tuple[str, ...],
) -> None:
    for priority_class, counts in outcomes.items():
        for outcome in names:
            family.add_metric([label, str(priority_class), outcome], counts[outcome])


def _bound(value: float) -> str:
    return repr(float(value))


def _class_of(pool: Any) -> ClassOf:
    """``pool``'s ``Tally.class_of``: a thread pool's or a front's, an asyncio scheduler's,
    or a limiter's."""
    if isinstance(pool, LimiterBase):
        return pool._grants.core.tally.class_of
    owner = getattr(pool, "_admission", None)
    return (owner.core if owner is not None else pool._core).tally.class_of  # type: ignore[no-any-return]


def _default_name(pool: Any) -> str:
    if isinstance(pool, LimiterBase):
        return "limiter"
    prefix = getattr(pool, "_thread_name_prefix", None)
    return prefix if isinstance(prefix, str) and prefix else "executor"
