"""The README's examples that run as written: each is run here, as a user would paste it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_block_after(marker: str) -> str:
    """The first fenced ``python`` block after the line that starts with ``marker``."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n" + marker)
    match = re.compile(r"```python\n(.*?)```", re.DOTALL).search(text, start)
    assert match is not None, f"no python block after {marker!r}"
    return match.group(1)


def test_the_crawler_example_runs_and_fetches_every_page() -> None:
    code = python_block_after("A crawler:")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("fetched https://site0.example/what-the-user-clicked ")
    assert lines[1] == "40 pages"
