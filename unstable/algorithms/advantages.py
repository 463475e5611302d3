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


# Values whose spread (max - min) is at most this many machine epsilons of their magnitude are
# treated as all equal: such a spread is rounding (0.1 + 0.2 vs 0.3), and scaling it would turn
# noise into unit-sized advantages.
ROUNDING_EPS = 4


def _is_constant(x: Tensor) -> bool:
    """True when ``x``'s values differ only by rounding at their own precision (see ``ROUNDING_EPS``)."""
    resolution = torch.finfo(x.dtype if x.is_floating_point() else torch.float32).eps
    x = x.double()
    return bool(x.max() - x.min() <= ROUNDING_EPS * resolution * x.abs().max())


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """Z-score ``(x - mean) / (std + eps)`` with the population std (divide by n), as float32.

    All-equal input (one value included) gives exact zeros. That needs a guard, not just ``eps``:
    the float32 mean of seven 2.9s is one ulp (2.4e-7) below 2.9, so ``x - mean`` and the std are
    both 2.4e-7 and the plain formula gives 0.96 for every element. So values within rounding of
    each other (``ROUNDING_EPS`` epsilons of their own dtype, relative to their magnitude) count
    as equal, and the rest is computed in float64. The reward transforms'
    :func:`~unstable.reward_transformations.sampling_reward_transformations.normalize` guards with
    an exact ``max == min`` on Python floats instead.
    """
    if x.numel() == 0 or _is_constant(x):
        return torch.zeros_like(x, dtype=torch.float32)
    x64 = x.double()
    centred = x64 - x64.mean()
    std = centred.pow(2).mean().sqrt()
    return (centred / (std + eps)).float()


def group_normalize(x: Tensor, groups: Sequence[Hashable], eps: float = 1e-8) -> Tensor:
    """:func:`normalize` separately within each group (e.g. per ``env_id``)."""
    out = torch.empty_like(x, dtype=torch.float32)
    for idx in _group_indices(groups, x):
        out[idx] = normalize(x[idx], eps)
    return out


def _group_indices(groups: Sequence[Hashable], x: Tensor) -> list[Tensor]:
    """One index tensor per distinct label in ``groups``, in order of first appearance."""
    if len(groups) != x.shape[0]:
        raise ValueError(f"need one group label per element: {len(groups)} labels for {x.shape[0]} values")
    members: dict[Hashable, list[int]] = {}
    for i, label in enumerate(groups):
        members.setdefault(label, []).append(i)
    return [torch.tensor(idx, device=x.device) for idx in members.values()]
