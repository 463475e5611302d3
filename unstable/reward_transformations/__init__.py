"""Reward shaping in three pipelines: final (once per player per game), step (per turn), sampling (per batch).

Usage mirrors UnstableBaselines::

    import unstable.reward_transformations as retra

    final_t = retra.ComposeFinalRewardTransforms([retra.RoleAdvantageByEnvFormatter()])
    step_t = retra.ComposeStepRewardTransforms([retra.RewardForFormat(1.5)])
    sample_t = retra.ComposeSamplingRewardTransforms([retra.NormalizeRewardsByEnv(True)])

Any callable with the right signature works in a Compose list; subclass the base classes to
document intent.
"""

from __future__ import annotations

from unstable.reward_transformations.final_reward_transformations import (
    ComposeFinalRewardTransforms,
    FinalRewardTransform,
    RoleAdvantageByEnvFormatter,
    RoleAdvantageFormatter,
    ema_update,
)
from unstable.reward_transformations.sampling_reward_transformations import (
    ComposeSamplingRewardTransforms,
    NormalizeRewards,
    NormalizeRewardsByEnv,
    SamplingRewardTransform,
    normalize,
    with_reward,
)
from unstable.reward_transformations.step_reward_transformations import (
    ComposeStepRewardTransforms,
    PenaltyForInvalidMove,
    RewardForFormat,
    StepRewardTransform,
)


def default_transforms() -> tuple[
    ComposeFinalRewardTransforms, ComposeStepRewardTransforms, ComposeSamplingRewardTransforms
]:
    """Fresh (final, step, sampling) transforms with UnstableBaselines 0.2's default chain.

    Final: per-(env, role) RAE baseline. Step: +1.5 for a well-formatted answer, +1 for a valid
    move and -1 for an invalid one. Sampling: per-env z-score of each batch. Each call returns new
    objects, so two buffers never share RAE baselines.
    """
    return (
        ComposeFinalRewardTransforms([RoleAdvantageByEnvFormatter()]),
        ComposeStepRewardTransforms([RewardForFormat(1.5), PenaltyForInvalidMove(1.0, -1.0)]),
        ComposeSamplingRewardTransforms([NormalizeRewardsByEnv(True)]),
    )


__all__ = [
    "ComposeFinalRewardTransforms",
    "ComposeSamplingRewardTransforms",
    "ComposeStepRewardTransforms",
    "FinalRewardTransform",
    "NormalizeRewards",
    "NormalizeRewardsByEnv",
    "PenaltyForInvalidMove",
    "RewardForFormat",
    "RoleAdvantageByEnvFormatter",
    "RoleAdvantageFormatter",
    "SamplingRewardTransform",
    "StepRewardTransform",
    "default_transforms",
    "ema_update",
    "normalize",
    "with_reward",
]
