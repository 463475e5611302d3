"""``KuhnPoker-v0-chips``: Kuhn poker itself, one hand a game, scored in chips.

TextArena 0.7.4's ``KuhnPoker-v0`` differs from Kuhn's (1950) game in two ways that matter for
learning it (``textarena/envs/KuhnPoker/env.py``):

* a ``[bet]`` or ``[call]`` never enters the pot (``pot`` stays at the two antes), so every hand is
  worth one chip whatever is bet;
* the reward is the 3-hand match's win, draw or loss, not chips.

Under either rule calling a bet never does worse than folding, whatever the cards, so never folding
is an equilibrium and a model learns nothing from its card (measured: docs/evaluation.md, "A
KuhnPoker run"). ``KuhnPokerChipsEnv`` plays TextArena's env with both fixed: each bet and call
puts one chip in the pot, a game is one hand (player 1 opens, as in TextArena's first round), and
each player's reward is the chips it won or lost (+-1 or +-2). That is the game the per-hand
exploitability of :func:`~unstable.eval.solvers.kuhn_exploitability` measures. An invalid move ends
the game with -1 for the mover and +1 for the other (TextArena's rule): the ante, what a fold would
have cost, since a player who bet never acts again.

Registered on import of :mod:`unstable.games.envs` as ``KuhnPoker-v0-chips`` (with ``-train`` and
``-raw`` wrapper versions, as TextArena registers its games).
"""

from __future__ import annotations

import re
from typing import Any

from textarena.envs.KuhnPoker.env import KuhnPokerEnv

ENV_ID = "KuhnPoker-v0-chips"
_MOVE = re.compile(r"\[(Check|Bet|Fold|Call)\]", re.IGNORECASE)  # TextArena's own parse of a move


class KuhnPokerChipsEnv(KuhnPokerEnv):
    """One hand of Kuhn poker on TextArena's KuhnPoker env, with bets in the pot and chips as rewards."""

    def __init__(self) -> None:
        super().__init__(max_rounds=1)

    def _prompt(self, player_id: int, game_state: dict[str, Any]) -> str:
        return (
            f"You are Player {player_id} in one hand of Kuhn Poker.\n"
            "Game Rules:\n"
            "- Kuhn Poker uses a 3-card deck with J, Q, K (J lowest, K highest)\n"
            f"- Each player antes {self.ante} chip and receives 1 card (the cards are dealt without "
            "replacement, so you cannot have the same card as your opponent)\n"
            "- Your score is the chips you win or lose in the hand\n\n"
            "Action Rules:\n"
            "- '[check]': Pass without betting (only if no bet is on the table)\n"
            "- '[bet]': Add 1 chip to the pot (only if no bet is on the table)\n"
            "- '[call]': Match an opponent's bet by adding 1 chip to the pot\n"
            "- '[fold]': Surrender your hand and let your opponent win the pot\n"
        )

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        """TextArena's step, after a legal ``[bet]`` or ``[call]`` has moved one chip from the mover to the pot
        (before the parent settles a showdown, which pays the pot out)."""
        game = self.state.game_state
        found = _MOVE.search(action.strip())
        tree = game["current_legal_action_tree"]
        if found and isinstance(tree, dict) and found.group(1).lower() in ("bet", "call") \
                and found.group(1).lower() in tree:
            game["pot"] += 1
            game["player_chips"][self.state.current_player_id] -= 1
        return super().step(action)

    def _init_round(self) -> None:
        """After the hand, TextArena's end of the game (winner by chips), with the rewards set to the chips."""
        game = self.state.game_state
        finished = game["current_round"] + 1 > self.max_rounds
        chips = dict(game["player_chips"])
        super()._init_round()
        if finished:
            self.state.rewards = {pid: int(chips[pid]) for pid in (0, 1)}


def register() -> None:
    """Register ``KuhnPoker-v0-chips`` and its ``-train``/``-raw`` versions with TextArena (once)."""
    import textarena.envs as ta_envs
    from textarena.envs.registration import ENV_REGISTRY, register_with_versions

    if ENV_ID in ENV_REGISTRY:
        return
    register_with_versions(id=ENV_ID, entry_point=KuhnPokerChipsEnv,
                           wrappers={"default": ta_envs.DEFAULT_WRAPPERS, "-train": ta_envs.BOARDGAME_WRAPPERS})
