"""Play a model against an opponent for a number of games and summarise the results.

This is what ``unstable play`` (and, until training lands in it, ``unstable quickstart``) runs.
Seats alternate between games so both sides of an asymmetric game are covered.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from unstable.games.rollout import play_games
from unstable.games.specs import EvalEnvSpec
from unstable.inference.base import SamplingParams
from unstable.policies.llm import LLMPolicy
from unstable.policies.scripted import SCRIPTED_POLICIES, make_scripted_policy
from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef


@dataclass(frozen=True)
class MatchSummary:
    games: int
    wins: int
    draws: int
    losses: int
    failed: int
    invalid_moves: int  # games the model lost by an invalid move
    format_ok_rate: float

    @property
    def win_rate(self) -> float:
        return self.wins / self.games if self.games else 0.0


def summarise(results: list[GameRecord | FailedGame], model_uid: str) -> MatchSummary:
    counts: Counter[str] = Counter()
    invalid = 0
    fmt = []
    for res in results:
        if isinstance(res, FailedGame):
            counts["failed"] += 1
            continue
        pid = next(a.player_id for a in res.spec.agents if a.policy.uid == model_uid)
        counts[res.outcome(pid)] += 1
        invalid += res.invalid_player == pid
        fmt.extend(t.format_ok for t in res.turns_of(pid))
    played = len(results) - counts["failed"]
    return MatchSummary(
        played,
        counts["win"],
        counts["draw"],
        counts["loss"],
        counts["failed"],
        invalid,
        sum(fmt) / len(fmt) if fmt else 0.0,
    )


def play_vs_opponent(
    model_name: str,
    env_id: str = "TicTacToe-v0-train",
    *,
    games: int = 20,
    opponent: str = "random",
    adapter_path: str | None = None,
    prompt_template: str = "qwen3-zs",
    sampling: SamplingParams | None = None,
    max_concurrent: int = 32,
    seed: int = 0,
    on_done: Callable[[GameRecord | FailedGame], None] | None = None,
) -> tuple[list[GameRecord | FailedGame], MatchSummary]:
    """Play ``games`` games of ``model_name`` (+ optional LoRA adapter) against a scripted opponent."""
    from unstable.inference.transformers_backend import TransformersBackend

    if opponent not in SCRIPTED_POLICIES:
        raise ValueError(f"opponent must be one of {list(SCRIPTED_POLICIES)} for now, got {opponent!r}")
    spec = EvalEnvSpec(env_id=env_id, num_players=2, prompt_template=prompt_template, fixed_opponent=opponent)
    backend = TransformersBackend(model_name)
    model_ref = PolicyRef(uid="model", kind="checkpoint", adapter_path=adapter_path, version=None)
    opp_ref = PolicyRef(uid=opponent, kind="scripted")
    sampling = sampling or SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=64)
    model = LLMPolicy(backend, model_ref, prompt_template=prompt_template, sampling=sampling)
    scripted = make_scripted_policy(opponent, env_id)

    def game_spec(i: int) -> GameSpec:
        model_seat = i % 2
        agents = (
            AgentSpec(model_seat, model_ref, prompt_template=prompt_template),
            AgentSpec(1 - model_seat, opp_ref),
        )
        return GameSpec(
            game_id=i,
            env_id=env_id,
            seed=seed + i,
            agents=tuple(sorted(agents, key=lambda a: a.player_id)),
            is_eval=True,
            error_allowance=spec.error_allowance,
            eval_player_id=model_seat,
        )

    def policies(gs: GameSpec):
        return {a.player_id: model if a.policy.uid == model_ref.uid else scripted for a in gs.agents}

    try:
        results = asyncio.run(
            play_games([game_spec(i) for i in range(games)], policies, max_concurrent=max_concurrent, on_done=on_done)
        )
    finally:
        backend.close()
    return results, summarise(results, model_ref.uid)
