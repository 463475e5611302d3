"""The command line, as a user runs it."""

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from doc_examples import code_blocks
from transformers import AutoModelForCausalLM, AutoTokenizer

import unstable
from unstable.cli.commands import main


def test_tiny_model_then_play(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["tiny-model", "--out", str(out)]) == 0
    AutoModelForCausalLM.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)
    assert main(["tiny-model", "--out", str(out)]) == 2  # refuses to overwrite
    assert "not empty" in capsys.readouterr().err
    assert main(["play", "--model", str(out), "--games", "4", "--max-new-tokens", "8"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^4 games in .*win rate", text, re.M)
    assert len(re.findall(r"^  game ", text, re.M)) == 4


def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path))
    assert main(["play", "--model", str(tmp_path / "nope"), "--games", "1"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["play", "--model", "tiny", "--env", "Wordle-v0", "--games", "1"]) == 2
    assert "NLTK" in capsys.readouterr().err


def test_eval_and_play_help_list_each_games_scripted_baselines(capsys):
    for command in ("eval", "play"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert ("TicTacToe: random, heuristic, optimal; KuhnPoker: random, nash; ConnectFour: random, heuristic; "
                "Nim: random; SimpleTak: random") in text


def test_eval_refuses_a_baseline_the_game_lacks(capsys):
    assert main(["eval", "--model", "tiny", "--env", "TicTacToe-v0-train", "--opponent", "nash", "--games", "1"]) == 2
    err = capsys.readouterr().err
    assert "'nash' cannot play 'TicTacToe-v0-train'" in err and "random, heuristic, optimal" in err


README_BLOCKS = code_blocks("python")  # the README's and the docs pages' examples, each once


def test_readme_game_example_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path))
    blocks = [b for b in README_BLOCKS if "unstable.build(" not in b and "Environment(" not in b]
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_readme_environment_examples_are_valid_runs(monkeypatch, tmp_path):
    """The README's environment examples, run in order in one namespace; build() is checked without Ray
    (BuildConfig validates everything it would, and the run's configuration is what we compare)."""
    import unstable
    from unstable.run.config import BuildConfig

    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path))
    built = []
    monkeypatch.setattr(unstable, "build", lambda **kwargs: built.append(BuildConfig(**kwargs))
                        or SimpleNamespace(config=built[-1], stop=lambda: None))  # the page stops each run
    blocks = [b for b in README_BLOCKS if "Environment(" in b]
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    single, mixed = built
    assert [e.name for e in single.environments] == ["arithmetic"]
    assert [getattr(s, "env_id", None) for s in mixed.train_envs] == ["TicTacToe-v0-train", "arithmetic"]
    assert [s.env_id for s in mixed.eval_envs] == ["arithmetic-test", "hard-level3"]
    assert namespace["duo"].round.actors == ("Bob", "Alice")


@pytest.mark.slow
def test_readme_training_example_runs_scaled_down(ray_session, monkeypatch, tmp_path):
    """The README's build() example, with fewer steps and games so it fits in a test."""
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (block,) = [b for b in README_BLOCKS if "unstable.build(" in b and "learning_steps=20" in b]
    for old, new in [("learning_steps=20", "learning_steps=1"), ("batch_size=64, mini_batch_size=16",
                     "batch_size=16, mini_batch_size=8"), ("num_collection_workers=32", "num_collection_workers=8")]:
        assert old in block
        block = block.replace(old, new)
    exec(compile(block, "README.md", "exec"), {})
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "checkpoints" / "ckpt-1" / "adapter_config.json").is_file()


@pytest.mark.parametrize("command", [[], ["tiny-model"], ["play"], ["train"], ["eval"], ["plot"], ["dashboard"],
                                     ["replay"], ["quickstart"]])
def test_every_help_text_prints(command, capsys):
    """``unstable --help`` once crashed: argparse formats help with %, and a '95% i' in one text broke it."""
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    assert "usage: unstable" in capsys.readouterr().out


def test_quickstart_options_are_the_config_fields_and_their_docs(capsys):
    """One source of truth: each option's help is its QuickstartConfig field's docstring and default."""
    from unstable.cli.commands import QUICKSTART_OPTIONS
    from unstable.cli.quickstart import QuickstartConfig
    from unstable.utils.fields import field_docs

    docs = field_docs("unstable.cli.quickstart", "QuickstartConfig")
    with pytest.raises(SystemExit):
        main(["quickstart", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = QuickstartConfig(out="x")
    for name in QUICKSTART_OPTIONS:
        assert f"--{name.replace('_', '-')}" in text
        assert docs[name].summary in text
        if name != "out":
            assert docs[name].default == getattr(defaults, name)  # the source's default is the config's
            assert f"(default: {getattr(defaults, name)})" in text


def test_the_parser_and_its_help_are_built_without_importing_torch():
    """The options' docs are read from the configs' source files: building the parser (every command
    does, ``unstable replay`` and ``unstable dashboard`` included) loads neither torch nor a package
    whose ``__init__`` does (``importlib.util.find_spec`` of ``unstable.learners.config`` would)."""
    code = ("import sys; from unstable.cli.commands import build_parser; build_parser().format_help(); "
            "print(sorted(m for m in ('torch', 'transformers', 'peft', 'unstable.learners') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_source_file_finds_a_module_without_importing_it_or_its_package():
    from unstable.utils.fields import source_file

    assert source_file("unstable.learners.config") == Path(unstable.__file__).parent / "learners" / "config.py"
    assert source_file("unstable.learners").name == "__init__.py"
    for missing in ("unstable.no_such_module", "no_such_package.config", "unstable.utils.fields.x"):
        with pytest.raises(ImportError, match="no module"):
            source_file(missing)


def test_field_options_refuse_undocumented_fields(tmp_path, monkeypatch):
    import argparse

    (tmp_path / "cfgmod.py").write_text('from dataclasses import dataclass\n\n\n@dataclass\nclass C:\n'
                                        '    rate: float = 0.1\n    """Step size."""\n    steps: int = 3\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    from unstable.utils.fields import add_field_options

    parser = argparse.ArgumentParser()
    add_field_options(parser, "cfgmod", "C", ["rate"])
    assert parser.parse_args(["--rate", "0.3"]).rate == 0.3
    assert parser.parse_args([]).rate is None  # not given: the config's own default applies
    with pytest.raises(ValueError, match="no docstring"):
        add_field_options(argparse.ArgumentParser(), "cfgmod", "C", ["steps"])
    with pytest.raises(KeyError, match="no field 'nope'"):
        add_field_options(argparse.ArgumentParser(), "cfgmod", "C", ["nope"])


def test_train_help_lists_every_setting_with_its_config_docstring(capsys):
    """``unstable train --help`` is made from the configs' field docstrings: each flat build() argument
    and run-wide field appears with the first paragraph of its field's doc."""
    from unstable.run.arguments import FLAT_ARGUMENTS, RUN_FIELDS, SECTION_CLASSES
    from unstable.utils.fields import field_docs

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flat, (section, name) in FLAT_ARGUMENTS.items():
        doc = field_docs(*SECTION_CLASSES["model" if name is None else section])[name or section].summary
        assert f"{flat} {doc}" in text
    for name in RUN_FIELDS:
        assert f"{name} {field_docs(*SECTION_CLASSES['run'])[name].summary}" in text


# ----------------------------------------------------------------------------- failures as one message
TRAIN_ARGS = ["train", "--config", "configs/tictactoe-tiny.yaml"]


def _train(tiny_model_dir, tmp_path, *extra):
    return main([*TRAIN_ARGS, "--set", f"model_name={tiny_model_dir}", "--set", f"runs_dir={tmp_path}", *extra])


def test_train_refuses_an_empty_run_name_instead_of_ignoring_it(tiny_model_dir, tmp_path, capsys, no_ray):
    assert _train(tiny_model_dir, tmp_path, "--run-name", "") == 2
    assert "run_name must be a plain directory name" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path), "--run-name", ""]) == 2
    assert "--run-name cannot be combined with --resume" in capsys.readouterr().err


def test_train_reports_an_os_error_of_build_in_one_line(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import unstable

    def build(**kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "runs" / "t"))

    monkeypatch.setattr(unstable, "build", build)
    assert _train(tiny_model_dir, tmp_path) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"unstable train: error: [Errno 13] Permission denied: '{tmp_path}/runs/t'"]


class FailingRun:
    """What build() returns when the run then stops with an error: ``wait()`` raises it as Ray does."""

    def __init__(self, run_dir: str, error: BaseException):
        self.run_dir, self.error, self.stopped = run_dir, error, False

    def start(self, **kwargs):
        return None  # training to do: the CLI waits

    def wait(self):
        raise self.error

    def stop(self):
        self.stopped = True


def _budget_spent_through_ray() -> BaseException:
    """A FailureBudgetSpentError as ``ray.get`` raises it from the collector: wrapped in a RayTaskError."""
    import pickle

    import ray.exceptions

    from unstable.collection.failures import FailureBudget, FailureBudgetSpentError, FailureCounter
    from unstable.records import FailedGame, GameFailedError, GameSpec

    counter = FailureCounter(FailureBudget(max_consecutive_failures=1), "train")
    game = GameFailedError(FailedGame(GameSpec(3, "TicTacToe-v0-train", 7, ()), "policy", "OSError", "corrupt weights"))
    try:
        counter.record(game)
    except FailureBudgetSpentError as exc:
        spent = pickle.loads(pickle.dumps(exc))  # as it crosses from the collector's process: no __cause__
    return ray.exceptions.RayTaskError("Collector.collect", "Traceback (most recent call last): ...", spent,
                                       proctitle="ray::Collector.collect", pid=1, ip="127.0.0.1").as_instanceof_cause()


def test_train_stopped_by_its_failure_budget_exits_1_with_the_cause_not_a_traceback(tiny_model_dir, tmp_path,
                                                                                    capsys, monkeypatch):
    import unstable
    import unstable.cli.progress

    run = FailingRun(str(tmp_path / "t"), _budget_spent_through_ray())
    monkeypatch.setattr(unstable, "build", lambda **kwargs: run)
    monkeypatch.setattr(unstable.cli.progress, "wait_with_progress", lambda run, total, say: run.wait())
    assert _train(tiny_model_dir, tmp_path) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("unstable train: error: the run stopped in Collector.collect: FailureBudgetSpentError: "
                             "collection stopped: 1 train games failed in a row (max_consecutive_failures=1). The "
                             "first of them: game 3 (TicTacToe-v0-train, seed 7) failed in policy after 0 turns: "
                             "OSError: corrupt weights.")
    assert err[1] == f"  the full traceback is in {tmp_path}/t/logs/run_error.txt"
    assert f"logged in {tmp_path}/t/logs/failed_games.jsonl" in err[2] and "--resume" in err[2]
    assert len(err) == 3 and "Traceback" not in "\n".join(err)
    assert "Traceback" in (tmp_path / "t" / "logs" / "run_error.txt").read_text()
    assert run.stopped  # the actors are shut down and the run directory released either way


def test_eval_exits_1_when_every_game_failed(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import math

    import unstable.eval.evaluation as evaluation

    def all_failed(model, env_id, opponent="random", games=100, **kwargs):
        nothing = evaluation.OutcomeStats.from_records([])
        failures = tuple(f"game {i} (TicTacToe-v0-train, seed {i}) failed in policy after 0 turns: OSError: corrupt"
                         for i in range(games))
        return evaluation.EvalResult(model, None, env_id, opponent, 2, games, games, nothing, {0: nothing, 1: nothing},
                                     {"temperature": 0.6}, False, 0, 1, 0.1, failures)

    monkeypatch.setattr(evaluation, "evaluate", all_failed)
    assert math.isnan(evaluation.OutcomeStats.from_records([]).win_rate)
    assert main(["eval", "--model", tiny_model_dir, "--games", "3", "--out", str(tmp_path / "r.json")]) == 1
    captured = capsys.readouterr()
    assert "unstable eval: error: all 3 games failed" in captured.err and "OSError: corrupt" in captured.err
    assert (tmp_path / "r.json").is_file()  # the results are still written


def test_tiny_model_into_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["tiny-model", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"unstable tiny-model: error: out_dir '{tmp_path}/f' is a file, not a directory; give a "
                           "directory path (created if missing)")


def test_a_run_error_is_told_with_its_causes_one_line_each():
    from unstable.cli.commands import run_failure

    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError as io:
            raise RuntimeError("could not write ckpt-3") from io
    except RuntimeError as exc:
        text = run_failure(exc, "/r")
    assert text.splitlines()[:2] == ["unstable train: error: the run stopped: RuntimeError: could not write ckpt-3",
                                     "  caused by OSError: [Errno 28] No space left on device"]


def test_eval_of_a_warm_start_uses_the_template_it_was_trained_with(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A quickstart's warm start learnt qwen3-board; evaluated with --model it used to get qwen3-zs, a prompt it
    never saw (KuhnPoker: 0.38 of greedy games won against random instead of 0.62). Its warm_start.json names it."""
    import json
    import shutil

    import unstable.eval.evaluation as evaluation

    seen = []

    def record(model, env_id, opponent="random", games=100, **kwargs):
        seen.append(kwargs["prompt_template"])
        raise RuntimeError("stop here")

    monkeypatch.setattr(evaluation, "evaluate", record)
    warm = tmp_path / "warm"
    shutil.copytree(tiny_model_dir, warm)
    (warm / "warm_start.json").write_text(json.dumps({"prompt_template": "qwen3-board"}))
    for argv in (["--model", str(warm)], ["--model", str(warm), "--template", "qwen3-zs"], ["--model", tiny_model_dir]):
        with pytest.raises(RuntimeError, match="stop here"):
            main(["eval", *argv, "--games", "2"])
    assert seen == ["qwen3-board", "qwen3-zs", "qwen3-zs"]
    assert "prompt template 'qwen3-board': the one" in capsys.readouterr().out


def test_eval_exploitability_reads_at_the_defaults_of_evaluate_exploitability(tiny_model_dir, monkeypatch):
    """``unstable eval --exploitability`` read at T=0.6, top_p=0.95 (the game defaults) and
    ``unstable.evaluate_exploitability`` at 1, 1, and exploitability depends on both. Now both read at the
    API's defaults unless told; games keep 0.6 and 0.95."""
    import inspect

    import unstable.eval.evaluation as evaluation
    import unstable.eval.exploitability as exploitability

    defaults = inspect.signature(exploitability.evaluate_exploitability).parameters
    assert (defaults["temperature"].default, defaults["top_p"].default) == (1.0, 1.0)
    assert defaults["max_new_tokens"].default == 32  # and the completion length: the command read at 64
    seen = []

    def record(*args, **kwargs):
        seen.append((kwargs["temperature"], kwargs["top_p"], kwargs["max_new_tokens"]) if "top_p" in kwargs else
                    (kwargs["sampling"].temperature, kwargs["sampling"].top_p, kwargs["sampling"].max_new_tokens))
        raise RuntimeError("stop here")

    monkeypatch.setattr(exploitability, "evaluate_exploitability", record)
    monkeypatch.setattr(evaluation, "evaluate", record)
    for argv in (["--exploitability"], ["--exploitability", "--temperature", "0.5", "--top-p", "0.9"], []):
        with pytest.raises(RuntimeError, match="stop here"):
            main(["eval", "--model", tiny_model_dir, "--template", "qwen3-board", *argv])
    assert seen == [(1.0, 1.0, 32), (0.5, 0.9, 32), (0.6, 0.95, 64)]


def test_progress_prints_a_line_per_learner_step_and_a_last_one_for_the_last_reading():
    """The quickstart's progress: a line when the learner step moves; once the run has ended, one more if the
    last checkpoint's exploitability landed after its step's line (it used to end on an older checkpoint's
    reading, right after "waiting for the last checkpoint's exploitability")."""
    from unstable.cli.progress import report_progress

    def info(step, measured, value):
        return {"learner_step": step, "means": {}, "games_per_env": {}, "measured_at": measured,
                "latest": {"eval/G/exploitability": value}}

    class Waiter:  # alive for as many polls as there are readings before the last
        def __init__(self, polls):
            self.polls = polls

        def join(self, timeout):
            self.polls -= 1

        def is_alive(self):
            return self.polls > 0

    def lines(readings):
        out, feed = [], iter(readings)
        report_progress(Waiter(len(readings)), lambda: next(feed), 20, out.append, every_s=0)
        return [line.split(",")[0].strip() + " | " + line.split(", ")[-1] for line in out]

    key = "eval/G/exploitability"
    readings = [info(0, {key: 0}, 0.964), info(0, {key: 0}, 0.964), None, info(5, {key: 5}, 0.971),
                info(20, {key: 5}, 0.971), info(20, {key: 14}, 0.992), info(20, {key: 20}, 0.994)]
    assert lines(readings) == ["learner step   0/20 | exploitability 0.964 (ckpt-0)",
                               "learner step   5/20 | exploitability 0.971 (ckpt-5)",
                               "learner step  20/20 | exploitability 0.971 (ckpt-5)",
                               "learner step  20/20 | exploitability 0.994 (ckpt-20)"]
    # no new reading at the end: no repeated line
    assert len(lines([info(3, {}, 0.5), info(3, {}, 0.5)])) == 1
