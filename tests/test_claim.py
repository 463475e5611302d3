"""One run per run directory: the claim file (unstable/run/claim.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import small_run_kwargs

import unstable
from unstable.run.claim import CLAIM_FILE, claim_run_dir, release_run_dir


def test_a_live_runs_directory_is_refused_until_it_is_released(tmp_path):
    path = claim_run_dir(tmp_path / "run")
    assert json.loads(path.read_text())["pid"] == os.getpid()
    with pytest.raises(ValueError, match=rf"is in use by another run \(pid {os.getpid()} on this machine"):
        claim_run_dir(tmp_path / "run")
    release_run_dir(path)
    assert not path.exists()
    assert claim_run_dir(tmp_path / "run") == path  # free again


def test_a_dead_runs_claim_is_taken_over_and_a_foreign_one_is_not(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a run killed with kill -9 leaves its claim behind, with a pid that is gone
    run = tmp_path / "run"
    run.mkdir()
    (run / CLAIM_FILE).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename, "time": 0}))
    assert json.loads(claim_run_dir(run).read_text())["pid"] == os.getpid()  # resume works after a crash
    other = tmp_path / "other"
    other.mkdir()
    (other / CLAIM_FILE).write_text(json.dumps({"pid": 1, "host": "node-7", "time": time.time()}))
    with pytest.raises(ValueError, match=r"in use by another run \(pid 1 on host 'node-7'.*delete .*RUN_CLAIM"):
        claim_run_dir(other)  # another machine's process cannot be checked: refused, with the way out
    release_run_dir(other / CLAIM_FILE)  # not ours: left alone
    assert (other / CLAIM_FILE).exists()
    # a claim file left empty by a writer killed mid-write is stale once it is a few seconds old
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / CLAIM_FILE).write_text("")
    with pytest.raises(ValueError, match="in use by another run"):
        claim_run_dir(empty)
    os.utime(empty / CLAIM_FILE, (time.time() - 60, time.time() - 60))
    assert claim_run_dir(empty).exists()


def test_build_refuses_a_directory_another_run_holds_before_ray_starts(tiny_model_dir, tmp_path, no_ray):
    """Two runs with the same name, started together: the second is refused at once, and writes nothing."""
    claim = claim_run_dir(tmp_path / "same")  # the first run, alive
    before = sorted(p.name for p in (tmp_path / "same").iterdir())
    with pytest.raises(ValueError, match=r"run directory .*same is in use by another run"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, run_name="same"))
    assert sorted(p.name for p in (tmp_path / "same").iterdir()) == before == [CLAIM_FILE]
    release_run_dir(claim)


def test_runs_started_in_the_same_second_without_a_name_get_their_own_directories(tiny_model_dir, tmp_path,
                                                                                    monkeypatch):
    """The default name was ``<model>-<unix time>``: the second of two runs started in one second was
    refused and told to "pick another run_name", which it had never given."""
    import re
    from types import SimpleNamespace

    import unstable.run.wiring
    from unstable.run.build import Run, default_run_name
    from unstable.run.config import BuildConfig

    monkeypatch.setattr(unstable.run.wiring, "start_actors",
                        lambda cfg, name: SimpleNamespace(run_dir=str(tmp_path / name), start_version=0,
                                                                  run_id=name))
    import unstable.run.build

    monkeypatch.setattr(unstable.run.build, "_check_room", lambda cfg: None)  # no actors start: any number fit
    cfg = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, run_name=None))
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)  # one second for all of them
    runs = [Run(cfg) for _ in range(3)]  # alive together: each holds its claim
    names = [r.run_name for r in runs]
    assert len(set(names)) == 3
    base = os.path.basename(tiny_model_dir)
    assert all(re.fullmatch(rf"{re.escape(base)}-\d{{8}}-\d{{6}}-[0-9a-f]{{4}}", n) for n in names), names
    for run in runs:
        release_run_dir(run._claim)
    assert len(default_run_name("m" * 300).encode()) == 255  # still one directory name
    # the random part collides too (one in 65536): the taken name is passed over, not refused
    hexes = iter(["beef", "beef", "cafe"])
    monkeypatch.setattr("secrets.token_hex", lambda n: next(hexes))
    first, second = Run(cfg), Run(cfg)
    assert first.run_name.endswith("-beef") and second.run_name.endswith("-cafe")
    for run in (first, second):
        release_run_dir(run._claim)
