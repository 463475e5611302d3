"""The Collector: keeps many train and eval games in flight and routes their results.

Games are coroutines run by this object's event loop (TextArena steps cost microseconds; model
calls are awaited on inference actors, where requests from all games are batched). Finished train
games go to the buffer; every finished game goes to the scheduler (which updates the ratings)
and the tracker. A failed game is counted and logged with its seed and error and replaced by a
new one; it never stops collection and is never retried.

Back-pressure: no new *train* game starts while the buffer is full (``buffer.is_full()``), so
collection never runs far ahead of the learner; eval games keep going. ``buffer.stop()`` (sent by
the learner when it is done) or :meth:`stop` ends collection.

The collaborators may be plain objects or Ray actor handles (see ``unstable.utils.remote``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Any

from unstable.games.rollout import play_game
from unstable.inference.base import SamplingParams
from unstable.policies.base import Policy
from unstable.policies.llm import LLMPolicy
from unstable.records import FailedGame, GameFailedError, GameRecord, GameSpec
from unstable.utils.remote import RemoteCapable, acall, fire

log = logging.getLogger(__name__)


@dataclass
class InferenceConfig:
    """How the collector serves model calls (mapped from the seed's ``vllm_config`` keys)."""

    model_name: str
    backend: str = "transformers"  # "transformers" | "vllm"
    num_actors: int = 1
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 4096  # the seed's max_generation_len
    max_parallel_seq: int = 128  # rows per batch
    max_loras: int = 8
    max_model_len: int = 8192
    lora_config: dict | None = None
    actor_num_cpus: float = 1.0
    actor_num_gpus: float = 0.0
    backend_kwargs: dict | None = None

    @classmethod
    def from_vllm_config(cls, cfg: dict, **overrides: Any) -> InferenceConfig:
        known = {"model_name", "temperature", "top_p", "max_tokens", "max_parallel_seq", "max_loras",
                 "max_model_len", "lora_config"}
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"unknown vllm_config keys {sorted(unknown)}; known: {sorted(known)}")
        if "model_name" not in cfg:
            raise ValueError("vllm_config needs 'model_name'")
        return cls(**{**cfg, **overrides})

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_tokens)


def start_inference_actors(cfg: InferenceConfig, *, use_ray: bool) -> list[Any]:
    """Start ``cfg.num_actors`` backends: Ray actors (``use_ray``) or local objects."""
    from unstable.inference.actor import InferenceActor, RemoteBackend, make_backend

    kwargs: dict[str, Any] = {"max_batch_size": cfg.max_parallel_seq, "max_loras": cfg.max_loras}
    if cfg.backend == "vllm":
        kwargs.update(max_model_len=cfg.max_model_len, max_lora_rank=(cfg.lora_config or {}).get("lora_rank", 32))
    kwargs.update(cfg.backend_kwargs or {})
    if not use_ray:
        return [make_backend(cfg.backend, cfg.model_name, **kwargs) for _ in range(cfg.num_actors)]
    backends = []
    for i in range(cfg.num_actors):
        handle = InferenceActor.options(
            name=f"inference-{i}", num_cpus=cfg.actor_num_cpus, num_gpus=cfg.actor_num_gpus, max_concurrency=10_000,
        ).remote(cfg.backend, cfg.model_name, name=f"inference-{i}", default_sampling=cfg.sampling, **kwargs)
        backends.append(RemoteBackend(handle, name=f"inference-{i}"))
    return backends


class Collector(metaclass=RemoteCapable):
    """See the module docstring. ``vllm_config`` is the seed's dict; ``inference`` our dataclass."""

    def __init__(self, vllm_config: dict | None = None, tracker: Any = None, buffer: Any = None,
                 game_scheduler: Any = None, *, inference: InferenceConfig | None = None,
                 backends: list[Any] | None = None, stats_every_s: float = 10.0):
        if game_scheduler is None or buffer is None:
            raise ValueError("Collector needs a game_scheduler and a buffer")
        self.tracker, self.buffer, self.scheduler = tracker, buffer, game_scheduler
        if backends is None:
            if inference is None:
                if vllm_config is None:
                    raise ValueError("Collector needs vllm_config, inference=InferenceConfig(...) or backends=[...]")
                from unstable.wiring import choose_backend

                inference = InferenceConfig.from_vllm_config(vllm_config, backend=choose_backend("auto"))
            import ray

            backends = start_inference_actors(inference, use_ray=ray.is_initialized())
        if not backends:
            raise ValueError("Collector needs at least one inference backend")
        self.inference = inference
        self.sampling = inference.sampling if inference else SamplingParams()
        self.backends = backends
        self._round_robin = itertools.cycle(range(len(backends)))
        self._stop = False
        self._counts = {"train_started": 0, "train_finished": 0, "eval_started": 0, "eval_finished": 0,
                        "failed": 0, "paused_checks": 0}
        self.stats_every_s = stats_every_s

    # ----------------------------------------------------------------- policies
    def _policies(self, spec: GameSpec) -> dict[int, Policy]:
        from unstable.policies.scripted import make_scripted_policy

        backend = self.backends[next(self._round_robin)]
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

    async def _run(self, spec: GameSpec) -> GameRecord | FailedGame:
        try:
            return await play_game(spec, self._policies(spec))
        except GameFailedError as err:
            return err.failure

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
        while not self._stop:
            if not await acall(self.buffer, "continue_collection"):
                break
            full = await acall(self.buffer, "is_full")
            self._counts["paused_checks"] += bool(full)
            while not full and len(train) < num_train_workers:
                train.add(asyncio.create_task(self._run(await acall(self.scheduler, "next_train_job"))))
                self._counts["train_started"] += 1
            while len(evals) < num_eval_workers:
                spec = await acall(self.scheduler, "next_eval_job")
                if spec is None:
                    break
                evals.add(asyncio.create_task(self._run(spec)))
                self._counts["eval_started"] += 1
            if not train and not evals:
                await asyncio.sleep(0.05)  # paused and idle: wait for the learner to drain the buffer
                continue
            done, _ = await asyncio.wait(train | evals, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                is_train = task in train
                (train if is_train else evals).discard(task)
                await self._handle(task.result(), is_train)
            if loop.time() - last_stats > self.stats_every_s:
                last_stats = loop.time()
                await self._report()
        for task in train | evals:
            task.cancel()
        await asyncio.gather(*train, *evals, return_exceptions=True)
        await self._report()
        return dict(self._counts)

    async def _handle(self, result: GameRecord | FailedGame, is_train: bool) -> None:
        if isinstance(result, FailedGame):
            self._counts["failed"] += 1
            log.warning(result.describe())
        elif is_train:
            self._counts["train_finished"] += 1
            await acall(self.buffer, "add_game", result)
        else:
            self._counts["eval_finished"] += 1
        await acall(self.scheduler, "update", result)
        if self.tracker is not None:
            fire(self.tracker, "log_game", result)

    async def _report(self) -> None:
        if self.tracker is None:
            return
        for i, backend in enumerate(self.backends):
            stats = await _backend_stats(backend)
            fire(self.tracker, "log_inference", getattr(backend, "name", f"inference-{i}"), stats)

    def stop(self) -> None:
        self._stop = True

    def stats(self) -> dict[str, int]:
        return dict(self._counts)


async def _backend_stats(backend: Any) -> dict[str, float]:
    stats = await acall(backend, "stats")  # a local backend answers at once, a RemoteBackend is awaited
    return {k: float(v) for k, v in stats.items() if isinstance(v, int | float)}


def _fixed_name(uid: str) -> str:
    """Registry uids of fixed opponents may carry the seed's ``fixed-`` prefix."""
    return uid.removeprefix("fixed-")
