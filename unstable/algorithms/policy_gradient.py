"""Token log-probs and the REINFORCE loss with the Dr. GRPO constant normaliser."""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """Log-probability of each next token under ``logits`` (shifted by one).

    ``logits[:, t]`` is the model's prediction after reading ``input_ids[:, : t + 1]``, so the
    result has one column fewer than the input: ``out[:, t] = log p(input_ids[:, t + 1] | ...)``.
    Shapes: ``logits`` ``[B, T, V]``, ``input_ids`` ``[B, T]`` -> ``[B, T - 1]`` (float32).

    Computed as ``gather - logsumexp`` in float32 so no full ``[B, T, V]`` log-softmax is kept.
    """
    shifted = logits[:, :-1].float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = shifted.gather(-1, targets).squeeze(-1)
    return picked - torch.logsumexp(shifted, dim=-1)


def masked_sum(values: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Sum of ``values`` where ``mask`` is true (mask may be bool or 0/1) along ``dim``."""
    return (values * mask.to(values.dtype)).sum(dim=dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` where ``mask`` is true; 0 where the mask is empty (never NaN)."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=1.0)


def reinforce_loss(
    token_logp: Tensor,
    completion_mask: Tensor,
    advantages: Tensor,
    max_generation_len: int,
) -> tuple[Tensor, dict[str, Tensor]]:
    """REINFORCE loss ``-mean_i(A_i * log pi(y_i | x_i) / L)`` with Dr. GRPO's constant ``L``.

    The sequence log-prob is the sum of the completion tokens' log-probs divided by the constant
    ``max_generation_len`` (Dr. GRPO, Liu et al. 2025), not by each sequence's own length, so long
    and short completions are weighted by how many tokens they actually have.

    Args:
        token_logp: ``[B, T]`` per-token log-probs (e.g. from :func:`token_logprobs`).
        completion_mask: ``[B, T]`` true on the sampled completion tokens that are trained on.
        advantages: ``[B]`` the learning signal per sequence (``Step.reward`` or a GAE advantage).
        max_generation_len: the constant normaliser ``L``.

    Returns:
        ``(loss, stats)``; ``stats`` holds detached ``seq_logp`` ``[B]`` and ``tokens`` ``[B]``.
    """
    if max_generation_len <= 0:
        raise ValueError(f"max_generation_len must be positive, got {max_generation_len}")
    seq_logp = masked_sum(token_logp, completion_mask, dim=-1) / max_generation_len
    loss = -(advantages.to(seq_logp.dtype) * seq_logp).mean()
    stats = {"seq_logp": seq_logp.detach(), "tokens": completion_mask.sum(dim=-1).detach()}
    return loss, stats
