"""Legal moves of the live TextArena env, read per game: what scripted baselines play from.

TextArena has no common "legal actions" API, so each reader below reads that game's own state
(checked against the 0.7.4 source in ``textarena/envs/<Game>/env.py``) and formats each move
exactly as the game's parser accepts it. The scripted policies (``unstable.policies.scripted``)
play from these; specs and the registry only need the names here, not the policies.

Which scripted baselines each game has is named in :mod:`unstable.games.scripted_names`: every game
with a reader has ``"random"``; a few have stronger ones (``unstable.policies.baselines``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import textarena as ta

from unstable.games import openspiel
from unstable.games.envs import base_name
from unstable.games.scripted_names import OPENSPIEL_BASELINES, SCRIPTED_BASELINES, SCRIPTED_POLICIES


class NoScriptedBaselineError(ValueError):
    """A scripted baseline was asked for a game that has no legal-move reader."""


def _unwrap(env: Any) -> Any:
    """The bare TextArena env under any stack of wrappers (TextArena has no ``unwrapped``)."""
    while isinstance(env, ta.Wrapper):
        env = env.env
    return env


def _tictactoe(game_state: dict[str, Any]) -> list[str]:
    board = game_state["board"]  # 3x3 of '', 'X', 'O'; cell = row * 3 + col
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]


def _simple_tak(game_state: dict[str, Any]) -> list[str]:
    board = game_state["board"]  # n x n of '', 'O', 'X'; cell = row * n + col
    n = len(board)
    return [f"[{r * n + c}]" for r in range(n) for c in range(n) if board[r][c] == ""]


def _connect_four(game_state: dict[str, Any]) -> list[str]:
    top_row = game_state["board"][0]  # a column is playable while its top cell is '.'
    return [f"[col {c}]" for c, cell in enumerate(top_row) if cell == "."]


def _nim(game_state: dict[str, Any]) -> list[str]:
    piles = game_state["piles"]
    return [f"[{i} {q}]" for i, size in enumerate(piles) for q in range(1, size + 1)]


def _kuhn_poker(game_state: dict[str, Any]) -> list[str]:
    # The betting tree is walked as moves are made; its keys are exactly the legal actions now.
    tree = game_state["current_legal_action_tree"]
    return [f"[{action}]" for action in tree]


_READERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "TicTacToe": _tictactoe,
    "KuhnPoker": _kuhn_poker,
    "ConnectFour": _connect_four,
    "Nim": _nim,
    "SimpleTak": _simple_tak,
}

SUPPORTED_GAMES = tuple(_READERS)


def has_scripted_baseline(env_id: str) -> bool:
    """Whether scripted policies can play ``env_id`` (any variant of a supported game, or an OpenSpiel game)."""
    return openspiel.is_openspiel_id(env_id) or base_name(env_id) in _READERS


def require_legal_move_reader(env_id: str) -> None:
    """Raise :class:`NoScriptedBaselineError` if no scripted policy can play ``env_id``."""
    if not has_scripted_baseline(env_id):
        raise NoScriptedBaselineError(
            f"no scripted baseline for {env_id!r} (game {base_name(env_id)!r}): scripted policies "
            f"need a legal-move reader, and there is one only for {', '.join(SUPPORTED_GAMES)} (all "
            f"variants). Use a checkpoint or API opponent for this game, or add a reader in "
            f"unstable/games/legal_moves.py."
        )


def game_state(env_id: str, env: Any, player_id: int) -> dict[str, Any]:
    """The TextArena ``game_state`` of ``env`` (wrapped or ``-raw``), read for ``player_id``, who
    must be the player to move in a game that is not over. Only read: never mutate it."""
    require_legal_move_reader(env_id)
    state = _unwrap(env).state
    if state.done:
        raise ValueError(f"{env_id}: the game is over, there are no legal moves")
    if player_id != state.current_player_id:
        raise ValueError(
            f"{env_id}: asked for player {player_id}'s moves but player {state.current_player_id} is to move"
        )
    return state.game_state


def legal_moves(env_id: str, env: Any, player_id: int) -> list[str]:
    """The legal moves of ``player_id``, who must be the player to move, as action strings.

    ``env`` is the live env from ``ta.make`` (wrapped or ``-raw``); it is only read. The order is
    deterministic, so a seeded ``random.Random`` picks the same move for the same position.
    """
    state = game_state(env_id, env, player_id)  # raises first for a game without a reader
    if openspiel.is_openspiel_id(env_id):
        return openspiel.move_labels(state["spiel"])
    return _READERS[base_name(env_id)](state)


def scripted_baselines(env_id: str) -> tuple[str, ...]:
    """The scripted baselines that can play ``env_id`` (any variant of its game); none if no reader."""
    if openspiel.is_openspiel_id(env_id):
        return OPENSPIEL_BASELINES
    return SCRIPTED_BASELINES.get(base_name(env_id), ())


def check_scripted_opponent(name: str, env_id: str) -> None:
    """Fail early if the scripted policy ``name`` does not exist or cannot play ``env_id``."""
    if name not in SCRIPTED_POLICIES:
        raise ValueError(f"unknown scripted policy {name!r}; known: {', '.join(SCRIPTED_POLICIES)}")
    require_legal_move_reader(env_id)
    if name not in scripted_baselines(env_id):
        game = base_name(env_id)
        others = [g for g, names in SCRIPTED_BASELINES.items() if name in names]
        raise ValueError(
            f"scripted policy {name!r} cannot play {env_id!r}: game {game!r} has the scripted baselines "
            f"{', '.join(scripted_baselines(env_id))}; {name!r} plays only {', '.join(others)}"
        )
