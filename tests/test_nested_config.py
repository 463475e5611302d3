"""build()'s settings nest: the seed's flat arguments map onto per-model and run-wide sections,
the nested form works through build() and YAML, config.json holds it, and old flat ones still load."""

import json

import pytest

import unstable
import unstable.run.wiring
from unstable.buffers.config import BufferConfig
from unstable.collection.failures import FailureBudget
from unstable.run.arguments import FLAT_ARGUMENTS, nest_arguments
from unstable.run.config import BuildConfig, ModelConfig
from unstable.run.config_file import load_config
from unstable.run.resume import load_run_config
from unstable.samplers.config import SamplerConfig
from unstable.tracking.config import TrackerConfig

TTT = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}


def flat_kwargs(model_dir, tmp_path):
    return dict(model_name=model_dir, train_envs=[dict(TTT, num_actors=1)], opponent_sampling_strategy="lagged",
                opponent_lag=2, batch_size=16, mini_batch_size=8, gradient_clipping=0.5, algorithm="a2c",
                learner={"gamma": 0.9}, lora_config={"lora_rank": 4}, vllm_config={"top_p": 0.9, "max_tokens": 16},
                temperature=0.7, inference_backend="transformers", buffer_size=64, max_staleness=2,
                wandb_project=None, max_consecutive_failures=None, runs_dir=str(tmp_path), seed=3)


def nested_kwargs(model_dir, tmp_path):
    return dict(
        models=[{"model_name": model_dir, "algorithm": "a2c", "lora": {"lora_rank": 4},
                 "learner": {"batch_size": 16, "mini_batch_size": 8, "grad_clip": 0.5, "gamma": 0.9},
                 "inference": {"backend": "transformers", "temperature": 0.7, "top_p": 0.9, "max_tokens": 16},
                 "buffer": {"size": 64, "max_staleness": 2}}],
        train_envs=[dict(TTT, num_actors=1)],
        samplers={"opponent_sampling_strategy": "lagged", "opponent_lag": 2},
        tracker={"wandb_project": None}, failure_budget={"max_consecutive_failures": None},
        runs_dir=str(tmp_path), seed=3)


def test_every_flat_argument_has_one_place():
    places = [place for place in FLAT_ARGUMENTS.values() if place[1] is not None]
    assert len(places) == len(set(places))  # no two flat names set the same field
    nested, flat = nest_arguments({"batch_size": 8, "wandb_project": "p", "buffer_size": 16, "lora_config": None})
    assert flat == {"batch_size", "wandb_project", "buffer_size", "lora_config"}
    assert nested == {"models": [{"learner": {"batch_size": 8}, "buffer": {"size": 16}, "lora": None}],
                      "tracker": {"wandb_project": "p"}}


def test_a_flat_call_gives_the_sections(tiny_model_dir, tmp_path):
    cfg = BuildConfig(**flat_kwargs(tiny_model_dir, tmp_path))
    (model,) = cfg.models
    assert isinstance(model, ModelConfig) and model.name == "model" and model.model_name == tiny_model_dir
    assert model.learner == {"batch_size": 16, "mini_batch_size": 8, "grad_clip": 0.5, "gamma": 0.9}
    assert model.inference == {"backend": "transformers", "temperature": 0.7, "top_p": 0.9, "max_tokens": 16}
    assert model.buffer == BufferConfig(size=64, max_staleness=2)
    assert model.lora_cfg["lora_rank"] == 4 and model.algorithm == "a2c"
    assert cfg.samplers == SamplerConfig(opponent_sampling_strategy="lagged", opponent_lag=2)
    assert cfg.tracker == TrackerConfig(wandb_project=None)
    assert cfg.failure_budget == FailureBudget(max_consecutive_failures=None)
    assert model.setting("learning_rate") == 1e-5  # not given: the learner config's default
    ctor, init = model.learner_settings(unstable.A2CLearner)
    assert ctor["grad_clip"] == 0.5 and init["gamma"] == 0.9


def test_the_nested_form_through_build_kwargs_and_yaml_is_the_same_run(tiny_model_dir, tmp_path):
    flat = BuildConfig(**flat_kwargs(tiny_model_dir, tmp_path)).to_dict()
    assert BuildConfig(**nested_kwargs(tiny_model_dir, tmp_path)).to_dict() == flat
    path = tmp_path / "nested.yaml"
    path.write_text(
        f"models:\n  - model_name: {tiny_model_dir}\n    algorithm: a2c\n    lora: {{lora_rank: 4}}\n"
        "    learner: {batch_size: 16, mini_batch_size: 8, grad_clip: 0.5, gamma: 0.9}\n"
        "    inference: {backend: transformers, temperature: 0.7, top_p: 0.9, max_tokens: 16}\n"
        "    buffer: {size: 64, max_staleness: 2}\n"
        "train_envs:\n  - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 1, prompt_template: qwen3-zs}\n"
        "samplers: {opponent_sampling_strategy: lagged, opponent_lag: 2}\n"
        f"tracker: {{wandb_project: null}}\nfailure_budget: {{max_consecutive_failures: null}}\n"
        f"runs_dir: {tmp_path}\nseed: 3\nlearning_steps: 4\n")
    build_kwargs, start = load_config(str(path))
    assert start["learning_steps"] == 4 and BuildConfig(**build_kwargs).to_dict() == flat
    # a flat --set override lands in its section of a nested config
    build_kwargs, _ = load_config(str(path), ["batch_size=32", "buffer_size=96"])
    cfg = BuildConfig(**build_kwargs)
    assert cfg.models[0].learner["batch_size"] == 32 and cfg.models[0].learner["gamma"] == 0.9
    assert cfg.models[0].buffer.size == 96


def test_both_forms_of_one_setting_and_several_models_are_errors(tiny_model_dir, tmp_path):
    kwargs = nested_kwargs(tiny_model_dir, tmp_path)
    with pytest.raises(ValueError, match=r"batch_size is given twice: as build\(batch_size=...\) and as "
                                         r"models\[0\].learner.batch_size"):
        BuildConfig(**kwargs, batch_size=32)
    with pytest.raises(ValueError, match=r"vllm_config \['top_p'\] given twice"):
        BuildConfig(**kwargs, vllm_config={"top_p": 0.5})
    with pytest.raises(ValueError, match=r"train_envs\[0\] \(TicTacToe-v0-train\) has no seats, but the run "
                                         r"trains \['model', 'b'\]"):
        BuildConfig(**{**kwargs, "models": [kwargs["models"][0], {**kwargs["models"][0], "name": "b"}]})
    # different settings in the two forms combine
    cfg = BuildConfig(**{**kwargs, "samplers": None}, opponent_sampling_strategy="mirror", learning_rate=1e-3)
    assert cfg.samplers.opponent_sampling_strategy == "mirror" and cfg.models[0].learner["learning_rate"] == 1e-3


OLD_FLAT_CONFIG = {  # a config.json as runs before the nested configs wrote it
    "model_name": "$MODEL", "train_envs": [dict(TTT, num_actors=2, action_extraction_fn="default",
                                               error_allowance=0)],
    "eval_envs": [], "env_sampling_strategy": "random", "opponent_sampling_strategy": "mirror",
    "fixed_opponents": ["random"], "algorithm": "reinforce", "max_train_len": None, "max_generation_len": 16,
    "batch_size": 16, "mini_batch_size": 8, "learning_rate": 0.001, "gradient_clipping": 0.2,
    "lr_schedule": "constant", "activation_checkpointing": False, "gradient_checkpointing": False,
    "use_trainer_cache": False, "buffer_size": 32, "lora_config": {"lora_rank": 4}, "vllm_config": None,
    "wandb_project": None, "inference_backend": "transformers", "num_inference_actors": None, "temperature": None,
    "run_name": "old", "runs_dir": "$RUNS", "ray_address": None, "seed": 0, "max_staleness": None,
    "opponent_lag": None, "opponent_window": 4, "use_wandb": None, "learner_device": None, "resume_from": None,
    "learner": None, "max_consecutive_failures": 32, "max_failure_rate": 0.5, "failure_rate_window": 200,
    "learning_steps": 6, "num_collection_workers": 8, "num_eval_workers": 2,
}


def test_an_old_flat_config_json_still_resumes(tiny_model_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "old"
    (run_dir / "checkpoints").mkdir(parents=True)
    text = json.dumps(OLD_FLAT_CONFIG).replace("$MODEL", tiny_model_dir).replace("$RUNS", str(tmp_path / "runs"))
    (run_dir / "config.json").write_text(text)
    build_kwargs, start = load_run_config(run_dir, ["learning_rate=2e-3"])
    assert start["learning_steps"] == 6
    cfg = BuildConfig(**build_kwargs)
    assert cfg.models[0].learner["batch_size"] == 16 and cfg.models[0].learner["learning_rate"] == 2e-3
    assert cfg.models[0].buffer.size == 32

    started = []

    def start_actors(cfg, run_name):
        started.append((cfg, run_name))
        raise RuntimeError("stop here: no actors in this test")

    monkeypatch.setattr(unstable.run.wiring, "start_actors", start_actors)
    with pytest.raises(RuntimeError, match="stop here"):  # build(resume_from=...) merges the saved flat settings
        unstable.build(resume_from=str(run_dir), models=[{"learner": {"batch_size": 8}}])
    cfg, run_name = started[0]
    assert run_name == "old" and cfg.resume_from == str(run_dir)
    assert cfg.models[0].learner["batch_size"] == 8 and cfg.models[0].lora_cfg["lora_rank"] == 4
    assert cfg.samplers.opponent_sampling_strategy == "mirror"
    # what the resumed run saves is the nested form, which loads back to the same settings
    (run_dir / "config.json").write_text(json.dumps({**cfg.to_dict(), **start}))
    again, _ = load_run_config(run_dir)
    assert BuildConfig(**again).to_dict() == {**cfg.to_dict(), "resume_from": None}


def test_the_readme_nested_yaml_builds(tiny_model_dir, tmp_path):

    from doc_examples import code_blocks

    (block,) = [b for b in code_blocks("yaml") if "models:" in b and "league:" not in b]  # not training.md's league
    path = tmp_path / "readme.yaml"
    path.write_text(block.replace("model_name: tiny", f"model_name: {tiny_model_dir}") + f"runs_dir: {tmp_path}\n")
    cfg = BuildConfig(**load_config(str(path))[0])
    model = cfg.models[0]
    assert model.learner["gamma"] == 0.99 and model.buffer.size == 128 and model.inference["temperature"] == 0.7


def test_sections_may_be_config_objects(tiny_model_dir, tmp_path):
    cfg = BuildConfig(models=[ModelConfig(model_name=tiny_model_dir, learner={"batch_size": 8},
                                          buffer=BufferConfig(size=32))],
                      train_envs=[dict(TTT, num_actors=2)], samplers=SamplerConfig(opponent_sampling_strategy="mirror"),
                      tracker=TrackerConfig(wandb_project=None), runs_dir=str(tmp_path), max_staleness=1)
    assert cfg.models[0].buffer == BufferConfig(size=32, max_staleness=1) and cfg.models[0].learner["batch_size"] == 8
    assert cfg.samplers.opponent_sampling_strategy == "mirror" and cfg.tracker.wandb_project is None
