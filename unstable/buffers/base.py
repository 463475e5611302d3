"""What both replay buffers share: trajectory -> Steps, counters, staleness, back-pressure, metrics.

Buffers are plain Python objects (the orchestration layer wraps them in Ray actors); every method
takes and returns simple picklable values.

Back-pressure: ``continue_collection()`` is True until ``stop()`` is called, and False after.
``is_full()`` says the buffer holds ``max_buffer_size`` Steps; the collector starts no new train
game while it does, so collection never runs far ahead of the learner. Steps that still arrive
(from games already in flight) are taken and random old ones evicted, as in UnstableBaselines
0.2; ``max_staleness`` bounds how old a sample may be.

Exactly once: ``trajectories_received`` counts every player trajectory handed in (the collector
counts what it sent; the two must agree). With ``dedupe=True`` (what ``unstable.build()`` uses:
game ids are unique within a run) a trajectory whose ``(game_id, player_id)`` was already received
is counted under ``duplicates`` and ignored, so a resent game is never trained on twice; the last
``DEDUPE_WINDOW`` keys are remembered.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from unstable.records import GameRecord, PlayerTrajectory, Step, Turn, player_trajectories
from unstable.reward_transformations.final_reward_transformations import load_transform_state, transform_state
from unstable.utils.calls import fire
from unstable.utils.checks import check_int, check_str

FinalFn = Callable[[float, int, str | None], float]
StepFn = Callable[[PlayerTrajectory, int, float], float]
SamplingFn = Callable[[list[Step]], list[Step]]
T = TypeVar("T")
DEDUPE_WINDOW = 1 << 16  # (game_id, player_id) keys remembered; a resend comes within seconds, not 65k games


class MetricsSink(Protocol):
    """Anything with ``log(dict)``: the tracker the buffer reports to."""

    def log(self, metrics: dict[str, Any]) -> Any:
        """Record ``metrics`` (name -> value); the buffer ignores what it returns."""
        ...


def _finite(value: float, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} returned a non-finite reward {value!r}")
    return value


def trajectory_to_steps(
    player_traj: PlayerTrajectory,
    final_transform: FinalFn | None = None,
    step_transform: StepFn | None = None,
    *,
    env_id: str | None = None,
    policy_version: int | None = None,
) -> list[Step]:
    """Flatten one player's trajectory into Steps, one per turn that has sampled tokens.

    The final transform runs once on ``player_traj.final_reward``; each turn then starts from its
    output and runs the step transform. Turns without tokens (scripted or API policies) cannot be
    trained on and are skipped; if no turn has tokens, no transform runs (so an RAE baseline only
    sees games that produce training data). Each Step holds its turn's ``Sample`` by reference.
    ``policy_version`` overrides the version the sample was generated with.
    """
    if env_id is not None and env_id != player_traj.env_id:
        raise ValueError(f"env_id {env_id!r} does not match the trajectory's env_id {player_traj.env_id!r}")
    env = player_traj.env_id
    trainable = [i for i, turn in enumerate(player_traj.turns) if turn.has_tokens]
    if not trainable:
        return []
    raw = float(player_traj.final_reward)
    final = raw
    if final_transform is not None:
        final = _finite(final_transform(raw, player_traj.player_id, env), "final reward transform")
    last = len(player_traj.turns) - 1
    steps = []
    for i in trainable:
        turn = player_traj.turns[i]
        reward = final
        if step_transform is not None:
            reward = _finite(step_transform(player_traj, i, final), "step reward transform")
        steps.append(
            Step(
                env_id=env,
                game_id=player_traj.game_id,
                player_id=player_traj.player_id,
                turn_index=i,
                sample=turn.sample,
                reward=reward,
                final_reward=raw,
                policy_version=_version(turn, policy_version),
                format_ok=turn.format_ok,
                invalid=turn.invalid,
                is_last=i == last,
                prompt=turn.prompt,
                completion=turn.completion_text,
                step_info={"raw_reward": raw, "final_after_transform": final, "step_reward": reward},
            )
        )
    return steps


def _version(turn: Turn, override: int | None) -> int | None:
    """The step's policy version: ``override``, else the sample's, else the seat's policy ref's."""
    if override is not None:
        return override
    if turn.sample is not None and turn.sample.policy_version is not None:
        return turn.sample.policy_version
    return turn.policy.version


def swap_pop(items: list[T], index: int) -> T:
    """Remove and return ``items[index]`` in O(1) by moving the last item into its place."""
    last = items.pop()
    if index == len(items):
        return last
    item = items[index]
    items[index] = last
    return item


class BufferBase:
    """Counters, transforms, staleness and back-pressure; subclasses store Steps or episodes."""

    def __init__(
        self,
        max_buffer_size: int,
        tracker: MetricsSink | None = None,
        final_reward_transformation: FinalFn | None = None,
        step_reward_transformation: StepFn | None = None,
        sampling_reward_transformation: SamplingFn | None = None,
        max_staleness: int | None = None,
        seed: int | None = None,
        dedupe: bool = False,
        lineage: str | None = None,
    ):
        check_int("max_buffer_size", max_buffer_size, 1)
        check_str("lineage", lineage, allow_none=True, what="a trainable model's name")
        check_int("max_staleness", max_staleness, 0, allow_none=True)
        check_int("seed", seed, -(2**63), allow_none=True)
        if tracker is not None and not callable(getattr(tracker, "log", None)):  # an actor handle's too
            raise ValueError(f"tracker must have a log(dict) method, got {tracker!r}")
        for name, fn in [
            ("final_reward_transformation", final_reward_transformation),
            ("step_reward_transformation", step_reward_transformation),
            ("sampling_reward_transformation", sampling_reward_transformation),
        ]:
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} must be callable or None, got {fn!r}")
        self.max_buffer_size = max_buffer_size
        self.tracker = tracker
        self.final_reward_transformation = final_reward_transformation
        self.step_reward_transformation = step_reward_transformation
        self.sampling_reward_transformation = sampling_reward_transformation
        self.max_staleness = max_staleness
        self.learner_version: int | None = None
        self._rng = random.Random(seed)
        self._collecting = True
        self._counts = {"added": 0, "evicted": 0, "dropped_stale": 0, "handed_out": 0, "cleared": 0}
        self.dedupe = bool(dedupe)
        self.lineage = lineage
        self._trajectories = {"trajectories_received": 0, "duplicates": 0}
        self._seen: set[tuple[int, int]] = set()
        self._seen_order: deque[tuple[int, int]] = deque()
        self._init_storage()

    # ---- subclass interface -------------------------------------------------------------------
    def _init_storage(self) -> None:
        raise NotImplementedError

    def size(self) -> int:
        """Number of Steps held."""
        raise NotImplementedError

    def _purge_stale(self) -> None:
        raise NotImplementedError

    # ---- shared behaviour ---------------------------------------------------------------------
    def _receive(self, player_traj: PlayerTrajectory) -> bool:
        """Count a trajectory handed in; False if it is a duplicate to ignore (``dedupe=True`` only)."""
        self._trajectories["trajectories_received"] += 1
        if not self.dedupe:
            return True
        key = (player_traj.game_id, player_traj.player_id)
        if key in self._seen:
            self._trajectories["duplicates"] += 1
            return False
        self._seen.add(key)
        self._seen_order.append(key)
        if len(self._seen_order) > DEDUPE_WINDOW:
            self._seen.discard(self._seen_order.popleft())
        return True

    def _build_steps(
        self, player_traj: PlayerTrajectory, env_id: str | None, policy_version: int | None
    ) -> list[Step]:
        steps = trajectory_to_steps(
            player_traj,
            self.final_reward_transformation,
            self.step_reward_transformation,
            env_id=env_id,
            policy_version=policy_version,
        )
        self._counts["added"] += len(steps)
        return steps

    def add_player_trajectory(
        self, player_traj: PlayerTrajectory, env_id: str | None = None, policy_version: int | None = None
    ) -> int:
        """Transform and store one player's trajectory; returns the number of Steps it produced."""
        raise NotImplementedError

    def add_game(self, record: GameRecord, policy_version: int | None = None) -> int:
        """Add every seat of ``record`` marked ``collect_data`` (of this buffer's ``lineage`` only, when
        it has one: the buffer of one of several trainable models); returns the number of Steps produced."""
        return sum(
            self.add_player_trajectory(traj, policy_version=policy_version)
            for traj in player_trajectories(record, lineage=self.lineage)
        )

    def add_games(self, records: list[GameRecord], policy_version: int | None = None) -> int:
        """:meth:`add_game` for each record, in order: one call (one Ray round trip) for a batch of
        finished games; returns the number of Steps produced."""
        return sum(self.add_game(record, policy_version) for record in records)

    def is_stale(self, step: Step) -> bool:
        """True when ``step.policy_version < learner_version - max_staleness``.

        Steps with no policy version (not produced by a learner checkpoint) are never stale.
        """
        if self.max_staleness is None or self.learner_version is None or step.policy_version is None:
            return False
        return step.policy_version < self.learner_version - self.max_staleness

    def set_learner_version(self, version: int) -> None:
        """Called by the learner after each update; drops Steps that became too old."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"learner version must be an int >= 0, got {version!r}")
        if self.learner_version is not None and version < self.learner_version:
            raise ValueError(f"learner version went backwards: {self.learner_version} -> {version}")
        self.learner_version = version
        self._purge_stale()

    def continue_collection(self) -> bool:
        """Back-pressure for the collector: True until :meth:`stop` is called (a full buffer evicts)."""
        return self._collecting

    def is_full(self) -> bool:
        """True while the buffer holds ``max_buffer_size`` Steps or more (the collector pauses)."""
        return self.size() >= self.max_buffer_size

    def room(self) -> int:
        """Steps the buffer takes before it is full (0 when full)."""
        return max(0, self.max_buffer_size - self.size())

    def collection_state(self) -> tuple[bool, bool]:
        """``(continue_collection(), is_full())`` in one call, which is what the collector polls."""
        return self.continue_collection(), self.is_full()

    def stop(self) -> None:
        """Tell the collector to stop launching games."""
        self._collecting = False

    def stats(self) -> dict[str, int]:
        """Size and lifetime counters, in Steps, plus ``trajectories_received`` and ``duplicates``.

        ``added = size + evicted + dropped_stale + handed_out + cleared`` always holds.
        """
        return {"size": self.size(), **self._counts, **self._trajectories}

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run takes over (JSON-able): the final reward transform's state (the RAE
        baselines). ``steps`` is the number of Steps held now, which a resume does not restore (they
        come from older policy versions): it reports them as dropped."""
        return {"format": 1, "final_reward_transformation": transform_state(self.final_reward_transformation),
                "steps": self.size()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the final reward transform's state of a resumed run (``ValueError`` if the saved
        state is another transform's); the buffer itself starts empty."""
        if state.get("format") != 1:
            raise ValueError(f"unknown buffer state format {state.get('format')!r}")
        load_transform_state(self.final_reward_transformation, state["final_reward_transformation"])

    def _sample_transform(self, steps: list[Step]) -> list[Step]:
        if self.sampling_reward_transformation is None:
            return steps
        out = list(self.sampling_reward_transformation(steps))
        if len(out) != len(steps):
            raise ValueError(
                f"sampling reward transform returned {len(out)} Steps for {len(steps)}; "
                "sampling transforms must return one Step per input Step"
            )
        return out

    def _log(self) -> None:
        if self.tracker is not None:
            prefix = f"{self.lineage}/buffer/" if self.lineage else "buffer/"
            fire(self.tracker, "log", {f"{prefix}{key}": value for key, value in self.stats().items()})


def check_batch_size(batch_size: Any) -> int:
    """Return ``batch_size`` if it is an int >= 1; ``ValueError`` naming ``batch_size`` otherwise."""
    check_int("batch_size", batch_size, 1)
    return batch_size
