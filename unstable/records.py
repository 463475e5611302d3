"""Typed, immutable records passed between the stages: game spec -> turns -> game record.

Everything a learner needs is recorded at the moment it happens (the exact prompt string, the
token ids the model saw and sampled, the behaviour log-probs, which policy version produced
them), so nothing downstream has to re-tokenise text or guess which checkpoint played.

A sampled completion is one :class:`Sample`, made once by the inference backend and passed on by
reference: the policy's output, the :class:`Turn` and the :class:`Step` all hold the same object.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from itertools import pairwise
from typing import Any, Literal

PolicyKind = Literal["checkpoint", "scripted", "api"]
Outcome = Literal["win", "draw", "loss"]
AVERAGE_ADAPTER = "average"
"""NFSP's average policy: the subfolder of a checkpoint that holds it (:mod:`unstable.learners.average`)."""


def checkpoint_uid(version: int, lineage: str | None = None) -> str:
    """The registry uid of a lineage's checkpoint: ``base`` / ``ckpt-N`` for ``lineage=None`` (a
    one-model run, the seed's names), ``alice-base`` / ``alice-ckpt-N`` for ``lineage="alice"``."""
    name = "base" if version == 0 else f"ckpt-{version}"
    return name if lineage is None else f"{lineage}-{name}"


@dataclass(frozen=True, slots=True)
class PolicyRef:
    """Who played a seat: enough to find the same policy again and to rate it.

    ``uid`` is the registry name (``"ckpt-3"``, ``"base"``, ``"random"``, ``"fixed-gpt-4o"``);
    ``adapter_path`` is the LoRA directory a checkpoint was served from (``None`` = base weights);
    ``version`` is the learner step that produced the adapter (0 for the base model, ``None`` for
    policies that are not learner checkpoints); ``lineage`` is the trainable model the checkpoint
    belongs to (``None`` for fixed policies): its seats' data goes to that model's learner.
    ``average_of``: the uid of the checkpoint whose NFSP average policy plays the seat (its
    ``average/`` adapter, see :func:`average_policy_ref`); ``None`` for every other policy.
    """

    uid: str
    kind: PolicyKind = "checkpoint"
    adapter_path: str | None = None
    version: int | None = None
    lineage: str | None = None
    average_of: str | None = None


def average_policy_ref(checkpoint: PolicyRef) -> PolicyRef:
    """The seat of ``checkpoint``'s NFSP average policy: uid ``<checkpoint uid>/average``, the adapter in the
    checkpoint's ``average/`` subfolder (the base model's average is the base model: the average starts as
    a copy of the starting policy), the checkpoint's version and lineage."""
    if checkpoint.kind != "checkpoint" or checkpoint.average_of is not None:
        raise ValueError(f"only a learner checkpoint has an average policy, not {checkpoint.uid!r}")
    path = checkpoint.adapter_path
    return PolicyRef(uid=f"{checkpoint.uid}/{AVERAGE_ADAPTER}", kind="checkpoint",
                     adapter_path=None if path is None else os.path.join(path, AVERAGE_ADAPTER),
                     version=checkpoint.version, lineage=checkpoint.lineage, average_of=checkpoint.uid)


@dataclass(frozen=True, slots=True)
class Sample:
    """One completion as the inference backend sampled it: the tokens, their log-probs, and how.

    ``prompt_ids`` + ``completion_ids`` are exactly the tokens the model conditioned on and
    sampled (an end-of-sequence token that stopped it is included). ``completion_logprobs[i]`` is
    log mu(completion_ids[i] | prefix) under the distribution the token was drawn from: the model's
    logits divided by ``temperature``, renormalised over the ``top_p`` nucleus (both backends report
    this: transformers' processed ``scores``, vLLM's ``processed_logprobs``). These are the
    behaviour log-probs an importance ratio needs. With ``top_p == 1`` they equal a fresh forward
    pass of the same weights at the same temperature, which is what the learners compute; greedy
    samples (``temperature == 0``) carry the raw model's log-probs (temperature 1). ``finish_reason`` is ``"stop"``
    (an end-of-sequence token was sampled) or ``"length"`` (the token budget ran out).
    ``policy_version`` is the learner step of the weights that sampled it (``PolicyRef.version``
    of the requesting policy; ``None`` if the request did not say). ``text`` is the completion
    decoded without special tokens. ``allowed``, for a completion drawn from a fixed list of answers
    (:attr:`~unstable.inference.base.GenerationRequest.choices`, the legal moves), holds the token ids
    each completion token was drawn among: its log-prob is then the model's softmax renormalised over
    them (1 where only one was allowed); empty when the completion was free.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_logprobs: tuple[float, ...]
    finish_reason: Literal["stop", "length"]
    temperature: float
    top_p: float
    policy_version: int | None = None
    text: str = ""
    allowed: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if len(self.completion_logprobs) != len(self.completion_ids):
            raise ValueError(
                f"{len(self.completion_logprobs)} log-probs for {len(self.completion_ids)} completion tokens"
            )
        if self.allowed and len(self.allowed) != len(self.completion_ids):
            raise ValueError(f"{len(self.allowed)} allowed-token sets for {len(self.completion_ids)} completion tokens")
        if self.finish_reason not in ("stop", "length"):
            raise ValueError(f"finish_reason must be 'stop' or 'length', got {self.finish_reason!r}")


class _SampleTokens:
    """Read-only token properties of a record with a ``sample``; empty when it has none."""

    __slots__ = ()
    sample: Sample | None

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return self.sample.prompt_ids if self.sample is not None else ()

    @property
    def completion_ids(self) -> tuple[int, ...]:
        return self.sample.completion_ids if self.sample is not None else ()

    @property
    def completion_logprobs(self) -> tuple[float, ...]:
        return self.sample.completion_logprobs if self.sample is not None else ()

    @property
    def finish_reason(self) -> str:
        """The sample's; ``"stop"`` for a turn without one (a scripted or API move is complete)."""
        return self.sample.finish_reason if self.sample is not None else "stop"

    @property
    def has_tokens(self) -> bool:
        return len(self.completion_ids) > 0


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One seat of a game as the scheduler decided it (declarative; the collector resolves it)."""

    player_id: int
    policy: PolicyRef
    collect_data: bool = False
    prompt_template: str = "default"
    action_extraction: str = "default"


@dataclass(frozen=True, slots=True)
class GameSpec:
    """Everything needed to play one game reproducibly."""

    game_id: int
    env_id: str
    seed: int
    agents: tuple[AgentSpec, ...]
    is_eval: bool = False
    error_allowance: int = 0
    eval_player_id: int | None = None  # the seat being evaluated, for eval games
    max_turns: int | None = None  # optional safety cap on turns; hitting it is a failed game
    environment: str | None = None  # the Environment that plays it (its name); None: a TextArena game
    item: int | None = None  # the row of the environment's data the episode is about
    split: str | None = None  # "train" or the eval set the row comes from
    is_matrix: bool = False  # a meta-game game (PSRO): no seat collected, only rated (unstable.samplers.psro)

    @property
    def num_players(self) -> int:
        """Number of seats: the length of ``agents``."""
        return len(self.agents)

    def agent(self, player_id: int) -> AgentSpec:
        """The :class:`AgentSpec` of seat ``player_id``; ``KeyError`` if the game has no such seat."""
        for agent in self.agents:
            if agent.player_id == player_id:
                return agent
        raise KeyError(f"game {self.game_id} has no seat {player_id}")


@dataclass(frozen=True, slots=True)
class Turn(_SampleTokens):
    """One decision by one seat.

    ``sample`` is the model's completion exactly as the backend returned it (see :class:`Sample`
    for what its log-probs are); scripted and API policies have none, and their token properties
    are empty. ``prompt`` and ``completion_text`` are set for every policy.
    """

    turn_index: int
    player_id: int
    observation: str
    prompt: str
    completion_text: str
    action: str
    format_ok: bool
    invalid: bool
    policy: PolicyRef
    sample: Sample | None = None
    invalid_reason: str | None = None
    gen_seconds: float = 0.0
    env_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class GameRecord:
    """A finished game. ``final_rewards`` are TextArena's own rewards, untransformed."""

    spec: GameSpec
    turns: tuple[Turn, ...]
    final_rewards: dict[int, float]
    game_info: dict[int, dict[str, Any]]
    wall_seconds: float = 0.0

    @property
    def game_id(self) -> int:
        """The game's id, from its :class:`GameSpec`."""
        return self.spec.game_id

    @property
    def env_id(self) -> str:
        """The environment the game was played in, from its :class:`GameSpec`."""
        return self.spec.env_id

    @property
    def seed(self) -> int:
        """The seed the game was played with, from its :class:`GameSpec`."""
        return self.spec.seed

    @property
    def num_turns(self) -> int:
        """Turns taken by all seats together."""
        return len(self.turns)

    def outcome(self, player_id: int) -> Outcome:
        """Win/draw/loss for a seat: above, equal to, or below the best other seat's reward."""
        mine = self.final_rewards[player_id]
        others = [r for pid, r in self.final_rewards.items() if pid != player_id]
        if not others:
            return "win" if mine > 0 else ("draw" if mine == 0 else "loss")
        best_other = max(others)
        if mine > best_other:
            return "win"
        if mine == best_other:
            return "draw"
        return "loss"

    @property
    def outcomes(self) -> dict[int, Outcome]:
        """Each seat's :meth:`outcome`, by player id."""
        return {pid: self.outcome(pid) for pid in self.final_rewards}

    def turns_of(self, player_id: int) -> tuple[Turn, ...]:
        """Seat ``player_id``'s turns, in the order they were played."""
        return tuple(t for t in self.turns if t.player_id == player_id)

    @property
    def seats(self) -> dict[int, PolicyRef]:
        """The policy that played each seat, by player id."""
        return {a.player_id: a.policy for a in self.spec.agents}

    @property
    def invalid_player(self) -> int | None:
        """The seat whose invalid move ended the game, if one did."""
        for pid, info in self.game_info.items():
            if info.get("invalid_move"):
                return pid
        return None


@dataclass(frozen=True, slots=True)
class FailedGame:
    """A game that could not be finished: kept, counted and logged with its seed, never retried blindly.

    ``stage="inference"``: the inference actor serving it died or was restarting; the collector
    counts such a game as *dropped* rather than failed. ``policy``: the seat's policy whose turn
    failed (``stage="policy"``); ``None`` when the game itself failed.
    """

    spec: GameSpec
    stage: Literal["make", "reset", "policy", "env", "limit", "inference"]
    error_type: str
    message: str
    traceback: str = ""
    turns: tuple[Turn, ...] = field(default=())
    policy: PolicyRef | None = None

    @property
    def seed(self) -> int:
        """The seed of the failed game, to replay it with."""
        return self.spec.seed

    @property
    def policy_uid(self) -> str | None:
        """The uid of the policy whose turn failed, as the logs and transcripts write it."""
        return self.policy.uid if self.policy is not None else None

    def describe(self) -> str:
        """One line for logs and errors: the game, its seed, the stage it failed in, its turns and the error."""
        whose = f" (a turn of {self.policy.uid!r})" if self.policy is not None else ""
        return (
            f"game {self.spec.game_id} ({self.spec.env_id}, seed {self.spec.seed}) failed in "
            f"{self.stage}{whose} after {len(self.turns)} turns: {self.error_type}: {self.message}"
        )


class GameFailedError(RuntimeError):
    """Raised by the turn loop; carries the :class:`FailedGame` record."""

    def __init__(self, failure: FailedGame):
        super().__init__(failure.describe())
        self.failure = failure

    def __reduce__(self) -> tuple:  # pickled across Ray: rebuilt from the record (the default passes the message)
        return type(self), (self.failure,)


@dataclass(frozen=True, slots=True)
class PlayerTrajectory:
    """One seat's view of a finished game: its turns in order and its raw final reward."""

    game_id: int
    env_id: str
    seed: int
    player_id: int
    turns: tuple[Turn, ...]
    final_reward: float
    outcome: Outcome
    num_players: int
    game_length: int  # turns taken by all seats together

    @property
    def num_turns(self) -> int:
        """Turns this seat took (``game_length`` counts every seat's)."""
        return len(self.turns)


def player_trajectories(record: GameRecord, *, collected_only: bool = True,
                        lineage: str | None = None) -> list[PlayerTrajectory]:
    """Split a game into per-seat trajectories (by default only seats marked ``collect_data``;
    with ``lineage``, only the seats whose policy belongs to that trainable model)."""
    out = []
    for agent in record.spec.agents:
        if collected_only and not agent.collect_data:
            continue
        if lineage is not None and agent.policy.lineage != lineage:
            continue
        pid = agent.player_id
        out.append(
            PlayerTrajectory(
                game_id=record.game_id,
                env_id=record.env_id,
                seed=record.seed,
                player_id=pid,
                turns=record.turns_of(pid),
                final_reward=float(record.final_rewards[pid]),
                outcome=record.outcome(pid),
                num_players=record.spec.num_players,
                game_length=record.num_turns,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Step(_SampleTokens):
    """One turn as the learner sees it: the sampled tokens and the shaped learning signal.

    ``sample`` is the turn's :class:`Sample` (the same object, not a copy); the token properties
    read it. ``reward`` is what the learner multiplies the log-prob by (after the final, step and
    sampling reward transforms); ``final_reward`` is the raw game reward, kept for logging.
    ``policy_version`` is the version staleness is measured against: the sample's, unless the
    buffer was told otherwise.
    """

    env_id: str
    game_id: int
    player_id: int
    turn_index: int  # position among this player's turns in the game
    sample: Sample | None
    reward: float
    final_reward: float
    policy_version: int | None
    format_ok: bool
    invalid: bool
    is_last: bool  # last turn of this player in the game
    prompt: str = ""
    completion: str = ""
    step_info: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TrainBatch:
    """What a buffer hands a learner: Steps, and which of them form whole player episodes.

    ``episodes`` holds, per player episode, the indices of its Steps in ``steps`` in turn order
    (an :class:`~unstable.buffers.EpisodeBuffer` batch: ``(0, 1), (2, 3, 4), ...``); it is empty for
    loose Steps (a :class:`~unstable.buffers.StepBuffer` batch). When given, the episodes cover every
    Step once, and each is one ``(env_id, game_id, player_id)`` with gap-free turns ending at
    ``is_last``, so a return-based learner (GAE) can trust them without regrouping.
    Iterating a batch yields its Steps; ``len(batch)`` is their number.
    """

    steps: tuple[Step, ...]
    episodes: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "episodes", tuple(tuple(idx) for idx in self.episodes))
        if not self.episodes:
            return
        covered = sorted(i for idx in self.episodes for i in idx)
        if covered != list(range(len(self.steps))):
            raise ValueError(f"TrainBatch.episodes must index each of the {len(self.steps)} steps exactly once")
        for idx in self.episodes:
            _check_whole_episode(self.steps, idx)

    @classmethod
    def from_steps(cls, steps: Sequence[Step], *, group_episodes: bool = False) -> TrainBatch:
        """A batch of ``steps`` in their order; ``group_episodes=True`` also finds their episodes
        (see :func:`episode_indices`), raising ``ValueError`` unless they are whole."""
        steps = tuple(steps)
        episodes = episode_indices(steps) if group_episodes else []
        return cls(steps, tuple(tuple(idx) for idx in episodes))

    @classmethod
    def from_episodes(cls, episodes: Sequence[Sequence[Step]]) -> TrainBatch:
        """A batch of whole episodes, each a sequence of one player's Steps in turn order."""
        steps: list[Step] = []
        bounds = []
        for episode in episodes:
            bounds.append(tuple(range(len(steps), len(steps) + len(episode))))
            steps.extend(episode)
        return cls(tuple(steps), tuple(bounds))

    def by_episode(self) -> list[tuple[Step, ...]]:
        """The Steps of each episode, in turn order (empty for a batch of loose Steps)."""
        return [tuple(self.steps[i] for i in idx) for idx in self.episodes]

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)


def episode_indices(steps: Sequence[Step]) -> list[list[int]]:
    """Indices of ``steps`` grouped per player episode, ordered by ``turn_index``.

    Raises ``ValueError`` unless each group is a gap-free run of turns ending at ``is_last``
    (GAE needs ``V(s_{t+1})`` of the very next turn).
    """
    groups: dict[tuple[str, int, int], list[int]] = {}
    for i, step in enumerate(steps):
        groups.setdefault((step.env_id, step.game_id, step.player_id), []).append(i)
    episodes = []
    for idx in groups.values():
        idx.sort(key=lambda i: steps[i].turn_index)
        _check_whole_episode(steps, idx)
        episodes.append(idx)
    return episodes


def _check_whole_episode(steps: Sequence[Step], idx: Sequence[int]) -> None:
    if not idx:
        raise ValueError("TrainBatch.episodes holds an empty episode")
    first = steps[idx[0]]
    key = (first.env_id, first.game_id, first.player_id)
    turns = [steps[i].turn_index for i in idx]
    same_player = all((steps[i].env_id, steps[i].game_id, steps[i].player_id) == key for i in idx)
    gap_free = all(b - a == 1 for a, b in pairwise(turns))
    if not (same_player and gap_free and steps[idx[-1]].is_last):
        raise ValueError(
            f"return-based learners (A2C) need whole player episodes, but (env, game, player) {key} has "
            f"turns {turns} (last is_last={steps[idx[-1]].is_last}{'' if same_player else ', mixed players'}); "
            "feed them from an EpisodeBuffer"
        )


# ----------------------------------------------------------------------------- pickling
# The records of a game cross Ray several times (collector -> buffer, scheduler, tracker). A slotted
# dataclass pickles through dataclasses' __getstate__/__setstate__, which look up the fields on every
# object; these keep each class's field names once and restore the fields as they were (no
# __post_init__: the values were checked when the record was made). About 3x faster to pickle and
# 2x faster to unpickle a batch of TicTacToe games.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_FIELD_VALUES: dict[type, Callable[[Any], tuple]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:  # once per class (a subclass gets its own, with its extra fields)
        names = tuple(f.name for f in fields(cls))
        getter = operator.attrgetter(*names)
        _FIELD_VALUES[cls] = getter if len(names) > 1 else lambda obj: (getter(obj),)
        _FIELD_NAMES[cls] = names
    return names


def _restore(cls: type, values: tuple) -> Any:
    """Unpickle a record: a new ``cls`` with its fields set to ``values``."""
    obj = object.__new__(cls)
    for name, value in zip(_field_names(cls), values, strict=True):
        object.__setattr__(obj, name, value)
    return obj


def _reduce_by_fields(self: Any) -> tuple:
    cls = type(self)
    _field_names(cls)
    return _restore, (cls, _FIELD_VALUES[cls](self))


for _record in (PolicyRef, Sample, AgentSpec, GameSpec, Turn, GameRecord, FailedGame):
    _record.__reduce__ = _reduce_by_fields  # type: ignore[method-assign]
