"""Pure maths of the learners: log-probs, policy-gradient and value losses, GAE.

Every function here is a stateless torch function with a known-answer test in
``tests/test_algorithms.py``; the learners in :mod:`unstable.learners` only wire them to a model.
``Reinforce`` is 0.1's name for choosing REINFORCE; it lives in :mod:`unstable.compat`.
"""

from typing import Any

from unstable.algorithms.advantages import compute_gae, group_normalize, normalize, value_loss
from unstable.algorithms.policy_gradient import masked_mean, masked_sum, reinforce_loss, token_logprobs

__all__ = [
    "compute_gae",
    "group_normalize",
    "masked_mean",
    "masked_sum",
    "normalize",
    "reinforce_loss",
    "token_logprobs",
    "value_loss",
]


def __getattr__(name: str) -> Any:
    if name == "Reinforce":  # imported on use: the 0.1 aliases sit above the learners, which import this package
        from unstable.compat import Reinforce

        return Reinforce
    raise AttributeError(f"module 'unstable.algorithms' has no attribute {name!r}")
