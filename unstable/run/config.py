"""``BuildConfig``: every setting of ``unstable.build()``, checked before Ray starts.

The settings nest: a run declares its models (``models``: one :class:`ModelConfig` today, each
with its learner, inference and buffer settings) and holds the run-wide sections (env specs,
:class:`~unstable.samplers.config.SamplerConfig`, :class:`~unstable.tracking.config.TrackerConfig`,
:class:`~unstable.collection.failures.FailureBudget`, :class:`~unstable.policies.api.APIOpponentConfig`,
where the run goes). The seed's flat keyword arguments map onto them through one table
(:data:`unstable.run.arguments.FLAT_ARGUMENTS`) and stay readable as properties (``cfg.batch_size``).
A wrong value raises ``ValueError`` naming the argument as it was given (``gradient_clipping`` when
flat) and what is allowed; each component's config is the one source of its checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from unstable.buffers.config import BufferConfig
from unstable.collection.failures import FailureBudget
from unstable.eval.in_run import exploitability_setting
from unstable.games.mixture import EnvironmentMixture, is_environment
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.inference.adapters import resolve_transport
from unstable.inference.config import VLLM_CONFIG_KEYS, choose_backend
from unstable.inference.engine_settings import ENGINE_SETTINGS, check_engine_settings
from unstable.learners.catalog import algorithm_settings, learner_name, resolve_learner
from unstable.learners.checkpoints import list_checkpoints
from unstable.learners.config import DEFAULT_LORA_CFG, LR_SCHEDULES, LearnerConfig
from unstable.local_models.resolve import looks_like_path, resolve_model_name
from unstable.models.checks import ModelInfo, check_adapter, check_device, check_model, check_target_modules
from unstable.policies.api import DEFAULT_API_KEY_ENV, APIOpponentConfig
from unstable.policies.scripted import SCRIPTED_POLICIES, make_scripted_policy
from unstable.run.arguments import (
    FLAT_ARGUMENTS,
    FLAT_LEARNER_NAMES,
    MODEL,
    MODEL_SECTIONS,
    RUN_SECTIONS,
    argument_names,
    nest_arguments,
)
from unstable.run.league_preset import expand_league
from unstable.samplers.config import SamplerConfig
from unstable.samplers.exploiters import LeagueConfig
from unstable.tracking.config import TrackerConfig
from unstable.utils.checks import check_bool, check_choice, check_int, check_number, check_positive, check_str
from unstable.utils.paths import check_dir_name, check_dir_path, check_writable_dir
from unstable.utils.secrets import reject_secret_settings

INFERENCE_BACKENDS = ("auto", "transformers", "vllm")
RUN_MODES = ("async", "sync")  # build(mode=...): see BuildConfig.mode
# build()'s defaults of its flat inference settings (num_actors None: one per free GPU, else 1;
# temperature None: vllm_config's, else the inference config's)
INFERENCE_DEFAULTS = {"backend": "auto", "num_actors": None, "temperature": None}
LEARNER_DEVICE = re.compile(r"cpu|mps|(cuda|xpu)(:\d+)?")
LINEAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# the strategies that draw opponents for the seats no trained model plays ("none"/"mirror" draw none)
DRAWS_OPPONENTS = ("fixed", "lagged", "match-quality", "pool", "pfsp", "psro")

# learner fields the run decides (model, adapter, where checkpoints go, resume state, device, seed)
RUN_LEARNER_FIELDS = {"model_name", "lora_cfg", "output_dir", "device", "seed", "initial_lora_path",
                      "initial_version", "restore_training_state", "keep_last", "lineage"}
# what build() hands initialize_algorithm unless ``learner`` says otherwise; build()'s A2C critic has
# always learned at 5e-5 (the class default is the seed's 1e-5)
BUILD_LEARNER_DEFAULTS = {"infer_mini_batch_size": 16, "critic_learning_rate": 5e-5, "normalize_adv": True}
# the defaults of the learner settings build() has flat names for: the learner config's own
LEARNER_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LearnerConfig) if f.name in FLAT_LEARNER_NAMES}
# inference settings besides the vllm_config keys
INFERENCE_KEYS = {"backend", "num_actors", *VLLM_CONFIG_KEYS}
MAX_SEED = 2**32 - 1
"""The largest ``seed``: what every RNG it seeds takes, with room for the learner's per-step seeds
(``torch.manual_seed`` refuses 2**64 and more, inside the learner actor, after Ray started)."""
MAX_LEARNING_RATE = 1.0
"""The largest ``learning_rate`` build() takes: LoRA adapters train at 1e-6 .. 1e-3; a rate above 1
(``1e6``, a typo'd exponent) only turns the weights into NaNs after the run started."""


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
            except (TypeError, ValueError) as exc:  # missing/unknown fields, or a field's own check
                raise ValueError(f"{name}[{i}]: {exc}") from None
        if not isinstance(item, cls):
            raise ValueError(f"{name}[{i}] must be a {cls.__name__}, got {type(item).__name__}")
        out.append(item)
    return tuple(out)


def _env_lists(train_value: Any, eval_value: Any) -> tuple[tuple, tuple, tuple]:
    """``train_envs`` and ``eval_envs`` as (train parts, eval parts, environments).

    Each may hold ``TrainEnvSpec``/``EvalEnvSpec`` objects (or mappings of their fields),
    environments, and ``env_a + env_b`` mixtures. An environment in ``train_envs`` is trained on (if
    it has train data) and evaluated on its eval sets; one in ``eval_envs`` is only evaluated.
    """
    def items(name: str, value: Any) -> list:
        if value is None:
            return []
        if isinstance(value, EnvironmentMixture | TrainEnvSpec | EvalEnvSpec | dict) or is_environment(value):
            value = [value]
        if not isinstance(value, list | tuple):
            raise ValueError(f"{name} must be a non-empty list of env specs, environments or env_a + env_b "
                             f"mixtures, got {value!r}")
        return [p for v in value for p in (v.parts if isinstance(v, EnvironmentMixture) else (v,))]

    train_items, eval_items = items("train_envs", train_value), items("eval_envs", eval_value)
    environments: list = []
    for env in [p for p in [*train_items, *eval_items] if is_environment(p)]:
        if any(e is env for e in environments):
            continue
        if any(e.name == env.name for e in environments):
            raise ValueError(f"two environments are named {env.name!r}; names must be distinct")
        environments.append(env)
    train_specs = [p for p in train_items if not is_environment(p) and not isinstance(p, EvalEnvSpec)]
    eval_specs = [p for p in train_items if isinstance(p, EvalEnvSpec)] + [p for p in eval_items
                                                                          if not is_environment(p)]
    train = _spec_list("train_envs", train_specs, TrainEnvSpec, allow_none=True)
    train += tuple(p for p in train_items if is_environment(p) and p.is_train)
    if not train:
        raise ValueError("train_envs must be a non-empty list of TrainEnvSpec (or mappings of its fields) or "
                         "environments with train data")
    evals = _spec_list("eval_envs", eval_specs, EvalEnvSpec, allow_none=True)
    evals += tuple(entry for env in environments for entry in env.eval_entries())
    return train, evals, tuple(environments)


def _unknown_arguments(extra: dict) -> str:
    known = sorted(argument_names())
    unknown = sorted(extra, key=str)
    hints = [f"{m[0]!r} for {k!r}" for k in unknown if (m := difflib.get_close_matches(str(k), known, 1))]
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    return f"unknown build() arguments {unknown}{hint}; known: {known}"


def _check_lora_config(name: str, lora: Any) -> None:
    if lora is None:
        return
    if not isinstance(lora, dict):
        raise ValueError(f"{name} must be a dict or None, got {type(lora).__name__}")
    unknown = set(lora) - set(DEFAULT_LORA_CFG)
    if unknown:
        raise ValueError(f"unknown {name} keys {sorted(unknown, key=str)}; known: {sorted(DEFAULT_LORA_CFG)}")
    check_int(f"{name}['lora_rank']", lora.get("lora_rank", 1), 1)
    check_number(f"{name}['lora_alpha']", lora.get("lora_alpha", 1), 0, low_open=True)
    check_number(f"{name}['lora_dropout']", lora.get("lora_dropout", 0.0), 0, 1, high_open=True)
    modules = lora.get("target_modules", ["q_proj"])
    if not isinstance(modules, list | tuple) or not modules or not all(isinstance(m, str) and m for m in modules):
        raise ValueError(f"{name}['target_modules'] must be a non-empty list of module names such as "
                         f"['q_proj', 'v_proj'], got {modules!r}")


def _check_inference(inference: dict) -> None:
    """A model's inference settings: ``backend``, ``num_actors``, the seed's ``vllm_config`` keys and
    vLLM engine settings (see :mod:`unstable.inference.engine_settings`)."""
    check_engine_settings({k: v for k, v in inference.items() if k not in INFERENCE_KEYS}, where="inference")
    check_choice("inference['backend']", inference.get("backend", "auto"), INFERENCE_BACKENDS)
    if inference.get("backend") == "vllm":
        choose_backend("vllm")  # raises, saying how to install it, where vLLM does not import
    check_int("inference['num_actors']", inference.get("num_actors"), 1, allow_none=True)
    check_number("inference['temperature']", inference.get("temperature"), 0, allow_none=True)
    check_number("inference['top_p']", inference.get("top_p", 1.0), 0, 1, low_open=True)
    for key in ("max_tokens", "max_parallel_seq", "max_loras", "max_model_len"):
        check_int(f"inference['{key}']", inference.get(key, 1), 1)
    check_str("inference['model_name']", inference.get("model_name", "x"))
    _check_lora_config("inference['lora_config']", inference.get("lora_config"))


@dataclass
class ModelConfig:
    """One trainable model of a run: its lineage, base model, algorithm and adapter, and the settings
    of its learner, inference actors and buffer. A run holds one or several (``BuildConfig.models``)."""

    name: str = "model"
    """The lineage's name: how ``TrainEnvSpec.seats``, the registry (``<name>-ckpt-N``), the checkpoint
    directories (``checkpoints/<name>/``) and the metrics (``<name>/train/...``) tell models apart
    in a run with several."""
    model_name: str | None = None
    """Base model: a Hugging Face id, a local model directory or ``"tiny"`` (required)."""
    algorithm: Any = "reinforce"
    """A registered learner name, a ``BaseLearner`` subclass, or ``"module:ClassName"``."""
    lora: dict | None = None
    """LoRA settings over ``DEFAULT_LORA_CFG`` (build()'s flat ``lora_config``)."""
    learner_device: str | None = None
    """The learner's device: ``None`` (cuda if available, else cpu), ``"cpu"``, ``"cuda[:N]"``, ``"mps"``."""
    num_learner_workers: int = 1
    """Data-parallel learner workers (``torch.distributed``: gloo on CPU, NCCL on GPUs), each taking
    one CPU or one GPU as the single learner does; each optimiser step is theirs together and equals
    the single learner's on the same batch. 1: one learner, as before."""
    learner: dict = field(default_factory=dict)
    """The learner's settings: fields of its config class (``batch_size``, ``grad_clip``, ``weight_decay``,
    A2C's ``gamma`` ...) and parameters of its ``initialize_algorithm``; missing ones take the defaults."""
    inference: dict = field(default_factory=dict)
    """``backend`` ("auto", "transformers", "vllm"), ``num_actors`` (None: one per free GPU, else 1),
    the seed's ``vllm_config`` keys (``temperature``, ``top_p``, ``max_tokens`` ...) and vLLM engine
    settings (``gpu_memory_utilization``, ``enforce_eager``, ``enable_sleep_mode`` ...)."""
    buffer: Any = field(default_factory=BufferConfig)
    """A :class:`~unstable.buffers.config.BufferConfig` (or a mapping of its fields)."""
    warm_start: dict | None = None
    """Warm-start the base model before training: a mapping of
    :class:`~unstable.models.warmstart.WarmStartConfig` fields, e.g. ``{"env_id": "TicTacToe-v0-train",
    "prompt_template": "qwen3-board"}`` (supervised on random-game positions until it plays legal
    moves; cached, so only the first run builds it). The model then trained is the warm-started one,
    and ``config.json`` names it directly."""

    def __post_init__(self) -> None:
        check_str("model_name", self.model_name, what="a HF model id, a local model directory or 'tiny'")
        if self.warm_start is not None:
            from unstable.models.warmstart import WarmStartConfig

            if not isinstance(self.warm_start, dict):
                raise ValueError(f"warm_start must be a mapping of WarmStartConfig fields or None, "
                                 f"got {type(self.warm_start).__name__}")
            try:
                WarmStartConfig(**self.warm_start)
            except TypeError as exc:
                raise ValueError(f"warm_start: {exc}") from None
            except ValueError as exc:
                raise ValueError(f"warm_start: {exc}") from None
        if not isinstance(self.name, str) or not LINEAGE_NAME.fullmatch(self.name):
            raise ValueError(f"name must be a lineage name of letters, digits, '_', '.' or '-', got {self.name!r}")
        for section in MODEL_SECTIONS[:2]:
            if not isinstance(getattr(self, section), dict):
                raise ValueError(f"{section} must be a dict of settings, got {type(getattr(self, section)).__name__}")
        learner_cls = resolve_learner(self.algorithm)  # a known name, or a BaseLearner subclass with _update
        self._check_learner_values()
        _check_inference(self.inference)
        if isinstance(self.buffer, dict):
            self.buffer = BufferConfig(**self.buffer)
        if not isinstance(self.buffer, BufferConfig):
            raise ValueError(f"buffer must be a BufferConfig or a mapping of its fields, got {self.buffer!r}")
        batch_size = self.setting("batch_size")
        if self.buffer.size is None:
            self.buffer.size = 2 * batch_size
        if self.buffer.size < batch_size:
            raise ValueError(f"buffer_size ({self.buffer.size}) must be >= batch_size ({batch_size}), "
                             "or the learner would wait forever")
        _check_lora_config("lora", self.lora)
        self._check_doubled_settings()
        self.learner_settings(learner_cls)  # known keys, and values the learner's own config accepts
        device = self.learner_device
        if device is not None and not (isinstance(device, str) and LEARNER_DEVICE.fullmatch(device)):
            raise ValueError(f"learner_device must be None (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N' "
                             f"or 'mps', got {device!r}")
        self._check_learner_workers(learner_cls)

    def _check_learner_workers(self, learner_cls: type) -> None:
        """Several learner workers need a learner that shards its update, a step for each of them in
        every optimiser step, and devices torch.distributed can join (CPU or CUDA)."""
        n = self.num_learner_workers
        check_int("num_learner_workers", n, 1)
        if n == 1:
            return
        if not getattr(learner_cls, "supports_data_parallel", False):
            raise ValueError(f"num_learner_workers={n}, but {learner_cls.__name__} does not shard its update "
                             "(supports_data_parallel is False): use num_learner_workers=1, or a learner built on "
                             "REINFORCELearner.policy_gradient")
        defaults = {f.name: f.default for f in dataclasses.fields(learner_cls.config_cls)}
        minibatches = self.learner.get("minibatches", defaults.get("minibatches", 1))
        smallest = self.setting("batch_size") // minibatches
        if n > smallest:
            raise ValueError(f"num_learner_workers ({n}) is more than the {smallest} steps of each optimiser step "
                             f"(batch_size {self.setting('batch_size')} / minibatches {minibatches}), so some "
                             "workers would have nothing to train on: lower num_learner_workers or raise batch_size")
        if (self.learner_device or "").startswith(("mps", "xpu")):
            raise ValueError(f"num_learner_workers={n} needs CPU or CUDA learners (torch.distributed's gloo or "
                             f"NCCL), not learner_device={self.learner_device!r}: use 'cpu', 'cuda' or None")

    def _check_doubled_settings(self) -> None:
        """The inference keys that repeat a model setting (the seed's ``vllm_config`` carried them
        beside the flat ones) must agree with it when both are given: the inference actors would
        use one and the learner the other."""
        tokens, length = self.inference.get("max_tokens"), self.learner.get("max_generation_len")
        if tokens is not None and length is not None and tokens != length:
            raise ValueError(f"inference['max_tokens']={tokens!r} and max_generation_len={length!r} are one setting "
                             "(how many tokens a turn may generate: the inference actors read the first, the "
                             "learner the second): give one, or the same value in both")
        lora = self.inference.get("lora_config")
        if isinstance(lora, dict) and self.lora is not None and {**DEFAULT_LORA_CFG, **lora} != self.lora_cfg:
            raise ValueError(f"lora_config={self.lora!r} and the inference settings' lora_config "
                             f"(vllm_config['lora_config'])={lora!r} differ: the inference actors would serve adapters "
                             "of another shape than the learner trains: give one, or the same settings in both")

    def setting(self, name: str) -> Any:
        """A learner setting build() has a flat name for, or its default."""
        return self.learner.get(name, LEARNER_DEFAULTS[name])

    def _check_learner_values(self) -> None:
        """The types build() accepts for the flat learner settings (the learner's config checks the rest)."""
        for name in ("max_generation_len", "batch_size", "mini_batch_size"):
            check_int(name, self.setting(name), 1)
        check_int("max_train_len", self.setting("max_train_len"), 2, allow_none=True)  # prompt + completion token
        check_positive("learning_rate", self.setting("learning_rate"))
        if self.setting("learning_rate") > MAX_LEARNING_RATE:
            raise ValueError(f"learning_rate must be a number in (0, {MAX_LEARNING_RATE:g}], got "
                             f"{self.setting('learning_rate')!r}: LoRA adapters train at about 1e-6 .. 1e-3 (a "
                             "missing minus in the exponent?)")
        check_choice("lr_schedule", self.setting("lr_schedule"), LR_SCHEDULES)
        check_positive("grad_clip", self.setting("grad_clip"))
        if self.setting("batch_size") % self.setting("mini_batch_size"):
            raise ValueError(f"batch_size ({self.setting('batch_size')}) must be a multiple of mini_batch_size "
                             f"({self.setting('mini_batch_size')})")
        for name in ("activation_checkpointing", "gradient_checkpointing", "use_trainer_cache"):
            check_bool(name, self.setting(name))
        if self.setting("use_trainer_cache"):
            raise ValueError("use_trainer_cache=True is not supported (it did nothing in UnstableBaselines 0.2)")

    def learner_settings(self, learner_cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
        """The learner's settings as (constructor keywords, ``initialize_algorithm`` keywords).

        ``learner`` sets any field of the learner's config class (A2C's ``gamma``, ``gae_lambda``,
        ``critic_learning_rate``, ``infer_mini_batch_size``, ``normalize_adv``; every learner's
        ``weight_decay``, ``dtype``, ``wait_timeout_s`` ...) or any parameter of its
        ``initialize_algorithm`` (a custom learner's own), but not what the run decides (device,
        output directory, resume state). Checked by building the learner's config here, before any
        actor starts.
        """
        settings = dict(self.learner)
        config_fields = {f.name for f in dataclasses.fields(learner_cls.config_cls)}
        other = {k: v for k, v in settings.items() if k not in FLAT_LEARNER_NAMES}
        init_names = set(algorithm_settings(learner_cls, dict.fromkeys(other)))
        taken = sorted(set(settings) & RUN_LEARNER_FIELDS)
        if taken:
            raise ValueError(f"learner settings {taken} are set by ['the run'], not by learner={{...}}")
        unknown = sorted(set(other) - config_fields - init_names, key=str)
        if unknown:
            known = sorted((config_fields | init_names) - set(FLAT_LEARNER_NAMES) - RUN_LEARNER_FIELDS)
            raise ValueError(f"unknown learner settings {unknown} for {learner_cls.__name__}; known: {known}")
        ctor = {name: self.setting(name) for name in FLAT_LEARNER_NAMES}
        ctor |= {k: v for k, v in other.items() if k in config_fields and k not in init_names}
        init = {**BUILD_LEARNER_DEFAULTS, "max_train_len": self.setting("max_train_len"),
                "max_generation_len": self.setting("max_generation_len"), **other}
        init = algorithm_settings(learner_cls, init)
        try:  # the learner's own checks, on what it will be built with
            config = learner_cls.config_cls(model_name=self.model_name, lora_cfg=self.lora_cfg,
                                            **{**ctor, **{k: v for k, v in init.items() if k in config_fields}})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"learner settings: {exc}") from None
        self._check_sampling(config, learner_cls)
        return ctor, init

    def _check_sampling(self, config: Any, learner_cls: type) -> None:
        """Refuse sampling the learner's ratios can't honour: importance ratios need the behaviour
        log-probs of the distribution the learner models (temperature-scaled logits, no nucleus)."""
        if not getattr(config, "uses_behaviour_ratio", False):
            return
        top_p = self.inference.get("top_p", 1.0)
        temperature = self.inference.get("temperature")
        why = ("weighs samples by their ratio to the behaviour policy (off_policy_correction="
               f"{config.off_policy_correction!r}, old_logprobs={config.old_logprobs!r})")
        if top_p < 1.0:
            algorithm = learner_name(learner_cls)
            raise ValueError(f"top_p={top_p} with algorithm={algorithm!r}: the learner {why}, and it models "
                             "the tempered distribution without the top-p nucleus; sample training games with "
                             "top_p=1, or set off_policy_correction='none' and old_logprobs='recompute'")
        if temperature == 0:
            raise ValueError(f"temperature=0 (greedy) with a learner that {why}: a greedy choice has no "
                             "behaviour probability to weigh by; sample training games at a temperature > 0")

    @property
    def lora_cfg(self) -> dict:
        """The adapter's LoRA settings: ``DEFAULT_LORA_CFG`` with ``lora`` over it."""
        return {**DEFAULT_LORA_CFG, **(self.lora or {})}

    def to_dict(self) -> dict:
        """The model's settings as JSON-able values (one entry of ``config.json``'s ``models``): the
        algorithm by its learner's name, custom ``reward_transforms`` only by their repr."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["algorithm"] = learner_name(resolve_learner(self.algorithm))
        out["learner"], out["inference"] = dict(self.learner), dict(self.inference)
        out["buffer"] = asdict(self.buffer)
        if self.buffer.reward_transforms is None:
            del out["buffer"]["reward_transforms"]
        else:  # only named: a config file cannot hold callables
            out["buffer"]["reward_transforms"] = repr(self.buffer.reward_transforms)
        return out


def _check_placement(cfg: BuildConfig) -> None:
    """Where the run goes: its directory and the Ray cluster."""
    check_str("ray_address", cfg.ray_address, allow_none=True, what="a Ray address such as 'auto' or 'ip:6379'")
    check_str("runs_dir", cfg.runs_dir, what="a directory path")
    resolve_transport(cfg.checkpoint_transport)
    check_dir_path("runs_dir", cfg.runs_dir)
    if cfg.run_name is not None:
        check_dir_name("run_name", cfg.run_name)


def _check_run_dir(cfg: BuildConfig) -> None:
    """The run directory can be created and written (the resumed one, or ``runs_dir/run_name``): said
    now, not as an ``OSError`` from the claim's mkdir."""
    if cfg.resume_from is not None:
        check_writable_dir("resume_from", cfg.resume_from)
        return
    check_writable_dir("runs_dir", cfg.runs_dir)
    if cfg.run_name is None:
        return
    run_dir = os.path.abspath(os.path.join(cfg.runs_dir, cfg.run_name))
    if has_checkpoints(os.path.join(run_dir, "checkpoints")):
        raise ValueError(f"{run_dir} already holds checkpoints of an earlier run: continue it with "
                         f"unstable train --resume {run_dir} (build(resume_from=...)), or pick another run_name")
    run_dir = os.path.join(cfg.runs_dir, cfg.run_name)
    if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
        raise ValueError(f"run_name {cfg.run_name!r}: {run_dir} exists and is not a directory; pick another "
                         "run_name, or move that file away")
    if os.path.isdir(run_dir) and not os.access(run_dir, os.W_OK | os.X_OK):
        raise ValueError(f"run_name {cfg.run_name!r}: the run directory {run_dir} is not writable by this user; "
                         "pick another run_name, or change its permissions")


def has_checkpoints(checkpoints_dir: str) -> bool:
    """Whether a run's checkpoints directory holds any: a one-model run's (``ckpt-N``) or, whatever its
    models are named, a run of several's (``<model>/ckpt-N``), so neither kind is written over by the other."""
    names = os.listdir(checkpoints_dir) if os.path.isdir(checkpoints_dir) else []
    return bool(list_checkpoints(checkpoints_dir)) or any(
        list_checkpoints(os.path.join(checkpoints_dir, name)) for name in names)


def _opponent(spec: Any) -> str:
    """An eval spec's fixed opponent; ``"random"`` stands in where there is none (single-player games,
    environments), which is scripted and needs no check."""
    return getattr(spec, "fixed_opponent", None) or "random"


def _check_opponents(cfg: BuildConfig, base: ModelInfo) -> tuple[str, ...]:
    """Fixed opponents must be playable now: scripted ones on every train env, checkpoints readable
    adapters that fit the first model's base (``base``, whose engines serve them), API names with a
    key in the environment. Returns the names with paths expanded."""
    plays_fixed = cfg.samplers.plays_fixed()
    names = []
    games = [spec for spec in cfg.train_envs if isinstance(spec, TrainEnvSpec)]
    for i, name in enumerate(cfg.samplers.fixed_opponents):
        if name in SCRIPTED_POLICIES:
            for spec in games if plays_fixed else ():
                try:
                    make_scripted_policy(name, spec.env_id)
                except ValueError as exc:
                    raise ValueError(f"fixed_opponents[{i}] = {name!r} is drawn for every train env "
                                     f"(opponent_sampling_strategy='fixed'), so it must play each: {exc}") from None
        elif looks_like_path(name):
            name = os.path.expanduser(name)
            check_adapter(name, f"fixed_opponents[{i}]", base)
        names.append(name)
    for i, spec in enumerate(cfg.eval_envs):
        if _opponent(spec) not in SCRIPTED_POLICIES and looks_like_path(_opponent(spec)):
            check_adapter(os.path.expanduser(spec.fixed_opponent), f"eval_envs[{i}].fixed_opponent", base)
    cfg.eval_envs = tuple(s if _opponent(s) == os.path.expanduser(_opponent(s))
                          else replace(s, fixed_opponent=os.path.expanduser(s.fixed_opponent)) for s in cfg.eval_envs)
    fixed = [p.policy for env in cfg.environments for p in env.participants if p.policy is not None]
    for name in fixed:
        if looks_like_path(name):
            check_adapter(os.path.expanduser(name), f"the participant policy {name!r}", base)
    api = [n for n in names if plays_fixed and n not in SCRIPTED_POLICIES and not os.path.isdir(n)]
    api += [_opponent(s) for s in cfg.eval_envs if _opponent(s) not in SCRIPTED_POLICIES
            and not os.path.isdir(_opponent(s))]
    api += [n for n in fixed if not os.path.isdir(os.path.expanduser(n))]
    if api and not os.environ.get(DEFAULT_API_KEY_ENV):
        raise ValueError(f"opponent {api[0]!r} is not a scripted policy or a local adapter directory, so it is "
                         f"played over the API and needs a key in the environment variable {DEFAULT_API_KEY_ENV} "
                         f"(scripted opponents: {list(SCRIPTED_POLICIES)})")
    return tuple(names)


def _flat_labels(flat: dict[str, Any]) -> dict[str, str]:
    """How a model section's check names a setting -> the flat argument the user gave it as."""
    labels = {}
    if "vllm_config" in flat:
        labels |= {f"inference['{k}']": f"vllm_config['{k}']" for k in (*VLLM_CONFIG_KEYS, *ENGINE_SETTINGS)}
        labels["inference['lora_config']"] = "lora_config"  # as the seed's vllm_config check named it
        labels["inference"] = "vllm_config"
    for name, (section, key) in FLAT_ARGUMENTS.items():
        if name in flat and key is not None and section in (MODEL, *MODEL_SECTIONS):
            labels[f"inference['{key}']" if section == "inference" else key] = name
    if flat.get("temperature") is None and "vllm_config" in flat:
        labels["inference['temperature']"] = "vllm_config['temperature']"
    labels["size"] = "buffer_size" if "buffer_size" in flat else "buffer.size"
    return labels


def _relabel(message: str, labels: dict[str, str], nested: bool, index: int = 0) -> str:
    """A model check's message, naming the setting as the user gave it (``gradient_clipping`` for
    ``grad_clip`` when flat); from the nested form, prefixed with the model it is about."""
    unknown = "unknown " if message.startswith("unknown ") else ""  # "unknown lora keys ..."
    message = message[len(unknown):]
    match = re.match(r"([A-Za-z_]+)(\['[A-Za-z_]+'\])?", message)
    for label in (match.group(0), match.group(1)) if match else ():
        if label in labels:
            message = unknown + labels[label] + message[len(label):]
            if labels[label].split("[")[0] in FLAT_ARGUMENTS:
                return message
            break
    else:
        message = unknown + message
    return f"models[{index}]: {message}" if nested else message


def _section_label(section: str, message: str, flat: dict[str, Any]) -> str:
    """A run section's check message, naming a field whose flat name differs (``api_opponents``'
    ``timeout_s``) as the user gave it: ``api_timeout_s`` when flat, ``api_opponents.timeout_s`` when nested."""
    for name, (where, key) in FLAT_ARGUMENTS.items():
        if where == section and key is not None and key != name and message.startswith(f"{key} "):
            return (name if name in flat else f"{section}.{key}") + message[len(key):]
    return message


def _apply_warm_start(model: ModelConfig) -> None:
    """Replace ``model.model_name`` with its warm start (built now unless cached), saying so."""
    from unstable.models.warmstart import WarmStartConfig, warm_start_path

    cfg = WarmStartConfig(**model.warm_start)

    def progress(step: int, total: int, stats: dict[str, float]) -> None:
        if step == total and "held_out_legal_mass" in stats:
            print(f"  warm start of {model.name}, round {stats['round']}: {stats['held_out_legal_mass']:.1%} "
                  f"probability on legal moves", flush=True)

    if not os.path.isfile(os.path.join(model.model_name, "config.json")):
        raise ValueError(f"warm_start needs a local base model (a directory or 'tiny'), got {model.model_name!r}")
    path, cached = warm_start_path(model.model_name, cfg, progress=progress)
    print(f"unstable: {model.name} starts from {'the cached' if cached else 'a new'} warm start {path}", flush=True)
    model.model_name, model.warm_start = str(path), None


def _check_learner_device(device: str | None, label: str, local: bool) -> None:
    """The learner's device must exist: on this machine (asked of torch) when Ray is local (on a
    cluster, :func:`unstable.run.wiring.check_resources` asks the cluster); and a CUDA learner sees
    only the one GPU Ray gives it, as ``cuda:0``."""
    if device is None:
        return
    kind, _, index = device.partition(":")
    if kind == "cuda" and index and int(index) > 0:
        raise ValueError(f"{label}={device!r}, but the learner actor sees only the GPU Ray gives it, as cuda:0 "
                         "(Ray sets CUDA_VISIBLE_DEVICES): use 'cuda'")
    if local:
        check_device(device, label)


def _check_model(model: ModelConfig, index: int, nested: bool) -> ModelInfo:
    """The base model loads (and its warm start, built now unless cached), and has the LoRA target modules."""
    label = f"models[{index}].model_name" if nested else "model_name"
    info = check_model(model.model_name, label)
    if model.warm_start is not None:
        _apply_warm_start(model)
        info = check_model(model.model_name, f"the warm start of {label}")
    modules = model.lora_cfg["target_modules"]
    label = f"models[{index}].lora['target_modules']" if nested else "lora_config['target_modules']"
    # the defaults (q, k, v, o, gate, up, down) need only fit in part, as PEFT asks; a list given, in full
    check_target_modules(info, modules, label, all_needed="target_modules" in (model.lora or {}))
    _check_lora_rank(info, model.lora_cfg, label.replace("['target_modules']", "['lora_rank']"))
    return info


def _check_lora_rank(info: ModelInfo, lora: dict, label: str) -> None:
    """A LoRA update ``B @ A`` of a module with ``in`` and ``out`` features has rank at most
    ``min(in, out)``: a larger ``lora_rank`` only costs memory (a typo'd 100000 ran the learner out of
    it after Ray had started). Refused above the largest such bound of the modules it targets."""
    modules = lora["target_modules"]

    def targeted(name: str) -> bool:
        if isinstance(modules, str):  # PEFT: a regular expression over the full names
            return re.fullmatch(modules, name) is not None
        return any(name == m or name.endswith("." + m) for m in modules)

    bounds = {name: min(dims) for name, dims in info.linear.items() if targeted(name)}
    if not bounds:
        return
    name = max(bounds, key=bounds.get)
    if lora["lora_rank"] > bounds[name]:
        raise ValueError(f"{label} is {lora['lora_rank']}, above {bounds[name]}, the highest rank a LoRA update of "
                         f"its target modules can have (min(in, out features) of {name}): a higher rank adds memory, "
                         f"not expressiveness; use lora_rank <= {bounds[name]}")


def _check_seats(cfg: BuildConfig) -> None:
    """Who plays whom: with several models every train env names its seats, every seat and eval
    ``model`` names a declared model, and every model plays somewhere."""
    names = [m.name for m in cfg.models]
    several = len(names) > 1
    played = set()
    for env in cfg.environments:
        env.check(names)
    for env in (spec for spec in cfg.train_envs if is_environment(spec)):  # eval-only ones train no one
        if any(p.trains for p in env.participants):
            played.update(env.models or names[:1])
    for i, spec in enumerate(cfg.train_envs):
        if is_environment(spec):
            continue
        if spec.seats is None:
            if several:
                raise ValueError(f"train_envs[{i}] ({spec.env_id}) has no seats, but the run trains {names}: say who "
                                 f"plays, e.g. seats=['{names[0]}', '{names[1]}'] or ['{names[0]}', 'opponent']")
            played.add(names[0])
            continue
        unknown = [s for s in spec.models if s not in names]
        if unknown:
            raise ValueError(f"train_envs[{i}].seats names {unknown}, which {'is' if len(unknown) == 1 else 'are'} not "
                             f"a declared model; models: {names} (or 'opponent' for a seat the model sampler fills)")
        played.update(spec.models)
    idle = [n for n in names if n not in played]
    if idle:
        raise ValueError(f"models {idle} {'plays' if len(idle) == 1 else 'play'} in no train env: give "
                         f"{'it' if len(idle) == 1 else 'each'} a seat in train_envs[...].seats, or leave it out")
    for i, spec in enumerate(cfg.eval_envs):
        if getattr(spec, "model", None) is not None and spec.model not in names:
            raise ValueError(f"eval_envs[{i}].model is {spec.model!r}, not a declared model; models: {names}")
    _check_opponent_seats(cfg)
    _check_psro(cfg)


def _check_psro(cfg: BuildConfig) -> None:
    """PSRO plays its meta-game's missing games in a two-player train game: the run must have one."""
    if cfg.samplers.opponent_sampling_strategy != "psro":
        return
    if not any(isinstance(spec, TrainEnvSpec) and spec.num_players == 2 for spec in cfg.train_envs):
        raise ValueError("opponent_sampling_strategy='psro' fills its meta-game with two-player games, and train_envs "
                         "has no two-player game (a TrainEnvSpec with num_players=2): add one, or choose another "
                         "opponent_sampling_strategy")


def _check_opponent_seats(cfg: BuildConfig) -> None:
    """Opponents need a seat: a strategy that draws them, or fixed opponents, with every seat of every
    train game played by a trained model would never seat one (the run trains in self-play instead)."""
    if any(spec.num_actors < spec.num_players for spec in cfg.train_envs if not is_environment(spec)):
        return
    strategy = cfg.samplers.opponent_sampling_strategy
    why = ("every seat of every train game is played by a trained model (num_actors == num_players, and no "
           "'opponent' in seats)")
    fix = "leave the opponent a seat (num_actors=1 in a 2-player game, or 'opponent' in seats)"
    if strategy in DRAWS_OPPONENTS:
        raise ValueError(f"opponent_sampling_strategy={strategy!r} draws opponents, but {why}, so none would ever "
                         f"play: {fix}, or use opponent_sampling_strategy='mirror' for self-play")
    if cfg.samplers.rating_curriculum > 0:
        raise ValueError(f"rating_curriculum={cfg.samplers.rating_curriculum} draws opponents, but {why}, so none "
                         f"would ever play: {fix}, or set rating_curriculum=0")
    if cfg.samplers.fixed_opponents != SamplerConfig().fixed_opponents:
        raise ValueError(f"fixed_opponents {list(cfg.samplers.fixed_opponents)} would never play: {why}, and "
                         f"opponent_sampling_strategy={strategy!r} draws no opponent: {fix} and set "
                         "opponent_sampling_strategy='fixed', or leave fixed_opponents out")


@dataclass(init=False)
class BuildConfig:
    """All of build()'s settings, nested: ``BuildConfig(**build_kwargs)`` takes the flat or the nested form."""

    models: tuple[ModelConfig, ...] = ()
    """The trainable models (see :class:`ModelConfig`): one, or several with distinct names, each
    playing in some train env's ``seats``."""
    train_envs: tuple[TrainEnvSpec, ...] = ()
    """What is trained on (required): ``TrainEnvSpec`` objects or mappings of their fields, environments
    with train data, or an ``env_a + env_b`` mixture of them."""
    eval_envs: tuple[EvalEnvSpec, ...] = ()
    """The games evaluated on, each against its ``fixed_opponent``, and the environments' eval sets."""
    environments: tuple[Any, ...] = ()
    """The environments (``unstable.environments``) among ``train_envs`` and ``eval_envs``."""
    samplers: SamplerConfig = field(default_factory=SamplerConfig)
    """How each game's env and opponent are picked."""
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    """Where metrics go besides the run directory (W&B)."""
    failure_budget: FailureBudget = field(default_factory=FailureBudget)
    """How many failed games the collector tolerates before it stops the run."""
    api_opponents: APIOpponentConfig = field(default_factory=APIOpponentConfig)
    """How API opponents call their server: timeout per call and retries."""
    run_name: str | None = None
    """The run's directory name under ``runs_dir`` (``None``: ``<model>-<YYYYmmdd-HHMMSS>-<4 hex digits>``, a
    new directory)."""
    runs_dir: str = "runs"
    """Where run directories go."""
    ray_address: str | None = None
    """An existing Ray cluster to join (``"auto"``, ``"ip:6379"``); ``None``: a local Ray."""
    checkpoint_transport: str = "auto"
    """How new adapters reach the inference actors: ``"object_store"`` (Ray's object store; no node but
    the learner's needs the run directory), ``"path"`` (loaded from the checkpoint directory: one machine
    or a shared filesystem), ``"auto"`` (``"object_store"``)."""
    seed: int = 0
    """Seeds the samplers, the buffer and the learner."""
    resume_from: str | None = None
    """A run directory to continue (see :mod:`unstable.run.resume`)."""
    league: LeagueConfig | None = None
    """A league preset (see :mod:`unstable.run.league_preset`): a main model and its main exploiters,
    expanded into ``models``, ``train_envs`` and ``samplers``; ``None``: no league."""
    mode: str = "async"
    """``"async"``: games and updates run at the same time, and the learner trains on steps up to
    ``max_staleness`` versions old. ``"sync"``: they take turns, as in Actors and classic on-policy
    RL: the collector plays until the buffer holds a batch (``buffer_size``, default ``batch_size``),
    waits for its last game, and starts no game while the learner updates; every step is trained by
    the version that played it (``max_staleness=0``)."""
    exploitability_eval: str = "auto"
    """``"auto"``: while the run trains, each new checkpoint's exact exploitability is read on every eval env
    whose game has a solver (TicTacToe, KuhnPoker) and whose template answers directly (``qwen3-board``), and
    logged as ``eval/<env>/exploitability`` at its learner step (about 20-40 s a checkpoint for a tiny model on
    TicTacToe, on CPU, beside training; see docs/evaluation.md). ``"off"``: never (YAML's unquoted ``off``,
    which it reads as false, too)."""

    def __init__(self, **arguments: Any) -> None:
        extra = {k: v for k, v in arguments.items() if k not in argument_names()}
        reject_secret_settings(extra, "build() argument ")  # api_key=...: say to use the environment
        saved = {k: v for k, v in arguments.items() if k not in extra and k != "reward_transforms"}
        reject_secret_settings(saved, "")  # no setting may hold a key: settings go to config.json and W&B
        if extra:
            raise ValueError(_unknown_arguments(extra))
        nested, flat_names = nest_arguments(arguments)
        nested, self.league = expand_league(nested)
        flat = {k: arguments[k] for k in flat_names}
        declarations = nested.get("models") or [{}]
        models = []
        for i, declaration in enumerate(declarations):
            try:
                models.append(ModelConfig(**declaration))
            except TypeError as exc:  # an unknown field of a model declaration
                raise ValueError(f"models[{i}]: {exc}") from None
            except ValueError as exc:
                raise ValueError(_relabel(str(exc), _flat_labels(flat), "models" in arguments, i)) from None
        names = [m.name for m in models]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"models: the names {twice} are used twice; each trainable model needs its own name")
        self.models = tuple(models)
        parallel = [m.name for m in models if m.num_learner_workers > 1]
        if parallel and len(models) > 1:
            raise ValueError(f"models {parallel} ask for num_learner_workers > 1, which a run with several trainable "
                             "models does not support yet (their learners take turns on one device): train one "
                             "model, or use num_learner_workers=1")
        self.train_envs, self.eval_envs, self.environments = _env_lists(nested.get("train_envs"),
                                                                        nested.get("eval_envs"))
        for name, cls in (("samplers", SamplerConfig), ("tracker", TrackerConfig), ("failure_budget", FailureBudget),
                          ("api_opponents", APIOpponentConfig)):
            try:
                setattr(self, name, cls(**nested.get(name, {})))
            except TypeError as exc:
                raise ValueError(f"{name}: {exc}") from None
            except ValueError as exc:
                raise ValueError(_section_label(name, str(exc), flat)) from None
        for name in ("run_name", "runs_dir", "ray_address", "checkpoint_transport", "seed", "resume_from", "mode",
                     "exploitability_eval"):
            setattr(self, name, nested.get(name, self.__dataclass_fields__[name].default))
        check_int("seed", self.seed, 0, maximum=MAX_SEED)
        check_choice("mode", self.mode, RUN_MODES)
        self.exploitability_eval = exploitability_setting(self.exploitability_eval)
        if self.mode == "sync":
            for i, declaration in enumerate(declarations):
                _sync_buffer(self.models[i], declaration.get("buffer") or {}, i if "models" in arguments else None)
        _check_placement(self)
        self.resume_from = check_resume_from(self.resume_from)
        _check_run_dir(self)
        for i, model in enumerate(self.models):
            try:
                model.model_name = resolve_model_name(model.model_name, seed=0)
            except (FileNotFoundError, ValueError) as exc:
                raise ValueError(f"{'model_name' if len(self.models) == 1 else f'models[{i}].model_name'}: "
                                 f"{exc}") from None
        nested_models = "models" in arguments
        for i, model in enumerate(self.models):
            _check_learner_device(model.learner_device, f"models[{i}].learner_device" if nested_models
                                  else "learner_device", local=self.ray_address is None)
        _check_seats(self)
        infos = [_check_model(model, i, nested_models) for i, model in enumerate(self.models)]
        self.samplers.fixed_opponents = _check_opponents(self, infos[0])

    def __getattr__(self, name: str) -> Any:
        """The seed's flat names, read-only: ``cfg.batch_size`` is ``cfg.models[0].learner``'s (or its default)."""
        if name not in FLAT_ARGUMENTS or "models" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        section, key = FLAT_ARGUMENTS[name]
        model = self.models[0]
        if section == MODEL:
            return getattr(model, key)
        if section == "learner":
            return model.setting(key) if key else model.learner
        if section == "inference":
            return model.inference.get(key, INFERENCE_DEFAULTS[key]) if key else model.inference
        if section == "buffer":
            return getattr(model.buffer, key)
        return getattr(getattr(self, section), key)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in FLAT_ARGUMENTS:  # one copy of each value: in its section
            section, key = FLAT_ARGUMENTS[name]
            where = f"models[0].{key}" if section == MODEL else f"{section}.{key}" if section in RUN_SECTIONS \
                else f"models[0].{section}"
            raise AttributeError(f"BuildConfig.{name} is read-only; the value lives in {where}")
        super().__setattr__(name, value)

    @property
    def model(self) -> ModelConfig:
        """The run's one trainable model."""
        return self.models[0]

    @property
    def lora(self) -> dict:
        """The first model's LoRA settings (:attr:`ModelConfig.lora_cfg`)."""
        return self.models[0].lora_cfg

    def learner_settings(self, learner_cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
        """The model's learner settings: see :meth:`ModelConfig.learner_settings`."""
        return self.models[0].learner_settings(learner_cls)

    def to_dict(self) -> dict:
        """The settings in the nested form, as JSON-able values: what ``config.json`` holds (a config
        file ``unstable train`` reads back; custom ``reward_transforms`` are only named, by their repr;
        a learner class by its registered name or ``"module:ClassName"``)."""
        out: dict[str, Any] = {"models": [m.to_dict() for m in self.models],
                               "train_envs": [_env_dict(s) for s in self.train_envs],
                               "eval_envs": [_env_dict(s) for s in self.eval_envs if not is_environment(s)]}
        out |= {name: asdict(getattr(self, name)) for name in RUN_SECTIONS}
        out["samplers"]["fixed_opponents"] = list(self.samplers.fixed_opponents)
        out |= {name: getattr(self, name) for name in ("run_name", "runs_dir", "ray_address", "checkpoint_transport",
                                                       "seed", "resume_from", "mode", "exploitability_eval")}
        if self.league is not None:
            out["league"] = asdict(self.league)
        return out


def _sync_buffer(model: ModelConfig, given: dict, index: int | None) -> None:
    """``mode="sync"``'s buffer: no stale step (``max_staleness=0``), and one batch (``buffer_size``
    defaults to ``batch_size``: the collector's round ends when the buffer is full)."""
    where = "max_staleness" if index is None else f"models[{index}].buffer.max_staleness"
    if given.get("max_staleness", 0) != 0:
        raise ValueError(f"{where}={given['max_staleness']!r}, but mode='sync' trains every step on the version "
                         "that played it (max_staleness=0): leave max_staleness out, or use mode='async'")
    model.buffer.max_staleness = 0
    if given.get("size") is None:
        model.buffer.size = model.setting("batch_size")


def _env_dict(spec: Any) -> dict:
    """A spec's fields; an environment (code and data, not JSON) by its class and name."""
    if is_environment(spec):
        return {"environment": spec.name, "class": type(spec).__name__, "weight": spec.weight}
    return asdict(spec)


def check_resume_from(path: Any) -> str | None:
    """``path`` as an absolute path (``None`` stays ``None``); raises ``ValueError`` unless it is the
    directory of an earlier run, one holding ``checkpoints/``."""
    if path is None:
        return None
    if not isinstance(path, str | os.PathLike) or not os.path.isdir(os.path.join(path, "checkpoints")):
        raise ValueError(f"resume_from must be the directory of an earlier run (holding checkpoints/), got {path!r}")
    return os.path.abspath(os.fspath(path))
