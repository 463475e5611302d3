"""The TicTacToe tabular twin (benchmarks/tictactoe_tabular_selfplay.py): its start, its games' results and one
update, on hand-checked cases."""

import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import tictactoe_tabular_selfplay as twin

sys.path.pop(0)


def test_the_start_puts_its_mass_on_the_empty_cells_only():
    uniform = twin.start_logits("uniform", 0).softmax(-1)
    first = twin.INDEX[" " * 9]
    torch.testing.assert_close(uniform[first], torch.full((9,), 1 / 9))
    board = "OX       "  # O to move, 7 empty cells
    assert twin.INDEX[board] is not None
    torch.testing.assert_close(uniform[twin.INDEX[board]], torch.tensor([0, 0] + [1 / 7] * 7))
    mixed = twin.start_logits("mixed", 3).softmax(-1)
    assert torch.all(mixed[~twin.LEGAL] == 0) and torch.allclose(mixed.sum(-1), torch.ones(len(twin.BOARDS)))
    assert not torch.allclose(mixed[first], uniform[first])  # each board its own mixture
    torch.testing.assert_close(mixed, twin.start_logits("mixed", 3).softmax(-1))  # seeded


def test_a_game_rewards_each_seat_with_its_result():
    """The lowest empty cell every time: O takes 0, 2, 4, 6 and wins on the 2-4-6 diagonal at the 7th move."""
    lowest = torch.zeros(len(twin.BOARDS), 9)
    for i, board in enumerate(twin.BOARDS):
        lowest[i, board.index(" ")] = 1.0
    moves = twin.play_game(lowest, random.Random(0))
    assert [cell for _, cell, _, _ in moves] == [0, 1, 2, 3, 4, 5, 6]
    assert [(seat, result) for _, _, seat, result in moves] == [(0, 1.0), (1, -1.0)] * 3 + [(0, 1.0)]


def test_a_greedy_table_that_plays_like_the_lowest_cell_is_exploitable():
    lowest = torch.zeros(len(twin.BOARDS), 9)
    for i, board in enumerate(twin.BOARDS):
        lowest[i, board.index(" ")] = 0.9
        lowest[i, board.rindex(" ")] += 0.1
    read = twin.reading(lowest)
    assert read["greedy_exploitability"] == 1.0  # a best response beats it from both seats
    assert 0 < read["exploitability"] <= 1.0


def test_two_updates_are_read_at_the_start_and_the_end():
    out = twin.run(updates=2, batch=16, learning_rate=0.1, beta=1.0, magnet_every=1, seed=0, read_every=2)
    assert [c["update"] for c in out["curve"]] == [0, 2] and out["curve"][-1]["games"] >= 4
    assert all(0 <= c["exploitability"] <= 1 and 0 <= c["greedy_vs_optimal_draw"] <= 1 for c in out["curve"])


def test_the_kuhn_twins_exponential_magnet_at_one_is_the_magnet_replaced_every_update():
    """``magnet_ema=1`` moves the magnet all the way to the table after each update: the same run, to the last
    digit, as ``magnet_every=1``; a smaller share is another run. The second half's average is read every 50."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import kuhn_tabular_selfplay as kuhn

    sys.path.pop(0)
    settings = dict(updates=50, batch=32, learning_rate=0.1, beta=1.0, start="mixed", seed=1, scale_rewards=False)
    every = kuhn.run(magnet_every=1, **settings)["curve"]
    ema = kuhn.run(magnet_ema=1.0, **settings)["curve"]
    assert [c["exploitability"] for c in ema] == [c["exploitability"] for c in every]
    assert [c["exploitability"] for c in kuhn.run(magnet_ema=0.1, **settings)["curve"]] != [
        c["exploitability"] for c in every]
    assert 0 <= ema[50]["half"] <= ema[0]["half"] and "half" not in ema[49]


def test_the_scored_1m_policy_is_the_exact_readings_table_on_the_legal_answers(answering_model, monkeypatch):
    """benchmarks/kuhn_scored_selfplay.py scores the legal answers with its own forward pass (right-padded, with
    gradients); unstable.eval reads them with the inference backend's cached, left-padded passes. Two ways to the
    same numbers: the scored table is the exact reading conditioned on a legal answer, and an update moves it."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import kuhn_scored_selfplay as scored
    import kuhn_tabular_selfplay as kuhn

    from unstable.eval.exploitability import evaluate_exploitability, legal_only
    from unstable.eval.solvers.kuhn import INFO_SETS
    from unstable.inference.transformers_backend import TransformersBackend

    policy = scored.ScoredPolicy(answering_model, seed=0)
    with torch.no_grad():
        table = kuhn.table_of(policy.log_probs().exp())
    backend = TransformersBackend(answering_model, batch_wait_ms=0)
    try:
        read = evaluate_exploitability(answering_model, scored.ENV_ID, prompt_template=scored.TEMPLATE,
                                       backend=backend)
    finally:
        backend.close()
    expected = legal_only(read.policy)
    assert set(table) == set(expected) == set(INFO_SETS)
    for key in INFO_SETS:
        for move, p in table[key].items():
            assert abs(p - expected[key][move]) < 1e-4, (key, move, p, expected[key][move])
    assert read.other_mean > 0.01  # the reading's table leaves mass off the legal answers; the scored one cannot
    result = kuhn.run(updates=2, batch=16, learning_rate=0.05, beta=1.0, magnet_every=1, start="scored",
                      scale_rewards=False, policy=policy, grad_clip=1.0)
    assert result["curve"][0]["exploitability"] == pytest.approx(read.legal_exploitability, abs=1e-4)
    assert result["final_table"] != table  # the adapter's gradients flow through the scored answers
