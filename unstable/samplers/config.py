"""``SamplerConfig``: how the scheduler picks the next game's environment and opponent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unstable.utils.checks import check_choice, check_int

ENV_SAMPLING_STRATEGIES = ("random",)
OPPONENT_SAMPLING_STRATEGIES = ("none", "mirror", "fixed", "lagged", "match-quality", "pool")


@dataclass
class SamplerConfig:
    """The env and opponent samplers' settings (build()'s flat arguments of the same names)."""

    env_sampling_strategy: str = "random"
    """How the next train env is picked: ``"random"`` (uniform over ``train_envs``)."""
    opponent_sampling_strategy: str = "none"
    """Who fills ``"opponent"`` seats: ``"none"``/``"mirror"`` (self-play), ``"fixed"`` (one of
    ``fixed_opponents``), ``"lagged"``, ``"match-quality"``, or ``"pool"`` (the other trainable models'
    checkpoints and ``fixed_opponents``; see :mod:`unstable.samplers.model_samplers`)."""
    fixed_opponents: Any = ("random",)
    """Opponent names for ``"fixed"``: scripted ones, adapter directories or API model names (the
    seed's default was an API model, which needs a key)."""
    opponent_lag: int | None = None
    """For ``"lagged"``: play the checkpoint this many versions back ..."""
    opponent_window: int | None = 4
    """... or (``opponent_lag=None``) one uniformly from the last this many checkpoints."""

    def __post_init__(self) -> None:
        check_choice("env_sampling_strategy", self.env_sampling_strategy, ENV_SAMPLING_STRATEGIES)
        check_choice("opponent_sampling_strategy", self.opponent_sampling_strategy, OPPONENT_SAMPLING_STRATEGIES)
        self.fixed_opponents = opponent_names(self.fixed_opponents)
        if self.opponent_sampling_strategy == "fixed" and not self.fixed_opponents:
            raise ValueError("opponent_sampling_strategy='fixed' needs at least one name in fixed_opponents")
        check_int("opponent_lag", self.opponent_lag, 1, allow_none=True)
        check_int("opponent_window", self.opponent_window, 1, allow_none=True)


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
