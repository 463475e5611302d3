import random

import pytest

from unstable.games.envs import EnvNotAvailableError, base_name, check_env_id
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec


def test_base_name():
    assert base_name("TicTacToe-v0-train") == "TicTacToe"
    assert base_name("KuhnPoker-v0-long") == "KuhnPoker"


@pytest.mark.parametrize(
    "env_id",
    [
        "TicTacToe-v0-train",
        "KuhnPoker-v0-train",
        "SimpleTak-v0-train",
        "ConnectFour-v0-train",
        "Nim-v0-train",
        "SimpleNegotiation-v0-train",
    ],
)
def test_offline_games_pass(env_id):
    check_env_id(env_id, 2)


@pytest.mark.parametrize(
    ("env_id", "why"),
    [
        ("TicTacToee-v0-train", "unknown env id.*TicTacToe-v0-train"),
        ("Wordle-v0", "NLTK"),
        ("Hangman-v0-train", "NLTK"),
        ("Debate-v0", "OpenRouter API key"),
        ("TwentyQuestions-v0", "OpenRouter API key"),
        ("Chess-v0", "Python 3.12"),
        ("Checkers-v0-train", "Python 3.12"),
        ("ScorableGames-v0", "missing from the textarena"),
        ("Klondike-v0", "does not compile"),
        ("", "non-empty"),
    ],
)
def test_unplayable_env_ids_say_why_and_suggest_working_ones(env_id, why):
    with pytest.raises(EnvNotAvailableError, match=why) as info:
        check_env_id(env_id, 2)
    if env_id:
        assert "Ids that work here include" in str(info.value)
        assert base_name(env_id) not in str(info.value).split("include:")[1]


def test_wrong_player_count_is_reported_with_textarena_reason():
    with pytest.raises(EnvNotAvailableError, match="num_players=3"):
        check_env_id("TicTacToe-v0-train", 3)


def test_probe_leaves_global_random_untouched():
    random.seed(1234)
    expected = random.Random(1234).random()
    check_env_id("ConnectFour-v0", 2)
    assert random.random() == expected


def test_specs_validate():
    spec = TrainEnvSpec("TicTacToe-v0-train", 2, 2, "qwen3-zs")
    assert spec.action_extraction_fn == "default" and spec.error_allowance == 0
    assert EvalEnvSpec("KuhnPoker-v0-train", 2, "qwen3-zs").fixed_opponent == "random"
    EvalEnvSpec("SimpleTak-v0-train", 2, "qwen3-zs", fixed_opponent="google/gemini-2.0-flash-lite-001")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_actors": 3}, "cannot exceed num_players"),
        ({"num_actors": 0}, "num_actors must be an integer >= 1"),
        ({"num_players": "2"}, "num_players must be an integer"),
        ({"prompt_template": "nope"}, "unknown prompt template"),
        ({"action_extraction_fn": "nope"}, "unknown action extraction"),
        ({"error_allowance": -1}, "error_allowance"),
        ({"env_id": "Wordle-v0"}, "NLTK"),
    ],
)
def test_bad_train_specs(kwargs, match):
    args = {"env_id": "TicTacToe-v0-train", "num_players": 2, "num_actors": 2, "prompt_template": "qwen3-zs"}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        TrainEnvSpec(**args)


def test_eval_spec_rejects_random_baseline_for_games_without_one():
    with pytest.raises(ValueError, match="no scripted baseline"):
        EvalEnvSpec("SimpleNegotiation-v0-train", 2, "qwen3-zs", fixed_opponent="random")
    with pytest.raises(ValueError, match="fixed_opponent"):
        EvalEnvSpec("TicTacToe-v0-train", 2, "qwen3-zs", fixed_opponent=" ")
