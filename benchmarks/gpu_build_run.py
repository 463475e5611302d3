"""The GPU check's step (a): a real ``unstable.build(...)`` run through Ray, as a user starts one.

TicTacToe mirror self-play, REINFORCE, the learner on ``--device`` and one transformers inference
actor (on a one-GPU machine build() gives each half of the GPU), ``--steps`` learner steps, no W&B,
no evaluation games, ``--mode`` async (default) or sync. Writes ``<out>/build_run-<mode>.json``: the
seconds to build, to the first learner step and per later step; after the first step, learner steps
per minute, trained tokens/s, generated tokens/s (the inference actors' counters) and the learner's
wait share (1 - its update seconds / the wall time); the checkpoints written, the policy versions the
games were played with, and any error with its traceback.

    python benchmarks/gpu_build_run.py --device cuda --arch qwen3-0.6b --out $OUT
    python benchmarks/gpu_build_run.py --device cpu --arch 1m --steps 2 --batch 16 --out /tmp/gpu-out
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys
import time
import traceback

T0 = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def read_jsonl(path: str) -> list[dict]:
    rows = []
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    return rows


def policy_versions(obj, found: set[int]) -> None:
    """Every integer under a key ``version`` or ``policy_version`` (the seats of the game transcripts)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("version", "policy_version") and isinstance(value, int) and not isinstance(value, bool):
                found.add(value)
            else:
                policy_versions(value, found)
    elif isinstance(obj, list):
        for value in obj:
            policy_versions(value, found)


def read_run(run_dir: str) -> dict:
    """Learner step timings, checkpoints and served versions from a run directory."""
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    steps = [m for m in metrics if any(k.endswith("train/version") for k in m)]
    times = [m["time"] for m in steps if "time" in m]
    found: set[int] = set()
    games = sorted(glob.glob(os.path.join(run_dir, "games", "**", "*.jsonl"), recursive=True))
    for path in games:
        for record in read_jsonl(path):
            policy_versions(record, found)
    checkpoints = sorted(os.path.relpath(p, run_dir) for p in glob.glob(os.path.join(run_dir, "checkpoints", "*"))
                         if os.path.isdir(p))
    # after the first learner step (start-up and first compiles excluded): the learner's share of the
    # wall time spent in updates; the rest it waited for data (or wrote checkpoints)
    later = [m for m in steps[1:] if "time" in m]
    span = times[-1] - times[0] if len(times) >= 2 else 0.0
    update_s = sum(m.get(next((k for k in m if k.endswith("train/update_seconds")), ""), 0.0) for m in later)
    trained = sum(m.get(next((k for k in m if k.endswith("train/tokens")), ""), 0.0) for m in later)
    def counted(m: dict) -> list[float]:  # the inference actors' completion-token counters in a metrics line
        return [v for k, v in m.items() if k.startswith("inference/") and k.endswith("/completion_tokens")]

    generated = [(m["time"], sum(counted(m))) for m in metrics if counted(m)]
    gen_rate = None
    if len(generated) >= 2 and generated[-1][0] > generated[0][0]:
        gen_rate = (generated[-1][1] - generated[0][1]) / (generated[-1][0] - generated[0][0])
    return {
        "learner_steps_per_min": round(60 * (len(times) - 1) / span, 2) if span else None,
        "trained_tokens_per_s": round(trained / span, 1) if span else None,
        "generated_tokens_per_s": round(gen_rate, 1) if gen_rate else None,
        "learner_wait_share": round(1 - update_s / span, 3) if span else None,
        "learner_steps": len(steps),
        "first_learner_step_wall_s": round(steps[0].get("wall_s", 0.0), 2) if steps else None,
        "s_per_learner_step_after_first": round((times[-1] - times[0]) / (len(times) - 1), 2)
        if len(times) >= 2 else None,
        "checkpoints": checkpoints,
        "game_files": len(games),
        "versions_played": sorted(found),
        "new_checkpoints_served": any(v > 0 for v in found),
    }


STOPPED_BY: list[str] = []  # the signal that stopped the run (Ray re-raises it without our message)


def on_term(signum, frame) -> None:
    """Stop the run the first time; a later signal (the step's timeout while the run is stopping) is only noted,
    so that the stop and the result file still finish."""
    STOPPED_BY.append("--max-seconds" if signum == signal.SIGALRM else f"signal {signum} (the step's timeout)")
    if len(STOPPED_BY) == 1:
        raise KeyboardInterrupt(STOPPED_BY[0])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--arch", default="qwen3-0.6b", help="1m, 10m or qwen3-0.6b (benchmarks/common.model_dir)")
    p.add_argument("--steps", type=int, default=3, help="learner steps")
    p.add_argument("--batch", type=int, default=64, help="moves per learner step")
    p.add_argument("--mini-batch", type=int, default=16)
    p.add_argument("--gen-len", type=int, default=64, help="max new tokens per turn")
    p.add_argument("--workers", type=int, default=64, help="games in flight")
    p.add_argument("--mode", default="async", choices=("async", "sync"), help="build(mode=...)")
    p.add_argument("--runs-dir", default="/tmp/gpu-check-runs")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-out"))
    cap = os.environ.get("GPU_CHECK_STEP_CAP_S")  # set by gpu_check.sh's step()
    p.add_argument("--max-seconds", type=int, default=int(cap) - min(25, max(5, int(cap) // 5)) if cap else None,
                   help="stop the run after this many seconds and write what it measured (default: the GPU "
                        "check's step cap less a fifth of it, 5 to 25 s; `timeout` itself signals Ray's processes "
                        "too, which leaves the run unable to stop in time)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    signal.signal(signal.SIGTERM, on_term)  # `timeout` ends the step: still stop the run and write the result
    if args.max_seconds:  # from the start: on a loaded machine build() alone can take most of the step's cap
        signal.signal(signal.SIGALRM, on_term)
        signal.alarm(max(1, int(args.max_seconds - (time.time() - T0))))
    result: dict = {"args": vars(args), "ok": False, "error": None}
    run = None
    try:
        from common import model_dir, quiet_libraries

        quiet_libraries()
        import unstable

        t = time.time()
        model = model_dir(args.arch)
        result["model_s"] = round(time.time() - t, 2)
        t = time.time()
        run = unstable.build(
            model_name=model,
            train_envs=[unstable.TrainEnvSpec(env_id="TicTacToe-v0-train", num_players=2, num_actors=2,
                                              prompt_template="qwen3-zs")],
            eval_envs=None,
            opponent_sampling_strategy="mirror",
            algorithm="reinforce",
            batch_size=args.batch,
            mini_batch_size=args.mini_batch,
            learning_rate=1e-4,
            max_generation_len=args.gen_len,
            learner_device=args.device,
            inference_backend="transformers",
            num_inference_actors=1,
            use_wandb=False,
            runs_dir=args.runs_dir,
            run_name=f"gpu-check-{args.arch}-{args.mode}-{time.strftime('%H%M%S')}",
            seed=0,
            mode=args.mode,
        )
        # ray.init (inside build) installs Ray's own SIGTERM handler (sys.exit): ours again, so that a SIGTERM to
        # this process stops the run and writes the result (a `timeout` also signals Ray's processes: hence the
        # --max-seconds alarm, the same stop from inside while Ray's processes still answer)
        signal.signal(signal.SIGTERM, on_term)
        result["build_s"] = round(time.time() - t, 2)
        result["run_dir"] = run.run_dir
        t = time.time()
        summary = run.start(learning_steps=args.steps, num_collection_workers=args.workers, num_eval_workers=0)
        result["start_s"] = round(time.time() - t, 2)
        result["summary"] = json.loads(json.dumps(summary, default=repr))
        result["ok"] = True
    except BaseException as exc:  # a timeout's SIGTERM or an error: report it either way
        if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM and not STOPPED_BY:
            STOPPED_BY.append(f"signal {signal.SIGTERM} (the step's timeout, through Ray's handler)")
        result["error"] = f"stopped by {STOPPED_BY[0]}" if STOPPED_BY else f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-6000:]
        print(result["traceback"], file=sys.stderr, flush=True)
    finally:
        signal.alarm(0)  # a run that finished in time must not be stopped while it shuts down
        for signum in (signal.SIGTERM, signal.SIGALRM):  # from here on a signal is noted, never raised
            signal.signal(signum, lambda signum, frame: STOPPED_BY.append(f"signal {signum} while stopping"))
        if run is not None:
            try:
                run.stop()
            except BaseException as exc:  # a second signal while stopping must not lose the result file
                result["stop_error"] = f"{type(exc).__name__}: {exc}"
        if result.get("run_dir") and os.path.isdir(result["run_dir"]):
            result.update(read_run(result["run_dir"]))
        result["total_s"] = round(time.time() - T0, 2)
        with open(os.path.join(args.out, f"build_run-{args.mode}.json"), "w") as f:
            json.dump(result, f, indent=1, default=repr)
        brief = {k: result.get(k) for k in ("ok", "error", "build_s", "start_s", "learner_steps",
                                            "first_learner_step_wall_s", "s_per_learner_step_after_first",
                                            "learner_steps_per_min", "trained_tokens_per_s", "generated_tokens_per_s",
                                            "learner_wait_share", "new_checkpoints_served", "total_s")}
        print("BUILD_RUN " + json.dumps(brief), flush=True)
    if STOPPED_BY:  # out of its time, not broken: the exit status `timeout` gives, so the check records a timeout
        return 124
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
