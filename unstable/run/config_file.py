"""YAML run configs for ``unstable train``: build()'s parameters plus start()'s.

A config is a mapping of build()'s keywords, flat (the seed's names) or nested (``models``,
``samplers``, ``tracker``, ``failure_budget``, ``api_opponents``: see :mod:`unstable.run.arguments`),
plus start()'s.
``train_envs`` / ``eval_envs`` are lists of spec mappings::

    model_name: tiny
    train_envs:
      - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2, prompt_template: qwen3-zs}
    learning_steps: 10

Overrides from the command line (``--set batch_size=16``) are parsed as YAML values.

Checked here, before anything starts: the file reads safely (:mod:`unstable.utils.yaml_files`: one
mapping, no key twice, no alias bomb), every key is known (with a "did you mean" for typos), none is
an API key (keys come from the environment only), ``model_name`` and ``train_envs`` are present (unless
``resume_from`` brings them from the earlier run's config.json), and start()'s settings are integers
in range. ``BuildConfig`` checks the values of build()'s settings. ``1e-3`` is a number (YAML 1.2's floats,
:mod:`unstable.utils.yaml_files`), and an unquoted ``off`` (false to YAML) the word for a choice of words
(:data:`unstable.utils.schema.YAML_WORDS`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from unstable.run.arguments import NESTED_ARGUMENTS, RUN_FIELDS, argument_names, merge_arguments
from unstable.run.config import StartConfig
from unstable.utils.schema import unknown_names
from unstable.utils.secrets import SecretInConfigError, reject_secret_settings
from unstable.utils.yaml_files import MAX_CONFIG_VALUES, ConfigError, load_yaml_value, read_config_file

__all__ = ["MAX_CONFIG_VALUES", "ConfigError", "build_keys", "load_config", "read_config_file"]

START_KEYS = {f.name: f.default for f in dataclasses.fields(StartConfig)}
REQUIRED_KEYS = ("model_name", "train_envs")


def build_keys() -> set[str]:
    """build()'s keywords a config may hold: the flat ones and the nested sections."""
    return argument_names() - {"reward_transforms"}


def _apply_override(data: dict, item: Any) -> None:
    """``key=value`` into ``data`` (build()'s keywords as given: flat names, or a whole section)."""
    if not isinstance(item, str):
        raise ConfigError(f"override {item!r} must be a string like key=value")
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} must look like key=value")
    data[key.strip()] = load_yaml_value(raw, f"override {item!r}")


def _check_keys(data: dict, where: str) -> None:
    try:
        reject_secret_settings(data, where)
    except SecretInConfigError as exc:
        raise ConfigError(str(exc)) from None
    allowed = build_keys() | set(START_KEYS)
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise ConfigError(where + unknown_names("config keys", unknown, allowed))
    models = data.get("models")
    model = models[0] if isinstance(models, list) and models and isinstance(models[0], dict) else {}
    given = {**data, "model_name": data.get("model_name", model.get("model_name"))}
    missing = [] if data.get("resume_from") else [k for k in REQUIRED_KEYS if given.get(k) is None]
    if missing:
        raise ConfigError(f"{where}missing required setting(s) {missing}: model_name (a HF id, a local model "
                          "directory or 'tiny') and train_envs (a list of env spec mappings)")


def load_config(path: str, overrides: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``path`` and apply ``key=value`` overrides; returns (build kwargs, start kwargs)."""
    data = read_config_file(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping of settings, got {type(data).__name__}")
    if overrides is not None and not isinstance(overrides, list | tuple):
        raise ConfigError(f"overrides must be a list of key=value strings, got {overrides!r}")
    over: dict = {}
    for item in overrides or []:
        _apply_override(over, item)
    _check_keys({**data, **over}, f"config {path!r}: ")
    start = {k: {**data, **over}.get(k, default) for k, default in START_KEYS.items()}
    data, over = ({k: v for k, v in d.items() if k not in START_KEYS} for d in (data, over))
    try:
        StartConfig(**start)
        if over and any(k in data for k in NESTED_ARGUMENTS if k not in RUN_FIELDS):  # onto a nested config's sections
            return merge_arguments(data, over), start
    except ValueError as exc:
        raise ConfigError(f"config {path!r}: {exc}") from None
    data.update(over)
    return data, start
