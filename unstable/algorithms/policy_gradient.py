"""Token log-probs and entropies, KL estimators, importance weights and the REINFORCE loss.

Tensors are per token, ``[B, T]``, already shifted so column ``t`` scores one sampled token (see
:func:`token_logprobs`); ``mask`` ``[B, T]`` (bool or 0/1) is true on the completion tokens that are
trained on.
"""

from __future__ import annotations

import torch
from torch import Tensor

KL_ESTIMATORS = ("k1", "k2", "k3")
IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "mask")


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


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate of ``KL(pi_theta || pi_ref)`` from tokens sampled by ``pi_theta``.

    With ``log_r = ref_logp - logp`` (Schulman 2020, "Approximating KL divergence"):

    * ``"k1"``: ``-log_r = logp - ref_logp``; unbiased, high variance, negative on some tokens.
    * ``"k2"``: ``0.5 * log_r ** 2``; biased but low variance, always >= 0.
    * ``"k3"``: ``exp(log_r) - log_r - 1``; unbiased and always >= 0 (TRL GRPO's ``per_token_kl``).

    For small ``log_r``, ``k3 = log_r ** 2 / 2 + O(log_r ** 3)``, so ``k3 ~ k2 = k1 ** 2 / 2``.
    ``k3`` is computed as ``expm1(log_r) - log_r`` to keep its precision near 0. Shapes are kept.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    log_r = ref_logp - logp
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r.pow(2)
    return torch.expm1(log_r) - log_r


def importance_weights(
    old_logp: Tensor,
    behaviour_logp: Tensor,
    mask: Tensor,
    *,
    level: str = "token",
    mode: str = "truncate",
    cap: float = 2.0,
    floor: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Weights that correct for tokens sampled by the behaviour policy mu, not by pi_old.

    The inference engine (mu, whose log-probs were recorded at generation) and the learner's
    copy of the same weights (pi_old, recomputed) disagree a little, and an asynchronous
    sampler may be some versions behind. The PPO surrogate is written for samples of pi_old,
    so each token's loss is multiplied by a weight built from ``rho = pi_old / mu`` (decoupled
    PPO, AReaL, Fu et al. 2025; truncated IS, Yao et al. 2025, "Your efficient RL framework
    secretly brings you off-policy RL training"; TRL's ``vllm_importance_sampling_mode``):

    * ``level="token"``: ``rho_t = exp(old_logp_t - behaviour_logp_t)``.
    * ``level="sequence"``: ``rho = exp(sum_t mask_t (old_logp_t - behaviour_logp_t))``, the
      product of the token ratios (the likelihood ratio of the whole completion, not GSPO's
      length-normalised one), the same on every token of the row; as TRL's ``sequence_*`` modes.
    * ``mode="truncate"`` (TIS): ``w = min(rho, cap)`` (and ``max(., floor)`` if ``floor`` is set).
    * ``mode="mask"`` (MIS; prime-rl, icepop, TRL ``*_mask``): ``w = rho`` where
      ``floor <= rho <= cap``, else 0: tokens (or sequences) that are too far off-policy are
      dropped; those kept keep their ratio, as in TRL and prime-rl.

    ``floor=None`` means no lower bound, TRL's default (``vllm_importance_sampling_clip_min=None``);
    ``floor=1 / cap`` gives the two-sided window of prime-rl and icepop.

    Returns detached float32 weights ``[B, T]`` (0 outside ``mask``) and detached stats over the
    masked tokens: ``ratio_mean`` and ``ratio_max`` of ``rho`` before truncation or masking, and
    ``frac_truncated_or_masked``, the fraction of tokens whose ``rho`` lies outside ``[floor, cap]``.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"level must be one of {IS_LEVELS}, got {level!r}")
    if mode not in IS_MODES:
        raise ValueError(f"mode must be one of {IS_MODES}, got {mode!r}")
    if not cap >= 1.0:
        raise ValueError(f"cap must be >= 1 (a ratio of 1 is on-policy and must be kept), got {cap}")
    if floor is not None and not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be None or in [0, 1] (a ratio of 1 must be kept), got {floor}")
    keep = mask.bool()
    with torch.no_grad():
        log_rho = (old_logp.float() - behaviour_logp.float()).masked_fill(~keep, 0.0)
        if level == "sequence":
            log_rho = log_rho.sum(dim=-1, keepdim=True).expand_as(log_rho)
        rho = log_rho.exp()
        low = 0.0 if floor is None else floor
        outside = (rho > cap) | (rho < low)
        weights = rho.clamp(min=low, max=cap) if mode == "truncate" else rho.masked_fill(outside, 0.0)
        weights = weights.masked_fill(~keep, 0.0)
        stats = {
            "ratio_mean": masked_mean(rho, keep),
            "ratio_max": rho.masked_fill(~keep, 0.0).max(),
            "frac_truncated_or_masked": masked_mean(outside.float(), keep),
        }
    return weights, stats
