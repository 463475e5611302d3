"""Known answers for the meta-game solvers (Nash averaging, α-Rank, transitivity), α-Rank against OpenSpiel."""

from __future__ import annotations

import math

import numpy as np
import pytest

from unstable.eval.intervals import score_interval, wilson_interval
from unstable.samplers.metagame import alpha_rank, antisymmetric, nash_averaging, transitivity

RPS = np.array([[0.0, -0.1, 0.3], [0.1, 0.0, -0.3], [-0.3, 0.3, 0.0]])  # weighted rock-paper-scissors
"""Rock beats scissors by 0.3, paper beats rock by 0.1, scissors beats paper by 0.3 (rows: R, P, S)."""


def _ladder(ratings) -> np.ndarray:
    r = np.asarray(ratings)
    return np.tanh(r[:, None] - r[None, :])  # antisymmetric and transitive: i beats j iff r_i > r_j


# ----------------------------------------------------------------------------- Nash averaging
def test_symmetric_rock_paper_scissors_gives_the_uniform_mixture():
    rps = 0.1 * np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])
    nash = nash_averaging(rps)
    assert nash.mixture == pytest.approx([1 / 3] * 3, abs=1e-12)
    assert nash.support == (0, 1, 2)
    assert nash.nash_average == pytest.approx([0, 0, 0], abs=1e-12)
    assert nash.entropy == pytest.approx(math.log(3), abs=1e-12)


def test_weighted_rock_paper_scissors_solves_its_indifference_equations():
    """Against the mixture (r, p, s) every strategy must score 0: -0.1 p + 0.3 s = 0 and 0.1 r - 0.3 s = 0, so
    p = r = 3 s: (3/7, 3/7, 1/7), not the uniform mixture."""
    nash = nash_averaging(RPS)
    assert nash.mixture == pytest.approx([3 / 7, 3 / 7, 1 / 7], abs=1e-12)
    assert RPS @ np.array(nash.mixture) == pytest.approx([0, 0, 0], abs=1e-12)


def test_a_transitive_pool_puts_all_nash_mass_on_the_best():
    nash = nash_averaging(_ladder([0.1, 0.7, 0.3, -0.2]))
    assert nash.mixture == pytest.approx([0, 1, 0, 0], abs=1e-12)
    assert nash.support == (1,)
    expected = -np.tanh(0.7 - np.array([0.1, 0.7, 0.3, -0.2]))  # each entry's payoff against the best
    assert nash.nash_average == pytest.approx(expected, abs=1e-12)


def test_a_dominated_strategy_is_left_out_of_the_support():
    """R, P, S plus D, which loses 0.1 to each of them: the equilibrium stays uniform on R, P, S and D scores -0.1."""
    a = np.zeros((4, 4))
    a[:3, :3] = 0.3 * np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])
    a[:3, 3], a[3, :3] = 0.1, -0.1
    nash = nash_averaging(a)
    assert nash.support == (0, 1, 2)
    assert nash.mixture == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0], abs=1e-12)
    assert nash.nash_average[3] == pytest.approx(-0.1, abs=1e-12)


def test_copies_of_an_entry_share_its_mass_so_they_cannot_outvote_the_rest():
    """Balduzzi et al.'s invariance: two copies of rock split its 1/3; the Nash averages do not change.
    Any split between the copies is an equilibrium; the maximum-entropy one is the even split."""
    rps = 0.3 * np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])
    with_copy = rps[np.ix_([0, 0, 1, 2], [0, 0, 1, 2])]
    nash = nash_averaging(with_copy)
    assert nash.mixture == pytest.approx([1 / 6, 1 / 6, 1 / 3, 1 / 3], abs=1e-9)
    assert nash.nash_average == pytest.approx([0, 0, 0, 0], abs=1e-9)


def test_all_ties_give_the_uniform_mixture_and_one_entry_its_whole_mass():
    assert nash_averaging(np.zeros((4, 4))).mixture == pytest.approx([0.25] * 4, abs=1e-12)
    assert nash_averaging([[0.0]]).mixture == (1.0,)


def test_random_games_give_an_equilibrium_nobody_can_beat():
    rng = np.random.default_rng(7)
    for _ in range(20):
        x = rng.uniform(-1, 1, size=(7, 7))
        a = x - x.T
        nash = nash_averaging(a)
        p = np.array(nash.mixture)
        assert p.sum() == pytest.approx(1.0) and (p >= 0).all()
        assert (a @ p).max() <= 1e-9  # no entry scores above the game's value 0 against the mixture
        assert nash.nash_average == pytest.approx(a @ p, abs=1e-12)


def test_a_matrix_that_is_not_zero_sum_is_refused_with_the_offending_cell():
    with pytest.raises(ValueError, match=r"not antisymmetric: payoffs\[0,1\] \+ payoffs\[1,0\] = 0.2"):
        nash_averaging([[0.0, 0.1], [0.1, 0.0]])
    with pytest.raises(ValueError, match="square"):
        antisymmetric([[0.0, 0.1]])
    with pytest.raises(ValueError, match=r"finite payoffs.*\(0, 1\)"):
        nash_averaging([[0.0, math.nan], [math.nan, 0.0]])


# ----------------------------------------------------------------------------- α-Rank
def test_alpha_rank_of_rock_paper_scissors_is_uniform():
    for local in (False, True):
        rank = alpha_rank(0.1 * np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]]), local_selection=local)
        assert rank.pi == pytest.approx([1 / 3] * 3, abs=1e-12)


def test_alpha_rank_of_a_transitive_pool_puts_the_mass_on_the_best_and_ranks_the_rest_by_strength():
    rank = alpha_rank(_ladder([0.1, 0.7, 0.3, -0.2]))
    assert rank.pi[1] > 1 - 1e-9 and rank.ranking[0] == 1
    low = alpha_rank(_ladder([0.1, 0.7, 0.3, -0.2]), alpha=0.5)  # weak selection: the order of the ladder shows
    assert low.ranking == (1, 2, 0, 3)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # OpenSpiel's closed form at large alpha
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("alpha", [0.1, 1.0, 10.0, 100.0])
def test_alpha_rank_equals_openspiel_on_the_same_matrix(alpha, local):
    alpharank = pytest.importorskip("open_spiel.python.egt.alpharank")
    rng = np.random.default_rng(3)
    x = rng.uniform(-0.5, 0.5, size=(6, 6))
    for payoffs in (RPS, x - x.T):
        _, _, pi, _, _ = alpharank.compute([payoffs], m=50, alpha=alpha, use_local_selection_model=local)
        mine = alpha_rank(payoffs, alpha=alpha, population_size=50, local_selection=local)
        assert mine.pi == pytest.approx(pi, abs=1e-6)


@pytest.mark.parametrize("local", [False, True])
def test_alpha_rank_equals_openspiel_on_a_general_sum_symmetric_game(local):
    """Not zero-sum: OpenSpiel sums the population model's fitness term by term, as the paper writes it."""
    alpharank = pytest.importorskip("open_spiel.python.egt.alpharank")
    payoffs = np.random.default_rng(5).uniform(0, 1, size=(5, 5))
    _, _, pi, _, _ = alpharank.compute([payoffs], m=20, alpha=3.0, use_local_selection_model=local)
    assert alpha_rank(payoffs, alpha=3.0, population_size=20, local_selection=local).pi == pytest.approx(pi, abs=1e-6)


def test_alpha_rank_refuses_bad_settings():
    with pytest.raises(ValueError, match="alpha must be"):
        alpha_rank(RPS, alpha=-1.0)
    with pytest.raises(ValueError, match="population_size must be"):
        alpha_rank(RPS, population_size=1)


# ----------------------------------------------------------------------------- transitivity
def test_rock_paper_scissors_is_one_three_cycle_and_all_cyclic():
    t = transitivity(RPS)
    assert t.three_cycles == ((0, 2, 1),)  # rock beats scissors beats paper beats rock
    assert not t.is_transitive
    # the weights add a transitive part: row means (0.2, -0.2, 0) / 3, whose differences hold 8/57 of the norm
    assert t.cyclic_share == pytest.approx(49 / 57, abs=1e-12)
    assert transitivity(0.1 * np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])).cyclic_share == pytest.approx(1.0)


def test_a_ladder_has_no_cycle_and_no_cyclic_part():
    r = np.array([0.1, 0.7, 0.3, -0.2])
    t = transitivity(r[:, None] - r[None, :])
    assert t.three_cycles == () and t.is_transitive
    assert t.cyclic_share == pytest.approx(0.0, abs=1e-12)
    assert t.ratings == pytest.approx(r - r.mean(), abs=1e-12)


def test_a_margin_and_a_beats_matrix_decide_who_beats_whom():
    assert transitivity(RPS, margin=0.2).beats == ((0, 2), (2, 1))  # paper's 0.1 over rock is inside the margin
    assert transitivity(RPS, margin=0.2).is_transitive
    four_cycle = np.zeros((4, 4), dtype=bool)
    for i in range(4):
        four_cycle[i, (i + 1) % 4] = True
    t = transitivity(np.zeros((4, 4)), beats=four_cycle)
    assert t.three_cycles == () and not t.is_transitive  # a cycle without a 3-cycle: not a ladder either


# ----------------------------------------------------------------------------- the cells' interval
def test_score_interval_is_wilsons_without_draws_and_stays_inside_the_range_with_them():
    assert score_interval(7, 0, 3) == pytest.approx(wilson_interval(7, 10))
    lo, hi = score_interval(3, 4, 3)  # mean score 0.5
    assert lo < 0.5 < hi and lo > 0 and hi < 1
    assert score_interval(10, 0, 0)[1] == 1.0 and score_interval(0, 0, 10)[0] == 0.0
    # conservative: ten draws get the interval of five wins in ten games (a draw's half point is not split)
    assert score_interval(0, 10, 0) == pytest.approx(wilson_interval(5, 10))
    with pytest.raises(ValueError, match="counts >= 0"):
        score_interval(-1, 0, 0)


def test_an_entry_off_the_support_that_would_gain_bounds_the_maximum_entropy_mixture():
    """Rock twice (R1, R2) in rock-paper-scissors, and X, which beats R1 by 0.2 and loses to R2 by 0.1: any
    split r1 + r2 = 1/3 is an equilibrium of R1, R2, P, S, but X scores 0.2 r1 - 0.1 r2 against it, so only the
    splits with r1 <= r2 / 2 are equilibria of the whole game; the most even of them is (1/9, 2/9)."""
    a = np.zeros((5, 5))
    a[:4, :4] = 0.3 * np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])[np.ix_([0, 0, 1, 2], [0, 0, 1, 2])]
    a[4, :2], a[:2, 4] = (0.2, -0.1), (-0.2, 0.1)
    nash = nash_averaging(a)
    assert nash.mixture == pytest.approx([1 / 9, 2 / 9, 1 / 3, 1 / 3, 0], abs=1e-6)
    assert nash.support == (0, 1, 2, 3) and nash.nash_average[4] == pytest.approx(0, abs=1e-6)
