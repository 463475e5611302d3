"""Learners: turn batches of Steps (:class:`~unstable.records.TrainBatch`) into LoRA checkpoints.

* :class:`REINFORCELearner` (``"reinforce"``) - policy gradient with the shaped step reward as the advantage.
* :class:`A2CLearner` (``"a2c"``) - adds a critic (own LoRA adapter + value head on the same base) and GAE.
* :class:`PPOLearner` (``"ppo"``) - A2C's critic with the clipped surrogate over epochs of mini-batches.
* :class:`GRPOLearner` (``"grpo"``) - group-relative advantages, clipped surrogate, no critic.
* :class:`GSPOLearner` (``"gspo"``) - GRPO with GSPO's length-normalised sequence ratio.

All share one policy-gradient update (``reinforce.py``) and differ in advantages and settings
(``config.py``: ratio, clip, epochs, off-policy correction, KL, entropy). They are plain Python
classes; ``update(batch)`` takes one or more optimiser steps and writes
``output_dir/ckpt-{version}`` (a standard PEFT adapter directory), ``train(n)`` runs
:func:`~unstable.learners.loop.run_training` over a buffer. A new algorithm subclasses
:class:`BaseLearner` with ``_update(batch)``; :func:`register_learner` gives it a name for
``unstable.build(algorithm=...)``.
"""

from unstable.learners.a2c import A2CLearner
from unstable.learners.base import BaseLearner
from unstable.learners.catalog import available_learners, register_learner, resolve_learner
from unstable.learners.config import DEFAULT_LORA_CFG, A2CConfig, GRPOConfig, GSPOConfig, LearnerConfig, PPOConfig
from unstable.learners.grpo import GRPOLearner, GSPOLearner
from unstable.learners.loop import run_training
from unstable.learners.ppo import PPOLearner
from unstable.learners.protocol import UpdateResult
from unstable.learners.reinforce import REINFORCELearner
from unstable.records import TrainBatch

__all__ = [
    "DEFAULT_LORA_CFG",
    "A2CConfig",
    "A2CLearner",
    "BaseLearner",
    "GRPOConfig",
    "GRPOLearner",
    "GSPOConfig",
    "GSPOLearner",
    "LearnerConfig",
    "PPOConfig",
    "PPOLearner",
    "REINFORCELearner",
    "TrainBatch",
    "UpdateResult",
    "available_learners",
    "register_learner",
    "resolve_learner",
    "run_training",
]
