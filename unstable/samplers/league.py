"""League opponent samplers: prioritised fictitious self-play, a rating curriculum, and mixtures.

Every sampler here draws from an explicit distribution over opponent uids (:meth:`probabilities`),
so a test, a log line or a later meta-solver can read the distribution itself:

* :class:`MixtureModelSampler`: a given mixture ``{uid: probability}`` (:meth:`~MixtureModelSampler.set_mixture`);
  the plug-in point for a meta-solver such as PSRO's (Lanctot et al. 2017, "A Unified Game-Theoretic
  Approach to Multiagent Reinforcement Learning"), whose Nash mixture over the pool becomes the
  opponent distribution until its next update;
* :class:`PFSPModelSampler`: prioritised fictitious self-play (Vinyals et al. 2019, "Grandmaster level
  in StarCraft II using multi-agent reinforcement learning", Methods, "Prioritized fictitious
  self-play"): opponent ``o`` in proportion to ``f(p_o)``, ``p_o`` the learner's win rate against it
  (:func:`pfsp_weights`);
* :class:`RatingCurriculumModelSampler`: opponents whose TrueSkill match quality with the learner
  (Herbrich et al. 2006, "TrueSkill: a Bayesian skill rating system"; ``trueskill.quality_1vs1``) is
  near a target level (:func:`closeness_weights`);
* :class:`CurriculumMixModelSampler`: with probability ``weight`` a draw from a curriculum sampler, else
  from the base strategy (``rating_curriculum`` in the config mixes the rating curriculum into any
  strategy).

The pool of a league sampler (:func:`league_pool`) is every learner checkpoint in the registry except
the learner's current one (its own past checkpoints and, in a run with several trainable models, the
others'), and the fixed opponents it was given. With an empty pool it falls back to mirror self-play.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from unstable.records import PolicyRef
from unstable.samplers.model_samplers import (
    DistributionModelSampler,
    WrappingModelSampler,
    sample_opponent_for,
)
from unstable.utils.calls import call

PFSP_WEIGHTINGS = ("hard", "even", "linear")
"""AlphaStar's weightings of the win rate ``p``: ``hard`` (1-p)^2 (its "squared"), ``even`` p(1-p) (its
"variance"), ``linear`` 1-p."""


def pfsp_weight(p: float, weighting: str = "hard") -> float:
    """The unnormalised PFSP weight of an opponent the learner beats with probability ``p`` (Vinyals et
    al. 2019): ``hard`` (1-p)^2 favours the opponents the learner loses to, ``even`` p(1-p) those it
    beats half the time, ``linear`` 1-p sits between."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a win rate must be in [0, 1], got {p!r}")
    if weighting == "hard":
        return (1.0 - p) ** 2
    if weighting == "even":
        return p * (1.0 - p)
    if weighting == "linear":
        return 1.0 - p
    raise ValueError(f"pfsp_weighting must be one of {list(PFSP_WEIGHTINGS)}, got {weighting!r}")


def pfsp_weights(win_rates: Sequence[float], weighting: str = "hard") -> list[float]:
    """:func:`pfsp_weight` of each win rate, normalised to sum to 1; uniform when every weight is 0 (the
    learner beats all with certainty under ``hard``, say), as in AlphaStar's pseudocode."""
    if not win_rates:
        return []
    weights = [pfsp_weight(p, weighting) for p in win_rates]
    total = math.fsum(weights)
    if total <= 0.0:
        return [1.0 / len(weights)] * len(weights)
    return [w / total for w in weights]


def win_rate(wins: float, draws: float, losses: float, prior: float = 1.0) -> float:
    """The posterior mean win rate, a draw counting half (AlphaStar's payoff): ``(wins + draws/2 + prior) /
    (wins + draws + losses + 2 prior)``, i.e. Beta(prior, prior) pseudo-counts, 0.5 with no games."""
    if not prior > 0:
        raise ValueError(f"the prior pseudo-count must be > 0, got {prior!r}")
    return (wins + 0.5 * draws + prior) / (wins + draws + losses + 2.0 * prior)


def closeness_weights(values: Sequence[float], target: float, width: float) -> list[float]:
    """Gaussian kernel weights ``exp(-((v - target) / width)^2 / 2)``, normalised: the values nearest
    ``target`` weigh most, none weighs 0."""
    if not width > 0:
        raise ValueError(f"width must be > 0, got {width!r}")
    if not values:
        return []
    logs = [-0.5 * ((v - target) / width) ** 2 for v in values]
    top = max(logs)
    weights = [math.exp(x - top) for x in logs]
    total = math.fsum(weights)
    return [w / total for w in weights]


def _first_lineage(registry: Any, lineage: str | None) -> str | None:
    if lineage is not None:
        return lineage
    return (call(registry, "lineages") or [None])[0]


def league_pool(registry: Any, lineage: str | None, fixed: Sequence[str] | None = None) -> list[str]:
    """Every checkpoint in ``registry`` but ``lineage``'s current one, then the fixed opponents: those
    named in ``fixed`` that are registered (``None``: every registered fixed model)."""
    current = call(registry, "get_current_ckpt", _first_lineage(registry, lineage))
    ckpts = [uid for uid in call(registry, "checkpoint_uids") if uid != current]
    registered = call(registry, "fixed_uids")
    chosen = registered if fixed is None else [uid for uid in registered if uid in set(fixed)]
    return ckpts + list(chosen)


class MixtureModelSampler(DistributionModelSampler):
    """Opponents from a mixture over the pool that someone else computes (a PSRO meta-solver's Nash
    mixture, α-Rank's stationary distribution): :meth:`set_mixture` replaces it, :meth:`state_dict`
    keeps it across a resume. Uids no longer registered are left out; before the first mixture, mirror."""

    def __init__(self, model_registry: Any, mixture: Mapping[str, float] | None = None, rng_seed: int = 489):
        super().__init__(model_registry, rng_seed)
        self._mixture: dict[str, float] = {}
        if mixture:
            self.set_mixture(mixture)

    def set_mixture(self, mixture: Mapping[str, float]) -> None:
        """Use ``mixture`` (``{uid: weight >= 0}``, normalised here) from now on."""
        bad = {uid: w for uid, w in mixture.items()
               if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0}
        if bad:
            raise ValueError(f"mixture weights must be finite numbers >= 0, got {bad}")
        total = math.fsum(mixture.values())
        if not total > 0:
            raise ValueError(f"a mixture needs a weight > 0, got {dict(mixture)}")
        self._mixture = {uid: w / total for uid, w in mixture.items() if w > 0}

    def probabilities(self, lineage: str | None = None) -> dict[str, float]:
        """The mixture over the uids still registered, renormalised."""
        known = set(call(self.model_registry, "checkpoint_uids")) | set(call(self.model_registry, "fixed_uids"))
        kept = {uid: w for uid, w in self._mixture.items() if uid in known}
        total = math.fsum(kept.values())
        return {uid: w / total for uid, w in kept.items()} if total > 0 else {}

    def state_dict(self) -> dict[str, Any]:
        """The mixture (JSON-able)."""
        return {"mixture": dict(self._mixture)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s mixture."""
        self._mixture = dict(state["mixture"])


class PFSPModelSampler(DistributionModelSampler):
    """Prioritised fictitious self-play (Vinyals et al. 2019): opponent ``o`` of :func:`league_pool` with
    probability ∝ ``f(p_o)`` (:func:`pfsp_weights`, ``weighting`` names ``f``).

    ``p_o`` is :func:`win_rate` of the learner's games against ``o`` as the registry recorded them
    (``match_results``): the games of ``lineage``'s ``window`` newest checkpoints (the learner changes a
    little at each checkpoint; its last few stand for it; against one of its own past checkpoints, only
    those newer than it), with ``prior`` pseudo-wins and pseudo-losses, so a new opponent starts at 0.5."""

    def __init__(self, model_registry: Any, weighting: str = "hard", prior: float = 1.0, window: int = 4,
                 fixed_opponents: Sequence[str] | None = None, rng_seed: int = 489):
        super().__init__(model_registry, rng_seed)
        pfsp_weight(0.5, weighting)  # refuses an unknown weighting
        win_rate(0, 0, 0, prior)  # refuses a prior <= 0
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an integer >= 1, got {window!r}")
        self.weighting, self.prior, self.window = weighting, prior, window
        self.fixed_opponents = None if fixed_opponents is None else tuple(fixed_opponents)

    def win_rates(self, lineage: str | None = None) -> dict[str, float]:
        """The learner's estimated win rate against each opponent of the pool."""
        lineage = _first_lineage(self.model_registry, lineage)
        pool = league_pool(self.model_registry, lineage, self.fixed_opponents)
        own = call(self.model_registry, "checkpoint_uids", lineage)
        learners = own[-self.window:]
        results = call(self.model_registry, "match_results")
        rates = {}
        for opponent in pool:
            counts = {"win": 0, "draw": 0, "loss": 0}
            # against a past checkpoint of its own, only the newer checkpoints played as the learner
            newer = learners if opponent not in own else [u for u in learners if own.index(u) > own.index(opponent)]
            for learner in newer:
                cell = results.get(learner, {}).get(opponent, {})
                for outcome in counts:
                    counts[outcome] += cell.get(outcome, 0)
            rates[opponent] = win_rate(counts["win"], counts["draw"], counts["loss"], self.prior)
        return rates

    def probabilities(self, lineage: str | None = None) -> dict[str, float]:
        """PFSP's distribution over the pool."""
        rates = self.win_rates(lineage)
        return dict(zip(rates, pfsp_weights(list(rates.values()), self.weighting), strict=True))


class RatingCurriculumModelSampler(DistributionModelSampler):
    """Opponents of :func:`league_pool` whose TrueSkill match quality with the learner's current checkpoint
    is near ``target``: weights :func:`closeness_weights` of the qualities (the registry's
    ``match_quality``, TrueSkill's ``quality_1vs1`` under its environment). ``target=None`` aims at the
    highest quality in the pool, the most even match the ratings allow, which TrueSkill's authors call
    the most informative game."""

    def __init__(self, model_registry: Any, target: float | None = None, width: float = 0.1,
                 fixed_opponents: Sequence[str] | None = None, rng_seed: int = 489):
        super().__init__(model_registry, rng_seed)
        if target is not None and not (isinstance(target, int | float) and 0.0 <= target <= 1.0):
            raise ValueError(f"target must be a match quality in [0, 1] or None, got {target!r}")
        closeness_weights([0.0], 0.0, width)  # refuses a width <= 0
        self.target, self.width = target, width
        self.fixed_opponents = None if fixed_opponents is None else tuple(fixed_opponents)

    def qualities(self, lineage: str | None = None) -> dict[str, float]:
        """TrueSkill match quality of the learner's current checkpoint against each opponent of the pool."""
        lineage = _first_lineage(self.model_registry, lineage)
        current = call(self.model_registry, "get_current_ckpt", lineage)
        pool = league_pool(self.model_registry, lineage, self.fixed_opponents)
        return {uid: call(self.model_registry, "match_quality", current, uid) for uid in pool}

    def probabilities(self, lineage: str | None = None) -> dict[str, float]:
        """The curriculum's distribution over the pool."""
        quality = self.qualities(lineage)
        if not quality:
            return {}
        target = max(quality.values()) if self.target is None else self.target
        return dict(zip(quality, closeness_weights(list(quality.values()), target, self.width), strict=True))


class CurriculumMixModelSampler(WrappingModelSampler):
    """``(1 - weight) * base + weight * curriculum``: each opponent comes from ``curriculum`` with
    probability ``weight``, else from ``base``. Both components read the registry this sampler reads and
    draw with its ``rng`` (one random stream, saved with the scheduler's state)."""

    _parts = ("base", "curriculum")

    def __init__(self, base: Any, curriculum: Any, weight: float, rng_seed: int = 489):
        if not (isinstance(weight, int | float) and not isinstance(weight, bool) and 0.0 <= weight <= 1.0):
            raise ValueError(f"weight must be a number in [0, 1], got {weight!r}")
        self.base, self.curriculum, self.weight = base, curriculum, float(weight)
        super().__init__(base.model_registry, rng_seed)
        for part in (base, curriculum):
            part.rng = self.rng

    def state_dict(self) -> dict[str, Any]:
        """The components' own state (a PSRO base's mixture and meta-game), for the scheduler's resume."""
        return {name: part.state_dict() for name, part in (("base", self.base), ("curriculum", self.curriculum))
                if callable(getattr(part, "state_dict", None))}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        for name, part in (("base", self.base), ("curriculum", self.curriculum)):
            if name in state:
                part.load_state_dict(state[name])

    def sample_opponent(self, lineage: str | None = None) -> PolicyRef:
        """From ``curriculum`` with probability ``weight``, else from ``base``."""
        part = self.curriculum if self.rng.random() < self.weight else self.base
        return sample_opponent_for(part, lineage) if lineage is not None else part.sample_opponent()
