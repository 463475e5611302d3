"""OpenSpiel games as environments: ``"openspiel:leduc_poker"``, ``"openspiel:goofspiel(num_cards=4)"``.

Any two-player ``pyspiel`` game, by the name and parameters ``pyspiel.load_game`` reads, is played here as a
TextArena env (:class:`OpenSpielEnv`), so an ``openspiel:`` id works wherever an env id does (``build()``,
``unstable eval``, the quickstart, the league). A simultaneous-move game is played turn by turn
(``pyspiel.convert_to_turn_based``: the second mover does not see the first's move).

* **Chance** nodes are sampled from a ``random.Random(seed)`` of the game's reset seed: a seed is a deal.
* **What a seat sees** (:func:`observation`): the game's information-state string for the seat (its own
  perfect-recall view); in a game of perfect information the observation string (the board) instead, so a
  policy is one over boards. Then the legal moves, each the game's own ``state.action_to_string`` in
  brackets (:func:`move_labels`; turn-based games' ``[P0]`` prefix dropped).
* **An answer** is parsed as one of those labels (case and spacing aside); anything else is an invalid move,
  handled as TextArena's two-player games handle one (``error_allowance``, then -1 for the mover and +1 for
  the other).
* **Rewards** are the game's returns at the end.

``open_spiel`` is an optional extra (``pip install unstable-baselines[openspiel]``): it is imported when an
``openspiel:`` id is first used, with that advice if it is missing.
"""

from __future__ import annotations

import difflib
import functools
import random
import re
from typing import Any

import textarena as ta

PREFIX = "openspiel:"
INSTALL_HINT = "pip install unstable-baselines[openspiel]"
_SEAT_TAG = re.compile(r"^\[P\d+\]\s*")
_LABEL = re.compile(r"\[([^\[\]]*)\]")


def is_openspiel_id(env_id: object) -> bool:
    """Whether ``env_id`` names an OpenSpiel game (``"openspiel:<game>[(<params>)]"``)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def pyspiel_module() -> Any:
    """``pyspiel``, imported now; ``ImportError`` saying how to install the extra when it is absent."""
    try:
        import pyspiel
    except ImportError as exc:
        raise ImportError(f"OpenSpiel games need the open_spiel package: {INSTALL_HINT}") from exc
    return pyspiel


@functools.cache
def load_game(env_id: str) -> Any:
    """The ``pyspiel`` game of ``env_id``, turn-based; ``ValueError`` naming what is wrong (an unknown game, bad
    parameters, not two players, not sequential)."""
    if not is_openspiel_id(env_id):
        raise ValueError(f"{env_id!r} is not an OpenSpiel env id (they start with {PREFIX!r})")
    pyspiel = pyspiel_module()
    spec = env_id[len(PREFIX):].strip()
    name = spec.split("(", 1)[0]
    known = pyspiel.registered_names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown OpenSpiel game {name!r} in {env_id!r}{hint} (pyspiel.registered_names() lists "
                         "them, e.g. kuhn_poker, leduc_poker, goofspiel, liars_dice, tic_tac_toe)")
    try:
        game = pyspiel.load_game(spec)
    except pyspiel.SpielError as exc:
        raise ValueError(f"OpenSpiel could not load {spec!r}: {str(exc).strip().splitlines()[-1]}") from None
    if game.get_type().dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        game = pyspiel.convert_to_turn_based(game)
    if game.num_players() != 2:
        raise ValueError(f"{env_id!r} has {game.num_players()} players; the OpenSpiel bridge plays two-player games")
    if game.get_type().dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise ValueError(f"{env_id!r} is not a sequential game ({game.get_type().dynamics})")
    return game


def zero_sum(env_id: str) -> bool:
    """Whether the game of ``env_id`` is zero-sum (its returns sum to 0 in every play)."""
    return load_game(env_id).get_type().utility == pyspiel_module().GameType.Utility.ZERO_SUM


def move_labels(state: Any) -> list[str]:
    """The legal moves of the player to move, as offered and accepted: ``"[<action string>]"`` in action order."""
    player = state.current_player()
    return [f"[{_SEAT_TAG.sub('', state.action_to_string(player, a)).strip()}]" for a in state.legal_actions()]


def view_string(state: Any, player: int) -> str:
    """What ``player`` sees: the information-state string, or the observation string in a perfect-information
    game (the board, whatever the move order)."""
    game_type = state.get_game().get_type()
    perfect = game_type.information == type(game_type.information).PERFECT_INFORMATION
    if perfect and game_type.provides_observation_string:
        return state.observation_string(player).strip()
    return state.information_state_string(player).strip()


def observation(env_id: str, state: Any) -> str:
    """The text the player to move is shown: the game, the seat, its view and the legal moves (three parts
    at fixed places, which template ``qwen3-spiel`` keeps short)."""
    player = state.current_player()
    return (f"OpenSpiel game: {env_id[len(PREFIX):]}\nYou are player {player}.\nState:\n{view_string(state, player)}\n"
            f"Moves: {' '.join(move_labels(state))}")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def parse_action(state: Any, answer: str) -> int | None:
    """The action ``answer`` names (a bracketed label of :func:`move_labels`, case and spacing aside), or ``None``."""
    labels = {_norm(label[1:-1]): a for label, a in zip(move_labels(state), state.legal_actions(), strict=True)}
    found = _LABEL.findall(answer)
    if len(found) != 1:
        return None
    return labels.get(_norm(found[0]))


def sample_chance(state: Any, rng: random.Random) -> None:
    """Play out chance nodes from ``rng`` until a player is to move or the game is over."""
    while state.is_chance_node():
        actions, probs = zip(*state.chance_outcomes(), strict=True)
        state.apply_action(rng.choices(actions, weights=probs)[0])


class OpenSpielEnv(ta.Env):
    """A two-player OpenSpiel game as a TextArena env (see the module docstring)."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.game = load_game(env_id)

    def reset(self, num_players: int, seed: int | None = None) -> None:
        """A new play of the game; chance outcomes drawn from ``seed``."""
        if num_players != self.game.num_players():
            raise ValueError(f"{self.env_id} is played by {self.game.num_players()} players, not {num_players}")
        self.state = ta.TwoPlayerState(num_players=num_players, seed=seed)
        self._rng = random.Random(seed)
        self.spiel = self.game.new_initial_state()
        self.state.reset(game_state={"spiel": self.spiel})
        self._advance()

    def _advance(self) -> None:
        sample_chance(self.spiel, self._rng)
        if self.spiel.is_terminal():
            returns = self.spiel.returns()
            self.state.rewards = {pid: float(returns[pid]) for pid in range(2)}
            self.state.done = True
        else:
            self.state.current_player_id = self.spiel.current_player()

    def get_observation(self) -> tuple[int, str]:
        """``(player to move, observation text)``; the text is rebuilt from the game state every turn."""
        player = self.state.current_player_id
        self.state.get_current_player_observation()  # invalid-move notes are in the turn record; drop them here
        return player, observation(self.env_id, self.spiel)

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        """Apply the move ``action`` names, or count an invalid move (TextArena's rule)."""
        chosen = parse_action(self.spiel, action)
        if chosen is None:
            self.state.set_invalid_move(reason=f"{action!r} is not one of {' '.join(move_labels(self.spiel))}")
        else:
            self.spiel.apply_action(chosen)
            self._advance()
        return self.state.step(rotate_player=False)


def register(env_id: str) -> None:
    """Register ``env_id`` with TextArena (once per process), after checking its game loads."""
    from textarena.envs.registration import ENV_REGISTRY, EnvSpec

    load_game(env_id)
    if env_id not in ENV_REGISTRY:
        ENV_REGISTRY[env_id] = EnvSpec(id=env_id, entry_point=OpenSpielEnv, default_wrappers=None,
                                       kwargs={"env_id": env_id})
