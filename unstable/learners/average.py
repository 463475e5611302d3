"""NFSP's average policy (Heinrich & Silver 2016, "Deep Reinforcement Learning from Self-Play in
Imperfect-Information Games", arXiv 1603.01121), mixed into the policy-gradient learners.

With ``average_reservoir`` set, every update offers the batch's moves (prompt and sampled completion
tokens, the RL policy's own) to a :class:`~unstable.learners.reservoir.Reservoir`, then takes one
supervised step on a second LoRA adapter, ``average``: the cross-entropy ``-log pi_avg(completion |
prompt)`` of ``average_batch_size`` moves drawn from the reservoir, at each move's sampling temperature,
with its own AdamW (``average_learning_rate``) and the learner's ``grad_clip``. The reservoir is a uniform
sample of all the moves so far, so the adapter fits the average of the past policies: fictitious play's
output, which converges in two-player zero-sum games where the last iterate cycles
(tests/test_average_policy.py has the known answer on biased rock-paper-scissors).

Each checkpoint holds the adapter in ``average/`` and the reservoir and the adapter's optimiser in
``trainer_state.pt``; a resume (``initial_lora_path`` + ``restore_training_state=True``) restores both.
The forward passes, batching and backward are the learner's own (``collate``, ``micro_batches``,
``_scored_logprobs``, ``_backward``); only the loss differs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from unstable.learners import model_utils as mu
from unstable.learners.base import NonFiniteError
from unstable.learners.batching import collate, kept_completion_tokens
from unstable.learners.reservoir import Reservoir
from unstable.records import AVERAGE_ADAPTER, Step  # NFSP's average policy: a checkpoint's average/ subfolder


class AveragePolicy:
    """The average adapter and its reservoir (mixed into :class:`~unstable.learners.REINFORCELearner`)."""

    reservoir: Reservoir[Step] | None = None

    def _init_average(self) -> None:
        """Add the ``average`` adapter (a checkpoint's own, else a copy of the starting policy), its
        optimiser and an empty reservoir; nothing without ``average_reservoir``."""
        cfg = self.config
        if cfg.average_reservoir is None:
            return
        mu.add_saved_or_copied_adapter(self.model, AVERAGE_ADAPTER, cfg.initial_lora_path, trainable=True)
        self.average_params = mu.adapter_parameters(self.model, AVERAGE_ADAPTER)
        self.average_optimizer = torch.optim.AdamW(self.average_params, lr=cfg.average_learning_rate,
                                                   weight_decay=cfg.weight_decay, eps=cfg.adam_eps)
        self.reservoir = Reservoir(cfg.average_reservoir, seed=cfg.seed)

    def average_update(self, steps: list[Step]) -> dict[str, float]:
        """Offer ``steps`` to the reservoir, then one supervised step of the average adapter on a
        minibatch drawn from it. Returns ``train/average_loss`` (mean over tokens), the pre-clip
        ``train/average_grad_norm`` and ``train/reservoir_size``."""
        cfg = self.config
        self.reservoir.extend(steps)
        sample = self.reservoir.sample(cfg.average_batch_size)
        tokens = max(sum(kept_completion_tokens(s, cfg.max_train_len) for s in sample), 1)
        total = 0.0
        self.average_optimizer.zero_grad(set_to_none=True)
        try:
            with self._adapter(AVERAGE_ADAPTER):  # forward and backward: see _adapter
                for idx in self.micro_batches(sample):
                    micro = collate([sample[i] for i in idx], cfg.max_train_len, self.pad_id)
                    where = tuple(w.to(self.device) for w in micro.target_mask.nonzero(as_tuple=True))
                    logp = self._scored_logprobs(micro, where)[0]
                    loss = -logp.sum() / tokens  # the cross-entropy of the sampled tokens, summed over passes
                    self._backward(loss, "average-policy loss")
                    total += float(loss.detach())
            norm = float(torch.nn.utils.clip_grad_norm_(self.average_params, cfg.grad_clip))
            if not math.isfinite(norm):
                raise NonFiniteError(f"train/average_grad_norm is {norm}")
            self.average_optimizer.step()
        finally:
            self.average_optimizer.zero_grad(set_to_none=True)
        return {"train/average_loss": total, "train/average_grad_norm": norm,
                "train/reservoir_size": float(len(self.reservoir))}

    def _saved_adapters(self) -> list[str]:
        return [*super()._saved_adapters(), *([AVERAGE_ADAPTER] if self.reservoir is not None else [])]

    def training_state(self) -> dict[str, Any]:
        state = super().training_state()
        if self.reservoir is not None:
            state["average"] = {"optimizer": self.average_optimizer.state_dict(),
                                "reservoir": self.reservoir.state_dict()}
        return state

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        if self.reservoir is None:
            return
        if "average" not in state:
            raise ValueError("this checkpoint was trained without average_reservoir; its trainer state holds no "
                             "reservoir to resume the average policy from")
        mu.load_optimizer_state(self.average_optimizer, state["average"]["optimizer"])
        self.reservoir.load_state_dict(state["average"]["reservoir"])
