"""unstable: asynchronous, online, multi-agent, multi-turn RL of LLMs on TextArena games.

The public names are imported lazily, so ``import unstable`` stays fast and the CLI starts
without loading torch until it needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from unstable.legacy import install as _install_old_names

__version__ = "0.3.0.dev0"
_install_old_names()  # the module paths that moved still import (unstable.legacy.MOVED)

_LAZY = {
    # games
    "TrainEnvSpec": "unstable.games.specs",
    "EvalEnvSpec": "unstable.games.specs",
    "register_template": "unstable.games.templates",
    "available_templates": "unstable.games.templates",
    "register_action_extraction": "unstable.games.extraction",
    "check_env_id": "unstable.games.envs",
    "play_game": "unstable.collection.rollout",
    "play_game_sync": "unstable.collection.rollout",
    "play_games": "unstable.collection.rollout",
    # environments
    "SingleTurnEnvironment": "unstable.environments",
    "CollaborativeEnvironment": "unstable.environments",
    "ParallelEnvironment": "unstable.environments",
    "Participant": "unstable.environments",
    "EnvironmentMixture": "unstable.environments",
    "reward_function": "unstable.environments",
    "conversation_reward_function": "unstable.environments",
    "arithmetic_dataset": "unstable.environments",
    "sorting_dataset": "unstable.environments",
    "load_task_data": "unstable.environments",
    "exact_match": "unstable.environments",
    # records
    "GameSpec": "unstable.records",
    "AgentSpec": "unstable.records",
    "PolicyRef": "unstable.records",
    "Sample": "unstable.records",
    "Turn": "unstable.records",
    "GameRecord": "unstable.records",
    "FailedGame": "unstable.records",
    "GameFailedError": "unstable.records",
    "PlayerTrajectory": "unstable.records",
    "Step": "unstable.records",
    "TrainBatch": "unstable.records",
    # policies and inference
    "LLMPolicy": "unstable.policies.llm",
    "RandomLegalPolicy": "unstable.policies.scripted",
    "SamplingParams": "unstable.inference.base",
    "GenerationRequest": "unstable.inference.base",
    "TransformersBackend": "unstable.inference.transformers_backend",
    # models
    "build_tiny_model": "unstable.local_models.tiny",
    "tiny_model_path": "unstable.local_models.tiny",
    # learning
    "StepBuffer": "unstable.run.actors",
    "EpisodeBuffer": "unstable.run.actors",
    "REINFORCELearner": "unstable.run.actors",
    "A2CLearner": "unstable.run.actors",
    "BaseLearner": "unstable.learners",
    "register_learner": "unstable.learners",
    # orchestration
    "build": "unstable.run.build",
    "BuildConfig": "unstable.run.config",
    "ModelConfig": "unstable.run.config",
    "BufferConfig": "unstable.buffers.config",
    "SamplerConfig": "unstable.samplers.config",
    "TrackerConfig": "unstable.tracking.config",
    "Run": "unstable.run.build",
    "ModelRegistry": "unstable.run.actors",
    "GameScheduler": "unstable.run.actors",
    "Collector": "unstable.legacy.compat",  # today's Collector, also taking 0.1's keywords
    "InferenceActor": "unstable.run.actors",
    "Tracker": "unstable.run.actors",
    # UnstableBaselines 0.1 names (see unstable.legacy)
    "ModelPool": "unstable.legacy.compat",
    "StandardLearner": "unstable.legacy.compat",
    # evaluation and plots
    "evaluate": "unstable.eval.evaluation",
    "evaluate_exploitability": "unstable.eval.exploitability",
    "ExploitabilityResult": "unstable.eval.exploitability",
    "plot_run": "unstable.ui.plots",
}

# Submodules reachable as attributes, as in the seed (``unstable.samplers.env_samplers...``).
_SUBMODULES = {"environments", "samplers", "reward_transformations", "buffers", "learners", "algorithms", "registry",
               "tracking"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"unstable.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'unstable' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, *_SUBMODULES])


if TYPE_CHECKING:  # pragma: no cover
    from unstable.games.specs import EvalEnvSpec, TrainEnvSpec  # noqa: F401
