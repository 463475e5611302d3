"""The policy-gradient learners' shared update, and REINFORCE: advantage = ``Step.reward``.

Read top to bottom: :meth:`REINFORCELearner._update` takes the advantages, then
:meth:`~REINFORCELearner.policy_gradient` runs the update every policy-gradient learner shares:

1. the log-probs each update compares against: the "old" policy's, recomputed before the first
   optimiser step when there will be several (``old_logprobs="recompute"``), or the behaviour
   log-probs the backend recorded (``"behaviour"``); and the reference policy's when ``beta > 0``;
2. ``epochs`` passes over the batch, each split into ``minibatches`` shuffled parts, one optimiser
   step per part; each part is accumulated in micro-batches of steps of similar length, at most
   ``mini_batch_size`` times the longest step's tokens and 10 % padding each
   (:func:`~unstable.learners.batching.micro_batches`):
   forward on the sampled tokens, log-probs at each sample's own temperature taken only at the
   completion positions, importance weights against the behaviour log-probs, and the loss of
   :func:`unstable.algorithms.policy_loss`, then backward.

With the defaults (one epoch, one part, no clip, no correction, ``loss_type="dr_grpo"``) this is
exactly the REINFORCE gradient ``-A * log pi(completion | prompt) / max_generation_len``.
:class:`~unstable.learners.BaseLearner` clips and steps the optimiser (once, or after each part)
and writes the checkpoint. GRPO, GSPO, A2C and PPO change the advantages and the settings.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from unstable.algorithms import (
    chunked_target_logprobs,
    exact_kl,
    importance_weights,
    kl_penalty,
    logits_entropy,
    policy_loss,
    target_logprobs,
)
from unstable.learners import model_utils as mu
from unstable.learners.average import AveragePolicy
from unstable.learners.base import BaseLearner
from unstable.learners.batching import (
    TokenBatch,
    collate,
    kept_completion_tokens,
    micro_batches,
    pack_rows,
    packed_micro_batches,
)
from unstable.records import Step, TrainBatch

REFERENCE_ADAPTER = "reference"  # the frozen KL reference: config.reference_adapter, or the magnet


@dataclass
class _Totals:
    """Sums over the tokens of an update, turned into ``train/...`` means at the end."""

    sums: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, value: float | Tensor) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(value)

    def max(self, name: str, value: float | Tensor) -> None:
        self.maxima[name] = max(self.maxima.get(name, float("-inf")), float(value))

    def get(self, name: str) -> float:
        return self.sums.get(name, 0.0)

    @classmethod
    def merged(cls, parts: Sequence[_Totals]) -> _Totals:
        """The totals of several learner workers' shards: sums added, maxima taken."""
        out = cls()
        for part in parts:
            for name, value in part.sums.items():
                out.add(name, value)
            for name, value in part.maxima.items():
                out.max(name, value)
        return out


class REINFORCELearner(AveragePolicy, BaseLearner):
    """Policy gradient on a LoRA adapter with ``A = Step.reward``.

    The advantage is each step's ``reward`` as the buffer shaped it (final, step and sampling
    reward transforms, e.g. per-env z-scoring). By default no baseline, ratio, clip or KL: the
    settings of :class:`~unstable.learners.LearnerConfig`'s "policy loss" section add them.
    Gradients are accumulated over micro-batches (steps of similar length, at most
    ``mini_batch_size`` times the longest step's tokens and 10 % padding each); the losses divide
    by the whole part's normalisers, so the result equals one pass over the whole part; with several
    learner workers each takes a shard of every part, normalised the same way (see
    :mod:`unstable.learners.distributed`).
    """

    supports_data_parallel = True

    def __init__(self, model_name: str, **kwargs) -> None:
        super().__init__(model_name, **kwargs)
        cfg = self.config
        if cfg.reference_adapter is not None:
            self.model.load_adapter(cfg.reference_adapter, adapter_name=REFERENCE_ADAPTER, is_trainable=False)
        elif cfg.magnet_every is not None:  # the magnet: a checkpoint's own, else the starting policy
            mu.add_saved_or_copied_adapter(self.model, REFERENCE_ADAPTER, cfg.initial_lora_path, trainable=False)
        self._init_average()  # NFSP's average policy, with average_reservoir (unstable.learners.average)
        self.model.set_adapter(mu.POLICY_ADAPTER)  # PEFT: only the active adapter is trainable
        self.magnet_version = cfg.initial_version - cfg.initial_version % cfg.magnet_every if cfg.magnet_every else None
        self.packed = cfg.micro_batching == "packed" or (cfg.micro_batching == "auto" and self.device.type == "cuda")
        self._fused_head = cfg.activation_checkpointing and mu.plain_lm_head(self.model)

    def _update(self, batch: TrainBatch) -> dict[str, float]:
        advantages = torch.tensor([s.reward for s in batch.steps], dtype=torch.float32)
        return self.policy_gradient(batch.steps, advantages)

    # ------------------------------------------------------------------------ the magnet
    def _on_new_version(self) -> None:
        """Every ``magnet_every`` versions the magnet becomes the policy just trained (MMD's magnet update)."""
        every = self.config.magnet_every
        if every is not None and self.version % every == 0:
            mu.copy_adapter(self.model, mu.POLICY_ADAPTER, REFERENCE_ADAPTER)
            self.magnet_version = self.version

    def _saved_adapters(self) -> list[str]:
        return [*super()._saved_adapters(), *([REFERENCE_ADAPTER] if self.config.magnet_every is not None else [])]

    # ------------------------------------------------------------------------ the shared update
    def policy_gradient(self, steps: Sequence[Step], advantages: Tensor) -> dict[str, float]:
        """Train the policy on ``steps`` with these ``advantages`` (one per step); see the module
        docstring for the order of things. Returns the ``train/...`` metrics."""
        cfg = self.config
        several_steps = cfg.epochs * cfg.minibatches > 1
        # 1. what the ratios are taken against, computed before any weight moves
        # (each learner worker computes its share, see unstable.learners.distributed)
        old = self._sharded(steps, self._logprobs_no_grad) if several_steps and cfg.old_logprobs == "recompute" \
            else None
        ref = ref_allowed = None
        if cfg.beta > 0:  # with each step's whole distributions where its answer was drawn among a few
            both = self._sharded(steps, lambda s: self._logprobs_no_grad(s, reference=True, with_allowed=True))
            ref, ref_allowed = [b[0] for b in both], [b[1] for b in both]
        # 2. epochs of shuffled parts, one optimiser step per part; each learner worker trains on its
        # shard of the part, its loss weighted by its share of the whole part's sequences and tokens
        totals = _Totals()
        generator = torch.Generator().manual_seed(1_000_003 * (cfg.seed or 0) + self.version)
        for epoch in range(cfg.epochs):
            for part in self._partition(len(steps), generator):
                part_tokens = sum(kept_completion_tokens(steps[i], cfg.max_train_len) for i in part)
                shard = self._my_rows(steps, part)
                for idx in self.micro_batches([steps[i] for i in shard]):
                    rows = [shard[i] for i in idx]
                    self._policy_backward(steps, rows, advantages, old, ref, len(part), part_tokens, epoch, totals,
                                          ref_allowed)
                    self._auxiliary_backward(steps, rows, len(part), epoch, totals)
                if several_steps:
                    self._optimizer_step()
        if self.data_parallel is not None:
            totals = _Totals.merged(self.data_parallel.all_gather(totals))
        metrics = self._metrics(totals, len(steps), max(len(self._norms), 1))  # steps taken (1: update() takes it)
        if self.reservoir is not None:
            metrics.update(self.average_update(list(steps)))
        return metrics

    def _partition(self, n: int, generator: torch.Generator) -> list[list[int]]:
        """``minibatches`` near-equal parts of ``range(n)``, shuffled when there is more than one."""
        if self.config.minibatches == 1:
            return [list(range(n))]
        order = torch.randperm(n, generator=generator)
        return [chunk.tolist() for chunk in torch.tensor_split(order, min(self.config.minibatches, n)) if len(chunk)]

    def _policy_backward(
        self,
        steps: Sequence[Step],
        rows: list[int],
        advantages: Tensor,
        old: list[Tensor] | None,
        ref: list[Tensor] | None,
        part_size: int,
        part_tokens: int,
        epoch: int,
        totals: _Totals,
        ref_allowed: list[dict[int, Tensor]] | None = None,
    ) -> None:
        """The policy loss of the micro-batch ``rows`` (its share of a part of ``part_size`` steps
        and ``part_tokens`` completion tokens), backward, and its statistics into ``totals``.
        ``ref_allowed[i]``: step ``i``'s reference distributions over the tokens its answer was drawn among
        (target column -> log-probs), where the KL is then exact (:func:`~unstable.algorithms.exact_kl`)."""
        cfg = self.config
        micro = collate([steps[i] for i in rows], cfg.max_train_len, self.pad_id)
        # 1. forward: log-probs of the sampled tokens at each sample's temperature, the LM head and
        # its float32 log-softmax taken only at the positions that predict a kept completion token
        mask = micro.target_mask.to(self.device)  # [B, T - 1]: column t scores token t + 1
        where = mask.nonzero(as_tuple=True)
        allowed: dict[str, Tensor] | None = {} if ref_allowed is not None and micro.allowed else None
        packed_logp, packed_entropy = self._scored_logprobs(micro, where, entropy_grad=cfg.entropy_coef > 0,
                                                            allowed_out=allowed)
        token_logp = _unpack(packed_logp, where, mask.shape)
        behaviour = micro.behaviour_logp[:, 1:].to(self.device)
        # 2. the old policy: recomputed before the first step, the behaviour policy, or this forward
        if old is not None:
            old_logp = micro.scatter([old[i] for i in rows])[:, 1:].to(self.device)
        elif cfg.old_logprobs == "behaviour":
            old_logp = behaviour
        else:
            old_logp = token_logp.detach()
        # 3. importance weights from the behaviour policy to the old one
        is_weights = None
        if cfg.off_policy_correction != "none":
            level, mode = cfg.off_policy_correction.split("_")
            is_weights, is_stats = importance_weights(old_logp, behaviour, mask, level=level, mode=mode,
                                                      cap=cfg.correction_cap, floor=cfg.correction_floor)
            if epoch == 0:
                tokens = float(mask.sum())
                totals.add("is_ratio_sum", float(is_stats["ratio_mean"]) * tokens)
                totals.max("is_ratio_max", is_stats["ratio_max"])
                totals.add("is_filtered_sum", float(is_stats["frac_truncated_or_masked"]) * tokens)
        ref_logp = micro.scatter([ref[i] for i in rows])[:, 1:].to(self.device) if ref is not None else None
        known_kl = None
        if allowed:  # the whole distributions are known there: the KL to the reference, not an estimate
            cols = where[1][allowed["picks"]].tolist()
            reference = torch.stack([ref_allowed[rows[r]][c] for r, c in
                                     zip(where[0][allowed["picks"]].tolist(), cols, strict=True)]).to(self.device)
            at = torch.zeros(len(packed_logp), dtype=torch.bool, device=self.device)
            at[allowed["picks"]] = True
            values = torch.zeros_like(packed_logp).index_put((allowed["picks"],), exact_kl(allowed["logp"], reference))
            known_kl = (_unpack(at, where, mask.shape), _unpack(values, where, mask.shape))
        entropy = None
        if cfg.entropy_coef > 0:
            entropy = _unpack(packed_entropy, where, mask.shape)
        elif epoch == 0:
            totals.add("entropy_sum", packed_entropy.detach().sum())
        # 4. the loss and its backward
        loss, stats = policy_loss(
            token_logp, old_logp, advantages[rows].to(self.device), mask,
            loss_type=cfg.loss_type, max_generation_len=cfg.max_generation_len,
            batch_sequences=part_size, batch_tokens=max(part_tokens, 1),
            clip_low=cfg.clip_ratio, clip_high=cfg.clip_ratio_high, ratio_level=cfg.ratio_level,
            is_weights=is_weights, ref_logp=ref_logp, beta=cfg.beta, kl_estimator=cfg.kl_estimator,
            entropy=entropy, entropy_coef=cfg.entropy_coef, known_kl=known_kl,
        )
        self._backward(loss, "policy loss")
        # 5. statistics: the first pass measures the batch, every pass the clipping
        totals.add("loss", loss.detach())
        totals.add("ratio_sum", stats["ratio_sum"])
        totals.max("ratio_max", stats["ratio_max"])
        totals.add("clipped_tokens", stats["clipped_tokens"])
        totals.add("all_tokens", stats["tokens"])
        if epoch == 0:
            current = token_logp.detach()
            totals.add("tokens", mask.sum())
            totals.add("approx_kl_sum", (kl_penalty(behaviour, current, "k3") * mask).sum())
            totals.add("token_logp_sum", (current * mask).sum())
            totals.add("truncated", micro.num_truncated)
            if entropy is not None:
                totals.add("entropy_sum", (entropy.detach() * mask).sum())
            if ref_logp is not None:
                totals.add("kl_ref_sum", stats["kl_sum"])

    def _auxiliary_backward(self, steps: Sequence[Step], rows: list[int], part_size: int, epoch: int,
                            totals: _Totals) -> None:
        """Another loss on the same micro-batch before the optimiser step (A2C/PPO: the critic's)."""

    def _metrics(self, totals: _Totals, n: int, optimizer_steps: int) -> dict[str, float]:
        tokens = max(totals.get("tokens"), 1.0)
        metrics = {
            "train/loss": totals.get("loss") / optimizer_steps,
            "train/tokens": totals.get("tokens"),
            "train/token_logp_mean": totals.get("token_logp_sum") / tokens,
            "train/seq_logp_mean": totals.get("token_logp_sum") / n / self.config.max_generation_len,
            "train/pct_truncated": 100.0 * totals.get("truncated") / n,
            "train/approx_kl": totals.get("approx_kl_sum") / tokens,
            "train/entropy": totals.get("entropy_sum") / tokens,
            "train/clipfrac": totals.get("clipped_tokens") / max(totals.get("all_tokens"), 1.0),
            "train/ratio_mean": totals.get("ratio_sum") / max(totals.get("all_tokens"), 1.0),
            "train/ratio_max": totals.maxima.get("ratio_max", 1.0),
        }
        if "kl_ref_sum" in totals.sums:
            metrics["train/kl_ref"] = totals.get("kl_ref_sum") / tokens
        if self.magnet_version is not None:
            metrics["train/magnet_version"] = float(self.magnet_version)
        if "is_ratio_sum" in totals.sums:
            metrics["train/is_ratio_mean"] = totals.get("is_ratio_sum") / tokens
            metrics["train/is_ratio_max"] = totals.maxima["is_ratio_max"]
            metrics["train/is_filtered_frac"] = totals.get("is_filtered_sum") / tokens
        return metrics

    # ---------------------------------------------------------------------------- forward passes
    def micro_batches(self, steps: Sequence[Step]) -> list[list[int]]:
        """Indices of ``steps`` cut into forward/backward passes (``config.micro_batching``)."""
        cfg = self.config
        if self.packed:
            return packed_micro_batches(steps, cfg.max_tokens_per_micro_batch, cfg.max_train_len)
        return micro_batches(steps, cfg.mini_batch_size, cfg.max_train_len)

    def _scored_logprobs(self, micro: TokenBatch, where: tuple[Tensor, Tensor], entropy_grad: bool = False,
                         allowed_out: dict | None = None) -> tuple[Tensor, Tensor]:
        """``(log-probs, entropies)``, ``[N]`` float32 each, of the tokens that the positions
        ``where = (rows, columns)`` of ``micro`` predict, at each row's temperature. The entropies
        carry a gradient only with ``entropy_grad`` (or with the chunked head, which gives both).
        ``allowed_out`` receives the positions drawn among a few tokens (see :meth:`_allowed_only`)."""
        targets = micro.input_ids[:, 1:].to(self.device)[where]
        temperature = micro.temperature.to(self.device)[where[0]]
        if self._fused_head:  # never the [N, V] float32 logits: chunks, recomputed in backward
            head = self.model.get_output_embeddings()
            hidden = self._hidden_at(micro, where)
            logp, entropy = chunked_target_logprobs(hidden, head.weight, targets, temperature,
                                                    chunk_tokens=self.config.logprob_chunk_tokens, bias=head.bias)

            def logits_at(picks: Tensor, ids: Tensor) -> Tensor:  # [C, K]: only the allowed tokens' logits
                out = torch.einsum("ch,ckh->ck", hidden[picks], head.weight[ids])
                return out + head.bias[ids] if head.bias is not None else out
            return self._allowed_only(micro, where, targets, temperature, logp, entropy, logits_at, out=allowed_out)
        logits = self._completion_logits(micro, where)
        logp = target_logprobs(logits, targets, temperature)
        if entropy_grad:
            entropy = logits_entropy(logits, temperature)
        else:
            with torch.no_grad():
                entropy = logits_entropy(logits.detach(), temperature)
        return self._allowed_only(micro, where, targets, temperature, logp, entropy,
                                  lambda picks, ids: logits[picks].gather(1, ids), detach_entropy=not entropy_grad,
                                  out=allowed_out)

    def _allowed_only(self, micro: TokenBatch, where: tuple[Tensor, Tensor], targets: Tensor, temperature: Tensor,
                      logp: Tensor, entropy: Tensor, logits_at, detach_entropy: bool = False,
                      out: dict | None = None) -> tuple[Tensor, Tensor]:
        """``(logp, entropy)`` with the tokens drawn among a few (``micro.allowed``, the legal moves' answers)
        scored as the backend drew them: the softmax of their logits at the temperature, renormalised over
        the allowed ids (one allowed id: log-prob 0, no gradient). ``logits_at(picks, ids)`` gives the logits
        ``[C, K]`` of ids ``[C, K]`` at the positions ``picks`` of ``where``. ``out`` (if given) gets
        ``picks`` and ``logp``, the whole renormalised distributions ``[C, K]`` (``-inf`` on padding), in the
        order of ``micro.allowed``'s ids."""
        if not micro.allowed:
            return logp, entropy
        index = {rc: i for i, rc in enumerate(zip(where[0].tolist(), where[1].tolist(), strict=True))}
        kept = [(index[(r, c)], ids) for r, c, ids in micro.allowed if (r, c) in index]
        if not kept:
            return logp, entropy
        picks = torch.tensor([i for i, _ in kept], device=logp.device)
        width = max(len(ids) for _, ids in kept)
        ids = torch.tensor([list(a) + [a[0]] * (width - len(a)) for _, a in kept], device=logp.device)
        valid = torch.tensor([[j < len(a) for j in range(width)] for _, a in kept], device=logp.device)
        scores = logits_at(picks, ids).float().masked_fill(~valid, -math.inf)  # padding: a masked duplicate
        found = (ids == targets[picks, None]).logical_and(valid)
        if not bool(found.any(-1).all()):
            raise ValueError("a step's sampled token is not among the tokens its sample says were allowed")
        at = found.float().argmax(-1)
        allowed_logp = target_logprobs(scores, at, temperature[picks])
        allowed_entropy = logits_entropy(scores, temperature[picks])
        if out is not None:
            out["picks"] = picks
            out["logp"] = torch.log_softmax(scores / temperature[picks, None], dim=-1)
        if detach_entropy:
            allowed_entropy = allowed_entropy.detach()
        return logp.index_put((picks,), allowed_logp), entropy.index_put((picks,), allowed_entropy.to(entropy.dtype))

    def _forward_inputs(self, micro: TokenBatch, where: tuple[Tensor, Tensor]) -> tuple[dict, Tensor, Tensor]:
        """The model's keyword arguments for ``micro`` and where its positions ``where`` are in the
        output: ``(kwargs, rows, columns)``. Buckets: the padded batch as it is. Packed: one row of
        all its steps, position ids restarting per step, no attention mask (see
        :func:`~unstable.learners.batching.pack_rows`)."""
        input_ids = micro.input_ids.to(self.device)
        attention_mask = micro.attention_mask.to(self.device)
        rows, cols = where
        if not self.packed:
            return {"input_ids": input_ids, "attention_mask": attention_mask}, rows, cols
        ids, positions, offsets = pack_rows(attention_mask, input_ids)
        return {"input_ids": ids, "position_ids": positions}, torch.zeros_like(rows), offsets[rows] + cols

    def _hidden_at(self, micro: TokenBatch, where: tuple[Tensor, Tensor]) -> Tensor:
        """The final hidden states ``[N, H]`` at the positions ``where`` of ``micro`` (no LM head)."""
        kwargs, rows, cols = self._forward_inputs(micro, where)
        with self._lora_compute():
            hidden = mu.decoder_body(self.model)(**kwargs, use_cache=False).last_hidden_state
        return hidden[rows, cols]

    def _completion_logits(self, micro: TokenBatch, where: tuple[Tensor, Tensor]) -> Tensor:
        """Logits ``[N, V]`` at the positions ``where = (rows, columns)`` of ``micro`` only.

        A forward pre-hook hands the LM head just those hidden states, so prompt and padding
        positions never reach the vocabulary projection (whatever the model does after its head,
        such as a logit soft-cap, still runs). A model that computes its logits without calling
        its output-embedding module gets them cut with ``logits_to_keep`` and indexed instead.
        """
        kwargs, rows, cols = self._forward_inputs(micro, where)
        width = kwargs["input_ids"].shape[1]
        keep = width - int(cols.min()) if len(cols) else 1  # logits_to_keep: from the first predicting position
        offset = width - keep if self._logits_to_keep else 0  # column of the first hidden state kept
        selected: list[bool] = []

        def select(_module: nn.Module, args: tuple) -> tuple:
            selected.append(True)
            return (args[0][rows, cols - offset].unsqueeze(0), *args[1:])

        if self._logits_to_keep:
            kwargs["logits_to_keep"] = keep
        handle = self.model.get_output_embeddings().register_forward_pre_hook(select)
        try:
            with self._lora_compute():
                logits = self.model(**kwargs, use_cache=False).logits
        finally:
            handle.remove()
        return logits[0] if selected else logits[rows, cols - offset]

    @torch.no_grad()
    def _logprobs_no_grad(self, steps: Sequence[Step], reference: bool = False, with_allowed: bool = False) -> list:
        """Each step's completion-token log-probs under the current policy, or the reference policy
        (``reference_adapter``, else the base model with the adapter disabled), on the CPU; cut into
        passes as the update cuts them, so the first ratio of an update is exactly 1. ``with_allowed``:
        each step's ``(log-probs, {target column: whole distribution})``, the distributions over the tokens
        at the positions where its answer was drawn among a few."""
        cfg = self.config
        out: list = [torch.empty(0)] * len(steps)
        for idx in self.micro_batches(steps):
            micro = collate([steps[i] for i in idx], cfg.max_train_len, self.pad_id)
            mask = micro.target_mask
            where = tuple(w.to(self.device) for w in mask.nonzero(as_tuple=True))
            allowed: dict = {}
            with self._reference_policy() if reference else nullcontext():
                logp = self._scored_logprobs(micro, where, allowed_out=allowed if with_allowed else None)[0].cpu()
            for i, values in zip(idx, logp.split(mask.sum(dim=1).tolist()), strict=True):  # row-major
                out[i] = (values, {}) if with_allowed else values
            if allowed:
                picks = allowed["picks"]
                for r, c, dist in zip(where[0][picks].tolist(), where[1][picks].tolist(), allowed["logp"].cpu(),
                                      strict=True):
                    out[idx[r]][1][c] = dist
        return out

    def _reference_policy(self):
        """Context in which the model is the KL reference."""
        if self.config.reference_adapter is None and self.config.magnet_every is None:
            return self.model.disable_adapter()
        return self._adapter(REFERENCE_ADAPTER)

    @contextmanager
    def _adapter(self, name: str) -> Iterator[None]:
        """Make ``name`` the active adapter. Forward *and* backward must run inside: non-reentrant
        gradient checkpointing re-runs the forward with whatever adapter is active at backward."""
        self.model.set_adapter(name)
        try:
            yield
        finally:
            self.model.set_adapter(mu.POLICY_ADAPTER)


def _unpack(values: Tensor, where: tuple[Tensor, Tensor], shape: torch.Size) -> Tensor:
    """``values`` (one per position of ``where``) laid out in a zero ``[B, T]`` tensor, keeping the graph."""
    return torch.zeros(shape, dtype=values.dtype, device=values.device).index_put(where, values)
