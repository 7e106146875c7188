"""OpenTelemetry metrics for the package's executors (the ``otel`` extra).

    from priority_executor.otel import instrument

    instrument(pool, name="api")  # the global MeterProvider, or meter_provider=...

==========================  ================  ====  ====================================
instrument                  kind              unit  attributes
==========================  ================  ====  ====================================
``executor.queue.wait``     histogram         s     ``executor.name``, ``priority``
``executor.task.duration``  histogram         s     ``executor.name``, ``priority``
``executor.queued``         gauge (async)     1     ``executor.name``, ``priority``
``executor.active``         gauge (async)     1     ``executor.name``
``executor.tasks``          counter (async)   1     ``executor.name``, ``priority``,
                                                    ``outcome``
==========================  ================  ====  ====================================

The ``priority`` attribute is the priority class of ``statistics()``: a task's priority as
a plain number for the first 16 distinct priorities, ``"other"`` for the rest, so no
instrument has more than 17 series per executor; the queued tasks of several priorities in
``"other"`` are summed.

OpenTelemetry's Python API has no asynchronous histogram, so the two histograms are recorded
per task, by a listener (``add_listener``) in the thread that starts or ends it: that cost
falls only on an instrumented pool. Their bucket boundaries (``BOUNDARIES``, 1 µs to an hour)
are given as advice to the SDK, whose default ones stop at 10 s. The rest is read from one
``statistics()`` snapshot per collection.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, Optional

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from ._distribution import EXPORT_BOUNDS
from ._listeners import ListenerHandle, TaskInfo
from ._recording import OUTCOMES, PriorityClass, count_by_class

#: The histograms' advised bucket boundaries, in seconds, from 1 µs to an hour.
BOUNDARIES = EXPORT_BOUNDS


class Instrumentation:
    """What :func:`instrument` set up; ``remove()`` stops recording and reporting the pool."""

    def __init__(self, pool: Any, name: str, meter: metrics.Meter) -> None:
        self._pool = weakref.ref(pool)
        self.name = name
        # Tasks are reported by the priority class the pool records them under (so at most
        # MAX_CLASSES + 1 series, whatever the priorities), each class's attributes made once.
        self._class_of = pool._admission.core.tally.class_of
        self._attributes_of: dict[PriorityClass, dict[str, Any]] = {}
        self._removed = False
        histogram = _histogram_maker(meter)
        self._wait = histogram("executor.queue.wait", "How long tasks waited, submit to start.")
        self._run = histogram("executor.task.duration", "How long tasks ran, start to end.")
        meter.create_observable_gauge(
            "executor.queued", [self._queued], unit="1", description="Tasks queued now."
        )
        meter.create_observable_gauge(
            "executor.active", [self._active], unit="1", description="Tasks running now."
        )
        meter.create_observable_counter(
            "executor.tasks", [self._tasks], unit="1", description="Tasks that ended, by how."
        )
        self._listener: ListenerHandle = pool.add_listener(self._started, self._finished)

    def remove(self) -> None:
        """Stop recording the pool's tasks and reporting its figures. Idempotent."""
        self._removed = True
        self._listener.remove()

    # -- per task, in the pool's threads ----------------------------------------------------

    def _started(self, info: TaskInfo) -> None:
        attributes = self._attributes(self._class_of(info.priority))
        self._wait.record(max(info.started - info.submitted, 0.0), attributes)

    def _finished(self, info: TaskInfo) -> None:
        if info.finished is not None:
            attributes = self._attributes(self._class_of(info.priority))
            self._run.record(max(info.finished - info.started, 0.0), attributes)

    def _attributes(self, priority_class: PriorityClass) -> dict[str, Any]:
        attributes = self._attributes_of.get(priority_class)
        if attributes is None:  # two threads may both make it: equal values, one kept
            attributes = {"executor.name": self.name, "priority": str(priority_class)}
            self._attributes_of[priority_class] = attributes
        return attributes

    # -- per collection ---------------------------------------------------------------------

    def _stats(self) -> Optional[Any]:
        pool = None if self._removed else self._pool()
        return None if pool is None else pool.statistics()

    def _queued(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None:
            return []
        by_class = count_by_class(stats.queued_by_priority, self._class_of)
        return [
            Observation(count, self._attributes(priority_class))
            for priority_class, count in by_class.items()
        ]

    def _active(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None:
            return []
        return [Observation(stats.running, {"executor.name": self.name})]

    def _tasks(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None:
            return []
        return [
            Observation(
                counts[outcome],
                {"executor.name": self.name, "priority": str(priority_class), "outcome": outcome},
            )
            for priority_class, counts in stats.outcomes.items()
            for outcome in OUTCOMES
        ]


def instrument(
    pool: Any, *, name: str = "executor", meter_provider: Optional[metrics.MeterProvider] = None
) -> Instrumentation:
    """Report ``pool``'s metrics (the module docstring's) through OpenTelemetry.

    Args:
        pool: a ``PriorityThreadPoolExecutor`` or ``PriorityExecutor``; held weakly.
        name: its ``executor.name`` attribute.
        meter_provider: where the instruments come from; the global one by default.
    """
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    meter = provider.get_meter("priority_executor")
    return Instrumentation(pool, name, meter)


def _histogram_maker(meter: metrics.Meter) -> Any:
    def make(name: str, description: str) -> metrics.Histogram:
        try:
            return meter.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=list(BOUNDARIES),
            )
        except TypeError:  # an API from before advice (1.23)
            return meter.create_histogram(name, unit="s", description=description)

    return make
