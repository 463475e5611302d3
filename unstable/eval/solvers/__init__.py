"""Exact exploitability of small games from a policy written as a table (see docs/evaluation.md,
"Exploitability"): TicTacToe by best response and minimax over every reachable board."""

from unstable.eval.solvers.tictactoe import (
    Board,
    TicTacToeExploitability,
    TicTacToeTable,
    reachable_boards,
    tictactoe_exploitability,
    tictactoe_table,
    to_move,
)

__all__ = [
    "Board",
    "TicTacToeExploitability",
    "TicTacToeTable",
    "reachable_boards",
    "tictactoe_exploitability",
    "tictactoe_table",
    "to_move",
]
