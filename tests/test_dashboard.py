"""The terminal dashboard: rendered from a recorded run directory into a Rich capture, and live in tmux."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import make_sample
from rich.console import Console

import unstable
from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef, Turn
from unstable.registry import ModelRegistry
from unstable.tracking import Tracker
from unstable.tracking.diversity import diversity_stats
from unstable.tracking.run_reader import RunReader
from unstable.ui.dashboard import WAITING, rate, render, sparkline
from unstable.ui.terminal_interface import SystemSampler, latest_run, main

ENV = "TicTacToe-v0"
REPO = Path(__file__).resolve().parents[1]
PANELS = ("Inference", "Learner", "Collection", "TrueSkill", "Match counts", "Action diversity")


def game(game_id: int, opening: str, learner_wins: bool, *, is_eval: bool = False) -> GameRecord:
    """ckpt-1 (seat 0, learning) against random (seat 1): 5 turns; ckpt-1 opens with ``opening``."""
    agents = (AgentSpec(0, PolicyRef("ckpt-1", version=1), collect_data=not is_eval),
              AgentSpec(1, PolicyRef("random", kind="scripted")))
    spec = GameSpec(game_id=game_id, env_id=ENV, seed=game_id, agents=agents, is_eval=is_eval,
                    eval_player_id=0 if is_eval else None)
    moves = [opening, "[1]", "[2]", "[3]", "[5]"]
    turns = tuple(
        Turn(turn_index=i, player_id=i % 2, observation="board", prompt="p", completion_text=f"[{m}]", action=m,
             format_ok=i != 2, invalid=False, policy=agents[i % 2].policy, sample=make_sample((), (1, 2, 3, 4)),
             gen_seconds=0.5 if i % 2 == 0 else 0.0, env_seconds=0.001)
        for i, m in enumerate(moves)
    )  # fmt: skip
    rewards = {0: 1.0, 1: -1.0} if learner_wins else {0: -1.0, 1: 1.0}
    return GameRecord(spec=spec, turns=turns, final_rewards=rewards, game_info={}, wall_seconds=2.5)


@pytest.fixture
def recorded_run(tmp_path) -> tuple[Path, Tracker, ModelRegistry]:
    """A run directory written by a real Tracker and ModelRegistry, as a run would write it."""
    run_dir = tmp_path / "run"
    tracker = Tracker("dash-run", run_dir=str(run_dir), use_wandb=False,
                      config={"run_name": "dash-run", "batch_size": 8, "buffer_size": 16})
    registry = ModelRegistry(tracker=tracker, log_every=4)
    registry.add_checkpoint(uid="base", path=None, iteration=0)
    registry.add_checkpoint(uid="ckpt-1", path="/tmp/ckpt-1", iteration=1)
    registry.add_fixed(name="random")
    openings = ["[0]", "[4]", "[6]", "[8]"]
    for i in range(12):  # the learner wins 9 of 12 train games (75%)
        record = game(i, openings[i % 4], learner_wins=i % 4 != 3)
        registry.record_game(record)
        tracker.log_game(record)
    for i in (100, 101):
        tracker.log_game(game(i, "[4]", learner_wins=True, is_eval=True))
    tracker.log_game(FailedGame(spec=game(200, "[0]", True).spec, stage="env", error_type="KeyError", message="x"))
    tracker.log({"train/loss": 0.5, "train/grad_norm": 2.0, "train/version": 1})
    tracker.log({"train/loss": 0.25, "train/grad_norm": 1.5, "train/version": 2, "train/staleness_mean": 0.5,
                 "train/approx_kl": 3.1e-3, "train/clipfrac": 0.047,
                 "train/staleness_max": 1.0, "train/lr": 1e-5})
    tracker.log_inference("inference-0", {"tokens_per_second": 123.4, "queue_size": 5, "mean_batch_size": 7.5,
                                          "requests": 40})
    tracker.log({"buffer/size": 12, "buffer/added": 30, "buffer/dropped_stale": 2})
    return run_dir, tracker, registry


def text_of(renderable, width: int = 160) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def test_dashboard_from_a_run_directory_shows_every_panel(recorded_run):
    run_dir, _, registry = recorded_run
    reader = RunReader(run_dir)
    info = reader.info()
    text = text_of(render(info))
    for panel in PANELS:
        assert panel in text
    assert WAITING not in text
    assert "run dash-run" in text and "from files" in text and "learner step 2" in text
    assert re.search(r"inference-0\s+123\.4\s+5\s+7\.5\s+40", text)  # tok/s, queue, batch, requests
    assert "games: 12 train, 2 eval" in text and "failed 1/0" in text
    # per env: games, win, draw, loss, format ok (2 of 3 learner turns well-formed), invalid, length, episode s, gen s
    assert re.search(r"TicTacToe-v0\s+12\s+75%\s+0%\s+25%\s+67%\s+0%\s+5\.0\s+2\.50\s+0\.500", text)
    assert re.search(r"TicTacToe-v0\s+random\s+100%\s+0%\s+0%", text)  # eval per opponent
    assert "0.2500" in text and "1.500" in text and "(max 1)" in text  # latest loss, grad norm, staleness
    assert "3.10e-03" in text and "0.047" in text  # approx KL to the behaviour policy, clip fraction
    assert "12 / 16" in text and "75%" in text  # buffer fill
    for uid, r in registry.interface_info()["ratings"].items():
        if r["games"]:
            assert f"{r['mu']:.1f} ± {r['sigma']:.1f}" in text, uid
    assert re.search(r"ckpt-1\s+0\s+14", text) and re.search(r"random\s+14\s+0", text)  # heat-map, from transcripts
    assert "counted from transcripts" in text
    learner_moves = [[o, "[2]", "[5]"] for o in ["[0]", "[4]", "[6]", "[8]"] * 3]
    expected = diversity_stats(learner_moves)
    assert f"entropy {expected['action_entropy']:.2f} nats  unique moves 17%" in text  # 6 distinct of 36 moves
    assert re.search(r"\[2\]\s+█+░+ 33%", text)  # the learner's most frequent move, with its share
    # the finished run's registry.json gives the exact match counts and win/draw/loss
    registry.save(str(run_dir / "registry" / "registry.json"))
    text = text_of(render(reader.info()))
    assert "counted from transcripts" not in text and re.search(r"ckpt-1\s+\S+\s+[\d.]+ ± [\d.]+\s+12\s+9/0/3", text)


def test_live_info_renders_the_same_numbers(recorded_run):
    _, tracker, _ = recorded_run
    info = tracker.get_interface_info()
    text = text_of(render({**info, "source": "ray"}))
    assert "live via Ray" in text and "123.4" in text and "games: 12 train, 2 eval" in text
    assert "0.2500" in text and "entropy 1.56 nats" in text
    assert re.search(r"ckpt-1\s+0\s+12", text)  # the registry's own match counts (train games only)


def test_narrow_terminal_stacks_the_panels(recorded_run):
    text = text_of(render(RunReader(recorded_run[0]).info()), width=80)
    assert all(panel in text for panel in PANELS)
    assert max(len(line) for line in text.splitlines()) <= 80


def test_an_empty_run_waits_for_data(tmp_path):
    (tmp_path / "empty").mkdir()
    for info in (RunReader(tmp_path / "empty").info(), {}, None, {"means": {}, "registry": {"ratings": {}}}):
        text = text_of(render(info))
        assert text.count(WAITING) == len(PANELS), text
    half = {"latest": {"train/loss": float("nan")}, "registry": {"ratings": {"a": {"mu": 25.0}}}, "history": {}}
    assert "Learner" in text_of(render(half))


def test_reader_follows_appends_and_tolerates_a_half_written_line(recorded_run):
    run_dir = recorded_run[0]
    reader = RunReader(run_dir)
    assert reader.info()["latest"]["train/loss"] == 0.25
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"time": 1.0, "train/loss"')  # the writer is mid-line
    assert reader.info()["latest"]["train/loss"] == 0.25
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(': 0.125, "learner_step": 3}\n')
    info = reader.info()
    assert info["latest"]["train/loss"] == 0.125 and info["learner_step"] == 3 and info["bad_lines"] == 0


def test_helpers():
    assert rate([[0.0, 0.0], [10.0, 5.0], [20.0, 15.0]]) == 0.75
    assert rate([[0.0, 0.0], [100.0, 10.0], [101.0, 12.0]], horizon_s=60) == 2.0
    assert rate([[1.0, 1.0]]) is None
    assert sparkline([1.0, 2.0, 3.0]) == "▁▄█"
    assert sparkline([]) == "" and len(sparkline([1.0] * 50, width=10)) == 10


def test_trueskill_keeps_the_current_checkpoint_and_fixed_opponents_in_view():
    ratings = {f"ckpt-{i}": {"mu": 20.0 + i, "sigma": 2.0} for i in range(30)}
    ratings["random"] = {"mu": 5.0, "sigma": 1.0, "fixed": True}
    text = text_of(render({"registry": {"current": "ckpt-3", "ratings": ratings}}))
    shown = re.findall(r"(ckpt-\d+|random)\s+\S*\s+[\d.]+ ± ", text)
    assert len(shown) == 12 and {"ckpt-3", "random", "ckpt-29", "ckpt-20"} <= set(shown)
    assert "ckpt-19" not in shown and shown[0] == "ckpt-29" and shown[-1] == "random"  # sorted by mu


def test_system_sampler_cpu_and_fake_nvml(monkeypatch):
    stats = SystemSampler(watch_ray_workers=True).sample()
    assert stats["cpus"] >= 1 and stats["mem_total_gb"] > 0 and stats["procs"]["count"] >= 0
    assert "CPU" in text_of(render({"system": stats}))

    class FakeNVML:
        class NVMLError(Exception):
            pass

        nvmlInit = staticmethod(lambda: None)
        nvmlDeviceGetCount = staticmethod(lambda: 1)
        nvmlDeviceGetHandleByIndex = staticmethod(lambda i: i)
        nvmlDeviceGetName = staticmethod(lambda h: b"H200")
        nvmlDeviceGetMemoryInfo = staticmethod(lambda h: type("M", (), {"used": 40e9, "total": 141e9}))
        nvmlDeviceGetUtilizationRates = staticmethod(lambda h: type("U", (), {"gpu": 87}))

        @staticmethod
        def nvmlDeviceGetPowerUsage(h):
            raise FakeNVML.NVMLError("not supported")

    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML)
    stats = SystemSampler().sample()
    assert stats["gpus"] == [{"index": 0, "name": "H200", "util": 87.0, "mem_used_gb": 40.0, "mem_total_gb": 141.0,
                              "power_w": None}]  # fmt: skip
    assert "GPU0 H200: util 87%  mem 40.0/141.0 GB  power -" in text_of(render({"system": stats}))


def test_dashboard_once_and_newest_run(recorded_run, tmp_path, capsys, monkeypatch):
    run_dir = recorded_run[0]
    assert latest_run(tmp_path) == run_dir
    monkeypatch.setenv("COLUMNS", "150")
    assert main([str(run_dir), "--source", "files", "--once"]) == 0
    assert "games: 12 train, 2 eval" in capsys.readouterr().out
    from unstable.cli.commands import main as unstable

    assert unstable(["dashboard", str(run_dir), "--source", "files", "--once"]) == 0
    assert "TrueSkill" in capsys.readouterr().out
    assert main([str(tmp_path / "missing"), "--source", "files", "--once"]) == 2
    assert main(["--source", "files", "--runs-dir", str(tmp_path / "none"), "--once"]) == 2


WRITER = textwrap.dedent("""
    import sys, time
    from unstable.tracking import Tracker
    tracker = Tracker("live", run_dir=sys.argv[1], use_wandb=False)
    step = 0
    while True:
        step += 1
        tracker.log({"train/loss": 1.0 / step, "train/version": step})
        tracker.log_inference("inference-0", {"tokens_per_second": 100.0 + step, "queue_size": step % 7})
        time.sleep(0.5)
""")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install -y tmux)")
def test_dashboard_in_a_real_terminal_shows_updating_numbers(tmp_path):
    run_dir, script, errors = tmp_path / "run", tmp_path / "writer.py", tmp_path / "dashboard.err"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(run_dir)], cwd=REPO)
    socket = f"unstable-test-{os.getpid()}"  # our own tmux server: never touches the user's sessions
    tmux = ["tmux", "-L", socket]
    try:
        deadline = time.monotonic() + 30
        while not (run_dir / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        command = f"{sys.executable} -m unstable.ui.terminal_interface {run_dir} --source files --interval 0.5"
        subprocess.run([*tmux, "new-session", "-d", "-s", "dash", "-x", "150", "-y", "60", "-c", str(REPO),
                        f"{command} 2>{errors}"], check=True)  # fmt: skip

        def step_on_screen() -> int | None:
            pane = subprocess.run([*tmux, "capture-pane", "-p", "-t", "dash"], capture_output=True, text=True).stdout
            found = re.search(r"learner step (\d+)", pane)
            return int(found.group(1)) if found and "Inference" in pane else None

        first = None
        while first is None and time.monotonic() < deadline:
            time.sleep(0.3)
            first = step_on_screen()
        assert first is not None, f"the dashboard did not draw; stderr: {errors.read_text() if errors.exists() else ''}"
        time.sleep(2.0)
        second = step_on_screen()
        assert second is not None and second > first, (first, second)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        writer.terminate()
        writer.wait(timeout=10)


@pytest.mark.slow
def test_live_source_through_named_ray_actors_falls_back_to_files(recorded_run, ray_session):
    from unstable.ui.terminal_interface import NAMESPACE, connect_ray

    ray = ray_session
    run_dir, tracker, _ = recorded_run
    tracker.close()
    live = unstable.Tracker.options(name="Tracker", namespace=NAMESPACE, num_cpus=0).remote(
        run_name="dash-run", run_dir=str(run_dir), use_wandb=False)
    buffer = unstable.StepBuffer.options(name="Buffer", namespace=NAMESPACE, num_cpus=0).remote(max_buffer_size=16)
    try:
        ray.get(live.log.remote({"train/loss": 0.125, "train/version": 3}))
        assert connect_ray(None, run_dir.parent / "another-run") is None  # a live run, but not that one
        source = connect_ray(None, run_dir)
        assert source is not None and not source.owns_ray
        text = text_of(render(source.info()))
        assert "live via Ray" in text and "learner step 3" in text and "0.1250" in text
        assert "0 / 16" in text  # the Buffer actor's size against config.json's buffer_size
        ray.kill(live)  # asynchronous: the actor may answer once or twice more before it is gone
        deadline = time.monotonic() + 20
        text = text_of(render(source.info()))
        while "from files" not in text and time.monotonic() < deadline:
            time.sleep(0.2)
            text = text_of(render(source.info()))
        assert "from files" in text and "games: 12 train, 2 eval" in text
    finally:
        ray.kill(live)
        ray.kill(buffer)


def test_a_run_with_several_models_gets_a_learner_panel_each(tmp_path):
    """Each model's ``<model>/train/...`` and ``<model>/buffer/...`` metrics in its own panel; every
    lineage's current checkpoint stays on the TrueSkill ladder."""
    run_dir = tmp_path / "run"
    models = [{"name": "alice", "buffer": {"size": 32}}, {"name": "bob", "learner": {"batch_size": 8}}]
    tracker = Tracker("two", run_dir=str(run_dir), use_wandb=False, config={"run_name": "two", "models": models})
    registry = ModelRegistry(tracker=tracker)
    for name in ("alice", "bob"):
        registry.add_checkpoint(uid=f"{name}-base", path=None, iteration=0, lineage=name)
    registry.add_checkpoint(uid="alice-ckpt-1", path="/tmp/a1", iteration=1, lineage="alice")
    tracker.log({"alice/train/loss": 0.5, "alice/train/version": 1, "alice/buffer/size": 8})
    tracker.log({"bob/train/loss": 0.125, "bob/train/version": 3, "bob/buffer/size": 4})
    tracker.log({"alice/train/loss": 0.375, "alice/train/version": 2, "alice/buffer/size": 24})
    registry.save(str(run_dir / "registry" / "registry.json"))
    info = RunReader(run_dir).info()
    assert info["learner_step"] == 3  # the furthest model's
    text = text_of(render(info), width=200)
    assert "Learner: alice" in text and "Learner: bob" in text and "Learner " not in text.replace("Learner:", "")
    assert re.search(r"loss\s+0\.3750", text) and re.search(r"loss\s+0\.1250", text)
    assert "24 / 32" in text and "4 / 16" in text  # each buffer against its own capacity (bob's: 2 x batch)
    assert "alice-ckpt-1" in text and "bob-base" in text  # both lineages' current checkpoints
