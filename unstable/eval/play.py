"""Play a model against an opponent for a number of games and summarise the results.

This is what ``unstable play`` runs.
Seats alternate between games so both sides of an asymmetric game are covered.
"""

from __future__ import annotations

from collections.abc import Callable

from unstable.eval.evaluation import EvalJob, OutcomeStats, play_eval_games
from unstable.games.specs import EvalEnvSpec
from unstable.inference.base import SamplingParams
from unstable.records import FailedGame, GameRecord
from unstable.utils.checks import check_int


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
) -> tuple[list[GameRecord | FailedGame], OutcomeStats]:
    """Play ``games`` games of ``model_name`` (+ optional LoRA adapter) against ``opponent``, in this process.

    A thin front of the evaluation harness (:mod:`unstable.eval.evaluation`), which ``unstable eval``
    uses with confidence intervals and per-seat results. Returns every result (failed games
    included) and the model's :class:`~unstable.eval.evaluation.OutcomeStats` over the finished ones.
    """
    check_int("max_concurrent", max_concurrent, 1)  # not the inference backend's max_batch_size it becomes
    spec = EvalEnvSpec(env_id=env_id, num_players=2, prompt_template=prompt_template, fixed_opponent=opponent)
    sampling = sampling or SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=64)
    job = EvalJob(model_name, spec.env_id, opponent, adapter_path, spec.num_players, prompt_template,
                  sampling, sampling, seed, max_concurrent)
    results = play_eval_games(job, games, num_workers=1, on_done=on_done)
    return results, OutcomeStats.from_records([r for r in results if isinstance(r, GameRecord)])
