"""Several learner workers (``num_learner_workers``): one step of N workers is the single learner's step.

The maths runs two ranks in two local processes with ``torch.distributed`` over gloo (no Ray):
rank 0 updates on a batch, rank 1 follows, and the gradient of every optimiser step, the weights
after it and the metrics must equal those of one learner on the same batch. The batch sizes are
odd, so the shards hold different numbers of steps and tokens; a step normalised per shard
(DDP's mean of per-rank means; Li et al. 2020, "PyTorch Distributed", VLDB) would differ, and does:
with each shard's loss normalised by its own counts these tests fail. The end-to-end run is at the bottom.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.multiprocessing as mp
from conftest import small_run_kwargs
from test_learners import FAST, episodes

from unstable.learners import PPOLearner, REINFORCELearner
from unstable.learners.distributed import free_port, shard_rows
from unstable.records import TrainBatch
from unstable.run.config import BuildConfig
from unstable.run.wiring import check_resources, gpu_layout

# name -> (learner class, settings, steps (as the buffer hands them out), whole episodes?)
CASES = {
    # 7 steps, token-normalised loss ("bnpo": the part's token count is the denominator)
    "reinforce": (REINFORCELearner, {"loss_type": "bnpo"}, episodes(num_games=7, turns=1, seed=1), False),
    # 9 steps in 3 episodes: critic, GAE, 2 epochs x 2 shuffled parts (4 optimiser steps), recomputed
    # old log-probs, clipping, importance weights, and a KL penalty to the reference
    "ppo": (PPOLearner, {"beta": 0.05}, episodes(num_games=3, turns=3, seed=2), True),
}


def _learner(cls, model_dir: str, out_dir: str, settings: dict):
    lrn = cls(model_dir, output_dir=out_dir, **{**FAST, "batch_size": 8, "mini_batch_size": 2,
                                                 "learning_rate": 1e-3, **settings})
    torch.manual_seed(7)  # non-zero lora_B (policy and critic): every LoRA weight gets a gradient
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.1)
    recorded: list[list[torch.Tensor]] = []
    clip = lrn._clip_gradients

    def recording():  # the gradient each optimiser step clips and applies (after the ranks' sum)
        recorded.append([p.grad.detach().clone() for p in _weights_of(lrn)])
        return clip()

    lrn._clip_gradients = recording
    return lrn, recorded


def _weights_of(lrn) -> list[torch.nn.Parameter]:
    """Every trainable parameter (the policy's LoRA; A2C/PPO's critic LoRA and value head)."""
    return [p for _, params in lrn._param_groups().values() for p in params]


def _weights(lrn) -> list[torch.Tensor]:
    return [p.detach().clone() for p in _weights_of(lrn)]


def _train(lrn, recorded, steps, episodes_: bool, rank: int | None) -> dict:
    batch = TrainBatch.from_steps(steps, group_episodes=episodes_)
    if rank is None or rank == 0:
        result = lrn.update(batch)
        if rank == 0:
            lrn.release_followers()
        metrics = result.metrics
    else:
        assert lrn.follow() == 1
        metrics = {}
    return {"grads": recorded, "weights": _weights(lrn), "metrics": metrics}


def _rank(rank: int, world_size: int, port: int, model_dir: str, out_dir: str, cases: dict) -> None:
    from unstable.learners.distributed import DataParallel

    dp = DataParallel.join(rank, world_size, "127.0.0.1", port, torch.device("cpu"), timeout_s=300)
    try:
        for name, (cls, settings, steps, episodes_) in cases.items():
            lrn, recorded = _learner(cls, model_dir, f"{out_dir}/{name}-{rank}", settings)
            if rank > 0:  # other weights than rank 0's: the first batch brings rank 0's
                with torch.no_grad():
                    for param in _weights_of(lrn):
                        param.add_(torch.randn_like(param))
            lrn.use_data_parallel(dp)
            torch.save(_train(lrn, recorded, steps, episodes_, rank), f"{out_dir}/{name}-rank{rank}.pt")
    finally:
        dp.leave()


@pytest.fixture(scope="module")
def two_ranks(model_dir, tmp_path_factory):
    """The outcome of each case on rank 0 and rank 1 of two gloo workers (one spawn for all cases)."""
    out = tmp_path_factory.mktemp("ddp")
    cases = {**CASES, "nan": _nan_case()}
    mp.spawn(_rank, args=(2, free_port(), model_dir, str(out), cases), nprocs=2, join=True)
    return {name: [torch.load(out / f"{name}-rank{r}.pt") for r in range(2)] for name in cases}


def _nan_case():
    steps = episodes(num_games=5, turns=1, seed=4)
    steps[4] = dataclasses.replace(steps[4], reward=float("nan"))  # one rank's shard holds it
    return REINFORCELearner, {}, steps, False


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-4) -> bool:
    """Equal up to ``rtol`` of the tensor's largest entry (the gradients' scales differ by 1e6
    between the policy and the critic, and a sum in another order moves the last bits)."""
    return float((got - want).abs().max()) <= rtol * float(want.abs().max()) + 1e-12


@pytest.mark.slow  # two spawned processes that import torch and transformers: ~40 s on a quiet 2-core machine
@pytest.mark.parametrize("name", sorted(CASES))
def test_two_workers_take_the_single_learners_step(two_ranks, model_dir, tmp_path, name):
    cls, settings, steps, episodes_ = CASES[name]
    lrn, recorded = _learner(cls, model_dir, str(tmp_path / "single"), settings)
    single = _train(lrn, recorded, steps, episodes_, None)
    rank0, rank1 = two_ranks[name]
    assert len(rank0["grads"]) == len(single["grads"]) == (4 if name == "ppo" else 1)
    for step, (got, want) in enumerate(zip(rank0["grads"], single["grads"], strict=True)):
        for g, w in zip(got, want, strict=True):  # within float32 rounding of each tensor's scale
            assert _close(g, w), f"{name}: gradient of optimiser step {step}"
    for got, want in zip(rank0["weights"], single["weights"], strict=True):
        assert _close(got, want)
    for got, other in zip(rank0["weights"], rank1["weights"], strict=True):
        assert torch.equal(got, other)  # the same gradient and the same AdamW: the ranks stay identical
    for key in ("train/loss", "train/grad_norm", "train/tokens", "train/entropy", "train/approx_kl"):
        assert rank0["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-4, abs=1e-7), key
    assert rank0["metrics"]["train/learner_workers"] == 2


@pytest.mark.slow
def test_a_non_finite_loss_on_one_worker_skips_the_step_on_both(two_ranks):
    rank0, rank1 = two_ranks["nan"]
    assert rank0["metrics"]["train/skipped_nonfinite"] == 1
    assert rank0["grads"] == rank1["grads"] == []  # nothing stepped, and no rank waited forever
    for got, other in zip(rank0["weights"], rank1["weights"], strict=True):
        assert torch.equal(got, other)


def test_shards_balance_tokens_and_cover_every_row_once():
    lengths = [10, 1, 7, 3, 3, 9, 2]
    shards = [shard_rows(range(7), lengths, rank, 3) for rank in range(3)]
    assert sorted(r for s in shards for r in s) == list(range(7))
    assert [sum(lengths[r] for r in s) for s in shards] == [12, 12, 11]
    assert shard_rows([5], lengths, 1, 2) == []  # more ranks than rows: a rank may get none


# ------------------------------------------------------------------------------------ settings
def _build(tiny_model_dir, tmp_path, **overrides) -> BuildConfig:
    return BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, **overrides))


@pytest.mark.parametrize(("overrides", "match"), [
    ({"num_learner_workers": 0}, r"num_learner_workers must be an integer >= 1, got 0"),
    ({"num_learner_workers": 1.5}, r"num_learner_workers must be an integer >= 1, got 1.5"),
    ({"num_learner_workers": True}, r"num_learner_workers must be an integer >= 1, got True"),
    ({"num_learner_workers": 17}, r"num_learner_workers \(17\) is more than the 16 steps of each optimiser step"),
    # PPO's 2 minibatches of a 16-step batch: 8 steps per optimiser step
    ({"num_learner_workers": 9, "algorithm": "ppo"}, r"more than the 8 steps .*minibatches 2"),
    ({"num_learner_workers": 2, "learner_device": "mps"}, r"needs CPU or CUDA learners"),
])
def test_bad_learner_worker_settings_fail_before_ray(overrides, match, tiny_model_dir, tmp_path, no_ray):
    with pytest.raises(ValueError, match=match):
        _build(tiny_model_dir, tmp_path, **overrides)


def test_a_learner_that_does_not_shard_its_update_is_refused(tiny_model_dir, tmp_path, no_ray):
    from unstable.learners import BaseLearner

    class Whole(BaseLearner):  # a custom learner whose _update trains on the whole batch
        def _update(self, batch):
            return {}

    with pytest.raises(ValueError, match=r"Whole does not shard its update .*num_learner_workers=1"):
        _build(tiny_model_dir, tmp_path, algorithm=Whole, num_learner_workers=2)


def test_learner_workers_are_a_model_setting(tiny_model_dir, tmp_path, no_ray):
    cfg = _build(tiny_model_dir, tmp_path, num_learner_workers=2)
    assert cfg.models[0].num_learner_workers == 2
    assert cfg.to_dict()["models"][0]["num_learner_workers"] == 2
    assert _build(tiny_model_dir, tmp_path).models[0].num_learner_workers == 1


def test_several_models_with_learner_workers_are_refused(tiny_model_dir, tmp_path, no_ray):
    from test_multi_model import two_model_kwargs

    kwargs = two_model_kwargs(tiny_model_dir, tmp_path)
    kwargs["models"][0]["num_learner_workers"] = 2
    with pytest.raises(ValueError, match=r"models \['alice'\] ask for num_learner_workers > 1"):
        BuildConfig(**kwargs)


def test_every_learner_worker_counts_against_the_cluster(tiny_model_dir, tmp_path, no_ray):
    models = _build(tiny_model_dir, tmp_path, num_learner_workers=2).models
    check_resources(models, {"CPU": 3.0})  # 2 learner workers and 1 inference actor, a CPU each
    with pytest.raises(ValueError, match=r"asks Ray for 3 CPU and 0 GPU \(2 learner workers 1 CPU and 0 GPU each; "
                                         r"1 inference actor .*lower num_learner_workers or num_inference_actors"):
        check_resources(models, {"CPU": 2.0})
    # on GPUs: a whole GPU per learner worker and one at least for inference
    assert gpu_layout(3, learners=2) == (1.0, 1.0, 1)
    check_resources(models, {"CPU": 3.0, "GPU": 3.0})
    with pytest.raises(ValueError, match=r"asks Ray for 2 CPU and 3 GPU"):
        check_resources(models, {"CPU": 8.0, "GPU": 2.0})


# ---------------------------------------------------------------------------------- end to end
RUN = textwrap.dedent("""
    import json, os, sys, tempfile
    os.environ["RAY_AUTH_MODE"] = "disabled"
    sys.path.insert(0, {tests!r})
    import ray, torch, unstable
    from conftest import small_run_kwargs
    from unstable.tracking import read_metrics

    # a Ray of its own: 2 learner workers and 1 inference actor take 3 CPUs (the session's has 2)
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    run = unstable.build(**small_run_kwargs({model!r}, {runs!r}, "ddp", num_learner_workers=2))
    try:
        summary = run.start(learning_steps=2, num_collection_workers=8, num_eval_workers=0)
        rank0, (rank1,) = run.actors.learner, run.actors.learner_workers["model"]
        weights = lambda self: [p.detach().cpu() for p in self.policy_params]
        same = all(torch.equal(a, b) for a, b in zip(ray.get(rank0.__ray_call__.remote(weights)),
                                                     ray.get(rank1.__ray_call__.remote(weights))))
    finally:
        run.stop()
        ray.shutdown()
    trained = [line for line in read_metrics(run.run_dir) if "train/learner_workers" in line]
    print(json.dumps({{"checkpoints": summary["checkpoints"], "same": same,
                      "workers": [line["train/learner_workers"] for line in trained]}}))
""")


@pytest.mark.slow
def test_build_trains_with_two_learner_workers(tiny_model_dir, tmp_path):
    """``build(num_learner_workers=2)`` trains 2 steps end to end, both with 2 workers, and the worker
    (whose follow() returned with rank 0's train()) holds rank 0's weights. In a subprocess: its Ray
    needs 3 CPUs, the session's has 2."""
    tests = os.path.dirname(os.path.abspath(__file__))
    code = RUN.format(tests=tests, model=tiny_model_dir, runs=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(tests))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["checkpoints"][-2:] == ["ckpt-1", "ckpt-2"]
    assert result["same"]
    assert result["workers"] == [2.0, 2.0]
