"""The command line, as a user runs it."""

import re
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from unstable.cli import main


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


def test_readme_python_example_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path))
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
