"""``BuildConfig``: every setting of ``unstable.build()``, declared once and checked as pure data.

The settings nest: a run declares its models (``models``: one :class:`ModelConfig` or several, each
with its learner, inference and buffer settings) and holds the run-wide sections (env specs,
:class:`~unstable.samplers.config.SamplerConfig`, :class:`~unstable.tracking.config.TrackerConfig`,
:class:`~unstable.collection.failures.FailureBudget`, :class:`~unstable.policies.api.APIOpponentConfig`,
where the run goes). Each setting is declared once, as a field of the config that owns it (its type,
default, bounds and flat name: :mod:`unstable.utils.schema`); the seed's flat keyword arguments map
onto those fields (:mod:`unstable.run.arguments`), where the config holds them (``cfg.models[0].learner``).
A wrong value raises ``ValueError`` naming the argument as it was given (``gradient_clipping`` when
flat) and what is allowed; rules between settings are the small named checks below. Building a
config does no I/O: :func:`unstable.run.preflight.preflight` checks it against the world.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from unstable.buffers.config import BufferConfig
from unstable.collection.failures import FailureBudget
from unstable.eval.in_run import EXPLOITABILITY_EVAL
from unstable.games.legal_moves import SUPPORTED_GAMES, has_scripted_baseline
from unstable.games.mixture import EnvironmentMixture, is_environment
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.inference.adapters import CHECKPOINT_TRANSPORTS, DEFAULT_LORA_CFG, complete_lora_cfg
from unstable.inference.config import InferenceConfig, choose_backend
from unstable.learners.catalog import algorithm_settings, learner_name, resolve_learner
from unstable.learners.config import LearnerConfig
from unstable.policies.api import APIOpponentConfig
from unstable.run.arguments import (
    FLAT_LEARNER_NAMES,
    MODEL,
    RUN_FIELDS,
    RUN_SECTIONS,
    argument_names,
    labels,
    nest_arguments,
)
from unstable.run.league_preset import expand_league
from unstable.samplers.config import SamplerConfig
from unstable.samplers.exploiters import LeagueConfig
from unstable.samplers.strategies import OPPONENT_STRATEGIES
from unstable.tracking.config import TrackerConfig
from unstable.utils.paths import check_dir_name, check_dir_path
from unstable.utils.schema import check_fields, relabel, section, setting, type_hints, unknown_names
from unstable.utils.secrets import reject_secret_settings

RUN_MODES = ("async", "sync")  # build(mode=...): see BuildConfig.mode
# build()'s defaults of its flat inference settings (num_actors None: one per free GPU, else 1;
# temperature None: vllm_config's, else the inference config's)
INFERENCE_DEFAULTS = {"backend": "auto", "num_actors": None, "temperature": None}
LEARNER_DEVICE = re.compile(r"cpu|mps|(cuda|xpu)(:\d+)?")
LINEAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# learner fields the run decides (model, adapter, where checkpoints go, resume state, device, seed)
RUN_LEARNER_FIELDS = {"model_name", "lora_cfg", "output_dir", "device", "seed", "initial_lora_path",
                      "initial_version", "restore_training_state", "keep_last", "lineage"}
# what build() hands initialize_algorithm unless ``learner`` says otherwise; build()'s A2C critic has
# always learned at 5e-5 (the class default is the seed's 1e-5)
BUILD_LEARNER_DEFAULTS = {"infer_mini_batch_size": 16, "critic_learning_rate": 5e-5, "normalize_adv": True}
# the defaults of the learner settings build() has flat names for: the learner config's own
LEARNER_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LearnerConfig) if f.name in FLAT_LEARNER_NAMES}
MAX_SEED = 2**32 - 1
"""The largest ``seed``: what every RNG it seeds takes, with room for the learner's per-step seeds
(``torch.manual_seed`` refuses 2**64 and more, inside the learner actor, after Ray started)."""


def _specs(name: str, items: list, cls: type) -> tuple:
    """``items`` as ``cls`` objects: each one already, or a mapping of its fields."""
    out = []
    for i, item in enumerate(items):
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
    train = _specs("train_envs", train_specs, TrainEnvSpec)
    train += tuple(p for p in train_items if is_environment(p) and p.is_train)
    if not train:
        raise ValueError("train_envs must be a non-empty list of TrainEnvSpec (or mappings of its fields) or "
                         "environments with train data")
    evals = _specs("eval_envs", eval_specs, EvalEnvSpec)
    evals += tuple(entry for env in environments for entry in env.eval_entries())
    return train, evals, tuple(environments)


@dataclass
class ModelConfig:
    """One trainable model of a run: its lineage, base model, algorithm and adapter, and the settings
    of its learner, inference actors and buffer. A run holds one or several (``BuildConfig.models``)."""

    name: str = "model"
    """The lineage's name: how ``TrainEnvSpec.seats``, the registry (``<name>-ckpt-N``), the checkpoint
    directories (``checkpoints/<name>/``) and the metrics (``<name>/train/...``) tell models apart
    in a run with several."""
    model_name: str = setting(None, flat="model_name", what="a HF model id, a local model directory or 'tiny'")
    """Base model: a Hugging Face id, a local model directory or ``"tiny"`` (required)."""
    algorithm: Any = setting("reinforce", flat="algorithm")
    """A registered learner name, a ``BaseLearner`` subclass, or ``"module:ClassName"``."""
    lora: dict | None = setting(None, flat="lora_config")
    """LoRA settings over ``DEFAULT_LORA_CFG`` (build()'s flat ``lora_config``)."""
    learner_device: str | None = setting(None, flat="learner_device")
    """The learner's device: ``None`` (cuda if available, else cpu), ``"cpu"``, ``"cuda[:N]"``, ``"mps"``."""
    num_learner_workers: int = setting(1, ge=1, flat="num_learner_workers")
    """Data-parallel learner workers (``torch.distributed``: gloo on CPU, NCCL on GPUs), each taking
    one CPU or one GPU as the single learner does; each optimiser step is theirs together and equals
    the single learner's on the same batch. 1: one learner, as before."""
    learner: dict = setting(factory=dict, flat="learner")
    """The learner's settings: fields of its config class (``batch_size``, ``grad_clip``, ``weight_decay``,
    A2C's ``gamma`` ...) and parameters of its ``initialize_algorithm``; missing ones take the defaults."""
    inference: dict = setting(factory=dict, flat="vllm_config")
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
        check_fields(self)
        self._check_name_and_sections()
        learner_cls = resolve_learner(self.algorithm)  # a known name, or a BaseLearner subclass with _update
        complete_lora_cfg(self.lora, "lora")
        config = self.learner_config(learner_cls)  # the learner's own checks, on what it will be built with
        self.inference_config(where="inference")  # the inference config's own checks
        self.buffer = section(BufferConfig, self.buffer, "buffer")
        self._check_buffer_size(config.batch_size)
        for rule in (self._check_doubled_settings, self._check_device):
            rule()
        self._check_sampling(config, learner_cls)
        self._check_learner_workers(config, learner_cls)

    def _check_name_and_sections(self) -> None:
        if not isinstance(self.name, str) or not LINEAGE_NAME.fullmatch(self.name):
            raise ValueError(f"name must be a lineage name of letters, digits, '_', '.' or '-', got {self.name!r}")
        for name in ("learner", "inference"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} must be a dict of settings, got {type(getattr(self, name)).__name__}")
        if self.warm_start is not None:
            from unstable.models.warmstart import WarmStartConfig

            try:
                section(WarmStartConfig, self.warm_start, "warm_start")
            except ValueError as exc:
                raise ValueError(str(exc) if str(exc).startswith("warm_start") else f"warm_start: {exc}") from None

    def _check_buffer_size(self, batch_size: int) -> None:
        if self.buffer.size is None:
            self.buffer.size = 2 * batch_size
        if self.buffer.size < batch_size:
            raise ValueError(f"buffer_size ({self.buffer.size}) must be >= batch_size ({batch_size}), "
                             "or the learner would wait forever")

    def _check_device(self) -> None:
        device = self.learner_device
        if device is not None and not (isinstance(device, str) and LEARNER_DEVICE.fullmatch(device)):
            raise ValueError(f"learner_device must be None (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N' "
                             f"or 'mps', got {device!r}")

    def _check_learner_workers(self, config: Any, learner_cls: type) -> None:
        """Several learner workers need a learner that shards its update, a step for each of them in
        every optimiser step, and devices torch.distributed can join (CPU or CUDA)."""
        n = self.num_learner_workers
        if n == 1:
            return
        if not getattr(learner_cls, "supports_data_parallel", False):
            raise ValueError(f"num_learner_workers={n}, but {learner_cls.__name__} does not shard its update "
                             "(supports_data_parallel is False): use num_learner_workers=1, or a learner built on "
                             "REINFORCELearner.policy_gradient")
        smallest = config.batch_size // config.minibatches
        if n > smallest:
            raise ValueError(f"num_learner_workers ({n}) is more than the {smallest} steps of each optimiser step "
                             f"(batch_size {config.batch_size} / minibatches {config.minibatches}), so some "
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
            raise ValueError(f"lora={self.lora!r} and the inference settings' lora_config "
                             f"(vllm_config['lora_config'])={lora!r} differ: the inference actors would serve adapters "
                             "of another shape than the learner trains: give one, or the same settings in both")

    def setting(self, name: str) -> Any:
        """A learner setting build() has a flat name for, or its default."""
        return self.learner.get(name, LEARNER_DEFAULTS[name])

    def learner_settings(self, learner_cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
        """The learner's settings as (constructor keywords, ``initialize_algorithm`` keywords).

        ``learner`` sets any field of the learner's config class (A2C's ``gamma``, ``gae_lambda``,
        ``critic_learning_rate``, ``infer_mini_batch_size``, ``normalize_adv``; every learner's
        ``weight_decay``, ``dtype``, ``wait_timeout_s`` ...) or any parameter of its
        ``initialize_algorithm`` (a custom learner's own), but not what the run decides (device,
        output directory, resume state).
        """
        config_fields = {f.name for f in dataclasses.fields(learner_cls.config_cls)}
        other = {k: v for k, v in self.learner.items() if k not in FLAT_LEARNER_NAMES}
        init_names = set(algorithm_settings(learner_cls, dict.fromkeys(other)))
        taken = sorted(set(self.learner) & RUN_LEARNER_FIELDS)
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
        return ctor, algorithm_settings(learner_cls, init)

    def learner_config(self, learner_cls: type) -> Any:
        """The learner's config as the learner will be built with it: its own checks, on these settings. An error
        about a setting build() has a flat name for names it alone; any other says it is a learner setting."""
        ctor, init = self.learner_settings(learner_cls)
        fields = {f.name for f in dataclasses.fields(learner_cls.config_cls)}
        try:
            return learner_cls.config_cls(model_name=self.model_name, lora_cfg=self.lora_cfg,
                                          **{**ctor, **{k: v for k, v in init.items() if k in fields}})
        except (TypeError, ValueError) as exc:
            head = re.match(r"\w+", str(exc))
            raise ValueError(str(exc) if head and head.group(0) in FLAT_LEARNER_NAMES
                             else f"learner settings: {exc}") from None

    @property
    def backend(self) -> str:
        """The backend this model's inference actors run: ``inference['backend']``, ``"auto"`` resolved."""
        return choose_backend(self.inference.get("backend", INFERENCE_DEFAULTS["backend"]))

    def inference_config(self, backend: str | None = None, num_actors: int | None = None, gpus_per_actor: float = 0.0,
                         cpus_per_actor: float = 1.0, where: str = "vllm_config") -> InferenceConfig:
        """The model's inference settings as the backends' config, with the backend, the number of actors and
        what each reserves (default: as given; ``where``: how errors name the inference settings)."""
        settings = {k: v for k, v in self.inference.items() if k not in ("backend", "num_actors")}
        if settings.get("temperature") is None:
            settings.pop("temperature", None)
        base = {"max_tokens": self.setting("max_generation_len"), "lora_config": self.lora_cfg, **settings}
        given = self.inference.get("num_actors")
        return InferenceConfig.from_vllm_config(
            {**base, "model_name": self.model_name}, where=where, actor_num_gpus=gpus_per_actor,
            backend=self.inference.get("backend", INFERENCE_DEFAULTS["backend"]) if backend is None else backend,
            num_actors=(1 if given is None else given) if num_actors is None else num_actors,
            actor_num_cpus=0 if gpus_per_actor else cpus_per_actor)

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
    run_name: str | None = setting(None, what="a plain directory name (not empty, '.' or '..'; no '/')",
                                   check=check_dir_name)
    """The run's directory name under ``runs_dir`` (``None``: ``<model>-<YYYYmmdd-HHMMSS>-<4 hex digits>``, a
    new directory)."""
    runs_dir: str = setting("runs", what="a directory path", check=check_dir_path)
    """Where run directories go."""
    ray_address: str | None = setting(None, what="a Ray address such as 'auto' or 'ip:6379'")
    """An existing Ray cluster to join (``"auto"``, ``"ip:6379"``); ``None``: a local Ray."""
    checkpoint_transport: Literal[CHECKPOINT_TRANSPORTS] = "auto"
    """How new adapters reach the inference actors: ``"object_store"`` (Ray's object store; no node but
    the learner's needs the run directory), ``"path"`` (loaded from the checkpoint directory: one machine
    or a shared filesystem), ``"auto"`` (``"object_store"``)."""
    seed: int = setting(0, ge=0, le=MAX_SEED)
    """Seeds the samplers, the buffer and the learner."""
    resume_from: Any = None
    """A run directory to continue (see :mod:`unstable.run.resume`)."""
    league: LeagueConfig | None = None
    """A league preset (see :mod:`unstable.run.league_preset`): a main model and its main exploiters,
    expanded into ``models``, ``train_envs`` and ``samplers``; ``None``: no league."""
    mode: Literal[RUN_MODES] = "async"
    """``"async"``: games and updates run at the same time, and the learner trains on steps up to
    ``max_staleness`` versions old. ``"sync"``: they take turns, as in Actors and classic on-policy
    RL: the collector plays until the buffer holds a batch (``buffer_size``, default ``batch_size``),
    waits for its last game, and starts no game while the learner updates; every step is trained by
    the version that played it (``max_staleness=0``)."""
    exploitability_eval: Literal[EXPLOITABILITY_EVAL] = "auto"
    """``"auto"``: while the run trains, each new checkpoint's exact exploitability is read on every eval env
    whose game has a solver (TicTacToe, KuhnPoker) and whose template answers directly (``qwen3-board``), and
    logged as ``eval/<env>/exploitability`` at its learner step (about 20-40 s a checkpoint for a tiny model on
    TicTacToe, on CPU, beside training; see docs/evaluation.md). ``"off"``: never (YAML's unquoted ``off``,
    which it reads as false, too)."""
    exploitability_wait_s: float = setting(60.0, ge=0)
    """Once training is over, how long the run waits for the in-run exploitability of the checkpoints not read
    yet (the last one, mostly); past it the run ends and says which were not read and the command that reads
    them later (``unstable eval --exploitability``)."""

    def __init__(self, **arguments: Any) -> None:
        reject_secret_settings({k: v for k, v in arguments.items() if k != "reward_transforms"}, "build() argument ")
        extra = sorted(set(arguments) - argument_names(), key=str)
        if extra:
            raise ValueError(unknown_names("build() arguments", extra, argument_names()))
        nested, flat = nest_arguments(arguments)
        nested, league = expand_league(nested)
        self.nested_models = "models" in arguments  # errors name a model's settings models[i]....
        model_labels = {k: v for s in ("learner", "inference", "buffer", MODEL) for k, v in labels(s, flat).items()}
        models = []
        for i, declaration in enumerate(nested.get("models") or [{}]):
            try:
                models.append(section(ModelConfig, declaration, f"models[{i}]"))
            except ValueError as exc:
                message = relabel(str(exc), model_labels)
                raise ValueError(f"models[{i}]: {message}" if self.nested_models else message) from None
        self.models = tuple(models)
        for name in RUN_FIELDS:
            setattr(self, name, nested.get(name, self.__dataclass_fields__[name].default))
        self.league = league
        self.train_envs, self.eval_envs, self.environments = _env_lists(self.train_envs, self.eval_envs)
        for name in RUN_SECTIONS:
            try:
                setattr(self, name, section(type_hints(BuildConfig)[name], nested.get(name), name))
            except ValueError as exc:
                raise ValueError(relabel(str(exc), labels(name, flat))) from None
        check_fields(self)
        for rule in (_check_models, _check_sync, _check_seats, _check_average_eta,
                     _check_opponent_seats, _check_psro, _check_legal_moves_only):
            rule(self, nested)

    def to_dict(self) -> dict:
        """The settings in the nested form, as JSON-able values: what ``config.json`` holds (a config
        file ``unstable train`` reads back; custom ``reward_transforms`` are only named, by their repr;
        a learner class by its registered name or ``"module:ClassName"``)."""
        out: dict[str, Any] = {"models": [m.to_dict() for m in self.models],
                               "train_envs": [_env_dict(s) for s in self.train_envs],
                               "eval_envs": [_env_dict(s) for s in self.eval_envs if not is_environment(s)]}
        out |= {name: asdict(getattr(self, name)) for name in RUN_SECTIONS}
        out["samplers"]["fixed_opponents"] = list(self.samplers.fixed_opponents)
        out |= {name: getattr(self, name) for name in RUN_FIELDS if name not in (*out, "league")}
        if self.league is not None:
            out["league"] = asdict(self.league)
        return out


@dataclass(frozen=True)
class StartConfig:
    """``Run.start()``'s settings (a YAML config's too, beside build()'s)."""

    learning_steps: int = setting(200, ge=1)
    """Learner updates in all (a resumed run makes only the ones still missing)."""
    num_collection_workers: int = setting(256, ge=1)
    """Games in flight."""
    num_eval_workers: int = setting(16, ge=0)
    """Of them, eval games in flight."""

    def __post_init__(self) -> None:
        check_fields(self)


def _check_models(cfg: BuildConfig, nested: dict) -> None:
    """Distinct names, and several learner workers only for a run of one model."""
    names = [m.name for m in cfg.models]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"models: the names {twice} are used twice; each trainable model needs its own name")
    parallel = [m.name for m in cfg.models if m.num_learner_workers > 1]
    if parallel and len(cfg.models) > 1:
        raise ValueError(f"models {parallel} ask for num_learner_workers > 1, which a run with several trainable "
                         "models does not support yet (their learners take turns on one device): train one "
                         "model, or use num_learner_workers=1")


def _check_sync(cfg: BuildConfig, nested: dict) -> None:
    """``mode="sync"``'s buffers: no stale step (``max_staleness=0``), and one batch (``buffer_size``
    defaults to ``batch_size``: the collector's round ends when the buffer is full)."""
    if cfg.mode != "sync":
        return
    for i, (model, declaration) in enumerate(zip(cfg.models, nested.get("models") or [{}], strict=False)):
        given = declaration.get("buffer") or {}
        where = f"models[{i}].buffer.max_staleness" if cfg.nested_models else "max_staleness"
        if given.get("max_staleness", 0) != 0:
            raise ValueError(f"{where}={given['max_staleness']!r}, but mode='sync' trains every step on the version "
                             "that played it (max_staleness=0): leave max_staleness out, or use mode='async'")
        model.buffer.max_staleness = 0
        if given.get("size") is None:
            model.buffer.size = model.setting("batch_size")


def _check_seats(cfg: BuildConfig, nested: dict) -> None:
    """Who plays whom: with several models every train env names its seats, every seat and eval
    ``model`` names a declared model, and every model plays somewhere."""
    names = [m.name for m in cfg.models]
    played = set()
    for env in cfg.environments:
        env.check(names)
    for i, spec in enumerate(cfg.train_envs):
        if is_environment(spec):
            if any(p.trains for p in spec.participants):
                played.update(spec.models or names[:1])
            continue
        if spec.seats is None:
            if len(names) > 1:
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


def _check_legal_moves_only(cfg: BuildConfig, nested: dict) -> None:
    """``legal_moves_only`` draws answers among the legal moves: the transformers backend, and games whose legal
    moves the library can list."""
    for model in cfg.models:
        if not model.inference.get("legal_moves_only"):
            continue
        where = f"models[{model.name!r}].inference" if cfg.nested_models else "vllm_config"
        if model.backend != "transformers":
            raise ValueError(f"{where}: legal_moves_only=True needs the transformers inference backend (vLLM "
                             f"does not draw answers from a list); this run uses {model.backend!r}")
        for kind, specs in (("train_envs", cfg.train_envs), ("eval_envs", cfg.eval_envs)):
            for i, spec in enumerate(specs):
                if is_environment(spec) or not has_scripted_baseline(spec.env_id):
                    name = getattr(spec, "env_id", None) or type(spec).__name__
                    raise ValueError(f"{where}: legal_moves_only=True, but {kind}[{i}] ({name}) has no legal-move "
                                     f"reader; games with one: {', '.join(SUPPORTED_GAMES)} and OpenSpiel's")


def _check_psro(cfg: BuildConfig, nested: dict) -> None:
    """PSRO plays its meta-game's missing games in a two-player train game: the run must have one."""
    if cfg.samplers.opponent_sampling_strategy != "psro":
        return
    if not any(isinstance(spec, TrainEnvSpec) and spec.num_players == 2 for spec in cfg.train_envs):
        raise ValueError("opponent_sampling_strategy='psro' fills its meta-game with two-player games, and train_envs "
                         "has no two-player game (a TrainEnvSpec with num_players=2): add one, or choose another "
                         "opponent_sampling_strategy")


def _check_opponent_seats(cfg: BuildConfig, nested: dict) -> None:
    """Opponents need a seat: a strategy that draws them, fixed opponents or NFSP's average policy, with every seat
    of every train game played by a trained model would never seat one (the run trains in self-play instead)."""
    if any(spec.num_actors < spec.num_players for spec in cfg.train_envs if not is_environment(spec)):
        return
    strategy = cfg.samplers.opponent_sampling_strategy
    why = ("every seat of every train game is played by a trained model (num_actors == num_players, and no "
           "'opponent' in seats)")
    fix = "leave the opponent a seat (num_actors=1 in a 2-player game, or 'opponent' in seats)"
    if OPPONENT_STRATEGIES[strategy].draws_opponents:
        raise ValueError(f"opponent_sampling_strategy={strategy!r} draws opponents, but {why}, so none would ever "
                         f"play: {fix}, or use opponent_sampling_strategy='mirror' for self-play")
    if cfg.samplers.rating_curriculum > 0:
        raise ValueError(f"rating_curriculum={cfg.samplers.rating_curriculum} draws opponents, but {why}, so none "
                         f"would ever play: {fix}, or set rating_curriculum=0")
    if cfg.samplers.fixed_opponents != SamplerConfig().fixed_opponents:
        raise ValueError(f"fixed_opponents {list(cfg.samplers.fixed_opponents)} would never play: {why}, and "
                         f"opponent_sampling_strategy={strategy!r} draws no opponent: {fix} and set "
                         "opponent_sampling_strategy='fixed', or leave fixed_opponents out")
    if cfg.samplers.average_eta is not None:
        raise ValueError(f"average_eta={cfg.samplers.average_eta!r} seats NFSP's average policy in the opponent's "
                         f"seat, but {why}, so it would never play: {fix}, or drop average_eta")


def _check_average_eta(cfg: BuildConfig, nested: dict) -> None:
    """NFSP's ``average_eta`` seats the average policy, which ``average_reservoir`` trains, in a one-model run (the
    self-play strategy it needs is the sampler config's rule, the opponent seat :func:`_check_opponent_seats`')."""
    eta = cfg.samplers.average_eta
    if eta is None:
        return
    if len(cfg.models) > 1:
        raise ValueError(f"average_eta={eta!r}: a run with several trainable models does not seat NFSP's average "
                         "policy yet; train one model, or drop average_eta (the average policy is still trained "
                         "and saved in each checkpoint's average/)")
    if cfg.models[0].learner.get("average_reservoir") is None:
        raise ValueError(f"average_eta={eta!r} seats NFSP's average policy, which only the learner's "
                         "average_reservoir trains: set the learner's average_reservoir (e.g. "
                         "learner={'average_reservoir': 20000}; YAML: learner: {average_reservoir: 20000}) "
                         "or drop average_eta")


def _env_dict(spec: Any) -> dict:
    """A spec's fields; an environment (code and data, not JSON) by its class and name."""
    if is_environment(spec):
        return {"environment": spec.name, "class": type(spec).__name__, "weight": spec.weight}
    return asdict(spec)
