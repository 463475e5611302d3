"""``SamplerConfig``: how the scheduler picks the next game's environment and opponent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unstable.samplers.league import PFSP_WEIGHTINGS
from unstable.samplers.metagame import META_SOLVERS
from unstable.utils.checks import check_choice, check_int, check_number

ENV_SAMPLING_STRATEGIES = ("random", "curriculum")
OPPONENT_SAMPLING_STRATEGIES = ("none", "mirror", "fixed", "lagged", "match-quality", "pool", "pfsp", "psro")
MAX_PSRO_GAMES_PER_CELL = 1000
"""The most ``psro_games_per_cell``: an update plays its matrix games before any train game, so with a pool of
10 checkpoints and 1 fixed opponent (55 pairs) training waits for up to 55,000 games at this bound."""


@dataclass
class SamplerConfig:
    """The env and opponent samplers' settings (build()'s flat arguments of the same names)."""

    env_sampling_strategy: str = "random"
    """How the next train env is picked: ``"random"`` (uniform over ``train_envs``, or by their
    ``weight``) or ``"curriculum"`` (weighted by recent success: the ``env_curriculum_*`` settings)."""
    opponent_sampling_strategy: str = "none"
    """Who fills ``"opponent"`` seats: ``"none"``/``"mirror"`` (self-play), ``"fixed"`` (one of
    ``fixed_opponents``), ``"lagged"``, ``"match-quality"``, ``"pool"`` (the other trainable models'
    checkpoints and ``fixed_opponents``; see :mod:`unstable.samplers.model_samplers`), or ``"pfsp"``
    (prioritised fictitious self-play over past checkpoints and ``fixed_opponents``: the ``pfsp_*``
    settings, :mod:`unstable.samplers.league`), or ``"psro"`` (the meta-game's Nash mixture over the
    checkpoints and ``fixed_opponents``, updated every ``psro_every`` checkpoints: the ``psro_*``
    settings, :mod:`unstable.samplers.psro`)."""
    fixed_opponents: Any = ("random",)
    """Opponent names for ``"fixed"``: scripted ones, adapter directories or API model names (the
    seed's default was an API model, which needs a key)."""
    opponent_lag: int | None = None
    """For ``"lagged"``: play the checkpoint this many versions back ..."""
    opponent_window: int | None = 4
    """... or (``opponent_lag=None``) one uniformly from the last this many checkpoints."""
    pfsp_weighting: str = "hard"
    """For ``"pfsp"``: the weight of an opponent the learner beats with probability p: ``"hard"`` (1-p)^2,
    ``"even"`` p(1-p), ``"linear"`` 1-p (Vinyals et al. 2019)."""
    pfsp_prior: float = 1.0
    """For ``"pfsp"``: pseudo-wins and pseudo-losses added to every opponent's record (a Beta prior), so a
    new opponent starts at p = 0.5."""
    pfsp_window: int = 4
    """For ``"pfsp"``: the win rates count the games of the learner's this many newest checkpoints."""
    psro_every: int = 5
    """For ``"psro"``: the meta-game is brought up to date and solved after every this many new learner
    checkpoints (Lanctot et al. 2017); until the first update the learner plays itself."""
    psro_games_per_cell: int = 8
    """For ``"psro"``: each pair of the pool is filled to this many recorded games; the registry's train
    and eval games count, the rest are played as matrix games (rated, never trained on), before any train
    game: at most :data:`MAX_PSRO_GAMES_PER_CELL`."""
    psro_pool_size: int = 10
    """For ``"psro"``: the meta-game holds the learner's this many newest checkpoints (and the fixed
    opponents): the games an update may need grow with its square."""
    psro_meta_solver: str = "nash"
    """For ``"psro"``: ``"nash"`` (the maximum-entropy Nash mixture, Balduzzi et al. 2018) or
    ``"alpha-rank"`` (α-Rank's stationary distribution, Omidshafiei et al. 2019)."""
    rating_curriculum: float = 0.0
    """The share of opponents drawn by TrueSkill match quality near ``rating_curriculum_target`` instead of
    by ``opponent_sampling_strategy`` (0: off; 1: only the curriculum), from past checkpoints and
    ``fixed_opponents``."""
    rating_curriculum_target: float | None = None
    """The match quality the rating curriculum aims at (None: the best the pool offers, the most even match)."""
    rating_curriculum_width: float = 0.1
    """How far from the target (in match quality) an opponent's weight falls to exp(-1/2) of the nearest's."""
    env_curriculum_window: int = 32
    """For env ``"curriculum"``: the recent train games per env whose success counts."""
    env_curriculum_target: float = 0.5
    """For env ``"curriculum"``: the success rate (win 1, draw 0.5, loss 0) the curriculum prefers."""
    env_curriculum_width: float = 0.25
    """For env ``"curriculum"``: how far from the target an env's weight falls to exp(-1/2) of the nearest's."""

    def __post_init__(self) -> None:
        check_choice("env_sampling_strategy", self.env_sampling_strategy, ENV_SAMPLING_STRATEGIES)
        check_choice("opponent_sampling_strategy", self.opponent_sampling_strategy, OPPONENT_SAMPLING_STRATEGIES)
        self.fixed_opponents = opponent_names(self.fixed_opponents)
        if self.opponent_sampling_strategy == "fixed" and not self.fixed_opponents:
            raise ValueError("opponent_sampling_strategy='fixed' needs at least one name in fixed_opponents")
        check_int("opponent_lag", self.opponent_lag, 1, allow_none=True)
        check_int("opponent_window", self.opponent_window, 1, allow_none=True)
        check_choice("pfsp_weighting", self.pfsp_weighting, PFSP_WEIGHTINGS)
        check_number("pfsp_prior", self.pfsp_prior, 0.0, low_open=True)
        check_int("pfsp_window", self.pfsp_window, 1)
        check_int("psro_every", self.psro_every, 1)
        check_int("psro_games_per_cell", self.psro_games_per_cell, 1, maximum=MAX_PSRO_GAMES_PER_CELL)
        check_int("psro_pool_size", self.psro_pool_size, 1)
        check_choice("psro_meta_solver", self.psro_meta_solver, META_SOLVERS)
        check_number("rating_curriculum", self.rating_curriculum, 0.0, 1.0)
        check_number("rating_curriculum_target", self.rating_curriculum_target, 0.0, 1.0, allow_none=True)
        check_number("rating_curriculum_width", self.rating_curriculum_width, 0.0, low_open=True)
        check_int("env_curriculum_window", self.env_curriculum_window, 1)
        check_number("env_curriculum_target", self.env_curriculum_target, 0.0, 1.0)
        check_number("env_curriculum_width", self.env_curriculum_width, 0.0, low_open=True)

    def draws_opponents(self) -> bool:
        """Whether the opponent sampler (with its rating curriculum) seats anyone but the learner itself."""
        return self.opponent_sampling_strategy not in ("none", "mirror") or self.rating_curriculum > 0

    def plays_fixed(self) -> bool:
        """Whether ``fixed_opponents`` are drawn as training opponents."""
        return self.opponent_sampling_strategy in ("fixed", "pool", "pfsp", "psro") or self.rating_curriculum > 0


def opponent_names(value: Any) -> tuple[str, ...]:
    """``fixed_opponents`` as a tuple: one name may be given as a string, ``None`` means none."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(o, str) and o.strip() for o in value):
        raise ValueError(f"fixed_opponents must be a list of opponent names ('random', an adapter directory "
                         f"or an API model name), got {value!r}")
    return tuple(value)
