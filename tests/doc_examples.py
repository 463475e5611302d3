"""The code examples of the README and of the documentation pages, for the tests that run them, so the
docs cannot drift from the code. The tutorials (``docs/tutorials/``) are run whole by ``test_docs.py``."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def code_blocks(lang: str = "python", pages: list[Path] | None = None) -> list[str]:
    """Every ``lang`` code block of ``pages`` (default: the README and the docs pages), in order, each once
    (the README repeats some of the docs' examples)."""
    found: dict[str, None] = {}
    for page in pages or PAGES:
        for block in re.findall(rf"```{lang}\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            found.setdefault(block)
    return list(found)


def section_block(page: Path, heading: str, lang: str = "python") -> str:
    """The first ``lang`` block after ``heading`` (a markdown heading line, e.g. ``"## Add your own learner"``)."""
    section = page.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)
