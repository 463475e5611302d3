"""The Tracker: namespaced keys, moving means, JSONL (crash-tolerant), game metrics, W&B offline."""

from __future__ import annotations

import json
import math
import sys
import time

import pytest
from conftest import make_sample

import unstable
from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef, Turn
from unstable.tracking import Tracker, game_samples, read_metrics

ENV = "TicTacToe-v0"


def make_tracker(tmp_path, **kwargs) -> Tracker:
    kwargs.setdefault("use_wandb", False)
    return Tracker("test-run", run_dir=str(tmp_path / "run"), **kwargs)


def turn(i, pid, uid, *, fmt=True, invalid=False, text="abcd", n_tokens=0) -> Turn:
    return Turn(
        turn_index=i, player_id=pid, observation="obs", prompt="p", completion_text=text, action="[0]",
        format_ok=fmt, invalid=invalid, policy=PolicyRef(uid),
        sample=make_sample((), tuple(range(n_tokens))) if n_tokens else None,
    )  # fmt: skip


def game(rewards, turns, *, collect=(0,), uids=("ckpt-1", "random"), is_eval=False, eval_pid=None, info=None):
    agents = tuple(
        AgentSpec(player_id=pid, policy=PolicyRef(uid), collect_data=pid in collect) for pid, uid in enumerate(uids)
    )
    spec = GameSpec(game_id=7, env_id=ENV, seed=123, agents=agents, is_eval=is_eval, eval_player_id=eval_pid)
    return GameRecord(spec=spec, turns=tuple(turns), final_rewards=rewards, game_info=info or {})


def test_keys_must_be_namespaced(tmp_path):
    tracker = make_tracker(tmp_path)
    for bad in ("loss", "collect/", "Collect/x", "charts/x"):
        with pytest.raises(ValueError, match=r"collect/, train/, eval/.*system/") as err:
            tracker.log({"train/ok": 1.0, bad: 1.0})
        assert repr(bad) in str(err.value)
    with pytest.raises(TypeError, match="train/x"):
        tracker.log({"train/x": "high"})
    assert read_metrics(tracker.get_run_dir()) == []  # a rejected call writes nothing
    tracker.log({"learner/loss": 1.0, "system/cpu": 2.0})
    assert tracker.latest() == {"learner/loss": 1.0, "system/cpu": 2.0}


def test_moving_means_over_a_small_window_skip_non_finite(tmp_path):
    tracker = make_tracker(tmp_path, window=3)
    for value in (1.0, 2.0, 3.0, 4.0, math.nan, math.inf):
        tracker.log({"train/x": value})
    tracker.log({"train/y": 10})
    assert tracker.means() == {"train/x": 3.0, "train/y": 10.0}  # mean of the last three finite: 2, 3, 4
    assert tracker.means("train/y") == {"train/y": 10.0}
    assert tracker.latest("train/x") == {"train/x": 4.0}
    assert tracker.counts()["system/nonfinite/train/x"] == 2
    rows = read_metrics(tracker.get_run_dir())
    assert [r["train/x"] for r in rows[:6]] == [1.0, 2.0, 3.0, 4.0, None, None]


def test_jsonl_lines_and_learner_step(tmp_path):
    tracker = make_tracker(tmp_path)
    tracker.log({"collect/x": 1.0})
    tracker.log({"train/loss": 0.5}, step=3)
    tracker.log({"train/version": 4.0, "train/lr": 1e-5})  # the learner's metrics move the step too
    tracker.set_learner_step(9)
    tracker.log({"buffer/size": 12})
    rows = read_metrics(tracker.get_run_dir())
    assert [r["learner_step"] for r in rows] == [0, 3, 4, 9]
    assert rows[1]["train/loss"] == 0.5
    assert all(r["wall_s"] >= 0 and r["time"] > 1e9 for r in rows)
    assert tracker.get_learner_step() == 9


def test_metrics_survive_a_crash_mid_line(tmp_path):
    tracker = make_tracker(tmp_path)
    for i in range(3):
        tracker.log({"train/i": i})
    # no close(): the process "dies" while writing the fourth line
    with open(tmp_path / "run" / "metrics.jsonl", "a") as f:
        f.write('{"time": 1.0, "train/i"')
    assert [r["train/i"] for r in read_metrics(tmp_path / "run")] == [0, 1, 2]
    resumed = make_tracker(tmp_path)  # same run dir: the broken tail is cut before appending
    resumed.log({"train/i": 3})
    assert [r["train/i"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2, 3]


def test_a_corrupt_line_before_the_end_raises(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2"):
        read_metrics(path)


def test_train_game_metrics(tmp_path):
    tracker = make_tracker(tmp_path)
    turns = [
        turn(0, 0, "ckpt-1", fmt=True, text="ab", n_tokens=4),
        turn(1, 1, "random"),
        turn(2, 0, "ckpt-1", fmt=False, invalid=True, text="abcdef", n_tokens=2),
    ]
    tracker.log_game(game({0: 1.0, 1: -1.0}, turns))  # seat 0 collects and wins
    p = f"collect/{ENV}"
    assert tracker.means(p) == {
        f"{p}/win_rate": 1.0, f"{p}/draw_rate": 0.0, f"{p}/loss_rate": 0.0, f"{p}/reward": 1.0,
        f"{p}/format_ok_rate": 0.5, f"{p}/invalid_move_rate": 0.5, f"{p}/game_length": 3.0,
        f"{p}/response_chars": 4.0, f"{p}/completion_tokens": 3.0, f"{p}/ended_by_invalid_rate": 0.0,
        f"{p}/reward_p0": 1.0, f"{p}/reward_p1": -1.0,
    }  # fmt: skip
    # mirror self-play, both seats collect; seat 1's invalid move ends the game, seat 0 wins
    mirror = game(
        {0: 0.0, 1: -1.0},
        [turn(0, 0, "ckpt-1"), turn(1, 1, "ckpt-1", fmt=False, invalid=True)],
        collect=(0, 1),
        uids=("ckpt-1", "ckpt-1"),
        info={1: {"invalid_move": True}},
    )
    tracker.log_game(mirror)
    means = tracker.means(p)
    # seat samples: game 1 seat 0 (win), game 2 seat 0 (win), game 2 seat 1 (loss)
    assert means[f"{p}/win_rate"] == pytest.approx(2 / 3)
    assert means[f"{p}/loss_rate"] == pytest.approx(1 / 3)
    assert means[f"{p}/draw_rate"] == 0.0
    assert means[f"{p}/format_ok_rate"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert means[f"{p}/invalid_move_rate"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert means[f"{p}/ended_by_invalid_rate"] == 0.5
    assert means[f"{p}/game_length"] == 2.5
    assert tracker.counts() == {"collect/games": 2, f"{p}/games": 2}
    assert read_metrics(tracker.get_run_dir())[-1][f"{p}/win_rate"] == 0.5  # per-game mean over its seats


def test_eval_game_metrics(tmp_path):
    tracker = make_tracker(tmp_path)
    turns = [turn(0, 0, "random"), turn(1, 1, "ckpt-2", fmt=False), turn(2, 0, "random"), turn(3, 1, "ckpt-2")]
    tracker.log_game(game({0: 0.0, 1: 0.0}, turns, collect=(), uids=("random", "ckpt-2"), is_eval=True, eval_pid=1))
    tracker.log_game(game({0: 1.0, 1: -1.0}, turns, collect=(), uids=("random", "ckpt-2"), is_eval=True, eval_pid=1))
    p = f"eval/{ENV}/random"
    assert tracker.means("eval/") == {
        f"{p}/win_rate": 0.0, f"{p}/draw_rate": 0.5, f"{p}/loss_rate": 0.5, f"{p}/reward": -0.5,
        f"{p}/game_length": 4.0, f"{p}/format_ok_rate": 0.5, f"{p}/invalid_move_rate": 0.0,
    }  # fmt: skip
    assert tracker.means("collect/") == {}
    assert tracker.get_interface_info()["games_per_env"] == {"collect": {}, "eval": {ENV: 2}}
    with pytest.raises(ValueError, match="eval_player_id"):
        game_samples(game({0: 1.0, 1: -1.0}, turns, is_eval=True))


def test_failed_game_is_counted_and_logged_with_its_seed(tmp_path):
    tracker = make_tracker(tmp_path)
    spec = game({0: 0.0, 1: 0.0}, []).spec
    tracker.log_game(FailedGame(spec=spec, stage="env", error_type="KeyError", message="boom", traceback="tb"))
    assert tracker.counts() == {"collect/failed_games": 1}
    lines = (tmp_path / "run" / "logs" / "failed_games.jsonl").read_text().splitlines()
    assert len(lines) == 1
    failure = json.loads(lines[0])
    assert (failure["seed"], failure["env_id"], failure["stage"]) == (123, ENV, "env")
    assert (failure["error_type"], failure["message"], failure["kind"]) == ("KeyError", "boom", "collect")
    assert read_metrics(tracker.get_run_dir())[-1]["collect/failed_games"] == 1
    assert tracker.get_interface_info()["failed_games"] == {"collect": 1, "eval": 0}


def failure(game_id, message="boom", traceback="tb", is_eval=False):
    spec = GameSpec(game_id=game_id, env_id=ENV, seed=1000 + game_id, agents=game({}, []).spec.agents,
                    is_eval=is_eval, eval_player_id=0 if is_eval else None)
    return FailedGame(spec=spec, stage="env", error_type="KeyError", message=message, traceback=traceback)


def test_failed_games_log_keeps_the_first_failures_up_to_its_cap(tmp_path, caplog):
    """Every game failing once wrote 443 MB of logs/failed_games.jsonl in 10 minutes."""
    path = tmp_path / "run" / "logs" / "failed_games.jsonl"
    huge = "first line of the cause\n" + "x" * 1_000_000 + "\nlast line of the cause"
    tracker = make_tracker(tmp_path, failed_games_max_bytes=60_000)
    tracker.log_game(failure(0, message=huge, traceback=huge))  # a 1 MB completion echoed in the error
    (first,) = [json.loads(line) for line in path.read_text().splitlines()]
    for text in (first["message"], first["traceback"]):
        assert text.startswith("first line of the cause") and text.endswith("last line of the cause")
        assert "characters cut" in text and len(text) < 21_000
    for game_id in range(1, 100):
        tracker.log_game(failure(game_id, is_eval=game_id % 2 == 0))
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.stat().st_size <= 60_000
    assert [f["game_id"] for f in written] == list(range(len(written)))  # the first ones, none skipped
    counts = tracker.counts()
    assert counts["collect/failed_games"] + counts["eval/failed_games"] == 100
    assert counts["system/failed_games_unlogged"] == 100 - len(written) > 0
    assert read_metrics(tracker.get_run_dir())[-1]["system/failed_games_unlogged"] == 100 - len(written)
    assert caplog.text.count("reached its cap of 60000 bytes") == 1
    tracker.close()

    resumed = make_tracker(tmp_path, failed_games_max_bytes=60_000)  # the cap holds over a resume
    resumed.load_state_dict(json.loads(json.dumps(tracker.state_dict())))
    resumed.log_game(failure(100))
    assert len(path.read_text().splitlines()) == len(written)
    assert resumed.counts()["system/failed_games_unlogged"] == 100 - len(written) + 1
    with pytest.raises(ValueError, match="failed_games_max_bytes"):
        make_tracker(tmp_path, failed_games_max_bytes=0)


def test_interface_info_is_json(tmp_path):
    tracker = make_tracker(tmp_path)
    tracker.log({"train/loss": 1.0, "train/bad": math.nan}, step=2)
    tracker.log_game(game({0: 1.0, 1: -1.0}, [turn(0, 0, "ckpt-1")]))
    tracker.log_inference("actor-0", {"queued": 3, "tok_s": math.nan})
    tracker.log_buffer({"size": 10, "buffer/staleness": 1.5})
    ratings = {"base": {"mu": 25.0, "sigma": 8.3}, "ckpt-1": {"mu": 26.0, "sigma": 7.0}}
    tracker.log_registry({"ratings": ratings, "match_counts": {"base": {"ckpt-1": 4}}})
    info = json.loads(json.dumps(tracker.get_interface_info(), allow_nan=False))
    assert info["learner_step"] == 2
    assert info["means"]["train"] == {"train/loss": 1.0}
    assert info["means"]["registry"] == {
        "registry/base/mu": 25.0, "registry/base/sigma": 8.3, "registry/ckpt-1/mu": 26.0, "registry/ckpt-1/sigma": 7.0
    }  # fmt: skip
    assert info["registry"]["match_counts"] == {"base": {"ckpt-1": 4}}
    assert info["inference"] == {"actor-0": {"queued": 3.0, "tok_s": None}}
    assert info["buffer"] == {"buffer/size": 10.0, "buffer/staleness": 1.5}
    assert info["games_per_env"]["collect"] == {ENV: 1}
    assert info["run_dir"] == str(tmp_path / "run")
    assert info["wandb"] is None
    with pytest.raises(TypeError, match="JSON-able"):
        tracker.log_registry({"match_counts": {("a", "b"): 1}})


def test_run_dir_layout_and_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {"model_name": "tiny", "lr": 1e-5, "transform": object()}
    tracker = Tracker("my-run", config=config)
    root = tmp_path / "runs" / "my-run"
    assert tracker.get_run_dir() == str(root)
    for getter, sub in [("get_log_dir", "logs"), ("get_checkpoints_dir", "checkpoints"),
                        ("get_games_dir", "games"), ("get_registry_dir", "registry")]:  # fmt: skip
        assert getattr(tracker, getter)() == str(root / sub)
        assert (root / sub).is_dir()
    written = json.loads((root / "config.json").read_text())
    assert written["model_name"] == "tiny" and written["lr"] == 1e-5
    assert written["transform"].startswith("<object object")
    assert [p.name for p in root.iterdir() if p.name.endswith(".tmp")] == []
    with pytest.raises(ValueError, match="run_dir"):
        Tracker("a/b")
    before = (root / "config.json").read_bytes()
    Tracker("my-run", config={"model_name": "other"}, config_file=False).close()  # a resumed run's: start() writes it
    assert (root / "config.json").read_bytes() == before


def test_close_is_idempotent_and_late_calls_are_dropped(tmp_path):
    tracker = make_tracker(tmp_path)
    tracker.log({"train/x": 1.0})
    tracker.close()
    tracker.close()
    tracker.log({"train/x": 2.0})  # a game still in flight when the run stops: warned and dropped
    assert len(read_metrics(tracker.get_run_dir())) == 1


def test_use_wandb_true_without_wandb_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` raise ImportError
    with pytest.raises(ImportError, match=r"pip install unstable-baselines\[wandb\]"):
        make_tracker(tmp_path, wandb_project="p", use_wandb=True)
    tracker = make_tracker(tmp_path, wandb_project="p", use_wandb=None)  # auto: quietly off
    assert tracker.get_interface_info()["wandb"] is None


def test_wandb_offline_honours_the_project(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    tracker = Tracker(
        "offline-run", wandb_project="my-unstable-project", run_dir=str(tmp_path / "run"),
        use_wandb=None, flush_every_s=0.0, config={"lr": 1e-5},
    )  # fmt: skip
    run = tracker._wandb.run
    assert run.project == "my-unstable-project"
    assert run.name == "offline-run"
    assert run.config["lr"] == 1e-5
    tracker.log({"train/loss": 0.25}, step=1)
    tracker.log_game(game({0: 1.0, 1: -1.0}, [turn(0, 0, "ckpt-1")]))
    info = tracker.get_interface_info()["wandb"]
    assert (info["project"], info["mode"]) == ("my-unstable-project", "offline")
    tracker.close()
    tracker.close()
    assert wandb.run is None
    run_files = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1
    # wandb's service process finishes writing the file after run.finish() returns (measured: ~0.1 s
    # later when pytest captures output): wait for the records, bounded, before reading them
    deadline = time.monotonic() + 30
    while b"train/loss" not in run_files[0].read_bytes() and time.monotonic() < deadline:
        time.sleep(0.1)
    data = run_files[0].read_bytes()
    assert b"my-unstable-project" in data
    assert b"train/loss" in data and b"collect/TicTacToe-v0/win_rate" in data


def test_a_resumed_tracker_continues_the_same_wandb_run(tmp_path, monkeypatch):
    """A resume started a new W&B run: the id was not saved, and wandb.init got none."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    first = Tracker("resumed", wandb_project="p", run_dir=str(tmp_path / "run"), flush_every_s=0.0)
    first.log({"train/loss": 0.5}, step=1)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    assert state["wandb_id"] == first._wandb.run.id
    again = Tracker("resumed", wandb_project="p", run_dir=str(tmp_path / "run"), flush_every_s=0.0,
                    wandb_id=state["wandb_id"])
    again.load_state_dict(state)
    assert again._wandb.run.id == state["wandb_id"] and again.state_dict()["wandb_id"] == state["wandb_id"]
    again.close()
    runs = sorted(p.name for p in (tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(state["wandb_id"] in name for name in runs)  # both parts of one run
    assert make_tracker(tmp_path / "off").state_dict()["wandb_id"] is None


@pytest.mark.slow
def test_tracker_as_a_named_ray_actor(tmp_path, ray_session):
    ray = ray_session
    tracker = unstable.Tracker.options(name="TrackerUnderTest", num_cpus=0).remote(run_name="r",
                                                                                  run_dir=str(tmp_path / "run"))
    try:
        assert ray.get(tracker.get_log_dir.remote()) == str(tmp_path / "run" / "logs")
        ray.get(tracker.log.remote({"train/loss": 2.0}, step=5))
        same = ray.get_actor("TrackerUnderTest")
        assert ray.get(same.means.remote()) == {"train/loss": 2.0}
        ray.get(tracker.close.remote())
    finally:
        ray.kill(tracker)
    assert not hasattr(Tracker("local", run_dir=str(tmp_path / "local"), use_wandb=False), "remote")


def _no_wandb_credentials(monkeypatch, tmp_path):
    """A machine where wandb is installed but nobody ran ``wandb login``."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def test_wandb_plan_logs_offline_without_an_api_key_and_says_how_to_fix_it(tmp_path, monkeypatch):
    from unstable.tracking.wandb_writer import has_wandb_credentials, wandb_plan

    pytest.importorskip("wandb")
    _no_wandb_credentials(monkeypatch, tmp_path)
    assert not has_wandb_credentials()
    plan = wandb_plan("UnstableBaselines", None)
    assert (plan.enabled, plan.mode) == (True, "offline")
    assert all(fix in plan.notice for fix in ("wandb login", "WANDB_API_KEY", "use_wandb=False", "wandb sync"))
    assert wandb_plan("p", True).mode == "offline"  # asked for W&B: still no crash, offline
    assert not wandb_plan(None, None).enabled and not wandb_plan("p", False).enabled
    # a key (in the environment, or where `wandb login` puts it) or an explicit mode: as configured, nothing to say
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert has_wandb_credentials() and wandb_plan("p", None) == type(plan)(True, "online")
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")  # a key for another host does not count
    assert not has_wandb_credentials()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert has_wandb_credentials()
    monkeypatch.delenv("WANDB_API_KEY")
    # the driver's WANDB_MODE becomes the plan's mode, passed to the Tracker actor (which does not see
    # the driver's environment once Ray is up)
    for env_mode, mode in (("disabled", "disabled"), ("offline", "offline"), ("dryrun", "offline")):
        monkeypatch.setenv("WANDB_MODE", env_mode)
        assert wandb_plan("p", None) == type(plan)(True, mode)
    # use_wandb=True without the package is the one error
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install unstable-baselines\[wandb\]"):
        wandb_plan("p", True)
    assert not wandb_plan("p", None).enabled


def test_a_tracker_without_wandb_credentials_logs_offline_instead_of_dying(tmp_path, monkeypatch, caplog):
    """The seed's standard script starts a Tracker itself (wandb_project="UnstableBaselines")."""
    pytest.importorskip("wandb")
    _no_wandb_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    with caplog.at_level("WARNING"):
        tracker = Tracker("seed-script", wandb_project="UnstableBaselines", run_dir=str(tmp_path / "run"))
    assert tracker.get_interface_info()["wandb"]["mode"] == "offline"
    assert any("W&B has no API key here" in r.getMessage() for r in caplog.records)
    tracker.close()


def _wandb_files_in(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_tracker_whose_wandb_cannot_connect_logs_offline_instead_of_dying(tmp_path, monkeypatch, caplog):
    """An API key, but no W&B server to reach (no network, a wrong host): wandb.init raised inside
    the Tracker and killed the run, use_wandb=True or not."""
    wandb = pytest.importorskip("wandb")
    _no_wandb_credentials(monkeypatch, tmp_path)
    _wandb_files_in(monkeypatch, tmp_path)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "2")  # W&B's default: 90 s of retries
    wandb.teardown()  # W&B reads these variables once per process (as a Tracker actor does when it starts)
    try:
        with caplog.at_level("WARNING"):
            tracker = Tracker("no-network", wandb_project="p", use_wandb=True, run_dir=str(tmp_path / "run"),
                              flush_every_s=0.0)
        assert tracker.get_interface_info()["wandb"]["mode"] == "offline"
        tracker.log({"train/loss": 0.5}, step=1)
        tracker.close()
    finally:
        wandb.teardown()  # and the next test reads its own
    said = [r.getMessage() for r in caplog.records if "W&B could not start" in r.getMessage()]
    assert len(said) == 1 and "offline" in said[0] and "wandb login --relogin" in said[0] and "Error" in said[0]
    assert "system/wandb_log_failures" not in tracker.counts()
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))  # ready for `wandb sync`
    assert read_metrics(tracker.get_run_dir())[-1]["train/loss"] == 0.5


def test_a_tracker_whose_wandb_cannot_start_at_all_runs_without_it(tmp_path, monkeypatch, caplog):
    wandb = pytest.importorskip("wandb")

    def broken_init(**kwargs):
        raise wandb.errors.CommError("the W&B service did not start")

    monkeypatch.setattr(wandb, "init", broken_init)
    with caplog.at_level("WARNING"):
        tracker = Tracker("no-wandb", wandb_project="p", use_wandb=True, wandb_mode="online",
                          run_dir=str(tmp_path / "run"), flush_every_s=0.0)
    said = [r.getMessage() for r in caplog.records if "W&B could not start" in r.getMessage()]
    assert len(said) == 1 and "does not log to W&B" in said[0] and "the W&B service did not start" in said[0]
    assert tracker.get_interface_info()["wandb"] is None and tracker.state_dict()["wandb_id"] is None
    tracker.log({"train/loss": 0.5}, step=1)
    tracker.close()
    assert read_metrics(tracker.get_run_dir())[-1]["train/loss"] == 0.5


def test_wandb_failing_mid_run_is_counted_and_said_once(tmp_path, monkeypatch, caplog):
    """A network failure while logging (or finishing) raised out of the Tracker and stopped the run."""
    pytest.importorskip("wandb")
    _wandb_files_in(monkeypatch, tmp_path)
    tracker = Tracker("flaky", wandb_project="p", wandb_mode="offline", run_dir=str(tmp_path / "run"),
                      flush_every_s=0.0)

    def network_down(*args, **kwargs):
        raise ConnectionError("network is unreachable")

    run = tracker._wandb.run
    real_finish = run.finish
    monkeypatch.setattr(run, "log", network_down)
    monkeypatch.setattr(run, "finish", network_down)
    with caplog.at_level("WARNING"):
        tracker.log({"train/loss": 0.5}, step=1)
        tracker.log({"train/loss": 0.25}, step=2)
        tracker.close()
    assert tracker.counts()["system/wandb_log_failures"] == 3  # two logs and the flush in close()
    said = [r.getMessage() for r in caplog.records if "W&B failed to log" in r.getMessage()]
    assert len(said) == 1 and "network is unreachable" in said[0]
    assert any("W&B failed to finish" in r.getMessage() for r in caplog.records)
    assert [m["train/loss"] for m in read_metrics(tracker.get_run_dir())] == [0.5, 0.25]
    real_finish()
