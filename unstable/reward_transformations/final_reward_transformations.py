"""Final reward transforms: run once per player per game on the raw game reward.

The value they return is what every one of that player's turns starts from before the step
transforms run. The built-ins are SPIRAL's role-conditioned advantage estimation (RAE): an
exponential moving average of each role's past rewards is subtracted from its reward, so a seat
that wins more often by construction (say, moving first) does not get a free positive signal.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from unstable.reward_transformations._checks import check_callables, check_finite, check_tau


class FinalRewardTransform(ABC):
    """``(reward, pid, env_id) -> reward``, called once per player per game."""

    @abstractmethod
    def __call__(self, reward: float, pid: int, env_id: str | None = None) -> float: ...


class ComposeFinalRewardTransforms(FinalRewardTransform):
    """Apply final transforms left to right, each to the previous one's output."""

    def __init__(self, transforms: Iterable[FinalRewardTransform]):
        self.transforms = check_callables(transforms, "ComposeFinalRewardTransforms")

    def __call__(self, reward: float, pid: int, env_id: str | None = None) -> float:
        for transform in self.transforms:
            reward = transform(reward, pid, env_id)
        return reward

    def __repr__(self) -> str:
        return f"ComposeFinalRewardTransforms({self.transforms!r})"

    def state_dict(self) -> dict[str, Any]:
        """Each transform's state (``None`` for one that keeps none), JSON-able, for resuming a run."""
        return {"type": type(self).__name__, "transforms": [transform_state(t) for t in self.transforms]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s snapshot; ``ValueError`` if it is of other transforms."""
        _check_type(self, state)
        saved = state["transforms"]
        if len(saved) != len(self.transforms):
            raise ValueError(f"the saved state holds {len(saved)} final reward transforms, this one "
                             f"{len(self.transforms)}")
        for transform, sub in zip(self.transforms, saved, strict=True):
            load_transform_state(transform, sub)


def transform_state(transform: object) -> dict[str, Any] | None:
    """``transform.state_dict()`` for a transform that keeps state (the RAE baselines), else ``None``."""
    get = getattr(transform, "state_dict", None)
    return get() if callable(get) else None


def load_transform_state(transform: object, state: dict[str, Any] | None) -> None:
    """Restore :func:`transform_state`'s snapshot into ``transform``; ``ValueError`` if it does not fit
    (the snapshot is of another transform)."""
    load = getattr(transform, "load_state_dict", None)
    if state is None and load is None:
        return
    if state is None or load is None:
        raise ValueError(f"the saved state {'has no' if state is None else 'has a'} state for {transform!r}")
    load(state)


def _check_type(transform: object, state: dict[str, Any]) -> None:
    if not isinstance(state, dict) or state.get("type") != type(transform).__name__:
        got = state.get("type") if isinstance(state, dict) else state
        raise ValueError(f"the saved state is of {got!r}, not of {type(transform).__name__}")


def ema_update(baseline: float, reward: float, tau: float) -> float:
    """One EMA step: ``(1 - tau) * baseline + tau * reward``."""
    return (1.0 - tau) * baseline + tau * reward


class _RoleBaseline(FinalRewardTransform):
    """RAE with baselines kept in a dict under a key; subclasses choose the key."""

    def __init__(self, initial: float, tau: float):
        self.initial = check_finite(initial, "initial baseline")
        self.tau = check_tau(tau)
        self.baselines: dict[object, float] = {}

    def _key(self, pid: int, env_id: str | None) -> object:
        raise NotImplementedError

    def __call__(self, reward: float, pid: int, env_id: str | None = None) -> float:
        reward = check_finite(reward, "reward")
        key = self._key(pid, env_id)
        baseline = self.baselines.get(key, self.initial)  # read before the update (SPIRAL: unbiased)
        self.baselines[key] = ema_update(baseline, reward, self.tau)
        return reward - baseline

    def state_dict(self) -> dict[str, Any]:
        """The baselines, JSON-able (a ``(env_id, pid)`` key becomes a list), for resuming a run."""
        return {"type": type(self).__name__,
                "baselines": [[list(k) if isinstance(k, tuple) else k, v] for k, v in self.baselines.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s baselines; ``ValueError`` if they are another transform's."""
        _check_type(self, state)
        self.baselines = {tuple(k) if isinstance(k, list) else k: check_finite(v, "saved baseline")
                          for k, v in state["baselines"]}


class RoleAdvantageFormatter(_RoleBaseline):
    """Return reward minus an EMA baseline kept per player id, shared across all envs (RAE)."""

    def __init__(self, role_adv: float = 0.0, tau: float = 0.001):
        super().__init__(check_finite(role_adv, "role_adv"), tau)

    def _key(self, pid: int, env_id: str | None) -> object:
        return pid

    def __repr__(self) -> str:
        return f"RoleAdvantageFormatter(role_adv={self.initial}, tau={self.tau})"


class RoleAdvantageByEnvFormatter(_RoleBaseline):
    """Return reward minus an EMA baseline kept per (env_id, player id) (SPIRAL's RAE per game and role)."""

    def __init__(self, default_role_adv: float = 0.0, tau: float = 0.001):
        super().__init__(check_finite(default_role_adv, "default_role_adv"), tau)

    def _key(self, pid: int, env_id: str | None) -> object:
        if env_id is None:
            raise ValueError(
                "RoleAdvantageByEnvFormatter needs an env_id; use RoleAdvantageFormatter without one"
            )
        return (env_id, pid)

    def __repr__(self) -> str:
        return f"RoleAdvantageByEnvFormatter(default_role_adv={self.initial}, tau={self.tau})"
