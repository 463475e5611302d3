"""Which env and which opponents the scheduler sets up next (plain Python, no Ray)."""

from unstable.samplers import env_samplers, model_samplers
from unstable.samplers.env_samplers import BaseEnvSampler, UniformRandomEnvSampler
from unstable.samplers.model_samplers import (
    BaseModelSampler,
    FixedOpponentModelSampler,
    LaggedModelSampler,
    MatchQualityModelSampler,
    MirrorModelSampler,
    PoolModelSampler,
)

__all__ = [
    "BaseEnvSampler",
    "BaseModelSampler",
    "FixedOpponentModelSampler",
    "LaggedModelSampler",
    "MatchQualityModelSampler",
    "MirrorModelSampler",
    "PoolModelSampler",
    "UniformRandomEnvSampler",
    "env_samplers",
    "model_samplers",
]
