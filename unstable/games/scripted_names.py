"""Which scripted baselines each game has: the names only, importable without TextArena.

The policies are in :mod:`unstable.policies.scripted` and :mod:`unstable.policies.baselines`; the
legal-move readers they play from in :mod:`unstable.games.legal_moves`. Kept apart so that the
command line can list the names in its help without importing TextArena.
"""

from __future__ import annotations

#: The scripted baselines of each game with a legal-move reader: ``random`` plays a uniformly random
#: legal move; ``heuristic`` wins at once if it can, else blocks the opponent's immediate win, else
#: plays at random; ``optimal`` is perfect (minimax) play; ``nash`` a Nash-equilibrium strategy of
#: Kuhn poker.
SCRIPTED_BASELINES: dict[str, tuple[str, ...]] = {
    "TicTacToe": ("random", "heuristic", "optimal"),
    "KuhnPoker": ("random", "nash"),
    "ConnectFour": ("random", "heuristic"),
    "Nim": ("random",),
    "SimpleTak": ("random",),
}

#: The scripted baselines of every OpenSpiel game (``openspiel:<game>``): its legal moves are the game's own.
OPENSPIEL_BASELINES: tuple[str, ...] = ("random",)

#: Every scripted baseline's name, whatever game it plays: these names are scripted opponents (not
#: API models or adapter paths) wherever an opponent is named.
SCRIPTED_POLICIES = tuple(dict.fromkeys(name for names in SCRIPTED_BASELINES.values() for name in names))


def describe_scripted_baselines() -> str:
    """``"TicTacToe: random, heuristic, optimal; KuhnPoker: random, nash; ..."``, for help texts."""
    return "; ".join(f"{game}: {', '.join(names)}" for game, names in SCRIPTED_BASELINES.items())
