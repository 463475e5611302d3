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
``trajectories_sent`` counts the player trajectories handed to ``buffer.add_game`` (the buffer
counts what it received; the two must agree).

Back-pressure: no new *train* game starts while the buffer is full (``buffer.is_full()``), so
collection never runs far ahead of the learner; eval games keep going. ``buffer.stop()`` (sent by
the learner when it is done) or :meth:`stop` ends collection.

The collaborators may be plain objects or Ray actor handles (see ``unstable.utils.calls``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from unstable.collection.failures import FailureBudget, FailureCounter
from unstable.collection.rollout import play_game
from unstable.games.extraction import register_action_extraction
from unstable.games.templates import register_template
from unstable.inference.base import InferenceDeadError, InferenceUnavailableError, SamplingParams
from unstable.policies.base import Policy
from unstable.policies.llm import LLMPolicy
from unstable.records import FailedGame, GameFailedError, GameRecord, GameSpec, player_trajectories
from unstable.utils.calls import acall, fire

log = logging.getLogger(__name__)


class Collector:
    """See the module docstring.

    ``backends`` are the inference backends games are routed to: local objects, or clients of
    inference actors that raise :class:`~unstable.inference.base.InferenceUnavailableError` when
    their actor is gone (the wiring, :mod:`unstable.run`, starts them; the seed's
    ``unstable.Collector(vllm_config=...)`` does so from a ``vllm_config``). ``sampling`` is what
    model seats sample with.
    """

    """See the module docstring.

    ``backends`` are the inference backends games are routed to: local objects, or clients of
    inference actors that raise :class:`~unstable.inference.base.InferenceUnavailableError` when
    their actor is gone (the wiring, :mod:`unstable.run`, starts them; the seed's
    ``unstable.Collector(vllm_config=...)`` does so from a ``vllm_config``). ``sampling`` is what
    model seats sample with. ``prompt_templates`` and ``action_extractions`` (name -> template or
    function) are registered in this process first: the user's registrations, when the collector
    runs in a Ray actor.
    """

    def __init__(self, tracker: Any = None, buffer: Any = None, game_scheduler: Any = None, *,
                 backends: list[Any], sampling: SamplingParams | None = None, stats_every_s: float = 10.0,
                 unavailable_timeout_s: float = 900.0, probe_interval_s: float = 1.0,
                 failure_budget: FailureBudget | None = None, prompt_templates: dict[str, Any] | None = None,
                 action_extractions: dict[str, Any] | None = None):
        if game_scheduler is None or buffer is None:
            raise ValueError("Collector needs a game_scheduler and a buffer")
        # registrations made in the user's process (custom_templates()): a Ray actor starts without them
        for name, template in (prompt_templates or {}).items():
            register_template(name, template.render, description=template.description, overwrite=True)
        for name, extraction in (action_extractions or {}).items():
            register_action_extraction(name, extraction, overwrite=True)
        if not backends:
            raise ValueError("Collector needs at least one inference backend")
        self.tracker, self.buffer, self.scheduler = tracker, buffer, game_scheduler
        self.sampling = sampling or SamplingParams()
        self.backends = list(backends)
        self._next_backend = 0
        self._healthy = [True] * len(backends)
        self._dead: set[int] = set()
        self._probes: dict[int, asyncio.Task] = {}
        self._none_healthy_since: float | None = None
        self._stop = False
        self._counts = {"train_started": 0, "train_finished": 0, "eval_started": 0, "eval_finished": 0,
                        "failed": 0, "dropped": 0, "cancelled": 0, "trajectories_sent": 0, "paused_checks": 0,
                        "inference_unavailable": 0, "inference_recovered": 0, "inference_dead": 0}
        self.stats_every_s = stats_every_s
        self.unavailable_timeout_s = unavailable_timeout_s
        self.probe_interval_s = probe_interval_s
        self.failure_budget = failure_budget or FailureBudget()
        self._failures = {kind: FailureCounter(self.failure_budget, kind) for kind in ("train", "eval")}

    # ----------------------------------------------------------------- inference health
    def _pick_backend(self) -> int | None:
        """The next healthy backend, round-robin; ``None`` while none is."""
        n = len(self.backends)
        for k in range(n):
            idx = (self._next_backend + k) % n
            if self._healthy[idx]:
                self._next_backend = idx + 1
                return idx
        return None

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
        """True if some backend is healthy; raises once there is no hope or no answer for too long."""
        if any(self._healthy):
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
    def _policies(self, spec: GameSpec, backend_idx: int | None = None) -> dict[int, Policy]:
        from unstable.policies.scripted import make_scripted_policy

        backend = self.backends[self._pick_backend() if backend_idx is None else backend_idx]
        policies: dict[int, Policy] = {}
        for agent in spec.agents:
            ref = agent.policy
            if ref.kind == "checkpoint":
                policies[agent.player_id] = LLMPolicy(backend, ref, prompt_template=agent.prompt_template,
                                                      action_extraction=agent.action_extraction, sampling=self.sampling)
            elif ref.kind == "scripted":
                policies[agent.player_id] = make_scripted_policy(_fixed_name(ref.uid), spec.env_id)
            else:
                from unstable.policies.api import APIPolicy

                policies[agent.player_id] = APIPolicy(_fixed_name(ref.uid), uid=ref.uid,
                                                      action_extraction=agent.action_extraction)
        return policies

    async def _run(self, spec: GameSpec, backend_idx: int) -> tuple[GameRecord | GameFailedError, int]:
        """Play one game; a failed one comes back as its error (which keeps the cause for the budget),
        a bug raises."""
        try:
            return await play_game(spec, self._policies(spec, backend_idx)), backend_idx
        except GameFailedError as err:
            return err, backend_idx

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
                if not await acall(self.buffer, "continue_collection"):
                    break
                full = await acall(self.buffer, "is_full")
                self._counts["paused_checks"] += bool(full)
                serving = self._check_inference()
                while serving and not full and len(train) < num_train_workers:
                    spec = await acall(self.scheduler, "next_train_job")
                    train.add(asyncio.create_task(self._run(spec, self._pick_backend())))
                    self._counts["train_started"] += 1
                while serving and len(evals) < num_eval_workers:
                    spec = await acall(self.scheduler, "next_eval_job")
                    if spec is None:
                        break
                    evals.add(asyncio.create_task(self._run(spec, self._pick_backend())))
                    self._counts["eval_started"] += 1
                if not train and not evals:
                    await asyncio.sleep(0.05)  # paused and idle: wait for the learner to drain the buffer
                    continue
                done, _ = await asyncio.wait(train | evals, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    is_train = task in train
                    (train if is_train else evals).discard(task)
                    result, backend_idx = task.result()
                    await self._handle(result, is_train, backend_idx)
                if loop.time() - last_stats > self.stats_every_s:
                    last_stats = loop.time()
                    await self._report()
        finally:  # also on an error: no game or probe keeps running in the background
            self._counts["cancelled"] += len(train) + len(evals)  # in flight when collection stopped
            for task in train | evals | set(self._probes.values()):
                task.cancel()
            await asyncio.gather(*train, *evals, *self._probes.values(), return_exceptions=True)
        await self._report()
        return dict(self._counts)

    async def _handle(self, outcome: GameRecord | GameFailedError, is_train: bool,
                      backend_idx: int | None = None) -> None:
        error = outcome if isinstance(outcome, GameFailedError) else None
        result = outcome.failure if isinstance(outcome, GameFailedError) else outcome
        if isinstance(result, FailedGame):
            if result.stage == "inference":  # its inference actor died: dropped, not the game's fault
                self._counts["dropped"] += 1
                self._mark_unavailable(backend_idx)
            else:
                self._counts["failed"] += 1
            log.warning(result.describe())
        elif is_train:
            self._counts["train_finished"] += 1
            self._counts["trajectories_sent"] += len(player_trajectories(result))
            await acall(self.buffer, "add_game", result)
        else:
            self._counts["eval_finished"] += 1
        await acall(self.scheduler, "update", result)
        if self.tracker is not None:
            fire(self.tracker, "log_game", result)
        self._failures["train" if is_train else "eval"].record(error)  # raises once the budget is spent

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
