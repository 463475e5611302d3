"""Exact exploitability (``unstable.eval.solvers``): known answers, and cross-checks against OpenSpiel's
``best_response`` and ``exploitability`` on its own ``tic_tac_toe`` and ``kuhn_poker``."""

from __future__ import annotations

import random

import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import best_response

from unstable.eval.solvers import reachable_boards, tictactoe_exploitability, tictactoe_table, to_move
from unstable.policies.baselines import tictactoe_heuristic_cells, tictactoe_optimal_cells


# ------------------------------------------------------------------------------------ TicTacToe
class TicTacToeTablePolicy(os_policy.Policy):
    """A TicTacToe table as an OpenSpiel policy: OpenSpiel's player 0 (``x``, first) is TextArena's
    player 0 (``O``, first), and both number the cells row-major."""

    def __init__(self, game, table):
        super().__init__(game, [0, 1])
        self.table = table

    def action_probabilities(self, state, player_id=None):
        board = [" "] * 9
        for i, cell in enumerate(state.history()):
            board[cell] = "O" if i % 2 == 0 else "X"
        return dict(self.table["".join(board)])


def openspiel_best_response(table, responder: int) -> float:
    game = pyspiel.load_game("tic_tac_toe")
    return best_response.BestResponsePolicy(game, responder, TicTacToeTablePolicy(game, table)).value(
        game.new_initial_state())


def noisy_optimal_table(seed: int) -> dict[str, dict[int, float]]:
    """Seeded, non-uniform, not optimal: up to two optimal cells and one random cell, random weights
    leaning to the optimal ones. A small support keeps OpenSpiel's tree walk fast."""
    rng = random.Random(seed)
    table = {}
    for board in reachable_boards():
        cells = [c for c in range(9) if board[c] == " "]
        good = tictactoe_optimal_cells(tuple("" if m == " " else m for m in board), to_move(board))
        support = sorted(set(good[:2]) | {rng.choice(cells)})
        weights = [rng.random() + (3 if c in good else 0) for c in support]
        table[board] = {c: w / sum(weights) for c, w in zip(support, weights, strict=True)}
    return table


def test_reachable_boards_are_the_4520_positions_in_play_with_o_first():
    boards = reachable_boards()
    assert len(boards) == len(set(boards)) == 4520
    assert boards[0] == " " * 9 and to_move(" " * 9) == "O" and to_move("    O    ") == "X"
    assert all(b.count("O") - b.count("X") in (0, 1) for b in boards)


def test_the_best_response_value_equals_openspiel_on_a_seeded_table():
    table = noisy_optimal_table(seed=7)
    result = tictactoe_exploitability(table)
    # OpenSpiel's value is the responder's return (+1 win, -1 loss): responder 0 faces the policy second.
    assert result.best_response_second == pytest.approx(openspiel_best_response(table, 0), abs=1e-9)
    assert result.best_response_first == pytest.approx(openspiel_best_response(table, 1), abs=1e-9)
    assert 0.1 < result.best_response_first < 0.9 and 0.1 < result.best_response_second < 0.9  # not trivial
    assert result.exploitability == pytest.approx((result.best_response_first + result.best_response_second) / 2)


@pytest.mark.slow
@pytest.mark.parametrize("cells_for", [None, tictactoe_heuristic_cells], ids=["uniform", "heuristic"])
def test_the_best_response_value_equals_openspiel_on_full_support_tables(cells_for):
    table = tictactoe_table(cells_for)
    result = tictactoe_exploitability(table)
    assert result.best_response_second == pytest.approx(openspiel_best_response(table, 0), abs=1e-9)
    assert result.best_response_first == pytest.approx(openspiel_best_response(table, 1), abs=1e-9)


def test_known_answers_uniform_heuristic_optimal():
    """Exact fractions (OpenSpiel agrees: the slow test above); uniform and heuristic never beat optimal."""
    uniform = tictactoe_exploitability(tictactoe_table())
    assert (uniform.best_response_first, uniform.best_response_second) == pytest.approx((874 / 945, 191 / 192))
    assert uniform.vs_optimal_first == pytest.approx((0.0, 757 / 3402, 1 - 757 / 3402))
    heuristic = tictactoe_exploitability(tictactoe_table(tictactoe_heuristic_cells))
    assert (heuristic.best_response_first, heuristic.best_response_second) == pytest.approx((0.4, 89 / 96))
    assert heuristic.vs_optimal_first == pytest.approx((0.0, 263 / 315, 52 / 315))
    optimal = tictactoe_exploitability(tictactoe_table(tictactoe_optimal_cells))
    assert optimal.exploitability == pytest.approx(0.0, abs=1e-12)
    assert optimal.vs_optimal_first == pytest.approx((0.0, 1.0, 0.0)) == optimal.vs_optimal_second


def test_invalid_mass_counts_as_a_loss():
    always_invalid = tictactoe_exploitability({board: {} for board in reachable_boards()})
    assert always_invalid.exploitability == 1.0
    assert always_invalid.vs_optimal_first == (0.0, 0.0, 1.0)
    assert always_invalid.invalid_vs_best_response_first == 1.0 == always_invalid.invalid_vs_best_response_second
    # Optimal play that answers invalidly with probability 0.1 at every board: nobody wins a game of
    # valid optimal play, so the responder plays for the longest game (a full board) and wins exactly
    # when the policy errs in one of its 5 moves (first) or 4 moves (second).
    optimal = tictactoe_table(tictactoe_optimal_cells)
    leaky = {board: {c: 0.9 * p for c, p in probs.items()} for board, probs in optimal.items()}
    result = tictactoe_exploitability(leaky)
    assert result.best_response_first == pytest.approx(1 - 0.9**5, abs=1e-12)
    assert result.best_response_second == pytest.approx(1 - 0.9**4, abs=1e-12)
    assert result.exploitability == pytest.approx(0.376705, abs=1e-12)
    assert result.invalid_vs_best_response_first == pytest.approx(1 - 0.9**5, abs=1e-12)
    assert result.vs_optimal_first == pytest.approx((0.0, 0.9**5, 1 - 0.9**5), abs=1e-12)
    assert result.to_dict()["vs_optimal_first"] == list(result.vs_optimal_first)


def test_bad_tables_are_refused_with_the_board_named():
    table = tictactoe_table()
    missing = dict(table)
    del missing["    O    "]
    with pytest.raises(ValueError, match=r"no entry for board '    O    '"):
        tictactoe_exploitability(missing)
    with pytest.raises(ValueError, match="more X than O"):
        tictactoe_exploitability({**table, "    X    ": {0: 1.0}})
    with pytest.raises(ValueError, match="cell 4 is not an empty cell"):
        tictactoe_exploitability({**table, "    O    ": {4: 1.0}})
    with pytest.raises(ValueError, match="sum to"):
        tictactoe_exploitability({**table, " " * 9: {0: 0.7, 1: 0.7}})
