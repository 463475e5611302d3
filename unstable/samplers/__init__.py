"""Which env and which opponents the scheduler sets up next (plain Python, no Ray)."""

from unstable.samplers import env_samplers, league, metagame, model_samplers, nfsp, psro
from unstable.samplers.env_samplers import BaseEnvSampler, SuccessCurriculumEnvSampler, UniformRandomEnvSampler
from unstable.samplers.league import (
    CurriculumMixModelSampler,
    DistributionModelSampler,
    MixtureModelSampler,
    PFSPModelSampler,
    RatingCurriculumModelSampler,
)
from unstable.samplers.model_samplers import (
    BaseModelSampler,
    FixedOpponentModelSampler,
    LaggedModelSampler,
    MatchQualityModelSampler,
    MirrorModelSampler,
    PoolModelSampler,
)
from unstable.samplers.nfsp import NFSPModelSampler
from unstable.samplers.psro import PSROModelSampler

__all__ = [
    "BaseEnvSampler",
    "BaseModelSampler",
    "CurriculumMixModelSampler",
    "DistributionModelSampler",
    "FixedOpponentModelSampler",
    "LaggedModelSampler",
    "MatchQualityModelSampler",
    "MirrorModelSampler",
    "MixtureModelSampler",
    "NFSPModelSampler",
    "PFSPModelSampler",
    "PSROModelSampler",
    "PoolModelSampler",
    "RatingCurriculumModelSampler",
    "SuccessCurriculumEnvSampler",
    "UniformRandomEnvSampler",
    "env_samplers",
    "league",
    "metagame",
    "model_samplers",
    "nfsp",
    "psro",
]
