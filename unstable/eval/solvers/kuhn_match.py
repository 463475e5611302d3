"""Exact best response to a policy over the whole KuhnPoker-v0 match: 3 rounds, win/draw/loss reward.

**The game, as TextArena 0.7.4 plays it** (``KuhnPoker/env.py``, ``KuhnPoker-v0`` registers
``max_rounds=3``): every round both players ante 1 and get one card of J, Q, K from a freshly shuffled
deck; player 1 opens rounds 1 and 3, player 0 round 2. Bets never enter the pot, so the round's
winner (by fold, or the higher card at showdown) gains one chip and the loser loses one. After the
last round the player with more chips wins (+1), the other loses (-1), equal chips draw (0; with 3
rounds this cannot happen). An invalid move loses the match at once (``unstable`` plays with
``error_allowance=0``).

**Information states.** A player sees every action, its own cards, and the opponent's card of each
round that ended in a showdown (TextArena announces both cards), not after a fold. A key is the
finished rounds, each ``"<my card><their card or ?>:<actions>"``, then the current round
``"<my card>:<actions so far>"``, joined by ``"|"``: e.g. ``"KJ:bet,call|Q?:check,bet,fold|J:check"``.
Round-1 keys are the 12 per-hand keys of :mod:`~unstable.eval.solvers.kuhn`. The seat follows from the
key (who is to act in the current round, and who opens it). Per player, round 1 has 6 information
states, round 2 144 (24 ways a round can look to a player, times 6) and round 3 3,456: **3,606 per
seat, 7,212 for both** (:func:`kuhn_match_info_states`); the tree has 27,000 deals-and-betting lines
to its end. That is tractable: the best response below walks it in a few seconds on one CPU core. The cost is on
the policy's side: reading an LLM seat needs its move distribution at all 7,212 prompts.

**The best response** is the standard two-pass computation for imperfect information (Johanson et
al., IJCAI 2011; OpenSpiel's ``best_response.py``): collect the histories of each of the responder's
information states with their chance-times-policy reach probabilities, then at each information
state take the action with the largest reach-weighted value, the values computed bottom-up.
Exploitability is the mean over the two seats of the best response's expected match reward
(NashConv / 2, Lanctot et al., NeurIPS 2017); it is 0 only for a policy that is an equilibrium of
the match in both seats. ``rounds`` and ``reward="chips"`` give the per-round chip game for tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from unstable.eval.solvers.kuhn import CARDS, INVALID, LEGAL_ACTIONS, KuhnTable, action_probabilities

KuhnMatchTable = Mapping[str, Mapping[str, float]]
REWARDS = ("match", "chips")
_DEALS = tuple(itertools.permutations(range(3), 2))  # (player 0's card, player 1's card), 6 equally likely
_ENDS = ("check,check", "bet,call", "bet,fold", "check,bet,call", "check,bet,fold")
_SHOWDOWNS = ("check,check", "bet,call", "check,bet,call")

# A history: (finished rounds as (card0, card1, actions) tuples, the current deal or None, actions so far).
History = tuple[tuple[tuple[int, int, str], ...], tuple[int, int] | None, str]


def _opener(round_index: int) -> int:
    """TextArena's ``starting_player`` alternates from 1: player 1 opens rounds 1, 3, ...; player 0 round 2."""
    return 1 if round_index % 2 == 0 else 0


def _actor(history: History) -> int:
    rounds, _, actions = history
    taken = len(actions.split(",")) if actions else 0
    return _opener(len(rounds)) ^ (taken % 2)


def _round_winner(card0: int, card1: int, actions: str, opener: int) -> int:
    if actions in _SHOWDOWNS:
        return 0 if card0 > card1 else 1
    folder = opener if actions == "check,bet,fold" else 1 - opener
    return 1 - folder


def info_state(history: History, player: int) -> str:
    """The key of ``player``'s information state at ``history`` (see the module docstring)."""
    rounds, deal, actions = history
    parts = []
    for card0, card1, done in rounds:
        mine, theirs = (card0, card1) if player == 0 else (card1, card0)
        parts.append(f"{CARDS[mine]}{CARDS[theirs] if done in _SHOWDOWNS else '?'}:{done}")
    parts.append(f"{CARDS[deal[player]]}:{actions}")
    return "|".join(parts)


class _Match:
    """The tree of one match: children, terminal rewards, and the responder's best response."""

    def __init__(self, table: KuhnMatchTable, responder: int, rounds: int, reward: str,
                 allow_invalid_mass: bool = False):
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        self.table, self.responder, self.rounds, self.reward = table, responder, rounds, reward
        self.allow_invalid_mass = allow_invalid_mass
        self.infosets: dict[str, list[tuple[History, float]]] = {}
        self.values: dict[History, float] = {}
        self.best: dict[str, str] = {}

    def policy(self, history: History) -> dict[str, float]:
        key = info_state(history, 1 - self.responder)
        try:
            probs = self.table[key]
        except KeyError:
            raise ValueError(f"Kuhn match table has no entry for information state {key!r}; give every key of "
                             f"kuhn_match_info_states() (a per-hand table extends with match_table_from_hand_table)"
                             ) from None
        total = sum(probs.values())
        if total > 1 + 1e-6 or (total < 1 - 1e-6 and not self.allow_invalid_mass):
            raise ValueError(f"Kuhn match table {key!r}: probabilities sum to {total:.6g}, not 1; the rest would count "
                             "as an invalid answer (the match lost): give each information state a distribution, or "
                             "pass allow_invalid_mass=True if the rest is meant as invalid answers")
        return action_probabilities(probs)

    def terminal_value(self, history: History) -> float | None:
        """The responder's reward if the match is over at ``history``, else ``None``."""
        rounds, deal, actions = history
        if actions.endswith(INVALID):  # the player who answered invalidly loses the match
            before = actions[: -len(INVALID)].rstrip(",")
            return -1.0 if _actor((rounds, deal, before)) == self.responder else 1.0
        if deal is not None or len(rounds) < self.rounds:
            return None
        chips = sum(1 if _round_winner(c0, c1, a, _opener(i)) == self.responder else -1
                    for i, (c0, c1, a) in enumerate(rounds))
        return float(chips) if self.reward == "chips" else float((chips > 0) - (chips < 0))

    def children(self, history: History) -> list[tuple[str, History]]:
        rounds, deal, actions = history
        if deal is None:
            return [("deal", (rounds, d, "")) for d in _DEALS]
        out = []
        for action in (*LEGAL_ACTIONS[actions], INVALID):
            now = f"{actions},{action}" if actions else action
            out.append((action, ((*rounds, (*deal, now)), None, "") if now in _ENDS else (rounds, deal, now)))
        return out

    def collect(self, history: History, reach: float) -> None:
        """Pass 1: every history of each responder information state, with its reach probability."""
        if self.terminal_value(history) is not None:
            return
        if history[1] is None:
            for _, child in self.children(history):
                self.collect(child, reach / len(_DEALS))
            return
        if _actor(history) == self.responder:
            self.infosets.setdefault(info_state(history, self.responder), []).append((history, reach))
            for action, child in self.children(history):
                if action != INVALID:
                    self.collect(child, reach)
            return
        probs = self.policy(history)
        for action, child in self.children(history):
            if probs.get(action, 0) > 0:
                self.collect(child, reach * probs[action])

    def value(self, history: History) -> float:
        """Pass 2: the responder's expected reward from ``history`` on, playing its best response."""
        if history in self.values:
            return self.values[history]
        terminal = self.terminal_value(history)
        if terminal is not None:
            return terminal
        if history[1] is None:
            return self._memo(history, sum(self.value(child) for _, child in self.children(history)) / len(_DEALS))
        children = dict(self.children(history))
        if _actor(history) == self.responder:
            result = self.value(children[self.best_action(info_state(history, self.responder))])
        else:
            probs = self.policy(history)
            result = sum(p * self.value(children[a]) for a, p in probs.items() if p > 0)
        return self._memo(history, result)

    def _memo(self, history: History, value: float) -> float:
        self.values[history] = value
        return value

    def best_action(self, key: str) -> str:
        if key not in self.best:
            members = self.infosets[key]
            legal = LEGAL_ACTIONS[members[0][0][2]]
            gains = {a: sum(reach * self.value(dict(self.children(h))[a]) for h, reach in members) for a in legal}
            self.best[key] = max(legal, key=gains.__getitem__)
        return self.best[key]


@dataclass(frozen=True, slots=True)
class KuhnMatchExploitability:
    """The best response's expected match reward (+1 win, 0 draw, -1 loss, the responder's view) when
    the policy is TextArena's player 0 / player 1, and their mean (NashConv / 2)."""

    best_response_player0: float
    best_response_player1: float
    exploitability: float
    rounds: int
    reward: str

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values."""
        return asdict(self)


def best_response_match_value(table: KuhnMatchTable, responder: int, rounds: int = 3, reward: str = "match", *,
                              allow_invalid_mass: bool = False) -> float:
    """The best responder's expected reward as TextArena player ``responder`` against ``table``."""
    match = _Match(table, responder, rounds, reward, allow_invalid_mass)
    root: History = ((), None, "")
    match.collect(root, 1.0)
    return match.value(root)


def kuhn_match_exploitability(table: KuhnMatchTable, rounds: int = 3, reward: str = "match", *,
                              allow_invalid_mass: bool = False) -> KuhnMatchExploitability:
    """Exact best response to ``table`` in both seats of the ``rounds``-round match (see the module docstring).
    ``allow_invalid_mass``: an information state's probabilities may sum below 1, the rest an invalid answer
    that loses the match (a model's reading); else such a table is refused, as
    :func:`~unstable.eval.solvers.kuhn.kuhn_exploitability` refuses it."""
    vs0 = best_response_match_value(table, responder=1, rounds=rounds, reward=reward,
                                    allow_invalid_mass=allow_invalid_mass)
    vs1 = best_response_match_value(table, responder=0, rounds=rounds, reward=reward,
                                    allow_invalid_mass=allow_invalid_mass)
    return KuhnMatchExploitability(vs0, vs1, (vs0 + vs1) / 2, rounds, reward)


def kuhn_match_info_states(rounds: int = 3) -> list[str]:
    """Every information-state key at which a player is to act, both seats (7,212 for 3 rounds)."""
    keys: set[str] = set()
    stack: list[History] = [((), None, "")]
    probe = _Match({}, responder=0, rounds=rounds, reward="match")
    while stack:
        history = stack.pop()
        if probe.terminal_value(history) is not None:
            continue
        if history[1] is not None:
            keys.add(info_state(history, _actor(history)))
        stack.extend(child for action, child in probe.children(history) if action != INVALID)
    return sorted(keys, key=lambda k: (k.count("|"), k))


def match_table_from_hand_table(table: KuhnTable, rounds: int = 3) -> dict[str, Mapping[str, float]]:
    """A match policy that plays every round by the per-hand ``table``, ignoring earlier rounds."""
    return {key: table[key.rsplit("|", 1)[-1]] for key in kuhn_match_info_states(rounds)}
