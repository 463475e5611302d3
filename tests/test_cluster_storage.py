"""A cluster without shared storage: adapters reach an inference actor whose node cannot see the run
directory through Ray's object store (``checkpoint_transport="object_store"``, the default)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from scenarios import run_scenario

REPO = Path(__file__).resolve().parents[1]


def mount_namespaces_unavailable() -> str | None:
    """Why this machine cannot give a Ray node a private view of the runs directory (None: it can)."""
    if shutil.which("unshare") is None:
        return "the unshare command (util-linux) is not installed"
    if os.geteuid() != 0:
        return "mounting a tmpfs in a new mount namespace needs root"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs tmpfs /mnt"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare --mount failed here ({probe.stderr.strip()[:200]}): a container without CAP_SYS_ADMIN?"
    return None


@pytest.mark.slow
def test_a_node_without_the_run_directory_serves_every_new_checkpoint(tiny_model_dir, tmp_path):
    reason = mount_namespaces_unavailable()
    if reason:
        pytest.skip(f"cannot hide the run directory from a second Ray node: {reason}")
    runs = tmp_path / "runs"
    runs.mkdir()
    out = run_scenario("scenario_no_shared_storage", tiny_model_dir, str(runs), "object_store")
    assert "error" not in out, out.get("error")
    remote = next(name for name, node in out["inference_nodes"].items() if node == out["worker_node"])
    local = next(name for name in out["inference_nodes"] if name != remote)
    assert out["sees_checkpoints"] == {remote: False, local: True}  # the worker node really has no run directory
    assert out["summary"]["checkpoints"] == ["base", "ckpt-1", "ckpt-2", "ckpt-3"]
    assert out["summary"]["collector"]["failed"] == 0
    # asked for each new checkpoint, the worker's actor serves it, fetched from the object store
    assert out["served_after"][remote] == {"ckpt-1": "ok", "ckpt-2": "ok", "ckpt-3": "ok"}
    assert out["served_after"][local] == {"ckpt-1": "ok", "ckpt-2": "ok", "ckpt-3": "ok"}
    stats = out["inference_stats"][remote]
    assert stats["adapter_fetches"] >= 3 and stats["adapter_loads"] >= 3
    assert stats["requests"] >= 1 and stats["failed_requests"] == 0 and stats["adapter_load_failures"] == 0
