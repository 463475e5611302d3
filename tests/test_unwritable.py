"""A run directory that stops taking writes mid-run (read-only, full): one clear error, and resume works.

The faults are real where the machine allows it: a directory made to refuse new entries with
``chmod`` (or, for root, which ignores modes, ``chattr +i``: immutable, as a read-only mount
behaves). A full disk is simulated by a write that raises ``ENOSPC``.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from conftest import make_sample, small_run_kwargs

import unstable
from unstable.learners import REINFORCELearner, run_training
from unstable.learners import checkpoints as ckpt
from unstable.records import AgentSpec, FailedGame, GameSpec, PolicyRef, Step, TrainBatch
from unstable.tracking import Tracker, read_metrics
from unstable.utils.disk import RunDirUnwritableError, writing


@contextmanager
def refusing_writes(directory: Path) -> Iterator[None]:
    """``directory`` refuses new entries while the block runs (see the module docstring); the test
    is skipped where neither ``chmod`` nor ``chattr`` can do that (a filesystem without attributes)."""
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(0o555)
        undo = ["chmod", oct(mode & 0o7777)[2:], str(directory)]
    elif shutil.which("chattr") and not subprocess.run(["chattr", "+i", str(directory)],
                                                       capture_output=True).returncode:
        undo = ["chattr", "-i", str(directory)]
    else:
        pytest.skip("cannot make a directory refuse writes here (root, and no chattr +i)")
    try:
        try:
            os.rmdir(tempfile.mkdtemp(dir=directory))
            pytest.skip(f"{directory} still takes writes after {undo[0]}")
        except PermissionError:
            pass
        yield
    finally:
        subprocess.run(undo, check=True)


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def failed_game(seed: int) -> FailedGame:
    spec = GameSpec(seed, "TicTacToe-v0-train", seed, (AgentSpec(0, PolicyRef("random", "scripted")),))
    return FailedGame(spec=spec, stage="env", error_type="RuntimeError", message="boom")


# ---------------------------------------------------------------------------------- the error itself
def test_writing_turns_a_refused_write_into_one_error_naming_the_path_and_the_fix(tmp_path):
    target = tmp_path / "checkpoints" / "ckpt-3"
    with pytest.raises(RunDirUnwritableError) as info, writing(target):
        raise PermissionError(errno.EACCES, "Permission denied", str(target))
    error = info.value
    assert str(error).startswith(f"could not write {target}: Permission denied; free space or fix permissions")
    assert "`unstable train --resume RUN_DIR`" in str(error) and error.errno == errno.EACCES
    resumable = error.for_run(tmp_path)
    assert f"`unstable train --resume {tmp_path}`" in str(resumable) and resumable.__cause__ is error.os_error
    import pickle  # it crosses Ray from the learner or the Tracker to Run.wait()

    again = pickle.loads(pickle.dumps(resumable))
    assert type(again) is RunDirUnwritableError and str(again) == str(resumable)
    with pytest.raises(FileNotFoundError), writing(target):  # not a refusal: a bug or a missing file
        (target / "nope").read_text()


# ---------------------------------------------------------------------------------- learner and Tracker
def _batch(seed: int) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    steps = [Step(env_id="E", game_id=i, player_id=0, turn_index=0,
                  sample=make_sample(tuple(torch.randint(0, 96, (6,), generator=g).tolist()), (5, 6), (-1.0, -1.0)),
                  reward=float(i % 3 - 1), final_reward=0.0, policy_version=0, format_ok=True, invalid=False,
                  is_last=True) for i in range(8)]
    return TrainBatch.from_steps(steps)


def _learner(model_dir: str, out: Path, **kwargs) -> REINFORCELearner:
    return REINFORCELearner(model_dir, output_dir=str(out), lora_cfg={"lora_rank": 4}, batch_size=8,
                            mini_batch_size=8, learning_rate=1e-3, gradient_checkpointing=False,
                            activation_checkpointing=False, seed=0, poll_interval_s=0.01, **kwargs)


def test_a_checkpoint_folder_that_refuses_writes_stops_the_learner_with_the_path(model_dir, tmp_path):
    out = tmp_path / "checkpoints"
    lrn = _learner(model_dir, out)
    lrn.update(_batch(0))
    before = sorted(p.name for p in (out / "ckpt-1").iterdir())
    with refusing_writes(out), pytest.raises(RunDirUnwritableError, match=rf"could not write {out}/ckpt-2: "):
        lrn.update(_batch(1))
    assert ckpt.latest_complete(out) == (1, out / "ckpt-1")  # the earlier checkpoint is intact
    assert sorted(p.name for p in (out / "ckpt-1").iterdir()) == before


def test_the_tracker_keeps_its_first_refused_write_and_raises_nothing(tmp_path):
    """Most Tracker calls are fire-and-forget (collector, buffer): raising there would only print a
    traceback per call. It stops writing and holds the error for the training loop and Run.wait()."""
    run = tmp_path / "run"
    tracker = Tracker("t", run_dir=str(run), use_wandb=False)
    tracker.log({"train/loss": 1.0})
    with refusing_writes(run / "logs"):
        tracker.log_game(failed_game(3))  # logs/failed_games.jsonl cannot be created
    error = tracker.write_error()
    assert isinstance(error, RunDirUnwritableError) and error.path == str(run / "logs" / "failed_games.jsonl")
    assert f"unstable train --resume {run}`" in str(error)
    written = read_metrics(run)
    tracker.log({"train/loss": 2.0})  # no raise, and nothing more written
    tracker.log_game(failed_game(4))
    assert read_metrics(run) == written and tracker.write_error() is error
    tracker.close()


def test_a_full_disk_under_the_tracker_stops_the_training_loop_with_it(model_dir, tmp_path):
    run = tmp_path / "run"
    tracker = Tracker("t", run_dir=str(run), use_wandb=False)
    tracker._metrics._file.write = no_space  # the next metrics line finds the disk full

    class Buffer:
        def size(self):
            return 8

        def get_batch(self, n):
            return _batch(0)

    lrn = _learner(model_dir, run / "checkpoints")
    with pytest.raises(RunDirUnwritableError, match=r"metrics\.jsonl: No space left on device; free space"):
        run_training(lrn, 3, buffer=Buffer(), tracker=tracker)
    assert lrn.version == 1  # it stopped after the update whose metrics could not be written
    tracker.close()


# ---------------------------------------------------------------------------------- a real run
@pytest.mark.slow
def test_checkpoints_folder_made_unwritable_mid_run_stops_it_with_one_error_and_resume_works(
        ray_session, tiny_model_dir, tmp_path):
    """The issue's case: the run stopped with PermissionError tracebacks from several actors. Now
    ``Run.wait()`` raises one RunDirUnwritableError naming the folder and the resume command; the
    earlier checkpoints stay intact and ``resume_from`` continues once the folder takes writes again."""
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "read-only"))
    checkpoints = Path(run.run_dir) / "checkpoints"
    pool = ThreadPoolExecutor(1)
    try:
        run.start(learning_steps=50, num_collection_workers=8, num_eval_workers=0, block=False)
        waited = pool.submit(run.wait)
        from test_reliability import eventually

        assert eventually(lambda: ckpt.latest_complete(checkpoints) or waited.done(), timeout=300)
        with refusing_writes(checkpoints):
            error = waited.exception(timeout=300)
            intact = ckpt.list_checkpoints(checkpoints, complete_only=True)
    finally:
        run.stop()
        pool.shutdown(wait=False)
    assert type(error) is RunDirUnwritableError, error
    assert isinstance(error.os_error, PermissionError) and str(error).count("could not write") == 1
    assert str(error).startswith(f"could not write {checkpoints}/ckpt-")
    assert "Operation not permitted" in str(error) or "Permission denied" in str(error)
    assert f"`unstable train --resume {run.run_dir}`" in str(error)
    assert intact and ckpt.list_checkpoints(checkpoints, complete_only=True) == intact  # nothing lost or added
    last = max(intact)

    resumed = unstable.build(resume_from=run.run_dir)
    try:
        assert resumed.start_version == last
        summary = resumed.start(learning_steps=last + 1, num_collection_workers=8, num_eval_workers=0)
    finally:
        resumed.stop()
    assert summary["checkpoints"][-1] == f"ckpt-{last + 1}"
    assert ckpt.latest_complete(checkpoints)[0] == last + 1
