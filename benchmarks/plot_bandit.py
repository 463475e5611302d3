"""The bandit's learning curves: the weakest card's probability of its best move against games played, for the
1M model's learners beside their tabular twins (``benchmarks/learning_signal.py --out`` files, one run or a list).

    .venv/bin/python benchmarks/plot_bandit.py benchmarks/results/learning-signal-2026-11-28/*.json --out bandit.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import pyplot, save_figure


def runs(path: Path) -> list[dict]:
    """The runs of one ``learning_signal.py`` result file: a list of them, or one."""
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [data]


def label(run: dict) -> str:
    settings = run["settings"]
    parts = [f"seed {run['seed']}"]
    if settings.get("beta"):
        parts.append(f"beta {settings['beta']:g}")
    if "prompt" in settings.get("group_by", ()):
        parts.append("a group per card")
    if settings.get("epochs", 1) * settings.get("minibatches", 1) > 1:
        parts.append(f"{settings['epochs']}x{settings['minibatches']} steps a batch")
    parts.append("expected chips" if run.get("expected") else "sampled chips")
    return f"{run['algorithm']} ({', '.join(parts)})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(9, 5))
    any_tabular = False
    for path in args.files:
        for run in runs(path):
            curve = run["curve"]
            tabular = "tabular" in run["algorithm"]
            any_tabular |= tabular
            ax.plot([c["games"] for c in curve], [min(c["best"].values()) for c in curve],
                    lw=1.0 if tabular else 1.4, ls=":" if tabular else "-", alpha=0.9, label=label(run))
    ax.axhline(args.target, color="red", lw=0.8, ls="-.", label=f"target: {args.target:g}")
    ax.axhline(0.5, color="orange", lw=0.8, ls="-.", label="uniform over the two moves")
    ax.set_xlabel("openings played (games)")
    ax.set_ylabel("weakest card's best move (share of the legal answers)")
    ax.set_ylim(0, 1)
    ax.set_title("Kuhn's opening as a bandit, from the card-blind start" + (" (tabular twins dotted)" * any_tabular))
    ax.legend(fontsize=6.5, loc="center right")
    save_figure(fig, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
