"""Old names, in one place, each with the version that removes it.

Two kinds: UnstableBaselines 0.1's training API (``ModelPool``, ``StandardLearner``, ``Collector``'s 0.1
keywords: :mod:`unstable.legacy.compat`), and module paths that moved (:data:`MOVED`). An old path still
imports as the very module it moved to, and ``python -m unstable.terminal_interface`` (the seed's
dashboard) still runs, through an import hook installed by ``import unstable``; importing one warns
(``DeprecationWarning``) with its new path and the version in :data:`REMOVED_IN`. Code in ``unstable``
itself imports only the new paths (``tests/test_legacy.py`` checks it), so removing an old name is
deleting its row, and ``compat.py`` with the last 0.1 script that needs it.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

REMOVED_IN = "0.5.0"
"""The version that removes the old names below (0.1's API in :mod:`unstable.legacy.compat` too)."""
MOVED = {  # old module path -> where it lives now
    "unstable.compat": "unstable.legacy.compat",
    "unstable.terminal_interface": "unstable.ui.terminal_interface",
    "unstable.models.resolve": "unstable.local_models.resolve",
    "unstable.models.tiny": "unstable.local_models.tiny",
    "unstable.eval.metagame": "unstable.samplers.metagame",
}


class _MovedModules:  # a meta path finder and loader (no importlib.abc base: it costs `import unstable` 8 ms)
    """Finds an old path of :data:`MOVED` and loads it as the module it moved to, the same object;
    ``get_code`` serves ``python -m <old path>``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        return ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: Any) -> ModuleType:
        warnings.warn(f"{spec.name} is {MOVED[spec.name]} now; the old name is removed in {REMOVED_IN}",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module it moved to is imported already."""

    def get_code(self, fullname: str) -> Any:
        """The code of the module ``fullname`` moved to."""
        import importlib.util

        spec = importlib.util.find_spec(MOVED[fullname])
        return spec.loader.get_code(MOVED[fullname])


def install() -> None:
    """Make the old paths importable (once per interpreter; ``import unstable`` calls it)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())  # first: it answers for the old paths alone
