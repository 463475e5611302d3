"""The meta-game of a population: Nash averaging, α-Rank and transitivity (pure functions of a matrix).

The **meta-game** has the entries of a pool (checkpoints, scripted baselines) as its strategies and
``payoffs[i, j]`` as the row entry's expected payoff against the column entry. The cross-play table
(:mod:`unstable.eval.crossplay`) fills it with

    payoffs[i, j] = P(i wins) - P(i loses)  =  2 * (expected score of i) - 1,

a win scoring 1 and a draw 1/2, seats alternating; so ``payoffs`` is antisymmetric
(``payoffs[j, i] = -payoffs[i, j]``, zero diagonal), in [-1, 1]: a symmetric zero-sum game of value 0.

* :func:`nash_averaging`: the maximum-entropy Nash equilibrium of that game and each entry's payoff
  against it, after Balduzzi, Tuyls, Perolat and Graepel, "Re-evaluating Evaluation" (NeurIPS 2018).
  Its defining property: adding copies of an entry does not change anyone's Nash average (the copies
  share the mass), so a pool full of near-identical checkpoints cannot outvote the rest.
* :func:`alpha_rank`: the stationary distribution of the evolutionary Markov chain of Omidshafiei,
  Papadimitriou, Piliouras, Tuyls, Rowland, Lespiau, Czarnecki, Lanctot, Perolat and Munos,
  "α-Rank: Multi-Agent Evaluation by Evolution" (Scientific Reports 9, 2019), single-population case.
  Cross-checked against OpenSpiel's ``open_spiel.python.egt.alpharank`` in the tests.
* :func:`transitivity`: directed 3-cycles of the "beats" relation, whether that relation has any
  cycle, and the share of the matrix that is cyclic in Balduzzi et al.'s Hodge decomposition.

PSRO (Lanctot et al. 2017) uses :func:`nash_averaging`'s mixture (or α-Rank's distribution) as the
opponent distribution over the pool: :func:`meta_solver` names them for
:class:`~unstable.samplers.psro.PSROModelSampler`. That is why this module sits with the samplers (a
training run uses it); evaluation (the cross-play table, league analysis) reads it here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ANTISYMMETRY_ATOL = 1e-9
"""How far ``payoffs + payoffs.T`` may be from zero for :func:`nash_averaging` to accept the matrix."""
SUPPORT_TOL = 1e-7
"""Mass above which an entry is in the Nash support."""


def _square(payoffs: Sequence[Sequence[float]] | np.ndarray, what: str) -> np.ndarray:
    m = np.asarray(payoffs, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"{what} needs a non-empty square payoff matrix, got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError(f"{what} needs finite payoffs; fill or drop the missing cells first (NaN/inf at "
                         f"{[tuple(map(int, ij)) for ij in np.argwhere(~np.isfinite(m))][:5]})")
    return m


def antisymmetric(payoffs: Sequence[Sequence[float]] | np.ndarray, atol: float = ANTISYMMETRY_ATOL) -> np.ndarray:
    """``payoffs`` as a float array, checked to be antisymmetric (a symmetric zero-sum meta-game)."""
    m = _square(payoffs, "a zero-sum meta-game")
    worst = float(np.abs(m + m.T).max())
    if worst > atol:
        i, j = np.unravel_index(np.abs(m + m.T).argmax(), m.shape)
        raise ValueError(f"the payoff matrix is not antisymmetric: payoffs[{i},{j}] + payoffs[{j},{i}] = {worst:.3g}; "
                         "a symmetric zero-sum meta-game needs payoffs[j, i] = -payoffs[i, j] (e.g. win rate minus "
                         "loss rate) and a zero diagonal")
    return (m - m.T) / 2


# ----------------------------------------------------------------------------- Nash averaging
@dataclass(frozen=True, slots=True)
class NashAverage:
    """The maximum-entropy Nash equilibrium ``mixture`` of an antisymmetric meta-game (Balduzzi et al. 2018)."""

    mixture: tuple[float, ...]  # p*: the probability of each entry
    support: tuple[int, ...]  # the entries with p*_i > SUPPORT_TOL
    nash_average: tuple[float, ...]  # (payoffs @ p*)_i to 1e-12: payoff against the mixture (0 on the support)
    entropy: float  # of the mixture, in nats


def _nash_polytope_points(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest support of any Nash equilibrium, and a point of the Nash polytope with that support.

    The polytope of a symmetric zero-sum game of value 0 is ``{p >= 0, sum(p) = 1, a @ p <= 0}``; one
    linear program per entry not yet seen in a support maximises its mass, and the mean of those
    vertices has every entry that any equilibrium plays."""
    from scipy.optimize import linprog

    n = len(a)
    in_support = np.zeros(n, dtype=bool)
    points = []
    for i in range(n):
        if in_support[i]:
            continue
        c = np.zeros(n)
        c[i] = -1.0
        res = linprog(c, A_ub=a, b_ub=np.zeros(n), A_eq=np.ones((1, n)), b_eq=[1.0], bounds=(0, None),
                      method="highs")
        if res.status != 0:
            raise RuntimeError(f"the Nash linear program failed on a valid zero-sum matrix: {res.message}")
        x = np.clip(res.x, 0.0, None)
        if x[i] > SUPPORT_TOL:
            points.append(x / x.sum())
            in_support |= x > SUPPORT_TOL
    return in_support, np.mean(points, axis=0)


def _max_entropy_on(x0: np.ndarray, null: np.ndarray, steps: int = 100) -> np.ndarray:
    """Maximise ``-sum(x log x)`` over ``x = x0 + null @ z > 0`` by damped Newton steps (strictly concave)."""
    x = x0.copy()
    for _ in range(steps):
        g = null.T @ (np.log(x) + 1.0)
        h = null.T @ (null / x[:, None])
        dz = np.linalg.solve(h, -g)
        if float(-g @ dz) < 1e-24:  # Newton decrement: at the optimum to machine precision
            break
        dx = null @ dz
        t = 1.0
        neg = dx < 0
        if neg.any():
            t = min(1.0, 0.99 * float(np.min(-x[neg] / dx[neg])))
        f = float(np.sum(x * np.log(x)))
        while t > 1e-12:
            trial = x + t * dx
            if (trial > 0).all() and float(np.sum(trial * np.log(trial))) <= f + 0.25 * t * float(g @ dz):
                break
            t /= 2
        x = x + t * dx
    return x


def _max_entropy_constrained(x0: np.ndarray, null: np.ndarray, ineq: np.ndarray) -> np.ndarray:
    """As :func:`_max_entropy_on` with ``ineq @ x <= 0`` as well (SLSQP): the rare case where an entry
    outside the support ties with the equilibrium on part of the polytope."""
    from scipy.optimize import minimize

    def x_of(z: np.ndarray) -> np.ndarray:
        return np.clip(x0 + null @ z, 1e-300, None)

    res = minimize(lambda z: float(np.sum(x_of(z) * np.log(x_of(z)))), np.zeros(null.shape[1]),
                   jac=lambda z: null.T @ (np.log(x_of(z)) + 1.0), method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda z: x0 + null @ z},
                                {"type": "ineq", "fun": lambda z: -(ineq @ (x0 + null @ z))}],
                   options={"ftol": 1e-15, "maxiter": 1000})
    return np.clip(x0 + null @ res.x, 0.0, None)


def nash_averaging(payoffs: Sequence[Sequence[float]] | np.ndarray) -> NashAverage:
    """The maximum-entropy Nash equilibrium of the antisymmetric meta-game ``payoffs`` and each entry's
    payoff against it (its *Nash average*), Balduzzi et al. 2018, Section 4 ("Nash averaging").

    Every Nash equilibrium ``p`` of a symmetric zero-sum game of value 0 satisfies ``payoffs @ p <= 0``,
    with equality on the union ``S`` of the equilibria's supports; the entropy is strictly concave, so
    its maximiser over that polytope is unique and plays all of ``S``. Found in two steps: linear
    programs give ``S`` and a point inside the polytope (:func:`_nash_polytope_points`); Newton's
    method maximises the entropy on the affine set ``{sum p = 1, (payoffs @ p)_S = 0, p_i = 0 off S}``
    (exact to machine precision), falling back to SLSQP with the remaining inequalities when an entry
    off ``S`` would do better than 0 against that maximiser.
    """
    from scipy.linalg import null_space

    a = antisymmetric(payoffs)
    n = len(a)
    in_support, start = _nash_polytope_points(a)
    s = np.flatnonzero(in_support)
    equalities = np.vstack([np.ones((1, len(s))), a[np.ix_(s, s)]])
    null = null_space(equalities, rcond=1e-10)
    x = start[s]
    if null.shape[1]:
        x = _max_entropy_on(x, null)
        off = np.flatnonzero(~in_support)
        if off.size and (a[np.ix_(off, s)] @ x).max() > 1e-10:
            x = _max_entropy_constrained(start[s], null, a[np.ix_(off, s)])
    p = np.zeros(n)
    p[s] = x / x.sum()
    entropy = float(-np.sum(p[p > 0] * np.log(p[p > 0])))
    return NashAverage(tuple(p.tolist()), tuple(int(i) for i in np.flatnonzero(p > SUPPORT_TOL)),
                       tuple((np.round(a @ p, 12) + 0.0).tolist()), entropy)


# ----------------------------------------------------------------------------- α-Rank
@dataclass(frozen=True, slots=True)
class AlphaRank:
    """α-Rank's stationary distribution ``pi`` over the entries (Omidshafiei et al. 2019)."""

    pi: tuple[float, ...]  # the stationary distribution: the mass of each entry
    ranking: tuple[int, ...]  # entries by pi, highest first (ties: lower index first)
    alpha: float  # selection intensity
    population_size: int  # m
    local_selection: bool  # fitness against the current opponent only (OpenSpiel's default) or the population


def _log_fixation(a: np.ndarray, r: int, s: int, alpha: float, m: int, local: bool) -> float:
    """log ρ_{r,s}: the probability that one mutant playing ``r`` takes over a population of ``m - 1``
    playing ``s`` under the Fermi (pairwise comparison) process at selection intensity ``alpha``.

    Population model (the paper's single-population case): with ``k`` mutants the mutant's fitness is
    ``((k-1) a[r,r] + (m-k) a[r,s]) / (m-1)`` and a resident's ``(k a[s,r] + (m-k-1) a[s,s]) / (m-1)``;
    ρ = 1 / (1 + sum_{l=1}^{m-1} prod_{k=1}^{l} exp(-alpha (f_r(k) - f_s(k)))). Local selection model
    (OpenSpiel's option): the fitnesses are ``a[r,s]`` and ``a[s,r]``, constant in ``k``, which sums to
    ρ = (1 - e^{-u}) / (1 - e^{-m u}) with ``u = alpha (a[r,s] - a[s,r])``. Summed in log space."""
    k = np.arange(1, m)
    if local:
        d = np.full(m - 1, a[r, s] - a[s, r])
    else:
        d = ((k - 1) * a[r, r] + (m - k) * a[r, s] - k * a[s, r] - (m - k - 1) * a[s, s]) / (m - 1)
    exponents = np.concatenate([[0.0], np.cumsum(-alpha * d)])
    top = exponents.max()
    return -(top + math.log(float(np.sum(np.exp(exponents - top)))))


def alpha_rank(payoffs: Sequence[Sequence[float]] | np.ndarray, alpha: float = 100.0, population_size: int = 50,
               local_selection: bool = False) -> AlphaRank:
    """α-Rank of a symmetric two-player game (one population), Omidshafiei et al. 2019, Section 3.

    The Markov chain's states are the monomorphic populations; from ``s`` it moves to each ``r != s``
    with probability ``ρ_{r,s} / (n - 1)`` (:func:`_log_fixation`) and stays otherwise; ``pi`` is its
    stationary distribution. ``payoffs[i, j]`` is the row strategy's payoff against the column's (any
    square matrix; the meta-game of a pool is antisymmetric). As ``alpha`` grows the mass settles on the
    sink strongly connected components of the response graph (the paper's MCC solution concept);
    OpenSpiel's ``alpharank.compute`` defaults (alpha 100, m 50, local selection) rank the same way.
    """
    a = _square(payoffs, "alpha_rank")
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    if not isinstance(population_size, int) or population_size < 2:
        raise ValueError(f"population_size must be an integer >= 2, got {population_size!r}")
    n = len(a)
    if n == 1:
        return AlphaRank((1.0,), (0,), float(alpha), population_size, local_selection)
    c = np.zeros((n, n))
    for s in range(n):
        for r in range(n):
            if r != s:
                c[s, r] = math.exp(_log_fixation(a, r, s, alpha, population_size, local_selection)) / (n - 1)
        c[s, s] = 1.0 - (c[s].sum() - c[s, s])
    system = np.vstack([(c - np.eye(n)).T, np.ones((1, n))])
    rhs = np.zeros(n + 1)
    rhs[-1] = 1.0
    pi = np.clip(np.linalg.lstsq(system, rhs, rcond=None)[0], 0.0, None)
    pi = pi / pi.sum()
    ranking = tuple(sorted(range(n), key=lambda i: (-pi[i], i)))
    return AlphaRank(tuple(pi.tolist()), ranking, float(alpha), population_size, local_selection)


# ----------------------------------------------------------------------------- transitivity
@dataclass(frozen=True, slots=True)
class Transitivity:
    """How far the pool is from a ladder: the cycles of its "beats" relation and the cyclic share."""

    beats: tuple[tuple[int, int], ...]  # (i, j): i beats j
    three_cycles: tuple[tuple[int, int, int], ...]  # (i, j, k): i beats j, j beats k, k beats i; smallest first
    is_transitive: bool  # the beats relation has no directed cycle of any length
    cyclic_share: float  # ||cyclic part||² / ||payoffs||² in the Hodge decomposition (0: a ladder, 1: pure cycles)
    ratings: tuple[float, ...]  # the transitive part's ratings: each entry's mean payoff against the pool


def _has_cycle(n: int, edges: Sequence[tuple[int, int]]) -> bool:
    out: dict[int, list[int]] = {i: [] for i in range(n)}
    for i, j in edges:
        out[i].append(j)
    state = [0] * n  # 0 new, 1 on the stack, 2 done
    for root in range(n):
        if state[root]:
            continue
        stack = [(root, iter(out[root]))]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state[child] == 1:
                return True
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(out[child])))
    return False


def transitivity(payoffs: Sequence[Sequence[float]] | np.ndarray, margin: float = 0.0,
                 beats: np.ndarray | None = None) -> Transitivity:
    """Cycles of the pool. ``i`` beats ``j`` when ``payoffs[i, j] > margin`` (or where the boolean matrix
    ``beats`` says so: the cross-play table passes "the 95% interval lies above 0").

    ``cyclic_share`` is from Balduzzi et al. 2018, Section 3 (combinatorial Hodge decomposition): an
    antisymmetric matrix splits into a transitive part ``r_i - r_j``, with ``r`` its row means, and a
    cyclic part orthogonal to it; the share is the cyclic part's squared Frobenius norm over the whole's
    (0 for an all-zero matrix).
    """
    a = antisymmetric(payoffs)
    n = len(a)
    relation = (a > margin) if beats is None else np.asarray(beats, dtype=bool)
    if relation.shape != a.shape:
        raise ValueError(f"beats must have the payoffs' shape {a.shape}, got {relation.shape}")
    edges = tuple((int(i), int(j)) for i, j in np.argwhere(relation) if i != j)
    cycles = tuple((i, j, k) for i in range(n) for j in range(i + 1, n) for k in range(i + 1, n)
                   if j != k and relation[i, j] and relation[j, k] and relation[k, i])
    ratings = a.mean(axis=1)
    total = float(np.sum(a * a))
    cyclic = a - (ratings[:, None] - ratings[None, :])
    share = float(np.sum(cyclic * cyclic)) / total if total > 0 else 0.0
    return Transitivity(edges, cycles, not _has_cycle(n, edges), share, tuple(ratings.tolist()))


# ----------------------------------------------------------------------------- PSRO's meta-solvers
META_SOLVERS = ("nash", "alpha-rank")
"""The meta-solvers by name: ``"nash"`` the maximum-entropy Nash equilibrium (Balduzzi et al. 2018),
``"alpha-rank"`` α-Rank's stationary distribution (Omidshafiei et al. 2019)."""


def meta_solver(name: str = "nash") -> Callable[[Sequence[Sequence[float]] | np.ndarray], tuple[float, ...]]:
    """PSRO's meta-solver by name (Lanctot et al. 2017, Algorithm 1, "compute meta-strategy σ"): the
    payoff matrix -> one probability per entry. ``"nash"``: :func:`nash_averaging`'s maximum-entropy
    Nash mixture (the unique choice among the equilibria that does not depend on copies of an entry);
    ``"alpha-rank"``: :func:`alpha_rank`'s stationary distribution at α = 100, m = 50 (OpenSpiel's
    ``alpharank.compute`` scale), which puts its mass on the sink components of the response graph."""
    if name == "nash":
        return lambda payoffs: nash_averaging(payoffs).mixture
    if name == "alpha-rank":
        return lambda payoffs: alpha_rank(payoffs).pi
    raise ValueError(f"psro_meta_solver must be one of {list(META_SOLVERS)}, got {name!r}")
