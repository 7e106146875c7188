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

``instrument`` takes a ``PriorityLimiter`` or an ``AsyncPriorityLimiter`` too (default name
``"limiter"``), reported under instruments of its own, with the attributes
``limiter.name`` and ``priority``: the histograms ``limiter.wait`` (acquire to grant) and
``limiter.hold`` (grant to release), recorded at each release by the releasing thread or
Task; the gauges ``limiter.waiting`` (by ``priority``) and ``limiter.in_use`` (units); and
the counter ``limiter.requests`` (by ``priority`` and ``outcome``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, Optional, Union, overload

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from ._distribution import EXPORT_BOUNDS
from ._grants import LIMITER_OUTCOMES
from ._limiter_base import LimiterBase
from ._listeners import ListenerHandle, TaskInfo
from ._policy import Number
from ._recording import OUTCOMES, PriorityClass, count_by_class

#: The histograms' advised bucket boundaries, in seconds, from 1 µs to an hour.
BOUNDARIES = EXPORT_BOUNDS


class _Reporting:
    """What both instrumentations share: the reported object, held weakly, its name, and
    the observations read from one ``statistics()`` snapshot."""

    def __init__(self, source: Any, name: str, name_key: str, class_of: Any) -> None:
        self._source = weakref.ref(source)
        self.name = name
        self._name_key = name_key  # "executor.name" or "limiter.name"
        # Reported by the priority class the source records them under (so at most
        # MAX_CLASSES + 1 series, whatever the priorities), each class's attributes made once.
        self._class_of = class_of
        self._attributes_of: dict[PriorityClass, dict[str, Any]] = {}
        self._removed = False

    def _attributes(self, priority_class: PriorityClass) -> dict[str, Any]:
        attributes = self._attributes_of.get(priority_class)
        if attributes is None:  # two threads may both make it: equal values, one kept
            attributes = {self._name_key: self.name, "priority": str(priority_class)}
            self._attributes_of[priority_class] = attributes
        return attributes

    def _stats(self) -> Optional[Any]:
        source = None if self._removed else self._source()
        return None if source is None else source.statistics()

    def _observe(
        self,
        meter: metrics.Meter,
        by_class: tuple[str, str, str],
        total: tuple[str, str, str],
        ended: tuple[str, tuple[str, ...], str],
    ) -> None:
        """Make the instruments read per collection: a gauge by priority class, a gauge of a
        total, a counter of outcomes; each ``(name, what it reads, description)``, what it
        reads being a field of the snapshot, or the outcomes counted."""
        name, by_priority, description = by_class
        meter.create_observable_gauge(
            name, [lambda options: self._by_class(by_priority)], unit="1", description=description
        )
        name, count, description = total
        meter.create_observable_gauge(
            name, [lambda options: self._total(count)], unit="1", description=description
        )
        name, outcomes, description = ended
        meter.create_observable_counter(
            name, [lambda options: self._outcomes(outcomes)], unit="1", description=description
        )

    def _by_class(self, field: str) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None:
            return []
        by_class = count_by_class(getattr(stats, field), self._class_of)
        return [Observation(n, self._attributes(c)) for c, n in by_class.items()]

    def _total(self, field: str) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None:
            return []
        return [Observation(getattr(stats, field), {self._name_key: self.name})]

    def _outcomes(self, names: tuple[str, ...]) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None:
            return []
        return [
            Observation(counts[outcome], {**self._attributes(priority_class), "outcome": outcome})
            for priority_class, counts in stats.outcomes.items()
            for outcome in names
        ]


class Instrumentation(_Reporting):
    """What :func:`instrument` set up; ``remove()`` stops recording and reporting the pool."""

    def __init__(self, pool: Any, name: str, meter: metrics.Meter) -> None:
        super().__init__(pool, name, "executor.name", pool._admission.core.tally.class_of)
        histogram = _histogram_maker(meter)
        self._wait = histogram("executor.queue.wait", "How long tasks waited, submit to start.")
        self._run = histogram("executor.task.duration", "How long tasks ran, start to end.")
        self._observe(
            meter,
            ("executor.queued", "queued_by_priority", "Tasks queued now."),
            ("executor.active", "running", "Tasks running now."),
            ("executor.tasks", OUTCOMES, "Tasks that ended, by how."),
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


class LimiterInstrumentation(_Reporting):
    """What :func:`instrument` set up for a limiter; ``remove()`` stops reporting it."""

    def __init__(self, limiter: LimiterBase[Any], name: str, meter: metrics.Meter) -> None:
        super().__init__(limiter, name, "limiter.name", limiter._grants.core.tally.class_of)
        histogram = _histogram_maker(meter)
        self._wait = histogram("limiter.wait", "How long acquires waited, acquire to grant.")
        self._hold = histogram("limiter.hold", "How long grants were held, grant to release.")
        self._observe(
            meter,
            ("limiter.waiting", "waiting_by_priority", "Acquires waiting now."),
            ("limiter.in_use", "in_use", "Units held now."),
            ("limiter.requests", LIMITER_OUTCOMES, "Acquires that ended, by how."),
        )
        limiter._observers = (*limiter._observers, self._released)

    def remove(self) -> None:
        """Stop recording the limiter's grants and reporting its figures. Idempotent."""
        self._removed = True
        limiter = self._source()
        if limiter is not None:
            limiter._observers = tuple(o for o in limiter._observers if o != self._released)

    def _released(self, priority: Number, wait: float, hold: float) -> None:
        """A grant was released, in the releasing thread or Task."""
        attributes = self._attributes(self._class_of(priority))
        self._wait.record(max(wait, 0.0), attributes)
        self._hold.record(max(hold, 0.0), attributes)


@overload
def instrument(
    pool: LimiterBase[Any],
    *,
    name: Optional[str] = None,
    meter_provider: Optional[metrics.MeterProvider] = None,
) -> LimiterInstrumentation: ...


@overload
def instrument(
    pool: Any, *, name: Optional[str] = None, meter_provider: Optional[metrics.MeterProvider] = None
) -> Instrumentation: ...


def instrument(
    pool: Any, *, name: Optional[str] = None, meter_provider: Optional[metrics.MeterProvider] = None
) -> Union[Instrumentation, LimiterInstrumentation]:
    """Report ``pool``'s metrics (the module docstring's) through OpenTelemetry.

    Args:
        pool: a ``PriorityThreadPoolExecutor`` or ``PriorityExecutor``, or a limiter; held
            weakly.
        name: its ``executor.name`` attribute (default ``"executor"``), or its
            ``limiter.name`` (default ``"limiter"``).
        meter_provider: where the instruments come from; the global one by default.

    Returns:
        An :class:`Instrumentation`, or a :class:`LimiterInstrumentation` for a limiter.
    """
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    meter = provider.get_meter("priority_executor")
    if isinstance(pool, LimiterBase):
        return LimiterInstrumentation(pool, "limiter" if name is None else name, meter)
    return Instrumentation(pool, "executor" if name is None else name, meter)


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
