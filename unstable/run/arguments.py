"""build()'s two forms of arguments: the seed's flat keywords and the nested sections they map onto.

The nested form is what :class:`~unstable.run.config.BuildConfig` stores and ``config.json`` holds::

    models: [{name, model_name, algorithm, lora, learner_device, num_learner_workers,
              learner: {...}, inference: {...}, buffer: {...}}]
    train_envs, eval_envs, samplers: {...}, tracker: {...}, failure_budget: {...}, api_opponents: {...},
    run_name, runs_dir, ray_address, checkpoint_transport, seed, resume_from, mode, exploitability_eval,
    league: {...}

:data:`FLAT_ARGUMENTS` is the one table from a flat name to its place. ``learner`` and ``vllm_config``
spread their keys into the model's ``learner`` / ``inference`` mapping. A flat argument and its
nested section given together is an error: a setting has one way in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

MODEL = "model"  # the fields of models[0] itself
# flat name -> (section, field); section "model" is models[0], "learner"/"inference"/"buffer" its mappings;
# field None: the flat value is a mapping whose keys spread into the section
FLAT_ARGUMENTS: dict[str, tuple[str, str | None]] = {
    "model_name": (MODEL, "model_name"), "algorithm": (MODEL, "algorithm"), "lora_config": (MODEL, "lora"),
    "learner_device": (MODEL, "learner_device"),
    "num_learner_workers": (MODEL, "num_learner_workers"),
    "batch_size": ("learner", "batch_size"), "mini_batch_size": ("learner", "mini_batch_size"),
    "learning_rate": ("learner", "learning_rate"), "gradient_clipping": ("learner", "grad_clip"),
    "lr_schedule": ("learner", "lr_schedule"), "activation_checkpointing": ("learner", "activation_checkpointing"),
    "gradient_checkpointing": ("learner", "gradient_checkpointing"), "max_train_len": ("learner", "max_train_len"),
    "max_generation_len": ("learner", "max_generation_len"), "use_trainer_cache": ("learner", "use_trainer_cache"),
    "learner": ("learner", None),
    "inference_backend": ("inference", "backend"), "num_inference_actors": ("inference", "num_actors"),
    "temperature": ("inference", "temperature"), "vllm_config": ("inference", None),
    "buffer_size": ("buffer", "size"), "max_staleness": ("buffer", "max_staleness"),
    "reward_transforms": ("buffer", "reward_transforms"), "whole_games": ("buffer", "whole_games"),
    "env_sampling_strategy": ("samplers", "env_sampling_strategy"),
    "opponent_sampling_strategy": ("samplers", "opponent_sampling_strategy"),
    "fixed_opponents": ("samplers", "fixed_opponents"), "opponent_lag": ("samplers", "opponent_lag"),
    "opponent_window": ("samplers", "opponent_window"),
    **{name: ("samplers", name) for name in (
        "pfsp_weighting", "pfsp_prior", "pfsp_window", "psro_every", "psro_games_per_cell", "psro_pool_size",
        "psro_meta_solver", "rating_curriculum", "rating_curriculum_target",
        "rating_curriculum_width", "env_curriculum_window", "env_curriculum_target", "env_curriculum_width")},
    "wandb_project": ("tracker", "wandb_project"), "use_wandb": ("tracker", "use_wandb"),
    "max_consecutive_failures": ("failure_budget", "max_consecutive_failures"),
    "max_failure_rate": ("failure_budget", "max_failure_rate"),
    "failure_rate_window": ("failure_budget", "failure_rate_window"),
    "api_timeout_s": ("api_opponents", "timeout_s"), "api_max_retries": ("api_opponents", "max_retries"),
    "api_turn_deadline_s": ("api_opponents", "turn_deadline_s"),
}
MODEL_SECTIONS = ("learner", "inference", "buffer")
RUN_SECTIONS = ("samplers", "tracker", "failure_budget", "api_opponents")
# league: a preset that expands into models, train_envs and samplers (unstable.run.league_preset)
RUN_FIELDS = ("train_envs", "eval_envs", "run_name", "runs_dir", "ray_address", "checkpoint_transport", "seed",
              "resume_from", "mode", "exploitability_eval", "league")
NESTED_ARGUMENTS = ("models", *RUN_SECTIONS, *RUN_FIELDS)
# the flat learner arguments by the learner field they set (learner={...} may not repeat them)
FLAT_LEARNER_NAMES = {field: flat for flat, (section, field) in FLAT_ARGUMENTS.items()
                      if section == "learner" and field}


def argument_names() -> set[str]:
    """Every keyword build() takes, flat or nested (start()'s are not among them)."""
    return set(FLAT_ARGUMENTS) | set(NESTED_ARGUMENTS)


def _mapping(name: str, value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping of its settings or None, got {type(value).__name__}")
    return dict(value)


def _model_declarations(value: Any) -> list[dict]:
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise ValueError("models must be a non-empty list of model declarations (mappings such as "
                         "{'model_name': ..., 'learner': {...}})")
    models = []
    for i, item in enumerate(value):
        if dataclasses.is_dataclass(item) and not isinstance(item, type):  # a ModelConfig
            item = _given_fields(item)
        if not isinstance(item, dict):
            raise ValueError(f"models[{i}] must be a mapping or a ModelConfig, got {type(item).__name__}")
        models.append({k: (_section_dict(k, v) if k in MODEL_SECTIONS and v is not None else v)
                       for k, v in item.items()})
    return models


def _given_fields(obj: Any) -> dict:
    """A config object's fields that differ from their defaults: what it sets (so that a flat
    argument may still set the others)."""
    out = {}
    for f in dataclasses.fields(obj):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        value = getattr(obj, f.name)
        if default is dataclasses.MISSING or value != default:
            out[f.name] = value
    return out


def _section_dict(name: str, value: Any) -> dict:
    """A section given as a mapping or as its config object."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _given_fields(value)
    return _mapping(name, value)


def _per_model_places(names: list[str]) -> str:
    """Where each flat per-model setting goes in a ``models=[...]`` declaration, e.g.
    ``reward_transforms -> models[i].buffer.reward_transforms``."""
    places = []
    for name in names:
        section, field = FLAT_ARGUMENTS[name]
        path = "models[i]" + ("" if section == MODEL else f".{section}") + (f".{field}" if field else "")
        places.append(f"{name} -> {path}" + ("" if field else " (its keys)"))
    return "; ".join(places)


def nest_arguments(kwargs: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """build()'s keywords (flat, nested or both, without overlap) in the nested form, and the flat
    names that were given. Unknown keywords are the caller's to reject first."""
    flat = {k: v for k, v in kwargs.items() if k in FLAT_ARGUMENTS}
    nested: dict[str, Any] = {k: v for k, v in kwargs.items() if k in NESTED_ARGUMENTS}
    if "models" in nested:
        nested["models"] = _model_declarations(nested["models"])
    for section in RUN_SECTIONS:
        if section in nested:
            nested[section] = _section_dict(section, nested[section])
    model = nested["models"][0] if "models" in nested else {}
    per_model = sorted(k for k in flat if FLAT_ARGUMENTS[k][0] in (MODEL, *MODEL_SECTIONS))
    if per_model and len(nested.get("models", ())) > 1:
        raise ValueError(f"{per_model} set one model's settings, but models declares {len(nested['models'])}: "
                         f"give them in each declaration ({_per_model_places(per_model)})")
    for name, value in flat.items():
        section, field = FLAT_ARGUMENTS[name]
        if section in RUN_SECTIONS:
            target, where = nested.setdefault(section, {}), section
        elif section == MODEL:
            target, where = model, "models[0]"
        else:
            target, where = model.setdefault(section, {}), f"models[0].{section}"
        if field is None or (name == "temperature" and value is None):
            continue  # spread below, after the single fields; temperature=None: vllm_config's (or the default)
        if field in target:  # only the nested form can have set it: each flat name has its own field
            raise ValueError(f"{name} is given twice: as build({name}=...) and as {where}.{field}; give one")
        target[field] = value
    _spread(model, flat, "learner")
    _spread(model, flat, "vllm_config")
    if model and "models" not in nested:
        nested["models"] = [model]
    return nested, set(flat)


def _spread(model: dict, flat: dict, name: str) -> None:
    """``learner={...}`` / ``vllm_config={...}`` into the model's learner / inference mapping."""
    if name not in flat:
        return
    value = flat[name]
    if name == "learner" and value is not None and not isinstance(value, dict):
        raise ValueError(f"learner must be a dict of learner settings or None, got {type(value).__name__}")
    if name == "vllm_config" and value is not None and not isinstance(value, dict):
        raise ValueError(f"vllm_config must be a dict or None, got {type(value).__name__}")
    section = FLAT_ARGUMENTS[name][0]
    target = model.setdefault(section, {})
    given = dict(value or {})
    if name == "learner":
        taken = sorted(k for k in given if k in FLAT_LEARNER_NAMES)
        if taken:
            where = sorted({f"build({FLAT_LEARNER_NAMES[k]}=...)" for k in taken})
            raise ValueError(f"learner settings {taken} are set by {where}, not by learner={{...}}")
    if name == "vllm_config" and flat.get("temperature") is not None and "temperature" in given:
        if given["temperature"] != flat["temperature"]:  # one setting given two values: neither may win silently
            raise ValueError(f"temperature is given twice: as build(temperature={flat['temperature']!r}) and as "
                             f"vllm_config['temperature']={given['temperature']!r}; give one")
        given.pop("temperature")  # the same value twice: the flat one stands
    twice = sorted(k for k in given if k in target)  # the flat singles never set these: the nested form did
    if twice:
        raise ValueError(f"{name} {twice} given twice: in build({name}=...) and in models[0].{section}; give one")
    target.update(given)


def merge_arguments(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base`` (each flat, nested or both), section by section, in the nested form:
    how a resumed run's saved settings take the ones given now."""
    low, _ = nest_arguments(base)
    high, _ = nest_arguments(override)
    out = {**low}
    for key, value in high.items():
        if key in RUN_SECTIONS:
            out[key] = {**low.get(key, {}), **value}
        elif key == "models":  # declarations merge by name (a one-model run's may leave it out)
            old = {m.get("name", "model"): m for m in low.get("models") or []}
            for new in value:
                name = new.get("name") or (next(iter(old)) if len(old) == 1 else "model")
                if "name" not in new and len(old) > 1:
                    raise ValueError(f"the run has models {sorted(old)}: say which one a setting is for, "
                                     f"models=[{{'name': ..., ...}}]")
                base = old.get(name, {})
                model = {**base, **new}
                for section in MODEL_SECTIONS:
                    if section in base or section in new:
                        model[section] = {**(base.get(section) or {}), **(new.get(section) or {})}
                old[name] = model
            out["models"] = list(old.values())
        else:
            out[key] = value
    return out


# where each section's fields are documented (a docstring under each field), for ``unstable train --help``
SECTION_CLASSES = {
    MODEL: ("unstable.run.config", "ModelConfig"), "learner": ("unstable.learners.config", "LearnerConfig"),
    "inference": ("unstable.inference.config", "InferenceConfig"),
    "buffer": ("unstable.buffers.config", "BufferConfig"),
    "samplers": ("unstable.samplers.config", "SamplerConfig"), "tracker": ("unstable.tracking.config", "TrackerConfig"),
    "failure_budget": ("unstable.collection.failures", "FailureBudget"),
    "api_opponents": ("unstable.policies.api", "APIOpponentConfig"), "run": ("unstable.run.config", "BuildConfig"),
}


def settings_help() -> str:
    """Every flat setting and run-wide field with its documentation, read from the configs' field
    docstrings (no import, see :mod:`unstable.utils.fields`): the list ``unstable train --help`` prints."""
    from unstable.utils.fields import field_docs

    docs = {section: field_docs(*where) for section, where in SECTION_CLASSES.items()}
    lines = []
    for flat, (section, name) in FLAT_ARGUMENTS.items():
        doc = docs[MODEL][section].summary if name is None else docs[section][name].summary
        lines.append(f"  {flat:<27} {doc}")
    for name in RUN_FIELDS:
        lines.append(f"  {name:<27} {docs['run'][name].summary}")
    return "\n".join(lines)
