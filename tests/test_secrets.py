"""API keys come from the environment only and never leave the process: not in error messages,
logs, transcripts, failed-game logs, metrics, config.json or W&B files.

A key is planted in the environment and an OpenAI-compatible fake server (on localhost) either
refuses it with a 401 that echoes it back, like a real provider's "Incorrect API key provided:
sk-...", or answers with a reply that quotes it. Then every file the run wrote and everything
logged or printed is searched for the key.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from unstable.run.config_file import ConfigError, load_config
from unstable.utils.secrets import REDACTED, SecretInConfigError, is_secret_setting, redact, reject_secret_settings

OPENAI_KEY = "sk-planted-SECRET-1234"
ROUTER_KEY = "planted-router-SECRET-5678"  # not key-shaped: only the environment says it is a secret
TTT = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}


OPENAI_KEY_14 = "sk-short-key14"  # short test keys: 14 and 8 characters (11 and 5 without "sk-")
OPENAI_KEY_8 = "sk-k8sec"


def encoded_forms(key: str) -> list[str]:
    """How an error body may echo a key other than as itself: base64 (a Basic auth header, a JSON
    blob, at each byte alignment), URL-safe base64, and without its ``sk-`` prefix."""
    forms = [key.removeprefix("sk-")]
    for text in (key, f"user:{key}", f"{{'k': '{key}'}}", f"Bearer {key}?"):
        forms += [base64.b64encode(text.encode()).decode(), base64.urlsafe_b64encode(text.encode()).decode()]
    return forms


def escaped_forms(key: str) -> list[str]:
    """How text may carry a key escaped: URL-encoded, JSON- and Python-escaped, HTML-escaped, in hex."""
    return [urllib.parse.quote(key, safe=""), urllib.parse.quote_plus(key), json.dumps(key)[1:-1],
            json.dumps(key).replace("/", "\\/")[1:-1], repr(key)[1:-1], html.escape(key), key.encode().hex()]


class _FakeOpenAI(BaseHTTPRequestHandler):
    """``/v1/chat/completions``: a model named ``*bad*`` gets a 401 echoing the key; others a reply quoting it."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if "quotes-encoded" in body["model"]:  # a reply quoting the key in forms that are not the key itself
            status, reply = 200, {
                "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": (
                    "keys: " + " / ".join(encoded_forms(key) + escaped_forms(key)) + " \\boxed{4}")}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        elif "encoded" in body["model"]:  # the key only in forms that are not the key itself
            status, reply = 401, {"error": {"message": "Bad credentials: " + " / ".join(encoded_forms(key)),
                                            "type": "invalid_request_error", "code": "invalid_api_key"}}
        elif "bad" in body["model"]:
            status, reply = 401, {"error": {"message": f"Incorrect API key provided: {key}. Check your key.",
                                            "type": "invalid_request_error", "code": "invalid_api_key"}}
        else:
            status, reply = 200, {
                "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"my key is {key}. \\boxed{{4}}"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # keep the test output quiet
        pass


@pytest.fixture(scope="module")
def fake_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.fixture
def planted(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("OPENROUTER_API_KEY", ROUTER_KEY)


def files_holding(root: str | Path, *secrets: str) -> list[str]:
    """Every file under ``root`` whose bytes contain one of ``secrets``."""
    hits = []
    for path in Path(root).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [str(path) for s in secrets if s.encode() in data]
    return hits


# ----------------------------------------------------------------------------- the helper itself
def test_redact_replaces_secret_env_values_and_key_shapes(planted, monkeypatch, tmp_path):
    monkeypatch.setenv("SHORT_API_KEY", "EMPTY")  # a placeholder key (local servers): too short to redact
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path))  # a path, not a secret itself
    assert redact(f"{tmp_path}/runs") == f"{tmp_path}/runs"
    text = f"a {ROUTER_KEY} b sk-abcdefghijklmnop0123 c Authorization: Bearer tok-123456789 d EMPTY"
    out = redact(text)
    assert ROUTER_KEY not in out and "sk-abcdefghijklmnop" not in out and "tok-123456789" not in out
    assert out.count(REDACTED) == 3 and out.endswith("d EMPTY")
    assert redact("task-abcdefghijklmnopqrstu and max_tokens") == "task-abcdefghijklmnopqrstu and max_tokens"
    assert redact(f"{OPENAI_KEY}", ()) == REDACTED


def test_redact_finds_a_key_without_its_prefix_and_in_base64_at_any_alignment(planted):
    key = "sk-proj-T3BlbkFJ0123456789abcdefghij"
    forms = encoded_forms(key) + encoded_forms(key.removeprefix("sk-proj-"))
    assert key.removeprefix("sk-proj-") in forms and len(forms) == 18
    for lead in ("", "a", "ab"):
        for form in forms:
            out = redact(f"{lead}{form}!", (key,))
            assert REDACTED in out and form not in out, form
        for bare in (base64.b64encode(key.encode()).decode(), base64.urlsafe_b64encode(key.encode()).decode()):
            out = redact(f"{lead}{bare}!", (key,))  # no more than the edge characters and padding stay
            assert out.startswith(lead + REDACTED) and len(out) <= len(lead + REDACTED) + 4, out
    for form in encoded_forms(OPENAI_KEY):  # from the environment: OPENAI_API_KEY
        assert redact(f"x {form} y").startswith("x ") and form not in redact(form), form
    ordinary = "sk-1 ok, proj-name, c2stcHJv, max_tokens=16, the base64 of 'hello world': aGVsbG8gd29ybGQ="
    assert redact(ordinary, (key,)) == ordinary


@pytest.mark.parametrize("name", ["api_key", "OPENAI_API_KEY", "openrouter_apikey", "hf_token", "secret", "password"])
def test_key_settings_are_recognised(name):
    assert is_secret_setting(name)


@pytest.mark.parametrize("name", ["max_tokens", "model_name", "keep_last", "tokenizer", "key_value_heads", 3])
def test_ordinary_settings_are_not_keys(name):
    assert not is_secret_setting(name)


# ----------------------------------------------------------------------------- configs and build()
def test_a_key_in_a_config_or_build_argument_is_refused_without_echoing_it(planted, tmp_path, tiny_model_dir,
                                                                           monkeypatch):
    import unstable
    import unstable.run.wiring

    monkeypatch.setattr(unstable.run.wiring, "start_actors", lambda *a, **k: pytest.fail("actors started"))
    path = tmp_path / "c.yaml"
    path.write_text(f"model_name: {tiny_model_dir}\ntrain_envs: [{json.dumps({**TTT, 'num_actors': 2})}]\n"
                    f"openrouter_api_key: {ROUTER_KEY}\n")
    with pytest.raises(ConfigError, match="environment variable OPENROUTER_API_KEY") as err:
        load_config(str(path))
    assert ROUTER_KEY not in str(err.value)
    path.write_text(f"model_name: {tiny_model_dir}\n")
    for overrides in ([f"{ROUTER_KEY}"], [f"run_name={ROUTER_KEY}"], [f"lora_config={{api_key: {OPENAI_KEY}}}"]):
        with pytest.raises(ConfigError) as err:
            load_config(str(path), overrides)
        assert ROUTER_KEY not in str(err.value) and OPENAI_KEY not in str(err.value), overrides
    train = [unstable.TrainEnvSpec(num_actors=2, **TTT)]
    for kwargs in ({"api_key": OPENAI_KEY}, {"run_name": ROUTER_KEY}, {"wandb_project": f"p-{OPENAI_KEY}"},
                   {"vllm_config": {"api_key": "x"}}):
        with pytest.raises(SecretInConfigError) as err:
            unstable.build(model_name=tiny_model_dir, train_envs=train, **kwargs)
        assert OPENAI_KEY not in str(err.value) and ROUTER_KEY not in str(err.value)
    with pytest.raises(SecretInConfigError, match=r"train_envs\[0\]\.api_key"):
        reject_secret_settings({"train_envs": [{"env_id": "x", "api_key": "y"}]}, "")


def test_the_saved_config_of_a_run_cannot_hold_a_key(planted, tiny_model_dir):
    """config.json and the W&B config are ``BuildConfig.to_dict()``: no field can carry the key."""
    import unstable
    from unstable.run.config import BuildConfig

    cfg = BuildConfig(model_name=tiny_model_dir, train_envs=[unstable.TrainEnvSpec(num_actors=1, **TTT)],
                      eval_envs=[unstable.EvalEnvSpec(fixed_opponent="google/gemini-2.0-flash-lite-001", **TTT)])
    text = json.dumps(cfg.to_dict(), default=str)
    assert OPENAI_KEY not in text and ROUTER_KEY not in text and "api_key" not in text


# ----------------------------------------------------------------------------- API opponents
def test_a_401_that_echoes_the_key_is_redacted(planted, fake_api, caplog):
    from unstable.policies.api import APIPolicy, APIPolicyError
    from unstable.policies.base import TurnContext

    caplog.set_level(logging.DEBUG)
    policy = APIPolicy("fake/bad-model", base_url=fake_api, api_key_env="OPENAI_API_KEY", max_retries=1)
    ctx = TurnContext(env_id="TicTacToe-v0-train", player_id=0, observation="your move", turn_index=0, env=None,
                      rng=random.Random(0))
    with pytest.raises(APIPolicyError) as err:
        asyncio.run(policy.act(ctx))
    shown = "".join(traceback.format_exception(err.value))
    assert err.value.status_code == 401 and "AuthenticationError" in str(err.value) and REDACTED in str(err.value)
    assert OPENAI_KEY not in shown and OPENAI_KEY not in caplog.text


def test_games_transcripts_metrics_and_logs_of_api_games_hold_no_key(planted, fake_api, tmp_path, caplog, capsys):
    """An API opponent that fails (401 echoing the key) and one that quotes the key in its reply,
    through the turn loop and the Tracker: nothing it writes or logs holds either key."""
    import unstable
    from unstable.policies.api import APIPolicy
    from unstable.records import AgentSpec, GameFailedError, GameSpec, PolicyRef
    from unstable.tracking import Tracker

    caplog.set_level(logging.DEBUG)
    tracker = Tracker(run_name="s", run_dir=str(tmp_path / "run"), use_wandb=False, config={"model_name": "m"})
    for i, model in enumerate(["fake/bad-model", "fake/ok-model"]):
        api = APIPolicy(model, base_url=fake_api, max_retries=0)  # OPENROUTER_API_KEY, the default
        spec = GameSpec(game_id=i, env_id="TicTacToe-v0-train", seed=i, agents=(
            AgentSpec(0, api.ref, collect_data=False), AgentSpec(1, PolicyRef("random", "scripted"))))
        try:
            result = asyncio.run(unstable.play_game(spec, {0: api, 1: unstable.RandomLegalPolicy()}))
            assert any(REDACTED in t.completion_text for t in result.turns)
        except GameFailedError as err:
            result = err.failure
            assert result.error_type == "APIPolicyError" and REDACTED in result.message
        tracker.log_game(result)
    tracker.log({"train/loss": 1.0})
    tracker.close()
    assert (tmp_path / "run" / "games").is_dir()
    assert not files_holding(tmp_path / "run", ROUTER_KEY, OPENAI_KEY)
    out = capsys.readouterr()
    for text in (caplog.text, out.out, out.err):
        assert ROUTER_KEY not in text and OPENAI_KEY not in text


def test_a_failed_games_log_holds_no_encoded_or_prefixless_key(planted, fake_api, tmp_path):
    """An API error body that echoes the key base64-encoded or without ``sk-`` fails the game; the
    failure's message and traceback reach logs/failed_games.jsonl and the transcripts redacted."""
    import unstable
    from unstable.policies.api import APIPolicy
    from unstable.records import AgentSpec, GameFailedError, GameSpec, PolicyRef
    from unstable.tracking import Tracker

    tracker = Tracker(run_name="s", run_dir=str(tmp_path / "run"), use_wandb=False, config={"model_name": "m"})
    api = APIPolicy("fake/encoded-model", base_url=fake_api, api_key_env="OPENAI_API_KEY", max_retries=0)
    spec = GameSpec(game_id=0, env_id="TicTacToe-v0-train", seed=0, agents=(
        AgentSpec(0, api.ref, collect_data=False), AgentSpec(1, PolicyRef("random", "scripted"))))
    with pytest.raises(GameFailedError) as err:
        asyncio.run(unstable.play_game(spec, {0: api, 1: unstable.RandomLegalPolicy()}))
    assert err.value.failure.message.count(REDACTED) == len(encoded_forms(OPENAI_KEY))
    tracker.log_game(err.value.failure)
    tracker.close()
    failed = (tmp_path / "run" / "logs" / "failed_games.jsonl").read_text()
    assert "Bad credentials" in failed and REDACTED in failed
    assert not files_holding(tmp_path / "run", OPENAI_KEY, *encoded_forms(OPENAI_KEY))


@pytest.mark.parametrize("key", [OPENAI_KEY_14, OPENAI_KEY_8, 'sk-a+b/c"d\\e<f>&g h\u00e9'])
def test_a_short_or_odd_key_is_redacted_in_every_form(key):
    """Whatever its length from 8 on: 14 characters and 8 (5 without ``sk-``), and one whose
    escaped forms differ from it (``+``, ``/``, quotes, a backslash, HTML, a space, non-ASCII)."""
    forms = [key, *encoded_forms(key), *escaped_forms(key), *encoded_forms(key.removeprefix("sk-")),
             *escaped_forms(key.removeprefix("sk-"))]
    for lead in ("", "a", "ab"):
        for form in forms:
            out = redact(f"x {lead}{form}! y", (key,))
            assert REDACTED in out and form not in out and key.removeprefix("sk-") not in out, (form, out)
    assert redact("ordinary text: sk-1 ok, max_tokens=16", (key,)) == "ordinary text: sk-1 ok, max_tokens=16"


@pytest.mark.parametrize("key", [OPENAI_KEY_14, OPENAI_KEY_8])
def test_a_short_key_reaches_no_failed_games_log_transcript_or_output(key, fake_api, tmp_path, monkeypatch,
                                                                      caplog, capsys):
    """A 14- and an 8-character key, echoed by an error (without its prefix, in base64) and quoted by
    a reply (also URL-encoded, JSON-escaped, ...): logs/failed_games.jsonl, games/transcripts.jsonl,
    every other file of the run, the log and stdout/stderr hold none of its forms."""
    import unstable
    from unstable.policies.api import APIPolicy
    from unstable.records import AgentSpec, GameFailedError, GameSpec, PolicyRef
    from unstable.tracking import Tracker

    monkeypatch.setenv("OPENAI_API_KEY", key)
    caplog.set_level(logging.DEBUG)
    tracker = Tracker(run_name="s", run_dir=str(tmp_path / "run"), use_wandb=False, config={"model_name": "m"})
    for i, model in enumerate(["fake/encoded-model", "fake/quotes-encoded-model", "fake/ok-model"]):
        api = APIPolicy(model, base_url=fake_api, api_key_env="OPENAI_API_KEY", max_retries=0)
        spec = GameSpec(game_id=i, env_id="TicTacToe-v0-train", seed=i, agents=(
            AgentSpec(0, api.ref, collect_data=False), AgentSpec(1, PolicyRef("random", "scripted"))))
        try:
            result = asyncio.run(unstable.play_game(spec, {0: api, 1: unstable.RandomLegalPolicy()}))
            print(result.turns[0].completion_text)
        except GameFailedError as err:
            result = err.failure
            print(result.message)
            logging.getLogger("unstable").warning("game failed: %s", result.message)
        tracker.log_game(result)
    tracker.close()
    assert "Bad credentials" in (tmp_path / "run" / "logs" / "failed_games.jsonl").read_text()
    assert "keys: " in (tmp_path / "run" / "games" / "transcripts.jsonl").read_text()
    prefixless = key.removeprefix("sk-")
    assert not files_holding(tmp_path / "run", key, prefixless, *encoded_forms(key), *escaped_forms(key))
    out = capsys.readouterr()
    assert "Bad credentials" in out.out and "keys: " in out.out
    for text in (caplog.text, out.out, out.err):
        assert key not in text and prefixless not in text


# ----------------------------------------------------------------------------- a real run
RUN_SCRIPT = textwrap.dedent("""
    import logging, os, sys, tempfile
    import ray, unstable

    logging.basicConfig(level=logging.INFO)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=True, _temp_dir=sys.argv[3])
    ttt = dict(env_id="TicTacToe-v0-train", num_players=2, prompt_template="qwen3-zs")
    run = unstable.build(
        model_name=sys.argv[1], runs_dir=sys.argv[2], run_name="secret", inference_backend="transformers",
        train_envs=[unstable.TrainEnvSpec(num_actors=1, **ttt)],
        eval_envs=[unstable.EvalEnvSpec(fixed_opponent="fake/bad-model", **ttt),
                   unstable.EvalEnvSpec(fixed_opponent="fake/encoded-model", **ttt)],
        opponent_sampling_strategy="fixed", fixed_opponents=["fake/ok-model", "fake/quotes-encoded-model"],
        batch_size=8, mini_batch_size=8, learning_rate=1e-3, max_generation_len=8,
        lora_config={"lora_rank": 4, "lora_alpha": 8}, activation_checkpointing=False,
        gradient_checkpointing=False, wandb_project="secrets-test", use_wandb=True,
        max_consecutive_failures=None, max_failure_rate=None)  # every eval game fails (401) on purpose
    try:
        print(run.start(learning_steps=1, num_collection_workers=4, num_eval_workers=2))
    finally:
        run.stop()
        ray.shutdown()
""")


@pytest.mark.slow
def test_a_run_against_api_opponents_writes_no_key(fake_api, tiny_model_dir, tmp_path):
    """build() + one learner step with API opponents (train: replies quoting the key, as it is and
    encoded; eval: 401s echoing it, as it is and encoded) and W&B offline; then the run directory,
    W&B's files, Ray's logs and all output are searched. The key is a 14-character one, known only
    from the environment (too short to look like a key: ``sk-`` and 11)."""
    router_key = OPENAI_KEY_14
    env = {**os.environ, "OPENROUTER_API_KEY": router_key, "OPENAI_API_KEY": OPENAI_KEY,
           "UNSTABLE_API_BASE_URL": fake_api, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "WANDB_DIR": str(tmp_path / "wandb"), "RAY_AUTH_MODE": "disabled"}
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    try:
        out = subprocess.run([sys.executable, "-c", RUN_SCRIPT, tiny_model_dir, str(tmp_path / "runs"), ray_dir],
                             env=env, capture_output=True, text=True, timeout=540)
        ray_logs = [p for p in Path(ray_dir).rglob("*") if p.is_file() and "logs" in p.parts]
        leaked = files_holding(ray_dir, router_key, router_key.removeprefix("sk-"), OPENAI_KEY)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert ray_logs and not leaked, leaked
    run_dir = tmp_path / "runs" / "secret"
    transcripts = (run_dir / "games" / "transcripts.jsonl").read_text()
    assert "fake/bad-model" in transcripts and "fake/ok-model" in transcripts and REDACTED in transcripts
    assert (run_dir / "metrics.jsonl").is_file() and (run_dir / "config.json").is_file()
    assert list(run_dir.rglob("*.wandb")) or list((tmp_path / "wandb").rglob("*.wandb")), "no W&B files"
    forms = (router_key, router_key.removeprefix("sk-"), *encoded_forms(router_key), OPENAI_KEY)
    assert not files_holding(tmp_path, *forms)
    assert not [f for f in forms if f in out.stdout + out.stderr]
