"""Every config under configs/ loads as its command reads it, and a train config's flat and nested forms are one
config (building one does no I/O, so the model named need not exist here)."""

from pathlib import Path

import pytest

from unstable.cli.quickstart import load_quickstart_config
from unstable.run.arguments import nest_arguments
from unstable.run.config import BuildConfig
from unstable.run.config_file import load_config

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))
TRAIN = {"league-exploiters-tictactoe.yaml", "seed-minimal.yaml", "tictactoe-tiny.yaml", "two-models-tictactoe.yaml"}


def test_the_train_configs_are_the_ones_that_name_a_model_or_its_games():
    """A config for ``unstable train`` says what it trains; a quickstart one leaves that to the job."""
    import yaml

    named = {p.name for p in CONFIGS if {"model_name", "models", "train_envs"} & set(yaml.safe_load(p.read_text()))}
    assert len(CONFIGS) >= 20 and named == TRAIN


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name in TRAIN], ids=lambda p: p.name)
def test_a_train_config_loads_and_its_nested_form_is_the_same_config(path):
    build, start = load_config(str(path))
    flat = BuildConfig(**build)
    nested, _ = nest_arguments(build)
    assert BuildConfig(**nested).to_dict() == flat.to_dict()
    assert set(start) <= {"learning_steps", "num_collection_workers", "num_eval_workers"}


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name not in TRAIN], ids=lambda p: p.name)
def test_a_quickstart_config_loads(path, tmp_path):
    cfg = load_quickstart_config(str(path), out=str(tmp_path / "run"))
    assert cfg.learning_steps >= 1 and cfg.env_id
