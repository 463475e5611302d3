"""Reward functions: injection by parameter name, checks at build time, weighting, batching, async, bad values."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from unstable.environments.rewards import (
    RewardFunction,
    RewardFunctionError,
    RewardScores,
    as_reward_function,
    check_reward_functions,
    conversation_reward_function,
    reward_function,
    score,
    score_sync,
)

ITEMS = [
    {"prompt": "1+1?", "completion": "2", "answer": "2", "problem": "1+1"},
    {"prompt": "2+2?", "completion": "5", "answer": "4", "problem": "2+2"},
]
CONVERSATION = [
    {"role": "system", "name": None, "content": "Solve it."},
    {"role": "user", "name": None, "content": "1+1?"},
    {"role": "assistant", "name": "solver", "content": "2"},
]


def recorder(calls: list[dict]):
    """Reward functions that record the keyword arguments they were given."""

    @reward_function
    def only_completion(completion: str) -> float:
        calls.append({"completion": completion})
        return 0.0

    @reward_function
    def with_answer(completion: str, answer: str) -> float:
        calls.append({"completion": completion, "answer": answer})
        return float(completion == answer)

    @reward_function
    def everything(**kwargs) -> float:
        calls.append(kwargs)
        return 0.0

    return only_completion, with_answer, everything


# --- injection by parameter name ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        (0, [{"completion": "2"}, {"completion": "5"}]),
        (1, [{"completion": "2", "answer": "2"}, {"completion": "5", "answer": "4"}]),
        (2, ITEMS),
    ],
)
def test_each_function_gets_only_what_it_declares(which: int, expected: list[dict]) -> None:
    calls: list[dict] = []
    fn = recorder(calls)[which]
    score_sync([fn], ITEMS)
    assert calls == expected


def test_a_declared_field_gets_each_items_value() -> None:
    _, with_answer, _ = recorder([])
    scores = score_sync([with_answer], ITEMS)
    assert [s.components["with_answer"] for s in scores] == [1.0, 0.0]


def test_an_optional_field_takes_its_default_when_the_item_lacks_it() -> None:
    seen = []

    @reward_function
    def hinted(completion: str, hint: str = "none") -> float:
        seen.append(hint)
        return 0.0

    score_sync([hinted], [{"prompt": "p", "completion": "c"}, {"prompt": "p", "completion": "c", "hint": "h"}])
    assert seen == ["none", "h"]
    assert hinted.fields == ()
    assert hinted.optional_fields == ("hint",)


def test_a_conversation_function_gets_the_conversation_and_actor_name() -> None:
    seen = []

    @conversation_reward_function
    def polite(conversation: list, actor_name: str, answer: str) -> float:
        seen.append((conversation, actor_name, answer))
        return 1.0

    assert polite.kind == "conversation"
    assert polite.fields == ("answer",)
    score_sync([polite], [{"conversation": CONVERSATION, "actor_name": "solver", "answer": "2"}])
    assert seen == [(CONVERSATION, "solver", "2")]


def test_the_signature_is_read_at_decoration() -> None:
    @reward_function(name="math_reward", weight=0.5)
    def math_reward(prompt: str, completion: str, answer: str, *, problem: str, note: str = "", **kwargs) -> float:
        return 1.0

    assert isinstance(math_reward, RewardFunction)
    assert (math_reward.name, math_reward.weight, math_reward.kind) == ("math_reward", 0.5, "completion")
    assert math_reward.fields == ("answer", "problem")
    assert math_reward.optional_fields == ("note",)
    assert math_reward.takes_any is True
    assert math_reward.batched is False
    assert math_reward.is_async is False
    assert math_reward("p", "c", "a", problem="x") == 1.0  # still callable like the function


def test_a_provided_argument_with_a_default_is_not_a_field() -> None:
    @reward_function
    def short(completion: str = "", prompt: str = "") -> float:
        return 0.0

    assert short.fields == ()
    assert short.optional_fields == ()


# --- checks when an environment is built ---------------------------------------------------------


def test_a_missing_field_fails_at_check_time_with_the_fields_it_has() -> None:
    @reward_function
    def math_reward(completion: str, answer: str) -> float:
        return 0.0

    with pytest.raises(ValueError) as info:
        check_reward_functions([math_reward], ["problem", "solution"], where="dataset 'gsm8k'")
    assert str(info.value) == (
        "reward function 'math_reward' needs the field 'answer', which dataset 'gsm8k' does not have; "
        "its fields are: problem, solution"
    )


def test_a_missing_field_suggests_a_close_match() -> None:
    @reward_function
    def math_reward(completion: str, answer: str) -> float:
        return 0.0

    with pytest.raises(ValueError) as info:
        check_reward_functions([math_reward], ["problem", "answers"], where="dataset 'gsm8k'")
    assert str(info.value) == (
        "reward function 'math_reward' needs the field 'answer', which dataset 'gsm8k' does not have; "
        "its fields are: problem, answers (did you mean 'answers'?)"
    )


def test_check_passes_optional_and_kwargs_functions_and_returns_reward_functions() -> None:
    def plain(completion: str) -> float:
        return 0.0

    @reward_function
    def hinted(completion: str, hint: str = "") -> float:
        return 0.0

    @conversation_reward_function
    def anything(**kwargs) -> float:
        return 0.0

    out = check_reward_functions([plain, hinted, anything], [], where="env")
    assert [f.name for f in out] == ["plain", "hinted", "anything"]
    assert out[1] is hinted
    assert all(isinstance(f, RewardFunction) for f in out)


@pytest.mark.parametrize(
    ("functions", "message"),
    [
        ([], "env needs at least one reward function"),
        ([3], "env: reward function 3 is not callable"),
        ("abc", "env takes a list of reward functions"),
    ],
)
def test_check_rejects_empty_and_non_callable(functions, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_reward_functions(functions, [], where="env")


def test_check_rejects_duplicate_names() -> None:
    first = reward_function(lambda completion: 0.0, name="same")
    second = reward_function(lambda completion: 1.0, name="same")
    with pytest.raises(ValueError, match="env: two reward functions are named 'same'"):
        check_reward_functions([first, second], [], where="env")
    with pytest.raises(ValueError, match="two reward functions are named 'same'"):
        score_sync([first, second], ITEMS)


def test_check_rejects_a_kind_the_environment_does_not_take() -> None:
    @conversation_reward_function
    def judge(conversation: list) -> float:
        return 0.0

    with pytest.raises(ValueError) as info:
        check_reward_functions([judge], [], kinds=("completion",), where="single-turn env 'gsm8k'")
    assert str(info.value) == (
        "reward function 'judge' is a conversation reward function, but single-turn env 'gsm8k' takes only "
        "completion (@reward_function) reward functions"
    )
    with pytest.raises(ValueError, match=r"takes only conversation \(@conversation_reward_function\)"):
        check_reward_functions([lambda_free], [], kinds=("conversation",), where="env")


def test_check_takes_fields_and_kinds_as_lists_not_strings() -> None:
    with pytest.raises(ValueError, match="env: fields must be a list of field names, got the string 'answer'"):
        check_reward_functions([lambda_free], "answer", where="env")
    assert check_reward_functions([lambda_free], [], kinds="completion", where="env")[0].name == "lambda_free"


def lambda_free(completion: str) -> float:
    return 0.0


# --- decoration ----------------------------------------------------------------------------------


def test_decorator_forms() -> None:
    def length(completion: str) -> float:
        return float(len(completion))

    bare = reward_function(length)
    called = reward_function()(length)
    named = reward_function(length, name="len", weight=-2)
    assert (bare.name, bare.weight) == ("length", 1.0)
    assert (called.name, called.weight) == ("length", 1.0)
    assert (named.name, named.weight, type(named.weight)) == ("len", -2.0, float)
    assert reward_function(length, weight=0).weight == 0.0
    assert conversation_reward_function(length).kind == "conversation"
    assert as_reward_function(named) is named
    assert as_reward_function(length) == bare


@pytest.mark.parametrize("weight", [True, False, math.nan, math.inf, -math.inf, "1", None])
def test_weight_must_be_a_finite_number(weight) -> None:
    with pytest.raises(ValueError, match="weight must be a finite number"):
        reward_function(lambda_free, weight=weight)


@pytest.mark.parametrize("name", ["", "has space", "reward/x", "é", 3])
def test_name_must_be_a_metric_key(name) -> None:
    with pytest.raises(ValueError, match=r"name must be a non-empty string of letters, digits"):
        reward_function(lambda_free, name=name)


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ValueError, match=r"has no name .* give one with reward_function\(fn, name='...'\)"):
        reward_function(lambda completion: 0.0)
    with pytest.raises(ValueError, match=r"conversation_reward_function\(fn, name='...'\)"):
        conversation_reward_function(lambda conversation: 0.0)
    with pytest.raises(ValueError, match="has no name"):
        as_reward_function(lambda completion: 0.0)
    assert reward_function(lambda completion: 0.0, name="zero").name == "zero"


def test_positional_only_and_star_args_are_rejected() -> None:
    def positional(completion, /):
        return 0.0

    def star(*args):
        return 0.0

    with pytest.raises(ValueError, match="takes positional-only 'completion', but its arguments are passed by keyword"):
        reward_function(positional)
    with pytest.raises(ValueError, match=r"takes \*args, but its arguments are passed by keyword"):
        reward_function(star)


def test_a_non_callable_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be callable"):
        reward_function("not a function", name="x")


# --- weighting -----------------------------------------------------------------------------------


def test_total_is_the_weighted_sum_and_components_are_unweighted() -> None:
    first = reward_function(lambda completion: 0.3, name="first", weight=0.1)
    second = reward_function(lambda completion: 1.0, name="second", weight=0.2)
    zero = reward_function(lambda completion: 5.0, name="zero", weight=0)
    [scores, _] = score_sync([first, second, zero], ITEMS)
    assert isinstance(scores, RewardScores)
    assert scores.total == pytest.approx(0.23)
    assert scores.total == 0.1 * 0.3 + 0.2 * 1.0 + 0 * 5.0
    assert scores.components == {"first": 0.3, "second": 1.0, "zero": 5.0}


def test_a_negative_weight_penalises() -> None:
    long = reward_function(lambda prompt: len(prompt) / 1024, name="long", weight=-1.0)
    assert [s.total for s in score_sync([long], ITEMS)] == [-4 / 1024, -4 / 1024]


def test_no_inputs_no_calls() -> None:
    assert score_sync([lambda_free], []) == []


# --- batched -------------------------------------------------------------------------------------


def test_a_batched_function_gets_lists_and_returns_one_value_per_item() -> None:
    seen = []

    @reward_function(batched=True)
    def exact(completion: list, answer: list) -> list[float]:
        seen.append((completion, answer))
        return [float(c == a) for c, a in zip(completion, answer, strict=True)]

    scores = score_sync([exact], ITEMS)
    assert seen == [(["2", "5"], ["2", "4"])]
    assert [s.components["exact"] for s in scores] == [1.0, 0.0]


def test_a_batched_function_may_return_a_numpy_array() -> None:
    ones = reward_function(lambda completion: np.ones(len(completion)), name="ones", batched=True)
    assert [s.total for s in score_sync([ones], ITEMS)] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([1.0], "returned 1 values for 2 items; it must return one per item"),
        ([1.0, 2.0, 3.0], "returned 3 values for 2 items"),
        (1.0, "must return a sequence of numbers, one per item, got 1.0"),
        ("ab", "must return a sequence of numbers"),
    ],
)
def test_a_batched_function_must_return_one_value_per_item(returned, message: str) -> None:
    wrong = reward_function(lambda completion: returned, name="wrong", batched=True)
    with pytest.raises(RewardFunctionError, match=f"batched reward function 'wrong' {message}"):
        score_sync([wrong], ITEMS)


def test_a_batched_function_needs_the_same_fields_in_every_item() -> None:
    hinted = reward_function(lambda completion, hint="": [0.0] * len(completion), name="hinted", batched=True)
    items = [{**ITEMS[0], "hint": "h"}, ITEMS[1]]
    with pytest.raises(RewardFunctionError, match="'hinted' is passed 'hint' \\(item 0 has it\\), which item 1"):
        score_sync([hinted], items)


# --- async ---------------------------------------------------------------------------------------


def test_async_items_run_concurrently() -> None:
    barrier = asyncio.Barrier(2)  # both items must be waiting at once, or this times out

    @reward_function
    async def waits(completion: str) -> float:
        await asyncio.wait_for(barrier.wait(), timeout=5)
        return 1.0

    assert waits.is_async
    assert [s.total for s in score_sync([waits], ITEMS)] == [1.0, 1.0]


def test_async_functions_run_concurrently_with_each_other() -> None:
    barrier = asyncio.Barrier(2)

    async def meet(completion: list) -> list[float]:
        await asyncio.wait_for(barrier.wait(), timeout=5)
        return [0.5] * len(completion)

    first = reward_function(meet, name="first", batched=True)
    second = reward_function(meet, name="second", batched=True, weight=2)
    assert [s.total for s in score_sync([first, second], ITEMS)] == [1.5, 1.5]


def test_score_can_be_awaited_inside_a_running_loop() -> None:
    @conversation_reward_function
    async def turns(conversation: list) -> int:
        await asyncio.sleep(0)
        return len(conversation)

    async def main() -> list[RewardScores]:
        return await score([turns], [{"conversation": CONVERSATION, "actor_name": "solver"}])

    assert asyncio.run(main()) == [RewardScores(3.0, {"turns": 3.0})]


# --- bad values and failures ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, None, "1", 1j, [1.0], np.array([1.0, 2.0])])
def test_a_bad_value_names_the_function_and_item(bad) -> None:
    @reward_function
    def flaky(completion: str) -> object:
        return 1.0 if completion == "2" else bad

    with pytest.raises(RewardFunctionError, match=r"reward function 'flaky' returned .* for item 1; a reward must be"):
        score_sync([flaky], ITEMS)


def test_a_bad_value_from_a_batched_async_function_names_the_item() -> None:
    @reward_function(batched=True)
    async def flaky(completion: list) -> list:
        return [1.0, math.nan]

    with pytest.raises(RewardFunctionError, match="reward function 'flaky' returned nan for item 1"):
        score_sync([flaky], ITEMS)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, 1.0), (False, 0.0), (3, 3.0), (np.float32(0.5), 0.5), (np.int64(2), 2.0), (np.bool_(True), 1.0)],
)
def test_bools_ints_and_numpy_scalars_are_numbers(value, expected: float) -> None:
    fn = reward_function(lambda completion: value, name="v")
    [scores, _] = score_sync([fn], ITEMS)
    assert scores.components == {"v": expected}
    assert type(scores.components["v"]) is float


def test_an_exception_inside_a_function_carries_a_note() -> None:
    @reward_function
    def breaks(completion: str) -> float:
        return 1 / (int(completion) - 5)

    with pytest.raises(ZeroDivisionError) as info:
        score_sync([breaks], ITEMS)
    assert info.value.__notes__ == ["raised in reward function 'breaks' on item 1"]


def test_an_exception_inside_an_async_or_batched_function_carries_a_note() -> None:
    @reward_function
    async def breaks(completion: str) -> float:
        raise KeyError(completion)

    @reward_function(batched=True)
    def batch_breaks(completion: list) -> list[float]:
        raise ValueError("no")

    with pytest.raises(KeyError) as info:
        score_sync([breaks], ITEMS[:1])
    assert info.value.__notes__ == ["raised in reward function 'breaks' on item 0"]
    with pytest.raises(ValueError, match="no") as info:
        score_sync([batch_breaks], ITEMS)
    assert info.value.__notes__ == ["raised in reward function 'batch_breaks' on a batch of 2 items"]


def test_an_item_without_a_required_argument_fails_with_what_it_has() -> None:
    _, with_answer, _ = recorder([])
    with pytest.raises(RewardFunctionError, match="'with_answer' needs 'answer', which item 0 does not have; it has"):
        score_sync([with_answer], [{"prompt": "p", "completion": "c"}])
