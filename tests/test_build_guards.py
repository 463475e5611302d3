"""What build() refuses before Ray starts, and what a resume decides before anything starts.

* A second build() in a process whose first run still holds the CPUs waited in Ray forever, without
  a word: now it is refused, naming the running run and ``stop()``; and Ray's free resources are
  counted (another process's run in a joined cluster), not only its totals.
* ``num_inference_actors`` / ``num_learner_workers`` the machine cannot hold, and a run directory
  that holds checkpoints, were refused only after Ray had started (40-80 s in on 2 CPUs).
* ``unstable train --resume`` with nothing left to train started Ray, an inference actor and a
  learner (about 2 minutes), and said what the resume dropped twice (stdout, and logging's stderr).
"""

from __future__ import annotations

import json

import pytest
from conftest import small_run_kwargs

import unstable
import unstable.run.build as build_mod
import unstable.run.resources as resources
import unstable.run.wiring as wiring
from unstable.run.build import Run
from unstable.run.config import BuildConfig


def _no_actors(monkeypatch) -> None:
    def must_not_run(*args, **kwargs):
        raise AssertionError("the run's actors were started before the check")

    monkeypatch.setattr(wiring, "start_actors", must_not_run)


def _live_run(cfg: BuildConfig, name: str, run_dir: str) -> Run:
    """A Run this process built and did not stop, as build() leaves it (its config, name and
    directory); its actors are not needed to hold the place: the check counts what its config asks."""
    run = object.__new__(Run)
    run.config, run.run_name, run.run_dir = cfg, name, run_dir
    return run


def test_a_second_build_beside_a_running_run_is_refused_naming_it(ray_session, tiny_model_dir, tmp_path,
                                                                 monkeypatch):
    """The session's Ray has 2 CPUs: the first run's learner and inference actor hold both."""
    first = _live_run(BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, "first")), "first",
                      str(tmp_path / "first"))
    monkeypatch.setattr(build_mod, "_LIVE_RUNS", build_mod.weakref.WeakSet([first]))
    _no_actors(monkeypatch)
    with pytest.raises(ValueError, match=r"another run built in this process is still running \(run 'first' \("
                                         rf"{tmp_path / 'first'}\) holds 2 CPU and 0 GPU\).* would wait forever for "
                                         r"CPU: call stop\(\) on that run first"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "second"))
    assert not (tmp_path / "second").exists()  # refused before its run directory was claimed
    build_mod._LIVE_RUNS.discard(first)  # stopped: the next build() has the CPUs
    with pytest.raises(AssertionError, match="actors were started"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "second"))


def test_free_resources_count_what_other_actors_hold(ray_session, tiny_model_dir, tmp_path):
    """A run of another process in the same cluster holds CPUs this one's total-only check counted as
    free: the actors waited forever. A placeholder actor holding one of the 2 CPUs stands in for it."""
    import ray

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self) -> int:
            return 1

    holder = Holder.remote()
    ray.get(holder.ping.remote())
    try:
        cfg = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, "busy"))
        asked = wiring.resource_requests(cfg.models, ray.cluster_resources())[1]
        with pytest.raises(ValueError, match=r"asks Ray for 2 CPU and 0 GPU, but only 1 CPU and 0 GPU of the cluster's "
                                             r"2 CPU and 0 GPU are free: other actors hold the rest"):
            resources.wait_for_free_resources(asked, ray.cluster_resources(), timeout_s=0.5)
    finally:
        ray.kill(holder)
    resources.wait_for_free_resources(asked, ray.cluster_resources())  # released: it fits again


@pytest.mark.parametrize(("setting", "shown"), [
    ({"num_inference_actors": 2}, "2 inference actors 1 CPU and 0 GPU each"),
    ({"num_learner_workers": 4}, "4 learner workers 1 CPU and 0 GPU each"),
])
def test_more_actors_than_the_machine_has_cpus_is_refused_before_ray(setting, shown, tiny_model_dir, tmp_path,
                                                                     monkeypatch, no_ray):
    """On a 2-CPU machine (the local Ray build() would start sees 2; the tests' Ray has 2 too)."""
    monkeypatch.setattr(resources, "_local_cpus", lambda: 2)
    monkeypatch.setattr(resources, "_local_gpus", lambda: 0)
    with pytest.raises(ValueError, match=rf"the run asks Ray for .*{shown}.*but the cluster has 2 CPU and 0 GPU"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, **setting))


def test_the_local_ray_resources_are_what_ray_would_detect(monkeypatch):
    import os

    import ray

    if ray.is_initialized():
        assert resources.planned_resources(None) == ray.cluster_resources()
    else:
        planned = resources.planned_resources(None)
        assert planned["CPU"] == len(os.sched_getaffinity(0)) and planned["GPU"] >= 0
        assert resources.planned_resources("10.0.0.1:6379") is None  # a cluster not joined yet: checked once joined


def _finished_run(root, steps: int, buffered: int) -> str:
    """A run directory as a stopped run leaves it at learner step ``steps``."""
    run_dir = root / "done"
    for v in range(1, steps + 1):
        ckpt = run_dir / "checkpoints" / f"ckpt-{v}"
        ckpt.mkdir(parents=True)
        (ckpt / "COMPLETE").write_text("")
        (ckpt / "trainer_state.pt").write_bytes(b"")
    config = {"models": [{"name": "model", "model_name": "tiny"}],
              "train_envs": [{"env_id": "TicTacToe-v0-train", "num_players": 2, "num_actors": 2,
                              "prompt_template": "qwen3-zs"}],
              "learning_steps": steps, "num_collection_workers": 4, "num_eval_workers": 0}
    (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "run_state.json").write_text(json.dumps({"format": 1, "stopped": True,
                                                        "buffers": {"model": {"steps": buffered}}}))
    return str(run_dir)


def test_resume_with_nothing_to_train_starts_nothing(tmp_path, monkeypatch, capsys, no_ray):
    from unstable.cli.commands import main

    run_dir = _finished_run(tmp_path, steps=2, buffered=7)

    def no_build(**kwargs):
        raise AssertionError("build() was called for a run with nothing to train")

    monkeypatch.setattr(unstable, "build", no_build)
    assert main(["train", "--resume", run_dir]) == 0
    out = capsys.readouterr().out
    assert out.count("nothing to train") == 1
    assert "the learner is already at step 2 >= learning_steps (2)" in out
    with pytest.raises(AssertionError, match="build\\(\\) was called"):  # with steps left, it builds
        main(["train", "--resume", run_dir, "--set", "learning_steps=3"])


def test_what_a_resume_drops_is_said_once(capsys, caplog):
    """Printed to stdout and logged at WARNING, it showed twice where logging is not configured
    (Python's last-resort handler prints warnings on stderr): now it is printed, and logged at INFO."""
    import logging

    from unstable.run.resume import restore_buffers

    with caplog.at_level(logging.WARNING):
        assert restore_buffers({"stopped": True, "buffers": {"model": {"steps": 7}}}, {}) == 7
    assert capsys.readouterr().out.count("7 buffered steps from the previous run were not restored") == 1
    assert not caplog.records  # nothing on stderr a second time


@pytest.mark.slow
def test_a_real_second_build_is_refused_until_the_first_run_stops(ray_session, tiny_model_dir, tmp_path):
    """The whole path with real actors: the first run's learner and inference actor hold the session's
    2 CPUs; the second build() is refused at once, naming it; after ``stop()`` (Ray frees the CPUs
    a moment later) the same build() goes through."""
    import time

    first = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "first"))
    second = None
    try:
        began = time.monotonic()
        with pytest.raises(ValueError, match=rf"run 'first' \({first.run_dir}\) holds 2 CPU .* call stop\(\) on that "
                                             "run first"):
            unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "second"))
        assert time.monotonic() - began < 30  # refused, not left waiting in Ray
        first.stop()
        second = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "second"))
        assert second.run_dir == str(tmp_path / "second")
    finally:
        for run in (first, second):
            if run is not None and run in build_mod._LIVE_RUNS:  # not stopped yet
                run.stop()
