"""Step reward transforms: run once per turn, starting from the player's final-transformed reward.

``player_traj.turns[step_index]`` is the turn being scored; its ``format_ok`` and ``invalid``
flags are what the built-ins read. Each turn starts again from the final-transformed reward, so
bonuses do not accumulate across turns.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from unstable.records import PlayerTrajectory
from unstable.reward_transformations._checks import check_callables, check_finite


class StepRewardTransform(ABC):
    """``(player_traj, step_index, reward) -> reward``, called once per turn."""

    @abstractmethod
    def __call__(self, player_traj: PlayerTrajectory, step_index: int, reward: float) -> float: ...


class ComposeStepRewardTransforms(StepRewardTransform):
    """Apply step transforms left to right, each to the previous one's output."""

    def __init__(self, transforms: Iterable[StepRewardTransform]):
        self.transforms = check_callables(transforms, "ComposeStepRewardTransforms")

    def __call__(self, player_traj: PlayerTrajectory, step_index: int, reward: float) -> float:
        for transform in self.transforms:
            reward = transform(player_traj, step_index, reward)
        return reward

    def __repr__(self) -> str:
        return f"ComposeStepRewardTransforms({self.transforms!r})"


class RewardForFormat(StepRewardTransform):
    """Add ``reward`` when the turn's answer was well formatted (``format_ok``), else add ``penalty``."""

    def __init__(self, reward: float = 0.0, penalty: float = 0.0):
        self.reward = check_finite(reward, "reward")
        self.penalty = check_finite(penalty, "penalty")

    def __call__(self, player_traj: PlayerTrajectory, step_index: int, reward: float) -> float:
        ok = player_traj.turns[step_index].format_ok
        return reward + (self.reward if ok else self.penalty)

    def __repr__(self) -> str:
        return f"RewardForFormat(reward={self.reward}, penalty={self.penalty})"


class PenaltyForInvalidMove(StepRewardTransform):
    """Add ``penalty`` when the env marked the turn's move invalid, else add ``reward``."""

    def __init__(self, reward: float = 0.0, penalty: float = 0.0):
        self.reward = check_finite(reward, "reward")
        self.penalty = check_finite(penalty, "penalty")

    def __call__(self, player_traj: PlayerTrajectory, step_index: int, reward: float) -> float:
        invalid = player_traj.turns[step_index].invalid
        return reward + (self.penalty if invalid else self.reward)

    def __repr__(self) -> str:
        return f"PenaltyForInvalidMove(reward={self.reward}, penalty={self.penalty})"
