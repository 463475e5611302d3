"""YAML files read safely: one mapping per key, no Python objects, no alias bombs, errors on one line.

``yaml.safe_load`` keeps the last of two equal keys silently, and a few hundred bytes of nested
``*alias`` lists (a "billion laughs") stand for a billion values that every later walk over the document
would expand. :func:`read_config_file` and :func:`load_yaml_value` refuse both (at most
:data:`MAX_CONFIG_VALUES` values once the aliases are expanded, and no alias inside its own anchor, checked
in time linear in the file); a file that cannot be read or parsed is a :class:`ConfigError` naming it.
The run configs (:mod:`unstable.run.config_file`) and the quickstart's are read this way, with YAML 1.2's
floats: ``1e-3`` (no dot), a string to PyYAML's YAML 1.1, is the number (as JSON writes it in ``config.json``).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from unstable.utils.secrets import redact

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


_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
                                       list("-+0123456789."))


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


def load_yaml_value(text: str, what: str) -> Any:
    """``text`` (one ``--set`` value) read as :func:`read_config_file` reads a file; ``what`` names it in errors."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except _ExpansionError as exc:
        raise ConfigError(f"{what} {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what}: value is not valid YAML ({exc})") from None
