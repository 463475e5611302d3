"""Adapters in memory: the transformers backend serves an adapter from its bytes (new slot, or tensors
swapped into a full cache's slot) exactly as from its directory; the registry and the inference actor
hand adapters over without the run directory; ``checkpoint_transport`` is validated."""

import asyncio
import json
import shutil

import pytest
import torch
from conftest import make_adapter, small_run_kwargs

from unstable.inference.actor import InferenceActor
from unstable.inference.adapters import PAYLOADS_PER_LORA, AdapterPayload, read_adapter, resolve_transport
from unstable.inference.base import GenerationRequest, SamplingParams
from unstable.inference.transformers_backend import TransformersBackend
from unstable.registry import ModelRegistry

PROMPT = "<|im_start|>user\nObservation: board [4]<|im_end|>\n<|im_start|>assistant\n"
GREEDY = SamplingParams(temperature=0, max_new_tokens=10)


def outputs(backend, path):
    result = backend.generate_batch([GenerationRequest(PROMPT, path, GREEDY)])[0]
    return result.sample.completion_ids, torch.tensor(result.sample.completion_logprobs)


def same(a, b):
    return a[0] == b[0] and torch.allclose(a[1], b[1], atol=1e-5)


class CountingStore:
    """A local adapter store: the payload is its own handle; counts what was put."""

    def __init__(self):
        self.puts = []

    def put(self, payload):
        self.puts.append(payload.source)
        return payload


@pytest.fixture(scope="module")
def moved_adapters(adapters, tmp_path_factory):
    """The session's adapters read into memory, then their directories gone: only the bytes remain."""
    root = tmp_path_factory.mktemp("moved")
    payloads = []
    for i, path in enumerate(adapters):
        copy = shutil.copytree(path, root / f"ckpt-{i + 1}")
        payload = read_adapter(copy)
        shutil.rmtree(copy)
        payloads.append(payload)
    return payloads


def test_an_adapter_served_from_memory_equals_the_same_adapter_loaded_from_disk(
        backend, adapters, moved_adapters, tiny_model_dir):
    mem = TransformersBackend(tiny_model_dir, batch_wait_ms=0)
    try:
        for path, payload in zip(adapters, moved_adapters, strict=True):
            mem.add_adapter(payload.source, payload)  # its directory no longer exists
            assert mem.has_adapter(payload.source)
            assert same(outputs(mem, payload.source), outputs(backend, path))
        assert not same(outputs(mem, moved_adapters[0].source), outputs(mem, None))  # the adapter is in use
        assert mem.stats()["adapter_loads"] == 2
    finally:
        mem.close()


def test_a_full_cache_evicts_the_oldest_adapter_and_reloads_it_from_its_bytes(backend, adapters, moved_adapters,
                                                                                tiny_model_dir):
    """One slot: the second adapter evicts the first one's tensors, but its bytes stay (the payloads of
    ``PAYLOADS_PER_LORA`` adapters a slot), so it is loaded again without a fetch. Payloads go least
    recently used first; one whose tensors and bytes are both gone must be fetched again."""
    mem = TransformersBackend(tiny_model_dir, batch_wait_ms=0, max_loras=1)
    try:
        first, second = moved_adapters
        mem.add_adapter(first.source, first)
        assert same(outputs(mem, first.source), outputs(backend, adapters[0]))
        mem.add_adapter(second.source, second)
        assert same(outputs(mem, second.source), outputs(backend, adapters[1]))
        assert mem.stats()["adapter_evictions"] == 1 and mem.stats()["loaded_adapters"] == 1
        assert mem.has_adapter(first.source)  # its tensors are gone, its bytes are not
        assert same(outputs(mem, first.source), outputs(backend, adapters[0]))  # loaded again from them
        assert mem.stats()["adapter_loads"] == 3 and mem.stats()["adapter_evictions"] == 2
        others = [f"other-{i}" for i in range(PAYLOADS_PER_LORA - 1)]
        for name in others:  # the payloads are now full, and `second` was used least recently
            mem.add_adapter(name, second)
        assert not mem.has_adapter(second.source)  # neither its tensors nor its bytes are left: fetched again
        assert mem.has_adapter(first.source)
        outputs(mem, others[0])  # evicts the first adapter's tensors
        mem.add_adapter("one-more", second)
        assert not mem.has_adapter(first.source)
        mem.add_adapter(first.source, first)
        assert same(outputs(mem, first.source), outputs(backend, adapters[0]))  # and back
    finally:
        mem.close()


def test_adapters_of_different_ranks_share_a_batch(adapters, tiny_model_dir, tmp_path):
    """A rank-8 adapter beside rank-4 ones: the stacks grow to rank 8, the rank-4 adapters are padded with
    zeros, and every row of one mixed batch gets what it gets alone."""
    rank8 = read_adapter(make_adapter(tiny_model_dir, tmp_path / "r8", seed=3, rank=8))
    mem = TransformersBackend(tiny_model_dir, batch_wait_ms=0)
    try:
        mem.add_adapter("a1", read_adapter(adapters[0]))
        alone = {path: outputs(mem, path) for path in ("a1", None)}  # stacked at rank 4
        mem.add_adapter("r8", rank8)
        alone["r8"] = outputs(mem, "r8")
        results = mem.generate_batch([GenerationRequest(PROMPT, p, GREEDY) for p in ("r8", "a1", None, "r8")])
        for path, result in zip(("r8", "a1", None, "r8"), results, strict=True):
            assert same((result.sample.completion_ids, torch.tensor(result.sample.completion_logprobs)), alone[path])
        assert len({alone[p][0] for p in alone}) == 3  # three different policies
    finally:
        mem.close()


def test_tensors_made_for_another_model_fail_that_request_alone(adapters, tiny_model_dir):
    payload = read_adapter(adapters[0])
    state = payload.state_dict()
    state = {k.replace("q_proj", "no_such_proj"): v for k, v in state.items()}
    from safetensors.torch import save

    broken = AdapterPayload("broken", {**payload.files, "adapter_model.safetensors": save(state)})
    mem = TransformersBackend(tiny_model_dir, batch_wait_ms=0)
    try:
        mem.add_adapter("broken", broken)
        mem.add_adapter("good", payload)
        results = mem.generate_outcomes([GenerationRequest(PROMPT, "broken", GREEDY),
                                         GenerationRequest(PROMPT, "good", GREEDY)])
        assert isinstance(results[0], RuntimeError) and "fit no layer" in str(results[0])
        assert results[1].sample.completion_ids == outputs(mem, "good")[0]
    finally:
        mem.close()


def test_the_registry_hands_out_the_published_handle_or_reads_the_files_once(adapters):
    registry = ModelRegistry()
    assert registry.adapter_handle(adapters[0]) is None  # no store: inference loads the path itself
    store = CountingStore()
    registry.set_adapter_store(store)
    published = read_adapter(adapters[0])
    registry.add_checkpoint("ckpt-1", adapters[0], 1, adapter=published)
    assert registry.adapter_handle(adapters[0]) is published and store.puts == [adapters[0]]
    old = registry.adapter_handle(adapters[1])  # e.g. a checkpoint of the run this one resumed
    assert old.files == read_adapter(adapters[1]).files and store.puts == list(adapters)
    assert registry.adapter_handle(adapters[1]) is old and store.puts == list(adapters)
    with pytest.raises(FileNotFoundError, match="registry's node"):
        registry.adapter_handle("/nowhere/ckpt-9")
    json.dumps(registry.state_dict())  # the handles are not part of the saved state


def test_the_inference_actor_fetches_an_adapter_once_for_concurrent_requests(
        backend, adapters, moved_adapters, tiny_model_dir):
    registry = ModelRegistry()
    registry.set_adapter_store(CountingStore())
    payload = moved_adapters[0]
    registry.add_checkpoint("ckpt-1", payload.source, 1, adapter=payload)
    actor = InferenceActor("transformers", tiny_model_dir, adapter_source=registry, batch_wait_ms=0)

    async def play():
        return await asyncio.gather(*(actor.generate(GenerationRequest(PROMPT, payload.source, GREEDY))
                                      for _ in range(3)))

    try:
        results = asyncio.run(play())
        expected = outputs(backend, adapters[0])[0]
        assert all(r.sample.completion_ids == expected for r in results)
        assert actor.stats()["adapter_fetches"] == 1
    finally:
        actor.backend.close()


def test_an_actor_by_name_pickles_to_its_name_and_calls_the_actor(ray_session):
    """The inference actors take the registry by name: a handle among a restartable actor's
    constructor arguments stays in Ray's object store, where a restart may not find it."""
    import pickle

    from unstable.run.remote import ActorByName, actor_class
    from unstable.utils.calls import acall, call

    actor = actor_class(ModelRegistry).options(name="test-run/ModelRegistry").remote()
    copy = pickle.loads(pickle.dumps(ActorByName("test-run/ModelRegistry")))
    assert copy.name == "test-run/ModelRegistry" and copy._handle is None and "ModelRegistry" in repr(copy)
    assert call(copy, "add_fixed", "random") == "random"
    assert asyncio.run(acall(copy, "fixed_uids")) == ["random"]
    ray_session.kill(actor)


def test_checkpoint_transport_is_validated_before_ray(tiny_model_dir, tmp_path, no_ray):
    import unstable

    assert resolve_transport("auto") == "object_store" and resolve_transport("path") == "path"
    with pytest.raises(ValueError, match="checkpoint_transport must be one of"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, checkpoint_transport="s3"))
