"""Old names live in unstable.legacy: each moved module path imports as the module it moved to (warning
with the version that removes it), the seed's ``python -m unstable.terminal_interface`` runs, and no code
in the package imports an old path."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import unstable
from unstable.legacy import MOVED, REMOVED_IN


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_path_is_the_module_it_moved_to(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is {new} now; the old name is removed in {REMOVED_IN}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_seed_s_dashboard_command_still_runs():
    out = subprocess.run([sys.executable, "-m", "unstable.terminal_interface", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


def test_the_package_imports_only_the_new_paths():
    root = Path(unstable.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if "legacy" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(root)}: {name}" for name in names if name in MOVED]
    assert not found
