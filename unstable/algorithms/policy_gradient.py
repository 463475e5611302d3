"""Token log-probs and entropies, KL estimators, importance weights and the policy-gradient losses.

Tensors are per token, ``[B, T]``, already shifted so column ``t`` scores one sampled token (see
:func:`token_logprobs`); ``mask`` ``[B, T]`` (bool or 0/1) is true on the completion tokens that are
trained on. Learners accumulate gradients over micro-batches of one batch, so every loss divides by
a *batch-wide* normaliser passed in by the caller: the micro-batch losses then add up to the loss
of the whole batch.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

# The options of the loss, defined here once: the learners' configs take their settings' values from these.
LossType = Literal["dr_grpo", "grpo", "bnpo", "dapo"]
RatioLevel = Literal["token", "sequence", "sequence_token"]
KLEstimator = Literal["k1", "k2", "k3"]
Correction = Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
"""An off-policy correction: ``none``, or ``<level>_<mode>`` of :func:`importance_weights`."""
LOSS_TYPES, RATIO_LEVELS, KL_ESTIMATORS, CORRECTIONS = map(get_args, (LossType, RatioLevel, KLEstimator, Correction))
IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "mask")


def _shifted_logits(logits: Tensor, temperature: float | Tensor) -> Tensor:
    """``logits[:, :-1]`` in float32, divided by the sampling temperature (a float or one per row)."""
    return _divide_by_temperature(logits[:, :-1].float(), temperature)


def _divide_by_temperature(logits: Tensor, temperature: float | Tensor) -> Tensor:
    """Float32 ``logits`` whose first dimension is the row (``[B, T, V]`` or ``[N, V]``) divided by the
    temperature: a float, or a ``[rows]`` tensor (one per row), every one > 0."""
    if isinstance(temperature, Tensor):
        if temperature.shape != (logits.shape[0],):
            raise ValueError(f"temperature must be a float or one per row, shape ({logits.shape[0]},); "
                             f"got shape {tuple(temperature.shape)}")
        if bool((temperature <= 0).any()):
            raise ValueError("temperature must be > 0 (for greedy samples pass 1.0)")
        per_row = temperature.to(device=logits.device, dtype=logits.dtype)
        return logits / per_row.reshape(-1, *([1] * (logits.dim() - 1)))
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (for greedy samples pass 1.0), got {temperature}")
    return logits if temperature == 1.0 else logits / temperature


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


def target_logprobs(logits: Tensor, targets: Tensor, temperature: float | Tensor = 1.0) -> Tensor:
    """Log-probability of ``targets[i]`` under ``softmax(logits[i] / temperature)``, with no shift.

    The packed form of :func:`token_logprobs`: ``logits`` ``[N, V]`` are already the predictions of
    the ``N`` tokens ``targets`` ``[N]`` (e.g. only the completion positions of a padded batch, so
    the vocabulary projection and the float32 log-softmax skip prompt and padding positions).
    ``temperature`` is a float or one per token, ``[N]``, > 0. Returns ``[N]`` float32, computed
    as ``gather - logsumexp`` like :func:`token_logprobs`, whose values it equals position by position.
    """
    scaled = _scaled_rows(logits, temperature)
    return scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)


def logits_entropy(logits: Tensor, temperature: float | Tensor = 1.0) -> Tensor:
    """Entropy of ``softmax(logits[i] / temperature)`` for ``logits`` ``[N, V]``, with no shift
    (the packed form of :func:`token_entropy`); ``temperature`` a float or ``[N]``. Returns ``[N]``."""
    logp = torch.log_softmax(_scaled_rows(logits, temperature), dim=-1)
    logp = logp.clamp(min=torch.finfo(logp.dtype).min)  # p = 0 adds 0 * (finite) = 0, not NaN
    return -(logp.exp() * logp).sum(dim=-1)


def _scaled_rows(logits: Tensor, temperature: float | Tensor) -> Tensor:
    """``logits`` ``[N, V]`` in float32 divided by the temperature (a float or one per row)."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [N, V] (one row per scored token), got shape {tuple(logits.shape)}")
    return _divide_by_temperature(logits.float(), temperature)


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = -1) -> Tensor:
    """Sum of ``values`` where ``mask`` is true (bool or 0/1) along ``dim`` (all of them if None).

    Entries outside the mask are ignored even if they are not finite (padding).
    """
    kept = values.masked_fill(~mask.bool(), 0.0)
    return kept.sum() if dim is None else kept.sum(dim=dim)


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


def exact_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``KL(pi || pi_ref) = sum_k pi_k (log pi_k - log pi_ref_k)`` per row, from whole distributions.

    ``logp`` and ``ref_logp`` are ``[C, K]`` log-probabilities over the same ``K`` tokens (e.g. the tokens
    a constrained answer allowed at a position, each row renormalised over them); entries that are
    ``-inf`` in ``logp`` (padding, or a token with no mass) add nothing. Where the whole distribution is
    known there is nothing to estimate: this is the value :func:`kl_penalty`'s estimators average to,
    and its gradient is the reverse KL's that Magnetic Mirror Descent takes (Sokota et al. 2023, eq. 4),
    without the sampled ``pi_ref / pi`` weight that makes ``k3``'s gradient unbounded. Returns ``[C]``.
    """
    present = torch.isfinite(logp)
    p = logp.exp().masked_fill(~present, 0.0)
    gap = (logp - ref_logp).masked_fill(~present, 0.0)
    return (p * gap).sum(dim=-1)


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


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    loss_type: str,
    *,
    max_generation_len: int,
    batch_sequences: int,
    batch_tokens: float,
) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar; summed over micro-batches it is the batch's loss.

    ``B`` is this micro-batch's rows; the normalisers are the whole batch's (TRL's names):

    * ``"grpo"``: each row's mean over its own masked tokens, summed over rows, divided by
      ``batch_sequences`` (GRPO, Shao et al. 2024: ``1/G sum_i 1/|o_i| sum_t``). Long
      completions get less weight per token.
    * ``"bnpo"``, ``"dapo"``: sum over all masked tokens divided by ``batch_tokens``, the
      masked-token count of the whole batch (DAPO, Yu et al. 2025, §3.3, token-level
      loss: every token weighs the same). The two names are the same here; in TRL they differ only
      in whether the count spans the local micro-batch (bnpo) or the whole batch (dapo).
    * ``"dr_grpo"``: sum over masked tokens divided by the constant
      ``batch_sequences * max_generation_len`` (Dr. GRPO, Liu et al. 2025, §3; TRL divides by
      ``B * max_completion_length``): no length bias, and no normaliser that depends on the data.

    Masked-out entries are ignored even if they are not finite. ``batch_tokens`` below 1 is
    taken as 1, as TRL does, so a batch with no trained tokens gives a loss of 0.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if max_generation_len <= 0:
        raise ValueError(f"max_generation_len must be positive, got {max_generation_len}")
    if batch_sequences < per_token.shape[0]:
        raise ValueError(f"batch_sequences ({batch_sequences}) is the whole batch's row count and cannot be "
                         f"smaller than this micro-batch's ({per_token.shape[0]})")
    if batch_tokens < 0:
        raise ValueError(f"batch_tokens must be >= 0, got {batch_tokens}")
    keep = mask.bool()
    per_token = per_token.masked_fill(~keep, 0.0)
    if loss_type == "grpo":
        row_tokens = keep.sum(dim=-1).clamp(min=1)
        return (per_token.sum(dim=-1) / row_tokens).sum() / batch_sequences
    if loss_type in ("bnpo", "dapo"):
        return per_token.sum() / max(batch_tokens, 1.0)
    return per_token.sum() / (batch_sequences * max_generation_len)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: str = "dr_grpo",
    max_generation_len: int,
    batch_sequences: int,
    batch_tokens: float,
    clip_low: float | None = None,
    clip_high: float | None = None,
    ratio_level: str = "token",
    is_weights: Tensor | None = None,
    ref_logp: Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    known_kl: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped policy-gradient loss of PPO / GRPO / DAPO / Dr. GRPO / GSPO for one micro-batch.

    Per masked token, with ``A`` the row's advantage and ``r`` the ratio of ``ratio_level``:

    ``loss_t = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) * w_t + beta * KL_t - entropy_coef * H_t``

    then reduced by :func:`aggregate` (``loss_type``, with the whole batch's normalisers), as
    TRL's ``GRPOTrainer._compute_loss`` does.

    Ratio (``ratio_level``):

    * ``"token"``: ``r_t = exp(logp_t - old_logp_t)`` (PPO, Schulman et al. 2017; GRPO).
    * ``"sequence"``: GSPO's ``s_i = exp(mean_t (logp_t - old_logp_t))`` over the row's masked
      tokens, the same on every token, clipped per sequence (Zheng et al. 2025, §4.1; TRL
      ``importance_sampling_level="sequence"``). GSPO's own objective averages per sequence:
      ``loss_type="grpo"``.
    * ``"sequence_token"``: GSPO-token, ``s_i`` with a token-level gradient:
      ``sg[s_i] * exp(logp_t - sg[logp_t])`` (same value as ``s_i``).

    Clipping: ``clip_low=None`` turns it off, leaving ``-r A`` (at ``r = 1`` its gradient is
    REINFORCE's). ``clip_high=None`` means ``clip_high = clip_low`` (PPO's symmetric clip); a
    larger ``clip_high`` is DAPO's clip-higher (Yu et al. 2025, §3.1).

    ``is_weights``: the detached per-token weights ``w_t`` of :func:`importance_weights` (decoupled
    PPO: behaviour policy -> ``old_logp``); they scale the surrogate, not the KL or entropy terms.
    KL: with ``beta != 0``, ``KL_t = kl_penalty(logp, ref_logp, kl_estimator)`` (``ref_logp`` needed);
    ``known_kl = (where, values)``, both ``[B, T]``, replaces the estimate by ``values`` where ``where`` is
    true (the KL over a whole distribution, :func:`exact_kl`, with its gradient).
    Entropy bonus: with ``entropy_coef != 0``, ``H_t = entropy`` (e.g. :func:`token_entropy`), needed
    then. Unlike TRL, whose bonus is a mean over tokens whatever the loss type, it is aggregated
    with the rest of the per-token loss.

    Args:
        logp: ``[B, T]`` log-probs under the policy being trained (with grad).
        old_logp: ``[B, T]`` log-probs under pi_old, the policy that the clip is relative to
            (``logp.detach()`` when each batch is trained on once).
        advantages: ``[B]`` one per row (or ``[B, T]`` one per token).
        mask: ``[B, T]`` true on the tokens trained on.

    Returns:
        ``(loss, stats)``. ``stats`` are detached sums over this micro-batch's masked tokens, so
        the learner can add them across micro-batches (``ratio_max`` takes a max instead):
        ``tokens``, ``ratio_sum``, ``ratio_max``, ``clipped_tokens`` (TRL's clip ratio: ``r <
        1 - clip_low`` with ``A < 0`` or ``r > 1 + clip_high`` with ``A > 0``), ``approx_kl_sum``
        (k3 estimate of ``KL(pi_old || pi_theta)``, ``(r - 1) - log r`` with the token ratio, as
        CleanRL and SB3 log), and ``kl_sum`` (when ``ref_logp`` is given) and ``entropy_sum``
        (when ``entropy`` is given).
    """
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"ratio_level must be one of {RATIO_LEVELS}, got {ratio_level!r}")
    clip_low, clip_high = _clip_range(clip_low, clip_high)
    if beta != 0.0 and ref_logp is None:
        raise ValueError("beta != 0 needs ref_logp, the reference policy's log-probs of the same tokens")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy, e.g. token_entropy(logits)")
    keep = mask.bool()
    advantages = advantages.to(logp.dtype)
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    # masked positions get log-ratio 0 so padding (even -inf) never reaches exp or the gradient
    log_ratio = (logp - old_logp).masked_fill(~keep, 0.0)
    ratio = _ratio(logp, log_ratio, keep, ratio_level)
    surrogate = ratio * advantages
    if clip_low is not None:
        clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
        surrogate = torch.minimum(surrogate, clipped)
    per_token = -surrogate
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    kl = None
    if ref_logp is not None:
        kl = kl_penalty(logp.masked_fill(~keep, 0.0), ref_logp.masked_fill(~keep, 0.0), kl_estimator)
        if known_kl is not None:
            kl = torch.where(known_kl[0], known_kl[1].to(kl.dtype), kl)
    if beta != 0.0:
        per_token = per_token + beta * kl
    if entropy_coef != 0.0:
        per_token = per_token - entropy_coef * entropy
    loss = aggregate(per_token, keep, loss_type, max_generation_len=max_generation_len,
                     batch_sequences=batch_sequences, batch_tokens=batch_tokens)
    with torch.no_grad():
        stats = _policy_stats(ratio, log_ratio, advantages, keep, clip_low, clip_high)
        if kl is not None:
            stats["kl_sum"] = masked_sum(kl, keep, dim=None)
        if entropy is not None:
            stats["entropy_sum"] = masked_sum(entropy.float(), keep, dim=None)
    return loss, stats


def _clip_range(clip_low: float | None, clip_high: float | None) -> tuple[float | None, float | None]:
    """Check ``clip_low`` / ``clip_high`` and fill in the symmetric default."""
    if clip_low is None:
        if clip_high is not None:
            raise ValueError("clip_high needs clip_low (clip_low=None turns clipping off)")
        return None, None
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1) so that 1 - clip_low > 0, got {clip_low}")
    if clip_high is None:
        return clip_low, clip_low
    if clip_high < 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    return clip_low, clip_high


def _ratio(logp: Tensor, log_ratio: Tensor, keep: Tensor, ratio_level: str) -> Tensor:
    """The importance ratio of :func:`policy_loss`, ``[B, T]``, from the masked ``log_ratio``."""
    if ratio_level == "token":
        return log_ratio.exp()
    seq_ratio = masked_mean(log_ratio, keep, dim=-1).exp()[:, None]
    if ratio_level == "sequence":
        return seq_ratio.expand_as(log_ratio)
    return seq_ratio.detach() * (logp - logp.detach()).masked_fill(~keep, 0.0).exp()


def _policy_stats(
    ratio: Tensor,
    log_ratio: Tensor,
    advantages: Tensor,
    keep: Tensor,
    clip_low: float | None,
    clip_high: float | None,
) -> dict[str, Tensor]:
    """The detached per-micro-batch sums that :func:`policy_loss` returns."""
    ratio = ratio.detach()
    log_ratio = log_ratio.detach()
    if clip_low is None:
        clipped = torch.zeros_like(keep)
    else:
        low = (ratio < 1.0 - clip_low) & (advantages < 0)
        high = (ratio > 1.0 + clip_high) & (advantages > 0)
        clipped = low | high
    return {
        "tokens": keep.sum().float(),
        "ratio_sum": masked_sum(ratio, keep, dim=None),
        "ratio_max": ratio.masked_fill(~keep, 0.0).max(),
        "clipped_tokens": masked_sum(clipped.float(), keep, dim=None),
        "approx_kl_sum": masked_sum(torch.expm1(log_ratio) - log_ratio, keep, dim=None),
    }
