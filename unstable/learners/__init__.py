"""Learners: turn batches of :class:`~unstable.records.Step` into LoRA checkpoints.

* :class:`REINFORCELearner` - policy gradient with the shaped step reward as the advantage.
* :class:`A2CLearner` - adds a critic (own LoRA adapter + value head on the same base) and GAE.

Both are plain Python classes; ``update(steps)`` does one optimiser step and writes
``output_dir/ckpt-{version}`` (a standard PEFT adapter directory), ``train(n)`` loops over a buffer.
"""

from unstable.learners.a2c import A2CLearner
from unstable.learners.base import BaseLearner, UpdateResult
from unstable.learners.config import DEFAULT_LORA_CFG, A2CConfig, LearnerConfig
from unstable.learners.reinforce import REINFORCELearner

__all__ = [
    "DEFAULT_LORA_CFG",
    "A2CConfig",
    "A2CLearner",
    "BaseLearner",
    "LearnerConfig",
    "REINFORCELearner",
    "UpdateResult",
]
