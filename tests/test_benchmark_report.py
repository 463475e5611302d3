"""``benchmarks/report.py`` renders every recorded result in ``benchmarks/results/``: the benchmark
scripts' tables and recorded runs (``command`` + named rows) alike, so a new kind of result file
cannot break the report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_report_renders_every_recorded_result(tmp_path):
    results = sorted((REPO / "benchmarks" / "results").glob("*.json"))
    for path in results:
        (tmp_path / path.name).write_text(path.read_text())
    proc = subprocess.run([sys.executable, "benchmarks/report.py", "--dir", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "RESULTS.md").read_text()
    assert f"from {len(results)} result files" in proc.stdout
    assert text.count("\n## ") == len(results)
    assert "## two-models (a recorded run)" in text and "| alice-ckpt-20 |" in text
