"""The README's "add your own learner" example, run as written through build(); naming learners."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import make_sample, small_run_kwargs
from doc_examples import section_block

import unstable
from unstable.learners import A2CLearner, BaseLearner, REINFORCELearner, register_learner, resolve_learner
from unstable.learners.catalog import algorithm_settings, learner_name
from unstable.records import Step, TrainBatch
from unstable.run.build import BuildConfig
from unstable.tracking import read_metrics

README = Path(__file__).resolve().parents[1] / "docs" / "algorithms.md"


def readme_example() -> str:
    """The first python block of the docs' "Add your own learner" section, verbatim."""
    return section_block(README, "## Add your own learner")


@pytest.fixture(scope="module")
def readme_learner():
    from unstable.learners import catalog

    catalog._LEARNERS.pop("mean-baseline", None)  # test_cli also runs the README's blocks
    # a module name nobody can import: Ray then ships the class by value, as for a user's script
    namespace = {"__name__": "readme_add_your_own_learner"}
    exec(compile(readme_example(), str(README), "exec"), namespace)
    yield namespace["MeanBaselineLearner"]
    catalog._LEARNERS.pop("mean-baseline", None)


def test_the_readme_learner_is_registered_and_named_in_config_json(readme_learner, tiny_model_dir, tmp_path):
    assert resolve_learner("mean-baseline") is readme_learner
    for algorithm in ("mean-baseline", readme_learner):
        cfg = BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, algorithm=algorithm))
        assert json.loads(json.dumps(cfg.to_dict()))["models"][0]["algorithm"] == "mean-baseline"
    assert algorithm_settings(readme_learner, {"max_train_len": 8, "gamma": 0.9}) == {"max_train_len": 8}


def test_the_readme_learner_updates_in_process(readme_learner, tiny_model_dir, tmp_path):
    lrn = readme_learner(tiny_model_dir, output_dir=str(tmp_path / "out"), batch_size=4, mini_batch_size=2,
                         lora_cfg={"lora_rank": 4}, gradient_checkpointing=False, activation_checkpointing=False)
    lrn.initialize_algorithm(max_generation_len=16, baseline_weight=0.5)
    steps = [Step(env_id="E", game_id=g, player_id=0, turn_index=0,
                  sample=make_sample((5, 6, 7 + g), (8, 9), (-1.0, -1.0)), reward=float(g), final_reward=0.0,
                  policy_version=0, format_ok=True, invalid=False, is_last=True) for g in range(4)]
    result = lrn.update(TrainBatch.from_steps(steps))
    assert result.version == 1 and result.metrics["train/baseline"] == 0.75 and result.metrics["train/grad_norm"] > 0
    assert (Path(result.adapter_path) / "adapter_config.json").is_file()


def test_learners_by_name_class_or_import_path(readme_learner):
    assert resolve_learner("reinforce") is REINFORCELearner and resolve_learner(A2CLearner) is A2CLearner
    assert resolve_learner("unstable.learners.a2c:A2CLearner") is A2CLearner
    assert learner_name(A2CLearner) == "a2c"

    class Unregistered(REINFORCELearner):
        pass

    path = learner_name(Unregistered)
    assert path == f"{__name__}:test_learners_by_name_class_or_import_path.<locals>.Unregistered"
    register_learner("reinforce", REINFORCELearner)  # the same class again: a no-op
    register_learner("mean-baseline", type(readme_learner.__name__, (readme_learner,), {
        "__module__": readme_learner.__module__, "__qualname__": readme_learner.__qualname__}))  # re-run cell
    register_learner("mean-baseline", readme_learner)
    with pytest.raises(ValueError, match="taken"):
        register_learner("reinforce", Unregistered)
    with pytest.raises(ValueError, match="cannot be imported"):
        resolve_learner("unstable.learners:NoSuchLearner")


class NotALearner:
    def _update(self, batch):
        return {}


class NoUpdate(BaseLearner):
    pass


@pytest.mark.parametrize(
    ("algorithm", "match"),
    [
        (NotALearner, "must be a subclass of unstable.learners.BaseLearner, got the class NotALearner"),
        (NoUpdate, "does not implement _update"),
        ("trpo", r"algorithm must be one of \[.*'reinforce'\]"),
        ("unstable.learners.config:LearnerConfig", "must be a subclass"),
    ],
)
def test_a_bad_learner_class_is_refused_before_ray_starts(algorithm, match, tiny_model_dir, tmp_path, monkeypatch):
    import unstable.run.wiring

    def must_not_start(*args, **kwargs):
        raise AssertionError("Ray actors were started before validation finished")

    monkeypatch.setattr(unstable.run.wiring, "start_actors", must_not_start)
    with pytest.raises(ValueError, match=match):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, algorithm=algorithm))
    with pytest.raises(ValueError, match=match):
        register_learner("bad", algorithm) if isinstance(algorithm, type) else resolve_learner(algorithm)


@pytest.mark.slow
def test_the_readme_learner_trains_through_build(readme_learner, ray_session, tiny_model_dir, tmp_path):
    final, step, _ = unstable.reward_transformations.default_transforms()  # no z-score: a mean far from 0
    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, algorithm=readme_learner,
                                            learner={"baseline_weight": 0.5}, reward_transforms=(final, step, None)))
    try:
        summary = run.start(learning_steps=2, num_collection_workers=8, num_eval_workers=1)
    finally:
        run.stop()
    assert summary["checkpoints"][-2:] == ["ckpt-1", "ckpt-2"]
    for version in (1, 2):
        assert (Path(run.run_dir) / "checkpoints" / f"ckpt-{version}" / "adapter_config.json").is_file()
    # train/baseline is logged only by the README's _update: it ran in the learner actor, once a step
    trained = [line for line in read_metrics(run.run_dir) if "train/baseline" in line]
    assert len(trained) == 2 and all(math.isfinite(line["train/loss"]) for line in trained)
    # learner={"baseline_weight": 0.5} reached the actor's initialize_algorithm
    for line in trained:
        assert abs(line["train/reward_mean"]) > 0.1
        assert line["train/baseline"] == pytest.approx(0.5 * line["train/reward_mean"], rel=1e-5)
    config = json.loads((Path(run.run_dir) / "config.json").read_text())
    assert config["models"][0]["algorithm"] == "mean-baseline"
