"""Turn :class:`~unstable.records.Step` records into padded token tensors, exactly as sampled.

No text is re-tokenised: ``input_ids = prompt_ids + completion_ids``. Sequences are right-padded
(real tokens never attend to padding in a causal model, so padding cannot change their log-probs)
and cut to their first ``max_train_len`` tokens. :func:`micro_batches` groups steps of similar
length under a token budget, so little of a forward pass is padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from unstable.records import Step


@dataclass(frozen=True, slots=True)
class TokenBatch:
    """A right-padded micro-batch.

    ``completion_mask[b, t]`` is true where ``input_ids[b, t]`` is a kept completion token (the
    loss targets); prompt and padding positions are false. ``prompt_lens`` are after truncation.
    ``behaviour_logp[b, t]`` is the log-prob the backend recorded for that token when it sampled it
    (0 elsewhere); ``temperature[b]`` is the temperature row ``b`` was sampled at (1 for greedy
    samples, whose recorded log-probs are the raw model's). ``allowed`` lists the kept completion tokens
    that were drawn among a few (:attr:`~unstable.records.Sample.allowed`, the legal moves' answers) by
    their ``target_mask`` position and the token ids allowed there.
    """

    input_ids: Tensor  # [B, T] long
    attention_mask: Tensor  # [B, T] long
    completion_mask: Tensor  # [B, T] bool
    prompt_lens: Tensor  # [B] long
    num_truncated: int
    behaviour_logp: Tensor  # [B, T] float32
    temperature: Tensor  # [B] float32
    allowed: tuple[tuple[int, int, tuple[int, ...]], ...] = ()  # (row, column of target_mask, token ids)

    def scatter(self, rows: Sequence[Tensor]) -> Tensor:
        """Per-row values of the kept completion tokens (``rows[b]`` has one per token) laid out
        ``[B, T]`` like ``input_ids`` (0 at prompt and padding positions)."""
        out = torch.zeros(self.completion_mask.shape, dtype=torch.float32)
        for b, values in enumerate(rows):
            out[b, self.completion_mask[b]] = values.float()
        return out

    def gather(self, values: Tensor) -> list[Tensor]:
        """The inverse of :meth:`scatter`: each row's values at its kept completion tokens."""
        return [values[b, self.completion_mask[b]].detach().cpu() for b in range(values.shape[0])]

    @property
    def target_mask(self) -> Tensor:
        """``[B, T - 1]``, the layout of :func:`~unstable.algorithms.token_logprobs`' output: true at
        column ``t`` when the token ``input_ids[b, t + 1]`` that position ``t`` predicts is a kept
        completion token."""
        return self.completion_mask[:, 1:]

    @property
    def first_target(self) -> int:
        """Earliest position holding a completion token in any row (>= 1)."""
        return int(self.prompt_lens.min().clamp(min=1))


def validate_steps(steps: Sequence[Step], vocab_size: int) -> None:
    """Fail fast on records a learner cannot train on (before any forward pass)."""
    if not steps:
        raise ValueError("update() needs at least one Step")
    for step in steps:
        where = f"step ({step.env_id} game {step.game_id} player {step.player_id} turn {step.turn_index})"
        if not step.prompt_ids:
            raise ValueError(f"{where} has no prompt_ids; learners train on the sampled token ids")
        ids = (*step.prompt_ids, *step.completion_ids)
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise ValueError(f"{where} has token ids outside [0, {vocab_size}); was it sampled with another tokenizer?")


def kept_completion_tokens(step: Step, max_train_len: int | None) -> int:
    """Completion tokens of ``step`` that :func:`collate` keeps after cutting ``prompt + completion``
    to its first ``max_train_len`` tokens (what a learner trains on)."""
    return max(kept_length(step, max_train_len) - len(step.prompt_ids), 0)


def collate(steps: Sequence[Step], max_train_len: int | None, pad_id: int) -> TokenBatch:
    """Pad ``prompt_ids + completion_ids`` of each step into a :class:`TokenBatch` (on CPU)."""
    rows = []
    num_truncated = 0
    for step in steps:
        ids = [*step.prompt_ids, *step.completion_ids]
        if max_train_len is not None and len(ids) > max_train_len:
            ids = ids[:max_train_len]
            num_truncated += 1
        rows.append(ids)
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    completion_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    prompt_lens = torch.zeros(len(rows), dtype=torch.long)
    behaviour_logp = torch.zeros((len(rows), width), dtype=torch.float32)
    temperature = torch.ones(len(rows), dtype=torch.float32)
    allowed: list[tuple[int, int, tuple[int, ...]]] = []
    for b, (ids, step) in enumerate(zip(rows, steps, strict=True)):
        n = len(ids)
        p = min(len(step.prompt_ids), n)
        input_ids[b, :n] = torch.tensor(ids, dtype=torch.long)
        attention_mask[b, :n] = 1
        completion_mask[b, p:n] = True
        prompt_lens[b] = p
        if n > p and step.completion_logprobs:
            behaviour_logp[b, p:n] = torch.tensor(step.completion_logprobs[: n - p], dtype=torch.float32)
        if step.sample is not None and step.sample.temperature > 0:
            temperature[b] = step.sample.temperature
        if step.sample is not None and step.sample.allowed:  # completion token k is predicted at column p + k - 1
            allowed += [(b, p + k - 1, ids_k) for k, ids_k in enumerate(step.sample.allowed[: n - p])]
    return TokenBatch(input_ids, attention_mask, completion_mask, prompt_lens, num_truncated, behaviour_logp,
                      temperature, tuple(allowed))


def collate_prompts(steps: Sequence[Step], max_train_len: int | None, pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-padded prompts only (for the critic): ``(input_ids, attention_mask)``."""
    rows = [list(s.prompt_ids[:max_train_len] if max_train_len else s.prompt_ids) for s in steps]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, ids in enumerate(rows):
        input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[b, : len(ids)] = 1
    return input_ids, attention_mask


def kept_length(step: Step, max_train_len: int | None) -> int:
    """Tokens of ``step`` that :func:`collate` keeps (``prompt + completion`` cut to ``max_train_len``)."""
    total = len(step.prompt_ids) + len(step.completion_ids)
    return total if max_train_len is None else min(total, max_train_len)


MAX_PADDING = 0.1
"""A micro-batch closes before padding would make up more than this share of its tokens."""


def micro_batches(steps: Sequence[Step], size: int, max_train_len: int | None = None) -> list[list[int]]:
    """Indices of ``steps`` cut into micro-batches of similar length, each padded to its own longest.

    The steps are sorted by length and taken in turn; a micro-batch closes before the next step
    would take it past ``size`` times the longest step's tokens, padding included (so no pass is
    larger than a micro-batch of ``size`` of the longest steps, what ``mini_batch_size`` bounds),
    or make padding more than :data:`MAX_PADDING` of it. Short steps thus share a pass with more of
    their kind, and a batch of mixed lengths is not padded to its longest step. The losses divide
    by whole-batch normalisers, so how the steps are cut changes neither the loss nor the gradient,
    only the padding and the number of passes.
    """
    if size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {size}")
    lengths = [kept_length(s, max_train_len) for s in steps]
    budget = size * max(lengths, default=0)
    order = sorted(range(len(steps)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0
    for i in order:  # ascending, so lengths[i] is the padded width once step i joins
        padded = (len(current) + 1) * lengths[i]
        if current and (padded > budget or real + lengths[i] < (1 - MAX_PADDING) * padded):
            batches.append(current)
            current, real = [], 0
        current.append(i)
        real += lengths[i]
    if current:
        batches.append(current)
    return batches


def packed_micro_batches(steps: Sequence[Step], max_tokens: int, max_train_len: int | None = None) -> list[list[int]]:
    """Indices of ``steps`` cut into micro-batches of at most ``max_tokens`` tokens each, to be
    packed into one row (:func:`pack_rows`): no padding, so only the token count matters.

    First-fit decreasing: the longest step first, each into the first micro-batch it fits in; a
    step longer than ``max_tokens`` goes alone. Indices within a micro-batch are in batch order.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens_per_micro_batch must be >= 1, got {max_tokens}")
    lengths = [kept_length(s, max_train_len) for s in steps]
    batches: list[list[int]] = []
    used: list[int] = []
    for i in sorted(range(len(steps)), key=lambda j: (-lengths[j], j)):
        for b, total in enumerate(used):
            if total + lengths[i] <= max_tokens:
                batches[b].append(i)
                used[b] += lengths[i]
                break
        else:
            batches.append([i])
            used.append(lengths[i])
    return [sorted(b) for b in batches]


def pack_rows(attention_mask: Tensor, input_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The rows of a right-padded batch concatenated into one row without their padding:
    ``(input_ids [1, S], position_ids [1, S], offsets [B])``, where row ``b``'s token ``t`` is at
    ``offsets[b] + t``. The position ids restart at 0 for every row: with no attention mask,
    transformers reads that as packed sequences and builds a block-diagonal causal mask (SDPA,
    eager) or variable-length attention (flash attention), so no row attends to another
    (``tests/test_packed_learner.py`` checks it on the installed version)."""
    lengths = attention_mask.sum(dim=1)
    keep = attention_mask.bool()
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand_as(attention_mask)
    offsets = torch.cumsum(lengths, 0) - lengths
    return input_ids[keep].unsqueeze(0), positions[keep].unsqueeze(0), offsets
