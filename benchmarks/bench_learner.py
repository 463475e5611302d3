"""(c) Learner: tokens/s per REINFORCELearner update vs a bare forward+backward, and peak memory.

One batch of ``--batch`` synthetic Steps, each ``--seq-len`` tokens of which the last
``--completion`` are the sampled completion (the loss targets). Two variants on the same padded
batch (``unstable.learners.batching.collate``), the same base model and the same LoRA adapter
(the run default: rank 32, alpha 32 on q,k,v,o,gate,up,down; gradient checkpointing off):

* ``REINFORCELearner.update``: the whole update as a run does it (validation, forward over the
  completion positions' logits, float32 log-prob head with activation checkpointing, REINFORCE loss,
  backward, gradient clipping, AdamW, checkpoint written to disk);
* ``bare fwd+bwd``: ``model(input_ids).logits`` -> log-softmax -> masked mean of the completion
  tokens' log-probs -> ``backward()``; nothing else.

Each (model, variant) runs in its own process so that its memory is its own. Peak memory during
the updates: resident memory sampled every 2 ms on CPU (``ru_maxrss``, also reported, includes
the peak of loading the model), ``torch.cuda.max_memory_allocated`` on GPU; "peak over model"
subtracts the memory held once the model is loaded, before the first update.

    .venv/bin/python benchmarks/bench_learner.py                  # 1m and 10m, ~1.5 minutes
    .venv/bin/python benchmarks/bench_learner.py --quick          # seconds
    python benchmarks/bench_learner.py --device cuda --arch qwen3-0.6b   # GPU, bf16 base weights

CPU runs use ``torch.set_num_threads(--threads)`` (default 1) in each process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

from common import add_common_args, machine, median, model_dir, peak_rss_mib, quiet_libraries, write_result

LORA = {"lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
VARIANTS = ("REINFORCELearner.update", "bare fwd+bwd")


def synthetic_steps(n: int, seq_len: int, completion: int, vocab: int, seed: int = 0) -> list:
    import random

    from unstable.records import Sample, Step

    rng = random.Random(seed)
    steps = []
    for i in range(n):
        ids = [rng.randrange(vocab) for _ in range(seq_len)]
        cut = seq_len - completion
        sample = Sample(tuple(ids[:cut]), tuple(ids[cut:]), (-1.0,) * completion, "length", 1.0, 1.0, 0)
        steps.append(Step(env_id="TicTacToe-v0-train", game_id=i, player_id=i % 2, turn_index=0, sample=sample,
                          reward=rng.choice((-1.0, 1.0)),
                          final_reward=1.0, policy_version=0, format_ok=True, invalid=False, is_last=True))
    return steps


def child(args: argparse.Namespace) -> dict:
    """Measure one (arch, variant) in this process; returns its row."""
    import psutil
    import torch

    from unstable.learners import REINFORCELearner
    from unstable.learners import model_utils as mu
    from unstable.learners.batching import collate
    from unstable.records import TrainBatch

    torch.set_num_threads(args.threads)
    path = model_dir(args.arch)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    steps = synthetic_steps(args.batch, args.seq_len, args.completion, vocab=2048)  # the tokenizer's ids
    with tempfile.TemporaryDirectory(prefix="bench-learner-") as out:
        if args.variant == VARIANTS[0]:
            learner = REINFORCELearner(path, lora_cfg=LORA, batch_size=args.batch, mini_batch_size=args.batch,
                                       learning_rate=1e-5, output_dir=out, device=str(device), keep_last=1,
                                       gradient_checkpointing=args.gradient_checkpointing,
                                       activation_checkpointing=True, seed=0)
            learner.initialize_algorithm(max_train_len=None, max_generation_len=args.completion)
            train_batch = TrainBatch.from_steps(steps)

            def step() -> None:
                learner.update(train_batch)
        else:
            torch.manual_seed(0)
            base = mu.load_base_model(path, device, mu.resolve_dtype(None, device), args.gradient_checkpointing)
            model = mu.attach_policy_adapter(base, LORA, None).to(device)
            model.train()
            batch = collate(steps, None, mu.pad_token_id(base))
            ids, attn = batch.input_ids.to(device), batch.attention_mask.to(device)
            mask = batch.completion_mask[:, 1:].to(device)

            def step() -> None:
                logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
                logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
                loss = -(logp * mask).sum() / mask.sum()
                loss.backward()
                model.zero_grad(set_to_none=True)

        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            loaded = torch.cuda.memory_allocated() / 2**20
        else:
            loaded = psutil.Process().memory_info().rss / 2**20
        sampler = RssSampler() if not cuda else None
        times, cpu = [], []
        for i in range(args.warmup + args.steps):
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            if cuda:
                torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else sampler.stop()
    update_s = median(times)
    tokens = args.batch * args.seq_len
    trained = args.batch * args.completion
    return {"arch": args.arch, "variant": args.variant, "batch x seq": f"{args.batch}x{args.seq_len}",
            "s/update": update_s, "CPU-s/update": median(cpu), "tok/s": tokens / update_s,
            "trained tok/s": trained / update_s,
            "peak MiB": peak, "peak over model MiB": peak - loaded, "updates": len(times),
            "memory": "cuda max_memory_allocated" if cuda else "sampled RSS",
            "ru_maxrss MiB": peak_rss_mib()}


class RssSampler:
    """Peak resident memory while the updates run, sampled every 2 ms by a thread (``ru_maxrss``
    cannot tell: it also holds the peak of loading the model). Spikes shorter than that can be missed."""

    def __init__(self, interval_s: float = 0.002):
        import threading

        import psutil

        self._proc, self._interval, self.peak = psutil.Process(), interval_s, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._done.wait(self._interval)

    def stop(self) -> float:
        """Stop sampling; the peak in MiB."""
        self._done.set()
        self._thread.join()
        return self.peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--arch", default=None, help="comma-separated: 1m, 10m, qwen3-0.6b (default 1m,10m)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--batch", type=int, default=None, help="Steps per update (default 8)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per Step (default 256)")
    parser.add_argument("--completion", type=int, default=None, help="completion tokens per Step (default 64)")
    parser.add_argument("--steps", type=int, default=None, help="timed updates (default 5, after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="HF per-layer checkpointing")
    parser.add_argument("--child", nargs=2, metavar=("ARCH", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batch = args.batch or (2 if args.quick else 8)
    args.seq_len = args.seq_len or (64 if args.quick else 256)
    args.completion = args.completion or (16 if args.quick else 64)
    args.steps = args.steps or (2 if args.quick else 5)
    args.warmup = 1
    if args.child:
        quiet_libraries()
        args.arch, args.variant = args.child
        print("RESULT " + json.dumps(child(args)), flush=True)
        return
    archs = (args.arch or ("1m" if args.quick else "1m,10m")).split(",")
    info = machine()
    rows = []
    for arch in archs:
        model_dir(arch)  # build once, outside the measured processes
        for variant in VARIANTS:
            cmd = [sys.executable, __file__, "--child", arch, variant, "--batch", str(args.batch), "--seq-len",
                   str(args.seq_len), "--completion", str(args.completion), "--steps", str(args.steps),
                   "--threads", str(args.threads)]
            if args.device:
                cmd += ["--device", args.device]
            if args.gradient_checkpointing:
                cmd.append("--gradient-checkpointing")
            proc = subprocess.run(cmd, capture_output=True, text=True)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode or not lines:
                sys.stderr.write(proc.stdout + proc.stderr)
                raise SystemExit(f"{arch} / {variant} failed (exit {proc.returncode})")
            rows.append(json.loads(lines[-1].removeprefix("RESULT ")))
    for row in rows:
        bare = next(r for r in rows if r["arch"] == row["arch"] and r["variant"] == VARIANTS[1])
        row["x bare time"] = row["s/update"] / bare["s/update"]
        row["x bare CPU"] = row["CPU-s/update"] / bare["CPU-s/update"]
    settings = {"archs": archs, "batch": args.batch, "seq_len": args.seq_len, "completion": args.completion,
                "timed_updates": args.steps, "warmup_updates": args.warmup, "lora": LORA,
                "gradient_checkpointing": args.gradient_checkpointing, "activation_checkpointing": True,
                "torch_threads": args.threads, "device": args.device or ("cuda" if info.get("gpu") else "cpu")}
    notes = ["tok/s counts every token of the batch (prompt + completion); trained tok/s only the completion "
             "tokens the loss is taken on.", "s/update is the median over the timed updates; "
             "x bare time = s/update / the bare forward+backward's; x bare CPU the same in CPU-s/update.",
             "CPU-s/update: CPU time of the process (all threads) per update; much below s/update means "
             "other jobs held the cores (or the update waited on disk)."]
    write_result("learner" + (f"-{args.device}" if args.device == "cuda" else ""), args, rows, settings, notes,
                 info=info)


if __name__ == "__main__":
    main()
