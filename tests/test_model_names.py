"""The tiny models' names (``"tiny"``, ``"tiny:1m:seed1"``) work wherever a model name is taken, not only in
build(): the learners, the inference backends, the collector's ``vllm_config``, and the seed's hand-wired
0.2 "standard script" (which once asked the Hub for ``huggingface.co/tiny``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_cache(tiny_model_dir, tmp_path, monkeypatch) -> Path:
    """A tiny-model cache whose ``"tiny"`` (1m, seed 0) is the session's tiny model, so nothing is built."""
    from unstable.local_models.tiny import TINY_MODEL_VERSION

    (tmp_path / "tiny-models").mkdir()
    (tmp_path / "tiny-models" / f"1m-seed0-v{TINY_MODEL_VERSION}").symlink_to(tiny_model_dir)
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path))
    return tmp_path / "tiny-models" / f"1m-seed0-v{TINY_MODEL_VERSION}"


def test_learners_and_backends_take_tiny(tiny_cache, tmp_path):
    from unstable.inference.config import InferenceConfig
    from unstable.inference.transformers_backend import TransformersBackend
    from unstable.inference.vllm_backend import VLLMBackendConfig
    from unstable.learners import REINFORCELearner
    from unstable.learners.config import LearnerConfig

    assert LearnerConfig(model_name="tiny").model_name == "tiny"  # a config does no I/O: the learner builds it
    assert VLLMBackendConfig(model_name="tiny:1m").model_name == str(tiny_cache)
    assert InferenceConfig.from_vllm_config({"model_name": "tiny"}).model_name == "tiny"  # a config does no I/O
    backend = TransformersBackend("tiny")
    assert backend.config.model_name == str(tiny_cache) and backend.tokenizer.vocab_size > 0
    learner = REINFORCELearner("tiny", output_dir=str(tmp_path / "out"), batch_size=2, mini_batch_size=1,
                               lora_cfg={"lora_rank": 4}, gradient_checkpointing=False, activation_checkpointing=False)
    assert learner.config.model_name == str(tiny_cache)
    assert LearnerConfig(model_name="Qwen/Qwen3-1.7B-Base").model_name == "Qwen/Qwen3-1.7B-Base"  # hub ids unchanged


def test_a_malformed_tiny_name_says_what_the_names_are(tiny_cache):
    from unstable.learners.config import LearnerConfig

    with pytest.raises(ValueError, match="tiny:<size>:seed<N>"):
        LearnerConfig(model_name="tiny:1m:3")


# The seed's "Standard Script" (docs/training.md: "works as written"), as the seed gives it, with these
# changes only, each marked "# changed:": the model is "tiny", the sizes are a test's (8 games at a time,
# a batch of 16, 2 learner steps, 16 new tokens), the learner asks for no GPU, and W&B logs offline.
SEED_STANDARD_SCRIPT = '''
import time, ray, unstable
import unstable.reward_transformations as retra
COLLECTION_WORKERS = 8  # changed: 384
EVALUATION_WORKERS = 2  # changed: 16
ITERATIONS = 2  # changed: 200
MODEL_NAME = "tiny"  # changed: "Qwen/Qwen3-4B-Base"
BATCH_SIZE = 16  # changed: 384
MINI_BATCH_SIZE = 8  # changed: 1
BUFFER_SIZE = 16*2  # changed: 384*2
LR = 1e-5
GRAD_CLIP = 0.2
MAX_TRAIN_SEQ_LEN = None
MAX_GENERATION_LENGTH = 16  # changed: 4096
lora_config = {
"lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.0,
"target_modules": ["q_proj","k_proj","v_proj","o_proj","gate_proj", "up_proj","down_proj"]
}
vllm_config = {
"model_name": MODEL_NAME, "temperature": 0.6, "max_tokens": MAX_GENERATION_LENGTH,
"max_parallel_seq": 128, "max_loras": 8, "lora_config": lora_config,
"max_model_len": 8192
}
# Ray init
ray.init(namespace="unstable")
# initialize environment scheduler
env_sampler = unstable.samplers.env_samplers.UniformRandomEnvSampler(
    train_env_specs=[
        unstable.TrainEnvSpec(env_id="SimpleTak-v0-train", num_players=2, num_actors=2, prompt_template="qwen3-zs"),
    ],
    eval_env_specs=[
        unstable.EvalEnvSpec(env_id="SimpleTak-v0-train", num_players=2, prompt_template="qwen3-zs"),
        unstable.EvalEnvSpec(env_id="KuhnPoker-v0-train", num_players=2, prompt_template="qwen3-zs"),
    ])
# Tracker
tracker = unstable.Tracker.options(name="Tracker").remote(
    run_name=f"Test-{MODEL_NAME.split('/')[-1]}-{env_sampler.env_list()}-{int(time.time())}",
    wandb_project="UnstableBaselines", wandb_mode="offline"  # changed: wandb_mode added
)
# initialize model registry
model_registry = unstable.ModelRegistry.options(name="ModelRegistry").remote(tracker=tracker)
ray.get(model_registry.add_checkpoint.remote(uid="base", path=None, iteration=0))
ray.get(model_registry.add_fixed.remote(name="google/gemini-2.0-flash-lite-001"))
# initialize model sampler
model_sampler = unstable.samplers.model_samplers.BaseModelSampler(model_registry=model_registry)
# build game scheduler
game_scheduler = unstable.GameScheduler.options(name="GameScheduler").remote(model_sampler=model_sampler, env_sampler=env_sampler, logging_dir=ray.get(tracker.get_log_dir.remote()))
# Data Buffer
step_buffer = unstable.StepBuffer.options(name="Buffer").remote(
    max_buffer_size=BUFFER_SIZE, tracker=tracker,
    final_reward_transformation=retra.ComposeFinalRewardTransforms([retra.RoleAdvantageByEnvFormatter()]),
    step_reward_transformation=retra.ComposeStepRewardTransforms([retra.RewardForFormat(1.5), retra.PenaltyForInvalidMove(1.0, -1.0)]),
    sampling_reward_transformation=retra.ComposeSamplingRewardTransforms([retra.NormalizeRewardsByEnv(True)]),
)
# initialize the collector
collector = unstable.Collector.options(name="Collector").remote(
    vllm_config=vllm_config, tracker=tracker, buffer=step_buffer, game_scheduler=game_scheduler,
)
# initialize the learner
learner = unstable.REINFORCELearner.options(num_gpus=0, name="Learner").remote(  # changed: num_gpus=1
    model_name=MODEL_NAME,
    lora_cfg=lora_config,
    batch_size=BATCH_SIZE,
    mini_batch_size=MINI_BATCH_SIZE,
    learning_rate=LR,
    grad_clip=GRAD_CLIP,
    buffer=step_buffer,
    tracker=tracker,
    model_registry=model_registry,
    activation_checkpointing=True,
    gradient_checkpointing=True,
    use_trainer_cache=False
)
ray.get(learner.initialize_algorithm.remote(max_train_len=MAX_TRAIN_SEQ_LEN, max_generation_len=MAX_GENERATION_LENGTH))
try:
    collector.collect.remote(num_train_workers=COLLECTION_WORKERS, num_eval_workers=EVALUATION_WORKERS)
    ray.get(learner.train.remote(ITERATIONS))
    print("current checkpoint:", ray.get(model_registry.get_current_ckpt.remote()))  # changed: added
finally:
    ray.kill(collector, no_restart=True)
    ray.shutdown()
'''  # noqa: E501 (the seed's own long lines)


@pytest.mark.slow
def test_the_seed_standard_script_runs_with_model_tiny(tiny_cache, tmp_path):
    """A fresh process, its own local Ray, as on a user's machine: "tiny" reaches the learner and inference
    actors as a name and each resolves it itself (here from the cache ``UNSTABLE_CACHE`` names)."""
    script = tmp_path / "standard_script.py"
    script.write_text(SEED_STANDARD_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "current checkpoint: ckpt-2" in proc.stdout, proc.stdout[-3000:]
    assert "huggingface.co" not in proc.stderr
