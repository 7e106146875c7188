"""How .ci/run spreads the slow suite over several Pythons: ``pytest --share=K/N``."""

from __future__ import annotations

import pytest

from conftest import parse_share, take_share


def test_the_shares_of_a_suite_together_are_the_whole_suite_each_test_once() -> None:
    items = [f"t{i}" for i in range(23)]
    shares = [take_share(items, k, 4, whole=lambda t: False) for k in range(1, 5)]
    assert sorted(t for share in shares for t in share) == sorted(items)
    assert [len(share) for share in shares] == [6, 6, 6, 5]
    assert shares[1][:3] == ["t1", "t5", "t9"], "every N-th from the K-th on, in order"


def test_a_test_marked_whole_runs_in_every_share_and_keeps_its_place() -> None:
    items = ["a", "stdlib1", "b", "c", "stdlib2", "d"]
    whole = {"stdlib1", "stdlib2"}.__contains__
    assert take_share(items, 1, 2, whole) == ["a", "stdlib1", "c", "stdlib2"]
    assert take_share(items, 2, 2, whole) == ["stdlib1", "b", "stdlib2", "d"]


@pytest.mark.parametrize("text", ["0/3", "4/3", "1", "a/b", "1/0", "-1/2"])
def test_a_share_outside_one_to_n_is_a_usage_error(text: str) -> None:
    with pytest.raises(pytest.UsageError) as caught:
        parse_share(text)
    assert str(caught.value) == f"--share must be K/N with 1 <= K <= N, got {text!r}"


def test_a_share_parses_as_k_and_n() -> None:
    assert parse_share("2/5") == (2, 5)
