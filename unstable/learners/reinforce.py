"""REINFORCE: ``-A * log pi(completion | prompt) / max_generation_len``, with ``A = Step.reward``.

Read top to bottom: :meth:`REINFORCELearner._update` takes the advantages, then
:meth:`~REINFORCELearner.policy_gradient` runs, per micro-batch, the model forward on the sampled
tokens, their log-probs, the loss from :mod:`unstable.algorithms` and the backward pass.
:class:`~unstable.learners.BaseLearner` zeroes, clips and steps the optimiser around it and writes
the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from unstable.algorithms import reinforce_loss, token_logprobs
from unstable.learners.base import BaseLearner
from unstable.learners.batching import TokenBatch, collate, micro_batches
from unstable.records import Step, TrainBatch


class REINFORCELearner(BaseLearner):
    """Plain policy gradient on a LoRA adapter, no baseline, no ratio/clipping, no KL.

    The advantage is each step's ``reward`` as the buffer shaped it (final, step and sampling
    reward transforms, e.g. per-env z-scoring). Gradients are accumulated over micro-batches of
    ``mini_batch_size`` steps, each weighted by its share of the batch, so the result equals one
    pass over the whole batch.
    """

    def _update(self, batch: TrainBatch) -> dict[str, float]:
        advantages = torch.tensor([s.reward for s in batch.steps], dtype=torch.float32)
        return self.policy_gradient(batch.steps, advantages)

    def policy_gradient(self, steps: Sequence[Step], advantages: Tensor) -> dict[str, float]:
        """Accumulate the policy gradient of ``steps`` with these ``advantages`` (one per step)."""
        totals = {"loss": 0.0, "seq_logp_sum": 0.0, "token_logp_sum": 0.0, "tokens": 0.0, "truncated": 0.0}
        for idx in micro_batches(steps, self.config.mini_batch_size):
            micro = collate([steps[i] for i in idx], self.config.max_train_len, self.pad_id)
            out = self._policy_backward(micro, advantages[idx], weight=len(idx) / len(steps))
            for key, value in out.items():
                totals[key] += value
            totals["truncated"] += micro.num_truncated
        n = len(steps)
        return {
            "train/loss": totals["loss"],
            "train/tokens": totals["tokens"],
            "train/seq_logp_mean": totals["seq_logp_sum"] / n,
            "train/token_logp_mean": totals["token_logp_sum"] / max(totals["tokens"], 1.0),
            "train/pct_truncated": 100.0 * totals["truncated"] / n,
        }

    def _policy_backward(self, micro: TokenBatch, advantages: Tensor, weight: float) -> dict[str, float]:
        """REINFORCE loss of one micro-batch scaled by ``weight`` (its share of the batch); backward."""
        # 1. forward: logits only from the first position that predicts a completion token
        start = micro.first_target - 1
        input_ids = micro.input_ids.to(self.device)
        kwargs = {"logits_to_keep": input_ids.shape[1] - start} if self._logits_to_keep else {}
        logits = self.model(
            input_ids=input_ids, attention_mask=micro.attention_mask.to(self.device), use_cache=False, **kwargs
        ).logits
        if not self._logits_to_keep:
            logits = logits[:, start:]
        # 2. log-probs of the sampled tokens (recomputed in backward to save the float32 logits)
        ids = input_ids[:, start:]
        if self.config.activation_checkpointing:
            token_logp = torch.utils.checkpoint.checkpoint(token_logprobs, logits, ids, use_reentrant=False)
        else:
            token_logp = token_logprobs(logits, ids)
        # 3. loss over the completion tokens, Dr. GRPO's constant normaliser
        mask = micro.completion_mask[:, start + 1 :].to(self.device)
        loss, stats = reinforce_loss(token_logp, mask, advantages.to(self.device), self.config.max_generation_len)
        # 4. backward (skips the whole update if the loss is not finite)
        self._backward(loss * weight, "policy loss")
        return {
            "loss": float(loss.detach()) * weight,
            "seq_logp_sum": float(stats["seq_logp"].sum()),
            "token_logp_sum": float((token_logp.detach() * mask).sum()),
            "tokens": float(mask.sum()),
        }
