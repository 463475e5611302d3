"""The GPU check's CPU rehearsal: the same script, steps and summary as on a GPU, with tiny models."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("setup", "learner", "learner_mixed", "inference", "build_async", "build_sync", "vram")
"""The steps rehearsed here. The quickstart step (the default job with its warm start, ~40 s on CPU) is left to
tests/test_quickstart.py, which runs the same command; the VRAM step reads one length."""


@pytest.mark.slow
def test_the_gpu_check_rehearses_on_cpu_and_summarises_every_step(tmp_path):
    out = tmp_path / "check"
    env = dict(os.environ, OUT=str(out), PY=sys.executable, BUDGET_S="220", CAP_A="50", CAP_D="80",
               STEPS="b,d,a,c,b2", ARGS_C="--shapes 1m --lens 64 --budget-s 10",
               SITE=str(tmp_path / "site"), BUNDLE=str(tmp_path / "no-bundle"), RUNS=str(tmp_path / "runs"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # each build run gets 50 s: enough on a quiet machine, a recorded timeout on a loaded one
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu"], env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    status = {s["step"]: s["status"] for s in summary["steps"]}
    assert set(status) == {*STEPS, "quickstart"} and status["quickstart"] == "not run"  # STEPS leaves it out
    log = proc.stdout[-4000:]
    # the packages are installed here: no bundle needed; the fast steps must finish within their caps
    assert status["setup"] == "ok", log
    assert status["inference"] == "ok", log
    for step, state in status.items():
        if step == "quickstart":
            continue
        assert state in ("ok", "timeout", "skipped", "missing"), f"{step}: {state}\n{summary['build_run']}\n{log}"
        if state == "missing":  # only a script another change adds may be absent from this tree
            assert step == "vram" and not (ROOT / "benchmarks" / "bench_vram.py").exists()
    rows = summary["inference"]
    assert {r["batch"] for r in rows} == {1, 8}
    paired = [r for r in rows if "before tok/s" in r]
    assert paired and all(r["before tok/s"] > 0 and r["after tok/s"] > 0 and r["x before"] > 0 for r in paired)
    arrivals = [r for r in rows if r["weights"] == "LoRA r32, a new adapter's first call"]
    assert len(arrivals) == 2 and all(r["after tok/s"] > 0 and r["after graphs compiled"] == 0 for r in arrivals)
    md = (out / "summary.md").read_text()
    assert all(step in md for step in STEPS)
    builds = {row["mode"]: row for row in summary["build_run"]}
    for mode in ("async", "sync"):
        if status[f"build_{mode}"] == "ok":
            assert builds[mode]["ok"] is True and builds[mode]["learner_steps"] >= 1
    if status["learner"] == "ok":  # one update and one bare pass profiled, flex_attention's CPU refusal recorded
        profiled = {row["variant"] for row in summary["learner_profile"]}
        assert {"update", "ideal: bare fwd+bwd, one step a pass"} <= profiled
        assert any(row["kernel"] == "aten::mm" for row in summary["learner_profile"])
