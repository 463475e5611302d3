"""Fail fast: a bug stops the run with its traceback; failed games are tolerated only up to a budget.

In-process collectors play real TextArena games with the tiny model's real transformers backend;
the end-to-end test breaks a registered prompt template in a real ``build()`` run on local Ray.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import TTT, small_run_kwargs

import unstable
from unstable.buffers import StepBuffer
from unstable.collection.collector import Collector
from unstable.collection.failures import FailureBudget, FailureBudgetSpentError, FailureCounter
from unstable.collection.scheduler import GameScheduler
from unstable.inference.base import InferenceUnavailableError
from unstable.policies.api import APIOpponentConfig
from unstable.policies.base import PolicyError
from unstable.records import AgentSpec, FailedGame, GameFailedError, GameRecord, GameSpec, PolicyRef, Turn
from unstable.registry import ModelRegistry
from unstable.samplers.env_samplers import UniformRandomEnvSampler
from unstable.samplers.model_samplers import BaseModelSampler


def failure(stage: str = "env", seed: int = 0) -> GameFailedError:
    spec = GameSpec(seed, "TicTacToe-v0-train", seed, (AgentSpec(0, PolicyRef("random", "scripted")),))
    try:
        raise RuntimeError(f"cause of game {seed}")
    except RuntimeError as exc:
        err = GameFailedError(FailedGame(spec=spec, stage=stage, error_type="RuntimeError", message=str(exc)))
        err.__cause__ = exc
        return err


# ----------------------------------------------------------------------------- the budget itself
def test_a_streak_of_failures_spends_the_budget_from_its_first_failure():
    counter = FailureCounter(FailureBudget(max_consecutive_failures=3, max_failure_rate=None), "train")
    for outcome in (failure(seed=1), None, failure(seed=2), failure(seed=3)):  # a success resets the streak
        counter.record(outcome)
    with pytest.raises(FailureBudgetSpentError, match="3 train games failed in a row") as info:
        counter.record(failure(seed=4))
    assert info.value.first.seed == 2 and str(info.value.__cause__) == "cause of game 2"
    assert "seed 2" in str(info.value) and "max_consecutive_failures" in str(info.value)


def test_a_broken_policy_spends_the_budget_though_games_it_never_played_finish_in_between():
    """An eval opponent whose adapter broke: the games where the evaluated model's first move ended
    the game finish without its turn, so the plain streak never reaches 3 and the failures stay at half
    of the window. Before, such a run went on (the failure in test_every_game_fails under load)."""
    learner, opponent = PolicyRef("ckpt-3", version=3), PolicyRef("/adapters/opponent")

    def played_by(*policies):
        turns = tuple(Turn(turn_index=i, player_id=i, observation="", prompt="", completion_text="", action="[0]",
                           format_ok=True, invalid=False, policy=p) for i, p in enumerate(policies))
        return GameRecord(GameSpec(0, "TicTacToe-v0-train", 0, ()), turns, {0: 1.0, 1: -1.0}, {})

    def broken(seed):
        err = failure("policy", seed)
        return GameFailedError(dataclasses.replace(err.failure, policy=opponent))

    counter = FailureCounter(FailureBudget(max_consecutive_failures=3, max_failure_rate=0.5, failure_rate_window=10),
                             "eval")
    for outcome in (broken(1), played_by(learner), broken(2), played_by(opponent, learner), broken(3),
                    played_by(learner), broken(4), None):  # a game the opponent played resets its streak
        counter.record(outcome)
    with pytest.raises(FailureBudgetSpentError, match="3 eval games failed in a row in a turn of '/adapters/opponent', "
                                                      "counting only the games it played") as info:
        counter.record(broken(5))
    assert info.value.first.seed == 3 and info.value.first.policy == opponent
    assert "failed in policy (a turn of '/adapters/opponent')" in str(info.value)


def test_dropped_games_neither_count_nor_break_a_streak():
    counter = FailureCounter(FailureBudget(max_consecutive_failures=2, failure_rate_window=4), "eval")
    for _ in range(100):  # the inference actor died: not the game's fault
        counter.record(failure("inference"))
    counter.record(failure(seed=7))
    counter.record(failure("inference"))
    with pytest.raises(FailureBudgetSpentError, match="2 eval games failed in a row") as info:
        counter.record(failure(seed=8))
    assert info.value.first.seed == 7


def test_a_failure_rate_over_the_window_spends_the_budget():
    budget = FailureBudget(max_consecutive_failures=None, max_failure_rate=0.5, failure_rate_window=10)
    counter = FailureCounter(budget, "train")
    for i in range(5):  # 5 of 10 is not more than half; a short window is not judged at all
        counter.record(failure(seed=i))
        counter.record(None)
    counter.record(failure(seed=10))  # the window now drops game 0's failure: still 5 of 10
    with pytest.raises(FailureBudgetSpentError, match="6 of the last 10 train games failed") as info:
        counter.record(failure(seed=11))
    assert info.value.first.seed == 1  # the oldest failure still in the window


def test_the_budget_error_survives_the_trip_from_the_collector_to_the_driver():
    """Ray pickles the collector's error for ``Run.wait()``; rebuilt from its message alone it failed,
    and the driver got Ray's ``UnserializableException`` instead of the cause."""
    import pickle

    counter = FailureCounter(FailureBudget(max_consecutive_failures=1, max_failure_rate=None), "train")
    with pytest.raises(FailureBudgetSpentError) as info:
        counter.record(failure(seed=5))
    spent = pickle.loads(pickle.dumps(info.value))
    assert type(spent) is FailureBudgetSpentError and str(spent) == str(info.value)
    assert spent.first == info.value.first and spent.first.seed == 5
    game = pickle.loads(pickle.dumps(failure(seed=6)))
    assert type(game) is GameFailedError and game.failure.seed == 6 and str(game) == game.failure.describe()


def test_the_defaults_tolerate_a_healthy_run_and_stop_a_broken_one_within_a_few_dozen_games():
    healthy = FailureCounter(FailureBudget(), "train")
    for i in range(10_000):  # a quarter of the games fail, as in the env-fault test of test_reliability
        healthy.record(failure(seed=i) if i % 4 == 1 else None)
    broken = FailureCounter(FailureBudget(), "train")
    with pytest.raises(FailureBudgetSpentError):
        for i in range(40):
            broken.record(failure(seed=i))
    assert i < 40


def test_build_makes_the_budget_from_its_settings_and_saves_them(tiny_model_dir, tmp_path):
    """(Bad values are in test_bad_input's table; the slow test below checks the collector gets it.)"""
    from unstable.run.build import BuildConfig

    cfg = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, max_consecutive_failures=None))
    assert cfg.failure_budget == FailureBudget(None, 0.5, 200)
    assert cfg.to_dict()["failure_budget"]["max_failure_rate"] == 0.5  # saved in config.json, so a resumed run keeps it


# ----------------------------------------------------------------------------- an in-process collector
@pytest.fixture(autouse=True)
def _backend_idle_after(request):
    """A collection stopped by an error leaves the session backend's executor finishing the batch it
    had started, sampling from torch's global RNG; later tests that seed it (test_learners) must not
    share it with that thread. Its executor has one worker: a no-op queued behind the batch waits for it."""
    yield
    if "backend" in request.fixturenames:
        request.getfixturevalue("backend")._executor.submit(lambda: None).result()


def local_collector(backend, template: str, **kwargs) -> tuple[Collector, GameScheduler]:
    registry = ModelRegistry()
    registry.add_checkpoint(uid="base", path=None, iteration=0)
    spec = unstable.TrainEnvSpec(num_actors=2, **{**TTT, "prompt_template": template})
    scheduler = GameScheduler(BaseModelSampler(registry), UniformRandomEnvSampler([spec]))
    return Collector(backends=[backend], buffer=StepBuffer(64), game_scheduler=scheduler, **kwargs), scheduler


def register(name: str, template) -> str:
    unstable.register_template(name, template, overwrite=True)
    return name


def test_a_model_that_fails_every_game_stops_collection_with_the_first_failure_as_cause(backend):
    """Every prompt is longer than the model's context: the real backend raises, each game fails
    (counted, stage "policy"), and collection stops after max_consecutive_failures of them."""
    template = register("too-long", lambda obs: "x " * 5000 + obs)
    collector, scheduler = local_collector(backend, template, failure_budget=FailureBudget(max_consecutive_failures=5))
    with pytest.raises(FailureBudgetSpentError, match="5 train games failed in a row") as info:
        asyncio.run(asyncio.wait_for(collector.collect(4, 0), timeout=120))
    assert isinstance(info.value.__cause__, PolicyError)  # LLMPolicy's, from the backend's own error
    assert "does not fit the model's 4096-token context" in str(info.value.__cause__.__cause__)
    assert info.value.first.stage == "policy" and "does not fit" in str(info.value)
    stats = collector.stats()
    assert stats["failed"] == 5 == scheduler.stats()["games_failed"] and stats["train_finished"] == 0


def test_a_broken_template_stops_collection_at_its_first_game_with_its_own_error(backend):
    """A bug is not a failed game: no game is counted, the template's error itself comes out. (The template
    breaks only once the specs are made: a template that breaks on a game's first observation is refused
    when its spec is made, the next test.)"""
    armed = [False]

    def broken(obs: str) -> str:
        return f"{obs} {1 / 0}" if armed[0] else obs

    collector, _ = local_collector(backend, register("broken-local", broken))
    armed[0] = True
    with pytest.raises(ZeroDivisionError) as info:
        asyncio.run(asyncio.wait_for(collector.collect(4, 0), timeout=120))
    assert "in broken" in "".join(traceback.format_tb(info.value.__traceback__))
    assert "a bug, not a failed game" in "".join(info.value.__notes__)
    stats = collector.stats()
    assert stats["failed"] == 0 and stats["train_started"] == 4 and stats["cancelled"] == 3


class StatsFail:
    """The real backend, except that its ``stats`` raises ``error``."""

    name = "inference-stats"

    def __init__(self, inner, error: Exception):
        self.inner, self.error = inner, error

    async def generate(self, request):
        return await self.inner.generate(request)

    def stats(self):
        raise self.error


class Tracker:
    def __init__(self):
        self.stats = []

    def log_game(self, result):
        pass

    def log_inference(self, name, stats):
        self.stats.append(stats)


def test_the_report_loop_lets_an_unexpected_error_through(backend):
    collector, _ = local_collector(StatsFail(backend, KeyError("queue_depth")), "qwen3-zs",
                                   tracker=Tracker(), stats_every_s=0.0)
    with pytest.raises(KeyError, match="queue_depth"):
        asyncio.run(asyncio.wait_for(collector.collect(2, 0), timeout=120))


def test_the_report_loop_skips_an_actor_that_is_unavailable(backend, caplog):
    tracker = Tracker()
    collector, _ = local_collector(StatsFail(backend, InferenceUnavailableError("inference-stats: restarting")),
                                   "qwen3-zs", tracker=tracker)
    with caplog.at_level(logging.WARNING):
        asyncio.run(collector._report())
    assert tracker.stats == [] and "no stats from inference actor inference-stats" in caplog.text


class GameLog(Tracker):
    def __init__(self):
        super().__init__()
        self.games = []

    def log_game(self, result):
        self.games.append(result)


def test_train_games_are_unaffected_by_eval_games_whose_opponent_adapter_is_corrupt(tiny_model_dir, adapters,
                                                                                   tmp_path):
    """Requests of both kinds of game share the backend's batches: the corrupt adapter's requests fail
    alone, so the eval games fail once the opponent is to move (the tiny model's invalid first move
    ends some earlier) and no train game does."""
    from unstable.inference.transformers_backend import TransformersBackend
    from unstable.samplers.env_samplers import UniformRandomEnvSampler

    corrupt = tmp_path / "corrupt"
    shutil.copytree(adapters[1], corrupt)
    (corrupt / "adapter_model.safetensors").write_bytes(b"not safetensors " * 64)
    registry = ModelRegistry()
    registry.add_checkpoint(uid="ckpt-1", path=adapters[0], iteration=1)
    env_sampler = UniformRandomEnvSampler([unstable.TrainEnvSpec(num_actors=2, **TTT)],
                                          [unstable.EvalEnvSpec(fixed_opponent=str(corrupt), **TTT)])
    backend = TransformersBackend(tiny_model_dir, max_batch_size=16, batch_wait_ms=20)
    tracker = GameLog()
    collector = Collector(backends=[backend], buffer=StepBuffer(1000), tracker=tracker,
                          game_scheduler=GameScheduler(BaseModelSampler(registry), env_sampler),
                          sampling=unstable.SamplingParams(max_new_tokens=8),
                          failure_budget=FailureBudget(max_consecutive_failures=None, max_failure_rate=None))

    async def until_some_of_each():
        task = asyncio.create_task(collector.collect(3, 3))
        while not task.done() and (sum(not g.spec.is_eval for g in tracker.games) < 4
                                   or sum(isinstance(g, FailedGame) for g in tracker.games) < 3):
            await asyncio.sleep(0.05)
        collector.stop()
        await task

    asyncio.run(asyncio.wait_for(until_some_of_each(), timeout=300))
    backend.close()
    failed = [g for g in tracker.games if isinstance(g, FailedGame)]
    assert len(failed) >= 3 and all(g.spec.is_eval and str(corrupt) in g.message for g in failed), [
        g.describe() for g in failed]
    assert sum(not g.spec.is_eval for g in tracker.games) >= 4
    assert backend.stats()["mean_batch_size"] > 1  # the two kinds did share batches


# ----------------------------------------------------------------------------- a real run
@pytest.mark.slow
def test_a_broken_prompt_template_stops_a_build_run_with_its_error(ray_session, tiny_model_dir, tmp_path):
    """The issue's test: a registered template that raises stops a real run (no hang) and
    ``run.wait()`` raises the template's error, with its traceback and the game it happened in."""
    armed = tmp_path / "armed"  # a file: the template runs in the collector's process too

    def broken_board(obs: str) -> str:
        return f"{obs} {len(obs) // 0}" if armed.exists() else obs

    unstable.register_template("broken-board", broken_board, overwrite=True)
    ttt = {**TTT, "prompt_template": "broken-board"}
    armed.touch()  # broken from the first observation: refused when the spec is made, before Ray
    with pytest.raises(ZeroDivisionError) as info:
        unstable.TrainEnvSpec(num_actors=2, **ttt)
    assert "raised by prompt_template 'broken-board' on the first observation" in "".join(info.value.__notes__)
    armed.unlink()  # broken only in play, from here on: the run must stop with its error
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "broken-template",
                                            train_envs=[unstable.TrainEnvSpec(num_actors=2, **ttt)],
                                            eval_envs=[unstable.EvalEnvSpec(fixed_opponent="random", **ttt)],
                                            max_consecutive_failures=7, api_timeout_s=7.5))
    pool = ThreadPoolExecutor(1)
    try:
        budget, api = ray_session.get(run.actors.collector.__ray_call__.remote(
            lambda c: (c.failure_budget, c.api_opponents)))
        assert budget == FailureBudget(max_consecutive_failures=7)
        assert api == APIOpponentConfig(timeout_s=7.5)  # the collector's API opponents get build()'s settings
        armed.touch()
        run.start(learning_steps=3, num_collection_workers=8, num_eval_workers=2, block=False)
        waited = pool.submit(run.wait)
        error = waited.exception(timeout=180)  # a regression that hangs fails here instead
        stats = ray_session.get(run.actors.collector.stats.remote())
    finally:
        run.stop()
        pool.shutdown(wait=False)
    assert isinstance(error, ZeroDivisionError), error
    assert "broken_board" in str(error) and "a bug, not a failed game" in str(error)
    assert stats["failed"] == 0 and stats["train_finished"] == 0


def test_templates_registered_in_the_users_process_are_handed_to_the_collector(backend, monkeypatch):
    """A Ray actor starts with the built-in templates only; build() hands it the user's."""
    from unstable.games import templates

    register("mine", "Board:\n{observation}\nMove:")
    custom = templates.custom_templates()
    assert "mine" in custom and "qwen3-zs" not in custom
    monkeypatch.delitem(templates._TEMPLATES, "mine")  # as in a fresh actor process
    local_collector(backend, "qwen3-zs", prompt_templates=custom)
    assert templates.render_prompt("mine", "X") == "Board:\nX\nMove:"
