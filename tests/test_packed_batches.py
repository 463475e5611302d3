"""Micro-batches cut by length under a token budget, and log-probs taken at the completion positions
only: the update's loss and gradients are those of one padded pass over the whole batch."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from conftest import VOCAB, make_sample

from unstable.algorithms import logits_entropy, target_logprobs, token_entropy, token_logprobs
from unstable.learners import A2CLearner, GRPOLearner, GSPOLearner, PPOLearner, REINFORCELearner
from unstable.learners.batching import MAX_PADDING, collate, kept_completion_tokens, kept_length, micro_batches
from unstable.records import Step, TrainBatch

FAST = {"gradient_checkpointing": False, "activation_checkpointing": False, "seed": 0, "lora_cfg": {"lora_rank": 4},
        "learning_rate": 1e-3}


def step_of(prompt_len: int, completion_len: int, game: int = 0, turn: int = 0, last: bool = True,
            reward: float = 1.0, temperature: float = 1.0, seed: int = 0) -> Step:
    rng = random.Random(f"{seed}/{game}/{turn}")
    prompt = [rng.randrange(VOCAB) for _ in range(prompt_len)]
    completion = [rng.randrange(VOCAB) for _ in range(completion_len)]
    logps = tuple(-rng.uniform(0.5, 5.0) for _ in completion)  # off-policy enough for ratios, clips and IS weights
    return Step(env_id="E" if game % 2 else "F", game_id=game, player_id=0, turn_index=turn,
                sample=make_sample(prompt, completion, logps, policy_version=0, temperature=temperature),
                reward=reward, final_reward=reward, policy_version=0, format_ok=True, invalid=False, is_last=last)


def varied_episodes(seed: int = 0, temperature: float = 1.0) -> list[Step]:
    """Six two-turn episodes whose prompts (2-30 tokens) and completions (1-14) differ a lot in length."""
    rng = random.Random(seed)
    steps = []
    for game in range(6):
        for turn in range(2):
            steps.append(step_of(rng.randint(2, 30), rng.randint(1, 14), game, turn, last=turn == 1,
                                 reward=rng.choice((-1.0, 0.3, 1.0)), temperature=temperature, seed=seed))
    return steps


# ------------------------------------------------------------------------------- micro-batches
def lengths_steps(lengths: list[int]) -> list[Step]:
    """Steps of these total lengths (a one-token prompt, the rest completion)."""
    return [step_of(1, n - 1) for n in lengths]


def test_micro_batches_group_similar_lengths_under_a_token_budget():
    steps = lengths_steps([100, 30, 70, 20, 90, 40, 40, 10, 95, 98, 38, 69])
    # at most 2 x 100 tokens a pass, padding at most 10 %: 10, 20, 30 and 38 each differ too much
    assert micro_batches(steps, 2) == [[7], [3], [1], [10, 5, 6], [11, 2], [4, 8], [9, 0]]
    # a budget of the whole batch: the long steps share one pass (padding 17 of 400 tokens)
    assert micro_batches(steps, 12) == [[7], [3], [1], [10, 5, 6], [11, 2], [4, 8, 9, 0]]
    # cut to 50 tokens first: six steps of 50, two a pass (budget 2 x 50); 40 + 50 is padded by 10 %
    assert micro_batches(steps, 2, max_train_len=50) == [[7], [3], [1], [10, 5], [6, 0], [2, 4], [8, 9], [11]]


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_micro_batches_cover_every_step_once_within_budget(size):
    rng = random.Random(size)
    steps = lengths_steps([rng.randint(1, 60) for _ in range(37)])
    cut = micro_batches(steps, size)
    assert sorted(i for part in cut for i in part) == list(range(len(steps)))
    length = [kept_length(s, None) for s in steps]
    for part in cut:
        padded = len(part) * max(length[i] for i in part)
        assert padded <= size * max(length)
        assert sum(length[i] for i in part) >= (1 - MAX_PADDING) * padded
    spans = [(min(length[i] for i in part), max(length[i] for i in part)) for part in cut]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # sorted: similar lengths together


# ---------------------------------------------------------------------------------- maths
def test_target_logprobs_and_entropy_known_answers():
    """log softmax(z / T)_y = z_y / T - log sum_v exp(z_v / T); the entropy of equal logits is log V."""
    logits = torch.tensor([[0.1, 0.2, 0.7], [0.3, 0.3, 0.3]])
    got = target_logprobs(logits, torch.tensor([2, 0]), torch.tensor([0.7, 1.0]))
    row0 = 0.7 / 0.7 - math.log(sum(math.exp(z / 0.7) for z in (0.1, 0.2, 0.7)))
    torch.testing.assert_close(got, torch.tensor([row0, -math.log(3.0)]))
    torch.testing.assert_close(logits_entropy(logits[1:]), torch.tensor([math.log(3.0)]))


def test_target_logprobs_equal_token_logprobs_at_the_completion_positions():
    torch.manual_seed(0)
    logits, ids = torch.randn(3, 7, 11), torch.randint(0, 11, (3, 7))
    temperature = torch.tensor([0.7, 1.0, 1.3])
    mask = torch.rand(3, 6) < 0.5
    where = mask.nonzero(as_tuple=True)
    packed = target_logprobs(logits[:, :-1][where], ids[:, 1:][where], temperature[where[0]])
    torch.testing.assert_close(packed, token_logprobs(logits, ids, temperature)[where])
    entropy = logits_entropy(logits[:, :-1][where], temperature[where[0]])
    torch.testing.assert_close(entropy, token_entropy(logits, temperature)[where])
    with pytest.raises(ValueError, match="one per row"):
        target_logprobs(logits[0], ids[0], temperature)


# ------------------------------------------------------------------- the update, end to end
class FullLogits:
    """The padded reference: logits of every position of the padded micro-batch, then indexed."""

    def _completion_logits(self, micro, where):
        logits = self.model(input_ids=micro.input_ids, attention_mask=micro.attention_mask, use_cache=False).logits
        return logits[where]


def assert_same_update(lrn, reference, steps: list[Step]) -> None:
    """``lrn`` and ``reference`` take the same optimiser steps on ``steps``: every step's gradient, and the
    metrics (but the wall time), within float32 round-off."""
    expected, expected_metrics = gradients_per_step(reference, steps)
    got, metrics = gradients_per_step(lrn, steps)
    assert len(got) == len(expected) == lrn.config.epochs * lrn.config.minibatches
    for g, e in zip(got, expected, strict=True):
        scale = e.abs().max().item()
        assert scale > 0
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5 * scale)
    for key, value in expected_metrics.items():
        if key != "train/update_seconds":
            assert metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def gradients_per_step(lrn, steps: list[Step]) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Every optimiser step's (pre-clip) gradient of all trained parameters, and the metrics."""
    seen = []
    clip = lrn._clip_gradients

    def record():
        seen.append(torch.cat([p.grad.flatten() for _, params in lrn._param_groups().values() for p in params]))
        return clip()

    lrn._clip_gradients = record
    torch.manual_seed(7)
    with torch.no_grad():  # non-zero lora_B so every LoRA weight has a gradient
        for name, param in lrn.model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.1)
    result = lrn.update(TrainBatch.from_steps(steps, group_episodes=True))
    assert not result.skipped
    return seen, result.metrics


CASES = {
    "reinforce": (REINFORCELearner, {}),
    "reinforce-dapo-kl-entropy": (REINFORCELearner, {"loss_type": "dapo", "beta": 0.05, "entropy_coef": 0.01,
                                                     "max_train_len": 24}),
    "grpo": (GRPOLearner, {}),
    "gspo": (GSPOLearner, {}),
    "a2c": (A2CLearner, {}),
    "ppo": (PPOLearner, {"max_train_len": 24}),
}


SLOW_CASES = ("a2c", "ppo")  # ~20 s each on the shared CPU: a critic pass per micro-batch, PPO's four steps


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c for c in CASES])
def test_bucketed_update_equals_one_padded_pass(model_dir, tmp_path, case):
    """Mini-batch 1 (steps bucketed by length, head on completion positions only) against one padded
    micro-batch per optimiser step with the logits of every position: the same gradient at every
    optimiser step, and the same loss and statistics."""
    cls, settings = CASES[case]
    steps = varied_episodes(seed=3, temperature=0.7)
    per_step = 12 // (settings.get("minibatches") or cls.config_cls.minibatches)
    padded = type(f"Padded{cls.__name__}", (FullLogits, cls), {})(
        model_dir, output_dir=str(tmp_path / "padded"), batch_size=12, mini_batch_size=per_step, **FAST, **settings)
    bucketed = cls(model_dir, output_dir=str(tmp_path / "bucketed"), batch_size=12, mini_batch_size=1,
                   **FAST, **settings)
    assert len(micro_batches(steps, 1, settings.get("max_train_len"))) > 2  # really cut into several passes
    assert_same_update(bucketed, padded, steps)


def test_the_lm_head_sees_only_the_completion_positions(model_dir, tmp_path):
    steps = varied_episodes(seed=4)
    lrn = REINFORCELearner(model_dir, output_dir=str(tmp_path / "out"), batch_size=12, mini_batch_size=4,
                           max_train_len=20, **FAST)
    rows = []
    hook = lrn.model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: rows.append(args[0].shape[:-1].numel()))
    lrn.update(TrainBatch.from_steps(steps))
    hook.remove()
    assert sum(rows) == sum(kept_completion_tokens(s, 20) for s in steps)


def test_models_that_skip_the_head_module_get_their_logits_indexed(model_dir, tmp_path):
    """If the forward never calls the output-embedding module, the logits are indexed after the fact."""
    steps = varied_episodes(seed=5)
    lrn = REINFORCELearner(model_dir, output_dir=str(tmp_path / "out"), **FAST)
    micro = collate(steps, None, lrn.pad_id)
    where = micro.target_mask.nonzero(as_tuple=True)
    with torch.no_grad():
        hooked = lrn._completion_logits(micro, where)
        lrn.model.get_output_embeddings = lambda: torch.nn.Identity()  # a module the forward never calls
        indexed = lrn._completion_logits(micro, where)
    assert hooked.shape == (int(micro.target_mask.sum()), VOCAB)
    torch.testing.assert_close(indexed, hooked)


def test_a_step_whose_completion_is_cut_away_trains_alone(model_dir, tmp_path):
    """``max_train_len`` can cut a long prompt's completion away entirely; alone in its micro-batch it
    has no token to score (the padded path took the max of an empty ratio there and failed)."""
    steps = [step_of(30, 5, game=0), step_of(3, 4, game=1)]
    lrn = REINFORCELearner(model_dir, output_dir=str(tmp_path / "out"), batch_size=2, mini_batch_size=1,
                           max_train_len=10, **FAST)
    assert micro_batches(steps, 1, 10) == [[1], [0]]
    result = lrn.update(TrainBatch.from_steps(steps))
    assert not result.skipped
    assert result.metrics["train/tokens"] == 4
    assert result.metrics["train/pct_truncated"] == 50.0
