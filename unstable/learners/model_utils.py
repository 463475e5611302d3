"""Loading the base model, attaching LoRA adapters, and finding their parameters."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

POLICY_ADAPTER = "default"  # PEFT's name for the adapter saved at the checkpoint root
_DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}


def resolve_device(device: str | None) -> torch.device:
    """``None`` -> ``cuda`` if available else ``cpu``."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """``None`` -> bf16 on CUDA, fp32 elsewhere; otherwise one of ``_DTYPES``."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def lora_config(lora_cfg: dict[str, Any]) -> LoraConfig:
    """PEFT ``LoraConfig`` from the seed's dict (``lora_rank``, ``lora_alpha``, ...)."""
    return LoraConfig(
        r=lora_cfg["lora_rank"],
        lora_alpha=lora_cfg["lora_alpha"],
        lora_dropout=lora_cfg["lora_dropout"],
        target_modules=list(lora_cfg["target_modules"]),
        bias="none",
        task_type="CAUSAL_LM",
    )


def load_base_model(
    model_name: str, device: torch.device, dtype: torch.dtype, gradient_checkpointing: bool,
    attn_implementation: str | None = None,
) -> PreTrainedModel:
    """The frozen base model on ``device`` (no KV cache, optional per-layer checkpointing), with the
    attention kernel ``attn_implementation`` (``None``: transformers' default)."""
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype, **extra)
    model.to(device)
    model.config.use_cache = False
    model.requires_grad_(False)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def attach_policy_adapter(base: PreTrainedModel, lora_cfg: dict[str, Any], initial_lora_path: str | None) -> PeftModel:
    """Wrap ``base`` with a trainable LoRA adapter named ``default``: new, or loaded from a path."""
    if initial_lora_path is not None:
        return PeftModel.from_pretrained(base, initial_lora_path, is_trainable=True)
    return get_peft_model(base, lora_config(lora_cfg))


@torch.no_grad()
def copy_adapter(model: nn.Module, source: str, target: str) -> None:
    """Copy the LoRA weights of adapter ``source`` into adapter ``target`` (same shapes), in place."""
    copied = 0
    for module in model.modules():
        for kind in ("lora_A", "lora_B"):
            layers = getattr(module, kind, None)
            if isinstance(layers, nn.ModuleDict) and source in layers and target in layers:
                layers[target].weight.copy_(layers[source].weight)
                copied += 1
    if not copied:
        raise ValueError(f"no LoRA layers hold both adapter {source!r} and {target!r}")


def add_saved_or_copied_adapter(model: PeftModel, name: str, checkpoint: str | None, trainable: bool) -> None:
    """Add adapter ``name``: the one ``checkpoint`` keeps in its subfolder ``name`` (a resume), else a copy of
    the policy adapter (a new run). The magnet (``reference``) and NFSP's ``average`` start this way."""
    saved = Path(checkpoint or "") / name
    if checkpoint and saved.is_dir():
        model.load_adapter(str(saved), adapter_name=name, is_trainable=trainable)
    else:
        model.add_adapter(name, copy.deepcopy(model.peft_config[POLICY_ADAPTER]))
        copy_adapter(model, POLICY_ADAPTER, name)


def adapter_parameters(model: nn.Module, adapter_name: str) -> list[nn.Parameter]:
    """The LoRA parameters of one adapter (matched by name: ``...lora_A.<adapter>.weight``)."""
    params = []
    for name, param in model.named_parameters():
        parts = name.split(".")
        if adapter_name in parts and any(p.startswith("lora_") for p in parts):
            params.append(param)
    if not params:
        raise ValueError(f"no LoRA parameters found for adapter {adapter_name!r}; check target_modules")
    return params


def reset_policy_adapter(model: PeftModel, adapter_path: str | None = None) -> None:
    """Set the policy adapter's weights in place (the optimiser keeps its parameters): to the adapter
    saved at ``adapter_path``, which must have the same LoRA shape, or (``None``) to a fresh LoRA
    initialisation: ``lora_B`` zero, so the policy is the base model again, ``lora_A`` drawn anew."""
    if adapter_path is None:
        layers = [m for m in model.modules() if hasattr(m, "reset_lora_parameters") and POLICY_ADAPTER in m.lora_A]
        if not layers:
            raise ValueError(f"no LoRA layers of adapter {POLICY_ADAPTER!r} to reset")
        for layer in layers:
            layer.reset_lora_parameters(POLICY_ADAPTER, True)
        return
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    weights = load_peft_weights(adapter_path, device="cpu")
    mine = {name for name, _ in model.named_parameters() if f".{POLICY_ADAPTER}." in name and "lora_" in name}
    result = set_peft_model_state_dict(model, weights, adapter_name=POLICY_ADAPTER)
    missing = sorted(k for k in result.missing_keys if k in mine)
    if result.unexpected_keys or missing or not weights:
        raise ValueError(f"the adapter at {adapter_path} does not fit this model's LoRA adapter (same base model, "
                         f"lora_rank and target_modules needed): unexpected {sorted(result.unexpected_keys)[:3]}, "
                         f"missing {missing[:3]}")


@contextmanager
def lora_compute(model: PeftModel, base_dtype: torch.dtype, setting: str = "base") -> Iterator[None]:
    """Forward passes in which the LoRA products run in bfloat16 like the frozen weights, while the
    LoRA weights (what the optimiser steps), their gradients and the optimiser state stay float32:
    mixed precision as ``torch.autocast`` gives it (the HF Trainer's and TRL's ``bf16=True``), with
    PEFT's cast of each LoRA layer's input to the weights' float32 switched off.

    PEFT alone (``setting="float32"``) casts the input of every adapted layer to float32 and adds
    float32 ``[tokens, out]`` products to the bfloat16 output: per adapted layer, about
    ``6 * in + 30 * out`` bytes of memory traffic per token besides the matmuls, more than the
    frozen matmul itself takes on a GPU; here about ``12 * out``. A no-op unless ``base_dtype`` is
    bfloat16 (float16 would need a gradient scaler; float32 has nothing to gain). Backward passes
    need no context: autograd replays the casts the forward recorded."""
    if setting == "float32" or base_dtype != torch.bfloat16:
        yield
        return
    from peft.helpers import disable_input_dtype_casting

    device_type = next(model.parameters()).device.type
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16), disable_input_dtype_casting(model):
        yield


def decoder_body(model: PeftModel) -> nn.Module:
    """The transformer body (no LM head) with the LoRA layers injected, e.g. ``Qwen3Model``."""
    return model.get_base_model().base_model


def supports_logits_to_keep(model: PeftModel) -> bool:
    """Whether the causal-LM forward accepts ``logits_to_keep`` (skips prompt-position logits)."""
    return "logits_to_keep" in inspect.signature(model.get_base_model().forward).parameters


def pad_token_id(model: PreTrainedModel) -> int:
    """Any in-vocabulary id works (padding is masked); prefer the model's own pad/eos id."""
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(model.config, attr, None)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int) and 0 <= value < vocab_size(model):
            return value
    return 0


def vocab_size(model: PreTrainedModel) -> int:
    """Rows of the input embedding (the ids a step may contain)."""
    return model.get_input_embeddings().weight.shape[0]


def plain_lm_head(model: PeftModel) -> bool:
    """Whether the logits are exactly ``lm_head(final hidden state)`` with a plain ``nn.Linear``
    head: no LoRA on it and no logit soft-cap or scale after it (what the chunked head computes)."""
    config = model.get_base_model().config.get_text_config()
    after_head = any(getattr(config, name, None) not in (None, 1.0)
                     for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"))
    return type(model.get_output_embeddings()) is nn.Linear and not after_head


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Load a saved optimiser's moments and step counts, keeping this run's settings (``lr``, ``eps``,
    ``weight_decay``, ...): torch's ``load_state_dict`` also brings back the saved param groups'
    settings, so a run resumed with another ``adam_eps`` or ``average_learning_rate`` kept the old one."""
    settings = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, own in zip(optimizer.param_groups, settings, strict=True):
        group.update(own)
