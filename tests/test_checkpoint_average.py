"""The reach-weighted average of checkpoint tables (fictitious play's output): known answers, and
OpenSpiel's ``policy_aggregator`` on Kuhn poker as the reference."""

from __future__ import annotations

import random

import pytest

from unstable.eval.average_policy import average_policy
from unstable.eval.game_states import NoSolverError, solved_game
from unstable.eval.solvers import INFO_SETS, kuhn_exploitability, kuhn_nash_table, reachable_boards
from unstable.eval.solvers.kuhn import LEGAL_ACTIONS, kuhn_own_reach
from unstable.eval.solvers.tictactoe import EMPTY_BOARD, _play, _terminal, tictactoe_own_reach, to_move

KUHN_POKER, TICTACTOE = solved_game("KuhnPoker-v0-train"), solved_game("TicTacToe-v0-train")


def random_kuhn_table(rng: random.Random, invalid: float = 0.0) -> dict[str, dict[str, float]]:
    table = {}
    for key in INFO_SETS:
        passive, aggressive = LEGAL_ACTIONS[key.split(":", 1)[1]]
        p = rng.uniform(0.05, 0.95)
        table[key] = {passive: (1 - invalid) * (1 - p), aggressive: (1 - invalid) * p}
    return table


def test_the_average_weights_each_checkpoint_by_how_often_it_reaches_the_state():
    """Two checkpoints: the first checks a Jack 0.1 of the time, the second 0.7; after check-bet they call
    0.2 and 0.6. Mixed 50/50, a hand reaches check-bet through the first with weight 0.5 * 0.1 and through
    the second with 0.5 * 0.7, so the mixture calls (0.1 * 0.2 + 0.7 * 0.6) / 0.8 = 0.55, not the mean 0.4."""
    first, second = kuhn_nash_table(), kuhn_nash_table()
    first["J:"], second["J:"] = {"check": 0.1, "bet": 0.9}, {"check": 0.7, "bet": 0.3}
    first["J:check,bet"], second["J:check,bet"] = {"fold": 0.8, "call": 0.2}, {"fold": 0.4, "call": 0.6}
    avg = average_policy([first, second], KUHN_POKER)
    assert avg["J:check,bet"]["call"] == pytest.approx(0.55, abs=1e-15)
    assert avg["J:check,bet"]["fold"] == pytest.approx(0.45, abs=1e-15)
    assert avg["J:"]["check"] == pytest.approx(0.4, abs=1e-15)  # the first decision: reached by both alike
    # Weights: 0.3 on the first, 0.7 on the second: (0.3*0.1*0.2 + 0.7*0.7*0.6) / (0.3*0.1 + 0.7*0.7).
    weighted = average_policy([first, second], KUHN_POKER, weights=[0.3, 0.7])
    assert weighted["J:check,bet"]["call"] == pytest.approx((0.006 + 0.294) / 0.52, abs=1e-15)
    assert kuhn_own_reach(first)["J:check,bet"] == pytest.approx(0.1) and kuhn_own_reach(first)["J:bet"] == 1.0


def test_the_kuhn_average_plays_as_openspiel_policy_aggregator_mixes():
    """OpenSpiel's ``PolicyAggregator`` turns a weighted mixture of policies into the behaviour policy that
    plays the same; ours must agree at every information set and in exploitability."""
    pytest.importorskip("pyspiel")
    from open_spiel.python.algorithms import exploitability
    from open_spiel.python.algorithms.policy_aggregator import PolicyAggregator
    from test_solvers import _OPENSPIEL_HISTORY, KUHN, to_openspiel_kuhn

    rng = random.Random(7)
    tables = [random_kuhn_table(rng) for _ in range(3)]
    weights = [0.2, 0.3, 0.5]
    ours = average_policy(tables, KUHN_POKER, weights=weights)
    policies = [to_openspiel_kuhn(t) for t in tables]
    mixed = PolicyAggregator(KUHN, epsilon=0.0).aggregate([0, 1], [policies, policies], [weights, weights])
    for table in mixed.policy:
        for key, probs in table.items():
            history = _OPENSPIEL_HISTORY[key[1:]]
            passive, aggressive = LEGAL_ACTIONS[history]
            name = f"{'JQK'[int(key[0])]}:{history}"
            assert ours[name][passive] == pytest.approx(probs[0], abs=1e-12)
            assert ours[name][aggressive] == pytest.approx(probs[1], abs=1e-12)
    theirs = exploitability.exploitability(KUHN, mixed)
    assert kuhn_exploitability(ours).exploitability == pytest.approx(theirs, abs=1e-9)
    mean = {k: {m: sum(w * t[k][m] for w, t in zip(weights, tables, strict=True)) for m in tables[0][k]}
            for k in tables[0]}
    assert abs(kuhn_exploitability(mean).exploitability - theirs) > 1e-3  # the plain mean is another policy


def test_invalid_mass_is_averaged_and_leads_nowhere():
    rng = random.Random(3)
    tables = [random_kuhn_table(rng, invalid=0.1), random_kuhn_table(rng, invalid=0.3)]
    avg = average_policy(tables, KUHN_POKER)
    for name, probs in avg.items():
        assert 0.6 < sum(probs.values()) < 0.95, name
    assert kuhn_own_reach(tables[0])["Q:check,bet"] == pytest.approx(tables[0]["Q:"]["check"])


def _brute_force_reach(table, mark):
    """The seat's own-move probability summed over every move sequence reaching each board (a DFS over histories)."""
    reach: dict[str, float] = {}

    def walk(board, w):
        if to_move(board) == mark:
            reach[board] = reach.get(board, 0.0) + w
        for cell in range(9):
            if board[cell] == " ":
                child = _play(board, cell)
                if not _terminal(child):
                    walk(child, w * (table[board].get(str(cell), 0.0) if to_move(board) == mark else 1.0))

    walk(EMPTY_BOARD, 1.0)
    return reach


def test_the_tictactoe_reach_sums_the_seat_moves_over_every_order():
    rng = random.Random(11)
    boards = reachable_boards()
    table = {}
    for b in boards:
        cells = [c for c in range(9) if b[c] == " "]
        raw = [rng.uniform(0.1, 1.0) for _ in cells]
        table[b] = {str(c): 0.9 * r / sum(raw) for c, r in zip(cells, raw, strict=True)}
    ours = tictactoe_own_reach(table)
    for mark in "OX":
        brute = _brute_force_reach(table, mark)
        for board, value in brute.items():
            assert ours[board] == pytest.approx(value, rel=1e-9), board
    same = average_policy([table, table], TICTACTOE, weights=[0.1, 0.2])
    assert all(same[b][m] == pytest.approx(p, abs=1e-12) for b in boards[:200] for m, p in table[b].items())


def test_bad_calls_are_refused():
    table = kuhn_nash_table()
    with pytest.raises(ValueError, match="at least one table"):
        average_policy([], KUHN_POKER)
    with pytest.raises(ValueError, match="weights must be 2 numbers"):
        average_policy([table, table], KUHN_POKER, weights=[1.0])
    with pytest.raises(ValueError, match="weights must be"):
        average_policy([table, table], KUHN_POKER, weights=[0.0, 0.0])
    with pytest.raises(ValueError, match="no average policy for 'openspiel'"):
        average_policy([table], solved_game("openspiel:kuhn_poker"))
    with pytest.raises(NoSolverError, match="no exploitability solver for 'ConnectFour-v0-train'"):
        solved_game("ConnectFour-v0-train")
