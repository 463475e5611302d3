"""Exact exploitability of small games from a policy written as a table (docs/evaluation.md,
"Exploitability"): TicTacToe by best response and minimax over every reachable board; Kuhn poker per
hand from its 12 information sets; the whole 3-round KuhnPoker-v0 match by an exact best response;
ConnectFour as bounds from a depth-limited best response (not exact)."""

from unstable.eval.solvers.connect_four import (
    ConnectFourExploitabilityBounds,
    ConnectFourTable,
    connect_four_exploitability_bounds,
    connect_four_positions,
    position_key,
)
from unstable.eval.solvers.kuhn import (
    INFO_SETS,
    KuhnExploitability,
    KuhnTable,
    kuhn_exploitability,
    kuhn_nash_table,
    uniform_kuhn_table,
)
from unstable.eval.solvers.kuhn_match import (
    KuhnMatchExploitability,
    KuhnMatchTable,
    kuhn_match_exploitability,
    kuhn_match_info_states,
    match_table_from_hand_table,
)
from unstable.eval.solvers.tictactoe import (
    Board,
    TicTacToeExploitability,
    TicTacToeTable,
    board_key,
    reachable_boards,
    tictactoe_exploitability,
    tictactoe_table,
    to_move,
)

__all__ = [
    "INFO_SETS",
    "Board",
    "ConnectFourExploitabilityBounds",
    "ConnectFourTable",
    "KuhnExploitability",
    "KuhnMatchExploitability",
    "KuhnMatchTable",
    "KuhnTable",
    "TicTacToeExploitability",
    "TicTacToeTable",
    "board_key",
    "connect_four_exploitability_bounds",
    "connect_four_positions",
    "kuhn_exploitability",
    "kuhn_match_exploitability",
    "kuhn_match_info_states",
    "kuhn_nash_table",
    "match_table_from_hand_table",
    "position_key",
    "reachable_boards",
    "tictactoe_exploitability",
    "tictactoe_table",
    "to_move",
    "uniform_kuhn_table",
]
