"""``plot_run`` and ``unstable plot``: PNGs from a hand-made run directory, nothing from an empty one."""

import json
import random

import pytest

pytest.importorskip("matplotlib")

from unstable.cli.commands import main
from unstable.registry.model_registry import ModelRegistry
from unstable.tracking.tracker import Tracker
from unstable.ui.plots import _moving_average, _win_rate_bins, plot_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ENV = "TicTacToe-v0-train"
ALL_PLOTS = {"eval_win_rate.png", "trueskill.png", "move_quality.png", "game_length.png", "training.png"}


def _fake_run(run_dir, steps: int = 40) -> None:
    """Metric lines as a run writes them (through a real Tracker) and a saved registry."""
    rng = random.Random(0)
    tracker = Tracker("fake", run_dir=str(run_dir), use_wandb=False)
    registry = ModelRegistry()
    registry.add_fixed("random")
    registry.add_checkpoint("base", None, 0)
    for step in range(1, steps + 1):
        skill = step / steps
        tracker.log({"train/step": step, "train/loss": 1 / step + rng.gauss(0, 0.05), "train/grad_norm": rng.random()})
        for _ in range(4):
            tracker.log({f"collect/{ENV}/format_ok_rate": float(rng.random() < 0.5 + skill / 2),
                         f"collect/{ENV}/invalid_move_rate": float(rng.random() < 0.5 - skill / 2),
                         f"collect/{ENV}/game_length": rng.randint(1, 9)})
        for _ in range(3):
            won = rng.random() < skill
            tracker.log({f"eval/{ENV}/random/win_rate": float(won)})
            registry.update_ratings(["random", registry.get_current_ckpt()], [0.0 if won else 1.0, 1.0 if won else 0.0])
        if step % 10 == 0:
            registry.add_checkpoint(f"ckpt-{step}", str(run_dir / "checkpoints" / f"ckpt-{step}"), step)
    tracker.close()
    registry.save(str(run_dir / "registry" / "registry.json"))


def _is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_plots_from_a_run_dir(tmp_path):
    _fake_run(tmp_path)
    paths = plot_run(tmp_path)
    assert {p.name for p in paths} == ALL_PLOTS
    assert all(p.parent == tmp_path / "plots" and _is_png(p) for p in paths)


def test_missing_data_skips_only_that_plot(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"learner_step": 1, "train/loss": 0.5}) + "\n" + json.dumps({"learner_step": 2, "train/loss": 0.4})
        + "\n" + json.dumps({"learner_step": 2, "eval/TicTacToe-v0-train/google/gemini-2.0/win_rate": None}) + "\n"
    )
    paths = plot_run(tmp_path)
    assert [p.name for p in paths] == ["training.png"]  # the null win rate is no data; no registry.json
    assert _is_png(paths[0])


def test_quickstart_summary_adds_its_harness_evals_to_the_win_rate_plot(tmp_path):
    from unstable.ui.plots import _harness_points

    summary = {"learner_steps": 20, "eval": {
        "initial": {"win_rate": 0.5, "ci95": [0.48, 0.52], "games": 2000},
        "final": {"win_rate": 0.7, "ci95": [0.68, 0.72], "games": 2000}, "opponent": "random", "decoding": "greedy"}}
    assert _harness_points(summary) == [("initial", 0, 0.5, [0.48, 0.52], 2000), ("final", 20, 0.7, [0.68, 0.72], 2000)]
    assert _harness_points({"learner_steps": 3, "eval": {"initial": summary["eval"]["initial"]}}) == [
        ("initial", 0, 0.5, [0.48, 0.52], 2000)]  # a run stopped before its final evaluation
    assert _harness_points(None) == [] and _harness_points({}) == []
    (tmp_path / "summary.json").write_text(json.dumps(summary))  # no metrics: the summary alone is data
    paths = plot_run(tmp_path)
    assert [p.name for p in paths] == ["eval_win_rate.png"] and _is_png(paths[0])


def test_empty_run_dir_writes_nothing(tmp_path):
    assert plot_run(tmp_path) == []
    assert not (tmp_path / "plots").exists()
    with pytest.raises(FileNotFoundError):
        plot_run(tmp_path / "missing")


def test_cli_plot(tmp_path, capsys):
    _fake_run(tmp_path, steps=12)
    assert main(["plot", str(tmp_path)]) == 0
    assert {p.name for p in (tmp_path / "plots").iterdir()} == ALL_PLOTS
    assert str(tmp_path / "plots" / "trueskill.png") in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["plot", str(empty)]) == 0
    assert "no plots" in capsys.readouterr().out


def test_moving_average_weights_steps_by_their_counts():
    # step sums 2 (of 2 values), 0 (of 1), 3 (of 3): trailing windows of 2 steps
    assert _moving_average([2.0, 0.0, 3.0], [2, 1, 3], window=2) == [1.0, 2 / 3, 3 / 4]


def test_win_rate_bins_pool_consecutive_steps():
    bins = _win_rate_bins(steps=[0, 1, 2, 3], wins=[1.0, 4.0, 0.0, 8.0], games=[2, 6, 4, 8])
    assert bins == [(0.75, 5, 8), (2 + 8 / 12 * 1, 8, 12)]  # (0*2 + 1*6)/8; (2*4 + 3*8)/12


def test_several_models_get_a_curve_each_at_their_own_steps(tmp_path, monkeypatch):
    """alice is at step 3 while bob is at 1: each curve's points sit at its own model's steps."""
    from unstable.ui import plots

    rows = [{"learner_step": 1, "alice/train/version": 1, "alice/train/loss": 0.5},
            {"learner_step": 1, "bob/train/version": 1, "bob/train/loss": 0.25},
            {"learner_step": 2, "alice/train/version": 2, "alice/train/loss": 0.375},
            {"learner_step": 3, "alice/train/version": 3, "alice/train/loss": 0.125}]
    assert plots._by_step(rows, "alice/train/loss") == ([1, 2, 3], [0.5, 0.375, 0.125], [1, 1, 1])
    assert plots._by_step(rows, "bob/train/loss") == ([1], [0.25], [1])
    assert plots._model_of("alice/train/loss") == "alice" and plots._model_of(f"collect/{ENV}/game_length") is None
    drawn = {}
    monkeypatch.setattr(plots, "_curve", lambda ax, rows, key, label: drawn.setdefault(label, key) and True)
    fig = plots._training(plots.pyplot(), plots.RunData(rows, None, None))
    assert drawn == {"alice/policy loss": "alice/train/loss", "bob/policy loss": "bob/train/loss",
                     "alice/critic loss": "alice/train/value_loss", "bob/critic loss": "bob/train/value_loss"}
    assert fig._suptitle.get_text() == "Learners: alice, bob"


def test_exploitability_of_the_checkpoints_is_plotted_from_its_own_file(tmp_path):
    """``unstable eval --exploitability --all-checkpoints`` appends to exploitability.jsonl; the plot reads it
    next to metrics.jsonl, and only when it exists."""
    _fake_run(tmp_path)
    assert "exploitability.png" not in {p.name for p in plot_run(tmp_path)}
    lines = [{"learner_step": step, "uid": f"ckpt-{step}", f"eval/{ENV}/exploitability": 1 - step / 50,
              f"eval/{ENV}/exploitability_other_mass": 0.5 - step / 100} for step in (0, 10, 20, 30, 40)]
    (tmp_path / "exploitability.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    written = {p.name: p for p in plot_run(tmp_path)}
    assert set(written) == ALL_PLOTS | {"exploitability.png"}
    assert written["exploitability.png"].read_bytes().startswith(PNG_MAGIC)
