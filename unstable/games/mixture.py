"""``env_a + env_b``: environments and TextArena specs trained and evaluated together.

The mixture lives at the bottom of the stages so that ``TrainEnvSpec + SingleTurnEnvironment``
works from either side; it tells environments (``unstable.environments``, a higher stage) and the
specs apart by their ``is_environment`` and ``mixture_role`` attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def is_environment(obj: Any) -> bool:
    """An environment of ``unstable.environments``, or one of its eval sets."""
    return getattr(obj, "is_environment", False) is True


def _role(obj: Any) -> str | None:
    """``"train"`` for a ``TrainEnvSpec``, ``"eval"`` for an ``EvalEnvSpec`` (their ``mixture_role``)."""
    return getattr(obj, "mixture_role", None)


@dataclass(frozen=True)
class EnvironmentMixture:
    """Environments and TextArena specs trained (and evaluated) together: ``env_a + env_b + spec``.

    ``parts`` keeps their order; adding a mixture adds its parts. Weights are each part's own
    (``Environment.weight``, ``TrainEnvSpec.weight``). Pass it as ``build(train_envs=mixture)``: its
    train parts are drawn by weight, and all of its eval sets and ``EvalEnvSpec`` parts are evaluated.
    An environment without train data is eval-only.
    """

    parts: tuple[Any, ...]

    @classmethod
    def of(cls, *items: Any) -> EnvironmentMixture:
        """A mixture of ``items`` in order, a mixture's parts taken in its place; ``TypeError`` for anything but
        environments (or their eval sets) and train or eval specs, ``ValueError`` for two environments of one name."""
        parts: list[Any] = []
        for item in items:
            if isinstance(item, EnvironmentMixture):
                parts.extend(item.parts)
            elif is_environment(item) or _role(item) in ("train", "eval"):
                parts.append(item)
            else:
                raise TypeError(f"only environments, TrainEnvSpec and EvalEnvSpec objects add up to a mixture, got "
                                f"{type(item).__name__}: {item!r}")
        names = [p.name for p in parts if is_environment(p)]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"a mixture holds environments named {twice} twice; names must be distinct")
        return cls(tuple(parts))

    def __add__(self, other: Any) -> EnvironmentMixture:
        return EnvironmentMixture.of(self, other)

    def __radd__(self, other: Any) -> EnvironmentMixture:
        return EnvironmentMixture.of(self) if other == 0 else EnvironmentMixture.of(other, self)

    @property
    def environments(self) -> tuple[Any, ...]:
        """The parts from ``unstable.environments`` (not TextArena specs), in order."""
        return tuple(p for p in self.parts if is_environment(p))

    def train_parts(self) -> tuple[Any, ...]:
        """What the train sampler draws from: train specs, and environments with train data."""
        return tuple(p for p in self.parts if _role(p) == "train" or (is_environment(p) and p.is_train))

    def eval_parts(self) -> tuple[Any, ...]:
        """``EvalEnvSpec`` parts, and each environment's eval sets."""
        out: list[Any] = []
        for part in self.parts:
            if _role(part) == "eval":
                out.append(part)
            elif is_environment(part):
                out.extend(part.eval_entries())
        return tuple(out)

    def shares(self) -> list[tuple[str, float]]:
        """Each train part's env id and share of the train episodes (its weight over the total)."""
        parts = self.train_parts()
        total = sum(p.weight for p in parts)
        return [(p.env_id, p.weight / total) for p in parts]
