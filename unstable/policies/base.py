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


class PolicyError(RuntimeError):
    """The model or API behind a seat could not answer this turn: its game fails and is counted
    (``stage="policy"``), and the collector's failure budget stops a run where that keeps happening.

    Policies raise it, chained from the cause, for failures of what they call (an inference
    backend, an HTTP API). Anything else a policy raises (a prompt template's or an action
    extraction's error, a scripted policy's) is a bug: the turn loop lets it propagate and the
    run stops with its traceback instead of counting it game after game.
    """


@runtime_checkable
class Policy(Protocol):
    """Anything with a ``ref`` and an async ``act``. Implementations must not mutate ``ctx.env``;
    ``act`` raises :class:`PolicyError` when the model behind it fails (anything else is a bug)."""

    ref: PolicyRef

    async def act(self, ctx: TurnContext) -> PolicyOutput:
        """The move for the turn ``ctx`` describes; :class:`PolicyError` when the model behind the seat cannot
        answer."""
