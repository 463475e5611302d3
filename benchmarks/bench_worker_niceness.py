"""Seconds of learner arithmetic in a Ray actor beside busy processes, at Ray's worker priority and at ours.

Ray starts its workers at niceness 15 (``RAY_worker_niceness``); ``unstable`` starts its local Ray with
them at 0 (:func:`unstable.run.wiring.init_local_ray`). The work: ``--reps`` forward+backward passes of the
1M tiny model on a batch of 16 x 64 tokens, in an actor with one CPU (one torch thread, as a run's
learner), timed inside the actor. Each Ray is started in a child process of its own (the raylet reads the
setting when it starts), and in each the work runs:

* ``quiet``: nothing else running;
* ``busy, same session``: beside ``--busy`` processes spinning on the CPU at normal priority, started in
  the benchmark's session, as a user's other work in the same terminal, a job script or a service is;
* ``busy, own session``: the same processes each in a session of its own (``setsid``). Linux's
  autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) shares the CPU between sessions
  first, so niceness only matters inside one; this row shows where the setting does not matter.

The two priorities alternate round by round, so both see the same machine.

    .venv/bin/python benchmarks/bench_worker_niceness.py            # ~1 minute on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import add_common_args, machine, median, quiet_libraries, write_result

MODES = {"ray default": "ray", "unstable": "unstable"}
LOADS = ("quiet", "busy, same session", "busy, own session")


def child(mode: str, reps: int, busy: int) -> dict[str, float]:
    """In a fresh process: start Ray at ``mode``'s priority, time the work under each load."""
    import tempfile

    import ray

    quiet_libraries()
    kwargs = dict(num_cpus=2, include_dashboard=False, log_to_driver=False,
                  _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    if mode == "unstable":
        from unstable.run.wiring import init_local_ray

        init_local_ray(**kwargs)
    else:
        ray.init(address="local", **kwargs)

    @ray.remote(num_cpus=1)
    class Work:
        def __init__(self) -> None:
            import torch
            from transformers import AutoModelForCausalLM

            from unstable.local_models.tiny import tiny_model_path

            self.model = AutoModelForCausalLM.from_pretrained(str(tiny_model_path("1m")))
            self.batch = torch.randint(0, self.model.config.vocab_size, (16, 64))

        def niceness(self) -> int:
            return os.nice(0)

        def run(self, reps: int) -> float:
            started = time.perf_counter()
            for _ in range(reps):
                self.model(self.batch, labels=self.batch).loss.backward()
            return time.perf_counter() - started

    work = Work.remote()
    out: dict[str, float] = {"niceness": ray.get(work.niceness.remote())}
    ray.get(work.run.remote(2))  # warm-up
    for load in LOADS:
        spinners = [] if load == "quiet" else [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=load.endswith("own session"))
            for _ in range(busy)]
        try:
            time.sleep(0.5)
            out[load] = ray.get(work.run.remote(reps))
        finally:
            for p in spinners:
                p.kill()
                p.wait()
    ray.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--reps", type=int, default=20, help="forward+backward passes per timing")
    parser.add_argument("--busy", type=int, default=2, help="busy processes (default: one per core here)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=sorted(MODES.values()), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.reps, args.rounds = 3, 1
    if args.child:
        print(json.dumps(child(args.child, args.reps, args.busy)))
        return
    info = machine()
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in MODES}
    for r in range(args.rounds):
        for label, mode in MODES.items():
            proc = subprocess.run([sys.executable, __file__, "--child", mode, "--reps", str(args.reps),
                                   "--busy", str(args.busy)], capture_output=True, text=True, check=True)
            runs[label].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}/{args.rounds}, {label}: {runs[label][-1]}", flush=True)
    rows = []
    for load in LOADS:
        seconds = {label: median([run[load] for run in runs[label]]) for label in MODES}
        rows.append({"load": load, "ray default (niceness 15) s": seconds["ray default"],
                     "unstable (niceness 0) s": seconds["unstable"],
                     "x faster": seconds["ray default"] / seconds["unstable"]})
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    settings = {"reps": args.reps, "busy": args.busy, "rounds": args.rounds, "batch": [16, 64], "model": "1m",
                "niceness_seen": {label: runs[label][0]["niceness"] for label in MODES},
                "sched_autogroup_enabled": autogroup.read_text().strip() if autogroup.exists() else None}
    write_result("worker-niceness", args, rows, settings, info=info, notes=[
        "seconds of --reps forward+backward passes of the 1M model in a one-CPU Ray actor, median over rounds",
        "busy: --busy processes spinning at normal priority; 'own session': each started with setsid"])


if __name__ == "__main__":
    main()
