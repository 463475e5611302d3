"""PPO: A2C's critic and GAE advantages with the clipped surrogate, over several epochs.

The update is :class:`~unstable.learners.A2CLearner`'s (critic values, GAE per episode, per-env
normalised advantages, the critic regressed on each micro-batch) run with PPO's settings
(:class:`~unstable.learners.config.PPOConfig`): two epochs of two shuffled mini-batches, ratios to
the policy recomputed at the start of the update, clipped at 0.2 (Schulman et al. 2017), and
truncated importance weights from the behaviour policy that sampled the tokens, as in AReaL's
decoupled PPO (Fu et al. 2025).
"""

from __future__ import annotations

from unstable.learners.a2c import A2CLearner
from unstable.learners.config import PPOConfig


class PPOLearner(A2CLearner):
    """Proximal Policy Optimization with a value head read at the last prompt token."""

    config_cls = PPOConfig
    config: PPOConfig
