"""LoRA adapters as bytes in memory: how a checkpoint reaches inference actors without a shared disk.

An :class:`AdapterPayload` is an adapter directory's files (``adapter_config.json`` and the weights)
read into memory. With ``checkpoint_transport="object_store"`` (see :func:`resolve_transport`) the
learner reads the checkpoint it has just written into one, the run's wiring puts it into Ray's object
store (owned by the registry actor, so it outlives learner restarts), and an inference actor asked
for that adapter fetches it from there (see :class:`~unstable.inference.actor.InferenceActor`): the
transformers backend copies the tensors into its multi-LoRA layers, vLLM (which loads LoRA from a
path) writes the files once into a node-local cache directory. No node needs the run directory.
Either engine keeps the payloads of its ``PAYLOADS_PER_LORA * max_loras`` most recently used
adapters, so an adapter evicted from the engine's ``max_loras`` slots is loaded again from there: a
league that samples from more past checkpoints than there are slots does not fetch each one again
from the object store every time it comes back.

Plain Python: the object store is behind the opaque handles the wiring gives the registry and the
inference actors (:mod:`unstable.run.remote`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstable.utils.schema import check_fields, relabel, setting, unknown_names

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
CHECKPOINT_TRANSPORTS = ("auto", "object_store", "path")
"""``path``: inference actors load adapters from the checkpoint directory (every node needs it: one
machine, or a shared filesystem). ``object_store``: adapters travel through Ray's object store.
``auto``: ``object_store`` (it is cheaper on one machine too; see benchmarks/README.md)."""
PAYLOADS_PER_LORA = 4
"""An engine keeps the payloads (files in memory, or their node-local copies) of this many times its
``max_loras`` adapters: past checkpoints a league comes back to are not fetched again."""


def check_module_names(name: str, modules: Any) -> None:
    """A ``target_modules`` value: a non-empty list (or tuple) of module names; the error names it ``name``."""
    if not isinstance(modules, list | tuple) or not modules or not all(isinstance(m, str) and m for m in modules):
        raise ValueError(f"{name} must be a non-empty list of module names such as ['q_proj', 'v_proj'], "
                         f"got {modules!r}")


@dataclass
class LoraSettings:
    """A LoRA adapter's settings: a learner's ``lora_cfg``, build()'s ``lora_config`` (as a mapping)."""

    lora_rank: int = setting(32, ge=1)
    """The rank ``r`` of each update ``B @ A``."""
    lora_alpha: float = setting(32, gt=0)
    """The update's scale is ``lora_alpha / lora_rank``."""
    lora_dropout: float = setting(0.0, ge=0, lt=1)
    """Dropout on the adapter's input in training."""
    target_modules: list[str] = setting(factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                         "up_proj", "down_proj"], check=check_module_names)
    """The linear modules adapted, by name (PEFT's ``target_modules``)."""

    def __post_init__(self) -> None:
        check_fields(self)


DEFAULT_LORA_CFG: dict[str, Any] = dataclasses.asdict(LoraSettings())


def complete_lora_cfg(lora_cfg: Any, name: str = "lora_cfg") -> dict[str, Any]:
    """``lora_cfg`` (a mapping of :class:`LoraSettings` fields, or ``None``) checked, with the defaults filled
    in; errors name a key as ``name['key']``."""
    if lora_cfg is None:
        lora_cfg = {}
    if not isinstance(lora_cfg, dict):
        raise ValueError(f"{name} must be a dict or None, got {type(lora_cfg).__name__}")
    known = list(DEFAULT_LORA_CFG)
    extra = sorted(set(lora_cfg) - set(known), key=str)
    if extra:
        raise ValueError(unknown_names(f"{name} keys", extra, known))
    try:
        cfg = dataclasses.asdict(LoraSettings(**lora_cfg))
    except ValueError as exc:
        raise ValueError(relabel(str(exc), {k: f"{name}['{k}']" for k in known})) from None
    cfg["target_modules"] = list(cfg["target_modules"])
    return cfg


@dataclass(frozen=True, slots=True)
class AdapterPayload:
    """One adapter's files in memory: ``source`` is where they were read (the key inference uses)."""

    source: str
    files: dict[str, bytes]

    def config(self) -> dict[str, Any]:
        """The parsed ``adapter_config.json`` (PEFT's LoRA settings)."""
        return json.loads(self.files[CONFIG_FILE])

    def weights_file(self) -> str:
        """The name of the weights file held (``adapter_model.safetensors`` before ``adapter_model.bin``)."""
        return next(name for name in WEIGHT_FILES if name in self.files)

    def state_dict(self) -> dict[str, Any]:
        """The adapter's tensors as PEFT saved them (keys without the adapter's name)."""
        name = self.weights_file()
        if name.endswith(".safetensors"):
            from safetensors.torch import load

            return load(self.files[name])
        import io

        import torch

        return torch.load(io.BytesIO(self.files[name]), map_location="cpu", weights_only=True)

    @property
    def nbytes(self) -> int:
        """The total size of the files held, in bytes."""
        return sum(len(data) for data in self.files.values())

    def write_to(self, directory: str | Path) -> Path:
        """Write the files into ``directory`` (created; an existing one is left as it is): written
        into a temp dir beside it and renamed, so a reader never sees half of it."""
        target = Path(directory)
        if (target / CONFIG_FILE).is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        for name, data in self.files.items():
            (tmp / name).write_bytes(data)
        try:
            os.replace(tmp, target)
        except OSError:  # another writer got there first: theirs is the same adapter
            for child in tmp.iterdir():
                child.unlink()
            tmp.rmdir()
        return target


def read_adapter(path: str | Path) -> AdapterPayload:
    """The adapter at ``path`` (a PEFT adapter directory) as an :class:`AdapterPayload`."""
    root = Path(path)
    if not (root / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no PEFT adapter at {str(path)!r} ({CONFIG_FILE} missing)")
    weights = next((name for name in WEIGHT_FILES if (root / name).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f"no adapter weights at {str(path)!r} (none of {', '.join(WEIGHT_FILES)})")
    return AdapterPayload(str(path), {name: (root / name).read_bytes() for name in (CONFIG_FILE, weights)})


def resolve_transport(setting: str) -> str:
    """``"path"`` or ``"object_store"`` for a ``checkpoint_transport`` setting (validated)."""
    if setting not in CHECKPOINT_TRANSPORTS:
        raise ValueError(f"checkpoint_transport must be one of {', '.join(map(repr, CHECKPOINT_TRANSPORTS))}, "
                         f"got {setting!r}")
    return "object_store" if setting == "auto" else setting
