"""Environments beyond TextArena games: single-turn datasets, collaborative and parallel
environments, reward functions, and a generated task shipped with the package."""

from unstable.environments.base import Environment, EvalSet, Participant
from unstable.environments.collaborative import CollaborativeEnvironment
from unstable.environments.data import PromptFormat, load_task_data, split_dataset
from unstable.environments.generated import arithmetic_dataset, exact_match, generated_task, sorting_dataset
from unstable.environments.parallel import ParallelEnvironment
from unstable.environments.rewards import (
    RewardFunction,
    RewardScores,
    conversation_reward_function,
    reward_function,
)
from unstable.environments.round_spec import RoundSpec, RoundSpecError, parse_round_spec
from unstable.environments.single_turn import SingleTurnEnvironment, TaskEnvironment
from unstable.games.mixture import EnvironmentMixture

__all__ = [
    "CollaborativeEnvironment",
    "Environment",
    "EnvironmentMixture",
    "EvalSet",
    "ParallelEnvironment",
    "Participant",
    "PromptFormat",
    "RewardFunction",
    "RewardScores",
    "RoundSpec",
    "RoundSpecError",
    "SingleTurnEnvironment",
    "TaskEnvironment",
    "arithmetic_dataset",
    "conversation_reward_function",
    "exact_match",
    "generated_task",
    "load_task_data",
    "parse_round_spec",
    "reward_function",
    "sorting_dataset",
    "split_dataset",
]
