"""Pure maths of the learners: log-probs, policy-gradient and value losses, advantages.

Every function here is a stateless torch function with a known-answer test in
``tests/test_algorithms.py``; the learners in :mod:`unstable.learners` only wire them to a model.

Per-token tensors are ``[B, T]``, shifted so column ``t`` scores one sampled token; ``mask`` is
true on the completion tokens trained on. Losses take the whole batch's normalisers, so the
losses of its micro-batches add up to the batch's.

From :mod:`~unstable.algorithms.policy_gradient`:

* :func:`token_logprobs`, :func:`token_entropy`: per-token log-probs / entropies from logits,
  at the sampling temperature; :func:`target_logprobs`, :func:`logits_entropy`: the same for
  logits already gathered at the scored positions (``[N, V]``, no shift).
* :func:`masked_sum`, :func:`masked_mean`: reductions over the masked tokens.
* :func:`kl_penalty`: the k1 / k2 / k3 per-token estimators of ``KL(pi_theta || pi_ref)``;
  :func:`exact_kl`: the same KL where the whole distribution is known.
* :func:`importance_weights`: truncated or masked IS weights, behaviour policy -> pi_old.
* :func:`aggregate`: per-token loss -> scalar (``grpo``, ``bnpo``, ``dapo``, ``dr_grpo``).
* :func:`policy_loss`: the clipped surrogate of PPO / GRPO / DAPO / Dr. GRPO / GSPO.
* :func:`reinforce_loss`: REINFORCE with Dr. GRPO's constant normaliser.

From :mod:`~unstable.algorithms.chunked_head`:

* :func:`chunked_target_logprobs`: the LM head fused with the sampled token's log-prob and the
  entropy, in chunks over tokens (never the whole ``[N, V]`` float32 logits).

From :mod:`~unstable.algorithms.advantages`:

* :func:`compute_gae`, :func:`value_loss`, :func:`explained_variance`: the critic's side.
* :func:`normalize`, :func:`group_normalize`: z-scores (all-equal input gives zeros).
* :func:`group_advantages`: GRPO's / Dr. GRPO's group-relative advantage.

``Reinforce`` is how UnstableBaselines 0.1 scripts chose REINFORCE (see :mod:`unstable.legacy.compat`).
"""

from dataclasses import dataclass

from unstable.algorithms.advantages import (
    compute_gae,
    explained_variance,
    group_advantages,
    group_normalize,
    normalize,
    value_loss,
)
from unstable.algorithms.chunked_head import chunked_target_logprobs
from unstable.algorithms.policy_gradient import (
    aggregate,
    exact_kl,
    importance_weights,
    kl_penalty,
    logits_entropy,
    masked_mean,
    masked_sum,
    policy_loss,
    reinforce_loss,
    target_logprobs,
    token_entropy,
    token_logprobs,
)

__all__ = [
    "Reinforce",
    "aggregate",
    "chunked_target_logprobs",
    "compute_gae",
    "exact_kl",
    "explained_variance",
    "group_advantages",
    "group_normalize",
    "importance_weights",
    "kl_penalty",
    "logits_entropy",
    "masked_mean",
    "masked_sum",
    "normalize",
    "policy_loss",
    "reinforce_loss",
    "target_logprobs",
    "token_entropy",
    "token_logprobs",
    "value_loss",
]


@dataclass(frozen=True)
class Reinforce:
    """``unstable.algorithms.Reinforce()``: a 0.1 script's choice of REINFORCE for ``StandardLearner``.

    A marker, defined here because 0.1 scripts look for it here; :mod:`unstable.legacy.compat` reads it.
    """
