"""Sphinx configuration of the documentation site; `.ci/docs` builds it."""

from __future__ import annotations

import priority_executor

project = "priority-executor"
author = "the priority-executor authors"
copyright = f"2026, {author}"
release = version = priority_executor.__version__

extensions = [
    "sphinx.ext.autodoc",  # the API reference, from the docstrings
    "sphinx.ext.napoleon",  # which are written in the Google style
    "myst_parser",  # pages in Markdown
]

# Markdown pages; the README is the repository's front page, not a page of the site.
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links to a page's sections, #like-this

# The reference shows signatures as written, and each class's members in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = "priority-executor"
