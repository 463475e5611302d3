"""YAML run configs for ``unstable train``: build()'s parameters plus start()'s.

A config is a flat mapping. ``train_envs`` / ``eval_envs`` are lists of spec mappings::

    model_name: tiny
    train_envs:
      - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2, prompt_template: qwen3-zs}
    learning_steps: 10

Overrides from the command line (``--set batch_size=16``) are parsed as YAML values.

Checked here, before anything starts: the file reads and parses, holds one mapping with no key
twice, every key is known (with a "did you mean" for typos), none is an API key (keys come from
the environment only), ``model_name`` and ``train_envs`` are present (unless ``resume_from``
brings them from the earlier run's config.json), and start()'s settings are integers in range.
``BuildConfig`` checks the values of build()'s settings. PyYAML reads ``1e-3`` (no dot) as a
string; for the float settings such a string is read as the number.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import yaml

from unstable.utils.checks import check_int
from unstable.utils.secrets import SecretInConfigError, redact, reject_secret_settings

START_KEYS = {"learning_steps": 200, "num_collection_workers": 256, "num_eval_workers": 16}
START_MINIMUM = {"learning_steps": 1, "num_collection_workers": 1, "num_eval_workers": 0}
REQUIRED_KEYS = ("model_name", "train_envs")
FLOAT_KEYS = ("learning_rate", "gradient_clipping", "temperature")
_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the field (and never a key)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` keeps the last of two equal keys silently; a config that says
    ``batch_size`` twice is a mistake, so this loader raises instead."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key if isinstance(key, str) else repr(key))
        return super().construct_mapping(node, deep=deep)


def build_keys() -> set[str]:
    from unstable.run.config import BuildConfig

    return set(BuildConfig.__dataclass_fields__) - {"extra", "reward_transforms"}


def _read(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path!r} is a directory; pass the YAML file") from None
    except OSError as exc:
        raise ConfigError(f"config file {path!r} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path!r} is not UTF-8 text (is it a YAML file?)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path!r} is not valid YAML: {exc}") from None


def _apply_override(data: dict, item: Any) -> None:
    if not isinstance(item, str):
        raise ConfigError(f"override {item!r} must be a string like key=value")
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} must look like key=value")
    try:
        data[key.strip()] = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {item!r}: value is not valid YAML ({exc})") from None


def _check_keys(data: dict, where: str) -> None:
    try:
        reject_secret_settings(data, where)
    except SecretInConfigError as exc:
        raise ConfigError(str(exc)) from None
    allowed = build_keys() | set(START_KEYS)
    unknown = sorted(set(data) - allowed, key=str)
    if unknown:
        hints = [f"{m[0]!r} for {k!r}" for k in unknown if (m := difflib.get_close_matches(str(k), allowed, 1))]
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        raise ConfigError(f"{where}unknown config keys {unknown}{hint}; allowed: {sorted(allowed)}")
    missing = [] if data.get("resume_from") else [k for k in REQUIRED_KEYS if data.get(k) is None]
    if missing:
        raise ConfigError(f"{where}missing required setting(s) {missing}: model_name (a HF id, a local model "
                          "directory or 'tiny') and train_envs (a list of env spec mappings)")


def load_config(path: str, overrides: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``path`` and apply ``key=value`` overrides; returns (build kwargs, start kwargs)."""
    data = _read(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping of settings, got {type(data).__name__}")
    if overrides is not None and not isinstance(overrides, list | tuple):
        raise ConfigError(f"overrides must be a list of key=value strings, got {overrides!r}")
    for item in overrides or []:
        _apply_override(data, item)
    _check_keys(data, f"config {path!r}: ")
    for key in FLOAT_KEYS:
        if isinstance(data.get(key), str) and _EXPONENT_FLOAT.fullmatch(data[key].strip()):
            data[key] = float(data[key])
    start = {k: data.pop(k, default) for k, default in START_KEYS.items()}
    for key, value in start.items():
        try:
            check_int(key, value, START_MINIMUM[key])
        except ValueError as exc:
            raise ConfigError(f"config {path!r}: {exc}") from None
    return data, start
