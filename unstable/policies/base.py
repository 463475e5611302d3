"""The policy protocol: what sits in a seat and turns an observation into a move."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from unstable.records import PolicyRef, Sample


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
    """A policy's answer for one turn (the turn loop adds env-side facts to make a ``Turn``).

    ``sample`` is the backend's record of the completion, passed on as it is (``None`` for
    scripted and API policies, which sample no tokens).
    """

    action: str
    format_ok: bool = True
    completion_text: str = ""
    prompt: str = ""
    sample: Sample | None = None
    gen_seconds: float = 0.0


@runtime_checkable
class Policy(Protocol):
    """Anything with a ``ref`` and an async ``act``. Implementations must not mutate ``ctx.env``."""

    ref: PolicyRef

    async def act(self, ctx: TurnContext) -> PolicyOutput: ...
