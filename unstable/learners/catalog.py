"""Learners by name: what ``unstable.build(algorithm=...)`` accepts.

``algorithm`` is a registered name (``"reinforce"``, ``"a2c"``, ``"ppo"``, ``"grpo"``, ``"gspo"``, or one given to
:func:`register_learner`), a :class:`~unstable.learners.BaseLearner` subclass, or the import path
``"package.module:ClassName"`` of one (how ``config.json`` records an unregistered class).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from unstable.learners.a2c import A2CLearner
from unstable.learners.base import BaseLearner
from unstable.learners.grpo import GRPOLearner, GSPOLearner
from unstable.learners.ppo import PPOLearner
from unstable.learners.reinforce import REINFORCELearner

_LEARNERS: dict[str, type[BaseLearner]] = {
    "reinforce": REINFORCELearner,
    "a2c": A2CLearner,
    "ppo": PPOLearner,
    "grpo": GRPOLearner,
    "gspo": GSPOLearner,
}


def register_learner(name: str, cls: type[BaseLearner], *, overwrite: bool = False) -> None:
    """Make ``build(algorithm=name)`` train with ``cls`` (a ``BaseLearner`` subclass with ``_update``).

    Registering the same class again, or a redefinition of it (same module and name: a re-run
    notebook cell, a reloaded module), replaces it; another class under a taken name needs
    ``overwrite=True`` (as :func:`unstable.register_template`).
    """
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise ValueError(f"a learner name must be a non-empty string without ':', got {name!r}")
    _check_learner_class(cls, f"register_learner({name!r}, ...)")
    taken = _LEARNERS.get(name, cls)
    if (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__) and not overwrite:
        raise ValueError(f"the learner name {name!r} is taken by {_LEARNERS[name].__qualname__}; "
                         "pass overwrite=True to replace it")
    _LEARNERS[name] = cls


def available_learners() -> list[str]:
    """The registered names, sorted."""
    return sorted(_LEARNERS)


def resolve_learner(algorithm: Any) -> type[BaseLearner]:
    """The learner class ``algorithm`` names (see the module docstring); ``ValueError`` otherwise."""
    if isinstance(algorithm, type):
        _check_learner_class(algorithm, "algorithm")
        return algorithm
    if isinstance(algorithm, str) and algorithm in _LEARNERS:
        return _LEARNERS[algorithm]
    if isinstance(algorithm, str) and ":" in algorithm:
        module, _, qualname = algorithm.partition(":")
        try:
            value: Any = importlib.import_module(module)
            for part in qualname.split("."):
                value = getattr(value, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"algorithm {algorithm!r} cannot be imported: {exc}") from None
        _check_learner_class(value, f"algorithm={algorithm!r}")
        return value
    raise ValueError(f"algorithm must be one of {available_learners()}, a BaseLearner subclass or "
                     f"'module:ClassName', got {algorithm!r}; register_learner(name, cls) adds a name")


def learner_name(cls: type[BaseLearner]) -> str:
    """How ``config.json`` records ``cls``: its registered name, else ``"module:QualName"``."""
    for name, registered in _LEARNERS.items():
        if registered is cls:
            return name
    return f"{cls.__module__}:{cls.__qualname__}"


def algorithm_settings(cls: type[BaseLearner], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``settings`` that ``cls.initialize_algorithm`` declares as named parameters."""
    params = inspect.signature(cls.initialize_algorithm).parameters
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in settings.items() if k in named}


def _check_learner_class(cls: Any, what: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, BaseLearner)):
        got = f"the class {cls.__qualname__}" if isinstance(cls, type) else f"{cls!r} (a {type(cls).__name__})"
        raise ValueError(f"{what} must be a subclass of unstable.learners.BaseLearner, got {got}; "
                         "subclass BaseLearner and implement _update(batch)")
    if cls._update is BaseLearner._update:
        raise ValueError(f"{what}: {cls.__qualname__} does not implement _update(batch), the forward, loss and "
                         "backward of its algorithm")
