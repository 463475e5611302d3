"""A run's average policy as the game plays it: every ``--every``-th checkpoint from ``--from`` on, read by
sampling through the game's own answer extraction, and the reach-weighted average of those tables.

``unstable eval --exploitability --run RUN --all-checkpoints`` reads every checkpoint exactly; the exact reading
counts any answer that is not a legal move's canonical spelling as a fold, although the game plays some of them
(a stray token before the box). Sampling (``--samples`` completions a state, the game's extraction) reads each
checkpoint as the game plays it, with the answers the game rejects counted as losses; the average of those
tables is the policy that draws one of the checkpoints per game (fictitious play's output), as played. Each row
also has the exact reading (other as a fold) and the legal-only one (conditioned on a legal answer).

    .venv/bin/python benchmarks/sampled_average.py --run runs/kuhn-s2 --from 200 --every 10 --top-p 1
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import quiet_libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="a run directory (quickstart's or build()'s)")
    parser.add_argument("--from", dest="start", type=int, default=0, help="the first learner step averaged")
    parser.add_argument("--every", type=int, default=10, help="read every N-th learner step's checkpoint")
    parser.add_argument("--samples", type=int, default=400, help="completions a state")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--out", required=True, help="the JSON file written")
    args = parser.parse_args()
    quiet_libraries()
    from unstable.eval.average_policy import PolicyAverage
    from unstable.eval.exploitability import evaluate_exploitability, legal_only
    from unstable.inference.transformers_backend import TransformersBackend
    from unstable.local_models.resolve import resolve_model_name
    from unstable.run.resume import read_run_files

    config, registry = read_run_files(args.run)
    model = resolve_model_name(config["models"][0]["model_name"])
    env = config["train_envs"][0]["env_id"]
    template = config["train_envs"][0].get("prompt_template")
    chosen = sorted((m for m in registry["models"] if not m.get("fixed") and m.get("path_or_name")
                     and m["iteration"] >= args.start and m["iteration"] % args.every == 0),
                    key=lambda m: m["iteration"])
    if not chosen:
        raise SystemExit(f"no checkpoint of {args.run} at a multiple of {args.every} from step {args.start}")
    backend = TransformersBackend(model)
    sampled, exact, legal, rows = PolicyAverage(env), PolicyAverage(env), PolicyAverage(env), []
    try:
        for entry in chosen:
            read = {method: evaluate_exploitability(model, env, entry["path_or_name"], prompt_template=template,
                                                    temperature=args.temperature, top_p=args.top_p, method=method,
                                                    samples=args.samples, backend=backend)
                    for method in ("sampled", "exact")}
            sampled.add(read["sampled"].policy)
            exact.add(read["exact"].policy)
            legal.add(legal_only(read["exact"].policy))
            rows.append({"step": entry["iteration"], "sampled": read["sampled"].exploitability,
                         "sampled_other": read["sampled"].other_mean, "exact": read["exact"].exploitability,
                         "legal": read["exact"].legal_exploitability, "other": read["exact"].other_mean})
            print(f"step {entry['iteration']:>5}: sampled {rows[-1]['sampled']:.4f} (rejected "
                  f"{rows[-1]['sampled_other']:.3f}), exact {rows[-1]['exact']:.4f}, legal {rows[-1]['legal']:.4f}",
                  flush=True)
    finally:
        backend.close()
    average = {"sampled": sampled.exploitability(), "exact": exact.exploitability(), "legal": legal.exploitability()}
    print(f"average of {len(rows)} checkpoints: sampled {average['sampled']:.4f}, exact (other as a fold) "
          f"{average['exact']:.4f}, legal answers only {average['legal']:.4f}")
    Path(args.out).write_text(json.dumps({
        "run": args.run, "from": args.start, "every": args.every, "samples_per_state": args.samples,
        "temperature": args.temperature, "top_p": args.top_p, "rows": rows, "average": average,
        "rejected_mean": sum(r["sampled_other"] for r in rows) / len(rows),
        "sampled_average_table": sampled.table()}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
