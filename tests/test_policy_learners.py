"""The policy-gradient learners' shared update: ratios, clipping, importance weights, KL, and the
sampling temperature, on a tiny random Qwen3 (CPU, fp32) and on samples from the real backend."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from conftest import VOCAB, make_sample
from test_learners import FAST, batch, episodes, make_step

from unstable.inference.base import GenerationRequest, SamplingParams
from unstable.learners import (
    A2CLearner,
    GRPOConfig,
    GRPOLearner,
    GSPOConfig,
    GSPOLearner,
    LearnerConfig,
    PPOLearner,
    REINFORCELearner,
    resolve_learner,
)
from unstable.learners.batching import collate
from unstable.records import Step, TrainBatch

ALL = [REINFORCELearner, A2CLearner, PPOLearner, GRPOLearner, GSPOLearner]


def learner(cls, model_dir, tmp_path, **kwargs):
    opts = {**FAST, "batch_size": 8, "mini_batch_size": 4, "learning_rate": 1e-3, **kwargs}
    return cls(model_dir, output_dir=str(tmp_path / f"out-{len(list(tmp_path.iterdir()))}"), **opts)


def with_behaviour(steps: list[Step], logps: list[torch.Tensor], shift: float = 0.0) -> list[Step]:
    """The steps with their recorded behaviour log-probs replaced by ``logps + shift``."""
    out = []
    for step, logp in zip(steps, logps, strict=True):
        sample = dataclasses.replace(step.sample, completion_logprobs=tuple((logp + shift).tolist()))
        out.append(dataclasses.replace(step, sample=sample))
    return out


def policy_grads(lrn, steps) -> list[torch.Tensor]:
    lrn._zero_grad()
    lrn._norms = []
    lrn._update(TrainBatch.from_steps(steps, group_episodes=lrn.needs_episodes))
    return [p.grad.clone() for p in lrn.policy_params]


def perturb(lrn, seed=7):
    """Non-zero lora_B, so the adapter changes the model and every LoRA weight has a gradient."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.1)


def test_every_algorithm_has_a_name_and_trains(model_dir, tmp_path):
    for name, cls in zip(("reinforce", "a2c", "ppo", "grpo", "gspo"), ALL, strict=True):
        assert resolve_learner(name) is cls
        lrn = learner(cls, model_dir, tmp_path)
        steps = episodes(seed=1)
        before = [p.detach().clone() for p in lrn.policy_params]
        result = lrn.update(batch(steps))
        assert result.version == 1 and not result.skipped, name
        m = result.metrics
        expected_steps = lrn.config.epochs * lrn.config.minibatches
        assert m["train/optimizer_steps"] == expected_steps, name
        for key in ("train/approx_kl", "train/clipfrac", "train/ratio_mean", "train/ratio_max", "train/entropy"):
            assert math.isfinite(m[key]), (name, key)
        assert 0 < m["train/entropy"] <= math.log(VOCAB) + 1e-4
        assert any(not torch.equal(b, p) for b, p in zip(before, lrn.policy_params, strict=True)), name
        if cls in (A2CLearner, PPOLearner):
            assert math.isfinite(m["train/explained_variance"])
        if lrn.config.off_policy_correction != "none":
            assert {"train/is_ratio_mean", "train/is_ratio_max", "train/is_filtered_frac"} <= set(m)


def test_default_reinforce_gradient_is_the_plain_dr_grpo_reinforce_gradient(model_dir, tmp_path):
    """``-mean_i(A_i * sum_t log pi(y_t) / L)`` written out by hand (what 0.2's learner computed)."""
    from unstable.algorithms import masked_sum, token_logprobs

    lrn = learner(REINFORCELearner, model_dir, tmp_path, max_generation_len=7)
    perturb(lrn)
    steps = episodes(seed=2)
    ours = policy_grads(lrn, steps)
    lrn._zero_grad()
    micro = collate(steps, None, lrn.pad_id)
    logits = lrn.model(input_ids=micro.input_ids, attention_mask=micro.attention_mask).logits
    seq = masked_sum(token_logprobs(logits, micro.input_ids), micro.completion_mask[:, 1:]) / 7
    (-(torch.tensor([s.reward for s in steps]) * seq).mean()).backward()
    for a, b in zip(ours, [p.grad for p in lrn.policy_params], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(("shift", "weight"), [(0.0, 1.0), (-math.log(1.5), 1.5), (-math.log(3.0), 2.0)])
def test_truncated_importance_weight_scales_the_gradient(model_dir, tmp_path, shift, weight):
    """Behaviour log-probs ``log pi - log 1.5`` give every token the weight pi/mu = 1.5; ``- log 3``
    gives 3, truncated at the cap 2. With no correction the recorded log-probs change nothing."""
    plain = learner(REINFORCELearner, model_dir, tmp_path)
    perturb(plain)
    steps = episodes(seed=4)
    current = plain._logprobs_no_grad(steps)
    steps = with_behaviour(steps, current, shift)
    expected = [g * weight for g in policy_grads(plain, steps)]
    corrected = learner(REINFORCELearner, model_dir, tmp_path, off_policy_correction="token_truncate",
                        correction_cap=2.0)
    perturb(corrected)
    for a, b in zip(policy_grads(corrected, steps), expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_masked_correction_drops_tokens_outside_the_range(model_dir, tmp_path):
    lrn = learner(REINFORCELearner, model_dir, tmp_path, off_policy_correction="token_mask", correction_cap=2.0)
    perturb(lrn)
    steps = episodes(seed=4)
    far = with_behaviour(steps, lrn._logprobs_no_grad(steps), -math.log(3.0))  # ratio 3 > cap on every token
    assert all(float(g.abs().max()) == 0.0 for g in policy_grads(lrn, far))
    result = lrn.update(batch(far))
    assert result.metrics["train/is_filtered_frac"] == pytest.approx(1.0)


def test_logprobs_at_the_sampling_temperature_match_the_backends_behaviour_logprobs(backend, tiny_model_dir,
                                                                                        tmp_path):
    """Defect (a): samples drawn at temperature 0.6 by the real backend; the learner's log-probs of
    the same weights at the sample's temperature equal the recorded ones (approx KL ~ 0, every
    importance ratio 1), and at temperature 1 they would not."""
    prompts = [f"<|im_start|>user\nObservation: board [{i}]<|im_end|>\n<|im_start|>assistant\n" for i in range(6)]
    sampling = SamplingParams(temperature=0.6, top_p=1.0, max_new_tokens=8)
    results = backend.generate_batch([GenerationRequest(p, None, sampling, policy_version=0) for p in prompts])
    steps = [Step(env_id="E", game_id=i, player_id=0, turn_index=0, sample=r.sample, reward=(-1.0) ** i,
                  final_reward=(-1.0) ** i, policy_version=0, format_ok=True, invalid=False, is_last=True)
             for i, r in enumerate(results)]
    lrn = REINFORCELearner(tiny_model_dir, output_dir=str(tmp_path / "out"), batch_size=6, mini_batch_size=3,
                           off_policy_correction="token_truncate", **FAST)  # fresh LoRA: lora_B = 0, the base model
    recomputed = torch.cat(lrn._logprobs_no_grad(steps))
    recorded = torch.tensor([lp for s in steps for lp in s.completion_logprobs])
    torch.testing.assert_close(recomputed, recorded, atol=2e-4, rtol=0)
    m = lrn.update(TrainBatch.from_steps(steps)).metrics
    assert abs(m["train/approx_kl"]) < 1e-6 and m["train/is_ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    at_one = [dataclasses.replace(s, sample=dataclasses.replace(s.sample, temperature=1.0)) for s in steps]
    assert not torch.allclose(torch.cat(lrn._logprobs_no_grad(at_one)), recorded, atol=1e-2)


def test_ppo_clips_from_the_second_optimiser_step_on(model_dir, tmp_path):
    lrn = learner(PPOLearner, model_dir, tmp_path, clip_ratio=0.001, learning_rate=1e-2)
    perturb(lrn)
    m = lrn.update(batch(episodes(seed=6))).metrics
    assert m["train/optimizer_steps"] == 4
    assert 0 < m["train/clipfrac"] < 1 and m["train/ratio_max"] > 1.001
    none = learner(PPOLearner, model_dir, tmp_path, epochs=1, minibatches=1)  # one step: the ratio stays 1
    m = none.update(batch(episodes(seed=6))).metrics
    assert m["train/clipfrac"] == 0 and m["train/ratio_mean"] == pytest.approx(1.0)


def test_old_logprobs_behaviour_clips_stale_samples_at_once(model_dir, tmp_path):
    lrn = learner(REINFORCELearner, model_dir, tmp_path, old_logprobs="behaviour", clip_ratio=0.2)
    perturb(lrn)
    steps = episodes(seed=4)
    stale = with_behaviour(steps, lrn._logprobs_no_grad(steps), -math.log(1.5))  # pi/mu = 1.5 > 1.2
    m = lrn.update(batch(stale)).metrics
    assert m["train/ratio_mean"] == pytest.approx(1.5, rel=1e-3)
    # positive advantages are clipped above, negative ones are not (the min keeps the worse term)
    positive = sum(len(s.completion_ids) for s in stale if s.reward > 0)
    assert m["train/clipfrac"] == pytest.approx(positive / sum(len(s.completion_ids) for s in stale))


def test_kl_to_the_reference_is_zero_at_the_start_and_grows(model_dir, tmp_path):
    lrn = learner(REINFORCELearner, model_dir, tmp_path, beta=0.1, learning_rate=1e-2)
    steps = episodes(seed=8)
    first = lrn.update(batch(steps)).metrics
    assert first["train/kl_ref"] == pytest.approx(0.0, abs=1e-7)  # lora_B = 0: the policy is the base
    second = lrn.update(batch(steps)).metrics
    assert second["train/kl_ref"] > 1e-6


def test_kl_reference_can_be_a_frozen_adapter(model_dir, tmp_path):
    first = learner(REINFORCELearner, model_dir, tmp_path, learning_rate=1e-2)
    warm = first.update(batch(episodes(seed=8))).adapter_path
    lrn = learner(REINFORCELearner, model_dir, tmp_path, beta=0.1, reference_adapter=warm, initial_lora_path=warm)
    m = lrn.update(batch(episodes(seed=8))).metrics  # the policy starts as the reference
    assert m["train/kl_ref"] == pytest.approx(0.0, abs=1e-7)
    assert set(lrn.policy_params).isdisjoint(
        p for n, p in lrn.model.named_parameters() if ".reference." in n)  # the reference is not trained


def test_grpo_advantages_are_relative_to_the_group(model_dir, tmp_path):
    """Equal rewards within each (env, seat) group: nothing to learn, whatever the rewards are."""
    lrn = learner(GRPOLearner, model_dir, tmp_path)
    perturb(lrn)
    steps = [make_step(game=g, player=g % 2, reward=0.3 if g % 2 else -0.7, completion=(6, 7, 8)) for g in range(8)]
    assert all(float(g.abs().max()) == 0.0 for g in policy_grads(lrn, steps))
    m = lrn.update(TrainBatch.from_steps(steps)).metrics
    assert m["train/groups"] == 2 and m["train/adv_abs_mean"] == 0.0


def test_gspo_takes_one_ratio_per_sequence(model_dir, tmp_path):
    lrn = learner(GSPOLearner, model_dir, tmp_path, old_logprobs="behaviour", off_policy_correction="none",
                  clip_ratio=0.2, clip_ratio_high=0.2)
    perturb(lrn)
    steps = episodes(seed=4)
    current = lrn._logprobs_no_grad(steps)
    # token log-ratios that differ within a sequence but average to log 1.1 in each
    shifted = []
    for logp in current:
        n = len(logp)
        offsets = torch.linspace(-0.3, 0.3, n) if n > 1 else torch.zeros(1)
        shifted.append(logp - math.log(1.1) - offsets)
    m = lrn.update(batch(with_behaviour(steps, shifted))).metrics
    assert m["train/ratio_mean"] == pytest.approx(1.1, rel=1e-3)
    assert m["train/ratio_max"] == pytest.approx(1.1, rel=1e-3)


@pytest.mark.parametrize(("cls", "settings", "message"), [
    (GSPOConfig, {"off_policy_correction": "token_truncate"}, "sequence"),
    (GSPOConfig, {"ratio_level": "sequence_token", "off_policy_correction": "token_mask"}, "'sequence_token'"),
    (LearnerConfig, {"old_logprobs": "behaviour", "off_policy_correction": "token_truncate"}, "behaviour"),
    (LearnerConfig, {"clip_ratio_high": 0.28}, "clip_ratio_high needs clip_ratio"),
    (LearnerConfig, {"clip_ratio": 1.5}, "clip_ratio must be in"),
    (LearnerConfig, {"loss_type": "ppo"}, "loss_type must be one of"),
    (LearnerConfig, {"epochs": 0}, "epochs must be an integer >= 1"),
    (LearnerConfig, {"minibatches": 9, "batch_size": 8, "mini_batch_size": 1}, "at most batch_size"),
    (LearnerConfig, {"correction_cap": 0.5, "off_policy_correction": "token_truncate"}, "correction_cap"),
    (LearnerConfig, {"correction_floor": 0.5, "off_policy_correction": "token_truncate"}, "only applies"),
    (LearnerConfig, {"kl_estimator": "k4"}, "kl_estimator"),
    (LearnerConfig, {"beta": -0.1}, r"beta must be a finite number in \[0, inf\)"),
    (LearnerConfig, {"reference_adapter": "/x"}, "set beta > 0"),
    (LearnerConfig, {"entropy_coef": -0.01}, "entropy_coef"),
    (GRPOConfig, {"group_by": ("env_id", "seat")}, "group_by must be one of"),
    (GRPOConfig, {"group_by": "env_id"}, "non-empty tuple"),
])
def test_bad_policy_loss_settings_are_refused(cls, settings, message):
    with pytest.raises(ValueError, match=message):
        cls(model_name="m", **settings)


def test_every_ratio_level_of_the_loss_is_a_setting():
    """The loss's options are defined once (unstable.algorithms.policy_gradient): GSPO-token is reachable."""
    from unstable.algorithms.policy_gradient import RATIO_LEVELS

    assert [GSPOConfig(model_name="m", ratio_level=level).ratio_level for level in RATIO_LEVELS] == list(RATIO_LEVELS)


def test_sampled_temperature_and_behaviour_logprobs_are_collated():
    steps = [make_step(completion=(6, 7)), make_step(completion=(8,), prompt=(3, 4))]
    greedy = make_sample((3, 4), (8,), (-0.3,), temperature=0.0)
    steps[1] = dataclasses.replace(steps[1], sample=dataclasses.replace(greedy))
    steps[0] = dataclasses.replace(steps[0], sample=make_sample((3, 4, 5), (6, 7), (-0.1, -0.7), temperature=0.6))
    micro = collate(steps, None, 0)
    torch.testing.assert_close(micro.temperature, torch.tensor([0.6, 1.0]))  # greedy: the raw model
    torch.testing.assert_close(micro.behaviour_logp, torch.tensor([[0, 0, 0, -0.1, -0.7], [0, 0, -0.3, 0, 0]]))
    rows = micro.gather(micro.behaviour_logp)
    assert rows[0].tolist() == pytest.approx([-0.1, -0.7]) and rows[1].tolist() == pytest.approx([-0.3])


def test_staleness_histogram_bins():
    from unstable.learners.base import staleness_histogram

    hist = staleness_histogram([0, 0, 1, 3, 4, 5, 9, 12, 2, 8])
    assert hist == {"train/staleness_frac/0": 0.2, "train/staleness_frac/1": 0.1, "train/staleness_frac/2": 0.1,
                    "train/staleness_frac/3-4": 0.2, "train/staleness_frac/5-8": 0.2, "train/staleness_frac/9+": 0.2}
    assert sum(hist.values()) == pytest.approx(1.0)


def test_kept_completion_tokens_match_what_collate_keeps():
    from unstable.learners.batching import kept_completion_tokens

    steps = [make_step(prompt=(3, 4, 5), completion=(6, 7, 8, 9)), make_step(prompt=(3, 4), completion=(6,))]
    for max_train_len in (None, 2, 4, 6):
        micro = collate(steps, max_train_len, 0)
        assert [kept_completion_tokens(s, max_train_len) for s in steps] == micro.completion_mask.sum(1).tolist()
