"""``preflight(cfg)``: what a run needs of the world, checked before Ray starts.

:class:`~unstable.run.config.BuildConfig` is pure data: building it reads no file, disk, network,
environment variable or device. This is the step that does, once per run, before any actor (build()
and ``unstable train`` call it): the resumed run directory exists, the run directory can be written
and holds no earlier run, each base model loads (``"tiny"`` is built, a warm start trained, both
cached) and has the LoRA target modules and room for the rank, each learner device exists, vLLM
imports when asked for, fixed opponents are playable (scripted ones on every train game, adapters
that fit the base model, API models with a key in the environment). It resolves names in place
(``"tiny"`` and ``~`` to paths, a warm start to its model) and returns the config.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from unstable.games.specs import TrainEnvSpec
from unstable.inference.config import choose_backend
from unstable.learners.checkpoints import list_checkpoints
from unstable.learners.config import check_attention
from unstable.local_models.resolve import looks_like_path, resolve_model_name
from unstable.models.checks import ModelInfo, check_adapter, check_device, check_model, check_target_modules
from unstable.policies.api import DEFAULT_API_KEY_ENV
from unstable.policies.scripted import SCRIPTED_POLICIES, make_scripted_policy
from unstable.utils.paths import check_writable_dir

if TYPE_CHECKING:
    from unstable.run.config import BuildConfig, ModelConfig


def preflight(cfg: BuildConfig) -> BuildConfig:
    """Check ``cfg`` against the world (see the module docstring); ``ValueError`` naming the setting."""
    cfg.resume_from = check_resume_from(cfg.resume_from)
    _check_run_dir(cfg)
    several = cfg.nested_models
    for i, model in enumerate(cfg.models):
        label = f"models[{i}].model_name" if len(cfg.models) > 1 else "model_name"
        try:
            model.model_name = resolve_model_name(model.model_name, seed=0)
        except (FileNotFoundError, ValueError) as exc:
            raise ValueError(f"{label}: {exc}") from None
    for i, model in enumerate(cfg.models):
        _check_learner_device(model, f"models[{i}].learner_device" if several else "learner_device",
                              local=cfg.ray_address is None)
        if model.inference.get("backend") == "vllm":
            choose_backend("vllm")  # raises, saying how to install it, where vLLM does not import
    infos = [_check_model(model, i, several) for i, model in enumerate(cfg.models)]
    cfg.samplers.fixed_opponents = _check_opponents(cfg, infos[0])
    for line in cfg.samplers.unused_settings():
        print(f"unstable: warning: {line}", flush=True)
    return cfg


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
    check_api_opponents([n for n in names if plays_fixed] + [_opponent(s) for s in cfg.eval_envs] + fixed)
    return tuple(names)


def check_api_opponents(names: Sequence[str]) -> None:
    """Opponents that are neither scripted nor a local adapter directory are played over the API, so they
    need a key in :data:`DEFAULT_API_KEY_ENV`; without one the first is refused, with the scripted name it
    may have meant. (The quickstart calls it before its warm start.)"""
    api = [n for n in names if n not in SCRIPTED_POLICIES and not os.path.isdir(os.path.expanduser(n))]
    if api and not os.environ.get(DEFAULT_API_KEY_ENV):
        close = difflib.get_close_matches(api[0], list(SCRIPTED_POLICIES), 1)
        raise ValueError(f"opponent {api[0]!r} is not a scripted policy or a local adapter directory, so it is "
                         f"played over the API and needs a key in the environment variable {DEFAULT_API_KEY_ENV} "
                         f"(scripted opponents: {list(SCRIPTED_POLICIES)}"
                         f"{f'; did you mean {close[0]!r}?' if close else ''})")


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


def _check_learner_device(model: ModelConfig, label: str, local: bool) -> None:
    """The learner's device must exist: on this machine (asked of torch) when Ray is local (on a
    cluster, :func:`unstable.run.wiring.check_resources` asks the cluster); a CUDA learner sees
    only the one GPU Ray gives it, as ``cuda:0``; and it must run the attention kernel asked for."""
    device = model.learner_device
    if local and device is None and model.learner.get("attn_implementation") == "flex_attention":
        import torch

        check_attention("flex_attention", "cuda" if torch.cuda.is_available() else "cpu")
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


def check_resume_from(path: Any) -> str | None:
    """``path`` as an absolute path (``None`` stays ``None``); raises ``ValueError`` unless it is the
    directory of an earlier run, one holding ``checkpoints/``."""
    if path is None:
        return None
    if not isinstance(path, str | os.PathLike) or not os.path.isdir(os.path.join(path, "checkpoints")):
        raise ValueError(f"resume_from must be the directory of an earlier run (holding checkpoints/), got {path!r}")
    return os.path.abspath(os.fspath(path))
