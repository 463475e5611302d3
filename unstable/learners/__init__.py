"""Learners: turn batches of Steps (:class:`~unstable.records.TrainBatch`) into LoRA checkpoints.

* :class:`REINFORCELearner` (``"reinforce"``) - policy gradient with the shaped step reward as the advantage.
* :class:`A2CLearner` (``"a2c"``) - adds a critic (own LoRA adapter + value head on the same base) and GAE.

Both are plain Python classes; ``update(batch)`` does one optimiser step and writes
``output_dir/ckpt-{version}`` (a standard PEFT adapter directory), ``train(n)`` runs
:func:`~unstable.learners.loop.run_training` over a buffer. A new algorithm subclasses
:class:`BaseLearner` with ``_update(batch)``; :func:`register_learner` gives it a name for
``unstable.build(algorithm=...)``.
"""

from unstable.learners.a2c import A2CLearner
from unstable.learners.base import BaseLearner
from unstable.learners.catalog import available_learners, register_learner, resolve_learner
from unstable.learners.config import DEFAULT_LORA_CFG, A2CConfig, LearnerConfig
from unstable.learners.loop import run_training
from unstable.learners.protocol import UpdateResult
from unstable.learners.reinforce import REINFORCELearner
from unstable.records import TrainBatch

__all__ = [
    "DEFAULT_LORA_CFG",
    "A2CConfig",
    "A2CLearner",
    "BaseLearner",
    "LearnerConfig",
    "REINFORCELearner",
    "TrainBatch",
    "UpdateResult",
    "available_learners",
    "register_learner",
    "resolve_learner",
    "run_training",
]
