"""Per-game metric samples, computed from a finished :class:`~unstable.records.GameRecord`.

A *sample* is one value for one key; the tracker appends every sample to that key's moving window,
so a rate is the fraction over the last ``window`` samples. Seat-level keys get one sample per
scored seat per game (win/draw/loss are 0/1), game-level keys one sample per game.

Train games (``spec.is_eval`` False) score the seats that collect data, under
``collect/<env_id>/``:

* seat level: ``win_rate``, ``draw_rate``, ``loss_rate``, ``reward`` (raw final reward),
  ``success_rate`` (reward above 0; games with one seat: single-player games, single-sample
  environments), ``reward/<name>`` (an environment's reward function ``name``, unweighted) and
  ``combined_reward/<name>`` (a parallel environment's combined answer),
  ``format_ok_rate`` and ``invalid_move_rate`` (the fraction of the seat's turns),
  ``response_chars`` and ``completion_tokens`` (means over the seat's turns);
* game level: ``game_length`` (turns by all seats), ``ended_by_invalid_rate`` (the game ended
  because a seat's invalid move exhausted its error allowance), ``reward_p<k>`` (seat ``k``'s raw
  reward, every seat, to show first-player advantage).

Eval games score ``spec.eval_player_id`` under ``eval/<env_id>/<opponent uid>/``: ``win_rate``,
``draw_rate``, ``loss_rate``, ``reward``, ``game_length``, ``format_ok_rate``,
``invalid_move_rate``. Several opponents (3+ players) are joined with ``+``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from unstable.records import FailedGame, GameRecord

OUTCOMES = ("win", "draw", "loss")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def train_prefix(env_id: str) -> str:
    """The key prefix of the metrics of train games in ``env_id``: ``collect/<env_id>``."""
    return f"collect/{env_id}"


def eval_prefix(env_id: str, opponent: str) -> str:
    """The key prefix of the metrics of eval games in ``env_id`` against ``opponent``: ``eval/<env_id>/<opponent>``."""
    return f"eval/{env_id}/{opponent}"


def eval_opponent(record: GameRecord) -> str:
    """The uid(s) of the seats the evaluated seat played against."""
    pid = record.spec.eval_player_id
    uids = sorted({a.policy.uid for a in record.spec.agents if a.player_id != pid})
    return "+".join(uids) if uids else "none"


def _seat_samples(
    samples: dict[str, list[float]], prefix: str, record: GameRecord, pid: int, *, text_stats: bool
) -> None:
    outcome = record.outcome(pid)
    for name in OUTCOMES:
        samples[f"{prefix}/{name}_rate"].append(float(outcome == name))
    samples[f"{prefix}/reward"].append(float(record.final_rewards[pid]))
    if len(record.final_rewards) == 1:  # a single-player game, or an environment's one seat: solved or not
        samples[f"{prefix}/success_rate"].append(float(record.final_rewards[pid] > 0))
    info = record.game_info.get(pid, {})
    for name, value in info.get("reward_components", {}).items():
        samples[f"{prefix}/reward/{name}"].append(float(value))
    for name, value in info.get("combined_components", {}).items():
        samples[f"{prefix}/combined_reward/{name}"].append(float(value))
    turns = record.turns_of(pid)
    if not turns:
        return
    samples[f"{prefix}/format_ok_rate"].append(_mean([float(t.format_ok) for t in turns]))
    samples[f"{prefix}/invalid_move_rate"].append(_mean([float(t.invalid) for t in turns]))
    if not text_stats:
        return
    samples[f"{prefix}/response_chars"].append(_mean([float(len(t.completion_text)) for t in turns]))
    tokenised = [t for t in turns if t.has_tokens]
    if tokenised:
        samples[f"{prefix}/completion_tokens"].append(_mean([float(len(t.completion_ids)) for t in tokenised]))


def game_samples(record: GameRecord) -> dict[str, list[float]]:
    """Every sample one finished game contributes, keyed by full metric name."""
    samples: dict[str, list[float]] = defaultdict(list)
    spec = record.spec
    if spec.is_eval:
        if spec.eval_player_id is None:
            raise ValueError(f"eval game {spec.game_id} ({spec.env_id}) has no eval_player_id; cannot score it")
        prefix = eval_prefix(spec.env_id, eval_opponent(record))
        samples[f"{prefix}/game_length"].append(float(record.num_turns))
        _seat_samples(samples, prefix, record, spec.eval_player_id, text_stats=False)
        return dict(samples)
    prefix = train_prefix(spec.env_id)
    samples[f"{prefix}/game_length"].append(float(record.num_turns))
    samples[f"{prefix}/ended_by_invalid_rate"].append(float(record.invalid_player is not None))
    for pid in sorted(record.final_rewards):
        samples[f"{prefix}/reward_p{pid}"].append(float(record.final_rewards[pid]))
    for agent in spec.agents:
        if agent.collect_data:
            _seat_samples(samples, prefix, record, agent.player_id, text_stats=True)
    return dict(samples)


def failure_line(failure: FailedGame, stage: str, learner_step: int) -> dict[str, Any]:
    """The ``logs/failed_games.jsonl`` line of a failed game: enough to replay it from its seed."""
    return {
        "time": time.time(),
        "learner_step": learner_step,
        "kind": stage,
        "game_id": failure.spec.game_id,
        "env_id": failure.spec.env_id,
        "seed": failure.seed,
        "stage": failure.stage,
        "error_type": failure.error_type,
        "message": failure.message,
        "turns": len(failure.turns),
        "agents": [a.policy.uid for a in failure.spec.agents],
        "policy": failure.policy_uid,  # whose turn failed, if one did
        "traceback": failure.traceback,
    }
