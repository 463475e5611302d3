"""Will this model, adapter or device work? Cheap checks, run once before any actor starts.

A model that cannot be loaded, an adapter that does not fit it, or a device that is not there
otherwise fails inside an actor, or worse, does not fail: a directory without tokenizer files gives
an empty tokenizer, and every game of the run fails. So before Ray starts, :func:`check_model`
reads a model's ``config.json``, loads its tokenizer and encodes a probe with it, opens the headers
of its weight files (``safetensors`` reads the header without the weights) and builds the model on
the ``meta`` device (no memory) to learn its module names and shapes. That takes a fraction of a
second for the tiny models and is cached per directory (and its files' sizes and times) within a
process. A Hub id is looked up in the local cache first; with ``HF_HUB_OFFLINE`` set it must be
there, and otherwise the Hub is asked once, without retries, so an unreachable Hub fails in
seconds with a message instead of retrying inside every actor. The weights of a Hub model are not
downloaded to check them.

:func:`check_target_modules` and :func:`check_adapter` compare LoRA settings and adapter
directories with that description of the model; :func:`check_device` asks torch whether a device
exists on this machine.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass
from typing import Any

from unstable.local_models.resolve import check_adapter_dir, read_json

PROBE_TEXT = "Hello, world! [4]"
"""Encoded by every model's tokenizer: an empty one gives no tokens for it."""
ADAPTER_PREFIX = "base_model.model."
"""How PEFT prefixes the module names in an adapter's weight keys."""
LORA_WEIGHTS = re.compile(r"(?P<module>.+)\.lora_(?P<part>[AB])(?:\.[^.]+)?\.weight")


@dataclass(frozen=True)
class ModelInfo:
    """What the checks learned about a model: its name and the modules a LoRA adapter may target."""

    name: str
    linear: dict[str, tuple[int, int]]
    """Each linear module's full name -> (in_features, out_features)."""
    targetable: frozenset[str]
    """The full names of every module PEFT can put a LoRA layer on (linear, embedding, conv)."""

    def candidates(self) -> list[str]:
        """The distinct last parts of the linear modules' names: what ``target_modules`` usually lists."""
        return sorted({name.rsplit(".", 1)[-1] for name in self.linear})


_CHECKED: dict[tuple, ModelInfo] = {}  # (path or Hub id, what the check depends on) -> what it found


def check_model(name: str, what: str = "model_name") -> ModelInfo:
    """Check that ``name`` (a local model directory or a Hub id) loads: config, tokenizer, weights.

    Raises ``ValueError`` naming ``what`` and the cause; returns the model's :class:`ModelInfo`.
    """
    local = os.path.isdir(name)
    key = (os.path.abspath(name), _signature(name)) if local else (name, _hub_signature())
    if key not in _CHECKED:
        _CHECKED[key] = _check_local_model(key[0], what) if local else _check_hub_model(name, what)
    return _CHECKED[key]


def check_target_modules(info: ModelInfo, modules: Any, what: str, *, all_needed: bool = True) -> None:
    """Every LoRA target module (``all_needed``; else at least one, as PEFT asks) must be in the model."""
    if isinstance(modules, str):  # PEFT: a regular expression matched against the full names
        if not any(re.fullmatch(modules, m) for m in info.targetable):
            raise ValueError(f"{what} {modules!r} matches no module of the model {info.name!r}; its linear "
                             f"modules: {info.candidates()}")
        return
    missing = [m for m in modules if not any(_matches(name, m) for name in info.targetable)]
    if missing and (all_needed or len(missing) == len(modules)):
        raise ValueError(f"{what} names {missing}, which the model {info.name!r} does not have; its linear "
                         f"modules: {info.candidates()}")


def check_adapter(path: str, what: str, base: ModelInfo | None = None) -> None:
    """A LoRA adapter directory that loads, and (given the base model's ``base``) fits that model.

    Beyond :func:`~unstable.local_models.resolve.check_adapter_dir` (a directory with a JSON
    ``adapter_config.json`` and weights): the config describes a LoRA adapter, the weight file is
    readable, and every LoRA matrix sits on a module of the base model with matching shapes.
    """
    check_adapter_dir(path, what)
    config = read_json(os.path.join(path, "adapter_config.json"), f"{what} {path!r}")
    peft_type = config.get("peft_type")
    if peft_type != "LORA":
        raise ValueError(f"{what} {path!r}: adapter_config.json says peft_type={peft_type!r}, but only LoRA "
                         "adapters (peft_type 'LORA', as PEFT saves them) can be played")
    rank, modules = config.get("r"), config.get("target_modules")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"{what} {path!r}: adapter_config.json has r={rank!r}; a LoRA rank is an integer >= 1")
    if not (isinstance(modules, str) and modules) and not (
            isinstance(modules, list) and modules and all(isinstance(m, str) and m for m in modules)):
        raise ValueError(f"{what} {path!r}: adapter_config.json has target_modules={modules!r}; "
                         "a list of module names was expected")
    shapes = _adapter_shapes(path, what)
    if base is None:
        return
    check_target_modules(base, modules, f"{what} {path!r}: its adapter_config.json target_modules",
                         all_needed=False)
    for key, shape in shapes.items():
        match = LORA_WEIGHTS.fullmatch(key)
        if match is None:
            continue
        module = match["module"].removeprefix(ADAPTER_PREFIX)
        if module not in base.linear:
            raise ValueError(f"{what} {path!r} holds {key}, for a module {module!r} that the base model "
                             f"{base.name!r} does not have: the adapter was trained on another base model")
        fan_in, fan_out = base.linear[module]
        wanted = fan_in if match["part"] == "A" else fan_out
        got = shape[-1] if match["part"] == "A" else shape[0]
        if len(shape) != 2 or got != wanted:
            side = "inputs" if match["part"] == "A" else "outputs"
            raise ValueError(f"{what} {path!r} holds {key} of shape {list(shape)}, but {module} of the base model "
                             f"{base.name!r} has {wanted} {side}: the adapter was trained on another base model")


def check_device(device: str | None, what: str = "learner_device") -> None:
    """A device string (``cpu``, ``cuda[:N]``, ``xpu[:N]``, ``mps``) that exists on this machine."""
    if device is None or device == "cpu":
        return
    import torch

    kind, _, index = device.partition(":")
    if kind == "mps":
        available, count = torch.backends.mps.is_available(), 1
    else:
        backend = getattr(torch, kind, None)
        available = backend is not None and backend.is_available()
        count = backend.device_count() if available else 0
    if not available:
        raise ValueError(f"{what}={device!r}, but torch finds no {kind} device on this machine: use 'cpu', or "
                         f"None (cuda if available, else cpu)")
    if index and int(index) >= count:
        raise ValueError(f"{what}={device!r}, but this machine has {count} {kind} device(s), "
                         f"{kind}:0 to {kind}:{count - 1}")


def _matches(module: str, key: str) -> bool:
    """PEFT's rule for a name in ``target_modules``: the module's full name, or its tail after a dot."""
    return module == key or module.endswith("." + key)


def _signature(path: str) -> tuple:
    """What a cached check of a directory depends on: its files' names, sizes and modification times."""
    out = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        stat = entry.stat()
        out.append((entry.name, stat.st_size, stat.st_mtime_ns))
    return tuple(out)


def _hub_signature() -> tuple:
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE, constants.ENDPOINT, constants.HF_HUB_CACHE


def _check_local_model(path: str, what: str) -> ModelInfo:
    label = f"{what} {path!r}"
    config = _load_config(path, label)
    _check_tokenizer(path, label)
    model = _meta_model(config, label)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    for file in _weight_files(path, label):
        _check_weight_file(file, shapes, label)
    return _describe(model, path)


def _check_hub_model(name: str, what: str) -> ModelInfo:
    label = f"{what} {name!r}"
    _find_on_hub(name, label)
    config = _load_config(name, label)
    _check_tokenizer(name, label)
    return _describe(_meta_model(config, label), name)


def _find_on_hub(name: str, label: str) -> None:
    """A Hub id must be in the local cache, or (not offline) answer one request, without retries."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, HFValidationError, RepositoryNotFoundError

    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except HFValidationError:
        raise ValueError(f"{label} is neither a local directory nor a Hugging Face Hub id ('org/name')") from None
    if constants.HF_HUB_OFFLINE:
        raise ValueError(f"{label} is not a local directory and not in the Hugging Face cache, and HF_HUB_OFFLINE "
                         f"is set: download it first (hf download {name}), pass a local model directory, or unset "
                         "HF_HUB_OFFLINE")
    try:
        get_hf_file_metadata(hf_hub_url(name, "config.json"), timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except GatedRepoError:
        raise ValueError(f"{label} is a gated model on the Hugging Face Hub: accept its terms on the Hub and log in "
                         "(hf auth login), or pass a local model directory") from None
    except RepositoryNotFoundError:
        raise ValueError(f"{label} is neither a local directory nor a model on the Hugging Face Hub "
                         f"({constants.ENDPOINT}); check the name, or log in if it is private") from None
    except EntryNotFoundError:
        raise ValueError(f"{label} on the Hugging Face Hub has no config.json, so it is not a transformers "
                         "model") from None
    except Exception as exc:  # the one request failed otherwise: no network, DNS, TLS, a timeout, a 5xx
        raise ValueError(f"{label} is not a local directory and not in the Hugging Face cache, and the Hub "
                         f"({constants.ENDPOINT}) cannot be reached ({type(exc).__name__}: {exc}): download it "
                         "where there is a network, or pass a local model directory") from None


def _load_config(source: str, label: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{label}: transformers cannot read its config.json ({type(exc).__name__}: "
                         f"{_first_line(exc)})") from None


def _check_tokenizer(source: str, label: str) -> None:
    """The tokenizer loads and encodes text into tokens that are not all special ones."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{label}: its tokenizer does not load ({type(exc).__name__}: {_first_line(exc)}); "
                         "copy the tokenizer files (tokenizer.json, tokenizer_config.json) from the base "
                         "model") from None
    ids = tokenizer(PROBE_TEXT)["input_ids"]
    if not [i for i in ids if i not in set(tokenizer.all_special_ids)]:
        found = sorted(os.listdir(source)) if os.path.isdir(source) else []
        raise ValueError(f"{label}: its tokenizer is empty ({PROBE_TEXT!r} encodes to {ids}, vocabulary of "
                         f"{len(tokenizer)}), so every game would fail; the directory holds {found}: copy the "
                         "tokenizer files (tokenizer.json, tokenizer_config.json) from the base model")


def _meta_model(config: Any, label: str) -> Any:
    """The model built from its config on the meta device: names and shapes, no memory, no weights."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError, ImportError, RuntimeError) as exc:
        raise ValueError(f"{label}: transformers cannot build a causal language model from its config.json "
                         f"(model_type {getattr(config, 'model_type', None)!r}; {type(exc).__name__}: "
                         f"{_first_line(exc)})") from None


def _describe(model: Any, name: str) -> ModelInfo:
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    linear, targetable = {}, set()
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            linear[module_name] = (module.in_features, module.out_features)
        elif isinstance(module, Conv1D):  # GPT-2's linear layers, weight stored transposed
            linear[module_name] = tuple(module.weight.shape)
        if isinstance(module, nn.Linear | Conv1D | nn.Embedding | nn.Conv1d | nn.Conv2d | nn.Conv3d):
            targetable.add(module_name)
    return ModelInfo(name=name, linear=linear, targetable=frozenset(targetable))


def _weight_files(path: str, label: str) -> list[str]:
    """The weight files transformers would load from a directory (safetensors first), all present."""
    for index, single in (("model.safetensors.index.json", "model.safetensors"),
                          ("pytorch_model.bin.index.json", "pytorch_model.bin")):
        if os.path.isfile(os.path.join(path, index)):
            weight_map = read_json(os.path.join(path, index), label).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError(f"{label}: {index} has no weight_map")
            shards = sorted(set(weight_map.values()))
            missing = [s for s in shards if not os.path.isfile(os.path.join(path, s))]
            if missing:
                raise ValueError(f"{label}: {index} names weight files that are missing: {missing}")
            return [os.path.join(path, s) for s in shards]
        if os.path.isfile(os.path.join(path, single)):
            return [os.path.join(path, single)]
    raise ValueError(f"{label} has no weights (model.safetensors, pytorch_model.bin or a sharded index); the "
                     f"directory holds {sorted(os.listdir(path))}")


def _check_weight_file(file: str, shapes: dict[str, tuple[int, ...]], label: str) -> None:
    """A safetensors header that reads and fits the model's shapes; a .bin that is a torch zip archive."""
    if not file.endswith(".safetensors"):
        if not zipfile.is_zipfile(file):
            raise ValueError(f"{label}: {os.path.basename(file)} is not a PyTorch weights file (not a zip "
                             "archive): the file is damaged; copy it again")
        return
    for key, shape in _safetensors_shapes(file, label).items():
        if key in shapes and shapes[key] != shape:
            raise ValueError(f"{label}: {os.path.basename(file)} holds {key} of shape {list(shape)}, but the "
                             f"model its config.json describes has {list(shapes[key])}: config and weights are "
                             "of different models")


def _safetensors_shapes(file: str, label: str) -> dict[str, tuple[int, ...]]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(file, "pt") as handle:
            names = handle.keys()
            return {key: tuple(handle.get_slice(key).get_shape()) for key in names}
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{label}: {os.path.basename(file)} is not a readable safetensors file ({exc}): the "
                         "file is damaged; copy it again") from None


def _adapter_shapes(path: str, what: str) -> dict[str, tuple[int, ...]]:
    """The adapter's weight names and shapes, read from the safetensors header or the .bin archive."""
    label = f"{what} {path!r}"
    file = os.path.join(path, "adapter_model.safetensors")
    if os.path.isfile(file):
        return _safetensors_shapes(file, label)
    file = os.path.join(path, "adapter_model.bin")
    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{label}: adapter_model.bin is not a readable PyTorch weights file ({_first_line(exc)}): "
                         "the file is damaged; copy it again") from None
    if not isinstance(state, dict):
        raise ValueError(f"{label}: adapter_model.bin does not hold a dict of tensors")
    return {k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")}


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]
