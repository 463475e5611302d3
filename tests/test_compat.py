"""UnstableBaselines 0.1 names (unstable.legacy.compat): the 0.1 package page's training script, and its errors."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

import unstable
import unstable.reward_transformations as retra
from unstable.buffers import StepBuffer
from unstable.collection.collector import Collector as CoreCollector
from unstable.legacy.compat import ModelPool, Reinforce, StandardLearner

LORA_CFG = {"lora_rank": 4, "lora_alpha": 8, "lora_dropout": 0.0,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
GEMINI = "google/gemini-2.0-flash-lite-001"


class NeverCalledBackend:
    """A backend for collectors that are built but never collect."""

    def __getattr__(self, name):
        raise AssertionError(f"backend.{name} was used")


def legacy_collector_kwargs(tiny_model_dir, **overrides) -> dict:
    pool = ModelPool(sample_mode="mirror", max_active_lora=3)
    pool.add_checkpoint(path=None, iteration=-1)
    kwargs = dict(num_actors=1, step_buffer=StepBuffer(max_buffer_size=8), model_pool=pool,
                  vllm_config={"model_name": tiny_model_dir, "max_tokens": 16},
                  training_envs=[("SimpleTak-v0-train", 2, "qwen3-zs")],
                  evaluation_envs=[("SimpleTak-v0-train", 2, "qwen3-zs"), ("KuhnPoker-v0-train", 2, "qwen3-zs")],
                  evaluation_opponent="random", backends=[NeverCalledBackend()])
    kwargs.update(overrides)
    return kwargs


# ----------------------------------------------------------------- the mapping
def test_algorithms_reinforce_is_the_compat_marker():
    """``unstable.algorithms`` imports it on use only (its module-level imports stay torch maths)."""
    assert unstable.algorithms.Reinforce is Reinforce and Reinforce() == Reinforce()
    with pytest.raises(AttributeError, match="PPO"):
        unstable.algorithms.PPO  # noqa: B018


def test_model_pool_is_a_registry_with_the_01_checkpoint_names():
    pool = unstable.ModelPool(sample_mode="mirror", max_active_lora=3)
    assert isinstance(pool, unstable.ModelRegistry)
    pool.add_checkpoint(path=None, iteration=-1)  # the 0.1 script's "no LoRA" start
    assert pool.get_current_ckpt() == "base" and pool.policy_ref().version == 0
    pool.add_checkpoint(uid="ckpt-1", path="/ckpts/1", iteration=1)  # how the learner registers
    pool.add_checkpoint("/ckpts/2", 2)  # 0.1's positional form
    assert pool.checkpoint_uids() == ["base", "ckpt-1", "ckpt-2"]
    assert pool.sample_opponent() == pool.policy_ref("ckpt-2")  # mirror
    fixed = unstable.ModelPool(sample_mode="fixed", max_active_lora=1)
    fixed.add_checkpoint(path=None, iteration=-1)
    fixed.add_fixed("random")
    assert fixed.sample_opponent().uid == "random"


def test_legacy_collector_builds_the_scheduler_from_the_01_keywords(tiny_model_dir):
    kwargs = legacy_collector_kwargs(tiny_model_dir)
    collector = unstable.Collector(**kwargs)
    assert isinstance(collector, CoreCollector) and collector.buffer is kwargs["step_buffer"]
    (train,) = collector.scheduler.env_sampler.train_env_specs
    assert (train.env_id, train.num_players, train.num_actors, train.prompt_template) == (
        "SimpleTak-v0-train", 2, 2, "qwen3-zs")  # mirror: both seats are the learner's, both collected
    evals = collector.scheduler.env_sampler.eval_env_specs
    assert [(s.env_id, s.fixed_opponent) for s in evals] == [("SimpleTak-v0-train", "random"),
                                                             ("KuhnPoker-v0-train", "random")]
    assert kwargs["model_pool"].fixed_uids() == ["random"]
    assert collector.scheduler.model_registry is kwargs["model_pool"]
    job = collector.scheduler.next_train_job()
    assert all(a.collect_data and a.policy.uid == "base" for a in job.agents)

    fixed = legacy_collector_kwargs(tiny_model_dir, model_pool=ModelPool(sample_mode="fixed", max_active_lora=2))
    fixed["model_pool"].add_checkpoint(path=None, iteration=-1)
    (train,) = unstable.Collector(**fixed).scheduler.env_sampler.train_env_specs
    assert train.num_actors == 1


def test_collector_keeps_the_02_signature(tiny_model_dir):
    kwargs = legacy_collector_kwargs(tiny_model_dir)
    scheduler = unstable.Collector(**kwargs).scheduler
    collector = unstable.Collector(tracker=None, buffer=StepBuffer(max_buffer_size=8), game_scheduler=scheduler,
                                   backends=[NeverCalledBackend()])
    assert collector.scheduler is scheduler


# ----------------------------------------------------------------- clear errors
@pytest.mark.parametrize(("mode", "match"), [("lagged", "LaggedModelSampler"),
                                             ("match-quality", "MatchQualityModelSampler"),
                                             ("ts-dist", "subclass"), ("self-play", "maps")])
def test_model_pool_sample_modes_without_an_equivalent_say_what_to_use(mode, match):
    with pytest.raises(ValueError, match=match):
        ModelPool(sample_mode=mode, max_active_lora=3)
    with pytest.raises(ValueError, match=match):  # in the caller, before any actor starts
        unstable.ModelPool.options(name="ModelPool").remote(sample_mode=mode, max_active_lora=3)
    with pytest.raises(ValueError, match="max_active_lora"):
        ModelPool(sample_mode="mirror", max_active_lora=0)


@pytest.mark.parametrize("algorithm", ["reinforce", "a2c", object()])
def test_learner_algorithm_other_than_reinforce_is_refused(algorithm, tiny_model_dir):
    with pytest.raises(ValueError, match="A2CLearner"):
        StandardLearner(model_name=tiny_model_dir, algorithm=algorithm)
    with pytest.raises(ValueError, match="REINFORCE only"):
        unstable.StandardLearner.options(num_gpus=0, name="Learner").remote(
            model_name=tiny_model_dir, algorithm=algorithm)


def test_api_evaluation_opponent_without_a_key_is_refused(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    kwargs = legacy_collector_kwargs(tiny_model_dir, evaluation_opponent=GEMINI)
    with pytest.raises(ValueError, match=r"OPENROUTER_API_KEY.*evaluation_opponent='random'"):
        unstable.Collector(**kwargs)
    with pytest.raises(ValueError, match="OPENROUTER_API_KEY"):  # in the caller: the script never awaits collect
        unstable.Collector.options(name="Collector").remote(**kwargs)
    unstable.Collector(**{**kwargs, "evaluation_envs": None})  # no eval games: no opponent needed


@pytest.mark.parametrize(("override", "error", "match"), [
    ({"training_envs": [("SimpleTak-v0-train", 2)]}, ValueError, r"training_envs\[0\] must be an \(env_id"),
    ({"training_envs": [("NoSuchGame-v0", 2, "qwen3-zs")]}, ValueError, r"training_envs\[0\]"),
    ({"evaluation_envs": [("SimpleTak-v0-train", 2, "no-such-template")]}, ValueError, r"evaluation_envs\[0\]"),
    ({"buffer": "x"}, TypeError, "use one form"),
    ({"step_buffer": None, "num_actors": 2}, TypeError, "step_buffer"),
    ({"num_actors": 0}, ValueError, "num_actors"),
    ({"vllm_config": {"model": "x"}}, ValueError, r"vllm_config\[.model.\] is set by unstable itself"),
])
def test_bad_legacy_collector_arguments(override, error, match, tiny_model_dir):
    with pytest.raises(error, match=match):
        unstable.Collector(**legacy_collector_kwargs(tiny_model_dir, **override))


def test_collect_takes_the_worker_count_once(tiny_model_dir):
    collector = unstable.Collector(**legacy_collector_kwargs(tiny_model_dir))
    for kwargs in ({}, {"num_train_workers": 2, "num_workers": 2}):
        with pytest.raises(TypeError, match="num_train_workers"):
            asyncio.run(collector.collect(**kwargs))


# ----------------------------------------------------------------- the 0.1 training script
def wait_until_free(ray, names, timeout_s=30.0):
    """Named actors of an earlier test are killed asynchronously; wait for their names."""
    deadline = time.monotonic() + timeout_s
    for name in names:
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            time.sleep(0.2)


def collection_stopped(ray, collector, step_buffer, timeout_s=60.0) -> bool:
    """True once the buffer says stop and collect() has returned (every started game is accounted for)."""
    deadline = time.monotonic() + timeout_s
    settled = 0
    while time.monotonic() < deadline and settled < 2:
        s = ray.get(collector.stats.remote())
        ended = s["train_finished"] + s["eval_finished"] + s["failed"] + s["dropped"] + s["cancelled"]
        done = not ray.get(step_buffer.continue_collection.remote()) and s["train_started"] + s["eval_started"] == ended
        settled = settled + 1 if done else 0
        time.sleep(0.5)
    return settled >= 2


@pytest.mark.slow
def test_the_01_training_script_trains_and_stops(ray_session, tiny_model_dir, tmp_path):
    """The 0.1 page's "Training script", changed only where marked: the model, the sizes, no GPU,
    no W&B and a private run directory, and the scripted evaluation opponent (no API key here)."""
    ray = ray_session  # the script's ray.init(namespace="unstable"): one Ray per test session
    wait_until_free(ray, ["Tracker", "StepBuffer", "ModelPool", "Collector", "Learner", "inference-0"])
    MODEL_NAME = tiny_model_dir  # changed: "Qwen/Qwen3-1.7B-base"

    tracker = unstable.Tracker.options(name="Tracker").remote(
        run_name="demo", wandb_project=None, run_dir=str(tmp_path / "demo"))  # changed: wandb_project="UB"
    step_buffer = unstable.StepBuffer.options(name="StepBuffer").remote(
        max_buffer_size=32,  # changed: 768
        tracker=tracker,
        final_reward_transformation=retra.ComposeFinalRewardTransforms([retra.RoleAdvantageByEnvFormatter()]),
        step_reward_transformation=retra.ComposeStepRewardTransforms(
            [retra.RewardForFormat(1.5), retra.PenaltyForInvalidMove(1.0, -1.0)]),
        sampling_reward_transformation=retra.ComposeSamplingRewardTransforms([retra.NormalizeRewardsByEnv(True)]),
    )
    model_pool = unstable.ModelPool.options(name="ModelPool").remote(
        sample_mode="mirror", max_active_lora=3, tracker=tracker)
    ray.get(model_pool.add_checkpoint.remote(path=None, iteration=-1))  # set initial checkpoint as no LoRA
    lora_cfg = LORA_CFG  # changed: lora_rank 32, lora_alpha 32
    collector = unstable.Collector.options(name="Collector").remote(
        num_actors=1,  # changed: 2 (inference actors)
        step_buffer=step_buffer,
        model_pool=model_pool,
        tracker=tracker,
        vllm_config={
            "model_name": MODEL_NAME,
            "max_parallel_seq": 128,
            "max_tokens": 16,  # changed: 4096
            "max_loras": 5,
            "lora_config": lora_cfg,
            "max_model_len": 8192,
        },
        training_envs=[("SimpleTak-v0-train", 2, "qwen3-zs")],  # (env-id, num players, prompt template)
        evaluation_envs=[("SimpleTak-v0-train", 2, "qwen3-zs"), ("KuhnPoker-v0-train", 2, "qwen3-zs")],
        evaluation_opponent="random",  # changed: "google/gemini-2.0-flash-lite-001"
    )
    learner = unstable.StandardLearner.options(num_gpus=0, name="Learner").remote(  # changed: num_gpus=1
        model_name=MODEL_NAME,
        step_buffer=step_buffer,
        model_pool=model_pool,
        tracker=tracker,
        algorithm=unstable.algorithms.Reinforce(),
        batch_size=8,  # changed: 384
        mini_batch_size=1,
        learning_rate=1e-5,
        grad_clip=0.2,
        lora_cfg=lora_cfg,
        activation_checkpointing=False,
        gradient_checkpointing=False,
        max_train_len=None,  # always train on the full sequence
        max_generation_len=16,  # changed: 4096
    )
    try:
        # start the collection and training loops
        collector.collect.remote(num_workers=8, num_eval_workers=2)  # changed: 384, 16
        ray.get(learner.train.remote(2))  # changed: 200

        ckpts = tmp_path / "demo" / "checkpoints"
        assert sorted(os.listdir(ckpts)) == ["ckpt-1", "ckpt-2"]
        assert all((ckpts / c / "adapter_config.json").is_file() for c in ("ckpt-1", "ckpt-2"))
        assert ray.get(model_pool.checkpoint_uids.remote()) == ["base", "ckpt-1", "ckpt-2"]
        assert ray.get(model_pool.get_model.remote("ckpt-2"))["path_or_name"] == str(ckpts / "ckpt-2")
        assert ray.get(model_pool.interface_info.remote())["games_recorded"] > 0
        assert collection_stopped(ray, collector, step_buffer), "the collector kept running after train()"
        assert ray.get(collector.stats.remote())["train_finished"] > 0
    finally:
        for actor in (collector, learner, model_pool, step_buffer, tracker):
            ray.kill(actor, no_restart=True)
