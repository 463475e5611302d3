"""Model samplers: who sits in the non-learner seats of a train game.

Each sampler reads the :class:`~unstable.registry.ModelRegistry` through
:func:`~unstable.utils.calls.call`, so the registry may be a plain object or a Ray actor handle
(the seed's standard script passes a handle to a plain sampler living in the scheduler).
Answers are :class:`~unstable.records.PolicyRef`: ``kind="checkpoint"`` with the adapter path and
``version`` = iteration for learner checkpoints, ``"scripted"`` or ``"api"`` for fixed models.

Samplers only read the registry: the scheduler sends every finished game to
``registry.record_game``, and the registry alone updates ratings and match counts. Strategies:

* ``BaseModelSampler`` / ``MirrorModelSampler``: the current checkpoint (``"none"``, ``"mirror"``);
* ``FixedOpponentModelSampler``: uniform over the fixed models (``"fixed"``);
* ``LaggedModelSampler``: a checkpoint ``lag`` versions back, or uniform over the last ``window``;
* ``MatchQualityModelSampler``: ∝ exp(TrueSkill match quality vs the current checkpoint / temperature).

To write your own, subclass and override ``sample_opponent``::

    class NewestFixedOrSelf(BaseModelSampler):
        '''Half the games against the last fixed model added, half mirror.'''

        def sample_opponent(self) -> PolicyRef:
            fixed = call(self.model_registry, "fixed_uids")
            if fixed and self.rng.random() < 0.5:
                return call(self.model_registry, "policy_ref", fixed[-1])
            return self.get_current_ckpt()
"""

from __future__ import annotations

import math
import random
from typing import Any

from unstable.records import PolicyRef
from unstable.utils.calls import call


class BaseModelSampler:
    """Mirror self-play: the opponent is the current checkpoint. ``rng_seed`` seeds ``self.rng``."""

    def __init__(self, model_registry: Any, rng_seed: int = 489):
        if model_registry is None:
            raise ValueError("a model sampler needs model_registry (a ModelRegistry or its actor handle)")
        self.model_registry = model_registry
        self.rng = random.Random(rng_seed)

    def get_current_ckpt(self) -> PolicyRef:
        return call(self.model_registry, "policy_ref", None)

    def sample_opponent(self) -> PolicyRef:
        return self.get_current_ckpt()


MirrorModelSampler = BaseModelSampler


class FixedOpponentModelSampler(BaseModelSampler):
    """Uniform over the registry's fixed models (API models, scripted baselines)."""

    def sample_opponent(self) -> PolicyRef:
        fixed = call(self.model_registry, "fixed_uids")
        if not fixed:
            raise ValueError("no fixed opponents registered; call registry.add_fixed(name=...) first")
        return call(self.model_registry, "policy_ref", self.rng.choice(fixed))


class LaggedModelSampler(BaseModelSampler):
    """An older learner checkpoint: exactly ``lag`` versions back, or uniform over the last ``window``.

    Versions count registered checkpoints (``checkpoint_uids()`` positions), not iteration numbers.
    ``lag`` is clamped to the oldest checkpoint; ``window`` excludes the current checkpoint unless it
    is the only one.
    """

    def __init__(self, model_registry: Any, lag: int | None = None, window: int | None = None, rng_seed: int = 489):
        super().__init__(model_registry, rng_seed)
        if (lag is None) == (window is None):
            raise ValueError(f"give exactly one of lag= or window= (got lag={lag!r}, window={window!r})")
        if lag is not None and (not isinstance(lag, int) or lag < 0):
            raise ValueError(f"lag must be an integer >= 0, got {lag!r}")
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be an integer >= 1, got {window!r}")
        self.lag, self.window = lag, window

    def sample_opponent(self) -> PolicyRef:
        uids = call(self.model_registry, "checkpoint_uids")
        if not uids:
            raise RuntimeError("no checkpoints registered; call registry.add_checkpoint(...) first")
        if self.lag is not None:
            uid = uids[max(0, len(uids) - 1 - self.lag)]
        else:
            older = uids[:-1][-self.window:]
            uid = self.rng.choice(older) if older else uids[-1]
        return call(self.model_registry, "policy_ref", uid)


class MatchQualityModelSampler(BaseModelSampler):
    """Opponents in proportion to exp(quality / temperature), quality = TrueSkill match quality (a
    draw probability in [0, 1]) against the current checkpoint. Small temperatures concentrate on the
    closest-rated models; with no other model it falls back to mirror self-play."""

    def __init__(self, model_registry: Any, temperature: float = 1.0, include_fixed: bool = True,
                 rng_seed: int = 489):
        super().__init__(model_registry, rng_seed)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature, self.include_fixed = temperature, include_fixed

    def probabilities(self) -> dict[str, float]:
        """The current sampling distribution over opponent uids."""
        quality = call(self.model_registry, "match_qualities", None)
        if not self.include_fixed:
            fixed = set(call(self.model_registry, "fixed_uids"))
            quality = {uid: q for uid, q in quality.items() if uid not in fixed}
        if not quality:
            return {}
        top = max(quality.values())
        weights = {uid: math.exp((q - top) / self.temperature) for uid, q in quality.items()}
        total = sum(weights.values())
        return {uid: w / total for uid, w in weights.items()}

    def sample_opponent(self) -> PolicyRef:
        probs = self.probabilities()
        if not probs:
            return self.get_current_ckpt()
        uids = list(probs)
        uid = self.rng.choices(uids, weights=[probs[u] for u in uids])[0]
        return call(self.model_registry, "policy_ref", uid)
