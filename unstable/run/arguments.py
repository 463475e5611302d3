"""build()'s two forms of arguments: the seed's flat keywords and the nested sections they map onto.

The nested form is what :class:`~unstable.run.config.BuildConfig` stores and ``config.json`` holds::

    models: [{name, model_name, algorithm, lora, learner_device, num_learner_workers,
              learner: {...}, inference: {...}, buffer: {...}, warm_start}]
    train_envs, eval_envs, samplers: {...}, tracker: {...}, failure_budget: {...}, api_opponents: {...},
    run_name, runs_dir, ... (the other fields of BuildConfig)

:data:`SECTION_CLASSES` names the config class that declares each section's fields. A field declared with
a flat name (``grad_clip: float = setting(0.2, gt=0, flat="gradient_clipping")``) is a flat argument too:
:data:`FLAT_ARGUMENTS` is read from those declarations (from the source, as ``--help`` is: no import).
``learner`` and ``vllm_config`` spread their keys into the model's ``learner`` / ``inference`` mapping. A
flat argument and its nested place given together is an error: a setting has one way in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from unstable.utils.fields import field_docs

MODEL = "model"  # the fields of models[0] itself
SECTION_CLASSES = {  # where each section's fields are declared, each with its docstring
    MODEL: ("unstable.run.config", "ModelConfig"), "learner": ("unstable.learners.config", "LearnerConfig"),
    "inference": ("unstable.inference.config", "InferenceConfig"),
    "buffer": ("unstable.buffers.config", "BufferConfig"),
    "samplers": ("unstable.samplers.config", "SamplerConfig"), "tracker": ("unstable.tracking.config", "TrackerConfig"),
    "failure_budget": ("unstable.collection.failures", "FailureBudget"),
    "api_opponents": ("unstable.policies.api", "APIOpponentConfig"), "run": ("unstable.run.config", "BuildConfig"),
    "start": ("unstable.run.config", "StartConfig"),  # start()'s, which a YAML config holds too
}
MODEL_SECTIONS = ("learner", "inference", "buffer")
RUN_SECTIONS = ("samplers", "tracker", "failure_budget", "api_opponents")
DECLARED = {section: field_docs(*where) for section, where in SECTION_CLASSES.items()}
# flat name -> (section, field); section "model" is models[0], "learner"/"inference"/"buffer" its sections (the
# flat learner={...} and vllm_config={...}, the model's fields "learner" and "inference", spread their keys there)
FLAT_ARGUMENTS: dict[str, tuple[str, str]] = {doc.meta["flat"]: (section, name) for section, fields in DECLARED.items()
                                              for name, doc in fields.items() if "flat" in doc.meta}
RUN_FIELDS = tuple(name for name in DECLARED["run"] if name not in ("models", "environments", *RUN_SECTIONS))
NESTED_ARGUMENTS = ("models", *RUN_SECTIONS, *RUN_FIELDS)
# the flat learner arguments by the learner field they set (learner={...} may not repeat them)
FLAT_LEARNER_NAMES = {key: flat for flat, (section, key) in FLAT_ARGUMENTS.items() if section == "learner"}
SPREADS = ("learner", "vllm_config")  # flat mappings whose keys go into the model's learner / inference settings
_NESTED_LABELS = {MODEL: "{}", "learner": "{}", "inference": "inference['{}']", "buffer": "buffer.{}"}


def argument_names() -> set[str]:
    """Every keyword build() takes, flat or nested (start()'s are not among them)."""
    return set(FLAT_ARGUMENTS) | set(NESTED_ARGUMENTS)


def nested_place(flat: str, model: str = "i") -> str:
    """Where the flat argument ``flat`` goes in the nested form (``models[i].learner.grad_clip``)."""
    section, name = FLAT_ARGUMENTS[flat]
    if section in RUN_SECTIONS:
        return f"{section}.{name}"
    return f"models[{model}]." + (name if section == MODEL else f"{section}.{name}")


def labels(section: str, flat: set[str]) -> dict[str, str]:
    """How an error names each field of ``section``: by the flat argument it was given as (``flat``: the flat
    names given), else by its place in the nested form (a model section's, relative to its model)."""
    out = {}
    for name, doc in DECLARED[section].items():
        if doc.meta.get("flat") in flat:
            out[name] = doc.meta["flat"]
        elif section == "inference" and "vllm_config" in flat:  # learner={...} keys are the fields' own names
            out[name] = f"vllm_config['{name}']"
        else:
            out[name] = _NESTED_LABELS.get(section, section + ".{}").format(name)
    return out


def _section_dict(name: str, value: Any) -> dict:
    """A section given as a mapping, ``None``, or its config object (then the fields it sets: those that differ
    from their defaults, so that a flat argument may still set the others)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if default is dataclasses.MISSING or getattr(value, f.name) != default:
                out[f.name] = getattr(value, f.name)
        return out
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
        if not isinstance(item, dict) and not dataclasses.is_dataclass(item):
            raise ValueError(f"models[{i}] must be a mapping or a ModelConfig, got {type(item).__name__}")
        item = _section_dict(f"models[{i}]", item)
        models.append({k: _section_dict(k, v) if k in MODEL_SECTIONS and v is not None else v for k, v in item.items()})
    return models


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
    per_model = sorted(k for k in flat if FLAT_ARGUMENTS[k][0] not in RUN_SECTIONS)
    if per_model and len(nested.get("models", ())) > 1:
        places = "; ".join(f"{k} -> {nested_place(k)}" for k in per_model)
        raise ValueError(f"{per_model} set one model's settings, but models declares {len(nested['models'])}: "
                         f"give them in each declaration ({places})")
    for name, value in flat.items():
        section, field = FLAT_ARGUMENTS[name]
        if name in SPREADS or (name == "temperature" and value is None):
            continue  # spread below, after the single fields; temperature=None: vllm_config's (or the default)
        owner = nested if section in RUN_SECTIONS else model
        target = owner if section == MODEL else owner.setdefault(section, {})
        if field in target:  # only the nested form can have set it: each flat name has its own field
            raise ValueError(f"{name} is given twice: as build({name}=...) and as {nested_place(name, '0')}; give one")
        target[field] = value
    for name in SPREADS:
        if name in flat:
            _spread(model, flat, name)
    if model and "models" not in nested:
        nested["models"] = [model]
    return nested, set(flat)


def _spread(model: dict, flat: dict, name: str) -> None:
    """``learner={...}`` / ``vllm_config={...}`` into the model's learner / inference mapping."""
    section = FLAT_ARGUMENTS[name][1]  # the model's "learner" / "inference"
    if flat[name] is not None and not isinstance(flat[name], dict):
        raise ValueError(f"{name} must be a dict or None, got {type(flat[name]).__name__}")
    given, target = dict(flat[name] or {}), model.setdefault(section, {})
    taken = sorted(k for k in given if name == "learner" and k in FLAT_LEARNER_NAMES)
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
                old[name] = {**base, **new, **{s: {**(base.get(s) or {}), **(new.get(s) or {})}
                                               for s in MODEL_SECTIONS if s in base or s in new}}
            out["models"] = list(old.values())
        else:
            out[key] = value
    return out


def settings_help() -> str:
    """Every flat setting and run-wide field with its documentation, read from the configs' field
    docstrings (no import, see :mod:`unstable.utils.fields`): the list ``unstable train --help`` prints."""
    lines = [f"  {flat:<27} {DECLARED[section][name].summary}" for flat, (section, name) in FLAT_ARGUMENTS.items()]
    lines += [f"  {name:<27} {DECLARED['run'][name].summary}" for name in RUN_FIELDS]
    return "\n".join(lines + [f"  {name:<27} {doc.summary}" for name, doc in DECLARED["start"].items()])
