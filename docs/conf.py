"""Sphinx configuration of the documentation site (``docs/``).

Build it with ``.venv/bin/sphinx-build -W --keep-going -b html docs docs/_build/html``; CI does the same
(``tests/test_docs.py``), so a warning (a broken link, a missing reference, a docstring that is not
valid reStructuredText) fails the build. Pages are Markdown (MyST); the API reference is generated
from the docstrings by autodoc; the table of ``build()``'s parameters is generated from the configs'
field docstrings when the build starts (:func:`write_build_parameters`).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS))

from _params import write_build_parameters, write_public_names  # noqa: E402

import unstable  # noqa: E402

project = "unstable"
author = "the unstable authors"
copyright = "2026, the unstable authors"
release = unstable.__version__
version = ".".join(release.split(".")[:2])

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinxcontrib.mermaid"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_generated"]
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 4
myst_fence_as_directive = ["mermaid"]

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = True

html_theme = "furo"
html_title = f"unstable {release}"
html_static_path = ["_static"]


def _generate(app) -> None:
    write_build_parameters(DOCS / "_generated" / "build_parameters.md")
    write_public_names(DOCS / "_generated" / "public_names.md")


def setup(app) -> None:
    app.connect("builder-inited", _generate)
