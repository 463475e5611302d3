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
* ``Collector on Ray``: the same components as Ray actors, wired as ``unstable.build()`` does; its
  window is timed by the scheduler actor (when it counted), not by the driver's clock, which would
  add the wait of each counting call behind the actor's queue.

``x in-process`` is turns/s relative to the in-process ``Collector + Tracker`` row of the same game:
what running the components as Ray actors costs. ``games/CPU-s`` divides by the CPU time the path
used (this process for the in-process rows; for the Ray row every process Ray started: actors, raylet,
GCS), which moves little when other jobs share the cores. Ray's workers run at niceness 0 here, like
this process (``RAY_worker_niceness``; Ray's default, 15, hands a shared machine's cores to every
other job first and would measure the neighbours, not the orchestration).

    .venv/bin/python benchmarks/bench_orchestration.py            # ~2 minutes
    .venv/bin/python benchmarks/bench_orchestration.py --quick    # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import os
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

import psutil  # noqa: E402
import textarena as ta  # noqa: E402

from unstable.collection.collector import Collector  # noqa: E402
from unstable.collection.rollout import play_games  # noqa: E402
from unstable.policies.scripted import RandomLegalPolicy, legal_moves  # noqa: E402
from unstable.records import AgentSpec, GameSpec, PolicyRef  # noqa: E402

ENVS = ("TicTacToe-v0-train", "KuhnPoker-v0-train")
NICENESS = "RAY_worker_niceness"  # Ray reads its settings from RAY_<name> variables, in Ray's own spelling
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


def own_cpu() -> float:
    """CPU seconds (user + system) this process has used, all its threads."""
    return sum(psutil.Process().cpu_times()[:2])


def tree_cpu() -> dict[int, float]:
    """CPU seconds of this process and every process under it, by pid (Ray's, once it is started)."""
    out = {}
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            out[proc.pid] = sum(proc.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return out


def bare_textarena(env_id: str, seconds: float) -> dict[str, float]:
    games = turns = 0
    c0, t0 = own_cpu(), time.perf_counter()
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
    return {"games": games, "turns": turns, "seconds": time.perf_counter() - t0, "cpu_s": own_cpu() - c0}


def rollout(env_id: str, seconds: float) -> dict[str, float]:
    """play_games over successive chunks of games until ``seconds`` have passed."""
    me, rnd = PolicyRef("base", "checkpoint"), PolicyRef("random", "scripted")
    games = turns = 0
    c0, t0 = own_cpu(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        specs = [GameSpec(game_id=games + i, env_id=env_id, seed=games + i,
                          agents=(AgentSpec(0, me, collect_data=True), AgentSpec(1, rnd))) for i in range(WORKERS * 4)]
        records = asyncio.run(play_games(specs, lambda s: {0: RandomLegalPolicy(), 1: RandomLegalPolicy()},
                                         max_concurrent=WORKERS))
        games += len(records)
        turns += sum(len(r.turns) for r in records)
    return {"games": games, "turns": turns, "seconds": time.perf_counter() - t0, "cpu_s": own_cpu() - c0}


def collector_local(env_id: str, seconds: float, with_tracker: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-orch-") as tmp:
        parts = local_components([env_id], tmp if with_tracker else None)
        collector = ScriptedCollector(tracker=parts["tracker"], buffer=parts["buffer"],
                                      game_scheduler=parts["scheduler"], backends=[NoModel()])
        out = asyncio.run(run_collector_for(collector, WORKERS, seconds, warmup_s=min(1.0, seconds / 5),
                                            probe=lambda: {"cpu_s": own_cpu()}))
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
        time.sleep(min(2.0, max(1.0, seconds / 3)))  # the actors' first calls import and warm up
        cpu_before, before = tree_cpu(), ray.get(scheduler.stamped_counts.remote())
        time.sleep(seconds)
        cpu_after, after = tree_cpu(), ray.get(scheduler.stamped_counts.remote())
        ray.get(collector.stop.remote())
        ray.get(done)
        ray.get(tracker.close.remote())
        for actor in (collector, scheduler, buffer, registry, tracker):
            ray.kill(actor, no_restart=True)
    return {"games": after["games"] - before["games"], "turns": after["turns"] - before["turns"],
            "seconds": after["at"] - before["at"],
            "cpu_s": sum(cpu - cpu_before.get(pid, 0.0) for pid, cpu in cpu_after.items())}


def row(env_id: str, path: str, m: dict[str, float], bare: dict[str, float] | None) -> dict:
    turns_per_s = m["turns"] / m["seconds"]
    out = {"env": env_id, "path": path, "games": int(m["games"]), "turns": int(m["turns"]),
           "seconds": round(m["seconds"], 1), "games/s": m["games"] / m["seconds"], "turns/s": turns_per_s,
           "us/turn": 1e6 / turns_per_s if turns_per_s else None,
           "games/CPU-s": m["games"] / m["cpu_s"] if m.get("cpu_s") else None}
    out["x bare"] = turns_per_s / (bare["turns"] / bare["seconds"]) if bare else 1.0
    out["x in-process"] = None
    return out


def measure_env(env_id: str, seconds: float, rounds: int, ray_too: bool) -> list[dict]:
    """Every path on ``env_id``, ``rounds`` times in turn; per path the round with the median turns/s."""
    paths = {"bare TextArena loop": lambda: bare_textarena(env_id, seconds),
             f"play_games ({WORKERS} in flight)": lambda: rollout(env_id, seconds),
             "Collector, no Tracker": lambda: collector_local(env_id, seconds, False),
             "Collector + Tracker": lambda: collector_local(env_id, seconds, True)}
    if ray_too:
        paths["Collector + Tracker, Ray actors"] = lambda: collector_ray(env_id, seconds)
    runs: dict[str, list[dict[str, float]]] = {path: [] for path in paths}
    for _ in range(rounds):
        for path, measure in paths.items():
            runs[path].append(measure())

    def speed(m: dict[str, float]) -> float:
        return m["turns"] / m["seconds"]

    median_run = {path: sorted(ms, key=speed)[(len(ms) - 1) // 2] for path, ms in runs.items()}
    bare = median_run["bare TextArena loop"]
    rows = []
    for path, m in median_run.items():
        out = row(env_id, path, m, None if path == "bare TextArena loop" else bare)
        if path == "Collector + Tracker":
            out["x in-process"] = 1.0
        elif path == "Collector + Tracker, Ray actors":
            ratios = sorted(speed(a) / speed(b) for a, b in zip(runs[path], runs["Collector + Tracker"], strict=True))
            out["x in-process"] = ratios[(len(ratios) - 1) // 2]
            out["x in-process range"] = f"{ratios[0]:.2f}-{ratios[-1]:.2f}" if rounds > 1 else None
        rows.append(out)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--seconds", type=float, default=None, help="measuring time per path and game")
    parser.add_argument("--no-ray", action="store_true", help="skip the Collector-on-Ray rows")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every path this many times, in turn (a shared machine's load comes and goes)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    seconds = args.seconds or (1.0 if args.quick else 8.0)
    info = machine()
    rows = []
    if not args.no_ray:
        import ray

        os.environ["RAY_AUTH_MODE"] = "disabled"
        os.environ.setdefault(NICENESS, "0")  # as this process (see the module docstring)
        ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="bench", log_to_driver=False,
                 _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    try:
        for env_id in ENVS:
            rows.extend(measure_env(env_id, seconds, args.rounds, ray_too=not args.no_ray))
    finally:
        if not args.no_ray:
            ray.shutdown()
    settings = {"seconds_per_path": seconds, "rounds": args.rounds, "games_in_flight": WORKERS,
                "policy": "RandomLegalPolicy in both seats"}
    if not args.no_ray:
        settings["ray_worker_niceness"] = int(os.environ[NICENESS])
    write_result("orchestration", args, rows, settings,
                 notes=["'x bare' is turns/s relative to the bare TextArena loop on the same game.",
                        "'x in-process' is turns/s relative to the in-process 'Collector + Tracker' path, "
                        "measured side by side in each round: the median of the rounds' ratios, and their range.",
                        "Each row is the round with the median turns/s of that path.",
                        "'games/CPU-s': games per CPU second of this process (in-process rows) or of every "
                        "process Ray started (Ray row)."], info=info)


if __name__ == "__main__":
    main()
