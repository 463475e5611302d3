"""The states of a small game as an LLM seat sees them: every decision point, with its real observation; and each
solved game as one :class:`SolvedGame`, passed down instead of its env id (OpenSpiel's ``exploitability(game, ...)``).

A policy is read in the states an exploitability solver asks about: every reachable TicTacToe board,
and the 12 round-1 information sets of Kuhn poker. The observation of each is not written by hand:
a move sequence that reaches the state is replayed in a real TextArena env, made fresh for the
sequence (``ta.make`` + ``reset``, as :func:`unstable.collection.rollout.play_game` does; a reset env
keeps the previous game's messages in its observation wrapper), and the observation is read the way
the turn loop reads it (``get_observation`` then the same text conversion). The prompt template is
applied later (:mod:`unstable.eval.policy_reading`).

TextArena's ``reset`` seeds the global ``random`` module; the caller's state is restored after
each replay.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import product
from operator import methodcaller
from typing import Any

from unstable.collection.rollout import _as_text
from unstable.eval.solvers import board_key, kuhn_exploitability, reachable_boards, tictactoe_exploitability
from unstable.eval.solvers.kuhn import kuhn_own_reach
from unstable.eval.solvers.openspiel import openspiel_exploitability
from unstable.eval.solvers.tictactoe import tictactoe_own_reach
from unstable.games import openspiel
from unstable.games.envs import base_name, make_env
from unstable.games.legal_moves import _unwrap, legal_moves

KUHN_CARDS = ("J", "Q", "K")
KUHN_HISTORIES = ((), ("check",), ("bet",), ("check", "bet"))
"""Round-1 betting histories before a decision: first to act, second after a check, second after a bet,
first after check-bet."""
MAX_DEAL_SEEDS = 10_000
Table = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class GameState:
    """A decision point: its ``key`` (a TicTacToe board, or ``(card, history)`` for Kuhn), the seat to
    move, a ``history`` of moves (as sent to the game) that reaches it, the ``observation`` that seat
    sees there, and its legal ``moves`` (as the game writes them, e.g. ``"[4]"``)."""

    key: Any
    player: int
    history: tuple[str, ...]
    observation: str
    moves: tuple[str, ...]
    seed: int = 0


def replay(env_id: str, history: Sequence[str], seed: int = 0) -> tuple[int, str, Any]:
    """Play ``history`` in a fresh ``env_id`` (seeded ``seed``) and return ``(player to move,
    observation text, env)``. Raises ``ValueError`` when a move is invalid or ends the game."""
    outer = random.getstate()
    try:
        env = make_env(env_id)
        env.reset(num_players=2, seed=seed)
        env.state.error_allowance = 0
        for i, move in enumerate(history):
            done, _ = env.step(move)
            if done:
                raise ValueError(f"{env_id}: move {i} ({move!r}) of {list(history)} ends the game")
        player, raw = env.get_observation()
        return player, _as_text(raw), env
    finally:
        random.setstate(outer)


# ----------------------------------------------------------------------------- TicTacToe
def board_string(env: Any) -> str:
    """The TicTacToe board of a live env as the solvers key it (:func:`~unstable.eval.solvers.board_key`)."""
    return board_key(_unwrap(env).state.game_state["board"])


def _first_mark(env_id: str) -> str:
    """The mark of the player who moves first (TextArena: player 0, ``"O"``), read from a real env."""
    _, _, env = replay(env_id, ["[0]"])
    return board_string(env)[0]


def canonical_history(board: str, first: str) -> tuple[str, ...]:
    """A move sequence reaching ``board``: each side's cells in increasing order, alternating from ``first``.

    Valid for every reachable board that is not over: an earlier position holds a subset of each
    side's marks, so it holds no line the final board does not."""
    second = "X" if first == "O" else "O"
    mine = [i for i, c in enumerate(board) if c == first]
    theirs = [i for i, c in enumerate(board) if c == second]
    order = [m for pair in zip(mine, theirs, strict=False) for m in pair] + mine[len(theirs):]
    return tuple(f"[{cell}]" for cell in order)


def reversed_history(board: str, first: str) -> tuple[str, ...]:
    """Another sequence reaching ``board``: each side's cells in decreasing order (equal to
    :func:`canonical_history` when each side has at most one mark)."""
    second = "X" if first == "O" else "O"
    mine = [i for i, c in enumerate(board) if c == first][::-1]
    theirs = [i for i, c in enumerate(board) if c == second][::-1]
    order = [m for pair in zip(mine, theirs, strict=False) for m in pair] + mine[len(theirs):]
    return tuple(f"[{cell}]" for cell in order)


def tictactoe_states(env_id: str, boards: Sequence[str] | None = None) -> dict[str, GameState]:
    """The decision states of TicTacToe ``env_id``: ``boards`` (default: the solvers' 4,520
    :func:`~unstable.eval.solvers.reachable_boards`, where the game is not over) each reached by
    :func:`canonical_history` in a real env."""
    if base_name(env_id) != "TicTacToe":
        raise ValueError(f"tictactoe_states needs a TicTacToe env id, got {env_id!r}")
    first = _first_mark(env_id)
    states = {}
    for board in boards if boards is not None else reachable_boards():
        history = canonical_history(board, first)
        player, observation, env = replay(env_id, history)
        if board_string(env) != board:
            raise AssertionError(f"replaying {history} gave board {board_string(env)!r}, not {board!r}")
        states[board] = GameState(board, player, history, observation, tuple(legal_moves(env_id, env, player)))
    return states


def tictactoe_history_dependent(env_id: str, states: Mapping[str, GameState], render: Callable[[str], str]) -> bool:
    """Whether some board's prompt (``render`` of its observation in ``states``) changes when the board is
    reached by another move order (:func:`reversed_history`, replayed in ``env_id``)."""
    first = "O" if states[" " * 9].player == 0 else "X"
    for board, state in states.items():
        other = reversed_history(board, first)
        if other != state.history:
            _, observation, _ = replay(env_id, other)
            if render(observation) != render(state.observation):
                return True
    return False


# ----------------------------------------------------------------------------- Kuhn poker
def _deal_seed(env_id: str, cards: tuple[int, int], start: int = 0) -> int:
    """The first reset seed from ``start`` whose round-1 deal gives player 0 and 1 the ``cards`` (0=J, 1=Q, 2=K)."""
    for seed in range(start, start + MAX_DEAL_SEEDS):
        _, _, env = replay(env_id, (), seed)
        dealt = _unwrap(env).state.game_state["player_cards"]
        if (dealt[0], dealt[1]) == cards:
            return seed
    raise RuntimeError(f"{env_id}: no seed in [{start}, {start + MAX_DEAL_SEEDS}) deals {cards}")


def kuhn_states(env_id: str) -> dict[tuple[str, tuple[str, ...]], GameState]:
    """The 12 round-1 information sets of Kuhn poker ``env_id``: keyed ``(card, history)`` with ``card``
    in ``"J"``, ``"Q"``, ``"K"`` (the acting player's) and ``history`` one of :data:`KUHN_HISTORIES`.

    Each is replayed with a deal that gives the acting player ``card``; the observation is checked to
    be the same for both cards the opponent can hold (an observation that differed would leak the
    opponent's card, and the state would not be an information set)."""
    if base_name(env_id) != "KuhnPoker":
        raise ValueError(f"kuhn_states needs a KuhnPoker env id, got {env_id!r}")
    seeds = {cards: _deal_seed(env_id, cards) for cards in product(range(3), repeat=2) if cards[0] != cards[1]}
    states = {}
    for history in KUHN_HISTORIES:
        for rank, card in enumerate(KUHN_CARDS):
            seen = []
            for other in (r for r in range(3) if r != rank):
                player = _acting_player(env_id, history)
                cards = (rank, other) if player == 0 else (other, rank)
                moves = tuple(f"[{m}]" for m in history)
                actor, observation, env = replay(env_id, moves, seeds[cards])
                if actor != player:
                    raise AssertionError(f"{env_id}: expected player {player} to act after {history}, got {actor}")
                seen.append(GameState((card, history), actor, moves, observation,
                                      tuple(legal_moves(env_id, env, actor)), seeds[cards]))
            if seen[0].observation != seen[1].observation:
                raise ValueError(f"{env_id}: the observation at ({card}, {history}) depends on the opponent's card")
            states[(card, history)] = seen[0]
    return states


def _acting_player(env_id: str, history: tuple[str, ...]) -> int:
    """Who acts after ``history`` in round 1 (TextArena's round 1 starts with player 1)."""
    player, _, _ = replay(env_id, ())
    return player if len(history) % 2 == 0 else 1 - player


# ----------------------------------------------------------------------------- OpenSpiel games
def openspiel_states(env_id: str) -> dict[str, GameState]:
    """Every information state of the OpenSpiel game of ``env_id`` (``"openspiel:<game>"``), as OpenSpiel's
    ``TabularPolicy`` enumerates them, keyed by the game's information-state string; each with one state
    of it, the observation the env shows there (:func:`unstable.games.openspiel.observation`, the same
    function the turn loop reads) and its move labels. ``history`` holds that state's action ids."""
    from open_spiel.python import policy as spiel_policy

    if not openspiel.is_openspiel_id(env_id):
        raise ValueError(f"openspiel_states needs an 'openspiel:' env id, got {env_id!r}")
    tabular = spiel_policy.TabularPolicy(openspiel.load_game(env_id))
    states = {}
    for key, row in tabular.state_lookup.items():
        state = tabular.states[row]
        states[key] = GameState(key, state.current_player(), tuple(str(a) for a in state.history()),
                                openspiel.observation(env_id, state), tuple(openspiel.move_labels(state)))
    return states


# ----------------------------------------------------------------------------- The games, as objects
class NoSolverError(ValueError):
    """Exploitability was asked for a game that has no solver."""


@dataclass(frozen=True, slots=True)
class SolvedGame:
    """A game with an exact exploitability solver, for one env id (:func:`solved_game`).

    ``name``: its base name (``"openspiel"`` for every ``openspiel:`` id). ``states()``: the decision states its
    solver needs (this module's ``*_states``), keyed. ``state_name(key)``, ``move_name(move)``: their names in a
    policy table (a move as the game writes it, ``"[4]"``). ``exploitability(table)``: the solver's numbers
    (``"exploitability"`` the headline) for a table, state name -> move name -> probability, the rest of a state's
    mass an invalid answer; ``scores_invalid_mass``: whether the solver counts that rest as a loss (OpenSpiel's
    renormalises it away, :mod:`unstable.eval.solvers.openspiel`). ``own_reach(table)``: each state's weight in the
    checkpoint average (:mod:`unstable.eval.average_policy`); ``None``: not computed (OpenSpiel).
    ``history_dependent(states, render)``: whether a template's prompts depend on the move order reaching a state;
    ``None``: a state holds its history.
    """

    name: str
    states: Callable[[], dict[Any, GameState]]
    exploitability: Callable[[Table], dict[str, Any]]
    state_name: Callable[[Any], str] = str
    move_name: Callable[[str], str] = str
    own_reach: Callable[[Table], dict[str, float]] | None = None
    history_dependent: Callable[[dict[Any, GameState], Callable[[str], str]], bool] | None = None
    scores_invalid_mass: bool = True


_BARE = methodcaller("strip", "[]")  # a TextArena move as a table names it: "[4]" -> "4", "[bet]" -> "bet"


def _tictactoe_exploitability(table: Table) -> dict[str, Any]:
    return tictactoe_exploitability({board: {int(m): p for m, p in probs.items()} for board, probs in table.items()},
                                    allow_invalid_mass=True).to_dict()


_GAMES: dict[str, Callable[[str], SolvedGame]] = {
    "TicTacToe": lambda env_id: SolvedGame(
        "TicTacToe", partial(tictactoe_states, env_id), _tictactoe_exploitability, move_name=_BARE,
        own_reach=tictactoe_own_reach, history_dependent=partial(tictactoe_history_dependent, env_id)),
    "KuhnPoker": lambda env_id: SolvedGame(
        "KuhnPoker", partial(kuhn_states, env_id), lambda t: kuhn_exploitability(t, allow_invalid_mass=True).to_dict(),
        state_name=lambda key: f"{key[0]}:{','.join(key[1])}",  # ("J", ("check", "bet")) -> "J:check,bet"
        move_name=_BARE, own_reach=kuhn_own_reach),
}
SOLVED_GAMES = tuple(_GAMES)
"""Games with an exact exploitability solver (any variant of their env ids), besides every OpenSpiel game."""


def has_solver(env_id: str) -> bool:
    """Whether ``env_id`` has an exploitability solver (a game of :data:`SOLVED_GAMES`, or any OpenSpiel game)."""
    return openspiel.is_openspiel_id(env_id) or base_name(env_id) in _GAMES


def solved_game(env_id: str) -> SolvedGame:
    """The :class:`SolvedGame` of ``env_id`` (an ``openspiel:`` game is solved by OpenSpiel's best response,
    :mod:`unstable.eval.solvers.openspiel`), else :class:`NoSolverError`."""
    if openspiel.is_openspiel_id(env_id):
        return SolvedGame("openspiel", partial(openspiel_states, env_id), partial(openspiel_exploitability, env_id),
                          scores_invalid_mass=False)
    if not has_solver(env_id):
        raise NoSolverError(f"no exploitability solver for {env_id!r}; games with one: "
                            f"{', '.join(SOLVED_GAMES)} (e.g. TicTacToe-v0-train, KuhnPoker-v0-train) and "
                            "every two-player OpenSpiel game (openspiel:leduc_poker)")
    return _GAMES[base_name(env_id)](env_id)
