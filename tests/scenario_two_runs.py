"""Two runs with the same run name, built and trained side by side in one process and one Ray.

Run by ``tests/test_orchestration.py`` in a subprocess, with a Ray of its own: two runs need four
CPUs' worth of actors (a learner and an inference actor each), the session's Ray has two.
``python tests/scenario_two_runs.py MODEL_DIR RUNS_DIR``. Prints one JSON line: each run's id, run
directory, checkpoints and which actors its names find, and the run the dashboard attaches to.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path


def main(model_dir: str, runs_dir: str) -> dict:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    import unstable
    from unstable.run.remote import actor_name
    from unstable.ui.terminal_interface import NAMESPACE, connect_ray

    temp_dir = tempfile.mkdtemp(prefix="ray-2r-", dir="/tmp")  # short: Ray's socket paths have a length limit
    ray.init(address="local", num_cpus=4, namespace=NAMESPACE, include_dashboard=False, _temp_dir=temp_dir,
             log_to_driver=False)
    ttt = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}
    runs = []
    out: dict = {"runs": []}
    try:
        for where in ("a", "b"):  # the same run_name: only the runs_dir differs
            runs.append(unstable.build(
                model_name=model_dir, train_envs=[unstable.TrainEnvSpec(num_actors=2, **ttt)], eval_envs=[],
                opponent_sampling_strategy="mirror", batch_size=8, mini_batch_size=8, max_generation_len=8,
                lora_config={"lora_rank": 4, "lora_alpha": 8}, activation_checkpointing=False,
                gradient_checkpointing=False, wandb_project=None, runs_dir=os.path.join(runs_dir, where),
                run_name="same", inference_backend="transformers"))
        for run in runs:
            run.start(learning_steps=1, num_collection_workers=4, num_eval_workers=0, block=False)
        for run in runs:
            a = run.actors
            found = {role: ray.get_actor(actor_name(run.run_id, role))._actor_id.hex()
                     for role in ("Tracker", "Buffer", "inference-0")}
            own = {"Tracker": a.tracker._actor_id.hex(), "Buffer": a.buffer._actor_id.hex(),
                   "inference-0": a.inference[0].handle._actor_id.hex()}
            summary = run.wait()
            out["runs"].append({"run_id": run.run_id, "run_dir": run.run_dir, "names_find_own_actors": found == own,
                                "checkpoints": summary["checkpoints"]})
        live = connect_ray(None, Path(runs[1].run_dir))  # the dashboard finds the second run by its directory
        out["dashboard"] = {"run_dir": live.run_dir if live else None,
                            "buffer_is_its_own": live is not None and live.buffer is not None
                            and live.buffer._actor_id == runs[1].actors.buffer._actor_id}
    finally:
        for run in runs:
            run.stop()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
