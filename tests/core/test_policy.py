"""Unit tests of ``priority_executor._policy``: argument checks, ranks and deadlines.

Pure functions, so no pool and no thread: each case is a value in and a value (or an exact
error message) out.
"""

from __future__ import annotations

import enum
import math
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from priority_executor import Priority
from priority_executor._policy import (
    check_priority,
    check_timeout,
    describe,
    is_due,
    strict_rank,
)
from support import exact


class Level(enum.IntEnum):
    URGENT = 7


# -- Priority and describe ------------------------------------------------------------------


def test_priority_is_an_int_enum_with_low_normal_high() -> None:
    assert issubclass(Priority, enum.IntEnum)
    assert [(p.name, p.value) for p in Priority] == [("LOW", -1), ("NORMAL", 0), ("HIGH", 1)]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("high", "'high' (str)"),
        (None, "None (NoneType)"),
        (True, "True (bool)"),
        (1j, "1j (complex)"),
        (Decimal("1.5"), "Decimal('1.5') (Decimal)"),
        ([1], "[1] (list)"),
        (math.nan, "nan (float)"),
    ],
)
def test_describe_gives_repr_and_type_name(value: object, text: str) -> None:
    assert describe(value) == text


# -- check_priority -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priority", "expected", "expected_type"),
    [
        (0, 0, int),
        (-3, -3, int),
        (sys.maxsize, sys.maxsize, int),
        (-sys.maxsize - 1, -sys.maxsize - 1, int),
        (10**30, 10**30, int),
        (2.5, 2.5, float),
        (-0.0, 0.0, float),
        (math.inf, math.inf, float),
        (-math.inf, -math.inf, float),
        (Fraction(3, 2), 1.5, float),
        (Level.URGENT, 7, int),
    ],
)
def test_check_priority_accepts_real_numbers(
    priority: Any, expected: float, expected_type: type
) -> None:
    checked = check_priority(priority)
    assert checked == expected
    assert type(checked) is expected_type


def test_check_priority_keeps_priority_members() -> None:
    for member in Priority:
        assert check_priority(member) is member


@pytest.mark.parametrize(
    ("priority", "error", "message"),
    [
        ("high", TypeError, "priority must be a real number, got 'high' (str)"),
        ("1", TypeError, "priority must be a real number, got '1' (str)"),
        (None, TypeError, "priority must be a real number, got None (NoneType)"),
        (True, TypeError, "priority must be a real number, got True (bool)"),
        (False, TypeError, "priority must be a real number, got False (bool)"),
        (1j, TypeError, "priority must be a real number, got 1j (complex)"),
        (
            Decimal("1.5"),
            TypeError,
            "priority must be a real number, got Decimal('1.5') (Decimal)",
        ),
        ([1], TypeError, "priority must be a real number, got [1] (list)"),
        (math.nan, ValueError, "priority must not be NaN, got nan (float)"),
        (-math.nan, ValueError, "priority must not be NaN, got nan (float)"),
    ],
)
def test_check_priority_rejects_anything_else(
    priority: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=exact(message)):
        check_priority(priority)


# -- check_timeout --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        (0, 0.0),
        (0.0, 0.0),
        (5, 5.0),
        (2.5, 2.5),
        (1e-9, 1e-9),
        (Fraction(1, 4), 0.25),
        (sys.maxsize, float(sys.maxsize)),
        (1e300, 1e300),
    ],
)
def test_check_timeout_accepts_non_negative_numbers_as_float(timeout: Any, expected: float) -> None:
    checked = check_timeout(timeout)
    assert checked == expected
    assert type(checked) is float


def test_check_timeout_accepts_none_for_no_deadline() -> None:
    assert check_timeout(None) is None


@pytest.mark.parametrize("timeout", [math.inf, float("inf")])
def test_check_timeout_treats_infinity_as_no_deadline(timeout: float) -> None:
    assert check_timeout(timeout) is None


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        ("1", TypeError, "timeout must be a real number or None, got '1' (str)"),
        (True, TypeError, "timeout must be a real number or None, got True (bool)"),
        (False, TypeError, "timeout must be a real number or None, got False (bool)"),
        (1j, TypeError, "timeout must be a real number or None, got 1j (complex)"),
        (
            Decimal("1"),
            TypeError,
            "timeout must be a real number or None, got Decimal('1') (Decimal)",
        ),
        ([1], TypeError, "timeout must be a real number or None, got [1] (list)"),
        (-1, ValueError, "timeout must be a non-negative number, got -1 (int)"),
        (-0.001, ValueError, "timeout must be a non-negative number, got -0.001 (float)"),
        (
            Fraction(-1, 2),
            ValueError,
            "timeout must be a non-negative number, got Fraction(-1, 2) (Fraction)",
        ),
        (-math.inf, ValueError, "timeout must be a non-negative number, got -inf (float)"),
        (math.nan, ValueError, "timeout must be a non-negative number, got nan (float)"),
    ],
)
def test_check_timeout_rejects_anything_else(
    timeout: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=exact(message)):
        check_timeout(timeout)


# -- strict_rank and is_due -----------------------------------------------------------------


def test_strict_rank_puts_higher_priorities_first() -> None:
    priorities: list[float] = [0, -math.inf, 2.5, Priority.HIGH, sys.maxsize, -3, math.inf]
    by_rank = sorted(priorities, key=strict_rank)
    assert by_rank == sorted(priorities, reverse=True)
    assert strict_rank(Priority.HIGH) == -1
    assert strict_rank(Priority.LOW) == 1
    assert strict_rank(-math.inf) == math.inf


@pytest.mark.parametrize(
    ("deadline", "now", "due"),
    [
        (None, 0.0, False),
        (None, math.inf, False),
        (10.0, 9.999, False),
        (10.0, 10.0, True),  # the deadline itself is too late to start
        (10.0, 10.001, True),
        (math.inf, 1e300, False),
        (1000.5, 1000.0 + 0.5, True),
    ],
)
def test_is_due_once_the_clock_reaches_the_deadline(
    deadline: float | None, now: float, due: bool
) -> None:
    assert is_due(deadline, now) is due
