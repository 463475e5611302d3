"""One tiny real run for the fault table (``bench_faults.py``), in a process of its own.

    python benchmarks/fault_driver.py JOB.json

``JOB.json`` holds ``build`` (``unstable.build()`` arguments), ``learning_steps``, ``workers``,
``eval_workers``, ``progress`` (a JSON-lines file) and ``result`` (paths), and optionally ``two_nodes`` (run on a
two-node local Ray cluster and remove the worker node once ``remove_node_after`` checkpoints are
complete). The run is built and started as a user's script would (``build()`` starts the local
Ray). Every half second the collector's and the buffer's counters go to ``progress``, so the
harness knows what was in flight when it killed this process. At the end ``result`` holds what
happened: refused by ``build()`` (and whether Ray had started), stopped with an error (as
``unstable train`` prints it), or finished, with ``Run.summary()`` and the tracker's counters.
Exit code: 0 finished, 1 stopped with an error, 2 refused.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PROGRESS_INTERVAL_S = 0.5


def write_json(path: str, data: dict[str, Any]) -> None:
    """Atomically (the harness reads it while it is written)."""
    tmp = f"{path}.tmp{os.getpid()}"
    Path(tmp).write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


class Progress(threading.Thread):
    """Appends the run's counters to ``path`` (a JSON line) every :data:`PROGRESS_INTERVAL_S` until stopped."""

    def __init__(self, handle: Any, path: str):
        super().__init__(daemon=True)
        self.handle, self.path, self.done = handle, path, threading.Event()

    def sample(self) -> None:
        import ray

        a = self.handle.actors
        collector, buffer = ray.get([a.collector.stats.remote(), a.buffer.stats.remote()], timeout=10)
        with open(self.path, "a") as f:
            f.write(json.dumps({"time": time.time(), "collector": collector, "buffer": buffer}) + "\n")

    def run(self) -> None:
        import ray

        while not self.done.wait(PROGRESS_INTERVAL_S):
            try:
                self.sample()
            except (ray.exceptions.RayError, TimeoutError):
                continue  # an actor the harness just killed: the next sample says more


def tracker_counts(run: Any, collector: dict[str, int]) -> dict[str, int]:
    """The Tracker's counters once the collector's fire-and-forget game logs have all landed."""
    import ray

    expected = sum(collector[k] for k in ("train_finished", "eval_finished", "failed", "dropped"))
    counts: dict[str, int] = {}
    for _ in range(50):
        counts = ray.get(run.actors.tracker.counts.remote(), timeout=30)
        logged = sum(counts.get(f"{s}/{k}", 0) for s in ("collect", "eval")
                     for k in ("games", "failed_games", "games_dropped"))
        if logged >= expected:
            break
        time.sleep(0.1)
    return counts


def two_node_cluster(result: dict[str, Any]) -> tuple[Any, Any, str]:
    """A head node (learner and one inference actor) and a worker node (one inference actor) on
    this machine; the driver connects before the worker exists, so it is the head's."""
    import ray
    from ray.cluster_utils import Cluster

    temp_dir = tempfile.mkdtemp(prefix="ray-ft2-", dir="/tmp")  # short: Ray's socket paths have a length limit
    # where Cluster notes its address (RAY_TMPDIR, which the harness sets, may not have it yet)
    os.makedirs(os.path.join(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(), "ray"), exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                            "temp_dir": temp_dir})
    ray.init(address=cluster.address, namespace="fault-table", log_to_driver=False)
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    result["worker_node"] = worker.node_id
    return cluster, worker, temp_dir


def remove_node_when_ready(run: Any, cluster: Any, worker: Any, after: int, result: dict[str, Any]) -> None:
    """Remove the worker node once ``after`` checkpoints are complete (and its inference actor has
    served games: both inference actors answered)."""
    from unstable.learners.checkpoints import list_checkpoints

    checkpoints = Path(run.run_dir) / "checkpoints"
    while len(list_checkpoints(checkpoints, complete_only=True)) < after:
        time.sleep(0.1)
    result["injected_at"] = time.time()
    cluster.remove_node(worker)


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    result: dict[str, Any] = {"pid": os.getpid(), "started_at": time.time()}
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray

    import unstable
    from unstable.cli.commands import run_failure

    cluster = worker = temp_dir = None
    build = dict(job["build"])
    code = 0
    try:
        if job.get("two_nodes"):
            cluster, worker, temp_dir = two_node_cluster(result)
            build["ray_address"] = cluster.address
        try:
            run = unstable.build(**build)
        except ValueError as exc:  # refused (before Ray started, unless ray_started says otherwise)
            result.update(refused=str(exc), ray_started=ray.is_initialized() and cluster is None)
            return 2
        except Exception as exc:  # failed while starting its actors
            result.update(error=run_failure(exc, build.get("resume_from") or "?"), error_type=type(exc).__name__)
            return 1
        result.update(run_dir=run.run_dir, start_version=run.start_version)
        progress = Progress(run, job["progress"])
        try:
            run.start(learning_steps=job["learning_steps"], num_collection_workers=job["workers"],
                      num_eval_workers=job["eval_workers"], block=False)
            progress.start()
            if cluster is not None:
                threading.Thread(target=remove_node_when_ready, daemon=True,
                                 args=(run, cluster, worker, job.get("remove_node_after", 1), result)).start()
            try:
                run.wait()
            except Exception as exc:  # the run's error, as `unstable train` shows it
                result.update(error=run_failure(exc, run.run_dir), error_type=type(exc).__name__)
                code = 1
            result["stopped_at"] = time.time()
            progress.done.set()
            progress.join()
            summary = run.summary()
            result.update(summary=summary, tracker=tracker_counts(run, summary["collector"]))
        finally:
            progress.done.set()
            run.stop()
        return code
    finally:
        result["ended_at"] = time.time()
        write_json(job["result"], result)
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
