"""Faults a run survives (or stops on, with the cause), and resuming a stopped or killed run.

The end-to-end tests inject faults into the real local Ray: an inference actor killed mid-collection
(``ray.kill(..., no_restart=False)``), an env that raises on some seeds and NaN losses (patched into
the collector's and learner's processes with ``__ray_call__``), a node of a two-node cluster removed,
and ``kill -9`` of ``unstable train``. Each checks the books: every game started ends as exactly one of
finished / failed / dropped / cancelled, and every trajectory the collector sent reached the buffer
once (lost = duplicated = 0).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray.cloudpickle
import torch
import transformers
from conftest import TTT, make_sample, small_run_kwargs
from scenarios import run_scenario

import unstable
from unstable.buffers import StepBuffer
from unstable.inference.base import InferenceDeadError, InferenceUnavailableError
from unstable.learners import REINFORCELearner
from unstable.learners import checkpoints as ckpt
from unstable.records import Step, TrainBatch
from unstable.run.remote import actor_name
from unstable.run.resume import RUN_STATE_FILE, find_resume_point, load_run_config
from unstable.tracking import read_metrics
from unstable.tracking.run_dir import read_jsonl

# the fault injectors below run inside actor processes, which cannot import this test module
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parent.parent


def eventually(fn, timeout=120.0, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def check_books(collector: dict, buffer: dict, tracker: dict) -> None:
    """Nothing lost, nothing doubled: the accounting every faulty run must still satisfy."""
    c = collector
    assert c["train_started"] + c["eval_started"] == (
        c["train_finished"] + c["eval_finished"] + c["failed"] + c["dropped"] + c["cancelled"]), c
    assert c["trajectories_sent"] == buffer["trajectories_received"], (c, buffer)  # lost = 0
    assert buffer["duplicates"] == 0  # duplicated = 0
    assert tracker.get("collect/games", 0) == c["train_finished"]
    assert tracker.get("eval/games", 0) == c["eval_finished"]
    assert tracker.get("collect/failed_games", 0) + tracker.get("eval/failed_games", 0) == c["failed"]
    assert tracker.get("collect/games_dropped", 0) + tracker.get("eval/games_dropped", 0) == c["dropped"]


def tracker_counts(ray, run, collector: dict) -> dict:
    """The tracker's counters once the collector's fire-and-forget log_game calls have all landed."""
    expected = collector["train_finished"] + collector["eval_finished"] + collector["failed"] + collector["dropped"]

    def landed():
        counts = ray.get(run.actors.tracker.counts.remote())
        logged = sum(counts.get(f"{s}/{k}", 0) for s in ("collect", "eval")
                     for k in ("games", "failed_games", "games_dropped"))
        return counts if logged == expected else None

    return eventually(landed, timeout=10) or ray.get(run.actors.tracker.counts.remote())


# ---------------------------------------------------------------------------------- fault injectors
def raise_in_env_on_seeds(collector, modulus: int, remainder: int) -> None:
    """In the collector's process: train games whose seed % modulus == remainder raise at their first step."""
    import textarena as ta

    real_make = ta.make

    class RaisingEnv:
        def __init__(self, env):
            self._env, self._seed = env, None

        def __getattr__(self, name):
            return getattr(self._env, name)

        def reset(self, num_players, seed=None):
            self._seed = seed
            return self._env.reset(num_players=num_players, seed=seed)

        def step(self, action):
            if self._seed is not None and self._seed < 2**31 and self._seed % modulus == remainder:
                raise RuntimeError(f"injected env fault at seed {self._seed}")
            return self._env.step(action=action)

    ta.make = lambda env_id, *args, **kwargs: RaisingEnv(real_make(env_id, *args, **kwargs))


def nan_loss_on_updates(learner, bad: set[int] | None = None, from_update: int | None = None) -> None:
    """In the learner's process: the policy loss of the chosen updates (1-based) becomes NaN."""
    from unstable.learners.base import BaseLearner

    original = learner.update
    calls = [0]

    def update(batch):
        calls[0] += 1
        poisoned = calls[0] in (bad or set()) or (from_update is not None and calls[0] >= from_update)
        if poisoned:
            learner._backward = lambda loss, what: BaseLearner._backward(loss * float("nan"), what)
        else:
            learner.__dict__.pop("_backward", None)
        return original(batch)

    learner.update = update


# ---------------------------------------------------------------------------------- unit level
def test_atomic_checkpoints_have_a_marker_and_partial_writes_are_ignored(tmp_path):
    ckpt.atomic_save(tmp_path / "ckpt-1", lambda d: (d / "w").write_text("1"))
    assert ckpt.is_complete(tmp_path / "ckpt-1")
    (tmp_path / ".ckpt-2.tmp-abc").mkdir()  # a kill during the write of ckpt-2
    (tmp_path / ".ckpt-2.tmp-abc" / "w").write_text("half")
    (tmp_path / ".ckpt-0.del-12").mkdir()  # a kill during a retention deletion
    assert ckpt.latest_complete(tmp_path) == (1, tmp_path / "ckpt-1")
    assert ckpt.clean_partial(tmp_path) == [".ckpt-0.del-12", ".ckpt-2.tmp-abc"]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1"]
    (tmp_path / "ckpt-3").mkdir()  # no marker: never picked
    assert ckpt.latest_complete(tmp_path)[0] == 1 and ckpt.list_checkpoints(tmp_path, complete_only=True).keys() == {1}


def _damaged_run(root: Path, versions: int = 3) -> Path:
    """A run directory as a kill or a bad copy leaves it: ckpt-1..N written, run_state.json at N."""
    from unstable.registry import ModelRegistry
    from unstable.run.resume import RunStateWriter

    registry = ModelRegistry()
    registry.add_checkpoint(uid="base", path=None, iteration=0)
    registry.add_fixed("random")
    for v in range(1, versions + 1):
        path = ckpt.atomic_save(root / "checkpoints" / f"ckpt-{v}", lambda d: (d / "trainer_state.pt").write_text("x"))
        registry.add_checkpoint(uid=f"ckpt-{v}", path=str(path), iteration=v)
        registry.update_ratings([f"ckpt-{v}", "random"], [1.0, -1.0])

    class Empty:
        def state_dict(self):
            return {}

    (root / "registry").mkdir(parents=True)
    RunStateWriter(root, registry, Empty(), Empty())(versions)
    state = json.loads((root / RUN_STATE_FILE).read_text())
    state["scheduler"] = {"next_game_id": 0, "train_idx": 0, "eval_idx": 0}
    (root / RUN_STATE_FILE).write_text(json.dumps(state))
    return root


def test_resume_falls_back_to_the_newest_complete_checkpoint_and_says_what_it_dropped(tmp_path, capsys):
    """A checkpoint missing its COMPLETE marker (damaged, half-copied) used to stop --resume, and so
    did the state snapshot naming it once the user moved it away."""
    run = _damaged_run(tmp_path / "run")
    (run / "checkpoints" / "ckpt-3" / ckpt.COMPLETE_MARKER).unlink()
    point = find_resume_point(run)
    assert (point.version, point.checkpoint) == (2, run / "checkpoints" / "ckpt-2")
    assert (run / "checkpoints" / "ckpt-3.incomplete" / "trainer_state.pt").is_file()  # set aside, not deleted
    registry = point.state["registry"]
    assert [m["uid"] for m in registry["models"]] == ["base", "random", "ckpt-1", "ckpt-2"]
    assert registry["current"] == {"model": "ckpt-2"} and point.state["learner_version"] == 2
    assert "ckpt-3" not in registry["matches"] and all("ckpt-3" not in row for row in registry["matches"].values())
    out = capsys.readouterr().out
    assert "ckpt-3 has no COMPLETE marker" in out and "dropping ckpt-3" in out
    # the user moved the newest checkpoint away by hand: the snapshot is rolled back the same way
    other = _damaged_run(tmp_path / "other")
    shutil.move(str(other / "checkpoints" / "ckpt-3"), str(tmp_path / "moved"))
    point = find_resume_point(other)
    assert point.version == 2 and point.state["registry"]["current"] == {"model": "ckpt-2"}
    assert "dropping ckpt-3" in capsys.readouterr().out


class _AnyActor:
    """An actor handle whose every method's ``.remote()`` returns a stand-in ref."""

    def __getattr__(self, method):
        return type("Method", (), {"remote": staticmethod(lambda *args, **kwargs: (method, args))})


def _resumed_run(run_dir: Path, at_step: int):
    from types import SimpleNamespace

    from unstable.run.build import Run

    run = object.__new__(Run)  # start()'s own logic, without actors
    run.config = SimpleNamespace(resume_from=str(run_dir), to_dict=lambda: {"models": [{"name": "model"}],
                                                                            "resume_from": str(run_dir)})
    run.actors = SimpleNamespace(learners={"model": _AnyActor()}, start_versions={"model": at_step},
                                 collector=_AnyActor(), buffers={})
    run.run_dir, run._train_refs, run._collect_ref, run._started = str(run_dir), [], None, False
    return run


def test_a_resume_with_nothing_to_train_leaves_config_json_as_it_was(tmp_path, capsys):
    """``--resume --set learning_steps=2`` on a run at step 4 said "nothing to train" and still
    rewrote config.json (start()'s settings were recorded first, build()'s by the Tracker)."""
    from unstable.run.resume import CONFIG_FILE

    path = tmp_path / CONFIG_FILE
    path.write_text('{"models": [{"name": "model"}],  "learning_steps": 4, "num_collection_workers": 8}\n')
    before = path.read_bytes()
    assert _resumed_run(tmp_path, at_step=4).start(learning_steps=2, num_collection_workers=3, block=False) is None
    assert "already at step 4 >= learning_steps (2); nothing to train" in capsys.readouterr().out
    assert path.read_bytes() == before
    _resumed_run(tmp_path, at_step=4).start(learning_steps=6, num_collection_workers=3, block=False)  # trains
    assert json.loads(path.read_text()) == {"models": [{"name": "model"}], "resume_from": str(tmp_path),
                                            "learning_steps": 6, "num_collection_workers": 3, "num_eval_workers": 16}


def test_resume_sets_aside_a_marked_checkpoint_without_its_optimiser_state(tmp_path, capsys):
    """A checkpoint with its COMPLETE marker but no trainer_state.pt (damaged after the write) used
    to stop --resume with an error; it is set aside like an incomplete one."""
    run = _damaged_run(tmp_path / "run")
    (run / "checkpoints" / "ckpt-3" / "trainer_state.pt").unlink()
    (run / "checkpoints" / "ckpt-2" / "trainer_state.pt").unlink()
    point = find_resume_point(run)
    assert (point.version, point.checkpoint) == (1, run / "checkpoints" / "ckpt-1")
    assert sorted(os.listdir(run / "checkpoints")) == ["ckpt-1", "ckpt-2.incomplete", "ckpt-3.incomplete"]
    assert point.state["registry"]["current"] == {"model": "ckpt-1"} and point.state["learner_version"] == 1
    out = capsys.readouterr().out
    assert "ckpt-3 has no trainer_state.pt" in out and "ckpt-2 has no trainer_state.pt" in out
    assert "dropping ckpt-2, ckpt-3" in out


def test_a_moved_run_directory_resumes_with_its_checkpoints_at_the_new_place(tmp_path):
    """The registry kept absolute checkpoint paths, so a run directory moved or copied elsewhere
    resumed into games that all failed (no adapter at the old path)."""
    from unstable.cli.commands import run_checkpoint
    from unstable.run.resume import portable_registry

    old = _damaged_run(tmp_path / "old")
    saved = json.loads((old / RUN_STATE_FILE).read_text())["registry"]["models"]
    assert {m["uid"]: m["path_or_name"] for m in saved if m["iteration"]} == {
        f"ckpt-{v}": os.path.join("checkpoints", f"ckpt-{v}") for v in (1, 2, 3)}
    (old / "config.json").write_text(json.dumps({"model_name": "m"}))
    new = tmp_path / "elsewhere" / "moved"
    new.parent.mkdir()
    shutil.move(str(old), str(new))
    point = find_resume_point(new)
    paths = {m["uid"]: m["path_or_name"] for m in point.state["registry"]["models"]}
    assert paths["ckpt-3"] == str(new / "checkpoints" / "ckpt-3") and paths["random"] == "random"
    assert all(os.path.isdir(paths[f"ckpt-{v}"]) for v in (1, 2, 3))
    assert run_checkpoint(str(new), "ckpt-2")[1] == str(new / "checkpoints" / "ckpt-2")  # unstable eval --run
    # a path outside the run directory (a user's adapter, a fixed opponent) stays as it was
    state = {"models": [{"uid": "a", "fixed": True, "path_or_name": "/adapters/a"},
                        {"uid": "b", "fixed": False, "path_or_name": "/elsewhere/ckpt-1"}]}
    assert portable_registry(state, "/runs/r") == state


def test_resume_restores_the_role_baselines_and_counts_the_buffered_steps_it_drops(tmp_path, capsys):
    """A resume restarted the RAE baselines from zero and dropped the buffer's contents without a word."""
    from test_buffers import default_buffer, make_game

    from unstable.run.resume import RunStateWriter, restore_buffers

    run = _damaged_run(tmp_path / "run")
    state = json.loads((run / RUN_STATE_FILE).read_text())
    buffer = default_buffer()
    for game_id in range(3):
        buffer.add_game(make_game(game_id))
    registry, scheduler, tracker = (_Fixed(state[k]) for k in ("registry", "scheduler", "tracker"))
    RunStateWriter(run, registry, scheduler, tracker, {"model": buffer}, stopped=True)(3)  # a run that stops
    point = find_resume_point(run)
    fresh = default_buffer()
    assert restore_buffers(point.state, {"model": fresh}) == 12  # 3 games x 4 steps
    assert "12 buffered steps from the previous run were not restored" in capsys.readouterr().out
    baselines = buffer.final_reward_transformation.transforms[0].baselines
    assert fresh.final_reward_transformation.transforms[0].baselines == baselines != {}
    assert fresh.size() == 0
    # a kill: the snapshot is the last checkpoint's, so how many steps were lost is not known
    RunStateWriter(run, registry, scheduler, tracker, {"model": buffer})(3)
    fresh = default_buffer()
    assert restore_buffers(find_resume_point(run).state, {"model": fresh}) is None
    assert "stopped without saving its state (killed)" in capsys.readouterr().out
    assert fresh.final_reward_transformation.transforms[0].baselines == baselines
    # resumed with other reward transforms: said, and the baselines start afresh
    plain = StepBuffer(100, final_reward_transformation=unstable.reward_transformations.RoleAdvantageFormatter())
    restore_buffers(find_resume_point(run).state, {"model": plain})
    assert "the final reward transform of model's buffer differs" in capsys.readouterr().out
    assert plain.final_reward_transformation.baselines == {}


class _Fixed:
    """A component whose state_dict() is a given snapshot."""

    def __init__(self, state):
        self.state = state

    def state_dict(self):
        return self.state


def test_buffer_counts_trajectories_and_drops_duplicates():
    from test_buffers import make_game  # the buffer tests' two-seat game

    buffer = StepBuffer(100, dedupe=True)
    assert buffer.add_game(make_game(0)) == 4 and buffer.add_game(make_game(1)) == 4
    assert buffer.add_game(make_game(0)) == 0  # resent: ignored
    stats = buffer.stats()
    assert (stats["trajectories_received"], stats["duplicates"], stats["size"]) == (6, 2, 8)
    plain = StepBuffer(100)  # the seed's behaviour: no dedupe
    plain.add_game(make_game(0))
    assert plain.add_game(make_game(0)) == 4 and plain.stats()["duplicates"] == 0


def _steps(seed: int, n: int = 8) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = tuple(torch.randint(0, 96, (6,), generator=g).tolist())
        completion = tuple(torch.randint(0, 96, (3,), generator=g).tolist())
        out.append(Step(env_id="E", game_id=i, player_id=0, turn_index=0,
                        sample=make_sample(prompt, completion, (-1.0,) * 3), reward=float(i % 3 - 1),
                        final_reward=0.0, policy_version=0, format_ok=True, invalid=False, is_last=True))
    return TrainBatch.from_steps(out)


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory) -> str:
    config = transformers.Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("small") / "qwen3"
    transformers.Qwen3ForCausalLM(config).save_pretrained(path)
    return str(path)


def test_resumed_learner_continues_exactly_like_an_uninterrupted_one(small_model_dir, tmp_path):
    """Optimiser moments, version and RNG come back from trainer_state.pt: step 3 after a restart at
    ckpt-2 gives the same adapter as step 3 without a restart."""
    kw = {"lora_cfg": {"lora_rank": 4}, "batch_size": 8, "mini_batch_size": 4, "learning_rate": 1e-2,
          "gradient_checkpointing": False, "activation_checkpointing": False, "seed": 0}
    straight = REINFORCELearner(small_model_dir, output_dir=str(tmp_path / "a"), **kw)
    for k in range(3):
        straight.update(_steps(k))
    first = REINFORCELearner(small_model_dir, output_dir=str(tmp_path / "b"), **kw)
    for k in range(2):
        first.update(_steps(k))
    version, path = ckpt.latest_complete(tmp_path / "b")
    assert version == 2 and (path / "trainer_state.pt").is_file() and ckpt.is_complete(path)
    resumed = REINFORCELearner(small_model_dir, output_dir=str(tmp_path / "b"), initial_lora_path=str(path),
                               initial_version=version, restore_training_state=True, **kw)
    assert resumed.update(_steps(2)).adapter_path.endswith("ckpt-3")
    for p_straight, p_resumed in zip(straight.policy_params, resumed.policy_params, strict=True):
        torch.testing.assert_close(p_resumed, p_straight)
    with pytest.raises(ValueError, match=r"trainer_state\.pt"):
        REINFORCELearner(small_model_dir, output_dir=str(tmp_path / "c"), initial_lora_path=str(tmp_path),
                         restore_training_state=True, **kw)
    # the resumed run's own settings, the saved moments (torch's load_state_dict brought back the saved eps)
    changed = REINFORCELearner(small_model_dir, output_dir=str(tmp_path / "d"), initial_lora_path=str(path),
                               initial_version=version, restore_training_state=True, **kw, adam_eps=1e-3,
                               weight_decay=0.1)
    changed.update(_steps(2))  # the trainer state is loaded before the first update
    group, state = changed.optimizer.param_groups[0], changed.optimizer.state_dict()["state"][0]
    assert (group["eps"], group["weight_decay"]) == (1e-3, 0.1) and state["step"] == 3  # the saved 2, and this one


def test_a_stop_between_a_checkpoint_and_its_metrics_row_gets_the_row_back_on_resume(small_model_dir, tmp_path):
    """Ctrl-C after ckpt-N was written and before its update's row reached the tracker lost that row for good (the
    resumed run starts at N+1; the quickstart test caught it on a busy machine): the checkpoint keeps the row, and a
    resume writes back the one metrics.jsonl lacks, named as the learner logs it."""
    from unstable.run.resume import ResumePoint, lost_step_rows

    run = tmp_path / "run"
    learner = REINFORCELearner(small_model_dir, output_dir=str(run / "checkpoints"), lora_cfg={"lora_rank": 4},
                               batch_size=8, mini_batch_size=4, learning_rate=0.1, gradient_checkpointing=False,
                               activation_checkpointing=False, seed=0)
    rows = [learner.update(_steps(k)).metrics for k in range(2)]
    # row 1 reached the file; row 2 did not, and the stop cut a line short
    (run / "metrics.jsonl").write_text(json.dumps({"learner_step": 1, **rows[0]}) + '\n{"learner_step": 2, "tr')
    point = find_resume_point(run)
    [(row, step)] = lost_step_rows([point])
    assert step == 2 == row["train/version"] and row["train/lr"] == rows[1]["train/lr"]
    assert row["train/reward_mean"] == pytest.approx(rows[1]["train/reward_mean"])
    assert 0 < row["train/update_seconds"] <= rows[1]["train/update_seconds"]  # the saved one leaves out the write
    # one model of several: its rows are <model>/train/..., so an unprefixed row is not its own
    [(named, _)] = lost_step_rows([ResumePoint(run, 2, point.checkpoint, None, "alice")])
    assert named["alice/train/version"] == 2 and not any(k.startswith("train/") for k in named)
    (run / "metrics.jsonl").write_text(json.dumps({"learner_step": 2, **rows[1]}) + "\n")
    assert lost_step_rows([point]) == []  # never written twice


class DeadBackend:
    """An inference actor's client whose actor is gone: every request fails; ``ready`` says how."""

    name = "inference-fake"

    def __init__(self, ready_error: Exception):
        self.ready_error, self.requests = ready_error, 0

    async def generate(self, request):
        from unstable.inference.base import InferenceUnavailableError

        self.requests += 1
        raise InferenceUnavailableError("inference-fake: ActorUnavailableError")

    async def ready(self):
        raise self.ready_error

    async def stats(self):
        return {}


def _local_collector(backend, **kwargs):
    from unstable.collection.collector import Collector
    from unstable.collection.scheduler import GameScheduler
    from unstable.registry import ModelRegistry
    from unstable.samplers.env_samplers import UniformRandomEnvSampler
    from unstable.samplers.model_samplers import BaseModelSampler

    registry = ModelRegistry()
    registry.add_checkpoint(uid="base", path=None, iteration=0)
    scheduler = GameScheduler(BaseModelSampler(registry), UniformRandomEnvSampler([unstable.TrainEnvSpec(num_actors=2,
                                                                                                         **TTT)]))
    return Collector(backends=[backend], buffer=StepBuffer(64), game_scheduler=scheduler, **kwargs), scheduler


@pytest.mark.parametrize(("ready_error", "match"), [
    (InferenceDeadError("inference-fake: dead"), "died and used up their restarts"),
    (InferenceUnavailableError("inference-fake: restarting"), "no inference actor answered for"),
])
def test_collection_stops_with_the_cause_when_no_inference_actor_comes_back(ready_error, match):
    """No endless silent retry: games on a dead actor are dropped, none are sent to it again, and
    collection raises once it is dead for good or silent for ``unavailable_timeout_s``."""
    import asyncio

    backend = DeadBackend(ready_error)
    collector, scheduler = _local_collector(backend, unavailable_timeout_s=0.3, probe_interval_s=0.05)
    with pytest.raises(RuntimeError, match=match):
        asyncio.run(collector.collect(4, 0))
    stats = collector.stats()
    assert stats["dropped"] == 4 == backend.requests and stats["train_started"] == 4 and stats["failed"] == 0
    assert stats["trajectories_sent"] == 0 and scheduler.stats()["games_dropped"] == 4


@pytest.mark.parametrize(("ray_error", "expected"), [
    (ray.exceptions.ActorDiedError(), InferenceDeadError),
    (ray.exceptions.ActorUnavailableError("restarting", b"\0" * 16), InferenceUnavailableError),
])
def test_remote_backend_turns_ray_actor_errors_into_the_cores(ray_error, expected):
    """The collector knows no Ray: the wiring's client translates an actor's death (restarts used up)
    and its unavailability (restarting) into the inference layer's own errors."""
    import asyncio

    from unstable.run.remote import RemoteBackend

    class Method:
        def remote(self, *args):
            async def fail():
                raise ray_error

            return fail()

    class Handle:
        ready = generate = stats = Method()

    backend = RemoteBackend(Handle(), name="inference-7")
    with pytest.raises(expected, match="inference-7") as info:
        asyncio.run(backend.ready())
    assert info.value.__cause__ is ray_error
    with pytest.raises(InferenceUnavailableError):
        asyncio.run(backend.stats())


# ---------------------------------------------------------------------------------- faults on local Ray
@pytest.mark.slow
def test_killed_inference_actor_is_restarted_and_only_its_games_are_dropped(ray_session, tiny_model_dir, tmp_path):
    ray = ray_session
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "kill-inference"))
    try:
        run.start(learning_steps=3, num_collection_workers=8, num_eval_workers=2, block=False)
        collector = run.actors.collector
        assert eventually(lambda: ray.get(collector.stats.remote())["train_finished"] >= 4)
        ray.kill(ray.get_actor(actor_name(run.run_id, "inference-0")), no_restart=False)  # Ray restarts it
        summary = run.wait()
        counts = tracker_counts(ray, run, summary["collector"])
    finally:
        run.stop()
    c = summary["collector"]
    print("kill inference:", {k: c[k] for k in ("train_finished", "eval_finished", "failed", "dropped", "cancelled",
                                                 "trajectories_sent", "inference_recovered")},
          "received", summary["buffer"]["trajectories_received"], "duplicates", summary["buffer"]["duplicates"])
    assert summary["checkpoints"][-3:] == ["ckpt-1", "ckpt-2", "ckpt-3"]  # the run finished
    assert c["dropped"] >= 1 and c["failed"] == 0  # the games in flight on it, as dropped, not failed
    assert c["inference_unavailable"] >= 1 and c["inference_recovered"] >= 1 and c["inference_dead"] == 0
    check_books(c, summary["buffer"], counts)


@pytest.mark.slow
def test_env_errors_and_nan_losses_are_counted_and_the_run_finishes(ray_session, tiny_model_dir, tmp_path):
    ray = ray_session
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "faults"))
    try:
        ray.get(run.actors.collector.__ray_call__.remote(raise_in_env_on_seeds, 4, 1))
        ray.get(run.actors.learner.__ray_call__.remote(nan_loss_on_updates, {2, 3}))
        summary = run.start(learning_steps=3, num_collection_workers=8, num_eval_workers=2)
        counts = tracker_counts(ray, run, summary["collector"])
    finally:
        run.stop()
    c = summary["collector"]
    print("env faults + NaN:", {k: c[k] for k in ("train_finished", "failed", "dropped", "trajectories_sent")},
          "received", summary["buffer"]["trajectories_received"], "duplicates", summary["buffer"]["duplicates"])
    assert summary["checkpoints"][-3:] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    failed = read_jsonl(Path(run.run_dir) / "logs" / "failed_games.jsonl")
    assert c["failed"] >= 1 and c["dropped"] == 0
    assert len(failed) == c["failed"]  # each failure logged once, with its seed
    assert all(f["seed"] % 4 == 1 and "injected env fault" in f["message"] and f["stage"] == "env" for f in failed)
    transcripts = read_jsonl(Path(run.run_dir) / "games" / "transcripts.jsonl")
    assert all(t["seed"] % 4 != 1 for t in transcripts if t["kind"] == "game" and not t["is_eval"])
    check_books(c, summary["buffer"], counts)
    train = [m for m in read_metrics(run.run_dir) if "train/skipped_nonfinite" in m]
    assert [int(m["train/skipped_nonfinite"]) for m in train] == [0, 1, 1, 0, 0]
    assert train[-1]["train/skipped_total"] == 2 and train[-1]["train/version"] == 3


@pytest.mark.slow
def test_a_failing_learner_stops_the_run_with_its_cause_and_keeps_the_checkpoints(ray_session, tiny_model_dir,
                                                                                  tmp_path):
    ray = ray_session
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "nan-forever"))
    try:
        ray.get(run.actors.learner.__ray_call__.remote(nan_loss_on_updates, None, 2))  # every update from the 2nd
        with pytest.raises(ray.exceptions.RayTaskError, match="5 non-finite updates in a row"):
            run.start(learning_steps=4, num_collection_workers=8, num_eval_workers=0)
        assert ray.get(run.actors.registry.checkpoint_uids.remote()) == ["base", "ckpt-1"]
    finally:
        run.stop()
    assert ckpt.latest_complete(Path(run.run_dir) / "checkpoints")[0] == 1
    state = json.loads((Path(run.run_dir) / RUN_STATE_FILE).read_text())
    assert state["learner_version"] == 1 and state["registry"]["current"] == {"model": "ckpt-1"}
    assert find_resume_point(run.run_dir).version == 1  # and it can be resumed from there


# ---------------------------------------------------------------------------------- beyond one machine
@pytest.mark.slow
def test_losing_a_node_of_a_two_node_cluster_does_not_stop_the_run(tiny_model_dir, tmp_path):
    out = run_scenario("scenario_two_nodes", tiny_model_dir, str(tmp_path))
    print("two nodes:", {k: out["collector"][k] for k in ("train_finished", "dropped", "failed", "trajectories_sent")},
          "received", out["buffer"]["trajectories_received"], "duplicates", out["buffer"]["duplicates"])
    nodes = out["inference_nodes"]
    assert nodes["inference-0"] != nodes["inference-1"] and out["worker_node"] in nodes.values()  # one per node
    assert out["checkpoints"][-3:] == ["ckpt-1", "ckpt-2", "ckpt-3"]  # the run finished without the node
    c = out["collector"]
    assert c["dropped"] >= 1 and c["failed"] == 0 and c["inference_unavailable"] >= 1
    check_books(c, out["buffer"], out["tracker"])


# ---------------------------------------------------------------------------------- kill -9 and --resume
def _session_processes(sid: int) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_kill_9_then_resume_finishes_the_run_with_its_registry(ray_session, tiny_model_dir, tmp_path):
    from unstable.cli.commands import main

    ray_tmp = tempfile.mkdtemp(prefix="ray-k9-", dir="/tmp")  # its own Ray, in its own folder and session
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    settings = [f"model_name={tiny_model_dir}", f"runs_dir={tmp_path}", "learning_steps=6", "batch_size=16",
                "mini_batch_size=8", "num_collection_workers=8", "num_eval_workers=2"]
    args = [sys.executable, "-m", "unstable.cli.commands", "train", "--config", "configs/tictactoe-tiny.yaml",
            *[a for s in settings for a in ("--set", s)], "--run-name", "k9"]
    run_dir = tmp_path / "k9"
    with open(tmp_path / "train.log", "w") as log:
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        two = eventually(lambda: len(ckpt.list_checkpoints(run_dir / "checkpoints", complete_only=True)) >= 2
                         or proc.poll() is not None, timeout=600, interval=0.1)
        assert two and proc.poll() is None, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started
        proc.wait()
        orphans = eventually(lambda: not _session_processes(proc.pid), timeout=30) or _session_processes(proc.pid)
        for pid in orphans if isinstance(orphans, list) else []:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert orphans is True, f"Ray processes outlived kill -9 by 30 s: {orphans}"

    before = find_resume_point(run_dir)
    assert 2 <= before.version < 6
    killed_state = json.loads((run_dir / RUN_STATE_FILE).read_text())
    build, start = load_run_config(run_dir)  # config.json holds everything: build() and start() settings
    assert start["learning_steps"] == 6 and build["models"][0]["learner"]["batch_size"] == 16

    assert main(["train", "--resume", str(run_dir)]) == 0
    complete = ckpt.list_checkpoints(run_dir / "checkpoints", complete_only=True)
    assert sorted(complete) == [1, 2, 3, 4, 5, 6]  # the learner went on from the newest complete checkpoint
    state = torch.load(complete[before.version + 1] / "trainer_state.pt", weights_only=False)
    assert state["version"] == before.version + 1
    registry = json.loads((run_dir / "registry" / "registry.json").read_text())
    models = {m["uid"]: m for m in registry["models"]}
    assert [u for u in models if u.startswith("ckpt-")] == [f"ckpt-{v}" for v in range(1, 7)]
    assert registry["current"] == {"model": "ckpt-6"} and "base" in models and "random" in models
    for old in killed_state["registry"]["models"]:  # registered before the kill: still there, ratings kept
        now = models[old["uid"]]
        assert now["games"] >= old["games"]
        if not old["fixed"] and old["uid"] not in killed_state["registry"]["current"].values():  # no more play
            assert (now["mu"], now["sigma"], now["games"]) == (old["mu"], old["sigma"], old["games"])
    metrics = read_metrics(run_dir)
    versions = [m["train/version"] for m in metrics if "train/version" in m and not m.get("train/skipped_nonfinite")]
    assert versions[-1] == 6
    game_ids = [t["game_id"] for t in read_jsonl(run_dir / "games" / "transcripts.jsonl")]
    assert len(game_ids) == len(set(game_ids))  # no game id issued twice across the kill


def test_a_dead_learner_is_one_line_naming_the_model_and_the_resume_command():
    """Ray's ActorDiedError named the learner only deep in its text and said nothing of resuming."""
    import pickle

    from unstable.run.build import LearnerDiedError

    err = pickle.loads(pickle.dumps(LearnerDiedError("alice", "/runs/duo")))  # it crosses Ray like the others
    assert str(err) == ("the learner of model 'alice' died (killed, out of memory, or its node lost); the checkpoints "
                        "written so far are intact: continue the run with `unstable train --resume /runs/duo`")
    assert str(LearnerDiedError(None, "/r")).startswith("the learner died")
