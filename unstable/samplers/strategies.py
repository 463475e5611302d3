"""The opponent sampling strategies, by name: whom each seats, and the model sampler that draws them.

One table, :data:`OPPONENT_STRATEGIES`, is what ``opponent_sampling_strategy`` may be
(:class:`~unstable.samplers.config.SamplerConfig` takes its names), what the run's checks ask (does the
strategy seat opponents, does it draw ``fixed_opponents``) and what the wiring builds
(:func:`opponent_sampler`). A new strategy is a new row.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from unstable.samplers import league
from unstable.samplers import model_samplers as ms
from unstable.samplers.nfsp import NFSPModelSampler
from unstable.samplers.psro import PSRO_LOG_FILE, PSROModelSampler


@dataclass(frozen=True, slots=True)
class OpponentStrategy:
    """One strategy: whether it seats opponents beside the trained models, whether those include the fixed
    opponents, whether a league's main model may use it (it draws from every lineage's checkpoints),
    ``sampler(settings, registry, seed, fixed, tracker, run_dir)``, its model sampler, the
    :class:`~unstable.samplers.config.SamplerConfig` ``settings`` only it reads, and whether it is self-play
    (its opponent is the current checkpoint: NFSP's ``average_eta`` may seat the average policy instead)."""

    draws_opponents: bool
    plays_fixed: bool
    sampler: Callable[..., Any]
    league_main: bool = False
    settings: tuple[str, ...] = ()
    self_play: bool = False


def _self_play(s: Any, registry: Any, seed: int, *_: Any) -> Any:
    return ms.BaseModelSampler(model_registry=registry, rng_seed=seed)


def _lagged(s: Any, registry: Any, seed: int, *_: Any) -> Any:
    window = None if s.opponent_lag is not None else s.opponent_window
    return ms.LaggedModelSampler(model_registry=registry, lag=s.opponent_lag, window=window, rng_seed=seed)


def _pfsp(s: Any, registry: Any, seed: int, fixed: tuple[str, ...], *_: Any) -> Any:
    return league.PFSPModelSampler(model_registry=registry, weighting=s.pfsp_weighting, prior=s.pfsp_prior,
                                   window=s.pfsp_window, fixed_opponents=fixed, rng_seed=seed)


def _psro(s: Any, registry: Any, seed: int, fixed: tuple[str, ...], tracker: Any, run_dir: str | None) -> Any:
    return PSROModelSampler(model_registry=registry, meta_solver=s.psro_meta_solver, every=s.psro_every,
                            games_per_cell=s.psro_games_per_cell, pool_size=s.psro_pool_size, fixed_opponents=fixed,
                            tracker=tracker, log_path=os.path.join(run_dir, PSRO_LOG_FILE) if run_dir else None,
                            rng_seed=seed)


OPPONENT_STRATEGIES: dict[str, OpponentStrategy] = {
    "none": OpponentStrategy(False, False, _self_play, self_play=True),
    "mirror": OpponentStrategy(False, False, _self_play, self_play=True),
    "fixed": OpponentStrategy(True, True, lambda s, registry, seed, *_: ms.FixedOpponentModelSampler(
        model_registry=registry, rng_seed=seed)),
    "lagged": OpponentStrategy(True, False, _lagged, settings=("opponent_lag", "opponent_window")),
    "match-quality": OpponentStrategy(True, False, lambda s, registry, seed, *_: ms.MatchQualityModelSampler(
        model_registry=registry, rng_seed=seed), league_main=True),
    "pool": OpponentStrategy(True, True, lambda s, registry, seed, *_: ms.PoolModelSampler(
        model_registry=registry, rng_seed=seed), league_main=True),
    "pfsp": OpponentStrategy(True, True, _pfsp, league_main=True,
                             settings=("pfsp_weighting", "pfsp_prior", "pfsp_window")),
    "psro": OpponentStrategy(True, True, _psro, league_main=True,
                             settings=("psro_every", "psro_games_per_cell", "psro_pool_size", "psro_meta_solver")),
}


def opponent_sampler(settings: Any, registry: Any, seed: int, fixed: tuple[str, ...] = (), tracker: Any = None,
                     run_dir: str | None = None) -> Any:
    """The model sampler a :class:`~unstable.samplers.config.SamplerConfig` describes, with its rating curriculum
    mixed in when asked: ``fixed`` are the registry uids of its ``fixed_opponents``; PSRO's logs its updates
    to ``tracker`` and ``<run_dir>/psro.jsonl``. With ``average_eta`` (NFSP) the strategy's opponents are
    replaced by the current checkpoint's average policy with probability ``1 - average_eta``
    (:class:`~unstable.samplers.nfsp.NFSPModelSampler`)."""
    base = OPPONENT_STRATEGIES[settings.opponent_sampling_strategy].sampler(settings, registry, seed, fixed, tracker,
                                                                            run_dir)
    if settings.average_eta is not None:
        base = NFSPModelSampler(base, settings.average_eta, rng_seed=seed)
    if settings.rating_curriculum == 0:
        return base
    curriculum = league.RatingCurriculumModelSampler(
        model_registry=registry, target=settings.rating_curriculum_target, width=settings.rating_curriculum_width,
        fixed_opponents=fixed, rng_seed=seed)
    return league.CurriculumMixModelSampler(base, curriculum, settings.rating_curriculum, rng_seed=seed)
