"""``unstable.build()``: validate a run's settings, start its Ray actors, and return a handle.

Everything is validated **before** Ray starts: a wrong value raises ``ValueError`` naming the
argument and what is allowed. Then, like the seed's "standard script", build() starts a Tracker,
a ModelRegistry (with the base model as checkpoint 0 and any fixed opponents), a GameScheduler
(with the env and model samplers), a Step- or EpisodeBuffer with the reward-transform chain, a
Collector (which starts the inference actors) and a learner. ``Run.start()`` collects and trains
concurrently and returns when the learner has made ``learning_steps`` updates.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.utils.checks import check_int, check_positive

log = logging.getLogger(__name__)

ENV_SAMPLING_STRATEGIES = ("random",)
OPPONENT_SAMPLING_STRATEGIES = ("none", "mirror", "fixed", "lagged", "match-quality")
ALGORITHMS = ("reinforce", "a2c")
INFERENCE_BACKENDS = ("auto", "transformers", "vllm")
DEFAULT_LORA_CFG = {
    "lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def _spec_list(name: str, value: Any, cls: type, allow_none: bool) -> tuple:
    if value is None and allow_none:
        return ()
    if isinstance(value, cls | dict):
        value = [value]
    if not isinstance(value, list | tuple) or (not value and not allow_none):
        raise ValueError(f"{name} must be a non-empty list of {cls.__name__} (or mappings of its fields)")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            try:
                item = cls(**item)
            except TypeError as exc:
                raise ValueError(f"{name}[{i}]: {exc}") from None
        if not isinstance(item, cls):
            raise ValueError(f"{name}[{i}] must be a {cls.__name__}, got {type(item).__name__}")
        out.append(item)
    return tuple(out)


@dataclass
class BuildConfig:
    """All of build()'s settings (the seed's parameters, with its defaults, plus ours)."""

    model_name: str
    train_envs: Any
    eval_envs: Any = None
    env_sampling_strategy: str = "random"
    opponent_sampling_strategy: str = "none"
    fixed_opponents: Any = ("random",)  # the seed's default was Gemini over OpenRouter (needs a key)
    algorithm: str = "reinforce"
    max_train_len: int | None = None
    max_generation_len: int = 4096
    batch_size: int = 384
    mini_batch_size: int = 1
    learning_rate: float = 1e-5
    gradient_clipping: float = 0.2
    activation_checkpointing: bool = True
    gradient_checkpointing: bool = True
    use_trainer_cache: bool = False
    buffer_size: int | None = None  # None: 2 x batch_size
    lora_config: dict | None = None
    vllm_config: dict | None = None
    wandb_project: str | None = "UnstableBaselines"
    # ours
    inference_backend: str = "auto"
    num_inference_actors: int | None = None  # None: one per GPU left after the learner's, else 1
    temperature: float | None = None  # overrides vllm_config's temperature
    run_name: str | None = None
    runs_dir: str = "runs"
    ray_address: str | None = None
    seed: int = 0
    max_staleness: int | None = None
    opponent_lag: int | None = None  # for "lagged": a checkpoint this many versions back ...
    opponent_window: int | None = 4  # ... or uniform over the last n
    use_wandb: bool | None = None  # None: on if wandb imports and wandb_project is set
    learner_device: str | None = None
    reward_transforms: Any = None  # (final, step, sampling); None: the seed's default chain
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name.strip():
            raise ValueError(f"model_name must be a HF model id or a local path, got {self.model_name!r}")
        self.train_envs = _spec_list("train_envs", self.train_envs, TrainEnvSpec, allow_none=False)
        self.eval_envs = _spec_list("eval_envs", self.eval_envs, EvalEnvSpec, allow_none=True)
        for name, allowed in [("env_sampling_strategy", ENV_SAMPLING_STRATEGIES),
                              ("opponent_sampling_strategy", OPPONENT_SAMPLING_STRATEGIES),
                              ("algorithm", ALGORITHMS), ("inference_backend", INFERENCE_BACKENDS)]:
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        if isinstance(self.fixed_opponents, str):
            self.fixed_opponents = (self.fixed_opponents,)
        self.fixed_opponents = tuple(self.fixed_opponents or ())
        if not all(isinstance(o, str) and o.strip() for o in self.fixed_opponents):
            raise ValueError(f"fixed_opponents must be a list of non-empty names, got {self.fixed_opponents!r}")
        if self.opponent_sampling_strategy == "fixed" and not self.fixed_opponents:
            raise ValueError("opponent_sampling_strategy='fixed' needs at least one name in fixed_opponents")
        for name in ("max_generation_len", "batch_size", "mini_batch_size"):
            check_int(name, getattr(self, name), 1)
        for name in ("max_train_len", "buffer_size", "num_inference_actors", "opponent_lag", "opponent_window"):
            check_int(name, getattr(self, name), 1, allow_none=True)
        check_int("max_staleness", self.max_staleness, 0, allow_none=True)
        check_positive("learning_rate", self.learning_rate)
        check_positive("gradient_clipping", self.gradient_clipping)
        if self.temperature is not None and not (isinstance(self.temperature, int | float) and self.temperature >= 0):
            raise ValueError(f"temperature must be a number >= 0 or None, got {self.temperature!r}")
        if self.batch_size % self.mini_batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of mini_batch_size "
                             f"({self.mini_batch_size})")
        if self.buffer_size is None:
            self.buffer_size = 2 * self.batch_size
        if self.buffer_size < self.batch_size:
            raise ValueError(f"buffer_size ({self.buffer_size}) must be >= batch_size ({self.batch_size}), "
                             "or the learner would wait forever")
        for name in ("activation_checkpointing", "gradient_checkpointing", "use_trainer_cache"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.use_trainer_cache:
            raise ValueError("use_trainer_cache=True is not supported (it did nothing in UnstableBaselines 0.2)")
        if self.lora_config is not None and not isinstance(self.lora_config, dict):
            raise ValueError(f"lora_config must be a dict or None, got {type(self.lora_config).__name__}")
        unknown_lora = set(self.lora_config or {}) - set(DEFAULT_LORA_CFG)
        if unknown_lora:
            raise ValueError(f"unknown lora_config keys {sorted(unknown_lora)}; known: {sorted(DEFAULT_LORA_CFG)}")
        if self.vllm_config is not None:
            from unstable.collector import InferenceConfig

            if not isinstance(self.vllm_config, dict):
                raise ValueError("vllm_config must be a dict")
            InferenceConfig.from_vllm_config({"model_name": self.model_name, **self.vllm_config})
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.run_name is not None and (not isinstance(self.run_name, str) or "/" in self.run_name):
            raise ValueError(f"run_name must be a plain name without '/', got {self.run_name!r}")
        if self.extra:
            raise ValueError(f"unknown build() arguments: {sorted(self.extra)}")
        from unstable.models.resolve import resolve_model_name

        try:
            self.model_name = resolve_model_name(self.model_name, seed=0)
        except FileNotFoundError as exc:
            raise ValueError(f"model_name: {exc}") from None

    @property
    def lora(self) -> dict:
        return {**DEFAULT_LORA_CFG, **(self.lora_config or {})}

    def to_dict(self) -> dict:
        out = asdict(self)
        out["train_envs"] = [asdict(s) for s in self.train_envs]
        out["eval_envs"] = [asdict(s) for s in self.eval_envs]
        out["reward_transforms"] = None if self.reward_transforms is None else repr(self.reward_transforms)
        return out


def build(**kwargs: Any) -> Run:
    """Validate, start Ray (local unless ``ray_address`` names a cluster) and all actors."""
    known = set(BuildConfig.__dataclass_fields__) - {"extra"}
    extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in known}
    cfg = BuildConfig(**kwargs, extra=extra)
    return Run(cfg)


class Run:
    """The handle build() returns: ``start()``, ``wait()``, ``stop()``, plus the actor handles."""

    def __init__(self, cfg: BuildConfig):
        from unstable.wiring import start_actors

        self.config = cfg
        self.run_name = cfg.run_name or f"{os.path.basename(cfg.model_name.rstrip('/'))}-{int(time.time())}"
        self.actors = start_actors(cfg, self.run_name)
        self.run_dir = self.actors.run_dir
        print(f"unstable: run directory {self.run_dir}", flush=True)
        self._train_ref = None
        self._collect_ref = None

    def start(self, learning_steps: int = 200, num_collection_workers: int = 256, num_eval_workers: int = 16,
              *, block: bool = True) -> dict | None:
        """Collect with that many games in flight and train for ``learning_steps`` updates."""
        check_int("learning_steps", learning_steps, 1)
        check_int("num_collection_workers", num_collection_workers, 1)
        check_int("num_eval_workers", num_eval_workers, 0)
        a = self.actors
        self._collect_ref = a.collector.collect.remote(num_collection_workers, num_eval_workers)
        self._train_ref = a.learner.train.remote(learning_steps)
        return self.wait() if block else None

    def wait(self) -> dict:
        """Block until training is done; then stop collection and return a short summary."""
        import ray

        if self._train_ref is None:
            raise RuntimeError("start() has not been called")
        try:
            ray.get(self._train_ref)
        finally:
            self._finish_collection()
        return self.summary()

    def _finish_collection(self) -> None:
        import ray

        a = self.actors
        ray.get(a.buffer.stop.remote())
        if self._collect_ref is not None:
            try:
                ray.get(self._collect_ref, timeout=120)
            except ray.exceptions.GetTimeoutError:
                log.warning("collector did not stop within 120 s; killing it")
            self._collect_ref = None
        ray.get(a.registry.save.remote(os.path.join(self.run_dir, "registry", "registry.json")))

    def summary(self) -> dict:
        import ray

        a = self.actors
        return {
            "run_dir": self.run_dir,
            "checkpoints": ray.get(a.registry.checkpoint_uids.remote()),
            "collector": ray.get(a.collector.stats.remote()),
        }

    def stop(self) -> None:
        """Stop collection and training and shut the run's actors down (Ray itself keeps running)."""
        import ray

        if not ray.is_initialized():
            return
        a = self.actors
        try:
            ray.get(a.collector.stop.remote(), timeout=10)
            ray.get(a.buffer.stop.remote(), timeout=10)
            ray.get(a.tracker.close.remote(), timeout=30)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            log.warning("while stopping: %s", exc)
        for handle in a.all():
            ray.kill(handle, no_restart=True)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
