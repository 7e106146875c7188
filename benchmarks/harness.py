"""The shared machinery: interleaved repetitions, medians, paired ratios, the result record.

A *case* is one measured situation, such as "urgent latency, 4 workers". Its trial function
runs one contender once, on a fresh pool, and returns that run's numbers. :func:`run_case`
first runs one warm-up trial of every contender, then ``repeat`` repetitions; repetition ``r``
runs every contender once, in the list order rotated by ``r``, so a slow drift of the machine
(another process waking up, a CPU changing its clock) lands on every contender alike and no
contender always goes first or last.

A contender's ratio against ``ThreadPoolExecutor`` is the median, over the repetitions, of
the ratio of its number to the standard pool's number *from the same repetition*. Pairing
cancels much of the noise that moves both numbers together; the median discards the odd
repetition that a noisy neighbour spoiled.

Nothing here knows a scenario; scenarios know nothing of repetitions.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from contenders import OURS, STDLIB, Contender

#: Key of the contender that ratios are taken against.
REFERENCE = STDLIB


@dataclass(frozen=True)
class Config:
    """What the command line asked for."""

    quick: bool
    repeat: int


@dataclass(frozen=True)
class Target:
    """A performance goal for our pool, and how to judge it from the summary of a metric.

    ``met`` receives our median and our median paired ratio against the standard pool (None
    when there is none) and says whether the goal is reached.
    """

    text: str
    met: Callable[[float, Optional[float]], bool]


@dataclass(frozen=True)
class Metric:
    """One number a trial reports."""

    key: str
    label: str
    unit: str
    better: str  # "higher" or "lower"
    target: Optional[Target] = None
    #: False where the standard pool's number is noise around zero, so a ratio means nothing.
    paired_ratio: bool = True


Trial = Callable[[Contender], Mapping[str, float]]


@dataclass(frozen=True)
class Case:
    """One measured situation: the contenders taking part and how to run one of them once.

    A trial may return more keys than ``metrics`` lists; they are kept in the raw results
    (sanity counts, for instance) but not tabulated.
    """

    scenario: str
    name: str
    metrics: Sequence[Metric]
    trial: Trial
    contenders: Sequence[Contender]
    params: Mapping[str, object]
    notes: Sequence[str] = ()
    #: A cheaper run for the warm-up; the trial itself when None.
    warmup: Optional[Trial] = None


@dataclass(frozen=True)
class Stats:
    """Median and spread of one metric of one contender over the repetitions."""

    median: float
    low: float
    high: float
    q1: float
    q3: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        if len(values) >= 2:
            q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        else:
            q1 = q3 = values[0]
        return cls(statistics.median(values), min(values), max(values), q1, q3, len(values))


@dataclass
class CaseResult:
    """Every repetition's raw numbers of one case, and their summaries."""

    case: Case
    orders: list[list[str]] = field(default_factory=list)
    raw: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    seconds: float = 0.0
    error: Optional[str] = None

    def values(self, contender: str, metric: str) -> list[float]:
        return [run[metric] for run in self.raw.get(contender, []) if metric in run]

    def stats(self, contender: str, metric: str) -> Optional[Stats]:
        values = self.values(contender, metric)
        return Stats.of(values) if values else None

    def ratio(self, contender: str, metric: Metric) -> Optional[float]:
        """Median over repetitions of this contender's number over the standard pool's."""
        if not metric.paired_ratio:
            return None
        ours = self.raw.get(contender, [])
        reference = self.raw.get(REFERENCE, [])
        ratios = [
            mine[metric.key] / theirs[metric.key]
            for mine, theirs in zip(ours, reference, strict=True)
            if metric.key in mine and metric.key in theirs and theirs[metric.key] != 0
        ]
        return statistics.median(ratios) if ratios else None

    def to_json(self) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        for contender in self.case.contenders:
            per_metric: dict[str, Any] = {}
            for metric in self.case.metrics:
                stats = self.stats(contender.key, metric.key)
                if stats is None:
                    continue
                per_metric[metric.key] = {
                    "median": stats.median,
                    "min": stats.low,
                    "max": stats.high,
                    "q1": stats.q1,
                    "q3": stats.q3,
                    "n": stats.n,
                    "ratio_vs_stdlib": self.ratio(contender.key, metric),
                }
            summary[contender.key] = per_metric
        return {
            "scenario": self.case.scenario,
            "case": self.case.name,
            "params": dict(self.case.params),
            "notes": list(self.case.notes),
            "contenders": {c.key: c.name for c in self.case.contenders},
            "metrics": [
                {
                    "key": m.key,
                    "label": m.label,
                    "unit": m.unit,
                    "better": m.better,
                    "target": m.target.text if m.target else None,
                }
                for m in self.case.metrics
            ],
            "orders": self.orders,
            "raw": self.raw,
            "summary": summary,
            "seconds": self.seconds,
            "error": self.error,
        }


def rotated(items: Sequence[Contender], r: int) -> list[Contender]:
    """``items`` starting at position ``r`` (modulo its length), wrapping around."""
    k = r % len(items)
    return [*items[k:], *items[:k]]


def _one_trial(trial: Trial, contender: Contender) -> dict[str, float]:
    """Run one trial from a clean slate: last trial's garbage collected, its threads gone."""
    gc.collect()
    threads_before = threading.active_count()
    values = dict(trial(contender))
    deadline = time.monotonic() + 5.0
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    if threading.active_count() > threads_before:
        extra = threading.active_count() - threads_before
        log(f"    warning: {contender.key} left {extra} thread(s) running")
    return values


def run_case(case: Case, repeat: int) -> CaseResult:
    """Warm up every contender, then run ``repeat`` interleaved, rotated repetitions.

    An exception in a trial ends the case; it is recorded in the result and logged, and the
    other cases still run.
    """
    result = CaseResult(case, raw={c.key: [] for c in case.contenders})
    started = time.perf_counter()
    log(f"[{case.scenario}] {case.name}")
    try:
        for contender in case.contenders:
            _one_trial(case.warmup or case.trial, contender)
        for r in range(repeat):
            order = rotated(case.contenders, r)
            result.orders.append([c.key for c in order])
            for contender in order:
                result.raw[contender.key].append(_one_trial(case.trial, contender))
            log(f"  rep {r + 1}/{repeat}: " + _brief(case, result, r))
    except Exception:
        result.error = traceback.format_exc()
        log(result.error)
    result.seconds = time.perf_counter() - started
    return result


def _brief(case: Case, result: CaseResult, r: int) -> str:
    metric = case.metrics[0]
    return ", ".join(
        f"{c.key} {fmt(result.raw[c.key][r].get(metric.key, math.nan))}" for c in case.contenders
    ) + (f" {metric.unit}" if metric.unit else "")


def save(output: Path, record: Mapping[str, Any], heading: str, table: str) -> None:
    """Write the raw ``record`` to ``output`` as JSON, then print ``heading`` and ``table``."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(heading + "\n")
    print(table)


def machine() -> dict[str, Any]:
    """The interpreter and machine that produced a result, for every script's record."""
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    gil = getattr(sys, "_is_gil_enabled", None)
    return {
        "python_version": platform.python_version(),
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "in_virtualenv": sys.prefix != sys.base_prefix,
        "gil_enabled": gil() if gil is not None else True,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(affinity) if affinity is not None else None,
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def git_revision(directory: Path) -> Optional[tuple[str, bool]]:
    """The commit of the checkout holding ``directory``, and whether the files under
    ``directory`` have uncommitted changes; None outside a git checkout."""
    try:
        commit, status = (
            subprocess.run(
                ["git", *words], cwd=directory, capture_output=True, text=True, check=True
            ).stdout
            for words in (["rev-parse", "HEAD"], ["status", "--porcelain", "--", "."])
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit.strip(), bool(status.strip())


def log(message: str) -> None:
    """Progress goes to stderr, so stdout carries only the results table."""
    print(message, file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def fmt(x: float) -> str:
    """About three significant digits, thousands separated, no exponent for common sizes."""
    if math.isnan(x):
        return "n/a"
    magnitude = abs(x)
    if magnitude >= 1000:
        return f"{x:,.0f}"
    if magnitude >= 100:
        return f"{x:.0f}"
    if magnitude >= 10:
        return f"{x:.1f}"
    if magnitude >= 0.1:
        return f"{x:.2f}"
    if magnitude == 0:
        return "0"
    return f"{x:.2g}"


def fmt_ratio(x: float) -> str:
    """Two decimals, or two significant digits for ratios below 0.1 (0.00029, not 0.00)."""
    return f"{x:.2f}" if abs(x) >= 0.1 else f"{x:.2g}"


def render_table(results: Sequence[CaseResult], contenders: Sequence[Contender]) -> str:
    """One markdown row per (case, metric): median [min, max] per contender, ratios, target."""
    others = [c for c in contenders if c.key != REFERENCE]
    header = [
        "scenario",
        "metric",
        *(c.short for c in contenders),
        *(f"{c.short} ÷ stdlib" for c in others),
        "target (ours)",
        "met",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes: list[str] = []
    for result in results:
        case = result.case
        name = case.name
        if case.notes:
            marks = []
            for note in case.notes:
                if note not in notes:
                    notes.append(note)
                marks.append(str(notes.index(note) + 1))
            name += " [" + ",".join(marks) + "]"
        if result.error is not None:
            last = result.error.strip().splitlines()[-1]
            lines.append(f"| {name} | failed: {last} |" + " |" * (len(header) - 2))
            continue
        taking_part = {c.key for c in case.contenders}
        for metric in case.metrics:
            cells = [name, f"{metric.label}, {metric.unit} ({metric.better} is better)"]
            for contender in contenders:
                stats = result.stats(contender.key, metric.key)
                if contender.key not in taking_part:
                    cells.append("not applicable")
                elif stats is None:
                    cells.append("—")
                else:
                    cells.append(f"{fmt(stats.median)} [{fmt(stats.low)}, {fmt(stats.high)}]")
            for contender in others:
                ratio = result.ratio(contender.key, metric)
                cells.append("—" if ratio is None else fmt_ratio(ratio))
            cells.extend(_verdict(result, metric))
            lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines.append("")
        lines.extend(f"{i}. {note}" for i, note in enumerate(notes, 1))
    return "\n".join(lines)


def _verdict(result: CaseResult, metric: Metric) -> list[str]:
    if metric.target is None:
        return ["", ""]
    stats = result.stats(OURS, metric.key)
    if stats is None:
        return [metric.target.text, "—"]
    met = metric.target.met(stats.median, result.ratio(OURS, metric))
    return [metric.target.text, "yes" if met else "**no**"]
