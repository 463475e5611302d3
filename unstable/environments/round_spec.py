"""The round DSL of collaborative environments: who speaks, in which order.

``"Bob -> Alice -> (Bob/Alice)*5"`` means Bob speaks, then Alice, then five turns each taken by Bob or
Alice at random. The grammar, loosest binding first (whitespace is free between tokens)::

    spec     := choice EOF
    choice   := sequence ('/' sequence)*
    sequence := repeat ('->' repeat)*
    repeat   := atom ('*' count)*
    atom     := NAME | '(' choice ')'
    count    := INT | '(' INT '..' INT ')'

A NAME starts with a letter or ``_`` and goes on with letters, digits, ``_``, ``.`` and ``-`` (a ``-``
followed by ``>`` is an arrow). A choice picks one option uniformly at random, ``*(a..b)`` picks its
count uniformly in ``[a, b]``, and every repetition draws its own choices. A count of 0 is an ordinary
count in both forms: ``A*0`` gives no turn and ``A*(0..2)`` may give none (the part may be skipped); the
spec as a whole must be able to give a turn. An expansion may not be longer than ``max_turns``
(:data:`MAX_TURNS` unless given), checked while parsing, so ``Bob*1000000000`` is refused at once rather
than expanded. Every mistake is a :class:`RoundSpecError` pointing at the character where it was found.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NoReturn

MAX_DEPTH = 100  # how deep parentheses may nest: deeper is a mistake, and would end in a RecursionError
MAX_TURNS = 1000  # the longest expansion a spec may give (the collector's default cap on a game's turns)

_DIGITS = "0123456789"
_PUNCTUATION = ("->", "..", "(", ")", "/", "*")


class RoundSpecError(ValueError):
    """A round spec that does not parse. ``str(error)`` is three lines: what is wrong, the spec, and a
    caret under ``position`` (a 0-based index into ``spec``); ``reason`` is the first line alone."""

    def __init__(self, reason: str, spec: str, position: int) -> None:
        self.reason = reason
        self.spec = spec
        self.position = position
        shown = "".join(" " if char.isspace() else char for char in spec)  # a tab or newline would move the caret
        super().__init__(f"{reason}\n  {shown}\n  {' ' * position}^")

    def __reduce__(self) -> tuple[type[RoundSpecError], tuple[str, str, int]]:
        return type(self), (self.reason, self.spec, self.position)  # so it survives pickling (Ray, subprocesses)


@dataclass(frozen=True, slots=True)
class Actor:
    """One turn by ``name``. ``position`` is where the name stands in the spec; it is not compared, so two
    trees of the same shape are equal however they were spelled."""

    name: str
    position: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Sequence:
    """The items, one after another."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Choice:
    """One of the options, picked uniformly at random (``(A/B)/C`` gives C half the time)."""

    options: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    """``body`` a number of times drawn uniformly from ``low..high`` inclusive (``low == high``: a fixed
    count); each repetition draws its own choices."""

    body: Node
    low: int
    high: int

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ValueError(f"a Repeat needs 0 <= low <= high, got low={self.low}, high={self.high}")


Node = Actor | Sequence | Choice | Repeat


@dataclass(frozen=True, slots=True)
class RoundSpec:
    """A parsed round spec. ``actors`` are the names in order of first appearance; ``min_turns`` and
    ``max_turns`` bound the length of an expansion; a spec that can give no turn at all is refused."""

    text: str
    root: Node
    actors: tuple[str, ...] = field(init=False)
    min_turns: int = field(init=False)
    max_turns: int = field(init=False)

    def __post_init__(self) -> None:
        min_turns, max_turns = _bounds(self.root)
        if max_turns == 0:  # only a hand-built tree gets here (an empty Sequence or Choice): the parser makes none
            raise RoundSpecError("a round spec must be able to give a turn at position 0, found max_turns 0",
                                 self.text, 0)
        object.__setattr__(self, "actors", tuple(dict.fromkeys(_names(self.root))))
        object.__setattr__(self, "min_turns", min_turns)
        object.__setattr__(self, "max_turns", max_turns)

    def expand(self, rng: random.Random) -> tuple[str, ...]:
        """One concrete turn order, drawn with ``rng`` (the same rng state gives the same order)."""
        turns: list[str] = []
        _expand(self.root, rng, turns)
        return tuple(turns)

    def __str__(self) -> str:
        """The canonical text: ``' -> '`` and ``' / '`` spaced, parentheses only where needed."""
        return _render(self.root)


def parse_round_spec(text: str, actors: Iterable[str] | None = None, max_turns: int = MAX_TURNS) -> RoundSpec:
    """Parse ``text``; with ``actors``, every name in it must be one of them; no expansion may give more than
    ``max_turns`` turns. Raises :class:`RoundSpecError`."""
    if not isinstance(text, str):
        raise RoundSpecError(f"a round spec must be a string, found {type(text).__name__}", repr(text), 0)
    if isinstance(actors, str):
        raise TypeError(f"actors must be a collection of names, not the string {actors!r}")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
    known = None if actors is None else frozenset(actors)
    return RoundSpec(text, _Parser(text, known, max_turns).spec())


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "name", "int", "end", or the punctuation itself
    text: str
    position: int


def _tokens(text: str) -> Iterator[_Token]:
    """The tokens of ``text``, made one at a time, so a bad character is reported only once the parser
    gets there (the first mistake in reading order is the one reported)."""
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        start = i
        if i == len(text):
            yield _Token("end", "", i)
            return
        if text[i].isalpha() or text[i] == "_":
            i += 1
            while i < len(text) and _continues_name(text, i):
                i += 1
            yield _Token("name", text[start:i], start)
        elif text[i] in _DIGITS:
            while i < len(text) and text[i] in _DIGITS:
                i += 1
            yield _Token("int", text[start:i], start)
        else:
            punctuation = next((p for p in _PUNCTUATION if text.startswith(p, i)), None)
            if punctuation is None:
                raise RoundSpecError(f"unexpected character {text[i]!r} at position {i} (a spec holds actor names, "
                                     "'->', '/', '*', parentheses and counts)", text, i)
            i += len(punctuation)
            yield _Token(punctuation, punctuation, start)


def _continues_name(text: str, i: int) -> bool:
    """Whether ``text[i]`` goes on the name before it: a ``-`` does unless a ``>`` follows (then it is an arrow)."""
    if text[i] == "-":
        return not text.startswith(">", i + 1)
    return text[i].isalpha() or text[i] in _DIGITS or text[i] in "_."


class _Parser:
    """Recursive descent over the grammar in the module docstring, one token of lookahead."""

    def __init__(self, text: str, known: frozenset[str] | None, max_turns: int) -> None:
        self._text = text
        self._known = known
        self._max_turns = max_turns
        self._high: dict[int, int] = {}  # id(node) -> the most turns it gives, for the nodes made here
        self._tokens = _tokens(text)
        self._next = next(self._tokens)
        self._depth = 0

    def spec(self) -> Node:
        root = self._choice()
        if self._next.kind == ")":
            self._fail(f"unmatched ')' at position {self._next.position}: no '(' is open", self._next.position)
        if self._next.kind != "end":
            self._expected("'->', '/', '*' or end of spec")
        if self._most(root) == 0:
            self._fail("the spec gives no turn at all (every part of it is repeated 0 times)", 0)
        return root

    def _choice(self) -> Node:
        options = [self._sequence()]
        while self._next.kind == "/":
            self._advance()
            options.append(self._sequence())
        if len(options) == 1:
            return options[0]
        return self._made(Choice(tuple(options)), max(self._most(option) for option in options))

    def _sequence(self) -> Node:
        items = [self._repeat()]
        total = self._most(items[0])
        while self._next.kind == "->":
            arrow = self._advance()
            items.append(self._repeat())
            total += self._most(items[-1])
            self._check_length(total, arrow.position)
        # (A -> B) -> C is A -> B -> C; choices are not flattened: (A/B)/C is not A/B/C.
        flat = tuple(part for item in items for part in (item.items if isinstance(item, Sequence) else (item,)))
        return flat[0] if len(flat) == 1 else self._made(Sequence(flat), total)

    def _repeat(self) -> Node:
        node = self._atom()
        while self._next.kind == "*":
            self._advance()
            where = self._next.position
            low, high = self._count()
            most = self._most(node) * high
            self._check_length(most, where)
            node = self._made(Repeat(node, low, high), most)
        return node

    def _atom(self) -> Node:
        token = self._next
        if token.kind == "name":
            self._advance()
            self._check_known(token)
            return Actor(token.text, token.position)
        if token.kind != "(":
            self._expected("an actor name or '('")
        if self._depth == MAX_DEPTH:
            self._fail(f"parentheses nested deeper than {MAX_DEPTH} at position {token.position}", token.position)
        self._advance()
        self._depth += 1
        node = self._choice()
        self._depth -= 1
        self._close(token, "'->', '/', '*' or ')'")
        return node

    def _count(self) -> tuple[int, int]:
        token = self._next
        if token.kind == "int":
            count = self._integer()
            return count, count
        if token.kind != "(":
            self._expected("a count after '*' (an integer, or a range such as (1..3))")
        self._advance()
        low = self._integer()
        if self._next.kind != "..":
            self._expected("'..' in the range")
        self._advance()
        high = self._integer()
        self._close(token, "')' to close the range")
        if low > high:
            self._fail(f"a range must not run backwards (its start above its end) at position {token.position}, "
                       f"found {low}..{high}", token.position)
        return low, high

    def _integer(self) -> int:
        if self._next.kind != "int":
            self._expected("an integer")
        token = self._advance()
        digits = token.text.lstrip("0") or "0"
        if len(digits) > len(str(self._max_turns)):  # refused before int(): a 5000-digit count is not parsed
            self._too_long(f"the count {digits}" if len(digits) <= 20 else f"a count of {len(digits)} digits",
                           token.position)
        return int(digits)

    def _most(self, node: Node) -> int:
        """The most turns ``node`` gives: 1 for an actor, else what was recorded when the parser made it."""
        return 1 if isinstance(node, Actor) else self._high[id(node)]

    def _made(self, node: Node, most: int) -> Node:
        self._high[id(node)] = most
        return node

    def _check_length(self, most: int, position: int) -> None:
        if most > self._max_turns:
            self._too_long(f"a part that gives up to {most} turns", position)

    def _too_long(self, found: str, position: int) -> NoReturn:
        self._fail(f"the spec is too long at position {position}: an episode may have at most {self._max_turns} "
                   f"turns (parse_round_spec's max_turns), found {found}", position)

    def _close(self, opening: _Token, expected: str) -> None:
        if self._next.kind == "end":
            self._fail(f"unclosed '(' at position {opening.position}: expected ')' at position {self._next.position}, "
                       "found end of spec", self._next.position)
        if self._next.kind != ")":
            self._expected(expected)
        self._advance()

    def _check_known(self, token: _Token) -> None:
        if self._known is None or token.text in self._known:
            return
        close = difflib.get_close_matches(token.text, sorted(self._known), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        listed = f"the actors are: {', '.join(sorted(self._known))}" if self._known else "no actors are declared"
        self._fail(f"unknown actor '{token.text}' at position {token.position}{hint}; {listed}", token.position)

    def _advance(self) -> _Token:
        token = self._next
        if token.kind != "end":
            self._next = next(self._tokens)
        return token

    def _expected(self, what: str) -> NoReturn:
        found = "end of spec" if self._next.kind == "end" else f"'{self._next.text}'"
        self._fail(f"expected {what} at position {self._next.position}, found {found}", self._next.position)

    def _fail(self, reason: str, position: int) -> NoReturn:
        raise RoundSpecError(reason, self._text, position)


def _bounds(node: Node) -> tuple[int, int]:
    """The fewest and most turns ``node`` can expand to."""
    match node:
        case Actor():
            return 1, 1
        case Sequence(items=items):
            pairs = [_bounds(item) for item in items]
            return sum(low for low, _ in pairs), sum(high for _, high in pairs)
        case Choice(options=options):
            pairs = [_bounds(option) for option in options]
            return min((low for low, _ in pairs), default=0), max((high for _, high in pairs), default=0)
        case Repeat(body=body, low=low, high=high):
            body_low, body_high = _bounds(body)
            return body_low * low, body_high * high
    raise TypeError(f"not a round spec node: {node!r}")


def _names(node: Node) -> Iterator[str]:
    match node:
        case Actor(name=name):
            yield name
        case Sequence(items=children) | Choice(options=children):
            for child in children:
                yield from _names(child)
        case Repeat(body=body):
            yield from _names(body)


def _expand(node: Node, rng: random.Random, turns: list[str]) -> None:
    match node:
        case Actor(name=name):
            turns.append(name)
        case Sequence(items=items):
            for item in items:
                _expand(item, rng, turns)
        case Choice(options=options):
            _expand(options[rng.randrange(len(options))], rng, turns)
        case Repeat(body=body, low=low, high=high):
            for _ in range(low if low == high else rng.randint(low, high)):  # a fixed count draws nothing
                _expand(body, rng, turns)


_BINDING = {Choice: 0, Sequence: 1, Repeat: 2, Actor: 3}


def _render(node: Node, parent: int = -1) -> str:
    """``node``'s text, in parentheses unless it binds tighter than its parent (binding ``parent``)."""
    match node:
        case Actor(name=name):
            text = name
        case Sequence(items=items):
            text = " -> ".join(_render(item, 1) for item in items)
        case Choice(options=options):
            text = " / ".join(_render(option, 0) for option in options)
        case Repeat(body=body, low=low, high=high):
            text = f"{_render(body, 1)}*{low if low == high else f'({low}..{high})'}"
    return f"({text})" if _BINDING[type(node)] <= parent else text
