"""The meta-game of a population, under evaluation's name: Nash averaging, α-Rank and transitivity.

The functions live in :mod:`unstable.samplers.metagame`, beside the samplers, because a training run
uses them too (PSRO's opponent mixture, :mod:`unstable.samplers.psro`) and the run may not import
the evaluation package; this module is the same objects, for the cross-play table and league
analysis (:mod:`unstable.eval.crossplay`, :mod:`unstable.eval.league`).
"""

from unstable.samplers.metagame import (
    ANTISYMMETRY_ATOL,
    META_SOLVERS,
    SUPPORT_TOL,
    AlphaRank,
    NashAverage,
    Transitivity,
    alpha_rank,
    antisymmetric,
    meta_solver,
    nash_averaging,
    transitivity,
)

__all__ = ["ANTISYMMETRY_ATOL", "META_SOLVERS", "SUPPORT_TOL", "AlphaRank", "NashAverage", "Transitivity",
           "alpha_rank", "antisymmetric", "meta_solver", "nash_averaging", "transitivity"]
