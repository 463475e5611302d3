"""(g) Learner VRAM: peak GPU memory and seconds of one update, per model shape x step length x checkpointing.

The seed's model sizes as random-init Qwen3 shapes (``qwen3-1.7b``, ``qwen3-4b``, ``qwen3-8b``; built
on the device in bf16, nothing written to disk; the tiny models' tokenizer), LoRA rank 32 on the
seven projections (the run default), ``REINFORCELearner`` with ``mini_batch_size`` 1 and two steps
per update, each of ``L`` tokens (half prompt, half completion, so the head scores ``L / 2``). For
each shape and ``L`` three settings:

* ``none``: no checkpointing (the plain head: the ``[tokens, vocabulary]`` logits are held);
* ``activation``: the chunked log-prob head (``activation_checkpointing``), no layer checkpointing;
* ``activation+gradient``: the chunked head and per-layer gradient checkpointing (the GPU default).

Each cell reports peak allocated and reserved memory (``torch.cuda.max_memory_*``, the weights
included), the seconds of the (second, warm) update, and OOM as such (the cell is recorded, the
memory freed, the longer lengths of that setting skipped). No new cell starts past ``--budget-s``.

    python benchmarks/bench_vram.py --device cuda --shapes 1.7b,4b,8b --lens 2048,4096,8192 --out vram.json
    python benchmarks/bench_vram.py --device cpu --shapes tiny-test --lens 64,128 --out /tmp/vram.json  # rehearsal
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_learner import long_steps
from common import machine, markdown_table, model_dir, quiet_libraries, random_init_on_device

LORA = {"lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
SETTINGS = (("none", False, False), ("activation", True, False), ("activation+gradient", True, True))
STEPS_PER_UPDATE = 2


def cell(torch, path: str, device: str, shape: str, setting: tuple[str, bool, bool], length: int,
         micro_batching: str) -> dict:
    """One update of ``STEPS_PER_UPDATE`` steps of ``length`` tokens (after an untimed one)."""
    from unstable.learners import REINFORCELearner
    from unstable.records import TrainBatch

    name, head, layers = setting
    row = {"shape": shape, "setting": name, "train_len": length}
    cuda = device.startswith("cuda")
    with tempfile.TemporaryDirectory(prefix="bench-vram-") as out:
        lrn = None
        try:
            lrn = REINFORCELearner(path, output_dir=out, lora_cfg=LORA, batch_size=STEPS_PER_UPDATE, mini_batch_size=1,
                                   learning_rate=1e-5, device=device, keep_last=1, seed=0,
                                   gradient_checkpointing=layers, activation_checkpointing=head,
                                   micro_batching=micro_batching, max_tokens_per_micro_batch=length)
            lrn.initialize_algorithm(max_train_len=None, max_generation_len=length)
            batch = TrainBatch.from_steps(long_steps(STEPS_PER_UPDATE, length, min(lrn.vocab_size, 2048), length))
            lrn.update(batch)  # warm-up: kernels chosen, optimiser state allocated
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            lrn.update(batch)
            if cuda:
                torch.cuda.synchronize()
                row["peak_allocated_GiB"] = torch.cuda.max_memory_allocated() / 2**30
                row["peak_reserved_GiB"] = torch.cuda.max_memory_reserved() / 2**30
            row["s/update"] = time.perf_counter() - start
            row["packed"] = lrn.packed
        except torch.cuda.OutOfMemoryError as err:
            row["error"] = "OOM: " + str(err).splitlines()[0][:160]
        finally:
            del lrn
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="1.7b,4b,8b", help="comma-separated Qwen3 shapes (1.7b, 4b, 8b, "
                        "tiny-test) or tiny models (1m, 10m)")
    parser.add_argument("--lens", default="2048,4096,8192", help="comma-separated step lengths L (tokens)")
    parser.add_argument("--settings", default=",".join(name for name, _, _ in SETTINGS),
                        help="comma-separated settings, in this order (default: all three)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--micro-batching", default="auto", choices=("auto", "packed", "buckets"))
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no new cell after this many seconds")
    parser.add_argument("--out", default="vram.json", help="the JSON result file")
    args = parser.parse_args()
    quiet_libraries()
    import torch

    random_init_on_device()
    info = machine()
    started = time.perf_counter()
    lengths = [int(x) for x in args.lens.split(",")]
    known = {setting[0]: setting for setting in SETTINGS}
    unknown = [name for name in args.settings.split(",") if name not in known]
    if unknown:
        raise SystemExit(f"--settings: unknown {unknown}; known: {', '.join(known)}")
    settings = [known[name] for name in args.settings.split(",")]
    rows: list[dict] = []
    try:
        for shape in args.shapes.split(","):
            path = model_dir(shape if shape in ("1m", "10m") else f"qwen3-{shape}")
            for setting in settings:
                for length in lengths:
                    if time.perf_counter() - started > args.budget_s:
                        rows.append({"shape": shape, "setting": setting[0], "train_len": length, "error": "budget"})
                        continue
                    row = cell(torch, path, args.device, shape, setting, length, args.micro_batching)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    if row.get("error", "").startswith("OOM"):
                        break  # longer steps of this setting OOM too
    finally:
        doc = {"benchmark": "vram", "quick": False, "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": info,
               "settings": {"shapes": args.shapes, "lens": lengths, "settings": args.settings, "device": args.device,
                            "lora": LORA,
                            "steps_per_update": STEPS_PER_UPDATE, "mini_batch_size": 1,
                            "micro_batching": args.micro_batching, "budget_s": args.budget_s},
               "rows": rows, "notes": [__doc__.split("\n\n")[1].replace("\n", " ")]}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(markdown_table(rows))
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
