"""The shared records: a Sample is frozen, and Turn and Step read their tokens from it."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from conftest import make_sample

from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef, Sample, Step, Turn


def turn(sample: Sample | None) -> Turn:
    return Turn(turn_index=0, player_id=0, observation="obs", prompt="p", completion_text="[4]", action="[4]",
                format_ok=True, invalid=False, policy=PolicyRef("ckpt-1", version=1), sample=sample)  # fmt: skip


def step(sample: Sample | None) -> Step:
    return Step(env_id="E", game_id=0, player_id=0, turn_index=0, sample=sample, reward=1.0, final_reward=1.0,
                policy_version=1, format_ok=True, invalid=False, is_last=True)  # fmt: skip


def test_sample_is_frozen_and_has_no_instance_dict():
    sample = make_sample((1, 2), (3, 4), (-0.5, -0.25), temperature=0.6, top_p=0.95, policy_version=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample.completion_ids = (5,)  # type: ignore[misc]
    assert not hasattr(sample, "__dict__")
    assert pickle.loads(pickle.dumps(sample)) == sample


def test_sample_rejects_mismatched_logprobs_and_unknown_finish_reasons():
    with pytest.raises(ValueError, match="2 log-probs for 1 completion tokens"):
        make_sample((1,), (2,), (-0.1, -0.2))
    with pytest.raises(ValueError, match="finish_reason"):
        make_sample(finish_reason="abort")


@pytest.mark.parametrize("make", [turn, step])
def test_token_properties_delegate_to_the_sample(make):
    sample = make_sample((1, 2), (3, 4), (-0.5, -0.25), finish_reason="length")
    record = make(sample)
    assert record.sample is sample
    assert (record.prompt_ids, record.completion_ids) == ((1, 2), (3, 4))
    assert record.completion_logprobs == (-0.5, -0.25) and record.finish_reason == "length" and record.has_tokens
    with pytest.raises((AttributeError, TypeError)):  # Python 3.11's frozen-slots __setattr__ raises TypeError
        record.prompt_ids = (9,)  # type: ignore[misc]
    assert not hasattr(record, "__dict__")


@pytest.mark.parametrize("make", [turn, step])
def test_a_record_without_a_sample_has_no_tokens(make):
    record = make(None)
    assert (record.prompt_ids, record.completion_ids, record.completion_logprobs) == ((), (), ())
    assert record.finish_reason == "stop" and not record.has_tokens


def test_a_pickled_turn_and_its_steps_still_share_one_sample():
    sample = make_sample()
    t, s = pickle.loads(pickle.dumps((turn(sample), step(sample))))
    assert t.sample is s.sample == sample


@dataclasses.dataclass(frozen=True, slots=True)
class Tagged(GameRecord):
    """A user's record with a field of its own."""

    tag: str = "t"


def test_a_game_record_pickles_field_by_field_and_comes_back_equal():
    """The collection records pickle by their fields (faster than dataclasses' default); every field
    comes back, also a subclass's own, and a copy is equal and of the same class."""
    sample = make_sample((1, 2), (3,), (-0.1,), policy_version=2)
    spec = GameSpec(game_id=7, env_id="E", seed=3, agents=(AgentSpec(0, PolicyRef("ckpt-1", version=1), True),
                                                           AgentSpec(1, PolicyRef("random", "scripted"))))
    record = GameRecord(spec=spec, turns=(turn(sample), turn(None)), final_rewards={0: 1.0, 1: -1.0},
                        game_info={"reason": "won"})
    failed = FailedGame(spec=spec, stage="env", error_type="KeyError", message="x", turns=(turn(None),))
    tagged = Tagged(spec=spec, turns=(), final_rewards={0: 0.0, 1: 0.0}, game_info={}, tag="mine")
    for original in (record, failed, spec, sample, tagged):
        copy = pickle.loads(pickle.dumps(original, protocol=5))
        assert copy == original and type(copy) is type(original)
        assert dataclasses.astuple(copy) == dataclasses.astuple(original)
    assert pickle.loads(pickle.dumps(tagged)).tag == "mine"
