"""The table of ``unstable.build()``'s parameters, made from the configs when the docs are built.

Each flat parameter is a field of a config section declared with its flat name
(:data:`unstable.run.arguments.FLAT_ARGUMENTS`), whose default and docstring are read from its source
(:data:`unstable.run.arguments.DECLARED`), the same text ``unstable train --help`` prints. So the table
cannot drift from the code.
"""

from __future__ import annotations

from pathlib import Path

from unstable.run.arguments import DECLARED, FLAT_ARGUMENTS, MODEL, RUN_FIELDS, nested_place
from unstable.run.config import INFERENCE_DEFAULTS


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(section: str, field) -> str:
    if section == MODEL and field.name == "model_name":
        return "required"
    if section == "inference" and field.name in INFERENCE_DEFAULTS:  # build()'s, not the inference config's
        return f"`{INFERENCE_DEFAULTS[field.name]!r}`"
    if field.default is None and "None" not in field.annotation:
        return "see the text"  # a default made by a factory or computed from other settings
    return f"`{field.default!r}`"


def build_parameter_rows() -> list[tuple[str, str, str, str]]:
    """(parameter, where it goes in the nested form, default, what it does) for every build() keyword."""
    rows = []
    for flat, (section, name) in FLAT_ARGUMENTS.items():
        field = DECLARED[section][name]
        rows.append((f"`{flat}`", f"`{nested_place(flat)}`", _default(section, field), _cell(field.summary)))
    for name in RUN_FIELDS:
        field = DECLARED["run"][name]
        rows.append((f"`{name}`", f"`{name}`", _default("run", field), _cell(field.summary)))
    return rows


def write_build_parameters(path: Path) -> None:
    lines = ["| parameter | nested form | default | what it sets |", "| --- | --- | --- | --- |"]
    lines += [f"| {p} | {w} | {d} | {t} |" for p, w, d, t in build_parameter_rows()]
    _write_if_changed(path, "\n".join(lines) + "\n")


def public_name_rows() -> list[tuple[str, str]]:
    """(name, the module that defines it) for every name ``import unstable`` exposes."""
    import unstable

    return [(name, module) for name, module in unstable._LAZY.items()]


def write_public_names(path: Path) -> None:
    lines = ["| name | defined in |", "| --- | --- |"]
    lines += [f"| {{py:obj}}`unstable.{name} <{_canonical(name, module)}>` | `{module}` |"
              for name, module in public_name_rows()]
    _write_if_changed(path, "\n".join(lines) + "\n")


def _canonical(name: str, module: str) -> str:
    """Where autodoc documents ``name``: the module that defines it (a package may re-export it)."""
    import importlib

    obj = getattr(importlib.import_module(module), name)
    return f"{getattr(obj, '__module__', module)}.{name}"


def _write_if_changed(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:  # unchanged: keep the mtime, so Sphinx does not rebuild
        path.write_text(text)
