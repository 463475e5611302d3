"""Packed micro-batches (``micro_batching="packed"``, the GPU default): the steps of a pass share one
row with position ids restarting per step. A step's log-probs do not change when another step is
packed beside it (no cross-attention), and the packed update's gradients, with the chunked head,
equal the bucketed update's for REINFORCE, GRPO, PPO and the A2C critic."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from test_packed_batches import CASES, FAST, assert_same_update, step_of, varied_episodes

from unstable.learners import REINFORCELearner
from unstable.learners.batching import kept_length, pack_rows, packed_micro_batches

PACKED = {**FAST, "micro_batching": "packed", "activation_checkpointing": True, "logprob_chunk_tokens": 5}


def test_packed_micro_batches_fill_a_token_budget():
    steps = [step_of(1, n - 1) for n in (30, 10, 25, 60, 5, 20)]
    cut = packed_micro_batches(steps, 60)
    assert cut == [[3], [0, 2, 4], [1, 5]]  # first-fit decreasing: 60 | 30 + 25 + 5 | 20 + 10
    assert sorted(i for b in cut for i in b) == list(range(6))
    assert packed_micro_batches(steps, 40, max_train_len=20) == [[0, 2], [3, 5], [1, 4]]  # 20 20 | 20 20 | 10 5
    with pytest.raises(ValueError, match="max_tokens_per_micro_batch"):
        packed_micro_batches(steps, 0)


def test_pack_rows_drops_padding_and_restarts_positions():
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0], [1, 2, 3, 4]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    row, positions, offsets = pack_rows(mask, ids)
    assert row.tolist() == [[5, 6, 7, 8, 9, 1, 2, 3, 4]]
    assert positions.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    assert offsets.tolist() == [0, 3, 5]


def test_a_steps_logprobs_do_not_change_when_another_step_is_packed_beside_it(model_dir, tmp_path):
    """The installed transformers honours restarting position ids as separate sequences."""
    lrn = REINFORCELearner(model_dir, output_dir=str(tmp_path / "out"), batch_size=2, **PACKED)
    alone_a, alone_b = step_of(9, 6, seed=1), step_of(14, 5, game=1, seed=2)
    assert len(lrn.micro_batches([alone_b, alone_a])) == 1  # really packed into one row
    together = lrn._logprobs_no_grad([alone_b, alone_a])
    a = lrn._logprobs_no_grad([alone_a])[0]
    b = lrn._logprobs_no_grad([alone_b])[0]
    torch.testing.assert_close(together[1], a, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(together[0], b, rtol=1e-5, atol=1e-6)
    # and it is a real check: one padded row holding both steps with plain causal attention differs
    ids = (*alone_b.prompt_ids, *alone_b.completion_ids, *alone_a.prompt_ids)
    merged = replace(alone_a, sample=replace(alone_a.sample, prompt_ids=ids))
    cross = lrn._logprobs_no_grad([merged])[0]
    assert not torch.allclose(cross, a, atol=1e-4)


def test_the_attention_kernel_setting_reaches_the_model_and_keeps_packed_steps_apart(model_dir, tmp_path):
    """``attn_implementation="eager"`` (a kernel unlike SDPA's) gives the same packed log-probs."""
    steps = [step_of(9, 6, seed=1), step_of(14, 5, game=1, seed=2)]
    sdpa = REINFORCELearner(model_dir, output_dir=str(tmp_path / "sdpa"), batch_size=2, **PACKED)
    eager = REINFORCELearner(model_dir, output_dir=str(tmp_path / "eager"), batch_size=2,
                             attn_implementation="eager", **PACKED)
    assert eager.model.get_base_model().config._attn_implementation == "eager"
    assert sdpa.model.get_base_model().config._attn_implementation == "sdpa"
    for a, b in zip(eager._logprobs_no_grad(steps), sdpa._logprobs_no_grad(steps), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


PACKED_CASES = ("reinforce", "reinforce-dapo-kl-entropy", "grpo", "ppo", "a2c")


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in ("ppo", "a2c") else c
                                  for c in PACKED_CASES])
def test_packed_update_equals_the_bucketed_update(model_dir, tmp_path, case):
    """Several packed passes (a 60-token budget) with the chunked head (5-token chunks) against the
    bucketed update with the plain head: the same gradient at every optimiser step (policy and, for
    A2C/PPO, the critic's adapter and value head), and the same loss and statistics (float32)."""
    cls, settings = CASES[case]
    steps = varied_episodes(seed=3, temperature=0.7)
    bucketed = cls(model_dir, output_dir=str(tmp_path / "bucketed"), batch_size=12, mini_batch_size=1,
                   **FAST, **settings)
    packed = cls(model_dir, output_dir=str(tmp_path / "packed"), batch_size=12, max_tokens_per_micro_batch=60,
                 **{**PACKED, **settings})
    assert packed.packed and packed._fused_head and not bucketed.packed
    passes = packed.micro_batches(steps)
    assert 2 < len(passes) < len(steps) and any(len(p) > 1 for p in passes)
    assert all(sum(kept_length(steps[i], settings.get("max_train_len")) for i in p) <= 60 for p in passes)
    assert_same_update(packed, bucketed, steps)


def test_micro_batching_setting_is_checked():
    from unstable.learners.config import LearnerConfig

    with pytest.raises(ValueError, match="micro_batching"):
        LearnerConfig(model_name="m", micro_batching="rows")
    with pytest.raises(ValueError, match="max_tokens_per_micro_batch"):
        LearnerConfig(model_name="m", max_tokens_per_micro_batch=0)
