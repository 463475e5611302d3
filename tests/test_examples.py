"""The example scripts run as documented (with fewer games)."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_learning_loop_example(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path / "cache"))
    out = load("learning_loop").main(games=16, out=str(tmp_path / "out"))
    assert [p.rsplit("/", 1)[1] for p in out["reinforce"]] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert [p.rsplit("/", 1)[1] for p in out["a2c"]] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert len(out["loaded"]) == 2  # both final adapters were served by the backend
