"""Running a ``tests/scenario_*.py`` script: a run that needs a Ray cluster of its own (two nodes, two runs in
one Ray), in a fresh process with this checkout on its path, so the test session's Ray is not touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_scenario(name: str, *args: str) -> dict[str, Any]:
    """Run ``tests/<name>.py`` with ``args``; its result, the JSON of its last line of output (the test
    fails with the script's output if it exits non-zero)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}  # this checkout, on every node
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(REPO / "tests" / f"{name}.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
