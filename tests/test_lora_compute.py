"""``lora_compute_dtype``: with bfloat16 base weights the LoRA products run in bfloat16 (autocast, PEFT's
input cast off) while the LoRA weights, gradients and optimiser state stay float32; ``"float32"`` is
PEFT's default; float32 base weights are untouched."""

from __future__ import annotations

import pytest
import torch
from test_packed_batches import FAST, varied_episodes

from unstable.learners import A2CLearner, REINFORCELearner
from unstable.records import TrainBatch


def lora_layer(learner):
    return next(m for n, m in learner.model.named_modules() if n.endswith("q_proj.lora_A.default"))


def record_dtypes(learner) -> list[tuple[torch.dtype, torch.dtype]]:
    """(input, output) dtypes of one LoRA A matrix in every forward pass that follows."""
    seen: list[tuple[torch.dtype, torch.dtype]] = []
    lora_layer(learner).register_forward_hook(lambda _m, args, out: seen.append((args[0].dtype, out.dtype)))
    return seen


@pytest.mark.parametrize("packed", [False, True])
def test_bf16_base_runs_the_lora_products_in_bf16_and_keeps_float32_weights(model_dir, tmp_path, packed):
    steps = varied_episodes(seed=1, temperature=0.7)
    settings = {**FAST, "dtype": "bfloat16", "batch_size": 12, "mini_batch_size": 4}
    if packed:
        settings.update(micro_batching="packed", activation_checkpointing=True)
    base = REINFORCELearner(model_dir, output_dir=str(tmp_path / "base"), **settings)
    fp32 = REINFORCELearner(model_dir, output_dir=str(tmp_path / "fp32"), lora_compute_dtype="float32", **settings)
    for learner in (base, fp32):  # LoRA B starts at zero: make the adapters matter
        torch.manual_seed(0)
        for p in learner.policy_params:
            p.data.normal_(0, 0.05)
    seen_base, seen_fp32 = record_dtypes(base), record_dtypes(fp32)
    logp_base, logp_fp32 = base._logprobs_no_grad(steps), fp32._logprobs_no_grad(steps)
    assert set(seen_base) == {(torch.bfloat16, torch.bfloat16)}  # no float32 copy of the layer's input
    assert set(seen_fp32) == {(torch.float32, torch.float32)}  # PEFT's cast to the float32 weights
    for a, b in zip(logp_base, logp_fp32, strict=True):  # the same maths at bfloat16's precision
        torch.testing.assert_close(a, b, rtol=0, atol=0.03)  # measured: up to 0.007
    diff = max(float((a - b).abs().max()) for a, b in zip(logp_base, logp_fp32, strict=True))
    assert diff > 0  # not a no-op
    before = [p.detach().clone() for p in base.policy_params]
    base.update(TrainBatch.from_steps(steps))
    assert all(p.dtype == torch.float32 for p in base.policy_params)
    assert all(s["exp_avg"].dtype == torch.float32 for s in base.optimizer.state.values())
    assert any(not torch.equal(p, q) for p, q in zip(base.policy_params, before, strict=True))
    assert all(torch.isfinite(p).all() for p in base.policy_params)


def test_the_critic_takes_the_same_context(model_dir, tmp_path):
    critic = A2CLearner(model_dir, output_dir=str(tmp_path / "a2c"), **{**FAST, "dtype": "bfloat16"})
    seen = []
    layer = next(m for n, m in critic.model.named_modules() if n.endswith("q_proj.lora_A.critic"))
    layer.register_forward_hook(lambda _m, args, out: seen.append(args[0].dtype))
    with critic._adapter("critic"):
        values = critic.values(varied_episodes(seed=2)[:3])
    assert seen and set(seen) == {torch.bfloat16} and values.dtype == torch.float32


def test_float32_base_weights_are_untouched_by_the_setting(model_dir, tmp_path):
    steps = varied_episodes(seed=1)[:6]
    a = REINFORCELearner(model_dir, output_dir=str(tmp_path / "a"), **FAST)
    b = REINFORCELearner(model_dir, output_dir=str(tmp_path / "b"), lora_compute_dtype="float32", **FAST)
    for x, y in zip(a._logprobs_no_grad(steps), b._logprobs_no_grad(steps), strict=True):
        assert torch.equal(x, y)


def test_lora_compute_dtype_is_checked():
    from unstable.learners.config import LearnerConfig

    with pytest.raises(ValueError, match="lora_compute_dtype must be one of"):
        LearnerConfig(model_name="x", lora_compute_dtype="bf16")
