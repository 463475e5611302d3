"""The chunked, fused log-prob head equals the naive full computation (values and gradients)."""

from __future__ import annotations

import pytest
import torch

from unstable.algorithms import chunked_target_logprobs, logits_entropy, target_logprobs


def problem(n: int = 7, h: int = 5, v: int = 11, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(n, h, generator=g, dtype=torch.float64) * 0.7 + 0.1).requires_grad_()
    weight = (torch.randn(v, h, generator=g, dtype=torch.float64) * 0.3).requires_grad_()
    bias = (torch.randn(v, generator=g, dtype=torch.float64) * 0.1).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    temperature = torch.tensor([0.7, 1.0, 1.3, 0.1, 0.9, 2.0, 0.3][:n], dtype=torch.float64)
    return hidden, weight, bias, targets, temperature


def naive(hidden, weight, bias, targets, temperature):
    logits = (hidden @ weight.T + bias).double()
    scaled = logits / temperature[:, None]
    logp = scaled.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(scaled, -1)
    p = scaled.softmax(-1)
    return logp, -(p * scaled.log_softmax(-1)).sum(-1)


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])  # 3 does not divide 7 tokens
def test_chunked_head_values_and_gradients_equal_the_full_computation(chunk):
    hidden, weight, bias, targets, temperature = problem()
    a_logp, a_ent = naive(hidden, weight, bias, targets, temperature)
    upstream_logp = torch.tensor([0.1, -0.2, 0.3, 0.7, -1.1, 0.05, 0.4], dtype=torch.float64)
    upstream_ent = torch.tensor([0.3, 0.1, -0.1, 0.2, 0.6, -0.7, 0.9], dtype=torch.float64)
    ((a_logp * upstream_logp).sum() + (a_ent * upstream_ent).sum()).backward()
    expected = [t.grad.clone() for t in (hidden, weight, bias)]
    for t in (hidden, weight, bias):
        t.grad = None
    # float64 inside: the head's float32 softmax is float32 by design, so compare in float32 precision
    b_logp, b_ent = chunked_target_logprobs(hidden, weight, targets, temperature, chunk_tokens=chunk, bias=bias)
    torch.testing.assert_close(b_logp.double(), a_logp.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b_ent.double(), a_ent.detach(), rtol=1e-5, atol=1e-5)
    ((b_logp.double() * upstream_logp).sum() + (b_ent.double() * upstream_ent).sum()).backward()
    for got, want in zip((hidden.grad, weight.grad, bias.grad), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_chunked_head_matches_the_library_head_functions_in_float32():
    hidden, weight, _, targets, temperature = problem(seed=3)
    hidden32 = hidden.detach().float().requires_grad_()
    w32 = weight.detach().float()
    logits = hidden32 @ w32.T
    want_logp = target_logprobs(logits, targets, temperature.float())
    want_ent = logits_entropy(logits, temperature.float())
    (want_logp.sum() * 0.1).backward()
    want_grad = hidden32.grad.clone()
    hidden32.grad = None
    logp, ent = chunked_target_logprobs(hidden32, w32, targets, temperature.float(), chunk_tokens=2)
    torch.testing.assert_close(logp, want_logp)
    torch.testing.assert_close(ent, want_ent)
    (logp.sum() * 0.1).backward()
    torch.testing.assert_close(hidden32.grad, want_grad)


def test_only_the_logprob_output_used_gives_no_entropy_gradient():
    hidden, weight, _, targets, _ = problem(seed=5)
    logp, _ = chunked_target_logprobs(hidden, weight.detach(), targets, 0.1, chunk_tokens=4)
    logp.sum().backward()
    full = naive(hidden, weight.detach(), torch.zeros(11, dtype=torch.float64), targets,
                 torch.full((7,), 0.1, dtype=torch.float64))[0]
    want = torch.autograd.grad(full.sum(), hidden)[0]
    torch.testing.assert_close(hidden.grad, want, rtol=1e-5, atol=1e-5)


def test_chunked_head_rejects_bad_input():
    hidden, weight, _, targets, _ = problem()
    with pytest.raises(ValueError, match="temperature must be > 0"):
        chunked_target_logprobs(hidden, weight, targets, 0.0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_target_logprobs(hidden, weight, targets, 1.0, chunk_tokens=0)
    with pytest.raises(ValueError, match="targets must be"):
        chunked_target_logprobs(hidden, weight, targets[:3], 1.0)
