"""Models, adapters, devices and resources that cannot work are refused before any actor starts.

Each broken directory here is what a user meets: a model copied without its tokenizer or weights,
a damaged weight file, an adapter of another base model, a Hub id with no network. Without these
checks each one passed ``BuildConfig`` and then failed inside an actor, or (no tokenizer) failed
every game. ``check_resources`` needs Ray (the session's 2-CPU one) and starts no actor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import TTT, make_adapter, small_run_kwargs

import unstable
from unstable.run.config import BuildConfig
from unstable.run.preflight import preflight

VS_FIXED = {"opponent_sampling_strategy": "fixed", "train_envs": [unstable.TrainEnvSpec(num_actors=1, **TTT)]}


def _copy(src: str, dst, leave_out: tuple[str, ...] = ()) -> str:
    shutil.copytree(src, dst, ignore=lambda _, names: [n for n in names if n in leave_out])
    return str(dst)


def _edit_json(path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.fixture(scope="module")
def broken_models(tiny_model_dir, tmp_path_factory) -> dict[str, str]:
    """Copies of the tiny model, each broken one way."""
    root = tmp_path_factory.mktemp("models")
    tokenizer_files = tuple(n for n in os.listdir(tiny_model_dir) if "token" in n or "chat_template" in n)
    out = {"no tokenizer": _copy(tiny_model_dir, root / "no-tokenizer", tokenizer_files),
           "no weights": _copy(tiny_model_dir, root / "no-weights", ("model.safetensors",))}
    out["garbage weights"] = _copy(tiny_model_dir, root / "garbage")
    (root / "garbage" / "model.safetensors").write_bytes(os.urandom(4096))
    out["truncated weights"] = _copy(tiny_model_dir, root / "truncated")
    data = (root / "truncated" / "model.safetensors").read_bytes()
    (root / "truncated" / "model.safetensors").write_bytes(data[: len(data) // 2])
    out["weights of another model"] = _copy(tiny_model_dir, root / "other-config")
    _edit_json(root / "other-config" / "config.json", hidden_size=256)
    out["a missing shard"] = _copy(tiny_model_dir, root / "sharded", ("model.safetensors",))
    (root / "sharded" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}))
    out["an unknown model type"] = _copy(tiny_model_dir, root / "unknown-type")
    _edit_json(root / "unknown-type" / "config.json", model_type="no-such-architecture")
    return out


MODEL_CASES = [
    ("no tokenizer", r"its tokenizer is empty .* so every game would fail; .* copy the tokenizer files"),
    ("no weights", r"has no weights \(model.safetensors, pytorch_model.bin"),
    ("garbage weights", r"model.safetensors is not a readable safetensors file .* damaged"),
    ("truncated weights", r"model.safetensors is not a readable safetensors file"),
    ("weights of another model", r"holds model.embed_tokens.weight of shape \[2048, 128\], but the model its "
                                 r"config.json describes has \[2048, 256\]"),
    ("a missing shard", r"names weight files that are missing: \['model-00001-of-00002.safetensors'\]"),
    ("an unknown model type", r"transformers cannot read its config.json"),
]


@pytest.mark.parametrize(("broken", "match"), MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_a_model_that_cannot_load_is_refused_before_ray(broken, match, broken_models, tmp_path, no_ray):
    path = broken_models[broken]
    with pytest.raises(ValueError, match=f"^model_name '{path}'.*{match}"):
        unstable.build(**small_run_kwargs(path, tmp_path))
    with pytest.raises(ValueError, match=r"models\[0\].model_name"):  # the nested form names the model
        preflight(BuildConfig(models=[{"model_name": path}], train_envs=[unstable.TrainEnvSpec(num_actors=2, **TTT)]))


def test_a_hub_id_offline_and_not_cached_is_refused_at_once(tiny_model_dir, tmp_path, monkeypatch, no_ray):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ValueError, match=r"model_name 'Qwen/Qwen3-0.6B' is not a local directory and not in the "
                                         r"Hugging Face cache, and HF_HUB_OFFLINE is set: download it first"):
        unstable.build(**small_run_kwargs("Qwen/Qwen3-0.6B", tmp_path))
    with pytest.raises(ValueError, match="neither a local directory nor a Hugging Face Hub id"):
        preflight(BuildConfig(**small_run_kwargs("not a model", tmp_path)))


def test_a_hub_id_without_a_network_fails_fast_without_retries(tmp_path):
    """A fresh process with the Hub unreachable (connection refused): one try, a message, no Ray."""
    code = (
        "import ray, unstable\n"
        "try:\n"
        "    unstable.build(model_name='Qwen/Qwen3-0.6B', train_envs=[dict(env_id='TicTacToe-v0-train', num_players=2,"
        " num_actors=2, prompt_template='qwen3-zs')])\n"
        "except ValueError as exc:\n"
        "    print('error:', exc)\n"
        "print('ray initialised:', ray.is_initialized())\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert "the Hub (http://127.0.0.1:9) cannot be reached (ConnectError" in out.stdout, out.stdout
    assert "ray initialised: False" in out.stdout
    assert "Retry" not in out.stderr  # huggingface_hub's retries (5, ~25 s) would say "Retrying in 1s [Retry 1/5]"


@pytest.fixture(scope="module")
def broken_adapters(tiny_model_dir, model_dir, adapters, tmp_path_factory) -> dict[str, str]:
    """Copies of a real adapter of the tiny model, each broken one way, and one of another base model."""
    root = tmp_path_factory.mktemp("broken-adapters")
    out = {"no adapter_config.json": _copy(adapters[0], root / "no-config", ("adapter_config.json",))}
    out["a config without peft_type"] = _copy(adapters[0], root / "no-peft-type")
    (root / "no-peft-type" / "adapter_config.json").write_text('{"r": 4}')
    out["target modules the base lacks"] = _copy(adapters[0], root / "other-modules")
    _edit_json(root / "other-modules" / "adapter_config.json", target_modules=["c_attn", "c_proj"])
    out["another base model"] = make_adapter(model_dir, root / "other-base", seed=3)  # hidden size 64, not 128
    out["garbage weights"] = _copy(adapters[0], root / "garbage")
    (root / "garbage" / "adapter_model.safetensors").write_bytes(os.urandom(2048))
    return out


ADAPTER_CASES = [
    ("no adapter_config.json", r"is not a PEFT LoRA adapter directory \(no adapter_config.json\)"),
    ("a config without peft_type", r"adapter_config.json says peft_type=None, but only LoRA adapters"),
    ("target modules the base lacks", r"target_modules names \['c_attn', 'c_proj'\], which the model .* does not "
                                      r"have; its linear modules: \['down_proj', 'gate_proj', 'k_proj'"),
    ("another base model", r"holds base_model.model.model.layers.0.mlp.down_proj.lora_A.weight of shape \[4, 128\], "
                           r"but model.layers.0.mlp.down_proj of the base model .* has 384 inputs: the adapter was "
                           "trained on another base model"),
    ("garbage weights", r"adapter_model.safetensors is not a readable safetensors file"),
]


@pytest.mark.parametrize(("broken", "match"), ADAPTER_CASES, ids=[c[0] for c in ADAPTER_CASES])
@pytest.mark.parametrize("where", ["fixed_opponents", "eval_envs"])
def test_an_adapter_that_does_not_fit_is_refused_before_ray(where, broken, match, broken_adapters, tiny_model_dir,
                                                            tmp_path, no_ray):
    path = broken_adapters[broken]
    if where == "fixed_opponents":
        kwargs, label = {**VS_FIXED, "fixed_opponents": [path]}, r"fixed_opponents\[0\]"
    else:
        kwargs = {"eval_envs": [unstable.EvalEnvSpec(fixed_opponent=path, **TTT)]}
        label = r"eval_envs\[0\].fixed_opponent"
    with pytest.raises(ValueError, match=f"^{label} '{path}'.*{match}"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, **kwargs))


def test_a_checkpoint_of_another_base_is_refused_on_resume_before_ray(broken_adapters, tiny_model_dir, tmp_path,
                                                                      monkeypatch):
    """Resuming with a model_name whose shapes differ from the run's checkpoints (--set model_name=...)."""
    import unstable.run.wiring

    def must_not_run(*args, **kwargs):
        raise AssertionError("Ray was started before the resume checkpoint was checked")

    monkeypatch.setattr(unstable.run.wiring, "ensure_ray", must_not_run)
    run_dir = tmp_path / "runs" / "r"
    config = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path / "runs", run_name="r")).to_dict()  # before its
    ckpt = _copy(broken_adapters["another base model"], run_dir / "checkpoints" / "ckpt-1")  # checkpoints: then
    for name in ("trainer_state.pt", "COMPLETE"):  # only a resume may use run_name 'r'
        (run_dir / "checkpoints" / "ckpt-1" / name).write_text("")
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"the checkpoint to resume from '{ckpt}' holds .* trained on another base"):
        unstable.build(resume_from=str(run_dir))


def test_the_tiny_model_real_adapters_and_the_default_job_pass_quickly(tiny_model_dir, adapters, tmp_path, no_ray):
    from unstable.models import checks

    checks._CHECKED.clear()
    started = time.perf_counter()
    info = checks.check_model(tiny_model_dir)
    assert time.perf_counter() - started < 1.0  # config, tokenizer, weight header, meta model: once
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= set(info.candidates())
    started = time.perf_counter()
    assert checks.check_model(tiny_model_dir) is info and time.perf_counter() - started < 0.05  # cached
    for adapter in adapters:
        checks.check_adapter(adapter, "adapter", info)
    cfg = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, **VS_FIXED, fixed_opponents=[adapters[0]],
                                         eval_envs=[unstable.EvalEnvSpec(fixed_opponent=adapters[1], **TTT)]))
    assert cfg.samplers.fixed_opponents == (adapters[0],)
    BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, lora_config=None))  # the seed's LoRA defaults
    from unstable.run.config_file import load_config

    build_kwargs, _ = load_config("configs/tictactoe-tiny.yaml", [f"model_name={tiny_model_dir}"])
    BuildConfig(**build_kwargs)


def test_lora_target_modules_the_model_lacks_are_named_with_the_candidates(tiny_model_dir, tmp_path, no_ray):
    with pytest.raises(ValueError, match=r"^lora_config\['target_modules'\] names \['nope_proj'\], which the model "
                                         r".* does not have; its linear modules: \['down_proj', 'gate_proj', 'k_proj', "
                                         r"'lm_head', 'o_proj', 'q_proj', 'up_proj', 'v_proj'\]"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, lora_config={"target_modules": ["q_proj",
                                                                                                     "nope_proj"]}))
    with pytest.raises(ValueError, match=r"^models\[0\].lora\['target_modules'\] names \['qproj'\]"):
        preflight(BuildConfig(models=[{"model_name": tiny_model_dir, "lora": {"target_modules": ["qproj"]}}],
                              train_envs=[unstable.TrainEnvSpec(num_actors=2, **TTT)]))
    # full names and dotted tails count, as PEFT matches them
    preflight(BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, lora_config={
        "target_modules": ["self_attn.q_proj", "model.layers.0.mlp.down_proj"]})))


def test_a_device_this_machine_lacks_is_refused_before_ray(tiny_model_dir, tmp_path, no_ray):
    import torch

    with pytest.raises(ValueError, match=r"learner_device='cuda:1', but the learner actor sees only the GPU Ray "
                                         r"gives it, as cuda:0"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, learner_device="cuda:1"))
    if not torch.cuda.is_available():
        for device in ("cuda", "cuda:0"):
            with pytest.raises(ValueError, match=f"learner_device='{device}', but torch finds no cuda device"):
                unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, learner_device=device))
    if not torch.backends.mps.is_available():
        with pytest.raises(ValueError, match="learner_device='mps', but torch finds no mps device"):
            unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, learner_device="mps"))
    # on a cluster the driver's own devices say nothing: the cluster's GPUs are checked once Ray is up
    BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, learner_device="cuda", ray_address="auto"))


def test_resources_the_cluster_cannot_hold_are_named():
    from types import SimpleNamespace

    from unstable.run.wiring import check_resources

    model = SimpleNamespace(name="model", model_name="m", learner_device=None, inference={})
    check_resources([model], {"CPU": 2.0})  # the default job: the learner's CPU and one inference actor's
    model.inference = {"num_actors": 2}
    with pytest.raises(ValueError, match=r"^the run asks Ray for 3 CPU and 0 GPU \(the learner 1 CPU and 0 GPU; 2 "
                                         r"inference actors 1 CPU and 0 GPU each\), but the cluster has 2 CPU and 0 "
                                         r"GPU, so its actors would wait forever for CPU: lower num_inference_actors"):
        check_resources([model], {"CPU": 2.0})
    check_resources([model], {"CPU": 16.0, "GPU": 3.0})  # one GPU for the learner, one per inference actor
    with pytest.raises(ValueError, match=r"asks Ray for 1 CPU and 1.5 GPU .* wait forever for GPU"):
        check_resources([model], {"CPU": 16.0, "GPU": 1.0})  # the learner's half and two inference halves
    alice = SimpleNamespace(name="alice", model_name="a", learner_device=None, inference={})
    bob = SimpleNamespace(name="bob", model_name="b", learner_device=None, inference={})
    check_resources([alice, bob], {"CPU": 2.0})  # two bases: the learners share a CPU, the engines another
    model.inference, model.learner_device = {}, "cuda"
    with pytest.raises(ValueError, match="learner_device='cuda', but the Ray cluster has no GPU"):
        check_resources([model], {"CPU": 16.0})


def test_a_run_the_cluster_cannot_hold_is_refused_before_any_actor(ray_session, tiny_model_dir, tmp_path,
                                                                   monkeypatch):
    import unstable.run.wiring
    from unstable.run.wiring import check_resources

    def must_not_run(*args, **kwargs):
        raise AssertionError("an actor was created for a run the cluster cannot hold")

    monkeypatch.setattr(unstable.run.wiring, "actor_class", must_not_run)
    with pytest.raises(ValueError, match=r"the run asks Ray for .* but the cluster has .* lower num_inference_actors"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, num_inference_actors=64))
    assert not (tmp_path / "t" / "RUN_CLAIM").exists()  # the claim was given back
    # what the tests and the default job ask for fits the session's 2 CPUs
    check_resources(BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path)).models, ray_session.cluster_resources())
