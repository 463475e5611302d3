"""Several learner workers (``num_learner_workers``): one step of N workers is the single learner's step.

The maths runs two ranks in two local processes with ``torch.distributed`` over gloo (no Ray):
rank 0 updates on a batch, rank 1 follows, and the gradient of every optimiser step, the weights
after it and the metrics must equal those of one learner on the same batch. The batch sizes are
odd, so the shards hold different numbers of steps and tokens; a step normalised per shard
(DDP's mean of per-rank means) would differ. The end-to-end run is at the bottom.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.multiprocessing as mp
from test_learners import FAST, episodes

from unstable.learners import PPOLearner, REINFORCELearner
from unstable.learners.distributed import free_port, shard_rows
from unstable.records import TrainBatch

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
        recorded.append([p.grad.detach().clone() for _, params in lrn._param_groups().values() for p in params])
        return clip()

    lrn._clip_gradients = recording
    return lrn, recorded


def _weights(lrn) -> list[torch.Tensor]:
    return [p.detach().clone() for _, params in lrn._param_groups().values() for p in params]


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
