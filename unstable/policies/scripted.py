"""Scripted baselines: policies that play from the legal moves of the live TextArena env.

A random legal-move player is the floor every learner should beat, and a cheap, reproducible
opponent for tests of the turn loop. The per-game legal-move readers, and which baselines each game
has, are in :mod:`unstable.games.legal_moves`; the stronger baselines (``heuristic``, ``optimal``,
``nash``) in :mod:`unstable.policies.baselines`.
"""

from __future__ import annotations

from unstable.games.envs import base_name
from unstable.games.legal_moves import (  # noqa: F401  (re-exported: where scripted policies were looked up)
    SCRIPTED_BASELINES,
    SCRIPTED_POLICIES,
    SUPPORTED_GAMES,
    NoScriptedBaselineError,
    check_scripted_opponent,
    has_scripted_baseline,
    legal_moves,
    scripted_baselines,
)
from unstable.policies.base import Policy, PolicyOutput, TurnContext
from unstable.policies.baselines import CHOOSERS, ScriptedPolicy
from unstable.records import PolicyRef


class RandomLegalPolicy:
    """Plays a uniformly random legal move, drawn from the seat's own ``ctx.rng``.

    Never the global ``random``: TextArena reseeds it on every ``reset`` and games are interleaved
    in one process, so only the per-seat generator makes scripted play reproducible.
    """

    def __init__(self, uid: str = "random"):
        self.ref = PolicyRef(uid=uid, kind="scripted")

    async def act(self, ctx: TurnContext) -> PolicyOutput:
        """A legal move drawn uniformly from ``ctx.rng``, as both the action and the completion text."""
        moves = legal_moves(ctx.env_id, ctx.env, ctx.player_id)
        move = ctx.rng.choice(moves)
        return PolicyOutput(action=move, format_ok=True, completion_text=move)


def make_scripted_policy(name: str, env_id: str) -> Policy:
    """Build the scripted policy ``name`` for ``env_id``; fails early if either is unsupported."""
    check_scripted_opponent(name, env_id)
    if name == "random":
        return RandomLegalPolicy(uid=name)
    return ScriptedPolicy(uid=name, choose=CHOOSERS[base_name(env_id), name])
