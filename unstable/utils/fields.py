"""Command-line options made from a config dataclass's fields and their docstrings.

A config's fields are documented once, by the string under each field (as in
:class:`~unstable.learners.config.LearnerConfig`). The CLI builds its options from those strings,
so ``--help`` cannot drift from the config. The class is read from its source file with ``ast``,
not imported: the CLI starts without loading torch, which most configs' modules import.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TYPES = {"int": int, "float": float, "str": str}


@dataclass(frozen=True, slots=True)
class FieldDoc:
    """One field of a config class as its source declares it."""

    name: str
    annotation: str
    default: Any
    doc: str
    meta: dict = field(default_factory=dict)
    """The literal keywords of its :func:`~unstable.utils.schema.setting` (``flat``, the bounds ...)."""

    @property
    def summary(self) -> str:
        """The docstring's first paragraph on one line."""
        return " ".join(self.doc.split("\n\n")[0].split())


def source_file(module: str) -> Path:
    """The source file of ``module``, found without importing it or its parent packages
    (``importlib.util.find_spec("a.b.c")`` imports ``a.b``, whose ``__init__`` may load torch)."""
    top, *parts = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module {module!r}")
    path = Path(spec.origin)
    for part in parts:
        if path.name != "__init__.py":
            raise ImportError(f"no module {module!r} ({path} is not a package)")
        package, plain = path.parent / part / "__init__.py", path.parent / f"{part}.py"
        path = package if package.is_file() else plain
        if not path.is_file():
            raise ImportError(f"no module {module!r}")
    return path


def field_docs(module: str, class_name: str) -> dict[str, FieldDoc]:
    """The annotated fields of ``module.class_name`` with their defaults (literal ones; else None) and docs."""
    origin = source_file(module)
    tree = ast.parse(origin.read_text(encoding="utf-8"), filename=str(origin))
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if node is None:
        raise ImportError(f"{module} has no class {class_name!r}")
    fields: dict[str, FieldDoc] = {}
    body = node.body
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        nxt = body[i + 1] if i + 1 < len(body) else None
        doc = ""
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            doc = nxt.value.value.strip()
        name = stmt.target.id
        default, meta = _default_and_meta(stmt.value)
        fields[name] = FieldDoc(name, ast.unparse(stmt.annotation), default, doc, meta)
    return fields


def _literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _default_and_meta(value: ast.expr | None) -> tuple[Any, dict]:
    """A field's literal default and, when it is declared by ``setting(default, flat=..., ge=...)``, the
    literal keywords of that call."""
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "setting":
        default = _literal(value.args[0]) if value.args else None
        return default, {k.arg: _literal(k.value) for k in value.keywords if k.arg}
    return _literal(value), {}


def add_field_options(parser: argparse.ArgumentParser, module: str, class_name: str, names: list[str],
                      prefix: str = "") -> None:
    """Add ``--<prefix><name>`` (dashes for underscores) for each field in ``names``.

    Each option's type is the field's (``int``, ``float``, ``str``, optionally ``| None``), its help is
    the field's docstring with the default, and its parsed default is ``None``, meaning "not given":
    the caller applies only the options given, and the config checks their values.
    """
    docs = field_docs(module, class_name)
    for name in names:
        if name not in docs:
            raise KeyError(f"{module}.{class_name} has no field {name!r}")
        field = docs[name]
        if not field.doc:
            raise ValueError(f"{module}.{class_name}.{name} has no docstring to make its --help from")
        base = field.annotation.split("|")[0].strip()
        base = "str" if base.startswith("Literal[") else base  # a choice of words: the config checks which
        if base not in _TYPES:
            raise TypeError(f"{module}.{class_name}.{name}: no command-line type for {field.annotation!r}")
        default = "" if field.default is None else f" (default: {field.default})"
        help_text = (field.summary + default).replace("%", "%%")  # argparse formats help with %
        parser.add_argument(f"--{prefix}{name}".replace("_", "-"), type=_TYPES[base], default=None,
                            dest=f"{prefix}{name}", metavar=base.upper(), help=help_text)
