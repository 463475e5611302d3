"""``GameScheduler``: turns the env sampler's and model sampler's choices into concrete ``GameSpec`` jobs.

* **Train jobs.** A ``TrainEnvSpec`` from the env sampler; seats shuffled with the scheduler's own
  ``random.Random(seed)``; ``num_actors`` seats play the current checkpoint and are collected, the
  others get ``model_sampler.sample_opponent()`` (one draw per seat, not collected). All seats use
  the spec's prompt template and action extraction. ``num_actors == num_players`` is mirror self-play.
  A spec with ``seats`` (several trainable models) names each seat's model: its lineage's current
  checkpoint plays it and it is collected for that lineage; ``"opponent"`` seats are drawn for the
  first model named. Specs whose models are all ``paused`` (the collector's back-pressure, per
  learner) are not drawn.
* **Eval jobs.** An ``EvalEnvSpec``; the checkpoint's seat goes round-robin per env (seat
  ``k % num_players`` for the env's k-th eval game), so it plays every seat equally often; the other
  seats play ``fixed_opponent`` (see :func:`~unstable.registry.fixed_policy_ref`). Nothing is collected.
  The checkpoint is the current one of the spec's ``model``, or, for ``model=None``, of each lineage
  in turn (after every seat has had its game). For a lineage in ``eval_average`` (its learner trains NFSP's
  average policy, ``average_reservoir``) the seat is that checkpoint's average policy
  (:func:`~unstable.records.average_policy_ref`): NFSP reports and evaluates the average, not the RL policy.
  (An environment's eval episodes seat the current checkpoint.)
* **Matrix games.** A model sampler with ``next_matrix_game`` (PSRO's,
  :class:`~unstable.samplers.psro.PSROModelSampler`, alone or as the ``base`` a wrapper draws from) is asked
  before each train game; the game it names (two uids and the row's seat) is played in a two-player
  train spec (cycling through them: its game, template and extraction) with no seat collected and
  ``is_matrix=True``: the collector sends it to no buffer, the registry rates it, and the sampler
  hears it came back (``matrix_game_done``). It takes a train seed.
* **Seeds.** Train games get seeds 0, 1, 2, ... and eval games ``2**31``, ``2**31 + 1``, ...: unique,
  and an eval game never replays a train game's deal (the seed reused the train index for eval).
  ``game_id`` is one counter over both kinds.
* **Batches.** :meth:`next_train_jobs`, :meth:`next_eval_jobs` and :meth:`update_many` do the same as
  the single-game methods for several games in one call (one Ray round trip when the scheduler is an
  actor). A batch of jobs reads each answer of the registry once (:class:`~unstable.utils.calls.CachedReads`:
  the current checkpoints, the fixed opponents), and a batch of results goes to
  ``model_registry.record_games`` in one call; subclasses that override the single-game methods are
  still called once per game.
* **Results.** :meth:`update` takes a ``GameRecord`` or a ``FailedGame``, drops it from the running set,
  keeps average rewards per (kind, env, opponent) of the checkpoint's seats and of the opponents',
  sends train averages to ``env_sampler.update`` and every finished game to
  ``model_registry.record_game``: the registry is the one writer of ratings and match counts, the
  samplers only read it. Failed games are counted (and appended to
  ``<logging_dir>/failed_games.jsonl`` when a ``logging_dir`` is given, up to its size cap: see
  :class:`~unstable.tracking.run_dir.CappedJsonlWriter`), never rated or retried;
  games dropped because their inference actor died (``stage="inference"``) are counted apart.
  Errors propagate: nothing here sleeps or swallows exceptions.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from unstable.environments.base import TRAIN_SPLIT, Environment, EvalSet, Participant
from unstable.games.specs import OPPONENT_SEAT
from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef, average_policy_ref
from unstable.registry.model_registry import fixed_policy_ref
from unstable.samplers.model_samplers import sample_opponent_for
from unstable.tracking.run_dir import FAILED_GAMES_FILE, FAILED_GAMES_MAX_BYTES, CappedJsonlWriter
from unstable.utils.calls import CachedReads, call, has_method

EVAL_SEED_OFFSET = 2**31
# what the samplers and the scheduler read from the registry while drawing jobs (answers kept for one batch)
REGISTRY_READS = frozenset({"lineages", "get_current_ckpt", "policy_ref", "checkpoint_uids", "fixed_uids",
                            "ratings", "match_quality", "match_qualities", "match_results",
                            "get_name_or_lora_path"})
MIRROR = "self"  # the opponent label of a game with no opponent seats


class GameScheduler:
    """See the module docstring. ``seed`` seeds seat shuffling only. ``model_registry`` (a
    ``ModelRegistry`` or its actor handle) gets the finished games; by default it is the one the
    model sampler reads (``model_sampler.model_registry``). ``eval_average``: the lineages (``None`` for
    a run's one model) whose eval games seat the current checkpoint's NFSP average policy."""

    def __init__(self, model_sampler: Any, env_sampler: Any, logging_dir: str | None = None, seed: int = 0,
                 model_registry: Any = None, eval_average: tuple[str | None, ...] = ()):
        if model_sampler is None or env_sampler is None:
            raise ValueError("GameScheduler needs a model_sampler and an env_sampler")
        if model_registry is None:
            model_registry = getattr(model_sampler, "model_registry", None)
        if model_registry is None:
            raise ValueError("GameScheduler needs the ModelRegistry that rates the games: pass model_registry=..., "
                             "or a model sampler built on one (model_sampler.model_registry)")
        self.model_sampler, self.env_sampler, self.logging_dir = model_sampler, env_sampler, logging_dir
        self.model_registry = model_registry
        self.eval_average = frozenset(eval_average)
        self._rng = random.Random(seed)
        self._next_game_id = 0
        self._train_idx = 0
        self._eval_idx = 0
        self._eval_seat: dict[str, int] = {}  # env_id -> eval games scheduled so far
        self._env_train: dict[str, int] = {}  # environment name -> train episodes scheduled so far
        self._running: dict[int, GameSpec] = {}
        self._totals: dict[str, dict[str, dict[str, list[float]]]] = {"train": {}, "eval": {}}
        self._finished = 0
        self._failed: dict[str, int] = {}
        self._dropped = 0
        self._failure_log: CappedJsonlWriter | None = None
        self._held_records: list[GameRecord] | None = None  # update_many: the registry's games, sent once
        self._metagame = _matrix_source(model_sampler)  # PSRO's sampler, when it fills a meta-game
        self._matrix_games = 0

    # ----------------------------------------------------------------- jobs
    def has_eval(self) -> bool:
        """Whether the env sampler has anything to evaluate (eval specs or eval sets)."""
        return bool(self.env_sampler.has_eval())

    def _new_id(self) -> int:
        game_id = self._next_game_id
        self._next_game_id += 1
        return game_id

    def next_train_job(self, paused: tuple[str | None, ...] = ()) -> GameSpec | None:
        """The next train game; ``None`` when every spec's models are in ``paused`` (lineage names;
        ``None`` in it stands for the one model of specs without ``seats``)."""
        matrix = self._matrix_job()
        if matrix is not None:
            return matrix
        if paused:
            spec = self.env_sampler.sample("train", where=lambda s: any(m not in paused for m in s.models or (None,)))
            if spec is None:
                return None
        else:
            spec = self.env_sampler.sample("train")
        if isinstance(spec, Environment):
            return self._environment_train_job(spec)
        if spec.seats is not None:
            return self._seated_train_job(spec)
        current = self.model_sampler.get_current_ckpt()
        pids = list(range(spec.num_players))
        self._rng.shuffle(pids)
        actors = set(pids[: spec.num_actors])
        agents = []
        for pid in range(spec.num_players):
            policy = current if pid in actors else self.model_sampler.sample_opponent()
            agents.append(AgentSpec(player_id=pid, policy=policy, collect_data=pid in actors,
                                    prompt_template=spec.prompt_template, action_extraction=spec.action_extraction_fn))
        return self._train_job(spec, agents)

    def next_train_jobs(self, n: int, paused: tuple[str | None, ...] = ()) -> list[GameSpec]:
        """Up to ``n`` train games (:meth:`next_train_job` ``n`` times; fewer once it returns ``None``),
        drawn against one snapshot of the registry."""
        return self._draw(n, lambda: self.next_train_job(paused) if paused else self.next_train_job())

    def next_eval_jobs(self, n: int) -> list[GameSpec]:
        """Up to ``n`` eval games (:meth:`next_eval_job` ``n`` times; none without eval envs)."""
        return self._draw(n, self.next_eval_job)

    def _draw(self, n: int, next_job: Any) -> list[GameSpec]:
        """``next_job()`` up to ``n`` times against one snapshot of the registry, stopping at ``None``."""
        _check_count(n)
        jobs: list[GameSpec] = []
        with self._registry_snapshot():
            while len(jobs) < n and (job := next_job()) is not None:
                jobs.append(job)
        return jobs

    @contextmanager
    def _registry_snapshot(self) -> Iterator[None]:
        """For the duration of a batch, the scheduler and its model sampler read the registry through
        one :class:`CachedReads` (one round trip per distinct question, not per game)."""
        holders = [h for h in (self, self.model_sampler) if getattr(h, "model_registry", None) is not None]
        originals = [h.model_registry for h in holders]
        caches: dict[int, CachedReads] = {}
        for holder, registry in zip(holders, originals, strict=True):
            holder.model_registry = caches.setdefault(id(registry), CachedReads(registry, REGISTRY_READS))
        try:
            yield
        finally:
            for holder, registry in zip(holders, originals, strict=True):
                holder.model_registry = registry

    def _matrix_job(self) -> GameSpec | None:
        """The next game the model sampler's meta-game lacks, or ``None``."""
        game = self._metagame.next_matrix_game() if self._metagame is not None else None
        if game is None:
            return None
        specs = [s for s in self.env_sampler.train_env_specs if not isinstance(s, Environment) and s.num_players == 2]
        if not specs:
            raise ValueError("PSRO's meta-game games need a two-player train env (a TrainEnvSpec with num_players=2); "
                             "add one to train_envs or choose another opponent strategy")
        spec = specs[self._matrix_games % len(specs)]
        self._matrix_games += 1
        seats = {game.row_seat: game.row, 1 - game.row_seat: game.col}
        agents = [AgentSpec(player_id=pid, policy=call(self.model_registry, "policy_ref", seats[pid]),
                            collect_data=False, prompt_template=spec.prompt_template,
                            action_extraction=spec.action_extraction_fn) for pid in (0, 1)]
        return self._train_job(spec, agents, is_matrix=True)

    def _seated_train_job(self, spec: Any) -> GameSpec:
        """A game of a spec with ``seats``: each named seat its model's current checkpoint (collected)."""
        seats = list(spec.seats)
        self._rng.shuffle(seats)
        learner_of_opponents = spec.models[0]
        agents = []
        for pid, name in enumerate(seats):
            if name == OPPONENT_SEAT:
                policy, collect = sample_opponent_for(self.model_sampler, learner_of_opponents), False
            else:
                policy, collect = self.model_sampler.get_current_ckpt(name), True
            agents.append(AgentSpec(player_id=pid, policy=policy, collect_data=collect,
                                    prompt_template=spec.prompt_template, action_extraction=spec.action_extraction_fn))
        return self._train_job(spec, agents)

    def _seat(self, env: Environment, seat: Participant, *, collect: bool) -> AgentSpec:
        """An environment's participant: its fixed policy, or its model's current checkpoint."""
        if seat.policy is not None:
            policy, collect = fixed_policy_ref(seat.policy), False
        else:
            policy = self.model_sampler.get_current_ckpt(*((seat.model,) if seat.model is not None else ()))
        return AgentSpec(player_id=0, policy=policy, collect_data=collect, prompt_template=env.prompt_template,
                         action_extraction=env.action_extraction)

    def _environment_train_job(self, env: Environment) -> GameSpec:
        """An episode of an environment: seat ``i`` is ``participants[i]``, on the next row of its train data."""
        count = self._env_train.get(env.name, 0)
        self._env_train[env.name] = count + 1
        agents = [replace(self._seat(env, seat, collect=True), player_id=pid)
                  for pid, seat in enumerate(env.participants)]
        job = GameSpec(game_id=self._new_id(), env_id=env.env_id, seed=self._train_idx, agents=tuple(agents),
                       environment=env.name, item=env.train_item(count), split=TRAIN_SPLIT)
        self._train_idx += 1
        self._running[job.game_id] = job
        return job

    def _environment_eval_job(self, entry: EvalSet) -> GameSpec:
        """An eval episode: the eval set's rows in order, cycling; seat 0 is the one evaluated."""
        count = self._eval_seat.get(entry.env_id, 0)
        self._eval_seat[entry.env_id] = count + 1
        env = entry.environment
        agents = tuple(replace(self._seat(env, seat, collect=False), player_id=pid)
                       for pid, seat in enumerate(env.eval_seats()))
        job = GameSpec(game_id=self._new_id(), env_id=entry.env_id, seed=EVAL_SEED_OFFSET + self._eval_idx,
                       agents=agents, is_eval=True, eval_player_id=0, environment=env.name,
                       item=count % entry.size, split=entry.name)
        self._eval_idx += 1
        self._running[job.game_id] = job
        return job

    def _train_job(self, spec: Any, agents: list[AgentSpec], is_matrix: bool = False) -> GameSpec:
        job = GameSpec(game_id=self._new_id(), env_id=spec.env_id, seed=self._train_idx, agents=tuple(agents),
                       error_allowance=spec.error_allowance, is_matrix=is_matrix)
        self._train_idx += 1
        self._running[job.game_id] = job
        return job

    def next_eval_job(self) -> GameSpec | None:
        """An eval game, or ``None`` when no eval envs are configured."""
        if not self.has_eval():
            return None
        spec = self.env_sampler.sample("eval")
        if isinstance(spec, EvalSet):
            return self._environment_eval_job(spec)
        count = self._eval_seat.get(spec.env_id, 0)
        self._eval_seat[spec.env_id] = count + 1
        seat = count % spec.num_players
        lineage = spec.model
        if lineage is None:
            lineages = call(self.model_registry, "lineages")
            lineage = lineages[(count // spec.num_players) % len(lineages)] if len(lineages) > 1 else None
        current = self.model_sampler.get_current_ckpt(lineage) if lineage is not None else \
            self.model_sampler.get_current_ckpt()
        if lineage in self.eval_average:  # NFSP: the average policy is the one evaluated
            current = average_policy_ref(current)
        opponent = fixed_policy_ref(spec.fixed_opponent) if spec.num_players > 1 else None  # single-player: none
        agents = tuple(
            AgentSpec(player_id=pid, policy=current if pid == seat else opponent, collect_data=False,
                      prompt_template=spec.prompt_template, action_extraction=spec.action_extraction_fn)
            for pid in range(spec.num_players)
        )
        job = GameSpec(game_id=self._new_id(), env_id=spec.env_id, seed=EVAL_SEED_OFFSET + self._eval_idx,
                       agents=agents, is_eval=True, error_allowance=spec.error_allowance, eval_player_id=seat)
        self._eval_idx += 1
        self._running[job.game_id] = job
        return job

    # ----------------------------------------------------------------- results
    def update(self, result: GameRecord | FailedGame) -> None:
        """Take a finished or failed game that this scheduler handed out.

        A finished game adds to the reward totals, updates the env sampler (train games) and goes to the model
        registry without its turns; a failed one is counted per env and appended to ``failed_games.jsonl`` in
        ``logging_dir``; one whose inference actor died (``stage="inference"``) is counted as dropped.
        ``TypeError`` for another type; ``KeyError`` if the game is not running here.
        """
        if not isinstance(result, GameRecord | FailedGame):
            raise TypeError(f"update() takes a GameRecord or FailedGame, got {type(result).__name__}")
        spec = result.spec
        if self._running.pop(spec.game_id, None) is None:
            raise KeyError(f"game {spec.game_id} ({spec.env_id}) is not running here; was it scheduled elsewhere?")
        if spec.is_matrix and self._metagame is not None:
            self._metagame.matrix_game_done()
        if isinstance(result, FailedGame) and result.stage == "inference":
            self._dropped += 1  # its inference actor died: not a failure of the game
            return
        if isinstance(result, FailedGame):
            self._failed[spec.env_id] = self._failed.get(spec.env_id, 0) + 1
            self._log_failure(result)
            return
        self._finished += 1
        if spec.is_matrix:  # rated only: no seat of it is the learner's
            self._rate(replace(result, turns=()))
            return
        mine, theirs, label = _split_seats(result)
        actor_avg = sum(mine) / len(mine)
        opponent_avg = sum(theirs) / len(theirs) if theirs else None
        kind = "eval" if spec.is_eval else "train"
        cell = self._totals[kind].setdefault(spec.env_id, {}).setdefault(label, [0.0, 0.0, 0.0, 0.0])
        cell[0] += 1
        cell[1] += actor_avg
        if opponent_avg is not None:
            cell[2] += 1
            cell[3] += opponent_avg
        if not spec.is_eval:
            self.env_sampler.update(spec.env_id, actor_avg, opponent_avg)
        # the turns are dropped: the registry needs only the seats and rewards, and turns are large to ship
        self._rate(replace(result, turns=()))

    def _rate(self, record: GameRecord) -> None:
        """Send a finished game to the registry (with the batch, in :meth:`update_many`)."""
        if self._held_records is not None:  # in update_many: sent with the batch
            self._held_records.append(record)
        else:
            call(self.model_registry, "record_game", record)

    def update_many(self, results: list[GameRecord | FailedGame]) -> None:
        """:meth:`update` for each result, in order, and the rated games to the registry in one call
        (``record_games``; one ``record_game`` call each for a registry without it). On an error the
        games before it still reach the registry."""
        if self._held_records is not None:
            raise RuntimeError("update_many() was called from inside update_many()")
        self._held_records = []
        try:
            for result in results:
                self.update(result)
        finally:
            records, self._held_records = self._held_records, None
            if records and has_method(self.model_registry, "record_games"):
                call(self.model_registry, "record_games", records)
            else:
                for record in records:
                    call(self.model_registry, "record_game", record)

    def _log_failure(self, failed: FailedGame) -> None:
        if not self.logging_dir:
            return
        if self._failure_log is None:
            os.makedirs(self.logging_dir, exist_ok=True)
            self._failure_log = CappedJsonlWriter(os.path.join(self.logging_dir, FAILED_GAMES_FILE),
                                                  FAILED_GAMES_MAX_BYTES)
        self._failure_log.write({"game_id": failed.spec.game_id, "env_id": failed.spec.env_id,
                                 "seed": failed.spec.seed, "is_eval": failed.spec.is_eval, "stage": failed.stage,
                                 "error_type": failed.error_type, "message": failed.message,
                                 "turns": len(failed.turns),
                                 "policy": failed.policy_uid})

    # ----------------------------------------------------------------- introspection
    def running(self) -> int:
        """Number of games handed out and not yet reported back through :meth:`update`."""
        return len(self._running)

    def stats(self) -> dict[str, Any]:
        """Games finished/failed/running and, per kind/env/opponent, the average rewards."""
        rewards: dict[str, Any] = {}
        for kind, envs in self._totals.items():
            for env_id, by_opp in envs.items():
                for label, (n, actor_sum, n_opp, opp_sum) in by_opp.items():
                    rewards.setdefault(kind, {}).setdefault(env_id, {})[label] = {
                        "games": int(n), "avg_actor_reward": actor_sum / n,
                        "avg_opponent_reward": opp_sum / n_opp if n_opp else None}
        return {"games_finished": self._finished, "games_failed": sum(self._failed.values()),
                "failed_by_env": dict(self._failed), "games_dropped": self._dropped, "running": self.running(),
                "train_jobs": self._train_idx, "eval_jobs": self._eval_idx, "matrix_jobs": self._matrix_games,
                "rewards": rewards}

    def _rngs(self) -> dict[str, random.Random]:
        """The scheduler's RNG and the samplers' ``rng`` (when they keep one), saved for resuming."""
        rngs = {"scheduler": self._rng}
        for name, sampler in (("env_sampler", self.env_sampler), ("model_sampler", self.model_sampler)):
            if isinstance(getattr(sampler, "rng", None), random.Random):
                rngs[name] = sampler.rng
        return rngs

    def state_dict(self) -> dict[str, Any]:
        """Counters, RNG states and reward totals (JSON-able) for resuming; running games are not kept."""
        rng_states = {}
        for name, rng in self._rngs().items():
            version, internal, gauss = rng.getstate()
            rng_states[name] = [version, list(internal), gauss]
        return {"next_game_id": self._next_game_id, "train_idx": self._train_idx, "eval_idx": self._eval_idx,
                "eval_seat": dict(self._eval_seat), "env_train": dict(self._env_train), "rng_states": rng_states,
                "totals": json.loads(json.dumps(self._totals)), "finished": self._finished,
                "failed": dict(self._failed), "dropped": self._dropped, "matrix_games": self._matrix_games,
                "samplers": self._sampler_states()}

    def _samplers(self) -> dict[str, Any]:
        """The samplers that keep state of their own (a curriculum's windows, a mixture): ``state_dict``."""
        return {name: sampler for name, sampler in (("env_sampler", self.env_sampler),
                                                    ("model_sampler", self.model_sampler))
                if has_method(sampler, "state_dict") and has_method(sampler, "load_state_dict")}

    def _sampler_states(self) -> dict[str, Any]:
        return {name: json.loads(json.dumps(sampler.state_dict())) for name, sampler in self._samplers().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s snapshot: counters, RNG states and reward totals; no game is running."""
        self._next_game_id, self._train_idx = state["next_game_id"], state["train_idx"]
        self._eval_idx, self._eval_seat = state["eval_idx"], dict(state["eval_seat"])
        self._env_train = dict(state.get("env_train", {}))
        rngs = self._rngs()
        for name, (version, internal, gauss) in state["rng_states"].items():
            if name in rngs:
                rngs[name].setstate((version, tuple(internal), gauss))
        self._totals = json.loads(json.dumps(state["totals"]))
        self._finished, self._failed = state["finished"], dict(state["failed"])
        self._dropped = int(state.get("dropped", 0))
        self._matrix_games = int(state.get("matrix_games", 0))
        samplers = self._samplers()
        for name, sampler_state in state.get("samplers", {}).items():
            if name in samplers:
                samplers[name].load_state_dict(sampler_state)
        self._running = {}


def _matrix_source(model_sampler: Any) -> Any:
    """The sampler that fills a meta-game (has ``next_matrix_game``): ``model_sampler`` or the sampler it
    wraps, its ``base`` (a curriculum mix's, a league's), however deep."""
    sampler, seen = model_sampler, set()
    while sampler is not None and id(sampler) not in seen:
        if has_method(sampler, "next_matrix_game"):
            return sampler
        seen.add(id(sampler))
        sampler = getattr(sampler, "base", None)
    return None


def _check_count(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the number of jobs must be an int >= 0, got {n!r}")


def _split_seats(record: GameRecord) -> tuple[list[float], list[float], str]:
    """Rewards of the checkpoint's seats, of the opponents' seats, and the opponent label.

    Train: the collected seats are the checkpoint's. Eval: the ``eval_player_id`` seat. The label is
    the opponents' uids (sorted, ``+``-joined), or ``"self"`` when every seat is the checkpoint's.
    """
    spec = record.spec
    if spec.is_eval:
        is_mine = {a.player_id: a.player_id == spec.eval_player_id for a in spec.agents}
    else:
        is_mine = {a.player_id: a.collect_data for a in spec.agents}
    mine = [float(record.final_rewards[pid]) for pid, m in is_mine.items() if m]
    theirs = [float(record.final_rewards[pid]) for pid, m in is_mine.items() if not m]
    opponents: list[PolicyRef] = [a.policy for a in spec.agents if not is_mine[a.player_id]]
    label = "+".join(sorted({p.uid for p in opponents})) or MIRROR
    return mine, theirs, label
