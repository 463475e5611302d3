"""Asynchronous vs synchronous training on the default job: wall time to N learner steps, and the win rate reached.

Each mode runs the default job (``unstable quickstart``: the cached warm start of the tiny model,
TicTacToe mirror self-play, 384 moves per learner step, REINFORCE, lr 1e-3 decaying linearly over
the run) for ``--steps`` learner steps through ``build(mode=...)``:

* ``async``: games and updates run at the same time; steps up to ``max_staleness=8`` versions old
  are trained on (the default);
* ``sync``: they take turns (``build(mode="sync")``): the collector plays until the buffer holds a
  batch, waits for its last game, and starts none while the learner updates; ``max_staleness=0``.

Timed: ``steps_wall_s``, from the first finished game to the N-th update (the run's metrics.jsonl
timestamps), and ``train_wall_s``, quickstart's whole training phase (which also starts Ray and
loads the models, the same for both). The ratio is sync's ``steps_wall_s`` over async's, so above 1
means async is faster. Then the final checkpoint plays ``--games`` greedy games against the
random-legal-move baseline (seats alternating, 95% Wilson intervals), as does the warm start.

    .venv/bin/python benchmarks/bench_sync.py --steps 8          # ~10 minutes on the shared 2-core CPU
    .venv/bin/python benchmarks/bench_sync.py --quick            # 2 steps, 50 games: a smoke run
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from common import add_common_args, machine, quiet_libraries, write_result

quiet_libraries()

MODES = {"async": 8, "sync": 0}  # mode -> max_staleness


def run_mode(mode: str, steps: int, games: int, seed: int, root: Path) -> dict[str, Any]:
    from unstable.cli.quickstart import QuickstartConfig, run_quickstart

    out = root / f"{mode}-seed{seed}"
    cfg = QuickstartConfig(out=str(out), seed=seed, learning_steps=steps, mode=mode, max_staleness=MODES[mode],
                           num_eval_workers=0, eval_games=games)
    summary = run_quickstart(cfg, say=lambda line: print(f"[{mode}] {line}", flush=True))
    final, initial = summary["eval"]["final"], summary["eval"]["initial"]
    buffer = _last_metrics(out / "metrics.jsonl", "buffer/")
    steps_wall = _steps_wall_s(out / "metrics.jsonl", steps)
    return {"mode": mode, "max_staleness": MODES[mode], "steps": summary["learner_steps"],
            "train_wall_s": summary["train_wall_s"], "steps_wall_s": round(steps_wall, 1),
            "s_per_step": round(steps_wall / steps, 2),
            "final_win_rate": round(final["win_rate"], 4), "ci95": [round(x, 4) for x in final["ci95"]],
            "initial_win_rate": round(initial["win_rate"], 4),
            "invalid_move_rate": round(final["invalid_move_rate"], 4),
            "moves_collected": buffer.get("buffer/added"), "moves_trained": buffer.get("buffer/handed_out"),
            "dropped_stale": buffer.get("buffer/dropped_stale"), "evicted": buffer.get("buffer/evicted")}


def _steps_wall_s(path: Path, steps: int) -> float:
    """Seconds from the first finished game to the ``steps``-th update, from the run's metrics.jsonl
    (the Tracker's clock): the collect-and-train part, without starting Ray and loading the models."""
    first_game = last_step = None
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if first_game is None and any(k.startswith("collect/") for k in record):
                first_game = record["time"]
            if "train/loss" in record and record.get("learner_step") == steps:
                last_step = record["time"]
    if first_game is None or last_step is None:
        raise RuntimeError(f"{path}: no finished game or no update {steps} recorded")
    return last_step - first_game


def _last_metrics(path: Path, prefix: str) -> dict[str, Any]:
    """The last value of each metric starting with ``prefix`` in a run's metrics.jsonl."""
    last: dict[str, Any] = {}
    with open(path) as f:
        for line in f:
            last.update({k: v for k, v in json.loads(line).items() if k.startswith(prefix)})
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--steps", type=int, default=8, help="learner steps per mode")
    parser.add_argument("--games", type=int, default=1000, help="greedy eval games of each final checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    args = parser.parse_args()
    if args.quick:
        args.steps, args.games = 2, 50
    info = machine()
    root = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    rows = [run_mode(mode, args.steps, args.games, args.seed, root) for mode in args.modes]
    by_mode = {r["mode"]: r for r in rows}
    if "async" in by_mode:
        for row in rows:
            row["x_async_time"] = round(row["steps_wall_s"] / by_mode["async"]["steps_wall_s"], 2)
    notes = [
        "steps_wall_s: from the first finished game to the N-th update (the Tracker's timestamps); train_wall_s: "
        "quickstart's training phase, which also starts Ray and loads the models (the same in both modes)",
        "x_async_time: this mode's steps_wall_s over async's, at the same number of learner steps (> 1: async is "
        "faster)",
        "win rates: greedy games vs the random-legal-move baseline, seats alternating, 95% Wilson intervals",
        "moves_collected - moves_trained: moves played but never trained on (dropped as stale, evicted from a "
        "full buffer, or left in it at the end); sync evicts the moves of the games that finish after its buffer "
        "is full and drops nothing as stale",
    ]
    write_result("sync", args, rows, {"steps": args.steps, "games": args.games, "seed": args.seed,
                                      "modes": args.modes, "run_dirs": str(root),
                                      "job": "unstable quickstart defaults (384 moves/step, 64 games in flight, "
                                             "REINFORCE, lr 1e-3 linear decay)"},
                 notes=notes, info=info)


if __name__ == "__main__":
    main()
