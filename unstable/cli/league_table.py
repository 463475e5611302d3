"""``unstable league-table RUN``: the cross-play table of a run's checkpoints and the game's scripted baselines.

Reads the run's ``config.json`` (base model, prompt template, game) and ``registry/registry.json``
(its checkpoints and their TrueSkill ratings), plays every pair (:mod:`unstable.eval.crossplay`),
analyses the meta-game (:mod:`unstable.eval.league`), prints the matrix and the ladder, and writes
``league_table.json`` and ``league_table.png`` into ``RUN/league/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstable.records import PolicyRef

LEAGUE_DIR = "league"


@dataclass(frozen=True)
class RunPool:
    """The entries of a run's league table and how to play them."""

    model: str  # the base model every checkpoint adapts
    prompt_template: str
    env_id: str
    players: tuple[PolicyRef, ...]
    trueskill: dict[str, tuple[float, float]]  # every registry entry's (mu, sigma)


def select_checkpoints(uids: list[str], spec: str) -> list[str]:
    """The checkpoints ``spec`` picks from ``uids`` (oldest first): ``all``; ``last:N``, the newest N;
    ``every:K``, every K-th from the oldest, and the newest; or a comma-separated list of uids."""
    spec = spec.strip()
    kind, _, value = spec.partition(":")
    if spec == "all":
        return list(uids)
    if kind in ("last", "every") and value.isdigit() and int(value) >= 1:
        k = int(value)
        if kind == "last":
            return uids[-k:]
        picked = uids[::k]
        return picked + ([uids[-1]] if uids and uids[-1] not in picked else [])
    if kind in ("last", "every"):
        raise ValueError(f"--checkpoints {spec!r}: {kind}:N needs a whole number N >= 1")
    chosen = [u.strip() for u in spec.split(",") if u.strip()]
    unknown = [u for u in chosen if u not in uids]
    if unknown or not chosen:
        raise ValueError(f"--checkpoints {spec!r}: {unknown or 'nothing'} is not a checkpoint of the run; give all, "
                         f"last:N, every:K or uids from {uids}")
    return chosen


def read_run_pool(run_dir: str, checkpoints: str = "all", baselines: str | None = None,
                  env_id: str | None = None) -> RunPool:
    """The pool of ``run_dir``: its checkpoints chosen by ``checkpoints`` (:func:`select_checkpoints`) and the
    scripted baselines ``baselines`` (comma-separated; ``None``: every baseline the game has; ``"none"``)."""
    from unstable.games.legal_moves import scripted_baselines
    from unstable.run.resume import REGISTRY_FILE, read_run_files

    config, registry = read_run_files(run_dir)
    models = config.get("models") or [{"name": "model", "model_name": config.get("model_name")}]
    base_of = {m.get("name", "model"): m.get("model_name") for m in models}
    entries = sorted((m for m in registry["models"] if not m.get("fixed")),
                     key=lambda m: (list(base_of).index(m.get("lineage") or "model") if (m.get("lineage") or "model")
                                    in base_of else 0, m["iteration"]))
    if not entries:
        raise ValueError(f"{Path(run_dir) / REGISTRY_FILE} holds no checkpoint: the run stopped before its first")
    chosen = select_checkpoints([m["uid"] for m in entries], checkpoints)
    by_uid = {m["uid"]: m for m in entries}
    bases = {base_of.get(by_uid[u].get("lineage") or "model") for u in chosen}
    if len(bases) != 1 or None in bases:
        raise ValueError(f"the chosen checkpoints adapt different base models ({sorted(map(str, bases))}); one table "
                         "plays one base model: pick one model's checkpoints with --checkpoints uid,uid,...")
    envs = config.get("eval_envs") or config.get("train_envs") or [{}]
    env = env_id or envs[0].get("env_id")
    if not env:
        raise ValueError(f"{run_dir}'s config names no game; give --env")
    specs = (config.get("train_envs") or []) + (config.get("eval_envs") or [])
    template = next((e["prompt_template"] for e in specs if e.get("prompt_template")), "qwen3-zs")
    names = scripted_baselines(env) if baselines is None else \
        () if baselines.strip() == "none" else tuple(b.strip() for b in baselines.split(",") if b.strip())
    players = [PolicyRef(u, "checkpoint", by_uid[u].get("path_or_name"), version=by_uid[u]["iteration"])
               for u in chosen] + [PolicyRef(name, "scripted") for name in names]
    trueskill = {m["uid"]: (float(m["mu"]), float(m["sigma"])) for m in registry["models"]
                 if "mu" in m and "sigma" in m}  # the rated ones
    return RunPool(bases.pop(), template, env, tuple(players), trueskill)


def _progress(total: int, say: Any) -> Any:
    done, t0 = [0], time.perf_counter()
    step = max(1, total // 20)

    def on_done(_record: Any) -> None:
        done[0] += 1
        if done[0] % step == 0 or done[0] == total:
            elapsed = time.perf_counter() - t0
            left = elapsed / done[0] * (total - done[0])
            say(f"  {done[0]}/{total} games, {elapsed:.0f}s, ~{left:.0f}s left")

    return on_done


def run_league_table(args: argparse.Namespace) -> int:
    """``unstable league-table``: see the module docstring."""
    from unstable.eval.crossplay import play_cross_play
    from unstable.eval.league import analyse_league, crossplay_dict
    from unstable.inference.base import SamplingParams
    from unstable.tracking.run_dir import atomic_write_json
    from unstable.utils.paths import check_writable_dir

    def say(line: str) -> None:
        print(line, flush=True)

    out = Path(args.out or os.path.join(args.run_dir, LEAGUE_DIR))
    check_writable_dir("--out" if args.out else "the run's league folder", out)  # before the first game
    pool = read_run_pool(args.run_dir, args.checkpoints, args.baselines, args.env)
    n = len(pool.players)
    cells = n * (n - 1) // 2
    say(f"league table of {args.run_dir} on {pool.env_id}: {n} entries ({', '.join(p.uid for p in pool.players)}), "
        f"{cells} cells x {args.games_per_cell} games = {cells * args.games_per_cell} games")
    sampling = SamplingParams(temperature=0.0 if args.greedy else args.temperature, top_p=args.top_p,
                              max_new_tokens=args.max_new_tokens)
    crossplay = play_cross_play(pool.model, pool.env_id, pool.players, games_per_cell=args.games_per_cell,
                                prompt_template=pool.prompt_template, sampling=sampling, seed=args.seed,
                                num_workers=args.workers, torch_threads=args.torch_threads or None,
                                on_done=_progress(cells * args.games_per_cell, say))
    settings = {"run_dir": os.path.abspath(args.run_dir), "model": pool.model, "prompt_template": pool.prompt_template,
                "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p,
                             "max_new_tokens": sampling.max_new_tokens},
                "greedy": args.greedy, "seed": args.seed, "checkpoints": args.checkpoints, "workers": args.workers,
                "adapters": {p.uid: p.adapter_path for p in pool.players if p.kind == "checkpoint"}}
    out.mkdir(parents=True, exist_ok=True)
    try:
        table = analyse_league(crossplay, pool.env_id, pool.trueskill, alpha=args.alpha,
                               population_size=args.population_size, settings=settings)
    except ValueError:  # a cell with no finished game: keep the games played, then say why
        atomic_write_json(str(out / "league_table.json"), {**crossplay_dict(crossplay, pool.env_id),
                                                            "settings": settings})
        for line in crossplay.failures[:5]:
            say(f"  {line}")
        say(f"the games played are in {out / 'league_table.json'}")
        raise
    table.print()
    atomic_write_json(str(out / "league_table.json"), table.to_dict())
    say(f"written: {out / 'league_table.json'}")
    try:
        from unstable.ui.league_plot import plot_league_table

        say(f"written: {plot_league_table(table, out / 'league_table.png')}")
    except ImportError as exc:
        say(f"no heat map: {exc}")
    return 0


def add_league_table_parser(sub: Any) -> None:
    """Add the ``league-table`` subcommand to the ``unstable`` parser's subparsers."""
    p = sub.add_parser("league-table", help="cross-play table of a run's checkpoints and baselines: Nash averaging, "
                                            "α-Rank, cycles, TrueSkill beside it; JSON and heat map")
    p.add_argument("run_dir", help="the run directory (with config.json and registry/registry.json)")
    p.add_argument("--games-per-cell", type=int, default=20, help="games per pair of entries, even (seats alternate)")
    p.add_argument("--checkpoints", default="all",
                   help="which checkpoints: all, last:N (the newest N), every:K (every K-th and the newest), "
                        "or uids (base,ckpt-5,...)")
    p.add_argument("--baselines", default=None,
                   help="scripted baselines, comma-separated, or none (default: every one the game has)")
    p.add_argument("--workers", type=int, default=1, help="worker processes; 1 plays in this process")
    p.add_argument("--torch-threads", type=int, default=1, help="torch threads per process (0: torch's default)")
    p.add_argument("--env", default=None, help="the game (default: the run's first eval env, else train env)")
    p.add_argument("--greedy", action="store_true", help="every checkpoint decodes greedily (temperature 0)")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--alpha", type=float, default=100.0, help="α-Rank's selection intensity")
    p.add_argument("--population-size", type=int, default=50, help="α-Rank's population size m")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder for league_table.json and .png (default: RUN/league)")
    p.set_defaults(fn=run_league_table)
