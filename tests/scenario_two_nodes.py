"""A run on a two-node Ray cluster (both nodes on this machine) that loses one node mid-run.

Run by ``tests/test_reliability.py`` in a subprocess (a cluster cannot share a process with the
session's local Ray): ``python tests/scenario_two_nodes.py MODEL_DIR RUNS_DIR``. The head node has
room for the learner and one inference actor, the worker node for one inference actor; when a few
games are done the worker node is removed. Prints one JSON line: where the inference actors ran,
the collector's, buffer's and tracker's counters, and the checkpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time


def main(model_dir: str, runs_dir: str) -> dict:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    import unstable
    from unstable.run.remote import actor_name

    temp_dir = tempfile.mkdtemp(prefix="ray-2n-", dir="/tmp")  # short: Ray's socket paths have a length limit
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 2, "include_dashboard": False, "temp_dir": temp_dir})
    # connect before the worker node exists: with two raylets on one IP the driver could attach to
    # either, and the driver's node is where the run's light actors and the learner go
    ray.init(address=cluster.address, namespace="two-nodes", log_to_driver=False)
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    assert ray.get_runtime_context().get_node_id() == cluster.head_node.node_id
    ttt = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}
    run = unstable.build(
        model_name=model_dir, train_envs=[unstable.TrainEnvSpec(num_actors=2, **ttt)],
        eval_envs=[unstable.EvalEnvSpec(fixed_opponent="random", **ttt)], opponent_sampling_strategy="mirror",
        batch_size=16, mini_batch_size=8, learning_rate=1e-3, max_generation_len=16,
        lora_config={"lora_rank": 4, "lora_alpha": 8}, activation_checkpointing=False, gradient_checkpointing=False,
        wandb_project=None, runs_dir=runs_dir, run_name="two-nodes", inference_backend="transformers",
        num_inference_actors=2, ray_address=cluster.address)
    out: dict = {"worker_node": worker.node_id}
    try:
        run.start(learning_steps=3, num_collection_workers=8, num_eval_workers=2, block=False)
        a = run.actors
        out["inference_nodes"] = {
            name: ray.get(ray.get_actor(actor_name(run.run_id, name)).__ray_call__.remote(
                lambda self: ray.get_runtime_context().get_node_id()), timeout=300)
            for name in ("inference-0", "inference-1")}
        deadline = time.monotonic() + 300
        while ray.get(a.collector.stats.remote())["train_finished"] < 4:
            assert time.monotonic() < deadline, "no games finished in 300 s"
            time.sleep(0.2)
        cluster.remove_node(worker)
        out["removed_after"] = ray.get(a.collector.stats.remote())
        summary = run.wait()
        out.update(checkpoints=summary["checkpoints"], collector=summary["collector"], buffer=summary["buffer"])
        for _ in range(50):  # the tracker's log_game calls were fired from the collector: let them land
            out["tracker"] = ray.get(a.tracker.counts.remote())
            logged = sum(out["tracker"].get(f"{s}/{k}", 0) for s in ("collect", "eval")
                         for k in ("games", "failed_games", "games_dropped"))
            c = summary["collector"]
            if logged == c["train_finished"] + c["eval_finished"] + c["failed"] + c["dropped"]:
                break
            time.sleep(0.1)
    finally:
        run.stop()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    return out


if __name__ == "__main__":
    result = main(sys.argv[1], sys.argv[2])
    print(json.dumps(result), flush=True)
