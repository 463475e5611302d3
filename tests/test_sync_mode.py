"""``build(mode="sync")``: collect a batch, then train, in turns.

The invariants, checked on a local run (the real Collector, scheduler, registry, buffer and training
loop; a stand-in model that answers at once and a stand-in learner that records when it updates):
every step trained at version v was sampled by version v, and no game was in flight during an
update. The same run in async mode breaks the second (so the check can fail). Then the settings
(checked before Ray starts) and one tiny real run through build().
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import TTT, make_sample, small_run_kwargs

import unstable
from unstable.buffers import StepBuffer
from unstable.collection.collector import Collector
from unstable.collection.scheduler import GameScheduler
from unstable.inference.base import GenerationResult
from unstable.learners.loop import TurnLock, run_training
from unstable.learners.protocol import UpdateResult
from unstable.records import checkpoint_uid
from unstable.registry import ModelRegistry
from unstable.run.config import BuildConfig
from unstable.samplers.env_samplers import UniformRandomEnvSampler
from unstable.samplers.model_samplers import BaseModelSampler

BATCH = 16


class InstantModel:
    """Answers every turn with a random TicTacToe move, labelled with the version that was asked for."""

    def __init__(self):
        self.rng = random.Random(0)

    async def generate(self, request):
        await asyncio.sleep(0.002)
        text = f"\\boxed{{[{self.rng.randrange(9)}]}}"
        return GenerationResult(make_sample((1, 2), (3,), (-0.5,), text=text, policy_version=request.policy_version))

    def stats(self):
        return {}


class RecordingLearner:
    """Records, per update, its interval, its version and the versions that sampled its batch."""

    def __init__(self):
        self.config = SimpleNamespace(batch_size=BATCH, poll_interval_s=0.01, wait_timeout_s=60,
                                      max_consecutive_skips=3, lineage=None)
        self.version = 0
        self.updates: list[tuple[float, float, int, set]] = []

    def update(self, batch):
        start = time.monotonic()
        versions = {step.policy_version for step in batch}
        time.sleep(0.2)  # long next to a game, so a game started meanwhile would show
        self.updates.append((start, time.monotonic(), self.version, versions))
        self.version += 1
        return UpdateResult(self.version, f"/adapters/ckpt-{self.version}", {})


def local_run(sync: bool, updates: int = 4):
    """A run in this process; returns the learner's updates and each game's (start, end) times."""
    registry = ModelRegistry()
    registry.add_checkpoint(uid=checkpoint_uid(0), path=None, iteration=0)
    scheduler = GameScheduler(BaseModelSampler(registry),
                              UniformRandomEnvSampler([unstable.TrainEnvSpec(num_actors=2, **TTT)]))
    games: dict[int, list[float]] = {}
    next_train_job, update = scheduler.next_train_job, scheduler.update

    def recording_next(*args):
        spec = next_train_job(*args)
        if spec is not None:
            games[spec.game_id] = [time.monotonic()]
        return spec

    def recording_update(result):
        games[result.game_id].append(time.monotonic())
        return update(result)

    scheduler.next_train_job, scheduler.update = recording_next, recording_update
    buffer = StepBuffer(max_buffer_size=BATCH, max_staleness=0 if sync else 8, seed=0)
    lock = TurnLock()
    collector = Collector(backends=[InstantModel()], buffer=buffer, game_scheduler=scheduler,
                          turn_lock=lock if sync else None)
    learner = RecordingLearner()
    errors: list[BaseException] = []

    def train():
        try:
            run_training(learner, updates, buffer=buffer, registry=registry, turn_lock=lock)
        except BaseException as exc:
            errors.append(exc)
        finally:
            buffer.stop()

    thread = threading.Thread(target=train)
    thread.start()
    stats = asyncio.run(collector.collect(8, 0))
    thread.join(timeout=60)
    assert not errors, errors
    return learner.updates, games, stats, lock.stats()


def overlaps(updates, games) -> list[tuple[int, int]]:
    """(update version, game id) of every game that ran during an update."""
    return [(version, game_id) for start, end, version, _ in updates for game_id, (began, *ended) in games.items()
            if began < end and (not ended or ended[0] > start)]


def test_sync_mode_trains_each_version_on_its_own_games_and_never_during_a_game():
    updates, games, stats, turns = local_run(sync=True)
    assert [version for _, _, version, _ in updates] == [0, 1, 2, 3]
    for _, _, version, sampled_by in updates:
        assert sampled_by == {version}  # no staleness: the batch of version v was played by v
    assert overlaps(updates, games) == []  # no game in flight during an update
    assert stats["sync_rounds"] >= 4 and turns["collector"] >= 4 and turns[""] == 4
    # a round starts only the games its batch needs (~5 here), not 8 in flight until the buffer is full
    # (~40 games for the 4 rounds, their extra moves evicted)
    assert stats["train_started"] < 30


def test_async_mode_plays_during_updates():
    """The contrast: without the turn lock the collector keeps playing while the learner updates."""
    updates, games, _, turns = local_run(sync=False)
    assert len(updates) == 4 and overlaps(updates, games)
    assert "collector" not in turns


# ---------------------------------------------------------------------------------- settings
def test_sync_mode_bounds_staleness_to_zero_and_collects_one_batch(tiny_model_dir, tmp_path):
    cfg = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, mode="sync"))
    assert cfg.mode == "sync" and cfg.models[0].buffer.max_staleness == 0 and cfg.models[0].buffer.size == 16
    assert cfg.to_dict()["mode"] == "sync"
    bigger = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, mode="sync", buffer_size=48, max_staleness=0))
    assert bigger.models[0].buffer.size == 48
    default = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path))
    buffer = default.models[0].buffer
    assert default.mode == "async" and buffer.max_staleness == 8 and buffer.size == 32


@pytest.mark.parametrize(("override", "match"), [
    ({"mode": "synchronous"}, r"mode must be one of \['async', 'sync'\]"),
    ({"mode": "sync", "max_staleness": 2}, r"max_staleness=2, but mode='sync' trains every step on the version"),
    ({"mode": "sync", "max_staleness": None}, "max_staleness=None, but mode='sync'"),
])
def test_bad_sync_settings_raise_before_ray(override, match, tiny_model_dir, tmp_path, monkeypatch):
    import unstable.run.wiring

    monkeypatch.setattr(unstable.run.wiring, "start_actors", lambda *a, **k: pytest.fail("actors started"))
    with pytest.raises(ValueError, match=match):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, **override))


@pytest.mark.slow
def test_a_sync_run_through_build(ray_session, tiny_model_dir, tmp_path):
    """Two learner steps in sync mode on local Ray: the collector and the learner took turns, and the
    buffer dropped no stale step (all of a round's steps were played by the version that trains)."""
    ray = ray_session
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, run_name="sync", mode="sync"))
    try:
        summary = run.start(learning_steps=2, num_collection_workers=4, num_eval_workers=0)
        turns = ray.get(run.actors.turn_lock.stats.remote())
        assert turns[""] == 2 and turns["collector"] >= 2
        assert summary["collector"]["sync_rounds"] >= 2
        assert summary["buffer"]["dropped_stale"] == 0 and summary["buffer"]["handed_out"] == 2 * 16
        assert len(summary["checkpoints"]) == 3
    finally:
        run.stop()
