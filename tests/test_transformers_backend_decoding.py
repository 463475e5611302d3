"""The transformers backend's decoding: log-probs gathered on the device, the static KV cache (with
adapters, rows padded to a power of two) and its fallback to the dynamic cache."""

import logging

import pytest
import torch
from conftest import make_adapter

from unstable.inference.base import GenerationRequest, SamplingParams
from unstable.inference.transformers_backend import TransformersBackend, chosen_logprobs

PROMPTS = ["<|im_start|>user\nObservation: board [4]<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nYou are X. Board:\n . | . | .\n . | X | .\n . | . | O\nYour move?<|im_end|>\n"
           "<|im_start|>assistant\n",
           "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]
GREEDY = SamplingParams(temperature=0, max_new_tokens=9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chosen_logprobs_equal_the_old_stacked_log_softmax(dtype):
    """Today's per-step gather against what the engine did before: stack every step's scores into
    [batch, steps, vocab], log-softmax in float32, gather the chosen tokens."""
    gen = torch.Generator().manual_seed(0)
    steps = [(torch.randn(3, 50, generator=gen) / 0.6).to(dtype) for _ in range(4)]
    for s in steps:  # top-p leaves -inf outside the nucleus
        s[:, 40:] = float("-inf")
    tokens = torch.randint(0, 40, (3, 4), generator=gen)
    old = torch.stack(steps, dim=1).float().log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    new = torch.stack([chosen_logprobs(s, tokens[:, t]) for t, s in enumerate(steps)], dim=1)
    assert new.dtype == torch.float32
    assert torch.allclose(new, old, atol=1e-6)
    assert torch.isfinite(new).all()


def test_chosen_logprobs_known_answer():
    """log_softmax([ln 0.1, ln 0.3, ln 0.6, -inf])[2] = ln 0.6."""
    scores = torch.tensor([[0.1, 0.3, 0.6, 0.0]]).log()
    assert chosen_logprobs(scores, torch.tensor([2])).item() == pytest.approx(torch.tensor(0.6).log().item(), abs=1e-7)


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    made = {kind: TransformersBackend(tiny_model_dir, kv_cache=kind, max_batch_size=16)
            for kind in ("static", "dynamic")}
    yield made
    for b in made.values():
        b.close()


def test_static_cache_gives_the_dynamic_caches_tokens_and_logprobs_with_adapters(engines, tiny_model_dir, tmp_path):
    """Three rows (padded to four with the static cache), two adapters and the base model in one batch."""
    adapter = make_adapter(tiny_model_dir, tmp_path / "a", 3)
    requests = [GenerationRequest(PROMPTS[0], None, GREEDY), GenerationRequest(PROMPTS[1], adapter, GREEDY),
                GenerationRequest(PROMPTS[2], adapter, GREEDY)]
    static = engines["static"].generate_batch(requests)
    dynamic = engines["dynamic"].generate_batch(requests)
    assert len(static) == 3
    for s, d in zip(static, dynamic, strict=True):
        assert s.sample.completion_ids == d.sample.completion_ids
        assert s.sample.prompt_ids == d.sample.prompt_ids  # the extra left padding is not the prompt
        assert torch.allclose(torch.tensor(s.sample.completion_logprobs), torch.tensor(d.sample.completion_logprobs),
                              atol=1e-4)
    assert engines["static"].decoding() == {"base": "static", "lora": "static"}  # no fallback was needed
    assert engines["static"].stats()["requests"] == 3  # the padding rows are not counted
    assert engines["dynamic"].decoding() == {"base": "dynamic", "lora": "dynamic"}


def test_auto_is_dynamic_on_cpu(tiny_model_dir):
    b = TransformersBackend(tiny_model_dir)
    assert b.decoding() == {"base": "dynamic", "lora": "dynamic"}
    b.close()
    with pytest.raises(ValueError, match="kv_cache must be"):
        TransformersBackend(tiny_model_dir, kv_cache="paged")


def test_a_failing_static_generate_falls_back_to_the_dynamic_cache_once_and_logs_it(tiny_model_dir, caplog,
                                                                                     monkeypatch):
    b = TransformersBackend(tiny_model_dir, kv_cache="static")
    real = b.model.generate
    calls = []

    def generate(**kwargs):
        calls.append(kwargs.get("cache_implementation"))
        if kwargs.get("cache_implementation") == "static":
            raise RuntimeError("compile failed (test)")
        return real(**kwargs)

    monkeypatch.setattr(b.model, "generate", generate)
    request = GenerationRequest(PROMPTS[0], None, GREEDY)
    with caplog.at_level(logging.WARNING, logger="unstable.inference.transformers_backend"):
        first = b.generate_batch([request])[0]
        second = b.generate_batch([request])[0]
    assert calls == ["static", None, None]  # tried once, then the dynamic cache for good
    assert first.sample.completion_ids == second.sample.completion_ids
    assert len(first.sample.completion_ids) > 0
    assert b.decoding() == {"base": "dynamic", "lora": "static"}  # batches with adapters still try it
    assert sum("static KV cache failed" in r.message for r in caplog.records) == 1
    b.close()


def test_a_batchs_own_error_does_not_turn_the_static_cache_off(tiny_model_dir, monkeypatch):
    b = TransformersBackend(tiny_model_dir, kv_cache="static")

    def generate(**kwargs):
        raise ValueError("this batch is broken (test)")

    monkeypatch.setattr(b.model, "generate", generate)
    with pytest.raises(ValueError, match="broken"):
        b.generate_batch([GenerationRequest(PROMPTS[0], None, GREEDY)])
    assert b.decoding()["base"] == "static"
    b.close()
