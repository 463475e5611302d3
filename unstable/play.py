"""Play a model against an opponent for a number of games and summarise the results.

This is what ``unstable play`` (and, until training lands in it, ``unstable quickstart``) runs.
Seats alternate between games so both sides of an asymmetric game are covered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from unstable.evaluation import EvalJob, play_eval_games
from unstable.games.specs import EvalEnvSpec
from unstable.inference.base import SamplingParams
from unstable.records import FailedGame, GameRecord


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
    """Play ``games`` games of ``model_name`` (+ optional LoRA adapter) against ``opponent``, in this process.

    A thin front of the evaluation harness (:mod:`unstable.evaluation`), which ``unstable eval``
    uses with confidence intervals and per-seat results.
    """
    spec = EvalEnvSpec(env_id=env_id, num_players=2, prompt_template=prompt_template, fixed_opponent=opponent)
    sampling = sampling or SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=64)
    job = EvalJob(model_name, spec.env_id, opponent, adapter_path, spec.num_players, prompt_template,
                  sampling, sampling, seed, max_concurrent)
    results = play_eval_games(job, games, num_workers=1, on_done=on_done)
    return results, summarise(results, job.model_ref.uid)
