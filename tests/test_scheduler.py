"""GameScheduler: seeds, seats, eval rotation, result bookkeeping, failed games, resume state."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from unstable.collection.scheduler import EVAL_SEED_OFFSET, GameScheduler
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.records import FailedGame, GameRecord, GameSpec, PolicyRef
from unstable.registry import ModelRegistry
from unstable.samplers.env_samplers import UniformRandomEnvSampler
from unstable.samplers.model_samplers import BaseModelSampler, FixedOpponentModelSampler

GEMINI = "google/gemini-2.0-flash-lite-001"
MIRROR_TTT = TrainEnvSpec(env_id="TicTacToe-v0-train", num_players=2, num_actors=2, prompt_template="qwen3-zs")
KUHN_VS = TrainEnvSpec(env_id="KuhnPoker-v0-train", num_players=2, num_actors=1, prompt_template="default")
POKER3 = TrainEnvSpec(env_id="Poker-v0-train", num_players=3, num_actors=1, prompt_template="default")
EVAL_TTT = EvalEnvSpec(env_id="TicTacToe-v0-train", num_players=2, prompt_template="qwen3-zs")
EVAL_KUHN = EvalEnvSpec(env_id="KuhnPoker-v0-train", num_players=2, prompt_template="default", fixed_opponent=GEMINI)


class RecordingEnvSampler(UniformRandomEnvSampler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates: list[tuple] = []

    def update(self, env_id, avg_actor_reward, avg_opponent_reward):
        self.updates.append((env_id, avg_actor_reward, avg_opponent_reward))


def make_scheduler(train, evals=(), sampler_cls=BaseModelSampler, fixed=("random",), logging_dir=None):
    reg = ModelRegistry()
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    reg.add_checkpoint(uid="ckpt-1", path="/ckpts/1", iteration=1)
    for name in fixed:
        reg.add_fixed(name)
    env_sampler = RecordingEnvSampler(list(train), list(evals), rng_seed=0)
    sched = GameScheduler(sampler_cls(reg, rng_seed=0), env_sampler, logging_dir=logging_dir, seed=0)
    return sched, reg, env_sampler


def finish(job: GameSpec, rewards: dict[int, float]) -> GameRecord:
    return GameRecord(spec=job, turns=(), final_rewards=rewards, game_info={})


CURRENT = PolicyRef(uid="ckpt-1", kind="checkpoint", adapter_path="/ckpts/1", version=1, lineage="model")


def test_seeds_and_game_ids_unique_and_disjoint():
    sched, _, _ = make_scheduler([MIRROR_TTT, KUHN_VS], [EVAL_TTT, EVAL_KUHN])
    train = [sched.next_train_job() for _ in range(1000)]
    evals = [sched.next_eval_job() for _ in range(1000)]
    train_seeds, eval_seeds = {j.seed for j in train}, {j.seed for j in evals}
    assert train_seeds == set(range(1000))
    assert eval_seeds == set(range(EVAL_SEED_OFFSET, EVAL_SEED_OFFSET + 1000))
    assert not train_seeds & eval_seeds
    assert len({j.game_id for j in train + evals}) == 2000
    assert sched.running() == 2000


def test_mirror_job_every_seat_is_the_collected_current_checkpoint():
    sched, _, _ = make_scheduler([MIRROR_TTT])
    job = sched.next_train_job()
    assert (job.env_id, job.is_eval, job.eval_player_id, job.error_allowance) == ("TicTacToe-v0-train", False, None, 0)
    assert [a.player_id for a in job.agents] == [0, 1]
    for agent in job.agents:
        assert agent.policy == CURRENT
        assert agent.collect_data
        assert (agent.prompt_template, agent.action_extraction) == ("qwen3-zs", "default")


def test_opponent_seats_not_collected_and_actor_seat_shuffled():
    sched, _, _ = make_scheduler([KUHN_VS], sampler_cls=FixedOpponentModelSampler)
    actor_seats = Counter()
    for _ in range(400):
        job = sched.next_train_job()
        (actor,) = [a for a in job.agents if a.collect_data]
        (opponent,) = [a for a in job.agents if not a.collect_data]
        assert actor.policy == CURRENT
        assert opponent.policy == PolicyRef(uid="random", kind="scripted")
        assert opponent.prompt_template == "default"
        actor_seats[actor.player_id] += 1
    assert 150 < actor_seats[0] < 250


def test_multi_opponent_game_samples_each_opponent_seat():
    sched, _, _ = make_scheduler([POKER3], sampler_cls=FixedOpponentModelSampler, fixed=("random", GEMINI))
    job = sched.next_train_job()
    assert sum(a.collect_data for a in job.agents) == 1
    assert all(a.policy.uid in ("random", GEMINI) for a in job.agents if not a.collect_data)


def test_eval_seat_alternates_and_opponents_are_fixed():
    sched, _, _ = make_scheduler([MIRROR_TTT], [EVAL_TTT, EVAL_KUHN], fixed=())
    seats: dict[str, list[int]] = {}
    for _ in range(200):
        job = sched.next_eval_job()
        assert job.is_eval
        me = job.agent(job.eval_player_id)
        assert me.policy == CURRENT and not me.collect_data
        others = [a for a in job.agents if a.player_id != job.eval_player_id]
        expected = "scripted" if job.env_id == EVAL_TTT.env_id else "api"
        assert all(not a.collect_data and a.policy.kind == expected for a in others)
        assert all(a.policy.uid == ("random" if expected == "scripted" else GEMINI) for a in others)
        seats.setdefault(job.env_id, []).append(job.eval_player_id)
    for env_seats in seats.values():
        assert env_seats == [i % 2 for i in range(len(env_seats))]


def test_eval_opponent_directory_is_a_checkpoint(tmp_path):
    spec = EvalEnvSpec(env_id="TicTacToe-v0-train", num_players=2, prompt_template="default",
                       fixed_opponent=str(tmp_path))
    sched, _, _ = make_scheduler([MIRROR_TTT], [spec])
    job = sched.next_eval_job()
    (opp,) = [a for a in job.agents if a.player_id != job.eval_player_id]
    assert opp.policy == PolicyRef(uid=str(tmp_path), kind="checkpoint", adapter_path=str(tmp_path))


def test_no_eval_envs_gives_none():
    sched, _, _ = make_scheduler([MIRROR_TTT])
    assert not sched.has_eval()
    assert sched.next_eval_job() is None
    assert sched.running() == 0


def test_update_bookkeeping_and_ratings():
    sched, reg, env_sampler = make_scheduler([KUHN_VS], [EVAL_TTT], sampler_cls=FixedOpponentModelSampler)
    job = sched.next_train_job()
    actor = next(a.player_id for a in job.agents if a.collect_data)
    sched.update(finish(job, {actor: 1.0, 1 - actor: -1.0}))
    assert env_sampler.updates == [("KuhnPoker-v0-train", 1.0, -1.0)]
    assert reg.get_model("ckpt-1")["wins"] == 1 and reg.get_model("random")["losses"] == 1
    ev = sched.next_eval_job()
    sched.update(finish(ev, {ev.eval_player_id: 0.0, 1 - ev.eval_player_id: 0.0}))
    assert len(env_sampler.updates) == 1  # eval games do not steer the env curriculum
    assert reg.get_model("ckpt-1")["draws"] == 1  # ... but they are rated
    stats = sched.stats()
    assert (stats["games_finished"], stats["games_failed"], stats["running"]) == (2, 0, 0)
    assert stats["rewards"]["train"]["KuhnPoker-v0-train"]["random"] == {
        "games": 1, "avg_actor_reward": 1.0, "avg_opponent_reward": -1.0}
    assert stats["rewards"]["eval"]["TicTacToe-v0-train"]["random"]["avg_actor_reward"] == 0.0
    with pytest.raises(KeyError, match="not running"):
        sched.update(finish(job, {0: 1.0, 1: -1.0}))


def test_mirror_update_has_no_opponent_average():
    sched, reg, env_sampler = make_scheduler([MIRROR_TTT])
    job = sched.next_train_job()
    sched.update(finish(job, {0: 1.0, 1: -1.0}))
    assert env_sampler.updates == [("TicTacToe-v0-train", 0.0, None)]
    assert sched.stats()["rewards"]["train"]["TicTacToe-v0-train"]["self"]["avg_opponent_reward"] is None
    assert reg.get_model("ckpt-1")["self_games"] == 1


def test_failed_game_counted_logged_not_rated(tmp_path):
    sched, reg, env_sampler = make_scheduler([KUHN_VS], sampler_cls=FixedOpponentModelSampler,
                                             logging_dir=str(tmp_path))
    job = sched.next_train_job()
    sched.update(FailedGame(spec=job, stage="env", error_type="RuntimeError", message="boom"))
    stats = sched.stats()
    assert (stats["games_finished"], stats["games_failed"], stats["running"]) == (0, 1, 0)
    assert stats["failed_by_env"] == {"KuhnPoker-v0-train": 1}
    assert env_sampler.updates == []
    assert reg.get_model("ckpt-1")["games"] == 0
    (line,) = (tmp_path / "failed_games.jsonl").read_text().splitlines()
    assert json.loads(line)["seed"] == job.seed and json.loads(line)["message"] == "boom"
    with pytest.raises(TypeError, match="GameRecord or FailedGame"):
        sched.update("not a result")


def test_state_dict_resumes_counters_and_rngs():
    sched, _, _ = make_scheduler([KUHN_VS], [EVAL_TTT], sampler_cls=FixedOpponentModelSampler)
    for _ in range(5):
        sched.update(finish(job := sched.next_train_job(), {0: 1.0, 1: -1.0}))
    sched.next_eval_job()
    state = json.loads(json.dumps(sched.state_dict()))
    resumed, _, _ = make_scheduler([KUHN_VS], [EVAL_TTT], sampler_cls=FixedOpponentModelSampler)
    resumed.load_state_dict(state)
    a, b = sched.next_train_job(), resumed.next_train_job()
    assert a == b and a.seed == 5 and a.game_id == job.game_id + 2
    e1, e2 = sched.next_eval_job(), resumed.next_eval_job()
    assert e1 == e2 and e1.seed == EVAL_SEED_OFFSET + 1 and e1.eval_player_id == 1
    assert resumed.stats()["rewards"] == sched.stats()["rewards"]
    assert resumed.running() == 2  # only the jobs started after resuming


def test_errors_propagate():
    class Broken(BaseModelSampler):
        def sample_opponent(self):
            raise RuntimeError("registry unreachable")

    sched, _, _ = make_scheduler([KUHN_VS], sampler_cls=Broken)
    with pytest.raises(RuntimeError, match="unreachable"):
        sched.next_train_job()
    with pytest.raises(ValueError, match="model_sampler"):
        GameScheduler(None, sched.env_sampler)


class ReadOnlyRegistry:
    """What a sampler may see of the registry: its queries. Any other call fails the test."""

    READS = frozenset({"policy_ref", "fixed_uids", "checkpoint_uids", "match_qualities", "match_quality",
                       "ratings", "get_current_ckpt", "get_model", "get_all_models"})

    def __init__(self, registry):
        self._registry = registry

    def __getattr__(self, name):
        if name not in self.READS:
            raise AssertionError(f"a model sampler called registry.{name}: samplers only read the registry")
        return getattr(self._registry, name)


class CountingRegistry(ModelRegistry):
    def __init__(self):
        super().__init__()
        self.recorded = 0

    def record_game(self, record):
        self.recorded += 1
        super().record_game(record)


@pytest.mark.parametrize("sampler_cls", [BaseModelSampler, FixedOpponentModelSampler])
def test_samplers_only_read_and_the_registry_rates_each_game_once(sampler_cls):
    reg = CountingRegistry()
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    reg.add_fixed("random")
    sampler = sampler_cls(ReadOnlyRegistry(reg), rng_seed=0)
    sched = GameScheduler(sampler, RecordingEnvSampler([KUHN_VS], [EVAL_TTT], rng_seed=0), seed=0,
                          model_registry=reg)
    jobs = [sched.next_train_job() for _ in range(6)] + [sched.next_eval_job() for _ in range(4)]
    for i, job in enumerate(jobs):
        games_before = {uid: reg.get_model(uid)["games"] for uid in ("base", "random")}
        sched.update(finish(job, {0: float(i % 3 - 1), 1: float(1 - i % 3)}))
        seated = {a.policy.uid for a in job.agents}
        assert {uid: reg.get_model(uid)["games"] - n for uid, n in games_before.items()} == {
            uid: int(uid in seated) for uid in games_before}
    assert reg.recorded == len(jobs) == reg.interface_info()["games_recorded"]
    failed = sched.next_train_job()
    sched.update(FailedGame(spec=failed, stage="env", error_type="RuntimeError", message="boom"))
    assert reg.recorded == len(jobs)  # failed games are not rated


def test_scheduler_rates_in_the_samplers_registry_by_default():
    sched, reg, _ = make_scheduler([KUHN_VS], sampler_cls=FixedOpponentModelSampler)
    assert sched.model_registry is reg
    job = sched.next_train_job()
    sched.update(finish(job, {0: 1.0, 1: -1.0}))
    assert reg.interface_info()["games_recorded"] == 1

    class NoRegistry:
        def get_current_ckpt(self):
            return CURRENT

    with pytest.raises(ValueError, match="model_registry="):
        GameScheduler(NoRegistry(), sched.env_sampler)
