"""``BuildConfig``: every setting of ``unstable.build()``, checked before Ray starts.

A wrong value raises ``ValueError`` naming the argument and what is allowed. The settings keep the
seed's flat keyword names and defaults (plus ours); each component's own config (learner, A2C,
LoRA) is the one source of its defaults and checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import os
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from unstable.collection.failures import FailureBudget
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.inference.config import InferenceConfig
from unstable.learners.catalog import algorithm_settings, learner_name, resolve_learner
from unstable.learners.config import DEFAULT_LORA_CFG, LR_SCHEDULES
from unstable.models.resolve import check_adapter_dir, looks_like_path, resolve_model_name
from unstable.policies.api import DEFAULT_API_KEY_ENV
from unstable.policies.scripted import SCRIPTED_POLICIES, make_scripted_policy
from unstable.utils.checks import check_bool, check_choice, check_int, check_number, check_positive, check_str
from unstable.utils.secrets import reject_secret_settings

ENV_SAMPLING_STRATEGIES = ("random",)
OPPONENT_SAMPLING_STRATEGIES = ("none", "mirror", "fixed", "lagged", "match-quality")
INFERENCE_BACKENDS = ("auto", "transformers", "vllm")
LEARNER_DEVICE = re.compile(r"cpu|mps|(cuda|xpu)(:\d+)?")


# build()'s flat learner arguments -> the learner config's fields
FLAT_LEARNER_FIELDS = {
    "batch_size": "batch_size", "mini_batch_size": "mini_batch_size", "learning_rate": "learning_rate",
    "gradient_clipping": "grad_clip", "lr_schedule": "lr_schedule",
    "activation_checkpointing": "activation_checkpointing", "gradient_checkpointing": "gradient_checkpointing",
    "max_train_len": "max_train_len", "max_generation_len": "max_generation_len",
    "use_trainer_cache": "use_trainer_cache",
}
# learner fields the run decides (model, adapter, where checkpoints go, resume state, device, seed)
RUN_LEARNER_FIELDS = {"model_name", "lora_cfg", "output_dir", "device", "seed", "initial_lora_path",
                      "initial_version", "restore_training_state", "keep_last"}
# what build() hands initialize_algorithm unless ``learner`` says otherwise; build()'s A2C critic has
# always learned at 5e-5 (the class default is the seed's 1e-5)
BUILD_LEARNER_DEFAULTS = {"infer_mini_batch_size": 16, "critic_learning_rate": 5e-5, "normalize_adv": True}


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


def _unknown_arguments(extra: dict) -> str:
    known = sorted(set(BuildConfig.__dataclass_fields__) - {"extra"})
    unknown = sorted(extra, key=str)
    hints = [f"{m[0]!r} for {k!r}" for k in unknown if (m := difflib.get_close_matches(str(k), known, 1))]
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    return f"unknown build() arguments {unknown}{hint}; known: {known}"


def _check_lora_config(lora: Any) -> None:
    if lora is None:
        return
    if not isinstance(lora, dict):
        raise ValueError(f"lora_config must be a dict or None, got {type(lora).__name__}")
    unknown = set(lora) - set(DEFAULT_LORA_CFG)
    if unknown:
        raise ValueError(f"unknown lora_config keys {sorted(unknown, key=str)}; known: {sorted(DEFAULT_LORA_CFG)}")
    check_int("lora_config['lora_rank']", lora.get("lora_rank", 1), 1)
    check_number("lora_config['lora_alpha']", lora.get("lora_alpha", 1), 0, low_open=True)
    check_number("lora_config['lora_dropout']", lora.get("lora_dropout", 0.0), 0, 1, high_open=True)
    modules = lora.get("target_modules", ["q_proj"])
    if not isinstance(modules, list | tuple) or not modules or not all(isinstance(m, str) and m for m in modules):
        raise ValueError(f"lora_config['target_modules'] must be a non-empty list of module names such as "
                         f"['q_proj', 'v_proj'], got {modules!r}")


def _check_vllm_config(vllm: Any, model_name: str) -> None:
    if vllm is None:
        return
    if not isinstance(vllm, dict):
        raise ValueError(f"vllm_config must be a dict or None, got {type(vllm).__name__}")
    InferenceConfig.from_vllm_config({"model_name": model_name, **vllm})  # unknown keys
    check_number("vllm_config['temperature']", vllm.get("temperature", 1.0), 0)
    check_number("vllm_config['top_p']", vllm.get("top_p", 1.0), 0, 1, low_open=True)
    for key in ("max_tokens", "max_parallel_seq", "max_loras", "max_model_len"):
        check_int(f"vllm_config['{key}']", vllm.get(key, 1), 1)
    check_str("vllm_config['model_name']", vllm.get("model_name", "x"))
    _check_lora_config(vllm.get("lora_config"))


def _check_reward_transforms(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise ValueError("reward_transforms must be None or a (final, step, sampling) triple, e.g. "
                         f"unstable.reward_transformations.default_transforms(); got {value!r}")
    for name, fn in zip(("final", "step", "sampling"), value, strict=True):
        if fn is not None and not callable(fn):
            raise ValueError(f"reward_transforms: the {name} transform must be callable or None, got {fn!r}")


def _check_placement(cfg: BuildConfig) -> None:
    """Where the run goes: its directory, the Ray cluster, the learner's device, W&B."""
    check_str("wandb_project", cfg.wandb_project, allow_none=True, what="a W&B project name")
    check_str("ray_address", cfg.ray_address, allow_none=True, what="a Ray address such as 'auto' or 'ip:6379'")
    check_str("runs_dir", cfg.runs_dir, what="a directory path")
    if os.path.exists(cfg.runs_dir) and not os.path.isdir(cfg.runs_dir):
        raise ValueError(f"runs_dir {cfg.runs_dir!r} is a file; a directory (created if missing) was expected")
    name = cfg.run_name
    if name is not None and (not isinstance(name, str) or not name.strip() or "/" in name or name in (".", "..")):
        raise ValueError(f"run_name must be a plain directory name (not empty, '.', '..', no '/'), got {name!r}")
    device = cfg.learner_device
    if device is not None and not (isinstance(device, str) and LEARNER_DEVICE.fullmatch(device)):
        raise ValueError(f"learner_device must be None (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N' "
                         f"or 'mps', got {device!r}")


def _opponent_names(value: Any) -> tuple[str, ...]:
    """``fixed_opponents`` as a tuple: one name may be given as a string, ``None`` means none."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(o, str) and o.strip() for o in value):
        raise ValueError(f"fixed_opponents must be a list of opponent names ('random', an adapter directory "
                         f"or an API model name), got {value!r}")
    return tuple(value)


def _check_opponents(cfg: BuildConfig) -> tuple[str, ...]:
    """Fixed opponents must be playable now: scripted ones on every train env, checkpoints readable
    adapters, API names with a key in the environment. Returns the names with paths expanded."""
    plays_fixed = cfg.opponent_sampling_strategy == "fixed"
    names = []
    for i, name in enumerate(cfg.fixed_opponents):
        if name in SCRIPTED_POLICIES:
            for spec in cfg.train_envs if plays_fixed else ():
                make_scripted_policy(name, spec.env_id)
        elif looks_like_path(name):
            name = os.path.expanduser(name)
            check_adapter_dir(name, f"fixed_opponents[{i}]")
        names.append(name)
    for i, spec in enumerate(cfg.eval_envs):
        if spec.fixed_opponent not in SCRIPTED_POLICIES and looks_like_path(spec.fixed_opponent):
            check_adapter_dir(os.path.expanduser(spec.fixed_opponent), f"eval_envs[{i}].fixed_opponent")
    cfg.eval_envs = tuple(s if s.fixed_opponent == os.path.expanduser(s.fixed_opponent)
                          else replace(s, fixed_opponent=os.path.expanduser(s.fixed_opponent)) for s in cfg.eval_envs)
    api = [n for n in names if plays_fixed and n not in SCRIPTED_POLICIES and not os.path.isdir(n)]
    api += [s.fixed_opponent for s in cfg.eval_envs if s.fixed_opponent not in SCRIPTED_POLICIES
            and not os.path.isdir(s.fixed_opponent)]
    if api and not os.environ.get(DEFAULT_API_KEY_ENV):
        raise ValueError(f"opponent {api[0]!r} is not a scripted policy or a local adapter directory, so it is "
                         f"played over the API and needs a key in the environment variable {DEFAULT_API_KEY_ENV} "
                         f"(scripted opponents: {list(SCRIPTED_POLICIES)})")
    return tuple(names)


@dataclass
class BuildConfig:
    """All of build()'s settings (the seed's parameters, with its defaults, plus ours)."""

    model_name: str
    train_envs: Any
    eval_envs: Any = None
    env_sampling_strategy: str = "random"
    opponent_sampling_strategy: str = "none"
    fixed_opponents: Any = ("random",)  # the seed's default was Gemini over OpenRouter (needs a key)
    algorithm: Any = "reinforce"  # a registered name, a BaseLearner subclass, or "module:ClassName"
    max_train_len: int | None = None
    max_generation_len: int = 4096
    batch_size: int = 384
    mini_batch_size: int = 1
    learning_rate: float = 1e-5
    gradient_clipping: float = 0.2
    lr_schedule: str = "constant"  # ours: or "linear", decaying to 0 over learning_steps
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
    resume_from: str | None = None  # a run directory: continue that run (see unstable.run.resume)
    learner: dict | None = None  # the learner's other settings: see BuildConfig.learner_settings
    # the collector's failure budget (unstable.collection.failures.FailureBudget); None turns a check off
    max_consecutive_failures: int | None = 32  # failed train (or eval) games in a row that stop the run
    max_failure_rate: float | None = 0.5  # ... or this fraction failed of the last failure_rate_window
    failure_rate_window: int = 200
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        reject_secret_settings(self.extra, "build() argument ")  # api_key=...: say to use the environment
        saved = {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in ("extra", "reward_transforms")}
        reject_secret_settings(saved, "")  # no setting may hold a key: settings go to config.json and W&B
        if self.extra:
            raise ValueError(_unknown_arguments(self.extra))
        check_str("model_name", self.model_name, what="a HF model id, a local model directory or 'tiny'")
        self.train_envs = _spec_list("train_envs", self.train_envs, TrainEnvSpec, allow_none=False)
        self.eval_envs = _spec_list("eval_envs", self.eval_envs, EvalEnvSpec, allow_none=True)
        for name, allowed in [("env_sampling_strategy", ENV_SAMPLING_STRATEGIES),
                              ("opponent_sampling_strategy", OPPONENT_SAMPLING_STRATEGIES),
                              ("inference_backend", INFERENCE_BACKENDS)]:
            check_choice(name, getattr(self, name), allowed)
        if self.inference_backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise ValueError("inference_backend='vllm' but vLLM is not installed: on GPUs pip install "
                             "unstable-baselines[vllm]; on CPUs bash scripts/install_vllm_cpu.sh .venv; "
                             "or use 'auto' / 'transformers'")
        learner_cls = resolve_learner(self.algorithm)  # a known name, or a BaseLearner subclass with _update
        self.fixed_opponents = _opponent_names(self.fixed_opponents)
        if self.opponent_sampling_strategy == "fixed" and not self.fixed_opponents:
            raise ValueError("opponent_sampling_strategy='fixed' needs at least one name in fixed_opponents")
        for name in ("max_generation_len", "batch_size", "mini_batch_size"):
            check_int(name, getattr(self, name), 1)
        for name in ("buffer_size", "num_inference_actors", "opponent_lag", "opponent_window"):
            check_int(name, getattr(self, name), 1, allow_none=True)
        check_int("max_train_len", self.max_train_len, 2, allow_none=True)  # one prompt + one completion token
        check_int("max_staleness", self.max_staleness, 0, allow_none=True)
        check_int("seed", self.seed, 0)
        check_positive("learning_rate", self.learning_rate)
        check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_positive("gradient_clipping", self.gradient_clipping)
        check_number("temperature", self.temperature, 0, allow_none=True)
        if self.batch_size % self.mini_batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of mini_batch_size "
                             f"({self.mini_batch_size})")
        if self.buffer_size is None:
            self.buffer_size = 2 * self.batch_size
        if self.buffer_size < self.batch_size:
            raise ValueError(f"buffer_size ({self.buffer_size}) must be >= batch_size ({self.batch_size}), "
                             "or the learner would wait forever")
        for name in ("activation_checkpointing", "gradient_checkpointing", "use_trainer_cache"):
            check_bool(name, getattr(self, name))
        check_bool("use_wandb", self.use_wandb, allow_none=True)
        if self.use_trainer_cache:
            raise ValueError("use_trainer_cache=True is not supported (it did nothing in UnstableBaselines 0.2)")
        _check_lora_config(self.lora_config)
        _check_vllm_config(self.vllm_config, self.model_name)
        _check_reward_transforms(self.reward_transforms)
        self.learner_settings(learner_cls)  # known keys, and values the learner's own config accepts
        self.failure_budget  # noqa: B018 (validates the three settings, naming the one that is wrong)
        _check_placement(self)
        self.resume_from = check_resume_from(self.resume_from)
        try:
            self.model_name = resolve_model_name(self.model_name, seed=0)
        except (FileNotFoundError, ValueError) as exc:
            raise ValueError(f"model_name: {exc}") from None
        self.fixed_opponents = _check_opponents(self)

    @property
    def failure_budget(self) -> FailureBudget:
        return FailureBudget(max_consecutive_failures=self.max_consecutive_failures,
                             max_failure_rate=self.max_failure_rate, failure_rate_window=self.failure_rate_window)

    def learner_settings(self, learner_cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
        """The learner's settings as (constructor keywords, ``initialize_algorithm`` keywords).

        The seed's flat arguments (``batch_size``, ``learning_rate``, ...) set what they name. ``learner``
        sets the rest: any field of the learner's config class (A2C's ``gamma``, ``gae_lambda``,
        ``critic_learning_rate``, ``infer_mini_batch_size``, ``normalize_adv``; every learner's
        ``weight_decay``, ``dtype``, ``wait_timeout_s`` ...) or any parameter of its
        ``initialize_algorithm`` (a custom learner's own). A setting has one way in: ``learner`` may not
        repeat a flat argument or what the run decides (device, output directory, resume state).
        Checked by building the learner's config here, before any actor starts.
        """
        if self.learner is not None and not isinstance(self.learner, dict):
            raise ValueError(f"learner must be a dict of learner settings or None, got {type(self.learner).__name__}")
        extra = dict(self.learner or {})
        config_fields = {f.name for f in dataclasses.fields(learner_cls.config_cls)}
        init_names = set(algorithm_settings(learner_cls, dict.fromkeys(extra)))
        taken = sorted(set(extra) & set(FLAT_LEARNER_FIELDS.values()) | set(extra) & RUN_LEARNER_FIELDS)
        if taken:
            flat = {v: k for k, v in FLAT_LEARNER_FIELDS.items()}
            where = [f"build({flat[k]}=...)" if k in flat else "the run" for k in taken]
            raise ValueError(f"learner settings {taken} are set by {sorted(set(where))}, not by learner={{...}}")
        unknown = sorted(set(extra) - config_fields - init_names, key=str)
        if unknown:
            known = sorted((config_fields | init_names) - set(FLAT_LEARNER_FIELDS.values()) - RUN_LEARNER_FIELDS)
            raise ValueError(f"unknown learner settings {unknown} for {learner_cls.__name__}; known: {known}")
        ctor = {field: getattr(self, flat) for flat, field in FLAT_LEARNER_FIELDS.items()}
        ctor |= {k: v for k, v in extra.items() if k in config_fields and k not in init_names}
        init = {**BUILD_LEARNER_DEFAULTS, "max_train_len": self.max_train_len,
                "max_generation_len": self.max_generation_len, **extra}
        init = algorithm_settings(learner_cls, init)
        try:  # the learner's own checks, on what it will be built with
            learner_cls.config_cls(model_name=self.model_name, lora_cfg=self.lora,
                                   **{**ctor, **{k: v for k, v in init.items() if k in config_fields}})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"learner settings: {exc}") from None
        return ctor, init

    @property
    def lora(self) -> dict:
        return {**DEFAULT_LORA_CFG, **(self.lora_config or {})}

    def to_dict(self) -> dict:
        """The settings as JSON-able values: what ``config.json`` holds (a config file ``unstable train``
        reads back; custom ``reward_transforms`` are only named, by their repr; a learner class by its
        registered name or ``"module:ClassName"``)."""
        out = asdict(self)
        del out["extra"]
        out["algorithm"] = learner_name(resolve_learner(self.algorithm))
        out["train_envs"] = [asdict(s) for s in self.train_envs]
        out["eval_envs"] = [asdict(s) for s in self.eval_envs]
        if self.reward_transforms is None:
            del out["reward_transforms"]
        else:
            out["reward_transforms"] = repr(self.reward_transforms)
        return out


def check_resume_from(path: Any) -> str | None:
    if path is None:
        return None
    if not isinstance(path, str | os.PathLike) or not os.path.isdir(os.path.join(path, "checkpoints")):
        raise ValueError(f"resume_from must be the directory of an earlier run (holding checkpoints/), got {path!r}")
    return os.path.abspath(os.fspath(path))


