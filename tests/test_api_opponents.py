"""API opponents' timeout and retries are settings: checked before anything starts, carried from
build(), YAML and ``unstable eval`` to the API policy, and a server that never answers fails a game
after about ``timeout * (retries + 1)``.

The server is the OpenAI-compatible fake of ``test_secrets`` on localhost, with one more model: a
``*hang*`` model's requests are read and never answered, a ``*trickle*`` model's answer never ends.
"""

from __future__ import annotations

import asyncio
import io
import random
import threading
import time
from http.server import ThreadingHTTPServer

import pytest
from conftest import TTT
from test_secrets import _FakeOpenAI

import unstable
from unstable.collection.failures import FailureBudget, FailureBudgetSpentError, FailureCounter
from unstable.policies.api import APIOpponentConfig, APIPolicy
from unstable.records import AgentSpec, GameFailedError, GameSpec, PolicyRef
from unstable.run.config import BuildConfig
from unstable.run.config_file import load_config

RELEASE = threading.Event()  # set when the server stops, so hanging handler threads end


class _HangingOpenAI(_FakeOpenAI):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if b"hang" in body:
            RELEASE.wait()  # never answers (until the server stops)
            return
        if b"trickle" in body:  # answers a byte at a time: each read is quick, the reply never ends
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            while not RELEASE.wait(0.1):
                self.wfile.write(b" ")
                self.wfile.flush()
            return
        self.rfile = io.BytesIO(body)  # the parent reads the body again
        super().do_POST()


@pytest.fixture(scope="module")
def api_server():
    RELEASE.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HangingOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    RELEASE.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def api_env(api_server, monkeypatch):
    """API opponents of a run or an eval (which take no base_url) go to the local server."""
    monkeypatch.setenv("OPENROUTER_API_KEY", "test-key-not-secret")
    monkeypatch.setenv("UNSTABLE_API_BASE_URL", api_server)
    return api_server


def run_kwargs(model_dir, tmp_path, **overrides):
    return dict(model_name=model_dir, train_envs=[dict(TTT, num_actors=2)], wandb_project=None,
                runs_dir=str(tmp_path), **overrides)


# ----------------------------------------------------------------------------- checks
# (and the rows of test_bad_input's table for these settings)
@pytest.mark.parametrize(("given", "message"), [
    ({"api_timeout_s": -1.5}, "api_timeout_s must be a number > 0"),
    ({"api_timeout_s": float("inf")}, "api_timeout_s must be a number > 0"),
    ({"api_timeout_s": "5"}, "api_timeout_s must be a number > 0, got '5'"),
    ({"api_max_retries": 1.5}, "api_max_retries must be an integer >= 0"),
    ({"api_max_retries": True}, "api_max_retries must be an integer >= 0"),
    ({"api_opponents": {"max_retries": -2}}, r"api_opponents.max_retries must be an integer >= 0"),
    ({"api_opponents": {"timeout": 3}}, r"api_opponents: unknown settings \['timeout'\] \(did you mean 'timeout_s'"),
    ({"api_timeout_s": 3, "api_opponents": {"timeout_s": 4}}, r"api_timeout_s is given twice"),
    ({"api_turn_deadline_s": 0}, "api_turn_deadline_s must be a number > 0"),
    ({"api_opponents": {"turn_deadline_s": -1}}, r"api_opponents.turn_deadline_s must be a number > 0"),
])
def test_bad_api_settings_are_refused_before_ray_starts_naming_the_setting_as_given(
        given, message, tiny_model_dir, tmp_path, no_ray):
    with pytest.raises(ValueError, match=message):
        unstable.build(**run_kwargs(tiny_model_dir, tmp_path, **given))


@pytest.mark.parametrize(("given", "message"), [
    ({"api_timeout_s": 0}, "api_timeout_s must be a number > 0"),
    ({"api_max_retries": -1}, "api_max_retries must be an integer >= 0"),
])
def test_bad_api_settings_of_an_eval_are_refused_before_the_model_loads(given, message, monkeypatch):
    import unstable.eval.evaluation as evaluation

    monkeypatch.setattr(evaluation, "play_eval_games", lambda *a, **k: pytest.fail("games were played"))
    with pytest.raises(ValueError, match=message):
        evaluation.evaluate("tiny", "TicTacToe-v0-train", opponent="random", games=1, **given)


def test_unstable_eval_refuses_a_bad_api_timeout(capsys):
    from unstable.cli.commands import main

    assert main(["eval", "--model", "tiny", "--api-timeout-s", "0", "--games", "1"]) == 2
    assert "api_timeout_s must be a number > 0, got 0.0" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the values reach APIPolicy
def test_the_defaults_are_documented_and_used():
    assert APIOpponentConfig() == APIOpponentConfig(timeout_s=20.0, max_retries=2, turn_deadline_s=45.0)
    assert BuildConfig.__dataclass_fields__["api_opponents"].default_factory() == APIOpponentConfig()


def test_build_and_yaml_settings_are_the_run_config_and_reach_the_collectors_api_policies(
        api_env, tiny_model_dir, tmp_path):
    from unstable.collection.collector import Collector

    cfg = BuildConfig(**run_kwargs(tiny_model_dir, tmp_path, api_timeout_s=2.5, api_max_retries=0,
                                   api_turn_deadline_s=9.0))
    assert cfg.api_opponents == APIOpponentConfig(2.5, 0, 9.0)
    # config.json: a resume keeps them
    assert cfg.to_dict()["api_opponents"] == {"timeout_s": 2.5, "max_retries": 0, "turn_deadline_s": 9.0}
    nested = BuildConfig(**run_kwargs(tiny_model_dir, tmp_path, api_opponents={
        "timeout_s": 2.5, "max_retries": 0, "turn_deadline_s": 9.0}))
    assert nested.to_dict() == cfg.to_dict()
    for text in ("api_timeout_s: 2.5\napi_max_retries: 0\napi_turn_deadline_s: 9\n",
                 "api_opponents: {timeout_s: 2.5, max_retries: 0, turn_deadline_s: 9}\n"):
        path = tmp_path / "run.yaml"
        path.write_text(f"model_name: {tiny_model_dir}\ntrain_envs: [{{env_id: TicTacToe-v0-train, num_players: 2, "
                        f"num_actors: 2, prompt_template: qwen3-zs}}]\nwandb_project: null\nruns_dir: {tmp_path}\n"
                        + text)
        build_kwargs, _ = load_config(str(path))
        assert BuildConfig(**build_kwargs).api_opponents == APIOpponentConfig(2.5, 0, 9.0)
    build_kwargs, _ = load_config(str(path), ["api_timeout_s=7"])  # --set, over the file's nested section
    assert BuildConfig(**build_kwargs).api_opponents == APIOpponentConfig(7, 0, 9.0)

    spec = GameSpec(0, "TicTacToe-v0-train", 0, (AgentSpec(0, PolicyRef("fake/ok-model", "api")),
                                                 AgentSpec(1, PolicyRef("random", "scripted"))))
    collector = Collector(buffer=object(), game_scheduler=object(), backends=[object()],
                          api_opponents=cfg.api_opponents)
    policy = collector._policies(spec, [])[0]
    assert isinstance(policy, APIPolicy)
    assert (policy.timeout_s, policy.max_retries, policy.turn_deadline_s) == (2.5, 0, 9)
    assert policy.client.timeout == 2.5 and policy.client.max_retries == 0  # our loop retries, not the client's
    default = Collector(buffer=object(), game_scheduler=object(), backends=[object()])._policies(spec, [])[0]
    assert (default.timeout_s, default.max_retries, default.turn_deadline_s) == (20.0, 2, 45.0)


def test_eval_settings_reach_the_api_opponent(api_env, tiny_model_dir, monkeypatch):
    import unstable.eval.evaluation as evaluation
    from unstable.cli.commands import main

    jobs = []
    monkeypatch.setattr(evaluation, "play_eval_games", lambda job, *a, **k: jobs.append(job) or [])
    # the stand-in plays no game, so eval exits 1 (nothing finished); the settings reached the job first
    assert main(["eval", "--model", tiny_model_dir, "--opponent", "fake/ok-model", "--games", "1",
                 "--api-timeout-s", "2.5", "--api-max-retries", "0", "--api-turn-deadline-s", "9"]) == 1
    (job,) = jobs
    assert job.api == APIOpponentConfig(2.5, 0, 9.0)
    spec = job.game_spec(0)
    opponent = evaluation._policies(job, backend=None)(spec)[1 - spec.eval_player_id]
    assert isinstance(opponent, APIPolicy)
    assert (opponent.timeout_s, opponent.max_retries, opponent.turn_deadline_s) == (2.5, 0, 9.0)


# ----------------------------------------------------------------------------- a server that hangs
def test_a_game_against_an_api_opponent_that_hangs_fails_after_timeout_times_attempts(api_env):
    """Through the collector's policies, as a run plays it: 0.5 s per call, one retry."""
    from unstable.collection.collector import Collector

    spec = GameSpec(0, "TicTacToe-v0-train", 0, (AgentSpec(0, PolicyRef("fake/hang-model", "api")),
                                                 AgentSpec(1, PolicyRef("random", "scripted"))))
    collector = Collector(buffer=object(), game_scheduler=object(), backends=[object()],
                          api_opponents=APIOpponentConfig(timeout_s=0.5, max_retries=1))
    policies = collector._policies(spec, [])
    policies[0].backoff_s = 0.05
    t0 = time.perf_counter()
    with pytest.raises(GameFailedError) as err:
        asyncio.run(asyncio.wait_for(unstable.play_game(spec, policies), timeout=30))
    elapsed = time.perf_counter() - t0
    assert 0.5 * 2 <= elapsed < 0.5 * 2 + 2.0, elapsed  # two calls of 0.5 s and the backoff, not 4 x 60 s
    failure = err.value.failure
    assert failure.stage == "policy" and failure.error_type == "APIPolicyError"
    assert ("API opponent 'fake/hang-model' failed after 2 attempt(s): the last call got no answer within 0.5 s "
            "(api_timeout_s; retries: api_max_retries=1)") in failure.message
    with pytest.raises(FailureBudgetSpentError):  # a failed game, counted by the failure budget
        FailureCounter(FailureBudget(max_consecutive_failures=1), "train").record(err.value)


def _hung_turn_seconds(config: APIOpponentConfig, backoff_s: float) -> tuple[float, str]:
    """How long one turn against the hanging model takes under ``config``, and its error message."""
    from unstable.policies.api import APIPolicyError
    from unstable.policies.base import TurnContext

    policy = APIPolicy("fake/hang-model", backoff_s=backoff_s, **config.policy_kwargs())
    ctx = TurnContext("TicTacToe-v0-train", 0, "your move", 0, None, random.Random(0))
    t0 = time.perf_counter()
    with pytest.raises(APIPolicyError) as err:
        asyncio.run(asyncio.wait_for(policy.act(ctx), timeout=30))  # the outer bound: a regression fails, not hangs
    return time.perf_counter() - t0, str(err.value)


def test_the_turn_deadline_bounds_a_hung_turn_whatever_the_retries(api_env):
    """Ten retries of 0.4 s would take 4.4 s; the turn's 1 s deadline cuts them off."""
    elapsed, message = _hung_turn_seconds(APIOpponentConfig(timeout_s=0.4, max_retries=10, turn_deadline_s=1.0), 0.05)
    assert 1.0 <= elapsed < 1.0 + 0.5, elapsed
    assert "the turn's 1 s (api_turn_deadline_s) are spent" in message


def test_the_defaults_bound_a_hung_training_turn_to_under_a_minute(api_env):
    """The defaults, on a clock 20 times faster (every duration / 20, as the retries and their
    backoff scale alike): the hung turn ends at the deadline, not after 4 x 60 s as it used to. (At / 100
    the last attempt had 20 ms to start in, less than a slow machine's overhead of two calls.)"""
    d = APIOpponentConfig()
    assert d.turn_deadline_s <= 60 and d.timeout_s < d.turn_deadline_s and d.max_retries >= 1
    scaled = APIOpponentConfig(d.timeout_s / 20, d.max_retries, d.turn_deadline_s / 20)
    elapsed, message = _hung_turn_seconds(scaled, backoff_s=1.0 / 20)
    assert elapsed < d.turn_deadline_s / 20 + 0.3, elapsed
    assert elapsed >= d.turn_deadline_s / 20 - 0.05, elapsed  # the retries used the turn's time
    assert f"failed after {d.max_retries + 1} attempt(s)" in message


def test_an_api_opponent_that_answers_is_not_cut_short(api_env):
    from unstable.policies.base import TurnContext

    policy = APIPolicy("fake/ok-model", timeout_s=5, max_retries=0)
    out = asyncio.run(policy.act(TurnContext("TicTacToe-v0-train", 0, "your move", 0, None, random.Random(0))))
    assert "\\boxed{4}" in out.completion_text


def test_a_reply_that_trickles_in_forever_is_cut_off_at_the_timeout(api_env):
    """httpx's timeout bounds each read; the policy bounds the whole call."""
    from unstable.policies.api import APIPolicyError
    from unstable.policies.base import TurnContext

    policy = APIPolicy("fake/trickle-model", timeout_s=0.5, max_retries=0)
    t0 = time.perf_counter()
    with pytest.raises(APIPolicyError, match=r"no answer within 0\.5 s"):
        ctx = TurnContext("TicTacToe-v0-train", 0, "your move", 0, None, random.Random(0))
        asyncio.run(asyncio.wait_for(policy.act(ctx), timeout=10))  # the outer bound: a regression fails, not hangs
    assert time.perf_counter() - t0 < 2.0
