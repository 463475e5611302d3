"""The in-run exploitability evaluator is optional: its death costs a warning line, never the run, and the
end-of-run wait for its last reading shows progress, asks for the CPU and is bounded (issue 39, items 2-3)."""

from __future__ import annotations

import os
import threading

import pytest
from ray.exceptions import ActorDiedError

import unstable
from unstable.eval.in_run import ExploitabilityEvaluator, ExploitabilityTarget
from unstable.inference.base import SamplingParams
from unstable.run.evaluator import OptionalHook

KUHN = "KuhnPoker-v0-train"


def test_the_hook_of_a_dead_evaluator_warns_once_and_an_evaluation_error_still_stops_the_run(capsys):
    calls = []

    def dead(version):
        calls.append(version)
        raise ActorDiedError()

    hook = OptionalHook(dead, "in-run exploitability evaluator")
    hook(1)
    hook(2)
    assert calls == [1] and capsys.readouterr().out.count("evaluator died") == 1

    def failed(version):
        raise RuntimeError("the in-run exploitability evaluation failed: bad adapter")

    with pytest.raises(RuntimeError, match="bad adapter"):
        OptionalHook(failed, "evaluator")(1)


def test_raising_the_priority_says_why_when_the_os_refuses(tiny_model_dir, monkeypatch):
    evaluator = ExploitabilityEvaluator(tiny_model_dir, [ExploitabilityTarget(KUHN, "qwen3-board")],
                                        SamplingParams(max_new_tokens=16), backend=object())
    assert evaluator.raise_priority(os.getpriority(os.PRIO_PROCESS, 0)) is None  # permitted: its own niceness

    def refuse(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "setpriority", refuse)
    assert "-> 0: Permission denied" in evaluator.raise_priority(0)
    evaluator.finish(timeout=10)


class _Handle:
    """A local object behind an actor handle's ``.method.remote(...)`` (answers put in Ray's object store)."""

    def __init__(self, obj, ray):
        self.obj, self.ray = obj, ray

    def __getattr__(self, name):
        fn = getattr(self.obj, name)
        return type("M", (), {"remote": staticmethod(lambda *a, **k: self.ray.put(fn(*a, **k)))})


def test_the_end_of_run_wait_shows_progress_and_stops_at_its_bound_saying_how_to_read_later(
        tiny_model_dir, ray_session, monkeypatch, capsys, tmp_path):
    import unstable.run.build as build

    evaluator = ExploitabilityEvaluator(tiny_model_dir, [ExploitabilityTarget(KUHN, "qwen3-board")],
                                        SamplingParams(temperature=1.0, max_new_tokens=16), backend=object())
    started, release = threading.Event(), threading.Event()

    def evaluate(version, *rest):  # a reading that outlasts the bound
        started.set()
        release.wait(30)

    monkeypatch.setattr(evaluator, "evaluate", evaluate)
    monkeypatch.setattr(build, "PROGRESS_S", 0.2)
    evaluator.submit(3)
    assert started.wait(30)
    evaluator.submit(4)
    run = build.Run.__new__(build.Run)
    run.actors = type("A", (), {"evaluator": _Handle(evaluator, ray_session)})()
    game = unstable.TrainEnvSpec(KUHN, 2, 2, "qwen3-board")
    run.config = unstable.BuildConfig(model_name=tiny_model_dir, train_envs=[game], exploitability_wait_s=1)
    run.run_dir, run.exploitability = str(tmp_path), None
    try:
        run._finish_evaluation()
    finally:
        release.set()
    out = capsys.readouterr().out
    assert "at most 1 s: exploitability_wait_s" in out and "still reading the exploitability of learner step 3" in out
    assert "learner step 3, 4 was not read" in out
    assert (f"unstable eval --exploitability --run {tmp_path} --checkpoint ckpt-3 --env {KUHN} --template qwen3-board "
            "--temperature 1 --top-p 0.95 --max-new-tokens 16") in out
    assert run.exploitability == {"evaluated": [], "skipped": [], "not_read": [3, 4]}


@pytest.mark.slow
def test_a_run_whose_evaluator_is_killed_trains_to_the_end(tiny_model_dir, tmp_path, ray_session, capsys):
    """kill -9 of the evaluator actor before training: the learner's hook at each checkpoint and the end-of-run
    wait meet a dead actor; the run trains its steps, returns its summary and says so."""
    from conftest import small_run_kwargs

    game = {"env_id": KUHN, "num_players": 2, "prompt_template": "qwen3-board"}
    kwargs = small_run_kwargs(tiny_model_dir, tmp_path, run_name="killed",
                              train_envs=[unstable.TrainEnvSpec(num_actors=2, **game)],
                              eval_envs=[unstable.EvalEnvSpec(fixed_opponent="random", **game)])
    with unstable.build(**kwargs) as run:
        ray_session.kill(run.actors.evaluator, no_restart=True)
        summary = run.start(learning_steps=1, num_collection_workers=4, num_eval_workers=1)
    assert summary["exploitability"]["died"] and summary["checkpoints"][-1] == "ckpt-1"
    assert "the in-run exploitability evaluator died" in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_whose_last_readings_outlast_the_bound_ends_naming_them(tiny_model_dir, tmp_path, ray_session, capsys,
                                                                      monkeypatch):
    """The default job printed "waiting for the last checkpoint's exploitability" and then nothing for 26 minutes
    (issue 39, item 3). A TicTacToe reading of the tiny model (4,520 states) takes about 50 s, so a 1-step run is
    still reading when training ends: with ``exploitability_wait_s=1`` the run says how the wait goes, stops at
    the bound, and names the unread checkpoints with the commands that read them later."""
    import time

    from conftest import small_run_kwargs

    import unstable.run.build as build

    monkeypatch.setattr(build, "PROGRESS_S", 0.2)  # the driver's progress lines, every 0.2 s instead of 15
    game = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-board"}
    kwargs = small_run_kwargs(tiny_model_dir, tmp_path, run_name="bounded", exploitability_wait_s=1,
                              train_envs=[unstable.TrainEnvSpec(num_actors=2, **game)],
                              eval_envs=[unstable.EvalEnvSpec(fixed_opponent="random", **game)])
    waited = []
    with unstable.build(**kwargs) as run:
        finish = run._finish_evaluation

        def timed():  # the end-of-run wait, timed
            start = time.monotonic()
            finish()
            waited.append(time.monotonic() - start)

        run._finish_evaluation = timed
        summary = run.start(learning_steps=1, num_collection_workers=4, num_eval_workers=1)
    out = capsys.readouterr().out
    assert waited[0] < 30, waited  # unbounded, it took the readings' time: a minute and more
    unread = summary["exploitability"]["not_read"]
    assert unread[-1] == 1 and 1 not in summary["exploitability"]["evaluated"]
    assert "still reading the exploitability of learner step" in out
    assert f"learner step {', '.join(map(str, unread))} was not read; read it later with:" in out
    assert (f"unstable eval --exploitability --run {run.run_dir} --checkpoint ckpt-1 --env TicTacToe-v0-train "
            "--template qwen3-board") in out
