"""The average policy of a run's checkpoints: fictitious play's output, as a table a solver can score.

Plain self-play's last iterate can cycle around an equilibrium while the average of its iterates
converges to it (fictitious play: Brown 1951, Robinson 1951; in extensive form Heinrich, Lanctot &
Silver, "Fictitious Self-Play in Extensive-Form Games", ICML 2015). Playing that average means drawing
one checkpoint per game (weight ``w_t``) and following it throughout; the behaviour policy that plays
the same, information set by information set, is the **reach-weighted** average (Heinrich et al. 2015,
Theorem 7; OpenSpiel's ``policy_aggregator``)::

    avg(a | I) = sum_t w_t x_t(I) pi_t(a | I) / sum_t w_t x_t(I)

where ``x_t(I)`` is the probability that the seat's own moves under checkpoint ``t`` lead to ``I``
(the chance and opponent factors are the same for every ``t`` and cancel). A plain mean of the tables
is not that policy: a checkpoint that never checks a Jack says nothing about what it would do after
check-bet, and must not be counted there.

Tables are written as the exploitability readers write them (:func:`~unstable.eval.exploitability.
evaluate_exploitability`'s ``policy``): state name -> legal move -> probability, the rest of the mass an
invalid answer (which ends the game, so it leads nowhere):

* KuhnPoker: ``"J:check,bet"``; the seat's own earlier moves are in the name, so ``x_t`` is exact.
* TicTacToe: a board (the seat's table covers both marks). A board forgets the order of the moves that
  made it, so ``x_t(b)`` sums the probability of the seat's own marks over every order that places them,
  counting each order of the opponent's marks once; this is the mixture's behaviour exactly where the
  opponent's play does not prefer one order over another (a uniform opponent), an approximation elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from unstable.eval.game_states import SolvedGame, Table, solved_game


class PolicyAverage:
    """The reach-weighted average of the tables :meth:`add`-ed so far, kept as running sums (so a run's
    average after each checkpoint costs one table, not all of them again); :meth:`table` is the average,
    :meth:`exploitability` the solver's headline for it. ``game``: a game whose ``own_reach`` is computed."""

    def __init__(self, game: SolvedGame | str):
        game = solved_game(game) if isinstance(game, str) else game  # an env id ("KuhnPoker-v0-train") also does
        if game.own_reach is None:
            raise ValueError(f"no average policy for {game.name!r}: its SolvedGame has no own_reach")
        self.game, self.own_reach, self.count = game, game.own_reach, 0
        self._moves: dict[str, dict[str, float]] = {}  # state -> move -> sum_t w_t x_t(I) pi_t(a | I)
        self._reach: dict[str, float] = {}  # state -> sum_t w_t x_t(I)
        self._plain: dict[str, dict[str, float]] = {}  # state -> move -> sum_t w_t pi_t(a | I): unreached states
        self._weight = 0.0

    def add(self, table: Table, weight: float = 1.0) -> None:
        """Count ``table`` (one checkpoint's reading) with ``weight``."""
        if not (weight >= 0 and math.isfinite(weight)):
            raise ValueError(f"weight must be a finite number >= 0, got {weight!r}")
        if self._reach and set(table) != set(self._reach):
            raise ValueError(f"the table's states differ from the earlier tables' ({len(table)} vs {len(self._reach)})")
        reach = self.own_reach(table)
        for name, probs in table.items():
            w = weight * reach[name]
            self._reach[name] = self._reach.get(name, 0.0) + w
            moves, plain = self._moves.setdefault(name, {}), self._plain.setdefault(name, {})
            for move, p in probs.items():
                moves[move] = moves.get(move, 0.0) + w * p
                plain[move] = plain.get(move, 0.0) + weight * p
        self._weight += weight
        self.count += 1

    def table(self) -> dict[str, dict[str, float]]:
        """The average so far; a state no table reaches gets the plain weighted mean."""
        if not self._weight > 0:
            raise ValueError("the average needs at least one table with a positive weight")
        out = {}
        for name, reach in self._reach.items():
            sums, total = (self._moves[name], reach) if reach > 0 else (self._plain[name], self._weight)
            out[name] = {move: value / total for move, value in sorted(sums.items())}
        return out

    def exploitability(self) -> float:
        """The exact exploitability of :meth:`table` (KuhnPoker: chips per hand; TicTacToe: the best
        response's mean score), with the average's invalid mass counted as the solvers count it."""
        return self.game.exploitability(self.table())["exploitability"]


def average_policy(tables: Sequence[Table], game: SolvedGame | str, weights: Sequence[float] | None = None,
                   ) -> dict[str, dict[str, float]]:
    """The reach-weighted average of ``tables`` (one per checkpoint, weights ``weights``, default equal) for
    ``game`` (KuhnPoker's or TicTacToe's :func:`~unstable.eval.game_states.solved_game`, or its env id); see the module
    docstring and :class:`PolicyAverage`. The invalid mass (1 - the sum) is averaged like a move."""
    if not tables:
        raise ValueError("average_policy needs at least one table")
    weights = [1.0] * len(tables) if weights is None else list(weights)
    if len(weights) != len(tables) or not math.fsum(weights) > 0:
        raise ValueError(f"weights must be {len(tables)} numbers >= 0 with a positive sum, got {weights}")
    average = PolicyAverage(game)
    for table, weight in zip(tables, weights, strict=True):
        average.add(table, weight)
    return average.table()


__all__ = ["PolicyAverage", "average_policy"]
