"""Exploitability against moves or hands played: runs of the 1M model beside the tabular twin of their update,
or beside OpenSpiel's own learners.

Runs are ``unstable quickstart`` run directories (their ``metrics.jsonl`` holds each checkpoint's exact
exploitability, read during the run; a learner step is ``batch_size`` moves; ``collect/games`` counts the hands),
optionally with the ``--all-checkpoints`` reading of their checkpoint average (``unstable eval --exploitability
--run RUN --all-checkpoints`` writes it to ``RUN/exploitability.jsonl``); the twin is a
``benchmarks/kuhn_tabular_selfplay.py --out`` file, the 1M model scoring the legal answers a
``benchmarks/kuhn_scored_selfplay.py --out`` file, the baselines a ``benchmarks/openspiel_baselines.py`` result.

    .venv/bin/python benchmarks/plot_selfplay.py --runs runs/a runs/b --tabular twin.json --out curves.png
    .venv/bin/python benchmarks/plot_selfplay.py --x hands --runs runs/leduc-s0 \
        --baselines benchmarks/results/openspiel-baselines-leduc_poker.json --aim none --floor none --out leduc.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import pyplot, save_figure


def hands_by_step(run: Path) -> dict[int, int]:
    """The hands (games) the run had collected when each learner step was logged (``collect/games``, a running
    count in ``metrics.jsonl``)."""
    out: dict[int, int] = {}
    games = 0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        games = row.get("collect/games", games)
        if "learner_step" in row:
            out.setdefault(row["learner_step"], games)
    return out


def _curve(run: Path, file: str, key: str, x: str = "moves") -> tuple[list[int], list[float]]:
    """(moves or hands, value) of ``eval/<env>/<key>`` on each line of ``RUN/<file>`` that has a ``learner_step``;
    a learner step is the run's ``batch_size`` moves."""
    batch = json.loads((run / "config.json").read_text()).get("batch_size", 128)
    hands = hands_by_step(run) if x == "hands" else {}
    points = {}
    for line in (run / file).read_text().splitlines():
        row = json.loads(line)
        for name, value in row.items():
            if name.startswith("eval/") and name.endswith(f"/{key}") and "learner_step" in row:
                step = row["learner_step"]
                points[hands.get(step, 0) if x == "hands" else step * batch] = value
    xs = sorted(points)
    return xs, [points[m] for m in xs]


def run_curve(run: Path, x: str = "moves") -> tuple[list[int], list[float]]:
    """Each checkpoint's exploitability read during the run (``metrics.jsonl``)."""
    return _curve(run, "metrics.jsonl", "exploitability", x)


def average_curve(run: Path, x: str = "moves") -> tuple[list[int], list[float]] | None:
    """The exploitability of the average of the checkpoints so far, from the ``RUN/exploitability.jsonl`` that
    ``unstable eval --exploitability --run RUN --all-checkpoints`` writes, if it was run."""
    if not (run / "exploitability.jsonl").is_file():
        return None
    return _curve(run, "exploitability.jsonl", "exploitability_average", x)


def _line(value: str) -> float | None:
    return None if value == "none" else float(value)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="*", default=[], help="run directories")
    p.add_argument("--tabular", nargs="*", default=[], help="kuhn_tabular_selfplay.py --out files")
    p.add_argument("--scored", nargs="*", default=[], help="kuhn_scored_selfplay.py --out files (a colour a seed)")
    p.add_argument("--baselines", nargs="*", default=[], help="openspiel_baselines.py result files (x: hands)")
    p.add_argument("--x", choices=("moves", "hands"), default="moves", help="what the x axis counts")
    p.add_argument("--aim", type=_line, default=0.10, help="a horizontal line for the aim ('none': no line)")
    p.add_argument("--floor", type=_line, default=1 / 3, help="the card-blind floor's line ('none': no line)")
    p.add_argument("--ymax", type=float, default=0.8)
    p.add_argument("--title", default="KuhnPoker self-play")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if (args.tabular or args.scored) and args.x != "moves":
        p.error("the twins count moves: --tabular and --scored need --x moves")
    if args.baselines and args.x != "hands":
        p.error("OpenSpiel's learners count hands: --baselines needs --x hands")
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(9, 5))
    for run in map(Path, args.runs):
        xs, values = run_curve(run, args.x)
        (line,) = ax.plot(xs, values, lw=1, alpha=0.8, label=f"{run.name}: last iterate")
        if (average := average_curve(run, args.x)) is not None:
            ax.plot(*average, lw=2, color=line.get_color(), ls="--", label=f"{run.name}: average of checkpoints")
    for path in args.scored:
        for result in json.loads(Path(path).read_text()):
            curve = result["curve"]
            moves = [c["moves"] for c in curve]
            (line,) = ax.plot(moves, [c["exploitability"] for c in curve], lw=0.7, alpha=0.6,
                              label=f"scored 1M, seed {result['seed']}: last iterate")
            ax.plot(moves, [c["average"] for c in curve], lw=2, color=line.get_color(), ls="--",
                    label=f"scored 1M, seed {result['seed']}: average of all")
    for path in args.tabular:
        for result in json.loads(Path(path).read_text()):
            curve = result["curve"]
            moves = [c["moves"] for c in curve]
            ax.plot(moves, [c["exploitability"] for c in curve], lw=0.6, color="grey", alpha=0.5)
            ax.plot(moves, [c["average"] for c in curve], lw=1.2, color="black", alpha=0.6, ls=":")
    if args.tabular:
        ax.plot([], [], lw=0.6, color="grey", label="tabular twin: last iterate")
        ax.plot([], [], lw=1.2, color="black", ls=":", label="tabular twin: average")
    for path in args.baselines:
        rows = json.loads(Path(path).read_text())["rows"]
        for k, name in enumerate(sorted({r["algorithm"] for r in rows})):
            for seed in sorted({r["seed"] for r in rows if r["algorithm"] == name}):
                curve = [r for r in rows if r["algorithm"] == name and r["seed"] == seed]
                ax.plot([r["hands"] for r in curve], [r["exploitability"] for r in curve], lw=1.2, ls=":",
                        color=("black", "grey", "brown")[k % 3],
                        label=f"OpenSpiel {name} (average policy)" if seed == min(r["seed"] for r in rows) else None)
    if args.aim is not None:
        ax.axhline(args.aim, color="red", lw=0.8, ls="-.", label=f"aim: {args.aim:g}")
    if args.floor is not None:
        ax.axhline(args.floor, color="orange", lw=0.8, ls="-.", label=f"card-blind floor: {args.floor:.3g}")
    ax.set_xlabel(f"{args.x} played")
    ax.set_ylabel("exploitability (chips a hand)")
    ax.set_ylim(0, args.ymax)
    ax.set_title(args.title)
    ax.legend(fontsize=7, ncol=2)
    save_figure(fig, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
