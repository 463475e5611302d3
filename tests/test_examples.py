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


@pytest.mark.slow
def test_collaborative_example_steps_both_learners(ray_session, tmp_path, monkeypatch):
    """Two trainable models take turns on the generated task following a round spec; both learners step."""
    import os

    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path / "cache"))
    out = load("collaborative_sorting").main(steps=1, out=str(tmp_path), batch_size=8, workers=4,
                                          warm_start_examples=512)
    for name in ("alice", "bob"):
        assert os.path.isfile(os.path.join(out["run_dir"], "checkpoints", name, "ckpt-1", "adapter_config.json"))
    sent = out["summary"]["collector"]
    assert sent["trajectories_sent/alice"] > 0 and sent["trajectories_sent/bob"] > 0
