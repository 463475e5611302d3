"""Scripted baselines stronger than random: one-ply heuristics, perfect TicTacToe, Kuhn-poker Nash.

Each baseline is a *chooser*, a function from the turn's :class:`TurnContext` to the move string,
wrapped by :class:`ScriptedPolicy`. Choosers read the live TextArena 0.7.4 state through
:func:`unstable.games.legal_moves.game_state` (which checks the seat is the one to move) and draw
every random choice from the seat's ``ctx.rng``, never the global ``random`` (TextArena reseeds it
on every ``reset`` and games are interleaved in one process). Candidate moves are listed in a fixed
order, so the same seed plays the same game.

The board logic is pure functions of plain tuples, so the tests can check it exhaustively.
Which names each game has is in :data:`unstable.games.legal_moves.SCRIPTED_BASELINES`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from fractions import Fraction

from unstable.games.legal_moves import game_state
from unstable.policies.base import PolicyOutput, TurnContext
from unstable.records import PolicyRef

Chooser = Callable[[TurnContext], str]


class ScriptedPolicy:
    """A scripted baseline: ``choose(ctx)`` returns the move, already formatted for the game."""

    def __init__(self, uid: str, choose: Chooser):
        self.ref = PolicyRef(uid=uid, kind="scripted")
        self.choose = choose

    async def act(self, ctx: TurnContext) -> PolicyOutput:
        """The chooser's move for ``ctx``, as both the action and the completion text."""
        move = self.choose(ctx)
        return PolicyOutput(action=move, format_ok=True, completion_text=move)


# ------------------------------------------------------------------------------------ TicTacToe
#: A TicTacToe board as TextArena keeps it, flattened row-major: cell ``row * 3 + col`` holds
#: ``""``, ``"X"`` or ``"O"``.
Board = tuple[str, ...]

_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
_OTHER = {"X": "O", "O": "X"}


def tictactoe_symbol(player_id: int) -> str:
    """Player 1 plays ``X``, player 0 ``O`` (and moves first): ``TicTacToe/env.py`` ``step``."""
    return "X" if player_id == 1 else "O"


def tictactoe_winner(board: Board) -> str | None:
    """The symbol with three in a row, or ``None``."""
    for a, b, c in _LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return None


def _play(board: Board, cell: int, symbol: str) -> Board:
    return (*board[:cell], symbol, *board[cell + 1 :])


def _empty_cells(board: Board) -> list[int]:
    return [cell for cell, mark in enumerate(board) if not mark]


def completing_cells(board: Board, symbol: str) -> list[int]:
    """The empty cells where ``symbol`` would make three in a row."""
    return [cell for cell in _empty_cells(board) if tictactoe_winner(_play(board, cell, symbol)) == symbol]


def tictactoe_heuristic_cells(board: Board, me: str) -> list[int]:
    """The cells the one-ply heuristic picks from uniformly: the ones that win now if any, else the
    ones that block the opponent's immediate win, else every empty cell. Winning comes before
    blocking (a win ends the game, so a block would only give the opponent another move)."""
    return completing_cells(board, me) or completing_cells(board, _OTHER[me]) or _empty_cells(board)


@functools.cache
def tictactoe_value(board: Board, to_move: str) -> int:
    """Minimax value of a position nobody has won yet, for the player to move: 1 they win, 0 draw,
    -1 they lose, with perfect play on both sides. Memoised: there are 4,520 positions still in play."""
    values = [_value_after(board, cell, to_move) for cell in _empty_cells(board)]
    return max(values, default=0)


def _value_after(board: Board, cell: int, symbol: str) -> int:
    after = _play(board, cell, symbol)
    if tictactoe_winner(after) == symbol:
        return 1
    return -tictactoe_value(after, _OTHER[symbol])


def tictactoe_optimal_cells(board: Board, me: str) -> list[int]:
    """The empty cells with the best minimax value for ``me``, who is to move.

    The optimal player picks among them uniformly (from ``ctx.rng``), not the fastest win: all of
    them keep the game-theoretic result, and a learner facing a deterministic opponent could
    memorise one line instead of learning the game.
    """
    values = {cell: _value_after(board, cell, me) for cell in _empty_cells(board)}
    best = max(values.values())
    return [cell for cell, value in values.items() if value == best]


def _tictactoe_board(env_id: str, env: object, player_id: int) -> Board:
    return tuple(mark for row in game_state(env_id, env, player_id)["board"] for mark in row)


def tictactoe_heuristic_moves(env_id: str, env: object, player_id: int) -> list[str]:
    """The moves the heuristic draws from uniformly in the live game
    (:func:`tictactoe_heuristic_cells`), formatted."""
    board = _tictactoe_board(env_id, env, player_id)
    return [f"[{cell}]" for cell in tictactoe_heuristic_cells(board, tictactoe_symbol(player_id))]


def tictactoe_heuristic(ctx: TurnContext) -> str:
    """``"heuristic"``: win now, else block, else a random legal cell."""
    return ctx.rng.choice(tictactoe_heuristic_moves(ctx.env_id, ctx.env, ctx.player_id))


def tictactoe_optimal_moves(env_id: str, env: object, player_id: int) -> list[str]:
    """The moves the optimal player draws from uniformly in the live game
    (:func:`tictactoe_optimal_cells`), formatted."""
    board = _tictactoe_board(env_id, env, player_id)
    return [f"[{cell}]" for cell in tictactoe_optimal_cells(board, tictactoe_symbol(player_id))]


def tictactoe_optimal(ctx: TurnContext) -> str:
    """``"optimal"``: a random cell among the minimax-best ones (never loses)."""
    return ctx.rng.choice(tictactoe_optimal_moves(ctx.env_id, ctx.env, ctx.player_id))


# ---------------------------------------------------------------------------------- ConnectFour
def connect_four_symbol(player_id: int) -> str:
    """Player 0 drops ``X``, player 1 ``O``: ``ConnectFour/env.py`` ``step``."""
    return "X" if player_id == 0 else "O"


def _landing_row(board: Sequence[Sequence[str]], col: int) -> int:
    """The row a disc dropped in ``col`` lands in (rows run top to bottom; the column is not full)."""
    return max(row for row in range(len(board)) if board[row][col] == ".")


def _connects_four(board: Sequence[Sequence[str]], row: int, col: int, disc: str) -> bool:
    """Whether ``disc`` at the empty ``(row, col)`` makes four or more in a line (TextArena's ``_check_win``)."""
    rows, cols = len(board), len(board[0])
    for d_row, d_col in ((0, 1), (1, 0), (1, 1), (1, -1)):
        total = 1
        for sign in (1, -1):
            r, c = row + sign * d_row, col + sign * d_col
            while 0 <= r < rows and 0 <= c < cols and board[r][c] == disc:
                total += 1
                r, c = r + sign * d_row, c + sign * d_col
        if total >= 4:
            return True
    return False


def connect_four_winning_columns(board: Sequence[Sequence[str]], disc: str) -> list[int]:
    """The open columns where dropping ``disc`` connects four. ``board`` is TextArena's
    ``game_state["board"]``: rows top to bottom, ``"."`` empty."""
    open_cols = [c for c, cell in enumerate(board[0]) if cell == "."]
    return [c for c in open_cols if _connects_four(board, _landing_row(board, c), c, disc)]


def connect_four_heuristic_columns(board: Sequence[Sequence[str]], me: str, opponent: str) -> list[int]:
    """The columns the one-ply heuristic picks from uniformly: the ones that connect four now if
    any, else the ones where the opponent would connect four next move, else every open column."""
    open_cols = [c for c, cell in enumerate(board[0]) if cell == "."]
    return connect_four_winning_columns(board, me) or connect_four_winning_columns(board, opponent) or open_cols


def connect_four_heuristic_moves(env_id: str, env: object, player_id: int) -> list[str]:
    """The moves the heuristic draws from uniformly in the live game
    (:func:`connect_four_heuristic_columns`), formatted."""
    board = game_state(env_id, env, player_id)["board"]
    me, opponent = connect_four_symbol(player_id), connect_four_symbol(1 - player_id)
    return [f"[col {c}]" for c in connect_four_heuristic_columns(board, me, opponent)]


def connect_four_heuristic(ctx: TurnContext) -> str:
    """``"heuristic"``: connect four now, else block the opponent's four, else a random open column."""
    return ctx.rng.choice(connect_four_heuristic_moves(ctx.env_id, ctx.env, ctx.player_id))


# ----------------------------------------------------------------------------------- KuhnPoker
#: The equilibrium parameter: the first player bets a Jack with probability alpha (any alpha in
#: [0, 1/3] is an equilibrium). 1/3 is the one that gains most against a random opponent in Kuhn
#: poker (+1/6 a hand in either seat, against +1/18 first with alpha = 0), and it folds a Queen least
#: often, which matters in TextArena's variant where bets do not raise the stakes (see below).
KUHN_ALPHA = Fraction(1, 3)

_J, _Q, _K = 0, 1, 2  # TextArena's card ranks: KuhnPoker/env.py ``self.deck = [0, 1, 2]``


def kuhn_nash_probability(card: int, opens: bool, facing_bet: bool, alpha: Fraction = KUHN_ALPHA) -> Fraction:
    """Probability that the Nash player bets (no bet on the table) or calls (facing a bet).

    The one-parameter family of equilibria of Kuhn poker (H. W. Kuhn, "A simplified two-person
    poker", Contributions to the Theory of Games I, 1950, pp. 97-103; as tabulated in Wikipedia's
    "Kuhn poker"): the first player (``opens``) bets J with probability alpha, K with 3 alpha, checks
    Q; after check-bet calls with Q with probability alpha + 1/3, always with K, never with J. The
    second player, facing a bet, calls with K, with Q with probability 1/3, folds J; checked to, bets
    K, bets J with probability 1/3, checks Q. First-player game value: -1/18 a hand.
    """
    if not 0 <= alpha <= Fraction(1, 3):
        raise ValueError(f"alpha must be in [0, 1/3] for a Kuhn-poker equilibrium, got {alpha}")
    if card not in (_J, _Q, _K):
        raise ValueError(f"card must be 0 (J), 1 (Q) or 2 (K), got {card!r}")
    table = {
        (True, False): (alpha, Fraction(0), 3 * alpha),  # opening: bet
        (True, True): (Fraction(0), alpha + Fraction(1, 3), Fraction(1)),  # after check-bet: call
        (False, False): (Fraction(1, 3), Fraction(0), Fraction(1)),  # checked to: bet
        (False, True): (Fraction(0), Fraction(1, 3), Fraction(1)),  # facing a bet: call
    }
    return table[opens, facing_bet][card]


def kuhn_nash_moves(env_id: str, env: object, player_id: int) -> dict[str, Fraction]:
    """The ``"nash"`` player's probability of each legal move in the live game (:func:`kuhn_nash_probability`),
    the bet or call first. Reads TextArena 0.7.4's KuhnPoker state: the seat's card, whether it opened this
    round (``starting_player``, which alternates from round to round, player 1 first) and the betting tree.

    TextArena's own ``KuhnPoker-v0`` never adds a bet to the pot (``pot`` stays at the two antes), so there
    every round is worth one chip whatever is bet, and folding a Queen gives up a round that calling could
    win: this strategy is an equilibrium of Kuhn poker (``KuhnPoker-v0-chips``), not of that variant.
    """
    state = game_state(env_id, env, player_id)
    tree = state["current_legal_action_tree"]
    card = state["player_cards"][player_id]
    opens = player_id == state["starting_player"]
    actions = set(tree)
    if actions == {"fold", "call"}:
        p = kuhn_nash_probability(card, opens, facing_bet=True)
        return {"[call]": p, "[fold]": 1 - p}
    # No bet yet: the opener sees the whole tree, the second player the subtree after "check".
    if actions == {"check", "bet"} and isinstance(tree["check"], dict) == opens:
        p = kuhn_nash_probability(card, opens, facing_bet=False)
        return {"[bet]": p, "[check]": 1 - p}
    raise ValueError(f"{env_id}: unexpected KuhnPoker state for player {player_id} (the betting tree "
                     f"of TextArena 0.7.4 assumed): legal {sorted(actions)}, opened the round: {opens}")


def kuhn_nash(ctx: TurnContext) -> str:
    """``"nash"``: the bet or call with the equilibrium's probability (:func:`kuhn_nash_moves`), else the check
    or fold."""
    (aggressive, p), (passive, _) = kuhn_nash_moves(ctx.env_id, ctx.env, ctx.player_id).items()
    return aggressive if ctx.rng.random() < p else passive


# ------------------------------------------------------------------------------- Teacher moves
#: (game, name) -> the set a baseline picks from uniformly, for the baselines that are uniform over a
#: set (a warm start can imitate them with a soft label, :mod:`unstable.models.warmstart`).
UNIFORM_MOVE_SETS: dict[tuple[str, str], Callable[[str, object, int], list[str]]] = {
    ("TicTacToe", "heuristic"): tictactoe_heuristic_moves,
    ("TicTacToe", "optimal"): tictactoe_optimal_moves,
    ("ConnectFour", "heuristic"): connect_four_heuristic_moves,
}

#: (game, name) -> the probability of each legal move, for the baselines that mix with set probabilities (a
#: warm start imitates them with those probabilities as its soft label).
MOVE_DISTRIBUTIONS: dict[tuple[str, str], Callable[[str, object, int], dict[str, Fraction]]] = {
    ("KuhnPoker", "nash"): kuhn_nash_moves,
}


#: (game, name) -> chooser for every baseline but ``"random"`` (``RandomLegalPolicy``).
CHOOSERS: dict[tuple[str, str], Chooser] = {
    ("TicTacToe", "heuristic"): tictactoe_heuristic,
    ("TicTacToe", "optimal"): tictactoe_optimal,
    ("ConnectFour", "heuristic"): connect_four_heuristic,
    ("KuhnPoker", "nash"): kuhn_nash,
}
