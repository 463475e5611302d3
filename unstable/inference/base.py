"""The inference-backend protocol shared by the transformers and vLLM backends."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from unstable.records import Sample


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling settings. ``temperature == 0`` means greedy decoding.

    Defaults follow the seed's vLLM config (temperature 0.6, top_p 0.95); ``max_new_tokens``
    is the seed's ``max_generation_len`` (4096), which tiny CPU runs lower a lot.
    """

    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 4096
    legal_moves_only: bool = False
    """Model seats answer with one of the legal moves' canonical answers (``\\boxed{move}``), sampled
    token by token from the model's distribution renormalised over the tokens that continue one of them
    (:attr:`GenerationRequest.choices`): no answer the game rejects, and the learner trains on the same
    renormalised log-probs. Games need a legal-move reader (:mod:`unstable.games.legal_moves`)."""

    def __post_init__(self) -> None:
        if not (
            isinstance(self.temperature, int | float) and math.isfinite(self.temperature) and self.temperature >= 0
        ):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.legal_moves_only and self.top_p < 1:
            raise ValueError(f"legal_moves_only needs top_p=1 (got {self.top_p}): the nucleus of a distribution "
                             "renormalised over the legal answers is not modelled by the learners or the reading")

    @property
    def greedy(self) -> bool:
        """Whether these settings decode greedily (``temperature == 0``)."""
        return self.temperature == 0


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt to complete, with the LoRA adapter to use (``None`` = base weights).

    ``policy_version`` labels the weights (``PolicyRef.version``); the backend copies it into the
    :class:`~unstable.records.Sample` and does not otherwise use it. ``choices``: the completion must be
    one of these texts, each followed by a stop token; at each step the backend samples among the tokens
    that continue one of them, from the model's distribution renormalised over those tokens (the
    transformers backend; ``None``: free generation).
    """

    prompt: str
    adapter_path: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    policy_version: int | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class GenerationResult:
    """What came back: the :class:`~unstable.records.Sample` (tokens, log-probs, text, how they
    were sampled), which the policy, turn and step then hold by reference, plus serving facts
    that stay here: the adapter it was served with and the time spent queued and generating.
    """

    sample: Sample
    adapter_path: str | None = None
    queue_seconds: float = 0.0
    gen_seconds: float = 0.0


def make_sample(
    request: GenerationRequest,
    prompt_ids: tuple[int, ...],
    completion_ids: tuple[int, ...],
    completion_logprobs: tuple[float, ...],
    finish_reason: Literal["stop", "length"],
    text: str,
    allowed: tuple[tuple[int, ...], ...] = (),
) -> Sample:
    """The backend's :class:`~unstable.records.Sample` for ``request``: its sampling settings and version."""
    return Sample(
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        completion_logprobs=completion_logprobs,
        finish_reason=finish_reason,
        temperature=request.sampling.temperature,
        top_p=request.sampling.top_p,
        policy_version=request.policy_version,
        text=text,
        allowed=allowed,
    )


def allowed_next(choices: tuple[tuple[int, ...], ...], prefix: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The tokens that continue ``prefix`` into one of ``choices`` (token-id sequences), in first-seen order;
    empty when none does (the prefix left them or is complete)."""
    n = len(prefix)
    return tuple(dict.fromkeys(c[n] for c in choices if len(c) > n and tuple(c[:n]) == tuple(prefix)))


def allowed_path(choices: tuple[tuple[int, ...], ...], completion: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """:func:`allowed_next` at each token of ``completion`` (a completion drawn among ``choices``)."""
    return tuple(allowed_next(choices, completion[:t]) for t in range(len(completion)))


class InferenceUnavailableError(RuntimeError):
    """The inference server a request went to died or is restarting; the game using it is dropped."""


class InferenceDeadError(InferenceUnavailableError):
    """The inference server is gone for good (its restarts are used up): stop routing games to it."""


@runtime_checkable
class InferenceBackend(Protocol):
    """Serves many concurrent requests, batching them; LoRA adapters are chosen per request."""

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Complete ``request``, batched with the other requests in flight, and return its result."""
        ...

    def stats(self) -> dict[str, Any]:
        """Serving counters as plain numbers (``requests``, ``batches``, ``mean_batch_size``, ``queue_size``, ...)."""
        ...
