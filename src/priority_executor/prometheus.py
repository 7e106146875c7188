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
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Optional

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from ._distribution import EXPORT_BOUNDS, Distribution
from ._policy import Number
from ._recording import OUTCOMES, PriorityClass, count_by_class
from ._stats import ExecutorStatistics

#: The histograms' upper bounds, in seconds, for queue waits from 1 µs to an hour.
BUCKETS = EXPORT_BOUNDS

#: A pool's ``Tally.class_of``: the priority class under which a priority is reported.
ClassOf = Callable[[Number], PriorityClass]


class PoolCollector(Collector):
    """Collects the metrics of the module docstring from one or more pools."""

    def __init__(self, pool: Optional[Any] = None, *, name: Optional[str] = None) -> None:
        """``pool``: a ``PriorityThreadPoolExecutor`` or ``PriorityExecutor`` (or none yet);
        ``name``: its ``executor`` label (default: its thread name prefix, or ``"executor"``).
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
            if pool is not None:
                _fill(families, label, pool.statistics(), class_of)
        yield from families.values()

    def _families(self) -> dict[str, Any]:
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


def _fill(
    families: dict[str, Any], label: str, stats: ExecutorStatistics, class_of: ClassOf
) -> None:
    for priority_class, distribution in stats.wait.items():
        _histogram(families["wait"], [label, str(priority_class)], distribution)
    for priority_class, distribution in stats.run.items():
        _histogram(families["run"], [label, str(priority_class)], distribution)
    for priority_class, count in count_by_class(stats.queued_by_priority, class_of).items():
        families["queued"].add_metric([label, str(priority_class)], count)
    families["active"].add_metric([label], stats.running)
    families["workers"].add_metric([label], stats.workers)
    _outcomes(families["tasks"], label, stats.outcomes)


def _histogram(family: Any, labels: list[str], distribution: Distribution) -> None:
    cumulative = distribution.at_most(BUCKETS)
    buckets = [(_bound(b), n) for b, n in zip(BUCKETS, cumulative, strict=True)]
    buckets.append(("+Inf", distribution.count))
    family.add_metric(labels, buckets, sum_value=distribution.total)


def _outcomes(family: Any, label: str, outcomes: Mapping[PriorityClass, Mapping[str, int]]) -> None:
    for priority_class, counts in outcomes.items():
        for outcome in OUTCOMES:
            family.add_metric([label, str(priority_class), outcome], counts[outcome])


def _bound(value: float) -> str:
    return repr(float(value))


def _class_of(pool: Any) -> ClassOf:
    """``pool``'s ``Tally.class_of``: a thread pool's or a front's, or an asyncio scheduler's."""
    owner = getattr(pool, "_admission", None)
    return (owner.core if owner is not None else pool._core).tally.class_of  # type: ignore[no-any-return]


def _default_name(pool: Any) -> str:
    prefix = getattr(pool, "_thread_name_prefix", None)
    return prefix if isinstance(prefix, str) and prefix else "executor"
