"""Evaluate a model on an environment's eval set: every row once, success rate and mean reward with 95% intervals.

:func:`evaluate_environment` plays each row of one eval set as one episode with the model in every
seat (for a single-turn environment: one answer per row), in one process, batching the episodes'
model calls on one local backend. A row counts as a success when seat 0's reward is above 0 (for an
exact-match reward: the right answer); the success rate gets a Wilson interval, the mean reward
Student's t interval, and each reward function's mean is reported by name.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

from unstable.eval.intervals import mean_interval, wilson_interval
from unstable.inference.base import SamplingParams
from unstable.records import AgentSpec, FailedGame, GameFailedError, GameRecord, GameSpec, PolicyRef


@dataclass(frozen=True)
class EnvironmentEvalResult:
    """What :func:`evaluate_environment` measured."""

    environment: str
    eval_set: str
    model: str
    adapter: str | None
    episodes: int
    failed: int
    success_rate: float
    success_ci95: tuple[float, float]
    mean_reward: float
    mean_reward_ci95: tuple[float, float]
    components: dict[str, float] = field(default_factory=dict)
    distinct_answers: int = 0
    """How many different answers seat 0 gave: 1 means one answer to every row (a policy that learned
    the most frequent answer, not the task)."""
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (intervals as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    def line(self) -> str:
        """One line for the terminal: the success rate with its 95% interval, then rows, distinct answers and mean
        reward."""
        lo, hi = self.success_ci95
        rows = f"{self.episodes} rows, {self.distinct_answers} distinct answers, mean reward {self.mean_reward:.3f}"
        return f"{self.success_rate:.3f} [{lo:.3f}, {hi:.3f}] ({rows})"


def evaluate_environment(model: str, environment: Any, eval_set: str, *, adapter: str | None = None,
                         limit: int | None = None, greedy: bool = True, sampling: SamplingParams | None = None,
                         success: str | None = None, max_concurrent: int = 64,
                         torch_threads: int | None = 1) -> EnvironmentEvalResult:
    """Play the first ``limit`` rows (default: all) of ``environment``'s eval set ``eval_set`` with
    ``model`` (+ ``adapter``) in every seat. ``greedy`` decodes at temperature 0 (``sampling``'s
    other settings kept; default 32 new tokens). ``success`` names the reward function whose value
    above 0 makes a row a success (e.g. exact match next to a format reward); ``None``: the total."""
    import torch

    from unstable.inference.transformers_backend import TransformersBackend
    from unstable.local_models.resolve import resolve_model_name
    from unstable.policies.llm import LLMPolicy

    sizes = environment.eval_sizes()
    if eval_set not in sizes:
        raise ValueError(f"environment {environment.name!r} has no eval set {eval_set!r}; its eval sets: "
                         f"{sorted(sizes) or 'none'}")
    rows = sizes[eval_set] if limit is None else min(limit, sizes[eval_set])
    if success is not None and success not in _function_names(environment):
        raise ValueError(f"success={success!r} is not one of {environment.name!r}'s reward functions: "
                         f"{sorted(_function_names(environment))}")
    base = sampling or SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=32)
    sampling = replace(base, temperature=0.0) if greedy else base
    ref = PolicyRef(uid="model", kind="checkpoint", adapter_path=adapter)
    seats = environment.eval_seats()
    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads or threads)
    backend = TransformersBackend(resolve_model_name(model), max_batch_size=max_concurrent)
    started = time.perf_counter()
    try:
        policy = LLMPolicy(backend, ref, prompt_template=environment.prompt_template,
                           action_extraction=environment.action_extraction, sampling=sampling)
        specs = [GameSpec(game_id=i, env_id=environment.eval_env_id(eval_set), seed=i, is_eval=True, eval_player_id=0,
                          agents=tuple(AgentSpec(pid, ref) for pid in range(len(seats))),
                          environment=environment.name, item=i, split=eval_set) for i in range(rows)]
        results = asyncio.run(_play_all(environment, specs, policy, max_concurrent))
    finally:
        backend.close()
        torch.set_num_threads(threads)
    finished = [r for r in results if isinstance(r, GameRecord)]
    rewards = [r.final_rewards[0] for r in finished]
    names = {name for r in finished for name in r.game_info[0].get("reward_components", {})}
    successes = sum((r.final_rewards[0] if success is None else r.game_info[0]["reward_components"][success]) > 0
                    for r in finished)
    components = {name: statistics.fmean(r.game_info[0]["reward_components"][name] for r in finished)
                  for name in sorted(names)}
    return EnvironmentEvalResult(
        environment=environment.name, eval_set=eval_set, model=str(model), adapter=adapter, episodes=len(finished),
        failed=len(results) - len(finished), success_rate=successes / len(finished) if finished else float("nan"),
        success_ci95=wilson_interval(successes, len(finished)),
        mean_reward=statistics.fmean(rewards) if rewards else float("nan"), mean_reward_ci95=mean_interval(rewards),
        components=components, wall_s=time.perf_counter() - started,
        distinct_answers=len({r.turns[0].completion_text for r in finished if r.turns}))


async def _play_all(environment: Any, specs: list[GameSpec], policy: Any, max_concurrent: int
                    ) -> list[GameRecord | FailedGame]:
    gate = asyncio.Semaphore(max_concurrent)

    async def one(spec: GameSpec) -> GameRecord | FailedGame:
        async with gate:
            try:
                return await environment.play(spec, {a.player_id: policy for a in spec.agents})
            except GameFailedError as err:
                return err.failure

    return list(await asyncio.gather(*(one(spec) for spec in specs)))


def _function_names(environment: Any) -> set[str]:
    return {f.name for f in getattr(environment, "reward_functions", ())}
