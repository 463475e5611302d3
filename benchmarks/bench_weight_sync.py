"""Weight sync: seconds from a checkpoint's registration to the first token served by the new version,
loaded from disk (``checkpoint_transport="path"``, before) and sent in memory (``"object_store"``, after).

For each of ``--versions`` new adapter versions (random LoRA of the run's default shape: rank 32,
alpha 32, on q,k,v,o,gate,up,down; written to disk beforehand, as the learner's checkpoints are),
timed from the moment the learner would publish it:

* ``path``: ``registry.add_checkpoint(path=ckpt-N)``, then one greedy 1-token request for ckpt-N.
  The inference actor loads the adapter from ckpt-N (transformers: reads the files and copies the
  tensors into its LoRA layers, the least recently used adapter dropped once ``--max-loras`` are
  loaded; vLLM: a new ``LoRARequest`` that the engine reads from disk).
* ``object_store``: the learner's side (read ckpt-N's files, send them with ``add_checkpoint``; the
  registry puts them into the store), then the same request. The inference actor fetches the files
  from the store; transformers copies the tensors into its LoRA layers as above, without the disk;
  vLLM writes them to a node-local cache directory and loads them from there.

``switch_s`` = that time minus the same request again right after (the new version already loaded):
what the new version itself costs. Rows are the medians over the versions that found a free slot
(``cold``) and over those that replaced one (``steady``: a long run, every version after the first
``--max-loras``). The two transports alternate version by version, so both see the same machine load.

transformers: both transports in a local Ray (``--no-ray``: in this process), each with its own
registry and inference actor (one CPU each). vLLM: in this process, one engine shared by both (two
engines do not fit a 2-core machine), ``object_store`` with a pickled copy standing in for Ray's store.

    .venv/bin/python benchmarks/bench_weight_sync.py                   # transformers, 1m and 10m, ~2 min
    .venv-vllm/bin/python benchmarks/bench_weight_sync.py --backend vllm
    .venv/bin/python benchmarks/bench_weight_sync.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import shutil
import statistics
import tempfile
import time

from common import add_common_args, machine, model_dir, quiet_libraries, write_result

quiet_libraries()

DEFAULT_LORA = {"r": 32, "lora_alpha": 32,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
PROMPT = "<|im_start|>user\nYou are playing TicTacToe. Your move?<|im_end|>\n<|im_start|>assistant\n"
TRANSPORTS = ("path", "object_store")


def make_versions(model_path: str, root: str, count: int) -> list[str]:
    """``count`` random adapters of the default shape, ``root/ckpt-1..count``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path)
    model = get_peft_model(base, LoraConfig(**DEFAULT_LORA, init_lora_weights=False))
    paths = []
    for v in range(1, count + 1):
        torch.manual_seed(v)
        for name, param in model.named_parameters():
            if "lora_" in name:
                torch.nn.init.normal_(param, std=0.02)
        path = os.path.join(root, f"ckpt-{v}")
        model.save_pretrained(path)
        paths.append(path)
    return paths


class PickledAdapter:
    """In-process stand-in for Ray's store: a serialized copy, deserialized on fetch."""

    def __init__(self, payload):
        self.data = pickle.dumps(payload, protocol=5)

    async def fetch(self):
        return pickle.loads(self.data)


class PickleStore:
    def put(self, payload):
        return PickledAdapter(payload)


def call_sync(obj, method: str, *args, **kwargs):
    from unstable.utils.calls import call

    out = call(obj, method, *args, **kwargs)
    return asyncio.run(out) if asyncio.iscoroutine(out) else out


def start_pair(transport: str, backend: str, model_path: str, max_loras: int, use_ray: bool, shared=None):
    """(registry, inference actor) for one transport: Ray actors, or local objects."""
    from unstable.inference.actor import InferenceActor
    from unstable.registry import ModelRegistry

    kwargs = {"max_loras": max_loras}
    if backend == "transformers":
        kwargs["batch_wait_ms"] = 0
    else:
        kwargs.update(max_lora_rank=DEFAULT_LORA["r"], max_model_len=512, max_batch_size=8)
    if use_ray:
        import ray

        from unstable.run.remote import ObjectStoreAdapters, actor_class

        registry = actor_class(ModelRegistry).options(num_cpus=0).remote()
        if transport == "object_store":
            ray.get(registry.set_adapter_store.remote(ObjectStoreAdapters()))
        actor = actor_class(InferenceActor).options(num_cpus=1, max_concurrency=100).remote(
            backend, model_path, adapter_source=registry if transport == "object_store" else None, **kwargs)
        ray.get(actor.ready.remote())
    else:
        registry = ModelRegistry()
        if transport == "object_store":
            registry.set_adapter_store(PickleStore())
        if shared is not None:  # one engine for both transports (vLLM)
            actor = object.__new__(InferenceActor)
            actor.__dict__.update(shared.__dict__)
            actor._fetches, actor.adapter_fetches = {}, 0
        else:
            actor = InferenceActor(backend, model_path, **kwargs)
        actor.adapter_source = registry if transport == "object_store" else None
    call_sync(registry, "add_checkpoint", uid="base", path=None, iteration=0)
    return registry, actor


def one_version(transport: str, registry, actor, version: int, path: str) -> dict:
    from unstable.inference.adapters import read_adapter
    from unstable.inference.base import GenerationRequest, SamplingParams

    request = GenerationRequest(PROMPT, path, SamplingParams(temperature=0, max_new_tokens=1), version)
    t0 = time.perf_counter()
    published = {"adapter": read_adapter(path)} if transport == "object_store" else {}
    call_sync(registry, "add_checkpoint", uid=f"ckpt-{version}", path=path, iteration=version, **published)
    t1 = time.perf_counter()
    call_sync(actor, "generate", request)
    t2 = time.perf_counter()
    call_sync(actor, "generate", request)
    t3 = time.perf_counter()
    return {"register_s": t1 - t0, "first_token_s": t2 - t1, "total_s": t2 - t0, "warm_token_s": t3 - t2,
            "switch_s": (t2 - t0) - (t3 - t2)}


def summarise(samples: list[dict], label: dict) -> dict:
    row = dict(label)
    row["versions"] = len(samples)
    for key in ("register_s", "first_token_s", "total_s", "warm_token_s", "switch_s"):
        row[key] = statistics.median(s[key] for s in samples)
    return row


def bench_arch(args, arch: str, versions: int, max_loras: int) -> list[dict]:
    path = model_dir(arch)
    tmp = tempfile.mkdtemp(prefix="bench-sync-")
    try:
        dirs = {t: make_versions(path, os.path.join(tmp, t), versions) for t in TRANSPORTS}  # one copy each
        use_ray = args.backend == "transformers" and not args.no_ray
        pairs, shared = {}, None
        for transport in TRANSPORTS:
            pairs[transport] = start_pair(transport, args.backend, path, max_loras, use_ray, shared)
            if args.backend == "vllm":
                shared = pairs[transport][1]
        for transport in TRANSPORTS:  # first shapes, the base model, and PEFT's wrapping out of the way
            call_sync(pairs[transport][1], "generate", _base_request())
        samples = {t: [] for t in TRANSPORTS}
        for v in range(1, versions + 1):
            order = TRANSPORTS if v % 2 else TRANSPORTS[::-1]
            for transport in order:
                registry, actor = pairs[transport]
                samples[transport].append(one_version(transport, registry, actor, v, dirs[transport][v - 1]))
        stats = {t: call_sync(pairs[t][1], "stats") for t in TRANSPORTS}
        rows = []
        for phase, picked in (("cold", slice(0, max_loras)), ("steady", slice(max_loras, None))):
            by = {t: summarise(samples[t][picked], {"backend": args.backend, "arch": arch, "slots": phase,
                                                     "transport": t}) for t in TRANSPORTS}
            if not by["path"]["versions"]:
                continue
            by["object_store"]["x faster (total)"] = by["path"]["total_s"] / by["object_store"]["total_s"]
            by["object_store"]["x faster (switch)"] = by["path"]["switch_s"] / by["object_store"]["switch_s"]
            rows.extend(by.values())
        for t in TRANSPORTS:
            s = stats[t]
            print(f"{arch} {t}: loads {s.get('adapter_loads')} "
                  f"evictions {s.get('adapter_evictions')} fetches {s.get('adapter_fetches')}")
        if use_ray:
            import ray

            for registry, actor in pairs.values():
                ray.kill(actor)
                ray.kill(registry)
        else:
            pairs["path"][1].backend.close()
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _base_request():
    from unstable.inference.base import GenerationRequest, SamplingParams

    return GenerationRequest(PROMPT, None, SamplingParams(temperature=0, max_new_tokens=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--arch", default=None, help="comma-separated: 1m, 10m, qwen3-0.6b (default 1m,10m)")
    parser.add_argument("--versions", type=int, default=None, help="new versions per transport (default 16)")
    parser.add_argument("--max-loras", type=int, default=4, help="adapter slots of the inference actor")
    parser.add_argument("--no-ray", action="store_true", help="transformers: local objects instead of Ray actors")
    args = parser.parse_args()
    info = machine()
    archs = (args.arch or ("1m" if args.quick else "1m,10m")).split(",")
    versions = args.versions or (6 if args.quick else 16)
    max_loras = 2 if args.quick else args.max_loras
    use_ray = args.backend == "transformers" and not args.no_ray
    if use_ray:
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    rows = []
    try:
        for arch in archs:
            rows.extend(bench_arch(args, arch, versions, max_loras))
    finally:
        if use_ray:
            ray.shutdown()
    settings = {"backend": args.backend, "archs": archs, "versions": versions, "max_loras": max_loras,
                "lora": DEFAULT_LORA, "ray": use_ray, "request": "greedy, 1 new token, a ~25-token prompt"}
    notes = ["total_s: from the learner's publish (path: add_checkpoint; object_store: read the files, "
             "add_checkpoint with them, the registry's put) to the first token of the new version; "
             "first_token_s: its part after add_checkpoint returned; warm_token_s: the same request again; "
             "switch_s = total_s - warm_token_s. Medians over the versions of each phase.",
             "cold: versions that found a free adapter slot (the first max_loras); steady: versions that "
             "replaced one (every later version of a long run).",
             "Recorded on a shared 2-core CPU (other jobs running): compare rows of one run only."]
    write_result(f"weight-sync-{args.backend}", args, rows, settings, notes, info=info)


if __name__ == "__main__":
    main()
