"""Pure maths of the learners: log-probs, policy-gradient and value losses, GAE.

Every function here is a stateless torch function with a known-answer test in
``tests/test_algorithms.py``; the learners in :mod:`unstable.learners` only wire them to a model.
``Reinforce`` is how UnstableBaselines 0.1 scripts chose REINFORCE (see :mod:`unstable.compat`).
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
from unstable.algorithms.policy_gradient import (
    importance_weights,
    kl_penalty,
    masked_mean,
    masked_sum,
    reinforce_loss,
    token_entropy,
    token_logprobs,
)

__all__ = [
    "Reinforce",
    "compute_gae",
    "explained_variance",
    "group_advantages",
    "group_normalize",
    "importance_weights",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "normalize",
    "reinforce_loss",
    "token_entropy",
    "token_logprobs",
    "value_loss",
]


@dataclass(frozen=True)
class Reinforce:
    """``unstable.algorithms.Reinforce()``: a 0.1 script's choice of REINFORCE for ``StandardLearner``.

    A marker, defined here because 0.1 scripts look for it here; :mod:`unstable.compat` reads it.
    """
