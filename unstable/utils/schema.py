"""Settings declared once: a config dataclass's field is the whole declaration of its setting.

The annotation is the type and, with ``Literal[...]``, the allowed values; :func:`setting` adds the
default, the bounds, a ``check`` of its own and the flat name ``build()`` also takes it by; the string
under the field is its documentation (``--help`` and the docs' tables, read by :mod:`unstable.utils.fields`
without importing the module)::

    psro_every: int = setting(5, ge=1)
    \"\"\"For ``"psro"``: the meta-game is solved after every this many new learner checkpoints.\"\"\"

:func:`check_fields` validates a config object against its fields' declarations and :func:`check_value`
one value, with the messages of :mod:`unstable.utils.checks`. What they check: ``bool``, ``int``,
``float`` and ``Literal`` fields always (a bool is no number; numbers are finite; an integer fits 64
bits), a ``str`` field when its ``setting`` says ``what`` it is (then it must not be blank); ``| None``
allows ``None``. A rule between fields stays a small named method of its config.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from unstable.utils.checks import check_bool, check_choice, check_int, check_number, check_positive, check_str

_BOUNDS = ("ge", "gt", "le", "lt")
YAML_WORDS = {False: "off", True: "on"}
"""What YAML 1.1 reads as a bool (an unquoted ``off``/``on``): a choice among words takes the word back."""


def setting(default: Any = dataclasses.MISSING, *, factory: Any = None, flat: str | None = None,
            what: str | None = None, check: Any = None, **bounds: float) -> Any:
    """A dataclass field declaring a setting: its ``default`` (or ``factory()``), the bounds ``ge``, ``gt``,
    ``le``, ``lt`` of a number, ``flat``: the name build() takes it by when the field sits in a section,
    ``what``: how the error for a bad string describes the value wanted, ``check(name, value)``: a rule of its
    own, for a value that passed the others (not ``None``)."""
    unknown = set(bounds) - set(_BOUNDS)
    if unknown:
        raise TypeError(f"setting() takes the bounds {_BOUNDS}, not {sorted(unknown)}")
    meta = {k: v for k, v in {"flat": flat, "what": what, "check": check, **bounds}.items() if v is not None}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def choices(hint: Any) -> tuple[Any, ...]:
    """The values a ``Literal[...]`` annotation allows."""
    return get_args(hint)


@cache
def type_hints(cls: type) -> dict[str, Any]:
    """``cls``'s field annotations, evaluated once per class."""
    return get_type_hints(cls)


def _kind(hint: Any) -> tuple[Any, bool]:
    """The annotation without ``None``, and whether it allows ``None``."""
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else Any), len(args) < len(get_args(hint))
    return hint, hint is Any


def check_value(name: str, value: Any, hint: Any, meta: Any = None) -> Any:
    """``value`` checked against a field's annotation ``hint`` and :func:`setting` metadata ``meta``, the
    error naming it ``name``; returns it, a YAML ``off`` read as false given back as the word (see
    :data:`YAML_WORDS`)."""
    return _check(name, value, *_kind(hint), meta or {})


def _checked(kind: Any, meta: Any) -> bool:
    if "check" in meta or (kind is str and "what" in meta):
        return True
    return kind in (bool, int, float) or get_origin(kind) is Literal


def _check(name: str, value: Any, kind: Any, optional: bool, meta: Any) -> Any:
    if value is None and optional:
        return None
    if get_origin(kind) is Literal:
        if isinstance(value, bool) and YAML_WORDS[value] in get_args(kind):
            value = YAML_WORDS[value]
        check_choice(name, value, get_args(kind))
    elif kind is bool:
        check_bool(name, value, allow_none=optional)
    elif kind is int:
        low = meta["gt"] + 1 if "gt" in meta else meta.get("ge")
        check_int(name, value, low, maximum=meta.get("le"), allow_none=optional)
    elif kind is float and [k for k in _BOUNDS if k in meta] == ["gt"] and meta["gt"] == 0:
        check_positive(name, value)
    elif kind is float:
        low, high = meta.get("gt", meta.get("ge", -float("inf"))), meta.get("lt", meta.get("le", float("inf")))
        check_number(name, value, low, high, low_open="gt" in meta, high_open="lt" in meta, allow_none=optional)
    elif kind is str and "what" in meta:
        check_str(name, value, allow_none=optional, what=meta["what"])
    if "check" in meta:
        meta["check"](name, value)
    return value


@cache
def _plan(cls: type) -> tuple[tuple[str, Any, bool, Any], ...]:
    """The fields of ``cls`` that :func:`check_fields` checks: (name, type without None, None allowed, metadata)."""
    hints = type_hints(cls)
    plan = [(f.name, *_kind(hints[f.name]), f.metadata) for f in dataclasses.fields(cls)]
    return tuple(entry for entry in plan if _checked(entry[1], entry[3]))


def check_fields(config: Any) -> None:
    """Every field of the dataclass ``config`` checked against its declaration (see the module docstring); an
    error names the field by its name (:func:`relabel` renames it as the user gave it)."""
    for name, kind, optional, meta in _plan(type(config)):
        value = getattr(config, name)
        checked = _check(name, value, kind, optional, meta)
        if checked is not value:
            object.__setattr__(config, name, checked)  # frozen configs too: this is their construction


def flat_names(cls: type) -> dict[str, str]:
    """``cls``'s fields by the flat name build() takes each by (``flat=`` in its :func:`setting`)."""
    return {f.metadata["flat"]: f.name for f in dataclasses.fields(cls) if "flat" in f.metadata}


def relabel(message: str, labels: dict[str, str]) -> str:
    """A check's ``message``, which starts with the name of the setting it is about, naming that setting by
    ``labels[name]`` instead (how the user gave it: ``gradient_clipping`` for ``grad_clip``)."""
    head = re.match(r"(unknown )?([A-Za-z_]\w*)", message)
    if head is None or head.group(2) not in labels:
        return message
    return (head.group(1) or "") + labels[head.group(2)] + message[head.end():]


def unknown_names(what: str, names: list, known: Any) -> str:
    """The message for ``names`` that are not among ``known``: each with its closest known name, if any."""
    known = sorted(known, key=str)
    hints = [f"{m[0]!r} for {k!r}" for k in names if (m := difflib.get_close_matches(str(k), known, 1))]
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    return f"unknown {what} {sorted(names, key=str)}{hint}; known: {known}"


def section(cls: type, value: Any, where: str) -> Any:
    """The config ``cls`` from ``value``: itself, a mapping of its fields, or ``None`` (its defaults); a value of
    another kind, or an unknown field, is an error naming ``where`` the section sits."""
    if value is None or isinstance(value, cls):
        return cls() if value is None else value
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping of its settings or None, got {type(value).__name__}")
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    extra = [k for k in value if k not in known]
    if extra:
        raise ValueError(f"{where}: " + unknown_names("settings", extra, known))
    return cls(**value)
