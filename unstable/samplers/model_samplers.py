"""Model samplers: who sits in the non-learner seats of a train game.

Each sampler reads the :class:`~unstable.registry.ModelRegistry` through
:func:`~unstable.utils.calls.call`, so the registry may be a plain object or a Ray actor handle
(the seed's standard script passes a handle to a plain sampler living in the scheduler).
Answers are :class:`~unstable.records.PolicyRef`: ``kind="checkpoint"`` with the adapter path and
``version`` = iteration for learner checkpoints, ``"scripted"`` or ``"api"`` for fixed models.

Samplers only read the registry: the scheduler sends every finished game to
``registry.record_game``, and the registry alone updates ratings and match counts.

Every method takes the ``lineage`` it picks for: the trainable model whose seat the opponent
faces (``None``: the registry's first lineage, which is the only one in a one-model run). Strategies:

* ``BaseModelSampler`` / ``MirrorModelSampler``: the lineage's current checkpoint (``"none"``, ``"mirror"``);
* ``FixedOpponentModelSampler``: uniform over the fixed models (``"fixed"``);
* ``LaggedModelSampler``: a checkpoint of the lineage ``lag`` versions back, or uniform over its last ``window``;
* ``MatchQualityModelSampler``: ∝ exp(TrueSkill match quality vs the lineage's current checkpoint /
  temperature), over every other model: all lineages' checkpoints and the fixed models;
* ``PoolModelSampler``: uniform over the other lineages' checkpoints (current and past) and the
  fixed models (``"pool"``; a run with several trainable models).

To write your own, subclass and override ``sample_opponent``::

    class NewestFixedOrSelf(BaseModelSampler):
        '''Half the games against the last fixed model added, half mirror.'''

        def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
            fixed = call(self.model_registry, "fixed_uids")
            if fixed and self.rng.random() < 0.5:
                return call(self.model_registry, "policy_ref", fixed[-1])
            return self.get_current_ckpt(lineage)

(A ``sample_opponent(self)`` without ``lineage``, as the seed wrote them, still works in a run with
one trainable model.)
"""

from __future__ import annotations

import inspect
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

    def get_current_ckpt(self, lineage: str | None = None) -> PolicyRef:
        """The :class:`~unstable.records.PolicyRef` of ``lineage``'s current checkpoint (``None``: the registry's
        first lineage)."""
        return call(self.model_registry, "policy_ref", None, lineage)

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """The opponent of a seat of ``lineage``; here its current checkpoint (mirror self-play)."""
        return self.get_current_ckpt(lineage)


MirrorModelSampler = BaseModelSampler


class WrappingModelSampler(BaseModelSampler):
    """A sampler built on other samplers (its ``_parts``, attribute names): setting its registry sets
    theirs, as the scheduler does when it hands the samplers a snapshot of the registry."""

    _parts: tuple[str, ...] = ("base",)

    @property
    def model_registry(self) -> Any:
        """The registry this sampler and its parts read."""
        return self._model_registry

    @model_registry.setter
    def model_registry(self, registry: Any) -> None:
        self._model_registry = registry
        for name in self._parts:
            if (part := getattr(self, name, None)) is not None:
                part.model_registry = registry


class FixedOpponentModelSampler(BaseModelSampler):
    """Uniform over the registry's fixed models (API models, scripted baselines)."""

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """A fixed model drawn uniformly; ``ValueError`` when the registry has none."""
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

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """The checkpoint of ``lineage`` ``lag`` versions before its newest (the oldest when there are fewer), or one
        drawn uniformly from the ``window`` before its newest (the newest when it is the only one); ``RuntimeError``
        when it has no checkpoint yet."""
        if lineage is None:
            lineage = (call(self.model_registry, "lineages") or [None])[0]
        uids = call(self.model_registry, "checkpoint_uids", lineage)
        if not uids:
            raise RuntimeError("no checkpoints registered; call registry.add_checkpoint(...) first")
        if self.lag is not None:
            uid = uids[max(0, len(uids) - 1 - self.lag)]
        else:
            older = uids[:-1][-self.window:]
            uid = self.rng.choice(older) if older else uids[-1]
        return call(self.model_registry, "policy_ref", uid)


class DistributionModelSampler(BaseModelSampler):
    """A sampler defined by :meth:`probabilities` (``{uid: probability}``); an empty distribution means
    mirror self-play. Subclasses override :meth:`probabilities`."""

    def probabilities(self, lineage: str | None = None) -> dict[str, float]:
        """The opponent distribution for a seat facing ``lineage``."""
        raise NotImplementedError(f"{type(self).__name__} must implement probabilities(lineage)")

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """An opponent drawn from :meth:`probabilities`, or ``lineage``'s current checkpoint when it is empty."""
        probs = self.probabilities(lineage)
        if not probs:
            return self.get_current_ckpt(lineage)
        uids = list(probs)
        uid = self.rng.choices(uids, weights=[probs[u] for u in uids])[0]
        return call(self.model_registry, "policy_ref", uid)


class MatchQualityModelSampler(DistributionModelSampler):
    """Opponents in proportion to exp(quality / temperature), quality = TrueSkill match quality (a
    draw probability in [0, 1]) against the current checkpoint. Small temperatures concentrate on the
    closest-rated models; with no other model it falls back to mirror self-play."""

    def __init__(self, model_registry: Any, temperature: float = 1.0, include_fixed: bool = True,
                 rng_seed: int = 489):
        super().__init__(model_registry, rng_seed)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature, self.include_fixed = temperature, include_fixed

    def probabilities(self, lineage: str | None = None) -> dict[str, float]:
        """The current sampling distribution over opponent uids for ``lineage``."""
        quality = call(self.model_registry, "match_qualities", None, lineage)
        if not self.include_fixed:
            fixed = set(call(self.model_registry, "fixed_uids"))
            quality = {uid: q for uid, q in quality.items() if uid not in fixed}
        if not quality:
            return {}
        top = max(quality.values())
        weights = {uid: math.exp((q - top) / self.temperature) for uid, q in quality.items()}
        total = sum(weights.values())
        return {uid: w / total for uid, w in weights.items()}

class PoolModelSampler(BaseModelSampler):
    """Uniform over a pool: every checkpoint (current and past) of the *other* lineages, and the fixed
    models. With no other lineage and no fixed model it falls back to mirror self-play."""

    def pool(self, lineage: str | None = None) -> list[str]:
        """The uids a seat facing ``lineage`` may draw."""
        lineages = call(self.model_registry, "lineages")
        mine = lineage if lineage is not None else (lineages[0] if lineages else None)
        others = [uid for name in lineages if name != mine
                  for uid in call(self.model_registry, "checkpoint_uids", name)]
        return others + list(call(self.model_registry, "fixed_uids"))

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """An opponent drawn uniformly from :meth:`pool`, or ``lineage``'s current checkpoint when the pool is empty."""
        pool = self.pool(lineage)
        if not pool:
            return self.get_current_ckpt(lineage)
        return call(self.model_registry, "policy_ref", self.rng.choice(pool))


def sample_opponent_for(sampler: Any, lineage: str | None) -> PolicyRef:
    """``sampler.sample_opponent(lineage)``; a sampler written without ``lineage`` (the seed's
    ``sample_opponent(self)``) is asked without it, which is right in a one-lineage run."""
    if lineage is not None and _takes_lineage(sampler.sample_opponent):
        return sampler.sample_opponent(lineage)
    return sampler.sample_opponent()


def _takes_lineage(method: Any) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "lineage" in params or any(p.kind is p.VAR_POSITIONAL for p in params.values())
