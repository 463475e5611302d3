"""The transformers backend: batching, mixed LoRA adapters, token ids and log-probs."""

import asyncio
import json
import shutil
import time

import pytest
import torch
from conftest import make_adapter
from peft import PeftModel
from transformers import AutoModelForCausalLM

from unstable.inference.base import GenerationRequest, SamplingParams
from unstable.inference.transformers_backend import TransformersBackend

PROMPT = "<|im_start|>user\nObservation: board [4]<|im_end|>\n<|im_start|>assistant\n"
GREEDY = SamplingParams(temperature=0, max_new_tokens=10)


def fresh_logprobs(model_dir, adapter, prompt_ids, completion_ids, temperature=1.0, top_p=1.0):
    """Teacher-forced log-probs of ``completion_ids`` at ``temperature``, renormalised over the
    ``top_p`` nucleus (the smallest set of most likely tokens whose probability reaches top_p)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter:
        model = PeftModel.from_pretrained(model, adapter)
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logp = (model(ids).logits[0, len(prompt_ids) - 1 : -1] / temperature).log_softmax(-1)
    if top_p < 1.0:
        probs, order = logp.exp().sort(-1, descending=True)
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        keep = torch.zeros_like(logp, dtype=torch.bool).scatter(-1, order, before < top_p)
        logp = logp.masked_fill(~keep, float("-inf")).log_softmax(-1)
    return logp.gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1)


def test_mixed_adapter_batch_matches_single_requests_and_a_fresh_forward_pass(backend, adapters, tiny_model_dir):
    requests = [GenerationRequest(PROMPT, path, GREEDY) for path in (None, *adapters)]
    batch = backend.generate_batch(requests)
    assert len({r.sample.completion_ids for r in batch}) == 3  # the adapters really change the output
    for req, res in zip(requests, batch, strict=True):
        alone = backend.generate_batch([req])[0]
        assert alone.sample.completion_ids == res.sample.completion_ids
        assert res.sample.prompt_ids == tuple(backend.tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
        fresh = fresh_logprobs(tiny_model_dir, req.adapter_path, res.sample.prompt_ids, res.sample.completion_ids)
        assert torch.allclose(fresh, torch.tensor(res.sample.completion_logprobs), atol=1e-4)
        assert res.sample.text == backend.tokenizer.decode(res.sample.completion_ids, skip_special_tokens=True)


@pytest.mark.parametrize(("temperature", "top_p"), [(0.6, 1.0), (1.3, 1.0), (1.3, 0.9)])
def test_sampled_tokens_carry_the_logprobs_of_the_distribution_they_were_drawn_from(
    backend, adapters, tiny_model_dir, temperature, top_p
):
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=12)
    res = backend.generate_batch([GenerationRequest(PROMPT, adapters[0], sampling, policy_version=4)])[0]
    ids = (adapters[0], res.sample.prompt_ids, res.sample.completion_ids)
    fresh = fresh_logprobs(tiny_model_dir, *ids, temperature=temperature, top_p=top_p)
    assert torch.allclose(fresh, torch.tensor(res.sample.completion_logprobs), atol=1e-4)
    # ... which is not the model at temperature 1: the behaviour policy is the tempered one
    assert not torch.allclose(fresh_logprobs(tiny_model_dir, *ids), fresh, atol=1e-3)
    assert (res.sample.temperature, res.sample.top_p, res.sample.policy_version) == (temperature, top_p, 4)


def test_finish_reasons_and_per_request_length(backend):
    short = SamplingParams(temperature=0, max_new_tokens=3)
    longer = SamplingParams(temperature=0, max_new_tokens=9)
    a, b = backend.generate_batch([GenerationRequest(PROMPT, None, short), GenerationRequest(PROMPT, None, longer)])
    assert len(a.sample.completion_ids) == 3 and a.sample.finish_reason == "length"
    assert b.sample.completion_ids[:3] == a.sample.completion_ids  # same greedy path, cut at its own limit
    assert all(tok not in backend.eos_ids for tok in a.sample.completion_ids)


def test_stop_finish_includes_the_eos_token(backend, tiny_model_dir, tmp_path):
    # Declare the token the model greedily emits third as its end-of-sequence token (in the
    # model's own generation_config.json), so generation must stop right after it.
    third = backend.generate_batch([GenerationRequest(PROMPT, None, GREEDY)])[0].sample.completion_ids[2]
    shutil.copytree(tiny_model_dir, tmp_path / "m")
    config_path = tmp_path / "m" / "generation_config.json"
    config = json.loads(config_path.read_text())
    config["eos_token_id"] = [third]
    config_path.write_text(json.dumps(config))
    b = TransformersBackend(str(tmp_path / "m"))
    res = b.generate_batch([GenerationRequest(PROMPT, None, SamplingParams(temperature=0, max_new_tokens=20))])[0]
    b.close()
    assert res.sample.finish_reason == "stop" and res.sample.completion_ids[-1] == third
    assert third not in res.sample.completion_ids[:-1] and len(res.sample.completion_ids) <= 3
    assert len(res.sample.completion_logprobs) == len(res.sample.completion_ids)


def test_async_requests_from_many_games_share_batches(backend, adapters):
    before = backend.stats()

    async def many():
        reqs = [GenerationRequest(f"{PROMPT} {i}", (None, *adapters)[i % 3], GREEDY) for i in range(16)]
        return await asyncio.gather(*(backend.generate(r) for r in reqs))

    results = asyncio.run(many())
    after = backend.stats()
    assert len(results) == 16 and all(r.sample.completion_ids for r in results)
    assert after["requests"] - before["requests"] == 16
    assert after["batches"] - before["batches"] <= 4  # batched, not one call per request


def test_adapter_rewritten_in_place_is_reloaded_not_served_stale(tiny_model_dir, tmp_path):
    b = TransformersBackend(tiny_model_dir)
    path = make_adapter(tiny_model_dir, tmp_path / "live", seed=10)
    first = b.generate_batch([GenerationRequest(PROMPT, path, GREEDY)])[0]
    time.sleep(0.01)
    shutil.rmtree(path)
    make_adapter(tiny_model_dir, tmp_path / "live", seed=11)
    second = b.generate_batch([GenerationRequest(PROMPT, path, GREEDY)])[0]
    expected = TransformersBackend(tiny_model_dir).generate_batch([GenerationRequest(PROMPT, path, GREEDY)])[0]
    assert second.sample.completion_ids == expected.sample.completion_ids != first.sample.completion_ids
    assert b.stats()["adapter_loads"] == 2


def test_adapter_cache_is_bounded(tiny_model_dir, adapters):
    b = TransformersBackend(tiny_model_dir, max_loras=1)
    one = b.generate_batch([GenerationRequest(PROMPT, adapters[0], GREEDY)])[0]
    b.generate_batch([GenerationRequest(PROMPT, adapters[1], GREEDY)])
    assert len(b.loaded_adapters()) == 1 and b.stats()["adapter_evictions"] == 1
    again = b.generate_batch([GenerationRequest(PROMPT, adapters[0], GREEDY)])[0]
    assert again.sample.completion_ids == one.sample.completion_ids  # reloaded after eviction, same weights
    # A batch that needs more adapters than the bound still runs (nothing it uses is evicted).
    mixed = b.generate_batch([GenerationRequest(PROMPT, a, GREEDY) for a in adapters])
    assert len(mixed) == 2


def test_errors_reach_the_waiting_caller(backend, tmp_path):
    async def bad():
        return await backend.generate(GenerationRequest(PROMPT, str(tmp_path / "missing"), GREEDY))

    with pytest.raises(FileNotFoundError, match="no PEFT adapter"):
        asyncio.run(bad())
    with pytest.raises(ValueError, match="does not fit"):
        backend.generate_batch([GenerationRequest("board " * 5000, None, GREEDY)])


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_p": 0}, {"max_new_tokens": 0}])
def test_bad_sampling_params(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_bad_backend_config(tiny_model_dir):
    with pytest.raises(ValueError, match="max_batch_size"):
        TransformersBackend(tiny_model_dir, max_batch_size=0)
    with pytest.raises(ValueError, match="dtype"):
        TransformersBackend(tiny_model_dir, dtype="int8")
