"""Who plays: learner checkpoints and fixed opponents, with TrueSkill ratings and match records."""

from unstable.records import checkpoint_uid
from unstable.registry.model_registry import (
    DEFAULT_DRAW_PROBABILITY,
    DEFAULT_LINEAGE,
    ModelEntry,
    ModelRegistry,
    fixed_policy_ref,
    score_ranks,
)

__all__ = ["DEFAULT_DRAW_PROBABILITY", "DEFAULT_LINEAGE", "ModelEntry", "ModelRegistry", "checkpoint_uid",
           "fixed_policy_ref", "score_ranks"]
