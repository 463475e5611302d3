"""The heat map of a league table: :func:`plot_league_table` writes the cross-play matrix as a PNG.

Each cell is coloured by the row entry's payoff against the column entry (win rate minus loss rate,
red: the row loses, blue: it wins) and labelled with it and its 95% interval; a bar beside the matrix
shows the max-entropy Nash mixture. Needs matplotlib (``pip install 'unstable-baselines[plot]'``).
"""

from __future__ import annotations

import math
import os
from typing import Any

from unstable.eval.league import LeagueTable
from unstable.ui.plots import pyplot


def plot_league_table(table: LeagueTable, path: str | os.PathLike) -> str:
    """Write the heat map of ``table`` to ``path`` (a ``.png``); returns the path."""
    plt = pyplot()
    payoffs, lower, upper = table.crossplay.matrices()
    names = list(table.players)
    n = len(names)
    size = max(4.0, 0.9 * n + 2.5)
    fig, (ax, bar) = plt.subplots(1, 2, figsize=(size + 1.5, size), width_ratios=[n, 1.2], sharey=True)
    image = ax.imshow(payoffs, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")  # rows level with the bar's
    ax.set_xticks(range(n), names, rotation=45, ha="right")
    ax.set_yticks(range(n), names)
    ax.set_xlabel("column entry")
    ax.set_ylabel("row entry")
    for i in range(n):
        for j in range(n):
            if i != j and not math.isnan(payoffs[i, j]):
                ax.text(j, i, f"{payoffs[i, j]:+.2f}\n[{lower[i, j]:+.2f},{upper[i, j]:+.2f}]", ha="center",
                        va="center", fontsize=7, color="white" if abs(payoffs[i, j]) > 0.6 else "black")
    ax.set_title(f"{table.env_id}: win rate - loss rate of the row entry\n"
                 f"{table.crossplay.games_per_cell} games per cell, [95% interval]", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    _nash_bar(bar, names, table)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _nash_bar(ax: Any, names: list[str], table: LeagueTable) -> None:
    mixture = table.nash.mixture
    ax.barh(range(len(names)), mixture, color="tab:green")  # shares the matrix's rows (y axis)
    ax.set_xlim(0, 1)
    ax.set_title("Nash mixture", fontsize=9)
    for i, p in enumerate(mixture):
        ax.text(min(p, 0.75) + 0.02, i, f"{p:.2f}", va="center", fontsize=7)
