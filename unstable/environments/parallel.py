"""k participants answer the same prompt independently, then a combiner merges their answers.

The combiner is either a function ``combiner(prompt, answers) -> str`` (sync or async; ``answers``
in seat order), or a :class:`~unstable.environments.base.Participant` (a model seat, the last one)
that sees the task and the numbered answers and writes the final one. The reward functions
(``@reward_function``: ``prompt``, ``completion``, row fields) score each answer:

* each answering participant gets the score of its own answer (``participant_reward="own"``, the
  default: a direct signal for each), or of the combined answer (``"combined"``: a team reward);
* a combiner seat gets the score of the combined answer.

``game_info[seat]["reward_components"]`` holds each seat's scores; the combined answer's are also
under ``game_info[seat]["combined_components"]``, so ``.../reward/<name>`` shows both sides.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from unstable.environments.base import Participant, participants_from
from unstable.environments.rewards import score
from unstable.environments.single_turn import TaskEnvironment
from unstable.policies.base import Policy
from unstable.records import GameRecord, GameSpec

PARTICIPANT_REWARDS = ("own", "combined")


class ParallelEnvironment(TaskEnvironment):
    """See the module docstring. ``participants``: a number k (k seats of ``model``) or Participant
    objects, names or mappings."""

    reward_functions_required = True

    def __init__(self, name: str, *, participants: int | Sequence[Participant | str | Mapping[str, Any]],
                 combiner: Callable[..., Any] | Participant, reward_functions: Sequence[Any], train_data: Any = None,
                 eval_data: Any = None, prompt_column: str | None = None, prompt_format: str | None = None,
                 participant_reward: str = "own", model: str | None = None, prompt_template: str = "qwen3-task",
                 action_extraction: str = "default", weight: float = 1.0, seed: int = 0):
        where = f"environment {name!r}"
        if isinstance(participants, int) and not isinstance(participants, bool):
            if participants < 2:
                raise ValueError(f"{where}: a parallel environment needs at least 2 participants, got {participants}")
            participants = [Participant(f"solver-{i}", model=model) for i in range(participants)]
        seats = participants_from(participants, where)
        if isinstance(combiner, Participant):
            seats = participants_from([*seats, combiner], where)
        elif not callable(combiner):
            raise ValueError(f"{where}: combiner must be a function (prompt, answers) -> str or a Participant, "
                             f"got {combiner!r}")
        if participant_reward not in PARTICIPANT_REWARDS:
            raise ValueError(f"{where}: participant_reward must be one of {PARTICIPANT_REWARDS}, "
                             f"got {participant_reward!r}")
        self.combiner, self.participant_reward = combiner, participant_reward
        super().__init__(name, reward_functions=reward_functions, participants=seats, train_data=train_data,
                         eval_data=eval_data, prompt_column=prompt_column, prompt_format=prompt_format,
                         prompt_template=prompt_template, action_extraction=action_extraction, weight=weight, seed=seed)

    @property
    def solvers(self) -> tuple[Participant, ...]:
        """The answering seats: every participant but the combiner seat (the last one), if there is one."""
        return self.participants[:-1] if isinstance(self.combiner, Participant) else self.participants

    def observation(self, seat: Participant, task: str) -> str:
        """What an answering ``seat`` sees: its system prompt (if any), then the task."""
        return f"{seat.system_prompt}\n\n{task}" if seat.system_prompt else task

    def combiner_observation(self, task: str, answers: Sequence[str]) -> str:
        """What the combiner seat sees: its system prompt (if any), the task, the numbered ``answers`` and the request
        to combine them."""
        numbered = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(answers))
        head = f"{self.combiner.system_prompt}\n\n" if self.combiner.system_prompt else ""
        return f"{head}Task: {task}\n\nAnswers:\n{numbered}\n\nCombine them into one final answer."

    async def play(self, spec: GameSpec, policies: Mapping[int, Policy]) -> GameRecord:
        """Ask every solver at once, combine their answers, score each answer and the combined one (see the module
        docstring) and return the :class:`~unstable.records.GameRecord`; ``TypeError`` when a combiner function
        returns something other than a string."""
        started = time.perf_counter()
        row = self.row(spec)
        task = self.prompt.render(row)
        k = len(self.solvers)
        turns = list(await asyncio.gather(*(self.ask(spec, policies[pid], pid, self.observation(seat, task), pid, ())
                                             for pid, seat in enumerate(self.solvers))))
        answers = [t.completion_text for t in turns]
        if isinstance(self.combiner, Participant):
            turn = await self.ask(spec, policies[k], k, self.combiner_observation(task, answers), k, turns)
            turns.append(turn)
            combined = turn.completion_text
        else:
            combined = self.combiner(task, list(answers))
            if inspect.isawaitable(combined):
                combined = await combined
            if not isinstance(combined, str):
                raise TypeError(f"the combiner of {self.name!r} returned {type(combined).__name__}, not a str")
        own, (together,) = await asyncio.gather(
            score(self.reward_functions, [{**row, "prompt": task, "completion": a} for a in answers]),
            score(self.reward_functions, [{**row, "prompt": task, "completion": combined}]))
        scores = {pid: (s if self.participant_reward == "own" else together) for pid, s in enumerate(own)}
        if isinstance(self.combiner, Participant):
            scores[k] = together
        record = self.record(spec, turns, scores, started)
        for pid in scores:
            record.game_info[pid]["combined_components"] = dict(together.components)
            record.game_info[pid]["combined_answer"] = combined
        return record
