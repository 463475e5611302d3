"""Learning-curve plots of a run: :func:`plot_run` writes PNGs into ``<run_dir>/plots/``.

The data is what the run already wrote: ``metrics.jsonl`` (one line per Tracker call, each with
its ``learner_step``; a game's line holds that game's values) and ``registry/registry.json`` (the
TrueSkill ratings saved when the run stops). The files, each written only when its data exists:

* ``eval_win_rate.png``: win rate of the eval games per env and opponent over learner steps, games
  pooled into bins along the steps, with the 95% Wilson interval of each bin as a band; where the
  run holds a ``summary.json`` (``unstable quickstart``), also its harness evaluations of the
  initial and final checkpoints, as points with their 95% intervals;
* ``trueskill.png``: TrueSkill mu +- sigma of every checkpoint by iteration, fixed opponents as bands;
* ``move_quality.png``: format-ok and invalid-move rates of the collected (training) games;
* ``game_length.png``: turns per collected game;
* ``training.png``: the learner's loss and gradient norm;
* ``exploitability.png``: the exact exploitability of each checkpoint (and, where measured, of the average of
  the checkpoints so far, :mod:`unstable.eval.average_policy`, and of NFSP's average policy) and its other
  (invalid) mass, from ``eval/<env>/exploitability`` values in ``metrics.jsonl`` or ``exploitability.jsonl`` (written by
  ``unstable eval --exploitability --run RUN --all-checkpoints``).

Curves show the mean per learner step faintly and a moving average over steps on top. Needs
matplotlib (``pip install 'unstable-baselines[plot]'``); the Agg backend is used, so no display is needed.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from unstable.eval.intervals import wilson_interval
from unstable.tracking.run_dir import METRICS_FILE, read_metrics

PLOTS_DIR = "plots"
REGISTRY_FILE = os.path.join("registry", "registry.json")
SUMMARY_FILE = "summary.json"  # written by ``unstable quickstart``
EXPLOITABILITY_FILE = "exploitability.jsonl"  # written by ``unstable eval --exploitability --all-checkpoints``
_MIN_GAMES_PER_BIN = 8  # eval games pooled per point of the win-rate curve (at least)
_MAX_BINS = 25


class RunData(NamedTuple):
    """What a run directory holds for the plots; each plot reads the parts it needs."""

    rows: list[dict[str, Any]]  # metrics.jsonl
    registry: dict[str, Any] | None  # registry/registry.json
    summary: dict[str, Any] | None  # summary.json (``unstable quickstart``)


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or an ImportError saying which extra to install."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("plots need matplotlib: pip install 'unstable-baselines[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _model_of(key: str) -> str | None:
    """``alice`` for a model's own metric (``alice/train/loss``) in a run with several models."""
    model, _, rest = key.partition("/")
    return model if rest.startswith(("train/", "buffer/")) else None


def _by_step(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float], list[int]]:
    """Steps with a value of ``key``, the sum of the values at each step and how many there were.
    A model's own metric (``alice/train/loss``) is placed at that model's step, not the run's."""
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    model = _model_of(key)
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            step = int(row.get(f"{model}/train/version", row.get("learner_step", 0)) if model
                       else row.get("learner_step", 0))
            sums[step] += value
            counts[step] += 1
    steps = sorted(counts)
    return steps, [sums[s] for s in steps], [counts[s] for s in steps]


def _moving_average(sums: list[float], counts: list[int], window: int) -> list[float]:
    """Trailing average over ``window`` steps, each step weighted by its number of values."""
    out = []
    for i in range(len(sums)):
        lo = max(0, i - window + 1)
        out.append(sum(sums[lo : i + 1]) / sum(counts[lo : i + 1]))
    return out


def _keys(rows: list[dict[str, Any]], prefix: str, suffix: str) -> list[str]:
    return sorted({k for row in rows for k in row if k.startswith(prefix) and k.endswith(suffix)})


def _curve(ax: Any, rows: list[dict[str, Any]], key: str, label: str) -> bool:
    """Plot ``key`` over learner steps on ``ax``; False if there is no data."""
    steps, sums, counts = _by_step(rows, key)
    if not steps:
        return False
    means = [s / c for s, c in zip(sums, counts, strict=True)]
    marker = "o" if len(steps) <= 30 else None
    window = max(1, len(steps) // 15)
    if window == 1:
        ax.plot(steps, means, marker=marker, markersize=3, label=label)
        return True
    (line,) = ax.plot(steps, means, alpha=0.25, linewidth=1)
    ax.plot(steps, _moving_average(sums, counts, window), color=line.get_color(), linewidth=2,
            label=f"{label} (avg of {window} steps)")
    return True


RATE = (-0.02, 1.02)  # y range of a rate panel
FROM_ZERO = (0, None)  # y range of a count or a norm


def _style(ax: Any, xlabel: str, ylabel: str, ylim: tuple[float | None, float | None] = (None, None)) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def _curves_figure(plt: Any, rows: list[dict[str, Any]], title: str,
                   panels: list[tuple[str, dict[str, str], tuple]]) -> Any | None:
    """One figure, a panel per ``(y label, {curve label: metric key}, y range)`` that has data; None if none has."""
    present = [panel for panel in panels if any(_by_step(rows, k)[0] for k in panel[1].values())]
    if not present:
        return None
    fig, axes = plt.subplots(1, len(present), figsize=(6.5 * len(present), 4.5), squeeze=False)
    for ax, (ylabel, curves, ylim) in zip(axes[0], present, strict=True):
        for label, key in curves.items():
            _curve(ax, rows, key, label)
        _style(ax, "learner step", ylabel, ylim)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _envs(rows: list[dict[str, Any]], suffix: str) -> list[str]:
    return [k.split("/")[1] for k in _keys(rows, "collect/", f"/{suffix}")]


def _move_quality(plt: Any, run: RunData) -> Any | None:
    rows = run.rows
    return _curves_figure(plt, rows, "Move quality in training games", [
        ("format-ok rate (share of moves)", {e: f"collect/{e}/format_ok_rate" for e in _envs(rows, "format_ok_rate")},
         RATE),
        ("invalid-move rate (share of moves)",
         {e: f"collect/{e}/invalid_move_rate" for e in _envs(rows, "invalid_move_rate")}, RATE),
    ])


def _game_length(plt: Any, run: RunData) -> Any | None:
    rows = run.rows
    return _curves_figure(plt, rows, "Game length in training games", [
        ("turns per game (all seats)", {e: f"collect/{e}/game_length" for e in _envs(rows, "game_length")}, FROM_ZERO),
    ])


def _training(plt: Any, run: RunData) -> Any | None:
    """The learner's losses and gradient norms; with several models, a curve per model (at its own steps)."""
    models = sorted({_model_of(k) for row in run.rows for k in row if k.endswith("/train/loss")} - {None})
    prefixes = [f"{m}/" for m in models] or [""]

    def curves(names: dict[str, str]) -> dict[str, str]:
        return {f"{p}{label}" if p else label: f"{p}{key}" for p in prefixes for label, key in names.items()}

    return _curves_figure(plt, run.rows, "Learner" + (f"s: {', '.join(models)}" if models else ""), [
        ("loss", curves({"policy loss": "train/loss", "critic loss": "train/value_loss"}), (None, None)),
        ("gradient norm (before clipping)", curves({"policy": "train/grad_norm", "critic": "train/critic_grad_norm"}),
         FROM_ZERO),
    ])


def _win_rate_bins(steps: list[int], wins: list[float], games: list[int]) -> list[tuple[float, int, int]]:
    """Consecutive steps pooled until a bin holds enough games: ``(mean step, wins, games)`` per bin."""
    per_bin = max(_MIN_GAMES_PER_BIN, -(-sum(games) // _MAX_BINS))
    bins, acc = [], [0.0, 0.0, 0]
    for step, w, n in zip(steps, wins, games, strict=True):
        acc = [acc[0] + step * n, acc[1] + w, acc[2] + n]
        if acc[2] >= per_bin:
            bins.append(acc)
            acc = [0.0, 0.0, 0]
    if acc[2]:
        bins.append(acc)
    return [(s / n, round(w), n) for s, w, n in bins]


def _harness_points(summary: dict[str, Any] | None) -> list[tuple[str, int, float, list[float], int]]:
    """``(label, learner step, win rate, ci95, games)`` of a quickstart summary's initial and final evals."""
    evals = (summary or {}).get("eval") or {}
    steps = {"initial": 0, "final": (summary or {}).get("learner_steps")}
    return [(which, steps[which], e["win_rate"], e["ci95"], e["games"]) for which in ("initial", "final")
            if isinstance(e := evals.get(which), dict) and steps[which] is not None]


def _eval_win_rate(plt: Any, run: RunData) -> Any | None:
    rows = run.rows
    series = {key: _by_step(rows, key) for key in _keys(rows, "eval/", "/win_rate")}
    series = {key: data for key, data in series.items() if data[0]}
    harness = _harness_points(run.summary)
    if not series and not harness:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, data in series.items():
        env, opponent = key.removeprefix("eval/").removesuffix("/win_rate").split("/", 1)
        bins = _win_rate_bins(*data)
        x = [b[0] for b in bins]
        ci = [wilson_interval(w, n) for _, w, n in bins]
        (line,) = ax.plot(x, [w / n for _, w, n in bins], marker="o", markersize=3,
                          label=f"{env} vs {opponent}, eval games during training ({sum(b[2] for b in bins)})")
        ax.fill_between(x, [c[0] for c in ci], [c[1] for c in ci], color=line.get_color(), alpha=0.15)
    if harness:
        evals = run.summary.get("eval") or {}
        decoding, opponent = evals.get("decoding", ""), evals.get("opponent", "")
        ax.errorbar([h[1] for h in harness], [h[2] for h in harness],
                    yerr=[[h[2] - h[3][0] for h in harness], [h[3][1] - h[2] for h in harness]],
                    fmt="s", color="black", capsize=5, markersize=6,
                    label=f"{' / '.join(h[0] for h in harness)} checkpoint vs {opponent}, {decoding} "
                          f"({harness[0][4]} games each)")
        for _, step, rate, _, _ in harness:
            ax.annotate(f"{rate:.3f}", (step, rate), textcoords="offset points", xytext=(8, -4), fontsize=9)
    _style(ax, "learner step", "win rate (band / bars: 95% interval)", RATE)
    ax.set_title("Evaluation win rate")
    fig.tight_layout()
    return fig


def _trueskill(plt: Any, run: RunData) -> Any | None:
    models = (run.registry or {}).get("models") or []
    ckpts = sorted((m for m in models if not m.get("fixed") and m.get("iteration") is not None),
                   key=lambda m: m["iteration"])
    fixed = [m for m in models if m.get("fixed")]
    if not ckpts and not fixed:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if ckpts:
        ax.errorbar([m["iteration"] for m in ckpts], [m["mu"] for m in ckpts], yerr=[m["sigma"] for m in ckpts],
                    marker="o", markersize=4, capsize=3, label="checkpoints (mu ± sigma)")
    for i, m in enumerate(fixed):
        color = f"C{(i + 1) % 10}"
        ax.axhline(m["mu"], color=color, linestyle="--", label=f"{m['uid']} (fixed)")
        ax.axhspan(m["mu"] - m["sigma"], m["mu"] + m["sigma"], color=color, alpha=0.12)
    _style(ax, "checkpoint iteration (learner step)", "TrueSkill mu (± sigma)")
    ax.set_title("TrueSkill ratings")
    fig.tight_layout()
    return fig


def _exploitability(plt: Any, run: RunData) -> Any | None:
    rows = run.rows
    envs = [k.removeprefix("eval/").removesuffix("/exploitability") for k in _keys(rows, "eval/", "/exploitability")]
    return _curves_figure(plt, rows, "Exploitability (exact best response; 0 = unexploitable)", [
        ("exploitability", {label: key for e in envs for label, key in (
            (e, f"eval/{e}/exploitability"),
            (f"{e}, average of the checkpoints", f"eval/{e}/exploitability_average"),
            (f"{e}, NFSP average policy", f"eval/{e}/exploitability_nfsp_average"))}, FROM_ZERO),
        ("other (invalid) mass, mean over states", {e: f"eval/{e}/exploitability_other_mass" for e in envs}, RATE),
    ])


_PLOTS = {
    "eval_win_rate": _eval_win_rate,
    "trueskill": _trueskill,
    "move_quality": _move_quality,
    "game_length": _game_length,
    "training": _training,
    "exploitability": _exploitability,
}


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (none if it does not exist)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_run(run_dir: str | os.PathLike) -> list[Path]:
    """Write the plots whose data ``run_dir`` holds into ``run_dir/plots/``; return their paths."""
    root = Path(run_dir)
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"{str(root)!r} is a file, not a run directory (give the folder a run writes, "
                                 "runs/<run_name>)")
    if not root.is_dir():
        raise FileNotFoundError(f"run directory {str(root)!r} does not exist")
    rows = read_metrics(root) if (root / METRICS_FILE).is_file() else []
    run = RunData(rows + _read_jsonl(root / EXPLOITABILITY_FILE),
                  _read_json(root / REGISTRY_FILE), _read_json(root / SUMMARY_FILE))
    plt = pyplot()
    written = []
    for name, draw in _PLOTS.items():
        fig = draw(plt, run)
        if fig is None:
            continue
        path = root / PLOTS_DIR / f"{name}.png"
        path.parent.mkdir(exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
