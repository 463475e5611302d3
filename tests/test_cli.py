"""The command line, as a user runs it."""

import re
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

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


README_BLOCKS = re.findall(r"```python\n(.*?)```", (Path(__file__).parents[1] / "README.md").read_text(), re.S)


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
    monkeypatch.setattr(unstable, "build", lambda **kwargs: built.append(BuildConfig(**kwargs)) or built[-1])
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
