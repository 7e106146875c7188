"""The README's examples that run as written: each is run here, as a user would paste it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from pathlib import Path
from typing import Any

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


def test_the_asyncio_example_runs_and_the_high_call_goes_first() -> None:
    code = python_block_after("## asyncio: `AsyncPriorityScheduler` for coroutines")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    page, figures = out.getvalue().split(" ", 1)
    assert page == "/api/details"
    assert figures.startswith("<Distribution count=1 ")


def test_the_semaphore_migration_gives_the_same_results() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("**Migrating from `asyncio.Semaphore`.**")
    blocks = re.compile(r"```python\n(.*?)```", re.DOTALL).findall(text, start)[:2]
    namespace: dict[str, Any] = {}
    setup = (
        "import asyncio\n"
        "from priority_executor import AsyncPriorityScheduler\n"
        "async def fetch(url):\n    await asyncio.sleep(0)\n    return url.upper()\n"
        "urls = [f'/page/{i}' for i in range(20)]\n"
    )
    exec(setup, namespace)
    outcomes = []
    for block in blocks:
        body = "".join(f"    {line}\n" for line in block.splitlines())
        exec(f"async def migrated():\n{body}    return results\n", namespace)
        outcomes.append(asyncio.run(namespace["migrated"]()))
    assert outcomes[0] == outcomes[1] == [f"/PAGE/{i}" for i in range(20)]
