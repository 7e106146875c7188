"""``python -m priority_executor demo``: output structure and argument errors, never timing.

The demo runs in-process with a tiny budget. Latencies depend on the machine, so no test
compares the two pools; the conftest's thread-leak check covers "every thread is joined".
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from priority_executor.__main__ import main
from priority_executor._demo import CLASSES, POOLS, run_demo
from priority_executor._demo_async import POOLS as ASYNC_POOLS
from priority_executor._demo_async import run_async_demo

CLASS_KEYS = {"submitted", "count", "wait_ms", "run_ms", "expired", "dropped", "tasks_per_s"}


def _check_class(kind: str, stats: dict[str, Any]) -> None:
    assert set(stats) == CLASS_KEYS
    for key in ("submitted", "count", "expired", "dropped"):
        assert type(stats[key]) is int, (kind, key)
        assert stats[key] >= 0, (kind, key)
    assert stats["submitted"] == stats["count"] + stats["expired"] + stats["dropped"]
    if kind in ("HIGH", "LOW"):
        assert stats["expired"] == 0  # only LOW+deadline jobs have a deadline
    for metric in ("wait_ms", "run_ms"):
        p50, p99 = stats[metric]["p50"], stats[metric]["p99"]
        if stats["count"] == 0:
            assert p50 is None
            assert p99 is None
        else:
            assert isinstance(p50, float)
            assert isinstance(p99, float)
            assert 0 <= p50 <= p99
    assert stats["run_ms"]["p50"] is None or stats["run_ms"]["p50"] >= stats["wait_ms"]["p50"]
    assert isinstance(stats["tasks_per_s"], float)


@pytest.mark.parametrize("use_async", [False, True], ids=["threads", "async"])
def test_json_output_reports_every_class_of_both_pools(
    use_async: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    pools = ASYNC_POOLS if use_async else POOLS
    assert (
        main(["demo", "--seconds", "1", "--workers", "2", "--json", *(["--async"] * use_async)])
        == 0
    )
    out = capsys.readouterr().out
    assert "\r" not in out
    results = json.loads(out)  # nothing but the JSON document

    assert set(results) == {"workload", "pools", "conclusion"}
    assert results["workload"]["workers"] == 2
    assert results["workload"]["seconds_per_pool"] == 0.5
    assert list(results["pools"]) == list(pools)
    for name, data in results["pools"].items():
        ours = name == pools[1]
        extra = {"statistics"} if ours else set()
        assert set(data) == {"elapsed_s", "classes", "deadlines", *extra}
        assert data["elapsed_s"] > 0
        assert list(data["classes"]) == [*CLASSES, "all"]
        for kind, stats in data["classes"].items():
            _check_class(kind, stats)
        classes = data["classes"]
        assert classes["HIGH"]["count"] > 0
        assert classes["LOW"]["count"] > 0
        assert classes["LOW+deadline"]["submitted"] > 0
        for key in ("submitted", "count", "expired", "dropped"):
            assert classes["all"][key] == sum(classes[kind][key] for kind in CLASSES)
        if ours:
            # What the pool recorded itself agrees with the demo's own bookkeeping.
            recorded = data["statistics"]
            assert set(recorded) == {"HIGH", "LOW"}
            assert recorded["HIGH"]["wait_ms"]["count"] == classes["HIGH"]["count"]
            low_ran = classes["LOW"]["count"] + classes["LOW+deadline"]["count"]
            assert recorded["LOW"]["outcomes"]["completed"] == low_ran
            low_expired = classes["LOW+deadline"]["expired"]
            assert recorded["LOW"]["outcomes"]["expired"] == low_expired
    assert results["conclusion"].startswith("HIGH p99 wait: ")


@pytest.mark.parametrize("use_async", [False, True], ids=["threads", "async"])
def test_table_output_without_a_terminal_has_no_progress_line(
    use_async: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    pools = ASYNC_POOLS if use_async else POOLS
    assert main(["demo", "--seconds", "0.3", *(["--async"] * use_async)]) == 0
    out = capsys.readouterr().out
    assert "\r" not in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("class"))
    assert header.split() == [
        *("class", "count", "wait", "p50", "wait", "p99", "run", "p50", "run", "p99"),
        *("expired", "dropped", "tasks/s"),
    ]
    for pool in pools:
        assert pool in lines
    recorded_at = lines.index(f"{pools[1]}.statistics(), as the pool recorded it by priority:")
    rows = [line.split()[0] for line in lines[:recorded_at] if line.startswith("  ")]
    assert [kind for kind in rows if kind in (*CLASSES, "all")] == [*CLASSES, "all"] * 2
    # The pool's own figures, one row per priority it saw: HIGH and LOW (deadline jobs are LOW).
    assert lines[recorded_at + 1].split() == [
        *("priority", "started", "wait", "p50", "wait", "p90", "wait", "p99", "task", "p50"),
        "outcomes",
    ]
    assert [line.split()[0] for line in lines[recorded_at + 2 : recorded_at + 4]] == [
        "HIGH",
        "LOW",
    ]
    assert "completed" in lines[recorded_at + 2]
    assert lines[-1].startswith("HIGH p99 wait: ")


@pytest.mark.parametrize("use_async", [False, True], ids=["threads", "async"])
def test_progress_line_is_redrawn_in_place_and_erased(use_async: bool) -> None:
    progress = io.StringIO()
    (run_async_demo if use_async else run_demo)(1, 0.2, progress=progress)
    pools = ASYNC_POOLS if use_async else POOLS
    text = progress.getvalue()
    assert "\n" not in text
    assert text.count("\r") > 2
    assert pools[0] in text
    assert pools[1] in text
    assert text.endswith("\r")
    assert text.rsplit("\r", 2)[1].strip() == ""  # the last draw blanks the line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["demo", "--seconds", "-1"],
            "argument --seconds: seconds must be a positive number, got '-1'",
        ),
        (
            ["demo", "--seconds", "0"],
            "argument --seconds: seconds must be a positive number, got '0'",
        ),
        (["demo", "--seconds", "soon"], "argument --seconds: seconds must be a number, got 'soon'"),
        (
            ["demo", "--workers", "0"],
            "argument --workers: workers must be between 1 and 256, got '0'",
        ),
        (["demo", "--workers", "2.5"], "argument --workers: workers must be an integer, got '2.5'"),
        (["bench"], "argument command: invalid choice: 'bench'"),
        ([], "the following arguments are required: command"),
    ],
)
def test_bad_arguments_are_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m priority_executor")
    assert message in err


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"]])
def test_help_exits_zero(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m priority_executor")
