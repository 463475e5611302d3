"""Token log-probs and entropies, and the REINFORCE loss.

Tensors are per token, ``[B, T]``, already shifted so column ``t`` scores one sampled token (see
:func:`token_logprobs`); ``mask`` ``[B, T]`` (bool or 0/1) is true on the completion tokens that are
trained on.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _shifted_logits(logits: Tensor, temperature: float | Tensor) -> Tensor:
    """``logits[:, :-1]`` in float32, divided by the sampling temperature (a float or one per row)."""
    shifted = logits[:, :-1].float()
    if isinstance(temperature, Tensor):
        if temperature.shape != (logits.shape[0],):
            raise ValueError(f"temperature must be a float or one per row, shape ({logits.shape[0]},); "
                             f"got shape {tuple(temperature.shape)}")
        if bool((temperature <= 0).any()):
            raise ValueError("temperature must be > 0 (for greedy samples pass 1.0)")
        return shifted / temperature.to(device=shifted.device, dtype=shifted.dtype)[:, None, None]
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (for greedy samples pass 1.0), got {temperature}")
    return shifted if temperature == 1.0 else shifted / temperature


def token_logprobs(logits: Tensor, input_ids: Tensor, temperature: float | Tensor = 1.0) -> Tensor:
    """Log-probability of each next token under ``softmax(logits / temperature)`` (shifted by one).

    ``logits[:, t]`` is the model's prediction after reading ``input_ids[:, : t + 1]``, so the
    result has one column fewer than the input: ``out[:, t] = log p(input_ids[:, t + 1] | ...)``.
    Shapes: ``logits`` ``[B, T, V]``, ``input_ids`` ``[B, T]`` -> ``[B, T - 1]`` (float32).

    ``temperature`` is the one the tokens were sampled at, a float or a ``[B]`` tensor (one per
    row), > 0: the sampler drew from ``softmax(logits / T)``, so that is the distribution whose
    log-probs match the behaviour log-probs it recorded (TRL's ``GRPOTrainer`` divides the logits
    by its sampling temperature the same way). Greedy samples: pass 1.0.

    Computed as ``gather - logsumexp`` in float32 so no full ``[B, T, V]`` log-softmax is kept.
    """
    shifted = _shifted_logits(logits, temperature)
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = shifted.gather(-1, targets).squeeze(-1)
    return picked - torch.logsumexp(shifted, dim=-1)


def token_entropy(logits: Tensor, temperature: float | Tensor = 1.0) -> Tensor:
    """Entropy ``-sum_v p_v log p_v`` of each next-token distribution ``softmax(logits / temperature)``.

    Shifted like :func:`token_logprobs`: ``out[:, t]`` is the entropy of the prediction made after
    ``input_ids[:, : t + 1]``. Shapes: ``logits`` ``[B, T, V]`` -> ``[B, T - 1]`` (float32, nats).
    Unlike :func:`token_logprobs` this builds the full ``[B, T - 1, V]`` log-softmax.
    """
    logp = torch.log_softmax(_shifted_logits(logits, temperature), dim=-1)
    # a -inf logit has p = 0 and log p = -inf: clamp so it adds 0 * (finite) = 0, not NaN
    logp = logp.clamp(min=torch.finfo(logp.dtype).min)
    return -(logp.exp() * logp).sum(dim=-1)


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
