"""Known-answer tests for the pure maths in ``unstable.algorithms`` (tiny hand-written tensors)."""

from __future__ import annotations

import math

import pytest
import torch

from unstable.algorithms import (
    aggregate,
    compute_gae,
    explained_variance,
    group_advantages,
    group_normalize,
    importance_weights,
    kl_penalty,
    masked_mean,
    masked_sum,
    normalize,
    policy_loss,
    reinforce_loss,
    token_entropy,
    token_logprobs,
    value_loss,
)


def test_token_logprobs_shifts_and_normalises():
    # position 0 predicts token 1 with uniform logits; position 1 predicts token 2 with odds 3:1
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, -5.0]]])
    ids = torch.tensor([[0, 1, 0]])
    out = token_logprobs(logits, ids)
    assert out.shape == (1, 2)
    torch.testing.assert_close(out, torch.tensor([[math.log(0.5), math.log(0.75)]]))


def test_token_logprobs_matches_log_softmax_gather():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7)
    ids = torch.randint(0, 7, (3, 5))
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, ids), expected)


def test_token_logprobs_upcasts_half_precision():
    logits = torch.zeros(1, 2, 4, dtype=torch.bfloat16)
    assert token_logprobs(logits, torch.tensor([[0, 3]])).dtype == torch.float32


def test_masked_sum_and_mean():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[True, False, True], [False, False, False]])
    torch.testing.assert_close(masked_sum(values, mask), torch.tensor([4.0, 0.0]))
    torch.testing.assert_close(masked_mean(values, mask, dim=-1), torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(masked_mean(values, mask), torch.tensor(2.0))
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0


def test_reinforce_loss_uses_constant_dr_grpo_normaliser():
    token_logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], requires_grad=True)
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    advantages = torch.tensor([2.0, -1.0])
    loss, stats = reinforce_loss(token_logp, mask, advantages, max_generation_len=10)
    # seq_logp = [-5/10, -1/10]; loss = -mean(2 * -0.5, -1 * -0.1) = 0.45
    torch.testing.assert_close(stats["seq_logp"], torch.tensor([-0.5, -0.1]))
    torch.testing.assert_close(stats["tokens"], torch.tensor([2, 2]))
    torch.testing.assert_close(loss, torch.tensor(0.45))
    loss.backward()
    # d loss / d logp = -A * mask / (L * B): the same weight per token whatever the length
    expected = -advantages[:, None] * mask / (10 * 2)
    torch.testing.assert_close(token_logp.grad, expected)


def test_reinforce_loss_rejects_bad_normaliser():
    with pytest.raises(ValueError, match="max_generation_len"):
        reinforce_loss(torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1), 0)


def test_compute_gae_known_answer():
    rewards = torch.tensor([0.0, 0.0, 1.0])
    values = torch.tensor([0.5, 0.2, 0.4])
    adv, ret = compute_gae(rewards, values, gamma=0.9, lam=0.8)
    # delta = [0.9*0.2-0.5, 0.9*0.4-0.2, 1-0.4] = [-0.32, 0.16, 0.6]; A_t = delta_t + 0.72 * A_{t+1}
    torch.testing.assert_close(adv, torch.tensor([0.10624, 0.592, 0.6]))
    torch.testing.assert_close(ret, torch.tensor([0.60624, 0.792, 1.0]))


def test_compute_gae_with_gamma_lambda_one_is_reward_to_go_minus_value():
    rewards = torch.tensor([0.5, -1.0, 2.0])
    values = torch.tensor([0.1, 0.2, 0.3])
    adv, ret = compute_gae(rewards, values, gamma=1.0, lam=1.0)
    torch.testing.assert_close(ret, torch.tensor([1.5, 1.0, 2.0]))
    torch.testing.assert_close(adv, ret - values)


def test_compute_gae_lambda_zero_is_td_error_with_bootstrap():
    rewards = torch.tensor([1.0, 2.0])
    values = torch.tensor([0.5, 1.5])
    adv, _ = compute_gae(rewards, values, gamma=0.5, lam=0.0, last_value=4.0)
    torch.testing.assert_close(adv, torch.tensor([1.0 + 0.5 * 1.5 - 0.5, 2.0 + 0.5 * 4.0 - 1.5]))


@pytest.mark.parametrize("gamma,lam,last_value", [(0.99, 0.95, 0.0), (0.9, 0.5, 1.7), (1.0, 1.0, -0.3)])
def test_compute_gae_matches_naive_sum_of_discounted_td_errors(gamma, lam, last_value):
    torch.manual_seed(1)
    rewards, values = torch.randn(7), torch.randn(7)
    next_values = torch.cat([values[1:], torch.tensor([last_value])])
    deltas = rewards + gamma * next_values - values
    naive = torch.tensor([sum((gamma * lam) ** k * deltas[t + k] for k in range(7 - t)) for t in range(7)])
    adv, ret = compute_gae(rewards, values, gamma, lam, last_value=last_value)
    torch.testing.assert_close(adv, naive)
    torch.testing.assert_close(ret, naive + values)


def test_compute_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="1-D"):
        compute_gae(torch.zeros(3), torch.zeros(2), 1.0, 1.0)


def test_value_loss_is_half_mse():
    torch.testing.assert_close(value_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0])), torch.tensor(1.25))


def test_normalize_known_answer_and_equal_values():
    torch.testing.assert_close(normalize(torch.tensor([1.0, 2.0, 3.0])), torch.tensor([-1.0, 0.0, 1.0]) * 1.5**0.5)
    same = normalize(torch.tensor([2.0, 2.0, 2.0]))
    assert torch.isfinite(same).all() and (same == 0).all()
    assert normalize(torch.tensor([5.0])).item() == 0.0


def test_group_normalize_per_group():
    x = torch.tensor([1.0, 10.0, 3.0, 10.0])
    out = group_normalize(x, ["a", "b", "a", "b"])
    torch.testing.assert_close(out, torch.tensor([-1.0, 0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="one group label"):
        group_normalize(x, ["a"])


# ------------------------------------------------------------------ equal values, group advantages
@pytest.mark.parametrize("value,n", [(0.1, 3), (0.3, 5), (2.9, 7)])
def test_equal_inexact_values_normalise_to_exact_zeros(value, n):
    # the float32 mean of seven 2.9s is one ulp (2.4e-7) below 2.9, so the std is 2.4e-7 too, and the
    # old (x - mean) / (std + 1e-8) gave 0.96 for every element
    x = torch.full((n,), value)
    for out in (normalize(x), group_normalize(x, ["g"] * n), group_advantages(x, ["g"] * n),
                group_advantages(x, ["g"] * n, scale=False)):
        assert out.dtype == torch.float32 and (out == 0).all(), out


def test_values_equal_up_to_rounding_count_as_equal():
    x = torch.tensor([0.1 + 0.2, 0.3], dtype=torch.float64)  # 0.30000000000000004 and 0.3: one ulp apart
    assert (normalize(x) == 0).all() and (group_advantages(x, [0, 0]) == 0).all()


def test_near_equal_but_different_values_still_normalise():
    x = torch.tensor([0.1, 0.1, 0.1001])
    # centred = [-1, -1, 2] * 1e-4 / 3; population std = sqrt(2) * 1e-4 / 3 -> z = [-1, -1, 2] / sqrt(2)
    expected = torch.tensor([-1.0, -1.0, 2.0]) / 2**0.5
    torch.testing.assert_close(normalize(x), expected, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(group_normalize(x, ["a"] * 3), expected, rtol=1e-3, atol=1e-3)
    centred = torch.tensor([-1.0, -1.0, 2.0]) * 1e-4 / 3
    torch.testing.assert_close(group_advantages(x, ["a"] * 3, scale=False), centred, rtol=1e-3, atol=1e-9)


def test_group_advantages_known_answer_with_singletons():
    rewards = torch.tensor([0.1, 0.7, 0.3, 0.8, -0.3])
    groups = [("Tak", 0), ("Tak", 1), ("Tak", 0), ("Tak", 0), "prompt-7"]
    # group ("Tak", 0) = [0.1, 0.3, 0.8]: mean 0.4, centred [-0.3, -0.1, 0.4],
    # Bessel std = sqrt((0.09 + 0.01 + 0.16) / 2) = 0.3605551; A = centred / (0.3605551 + 1e-4).
    # ("Tak", 1) and "prompt-7" are singletons: 0, not NaN.
    expected = torch.tensor([-0.8318196, 0.0, -0.2772732, 1.1090928, 0.0])
    torch.testing.assert_close(group_advantages(rewards, groups), expected)
    centred = torch.tensor([-0.3, 0.0, -0.1, 0.4, 0.0])
    torch.testing.assert_close(group_advantages(rewards, groups, scale=False), centred)
    with pytest.raises(ValueError, match="one group label"):
        group_advantages(rewards, groups[:2])


def test_group_advantages_matches_trl_formula_on_one_group():
    torch.manual_seed(2)
    rewards = torch.rand(8)
    trl = (rewards - rewards.mean()) / (rewards.std() + 1e-4)  # torch's default std is Bessel-corrected
    torch.testing.assert_close(group_advantages(rewards, [0] * 8), trl)


def test_explained_variance_known_answers():
    returns = torch.tensor([0.3, 0.6, 0.0])
    # Var(returns) = (0 + 0.09 + 0.09) / 3 = 0.06; residual = [0.2, 0.1, -0.2] has variance 13/450,
    # so 1 - (13/450) / 0.06 = 1 - 13/27 = 14/27
    assert explained_variance(torch.tensor([0.1, 0.5, 0.2]), returns) == pytest.approx(14 / 27)
    assert explained_variance(returns, returns) == pytest.approx(1.0)
    assert explained_variance(torch.full((3,), 0.3), returns) == pytest.approx(0.0)  # predicts the mean
    assert math.isnan(explained_variance(torch.tensor([0.0, 0.2, 0.1]), torch.full((3,), 0.1)))
    with pytest.raises(ValueError, match="same shape"):
        explained_variance(torch.zeros(2), torch.zeros(3))


# ------------------------------------------------------------------ temperature, entropy
def test_token_logprobs_divides_logits_by_temperature():
    # logits [0, ln 3] at T = 0.5 are [0, 2 ln 3]: odds 9:1, so p(token 1) = 0.9
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])
    out = token_logprobs(logits, torch.tensor([[0, 1]]), temperature=0.5)
    torch.testing.assert_close(out, torch.tensor([[math.log(0.9)]]))


def test_token_logprobs_with_one_temperature_per_row():
    torch.manual_seed(3)
    logits = torch.randn(2, 4, 6)
    ids = torch.randint(0, 6, (2, 4))
    temperature = torch.tensor([0.6, 1.0])
    expected = torch.log_softmax(logits[:, :-1] / temperature[:, None, None], -1).gather(-1, ids[:, 1:, None])
    torch.testing.assert_close(token_logprobs(logits, ids, temperature), expected.squeeze(-1))
    torch.testing.assert_close(token_logprobs(logits[1:], ids[1:], 1.0), token_logprobs(logits, ids, temperature)[1:])


@pytest.mark.parametrize("bad", [0.0, -0.7, torch.tensor([0.6, 0.0]), torch.tensor([0.6])])
def test_token_logprobs_and_entropy_reject_bad_temperatures(bad):
    logits = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(logits, torch.zeros(2, 3, dtype=torch.long), bad)
    with pytest.raises(ValueError, match="temperature"):
        token_entropy(logits, bad)


def test_token_entropy_known_answers():
    uniform = torch.zeros(2, 3, 5, dtype=torch.bfloat16)
    out = token_entropy(uniform)
    assert out.shape == (2, 2) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((2, 2), math.log(5.0)))
    # odds 3:1 -> H = -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.5623351; at T = 0.5 odds 9:1 -> 0.3250830
    logits = torch.tensor([[[math.log(3.0), 0.0], [0.0, 0.0]]])
    torch.testing.assert_close(token_entropy(logits), torch.tensor([[0.5623351]]))
    torch.testing.assert_close(token_entropy(logits, 0.5), torch.tensor([[0.3250830]]))


def test_token_entropy_ignores_impossible_tokens():
    logits = torch.tensor([[[0.0, 0.0, -math.inf], [0.0, 0.0, 0.0]]], requires_grad=True)
    out = token_entropy(logits)
    torch.testing.assert_close(out, torch.tensor([[math.log(2.0)]]))
    out.sum().backward()
    assert torch.isfinite(logits.grad).all()


# ------------------------------------------------------------------ KL estimators
def test_kl_estimators_known_answers():
    logp = torch.tensor([-0.7, -0.3])
    ref = torch.tensor([-0.3, -0.7])
    # log_r = ref - logp = [0.4, -0.4]: k1 = -log_r, k2 = log_r^2 / 2, k3 = exp(log_r) - log_r - 1
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), torch.tensor([-0.4, 0.4]))
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), torch.tensor([0.08, 0.08]))
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), torch.tensor([0.0918247, 0.0703200]))
    torch.testing.assert_close(kl_penalty(logp, ref), kl_penalty(logp, ref, "k3"))
    with pytest.raises(ValueError, match="estimator"):
        kl_penalty(logp, ref, "k4")


def test_k3_is_non_negative_and_second_order_close_to_k1_and_k2():
    torch.manual_seed(4)
    logp, ref = -torch.rand(100) * 5, -torch.rand(100) * 5
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert (kl_penalty(logp, logp, "k3") == 0).all()
    small_ref = logp + 1e-3 * torch.randn(100, dtype=torch.float64).float()
    k1 = kl_penalty(logp.double(), small_ref.double(), "k1")
    k2 = kl_penalty(logp.double(), small_ref.double(), "k2")
    k3 = kl_penalty(logp.double(), small_ref.double(), "k3")
    torch.testing.assert_close(k2, k1**2 / 2)
    torch.testing.assert_close(k3, k2, rtol=1e-2, atol=1e-12)


# ------------------------------------------------------------------ importance weights
OLD = torch.tensor([[-0.1, -0.3, -0.9], [-0.2, -0.5, -0.4]])
BEHAVIOUR = torch.tensor([[-0.4, -0.2, -math.inf], [-0.3, -0.5, -2.0]])  # -inf on a masked-out token
IS_MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
# token log-rho: [[0.3, -0.1, -], [0.1, 0.0, 1.6]] -> rho [[1.3498588, 0.9048374, -], [1.1051709, 1, 4.9530324]]


def test_token_truncated_importance_weights():
    weights, stats = importance_weights(OLD.clone().requires_grad_(), BEHAVIOUR, IS_MASK, cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[1.3498588, 0.9048374, 0.0], [1.1051709, 1.0, 2.0]]))
    assert not weights.requires_grad
    torch.testing.assert_close(stats["ratio_mean"], torch.tensor(9.3128999 / 5))
    torch.testing.assert_close(stats["ratio_max"], torch.tensor(4.9530324))
    torch.testing.assert_close(stats["frac_truncated_or_masked"], torch.tensor(0.2))
    floored, _ = importance_weights(OLD, BEHAVIOUR, IS_MASK, cap=2.0, floor=0.95)
    torch.testing.assert_close(floored, torch.tensor([[1.3498588, 0.95, 0.0], [1.1051709, 1.0, 2.0]]))


def test_token_masked_importance_weights_keep_the_ratio_inside_the_window():
    weights, stats = importance_weights(OLD, BEHAVIOUR, IS_MASK, mode="mask", cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[1.3498588, 0.9048374, 0.0], [1.1051709, 1.0, 0.0]]))
    two_sided, stats = importance_weights(OLD, BEHAVIOUR, IS_MASK, mode="mask", cap=2.0, floor=0.95)
    torch.testing.assert_close(two_sided, torch.tensor([[1.3498588, 0.0, 0.0], [1.1051709, 1.0, 0.0]]))
    torch.testing.assert_close(stats["frac_truncated_or_masked"], torch.tensor(0.4))


def test_sequence_importance_weights_are_the_product_of_token_ratios():
    # row sums of log-rho over the mask: 0.2 and 1.7 -> rho = [1.2214028, 5.4739474] on every token
    weights, stats = importance_weights(OLD, BEHAVIOUR, IS_MASK, level="sequence", cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[1.2214028, 1.2214028, 0.0], [2.0, 2.0, 2.0]]))
    torch.testing.assert_close(stats["ratio_mean"], torch.tensor((2 * 1.2214028 + 3 * 5.4739474) / 5))
    torch.testing.assert_close(stats["frac_truncated_or_masked"], torch.tensor(0.6))
    masked, _ = importance_weights(OLD, BEHAVIOUR, IS_MASK, level="sequence", mode="mask", cap=2.0)
    torch.testing.assert_close(masked, torch.tensor([[1.2214028, 1.2214028, 0.0], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize("kwargs,match", [({"level": "turn"}, "level"), ({"mode": "clip"}, "mode"),
                                          ({"cap": 0.9}, "cap"), ({"floor": 1.5}, "floor")])
def test_importance_weights_reject_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        importance_weights(OLD, BEHAVIOUR, IS_MASK, **kwargs)


# ------------------------------------------------------------------ aggregation
PER_TOKEN = torch.tensor([[0.1, 0.3, math.nan], [0.2, -0.5, 0.6]])  # NaN on the masked-out token
AGG_MASK = torch.tensor([[True, True, False], [True, True, True]])


@pytest.mark.parametrize("loss_type,batch_sequences,batch_tokens,expected", [
    # row means (0.1 + 0.3) / 2 = 0.2 and (0.2 - 0.5 + 0.6) / 3 = 0.1, summed, / batch_sequences
    ("grpo", 2, 5, 0.15), ("grpo", 4, 10, 0.075),
    # masked sum 0.7 / batch_tokens
    ("bnpo", 2, 5, 0.14), ("dapo", 2, 5, 0.14), ("dapo", 4, 10, 0.07),
    # masked sum 0.7 / (batch_sequences * max_generation_len = 4)
    ("dr_grpo", 2, 5, 0.0875), ("dr_grpo", 4, 10, 0.04375),
])
def test_aggregate_known_answers(loss_type, batch_sequences, batch_tokens, expected):
    out = aggregate(PER_TOKEN, AGG_MASK, loss_type, max_generation_len=4, batch_sequences=batch_sequences,
                    batch_tokens=batch_tokens)
    torch.testing.assert_close(out, torch.tensor(expected))


def test_aggregate_empty_batch_and_bad_arguments():
    kw = {"max_generation_len": 4, "batch_sequences": 2, "batch_tokens": 0}
    assert aggregate(PER_TOKEN, torch.zeros_like(AGG_MASK), "dapo", **kw).item() == 0.0
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(PER_TOKEN, AGG_MASK, "sum", **kw)
    with pytest.raises(ValueError, match="batch_sequences"):
        aggregate(PER_TOKEN, AGG_MASK, "grpo", **{**kw, "batch_sequences": 1})
    with pytest.raises(ValueError, match="max_generation_len"):
        aggregate(PER_TOKEN, AGG_MASK, "grpo", **{**kw, "max_generation_len": 0})
    with pytest.raises(ValueError, match="batch_tokens"):
        aggregate(PER_TOKEN, AGG_MASK, "grpo", **{**kw, "batch_tokens": -1})


# ------------------------------------------------------------------ policy loss
# two rows, three tokens; logp - old_logp = [0.3, -0.3, 0.1] in both rows, the last token of row 1 masked out:
# r = [1.3498588, 0.7408182, 1.1051709]; A = [0.5, -0.7]
LOG_RATIO = torch.tensor([[0.3, -0.3, 0.1], [0.3, -0.3, 0.1]])
OLD_LOGP = torch.tensor([[-0.9, -0.4, -1.3], [-0.2, -0.6, -0.8]])
ADV = torch.tensor([0.5, -0.7])
PG_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
NORMS = {"max_generation_len": 3, "batch_sequences": 2, "batch_tokens": 5}


def _logp(log_ratio=LOG_RATIO, old=OLD_LOGP):
    return (old + log_ratio).requires_grad_()


def test_policy_loss_clip_higher_known_answer():
    logp = _logp()
    loss, stats = policy_loss(logp, OLD_LOGP, ADV, PG_MASK, clip_low=0.2, clip_high=0.28, **NORMS)
    # window [0.8, 1.28]. Row 0 (A > 0): min(r, clip r) = [1.28 (high clip active), 0.7408182, 1.1051709].
    # Row 1 (A < 0): max(r, clip r) = [1.3498588, 0.8 (low clip active)]. Per-token -min(rA, clip(r)A):
    # [-0.64, -0.3704091, -0.5525855], [0.9449012, 0.56]; sum -0.0580934 / (2 * 3) = -0.0096822
    torch.testing.assert_close(loss, torch.tensor(-0.0096822))
    loss.backward()
    # d/dlogp of -r A / 6 = -r A / 6 where the clip is not active, 0 where it is
    r = LOG_RATIO.exp()
    expected = -r * ADV[:, None] / 6 * torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected)
    assert stats["clipped_tokens"].item() == 2 and stats["tokens"].item() == 5
    torch.testing.assert_close(stats["ratio_sum"], torch.tensor(5.2865250))
    torch.testing.assert_close(stats["ratio_max"], torch.tensor(1.3498588))
    # (r - 1) - log r summed: 2 * 0.0498588 + 2 * 0.0408182 + 0.0051709
    torch.testing.assert_close(stats["approx_kl_sum"], torch.tensor(0.1865250))
    assert "kl_sum" not in stats and "entropy_sum" not in stats
    assert all(not v.requires_grad for v in stats.values())
    per_token_adv = ADV[:, None].expand(2, 3)  # one advantage per token is accepted too
    same, _ = policy_loss(_logp(), OLD_LOGP, per_token_adv, PG_MASK, clip_low=0.2, clip_high=0.28, **NORMS)
    torch.testing.assert_close(same, loss.detach())


def test_policy_loss_symmetric_clip_and_inactive_clip():
    # clip_high=None -> 0.2 both ways: row 0 token 0 is clipped at 1.2 instead of 1.28
    loss, stats = policy_loss(_logp(), OLD_LOGP, ADV, PG_MASK, clip_low=0.2, **NORMS)
    torch.testing.assert_close(loss, torch.tensor((-0.6 - 0.3704091 - 0.5525855 + 0.9449012 + 0.56) / 6))
    assert stats["clipped_tokens"].item() == 2
    # a wide window never binds: the loss is the unclipped -r A
    wide, wide_stats = policy_loss(_logp(), OLD_LOGP, ADV, PG_MASK, clip_low=0.5, clip_high=1.0, **NORMS)
    unclipped, none_stats = policy_loss(_logp(), OLD_LOGP, ADV, PG_MASK, **NORMS)
    torch.testing.assert_close(wide, unclipped)
    assert wide_stats["clipped_tokens"].item() == 0 and none_stats["clipped_tokens"].item() == 0
    # -r A summed: -0.5 * (1.3498588 + 0.7408182 + 1.1051709) + 0.7 * (1.3498588 + 0.7408182) = -0.1344901
    torch.testing.assert_close(unclipped, torch.tensor(-0.1344901 / 6))


@pytest.mark.parametrize("ratio_level", ["sequence", "sequence_token"])
def test_gspo_sequence_ratio_is_exp_mean_log_ratio_and_clips_per_sequence(ratio_level):
    log_ratio = torch.tensor([[0.3, 0.5, 2.0], [0.1, -0.2, 0.4]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    advantages = torch.tensor([0.3, -0.7])
    logp = _logp(log_ratio)
    loss, stats = policy_loss(logp, OLD_LOGP, advantages, mask, loss_type="grpo", clip_low=0.2,
                              ratio_level=ratio_level, **NORMS)
    # s = exp(mean of masked log-ratios) = [exp(0.4), exp(0.1)] = [1.4918247, 1.1051709] (2.0 is masked out).
    # Row 0 (A = 0.3) is clipped to 1.2 as a whole; row 1 is inside. grpo: mean per row, / 2 rows:
    # (-1.2 * 0.3 + 0.7 * 1.1051709) / 2 = 0.2068098
    torch.testing.assert_close(loss, torch.tensor(0.2068098))
    torch.testing.assert_close(stats["ratio_sum"], torch.tensor(2 * 1.4918247 + 3 * 1.1051709))
    assert stats["clipped_tokens"].item() == 2  # both tokens of row 0
    loss.backward()
    # row 0 clipped: no gradient; row 1: d(-A s)/dlogp_t = -A s / 3 per token, halved by the 2 rows
    expected = torch.tensor([[0.0, 0.0, 0.0], [0.1289366, 0.1289366, 0.1289366]])
    torch.testing.assert_close(logp.grad, expected)


def test_is_weights_scale_the_surrogate_only():
    ref = OLD_LOGP - 0.1
    weights = torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    plain, _ = policy_loss(_logp(), OLD_LOGP, ADV, PG_MASK, clip_low=0.2, **NORMS)
    halved, _ = policy_loss(_logp(), OLD_LOGP, ADV, PG_MASK, clip_low=0.2, is_weights=weights, **NORMS)
    torch.testing.assert_close(halved, plain / 2)
    kl_only, _ = policy_loss(_logp(), OLD_LOGP, torch.zeros(2), PG_MASK, ref_logp=ref, beta=0.1, **NORMS)
    kl_weighted, _ = policy_loss(_logp(), OLD_LOGP, torch.zeros(2), PG_MASK, ref_logp=ref, beta=0.1,
                                 is_weights=weights, **NORMS)
    torch.testing.assert_close(kl_weighted, kl_only)


def test_policy_loss_kl_and_entropy_terms():
    logp = OLD_LOGP.clone().requires_grad_()  # r = 1, and A = 0 leaves only the KL and entropy terms
    ref = OLD_LOGP + torch.tensor([[0.4, -0.4, 0.4], [0.4, -0.4, 0.4]])
    entropy = torch.tensor([[0.3, 0.1, 0.7], [0.9, 0.2, 5.0]])
    loss, stats = policy_loss(logp, OLD_LOGP, torch.zeros(2), PG_MASK, ref_logp=ref, beta=0.1,
                              entropy=entropy, entropy_coef=0.01, **NORMS)
    # k3 per masked token: 0.0918247 (log_r = 0.4, three tokens) and 0.0703200 (log_r = -0.4, two tokens)
    kl_sum = 3 * 0.0918247 + 2 * 0.0703200
    entropy_sum = 0.3 + 0.1 + 0.7 + 0.9 + 0.2
    torch.testing.assert_close(loss, torch.tensor((0.1 * kl_sum - 0.01 * entropy_sum) / 6))
    torch.testing.assert_close(stats["kl_sum"], torch.tensor(kl_sum))
    torch.testing.assert_close(stats["entropy_sum"], torch.tensor(entropy_sum))
    assert stats["approx_kl_sum"].item() == 0.0
    _, k1_stats = policy_loss(_logp(), OLD_LOGP, ADV, PG_MASK, ref_logp=ref, kl_estimator="k1", **NORMS)
    assert "kl_sum" in k1_stats  # KL to the reference is reported even with beta = 0


@pytest.mark.parametrize("ratio_level", ["token", "sequence", "sequence_token"])
def test_policy_loss_ignores_non_finite_padding(ratio_level):
    padded = OLD_LOGP.masked_fill(~PG_MASK.bool(), -math.inf)  # row 1's last token is padding
    entropy = torch.full((2, 3), 0.3).masked_fill(~PG_MASK.bool(), math.nan)
    logp = _logp()
    loss, stats = policy_loss(logp, padded, ADV, PG_MASK, clip_low=0.2, ratio_level=ratio_level, ref_logp=padded,
                              beta=0.1, entropy=entropy, entropy_coef=0.01, **NORMS)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad[1, 2].item() == 0.0
    assert all(torch.isfinite(v) for v in stats.values())


@pytest.mark.parametrize("kwargs,match", [
    ({"ratio_level": "turn"}, "ratio_level"),
    ({"loss_type": "sum"}, "loss_type"),
    ({"clip_low": 1.0}, "clip_low"),
    ({"clip_low": -0.1}, "clip_low"),
    ({"clip_high": 0.2}, "clip_high needs clip_low"),
    ({"clip_low": 0.2, "clip_high": -0.1}, "clip_high"),
    ({"beta": 0.1}, "ref_logp"),
    ({"entropy_coef": 0.01}, "entropy"),
    ({"kl_estimator": "k4", "ref_logp": OLD_LOGP}, "estimator"),
])
def test_policy_loss_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        policy_loss(_logp(), OLD_LOGP, ADV, PG_MASK, **{**NORMS, **kwargs})


def test_dr_grpo_without_clip_has_reinforce_gradient():
    torch.manual_seed(5)
    logp = (-torch.rand(4, 6) * 3).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]])
    advantages = torch.tensor([0.3, -0.7, 0.1, 1.9])
    # this micro-batch is 4 of the batch's 8 rows
    loss, _ = policy_loss(logp, logp.detach(), advantages, mask, max_generation_len=7, batch_sequences=8,
                          batch_tokens=20)
    (grad,) = torch.autograd.grad(loss, logp)
    reinforce, _ = reinforce_loss(logp, mask, advantages, max_generation_len=7)
    (reinforce_grad,) = torch.autograd.grad(reinforce, logp)
    torch.testing.assert_close(grad, reinforce_grad * 4 / 8)


def _random_batch(seed: int, rows: int = 4, tokens: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, tokens, generator=g) * 3
    mask = torch.rand(rows, tokens, generator=g) < 0.7
    mask[:, 0] = True
    return {
        "logp": old + 0.3 * torch.randn(rows, tokens, generator=g),
        "old_logp": old,
        "advantages": torch.randn(rows, generator=g),
        "mask": mask,
        "ref_logp": old + 0.2 * torch.randn(rows, tokens, generator=g),
        "is_weights": 0.5 + torch.rand(rows, tokens, generator=g),
        "entropy": torch.rand(rows, tokens, generator=g) * 2,
    }


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence", "sequence_token"])
def test_micro_batch_losses_add_up_to_the_batch_loss(loss_type, ratio_level):
    batch = _random_batch(6)
    settings = {"loss_type": loss_type, "ratio_level": ratio_level, "clip_low": 0.2, "clip_high": 0.28,
                "beta": 0.04, "entropy_coef": 0.01, "max_generation_len": 5, "batch_sequences": 4,
                "batch_tokens": float(batch["mask"].sum())}

    def loss_and_grad(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        logp = batch["logp"].clone().requires_grad_()
        part = {k: v[rows] for k, v in batch.items() if k != "logp"}
        loss, _ = policy_loss(logp[rows], **part, **settings)
        loss.backward()
        return loss.detach(), logp.grad

    whole, whole_grad = loss_and_grad(slice(0, 4))
    first, first_grad = loss_and_grad(slice(0, 2))
    second, second_grad = loss_and_grad(slice(2, 4))
    torch.testing.assert_close(first + second, whole)
    torch.testing.assert_close(first_grad + second_grad, whole_grad)


def _trl_loss(logp, old_logp, advantages, mask, is_weights, ref_logp, *, loss_type, level, eps_low, eps_high,
              beta, max_completion_length):
    """TRL GRPOTrainer._compute_loss written out element by element, one micro-batch = the whole batch."""
    rows, tokens = logp.shape
    per_token = [[None] * tokens for _ in range(rows)]
    for i in range(rows):
        n_i = sum(int(mask[i, t]) for t in range(tokens))
        seq_log_ratio = sum((logp[i, t] - old_logp[i, t]) * mask[i, t] for t in range(tokens)) / max(n_i, 1)
        for t in range(tokens):
            log_ratio = logp[i, t] - old_logp[i, t] if level == "token" else seq_log_ratio
            coef_1 = torch.exp(log_ratio)
            coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
            loss = -torch.min(coef_1 * advantages[i], coef_2 * advantages[i])
            loss = loss * is_weights[i, t]
            diff = ref_logp[i, t] - logp[i, t]
            per_token[i][t] = loss + beta * (torch.exp(diff) - diff - 1)
    if loss_type == "grpo":
        row_means = []
        for i in range(rows):
            n_i = sum(int(mask[i, t]) for t in range(tokens))
            row_means.append(sum(per_token[i][t] * mask[i, t] for t in range(tokens)) / max(n_i, 1))
        return sum(row_means) / rows
    total = sum(per_token[i][t] * mask[i, t] for i in range(rows) for t in range(tokens))
    if loss_type in ("bnpo", "dapo"):
        return total / max(int(mask.sum()), 1)
    return total / (rows * max_completion_length)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_policy_loss_matches_trl_compute_loss(loss_type, level):
    batch = _random_batch(7, rows=3, tokens=4)
    mask = batch["mask"].float()
    logp = batch["logp"].clone().requires_grad_()
    loss, _ = policy_loss(logp, batch["old_logp"], batch["advantages"], mask, loss_type=loss_type, ratio_level=level,
                          clip_low=0.2, clip_high=0.28, is_weights=batch["is_weights"], ref_logp=batch["ref_logp"],
                          beta=0.04, max_generation_len=6, batch_sequences=3, batch_tokens=float(mask.sum()))
    (grad,) = torch.autograd.grad(loss, logp)
    trl_logp = batch["logp"].clone().requires_grad_()
    expected = _trl_loss(trl_logp, batch["old_logp"], batch["advantages"], mask, batch["is_weights"],
                         batch["ref_logp"], loss_type=loss_type, level=level, eps_low=0.2, eps_high=0.28, beta=0.04,
                         max_completion_length=6)
    (expected_grad,) = torch.autograd.grad(expected, trl_logp)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad)
