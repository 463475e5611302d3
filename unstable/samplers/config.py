"""``SamplerConfig``: how the scheduler picks the next game's environment and opponent."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from unstable.samplers.league import PFSP_WEIGHTINGS
from unstable.samplers.metagame import META_SOLVERS
from unstable.samplers.psro import check_psro_settings
from unstable.samplers.strategies import OPPONENT_STRATEGIES
from unstable.utils.schema import check_fields, setting

ENV_SAMPLING_STRATEGIES = ("random", "curriculum")
ENV_CURRICULUM_SETTINGS = ("env_curriculum_window", "env_curriculum_target", "env_curriculum_width")
"""The settings only env ``"curriculum"`` reads."""
OPPONENT_SAMPLING_STRATEGIES = tuple(OPPONENT_STRATEGIES)


@dataclass
class SamplerConfig:
    """The env and opponent samplers' settings (build()'s flat arguments of the same names)."""

    env_sampling_strategy: Literal[ENV_SAMPLING_STRATEGIES] = setting("random", flat="env_sampling_strategy")
    """How the next train env is picked: ``"random"`` (uniform over ``train_envs``, or by their
    ``weight``) or ``"curriculum"`` (weighted by recent success: the ``env_curriculum_*`` settings)."""
    opponent_sampling_strategy: Literal[OPPONENT_SAMPLING_STRATEGIES] = setting("none",
                                                                                flat="opponent_sampling_strategy")
    """Who fills ``"opponent"`` seats: ``"none"``/``"mirror"`` (self-play), ``"fixed"`` (one of
    ``fixed_opponents``), ``"lagged"``, ``"match-quality"``, ``"pool"`` (the other trainable models'
    checkpoints and ``fixed_opponents``; see :mod:`unstable.samplers.model_samplers`), or ``"pfsp"``
    (prioritised fictitious self-play over past checkpoints and ``fixed_opponents``: the ``pfsp_*``
    settings, :mod:`unstable.samplers.league`), or ``"psro"`` (the meta-game's Nash mixture over the
    checkpoints and ``fixed_opponents``, updated every ``psro_every`` checkpoints: the ``psro_*``
    settings, :mod:`unstable.samplers.psro`)."""
    fixed_opponents: Any = setting(("random",), flat="fixed_opponents")
    """Opponent names for ``"fixed"``: scripted ones, adapter directories or API model names (the
    seed's default was an API model, which needs a key)."""
    opponent_lag: int | None = setting(None, ge=1, flat="opponent_lag")
    """For ``"lagged"``: play the checkpoint this many versions back ..."""
    opponent_window: int | None = setting(4, ge=1, flat="opponent_window")
    """... or (``opponent_lag=None``) one uniformly from the last this many checkpoints."""
    pfsp_weighting: Literal[PFSP_WEIGHTINGS] = setting("hard", flat="pfsp_weighting")
    """For ``"pfsp"``: the weight of an opponent the learner beats with probability p: ``"hard"`` (1-p)^2,
    ``"even"`` p(1-p), ``"linear"`` 1-p (Vinyals et al. 2019)."""
    pfsp_prior: float = setting(1.0, gt=0, flat="pfsp_prior")
    """For ``"pfsp"``: pseudo-wins and pseudo-losses added to every opponent's record (a Beta prior), so a
    new opponent starts at p = 0.5."""
    pfsp_window: int = setting(4, ge=1, flat="pfsp_window")
    """For ``"pfsp"``: the win rates count the games of the learner's this many newest checkpoints."""
    psro_every: int = setting(5, flat="psro_every")
    """For ``"psro"``: the meta-game is brought up to date and solved after every this many new learner
    checkpoints (Lanctot et al. 2017); until the first update the learner plays itself."""
    psro_games_per_cell: int = setting(8, flat="psro_games_per_cell")
    """For ``"psro"``: each pair of the pool is filled to this many recorded games; the registry's train
    and eval games count, the rest are played as matrix games (rated, never trained on), before any train
    game: at most :data:`~unstable.samplers.psro.MAX_PSRO_GAMES_PER_CELL`."""
    psro_pool_size: int = setting(10, flat="psro_pool_size")
    """For ``"psro"``: the meta-game holds the learner's this many newest checkpoints (and the fixed
    opponents): the games an update may need grow with its square."""
    psro_meta_solver: Literal[META_SOLVERS] = setting("nash", flat="psro_meta_solver")
    """For ``"psro"``: ``"nash"`` (the maximum-entropy Nash mixture, Balduzzi et al. 2018) or
    ``"alpha-rank"`` (α-Rank's stationary distribution, Omidshafiei et al. 2019)."""
    rating_curriculum: float = setting(0.0, ge=0, le=1, flat="rating_curriculum")
    """The share of opponents drawn by TrueSkill match quality near ``rating_curriculum_target`` instead of
    by ``opponent_sampling_strategy`` (0: off; 1: only the curriculum), from past checkpoints and
    ``fixed_opponents``."""
    rating_curriculum_target: float | None = setting(None, ge=0, le=1, flat="rating_curriculum_target")
    """The match quality the rating curriculum aims at (None: the best the pool offers, the most even match)."""
    rating_curriculum_width: float = setting(0.1, gt=0, flat="rating_curriculum_width")
    """How far from the target (in match quality) an opponent's weight falls to exp(-1/2) of the nearest's."""
    env_curriculum_window: int = setting(32, ge=1, flat="env_curriculum_window")
    """For env ``"curriculum"``: the recent train games per env whose success counts."""
    env_curriculum_target: float = setting(0.5, ge=0, le=1, flat="env_curriculum_target")
    """For env ``"curriculum"``: the success rate (win 1, draw 0.5, loss 0) the curriculum prefers."""
    env_curriculum_width: float = setting(0.25, gt=0, flat="env_curriculum_width")
    """For env ``"curriculum"``: how far from the target an env's weight falls to exp(-1/2) of the nearest's."""
    average_eta: float | None = setting(None, ge=0, le=1, flat="average_eta")
    """NFSP's anticipatory parameter eta (0.1 in the paper): in self-play, the share of opponent seats the policy
    plays, the others playing its average policy (``None``: the average plays no game).

    An opponent seat plays the current checkpoint's average policy (``average/``, which the learner's
    ``average_reservoir`` trains) with probability ``1 - eta`` and the current policy otherwise; the learner's
    own seats always play the policy, and the average's moves are never trained on
    (:class:`~unstable.samplers.nfsp.NFSPModelSampler`)."""

    def __post_init__(self) -> None:
        check_fields(self)
        check_psro_settings(self.psro_every, self.psro_games_per_cell, self.psro_pool_size)  # PSRO's own rule
        self.fixed_opponents = opponent_names(self.fixed_opponents)
        if self.opponent_sampling_strategy == "fixed" and not self.fixed_opponents:
            raise ValueError("opponent_sampling_strategy='fixed' needs at least one name in fixed_opponents")
        if self.average_eta is not None and not OPPONENT_STRATEGIES[self.opponent_sampling_strategy].self_play:
            mirror = [name for name, row in OPPONENT_STRATEGIES.items() if row.self_play]
            raise ValueError(f"average_eta={self.average_eta!r} is NFSP's share of self-play games against the policy "
                             f"rather than its average; opponent_sampling_strategy={self.opponent_sampling_strategy!r} "
                             f"draws other opponents: use opponent_sampling_strategy in {mirror}, or drop average_eta")

    def unused_settings(self) -> list[str]:
        """A line for each setting given another value than its default that only a strategy this config does
        not use reads (``pfsp_weighting`` with ``"mirror"``): the run goes on, and the user hears it once."""
        owners = {name: ("opponent_sampling_strategy", strategy)
                  for strategy, row in OPPONENT_STRATEGIES.items() for name in row.settings}
        owners |= {name: ("env_sampling_strategy", "curriculum") for name in ENV_CURRICULUM_SETTINGS}
        defaults = {f.name: f.default for f in fields(self)}
        lines = []
        for name, (switch, wanted) in owners.items():
            value, used = getattr(self, name), getattr(self, switch)
            if value != defaults[name] and used != wanted:
                lines.append(f"{name}={value!r} is a setting of {switch}={wanted!r}; this run has "
                             f"{switch}={used!r}, so it has no effect")
        return lines

    def draws_opponents(self) -> bool:
        """Whether the opponent sampler (with its rating curriculum) seats anyone but the learner itself."""
        return OPPONENT_STRATEGIES[self.opponent_sampling_strategy].draws_opponents or self.rating_curriculum > 0

    def plays_fixed(self) -> bool:
        """Whether ``fixed_opponents`` are drawn as training opponents."""
        return OPPONENT_STRATEGIES[self.opponent_sampling_strategy].plays_fixed or self.rating_curriculum > 0


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
