"""Exact exploitability of a TicTacToe policy given as a table: best response and minimax play.

TicTacToe has perfect information, so a best response is an expectimax over the game tree: the
policy's moves are averaged with its probabilities, the responder's maximised. Exploitability is the
best response's expected score against the policy, averaged over the two seats (Lanctot et al.,
"A Unified Game-Theoretic Approach to Multiagent Reinforcement Learning", NeurIPS 2017, NashConv;
Johanson et al., "Accelerating Best Response Calculation in Large Extensive Games", IJCAI 2011). The
game's value is a draw, so 0 means unexploitable and 1 means the responder always wins.

Boards are 9-character strings, cells ``0..8`` as TextArena 0.7.4 numbers them (row-major, ``"[4]"``
is the centre), each ``"X"``, ``"O"`` or ``" "``. **TextArena's player 0 plays ``O`` and moves first**
(``TicTacToe/env.py``: ``'X' if current_player_id == 1 else 'O'``), so a board with as many ``O`` as
``X`` has ``O`` to move: join TextArena's ``game_state["board"]`` rows with ``""`` as ``" "`` and the
key matches. A table that writes the first mover as ``X`` fails with a message saying so.

Invalid moves: ``1 - sum(probabilities)`` at a board is the chance the policy answers with no legal
cell, in a model's reading (``allow_invalid_mass=True``; a table without it must sum to 1 at each
board). In TextArena an invalid move gets one retry by default (``TwoPlayerState(error_allowance=1)``),
but ``unstable`` plays with ``error_allowance=0`` (``TrainEnvSpec``/``EvalEnvSpec``; set in
``collection/rollout.py``): the first invalid move loses the game. So it counts as a loss here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from unstable.policies.baselines import (
    completing_cells,
    tictactoe_heuristic_cells,
    tictactoe_optimal_cells,
    tictactoe_winner,
)

Board = str
TicTacToeTable = Mapping[Board, Mapping[int, float]]
CellChooser = Callable[[tuple[str, ...], str], list[int]]

FIRST, SECOND = "O", "X"
"""The marks of TextArena's player 0 (moves first) and player 1."""
EMPTY_BOARD: Board = " " * 9
_TOLERANCE = 1e-9


def to_move(board: Board) -> str:
    """The mark to move on ``board``: ``"O"`` (the first mover) when the counts are equal, else ``"X"``."""
    return FIRST if board.count(FIRST) == board.count(SECOND) else SECOND


def board_key(rows: Sequence[Sequence[str]]) -> Board:
    """The table key of TextArena's ``game_state["board"]`` (3 rows of ``""``, ``"X"``, ``"O"``)."""
    return "".join(mark or " " for row in rows for mark in row)


def _tuple(board: Board) -> tuple[str, ...]:
    """The board as :mod:`unstable.policies.baselines` keeps it (``""`` for an empty cell)."""
    return tuple("" if mark == " " else mark for mark in board)


def _play(board: Board, cell: int) -> Board:
    return board[:cell] + to_move(board) + board[cell + 1 :]


def _empty(board: Board) -> list[int]:
    return [cell for cell, mark in enumerate(board) if mark == " "]


@functools.cache
def winner(board: Board) -> str | None:
    """The mark with three in a row, or ``None`` (memoised: 5,478 boards can occur)."""
    return tictactoe_winner(_tuple(board))


def _terminal(board: Board) -> bool:
    return winner(board) is not None or " " not in board


@functools.cache
def _reachable() -> frozenset[Board]:
    seen: set[Board] = set()
    stack = [EMPTY_BOARD]
    while stack:
        board = stack.pop()
        if board in seen or _terminal(board):
            continue
        seen.add(board)
        stack.extend(_play(board, cell) for cell in _empty(board))
    return frozenset(seen)


def reachable_boards() -> list[Board]:
    """Every non-terminal board reachable from the empty board (4,520), sorted by move count then text."""
    return sorted(_reachable(), key=lambda b: (9 - b.count(" "), b))


@dataclass(frozen=True, slots=True)
class TicTacToeExploitability:
    """Exact results of a table policy, per seat (``first``: the policy is TextArena's player 0, ``O``).

    ``best_response_first``/``_second``: the best response's expected score (+1 win, 0 draw, -1 loss,
    the responder's view) when the policy plays first/second; ``exploitability`` their mean.
    ``vs_optimal_first``/``_second``: the policy's (win, draw, loss) probabilities against the minimax
    player that picks uniformly among its optimal cells (the ``optimal`` baseline);
    ``vs_heuristic_first``/``_second`` the same against the one-ply ``heuristic`` baseline (win now,
    else block, else any empty cell, uniformly), whose best response wins 0.927 first and 0.467 second;
    ``vs_random_first``/``_second`` against the uniform random legal-move player.
    ``win_now_mass``: the policy's mean probability on a winning cell, over the boards where the player to
    move has one (``win_now_boards`` of them); ``block_mass``: on a blocking cell, over the boards where
    the opponent threatens to win and the mover cannot win at once (``block_boards``). The heuristic
    scores 1 on both; a greedy table's values are the share of those boards where its move wins or blocks.
    ``invalid_vs_best_response_first``/``_second``: the probability the policy makes an invalid move
    in play against the best response that takes the lowest-numbered of its best cells.
    """

    best_response_first: float
    best_response_second: float
    exploitability: float
    vs_optimal_first: tuple[float, float, float]
    vs_optimal_second: tuple[float, float, float]
    invalid_vs_best_response_first: float
    invalid_vs_best_response_second: float
    vs_heuristic_first: tuple[float, float, float] = (0.0, 0.0, 0.0)
    vs_heuristic_second: tuple[float, float, float] = (0.0, 0.0, 0.0)
    vs_random_first: tuple[float, float, float] = (0.0, 0.0, 0.0)
    vs_random_second: tuple[float, float, float] = (0.0, 0.0, 0.0)
    win_now_mass: float = 0.0
    win_now_boards: int = 0
    block_mass: float = 0.0
    block_boards: int = 0

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def _check_table(table: TicTacToeTable, allow_invalid_mass: bool) -> None:
    reachable = _reachable()
    for board, probs in table.items():
        if board not in reachable:
            hint = ""
            if isinstance(board, str) and len(board) == 9 and board.count(SECOND) > board.count(FIRST):
                hint = " (it has more X than O: in TextArena player 0 plays O and moves first)"
            raise ValueError(f"TicTacToe table key {board!r} is not a non-terminal board reachable from the "
                             f"empty board{hint}; keys are 9 characters of 'X', 'O', ' ', see reachable_boards()")
        empty = _empty(board)
        for cell, p in probs.items():
            if cell not in empty:
                raise ValueError(f"board {board!r}: cell {cell!r} is not an empty cell {empty}; give only "
                                 f"legal cells (the mass left over counts as an invalid move)")
            if not 0 <= p <= 1 + _TOLERANCE:
                raise ValueError(f"board {board!r}: probability of cell {cell} is {p}, not in [0, 1]")
        if sum(probs.values()) > 1 + 1e-6:
            raise ValueError(f"board {board!r}: probabilities sum to {sum(probs.values())} > 1")
        if sum(probs.values()) < 1 - 1e-6 and not allow_invalid_mass:
            raise ValueError(f"board {board!r}: probabilities sum to {sum(probs.values()):.6g} < 1; the rest would "
                             "count as an invalid move (a loss): give every board a distribution, or pass "
                             "allow_invalid_mass=True if the rest is meant as invalid answers")


class _Solver:
    """Memoised recursions over boards for one table; the policy's mark is fixed per call."""

    def __init__(self, table: TicTacToeTable):
        self.table = table

    def policy(self, board: Board) -> Mapping[int, float]:
        try:
            return self.table[board]
        except KeyError:
            raise ValueError(f"TicTacToe table has no entry for board {board!r} ({to_move(board)} to move), "
                             f"which the game can reach; give every board of reachable_boards()") from None

    def invalid(self, board: Board) -> float:
        mass = 1.0 - sum(self.policy(board).values())
        return mass if mass > _TOLERANCE else 0.0  # rounding, not an invalid move

    @functools.cache  # noqa: B019 -- one solver per call, dropped with it
    def best_response(self, board: Board, me: str) -> float:
        """Expected score of the best responder against policy ``me``, from the responder's view."""
        if (mark := winner(board)) is not None:
            return 1.0 if mark != me else -1.0
        if " " not in board:
            return 0.0
        if to_move(board) != me:
            return max(self.best_response(_play(board, cell), me) for cell in _empty(board))
        probs = self.policy(board)
        return self.invalid(board) + sum(p * self.best_response(_play(board, c), me) for c, p in probs.items())

    def best_cell(self, board: Board, me: str) -> int:
        values = {cell: self.best_response(_play(board, cell), me) for cell in _empty(board)}
        best = max(values.values())
        return min(cell for cell, value in values.items() if value >= best - _TOLERANCE)

    @functools.cache  # noqa: B019
    def invalid_vs_best(self, board: Board, me: str) -> float:
        if _terminal(board):
            return 0.0
        if to_move(board) != me:
            return self.invalid_vs_best(_play(board, self.best_cell(board, me)), me)
        probs = self.policy(board)
        return self.invalid(board) + sum(p * self.invalid_vs_best(_play(board, c), me) for c, p in probs.items())

    def vs_optimal(self, board: Board, me: str) -> tuple[float, float, float]:
        """(win, draw, loss) of policy ``me`` against the uniform-among-optimal minimax player."""
        return self.against(board, me, tictactoe_optimal_cells)

    @functools.cache  # noqa: B019
    def against(self, board: Board, me: str, cells_for: CellChooser) -> tuple[float, float, float]:
        """(win, draw, loss) of policy ``me`` against the player that picks uniformly among
        ``cells_for(board, its mark)``."""
        if (mark := winner(board)) is not None:
            return (1.0, 0.0, 0.0) if mark == me else (0.0, 0.0, 1.0)
        if " " not in board:
            return 0.0, 1.0, 0.0
        if to_move(board) != me:
            cells = cells_for(_tuple(board), to_move(board))
            branches = [(1 / len(cells), cell) for cell in cells]
            invalid = 0.0
        else:
            branches = [(p, cell) for cell, p in self.policy(board).items()]
            invalid = self.invalid(board)
        win, draw, loss = 0.0, 0.0, invalid
        for p, cell in branches:
            w, d, lo = self.against(_play(board, cell), me, cells_for)
            win, draw, loss = win + p * w, draw + p * d, loss + p * lo
        return win, draw, loss


def tictactoe_exploitability(table: TicTacToeTable, *, allow_invalid_mass: bool = False) -> TicTacToeExploitability:
    """Exact best-response and minimax results of ``table`` in both seats (see the module docstring).

    ``table`` maps every board of :func:`reachable_boards` (the policy plays both seats, so it is to
    move on each) to ``{cell: probability}`` over legal cells, summing to 1. With ``allow_invalid_mass``
    they may sum below 1 and the missing mass is an invalid move (a loss): a model's reading, whose other
    answers are invalid; without it such a board raises, as a mistyped table. Boards the policy's own
    moves cannot lead to (only through a cell it gives probability 0) may be left out; any other missing
    board raises, naming it.
    """
    _check_table(table, allow_invalid_mass)
    solver = _Solver(table)
    first = solver.best_response(EMPTY_BOARD, FIRST)
    second = solver.best_response(EMPTY_BOARD, SECOND)
    return TicTacToeExploitability(
        best_response_first=first,
        best_response_second=second,
        exploitability=(first + second) / 2,
        vs_optimal_first=solver.vs_optimal(EMPTY_BOARD, FIRST),
        vs_optimal_second=solver.vs_optimal(EMPTY_BOARD, SECOND),
        invalid_vs_best_response_first=solver.invalid_vs_best(EMPTY_BOARD, FIRST),
        invalid_vs_best_response_second=solver.invalid_vs_best(EMPTY_BOARD, SECOND),
        vs_heuristic_first=solver.against(EMPTY_BOARD, FIRST, tictactoe_heuristic_cells),
        vs_heuristic_second=solver.against(EMPTY_BOARD, SECOND, tictactoe_heuristic_cells),
        vs_random_first=solver.against(EMPTY_BOARD, FIRST, _any_empty_cell),
        vs_random_second=solver.against(EMPTY_BOARD, SECOND, _any_empty_cell),
        **_tactics(table),
    )


def _tactics(table: TicTacToeTable) -> dict[str, float | int]:
    """The mean probability ``table`` puts on winning cells where a win exists, and on blocking cells where
    a block is needed (and no win exists), over the boards of ``table``."""
    wins, blocks = [], []
    for board, probs in table.items():
        me, board_tuple = to_move(board), _tuple(board)
        if winning := completing_cells(board_tuple, me):
            wins.append(sum(probs.get(cell, 0.0) for cell in winning))
        elif blocking := completing_cells(board_tuple, FIRST if me == SECOND else SECOND):
            blocks.append(sum(probs.get(cell, 0.0) for cell in blocking))
    return {"win_now_mass": sum(wins) / len(wins) if wins else 0.0, "win_now_boards": len(wins),
            "block_mass": sum(blocks) / len(blocks) if blocks else 0.0, "block_boards": len(blocks)}


def _any_empty_cell(board: tuple[str, ...], _mark: str) -> list[int]:
    """The random legal-move player's cells: every empty one."""
    return [cell for cell, mark in enumerate(board) if not mark]


def tictactoe_table(cells_for: CellChooser | None = None) -> dict[Board, dict[int, float]]:
    """A table that picks uniformly among ``cells_for(board_tuple, mark)`` at every board (default:
    every empty cell, the uniform random player). ``cells_for`` takes the baselines' tuple board, e.g.
    :func:`~unstable.policies.baselines.tictactoe_optimal_cells` or ``tictactoe_heuristic_cells``."""
    table: dict[Board, dict[int, float]] = {}
    for board in reachable_boards():
        cells = cells_for(_tuple(board), to_move(board)) if cells_for else _empty(board)
        table[board] = {cell: 1 / len(cells) for cell in cells}
    return table


def tictactoe_own_reach(table: Mapping[Board, Mapping[str, float]]) -> dict[str, float]:
    """``x(b)`` for each board of ``table``, for the mark to move there (:mod:`unstable.eval.average_policy`): a
    forward pass over the boards by move count, the seat's moves weighted by ``table``, the opponent's by 1."""
    reach: dict[str, float] = {}
    for mark in "OX":
        weight = {EMPTY_BOARD: 1.0}
        for board in sorted(table, key=lambda b: 9 - b.count(" ")):
            w = weight.get(board, 0.0)
            if to_move(board) == mark:
                reach[board] = w
            if w == 0.0:
                continue
            for cell, mark_at in enumerate(board):
                if mark_at != " ":
                    continue
                child = _play(board, cell)
                if not _terminal(child):
                    step = table[board].get(str(cell), 0.0) if to_move(board) == mark else 1.0
                    weight[child] = weight.get(child, 0.0) + w * step
    return reach
