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

Checked here, before anything starts: the file reads and parses, holds one mapping with no key
twice, stands for at most :data:`MAX_CONFIG_VALUES` values once its aliases are expanded (a
"billion laughs" of nested ``*alias`` lists is a few hundred bytes that every later walk over the
settings would expand to a billion) and has no alias inside its own anchor, every key is known
(with a "did you mean" for typos), none is an API key (keys come from the environment only),
``model_name`` and ``train_envs`` are present (unless ``resume_from`` brings them from the earlier
run's config.json), and start()'s settings are integers in range.
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
FLOAT_KEYS = ("learning_rate", "gradient_clipping", "temperature", "api_timeout_s", "api_turn_deadline_s")
_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
MAX_CONFIG_VALUES = 100_000
"""The most values (scalars, lists, mappings) a config may stand for with its aliases expanded."""


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the field (and never a key)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` keeps the last of two equal keys silently; a config that says
    ``batch_size`` twice is a mistake, so this loader raises instead. It also refuses a document
    whose aliases expand too far or never end (:func:`_check_expansion`), before constructing it."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key if isinstance(key, str) else repr(key))
        return super().construct_mapping(node, deep=deep)

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node


class _ExpansionError(yaml.YAMLError):
    """YAML whose aliases expand too far or never end; the message goes after the file's name."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Raise :class:`_ExpansionError` if ``root`` expands to more than :data:`MAX_CONFIG_VALUES`
    values or holds an alias to an anchor it is inside. Each node is counted once (an alias points
    at the anchor's node), so this takes time linear in the file, not in the expansion."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    pending: list[tuple[yaml.Node, bool]] = [(root, False)]
    while pending:
        node, children_counted = pending.pop()
        if children_counted:
            in_progress.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[id(node)] > MAX_CONFIG_VALUES:
                raise _ExpansionError(
                    f"stands for more than {MAX_CONFIG_VALUES:,} values once its aliases (*name) are expanded "
                    f"(the part at line {node.start_mark.line + 1} does); write the repeated settings out or use "
                    "fewer aliases")
        elif id(node) in in_progress:
            raise _ExpansionError(
                f"uses an alias inside its own anchor at line {node.start_mark.line + 1}, which would repeat "
                "forever; remove that alias")
        elif id(node) not in sizes:
            in_progress.add(id(node))
            pending.append((node, True))
            pending.extend((child, False) for child in _children(node))


def build_keys() -> set[str]:
    """build()'s keywords a config may hold: the flat ones and the nested sections."""
    from unstable.run.arguments import argument_names

    return argument_names() - {"reward_transforms"}


def _is_nested(data: dict) -> bool:
    from unstable.run.arguments import NESTED_ARGUMENTS, RUN_FIELDS

    return any(k in data for k in NESTED_ARGUMENTS if k not in RUN_FIELDS)


def _floats(data: dict) -> None:
    """``1e-3`` (read by PyYAML as a string) as a number, for the float settings, flat or nested."""
    places = [(data, key) for key in FLOAT_KEYS]
    models = data.get("models") if isinstance(data.get("models"), list) else []
    for model in models:
        for section, keys in (("learner", ("learning_rate", "grad_clip")), ("inference", ("temperature", "top_p"))):
            if isinstance(model, dict) and isinstance(model.get(section), dict):
                places += [(model[section], key) for key in keys]
    for where, key in places:
        if isinstance(where.get(key), str) and _EXPONENT_FLOAT.fullmatch(where[key].strip()):
            where[key] = float(where[key])


def read_config_file(path: str) -> Any:
    """The YAML document of ``path`` (``None`` for an empty file), read as :class:`_UniqueKeyLoader` reads it;
    a file that cannot be read or parsed is a :class:`ConfigError` naming it."""
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
    except _ExpansionError as exc:
        raise ConfigError(f"config file {path!r} {exc}") from None
    except yaml.YAMLError as exc:  # its message on one line: where, then what
        raise ConfigError(f"config file {path!r} is not valid YAML: {' '.join(str(exc).split())}") from None


def _apply_override(data: dict, item: Any) -> None:
    """``key=value`` into ``data`` (build()'s keywords as given: flat names, or a whole section)."""
    if not isinstance(item, str):
        raise ConfigError(f"override {item!r} must be a string like key=value")
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} must look like key=value")
    try:
        data[key.strip()] = yaml.load(raw, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except _ExpansionError as exc:
        raise ConfigError(f"override {item!r} {exc}") from None
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
    start = {k: over.pop(k) for k in START_KEYS if k in over}
    if _is_nested(data) and over:  # a flat override of a nested config (config.json): onto its section
        from unstable.run.arguments import merge_arguments

        try:
            data = {**merge_arguments(data, {k: over[k] for k in over if k in build_keys()}),
                    **{k: v for k, v in data.items() if k in START_KEYS}}
        except ValueError as exc:
            raise ConfigError(f"config {path!r}: {exc}") from None
    else:
        data.update(over)
    data.update(start)
    _floats(data)
    start = {k: data.pop(k, default) for k, default in START_KEYS.items()}
    for key, value in start.items():
        try:
            check_int(key, value, START_MINIMUM[key])
        except ValueError as exc:
            raise ConfigError(f"config {path!r}: {exc}") from None
    return data, start
