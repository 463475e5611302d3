"""REINFORCE: ``-A * log pi(completion | prompt) / max_generation_len``, with ``A = Step.reward``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from unstable.learners.base import BaseLearner
from unstable.records import Step


class REINFORCELearner(BaseLearner):
    """Plain policy gradient on a LoRA adapter, no baseline, no ratio/clipping, no KL.

    The advantage is each step's ``reward`` as the buffer shaped it (final, step and sampling
    reward transforms, e.g. per-env z-scoring). Gradients are accumulated over micro-batches of
    ``mini_batch_size`` steps, each weighted by its share of the batch, so the result equals one
    pass over the whole batch.
    """

    def _accumulate(self, steps: Sequence[Step]) -> dict[str, float]:
        advantages = torch.tensor([s.reward for s in steps], dtype=torch.float32)
        return self._policy_pass(steps, advantages)
