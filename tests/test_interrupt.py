"""Ctrl-C, as a terminal sends it (SIGINT to the whole process group): a line saying what was kept, not a
traceback. Both commands used to end in a page of Python (and Ray) traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TRAIN_CONFIG = """\
model_name: {model}
train_envs: [{{env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2, prompt_template: qwen3-board}}]
batch_size: 16
mini_batch_size: 16
max_generation_len: 8
lora_config: {{lora_rank: 4, lora_alpha: 8}}
activation_checkpointing: false
gradient_checkpointing: false
inference_backend: transformers
wandb_project: null
runs_dir: {runs}
learning_steps: 200
num_collection_workers: 4
num_eval_workers: 0
"""


STEPPED = r"learner step +[1-9]\d*/"  # a progress line after the first learner step (they come every 5 s)


def _default_sigint() -> None:
    """Ctrl-C's default in the child, as in a terminal: a test session started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_after(command: list[str], ready: str, env: dict[str, str], timeout: float = 300) -> tuple[int, str, str]:
    """Start ``command`` in its own process group, press Ctrl-C once its output matches the regex ``ready``,
    return (rc, out, err)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err, text=True, start_new_session=True,
                                preexec_fn=_default_sigint)
        deadline = time.monotonic() + timeout
        while True:
            out.seek(0)
            if re.search(ready, out.read()) or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=300)  # seconds here; minutes when it must share the CPU with busier processes
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read()


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, UNSTABLE_CACHE=str(tmp_path / "cache"),
                RAY_TMPDIR=tempfile.mkdtemp(prefix="ray-int-", dir="/tmp"))


@pytest.mark.slow
def test_ctrl_c_in_the_quickstarts_warm_start_says_what_is_kept(tmp_path):
    rc, out, err = _interrupt_after([sys.executable, "-m", "unstable.cli.commands", "quickstart", "--out",
                                     str(tmp_path / "qs")], "round 1, step", _env(tmp_path))
    assert "round 1, step" in out, out[-2000:] + err[-2000:]
    assert rc == 130, out[-2000:] + err[-2000:]
    assert "unstable quickstart: stopping; a finished warm start is cached" in err
    assert err.rstrip().endswith("unstable quickstart: interrupted") and "Traceback" not in err, err[-3000:]
    assert not list((tmp_path / "cache" / "warm-starts").glob("*/config.json"))  # no half-written warm start


@pytest.mark.slow
def test_ctrl_c_during_unstable_train_stops_the_run_and_says_how_to_resume(tiny_model_dir, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(TRAIN_CONFIG.format(model=tiny_model_dir, runs=tmp_path / "runs"))
    rc, out, err = _interrupt_after([sys.executable, "-m", "unstable.cli.commands", "train", "--config", str(config),
                                     "--run-name", "r"], STEPPED, _env(tmp_path))
    assert re.search(STEPPED, out), out[-2000:] + err[-2000:]
    assert rc == 130, out[-2000:] + err[-3000:]
    run_dir = tmp_path / "runs" / "r"
    assert f"continue with: unstable train --resume {run_dir}" in err
    assert err.rstrip().endswith("unstable train: interrupted") and "Traceback" not in err, err[-3000:]
    assert (run_dir / "checkpoints" / "ckpt-1" / "adapter_config.json").is_file()
    state = json.loads((run_dir / "run_state.json").read_text())  # the stopping run's state, for the resume
    assert state["stopped"] is True and state["learner_version"] >= 1
    assert "could not save the run state" not in err and "actor died" not in err.lower()
