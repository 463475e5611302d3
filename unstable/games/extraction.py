"""Turning a model's completion into a game move.

The default rule: take the **last** ``\\boxed{...}`` (braces matched, so ``\\boxed{\\text{call}}``
works), unwrap ``\\text{}``-style commands, collapse whitespace (multi-line answers become one
line) and wrap the result in ``[...]`` unless it already holds a bracket, which is the form every
TextArena game parses. A completion with no usable box is *not* sent to the game as free text
(the game would find the first ``[3]`` anywhere in the reasoning and play it): it becomes
:data:`INVALID_ACTION`, which no game accepts, and ``format_ok`` is ``False``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

INVALID_ACTION = "[INVALID_ACTION]"

_BOX_OPENERS = ("\\boxed{", "\\fbox{")
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textit|texttt|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")


@dataclass(frozen=True, slots=True)
class Extraction:
    action: str
    format_ok: bool


ExtractionFn = Callable[[str], Extraction]


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces, or ``None`` if there is none.

    One pass with a brace stack (linear even for adversarial text); an opener whose braces never
    close is skipped in favour of an earlier complete box.
    """
    box_braces = {i + len(opener) - 1 for opener in _BOX_OPENERS for i in _find_all(text, opener)}
    if not box_braces:
        return None
    open_braces: list[int] = []
    best: tuple[int, int] | None = None  # (index of the box's "{", index of its "}")
    for j, ch in enumerate(text):
        if ch == "{":
            open_braces.append(j)
        elif ch == "}" and open_braces:
            start = open_braces.pop()
            if start in box_braces and (best is None or start > best[0]):
                best = (start, j)
    return None if best is None else text[best[0] + 1 : best[1]]


def _find_all(text: str, needle: str):
    i = text.find(needle)
    while i != -1:
        yield i
        i = text.find(needle, i + 1)


def clean_boxed(content: str) -> str:
    """Unwrap ``\\text{...}``-like commands (repeatedly, for nesting) and collapse whitespace."""
    previous = None
    while previous != content:
        previous = content
        content = _TEXT_COMMAND.sub(r"\1", content)
    return " ".join(content.split())


def extract_boxed_action(completion: str) -> Extraction:
    """The default extraction (see the module docstring)."""
    content = last_boxed_content(completion)
    if content is None:
        return Extraction(INVALID_ACTION, False)
    move = clean_boxed(content)
    if not move or move in ("[]",):
        return Extraction(INVALID_ACTION, False)
    if "[" not in move and "]" not in move:
        move = f"[{move}]"
    return Extraction(move, True)


def extract_boxed_or_raw(completion: str) -> Extraction:
    """Like the default, but with no box the whole completion goes to the game (the seed's rule).

    Useful for conversational games where free text is a legal move.
    """
    found = extract_boxed_action(completion)
    if found.format_ok:
        return found
    return Extraction(completion.strip() or INVALID_ACTION, False)


_EXTRACTORS: dict[str, ExtractionFn] = {
    "default": extract_boxed_action,
    "boxed-or-raw": extract_boxed_or_raw,
}

_BUILT_IN = dict(_EXTRACTORS)

# The seed library's name for the same table.
ACTION_EXTRACTION = _EXTRACTORS


def custom_action_extractions() -> dict[str, ExtractionFn]:
    """The extractions registered in this process on top of the built-in ones (see
    :func:`unstable.games.templates.custom_templates`: build() hands both to the collector's actor)."""
    return {name: fn for name, fn in _EXTRACTORS.items() if _BUILT_IN.get(name) is not fn}


def register_action_extraction(name: str, fn: ExtractionFn, *, overwrite: bool = False) -> None:
    """Register ``fn(completion) -> Extraction`` under ``name`` for use in env specs."""
    if not callable(fn):
        raise TypeError("action extraction must be callable: completion -> Extraction")
    if name in _EXTRACTORS and not overwrite:
        raise ValueError(f"action extraction {name!r} is already registered; pass overwrite=True to replace it")
    _EXTRACTORS[name] = fn


def get_action_extraction(name: str) -> ExtractionFn:
    try:
        return _EXTRACTORS[name]
    except KeyError:
        known = sorted(_EXTRACTORS)
        raise ValueError(f"unknown action extraction {name!r}; known: {known}") from None
