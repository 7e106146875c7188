"""The scenarios of issues 3 and 13, one module each, in the order the run goes through them.

Each module has ``NAME`` (what ``--scenario`` takes), ``SUMMARY`` and ``cases(config)``, which
returns the :class:`~harness.Case` objects to measure.
"""

from __future__ import annotations

from types import ModuleType

from scenarios import (
    backlog_scaling,
    cancel_heavy,
    contended,
    expiry,
    idle,
    keyed_choice,
    memory,
    rate_precision,
    requests,
    throughput,
    urgent_contended,
    urgent_latency,
    urgent_rate,
)

SCENARIOS: tuple[ModuleType, ...] = (
    throughput,
    contended,
    urgent_latency,
    urgent_contended,
    requests,
    memory,
    cancel_heavy,
    expiry,
    backlog_scaling,
    idle,
    keyed_choice,
    rate_precision,
    urgent_rate,
)
