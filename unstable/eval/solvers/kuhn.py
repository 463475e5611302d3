"""Per-hand exploitability of a Kuhn-poker policy from its 12 information sets.

**Information sets.** A key is the player's card and the betting so far in the hand, ``"<card>:<history>"``:
cards ``J``, ``Q``, ``K``; histories ``""`` (first to act), ``"check"`` (second to act, checked to),
``"bet"`` (second to act, facing a bet), ``"check,bet"`` (first to act again, facing a bet). So the 12
keys are ``J:``, ``J:check``, ``J:bet``, ``J:check,bet``, then the same for ``Q`` and ``K``. Values are
the probability of each legal action, named as TextArena 0.7.4's ``KuhnPoker`` names them: ``check``
and ``bet`` with no bet on the table, ``fold`` and ``call`` facing one (any other action is invalid there).

**Invalid mass.** ``1 - sum(probabilities)`` is the chance of an invalid answer, in a model's reading
(``allow_invalid_mass=True``; a table without it must sum to 1 at each key). It is treated as a
fold: the player gives up the hand and loses the chip it put in (its ante). (In a real ``unstable``
game, ``error_allowance=0``, an invalid move loses the whole match; see ``kuhn_match``.)

**The number.** Exploitability is OpenSpiel's ``exploitability.exploitability`` on ``kuhn_poker``:
NashConv / 2, the mean over the two seats of a best response's expected chips per hand against the
policy (Lanctot et al., NeurIPS 2017; Johanson et al., IJCAI 2011), with a fresh deal every hand. It
is 0 exactly at the Nash equilibria, the one-parameter family of Kuhn (H. W. Kuhn, "A simplified
two-person poker", Contributions to the Theory of Games I, 1950): see :func:`kuhn_nash_table`.

**Stakes.** In Kuhn poker a bet adds a chip (a called bet wins 2). TextArena's env never adds a bet to
the pot, so there every hand is worth one chip whatever is bet. ``stakes="kuhn"`` is the standard game
(and OpenSpiel's); ``stakes="textarena"`` scores hands as TextArena does. Both are reported.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction

from unstable.policies.baselines import kuhn_nash_probability

KuhnTable = Mapping[str, Mapping[str, float]]

CARDS = ("J", "Q", "K")
HISTORIES = ("", "check", "bet", "check,bet")
LEGAL_ACTIONS: dict[str, tuple[str, str]] = {
    "": ("check", "bet"),
    "check": ("check", "bet"),
    "bet": ("fold", "call"),
    "check,bet": ("fold", "call"),
}
INFO_SETS = tuple(f"{card}:{history}" for card in CARDS for history in HISTORIES)
"""The 12 keys of a :data:`KuhnTable`, card by card."""
STAKES = ("kuhn", "textarena")
INVALID = "invalid"
"""The pseudo-action for the mass a table leaves over."""
_FIRST_HISTORIES, _SECOND_HISTORIES = ("", "check,bet"), ("check", "bet")
_TOLERANCE = 1e-9


def hand_result(history: str, first_wins_showdown: bool, stakes: str = "kuhn") -> int:
    """Chips the first player wins (negative: loses) at a finished ``history`` (``...,invalid``
    means the last actor answered invalidly: a fold). Raises on an unfinished history."""
    actions = history.split(",")
    if actions[-1] in ("fold", INVALID):
        first_acted_last = len(actions) % 2 == 1
        return -1 if first_acted_last else 1
    if history not in ("check,check", "bet,call", "check,bet,call"):
        raise ValueError(f"Kuhn history {history!r} is not finished")
    stake = 2 if actions[-1] == "call" and stakes == "kuhn" else 1
    return stake if first_wins_showdown else -stake


def check_kuhn_table(table: KuhnTable, allow_invalid_mass: bool = False) -> None:
    """Raise (naming the key) unless ``table`` has the 12 keys, each with legal actions only and
    probabilities in [0, 1] summing to 1 (at most 1 with ``allow_invalid_mass``: the rest is an invalid
    answer, a fold)."""
    for key in INFO_SETS:
        if key not in table:
            raise ValueError(f"Kuhn table has no entry for information set {key!r}; give all 12: {list(INFO_SETS)}")
    for key, probs in table.items():
        if key not in INFO_SETS:
            raise ValueError(f"Kuhn table key {key!r} is not one of the 12 information sets {list(INFO_SETS)}")
        legal = LEGAL_ACTIONS[key.split(":", 1)[1]]
        for action, p in probs.items():
            if action not in legal:
                raise ValueError(f"Kuhn table {key!r}: action {action!r} is not legal there (legal: {legal})")
            if not 0 <= p <= 1 + _TOLERANCE:
                raise ValueError(f"Kuhn table {key!r}: probability of {action!r} is {p}, not in [0, 1]")
        if sum(probs.values()) > 1 + 1e-6:
            raise ValueError(f"Kuhn table {key!r}: probabilities sum to {sum(probs.values())} > 1")
        if sum(probs.values()) < 1 - 1e-6 and not allow_invalid_mass:
            raise ValueError(f"Kuhn table {key!r}: probabilities sum to {sum(probs.values()):.6g} < 1; the rest "
                             "would count as an invalid answer (a fold): give each information set a distribution, "
                             "or pass allow_invalid_mass=True if the rest is meant as invalid answers")


def action_probabilities(probs: Mapping[str, float]) -> dict[str, float]:
    """``probs`` with the left-over mass as :data:`INVALID` (dropped when it is rounding only)."""
    out = dict(probs)
    mass = 1.0 - sum(out.values())
    if mass > _TOLERANCE:
        out[INVALID] = mass
    return out


def _value(table: KuhnTable, responder_first: bool, card: str, opponent: str, plan: Mapping[str, str],
           history: str, stakes: str) -> float:
    """Responder's expected chips from ``history`` on, playing the pure ``plan`` (history -> action)."""
    if history.split(",")[-1] in ("fold", INVALID) or history in ("check,check", "bet,call", "check,bet,call"):
        first_card, second_card = (card, opponent) if responder_first else (opponent, card)
        first = hand_result(history, CARDS.index(first_card) > CARDS.index(second_card), stakes)
        return first if responder_first else -first
    first_to_act = history in _FIRST_HISTORIES
    if first_to_act == responder_first:
        return _value(table, responder_first, card, opponent, plan, _extend(history, plan[history]), stakes)
    probs = action_probabilities(table[f"{opponent}:{history}"])
    return sum(p * _value(table, responder_first, card, opponent, plan, _extend(history, a), stakes)
               for a, p in probs.items() if p > 0)


def _extend(history: str, action: str) -> str:
    return f"{history},{action}" if history else action


def best_response_value(table: KuhnTable, responder_first: bool, stakes: str = "kuhn", *,
                        allow_invalid_mass: bool = False) -> float:
    """Best response's expected chips per hand against ``table`` (the responder acts first or second).

    The responder's card is private to it, so its best response is a best pure plan per card: a plan
    fixes an action at each of its 2 information sets (4 plans), valued against the 2 cards the
    opponent can hold, equally likely.
    """
    if stakes not in STAKES:
        raise ValueError(f"stakes must be one of {STAKES}, got {stakes!r}")
    check_kuhn_table(table, allow_invalid_mass)
    mine = _FIRST_HISTORIES if responder_first else _SECOND_HISTORIES
    total = 0.0
    for card in CARDS:
        choices = itertools.product(*(LEGAL_ACTIONS[h] for h in mine))
        plans = [dict(zip(mine, choice, strict=True)) for choice in choices]
        opponents = [c for c in CARDS if c != card]
        total += max(sum(_value(table, responder_first, card, o, plan, "", stakes) for o in opponents) / 2
                     for plan in plans)
    return total / 3


@dataclass(frozen=True, slots=True)
class KuhnExploitability:
    """Per-hand results in chips. ``best_response_first``/``_second``: the best response's expected chips
    per hand when the *policy* acts first/second; ``exploitability`` their mean (OpenSpiel's
    ``exploitability``, NashConv / 2). ``textarena_*``: the same with TextArena's stakes (every hand
    worth one chip)."""

    best_response_first: float
    best_response_second: float
    exploitability: float
    textarena_best_response_first: float
    textarena_best_response_second: float
    textarena_exploitability: float

    def to_dict(self) -> dict[str, float]:
        """Plain JSON-ready values."""
        return asdict(self)


def kuhn_exploitability(table: KuhnTable, *, allow_invalid_mass: bool = False) -> KuhnExploitability:
    """Per-hand exploitability of ``table`` (see the module docstring), in both stakes; ``allow_invalid_mass``:
    an information set's probabilities may sum below 1 (a model's reading), else that is refused."""
    values = {(stakes, policy_first): best_response_value(table, not policy_first, stakes,
                                                          allow_invalid_mass=allow_invalid_mass)
              for stakes in STAKES for policy_first in (True, False)}
    return KuhnExploitability(
        best_response_first=values["kuhn", True],
        best_response_second=values["kuhn", False],
        exploitability=(values["kuhn", True] + values["kuhn", False]) / 2,
        textarena_best_response_first=values["textarena", True],
        textarena_best_response_second=values["textarena", False],
        textarena_exploitability=(values["textarena", True] + values["textarena", False]) / 2,
    )


def kuhn_nash_table(alpha: float | Fraction = Fraction(1, 3)) -> dict[str, dict[str, float]]:
    """The Nash equilibrium of Kuhn (1950) with parameter ``alpha`` in [0, 1/3] (the first player bets
    a Jack with probability alpha), as a table; from :func:`~unstable.policies.baselines.kuhn_nash_probability`."""
    table: dict[str, dict[str, float]] = {}
    for rank, card in enumerate(CARDS):
        for history, (passive, aggressive) in LEGAL_ACTIONS.items():
            p = float(kuhn_nash_probability(rank, opens=history in _FIRST_HISTORIES,
                                            facing_bet=history in ("bet", "check,bet"), alpha=alpha))
            table[f"{card}:{history}"] = {passive: 1 - p, aggressive: p}
    return table


def uniform_kuhn_table() -> dict[str, dict[str, float]]:
    """Each legal action with probability 1/2 at every information set."""
    return {key: dict.fromkeys(LEGAL_ACTIONS[key.split(":", 1)[1]], 0.5) for key in INFO_SETS}


def kuhn_own_reach(table: KuhnTable) -> dict[str, float]:
    """``x(I)`` for each Kuhn information set of ``table`` (``"K:check,bet"``; :mod:`unstable.eval.average_policy`):
    the product of the probabilities of the seat's own earlier moves named in ``I``."""
    reach = {}
    for name in table:
        card, _, history = name.partition(":")
        moves = history.split(",") if history else []
        p = 1.0
        for i in range(len(moves) % 2, len(moves), 2):  # the seat's own decisions: every other move, back from I
            p *= table[f"{card}:{','.join(moves[:i])}"].get(moves[i], 0.0)
        reach[name] = p
    return reach
