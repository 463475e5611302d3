"""NFSP's opponents: the average policy in a share ``1 - eta`` of the opponent seats.

Neural Fictitious Self-Play (Heinrich & Silver 2016, arXiv 1603.01121) has each agent play its
average policy with probability ``1 - eta`` (the anticipatory parameter, 0.1 in the paper) and its
best response (the RL policy) otherwise. For the on-policy learners here the learner's own seats
always play the RL policy: their moves are the policy gradient's samples and the average policy's
reservoir. :class:`NFSPModelSampler` wraps the strategy's sampler (mirror self-play's: the current
checkpoint) and seats, in each opponent seat, the current checkpoint's average policy (its
``average/`` adapter, :func:`~unstable.records.average_policy_ref`) with probability ``1 - eta``,
and the strategy's opponent otherwise. Opponent seats are never collected, so the average's moves
are not trained on; the registry counts such a game as the checkpoint's self-play (not rated).
"""

from __future__ import annotations

from typing import Any

from unstable.records import PolicyRef, average_policy_ref
from unstable.samplers.model_samplers import WrappingModelSampler, sample_opponent_for


class NFSPModelSampler(WrappingModelSampler):
    """``base``'s opponent with probability ``eta``, else the average policy of ``lineage``'s current
    checkpoint. ``rng_seed`` seeds the draw; ``base`` draws with the same ``rng`` (one random stream, saved
    with the scheduler's state)."""

    def __init__(self, base: Any, eta: float, rng_seed: int = 489):
        if isinstance(eta, bool) or not isinstance(eta, int | float) or not 0 <= eta <= 1:
            raise ValueError(f"eta must be a number in [0, 1], got {eta!r}")
        self.base, self.eta = base, float(eta)
        super().__init__(base.model_registry, rng_seed)
        base.rng = self.rng

    def state_dict(self) -> dict[str, Any]:
        """``base``'s own state (when it keeps one), for the scheduler's resume."""
        return {"base": self.base.state_dict()} if callable(getattr(self.base, "state_dict", None)) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if "base" in state:
            self.base.load_state_dict(state["base"])

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """An opponent for a seat facing ``lineage``: its current checkpoint's average policy with probability
        ``1 - eta``, else ``base``'s choice."""
        if self.rng.random() < self.eta:
            return sample_opponent_for(self.base, lineage)
        return average_policy_ref(self.get_current_ckpt(lineage))
