"""YAML run configs for ``unstable train``: build()'s parameters plus start()'s.

A config is a flat mapping. ``train_envs`` / ``eval_envs`` are lists of spec mappings::

    model_name: tiny
    train_envs:
      - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2, prompt_template: qwen3-zs}
    learning_steps: 10

Overrides from the command line (``--set batch_size=16``) are parsed as YAML values.
"""

from __future__ import annotations

from typing import Any

import yaml

START_KEYS = {"learning_steps": 200, "num_collection_workers": 256, "num_eval_workers": 16}


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the field."""


def build_keys() -> set[str]:
    from unstable.runtime import BuildConfig

    return set(BuildConfig.__dataclass_fields__) - {"extra", "reward_transforms"}


def load_config(path: str, overrides: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``path`` and apply ``key=value`` overrides; returns (build kwargs, start kwargs)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path!r} is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping of settings, got {type(data).__name__}")
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like key=value")
        try:
            data[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({exc})") from None
    allowed = build_keys() | set(START_KEYS)
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}; allowed: {sorted(allowed)}")
    start = {k: data.pop(k, default) for k, default in START_KEYS.items()}
    return data, start
