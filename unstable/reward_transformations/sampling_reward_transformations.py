"""Sampling reward transforms: run on a batch of Steps just before the learner gets it.

Contract: a sampling transform returns exactly one Step per input Step, in the same order, with
only ``reward`` (and ``step_info``) changed; the buffers check the length. Steps are frozen, so
transforms return new ones (``dataclasses.replace``). The first transform to change a reward
records the value it started from in ``step_info["reward_before_sampling"]``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import replace

from unstable.records import Step
from unstable.reward_transformations._checks import check_callables

Z_SCORE_EPS = 1e-8


class SamplingRewardTransform(ABC):
    """``(steps) -> steps``, called on each batch before it is handed to the learner."""

    @abstractmethod
    def __call__(self, steps: list[Step]) -> list[Step]: ...


class ComposeSamplingRewardTransforms(SamplingRewardTransform):
    """Apply sampling transforms left to right, each to the previous one's output."""

    def __init__(self, transforms: Iterable[SamplingRewardTransform]):
        self.transforms = check_callables(transforms, "ComposeSamplingRewardTransforms")

    def __call__(self, steps: list[Step]) -> list[Step]:
        for transform in self.transforms:
            steps = transform(steps)
        return steps

    def __repr__(self) -> str:
        return f"ComposeSamplingRewardTransforms({self.transforms!r})"


def normalize(values: Sequence[float], z_score: bool = False) -> list[float]:
    """Mean-centre ``values``; with ``z_score`` also divide by (population std + 1e-8).

    The population standard deviation (divide by n, not n - 1) is used, so a single value is
    defined. Values that are all equal (including a single value) come back as exact zeros.
    """
    if not values:
        return []
    if max(values) == min(values):
        return [0.0] * len(values)
    n = len(values)
    mean = math.fsum(values) / n
    centred = [v - mean for v in values]
    if not z_score:
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / n)
    return [c / (std + Z_SCORE_EPS) for c in centred]


def with_reward(step: Step, reward: float) -> Step:
    """A copy of ``step`` with a new reward; keeps the first pre-sampling reward in ``step_info``."""
    info = {"reward_before_sampling": step.reward, **step.step_info}
    return replace(step, reward=float(reward), step_info=info)


class NormalizeRewards(SamplingRewardTransform):
    """Mean-centre the batch's rewards (optionally z-score them with population std)."""

    def __init__(self, z_score: bool = False):
        if not isinstance(z_score, bool):
            raise ValueError(f"z_score must be True or False, got {z_score!r}")
        self.z_score = z_score

    def __call__(self, steps: list[Step]) -> list[Step]:
        rewards = normalize([s.reward for s in steps], self.z_score)
        return [with_reward(s, r) for s, r in zip(steps, rewards, strict=True)]

    def __repr__(self) -> str:
        return f"NormalizeRewards(z_score={self.z_score})"


class NormalizeRewardsByEnv(NormalizeRewards):
    """Mean-centre (optionally z-score) rewards separately within each env_id bucket of the batch."""

    def __call__(self, steps: list[Step]) -> list[Step]:
        buckets: dict[str, list[int]] = {}
        for i, step in enumerate(steps):
            buckets.setdefault(step.env_id, []).append(i)
        out: list[Step] = list(steps)
        for indices in buckets.values():
            rewards = normalize([steps[i].reward for i in indices], self.z_score)
            for i, r in zip(indices, rewards, strict=True):
                out[i] = with_reward(steps[i], r)
        return out

    def __repr__(self) -> str:
        return f"NormalizeRewardsByEnv(z_score={self.z_score})"
