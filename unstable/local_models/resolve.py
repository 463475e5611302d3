"""Model names: any HF id or local path, plus ``tiny`` / ``tiny:<size>`` / ``tiny:<size>:seed<N>`` for
the built-in tiny models."""

from __future__ import annotations

import json
import os
import re


def is_tiny_name(name: object) -> bool:
    """Whether ``name`` names one of the built-in tiny models (``"tiny"`` or ``"tiny:..."``)."""
    return isinstance(name, str) and (name == "tiny" or name.startswith("tiny:"))


def resolve_tiny_name(name: str, *, seed: int = 0) -> str:
    """The local directory of the tiny model ``name`` names (built and cached on first use); any other name
    unchanged. The classes that load a model (learners, inference backends) call this, so ``"tiny"`` works
    wherever a model name is taken, not only in :func:`unstable.build`."""
    return resolve_model_name(name, seed=seed) if is_tiny_name(name) else name


def tiny_name_parts(name: str) -> tuple[str, int | None]:
    """A tiny model name's size and seed (``None``: not given); ``ValueError`` for a malformed one."""
    parts = name.split(":")
    if len(parts) > 3 or (len(parts) == 3 and not re.fullmatch(r"seed\d+", parts[2])):
        raise ValueError(f"model name {name!r}: the tiny models are 'tiny', 'tiny:<size>' or "
                         f"'tiny:<size>:seed<N>' (e.g. 'tiny:1m:seed1')")
    return (parts[1] if len(parts) > 1 else "1m"), (int(parts[2].removeprefix("seed")) if len(parts) == 3 else None)


def resolve_model_name(name: str, *, seed: int = 0) -> str:
    """Map ``"tiny"``, ``"tiny:10m"`` or ``"tiny:1m:seed1"`` (another random init of the same size:
    a different base model, e.g. for a second trainable model) to a cached local build; return
    anything else unchanged. ``seed`` is the build's seed when the name does not give one.

    A local path that does not exist is rejected here with a clear message, rather than being
    sent to the model hub (which this library never contacts at run time); so is a local directory
    that is not a Hugging Face model (no readable ``config.json``), see :func:`check_model_dir`.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    if is_tiny_name(name):
        from unstable.local_models.tiny import tiny_model_path

        size, named_seed = tiny_name_parts(name)
        return str(tiny_model_path(size, seed=seed if named_seed is None else named_seed))
    looks_local = name.startswith(("/", "./", "../", "~")) or os.sep in name.strip("/").split("/", 1)[-1]
    expanded = os.path.expanduser(name)
    if looks_local and not os.path.isdir(expanded):
        if os.path.exists(expanded):
            raise ValueError(f"model path {name!r} is a file; a model directory (with config.json) was expected")
        raise FileNotFoundError(f"model path {name!r} does not exist")
    if os.path.isdir(expanded):
        check_model_dir(expanded, name)
        return expanded
    return name


def read_json(path: str, what: str) -> dict:
    """The JSON object in ``path``; ``ValueError``, prefixed by ``what``, when the file cannot be read as JSON or
    holds something other than an object."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: {os.path.basename(path)} cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {os.path.basename(path)} must hold a JSON object")
    return data


def check_model_dir(path: str, name: str | None = None) -> None:
    """A local model directory must be a Hugging Face model: a readable ``config.json``, not a LoRA adapter."""
    what = f"model path {name or path!r}"
    if not os.path.isfile(os.path.join(path, "config.json")):
        hint = (" (it is a LoRA adapter: pass its base model as the model and the adapter separately)"
                if os.path.isfile(os.path.join(path, "adapter_config.json")) else "")
        raise ValueError(f"{what} has no config.json, so it is not a Hugging Face model directory{hint}")
    read_json(os.path.join(path, "config.json"), what)


def check_adapter_dir(path: str, what: str = "adapter") -> None:
    """A LoRA adapter directory must hold a readable ``adapter_config.json`` and the adapter weights."""
    if not os.path.isdir(path):
        raise ValueError(f"{what} {path!r} does not exist (a LoRA adapter directory was expected)")
    config = os.path.join(path, "adapter_config.json")
    if not os.path.isfile(config):
        raise ValueError(f"{what} {path!r} is not a PEFT LoRA adapter directory (no adapter_config.json)")
    read_json(config, f"{what} {path!r}")
    if not any(os.path.isfile(os.path.join(path, f)) for f in ("adapter_model.safetensors", "adapter_model.bin")):
        raise ValueError(f"{what} {path!r} has no adapter weights (adapter_model.safetensors or adapter_model.bin)")


def looks_like_path(name: str) -> bool:
    """Whether a name is meant as a local path (``/x``, ``./x``, ``../x``, ``~/x``) rather than a hub/API name."""
    return name.startswith(("/", "./", "../", "~")) or os.path.isdir(os.path.expanduser(name))
