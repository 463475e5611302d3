"""``unstable eval --run RUN``: the run's game, players and prompt template are played, not TicTacToe's; a run
of several games needs ``--env``. The run directories are written as the library writes them (the run's
``BuildConfig.to_dict()`` as ``config.json``, the registry's ``save`` as ``registry/registry.json``)."""

from __future__ import annotations

import json

import pytest
from conftest import make_adapter

import unstable
from unstable.cli.commands import main
from unstable.registry import ModelRegistry
from unstable.run.config import BuildConfig


def write_run(run_dir, model_dir, games: list[tuple[str, str]]) -> None:
    """A run directory with one checkpoint (ckpt-1, a random LoRA adapter) that trained on ``games``
    (``(env_id, prompt_template)`` pairs, two players each)."""
    config = BuildConfig(model_name=model_dir, train_envs=[unstable.TrainEnvSpec(env, 2, 2, template)
                                                           for env, template in games])
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(config.to_dict()))
    registry = ModelRegistry()
    registry.add_checkpoint(uid="base", path=None, iteration=0)
    registry.add_checkpoint(uid="ckpt-1", path=make_adapter(model_dir, run_dir / "checkpoints" / "ckpt-1", seed=1),
                            iteration=1)
    registry.save(str(run_dir / "registry" / "registry.json"))


@pytest.fixture
def played(monkeypatch) -> list[dict]:
    """What each ``evaluate`` call got (the real one plays): env, players, template, adapter."""
    from unstable.eval import evaluation

    calls, real = [], evaluation.evaluate

    def spy(model, env_id, **kwargs):
        calls.append({"env_id": env_id, "num_players": kwargs["num_players"],
                      "prompt_template": kwargs["prompt_template"], "adapter": kwargs["adapter"]})
        return real(model, env_id, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", spy)
    return calls


@pytest.fixture(scope="module")
def kuhn_run(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "kuhn"
    write_run(run_dir, tiny_model_dir, [("KuhnPoker-v0-train", "qwen3-sp")])
    return run_dir


def test_eval_run_plays_the_runs_game_with_its_template(kuhn_run, played, tmp_path, capsys):
    """'nash' is a KuhnPoker baseline only: it is refused on TicTacToe, where --run once took everyone."""
    out = tmp_path / "result.json"
    assert main(["eval", "--run", str(kuhn_run), "--opponent", "nash", "--games", "2", "--greedy",
                 "--max-new-tokens", "8", "--out", str(out)]) == 0
    assert "on KuhnPoker-v0-train against nash: 2 games" in capsys.readouterr().out
    assert played == [{"env_id": "KuhnPoker-v0-train", "num_players": 2, "prompt_template": "qwen3-sp",
                       "adapter": str(kuhn_run / "checkpoints" / "ckpt-1")}]
    result = json.loads(out.read_text())
    assert result["env_id"] == "KuhnPoker-v0-train" and result["games"] == 2 and result["opponent"] == "nash"


def test_what_is_given_wins_over_the_run(kuhn_run, played):
    assert main(["eval", "--run", str(kuhn_run), "--env", "TicTacToe-v0-train", "--template", "qwen3-zs",
                 "--games", "1", "--greedy", "--max-new-tokens", "8"]) == 0
    assert [(c["env_id"], c["prompt_template"]) for c in played] == [("TicTacToe-v0-train", "qwen3-zs")]


def test_a_run_of_several_games_needs_env(tiny_model_dir, played, tmp_path, capsys):
    run_dir = tmp_path / "two"
    write_run(run_dir, tiny_model_dir, [("KuhnPoker-v0-train", "qwen3-sp"), ("TicTacToe-v0-train", "qwen3-zs")])
    assert main(["eval", "--run", str(run_dir), "--games", "1"]) == 2
    err = capsys.readouterr().err
    assert "trained on 2 games (KuhnPoker-v0-train, TicTacToe-v0-train): give --env" in err
    assert main(["eval", "--run", str(run_dir), "--env", "TicTacToe-v0-train", "--games", "1", "--greedy",
                 "--max-new-tokens", "8"]) == 0
    assert [(c["env_id"], c["prompt_template"]) for c in played] == [("TicTacToe-v0-train", "qwen3-zs")]
