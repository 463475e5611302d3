"""The FLOPs count behind the learner benchmark's MFU (benchmarks/flops.py), on hand-computed configs."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from flops import peak_bf16_flops, update_flops

sys.path.pop(0)


def test_update_flops_of_a_hand_computed_config():
    """h=4, 1 layer, MLP 8, vocabulary 10, 2 heads of 2, 1 KV head; LoRA rank 1 on q and v; one step
    of 3 tokens, 2 of them trained. Per token: N = 16 + 8 + 8 + 16 + 3 * 32 = 144 frozen weights;
    LoRA 1 * (4 + 4) + 1 * (4 + 2) = 14. Attention forward 4 * 2 * 2 * (1 + 2 + 3) = 96 for the step.
    Head forward 2 * 10 * 4 * 2 = 160. Model: (4 * 144 + 6 * 14) * 3 + 3 * 96 + 2 * 160 = 2588;
    hardware adds a forward (2 * 144 * 3 + 2 * 14 * 3 + 96 = 1044) and a head forward (160): 3792."""
    config = SimpleNamespace(hidden_size=4, num_hidden_layers=1, intermediate_size=8, vocab_size=10,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=2)
    got = update_flops(config, [3], 2, 1, ["q_proj", "v_proj"], gradient_checkpointing=True, chunked_head=True)
    assert got == {"model": 2588.0, "hardware": 3792.0}
    plain = update_flops(config, [3], 2, 1, ["q_proj", "v_proj"])
    assert plain["model"] == plain["hardware"] == 2588.0
    # two steps of 3 attend within themselves: twice one step, not one step of 6
    assert update_flops(config, [3, 3], 4, 1, ["q_proj", "v_proj"])["model"] == 2 * 2588.0
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        update_flops(config, [3], 2, 1, ["lm_head"])


def test_qwen3_1_7b_frozen_layers_are_its_1_4b_non_embedding_parameters():
    config = SimpleNamespace(hidden_size=2048, num_hidden_layers=28, intermediate_size=6144, vocab_size=151936,
                             num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    # one token, nothing trained, no LoRA: forward + input-gradient backward = 4N (+ one key of attention)
    flops = update_flops(config, [1], 0, 1, [])["model"]
    attention = 3 * 28 * 4 * 16 * 128 * 1
    assert (flops - attention) / 4 == pytest.approx(1.409e9, rel=1e-3)


@pytest.mark.parametrize(("name", "peak"), [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
                                            ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-80GB", 312e12),
                                            ("NVIDIA A10", 125e12), ("NVIDIA L40S", 362e12),
                                            ("NVIDIA GeForce GTX 1080", None)])
def test_peak_by_device_name(name, peak):
    assert peak_bf16_flops(name) == peak
