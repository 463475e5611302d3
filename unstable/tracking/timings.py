"""Per-turn and per-episode timing samples of a finished game (the seed's "time per turn / episode / char").

Same prefixes as :mod:`unstable.tracking.game_metrics` (``collect/<env>/`` for train games,
``eval/<env>/<opponent>/`` for eval games). Game level, one sample per game:

* ``episode_seconds``: wall time of the whole game (reset to last step), when recorded;
* ``env_seconds``: mean time of one ``env.step`` (TextArena's own cost).

Seat level, one sample per scored seat (train: the seats that collect data; eval: the evaluated
seat), over that seat's turns:

* ``gen_seconds``: mean generation latency of a turn, queueing at the inference actor included;
* ``gen_tokens_per_second`` and ``gen_chars_per_second``: completion tokens (characters) of the
  seat's turns divided by their generation time: what one game sees, not the actor's throughput.

A time that was not measured (0, as in a hand-built record) gives no sample rather than a 0.
"""

from __future__ import annotations

from collections import defaultdict

from unstable.records import GameRecord, Turn
from unstable.tracking.game_metrics import eval_opponent, eval_prefix, train_prefix


def _seat_timings(samples: dict[str, list[float]], prefix: str, turns: tuple[Turn, ...]) -> None:
    gen = sum(t.gen_seconds for t in turns)
    if gen <= 0:
        return
    samples[f"{prefix}/gen_seconds"].append(gen / len(turns))
    samples[f"{prefix}/gen_chars_per_second"].append(sum(len(t.completion_text) for t in turns) / gen)
    tokenised = [t for t in turns if t.has_tokens]
    tokenised_gen = sum(t.gen_seconds for t in tokenised)
    if tokenised_gen > 0:
        samples[f"{prefix}/gen_tokens_per_second"].append(sum(len(t.completion_ids) for t in tokenised) / tokenised_gen)


def timing_samples(record: GameRecord) -> dict[str, list[float]]:
    """Every timing sample one finished game contributes, keyed by full metric name."""
    samples: dict[str, list[float]] = defaultdict(list)
    spec = record.spec
    if spec.is_eval:
        if spec.eval_player_id is None:
            return {}  # game_samples raises for this game with the explanation
        prefix = eval_prefix(spec.env_id, eval_opponent(record))
        seats = [spec.eval_player_id]
    else:
        prefix = train_prefix(spec.env_id)
        seats = [a.player_id for a in spec.agents if a.collect_data]
    if record.wall_seconds > 0:
        samples[f"{prefix}/episode_seconds"].append(record.wall_seconds)
    env = sum(t.env_seconds for t in record.turns)
    if env > 0:
        samples[f"{prefix}/env_seconds"].append(env / len(record.turns))
    for pid in seats:
        _seat_timings(samples, prefix, record.turns_of(pid))
    return dict(samples)
