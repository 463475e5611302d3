"""Exact exploitability (``unstable.eval.solvers``): known answers, and cross-checks against OpenSpiel's
``best_response`` and ``exploitability`` on its own ``tic_tac_toe`` and ``kuhn_poker``."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from pathlib import Path

import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import best_response, exploitability

from unstable.eval.solvers import (
    INFO_SETS,
    board_key,
    connect_four_exploitability_bounds,
    connect_four_positions,
    kuhn_exploitability,
    kuhn_match_exploitability,
    kuhn_match_info_states,
    kuhn_nash_table,
    match_table_from_hand_table,
    position_key,
    reachable_boards,
    tictactoe_exploitability,
    tictactoe_table,
    to_move,
    uniform_kuhn_table,
)
from unstable.eval.solvers.kuhn import LEGAL_ACTIONS
from unstable.policies.baselines import tictactoe_heuristic_cells, tictactoe_optimal_cells

REPO = Path(__file__).resolve().parents[1]


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
    always_invalid = tictactoe_exploitability({board: {} for board in reachable_boards()}, allow_invalid_mass=True)
    assert always_invalid.exploitability == 1.0
    assert always_invalid.vs_optimal_first == (0.0, 0.0, 1.0)
    assert always_invalid.invalid_vs_best_response_first == 1.0 == always_invalid.invalid_vs_best_response_second
    # Optimal play that answers invalidly with probability 0.1 at every board: nobody wins a game of
    # valid optimal play, so the responder plays for the longest game (a full board) and wins exactly
    # when the policy errs in one of its 5 moves (first) or 4 moves (second).
    optimal = tictactoe_table(tictactoe_optimal_cells)
    leaky = {board: {c: 0.9 * p for c, p in probs.items()} for board, probs in optimal.items()}
    result = tictactoe_exploitability(leaky, allow_invalid_mass=True)
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


# ------------------------------------------------------------------------------------ Kuhn poker
KUHN = pyspiel.load_game("kuhn_poker")
_OPENSPIEL_HISTORY = {"": "", "p": "check", "b": "bet", "pb": "check,bet"}


def to_openspiel_kuhn(table) -> os_policy.TabularPolicy:
    """A per-hand table as OpenSpiel's TabularPolicy: its keys are ``<card 0-2><history of p/b>`` and
    its actions 0 = pass (check or fold), 1 = bet (bet or call); player 0 acts first."""
    policy = os_policy.TabularPolicy(KUHN)
    for key in policy.state_lookup:
        history = _OPENSPIEL_HISTORY[key[1:]]
        probs = table[f"{'JQK'[int(key[0])]}:{history}"]
        passive, aggressive = LEGAL_ACTIONS[history]
        policy.policy_for_key(key)[:] = [probs.get(passive, 0.0), probs.get(aggressive, 0.0)]
    return policy


def lopsided_kuhn_table() -> dict[str, dict[str, float]]:
    """Not uniform, not Nash: the aggressive action with probability 0.1, 0.7, 0.25 or 0.9, varying by key."""
    weights = (0.1, 0.7, 0.25, 0.9)
    return {key: dict(zip(LEGAL_ACTIONS[key.split(":", 1)[1]], (1 - weights[i % 4], weights[i % 4]), strict=True))
            for i, key in enumerate(INFO_SETS)}


@pytest.mark.parametrize("name, table", [("uniform", uniform_kuhn_table()), ("nash 1/3", kuhn_nash_table()),
                                         ("nash 0.1", kuhn_nash_table(0.1)), ("lopsided", lopsided_kuhn_table())])
def test_kuhn_exploitability_equals_openspiel(name, table):
    ours = kuhn_exploitability(table).exploitability
    assert ours == pytest.approx(exploitability.exploitability(KUHN, to_openspiel_kuhn(table)), abs=1e-6)


def test_kuhn_known_answers():
    uniform = kuhn_exploitability(uniform_kuhn_table())
    assert uniform.exploitability == pytest.approx(11 / 24)  # 0.458333..., OpenSpiel's uniform-policy value
    for alpha in (0.0, 0.1, 1 / 3):
        nash = kuhn_exploitability(kuhn_nash_table(alpha))
        assert nash.exploitability == pytest.approx(0.0, abs=1e-12)
        # Against an equilibrium the best response gets the game value: the first player's -1/18.
        assert nash.best_response_second == pytest.approx(-1 / 18) and nash.best_response_first == pytest.approx(1 / 18)
    # TextArena's stakes (a bet adds nothing): folding is never better than calling, so Nash is exploitable.
    assert kuhn_exploitability(kuhn_nash_table()).textarena_exploitability == pytest.approx(1 / 6)
    assert kuhn_exploitability(lopsided_kuhn_table()).exploitability == pytest.approx(37 / 60, abs=1e-12)


def test_kuhn_invalid_mass_is_a_fold():
    always_invalid = kuhn_exploitability({key: {} for key in INFO_SETS}, allow_invalid_mass=True)
    assert always_invalid.exploitability == 1.0 == always_invalid.textarena_exploitability
    # Nash that answers invalidly with probability 0.1 everywhere gives the best response more.
    leaky = {k: {a: 0.9 * p for a, p in v.items()} for k, v in kuhn_nash_table().items()}
    assert 0 < kuhn_exploitability(leaky, allow_invalid_mass=True).exploitability < 0.2


def test_a_table_that_sums_below_one_is_refused_unless_invalid_mass_is_meant():
    """A hand-written table whose probabilities sum below 1 was scored without a word, the rest counted as a
    loss (TicTacToe) or a fold (Kuhn). A reading's other answers are invalid moves, and say so."""
    ttt = tictactoe_table(tictactoe_optimal_cells)
    short = {**ttt, " " * 9: {c: 0.5 * p for c, p in ttt[" " * 9].items()}}
    with pytest.raises(ValueError, match=r"board ' {9}': probabilities sum to 0.5 < 1; .* allow_invalid_mass=True"):
        tictactoe_exploitability(short)
    assert tictactoe_exploitability(short, allow_invalid_mass=True).best_response_first == pytest.approx(0.5)
    kuhn = {**kuhn_nash_table(), "K:": {"bet": 0.6}}
    with pytest.raises(ValueError, match=r"Kuhn table 'K:': probabilities sum to 0.6 < 1; .* invalid answer"):
        kuhn_exploitability(kuhn)
    assert kuhn_exploitability(kuhn, allow_invalid_mass=True).exploitability > 0


def test_kuhn_bad_tables_are_refused_with_the_key_named():
    table = uniform_kuhn_table()
    with pytest.raises(ValueError, match="no entry for information set 'Q:bet'"):
        kuhn_exploitability({k: v for k, v in table.items() if k != "Q:bet"})
    with pytest.raises(ValueError, match="'fold' is not legal"):
        kuhn_exploitability({**table, "J:": {"fold": 1.0}})
    with pytest.raises(ValueError, match="not one of the 12"):
        kuhn_exploitability({**table, "A:": {"bet": 1.0}})


# -------------------------------------------------------------------- the 3-round KuhnPoker-v0 match
def test_the_match_has_7212_information_states_and_round_one_is_the_per_hand_table():
    keys = kuhn_match_info_states()
    assert len(keys) == 7212 and [sum(k.count("|") == r for k in keys) for r in range(3)] == [12, 288, 6912]
    assert set(keys[:12]) == set(INFO_SETS)
    assert "KJ:bet,call|Q?:check,bet,fold|J:check" in keys


@pytest.mark.parametrize("name, table", [("nash", kuhn_nash_table()), ("lopsided", lopsided_kuhn_table())])
def test_one_round_in_chips_equals_the_per_hand_textarena_value(name, table):
    match = kuhn_match_exploitability(match_table_from_hand_table(table, rounds=1), rounds=1, reward="chips")
    hand = kuhn_exploitability(table)
    # Player 1 opens round 1: the policy as player 0 acts second.
    assert match.best_response_player0 == pytest.approx(hand.textarena_best_response_second, abs=1e-12)
    assert match.best_response_player1 == pytest.approx(hand.textarena_best_response_first, abs=1e-12)


def test_the_match_against_a_history_blind_policy_is_a_best_of_three():
    """A policy that ignores earlier rounds makes the rounds independent, and each round is won or lost,
    so the best responder maximises each round's win probability p = (1 + per-hand value) / 2 and wins
    the match with P(at least 2 of 3). Player 1 opens rounds 1 and 3."""
    table = lopsided_kuhn_table()
    hand = kuhn_exploitability(table)
    first, second = (1 + hand.textarena_best_response_first) / 2, (1 + hand.textarena_best_response_second) / 2

    def best_of_three(a, b, c):
        return 2 * (a * b + a * c + b * c - 2 * a * b * c) - 1

    match = kuhn_match_exploitability(match_table_from_hand_table(table))
    assert match.best_response_player0 == pytest.approx(best_of_three(second, first, second), abs=1e-12)
    assert match.best_response_player1 == pytest.approx(best_of_three(first, second, first), abs=1e-12)
    assert 0 < match.exploitability < 1


def test_an_invalid_move_loses_the_match():
    """Invalid in round 3 only: the best responder only has to reach round 3."""
    table = match_table_from_hand_table(kuhn_nash_table())
    table = {key: ({} if key.count("|") == 2 else probs) for key, probs in table.items()}
    result = kuhn_match_exploitability(table, allow_invalid_mass=True)
    assert result.best_response_player0 == 1.0 == result.best_response_player1
    with pytest.raises(ValueError, match=r"no entry for information state '[JQK]:"):
        kuhn_match_exploitability({})
    # A hand-written table that sums below 1 is refused unless the rest is meant as invalid answers.
    with pytest.raises(ValueError, match=r"probabilities sum to 0\.9, not 1.*allow_invalid_mass=True"):
        kuhn_match_exploitability({k: {a: 0.9 * p for a, p in v.items()} for k, v in
                                   match_table_from_hand_table(kuhn_nash_table()).items()})


# ------------------------------------------------------------------------------------ the docs page
def test_the_exploitability_section_of_the_docs_runs_and_prints_what_it_shows(capsys):
    """docs/evaluation.md, "## Exploitability": its python blocks as one script print its text blocks."""
    section = (REPO / "docs" / "evaluation.md").read_text(encoding="utf-8").split("\n## Exploitability\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    script = "\n".join(re.findall(r"```python\n(.*?)```", section, re.S))
    shown = "".join(re.findall(r"```text\n(.*?)```", section, re.S))  # each python block's output, in order
    exec(compile(script, "docs/evaluation.md", "exec"), {})
    assert capsys.readouterr().out == shown


# ------------------------------------------------------------------------------------ ConnectFour
class ColumnsTable(Mapping):
    """A ConnectFour table computed on demand: ``share`` of the mass spread uniformly over
    ``columns(position)``, the rest invalid."""

    def __init__(self, columns, share: float = 1.0):
        self.columns, self.share = columns, share

    def __getitem__(self, position):
        cols = self.columns(position)
        return {c: self.share / len(cols) for c in cols}

    def __iter__(self):
        raise TypeError("computed on demand")

    def __len__(self):
        raise TypeError("computed on demand")


def _open(position):
    return [c for c in range(7) if position[c] == "."]


def test_connect_four_bounds_known_answers():
    assert connect_four_exploitability_bounds(ColumnsTable(_open, share=0.0), depth=3,
                                              allow_invalid_mass=True).exploitability == (1.0, 1.0)
    # Nobody can connect four before ply 7: until then only invalid moves decide, and the lower bound
    # is 1 - 2 * 0.9**k after the policy's k moves (upper bound 1).
    leaky = ColumnsTable(_open, share=0.9)
    for depth in (1, 2, 3, 4, 5):
        result = connect_four_exploitability_bounds(leaky, depth, allow_invalid_mass=True)
        first, second = (depth + 1) // 2, depth // 2
        assert result.best_response_first == pytest.approx((1 - 2 * 0.9**first, 1.0), abs=1e-12)
        assert result.best_response_second == pytest.approx((1 - 2 * 0.9**second, 1.0), abs=1e-12)
    # A policy that drops its discs in the lowest open column, moving second: the responder connects
    # four in another column at ply 7 (its fourth disc) before the policy's fourth.
    stacker = ColumnsTable(lambda p: [min(_open(p))])
    assert connect_four_exploitability_bounds(stacker, depth=6).best_response_second == (-1.0, 1.0)
    assert connect_four_exploitability_bounds(stacker, depth=7).best_response_second == (1.0, 1.0)
    assert len(connect_four_positions(3)) == 1 + 7 + 49


def test_connect_four_bad_tables_are_refused():
    with pytest.raises(ValueError, match=r"sum to 0\.9 < 1.*allow_invalid_mass=True"):
        connect_four_exploitability_bounds(ColumnsTable(_open, share=0.9), depth=2)
    with pytest.raises(ValueError, match=r"no entry for position '\.{42}'"):
        connect_four_exploitability_bounds({}, depth=2)
    with pytest.raises(ValueError, match="must give open columns"):
        connect_four_exploitability_bounds({"." * 42: {9: 1.0}}, depth=1)


# ---------------------------------------------------------------- the keys, read from real TextArena
def test_the_keys_of_textarena_states_follow_the_solvers_conventions():
    """TicTacToe: player 0 plays O and moves first; ConnectFour: player 0 drops X first. The key of the
    live board is a board the solver knows, with the mark of the player to move."""
    import textarena as ta

    env = ta.make("TicTacToe-v0-raw")
    env.reset(num_players=2, seed=3)
    for cell in (4, 0, 8):
        key = board_key(env.state.game_state["board"])
        assert key in set(reachable_boards())
        assert to_move(key) == ("O" if env.state.current_player_id == 0 else "X")
        env.step(f"[{cell}]")
    assert board_key(env.state.game_state["board"]) == "X   O   O"

    env = ta.make("ConnectFour-v0-raw")
    env.reset(num_players=2, seed=3)
    env.step("[col 3]")
    key = position_key(env.state.game_state["board"])
    assert key == "." * 38 + "X..." and key in connect_four_positions(2)
    assert env.state.current_player_id == 1  # O to move: the counts differ


def test_boards_the_policy_never_leads_to_may_be_left_out():
    """The optimal policy's table cut down to the boards its own support can reach (in either seat)
    gives the same result as the full table; a board it can reach, removed, is named."""
    full = tictactoe_table(tictactoe_optimal_cells)
    needed = set()
    for mark in ("O", "X"):
        stack = [" " * 9]
        while stack:
            board = stack.pop()
            if board not in full or (board, mark) in needed:
                continue
            needed.add((board, mark))
            cells = full[board] if to_move(board) == mark else [c for c in range(9) if board[c] == " "]
            stack.extend(board[:c] + to_move(board) + board[c + 1:] for c in cells)
    kept = {board: full[board] for board, mark in needed if to_move(board) == mark}
    assert 0 < len(kept) < len(full)
    tactics = ("win_now_mass", "win_now_boards", "block_mass", "block_boards")  # over the boards given
    cut, whole = tictactoe_exploitability(kept).to_dict(), tictactoe_exploitability(full).to_dict()
    assert {k: v for k, v in cut.items() if k not in tactics} == {k: v for k, v in whole.items() if k not in tactics}
    assert cut["win_now_boards"] < whole["win_now_boards"]
    removed = sorted(kept, key=lambda b: (9 - b.count(" "), b))[-1]
    with pytest.raises(ValueError, match=f"no entry for board '{removed}'"):
        tictactoe_exploitability({b: p for b, p in kept.items() if b != removed})


def test_tictactoe_result_against_the_heuristic_matches_a_direct_recursion():
    """The heuristic against itself, and random against it, by the table solver and by a plain recursion
    over the game written here (both seats; values not exact in binary: 0.311 first for the heuristic)."""
    from unstable.policies.baselines import tictactoe_heuristic_cells, tictactoe_winner

    def wdl(board, mover, me, mine, theirs):
        if (mark := tictactoe_winner(board)) is not None:
            return (1.0, 0.0, 0.0) if mark == me else (0.0, 0.0, 1.0)
        if all(board):
            return (0.0, 1.0, 0.0)
        cells = (mine if mover == me else theirs)(board, mover)
        out = [0.0, 0.0, 0.0]
        for cell in cells:
            after = (*board[:cell], mover, *board[cell + 1:])
            for i, x in enumerate(wdl(after, "X" if mover == "O" else "O", me, mine, theirs)):
                out[i] += x / len(cells)
        return tuple(out)

    def anything(board, _mark):
        return [c for c in range(9) if not board[c]]

    empty = ("",) * 9
    for cells_for, table in ((tictactoe_heuristic_cells, tictactoe_table(tictactoe_heuristic_cells)),
                             (anything, tictactoe_table())):
        result = tictactoe_exploitability(table)
        assert result.vs_heuristic_first == pytest.approx(wdl(empty, "O", "O", cells_for, tictactoe_heuristic_cells))
        assert result.vs_heuristic_second == pytest.approx(wdl(empty, "O", "X", cells_for, tictactoe_heuristic_cells))
        assert result.vs_random_first == pytest.approx(wdl(empty, "O", "O", cells_for, anything))
        assert result.vs_random_second == pytest.approx(wdl(empty, "O", "X", cells_for, anything))
    heuristic = tictactoe_exploitability(tictactoe_table(tictactoe_heuristic_cells))
    assert heuristic.vs_heuristic_first[0] == pytest.approx(0.3111, abs=1e-3)
    assert heuristic.vs_heuristic_first[0] == pytest.approx(heuristic.vs_heuristic_second[2])  # symmetric


def test_tictactoe_tactics_read_the_win_and_block_mass():
    """The heuristic puts all its mass on wins and blocks; the uniform player w/k on a board with w winning
    cells among k empty ones, averaged (recomputed here from the winner function alone)."""
    from unstable.eval.solvers.tictactoe import reachable_boards, to_move
    from unstable.policies.baselines import tictactoe_heuristic_cells, tictactoe_winner

    heuristic = tictactoe_exploitability(tictactoe_table(tictactoe_heuristic_cells))
    assert heuristic.win_now_mass == pytest.approx(1.0) and heuristic.block_mass == pytest.approx(1.0)
    wins, blocks = [], []
    for board in reachable_boards():
        me = to_move(board)
        other = "X" if me == "O" else "O"
        cells = [c for c in range(9) if board[c] == " "]
        tup = tuple("" if m == " " else m for m in board)

        def completes(cell, mark, tup=tup):
            return tictactoe_winner((*tup[:cell], mark, *tup[cell + 1:])) == mark

        w = [c for c in cells if completes(c, me)]
        b = [c for c in cells if completes(c, other)]
        if w:
            wins.append(len(w) / len(cells))
        elif b:
            blocks.append(len(b) / len(cells))
    uniform = tictactoe_exploitability(tictactoe_table())
    assert (uniform.win_now_boards, uniform.block_boards) == (len(wins), len(blocks)) == (2358, 1484)
    assert uniform.win_now_mass == pytest.approx(sum(wins) / len(wins))
    assert uniform.block_mass == pytest.approx(sum(blocks) / len(blocks))
