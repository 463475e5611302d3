"""The documentation site (``docs/``): it builds with no warnings, every tutorial and every page with code
runs as one script, the generated tables cover what they claim, and the version is defined in one place."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)


@pytest.mark.slow
def test_the_docs_build_with_no_warnings(tmp_path):
    """``sphinx-build -W``: a broken link, a missing page or reference, a docstring that is not valid
    reStructuredText fails the build (``--keep-going`` lists them all)."""
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                           str(tmp_path / "html")], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-6000:]
    html = (tmp_path / "html" / "training.html").read_text(encoding="utf-8")
    assert "gradient_clipping" in html and "models[i].learner.grad_clip" in html  # the generated table
    api = (tmp_path / "html" / "reference" / "learners.html").read_text(encoding="utf-8")
    assert "REINFORCELearner" in api and "Trains a LoRA adapter" in api  # the docstrings made it in


def test_every_tutorial_page_has_code_to_run():
    assert [p.name for p in TUTORIALS] == ["first-look.md", "first-run.md", "single-turn.md"]
    for page in TUTORIALS:
        assert python_blocks(page), page


@pytest.mark.slow
@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_the_tutorial_runs_as_written(page, tmp_path):
    """Every python block of the page, in order, in one process, as a user would paste them (the
    tutorials use tiny settings already; nothing is changed). A fresh process: build() starts its own
    local Ray, as on a user's machine."""
    script = tmp_path / f"{page.stem}.py"
    script.write_text("\n\n".join(python_blocks(page)))
    proc = run_script(script, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if "unstable.build(" in script.read_text():
        assert "['base', 'ckpt-1', 'ckpt-2']" in proc.stdout, proc.stdout[-3000:]


PAGES_WITH_CODE = sorted(p for p in DOCS.glob("*.md") if python_blocks(p))
NOT_A_SCRIPT = {"cluster.md": "one line of a build() call on a Ray cluster (its settings elided as '...')"}
SAME_AS_README = ("index.md", "training.md")  # open with the README's example (test_cli runs it, scaled down)
# Pages that train are run with fewer steps and smaller batches, each change a (page's text, replacement)
# pair that must be found in the page; everything else runs as written.
SHRINK = {
    "multi-model.md": [('{"batch_size": 64, "mini_batch_size": 16', '{"batch_size": 16, "mini_batch_size": 8'),
                       ("learning_steps=10", "learning_steps=1"),
                       ("num_collection_workers=32", "num_collection_workers=8")],  # eval as written: each model
    "training.md": [('"learner": {"batch_size": 64, "mini_batch_size": 16',
                     '"learner": {"batch_size": 16, "mini_batch_size": 8'),
                    ("start(learning_steps=10, num_collection_workers=32",
                     "start(learning_steps=1, num_collection_workers=8")],
}
# they load torch or start Ray: over 10 s
SLOW_PAGES = ("algorithms.md", "environments.md", "multi-model.md", "training.md")


def script_blocks(page: Path) -> list[str]:
    """The page's python blocks that run here: all of them, or those after the README's example."""
    blocks = python_blocks(page)
    return blocks[len(python_blocks(REPO / "README.md")):] if page.name in SAME_AS_README else blocks


SCRIPT_PAGES = [p for p in PAGES_WITH_CODE if p.name not in NOT_A_SCRIPT and script_blocks(p)]


def run_script(script: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``script`` in a fresh process, as a user runs it: build() starts its own local Ray."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_every_docs_page_with_code_is_run_whole():
    """A page with python code is run whole below, or is the README's example (run by test_cli), or is
    listed in NOT_A_SCRIPT with the reason; a new page with code must be added to one of them."""
    readme = python_blocks(REPO / "README.md")
    for name in SAME_AS_README:
        assert python_blocks(DOCS / name)[:len(readme)] == readme, name
    names = {p.name for p in PAGES_WITH_CODE}
    assert names == {p.name for p in SCRIPT_PAGES} | set(NOT_A_SCRIPT) | set(SAME_AS_README)
    assert {"algorithms.md", "environments.md", "multi-model.md", "reward-transforms.md"} <= names
    for name, changes in SHRINK.items():
        text = "\n\n".join(python_blocks(DOCS / name))
        assert all(old in text for old, _ in changes), name


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PAGES else p
                                  for p in SCRIPT_PAGES], ids=lambda p: p.stem)
def test_the_docs_page_runs_as_one_script(page, tmp_path):
    """Every python block of the page, in order, in one process (as a reader pastes them), with only the
    page's SHRINK changes."""
    script = tmp_path / f"{page.stem}.py"
    text = "\n\n".join(script_blocks(page))
    for old, new in SHRINK.get(page.name, []):
        text = text.replace(old, new)
    script.write_text(text)
    proc = run_script(script, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if page.name == "environments.md":
        assert "EnvironmentEvalResult(environment='parity', eval_set='test', model='tiny'" in proc.stdout
    if page.name == "multi-model.md":
        (run_dir,) = (tmp_path / "runs").iterdir()
        for model in ("alice", "bob"):
            assert (run_dir / "checkpoints" / model / "ckpt-1" / "adapter_config.json").is_file(), model


def test_the_build_parameter_table_covers_every_flat_argument_and_run_field():
    sys.path.insert(0, str(DOCS))
    try:
        from _params import build_parameter_rows
    finally:
        sys.path.remove(str(DOCS))
    from unstable.run.arguments import FLAT_ARGUMENTS, RUN_FIELDS

    rows = build_parameter_rows()
    assert [r[0].strip("`") for r in rows] == [*FLAT_ARGUMENTS, *RUN_FIELDS]
    by_name = {r[0].strip("`"): r for r in rows}
    assert by_name["gradient_clipping"][1:3] == ("`models[i].learner.grad_clip`", "`0.2`")
    assert by_name["learning_rate"][2] == "`1e-05`"
    assert by_name["inference_backend"][2] == "`'auto'`"  # build()'s default, not the inference config's
    assert by_name["model_name"][2] == "required"
    assert all(r[3] for r in rows), [r[0] for r in rows if not r[3]]  # every parameter is documented


def test_the_version_is_defined_once():
    import unstable

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "unstable.__version__"}
    assert importlib.metadata.version("unstable-baselines") == unstable.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", unstable.__version__)
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "## Unreleased" in changelog and f"## {unstable.__version__}" in changelog


def test_the_public_api_has_docstrings():
    """interrogate over ``unstable/`` with the settings in ``pyproject.toml`` (public modules, classes,
    functions and methods): at least 95% have a docstring, so the API reference says what each does."""
    proc = subprocess.run([sys.executable, "-m", "interrogate", "-v", "unstable"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "RESULT: PASSED (minimum: 95.0%" in proc.stdout


def test_the_readme_is_short_and_links_into_the_docs():
    """The README is the pitch, the two set-up commands, a short example and links: every relative link
    resolves, and every page of the site is linked."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if not link.startswith("http")]
    assert all((REPO / link).exists() for link in local), [link for link in local if not (REPO / link).exists()]
    pages = {str(p.relative_to(REPO)) for p in [*DOCS.glob("*.md"), *DOCS.glob("tutorials/*.md"),
                                                DOCS / "reference" / "index.md"]}
    linked = pages - {"docs/index.md", "docs/changelog.md"}  # the README links CHANGELOG.md itself
    assert linked <= set(local), sorted(linked - set(local))
    assert readme.count("```bash") == 3 and len(readme.splitlines()) < 120
    assert "bash scripts/install.sh && .venv/bin/unstable quickstart" in readme
    assert "bash scripts/install.sh --dev && .venv/bin/python -m pytest" in readme
