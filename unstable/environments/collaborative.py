"""Participants take turns on one task, in the order a round spec draws (``'Bob -> Alice -> (Bob/Alice)*5'``).

Each turn, the speaker sees its system prompt, the task and the conversation so far, and adds one
message. At the end every participant is scored by the reward functions:

* ``@conversation_reward_function`` callables get ``conversation`` (the task as the first,
  ``"user"`` message, then one ``"assistant"`` message per turn with the speaker's ``name``),
  ``actor_name`` (the participant scored) and the row's fields;
* ``@reward_function`` callables get ``prompt`` (the task) and ``completion``: the participant's own
  last message (``""`` if it never spoke).

With ``shared_reward=True`` everyone gets the score of the conversation's outcome instead: the last
message as ``completion``, and the last speaker as ``actor_name``. Each participant's turns are its
trajectory, so each model learns from its own messages; a fixed participant (``policy=``) plays
and does not learn.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from unstable.environments.base import Participant, participants_from
from unstable.environments.rewards import score
from unstable.environments.round_spec import parse_round_spec
from unstable.environments.single_turn import TaskEnvironment
from unstable.policies.base import Policy
from unstable.records import GameRecord, GameSpec
from unstable.utils.checks import check_bool


class CollaborativeEnvironment(TaskEnvironment):
    """See the module docstring. ``participants``: :class:`Participant` objects (or names, or
    mappings), seat ``i`` being ``participants[i]``; ``round_spec`` uses their names."""

    reward_kinds = ("completion", "conversation")
    reward_functions_required = True

    def __init__(self, name: str, *, participants: Sequence[Participant | str | Mapping[str, Any]], round_spec: str,
                 reward_functions: Sequence[Any], train_data: Any = None, eval_data: Any = None,
                 prompt_column: str | None = None, prompt_format: str | None = None, shared_reward: bool = False,
                 prompt_template: str = "qwen3-task", action_extraction: str = "default", weight: float = 1.0,
                 seed: int = 0):
        seats = participants_from(participants, f"environment {name!r}")
        self.round = parse_round_spec(round_spec, actors=[p.name for p in seats])
        check_bool("shared_reward", shared_reward)  # bool("no") would be True
        self.shared_reward = shared_reward
        super().__init__(name, reward_functions=reward_functions, participants=seats, train_data=train_data,
                         eval_data=eval_data, prompt_column=prompt_column, prompt_format=prompt_format,
                         prompt_template=prompt_template, action_extraction=action_extraction, weight=weight, seed=seed)

    def observation(self, seat: Participant, task: str, conversation: Sequence[Mapping[str, Any]]) -> str:
        """What ``seat`` sees on its turn: its system prompt (if any), the task, the conversation so far as
        ``name: message`` lines, and that it is its turn."""
        said = [f"{m['name']}: {m['content']}" for m in conversation[1:]]
        parts = [seat.system_prompt] if seat.system_prompt else []
        parts += [f"Task: {task}", "Conversation so far:\n" + ("\n".join(said) if said else "(nothing yet)"),
                  f"It is your turn, {seat.name}."]
        return "\n\n".join(parts)

    async def play(self, spec: GameSpec, policies: Mapping[int, Policy]) -> GameRecord:
        """Play one conversation (the speaking order drawn from the round spec with the game's seed), score it as
        the module docstring says and return its :class:`~unstable.records.GameRecord`."""
        started = time.perf_counter()
        row = self.row(spec)
        task = self.prompt.render(row)
        seat_of = {p.name: i for i, p in enumerate(self.participants)}
        order = self.round.expand(random.Random(f"unstable/{self.name}/round/{spec.seed}"))
        conversation: list[dict[str, Any]] = [{"role": "user", "name": None, "content": task}]
        turns = []
        for index, speaker in enumerate(order):
            pid = seat_of[speaker]
            observation = self.observation(self.participants[pid], task, conversation)
            turn = await self.ask(spec, policies[pid], pid, observation, index, turns)
            turns.append(turn)
            conversation.append({"role": "assistant", "name": speaker, "content": turn.completion_text})
        common = {**row, "prompt": task, "conversation": conversation}
        if self.shared_reward:  # one score of the outcome (the last message), given to everyone
            last = conversation[-1]
            (outcome,) = await score(self.reward_functions, [{**common, "completion": last["content"] if turns else "",
                                                              "actor_name": last["name"] or ""}])
            return self.record(spec, turns, dict.fromkeys(range(len(self.participants)), outcome), started)
        inputs = []
        for seat in self.participants:
            mine = [m["content"] for m in conversation[1:] if m["name"] == seat.name]
            inputs.append({**common, "completion": mine[-1] if mine else "", "actor_name": seat.name})
        results = await score(self.reward_functions, inputs)
        return self.record(spec, turns, dict(enumerate(results)), started)
