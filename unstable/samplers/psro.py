"""PSRO over the checkpoint pool: the opponent mixture is the meta-game's equilibrium, kept up to date.

Policy-Space Response Oracles (Lanctot, Zambaldi, Gruslys, Lazaridou, Tuyls, Perolat, Silver and
Graepel, "A Unified Game-Theoretic Approach to Multiagent Reinforcement Learning", NeurIPS 2017,
Algorithm 1): keep a population of policies, fill in the **meta-game** (the empirical payoff of
every policy against every other), solve it with a **meta-solver**, and train the next policy as a
best response to the solver's mixture. Here the population is the learner's checkpoints (each one
an approximate best response to the mixture it trained against) and the fixed opponents, and the
learner keeps training against the mixture:

* every ``every`` new learner checkpoints, an **update** opens over the pool, the learner's
  ``pool_size`` newest checkpoints (its current one among them) and the fixed opponents;
* the matrix is read from the registry's recorded games (``match_results``: the train and eval games
  it has rated, real games between those uids); a pair with fewer than ``games_per_cell`` games gets
  the rest as **matrix games** (:meth:`PSROModelSampler.next_matrix_game`), which the scheduler
  plays through the collector with no seat collected, so none reaches a training buffer; each pair
  gets at most the missing games, however many of them fail;
* once every matrix game has come back (finished or failed), the meta-solver (a pure function of the
  payoff matrix, :func:`unstable.samplers.metagame.meta_solver`: max-entropy Nash by default,
  α-Rank as an option) gives the mixture, which becomes the opponent distribution
  (:meth:`~unstable.samplers.league.MixtureModelSampler.set_mixture`) until the next update;
* each update is logged: a line of :data:`PSRO_LOG_FILE` in the run directory (the pool, the payoff
  and game-count matrices, the mixture) and ``league/psro/...`` metrics to the tracker. The line is
  the update's saved state: a resumed run continues from the newest line, one line per update number.

Before the first update the mixture is empty, and the learner plays itself (mirror self-play).
``payoffs[i, j] = (wins - losses) / games`` of entry ``i`` against ``j`` (a draw 0), the
antisymmetric matrix of :mod:`unstable.samplers.metagame`; a pair without games reads 0.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from unstable.samplers.league import MixtureModelSampler
from unstable.samplers.metagame import meta_solver as named_meta_solver
from unstable.utils.calls import call, fire
from unstable.utils.checks import check_int

PSRO_LOG_FILE = "psro.jsonl"
"""One JSON line per PSRO update, in the run directory."""
MAX_PSRO_GAMES_PER_CELL = 1000
"""The most ``psro_games_per_cell``: an update plays its matrix games before any train game, so with a pool of
10 checkpoints and 1 fixed opponent (55 pairs) training waits for up to 55,000 games at this bound."""

MetaSolver = Callable[[list[list[float]]], Sequence[float]]


@dataclass(frozen=True, slots=True)
class MatrixGame:
    """One game the meta-game lacks: ``row`` against ``col``, ``row`` in seat ``row_seat`` (0 or 1;
    the seats alternate over a pair's games)."""

    row: str
    col: str
    row_seat: int


@dataclass(frozen=True, slots=True)
class PSROUpdate:
    """One solved meta-game: what :data:`PSRO_LOG_FILE` holds a line of."""

    update: int  # 1 for the first update
    checkpoints: int  # the learner's checkpoints when it opened
    pool: tuple[str, ...]
    payoffs: tuple[tuple[float, ...], ...]  # payoffs[i][j]: (wins - losses) / games of pool[i] against pool[j]
    games: tuple[tuple[int, ...], ...]  # games[i][j]: the recorded games between pool[i] and pool[j]
    mixture: tuple[float, ...]  # the meta-solver's probability of each pool entry
    solver: str
    matrix_games: int  # the games this update played (handed out; failed ones included)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return {k: (list(map(list, v)) if k in ("payoffs", "games") else (list(v) if isinstance(v, tuple) else v))
                for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PSROUpdate:
        """The inverse of :meth:`to_dict`."""
        return cls(update=int(data["update"]), checkpoints=int(data["checkpoints"]), pool=tuple(data["pool"]),
                   payoffs=tuple(tuple(float(x) for x in row) for row in data["payoffs"]),
                   games=tuple(tuple(int(x) for x in row) for row in data["games"]),
                   mixture=tuple(float(x) for x in data["mixture"]), solver=str(data["solver"]),
                   matrix_games=int(data["matrix_games"]))


def metagame(results: Mapping[str, Mapping[str, Mapping[str, int]]], pool: Sequence[str]
             ) -> tuple[list[list[float]], list[list[int]]]:
    """The meta-game of ``pool`` from the registry's ``match_results`` (``results[a][b]``: a's wins,
    draws and losses against b): ``payoffs[i][j] = (wins - losses) / games`` (0 without games, and on
    the diagonal) and ``games[i][j]``."""
    n = len(pool)
    payoffs = [[0.0] * n for _ in range(n)]
    games = [[0] * n for _ in range(n)]
    for i, a in enumerate(pool):
        for j, b in enumerate(pool):
            if i == j:
                continue
            cell = results.get(a, {}).get(b, {})
            wins, draws, losses = (int(cell.get(k, 0)) for k in ("win", "draw", "loss"))
            games[i][j] = wins + draws + losses
            if games[i][j]:
                payoffs[i][j] = (wins - losses) / games[i][j]
    return payoffs, games


def missing_games(pool: Sequence[str], games: Sequence[Sequence[int]], per_cell: int) -> Iterator[MatrixGame]:
    """The games that bring every pair of ``pool`` to ``per_cell`` games (none for a pair that has
    them), the pairs taken in turn so that a partial matrix is spread evenly; a pair's seats continue
    the alternation from its ``games`` count. Lazy: a game is made when it is handed out."""
    check_int("games_per_cell", per_cell, 1)
    need = {(i, j): max(0, per_cell - games[i][j]) for i in range(len(pool)) for j in range(i + 1, len(pool))}
    return (MatrixGame(pool[i], pool[j], (games[i][j] + k) % 2)
            for k in range(max(need.values(), default=0)) for (i, j), n in need.items() if k < n)


def check_psro_settings(every: Any, games_per_cell: Any, pool_size: Any) -> None:
    """PSRO's settings (build()'s ``psro_every``, ``psro_games_per_cell``, ``psro_pool_size``), checked here
    for the sampler and for the run's config alike."""
    check_int("psro_every", every, 1)
    check_int("psro_games_per_cell", games_per_cell, 1, maximum=MAX_PSRO_GAMES_PER_CELL)
    check_int("psro_pool_size", pool_size, 1)


class PSROModelSampler(MixtureModelSampler):
    """See the module docstring. ``meta_solver``: a name of :data:`~unstable.samplers.metagame.META_SOLVERS`,
    or a function of the payoff matrix that gives the mixture (one probability per pool entry), named
    ``solver_name`` in the logs. ``lineage``: the learner whose checkpoints make the pool (``None``: the
    registry's first). ``fixed_opponents``: the fixed uids in the pool (``None``: every registered
    one). ``tracker`` gets ``league/psro/...`` metrics (``log``) and ``log_path`` a JSON line per
    update, when given."""

    def __init__(self, model_registry: Any, meta_solver: str | MetaSolver = "nash", *, every: int = 5,
                 games_per_cell: int = 8, pool_size: int = 10, solver_name: str | None = None,
                 fixed_opponents: Sequence[str] | None = None, lineage: str | None = None, tracker: Any = None,
                 log_path: str | None = None, rng_seed: int = 489):
        super().__init__(model_registry, rng_seed=rng_seed)
        check_psro_settings(every, games_per_cell, pool_size)
        if isinstance(meta_solver, str):
            meta_solver, solver_name = named_meta_solver(meta_solver), solver_name or meta_solver
        if not callable(meta_solver):
            raise ValueError(f"meta_solver must be a name or a function of the payoff matrix, got {meta_solver!r}")
        self.meta_solver = meta_solver
        self.solver_name = solver_name or getattr(meta_solver, "__name__", "custom")
        self.every, self.games_per_cell, self.pool_size = every, games_per_cell, pool_size
        self.fixed_opponents = None if fixed_opponents is None else tuple(fixed_opponents)
        self.lineage, self.tracker, self.log_path = lineage, tracker, log_path
        self.last: PSROUpdate | None = None  # the latest solved update
        self._updates = 0
        self._checkpoints_seen: int | None = None  # the learner's checkpoints at the last update (or the start)
        self._open: dict[str, Any] | None = None  # the update in progress: its pool, its plan and what is out
        self._reopen: int | None = None  # resumed with an update open: it opens again at the next game
        self.matrix_games_played = 0

    # ----------------------------------------------------------------- the pool
    def _learner(self) -> str | None:
        return self.lineage if self.lineage is not None else (call(self.model_registry, "lineages") or [None])[0]

    def pool(self) -> list[str]:
        """The learner's ``pool_size`` newest checkpoints, then the fixed opponents."""
        own = call(self.model_registry, "checkpoint_uids", self._learner())[-self.pool_size:]
        fixed = call(self.model_registry, "fixed_uids")
        if self.fixed_opponents is not None:
            chosen = set(self.fixed_opponents)
            fixed = [uid for uid in fixed if uid in chosen]
        return list(own) + list(fixed)

    # ----------------------------------------------------------------- the schedule
    def next_matrix_game(self) -> MatrixGame | None:
        """The next game the open update needs, or ``None``. Also where updates open (``every`` new
        checkpoints since the last) and close (every game handed out has come back:
        :meth:`matrix_game_done`): the scheduler asks before each train game."""
        count = len(call(self.model_registry, "checkpoint_uids", self._learner()))
        if self._checkpoints_seen is None:
            self._checkpoints_seen = count
        if self._open is None and self._reopen is not None:
            self._start_update(self._reopen)
            self._reopen = None
        if self._open is None and count - self._checkpoints_seen >= self.every:
            self._start_update(count)
        if self._open is None:
            return None
        game = next(self._open["plan"], None)
        if game is not None:
            self._open["out"] += 1
            self._open["handed"] += 1
            return game
        if self._open["out"] == 0:
            self._solve()
        return None

    def matrix_game_done(self) -> None:
        """A matrix game handed out has come back (finished, failed or dropped)."""
        if self._open is not None and self._open["out"] > 0:
            self._open["out"] -= 1
        self.matrix_games_played += 1

    def _start_update(self, count: int) -> None:
        pool = self.pool()
        _, games = metagame(call(self.model_registry, "match_results"), pool)
        self._open = {"checkpoints": count, "pool": pool, "plan": missing_games(pool, games, self.games_per_cell),
                      "out": 0, "handed": 0}

    def _solve(self) -> None:
        """Close the open update: the matrix from the registry, the solver's mixture, the logs."""
        update, self._open = self._open, None
        pool = update["pool"]
        payoffs, games = metagame(call(self.model_registry, "match_results"), pool)
        mixture = [float(p) for p in self.meta_solver(payoffs)]
        if len(mixture) != len(pool) or not all(math.isfinite(p) and p >= 0 for p in mixture) or sum(mixture) <= 0:
            raise ValueError(f"the meta-solver {self.solver_name!r} gave {mixture} for a pool of {len(pool)}: it must "
                             "give one probability >= 0 per pool entry")
        self.set_mixture(dict(zip(pool, mixture, strict=True)))
        self._updates += 1
        self._checkpoints_seen = update["checkpoints"]
        self.last = PSROUpdate(update=self._updates, checkpoints=update["checkpoints"], pool=tuple(pool),
                               payoffs=tuple(map(tuple, payoffs)), games=tuple(map(tuple, games)),
                               mixture=tuple(mixture), solver=self.solver_name, matrix_games=update["handed"])
        self._log(self.last)

    def _log(self, update: PSROUpdate) -> None:
        if self.log_path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
            with open(self.log_path, "a") as f:
                f.write(json.dumps(update.to_dict()) + "\n")
        if self.tracker is not None:
            entropy = -math.fsum(p * math.log(p) for p in update.mixture if p > 0)
            metrics = {"league/psro/updates": update.update, "league/psro/pool_size": len(update.pool),
                       "league/psro/matrix_games": update.matrix_games, "league/psro/mixture_entropy": entropy,
                       **{f"league/psro/mixture/{uid}": p for uid, p in zip(update.pool, update.mixture, strict=True)}}
            fire(self.tracker, "log", metrics)

    # ----------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        """The mixture, the last solved meta-game and the update counters (JSON-able); an update in
        progress is kept as "open" and starts again on resume from the registry's counts."""
        return {**super().state_dict(), "updates": self._updates, "checkpoints_seen": self._checkpoints_seen,
                "last": None if self.last is None else self.last.to_dict(),
                "open": self._reopen if self._open is None else self._open["checkpoints"],
                "matrix_games_played": self.matrix_games_played}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`: the games an open update had out are gone, so it is planned again.
        ``state`` is saved at checkpoints, an update's line of the log when it is solved: the updates
        solved after ``state`` was saved (a kill between two checkpoints) are taken from the log, so a
        resumed run neither numbers an update twice nor plays its matrix games again."""
        super().load_state_dict(state)
        self._updates = int(state.get("updates", 0))
        self._checkpoints_seen = state.get("checkpoints_seen")
        self.last = None if state.get("last") is None else PSROUpdate.from_dict(state["last"])
        self.matrix_games_played = int(state.get("matrix_games_played", 0))
        self._open = None
        self._reopen = None if state.get("open") is None else int(state["open"])
        later = self._logged_after(self._updates)
        if later:
            self.last = later[-1]
            self.set_mixture(dict(zip(self.last.pool, self.last.mixture, strict=True)))
            self._updates, self._checkpoints_seen, self._reopen = self.last.update, self.last.checkpoints, None
            self.matrix_games_played += sum(u.matrix_games for u in later)

    def _logged_after(self, update: int) -> list[PSROUpdate]:
        """The updates of the log numbered above ``update``, in order (none without a log)."""
        if self.log_path is None or not os.path.isfile(self.log_path):
            return []
        found = []
        with open(self.log_path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = PSROUpdate.from_dict(json.loads(line))
                except (ValueError, KeyError, TypeError):  # a line cut short by a kill: that update is not solved
                    continue
                if entry.update > update:
                    found.append(entry)
        return found
