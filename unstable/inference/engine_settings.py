"""The vLLM engine settings a ``vllm_config`` may carry besides the seed's keys, and their checks.

``vllm_config`` holds two kinds of keys: the seed's (``model_name``, ``temperature``, ``max_tokens``
... : :data:`unstable.inference.config.VLLM_CONFIG_KEYS`), which :class:`~unstable.inference.config.InferenceConfig`
reads, and vLLM engine settings, which go to vLLM's ``EngineArgs`` as they are. The engine settings
users reach for (:data:`ENGINE_SETTINGS`) are checked here for type and range, whether or not vLLM is
installed. Any other key must be a field of the installed vLLM's ``EngineArgs`` (an unknown one is
refused with the closest names, ``difflib``'s did-you-mean); where vLLM is not installed, only
:data:`ENGINE_SETTINGS` are accepted. The transformers backend uses ``dtype`` and ignores the rest.

All of this runs before Ray starts (``build()``'s config, the seed's ``Collector(vllm_config=...)``).
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Callable
from functools import cache
from typing import Any

from unstable.utils.checks import check_bool, check_choice, check_int, check_number, check_str

VLLM_CONFIG_KEYS = ("model_name", "temperature", "top_p", "max_tokens", "max_parallel_seq", "max_loras",
                    "max_model_len", "lora_config", "legal_moves_only")
"""The seed's own ``vllm_config`` keys (fields of :class:`~unstable.inference.config.InferenceConfig`)."""
DTYPES = ("auto", "float32", "bfloat16", "float16")
SHARED_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's own default share of a GPU's memory; an engine that holds a fraction ``f`` of a GPU (a GPU
it shares with the learner) defaults to ``f`` times this (0.45 on the one-GPU layout)."""


def _dtype(name: str, value: Any) -> None:
    if value is not None:
        check_choice(name, value, DTYPES)


def _optional_str(name: str, value: Any) -> None:
    check_str(name, value, allow_none=True)


ENGINE_SETTINGS: dict[str, Callable[[str, Any], None]] = {
    "gpu_memory_utilization": lambda n, v: check_number(n, v, 0, 1, low_open=True),
    "enforce_eager": check_bool,
    "enable_sleep_mode": check_bool,
    "tensor_parallel_size": lambda n, v: check_int(n, v, 1),
    "pipeline_parallel_size": lambda n, v: check_int(n, v, 1),
    "max_num_seqs": lambda n, v: check_int(n, v, 1),
    "max_num_batched_tokens": lambda n, v: check_int(n, v, 1, allow_none=True),
    "max_lora_rank": lambda n, v: check_int(n, v, 1),
    "dtype": _dtype,
    "kv_cache_dtype": _optional_str,
    "quantization": _optional_str,
    "enable_prefix_caching": lambda n, v: check_bool(n, v, allow_none=True),
    "enable_chunked_prefill": lambda n, v: check_bool(n, v, allow_none=True),
    "swap_space": lambda n, v: check_number(n, v, 0),
    "cpu_offload_gb": lambda n, v: check_number(n, v, 0),
    "block_size": lambda n, v: check_int(n, v, 1, allow_none=True),
    "seed": lambda n, v: check_int(n, v, 0, allow_none=True),
    "trust_remote_code": check_bool,
    "download_dir": _optional_str,
    "revision": _optional_str,
}
"""Engine settings checked here (type and range), by name: the ones users reach for."""

RESERVED = {
    "model": "use 'model_name'",
    "enable_lora": "the backend turns LoRA on for the adapters it serves",
    "max_cpu_loras": "it follows 'max_loras'",
    "worker_extension_cls": "the backend sets it (the CPU LoRA fix)",
    "logprobs_mode": "it must stay 'processed_logprobs' (a sample's log-probs are those of the distribution it "
                     "was drawn from)",
    "disable_log_stats": "the backend reports its own stats",
}
"""``EngineArgs`` fields the backend sets itself, and why a ``vllm_config`` may not."""


@cache
def vllm_engine_fields() -> frozenset[str] | None:
    """The field names of the installed vLLM's ``EngineArgs``; ``None`` where vLLM is not installed."""
    if importlib.util.find_spec("vllm") is None:
        return None
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    return frozenset(f.name for f in dataclasses.fields(EngineArgs))


def check_engine_settings(settings: dict[str, Any], where: str = "vllm_config",
                          fields: frozenset[str] | bool | None = True) -> None:
    """Check the engine settings of a ``vllm_config`` (``settings`` holds no seed key).

    ``fields`` is the ``EngineArgs`` field names to accept unknown keys from: ``True`` (default) asks
    the installed vLLM (:func:`vllm_engine_fields`), ``None`` means vLLM is not installed. Raises
    ``ValueError`` naming ``where[key]``, what is allowed and, for an unknown key, the closest names.
    """
    if not settings:
        return
    if fields is True:
        fields = vllm_engine_fields()
    for key, value in settings.items():
        if not isinstance(key, str):
            raise ValueError(f"{where} keys must be strings, got {key!r}")
        if key in RESERVED:
            raise ValueError(f"{where}[{key!r}] is set by unstable itself, so leave it out: {RESERVED[key]}")
        if key in ENGINE_SETTINGS:
            ENGINE_SETTINGS[key](f"{where}[{key!r}]", value)
    gone = sorted(k for k in settings if k in ENGINE_SETTINGS and fields is not None and k not in fields)
    if gone:  # known to unstable, but this vLLM version has no such engine setting (renamed or removed)
        raise ValueError(f"{where} keys {gone} are not settings of the installed vLLM (its EngineArgs has no such "
                         "field; renamed or removed in this version): leave them out, or see vLLM's engine arguments")
    unknown = sorted(k for k in settings if k not in ENGINE_SETTINGS and (fields is None or k not in fields))
    if not unknown:
        return
    ours = [*VLLM_CONFIG_KEYS, *ENGINE_SETTINGS]
    candidates = ours if fields is None else [*ours, *(f for f in fields if f not in RESERVED)]
    hints = [f"{m[0]!r} for {k!r}" for k in unknown if (m := difflib.get_close_matches(k, candidates, 1))]
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    if fields is None:
        raise ValueError(f"unknown {where} keys {unknown}{hint}; known: {sorted(ours)} (with vLLM installed, "
                         "also any field of vLLM's EngineArgs)")
    raise ValueError(f"unknown {where} keys {unknown}{hint}: neither a key of unstable's ({sorted(ours)}) nor a "
                     "field of the installed vLLM's EngineArgs")
