"""Averages of a Kuhn run's checkpoints, weighted several ways, read exactly.

``unstable eval --exploitability --run RUN --all-checkpoints`` reports the average of every checkpoint from
the first, each weighted equally (fictitious play's output). A run that starts far from the equilibrium
carries its early checkpoints in that average for a long time; CFR's practice is to weight later iterates
more (linear averaging: Tammelin et al. 2015, CFR+; Brown & Sandholm 2019, "Solving Imperfect-Information
Games via Discounted Regret Minimization") or to drop a burn-in. This reads every checkpoint's table once
(T=1, top_p=1, the in-run reading) and prints, per run, the exploitability of the last checkpoint and of the
averages: uniform, linear (weight = step), and uniform over the last half and the last quarter of the run.

    .venv/bin/python benchmarks/checkpoint_averages.py runs/a runs/b --out averages.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read_tables(run: Path) -> dict[int, dict]:
    """Every checkpoint's exact table (learner step -> table), the base model as step 0."""
    from unstable.eval.exploitability import evaluate_exploitability
    from unstable.inference.transformers_backend import TransformersBackend
    from unstable.local_models.resolve import resolve_model_name
    from unstable.run.resume import read_run_files

    config, registry = read_run_files(str(run))
    model = resolve_model_name((config.get("models") or [{"model_name": config.get("model_name")}])[0]["model_name"])
    env = config["train_envs"][0]["env_id"]
    template = config["train_envs"][0].get("prompt_template")
    backend = TransformersBackend(model)
    entries = sorted((m for m in registry["models"] if not m.get("fixed")), key=lambda m: m["iteration"])
    return {e["iteration"]: evaluate_exploitability(model, env, e.get("path_or_name"), prompt_template=template,
                                                    temperature=1.0, top_p=1.0, max_new_tokens=64, method="exact",
                                                    backend=backend).policy
            for e in entries}


def averages(tables: dict[int, dict]) -> dict[str, float]:
    """Exploitability of the last table and of the weighted averages (see the module docstring)."""
    from unstable.eval.average_policy import PolicyAverage
    from unstable.eval.game_states import solved_game
    from unstable.eval.solvers import kuhn_exploitability

    last = max(tables)
    out = {"last": kuhn_exploitability(tables[last], allow_invalid_mass=True).exploitability}
    rules = {"uniform": lambda s: 1.0, "linear": lambda s: float(s),
             "last half": lambda s: float(s >= last / 2), "last quarter": lambda s: float(s >= 3 * last / 4)}
    for name, weight in rules.items():
        average = PolicyAverage(solved_game("KuhnPoker-v0-train"))
        for step in sorted(tables):
            average.add(tables[step], weight(step))
        out[name] = average.exploitability()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    results = {}
    for run in map(Path, args.runs):
        results[run.name] = averages(read_tables(run))
        print(run.name, "; ".join(f"{k} {v:.3f}" for k, v in results[run.name].items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
