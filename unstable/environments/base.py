"""What every environment shares: participants, train items and eval sets, playing a turn, mixtures.

An :class:`Environment` is played like a TextArena game, so everything downstream (buffers, reward
transforms, the registry, the tracker, transcripts) takes its episodes unchanged: the scheduler makes a
:class:`~unstable.records.GameSpec` whose ``environment`` names it and whose ``item`` is a row of its
data; each seat is a participant; :meth:`Environment.play` returns a
:class:`~unstable.records.GameRecord` with one :class:`~unstable.records.Turn` per model answer and
one final reward per seat (the weighted sum of its reward functions, whose parts are kept in
``game_info[seat]["reward_components"]`` and logged as ``.../reward/<name>``).

A participant is played by a trainable model (``model=``: its current checkpoint plays and learns;
``None``: the run's one model), or by a fixed policy (``policy=``: an API model name such as
``"openai/gpt-4o-mini"`` or a LoRA adapter directory), which plays and does not learn.

Environments combine with ``+`` (:class:`EnvironmentMixture`), TextArena specs included: the train
mixture draws each environment with probability proportional to its ``weight``, and every eval set
of every part is evaluated. An environment without train data is eval-only.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from unstable.games.extraction import get_action_extraction
from unstable.games.mixture import EnvironmentMixture
from unstable.games.templates import get_template
from unstable.inference.base import InferenceUnavailableError
from unstable.policies.base import Policy, PolicyError, PolicyOutput, TurnContext
from unstable.records import FailedGame, GameFailedError, GameSpec, PolicyRef, Turn
from unstable.utils.checks import check_number, check_str
from unstable.utils.secrets import redact

TRAIN_SPLIT = "train"


def game_failure(spec: GameSpec, stage: str, exc: BaseException, turns: Sequence[Turn],
                 policy: PolicyRef | None = None) -> GameFailedError:
    """The error that fails one game (counted by the collector), with its seed, stage and turns so far
    (and the policy whose turn failed, if one did)."""
    failure = FailedGame(
        spec=spec,
        stage=stage,  # type: ignore[arg-type]
        error_type=type(exc).__name__,
        message=redact(str(exc)),  # both end up in logs and transcripts: never with an API key in them
        traceback=redact("".join(traceback.format_exception(exc))),
        turns=tuple(turns),
        policy=policy,
    )
    return GameFailedError(failure)


async def ask_policy(policy: Policy, ctx: TurnContext, spec: GameSpec, turns: Sequence[Turn]) -> PolicyOutput:
    """``policy.act(ctx)`` with the turn loop's rules: a dead server drops the game (``inference``), a
    failing model or API fails it (``policy``), and anything else is a bug that propagates with a note."""
    try:
        return await policy.act(ctx)
    except InferenceUnavailableError as exc:
        raise game_failure(spec, "inference", exc, turns) from exc
    except PolicyError as exc:
        raise game_failure(spec, "policy", exc, turns, policy.ref) from exc
    except Exception as exc:
        exc.add_note(f"raised by the policy {policy.ref.uid!r} in seat {ctx.player_id}, turn {ctx.turn_index} of game "
                     f"{spec.game_id} ({spec.env_id}, seed {spec.seed}); a bug, not a failed game")
        raise


def make_turn(index: int, player_id: int, observation: str, out: PolicyOutput, policy: Policy,
              started: float) -> Turn:
    """The :class:`Turn` of one answer (environments have no invalid moves: a bad answer scores low)."""
    return Turn(turn_index=index, player_id=player_id, observation=observation, prompt=out.prompt,
                completion_text=out.completion_text, action=out.action, format_ok=out.format_ok, invalid=False,
                policy=policy.ref, sample=out.sample, gen_seconds=out.gen_seconds or (time.perf_counter() - started))


@dataclass(frozen=True)
class Participant:
    """One seat of an environment: its ``name`` (as the round spec and reward functions know it), who
    plays it (``model``: a trainable model's name, ``None`` for the run's one model; or ``policy``: a
    fixed API model name or adapter directory, which does not learn) and its ``system_prompt``."""

    name: str
    model: str | None = None
    policy: str | None = None
    system_prompt: str = ""

    def __post_init__(self) -> None:
        check_str("name", self.name, what="a participant name")
        check_str("model", self.model, allow_none=True, what="a trainable model's name")
        check_str("policy", self.policy, allow_none=True, what="an API model name or an adapter directory")
        if self.model is not None and self.policy is not None:
            raise ValueError(f"participant {self.name!r}: give model= (a trainable model) or policy= (a fixed "
                             "policy), not both")
        if not isinstance(self.system_prompt, str):
            raise ValueError(f"participant {self.name!r}: system_prompt must be a string, got {self.system_prompt!r}")

    @property
    def trains(self) -> bool:
        """Whether this seat learns: yes unless a fixed ``policy`` plays it."""
        return self.policy is None


def participants_from(items: Iterable[Participant | str | Mapping[str, Any]], where: str) -> tuple[Participant, ...]:
    """Participants from objects, names or mappings of their fields; names must be distinct."""
    out = []
    for item in items:
        if isinstance(item, str):
            item = Participant(item)
        elif isinstance(item, Mapping):
            item = Participant(**item)
        elif not isinstance(item, Participant):
            raise ValueError(f"{where}: participants must be Participant objects, names or mappings, got {item!r}")
        out.append(item)
    names = [p.name for p in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if not out or twice:
        raise ValueError(f"{where}: needs participants with distinct names, got {names}")
    return tuple(out)


class Environment:
    """Base class: a named environment the collector plays (see the module docstring).

    Subclasses set ``name``, ``weight``, ``participants``, ``prompt_template`` and
    ``action_extraction`` and implement :meth:`train_size`, :meth:`eval_sizes` and :meth:`play`.
    """

    is_environment = True  # how the env sampler (a lower layer) tells environments from TextArena specs
    name: str
    weight: float = 1.0
    participants: tuple[Participant, ...] = ()
    prompt_template: str = "qwen3-task"
    action_extraction: str = "default"
    seed: int = 0

    # ---- what the scheduler reads ---------------------------------------------------------
    @property
    def env_id(self) -> str:
        """The name metrics and transcripts use for the train episodes (eval sets: :meth:`eval_env_id`)."""
        return self.name

    def eval_env_id(self, eval_set: str) -> str:
        """The name metrics and transcripts use for the episodes of ``eval_set``: ``<name>-<eval_set>``."""
        return f"{self.name}-{eval_set}"

    @property
    def models(self) -> tuple[str, ...]:
        """The trainable models named by participants (empty: only the run's one model trains here)."""
        return tuple(dict.fromkeys(p.model for p in self.participants if p.trains and p.model is not None))

    @property
    def is_train(self) -> bool:
        """False for an eval-only environment (no train data)."""
        return self.train_size() > 0

    def train_size(self) -> int:
        """The number of train items (0: eval-only)."""
        raise NotImplementedError

    def eval_sizes(self) -> dict[str, int]:
        """Each eval set's name and number of items."""
        raise NotImplementedError

    def train_item(self, k: int) -> int:
        """The row of the ``k``-th train episode: every row once per epoch, in a shuffled order per epoch
        (the epoch's order is kept, so a train episode costs no shuffle of the whole dataset)."""
        size = self.train_size()
        epoch, position = divmod(k, size)
        cached = getattr(self, "_epoch_order", None)
        if cached is None or cached[0] != epoch:
            order = list(range(size))
            random.Random(f"unstable/{self.name}/{self.seed}/{epoch}").shuffle(order)
            cached = self._epoch_order = (epoch, order)
        return cached[1][position]

    def eval_seats(self) -> tuple[Participant, ...]:
        """The seats of an eval episode (default: the same as train)."""
        return self.participants

    # ---- playing --------------------------------------------------------------------------
    async def play(self, spec: GameSpec, policies: Mapping[int, Policy]) -> Any:
        """Play one episode of ``spec`` (seat ``i`` is ``participants[i]``) and return its GameRecord."""
        raise NotImplementedError

    def check(self, models: Sequence[str]) -> None:
        """At build time: every participant's model must be one of the run's trainable ``models``."""
        unknown = [p.model for p in self.participants if p.model is not None and p.model not in models]
        if unknown:
            raise ValueError(f"environment {self.name!r}: participants name the models {unknown}, which the run "
                             f"does not declare; models: {list(models)}")
        if len(models) > 1 and any(p.trains and p.model is None for p in self.participants):
            raise ValueError(f"environment {self.name!r}: the run trains {list(models)}; say which model plays "
                             "each participant (Participant(name, model=...))")

    def eval_entries(self) -> tuple[EvalSet, ...]:
        """One :class:`EvalSet` per eval set: what the env sampler's eval list holds."""
        return tuple(EvalSet(self, name, size) for name, size in self.eval_sizes().items())

    # ---- composition ----------------------------------------------------------------------
    def __add__(self, other: Any) -> EnvironmentMixture:
        return EnvironmentMixture.of(self, other)

    def __radd__(self, other: Any) -> EnvironmentMixture:
        return EnvironmentMixture.of(self) if other == 0 else EnvironmentMixture.of(other, self)  # sum() starts at 0


def check_key_part(what: str, value: Any) -> None:
    """``value`` becomes part of metric keys: a non-empty string of letters, digits, '_', '.' and '-'."""
    if not isinstance(value, str) or not value or not all(c.isalnum() or c in "_.-" for c in value):
        raise ValueError(f"{what} must be a non-empty string of letters, digits, '_', '.' and '-' (it is part of "
                         f"metric keys), got {value!r}")


def check_common(env: Environment) -> None:
    """The settings every environment checks when it is made."""
    check_key_part("an environment name", env.name)
    check_number("weight", env.weight, 0, low_open=True)
    get_template(env.prompt_template)
    get_action_extraction(env.action_extraction)


@dataclass(frozen=True)
class EvalSet:
    """One eval set of an environment, as the env sampler holds it next to ``EvalEnvSpec`` objects."""

    environment: Environment
    name: str
    size: int
    is_environment: ClassVar[bool] = True

    @property
    def env_id(self) -> str:
        """The name metrics and transcripts use for this set's episodes (:meth:`Environment.eval_env_id`)."""
        return self.environment.eval_env_id(self.name)
