"""The policy of an LLM seat, read: the probability of each legal move in a game state.

A seat is a model (+ LoRA adapter), a prompt template and the sampling settings it plays with.
Two readings:

* **exact** (:meth:`PolicyReader.read_exact`), for direct-answer templates: every legal move's
  completion is scored with teacher forcing, exactly as the inference backend samples it. The
  completion of a move is the token sequence generation produces for it: the warm start's answer
  ``\\boxed{4}`` (:func:`unstable.games.extraction.answer_text`, tokenized as the warm start does) and
  then one of the tokens that stop generation (the backend's ``eos_ids``: ``<|im_end|>`` and
  ``<|endoftext|>`` for the tiny models). Each token's distribution is the backend's: the logits
  divided by the temperature (HF's ``TemperatureLogitsWarper``), then its top-p nucleus
  (``TopPLogitsWarper``), then a softmax; greedy decoding (temperature 0) puts probability 1 on
  the argmax. One prompt pass is shared by all of a state's candidate completions (its key/value
  cache is repeated for them), and many states go in one batch.
* **sampled** (:meth:`PolicyReader.read_sampled`), for templates that let the model reason before it
  answers: ``K`` completions are generated through the same backend and extraction a game uses,
  and each move's frequency is reported with its 95% Wilson interval. It is an estimate.

``other`` is the mass of everything else: non-legal answers, answers with no box, and, in the exact
reading, any spelling of a legal move other than the canonical one (a space inside the box, another
tokenization of the same text, reasoning before the box). In a game each of these is sent as a move
the game rejects, or as a legal move the reading did not count, so ``other`` is an upper bound on
the invalid-move mass; the sampled reading measures how much of it extracts to legal moves. With
today's eval rules (``error_allowance = 0``, the default of every spec) an invalid move loses the
game at once, so the exploitability solvers count ``other`` as a loss.

With ``sampling.legal_moves_only`` both readings read the policy the backend then plays: each answer
drawn token by token among the tokens that continue a legal move's answer, stop token included (the
model's softmax renormalised over them at the temperature), so ``other`` is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from unstable.eval.intervals import wilson_interval
from unstable.games.extraction import answer_text, get_action_extraction
from unstable.inference.base import GenerationRequest, SamplingParams, allowed_next
from unstable.inference.transformers_backend import TransformersBackend

DIRECT_ANSWER_TEMPLATES = frozenset({"qwen3-board", "qwen3-grid", "qwen3-hand", "qwen3-spiel", "qwen3-task"})
"""Built-in templates that ask for the answer alone ("Answer in \\boxed{}."): read exactly by default.
The others ask the model to reason first and are read by sampling."""

# Generation settings that would change the sampled distribution beyond temperature and top-p.
_UNSUPPORTED_GENERATION = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_length": 0,
                           "min_new_tokens": None, "bad_words_ids": None, "suppress_tokens": None,
                           "begin_suppress_tokens": None, "sequence_bias": None, "min_p": None,
                           "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}


def default_method(prompt_template: str) -> str:
    """``"exact"`` for a direct-answer template (:data:`DIRECT_ANSWER_TEMPLATES`), else ``"sampled"``."""
    return "exact" if prompt_template in DIRECT_ANSWER_TEMPLATES else "sampled"


@dataclass(frozen=True, slots=True)
class MoveDistribution:
    """A seat's policy in one state: ``probs`` (legal move -> probability) and ``other`` (the rest, see the
    module docstring). ``method`` is ``"exact"`` or ``"sampled"``; a sampled reading has ``samples`` and
    ``intervals`` (move, and ``"other"``, -> 95% Wilson interval)."""

    probs: dict[str, float]
    other: float
    method: str
    samples: int = 0
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    other_legal: float = 0.0  # sampled: share of samples that extracted to a legal move in a non-canonical form
    canonical: dict[str, float] = field(default_factory=dict)  # sampled: share of each move's canonical completion


@dataclass(frozen=True, slots=True)
class _Item:
    prompt_ids: list[int]
    candidates: list[list[int]]  # answer token ids of each move, without the stop token
    max_new_tokens: int


class PolicyReader:
    """Reads the policy of ``adapter`` (``None``: the base weights) on ``backend``'s model at ``sampling``
    (see the module docstring); ``batch_rows`` candidate completions are scored per forward pass."""

    def __init__(self, backend: TransformersBackend, adapter: str | None, sampling: SamplingParams, *,
                 action_extraction: str = "default", batch_rows: int = 256):
        self.backend = backend
        self.adapter = adapter
        self.sampling = sampling
        self.extract = get_action_extraction(action_extraction)
        self.batch_rows = batch_rows
        self._answers: dict[str, list[int]] = {}
        _check_generation_config(backend)

    # ------------------------------------------------------------------ exact
    def answer_ids(self, move: str) -> list[int]:
        """The canonical completion of ``move`` (without the stop token), checked to extract back to it."""
        if move not in self._answers:
            tok = self.backend.tokenizer
            ids = tok(answer_text(move), add_special_tokens=False)["input_ids"]
            if self.extract(tok.decode(ids)).action != move:
                raise ValueError(f"the answer {tok.decode(ids)!r} does not extract to the move {move!r}")
            self._answers[move] = ids
        return self._answers[move]

    def read_exact(self, prompts: Sequence[str], moves: Sequence[Sequence[str]]) -> list[MoveDistribution]:
        """The exact distribution of each ``prompts[i]`` over its legal ``moves[i]``."""
        items = []
        for prompt, legal in zip(prompts, moves, strict=True):
            ids, room = self.backend._encode(prompt, self.sampling.max_new_tokens)
            if self.sampling.legal_moves_only:  # the answers as the backend draws them, stop token included
                candidates = [list(self.backend.choice_ids(answer_text(m))) for m in legal]
            else:
                candidates = [self.answer_ids(m) for m in legal]
            items.append(_Item(ids, candidates, room))
        logps: list[list[float]] = []
        chunk: list[_Item] = []
        for item in items:
            if chunk and sum(len(i.candidates) for i in chunk) + len(item.candidates) > self.batch_rows:
                logps.extend(self._score(chunk))
                chunk = []
            chunk.append(item)
        if chunk:
            logps.extend(self._score(chunk))
        out = []
        for legal, lp in zip(moves, logps, strict=True):
            probs = {m: math.exp(v) for m, v in zip(legal, lp, strict=True)}
            out.append(MoveDistribution(probs, max(0.0, 1.0 - sum(probs.values())), "exact"))
        return out

    def _step_logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``[N, V]`` of the next token as the backend samples it from ``logits`` ``[N, V]``."""
        from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

        logits = logits.float()
        if self.sampling.greedy:  # the argmax has probability 1 (torch's first index on ties, as generate)
            best = logits.argmax(-1, keepdim=True)
            return torch.full_like(logits, -math.inf).scatter(-1, best, 0.0)
        scores = TemperatureLogitsWarper(self.sampling.temperature)(None, logits)
        if self.sampling.top_p < 1.0:
            scores = TopPLogitsWarper(self.sampling.top_p)(None, scores)
        return torch.log_softmax(scores, dim=-1)

    @torch.no_grad()
    def _score(self, items: list[_Item]) -> list[list[float]]:
        """Log-probability of every candidate completion (stop token included) of ``items``."""
        backend = self.backend
        device = backend.device
        width = max(len(i.prompt_ids) for i in items)
        ids = torch.full((len(items), width), backend.pad_id, dtype=torch.long)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        for r, item in enumerate(items):  # left padding, as the backend's generate
            ids[r, width - len(item.prompt_ids):] = torch.tensor(item.prompt_ids)
            mask[r, width - len(item.prompt_ids):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = backend.forward(self.adapter, input_ids=ids.to(device), attention_mask=mask.to(device),
                              position_ids=positions.to(device), use_cache=True, logits_to_keep=1)
        constrained = self.sampling.legal_moves_only  # raw logits: renormalised over the allowed tokens below
        step = (lambda logits: logits.float()) if constrained else self._step_logprobs
        first = step(out.logits[:, -1]).cpu()  # [P, V]: the first completion token
        rows = [(p, c) for p, item in enumerate(items) for c in range(len(item.candidates))]
        cands = [items[p].candidates[c] for p, c in rows]
        length = max(len(c) for c in cands)
        owner = torch.tensor([p for p, _ in rows])
        cache = out.past_key_values
        cache.batch_select_indices(owner.to(device))  # one copy of each prompt's cache per candidate
        tokens = torch.full((len(rows), length), backend.pad_id, dtype=torch.long)
        cand_mask = torch.zeros((len(rows), length), dtype=torch.long)
        for r, cand in enumerate(cands):
            tokens[r, :len(cand)] = torch.tensor(cand)
            cand_mask[r, :len(cand)] = 1
        lengths = mask.sum(-1)[owner]
        cont_pos = lengths[:, None] + torch.arange(length)[None, :]
        full_mask = torch.cat([mask[owner], cand_mask], dim=1)
        cont = backend.forward(self.adapter, input_ids=tokens.to(device), attention_mask=full_mask.to(device),
                               position_ids=cont_pos.to(device), past_key_values=cache, use_cache=True)
        later = step(cont.logits.reshape(-1, cont.logits.shape[-1])).cpu()
        later = later.reshape(len(rows), length, -1)  # later[r, t]: the token after candidate token t
        eos = sorted(backend.eos_ids)
        scores: list[list[float]] = [[] for _ in items]
        for r, ((p, _), cand) in enumerate(zip(rows, cands, strict=True)):
            room = items[p].max_new_tokens
            if len(cand) > room:  # generation stops before the answer is complete
                scores[p].append(-math.inf)
                continue
            if constrained:
                choices = tuple(tuple(c) for c in items[p].candidates)
                scores[p].append(sum(self._allowed_logprob(first[p] if t == 0 else later[r, t - 1],
                                                           allowed_next(choices, cand[:t]), cand[t])
                                     for t in range(len(cand))))
                continue
            total = float(first[p, cand[0]]) + sum(float(later[r, t - 1, cand[t]]) for t in range(1, len(cand)))
            if len(cand) < room:  # a stop token must follow; at exactly ``room`` tokens generation stops anyway
                total += float(torch.logsumexp(later[r, len(cand) - 1, eos], dim=-1))
            scores[p].append(total)
        return scores

    def _allowed_logprob(self, logits: torch.Tensor, allowed: tuple[int, ...], token: int) -> float:
        """Log-prob of ``token`` drawn from ``logits`` renormalised over ``allowed`` at the reading's temperature
        (greedy: 0 for the allowed argmax, else -inf), as the backend's choice mask then its warpers draw it."""
        if len(allowed) == 1:
            return 0.0
        scaled = logits[list(allowed)].float()
        at = allowed.index(token)
        if self.sampling.greedy:
            return 0.0 if int(scaled.argmax()) == at else -math.inf
        scaled = scaled / self.sampling.temperature
        return float(scaled[at] - torch.logsumexp(scaled, dim=-1))

    # ------------------------------------------------------------------ sampled
    def read_sampled(self, prompt: str, moves: Sequence[str], samples: int) -> MoveDistribution:
        """Estimate the distribution over ``moves`` from ``samples`` completions generated by the backend and
        extracted as in a game. ``probs`` counts moves whatever their spelling; ``other_legal`` is the
        share that reached a legal move in a non-canonical spelling (the exact reading's blind spot)."""
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        choices = tuple(answer_text(m) for m in moves) if self.sampling.legal_moves_only else None
        request = GenerationRequest(prompt, self.adapter, self.sampling, choices=choices)
        counts = dict.fromkeys(moves, 0)
        canonical = dict.fromkeys(moves, 0)
        size = self.backend.config.max_batch_size
        for start in range(0, samples, size):
            for result in self.backend.generate_batch([request] * min(size, samples - start)):
                action = self.extract(result.sample.text).action
                if action in counts:
                    counts[action] += 1
                    canonical[action] += self._is_canonical(result.sample, action)
        other = samples - sum(counts.values())
        intervals = {m: wilson_interval(c, samples) for m, c in counts.items()} | {
            "other": wilson_interval(other, samples)}
        noncanonical = sum(counts.values()) - sum(canonical.values())
        return MoveDistribution({m: c / samples for m, c in counts.items()}, other / samples, "sampled", samples,
                                intervals, noncanonical / samples, {m: c / samples for m, c in canonical.items()})

    def _is_canonical(self, sample, move: str) -> bool:
        """Whether ``sample`` is ``move``'s canonical completion (then a stop token, unless cut at the limit)."""
        if self.sampling.legal_moves_only:
            return tuple(sample.completion_ids) == self.backend.choice_ids(answer_text(move))
        ids = list(sample.completion_ids)
        if sample.finish_reason == "stop":
            ids = ids[:-1]
        return ids == self.answer_ids(move)


def _check_generation_config(backend: TransformersBackend) -> None:
    """Refuse a model whose generation config adds logits processors the reading does not model."""
    config = backend.model.generation_config
    for name, neutral in _UNSUPPORTED_GENERATION.items():
        value = getattr(config, name, neutral)
        if value not in (neutral, None) and not (neutral is not None and value == neutral):
            raise ValueError(f"the model's generation_config sets {name}={value!r}, which changes the sampled "
                             "distribution; the policy reading models temperature and top-p only")
