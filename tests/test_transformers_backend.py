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


@pytest.mark.parametrize(("kv_cache", "calls"), [("static", 2), ("dynamic", 1)])
def test_a_batch_with_more_adapters_than_max_loras_is_stacked_in_parts(tiny_model_dir, adapters, tmp_path, kv_cache,
                                                                       calls):
    """As vLLM's ``max_loras``: at most that many adapters stacked in one static-cache generate call
    ({a1, a2} with the base rows, then {a3}); eager decoding takes each adapter's rows on their own,
    stacks nothing, and keeps the batch whole."""
    third = make_adapter(tiny_model_dir, tmp_path / "a3", seed=3)
    paths = (adapters[0], None, adapters[1], third, adapters[0], None)
    requests = [GenerationRequest(PROMPT, path, GREEDY) for path in paths]
    b = TransformersBackend(tiny_model_dir, max_loras=2, kv_cache=kv_cache)
    try:
        alone = [b.generate_batch([req])[0].sample.completion_ids for req in requests]
        before = b.stats()["batches"]
        together = b.generate_batch(requests)
        assert b.stats()["batches"] - before == calls
        assert [r.sample.completion_ids for r in together] == alone
        assert len(set(alone)) == 4
    finally:
        b.close()


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


# ----------------------------------------------------------------------------- requests fail one by one
def corrupt_adapter(good: str, out) -> str:
    """A copy of ``good`` whose weights file is garbage: it has a config, so it looks like an adapter."""
    shutil.copytree(good, out)
    (out / "adapter_model.safetensors").write_bytes(b"not safetensors " * 64)
    return str(out)


def test_a_corrupt_adapter_fails_its_own_requests_and_the_rest_of_the_batch_generates(tiny_model_dir, adapters,
                                                                                     tmp_path):
    b = TransformersBackend(tiny_model_dir, max_batch_size=16, batch_wait_ms=50)
    bad = corrupt_adapter(adapters[0], tmp_path / "corrupt")
    paths = [adapters[0], bad, None, bad, adapters[1]]
    expected = {p: b.generate_batch([GenerationRequest(PROMPT, p, GREEDY)])[0].sample.completion_ids
                for p in (None, *adapters)}

    async def together():
        return await asyncio.gather(*(b.generate(GenerationRequest(PROMPT, p, GREEDY)) for p in paths),
                                    return_exceptions=True)

    before = b.stats()
    outcomes = asyncio.run(together())
    assert b.stats()["batches"] - before["batches"] == 1  # one batch: the good rows were not retried alone
    for path, outcome in zip(paths, outcomes, strict=True):
        if path == bad:
            assert isinstance(outcome, RuntimeError)
            assert f"could not load the LoRA adapter {bad!r}" in str(outcome)
        else:
            assert outcome.sample.completion_ids == expected[path] and outcome.sample.text
    # the failed load left nothing behind, and is not tried again until the files change
    assert sorted(b.loaded_adapters()) == sorted(adapters)
    assert b.stats()["adapter_load_failures"] == 1
    with pytest.raises(RuntimeError, match="could not load the LoRA adapter"):
        b.generate_batch([GenerationRequest(PROMPT, bad, GREEDY)])
    assert b.stats()["adapter_load_failures"] == 1
    b.close()


def test_a_corrupt_first_adapter_leaves_the_base_model_as_it_was(tiny_model_dir, adapters, tmp_path):
    """The first adapter wraps the model's layers; a failed first load must not leave anything in it."""
    from unstable.inference.multi_lora import MultiLoraLinear

    b = TransformersBackend(tiny_model_dir)
    expected = b.generate_batch([GenerationRequest(PROMPT, None, GREEDY)])[0].sample.completion_ids
    shutil.copytree(adapters[0], tmp_path / "wrong-rank")
    config = json.loads((tmp_path / "wrong-rank" / "adapter_config.json").read_text())
    config["r"] = 8  # the weights are rank 4
    (tmp_path / "wrong-rank" / "adapter_config.json").write_text(json.dumps(config))
    wrong = GenerationRequest(PROMPT, str(tmp_path / "wrong-rank"), GREEDY)
    outcomes = b.generate_outcomes([wrong, GenerationRequest(PROMPT, None, GREEDY)])
    assert "rank 8 for" in str(outcomes[0]) and outcomes[1].sample.completion_ids == expected
    left = [key for key, module in b.model.named_modules() if isinstance(module, MultiLoraLinear)]
    assert not left and not b._lora.adapters, f"the failed adapter's layers are still in the model: {left[:2]}"
    b.close()


def test_requests_with_a_bad_prompt_or_bad_sampling_fail_alone(backend):
    from dataclasses import replace

    good = GenerationRequest(PROMPT, None, GREEDY)
    too_long = GenerationRequest("board " * 5000, None, GREEDY)
    no_sampling = replace(good, sampling={"temperature": 0})
    outcomes = backend.generate_outcomes([too_long, good, no_sampling, good])
    assert isinstance(outcomes[0], ValueError) and "does not fit" in str(outcomes[0])
    assert isinstance(outcomes[2], TypeError) and "SamplingParams" in str(outcomes[2])
    assert outcomes[1].sample.completion_ids == outcomes[3].sample.completion_ids != ()


def test_a_batch_whose_generate_fails_is_retried_so_only_the_guilty_request_fails(tiny_model_dir, adapters,
                                                                                  monkeypatch):
    """An error of ``generate`` itself (an adapter whose weights break the forward pass, out of
    memory) fails only the requests it can be pinned on; another adapter's requests still run."""
    b = TransformersBackend(tiny_model_dir)
    requests = [GenerationRequest(PROMPT, p, GREEDY) for p in (adapters[0], adapters[1], None, adapters[1])]
    expected = b.generate_batch(requests)
    generate = b._generate_rows

    def fails_with_adapter_1(rows):
        if any(row.request.adapter_path == adapters[1] for row in rows):
            raise RuntimeError("CUDA out of memory (pretend)")
        return generate(rows)

    monkeypatch.setattr(b, "_generate_rows", fails_with_adapter_1)
    outcomes = b.generate_outcomes(requests)
    assert [str(o) for o in (outcomes[1], outcomes[3])] == ["CUDA out of memory (pretend)"] * 2
    assert [o.sample.completion_ids for o in (outcomes[0], outcomes[2])] == [
        expected[0].sample.completion_ids, expected[2].sample.completion_ids]
    assert b.stats()["batch_retries"] >= 1 and b.stats()["failed_requests"] == 2
    b.close()
