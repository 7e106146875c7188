"""Every ``python`` code block of README.md and docs/ runs, as written, with Sybil.

Each Markdown file is one namespace, run top to bottom, as a reader pastes its blocks into one
interpreter: a later block may use what an earlier one defined, so the blocks of a file are
tests that run in order. The namespace's ``__name__`` is ``"__main__"``, as in a script, so a
block guarded by ``if __name__ == "__main__":`` runs.

- A block that ends with a ``# Output:`` comment line, then ``# <line>`` comment lines, must
  print exactly those lines.
- A block that needs an optional library follows a comment that Markdown does not show,
  ``<!-- skip: next if(missing("httpx"), reason="httpx is not installed") -->``, and is
  skipped with that reason where the library cannot be imported.
- ``sh``, ``text`` and ``toml`` blocks are shown, not run; no other tag is allowed, so that
  no block goes untested by being tagged ``py`` or not at all.
- A file's blocks may leave threads running between them (a pool made in one block, used in
  the next), but none once its last block has run (but Dask's own, kept for the process).

This is a test module rather than Sybil's pytest plugin in a root ``conftest.py``, which the
scripts that the tests run from the repository root would import in place of
``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import threading
from pathlib import Path

import pytest
from sybil import Document, Example
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.myst import CodeBlockParser, SkipParser

from conftest import TIMEOUT

ROOT = Path(__file__).resolve().parents[2]
PATHS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OUTPUT_MARK = "# Output:"
#: ``python`` blocks run; the others are shown, not run.
TAGS = {"python", "sh", "text", "toml"}
#: A fenced block: its tag (MyST directives such as ``{toctree}`` start with a brace).
FENCE = re.compile(r"^```(?P<tag>[^\n`]*)\n.*?^```$", re.DOTALL | re.MULTILINE)


def missing(module: str) -> bool:
    """True if ``module`` cannot be imported here (for the skip comments)."""
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        return True


def expected_output(source: str) -> list[str] | None:
    """The lines after a block's closing ``# Output:`` comment, or None if it has none."""
    lines = source.rstrip("\n").splitlines()
    if OUTPUT_MARK not in lines:
        return None
    tail = lines[lines.index(OUTPUT_MARK) + 1 :]
    if not tail or not all(line == "#" or line.startswith("# ") for line in tail):
        raise ValueError(f"only '# ' comment lines may follow {OUTPUT_MARK!r}, at least one")
    return [line[2:] for line in tail]


class PrintsWhatItSays:
    """Run a block as Python; if it ends with ``# Output:``, check what it printed."""

    def __init__(self) -> None:
        self.run = PythonEvaluator()

    def __call__(self, example: Example) -> None:
        expected = expected_output(str(example.parsed))
        if expected is None:
            self.run(example)
            return
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            self.run(example)
        assert printed.getvalue().splitlines() == expected


PARSERS = (CodeBlockParser("python", PrintsWhatItSays()), SkipParser())


def parse(path: Path) -> Document:
    document = Document.parse(str(path), *PARSERS)
    document.namespace.update(__name__="__main__", missing=missing)
    return document


DOCUMENTS = [parse(path) for path in PATHS]
EXAMPLES = [(document, example) for document in DOCUMENTS for example in document]
#: The line of each document's last block.
LAST = {document.path: example.line for document, example in EXAMPLES}
#: The threads alive before each document's first block ran.
THREADS_BEFORE: dict[str, set[threading.Thread]] = {}


def name(path: str) -> str:
    return str(Path(path).relative_to(ROOT))


@pytest.fixture
def no_leaked_threads() -> None:
    """Replaces the suite's per-test check: a file's blocks share their threads."""


@pytest.mark.parametrize(
    ("document", "example"),
    EXAMPLES,
    ids=[f"{name(document.path)}:{example.line}" for document, example in EXAMPLES],
)
def test_code_block(document: Document, example: Example) -> None:
    THREADS_BEFORE.setdefault(document.path, set(threading.enumerate()))
    try:
        example.evaluate()
    finally:
        if example.line == LAST[document.path]:
            # Dask keeps a thread of its own for the life of the process.
            left = {
                thread
                for thread in set(threading.enumerate()) - THREADS_BEFORE[document.path]
                if not thread.name.startswith("Dask-")
            }
            for thread in left:
                thread.join(TIMEOUT)
            alive = [thread.name for thread in left if thread.is_alive()]
            assert not alive, f"threads left running by {name(document.path)}: {alive}"


@pytest.mark.parametrize("path", PATHS, ids=[name(str(path)) for path in PATHS])
def test_every_block_is_tagged_python_or_shown_only(path: Path) -> None:
    tags = [m["tag"].strip() for m in FENCE.finditer(path.read_text(encoding="utf-8"))]
    code = [tag for tag in tags if not tag.startswith("{")]
    assert set(code) <= TAGS, f"tags that are neither run nor shown only: {set(code) - TAGS}"


def test_the_readme_has_its_examples() -> None:
    readme = DOCUMENTS[0]
    assert sum(isinstance(e.region.evaluator, PrintsWhatItSays) for e in readme) >= 4
