"""Learning curves and ablations of the learners on the default job (TicTacToe self-play, tiny model, CPU).

Each variant is the default job (``unstable quickstart``: the cached warm start, mirror self-play,
384 moves per learner step, lr 1e-3 decaying linearly over the run) with one algorithm and its
settings, run for ``--steps`` learner steps. Every ``--every`` steps the checkpoint is kept and
afterwards played greedily against each ``--opponents`` baseline (``--games`` games, seats
alternating, 95% Wilson intervals), so a row is one point of a learning curve. Per variant the
last rows say the wall time to the last step, the best checkpoint, and how far the final one is
below it (erosion).

    # no erosion: 100 steps, REINFORCE beside the recommended algorithm, 3 seeds (hours on 2 cores)
    .venv/bin/python benchmarks/bench_algorithms.py --variants reinforce grpo-kl --seeds 0 1 2 --steps 100
    # the staleness x correction ablation (wall time to N steps, final win rate)
    .venv/bin/python benchmarks/bench_algorithms.py --ablation --steps 20
    .venv/bin/python benchmarks/bench_algorithms.py --quick       # a 2-step smoke run, ~3 minutes

Variants are named in :data:`VARIANTS`; ``name=ALGORITHM:{json learner settings}`` adds one.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from common import add_common_args, machine, quiet_libraries, write_result

quiet_libraries()

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "reinforce": ("reinforce", {}),
    "reinforce-tis": ("reinforce", {"off_policy_correction": "token_truncate"}),
    "grpo": ("grpo", {}),
    "grpo-kl": ("grpo", {"beta": 0.1}),
    "ppo": ("ppo", {}),
    "gspo": ("gspo", {}),
}


def parse_variant(text: str) -> tuple[str, str, dict[str, Any]]:
    """``name`` from :data:`VARIANTS`, or ``name=ALGORITHM:{json}``."""
    if "=" not in text:
        if text not in VARIANTS:
            raise SystemExit(f"unknown variant {text!r}; known: {sorted(VARIANTS)} or name=ALGORITHM:{{json}}")
        return text, *VARIANTS[text]
    name, _, spec = text.partition("=")
    algorithm, _, settings = spec.partition(":")
    return name, algorithm, json.loads(settings or "{}")


def train(name: str, algorithm: str, settings: dict[str, Any], seed: int, steps: int, every: int,
          max_staleness: int, root: Path) -> tuple[dict[str, Any], Path]:
    """One default-job run; returns quickstart's summary and the run directory."""
    from unstable.cli.quickstart import QuickstartConfig, run_quickstart

    out = root / f"{name}-seed{seed}-stale{max_staleness}"
    cfg = QuickstartConfig(out=str(out), seed=seed, algorithm=algorithm, learning_steps=steps,
                           max_staleness=max_staleness, learner={**settings, "keep_every": every},
                           num_eval_workers=0, eval_games=200)
    t0 = time.perf_counter()
    summary = run_quickstart(cfg, say=lambda line: print(f"[{name} seed {seed}] {line}", flush=True))
    summary["bench_wall_s"] = time.perf_counter() - t0
    return summary, out


def evaluate_checkpoint(model: str, adapter: str | None, opponent: str, games: int, seed: int) -> dict[str, Any]:
    from unstable.eval.evaluation import evaluate
    from unstable.inference.base import SamplingParams

    result = evaluate(model, "TicTacToe-v0-train", opponent, games, adapter=adapter, prompt_template="qwen3-board",
                      sampling=SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=16), seed=seed,
                      num_workers=2, greedy=True)
    o = result.overall
    return {"win_rate": round(o.win_rate, 4), "ci95": [round(x, 4) for x in o.win_rate_ci95],
            "draw_rate": round(o.draw_rate, 4), "invalid_move_rate": round(o.invalid_move_rate, 4)}


def curve_rows(name: str, algorithm: str, seed: int, summary: dict[str, Any], run_dir: Path, every: int,
               opponents: list[str], games: int) -> list[dict[str, Any]]:
    from unstable.learners.checkpoints import list_checkpoints

    model = summary["model"]
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    versions = [0, *sorted(v for v in checkpoints if v % every == 0 or v == max(checkpoints))]
    rows = []
    for version in versions:
        adapter = None if version == 0 else str(checkpoints[version])
        for opponent in opponents:
            point = evaluate_checkpoint(model, adapter, opponent, games, seed)
            rows.append({"variant": name, "algorithm": algorithm, "seed": seed, "step": version,
                         "opponent": opponent, "games": games, **point})
            print(f"[{name} seed {seed}] step {version} vs {opponent}: {point['win_rate']:.3f} {point['ci95']}",
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--variants", nargs="+", default=["reinforce", "grpo-kl"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--every", type=int, default=10, help="evaluate every N-th checkpoint (and the last)")
    parser.add_argument("--games", type=int, default=1000, help="greedy games per checkpoint and opponent")
    parser.add_argument("--opponents", nargs="+", default=["random"])
    parser.add_argument("--max-staleness", type=int, default=8)
    parser.add_argument("--ablation", action="store_true",
                        help="max_staleness 0/2/8 x off_policy_correction off/on with REINFORCE; "
                             "final checkpoints only")
    parser.add_argument("--name", default=None, help="result file name (default: algorithms or ablation)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.every, args.games, args.seeds = 2, 1, 50, args.seeds[:1]
    info = machine()
    root = Path(tempfile.mkdtemp(prefix="bench-algorithms-"))
    rows: list[dict[str, Any]] = []
    if args.ablation:
        for staleness in (0, 2, 8):
            for correction in ("none", "token_truncate"):
                name = f"stale{staleness}-{'tis' if correction != 'none' else 'plain'}"
                summary, run_dir = train(name, "reinforce", {"off_policy_correction": correction}, args.seeds[0],
                                         args.steps, args.steps, staleness, root)
                final = summary["eval"]["final"]
                point = evaluate_checkpoint(summary["model"], final["adapter"], "random", args.games, args.seeds[0])
                rows.append({"max_staleness": staleness, "off_policy_correction": correction,
                             "steps": summary["learner_steps"], "train_wall_s": summary["train_wall_s"],
                             "final_win_rate": point["win_rate"], "ci95": point["ci95"],
                             "dropped_stale": _dropped_stale(run_dir)})
        name = args.name or "ablation"
    else:
        for text in args.variants:
            variant, algorithm, settings = parse_variant(text)
            for seed in args.seeds:
                summary, run_dir = train(variant, algorithm, settings, seed, args.steps, args.every,
                                         args.max_staleness, root)
                curve = curve_rows(variant, algorithm, seed, summary, run_dir, args.every, args.opponents, args.games)
                rows.extend(curve)
                for opponent in args.opponents:
                    points = [r for r in curve if r["opponent"] == opponent and r["step"] > 0]
                    best = max(points, key=lambda r: r["win_rate"])
                    rows.append({"variant": variant, "algorithm": algorithm, "seed": seed, "step": "summary",
                                 "opponent": opponent, "train_wall_s": summary["train_wall_s"],
                                 "best_step": best["step"], "best_win_rate": best["win_rate"],
                                 "final_win_rate": points[-1]["win_rate"],
                                 "final_below_best": round(best["win_rate"] - points[-1]["win_rate"], 4)})
        name = args.name or "algorithms"
    write_result(name, args, rows, {"steps": args.steps, "every": args.every, "games": args.games,
                                    "seeds": args.seeds, "variants": args.variants, "run_dirs": str(root),
                                    "max_staleness": args.max_staleness,
                                    "job": "unstable quickstart defaults (384 moves/step, lr 1e-3 linear decay)"},
                 notes=["win rates are greedy games vs the opponent, seats alternating, 95% Wilson intervals"],
                 info=info)


def _dropped_stale(run_dir: Path) -> int:
    dropped = 0
    with open(run_dir / "metrics.jsonl") as f:
        for line in f:
            value = json.loads(line).get("buffer/dropped_stale")
            if value is not None:
                dropped = max(dropped, int(value))
    return dropped


if __name__ == "__main__":
    main()
