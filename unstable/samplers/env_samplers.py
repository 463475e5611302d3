"""Env samplers: which game the scheduler sets up next.

A sampler holds the train specs (and optional eval specs) and picks one per job. The built-in
:class:`UniformRandomEnvSampler` picks uniformly. To write your own (a curriculum, say), subclass
:class:`BaseEnvSampler`, implement ``_pick`` and, if it learns from results, ``update``::

    class PreferHardEnvs(BaseEnvSampler):
        '''Train more on the envs where the checkpoint's average reward is lowest.'''

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.avg = {}

        def _pick(self, specs, kind):
            if kind == "eval":
                return self.rng.choice(specs)
            weights = [1.0 - self.avg.get(s.env_id, 0.0) for s in specs]  # rewards in [-1, 1]
            return self.rng.choices(specs, weights=weights)[0]

        def update(self, env_id, avg_actor_reward, avg_opponent_reward):
            old = self.avg.get(env_id, 0.0)
            self.avg[env_id] = 0.95 * old + 0.05 * avg_actor_reward

The scheduler calls ``update`` after every finished *train* game with the average reward of the
checkpoint's seats and of the opponents' seats (``None`` in mirror self-play, which has none).
Samplers are plain Python objects that live inside the scheduler; use ``self.rng`` for randomness
so a run is reproducible from ``rng_seed``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

from unstable.games.mixture import is_environment
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.samplers.league import closeness_weights

Kind = Literal["train", "eval"]


class BaseEnvSampler:
    """Holds and validates the specs; subclasses decide which one to play (``_pick``).

    ``rng_seed=489`` is the seed's default, kept so its scripts sample the same envs.
    """

    def __init__(self, train_env_specs: Sequence[TrainEnvSpec],
                 eval_env_specs: Sequence[EvalEnvSpec] | None = None, rng_seed: int = 489):
        train = list(train_env_specs or [])
        evals = list(eval_env_specs or [])
        if not train:
            raise ValueError("train_env_specs is empty; give at least one TrainEnvSpec(...)")
        for spec in train:
            if not isinstance(spec, TrainEnvSpec) and not is_environment(spec):
                raise TypeError(f"train_env_specs must hold TrainEnvSpec objects or environments, got "
                                f"{type(spec).__name__}: {spec!r}")
        for spec in evals:
            if not isinstance(spec, EvalEnvSpec) and not is_environment(spec):
                raise TypeError(f"eval_env_specs must hold EvalEnvSpec objects or environment eval sets, got "
                                f"{type(spec).__name__}: {spec!r}")
        self.train_env_specs: list[TrainEnvSpec] = train
        self.eval_env_specs: list[EvalEnvSpec] = evals
        self.rng = random.Random(rng_seed)

    def env_list(self) -> str:
        """The train env ids, comma-separated and de-duplicated (used in run names)."""
        return ",".join(dict.fromkeys(spec.env_id for spec in self.train_env_specs))

    def has_eval(self) -> bool:
        """Whether there is anything to evaluate (eval specs or eval sets)."""
        return bool(self.eval_env_specs)

    def sample(self, kind: Kind = "train", where: Callable[[TrainEnvSpec | EvalEnvSpec], bool] | None = None
               ) -> TrainEnvSpec | EvalEnvSpec | None:
        """A spec of ``kind``; with ``where``, only among the specs it accepts (``None`` if it accepts none).

        The scheduler passes ``where`` to leave out train specs whose every trainable model is
        paused (its buffer full, or its learner done)."""
        if kind == "train":
            specs = self.train_env_specs
        elif kind == "eval":
            if not self.eval_env_specs:
                raise ValueError("no eval_env_specs were given; check has_eval() before asking for an eval env")
            specs = self.eval_env_specs
        else:
            raise ValueError(f"kind must be 'train' or 'eval', got {kind!r}")
        if where is not None:
            specs = [spec for spec in specs if where(spec)]
            if not specs:
                return None
        return self._pick(specs, kind)

    def _pick(self, specs: list, kind: Kind):
        raise NotImplementedError(f"{type(self).__name__} must implement _pick(specs, kind)")

    def update(self, env_id: str, avg_actor_reward: float, avg_opponent_reward: float | None) -> None:
        """Hook called after each finished train game; a no-op here."""


class UniformRandomEnvSampler(BaseEnvSampler):
    """Each train spec drawn with probability proportional to its ``weight`` (all 1 by default: the
    seed's uniform ``"random"`` strategy); eval specs uniformly."""

    def _pick(self, specs: list, kind: Kind):
        weights = [getattr(spec, "weight", 1.0) for spec in specs] if kind == "train" else []
        if len(set(weights)) > 1:
            return self.rng.choices(specs, weights=weights)[0]
        return self.rng.choice(specs)  # equal weights: the same draws as before weights existed


def success(avg_actor_reward: float) -> float:
    """A game's success in [0, 1] from the checkpoint's average reward in [-1, 1] (win 1, draw 0.5,
    loss 0); rewards outside that range are clipped."""
    return min(1.0, max(0.0, (float(avg_actor_reward) + 1.0) / 2.0))


class SuccessCurriculumEnvSampler(BaseEnvSampler):
    """Train envs weighted by recent success: env ``e`` with probability ∝ ``exp(-((s_e - target) / width)^2 / 2)``
    (:func:`~unstable.samplers.league.closeness_weights`), ``s_e`` the mean :func:`success` of its last
    ``window`` train games (``target`` before its first). The learner plays most where it wins about
    ``target`` of its games, as in teacher-student curricula (Matiisen et al. 2017, "Teacher-Student
    Curriculum Learning"; Portelas et al. 2020, "Automatic curriculum learning for deep RL: a short
    survey"), and no env's probability is ever 0. A spec's ``weight`` multiplies its kernel weight.
    In mirror self-play the checkpoint's average reward is that of both seats, near 0 in a zero-sum
    game: every env then reads 0.5 and the curriculum has nothing to go on. Eval specs: uniform."""

    def __init__(self, train_env_specs: Sequence[TrainEnvSpec], eval_env_specs: Sequence[EvalEnvSpec] | None = None,
                 rng_seed: int = 489, window: int = 32, target: float = 0.5, width: float = 0.25):
        super().__init__(train_env_specs, eval_env_specs, rng_seed)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an integer >= 1, got {window!r}")
        if not (isinstance(target, int | float) and not isinstance(target, bool) and 0.0 <= target <= 1.0):
            raise ValueError(f"target must be a success rate in [0, 1], got {target!r}")
        if not (isinstance(width, int | float) and not isinstance(width, bool) and width > 0):
            raise ValueError(f"width must be a number > 0, got {width!r}")
        self.window, self.target, self.width = window, float(target), float(width)
        self._recent: dict[str, deque[float]] = {}

    def success_rates(self) -> dict[str, float]:
        """Each train env's mean success over its recent window (``target`` for an env not played yet)."""
        rates = {}
        for env_id in dict.fromkeys(spec.env_id for spec in self.train_env_specs):
            recent = self._recent.get(env_id)
            rates[env_id] = sum(recent) / len(recent) if recent else self.target
        return rates

    def probabilities(self, specs: Sequence[TrainEnvSpec] | None = None) -> list[float]:
        """The draw probability of each of ``specs`` (default: every train spec), in order."""
        specs = list(self.train_env_specs if specs is None else specs)
        rates = self.success_rates()
        kernel = closeness_weights([rates.get(spec.env_id, self.target) for spec in specs], self.target, self.width)
        weights = [k * getattr(spec, "weight", 1.0) for k, spec in zip(kernel, specs, strict=True)]
        total = sum(weights)
        return [w / total for w in weights]

    def _pick(self, specs: list, kind: Kind):
        if kind == "eval":
            return self.rng.choice(specs)
        return self.rng.choices(specs, weights=self.probabilities(specs))[0]

    def update(self, env_id: str, avg_actor_reward: float, avg_opponent_reward: float | None) -> None:
        """Add a finished train game's success to ``env_id``'s window."""
        self._recent.setdefault(env_id, deque(maxlen=self.window)).append(success(avg_actor_reward))

    def state_dict(self) -> dict[str, Any]:
        """The recent successes per env (JSON-able), for resuming."""
        return {"recent": {env_id: list(values) for env_id, values in self._recent.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s windows."""
        self._recent = {env_id: deque(values, maxlen=self.window) for env_id, values in state["recent"].items()}
