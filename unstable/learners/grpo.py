"""GRPO and GSPO: group-relative advantages, no critic.

Read top to bottom: :meth:`GRPOLearner._update` groups the batch's steps by ``config.group_by``
(games: the same env and seat; single-turn tasks: the samples of one prompt), takes each step's
reward minus its group's mean (divided by the group's std unless ``scale_rewards=False``, Dr.
GRPO), and hands these advantages to the policy-gradient update every learner shares
(:meth:`~unstable.learners.REINFORCELearner.policy_gradient`), which with GRPO's settings applies
the clipped surrogate and truncated importance sampling from the behaviour policy.

GSPO is the same with GSPO's settings: the length-normalised sequence ratio, its small clip range
and the per-sequence loss (Zheng et al. 2025, "Group Sequence Policy Optimization").
"""

from __future__ import annotations

import torch

from unstable.algorithms import group_advantages
from unstable.learners.config import GRPOConfig, GSPOConfig
from unstable.learners.reinforce import REINFORCELearner
from unstable.records import TrainBatch


class GRPOLearner(REINFORCELearner):
    """Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath §4.1) on a LoRA adapter."""

    config_cls = GRPOConfig
    config: GRPOConfig
    normalizes_advantages = True

    def _update(self, batch: TrainBatch) -> dict[str, float]:
        rewards = torch.tensor([s.reward for s in batch.steps], dtype=torch.float32)
        groups = [tuple(getattr(s, name) for name in self.config.group_by) for s in batch.steps]
        advantages = group_advantages(rewards, groups, scale=self.config.scale_rewards)
        metrics = self.policy_gradient(batch.steps, advantages)
        metrics["train/groups"] = float(len(set(groups)))
        metrics["train/adv_abs_mean"] = float(advantages.abs().mean())
        return metrics


class GSPOLearner(GRPOLearner):
    """Group Sequence Policy Optimization: GRPO's advantages, one clipped ratio per completion."""

    config_cls = GSPOConfig
    config: GSPOConfig
