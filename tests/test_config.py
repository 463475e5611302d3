"""YAML configs for 'unstable train', and the command itself on local Ray."""

import logging
import re

import pytest

from unstable.cli.commands import main
from unstable.inference.config import _ANNOUNCED, choose_backend
from unstable.run.config_file import ConfigError, load_config


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def test_example_config_loads_and_splits_build_and_start_settings():
    build, start = load_config("configs/tictactoe-tiny.yaml", ["batch_size=32", "learning_steps=3"])
    assert build["batch_size"] == 32 and build["train_envs"][0]["env_id"] == "TicTacToe-v0-train"
    assert start == {"learning_steps": 3, "num_collection_workers": 32, "num_eval_workers": 8}


@pytest.mark.parametrize(
    ("text", "overrides", "match"),
    [
        ("model_name: [unclosed", [], "not valid YAML"),
        ("- just\n- a list\n", [], "must hold a mapping"),
        ("model_name: tiny\nbatch_sise: 3\n", [], r"unknown config keys \['batch_sise'\]"),
        ("model_name: tiny\n", ["batch_size"], "key=value"),
        ("model_name: tiny\n", ["x=[1"], "not valid YAML"),
    ],
)
def test_config_errors_name_the_problem(tmp_path, text, overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, text), overrides)


BILLION_LAUGHS = "model_name: tiny\ntrain_envs: []\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip([None, *"abcdefgh"], "abcdefghi", strict=True)
)


def test_a_yaml_alias_bomb_is_refused_at_once_naming_the_file(tmp_path):
    """A few hundred bytes of nested aliases stand for 9**9 values; walking them took minutes."""
    assert len(BILLION_LAUGHS) < 500
    path = write(tmp_path, BILLION_LAUGHS)
    with pytest.raises(ConfigError, match=rf"config file '{re.escape(path)}' stands for more than 100,000 values"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"override 'x=.*' stands for more than 100,000 values"):
        load_config(write(tmp_path, "model_name: tiny\n"), ["x=" + BILLION_LAUGHS.replace("\n", ", ").join("{}")])


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"alias inside its own anchor at line 2"):
        load_config(write(tmp_path, "model_name: tiny\ntrain_envs: &loop [*loop]\n"))


def test_a_few_aliases_still_work():
    build, _ = load_config("configs/two-models-tictactoe.yaml")
    alice, bob = build["models"]
    assert alice["learner"] == bob["learner"] and alice["learner"]["batch_size"] == 384


def test_missing_config_file_is_a_clear_cli_error(capsys):
    assert main(["train", "--config", "no/such.yaml"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bad_value_in_config_is_reported_before_ray_starts(tmp_path, capsys, monkeypatch):
    import unstable.run.wiring

    monkeypatch.setattr(unstable.run.wiring, "start_actors", lambda *a, **k: pytest.fail("actors started"))
    path = write(tmp_path, "model_name: tiny\ntrain_envs: [{env_id: Wordle-v0, num_players: 2, num_actors: 2, "
                           "prompt_template: qwen3-zs}]\n")
    assert main(["train", "--config", path]) == 2
    assert "NLTK" in capsys.readouterr().err


def test_auto_backend_says_once_that_transformers_serves(caplog):
    _ANNOUNCED.clear()
    with caplog.at_level(logging.WARNING, logger="unstable.run.wiring"):
        assert choose_backend("auto") == "transformers"
        assert choose_backend("auto") == "transformers"
    assert sum("transformers backend serves" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(ValueError, match="vLLM is not installed"):
        choose_backend("vllm")


@pytest.mark.slow
def test_unstable_train_runs_a_config(ray_session, tiny_model_dir, tmp_path, capsys):
    code = main(["train", "--config", "configs/tictactoe-tiny.yaml", "--set", f"model_name={tiny_model_dir}",
                 "--set", f"runs_dir={tmp_path}", "--set", "learning_steps=2", "--set", "batch_size=16",
                 "--set", "mini_batch_size=8", "--set", "num_collection_workers=8", "--set", "num_eval_workers=2",
                 "--run-name", "cli"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"run directory {tmp_path}/cli" in out
    assert "done: 3 checkpoints" in out  # base, ckpt-1, ckpt-2
    assert "learner step   2/2" in out  # progress while it trains
    assert (tmp_path / "cli" / "checkpoints" / "ckpt-2" / "adapter_config.json").is_file()
    assert (tmp_path / "cli" / "metrics.jsonl").is_file()
    # a resume with nothing to train changes nothing: config.json (read by the next --resume) stays as it was
    config = tmp_path / "cli" / "config.json"
    before = config.read_bytes()
    assert main(["train", "--resume", str(tmp_path / "cli"), "--set", "learning_steps=1"]) == 0
    assert "already at step 2 >= learning_steps (1); nothing to train" in capsys.readouterr().out
    assert config.read_bytes() == before


def test_a2c_settings_reach_the_learner_from_build_and_yaml(tiny_model_dir, tmp_path):
    """A2C's gamma, gae_lambda and critic settings were unreachable from build(): now ``learner``
    sets any field of the learner's config or parameter of its initialize_algorithm, once."""
    from unstable.learners.catalog import resolve_learner
    from unstable.run.config import BUILD_LEARNER_DEFAULTS, BuildConfig
    from unstable.run.config_file import load_config

    path = tmp_path / "a2c.yaml"
    path.write_text(f"model_name: {tiny_model_dir}\nalgorithm: a2c\nbatch_size: 16\nmini_batch_size: 8\n"
                    "train_envs:\n  - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2,"
                    " prompt_template: qwen3-zs}\n"
                    "learner: {gamma: 0.9, gae_lambda: 0.95, critic_learning_rate: 3.0e-4, weight_decay: 0.1}\n")
    build_kwargs, _ = load_config(str(path))
    cfg = BuildConfig(**build_kwargs, wandb_project=None)
    ctor, init = cfg.models[0].learner_settings(resolve_learner("a2c"))
    assert ctor["weight_decay"] == 0.1 and ctor["batch_size"] == 16 and ctor["grad_clip"] == 0.2
    assert init == {"infer_mini_batch_size": 16, "critic_learning_rate": 3.0e-4, "normalize_adv": True,
                    "gamma": 0.9, "gae_lambda": 0.95, "max_train_len": None, "max_generation_len": 4096}
    assert cfg.to_dict()["models"][0]["learner"]["gamma"] == 0.9  # saved in config.json: a resumed run keeps them
    # without ``learner``, build()'s A2C keeps what the wiring always handed it
    plain = BuildConfig(**{**build_kwargs, "learner": None}, wandb_project=None)
    assert plain.models[0].learner_settings(resolve_learner("a2c"))[1] == {
        **BUILD_LEARNER_DEFAULTS, "max_train_len": None, "max_generation_len": 4096}
    # REINFORCE's initialize_algorithm takes only the lengths
    assert BuildConfig(**{**build_kwargs, "algorithm": "reinforce", "learner": None},
                       wandb_project=None).models[0].learner_settings(resolve_learner("reinforce"))[1] == {
        "max_train_len": None, "max_generation_len": 4096}


def test_a_config_is_pure_data_and_preflight_checks_the_world(tmp_path, monkeypatch):
    """Building a BuildConfig opens, lists and stats no file: a model that does not exist, a run directory under
    a file and an API opponent without a key are preflight's to refuse, before Ray. The config compares and
    round-trips through its nested form."""
    import builtins
    import os

    from unstable.run.config import BuildConfig
    from unstable.run.preflight import preflight

    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    (tmp_path / "a-file").write_text("")
    ttt = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}
    kwargs = dict(model_name="./no/such/model", train_envs=[dict(ttt, num_actors=1)], learning_rate=1e-3,
                  runs_dir=str(tmp_path / "a-file" / "runs"), opponent_sampling_strategy="fixed",
                  fixed_opponents=["openai/gpt-4o"], wandb_project=None, batch_size=8, mini_batch_size=4)
    BuildConfig(**kwargs)  # the modules it uses are imported now

    def no_io(*args, **kwargs):
        raise AssertionError("a config did I/O")

    for module, name in ((builtins, "open"), (os, "stat"), (os, "listdir"), (os, "scandir"), (os, "access")):
        monkeypatch.setattr(module, name, no_io)
    cfg = BuildConfig(**kwargs)
    assert cfg == BuildConfig(**kwargs) and BuildConfig(**cfg.to_dict()).to_dict() == cfg.to_dict()
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"runs_dir .* is a file, not a directory"):
        preflight(cfg)
    with pytest.raises(ValueError, match=r"model_name: model path './no/such/model' does not exist"):
        preflight(BuildConfig(**{**kwargs, "runs_dir": str(tmp_path / "runs")}))


def test_yaml_exponents_are_numbers(tmp_path):
    """PyYAML (YAML 1.1) reads ``1e-3`` (no dot) as a string: configs are read with YAML 1.2's floats, so every
    setting, flat or nested (an A2C learner's too), takes the number; an integer setting refuses ``1e3`` by name,
    and a quoted ``"1e-3"`` stays a string."""
    path = write(tmp_path, "model_name: tiny\ntrain_envs: []\nlearning_rate: 1e-3\nrating_curriculum_width: 2e-1\n"
                           "failure_budget: {max_failure_rate: 5e-1}\nvllm_config: {top_p: 9e-1}\nseed: 1e3\n"
                           "learner: {critic_learning_rate: 5E-5}\nrun_name: '1e3'\n")
    build, _ = load_config(path)
    assert (build["learning_rate"], build["rating_curriculum_width"], build["failure_budget"]["max_failure_rate"],
            build["vllm_config"]["top_p"], build["learner"], build["seed"], build["run_name"]) == (
        1e-3, 0.2, 0.5, 0.9, {"critic_learning_rate": 5e-5}, 1000.0, "1e3")
