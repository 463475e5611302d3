"""A run on a two-node Ray cluster whose worker node cannot see the run directory.

Run by ``tests/test_cluster_storage.py`` in a subprocess (a cluster cannot share a process with the
session's local Ray): ``python tests/scenario_no_shared_storage.py MODEL_DIR RUNS_DIR TRANSPORT``.
The head node (the driver's: registry, learner, one inference actor) is started here; the worker node
is ``ray start --address=... --block`` run by ``unshare --mount`` in a mount namespace of its own,
with an empty tmpfs mounted over ``RUNS_DIR``: what the learner writes there does not exist for the
worker's processes, as on two machines without a shared filesystem (the model, like the installed
packages, is on both). Prints one JSON line: where the inference actors ran, whether the worker's
actor sees the checkpoints, its stats, and the run's summary.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def start_worker(address: str, runs_dir: str) -> subprocess.Popen:
    """The worker node, in a mount namespace where ``runs_dir`` is an empty tmpfs."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    script = (f"mount -t tmpfs tmpfs {runs_dir} && exec {ray_cli} start --address={address} --num-cpus=1 "
              "--object-store-memory=100000000 --block")
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_worker(proc: subprocess.Popen) -> None:
    """SIGTERM to the worker's process group (``ray start --block`` then stops its raylet), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def wait_for_nodes(ray, count: int, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(n["Alive"] for n in ray.nodes()) < count:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker node exited ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the worker node did not join in {timeout_s:g} s")
        time.sleep(0.5)


def on_actor(ray, handle, fn, *args):
    return ray.get(handle.__ray_call__.remote(fn, *args), timeout=300)


def served(ray, handle, request) -> str:
    """``"ok"`` if the actor completed ``request`` with the adapter it asked for, else what went wrong."""
    try:
        result = ray.get(handle.generate.remote(request), timeout=120)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:500]
    if result.adapter_path != request.adapter_path or not result.sample.completion_ids:
        return f"served with {result.adapter_path!r}, {len(result.sample.completion_ids)} tokens"
    return "ok"


def main(model_dir: str, runs_dir: str, transport: str) -> dict:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    import unstable
    from unstable.inference.base import GenerationRequest, SamplingParams
    from unstable.run.remote import actor_name

    temp_dir = tempfile.mkdtemp(prefix="ray-ns-", dir="/tmp")  # short: Ray's socket paths have a length limit
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "temp_dir": temp_dir, "object_store_memory": 100_000_000})
    # connect before the worker node exists: the driver's node is where the light actors and the learner go
    ray.init(address=cluster.address, namespace="no-shared-storage", log_to_driver=False)
    worker = start_worker(cluster.address, runs_dir)
    out: dict = {"head_node": cluster.head_node.node_id}
    try:
        wait_for_nodes(ray, 2, worker)
        out["worker_node"] = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != out["head_node"])
        ttt = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}
        run = unstable.build(
            model_name=model_dir, train_envs=[unstable.TrainEnvSpec(num_actors=2, **ttt)],
            eval_envs=[unstable.EvalEnvSpec(fixed_opponent="random", **ttt)], opponent_sampling_strategy="mirror",
            batch_size=16, mini_batch_size=8, learning_rate=1e-3, max_generation_len=16,
            lora_config={"lora_rank": 4, "lora_alpha": 8}, activation_checkpointing=False,
            gradient_checkpointing=False, wandb_project=None, runs_dir=runs_dir, run_name="no-shared-storage",
            inference_backend="transformers", num_inference_actors=2, ray_address=cluster.address,
            checkpoint_transport=transport, max_consecutive_failures=3)
        try:
            run.start(learning_steps=3, num_collection_workers=8, num_eval_workers=0, block=False)
            checkpoints = os.path.join(run.run_dir, "checkpoints")
            actors = {name: ray.get_actor(actor_name(run.run_id, name)) for name in ("inference-0", "inference-1")}
            out["inference_nodes"] = {name: on_actor(ray, h, lambda self: ray.get_runtime_context().get_node_id())
                                      for name, h in actors.items()}
            try:
                out["summary"] = run.wait()
            except Exception as exc:  # the path transport on this cluster: the worker's games fail
                out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                out["summary"] = run.summary()
            out["sees_checkpoints"] = {name: on_actor(ray, h, lambda self, p: os.path.isdir(p), checkpoints)
                                       for name, h in actors.items()}
            # every new checkpoint asked of each actor once the run is done, as a game would ask: which of the
            # worker's games used which checkpoint depends on the machine's speed, these requests do not
            sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
            new = [ckpt for ckpt in out["summary"]["checkpoints"] if ckpt != "base"]
            out["served_after"] = {
                name: {ckpt: served(ray, h, GenerationRequest("Hello", os.path.join(checkpoints, ckpt), sampling))
                       for ckpt in new}
                for name, h in actors.items()}
            out["inference_stats"] = {name: ray.get(h.stats.remote(), timeout=60) for name, h in actors.items()}
        finally:
            run.stop()
    finally:
        ray.shutdown()
        stop_worker(worker)
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    return out


if __name__ == "__main__":
    result = main(*sys.argv[1:4])
    print(json.dumps(result, default=str), flush=True)
