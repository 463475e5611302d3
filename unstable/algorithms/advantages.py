"""Generalised advantage estimation, value loss and advantage normalisation."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    gamma: float,
    lam: float,
    last_value: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """GAE (Schulman et al. 2016) over one episode (or one contiguous piece of it).

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V_T = last_value`` (0 when the episode ended),
    ``A_t = delta_t + gamma * lam * A_{t+1}``. Returns ``(advantages, returns)`` with
    ``returns = advantages + values`` (the value-function target). Inputs are 1-D, length ``T``.
    """
    if rewards.shape != values.shape or rewards.dim() != 1:
        raise ValueError(f"rewards, values must be 1-D of equal length: {rewards.shape}, {values.shape}")
    rewards = rewards.float()
    values = values.float()
    advantages = torch.zeros_like(rewards)
    gae = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    next_value = torch.as_tensor(last_value, dtype=rewards.dtype, device=rewards.device)
    for t in range(rewards.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        gae = delta + gamma * lam * gae
        advantages[t] = gae
        next_value = values[t]
    return advantages, advantages + values


def value_loss(values: Tensor, returns: Tensor) -> Tensor:
    """``0.5 * mean((V - R)^2)``: the critic's regression loss."""
    return 0.5 * (values.float() - returns.float()).pow(2).mean()


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """Z-score ``(x - mean) / (std + eps)`` with the population std; all-equal input gives zeros."""
    x = x.float()
    return (x - x.mean()) / (x.std(unbiased=False) + eps)


def group_normalize(x: Tensor, groups: Sequence[Hashable], eps: float = 1e-8) -> Tensor:
    """:func:`normalize` separately within each group (e.g. per ``env_id``)."""
    if len(groups) != x.shape[0]:
        raise ValueError(f"need one group label per element: {len(groups)} labels for {x.shape[0]} values")
    out = torch.empty_like(x, dtype=torch.float32)
    for label in dict.fromkeys(groups):
        idx = torch.tensor([i for i, g in enumerate(groups) if g == label], device=x.device)
        out[idx] = normalize(x[idx], eps)
    return out
