"""The policy protocol: what sits in a seat and turns an observation into a move."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from unstable.records import PolicyRef


@dataclass(frozen=True, slots=True)
class TurnContext:
    """What a policy may look at when it is asked to move.

    ``env`` is the live TextArena env. Scripted baselines read legal moves from its state; LLM
    policies must only use ``observation``. ``rng`` is the seat's own generator, seeded from the
    game seed, so scripted play is reproducible even with many games interleaved.
    """

    env_id: str
    player_id: int
    observation: str
    turn_index: int
    env: Any
    rng: random.Random


@dataclass(frozen=True, slots=True)
class PolicyOutput:
    """A policy's answer for one turn (the turn loop adds env-side facts to make a ``Turn``)."""

    action: str
    format_ok: bool = True
    completion_text: str = ""
    prompt: str = ""
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    completion_logprobs: tuple[float, ...] = ()
    finish_reason: str = "stop"
    gen_seconds: float = 0.0


@runtime_checkable
class Policy(Protocol):
    """Anything with a ``ref`` and an async ``act``. Implementations must not mutate ``ctx.env``."""

    ref: PolicyRef

    async def act(self, ctx: TurnContext) -> PolicyOutput: ...
