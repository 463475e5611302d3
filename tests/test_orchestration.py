"""build() and a real asynchronous run on local Ray (tiny model, CPU); the seed's standard script runs in
test_model_names.py."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import small_run_kwargs
from scenarios import run_scenario

import unstable
from unstable.run.config import BuildConfig
from unstable.tracking import read_metrics


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"algorithm": "trpo"}, "algorithm must be one of"),
        ({"algorithm": "grpo", "vllm_config": {"top_p": 0.9}}, r"vllm_config\['top_p'\]=0.9 with algorithm='grpo'"),
        ({"algorithm": "ppo", "temperature": 0}, "temperature=0"),
        ({"algorithm": "gspo", "learner": {"off_policy_correction": "token_mask"}}, "ratio_level='sequence'"),
        ({"learner": {"clip_ratio": 0}}, "clip_ratio must be in"),
        ({"opponent_sampling_strategy": "league"}, "opponent_sampling_strategy must be one of"),
        ({"env_sampling_strategy": "round-robin"}, "env_sampling_strategy"),
        ({"batch_size": 0}, "batch_size must be"),
        ({"batch_size": 10, "mini_batch_size": 4}, "multiple of mini_batch_size"),
        ({"buffer_size": 4}, "buffer_size"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"learning_rate": float("nan")}, "learning_rate must be a number > 0"),
        ({"max_staleness": -1}, "max_staleness must be an integer >= 0"),
        ({"batch_size": True}, "batch_size must be an integer"),
        ({"train_envs": []}, "train_envs must be a non-empty list"),
        ({"train_envs": ["TicTacToe-v0-train"]}, r"train_envs\[0\] must be a TrainEnvSpec"),
        ({"lora_config": {"rank": 4}}, "unknown lora_config keys"),
        ({"vllm_config": {"max_tokenz": 3}}, "unknown vllm_config keys"),
        ({"model_name": "/no/such/model"}, "does not exist"),
        ({"inference_backend": "tgi"}, "inference_backend"),
        ({"use_trainer_cache": True}, "use_trainer_cache"),
        ({"bogus_argument": 1}, "unknown build"),
    ],
)
def test_bad_build_arguments_raise_before_any_actor_starts(override, match, tiny_model_dir, tmp_path, monkeypatch):
    import unstable.run.wiring

    def must_not_start(*args, **kwargs):
        raise AssertionError("Ray actors were started before validation finished")

    monkeypatch.setattr(unstable.run.wiring, "start_actors", must_not_start)
    with pytest.raises(ValueError, match=match):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, **override))


def test_seed_defaults_are_kept(tiny_model_dir):  # the seed's Qwen/Qwen3-1.7B-Base would need the Hub
    cfg = BuildConfig(model_name=tiny_model_dir,
                      train_envs=[unstable.TrainEnvSpec("SimpleTak-v0-train", 2, 2, "qwen3-zs")])
    (m,) = cfg.models
    flat = ("batch_size", "mini_batch_size", "learning_rate", "grad_clip")
    assert [m.setting(k) for k in flat] == [384, 1, 1e-5, 0.2]
    assert m.buffer.size == 768 and m.setting("max_generation_len") == 4096 and m.algorithm == "reinforce"
    assert m.lora_cfg == {"lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.0,
                        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    assert cfg.tracker.wandb_project == "UnstableBaselines"


def test_local_ray_workers_run_at_the_drivers_priority(ray_session):
    """Ray's default (niceness 15) let any busy process at normal priority take the CPU from the learner
    and the inference actors: 21x slower beside two (benchmarks/bench_worker_niceness.py)."""

    @ray_session.remote(num_cpus=0)
    def niceness() -> int:
        return os.nice(0)

    assert ray_session.get(niceness.remote()) == os.nice(0)


def test_init_local_ray_keeps_the_users_worker_niceness_and_restores_the_environment(monkeypatch):
    import ray

    from unstable.run.wiring import WORKER_NICENESS_ENV as KEY
    from unstable.run.wiring import init_local_ray

    seen = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.append((os.environ.get(KEY), kwargs)))
    monkeypatch.delenv(KEY, raising=False)
    init_local_ray(num_cpus=1)
    assert seen[-1] == ("0", {"address": "local", "num_cpus": 1})
    assert KEY not in os.environ
    monkeypatch.setenv(KEY, "5")
    init_local_ray()
    assert seen[-1][0] == "5" and os.environ[KEY] == "5"


@pytest.mark.slow
def test_build_runs_three_learner_steps_with_concurrent_collection(ray_session, tiny_model_dir, tmp_path):
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path))
    try:
        summary = run.start(learning_steps=3, num_collection_workers=8, num_eval_workers=2)
        registry = run.actors.registry
        ray = ray_session
        assert summary["checkpoints"][-3:] == ["ckpt-1", "ckpt-2", "ckpt-3"]
        models = {m["uid"]: m for m in ray.get(registry.get_all_models.remote())}
        assert all(os.path.isfile(os.path.join(models[f"ckpt-{i}"]["path_or_name"], "adapter_config.json"))
                   for i in (1, 2, 3))
        assert sum(m["games"] for m in models.values()) > 0
        assert ray.get(registry.match_counts.remote())
        assert summary["collector"]["train_finished"] > 0 and summary["collector"]["eval_finished"] > 0
    finally:
        run.stop()
    lines = read_metrics(run.run_dir)
    keys = {k for line in lines for k in line}
    for prefix in ("collect/", "train/", "eval/", "inference/"):
        assert any(k.startswith(prefix) for k in keys), prefix
    assert os.path.isfile(os.path.join(run.run_dir, "registry", "registry.json"))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["a2c", "ppo", "grpo", "gspo"])
def test_every_algorithm_trains_through_build(algorithm, ray_session, tiny_model_dir, tmp_path):
    """Two learner steps per algorithm on a real asynchronous run (REINFORCE: the test above)."""
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, algorithm=algorithm, temperature=1.0))
    try:
        summary = run.start(learning_steps=2, num_collection_workers=8, num_eval_workers=1)
    finally:
        run.stop()
    assert summary["checkpoints"][-2:] == ["ckpt-1", "ckpt-2"]
    trained = [line for line in read_metrics(run.run_dir) if "train/approx_kl" in line]
    assert len(trained) == 2
    for line in trained:
        assert all(math.isfinite(line[k]) for k in ("train/loss", "train/approx_kl", "train/clipfrac", "train/entropy"))
        assert line["train/approx_kl"] < 0.05  # the recorded behaviour log-probs are the learner's own distribution
        assert any(k.startswith("train/staleness_frac/") for k in line)


USER_SCRIPT = """
import sys
import unstable

run = unstable.build(  # the seed's minimal script, scaled down; wandb_project keeps its default
    model_name=sys.argv[1], train_envs=[unstable.TrainEnvSpec("TicTacToe-v0-train", 2, 2, "qwen3-zs")],
    batch_size=16, mini_batch_size=8, learning_rate=1e-3, max_generation_len=16,
    lora_config={"lora_rank": 4, "lora_alpha": 8}, activation_checkpointing=False, gradient_checkpointing=False,
    runs_dir=sys.argv[2], run_name="user", inference_backend="transformers")
run.start(learning_steps=1, num_collection_workers=8, num_eval_workers=0)
run.stop()

import os
import ray


@ray.remote(num_cpus=0)
def niceness():
    return os.nice(0)


print("niceness of Ray's workers, of the driver:", ray.get(niceness.remote()), os.nice(0))
"""


def _a_users_environment(tmp_path) -> dict[str, str]:
    """As a new user's machine is: wandb installed, nobody logged in (an empty HOME), no WANDB_* or
    RAY_* variable set; a Ray of its own."""
    import tempfile

    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RAY_")) and k != "NETRC"}
    (tmp_path / "home").mkdir()
    return env | {"HOME": str(tmp_path / "home"), "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray-user-", dir="/tmp")}


def _said_offline_once(out: str, run_dir) -> None:
    assert out.count("W&B has no API key here") == 1  # said once, with the fix
    assert "wandb login" in out and "UsageError" not in out
    assert (run_dir / "checkpoints" / "ckpt-1" / "adapter_config.json").is_file()
    assert list((run_dir / "wandb").glob("offline-run-*"))  # logged offline, ready for `wandb sync`


@pytest.mark.slow
def test_a_run_on_a_machine_without_wandb_login_logs_offline(tiny_model_dir, tmp_path):
    """build() used to die in the Tracker actor (``UsageError: No API key configured``)."""

    pytest.importorskip("wandb")
    proc = subprocess.run([sys.executable, "-c", USER_SCRIPT, tiny_model_dir, str(tmp_path / "runs")],
                          env=_a_users_environment(tmp_path), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    _said_offline_once(out, tmp_path / "runs" / "user")
    worker, driver = out.split("niceness of Ray's workers, of the driver: ")[1].split()[:2]
    assert worker == driver  # build()'s local Ray: not Ray's default 15 (benchmarks/bench_worker_niceness.py)


USER_CONFIG = """\
model_name: {model}
train_envs:
  - {{env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2, prompt_template: qwen3-zs}}
batch_size: 16
mini_batch_size: 8
learning_rate: 0.001
max_generation_len: 16
lora_config: {{lora_rank: 4, lora_alpha: 8}}
activation_checkpointing: false
gradient_checkpointing: false
inference_backend: transformers
runs_dir: {runs}
learning_steps: 1
num_collection_workers: 8
num_eval_workers: 0
"""  # no wandb_project: the default, "UnstableBaselines", as in a config a user writes


@pytest.mark.slow
def test_unstable_train_on_a_machine_without_wandb_login_logs_offline(tiny_model_dir, tmp_path):
    """``unstable train --config X`` died in the Tracker actor whenever X did not say ``wandb_project: null``."""

    pytest.importorskip("wandb")
    config = tmp_path / "user.yaml"
    config.write_text(USER_CONFIG.format(model=tiny_model_dir, runs=tmp_path / "runs"))
    command = [sys.executable, "-m", "unstable.cli.commands", "train", "--config", str(config), "--run-name", "cli"]
    proc = subprocess.run(command, cwd=Path(__file__).resolve().parents[1], env=_a_users_environment(tmp_path),
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    _said_offline_once(out, tmp_path / "runs" / "cli")


@pytest.mark.slow
def test_two_runs_with_the_same_name_in_one_ray_have_their_own_actors(tiny_model_dir, tmp_path):
    """The actors were named "Tracker", "Buffer" and "inference-0" in every run: a second build() in
    the same Ray (ray_address=, or one process) failed on the taken name. Now each run's names start
    with its own run id, and the dashboard finds a run's Tracker and Buffer by its directory."""
    out = run_scenario("scenario_two_runs", tiny_model_dir, str(tmp_path))
    first, second = out["runs"]
    assert first["run_id"] != second["run_id"] and first["run_id"].startswith("same-")
    assert first["run_dir"] == str(tmp_path / "a" / "same") and second["run_dir"] == str(tmp_path / "b" / "same")
    for run in (first, second):
        assert run["names_find_own_actors"] and run["checkpoints"][-1] == "ckpt-1"
    assert out["dashboard"] == {"run_dir": second["run_dir"], "buffer_is_its_own": True}
