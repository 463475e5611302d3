"""Action diversity (known answers) and the per-turn / per-episode timing samples the Tracker records."""

from __future__ import annotations

import math

import pytest
from conftest import make_sample

from unstable.records import AgentSpec, GameRecord, GameSpec, PolicyRef, Turn
from unstable.tracking import Tracker
from unstable.tracking.diversity import (
    ActionDiversity,
    diversity_stats,
    entropy,
    learner_sequences,
    move_distribution,
    ngrams,
    unique_fraction,
    unique_ngram_fraction,
)
from unstable.tracking.timings import timing_samples

ENV = "TicTacToe-v0"


def game(moves, *, game_id=1, collect=(0,), is_eval=False, invalid=(), gen=0.0, env_s=0.0, wall=0.0, tokens=0):
    """Seat 0 (ckpt-1) plays ``moves[0::2]``, seat 1 (random) ``moves[1::2]``."""
    agents = (AgentSpec(0, PolicyRef("ckpt-1"), collect_data=0 in collect),
              AgentSpec(1, PolicyRef("random", kind="scripted"), collect_data=1 in collect))
    spec = GameSpec(game_id=game_id, env_id=ENV, seed=game_id, agents=agents, is_eval=is_eval,
                    eval_player_id=0 if is_eval else None)
    sample = make_sample((), range(tokens)) if tokens else None
    turns = tuple(
        Turn(turn_index=i, player_id=i % 2, observation="obs", prompt="p", completion_text=f"I play {m}", action=m,
             format_ok=True, invalid=i in invalid, policy=agents[i % 2].policy, sample=sample,
             gen_seconds=gen, env_seconds=env_s)
        for i, m in enumerate(moves)
    )  # fmt: skip
    return GameRecord(spec=spec, turns=turns, final_rewards={0: 1.0, 1: -1.0}, game_info={}, wall_seconds=wall)


def test_entropy_known_answers():
    assert entropy([5, 5, 5, 5]) == pytest.approx(math.log(4))  # uniform over 4 moves
    assert entropy({"[4]": 7}) == 0.0  # one move
    assert entropy([]) == 0.0
    assert entropy([1, 0, 1]) == pytest.approx(math.log(2))  # zero counts do not matter
    assert entropy({"a": 1, "b": 3}) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    with pytest.raises(ValueError, match=">= 0"):
        entropy([1, -1])


def test_distribution_and_uniqueness():
    assert move_distribution(["[4]", "[0]", "[4]", "[4]"]) == {"[4]": 0.75, "[0]": 0.25}
    assert unique_fraction(["a", "b", "a", "c"]) == 0.75
    assert math.isnan(unique_fraction([]))
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams(["a"], 2) == []
    assert unique_ngram_fraction([["a", "b", "a", "b"]], 2) == pytest.approx(2 / 3)  # ab, ba, ab
    assert unique_ngram_fraction([["a", "b"], ["a", "b"]], 2) == 0.5  # the same opening twice
    assert math.isnan(unique_ngram_fraction([["a"]], 2))
    stats = diversity_stats([["[4]", "[0]"], ["[4]", "[8]"]])
    assert stats["action_entropy"] == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    assert stats["unique_action_fraction"] == 0.75
    assert stats["unique_2gram_fraction"] == 1.0
    assert math.isnan(stats["unique_3gram_fraction"])


def test_learner_sequences_keep_valid_moves_of_collecting_seats():
    turns = [(0, " [4] ", False), (1, "[0]", False), (0, "[ 2 ]", False), (1, "[1]", False), (0, "garbage", True)]
    assert learner_sequences([0], turns) == [["[4]", "[ 2 ]"]]
    assert learner_sequences([0, 1], turns) == [["[4]", "[ 2 ]"], ["[0]", "[1]"]]
    assert learner_sequences([], turns) == []


def test_window_matches_the_pure_maths_after_eviction():
    div = ActionDiversity(window=2, min_games=1)
    games = [[["a", "b", "c"]], [["a", "a"]], [["c", "b", "a"], ["b"]]]
    for g in games:
        div.add(ENV, g)
    expected = diversity_stats([seq for g in games[-2:] for seq in g])
    assert div.stats(ENV) == pytest.approx(expected, nan_ok=True)
    snap = div.snapshot(top=2)[ENV]
    assert (snap["games"], snap["moves"], snap["distinct"]) == (2, 6, 3)
    assert snap["top"][0] == ["a", pytest.approx(0.5)]
    with pytest.raises(ValueError, match="min_games"):
        ActionDiversity(window=4, min_games=5)
    with pytest.raises(ValueError, match="ngram_sizes"):
        ActionDiversity(ngram_sizes=(1, 2))


def test_tracker_logs_diversity_after_min_games(tmp_path):
    tracker = Tracker("div", run_dir=str(tmp_path / "run"), use_wandb=False)
    key = f"collect/{ENV}/action_entropy"
    moves = ["[0]", "[1]", "[2]", "[3]"]
    for i in range(9):  # the learner (seat 0) opens with each of four moves in turn
        tracker.log_game(game([moves[i % 4], "[8]"], game_id=i))
    assert key not in tracker.latest()  # fewer than 10 games: nothing yet
    for i in range(9, 12):
        tracker.log_game(game([moves[i % 4], "[8]"], game_id=i))
    latest = tracker.latest(f"collect/{ENV}/")
    assert latest[key] == pytest.approx(math.log(4))  # 12 openings, 3 of each
    assert latest[f"collect/{ENV}/unique_action_fraction"] == pytest.approx(4 / 12)
    assert f"collect/{ENV}/unique_2gram_fraction" not in latest  # one move per game: no 2-grams
    tracker.log_game(game(["[0]", "[8]"], game_id=99, is_eval=True))
    assert tracker.latest(key)[key] == pytest.approx(math.log(4))  # eval games do not count
    snapshot = tracker.get_interface_info()["diversity"][ENV]
    assert snapshot["games"] == 12 and snapshot["distinct"] == 4


def test_timing_samples_known_answers():
    record = game(["[0]", "[1]", "[2]"], gen=0.5, env_s=0.01, wall=2.0, tokens=4)
    samples = timing_samples(record)
    p = f"collect/{ENV}"
    assert samples[f"{p}/episode_seconds"] == [2.0]
    assert samples[f"{p}/env_seconds"] == [pytest.approx(0.01)]
    assert samples[f"{p}/gen_seconds"] == [0.5]  # seat 0's two turns, 0.5 s each
    assert samples[f"{p}/gen_tokens_per_second"] == [pytest.approx(8 / 1.0)]
    assert samples[f"{p}/gen_chars_per_second"] == [pytest.approx(len("I play [0]") * 2 / 1.0)]
    assert timing_samples(game(["[0]"])) == {}  # nothing measured: no samples, not zeros
    evals = timing_samples(game(["[0]", "[1]"], is_eval=True, gen=0.25, wall=1.0))
    assert evals[f"eval/{ENV}/random/gen_seconds"] == [0.25]
    assert evals[f"eval/{ENV}/random/episode_seconds"] == [1.0]


def test_tracker_records_timings(tmp_path):
    tracker = Tracker("timing", run_dir=str(tmp_path / "run"), use_wandb=False)
    tracker.log_game(game(["[0]", "[1]"], gen=0.2, wall=1.0))
    tracker.log_game(game(["[0]", "[1]"], gen=0.4, wall=3.0))
    means = tracker.means(f"collect/{ENV}/")
    assert means[f"collect/{ENV}/gen_seconds"] == pytest.approx(0.3)
    assert means[f"collect/{ENV}/episode_seconds"] == pytest.approx(2.0)
