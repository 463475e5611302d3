"""FLOPs of a LoRA learner update and the GPU's bf16 peak: model FLOPs utilisation (MFU).

Counted per token of a decoder-only transformer (Kaplan et al. 2020, "Scaling laws", table 1;
Chowdhery et al. 2022, PaLM appendix B, for the ``6N`` rule and attention), for an update that
trains LoRA adapters on a frozen base (a multiply-add is 2 FLOPs):

* the frozen linear layers (``N`` weights per token: q, k, v, o, gate, up, down of every layer):
  forward ``2N``, backward ``2N``: only the gradient with respect to the input, a frozen weight
  needs none (full fine-tuning would add another ``2N``, the familiar ``6N``);
* each LoRA pair on a projection ``d_in -> d_out`` of rank ``r``: ``2r(d_in + d_out)`` forward,
  the same for the input gradient and again for its own weight gradients: ``6r(d_in + d_out)``;
* causal attention of a step of ``L`` tokens: position ``i`` attends to ``i + 1`` keys, so the
  ``QK^T`` and ``PV`` products cost ``4 * heads * head_dim * (L + 1) / 2`` per token and layer
  forward and twice that backward (gradients of Q, K and V all flow back to the LoRA layers);
* the LM head (``V x H``, frozen) only at the scored completion positions: ``2VH`` forward and
  ``2VH`` backward per trained token.

"Model FLOPs" count that work once. "Hardware FLOPs" add what the update recomputes: one more
forward of every layer with gradient checkpointing, and one more head forward with the chunked
head (which recomputes each chunk's logits in backward).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# bf16 dense tensor-core peak, FLOP/s, from the vendors' data sheets; matched as a substring of
# torch.cuda.get_device_name() in this order (so "H100 PCIe" before "H100", "A100" before "A10").
PEAK_BF16 = (
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
)


def peak_bf16_flops(device_name: str) -> float | None:
    """The bf16 dense peak of a GPU by its name, or ``None`` when it is not in :data:`PEAK_BF16`."""
    for key, peak in PEAK_BF16:
        if key in device_name:
            return peak
    return None


def update_flops(config: Any, step_lengths: Sequence[int], trained_tokens: int, lora_rank: int,
                 lora_targets: Sequence[str], gradient_checkpointing: bool = False,
                 chunked_head: bool = False) -> dict[str, float]:
    """``{"model": ..., "hardware": ...}`` FLOPs of one update over steps of ``step_lengths`` tokens
    (each its own causal sequence), of which ``trained_tokens`` are scored by the LM head.

    ``config`` is a transformers config (``hidden_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
    ``vocab_size``); ``lora_targets`` the adapted projections by name.
    """
    h, layers, inter, vocab = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    shapes = {"q_proj": (h, heads * head_dim), "k_proj": (h, kv * head_dim), "v_proj": (h, kv * head_dim),
              "o_proj": (heads * head_dim, h), "gate_proj": (h, inter), "up_proj": (h, inter),
              "down_proj": (inter, h)}
    unknown = set(lora_targets) - set(shapes)
    if unknown:
        raise ValueError(f"unknown LoRA targets {sorted(unknown)}; known: {sorted(shapes)}")
    linear = layers * sum(d_in * d_out for d_in, d_out in shapes.values())  # N, per token
    lora = layers * sum(lora_rank * (shapes[t][0] + shapes[t][1]) for t in lora_targets)  # per token, x2 = fwd
    tokens = sum(step_lengths)
    attention_fwd = layers * sum(4 * heads * head_dim * n * (n + 1) / 2 for n in step_lengths)  # whole update
    forward = 2 * linear * tokens + 2 * lora * tokens + attention_fwd
    head_fwd = 2 * vocab * h * trained_tokens
    model = (4 * linear + 6 * lora) * tokens + 3 * attention_fwd + 2 * head_fwd
    hardware = model + (forward if gradient_checkpointing else 0.0) + (head_fwd if chunked_head else 0.0)
    return {"model": float(model), "hardware": float(hardware)}
