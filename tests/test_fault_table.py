"""The fault table's short version, as CI runs it: ``benchmarks/bench_faults.py --quick`` injects
each of its faults (those no other test covers in a real driver process: see ``QUICK`` there) into a
tiny real run (a process and a local Ray of its own), and every row must say what the README's fault
table says: the run survived (went on, or stopped with its error and resumed), its checkpoints load,
and no trajectory was lost or doubled on its way to the buffer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
QUICK_FAULTS = {"learner kill -9, then resume", "same run name twice at once"}


@pytest.mark.slow
def test_the_quick_fault_table_survives_each_fault(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline",
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "benchmarks/bench_faults.py", "--quick", "--out", str(tmp_path),
                           "--work", str(tmp_path / "work")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    print(proc.stdout[-4000:])
    doc = json.loads((tmp_path / "faults-quick.json").read_text())
    rows = {r["fault"]: r for r in doc["rows"]}
    assert set(rows) == QUICK_FAULTS, proc.stdout[-3000:] + proc.stderr[-3000:]
    for fault, r in rows.items():
        assert r["survived"] is True, (fault, r["what happened"])
        assert r["checkpoints intact"] is True and r["checkpoints"].startswith("ckpt-1..3"), (fault, r)
        assert r["trajectories lost"] == 0 and r["duplicated"] == 0, (fault, r)
    assert proc.returncode == 0  # the script's own verdict: every row survived
    assert doc["machine"]["git_commit"] and doc["settings"]["learning_steps"] == 3

    # the faults' own marks: what the harness saw happen, not just that the run ended
    learner = rows["learner kill -9, then resume"]  # stopped with its error, resumed
    assert "stopped: the run stopped" in learner["what happened"] and "resumed from ckpt-" in learner["what happened"]
    assert learner["recover (s)"] > 0
    # one clear message, not Ray's actor-death text
    assert "died (killed, out of memory, or its node lost)" in learner["what happened"]
    twice = rows["same run name twice at once"]
    assert "1 of 2 finished" in twice["what happened"] and "before Ray started" in twice["what happened"]
    assert "is in use by another run" in twice["what happened"]


def sample(t: float, recovered: int = 0, train: int = 0, eval_: int = 0) -> dict:
    return {"time": t, "collector": {"inference_recovered": recovered, "train_finished": train,
                                     "eval_finished": eval_}}


def test_the_restarted_inference_actor_is_seen_answering_by_the_probe_or_by_games_finished_after_the_kill():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_faults import answered_again
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    killed = 100.0
    # the collector lost games on it, probed, and got an answer
    assert answered_again([sample(99.5, train=5), sample(101.5, train=5), sample(103.5, 1, train=5)],
                          killed) == (103.5, True)
    # nothing was in flight on it: the collector never noticed, but games finished after the restart
    assert answered_again([sample(101.2, train=5), sample(102.7, train=5), sample(104.1, train=5, eval_=1)],
                          killed) == (104.1, False)
    # games that ended just after the kill (within the grace) are not evidence; none after: never seen
    assert answered_again([sample(100.4, train=5), sample(101.1, train=6), sample(101.6, train=6)],
                          killed) == (None, False)
    assert answered_again([sample(99.0, train=3)], killed) == (None, False)
