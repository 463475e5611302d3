"""Game transcripts: what a line holds, rotation bounds the size, sampling, crash tolerance, and `unstable replay`."""

from __future__ import annotations

import json

import pytest
from conftest import make_sample
from rich.console import Console

from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef, Turn
from unstable.tracking import Tracker
from unstable.tracking.transcripts import (
    TranscriptConfig,
    TranscriptWriter,
    read_transcripts,
    transcript_files,
    transcript_line,
)
from unstable.ui.replay import clip, replay, select

ENV = "TicTacToe-v0"
CKPT = PolicyRef("ckpt-2", adapter_path="/tmp/ckpt-2", version=2)


def known_game(game_id=7, *, is_eval=False, padding=0) -> GameRecord:
    """ckpt-2 (seat 0) beats random (seat 1) with moves [4], [0], [8]."""
    agents = (AgentSpec(0, CKPT, collect_data=not is_eval), AgentSpec(1, PolicyRef("random", kind="scripted")))
    spec = GameSpec(game_id=game_id, env_id=ENV, seed=123, agents=agents, is_eval=is_eval,
                    eval_player_id=0 if is_eval else None)
    moves = [(0, "[4]", "Centre first. [4]"), (1, "[0]", "[0]"), (0, "[8]", "I play [8] and win" + "." * padding)]
    turns = tuple(
        Turn(turn_index=i, player_id=pid, observation=f"[GAME] board {i} [bold]x[/bold]", prompt=f"<prompt {i}>",
             completion_text=text, action=action, format_ok=True, invalid=False, policy=agents[pid].policy,
             sample=make_sample((1, 2, 3), (5, 6)) if pid == 0 else None, gen_seconds=0.25, env_seconds=0.001)
        for i, (pid, action, text) in enumerate(moves)
    )  # fmt: skip
    return GameRecord(spec=spec, turns=turns, final_rewards={0: 1.0, 1: -1.0}, game_info={0: {"reason": "three"}},
                      wall_seconds=0.8)


def test_a_line_holds_the_whole_game():
    line = json.loads(json.dumps(transcript_line(known_game(), learner_step=5)))
    assert (line["kind"], line["game_id"], line["env_id"], line["seed"]) == ("game", 7, ENV, 123)
    assert line["learner_step"] == 5
    assert line["seats"][0] == {"player_id": 0, "uid": "ckpt-2", "kind": "checkpoint", "adapter_path": "/tmp/ckpt-2",
                                "version": 2, "lineage": None, "collect_data": True, "prompt_template": "default",
                                "action_extraction": "default"}  # fmt: skip
    assert [t["action"] for t in line["turns"]] == ["[4]", "[0]", "[8]"]
    first = line["turns"][0]
    assert (first["prompt"], first["completion"], first["observation"]) == ("<prompt 0>", "Centre first. [4]",
                                                                            "[GAME] board 0 [bold]x[/bold]")
    assert (first["prompt_tokens"], first["completion_tokens"], first["gen_seconds"]) == (3, 2, 0.25)
    assert (first["format_ok"], first["invalid"], first["policy_version"]) == (True, False, 2)
    assert line["final_rewards"] == {"0": 1.0, "1": -1.0}
    assert line["outcomes"] == {"0": "win", "1": "loss"}
    assert line["wall_seconds"] == 0.8 and line["game_info"] == {"0": {"reason": "three"}}
    failed = transcript_line(FailedGame(spec=known_game().spec, stage="env", error_type="KeyError", message="boom",
                                        turns=known_game().turns[:1]))
    assert failed["kind"] == "failed" and failed["failure"]["error_type"] == "KeyError" and failed["num_turns"] == 1
    assert failed["failure"]["policy"] is None  # the game failed, not a seat's turn


def test_tracker_writes_train_eval_and_failed_games(tmp_path):
    tracker = Tracker("t", run_dir=str(tmp_path / "run"), use_wandb=False)
    tracker.set_learner_step(3)
    tracker.log_game(known_game(1))
    tracker.log_game(known_game(2, is_eval=True))
    tracker.log_game(FailedGame(spec=known_game(3).spec, stage="policy", error_type="TimeoutError", message="slow",
                                policy=PolicyRef("gpt-opponent", "api")))
    tracker.close()
    lines = read_transcripts(tmp_path / "run")
    assert [(x["game_id"], x["kind"], x["is_eval"], x["learner_step"]) for x in lines] == [
        (1, "game", False, 3), (2, "game", True, 3), (3, "failed", False, 3)]  # fmt: skip
    failed_log = (tmp_path / "run" / "logs" / "failed_games.jsonl").read_text().splitlines()
    assert lines[-1]["failure"]["policy"] == json.loads(failed_log[-1])["policy"] == "gpt-opponent"  # whose turn failed
    assert transcript_files(tmp_path / "run") == [tmp_path / "run" / "games" / "transcripts.jsonl"]
    off = Tracker("t", run_dir=str(tmp_path / "off"), use_wandb=False, transcripts=TranscriptConfig(enabled=False))
    off.log_game(known_game(1))
    assert transcript_files(tmp_path / "off") == []


def test_rotation_bounds_the_size(tmp_path):
    writer = TranscriptWriter(tmp_path, TranscriptConfig(max_bytes=4096, backups=2))
    size = len(json.dumps(transcript_line(known_game())).encode()) + 1
    for i in range(60):
        writer.write(known_game(i))
    writer.close()
    files = transcript_files(tmp_path)
    assert [f.name for f in files] == ["transcripts.jsonl.2", "transcripts.jsonl.1", "transcripts.jsonl"]
    assert all(f.stat().st_size <= 4096 for f in files)
    assert sum(f.stat().st_size for f in files) <= 3 * 4096
    ids = [line["game_id"] for line in read_transcripts(tmp_path)]
    assert ids == list(range(60 - len(ids), 60))  # the newest games, oldest first, none lost in between
    assert len(ids) >= 2 * (4096 // size)
    single = TranscriptWriter(tmp_path / "single", TranscriptConfig(max_bytes=1024, backups=0))
    for i in range(5):
        single.write(known_game(i, padding=2000))  # one line is larger than max_bytes: one game per file
    assert [line["game_id"] for line in read_transcripts(tmp_path / "single")] == [4]


def test_sampling_keeps_a_fraction_and_every_failure(tmp_path):
    writer = TranscriptWriter(tmp_path, TranscriptConfig(sample_rate=0.25, seed=1))
    kept = sum(writer.write(known_game(i)) for i in range(400))
    assert 60 < kept < 140
    assert writer.write(FailedGame(spec=known_game().spec, stage="env", error_type="E", message="m"))
    again = TranscriptWriter(tmp_path / "again", TranscriptConfig(sample_rate=0.25, seed=1))
    assert sum(again.write(known_game(i)) for i in range(400)) == kept  # the same seed keeps the same games
    for bad in ({"sample_rate": 0.0}, {"max_bytes": 10}, {"backups": -1}):
        with pytest.raises(ValueError):
            TranscriptConfig(**bad)


def test_a_crash_mid_line_is_cut_on_resume(tmp_path):
    writer = TranscriptWriter(tmp_path)
    writer.write(known_game(1))
    writer.close()
    with open(tmp_path / "transcripts.jsonl", "a") as f:
        f.write('{"game_id": 2, "tu')
    assert [x["game_id"] for x in read_transcripts(tmp_path)] == [1]
    TranscriptWriter(tmp_path).write(known_game(3))
    assert [x["game_id"] for x in read_transcripts(tmp_path)] == [1, 3]


def test_replay_prints_a_known_game(tmp_path):
    tracker = Tracker("t", run_dir=str(tmp_path / "run"), use_wandb=False)
    for i in (5, 7, 9):
        tracker.log_game(known_game(i, is_eval=i == 9))
    console = Console(record=True, width=120)
    assert replay(tmp_path / "run", game=7, console=console) == 1
    text = console.export_text()
    assert "game 7 · TicTacToe-v0 · seed 123 · train" in text
    assert "P0 ckpt-2 (checkpoint v2, collects data)  reward +1.00  win" in text
    assert "P1 random (scripted)  reward -1.00  loss" in text
    assert "[GAME] board 0 [bold]x[/bold]" in text  # observations are printed literally, not as markup
    assert "Centre first. [4]" in text and "action '[8]'" in text
    assert "<prompt 0>" not in text
    console = Console(record=True, width=120)
    replay(tmp_path / "run", last=2, console=console, show_prompts=True)
    text = console.export_text()
    assert "game 7 ·" in text and "game 9 ·" in text and "game 5 ·" not in text and "<prompt 0>" in text
    assert [x["game_id"] for x in select(read_transcripts(tmp_path / "run"), env="Other-v0")] == []
    assert clip("abcdefghij", 4) == "ab\n… (6 characters cut) …\nij"
    with pytest.raises(FileNotFoundError, match="transcripts"):
        replay(tmp_path / "nothing")


def test_unstable_replay_command(tmp_path, capsys):
    from unstable.cli.commands import main

    tracker = Tracker("t", run_dir=str(tmp_path / "run"), use_wandb=False)
    tracker.log_game(known_game(11))
    assert main(["replay", str(tmp_path / "run"), "--last", "1"]) == 0
    assert "game 11 · TicTacToe-v0" in capsys.readouterr().out
    assert main(["replay", str(tmp_path / "run"), "--game", "12"]) == 1
    assert main(["replay", str(tmp_path / "missing")]) == 2
