"""Environments over a dataset, and the simplest of them: one prompt, one answer, scored by reward functions.

:class:`TaskEnvironment` holds what the dataset environments share: train data and named eval sets
(a ``datasets.Dataset``, JSONL/CSV/Parquet files, a list of dicts, a Hub id where the network
allows; see :func:`~unstable.environments.data.load_task_data`), the prompt (a column, or a
``str.format`` template over columns) and the reward functions. Everything is checked when the
environment is made: a missing column or a reward function asking for a field no dataset has is
a ``ValueError`` then, not at the first rollout.

:class:`SingleTurnEnvironment` asks ``num_samples`` seats of the same model the same prompt at once;
those answers are one episode, so they reach the learner together and form one GRPO group (use
``group_by=("env_id", "game_id")`` with GRPO; see docs/environments.md). Eval episodes ask one seat
(``eval_samples``) each eval row in turn.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from unstable.environments.base import (
    TRAIN_SPLIT,
    Environment,
    Participant,
    ask_policy,
    check_common,
    check_key_part,
    make_turn,
)
from unstable.environments.data import PromptFormat, load_task_data
from unstable.environments.rewards import RewardScores, check_reward_functions, score
from unstable.policies.base import Policy, TurnContext
from unstable.records import GameRecord, GameSpec, Turn
from unstable.utils.checks import check_int


class TaskEnvironment(Environment):
    """Data, prompts and reward functions of a dataset environment (see the module docstring): the base of
    :class:`SingleTurnEnvironment`, the collaborative and parallel environments, and of your own.

    A subclass gives ``play(spec, policies)`` and builds it from three helpers: :meth:`row` (the episode's
    dataset row), :meth:`ask` (one seat's answer, as a :class:`~unstable.records.Turn`) and :meth:`record`
    (the episode's :class:`~unstable.records.GameRecord` from each seat's
    :class:`~unstable.environments.rewards.RewardScores`). ``reward_functions`` are optional where the
    environment scores itself (``reward_functions_required = False``, the default here; the built-in
    environments, which score with them, set it True). ``reward_kinds`` are the kinds of reward function it
    takes: ``("completion",)`` here (``@reward_function``); add ``"conversation"`` only if ``play`` passes
    ``conversation`` and ``actor_name`` to :func:`~unstable.environments.rewards.score`.
    """

    reward_kinds: tuple[str, ...] = ("completion",)
    reward_functions_required: bool = False

    def __init__(self, name: str, *, reward_functions: Sequence[Any] = (), participants: Sequence[Participant],
                 train_data: Any = None, eval_data: Any = None, prompt_column: str | None = None,
                 prompt_format: str | None = None, prompt_template: str = "qwen3-task",
                 action_extraction: str = "default", weight: float = 1.0, seed: int = 0):
        self.name, self.weight, self.seed = name, weight, seed
        self.prompt_template, self.action_extraction = prompt_template, action_extraction
        self.participants = tuple(participants)
        check_common(self)
        check_int("seed", seed, 0)
        where = f"environment {name!r}"
        self.train_data = None if train_data is None else load_task_data(train_data, where=f"{where}: train_data")
        if eval_data is None:
            eval_data = {}
        elif not isinstance(eval_data, Mapping):
            eval_data = {"eval": eval_data}
        self.eval_data = {}
        for set_name, data in eval_data.items():
            check_key_part(f"{where}: an eval set name", set_name)
            self.eval_data[set_name] = load_task_data(data, where=f"{where}: eval_data[{set_name!r}]")
        if self.train_data is None and not self.eval_data:
            raise ValueError(f"{where} has neither train_data nor eval_data")
        self.prompt = PromptFormat(column=prompt_column, template=prompt_format)
        datasets = {"train_data": self.train_data} if self.train_data is not None else {}
        datasets |= {f"eval_data[{k!r}]": v for k, v in self.eval_data.items()}
        for label, data in datasets.items():
            self.prompt.check(data.column_names, where=f"{where}: {label}")
        self.reward_functions = []
        if not reward_functions and not self.reward_functions_required:
            return  # the environment scores itself
        for label, data in datasets.items():
            self.reward_functions = check_reward_functions(reward_functions, data.column_names,
                                                           kinds=self.reward_kinds, where=f"{where}'s {label}")

    def train_size(self) -> int:
        """The number of train rows (0 without ``train_data``: eval-only)."""
        return 0 if self.train_data is None else len(self.train_data)

    def eval_sizes(self) -> dict[str, int]:
        """Each eval set's name and number of rows."""
        return {name: len(data) for name, data in self.eval_data.items()}

    def row(self, spec: GameSpec) -> dict[str, Any]:
        """The dataset row an episode is about (a copy: ``spec.item`` of the train data, or of the eval set
        ``spec.split``); its columns are the fields reward functions may ask for."""
        data = self.train_data if spec.split in (None, TRAIN_SPLIT) else self.eval_data[spec.split]
        if data is None or spec.item is None:
            raise ValueError(f"game {spec.game_id} of {self.name!r} names no row ({spec.split!r}, item {spec.item})")
        return dict(data[spec.item])

    async def ask(self, spec: GameSpec, policy: Policy, player_id: int, observation: str, index: int,
                  turns: Sequence[Turn]) -> Turn:
        """Ask ``policy`` (seat ``player_id``) for its answer to ``observation``, the ``index``-th turn of the
        episode; ``turns`` are the episode's turns so far (kept with a failure). Returns the answer as a
        :class:`~unstable.records.Turn`: ``completion_text`` is the whole answer, ``action`` what the
        environment's ``action_extraction`` took from it. A failing model or API fails the episode (counted,
        not raised)."""
        ctx = TurnContext(spec.env_id, player_id, observation, index, None, random.Random(f"{spec.seed}:{player_id}"))
        started = time.perf_counter()
        out = await ask_policy(policy, ctx, spec, turns)
        return make_turn(index, player_id, observation, out, policy, started)

    @staticmethod
    def record(spec: GameSpec, turns: Sequence[Turn], scores: Mapping[int, RewardScores],
               started: float) -> GameRecord:
        """The :class:`~unstable.records.GameRecord` of an episode: each seat's final reward is its score's total,
        whose parts go to ``game_info[seat]["reward_components"]``; ``started`` is ``time.perf_counter()`` at the
        episode's start."""
        return GameRecord(spec=spec, turns=tuple(turns),
                          final_rewards={pid: s.total for pid, s in scores.items()},
                          game_info={pid: {"reward_components": dict(s.components)} for pid, s in scores.items()},
                          wall_seconds=time.perf_counter() - started)


class SingleTurnEnvironment(TaskEnvironment):
    """One prompt from a dataset, ``num_samples`` answers by one model, each scored by ``reward_functions``
    (``@reward_function`` ones only: a single answer has no conversation).

    ``reward_functions`` are ``@reward_function`` callables over ``(prompt, completion, **row fields)``
    (plain callables work too, with weight 1). ``prompt`` is the task prompt (the column or the
    filled-in ``prompt_format``), before the chat ``prompt_template`` renders it; ``completion`` is the
    model's whole answer. ``model`` names the trainable model that answers (``None``: the run's one
    model). ``system_prompt`` goes before the task prompt.
    """

    reward_functions_required = True

    def __init__(self, name: str, *, reward_functions: Sequence[Any], train_data: Any = None, eval_data: Any = None,
                 prompt_column: str | None = None, prompt_format: str | None = None, num_samples: int = 1,
                 eval_samples: int = 1, model: str | None = None, system_prompt: str = "",
                 prompt_template: str = "qwen3-task", action_extraction: str = "default", weight: float = 1.0,
                 seed: int = 0):
        check_int("num_samples", num_samples, 1)
        check_int("eval_samples", eval_samples, 1)
        self.num_samples, self.eval_samples = num_samples, eval_samples
        seats = [Participant(f"sample-{i}", model=model, system_prompt=system_prompt) for i in range(num_samples)]
        super().__init__(name, reward_functions=reward_functions, participants=seats, train_data=train_data,
                         eval_data=eval_data, prompt_column=prompt_column, prompt_format=prompt_format,
                         prompt_template=prompt_template, action_extraction=action_extraction, weight=weight, seed=seed)

    def eval_seats(self) -> tuple[Participant, ...]:
        """``eval_samples`` seats with the train seats' model and system prompt."""
        first = self.participants[0]
        return tuple(Participant(f"sample-{i}", model=first.model, system_prompt=first.system_prompt)
                     for i in range(self.eval_samples))

    def observation(self, row: Mapping[str, Any]) -> str:
        """The text every seat sees for ``row``: the system prompt (if any), then the task prompt."""
        system = self.participants[0].system_prompt
        task = self.prompt.render(row)
        return f"{system}\n\n{task}" if system else task

    async def play(self, spec: GameSpec, policies: Mapping[int, Policy]) -> GameRecord:
        """Ask every seat the row's prompt at once, score each answer with the reward functions and return the
        :class:`~unstable.records.GameRecord`."""
        started = time.perf_counter()
        row = self.row(spec)
        observation = self.observation(row)
        seats = sorted(policies)
        turns = list(await asyncio.gather(*(self.ask(spec, policies[pid], pid, observation, i, ())
                                             for i, pid in enumerate(seats))))
        task = self.prompt.render(row)
        inputs = [{**row, "prompt": task, "completion": t.completion_text} for t in turns]
        results = await score(self.reward_functions, inputs)
        return self.record(spec, turns, dict(zip(seats, results, strict=True)), started)
