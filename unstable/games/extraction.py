"""Turning a model's completion into a game move.

The default rule: take the **last** ``\\boxed{...}`` (braces matched, so ``\\boxed{\\text{call}}``
works), unwrap ``\\text{}``-style commands, collapse whitespace (multi-line answers become one
line) and wrap the result in ``[...]`` unless it already holds a bracket, which is the form every
TextArena game parses. A completion with no usable box is *not* sent to the game as free text
(the game would find the first ``[3]`` anywhere in the reasoning and play it): it becomes
:data:`INVALID_ACTION`, which no game accepts, and ``format_ok`` is ``False``. So is a box holding
more than :data:`MAX_ACTION_CHARS`: no game move is that long, and TextArena games that parse
numbers raise on a long enough one (Python refuses ``int()`` of more than 4,300 digits) instead of
counting an invalid move.

Every step is linear in the completion's length, so adversarial output (a million characters of
nested ``\\text{``) cannot stall the collector's event loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

INVALID_ACTION = "[INVALID_ACTION]"

_BOX_OPENERS = ("\\boxed{", "\\fbox{")
_TEXT_COMMANDS = r"\\(?:text|textbf|textit|texttt|mathrm|mathbf|operatorname)\s*"
# One token per brace: a text command's opening brace (group 1 is the command), any other "{", "}".
_BRACE_TOKEN = re.compile(rf"({_TEXT_COMMANDS})\{{|\{{|\}}")

MAX_ACTION_CHARS = 1000
"""The most characters a box may hold (and free text sent as a move): more is :data:`INVALID_ACTION`."""


@dataclass(frozen=True, slots=True)
class Extraction:
    """What an extraction made of a completion: the ``action`` sent to the game, and ``format_ok``, whether the
    answer was in the expected format (a box, for the built-in extractions)."""

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


@dataclass(slots=True)
class _OpenBrace:
    """A ``{`` not yet closed while :func:`clean_boxed` reads: what opened it and its content so far."""

    opener: str  # the text that opened it: "{" or "\\text{" and the like
    is_command: bool
    parts: list = field(default_factory=list)  # strings and the (unjoined) parts of closed braces
    holds_brace: bool = False  # its content keeps a brace, so a command cannot be unwrapped


def clean_boxed(content: str) -> str:
    """Unwrap ``\\text{...}``-like commands (nested ones too) and collapse whitespace.

    A command is unwrapped when its content, once its own commands are unwrapped, holds no brace
    (``\\text{a{b}}`` stays as it is). One pass with a stack of open braces; a closed brace hands
    its parts to the enclosing one unjoined, so deep nesting stays linear in the length too.
    """
    stack = [_OpenBrace("", False)]
    pos = 0
    for token in _BRACE_TOKEN.finditer(content):
        stack[-1].parts.append(content[pos : token.start()])
        pos = token.end()
        if token.group() != "}":
            stack.append(_OpenBrace(token.group(), token.group(1) is not None))
        elif len(stack) == 1:  # a "}" that closes nothing is plain text
            stack[0].parts.append("}")
        else:
            closed = stack.pop()
            if closed.is_command and not closed.holds_brace:
                stack[-1].parts.append(closed.parts)
            else:
                stack[-1].parts.extend((closed.opener, closed.parts, "}"))
                stack[-1].holds_brace = True
    stack[-1].parts.append(content[pos:])
    while len(stack) > 1:  # braces never closed stay as written
        closed = stack.pop()
        stack[-1].parts.extend((closed.opener, closed.parts))
    return " ".join(_flatten(stack[0].parts).split())


def _flatten(parts: list) -> str:
    """Join nested lists of strings in order, without recursion (nesting can be very deep)."""
    out: list[str] = []
    pending = [iter(parts)]
    while pending:
        for part in pending[-1]:
            if isinstance(part, list):
                pending.append(iter(part))
                break
            out.append(part)
        else:
            pending.pop()
    return "".join(out)


def extract_boxed_action(completion: str) -> Extraction:
    """The default extraction (see the module docstring)."""
    content = last_boxed_content(completion)
    if content is None or len(content) > MAX_ACTION_CHARS:
        return Extraction(INVALID_ACTION, False)
    move = clean_boxed(content)
    if not move or move in ("[]",):
        return Extraction(INVALID_ACTION, False)
    if "[" not in move and "]" not in move:
        move = f"[{move}]"
    return Extraction(move, True)


def extract_boxed_or_raw(completion: str) -> Extraction:
    """Like the default, but with no box the whole completion goes to the game (the seed's rule).

    Useful for conversational games where free text is a legal move. Free text longer than
    :data:`MAX_ACTION_CHARS` is not sent either: it becomes :data:`INVALID_ACTION`.
    """
    found = extract_boxed_action(completion)
    if found.format_ok:
        return found
    text = completion.strip()
    if not text or len(text) > MAX_ACTION_CHARS:
        return Extraction(INVALID_ACTION, False)
    return Extraction(text, False)


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
    """The extraction registered under ``name``; ``ValueError`` listing the known ones when there is none."""
    try:
        return _EXTRACTORS[name]
    except KeyError:
        known = sorted(_EXTRACTORS)
        raise ValueError(f"unknown action extraction {name!r}; known: {known}") from None


def answer_text(move: str) -> str:
    """The completion that plays ``move``: ``[4]`` -> ``\\boxed{4}`` (extraction restores the brackets)."""
    inner = move[1:-1] if move.startswith("[") and move.endswith("]") and move.count("[") == 1 else move
    return f"\\boxed{{{inner}}}"
