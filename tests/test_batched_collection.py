"""What the collector sends in batches (to the buffers, scheduler, registry and tracker) arrives
exactly once: during collection, when it stops, and when the failure budget stops it; with plain
objects, with collaborators that only have the single-game methods, and through Ray actors.

Every seat plays random legal moves (no model), so these games take milliseconds."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from conftest import TTT

import unstable
from unstable.buffers import StepBuffer
from unstable.collection.collector import Collector
from unstable.collection.failures import FailureBudget, FailureBudgetSpentError
from unstable.collection.scheduler import GameScheduler
from unstable.policies.base import PolicyError
from unstable.policies.scripted import RandomLegalPolicy
from unstable.records import GameRecord, PolicyRef, checkpoint_uid
from unstable.registry import ModelRegistry
from unstable.samplers.env_samplers import UniformRandomEnvSampler
from unstable.samplers.model_samplers import FixedOpponentModelSampler
from unstable.tracking import Tracker

ENV = "TicTacToe-v0-train"


class NoModel:
    """The collector needs a backend; scripted seats never call it."""

    name = "none"

    def stats(self) -> dict[str, float]:
        return {}


class Down:
    """A seat whose model never answers: its game fails (stage "policy")."""

    ref = PolicyRef("down", "scripted")

    async def act(self, ctx):
        raise PolicyError("the model behind this seat is down")


class Scripted(Collector):
    """The real collector with random legal moves in every seat; from game seed ``fail_from`` on,
    the first seat's model is down."""

    fail_from: int | None = None

    def _policies(self, spec, *args, **kwargs):
        policies = {a.player_id: RandomLegalPolicy() for a in spec.agents}
        if self.fail_from is not None and spec.seed >= self.fail_from:
            policies[spec.agents[0].player_id] = Down()
        return policies


class Buffer(StepBuffer):
    """Records every game it is given and the size of every batch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.game_ids: list[int] = []
        self.batches: list[int] = []

    def add_game(self, record, policy_version=None):
        self.game_ids.append(record.game_id)
        return super().add_game(record, policy_version)

    def add_games(self, records, policy_version=None):
        self.batches.append(len(records))
        return super().add_games(records, policy_version)


class Scheduler(GameScheduler):
    """Records every result it is given and the size of every batch of results."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.results: list[int] = []
        self.batches: list[int] = []

    def update(self, result):
        self.results.append(result.spec.game_id)
        return super().update(result)

    def update_many(self, results):
        self.batches.append(len(results))
        return super().update_many(results)


class GameLog:
    """A tracker that keeps the ids of the games it is told about."""

    def __init__(self):
        self.game_ids: list[int] = []

    def log_games(self, results):
        self.game_ids.extend(r.spec.game_id for r in results)

    def log_inference(self, name, stats):
        pass


class SingleGameBuffer:
    """A buffer written before the batched methods: add_game, continue_collection and is_full only."""

    def __init__(self):
        self.game_ids: list[int] = []

    def add_game(self, record, policy_version=None):
        self.game_ids.append(record.game_id)
        return 0

    def continue_collection(self):
        return True

    def is_full(self):
        return False


class SingleGameScheduler:
    """A scheduler with only the single-game methods, around a real one."""

    def __init__(self, inner):
        self.inner = inner

    def has_eval(self):
        return False

    def next_train_job(self, paused=()):
        return self.inner.next_train_job(paused)

    def next_eval_job(self):
        return None

    def update(self, result):
        self.inner.update(result)


class SingleGameTracker:
    def __init__(self):
        self.game_ids: list[int] = []

    def log_game(self, result):
        self.game_ids.append(result.spec.game_id)

    def log_inference(self, name, stats):
        pass


def parts(registry=None):
    registry = registry or ModelRegistry()
    if not registry.checkpoint_uids():
        registry.add_checkpoint(uid="base", path=None, iteration=0)
        registry.add_fixed("random")
    spec = unstable.TrainEnvSpec(num_actors=1, **TTT)
    scheduler = Scheduler(FixedOpponentModelSampler(registry, rng_seed=0), UniformRandomEnvSampler([spec]), seed=0)
    return registry, scheduler, Buffer(10**6, dedupe=True), GameLog()


async def collect_until(collector, workers: int, games: int, timeout_s: float = 60.0) -> dict[str, int]:
    """Collect until ``games`` train games have finished (or the timeout), then stop; the counters."""
    task = asyncio.create_task(collector.collect(workers, 0))
    deadline = time.monotonic() + timeout_s
    while not task.done() and collector.stats()["train_finished"] < games and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    collector.stop()
    return await task


def assert_books_balance(stats: dict[str, int]) -> None:
    ended = stats["train_finished"] + stats["eval_finished"] + stats["failed"] + stats["dropped"] + stats["cancelled"]
    assert stats["train_started"] + stats["eval_started"] == ended, stats


def assert_each_once(ids: list[int], expected: set[int], what: str) -> None:
    twice = [i for i, n in Counter(ids).items() if n > 1]
    assert not twice, f"{what} got games {twice} more than once"
    assert set(ids) == expected, f"{what}: missing {sorted(expected - set(ids))}, extra {sorted(set(ids) - expected)}"


# ----------------------------------------------------------------------------- the components' batched methods
def test_a_batch_of_games_does_what_the_games_one_by_one_do():
    """add_games, record_games, update_many and log_games give the same state as the single-game
    calls in the same order, and the registry snapshots the tracker once per batch, not per 16 games."""
    _, scheduler, _, _ = parts()
    specs = scheduler.next_train_jobs(40)
    records = [GameRecord(spec=s, turns=(), final_rewards={0: r, 1: -r}, game_info={})
               for s, r in zip(specs, [1.0, -1.0, 0.0, 1.0] * 10, strict=True)]

    class Snapshots:
        def __init__(self):
            self.pushes = 0

        def log_registry(self, info):
            self.pushes += 1

    one, many = ModelRegistry(tracker=Snapshots()), ModelRegistry(tracker=Snapshots())
    for reg in (one, many):
        reg.add_checkpoint(uid="base", path=None, iteration=0)
        reg.add_fixed("random")
        reg.tracker.pushes = 0
    for record in records:
        one.record_game(record)
    many.record_games(records)
    assert many.ratings() == one.ratings() and many.match_results() == one.match_results()
    assert (one.tracker.pushes, many.tracker.pushes) == (2, 1)  # log_every=16: 40 games, one push per batch

    single, batched = StepBuffer(100, dedupe=True), StepBuffer(100, dedupe=True)
    assert [single.add_game(r) for r in records[:3]] == [0, 0, 0]  # scripted turns have no tokens to train on
    assert batched.add_games(records[:3]) == 0
    assert single.stats() == batched.stats() and batched.stats()["trajectories_received"] == 3
    assert batched.collection_state() == (True, False)
    batched.stop()
    assert batched.collection_state() == (False, False)


class CountingRegistry:
    """A registry that counts the calls it answers (as round trips to an actor would be counted)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, Counter()

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


def test_a_batch_of_jobs_is_what_single_jobs_are_with_one_registry_read_per_question():
    def scheduler():
        registry = ModelRegistry()
        registry.add_checkpoint(uid="base", path=None, iteration=0)
        for name in ("random", "heuristic"):
            registry.add_fixed(name)
        counting = CountingRegistry(registry)
        spec = unstable.TrainEnvSpec(num_actors=1, **TTT)
        return GameScheduler(FixedOpponentModelSampler(counting, rng_seed=3), UniformRandomEnvSampler([spec]),
                             seed=5), counting

    one, one_registry = scheduler()
    many, many_registry = scheduler()
    singles = [one.next_train_job() for _ in range(12)]
    batch = many.next_train_jobs(12)
    assert batch == singles  # same seeds, seats and opponents
    assert {a.policy.uid for s in batch for a in s.agents} == {"base", "random", "heuristic"}
    assert one_registry.calls["policy_ref"] == 24 and one_registry.calls["fixed_uids"] == 12
    # the current checkpoint, each opponent drawn, and the fixed list: once each for the batch
    assert many_registry.calls["policy_ref"] == 3 and many_registry.calls["fixed_uids"] == 1
    assert many.model_sampler.model_registry is many_registry  # the snapshot is gone after the batch
    assert many.next_train_jobs(0) == [] and len(many.next_train_jobs(2)) == 2
    with pytest.raises(ValueError, match="number of jobs must be an int >= 0"):
        many.next_train_jobs(-1)


def test_update_many_rates_the_games_before_an_error_and_raises_it():
    registry, scheduler, _, _ = parts()
    counting = CountingRegistry(registry)
    scheduler.model_registry = counting
    specs = scheduler.next_train_jobs(5)
    records = [GameRecord(spec=s, turns=(), final_rewards={0: 1.0, 1: -1.0}, game_info={}) for s in specs]
    scheduler.update_many(records[:2])
    assert counting.calls == Counter({"record_games": 1}) and scheduler.stats()["games_finished"] == 2
    with pytest.raises(KeyError, match=f"game {specs[0].game_id} .* is not running here"):
        scheduler.update_many([records[2], records[0], records[3]])  # game 0 was already reported
    assert scheduler.stats()["games_finished"] == 3 and scheduler.running() == 2
    assert counting.calls == Counter({"record_games": 2})
    assert sum(m["games"] for m in registry.get_all_models() if m["uid"] == "base") == 3


# ----------------------------------------------------------------------------- the collector, in one process
@pytest.mark.parametrize(("flush_games", "flush_interval_s"), [(1, 0.2), (16, 1e6), (10**6, 1e6)],
                         ids=["each-game", "every-16", "only-at-stop"])
def test_every_finished_game_reaches_each_component_once(flush_games, flush_interval_s):
    """Sent at once, in batches of 16, or held until collection stops: each finished game reaches
    the buffer, the scheduler (and through it the registry) and the tracker exactly once."""
    registry, scheduler, buffer, tracker = parts()
    collector = Scripted(tracker=tracker, buffer=buffer, game_scheduler=scheduler, backends=[NoModel()],
                         flush_games=flush_games, flush_interval_s=flush_interval_s)
    stats = asyncio.run(collect_until(collector, 8, 60))
    assert_books_balance(stats)
    finished = set(scheduler.results)
    assert len(finished) == stats["train_finished"] >= 60 and stats["failed"] == 0
    assert_each_once(buffer.game_ids, finished, "the buffer")
    assert_each_once(scheduler.results, finished, "the scheduler")
    assert_each_once(tracker.game_ids, finished, "the tracker")
    assert buffer.stats()["trajectories_received"] == stats["trajectories_sent"] == len(finished)  # one seat each
    assert scheduler.running() == stats["cancelled"]  # the games in flight at the stop, never reported
    assert sum(m["games"] for m in registry.get_all_models() if m["uid"] == "base") == len(finished)
    if flush_games == 16:  # full batches, but the last (sent at the stop)
        assert all(n >= 16 for n in buffer.batches[:-1]) and all(n >= 16 for n in scheduler.batches[:-1])
    if flush_games == 10**6:
        assert buffer.batches == [len(finished)] and scheduler.batches == [len(finished)]


def test_held_games_go_out_once_the_oldest_has_waited_flush_interval_s():
    _, scheduler, buffer, tracker = parts()
    collector = Scripted(tracker=tracker, buffer=buffer, game_scheduler=scheduler, backends=[NoModel()],
                         flush_games=10**6, flush_interval_s=0.05)

    async def run():
        task = asyncio.create_task(collector.collect(4, 0))
        deadline = time.monotonic() + 60
        while not task.done() and len(buffer.batches) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        sent_while_running = len(buffer.batches)
        collector.stop()
        await task
        return sent_while_running

    assert asyncio.run(run()) >= 2  # sent twice before the stop, by time alone
    assert_each_once(buffer.game_ids, set(scheduler.results), "the buffer")


def test_a_spent_failure_budget_still_delivers_every_finished_game():
    """From seed 40 on every game fails; the budget stops collection after 3 in a row, and the games
    held back then (the failed ones too) still reach the scheduler and the tracker, the train games
    the buffer."""
    _, scheduler, buffer, tracker = parts()
    collector = Scripted(tracker=tracker, buffer=buffer, game_scheduler=scheduler, backends=[NoModel()],
                         flush_games=10**6, flush_interval_s=1e6,
                         failure_budget=FailureBudget(max_consecutive_failures=3, max_failure_rate=None))
    collector.fail_from = 40
    with pytest.raises(FailureBudgetSpentError, match="3 train games failed in a row") as info:
        asyncio.run(asyncio.wait_for(collector.collect(8, 0), timeout=60))
    assert isinstance(info.value.__cause__, PolicyError)
    stats = collector.stats()
    assert_books_balance(stats)
    assert stats["failed"] >= 3 and stats["train_finished"] >= 1
    assert scheduler.stats()["games_failed"] == stats["failed"]
    assert scheduler.stats()["games_finished"] == stats["train_finished"]
    assert_each_once(tracker.game_ids, set(scheduler.results), "the tracker")
    assert len(scheduler.results) == stats["failed"] + stats["train_finished"] == len(set(scheduler.results))
    assert len(buffer.game_ids) == len(set(buffer.game_ids)) == stats["train_finished"]
    assert scheduler.running() == stats["cancelled"]


def test_an_error_of_the_buffer_stops_collection_and_the_results_still_reach_the_scheduler():
    class Broken(Buffer):
        def add_games(self, records, policy_version=None):
            raise OSError("the buffer's disk is gone")

    _, scheduler, _, tracker = parts()
    collector = Scripted(tracker=tracker, buffer=Broken(100), game_scheduler=scheduler, backends=[NoModel()],
                         flush_games=8, flush_interval_s=1e6)
    with pytest.raises(OSError, match="disk is gone"):
        asyncio.run(asyncio.wait_for(collector.collect(8, 0), timeout=60))
    stats = collector.stats()
    assert_books_balance(stats)
    assert stats["train_finished"] >= 8
    assert_each_once(scheduler.results, set(tracker.game_ids), "the scheduler")
    assert len(scheduler.results) == stats["train_finished"]


def test_collaborators_without_batched_methods_get_each_game_once():
    _, inner, _, _ = parts()
    buffer, scheduler, tracker = SingleGameBuffer(), SingleGameScheduler(inner), SingleGameTracker()
    collector = Scripted(tracker=tracker, buffer=buffer, game_scheduler=scheduler, backends=[NoModel()],
                         flush_games=16)
    stats = asyncio.run(collect_until(collector, 8, 40))
    assert_books_balance(stats)
    finished = set(inner.results)
    assert len(finished) == stats["train_finished"] >= 40
    assert_each_once(buffer.game_ids, finished, "the buffer")
    assert_each_once(tracker.game_ids, finished, "the tracker")


def test_each_models_buffer_gets_the_games_its_seats_played_once():
    """Two trainable models: alice-vs-bob games go to both buffers, alice-vs-random ones to alice's."""
    registry = ModelRegistry()
    for name in ("alice", "bob"):
        registry.add_checkpoint(uid=checkpoint_uid(0, name), path=None, iteration=0, lineage=name)
    registry.add_fixed("random")
    specs = [unstable.TrainEnvSpec(ENV, 2, 2, "qwen3-zs", seats=("alice", "bob")),
             unstable.TrainEnvSpec(ENV, 2, 1, "qwen3-zs", seats=("alice", "opponent"))]
    scheduler = Scheduler(FixedOpponentModelSampler(registry, rng_seed=0), UniformRandomEnvSampler(specs), seed=0)
    buffers = {"alice": Buffer(10**6, lineage="alice"), "bob": Buffer(10**6, lineage="bob")}
    collector = Scripted(buffers=buffers, game_scheduler=scheduler, backends=[NoModel()], flush_games=8)
    records: dict[int, set[str]] = {}
    original = scheduler.update

    def update(result):
        records[result.spec.game_id] = {a.policy.lineage for a in result.spec.agents if a.collect_data}
        return original(result)

    scheduler.update = update
    stats = asyncio.run(collect_until(collector, 8, 60))
    assert_books_balance(stats)
    for name, buffer in buffers.items():
        mine = {g for g, lineages in records.items() if name in lineages}
        assert mine, f"no game of {name}"
        assert_each_once(buffer.game_ids, mine, f"{name}'s buffer")
        assert buffer.stats()["trajectories_received"] == stats[f"trajectories_sent/{name}"]
    assert len(buffers["bob"].game_ids) < len(buffers["alice"].game_ids)


@pytest.mark.parametrize(("setting", "value", "match"), [
    ("flush_games", 0, "flush_games must be an int >= 1"),
    ("flush_games", 2.5, "flush_games must be an int >= 1"),
    ("flush_interval_s", -0.1, "flush_interval_s must be a number of seconds >= 0"),
    ("state_refresh_s", float("nan"), "state_refresh_s must be a number of seconds >= 0"),
])
def test_bad_flush_settings_are_refused(setting, value, match):
    _, scheduler, buffer, _ = parts()
    with pytest.raises(ValueError, match=match):
        Collector(buffer=buffer, game_scheduler=scheduler, backends=[NoModel()], **{setting: value})


# ----------------------------------------------------------------------------- through Ray actors
@pytest.mark.slow
def test_through_ray_actors_every_game_arrives_once(ray_session, tmp_path):
    """The scheduler, registry, buffer and tracker as Ray actors (as build() starts them), the
    collector in this process: what it sends in batches arrives once, also the batch sent at the stop."""
    ray = ray_session
    from unstable.run.remote import actor_class

    light = {"num_cpus": 0}
    tracker = actor_class(Tracker).options(**light).remote(run_name="batched", wandb_project=None,
                                                           run_dir=str(tmp_path), use_wandb=False)
    registry = actor_class(ModelRegistry).options(**light).remote(tracker=tracker)
    ray.get(registry.add_checkpoint.remote(uid="base", path=None, iteration=0))
    ray.get(registry.add_fixed.remote(name="random"))
    spec = unstable.TrainEnvSpec(num_actors=1, **TTT)
    scheduler = actor_class(GameScheduler).options(**light).remote(
        model_sampler=FixedOpponentModelSampler(model_registry=registry, rng_seed=0),
        env_sampler=UniformRandomEnvSampler(train_env_specs=[spec], rng_seed=0), seed=0)
    buffer = actor_class(StepBuffer).options(**light).remote(max_buffer_size=10**6, dedupe=True)
    collector = Scripted(tracker=tracker, buffer=buffer, game_scheduler=scheduler, backends=[NoModel()],
                         flush_games=16, flush_interval_s=1e6)
    try:
        stats = asyncio.run(collect_until(collector, 16, 100, timeout_s=120))
        assert_books_balance(stats)
        finished = stats["train_finished"]
        assert finished >= 100 and stats["failed"] == 0
        received = ray.get(buffer.stats.remote())
        assert received["trajectories_received"] == stats["trajectories_sent"] == finished
        assert received["duplicates"] == 0
        sched = ray.get(scheduler.stats.remote())
        assert sched["games_finished"] == finished and sched["running"] == stats["cancelled"]
        models = {m["uid"]: m for m in ray.get(registry.get_all_models.remote())}
        assert models["base"]["games"] == finished
        assert ray.get(tracker.counts.remote())["collect/games"] == finished  # fired, in order, from here
    finally:
        ray.get(tracker.close.remote())
        for actor in (scheduler, buffer, registry, tracker):
            ray.kill(actor, no_restart=True)
