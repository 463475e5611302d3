"""Exploitability against moves played: runs of the 1M model beside the tabular twin of their update.

Runs are ``unstable quickstart`` run directories (their ``metrics.jsonl`` holds each checkpoint's exact
exploitability, read during the run; a learner step is ``batch_size`` moves), optionally with the
``--all-checkpoints`` reading of their checkpoint average (``unstable eval --exploitability --run RUN
--all-checkpoints`` writes it to ``RUN/exploitability.jsonl``); the twin is a
``benchmarks/kuhn_tabular_selfplay.py --out`` file.

    .venv/bin/python benchmarks/plot_selfplay.py --runs runs/a runs/b --tabular twin.json --out curves.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _curve(run: Path, file: str, key: str) -> tuple[list[int], list[float]]:
    """(moves, value) of ``eval/<env>/<key>`` on each line of ``RUN/<file>`` that has a ``learner_step``; a learner
    step is the run's ``batch_size`` moves."""
    batch = json.loads((run / "config.json").read_text()).get("batch_size", 128)
    points = {}
    for line in (run / file).read_text().splitlines():
        row = json.loads(line)
        for name, value in row.items():
            if name.startswith("eval/") and name.endswith(f"/{key}") and "learner_step" in row:
                points[row["learner_step"] * batch] = value
    moves = sorted(points)
    return moves, [points[m] for m in moves]


def run_curve(run: Path) -> tuple[list[int], list[float]]:
    """Each checkpoint's exploitability read during the run (``metrics.jsonl``)."""
    return _curve(run, "metrics.jsonl", "exploitability")


def average_curve(run: Path) -> tuple[list[int], list[float]] | None:
    """The exploitability of the average of the checkpoints so far, from the ``RUN/exploitability.jsonl`` that
    ``unstable eval --exploitability --run RUN --all-checkpoints`` writes, if it was run."""
    if not (run / "exploitability.jsonl").is_file():
        return None
    return _curve(run, "exploitability.jsonl", "exploitability_average")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="*", default=[], help="run directories")
    p.add_argument("--tabular", nargs="*", default=[], help="kuhn_tabular_selfplay.py --out files")
    p.add_argument("--title", default="KuhnPoker self-play")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for run in map(Path, args.runs):
        moves, values = run_curve(run)
        (line,) = ax.plot(moves, values, lw=1, alpha=0.8, label=f"{run.name}: last iterate")
        if (average := average_curve(run)) is not None:
            ax.plot(*average, lw=2, color=line.get_color(), ls="--", label=f"{run.name}: average of checkpoints")
    for path in args.tabular:
        for result in json.loads(Path(path).read_text()):
            curve = result["curve"]
            moves = [c["moves"] for c in curve]
            ax.plot(moves, [c["exploitability"] for c in curve], lw=0.6, color="grey", alpha=0.5)
            ax.plot(moves, [c["average"] for c in curve], lw=1.2, color="black", alpha=0.6, ls=":")
    if args.tabular:
        ax.plot([], [], lw=0.6, color="grey", label="tabular twin: last iterate")
        ax.plot([], [], lw=1.2, color="black", ls=":", label="tabular twin: average")
    ax.axhline(0.10, color="red", lw=0.8, ls="-.", label="aim: 0.10")
    ax.axhline(1 / 3, color="orange", lw=0.8, ls="-.", label="card-blind floor: 1/3")
    ax.set_xlabel("moves played")
    ax.set_ylabel("exploitability (chips a hand)")
    ax.set_ylim(0, 0.8)
    ax.set_title(args.title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
