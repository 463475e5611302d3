"""The Collector: keeps many train and eval games in flight and routes their results.

Games are coroutines run by this object's event loop (TextArena steps cost microseconds; model
calls are awaited on inference actors, where requests from all games are batched). Finished train
games go to the buffer; every finished game goes to the scheduler (which has the registry rate it)
and the tracker. A failed game is counted and logged with its seed and error and replaced by a
new one; it is never retried. Failures are tolerated up to a :class:`FailureBudget` (per kind,
train and eval): once it is spent, :meth:`collect` raises :class:`FailureBudgetSpentError` from the
first failure's exception. A bug (an error of a template, an extraction or a scripted policy that
is not a :class:`~unstable.policies.base.PolicyError`) raises out of :meth:`collect` at once.

Faults. Inference actors run with Ray's ``max_restarts``: when one dies, its in-flight games fail
with ``stage="inference"`` and are counted as ``dropped`` (never as failed, never sent to the
buffer, never retried); no new game goes to it until it answers again. If every actor is dead for
good (restarts used up), or none has answered for ``unavailable_timeout_s``, :meth:`collect` raises,
and so does any error of the buffer or scheduler: the run stops with the cause instead of waiting.
``trajectories_sent`` counts the player trajectories handed to ``buffer.add_games`` (the buffer
counts what it received; the two must agree).

Batches. Finished games go out in batches (see :mod:`unstable.collection.outbox`): train games to the
buffer(s) (``add_games``), every result to the scheduler (``update_many``, which rates them in the
registry in one call) and to the tracker (``log_games``), once ``flush_games`` games are held or
the oldest has waited ``flush_interval_s``, and always when collection stops, also on an error
(nothing finished is lost). A batch's calls run while the next games are played. New games are
asked for several at a time (``next_train_jobs``). A collaborator without the batched method is
called once per game.

A meta-game game (``spec.is_matrix``: PSRO fills its payoff matrix, see
:mod:`unstable.samplers.psro`) takes a train slot but goes to no buffer: only to the scheduler and
the tracker.

Back-pressure: no new *train* game starts while the buffer is full (``buffer.is_full()``), so
collection never runs far ahead of the learner; eval games keep going. ``buffer.stop()`` (sent by
the learner when it is done) or :meth:`stop` ends collection. The buffers' state
(``collection_state``, one call for both) is asked in the background every ``state_refresh_s``, so
the collector reacts to it within that time and a round trip.

Sync mode (``turn_lock``, what ``build(mode="sync")`` passes): collecting and training alternate.
The collector takes the learners' :class:`~unstable.utils.turn_lock.TurnLock` (``try_acquire``, polled)
before it starts a game, starts train and eval games until every buffer is full, waits for the last
game in flight to finish, and only then releases the lock to the learner, which takes its batch,
updates and publishes the new version before releasing it. So no game runs during an update, and
every game of a round is played by the version the learner trains next. With one buffer, it starts
no more train games than the batch needs: none while the games in flight are expected to fill the
buffer's ``room()`` (at the mean number of steps per game sent so far), since the steps of games
that finish after it is full are evicted unused.

The collaborators may be plain objects or Ray actor handles (see ``unstable.utils.calls``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from unstable.collection.failures import FailureBudget, FailureCounter
from unstable.collection.outbox import Outbox
from unstable.collection.rollout import play_game
from unstable.games.extraction import register_action_extraction
from unstable.games.templates import register_template
from unstable.inference.base import InferenceDeadError, InferenceUnavailableError, SamplingParams
from unstable.policies.api import APIOpponentConfig
from unstable.policies.base import Policy
from unstable.policies.llm import LLMPolicy
from unstable.records import FailedGame, GameFailedError, GameRecord, GameSpec
from unstable.utils.calls import acall, fire, has_method

log = logging.getLogger(__name__)


class Collector:
    """See the module docstring.

    ``backends`` are the inference backends games are routed to: local objects, or clients of
    inference actors that raise :class:`~unstable.inference.base.InferenceUnavailableError` when
    their actor is gone (the wiring, :mod:`unstable.run`, starts them; the seed's
    ``unstable.Collector(vllm_config=...)`` does so from a ``vllm_config``). ``sampling`` is what
    model seats sample with. ``prompt_templates`` and ``action_extractions`` (name -> template or
    function) are registered in this process first: the user's registrations, when the collector
    runs in a Ray actor.

    ``buffers`` maps each trainable model (its lineage) to its buffer; ``buffer=b`` is the one-model
    shorthand for ``buffers={None: b}`` (``build()`` always passes ``buffers``). A finished train game goes
    to the buffer of each lineage that has a collected seat in it, which keeps only that lineage's seats; a
    lineage whose buffer is full or stopped is *paused* (the scheduler draws no game that only it would
    learn from). ``backend_groups`` maps a lineage to the indices of the backends serving its base model
    (models that share a base share its engines; a seat is served by its own lineage's group, fixed adapters
    by the first group), and ``samplings`` gives a lineage its own sampling settings.

    ``api_opponents`` (an :class:`~unstable.policies.api.APIOpponentConfig`) sets the timeout and
    retries of the seats played over an API.

    ``flush_games`` and ``flush_interval_s`` bound how long a finished game is held back before it
    is sent (see the module docstring; ``flush_games=1`` sends each game at once), and
    ``state_refresh_s`` how old the buffers' full/stopped state may be.
    """

    def __init__(self, tracker: Any = None, buffer: Any = None, game_scheduler: Any = None, *,
                 backends: list[Any], sampling: SamplingParams | None = None, stats_every_s: float = 10.0,
                 unavailable_timeout_s: float = 900.0, probe_interval_s: float = 1.0,
                 failure_budget: FailureBudget | None = None, prompt_templates: dict[str, Any] | None = None,
                 action_extractions: dict[str, Any] | None = None, buffers: dict[str, Any] | None = None,
                 backend_groups: dict[str, list[int]] | None = None,
                 samplings: dict[str, SamplingParams] | None = None, environments: dict[str, Any] | None = None,
                 api_opponents: APIOpponentConfig | None = None, turn_lock: Any = None, flush_games: int = 32,
                 flush_interval_s: float = 0.2, state_refresh_s: float = 0.05):
        if game_scheduler is None or (buffer is None) == (not buffers):
            raise ValueError("Collector needs a game_scheduler and either one buffer or buffers={model: buffer}")
        # registrations made in the user's process (custom_templates()): a Ray actor starts without them
        for name, template in (prompt_templates or {}).items():
            register_template(name, template.render, description=template.description, overwrite=True)
        for name, extraction in (action_extractions or {}).items():
            register_action_extraction(name, extraction, overwrite=True)
        if not backends:
            raise ValueError("Collector needs at least one inference backend")
        self.tracker, self.buffer, self.scheduler = tracker, buffer, game_scheduler
        self.environments = dict(environments or {})
        self.buffers: dict[str | None, Any] = {None: buffer} if buffer is not None else dict(buffers)
        self.sampling = sampling or SamplingParams()
        self.samplings = dict(samplings or {})
        self.backends = list(backends)
        groups = {k: list(v) for k, v in (backend_groups or {}).items()}
        bad = sorted({i for idx in groups.values() for i in idx if not 0 <= i < len(self.backends)} |
                     {k for k, idx in groups.items() if not idx}, key=str)
        if bad:
            raise ValueError(f"backend_groups must map each model to a non-empty list of backend indices "
                             f"below {len(self.backends)}; bad: {bad}")
        self.backend_groups = groups
        self._next_backend = 0
        self._healthy = [True] * len(backends)
        self._dead: set[int] = set()
        self._probes: dict[int, asyncio.Task] = {}
        self._none_healthy_since: float | None = None
        self._stop = False
        self._counts = {"train_started": 0, "train_finished": 0, "eval_started": 0, "eval_finished": 0,
                        "failed": 0, "dropped": 0, "cancelled": 0, "trajectories_sent": 0, "paused_checks": 0,
                        "inference_unavailable": 0, "inference_recovered": 0, "inference_dead": 0}
        if buffer is None:  # per model, so a test (or a user) can check that no data went astray
            self._counts |= {f"trajectories_sent/{name}": 0 for name in self.buffers}
        self.stats_every_s = stats_every_s
        self.unavailable_timeout_s = unavailable_timeout_s
        self.probe_interval_s = probe_interval_s
        self.failure_budget = failure_budget or FailureBudget()
        self.api_opponents = api_opponents or APIOpponentConfig()
        self._failures = {kind: FailureCounter(self.failure_budget, kind) for kind in ("train", "eval")}
        self.turn_lock = turn_lock  # sync mode: games run only while the collector holds it
        self._holding = False
        if turn_lock is not None:
            self._counts["sync_rounds"] = 0
        if isinstance(flush_games, bool) or not isinstance(flush_games, int) or flush_games < 1:
            raise ValueError(f"flush_games must be an int >= 1 (1 sends each finished game at once), "
                             f"got {flush_games!r}")
        for name, value in (("flush_interval_s", flush_interval_s), ("state_refresh_s", state_refresh_s)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
        self.state_refresh_s = state_refresh_s
        # sync mode sends each finished game at once and waits for it: a round's end is the buffer filling
        self._outbox = Outbox(self.buffers, game_scheduler, tracker, self._counts,
                              flush_games=1 if turn_lock is not None else flush_games,
                              flush_interval_s=flush_interval_s)
        self._state: tuple[tuple[str | None, ...], bool] = ((), False)
        self._state_at: float | None = None  # when the buffers' state was last asked (None: never)
        self._refresh: asyncio.Task | None = None  # the buffers' state being asked in the background

    # ----------------------------------------------------------------- inference health
    def _pick_backend(self, among: list[int] | None = None) -> int | None:
        """The next healthy backend (of ``among``, default all), round-robin; ``None`` while none is."""
        n = len(self.backends)
        for k in range(n):
            idx = (self._next_backend + k) % n
            if self._healthy[idx] and (among is None or idx in among):
                self._next_backend = idx + 1
                return idx
        return None

    def _group(self, lineage: str | None) -> list[int] | None:
        """The backends that serve ``lineage``'s base model (``None``: any backend)."""
        if not self.backend_groups:
            return None
        if lineage in self.backend_groups:
            return self.backend_groups[lineage]
        return next(iter(self.backend_groups.values()))  # a fixed adapter: the first model's base

    def _mark_unavailable(self, idx: int | None) -> None:
        """A game on backend ``idx`` was dropped: send it nothing until a probe gets an answer."""
        if idx is None or idx in self._dead or not self._healthy[idx]:
            return
        self._healthy[idx] = False
        self._counts["inference_unavailable"] += 1
        log.warning("inference actor %s is unavailable (died or restarting); routing around it",
                    getattr(self.backends[idx], "name", idx))
        if getattr(self.backends[idx], "ready", None) is None:  # a local backend cannot restart: retry it now
            self._healthy[idx] = True
            return
        self._probes[idx] = asyncio.create_task(self._probe(idx))

    async def _probe(self, idx: int) -> None:
        backend = self.backends[idx]
        try:
            while not self._stop:
                try:
                    await acall(backend, "ready")
                except InferenceDeadError as exc:  # restarts used up: dead for good
                    self._dead.add(idx)
                    self._counts["inference_dead"] += 1
                    log.error("inference actor %s is dead for good: %s", getattr(backend, "name", idx), exc)
                    return
                except InferenceUnavailableError:  # restarting (reloading the model) or its node is gone
                    await asyncio.sleep(self.probe_interval_s)
                    continue
                self._healthy[idx] = True
                self._counts["inference_recovered"] += 1
                log.warning("inference actor %s answers again", getattr(backend, "name", idx))
                return
        finally:
            self._probes.pop(idx, None)

    def _check_inference(self) -> bool:
        """True if every group of backends has a healthy one; raises once there is no hope or no
        answer for too long."""
        groups = list(self.backend_groups.values()) or [list(range(len(self.backends)))]
        if all(any(self._healthy[i] for i in group) for group in groups):
            self._none_healthy_since = None
            return True
        if len(self._dead) == len(self.backends):
            raise RuntimeError(f"all {len(self.backends)} inference actors died and used up their restarts; "
                               "see the Ray logs of the inference-* actors for the cause")
        now = time.monotonic()
        if self._none_healthy_since is None:
            self._none_healthy_since = now
        elif now - self._none_healthy_since > self.unavailable_timeout_s:
            raise RuntimeError(f"no inference actor answered for {self.unavailable_timeout_s:.0f} s "
                               "(restarting, or no node has room for them)")
        return False

    # ----------------------------------------------------------------- policies
    def _backends_for(self, spec: GameSpec) -> list[int]:
        """One healthy backend per base model the game's model seats need (empty if it has none)."""
        chosen: dict[tuple[int, ...] | None, int] = {}
        for agent in spec.agents:
            if agent.policy.kind != "checkpoint":
                continue
            group = self._group(agent.policy.lineage)
            key = tuple(group) if group is not None else None
            if key not in chosen:
                idx = self._pick_backend(group)
                if idx is None:
                    raise InferenceUnavailableError(f"no healthy inference actor serves {agent.policy.uid!r}")
                chosen[key] = idx
        return list(chosen.values())

    def _policies(self, spec: GameSpec, indices: list[int]) -> dict[int, Policy]:
        """The seats' policies; model seats are served by ``indices`` (from :meth:`_backends_for`)."""
        from unstable.policies.scripted import make_scripted_policy

        policies: dict[int, Policy] = {}
        for agent in spec.agents:
            ref = agent.policy
            if ref.kind == "checkpoint":
                group = self._group(ref.lineage)
                idx = next((i for i in indices if group is None or i in group), indices[0])
                sampling = self.samplings.get(ref.lineage, self.sampling)
                policies[agent.player_id] = LLMPolicy(self.backends[idx], ref, prompt_template=agent.prompt_template,
                                                      action_extraction=agent.action_extraction, sampling=sampling)
            elif ref.kind == "scripted":
                policies[agent.player_id] = make_scripted_policy(_fixed_name(ref.uid), spec.env_id)
            else:
                from unstable.policies.api import APIPolicy

                policies[agent.player_id] = APIPolicy(_fixed_name(ref.uid), uid=ref.uid,
                                                      action_extraction=agent.action_extraction,
                                                      **self.api_opponents.policy_kwargs())
        return policies

    async def _run(self, spec: GameSpec, backends: list[int]) -> tuple[GameRecord | GameFailedError, list[int]]:
        """Play one game on ``backends``; a failed one comes back as its error (which keeps the cause
        for the budget), a bug raises."""
        try:
            if spec.environment is not None:
                return await self._environment(spec).play(spec, self._policies(spec, backends)), backends
            return await play_game(spec, self._policies(spec, backends)), backends
        except GameFailedError as err:
            return err, backends

    def _environment(self, spec: GameSpec) -> Any:
        try:
            return self.environments[spec.environment]
        except KeyError:
            raise RuntimeError(f"game {spec.game_id} is an episode of the environment {spec.environment!r}, which "
                               f"this collector was not given (environments: {sorted(self.environments)})") from None

    async def _paused(self) -> tuple[tuple[str | None, ...], bool]:
        """The models whose buffers are full or stopped, and whether every buffer is stopped. Asked
        once before the first games, then in the background every ``state_refresh_s``: the answer
        may be that old (and a round trip). In sync mode it is asked each time."""
        if self.turn_lock is not None:  # sync mode: a round ends when the buffers fill, so ask each time
            self._state = await self._ask_buffers()
            return self._state
        if self._refresh is not None and self._refresh.done():
            task, self._refresh = self._refresh, None
            self._state = task.result()  # raises a buffer's error
        if self._state_at is None:
            self._state_at = time.monotonic()
            self._state = await self._ask_buffers()
        elif self._refresh is None and time.monotonic() - self._state_at >= self.state_refresh_s:
            self._state_at = time.monotonic()
            self._refresh = asyncio.create_task(self._ask_buffers())
        return self._state

    async def _ask_buffers(self) -> tuple[tuple[str | None, ...], bool]:
        paused, stopped = [], 0
        for name, buffer in self.buffers.items():
            if has_method(buffer, "collection_state"):
                collecting, full = await acall(buffer, "collection_state")
            else:
                collecting = await acall(buffer, "continue_collection")
                full = collecting and await acall(buffer, "is_full")
            if not collecting:
                paused.append(name)
                stopped += 1
            elif full:
                paused.append(name)
        return tuple(paused), stopped == len(self.buffers)

    async def _train_jobs(self, n: int, paused: tuple[str | None, ...]) -> list[GameSpec]:
        """Up to ``n`` train specs from the scheduler (fewer once every spec's models are paused)."""
        return await self._jobs("next_train_job", n, *((paused,) if paused else ()))

    async def _eval_jobs(self, n: int) -> list[GameSpec]:
        """Up to ``n`` eval specs from the scheduler (none without eval envs)."""
        return await self._jobs("next_eval_job", n)

    async def _jobs(self, method: str, n: int, *args: Any) -> list[GameSpec]:
        """Up to ``n`` specs from the scheduler's ``method``: in one call of its batched form
        (``<method>s``) when it has one, else one call each until it answers ``None``."""
        if has_method(self.scheduler, f"{method}s"):
            return await acall(self.scheduler, f"{method}s", n, *args)
        specs = []
        while len(specs) < n and (spec := await acall(self.scheduler, method, *args)) is not None:
            specs.append(spec)
        return specs

    # ----------------------------------------------------------------- main loop
    async def collect(self, num_train_workers: int, num_eval_workers: int | None = 0) -> dict[str, int]:
        """Keep ``num_train_workers`` train and ``num_eval_workers`` eval games running until stopped."""
        num_eval_workers = num_eval_workers or 0
        if num_train_workers < 0 or num_eval_workers < 0:
            raise ValueError("worker counts must be >= 0")
        if num_eval_workers and not await acall(self.scheduler, "has_eval"):
            log.info("no eval envs configured: running no eval games")
            num_eval_workers = 0
        train: set[asyncio.Task] = set()
        evals: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()
        last_stats = loop.time()
        try:
            while not self._stop:
                paused, all_stopped = await self._paused()
                if all_stopped:
                    break
                full = len(paused) == len(self.buffers)
                self._counts["paused_checks"] += bool(full)
                serving = self._check_inference()
                if self.turn_lock is not None:
                    serving = serving and await self._sync_turn(full, len(train) + len(evals))
                if serving and not full and len(train) < num_train_workers:
                    wanted = await self._games_wanted(num_train_workers - len(train), len(train))
                    for spec in await self._train_jobs(wanted, paused) if wanted else []:
                        train.add(asyncio.create_task(self._run(spec, self._backends_for(spec))))
                        self._counts["train_started"] += 1
                if serving and len(evals) < num_eval_workers:
                    for spec in await self._eval_jobs(num_eval_workers - len(evals)):
                        evals.add(asyncio.create_task(self._run(spec, self._backends_for(spec))))
                        self._counts["eval_started"] += 1
                if self._outbox.due():  # after asking for games: the scheduler answers that first
                    await (self._outbox.close() if self.turn_lock is not None else self._outbox.flush())
                if not train and not evals:
                    await self._outbox.close()  # nothing to wait for: send what is held, see it arrive
                    await asyncio.sleep(0.05)  # paused and idle: wait for the learner to drain the buffer
                    continue
                done, _ = await asyncio.wait(train | evals, timeout=self._outbox.wait_s(0.5),
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    is_train = task in train
                    (train if is_train else evals).discard(task)
                    result, used = task.result()
                    self._handle(result, is_train, used)
                if self.turn_lock is not None:  # sync mode: the buffer's fill decides the round, so send now
                    await self._outbox.close()
                if loop.time() - last_stats > self.stats_every_s:
                    last_stats = loop.time()
                    await self._report()
        except BaseException:  # an error, a spent budget, a cancel: the games that finished still go out
            await self._stop_games(train, evals)
            try:
                await self._outbox.close()
            except Exception as exc:  # the error that stopped collection is the one to raise
                log.error("while stopping on an error, sending the finished games failed too: %r", exc)
            raise
        await self._stop_games(train, evals)
        await self._outbox.close()
        await self._report()
        return dict(self._counts)

    async def _stop_games(self, train: set[asyncio.Task], evals: set[asyncio.Task]) -> None:
        """Cancel what is still in flight (counted as cancelled), the probes and the buffers' state
        request: nothing keeps running."""
        self._counts["cancelled"] += len(train) + len(evals)
        refresh = [self._refresh] if self._refresh is not None else []
        self._refresh = None
        for task in train | evals | set(self._probes.values()) | set(refresh):
            task.cancel()
        await asyncio.gather(*train, *evals, *self._probes.values(), *refresh, return_exceptions=True)
        train.clear()
        evals.clear()
        if self._holding:  # sync mode: a learner may be waiting for its turn
            self._holding = False
            await acall(self.turn_lock, "release")

    async def _sync_turn(self, full: bool, in_flight: int) -> bool:
        """Sync mode: whether games may start now. The collector's turn begins when it gets the lock
        (never while a learner holds it) and ends once every buffer is full and no game is left in
        flight; then the lock goes to the learners."""
        if self._holding:
            if not full:
                return True
            if not in_flight:  # the round's last game is in: the learners' turn
                self._holding = False
                self._counts["sync_rounds"] += 1
                await acall(self.turn_lock, "release")
            return False
        if full:  # the learner has not taken its batch yet
            return False
        self._holding = bool(await acall(self.turn_lock, "try_acquire", "collector"))
        return self._holding

    async def _games_wanted(self, free: int, in_flight: int) -> int:
        """How many of ``free`` train games to start. All of them, except in sync mode with one buffer:
        only while the buffer's room exceeds what the games in flight (and those started now) are
        expected to bring, at the mean steps per game sent so far (until a game has been sent, and
        while none is in flight, one may start)."""
        if self.turn_lock is None or None not in self.buffers:
            return free
        room = await acall(self.buffers[None], "room")
        games, steps = self._outbox.sent_games, self._outbox.sent_steps
        wanted = 0
        while wanted < free and room > 0:
            expected = in_flight + wanted
            if expected and games and room <= expected * steps / games:
                break
            wanted += 1
        return wanted

    def _handle(self, outcome: GameRecord | GameFailedError, is_train: bool, backends: list[int]) -> None:
        """Count a finished game and hold it in the outbox; raises once the failure budget is spent
        (the game that spent it is held and sent too)."""
        result = outcome.failure if isinstance(outcome, GameFailedError) else outcome
        if isinstance(result, FailedGame):
            if result.stage == "inference":  # its inference actor died: dropped, not the game's fault
                self._counts["dropped"] += 1
                for idx in backends:
                    self._mark_unavailable(idx)
            else:
                self._counts["failed"] += 1
            log.warning(result.describe())
        elif is_train:
            self._counts["train_finished"] += 1
        else:
            self._counts["eval_finished"] += 1
        # a meta-game (PSRO matrix) game collects no seat: it is rated, never trained on
        trains = is_train and not isinstance(result, FailedGame) and not result.spec.is_matrix
        self._outbox.hold(result, self._buffers_of(result) if trains else [])
        self._failures["train" if is_train else "eval"].record(outcome)  # raises once the budget is spent

    def _buffers_of(self, record: GameRecord) -> list[str | None]:
        """The buffer(s) a finished train game goes to: of the models whose seats it collected."""
        if None in self.buffers:
            return [None]
        lineages = list(dict.fromkeys(a.policy.lineage for a in record.spec.agents if a.collect_data))
        missing = [name for name in lineages if name not in self.buffers]
        if missing:
            raise RuntimeError(f"game {record.game_id} collected seats of {missing}, which have no buffer here "
                               f"(buffers: {sorted(self.buffers)}); the scheduler and the collector disagree")
        return lineages

    async def _report(self) -> None:
        if self.tracker is None:
            return
        for i, backend in enumerate(self.backends):
            if not self._healthy[i]:
                continue
            try:
                stats = await _backend_stats(backend)
            except InferenceUnavailableError as exc:  # a dying actor must not stop collection (its games report it)
                log.warning("no stats from inference actor %s: %s", getattr(backend, "name", i), exc)
                continue
            fire(self.tracker, "log_inference", getattr(backend, "name", f"inference-{i}"), stats)

    def stop(self) -> None:
        """Ask :meth:`collect` to stop launching games; it then cancels the games in flight (counted as
        ``cancelled``), sends the finished ones and returns."""
        self._stop = True

    def stats(self) -> dict[str, int]:
        """Counters. Every game started ends as exactly one of finished, failed, dropped or cancelled:
        ``train_started + eval_started == train_finished + eval_finished + failed + dropped + cancelled``
        once :meth:`collect` has returned."""
        return dict(self._counts)


async def _backend_stats(backend: Any) -> dict[str, float]:
    stats = await acall(backend, "stats")  # a local backend answers at once, a RemoteBackend is awaited
    return {k: float(v) for k, v in stats.items() if isinstance(v, int | float)}


def _fixed_name(uid: str) -> str:
    """Registry uids of fixed opponents may carry the seed's ``fixed-`` prefix."""
    return uid.removeprefix("fixed-")
