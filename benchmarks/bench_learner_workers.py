"""(e) Data-parallel learner: seconds per REINFORCELearner update with 1 and N learner workers.

The same batch of ``--batch`` synthetic Steps (``--seq-len`` tokens, the last ``--completion`` of
them the sampled completion, as in ``bench_learner.py``) and the same model and LoRA adapter (the
run default: rank 32 on all 7 projections) are trained by one learner, then by N learner workers
(``unstable.learners.distributed``: N local processes, gloo, rank 0 broadcasting the batch, one
all-reduce of the LoRA gradients per optimiser step), each process on ``--threads`` torch threads.
``mini_batch_size`` is ``batch / max(workers)`` for every row, so each forward has the same shape.

Timed on rank 0: the whole ``update`` (broadcast, its shard's forward and backward, the reduction,
AdamW, the checkpoint), which waits for the slowest rank. The speed-up is the 1-worker time over
the N-worker time; the ideal is N when the machine has N free cores for them (on the shared 2-core
CPU it does not). The weights after the last update must equal between ranks, and equal the
single learner's within float32 rounding ("max abs dw vs 1 worker").

    .venv/bin/python benchmarks/bench_learner_workers.py            # 1m and 10m, 1 and 2 workers
    .venv/bin/python benchmarks/bench_learner_workers.py --quick    # seconds
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_learner import LORA, synthetic_steps
from common import add_common_args, machine, median, model_dir, quiet_libraries, write_result


def _learner(args: argparse.Namespace, out: str):
    from unstable.learners import REINFORCELearner

    learner = REINFORCELearner(model_dir(args.arch), lora_cfg=LORA, batch_size=args.batch,
                               mini_batch_size=args.batch // max(args.all_workers), learning_rate=1e-5,
                               output_dir=out, device="cpu", keep_last=1, gradient_checkpointing=False,
                               activation_checkpointing=True, seed=0)
    learner.initialize_algorithm(max_train_len=None, max_generation_len=args.completion)
    return learner


def _rank(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    """One learner worker: rank 0 times its updates and saves them with its weights."""
    import torch

    from unstable.learners.distributed import DataParallel
    from unstable.records import TrainBatch

    quiet_libraries()
    torch.set_num_threads(args.threads)
    learner = _learner(args, f"{out}/rank{rank}")
    if args.workers > 1:
        learner.use_data_parallel(DataParallel.join(rank, args.workers, "127.0.0.1", port, torch.device("cpu")))
    if rank > 0:
        learner.follow()
        learner.data_parallel.leave()
        return
    batch = TrainBatch.from_steps(synthetic_steps(args.batch, args.seq_len, args.completion, vocab=2048))
    times, cpu = [], []
    for i in range(args.warmup + args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        learner.update(batch)
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    learner.release_followers()
    weights = [p.detach().clone() for p in learner.policy_params]
    torch.save({"times": times, "cpu": cpu, "weights": weights}, f"{out}/result.pt")
    if learner.data_parallel is not None:
        learner.data_parallel.leave()


def child(args: argparse.Namespace) -> dict:
    """Measure ``args.workers`` workers on ``args.arch`` (spawned processes); returns the row."""
    import torch
    import torch.multiprocessing as mp

    from unstable.learners.distributed import free_port

    with tempfile.TemporaryDirectory(prefix="bench-workers-") as out:
        if args.workers == 1:
            _rank(0, args, 0, out)
        else:
            mp.spawn(_rank, args=(args, free_port(), out), nprocs=args.workers, join=True)
        result = torch.load(f"{out}/result.pt")
    torch.save(result["weights"], args.weights_file)
    update_s = median(result["times"])
    return {"arch": args.arch, "workers": args.workers, "batch x seq": f"{args.batch}x{args.seq_len}",
            "s/update": update_s, "rank-0 CPU-s/update": median(result["cpu"]),
            "trained tok/s": args.batch * args.completion / update_s, "updates": len(result["times"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--arch", default=None, help="comma-separated: 1m, 10m (default 1m,10m)")
    parser.add_argument("--workers", default="1,2", help="comma-separated learner worker counts (default 1,2)")
    parser.add_argument("--batch", type=int, default=None, help="Steps per update (default 8)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per Step (default 256)")
    parser.add_argument("--completion", type=int, default=None, help="completion tokens per Step (default 64)")
    parser.add_argument("--steps", type=int, default=None, help="timed updates (default 5, after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    parser.add_argument("--child", nargs=3, metavar=("ARCH", "WORKERS", "WEIGHTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batch = args.batch or (4 if args.quick else 8)
    args.seq_len = args.seq_len or (64 if args.quick else 256)
    args.completion = args.completion or (16 if args.quick else 64)
    args.steps = args.steps or (2 if args.quick else 5)
    args.warmup = 1
    args.all_workers = [int(w) for w in args.workers.split(",")]
    if args.child:
        quiet_libraries()
        args.arch, args.workers, args.weights_file = args.child[0], int(args.child[1]), args.child[2]
        print("RESULT " + json.dumps(child(args)), flush=True)
        return
    import torch

    archs = (args.arch or ("1m" if args.quick else "1m,10m")).split(",")
    info = machine()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        for arch in archs:
            model_dir(arch)  # build once, outside the measured processes
            for workers in args.all_workers:
                weights = os.path.join(tmp, f"{arch}-{workers}.pt")
                cmd = [sys.executable, __file__, "--child", arch, str(workers), weights, "--workers", args.workers,
                       "--batch", str(args.batch), "--seq-len", str(args.seq_len), "--completion",
                       str(args.completion), "--steps", str(args.steps), "--threads", str(args.threads)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                if proc.returncode or not lines:
                    sys.stderr.write(proc.stdout + proc.stderr)
                    raise SystemExit(f"{arch} / {workers} workers failed (exit {proc.returncode})")
                rows.append(json.loads(lines[-1].removeprefix("RESULT ")))
                one = torch.load(os.path.join(tmp, f"{arch}-{args.all_workers[0]}.pt"))
                mine = torch.load(weights)
                diff = max(float((a - b).abs().max()) for a, b in zip(one, mine, strict=True))
                rows[-1]["max abs dw vs 1 worker"] = diff
    for row in rows:
        single = next(r for r in rows if r["arch"] == row["arch"] and r["workers"] == args.all_workers[0])
        row["speed-up"] = single["s/update"] / row["s/update"]
    settings = {"archs": archs, "workers": args.all_workers, "batch": args.batch, "seq_len": args.seq_len,
                "completion": args.completion, "mini_batch_size": args.batch // max(args.all_workers),
                "timed_updates": args.steps, "warmup_updates": args.warmup, "lora": LORA,
                "torch_threads_per_worker": args.threads, "backend": "gloo", "device": "cpu"}
    notes = ["s/update: median over the timed updates of rank 0's whole update (it waits for the slowest rank).",
             "speed-up = the 1-worker s/update over this row's; the ideal is the worker count when each worker "
             "has a free core.",
             "max abs dw vs 1 worker: the largest difference of a policy LoRA weight after the last update "
             "(float32 rounding: the shards sum in another order)."]
    write_result("learner-workers", args, rows, settings, notes, info=info)


if __name__ == "__main__":
    main()
