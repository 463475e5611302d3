"""Generalised advantage estimation, value loss, advantage normalisation and group-relative advantages."""

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


def group_advantages(
    rewards: Tensor,
    groups: Sequence[Hashable],
    *,
    scale: bool = True,
    eps: float = 1e-4,
) -> Tensor:
    """GRPO's group-relative advantage ``A_i = (r_i - mean_g) / (std_g + eps)``, as float32.

    A *group* is the set of samples whose rewards are comparable, so the group mean is their
    baseline: ``groups[i]`` is any hashable label of ``rewards[i]``, e.g. ``(env_id, player_id)``
    for games or a prompt id for single-turn tasks. Labels need not be contiguous.

    GRPO (Shao et al. 2024, DeepSeekMath §4.1.2, outcome supervision) normalises each reward by its
    group's mean and std; TRL's ``GRPOTrainer`` computes ``(r - mean_g) / (std_g + 1e-4)`` with the
    Bessel-corrected std (divide by n - 1), and so does this function, so both give the same
    numbers. ``scale=False`` keeps only ``r - mean_g``: Dr. GRPO (Liu et al. 2025, §3) drops the
    std because it up-weights groups whose rewards barely differ.

    A singleton group, or a group whose rewards are equal up to rounding (the guard of
    :func:`normalize`), gets advantage exactly 0, never NaN: it carries no relative signal.
    """
    out = torch.zeros_like(rewards, dtype=torch.float32)
    for idx in _group_indices(groups, rewards):
        group = rewards[idx]
        if group.numel() < 2 or _is_constant(group):
            continue
        r64 = group.double()
        centred = r64 - r64.mean()
        if scale:
            centred = centred / (r64.std(correction=1) + eps)
        out[idx] = centred.float()
    return out


def _group_indices(groups: Sequence[Hashable], x: Tensor) -> list[Tensor]:
    """One index tensor per distinct label in ``groups``, in order of first appearance."""
    if len(groups) != x.shape[0]:
        raise ValueError(f"need one group label per element: {len(groups)} labels for {x.shape[0]} values")
    members: dict[Hashable, list[int]] = {}
    for i, label in enumerate(groups):
        members.setdefault(label, []).append(i)
    return [torch.tensor(idx, device=x.device) for idx in members.values()]


def explained_variance(values: Tensor, returns: Tensor) -> float:
    """``1 - Var(returns - values) / Var(returns)``: how much of the returns' variance the critic explains.

    1 is a perfect critic, 0 is no better than predicting the mean return, negative is worse
    than that. Population variances (here in float64), as in Stable-Baselines3's
    ``common.utils.explained_variance``. When the returns are all equal the ratio is undefined
    and the result is NaN, as in SB3 (which checks ``Var(returns) == 0``; here "equal" is up to
    rounding, as in :func:`normalize`).
    """
    if values.shape != returns.shape:
        raise ValueError(f"values and returns must have the same shape: {values.shape}, {returns.shape}")
    if returns.numel() == 0 or _is_constant(returns):
        return float("nan")
    returns64 = returns.double()
    residual = returns64 - values.double()
    return float(1.0 - residual.var(correction=0) / returns64.var(correction=0))
