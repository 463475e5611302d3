"""(a) Orchestration throughput: games/s and turns/s with an instant policy, no model anywhere.

Every seat plays :class:`~unstable.policies.scripted.RandomLegalPolicy`, so what is measured is the
machinery around the model: TextArena itself, the turn loop, and the collector with its scheduler,
TrueSkill registry, buffer (reward transforms) and tracker (metrics and transcripts). Paths, side
by side on the same games in one run:

* ``bare TextArena``: ``ta.make`` per game, ``reset``, ``get_observation``, ``step`` with a random
  legal move (the same legal-move reader the scripted policy uses), ``close``: the floor.
* ``play_games``: :func:`unstable.collection.rollout.play_games` (turn records, per-game random state,
  invalid-move watch), 32 games in flight.
* ``Collector``: :class:`unstable.collection.collector.Collector` in one process, 32 train games in flight,
  with a scheduler (fixed "random" opponent), registry (TrueSkill), StepBuffer and, in the
  ``+ Tracker`` row, a Tracker writing metrics.jsonl and transcripts.
* ``Collector on Ray``: the same components as Ray actors, wired as ``unstable.build()`` does.

    .venv/bin/python benchmarks/bench_orchestration.py            # ~2 minutes
    .venv/bin/python benchmarks/bench_orchestration.py --quick    # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time

from common import (
    add_common_args,
    counting_scheduler_cls,
    local_components,
    machine,
    quiet_libraries,
    run_collector_for,
    write_result,
)

quiet_libraries()

import textarena as ta  # noqa: E402

from unstable.collection.collector import Collector  # noqa: E402
from unstable.collection.rollout import play_games  # noqa: E402
from unstable.policies.scripted import RandomLegalPolicy, legal_moves  # noqa: E402
from unstable.records import AgentSpec, GameSpec, PolicyRef  # noqa: E402

ENVS = ("TicTacToe-v0-train", "KuhnPoker-v0-train")
WORKERS = 32


class ScriptedCollector(Collector):
    """The real Collector with every seat played by the random legal-move policy."""

    def _policies(self, spec, *args, **kwargs):
        return {a.player_id: RandomLegalPolicy() for a in spec.agents}


class NoModel:
    """The Collector needs a backend; scripted seats never call it."""

    name = "none"

    def stats(self) -> dict[str, float]:
        return {}


def bare_textarena(env_id: str, seconds: float) -> dict[str, float]:
    games = turns = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        rng = random.Random(games)
        env = ta.make(env_id)
        env.reset(num_players=2, seed=games)
        done = False
        while not done:
            player_id, _obs = env.get_observation()
            done, _info = env.step(action=rng.choice(legal_moves(env_id, env, player_id)))
            turns += 1
        env.close()
        games += 1
    return {"games": games, "turns": turns, "seconds": time.perf_counter() - t0}


def rollout(env_id: str, seconds: float) -> dict[str, float]:
    """play_games over successive chunks of games until ``seconds`` have passed."""
    me, rnd = PolicyRef("base", "checkpoint"), PolicyRef("random", "scripted")
    games = turns = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        specs = [GameSpec(game_id=games + i, env_id=env_id, seed=games + i,
                          agents=(AgentSpec(0, me, collect_data=True), AgentSpec(1, rnd))) for i in range(WORKERS * 4)]
        records = asyncio.run(play_games(specs, lambda s: {0: RandomLegalPolicy(), 1: RandomLegalPolicy()},
                                         max_concurrent=WORKERS))
        games += len(records)
        turns += sum(len(r.turns) for r in records)
    return {"games": games, "turns": turns, "seconds": time.perf_counter() - t0}


def collector_local(env_id: str, seconds: float, with_tracker: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-orch-") as tmp:
        parts = local_components([env_id], tmp if with_tracker else None)
        collector = ScriptedCollector(tracker=parts["tracker"], buffer=parts["buffer"],
                                      game_scheduler=parts["scheduler"], backends=[NoModel()])
        out = asyncio.run(run_collector_for(collector, WORKERS, seconds, warmup_s=min(1.0, seconds / 5)))
        if parts["tracker"] is not None:
            parts["tracker"].close()
    return out


def collector_ray(env_id: str, seconds: float) -> dict[str, float]:
    """The components as Ray actors (num_cpus=0, as unstable.run.wiring starts them)."""
    import ray

    from unstable.buffers import StepBuffer
    from unstable.games.specs import TrainEnvSpec
    from unstable.registry import ModelRegistry
    from unstable.reward_transformations import default_transforms
    from unstable.run.remote import actor_class
    from unstable.samplers.env_samplers import UniformRandomEnvSampler
    from unstable.samplers.model_samplers import FixedOpponentModelSampler
    from unstable.tracking import Tracker

    light = {"num_cpus": 0}
    with tempfile.TemporaryDirectory(prefix="bench-orch-") as tmp:
        tracker = actor_class(Tracker).options(**light).remote(run_name="bench", wandb_project=None, run_dir=tmp,
                                                               use_wandb=False)
        registry = actor_class(ModelRegistry).options(**light).remote(tracker=tracker)
        ray.get(registry.add_checkpoint.remote(uid="base", path=None, iteration=0))
        ray.get(registry.add_fixed.remote(name="random"))
        spec = TrainEnvSpec(env_id=env_id, num_players=2, num_actors=1, prompt_template="qwen3-zs")
        scheduler = actor_class(counting_scheduler_cls()).options(**light).remote(
            model_sampler=FixedOpponentModelSampler(model_registry=registry, rng_seed=0),
            env_sampler=UniformRandomEnvSampler(train_env_specs=[spec], rng_seed=0), seed=0)
        final, step, sampling = default_transforms()
        buffer = actor_class(StepBuffer).options(**light).remote(
            max_buffer_size=10**9, tracker=tracker, final_reward_transformation=final,
            step_reward_transformation=step, sampling_reward_transformation=sampling)
        collector = actor_class(ScriptedCollector).options(**light, max_concurrency=1000).remote(
            tracker=tracker, buffer=buffer, game_scheduler=scheduler, backends=[NoModel()])
        done = collector.collect.remote(WORKERS, 0)
        time.sleep(min(2.0, seconds / 3))
        t0, before = time.perf_counter(), ray.get(scheduler.counts.remote())
        time.sleep(seconds)
        t1, after = time.perf_counter(), ray.get(scheduler.counts.remote())
        ray.get(collector.stop.remote())
        ray.get(done)
        ray.get(tracker.close.remote())
        for actor in (collector, scheduler, buffer, registry, tracker):
            ray.kill(actor, no_restart=True)
    return {"games": after["games"] - before["games"], "turns": after["turns"] - before["turns"], "seconds": t1 - t0}


def row(env_id: str, path: str, m: dict[str, float], bare: dict[str, float] | None) -> dict:
    turns_per_s = m["turns"] / m["seconds"]
    out = {"env": env_id, "path": path, "games": int(m["games"]), "turns": int(m["turns"]),
           "seconds": round(m["seconds"], 1), "games/s": m["games"] / m["seconds"], "turns/s": turns_per_s,
           "us/turn": 1e6 / turns_per_s if turns_per_s else None}
    out["x bare"] = turns_per_s / (bare["turns"] / bare["seconds"]) if bare else 1.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--seconds", type=float, default=None, help="measuring time per path and game")
    parser.add_argument("--no-ray", action="store_true", help="skip the Collector-on-Ray rows")
    args = parser.parse_args()
    seconds = args.seconds or (1.0 if args.quick else 8.0)
    info = machine()
    rows = []
    if not args.no_ray:
        import os

        import ray

        os.environ["RAY_AUTH_MODE"] = "disabled"
        ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="bench", log_to_driver=False,
                 _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    try:
        for env_id in ENVS:
            bare = bare_textarena(env_id, seconds)
            rows.append(row(env_id, "bare TextArena loop", bare, None))
            rows.append(row(env_id, f"play_games ({WORKERS} in flight)", rollout(env_id, seconds), bare))
            rows.append(row(env_id, "Collector, no Tracker", collector_local(env_id, seconds, False), bare))
            rows.append(row(env_id, "Collector + Tracker", collector_local(env_id, seconds, True), bare))
            if not args.no_ray:
                rows.append(row(env_id, "Collector + Tracker, Ray actors", collector_ray(env_id, seconds), bare))
    finally:
        if not args.no_ray:
            ray.shutdown()
    write_result("orchestration", args, rows, {"seconds_per_path": seconds, "games_in_flight": WORKERS,
                                               "policy": "RandomLegalPolicy in both seats"},
                 notes=["'x bare' is turns/s relative to the bare TextArena loop on the same game."], info=info)


if __name__ == "__main__":
    main()
