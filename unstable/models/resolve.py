"""Model names: any HF id or local path, plus ``tiny`` / ``tiny:<size>`` for the built-in tiny models."""

from __future__ import annotations

import os


def resolve_model_name(name: str, *, seed: int = 0) -> str:
    """Map ``"tiny"`` or ``"tiny:10m"`` to a cached local build; return anything else unchanged.

    A local path that does not exist is rejected here with a clear message, rather than being
    sent to the model hub (which this library never contacts at run time).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    if name == "tiny" or name.startswith("tiny:"):
        from unstable.models.tiny import tiny_model_path

        size = name.split(":", 1)[1] if ":" in name else "1m"
        return str(tiny_model_path(size, seed=seed))
    looks_local = name.startswith(("/", "./", "../", "~")) or os.sep in name.strip("/").split("/", 1)[-1]
    expanded = os.path.expanduser(name)
    if looks_local and not os.path.isdir(expanded):
        raise FileNotFoundError(f"model path {name!r} does not exist")
    return expanded if os.path.isdir(expanded) else name
