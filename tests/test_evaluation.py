"""The evaluation harness: interval maths with known answers, ``evaluate`` on the tiny model, ``unstable eval``."""

import json
import math

import pytest

from unstable.cli.commands import main
from unstable.eval.evaluation import EvalResult, OutcomeStats, evaluate
from unstable.eval.intervals import Z95, mean_interval, t_quantile, wilson_interval
from unstable.inference.base import SamplingParams
from unstable.records import AgentSpec, GameRecord, GameSpec, PolicyRef, Turn

ENV = "TicTacToe-v0-train"
SHORT = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=4)


# ----------------------------------------------------------------------------- maths
def test_wilson_known_answers():
    # 5/10: centre (0.5 + z²/20) / (1 + z²/10) = 0.5, half-width z·sqrt(0.025 + z²/400) / (1 + z²/10)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.236593, abs=1e-6) and hi == pytest.approx(0.763407, abs=1e-6)
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.277533, abs=1e-6))  # z²/(n + z²) at 0 successes
    assert wilson_interval(10, 10) == (pytest.approx(0.722467, abs=1e-6), 1.0)
    lo, hi = wilson_interval(43, 100)
    assert (lo, hi) == (pytest.approx(0.337, abs=1e-3), pytest.approx(0.528, abs=1e-3))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert pytest.approx(1.959964, abs=1e-6) == Z95
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


@pytest.mark.parametrize(("df", "expected"), [(1, 12.706205), (2, 4.302653), (4, 2.776445), (5, 2.570582),
                                              (10, 2.228139), (30, 2.042272), (120, 1.979930), (1000, 1.962339),
                                              (5000, 1.960439)])
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-6)


def test_t_quantile_is_continuous_where_the_method_changes():
    assert t_quantile(0.975, 1000) - t_quantile(0.975, 1001) == pytest.approx(2.4e-6, abs=2e-7)


def test_mean_interval_known_answers():
    # mean 3, sample sd sqrt(2.5), se sqrt(0.5), t(0.975, 4) = 2.776445
    lo, hi = mean_interval([1, 2, 3, 4, 5])
    assert lo == pytest.approx(3 - 2.776445 * math.sqrt(0.5), abs=1e-5)
    assert hi == pytest.approx(3 + 2.776445 * math.sqrt(0.5), abs=1e-5)
    assert mean_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert all(math.isnan(x) for x in mean_interval([1.0]))


def _record(game_id: int, seat: int, rewards: dict[int, float], fmt: list[bool], invalid: list[bool]) -> GameRecord:
    model, opp = PolicyRef("model"), PolicyRef("random", kind="scripted")
    agents = tuple(AgentSpec(p, model if p == seat else opp) for p in range(2))
    spec = GameSpec(game_id, ENV, game_id, agents, is_eval=True, eval_player_id=seat)
    flags = enumerate(zip(fmt, invalid, strict=True))
    turns = tuple(Turn(i, seat, "obs", "", "", "[0]", ok, bad, model) for i, (ok, bad) in flags)
    info = {seat: {"invalid_move": invalid[-1]}, 1 - seat: {}}
    return GameRecord(spec, turns, rewards, info)


def test_outcome_stats_from_records():
    records = [
        _record(0, 0, {0: 1.0, 1: -1.0}, [True, True], [False, False]),  # win
        _record(1, 1, {0: 0.0, 1: 0.0}, [True, False], [False, False]),  # draw
        _record(2, 0, {0: -1.0, 1: 1.0}, [False], [True]),  # loss by invalid move
        _record(3, 1, {0: -1.0, 1: 1.0}, [True], [False]),  # win
    ]
    s = OutcomeStats.from_records(records)
    assert (s.games, s.wins, s.draws, s.losses, s.turns, s.invalid_losses) == (4, 2, 1, 1, 6, 1)
    assert (s.win_rate, s.draw_rate, s.loss_rate) == (0.5, 0.25, 0.25)
    assert s.win_rate_ci95 == wilson_interval(2, 4) and s.loss_rate_ci95 == wilson_interval(1, 4)
    assert s.mean_reward == pytest.approx(0.25)
    assert s.mean_reward_ci95 == mean_interval([1.0, 0.0, -1.0, 1.0])
    assert (s.format_ok_rate, s.invalid_move_rate) == (4 / 6, 1 / 6)


# ----------------------------------------------------------------------------- evaluate on the tiny model
def _check_counts(result: EvalResult, games: int) -> None:
    assert result.games == games
    assert result.overall.games + result.failed == games
    o = result.overall
    assert o.wins + o.draws + o.losses == o.games
    assert sum(s.games for s in result.per_seat.values()) == o.games
    assert sum(s.wins for s in result.per_seat.values()) == o.wins
    assert o.win_rate + o.draw_rate + o.loss_rate == pytest.approx(1.0)


def test_evaluate_vs_random_alternates_seats_and_round_trips(tiny_model_dir, tmp_path):
    import torch

    seen, threads = [], torch.get_num_threads()
    result = evaluate(tiny_model_dir, ENV, games=6, sampling=SHORT, seed=7, num_workers=1, on_done=seen.append)
    assert torch.get_num_threads() == threads  # the one-thread setting is undone
    _check_counts(result, 6)
    assert sorted((r.spec.game_id, r.spec.eval_player_id, r.seed) for r in seen) == [
        (i, i % 2, 7 + i) for i in range(6)]
    assert {seat: s.games for seat, s in result.per_seat.items()} == {0: 3, 1: 3}
    assert result.failed == 0 and result.num_workers == 1 and not result.greedy
    assert result.sampling["max_new_tokens"] == 4
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result.to_dict(), allow_nan=False))
    assert EvalResult.from_dict(json.loads(path.read_text())) == result


def test_evaluate_against_an_adapter_opponent(tiny_model_dir, adapters):
    model_adapter, opponent = adapters
    seen = []
    result = evaluate(tiny_model_dir, ENV, opponent=opponent, adapter=model_adapter, games=4, sampling=SHORT,
                      greedy=True, num_workers=1, on_done=seen.append)
    _check_counts(result, 4)
    assert result.opponent == opponent and result.adapter == model_adapter and result.greedy
    assert result.sampling["temperature"] == 0.0
    for record in seen:
        for turn in record.turns:
            is_model = turn.player_id == record.spec.eval_player_id
            assert turn.policy.adapter_path == (model_adapter if is_model else opponent)
    assert any(t.player_id != r.spec.eval_player_id for r in seen for t in r.turns)  # the opponent did move


def test_evaluate_rejects_bad_opponents_before_playing(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "not-an-adapter").mkdir()
    with pytest.raises(ValueError, match="not a PEFT LoRA adapter"):
        evaluate(tiny_model_dir, ENV, opponent=str(tmp_path / "not-an-adapter"), games=2)
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENROUTER_API_KEY"):
        evaluate(tiny_model_dir, ENV, opponent="google/gemini-2.0-flash-lite-001", games=2)
    with pytest.raises(FileNotFoundError):
        evaluate(tiny_model_dir, ENV, adapter=str(tmp_path / "missing"), games=2)


def test_a_missing_opponent_path_says_it_does_not_exist_not_that_a_key_is_missing(tiny_model_dir, tmp_path,
                                                                                  monkeypatch, capsys):
    """``./nope`` is a path, as build() reads it: it does not exist, whatever the API key."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    for opponent in ("./nope", str(tmp_path / "nope"), "~/surely-no-such-adapter-dir"):
        with pytest.raises(ValueError, match=r"opponent .* does not exist \(a LoRA adapter directory was expected\)"):
            evaluate(tiny_model_dir, ENV, opponent=opponent, games=2)
    assert main(["eval", "--model", tiny_model_dir, "--opponent", "./nope", "--games", "2"]) == 2
    err = capsys.readouterr().err
    assert "opponent './nope' does not exist" in err and "API" not in err


@pytest.mark.parametrize(("env_id", "opponent"), [(ENV, "heuristic"), (ENV, "optimal"), ("KuhnPoker-v0-train", "nash"),
                                                  ("ConnectFour-v0-train", "heuristic")])
def test_evaluate_against_a_strong_scripted_baseline(tiny_model_dir, env_id, opponent):
    seen = []
    result = evaluate(tiny_model_dir, env_id, opponent=opponent, games=2, sampling=SHORT, num_workers=1,
                      on_done=seen.append)
    _check_counts(result, 2)
    theirs = [t for r in seen for t in r.turns if t.player_id != r.spec.eval_player_id]
    assert theirs and all(t.policy == PolicyRef(opponent, kind="scripted") and not t.invalid for t in theirs)


@pytest.mark.slow
@pytest.mark.parametrize("opponent", ["random", "optimal"])
def test_worker_processes_play_the_same_games(tiny_model_dir, opponent):
    """Greedy model + seeded scripted opponent: two spawned workers deal and play exactly what one process does."""
    runs = {}
    for workers in (1, 2):
        seen = []
        result = evaluate(tiny_model_dir, ENV, opponent=opponent, games=6, sampling=SHORT, greedy=True,
                          num_workers=workers, on_done=seen.append)
        _check_counts(result, 6)
        assert result.num_workers == workers
        runs[workers] = sorted((r.game_id, r.spec.eval_player_id, tuple(t.action for t in r.turns)) for r in seen)
    assert runs[1] == runs[2]


def test_cli_eval_writes_json(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["eval", "--model", tiny_model_dir, "--env", ENV, "--opponent", "random", "--games", "4",
                 "--max-new-tokens", "4", "--out", str(out), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "4/4 games" in text and "P1" in text and str(out) in text
    data = json.loads(out.read_text())
    assert data["games"] == 4 and set(data["per_seat"]) == {"0", "1"}
    assert len(data["overall"]["win_rate_ci95"]) == 2
    assert EvalResult.from_dict(data).overall.games + data["failed"] == 4


def test_compare_intervals_says_higher_lower_or_overlap():
    """The quickstarts' verdict: a final win rate whose interval lies wholly below the warm start's is called
    lower (a run that collapsed to invalid answers was once reported as "the intervals overlap")."""
    from unstable.eval.intervals import compare_intervals, comparison_line

    warm = wilson_interval(566, 1000)
    assert compare_intervals(warm, wilson_interval(688, 1000)) == "higher"
    assert compare_intervals(warm, wilson_interval(0, 1000)) == "lower"
    assert compare_intervals(warm, wilson_interval(590, 1000)) == "overlap"
    assert compare_intervals((0.1, 0.3), (0.3, 0.5)) == "overlap"  # touching is not apart
    assert "LOWER" in comparison_line(compare_intervals(warm, wilson_interval(0, 1000)))
    assert comparison_line(compare_intervals(warm, wilson_interval(700, 1000)), "accuracy").startswith(
        "the final accuracy is higher")
