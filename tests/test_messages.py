"""What a new user reads: help text, error messages naming what they gave, and no library noise.

Each test is one of the messages issue 29 found wrong (``--help`` showing reST markup, an internal
setting's name, "does not exist" for a file that exists, an error line without ``error:``, a
hint naming the wrong section, a negative seed taken silently, Ray's token notice and trueskill's
escape-sequence warning in every first run's output).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from test_transcripts import known_game

from unstable.cli.commands import main
from unstable.utils.quiet import RAY_TOKEN_AUTH_LOGGER, quiet_trueskill_escape_warning

REPO = Path(__file__).resolve().parent.parent


def test_help_shows_plain_text(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "The unstable command line." in out and "``" not in out


def test_play_concurrency_zero_names_the_option_before_the_model_loads(capsys, monkeypatch):
    import unstable.local_models.resolve

    monkeypatch.setattr(unstable.local_models.resolve, "resolve_model_name", lambda *a: pytest.fail("model resolved"))
    assert main(["play", "--model", "tiny", "--concurrency", "0", "--games", "1"]) == 2
    err = capsys.readouterr().err
    assert "unstable play: error: --concurrency must be an integer >= 1, got 0" in err
    assert "max_batch_size" not in err


def test_play_vs_opponent_names_max_concurrent():
    from unstable.eval.play import play_vs_opponent

    with pytest.raises(ValueError, match="max_concurrent must be an integer >= 1, got 0"):
        play_vs_opponent("tiny", games=1, max_concurrent=0)


def test_plot_of_a_file_says_it_is_not_a_run_directory(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    path.write_text("{}\n")
    assert main(["plot", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"unstable plot: error: '{path}' is a file, not a run directory" in err and "does not exist" not in err
    assert main(["plot", str(tmp_path / "missing")]) == 2  # a missing one still says so
    assert "does not exist" in capsys.readouterr().err


def test_replay_of_a_game_not_there_prints_an_error_line_like_the_other_commands(tmp_path, capsys):
    from unstable.tracking import Tracker

    tracker = Tracker("t", run_dir=str(tmp_path / "run"), use_wandb=False)
    for i in (3, 11):
        tracker.log_game(known_game(i))
    tracker.close()
    assert main(["replay", str(tmp_path / "run"), "--game", "999999"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.strip() == (f"unstable replay: error: no game 999999 in the transcripts of {tmp_path / 'run'} "
                               "(they hold 2 games, ids 3 to 11)")


def test_the_multi_model_hint_for_a_flat_setting_names_its_section():
    from unstable.run.arguments import nest_arguments

    models = [{"name": "a", "model_name": "tiny"}, {"name": "b", "model_name": "tiny"}]
    with pytest.raises(ValueError) as err:
        nest_arguments({"models": models, "reward_transforms": [], "batch_size": 8, "lora_config": {}})
    message = str(err.value)
    assert "reward_transforms -> models[i].buffer.reward_transforms" in message
    assert "batch_size -> models[i].learner.batch_size" in message and "lora_config -> models[i].lora" in message
    assert "'learner': {...}" not in message


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_a_tiny_model_seed_out_of_range_is_refused_before_anything_is_written(seed, tmp_path):
    from unstable.local_models.tiny import build_tiny_model, tiny_model_path

    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        build_tiny_model(tmp_path / "m", seed=seed)
    with pytest.raises(ValueError, match="seed must be an integer"):
        tiny_model_path(seed=seed, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "m").exists() and not (tmp_path / "cache").exists()


def test_tiny_model_seed_minus_one_is_refused_by_the_cli(tmp_path, capsys):
    assert main(["tiny-model", "--out", str(tmp_path / "m"), "--seed", "-1"]) == 2
    assert "unstable tiny-model: error: seed must be an integer in [0, 2**64), got -1" in capsys.readouterr().err


# ----------------------------------------------------------------------------- library noise
def test_rays_token_auth_notice_is_dropped_and_other_ray_warnings_are_not(monkeypatch):
    """Ray's own functions log the notices; after ``quiet_ray_token_auth_notice`` (which
    ``ensure_ray`` calls) only the "enabled" one is gone."""
    import ray
    from ray._private.authentication import authentication_token_setup as setup

    import unstable.run.wiring as wiring

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    seen: list[str] = []
    logger = logging.getLogger(RAY_TOKEN_AUTH_LOGGER)
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr(logger, "handlers", [Collect()])
    monkeypatch.setattr(logger, "propagate", False)  # keep the test's output clean
    setup._warn_token_auth_enabled()
    assert seen and seen[0].startswith("Token authentication is enabled")  # what every first run printed
    seen.clear()
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # no cluster needed to install the filter
    wiring.ensure_ray()
    wiring.ensure_ray()
    assert len(logger.filters) == 1
    setup._warn_token_auth_enabled()
    assert seen == []
    setup._warn_token_auth_disabled()  # a cluster without authentication is still worth a warning
    logger.warning("another Ray warning")
    assert len(seen) == 2 and seen[0].startswith("Token authentication is disabled"), seen


def test_rays_start_info_lines_are_dropped_and_its_errors_are_not(monkeypatch):
    """A new user's quickstart printed "Generated new authentication token" and "Started a local Ray instance"
    (INFO, read as errors by a newcomer); the same loggers' other lines and errors still show."""
    import ray

    import unstable.run.wiring as wiring

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    seen: list[str] = []
    loggers = [logging.getLogger(name) for name in (RAY_TOKEN_AUTH_LOGGER, "ray._private.worker")]
    for logger in loggers:
        monkeypatch.setattr(logger, "filters", [])
        monkeypatch.setattr(logger, "handlers", [Collect()])
        monkeypatch.setattr(logger, "propagate", False)
        monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    wiring.ensure_ray()
    token, worker = loggers
    token.info("Generated new authentication token and saved to /home/u/.ray/auth_token")
    worker.info("Started a local Ray instance.")
    assert seen == []
    worker.info("Connected to Ray cluster.")
    worker.error("Started a local Ray instance, then it failed")  # an error is never dropped
    token.error("Generated new authentication token, but could not save it")
    assert len(seen) == 3, seen


def _trueskill_source() -> tuple[str, str]:
    import importlib.util

    path = importlib.util.find_spec("trueskill").origin
    return Path(path).read_text(), path


def test_trueskills_escape_sequence_warning_is_filtered_for_trueskill_only():
    """Compiling trueskill's source warns (3.12: SyntaxWarning; 3.11: DeprecationWarning); with
    warnings as errors that is a SyntaxError, unless the filter is installed. The same escape in
    another file still warns."""
    source, path = _trueskill_source()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SyntaxError, match="invalid escape sequence"):
            compile(source, path, "exec")
        quiet_trueskill_escape_warning()
        compile(source, path, "exec")
        with pytest.raises(SyntaxError, match="invalid escape sequence"):
            compile('x = "a\\ b"\n', str(Path(path).parent.parent / "other" / "mod.py"), "exec")
        with pytest.raises(SyntaxError, match="invalid escape sequence"):
            compile('x = "a\\ b"\n', "/tmp/mine.py", "exec")


def test_importing_the_registry_compiles_trueskill_without_a_warning(tmp_path):
    """A fresh process, trueskill compiled from source (an empty bytecode cache, as after an install
    without bytecode), escape-sequence warnings as errors: importing the registry succeeds."""
    script = "import unstable.registry.model_registry as m; m.ModelRegistry(); import trueskill; print('ok')"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}
    args = [sys.executable, "-W", "error::SyntaxWarning", "-W", "error::DeprecationWarning", "-c"]
    proc = subprocess.run([*args, script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    bare = subprocess.run([*args, "import trueskill"], env=env | {"PYTHONPYCACHEPREFIX": str(tmp_path / "bare")},
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0 and "invalid escape sequence" in bare.stderr  # what the filter prevents


QUICKSTART_LIKE = textwrap.dedent("""
    import ray

    from unstable.registry.model_registry import ModelRegistry
    from unstable.utils.quiet import quiet_ray_token_auth_notice

    ModelRegistry()
    quiet_ray_token_auth_notice()  # what ensure_ray() does first (see the test above)
    ray.init(address="local", num_cpus=1, include_dashboard=False)  # one CPU: starts on a busy machine too
    ray.shutdown()
    print("ok")
""")


@pytest.mark.slow
def test_a_first_run_shows_neither_rays_token_notice_nor_trueskills_warning(tmp_path):
    """As a new user's first quickstart: no RAY_AUTH_MODE, a fresh home (no Ray token yet), trueskill
    compiled from source, Python's default warning display for both categories."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env |= {"PYTHONPATH": str(REPO), "HOME": str(tmp_path), "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"),
            "RAY_TMPDIR": "/tmp", "RAY_raylet_start_wait_time_s": "300"}  # a busy machine starts Ray slowly
    proc = subprocess.run([sys.executable, "-W", "default::DeprecationWarning", "-W", "default::SyntaxWarning",
                           "-c", QUICKSTART_LIKE], env=env, capture_output=True, text=True, timeout=500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ok" in proc.stdout, output[-3000:]
    assert "Token authentication is enabled" not in output and "invalid escape sequence" not in output
    assert "Generated new authentication token" not in output and "Started a local Ray instance" not in output


def test_install_sh_ignores_setuptools_editable_notice_and_no_other_warning():
    """scripts/install.sh showed setuptools' "BuildBackendWarning: Editable installation" box: the filter it
    sets for the editable install drops that warning (its text as setuptools words it) and nothing else."""
    import re

    script = (REPO / "scripts" / "install.sh").read_text()
    notice = re.search(r'^EDITABLE_NOTICE="([^"]+)"$', script, re.M).group(1)
    assert 'PYTHONWARNINGS="$EDITABLE_NOTICE' in script and 'pip_install -e ".${extras}"' in script
    code = ("import warnings\n"
            "class BuildBackendWarning(UserWarning): pass\n"
            "warnings.warn('Editable installation.\\n!!\\n  Please be careful with folders', BuildBackendWarning)\n"
            "warnings.warn('Editable mode is deprecated and will fail', BuildBackendWarning)\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONWARNINGS": notice},
                          capture_output=True, text=True, timeout=60)
    assert "Editable installation" not in proc.stderr and "will fail" in proc.stderr, proc.stderr
