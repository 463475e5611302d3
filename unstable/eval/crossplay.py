"""The cross-play table of a pool: every pair of entries plays ``games_per_cell`` real games.

The entries are learner checkpoints (LoRA adapters of one base model, or the base model itself) and
scripted baselines, each a :class:`~unstable.records.PolicyRef` (``kind="checkpoint"`` with its
``adapter_path``, ``None`` for the base weights; ``kind="scripted"`` with the baseline's name as uid).
Both seats may be checkpoints: every LLM seat is served by one backend of the base model, and games of
all the cells are batched together.

Cell ``(i, j)`` plays games ``0 .. games_per_cell - 1``: in game ``k`` entry ``i`` sits in seat
``k % 2`` and the deal is seed ``seed + k // 2``, so each deal is played from both seats (duplicate
format: the luck of the cards cancels in KuhnPoker) and every cell sees the same deals. Its value is
entry ``i``'s win rate minus its loss rate, in [-1, 1], with a 95% interval
(:func:`~unstable.eval.intervals.score_interval`); cell ``(j, i)`` is its negative. Both LLM seats
sample with the same :class:`~unstable.inference.base.SamplingParams` (temperature 0 for greedy play:
two greedy checkpoints in a game without chance play the same game from each seat every time).

Worker processes (``num_workers > 1``) split the games as :func:`~unstable.eval.evaluation.play_eval_games`
does for ``unstable eval``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unstable.eval.evaluation import play_eval_games
from unstable.eval.intervals import score_interval
from unstable.inference.base import SamplingParams
from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef


@dataclass(frozen=True, slots=True)
class CellResult:
    """Entry ``row``'s games against entry ``col`` (finished ones counted; ``failed`` did not finish)."""

    row: str
    col: str
    wins: int
    draws: int
    losses: int
    failed: int
    payoff: float  # (wins - losses) / games: row's win rate minus its loss rate; NaN without a finished game
    payoff_ci95: tuple[float, float]  # 95% interval of payoff

    @property
    def games(self) -> int:
        """Finished games."""
        return self.wins + self.draws + self.losses

    @classmethod
    def from_outcomes(cls, row: str, col: str, outcomes: Sequence[str], failed: int = 0) -> CellResult:
        """The cell from ``row``'s outcomes (``"win"``, ``"draw"``, ``"loss"``) of its finished games."""
        wins, draws, losses = (sum(o == k for o in outcomes) for k in ("win", "draw", "loss"))
        n = wins + draws + losses
        lo, hi = score_interval(wins, draws, losses)
        return cls(row, col, wins, draws, losses, failed, (wins - losses) / n if n else math.nan,
                   (2 * lo - 1, 2 * hi - 1))


@dataclass(frozen=True)
class CrossPlayJob:
    """The games of a cross-play table (picklable: worker processes get it). Game ``i`` belongs to cell
    ``pairs[i // games_per_cell]``; see the module docstring for seats and seeds."""

    model: str  # the base model (resolved) that plays every checkpoint entry
    env_id: str
    players: tuple[PolicyRef, ...]
    pairs: tuple[tuple[int, int], ...]  # the cells to play, as (row, col) indices into players
    games_per_cell: int
    prompt_template: str = "qwen3-zs"
    sampling: SamplingParams = field(default_factory=SamplingParams)  # every LLM seat's
    seed: int = 0
    max_concurrent: int = 32
    torch_threads: int | None = 1

    def game_spec(self, i: int) -> GameSpec:
        """Game ``i``: the row entry in seat ``k % 2`` of its cell's game ``k``, the deal ``seed + k // 2``."""
        cell, k = divmod(i, self.games_per_cell)
        row, col = self.pairs[cell]
        seat = k % 2
        refs = {seat: self.players[row], 1 - seat: self.players[col]}
        agents = tuple(AgentSpec(p, refs[p], prompt_template=self.prompt_template) for p in (0, 1))
        return GameSpec(game_id=i, env_id=self.env_id, seed=self.seed + k // 2, agents=agents, is_eval=True,
                        eval_player_id=seat)

    def policies(self, backend: Any) -> Callable[[GameSpec], dict[int, Any]]:
        """One policy per entry (checkpoints on ``backend``, scripted baselines by name), looked up by uid."""
        from unstable.policies.llm import LLMPolicy
        from unstable.policies.scripted import make_scripted_policy

        by_uid = {p.uid: (make_scripted_policy(p.uid, self.env_id) if p.kind == "scripted" else
                          LLMPolicy(backend, p, prompt_template=self.prompt_template, sampling=self.sampling))
                  for p in self.players}
        return lambda spec: {a.player_id: by_uid[a.policy.uid] for a in spec.agents}


@dataclass(frozen=True)
class CrossPlayResult:
    """The played cells; :meth:`matrices` turns them into the meta-game's payoff matrix."""

    players: tuple[str, ...]  # the entries' uids, in matrix order
    cells: tuple[CellResult, ...]
    games_per_cell: int  # 0 when merged from tables with different counts (each cell has its own)
    failures: tuple[str, ...] = ()  # one line per failed game, with its seed
    wall_s: float = 0.0

    def matrices(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(payoffs, lower, upper)``: the antisymmetric payoff matrix with its 95% interval bounds; 0 on the
        diagonal, NaN where no game was played or finished."""
        n = len(self.players)
        index = {uid: i for i, uid in enumerate(self.players)}
        payoffs, lower, upper = np.full((n, n), np.nan), np.full((n, n), np.nan), np.full((n, n), np.nan)
        np.fill_diagonal(payoffs, 0.0)
        np.fill_diagonal(lower, 0.0)
        np.fill_diagonal(upper, 0.0)
        for c in self.cells:
            if c.games:
                i, j = index[c.row], index[c.col]
                payoffs[i, j], payoffs[j, i] = c.payoff, 0.0 - c.payoff  # 0.0 - x: no "-0.00" for a tie
                (lower[i, j], upper[i, j]), (lower[j, i], upper[j, i]) = c.payoff_ci95, (0.0 - c.payoff_ci95[1],
                                                                                          0.0 - c.payoff_ci95[0])
        return payoffs, lower, upper

    def merged(self, new: CrossPlayResult) -> CrossPlayResult:
        """This table with ``new``'s entries and cells added (a cell of the same pair, either way round, is
        replaced by ``new``'s): how a table kept across updates (PSRO) grows by the cells it lacked."""
        players = self.players + tuple(p for p in new.players if p not in self.players)
        pairs = {frozenset((c.row, c.col)) for c in new.cells}
        cells = tuple(c for c in self.cells if frozenset((c.row, c.col)) not in pairs) + new.cells
        games = self.games_per_cell if self.games_per_cell == new.games_per_cell else 0
        return CrossPlayResult(players, cells, games, self.failures + new.failures, self.wall_s + new.wall_s)

    def cell(self, row: str, col: str) -> CellResult:
        """The cell of ``row`` against ``col`` from ``row``'s side (a played cell's mirror image if need be)."""
        for c in self.cells:
            if (c.row, c.col) == (row, col):
                return c
            if (c.row, c.col) == (col, row):
                lo, hi = c.payoff_ci95
                return CellResult(row, col, c.losses, c.draws, c.wins, c.failed, 0.0 - c.payoff, (0.0 - hi, 0.0 - lo))
        raise KeyError(f"no cell {row!r} vs {col!r}; players: {list(self.players)}")


def _check_players(players: Sequence[PolicyRef], env_id: str) -> None:
    from unstable.games.legal_moves import check_scripted_opponent

    if len(players) < 2:
        raise ValueError(f"a cross-play table needs at least 2 entries, got {len(players)}")
    uids = [p.uid for p in players]
    if len(set(uids)) != len(uids):
        raise ValueError(f"entry uids must be unique, got {uids}")
    for p in players:
        if p.kind == "scripted":
            check_scripted_opponent(p.uid, env_id)
        elif p.kind != "checkpoint":
            raise ValueError(f"entry {p.uid!r} is a {p.kind!r} policy; the table plays checkpoints and scripted "
                             "baselines")


def play_cross_play(model: str, env_id: str, players: Sequence[PolicyRef], *, games_per_cell: int = 20,
                    pairs: Sequence[tuple[int, int]] | None = None, prompt_template: str = "qwen3-zs",
                    sampling: SamplingParams | None = None, seed: int = 0, num_workers: int = 1,
                    max_concurrent: int = 32, torch_threads: int | None = 1,
                    on_done: Callable[[GameRecord | FailedGame], None] | None = None) -> CrossPlayResult:
    """Play the cross-play table of ``players`` on the two-player game ``env_id``.

    ``pairs`` (default: every pair ``i < j``) are the cells to play; a caller that keeps a table
    (PSRO) passes only the new ones. ``games_per_cell`` must be even, so that both seats are played
    equally. ``sampling`` is every LLM seat's (default: temperature 0.6, top-p 0.95, 64 new tokens).
    ``on_done`` gets each finished or failed game in this process, for progress."""
    from unstable.games.specs import EvalEnvSpec
    from unstable.local_models.resolve import resolve_model_name

    EvalEnvSpec(env_id, 2, prompt_template)  # a known two-player game and template, or a clear error
    _check_players(players, env_id)
    if games_per_cell < 2 or games_per_cell % 2:
        raise ValueError(f"games_per_cell must be even and >= 2 (both seats equally), got {games_per_cell}")
    n = len(players)
    pairs = tuple((i, j) for i in range(n) for j in range(i + 1, n)) if pairs is None else tuple(pairs)
    bad = [p for p in pairs if not (0 <= p[0] < n and 0 <= p[1] < n and p[0] != p[1])]
    if bad or not pairs:
        raise ValueError(f"pairs must be (row, col) indices of two different players in 0..{n - 1}, got {bad or pairs}")
    job = CrossPlayJob(resolve_model_name(model), env_id, tuple(players), pairs, games_per_cell, prompt_template,
                       sampling or SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=64), seed,
                       max_concurrent, torch_threads)
    t0 = time.perf_counter()
    results = play_eval_games(job, len(pairs) * games_per_cell, num_workers=num_workers, on_done=on_done)
    cells = []
    for c, (row, col) in enumerate(pairs):
        games = results[c * games_per_cell:(c + 1) * games_per_cell]
        outcomes = [g.outcome(g.spec.eval_player_id) for g in games if isinstance(g, GameRecord)]
        cells.append(CellResult.from_outcomes(players[row].uid, players[col].uid, outcomes,
                                              failed=games_per_cell - len(outcomes)))
    failures = tuple(r.describe() for r in results if isinstance(r, FailedGame))
    return CrossPlayResult(tuple(p.uid for p in players), tuple(cells), games_per_cell, failures,
                           time.perf_counter() - t0)
