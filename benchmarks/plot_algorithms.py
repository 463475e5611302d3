"""Plot learning curves from ``bench_algorithms.py`` results: greedy win rate per checkpoint, 95% intervals.

    .venv/bin/python benchmarks/plot_algorithms.py benchmarks/results/algorithms.json \\
        benchmarks/results/algorithms-seeds12.json --out benchmarks/results/algorithms.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import pyplot, save_figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="bench_algorithms.py JSON files")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--opponent", default="random")
    args = parser.parse_args()
    plt = pyplot()

    curves: dict[tuple[str, int], list[dict]] = {}
    for path in args.results:
        for row in json.loads(Path(path).read_text())["rows"]:
            if row.get("step") != "summary" and row.get("opponent") == args.opponent:
                curves.setdefault((row["variant"], row["seed"]), []).append(row)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (variant, seed), rows in sorted(curves.items()):
        rows.sort(key=lambda r: r["step"])
        steps = [r["step"] for r in rows]
        rate = [r["win_rate"] for r in rows]
        err = [[r["win_rate"] - r["ci95"][0] for r in rows], [r["ci95"][1] - r["win_rate"] for r in rows]]
        ax.errorbar(steps, rate, yerr=err, marker="o", ms=3, capsize=2, label=f"{variant}, seed {seed}")
    games = {r["games"] for rows in curves.values() for r in rows}
    ax.set_xlabel("learner step (384 moves each)")
    ax.set_ylabel(f"greedy win rate vs {args.opponent}")
    ax.set_title(f"TicTacToe self-play, tiny model: {', '.join(map(str, sorted(games)))} games per point, 95% CI")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, args.out)


if __name__ == "__main__":
    main()
