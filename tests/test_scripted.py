"""Scripted baselines: legal-move readers agree with TextArena's own rules, and play is reproducible."""

from __future__ import annotations

import asyncio
import copy
import random

import pytest
import textarena as ta

from unstable.games.envs import base_name
from unstable.policies.base import Policy, TurnContext
from unstable.policies.scripted import (
    SCRIPTED_BASELINES,
    SCRIPTED_POLICIES,
    SUPPORTED_GAMES,
    NoScriptedBaselineError,
    RandomLegalPolicy,
    check_scripted_opponent,
    has_scripted_baseline,
    legal_moves,
    make_scripted_policy,
    scripted_baselines,
)

PLAYED_IDS = (
    "TicTacToe-v0",
    "TicTacToe-v0-train",
    "TicTacToe-v0-raw",
    "KuhnPoker-v0-train",
    "KuhnPoker-v0-long",
    "ConnectFour-v0-train",
    "ConnectFour-v0-large",
    "Nim-v0-train",
    "Nim-v0-large",
    "SimpleTak-v0-train",
    "SimpleTak-v0-medium",
)
# Every one of these games ends in set_winner (+1/-1) or set_draw (0/0); KuhnPoker included:
# chips only decide the winner, they are not the reward.
VALID_RESULTS = ({0: 1, 1: -1}, {0: -1, 1: 1}, {0: 0, 1: 0})
NUM_GAMES = 30


def new_env(env_id: str, seed: int):
    env = ta.make(env_id)
    env.reset(num_players=2, seed=seed)
    env.state.error_allowance = 0  # the first invalid move ends the game, as in collection
    return env


def play_random_game(env_id: str, seed: int) -> tuple[list[str], dict, dict]:
    env = new_env(env_id, seed)
    rng = random.Random(seed)
    moves, done = [], False
    while not done:
        pid, _ = env.get_observation()
        move = rng.choice(legal_moves(env_id, env, pid))
        moves.append(move)
        done, _ = env.step(move)
    rewards, info = env.close()
    return moves, rewards, info


@pytest.mark.parametrize("env_id", PLAYED_IDS)
def test_random_games_end_without_invalid_moves(env_id):
    for seed in range(NUM_GAMES):
        moves, rewards, info = play_random_game(env_id, seed)
        assert not any(info[pid]["invalid_move"] for pid in info), (seed, moves, info)
        assert rewards in VALID_RESULTS, (seed, rewards)


def candidate_moves(env_id: str, game_state: dict) -> list[str]:
    """A superset of the legal moves, including some just out of range."""
    game = base_name(env_id)
    if game == "KuhnPoker":
        return ["[check]", "[bet]", "[call]", "[fold]"]
    if game == "Nim":
        piles = game_state["piles"]
        return [f"[{i} {q}]" for i in range(len(piles) + 1) for q in range(max(piles) + 2)]
    board = game_state["board"]
    if game == "ConnectFour":
        return [f"[col {c}]" for c in range(len(board[0]) + 1)]
    return [f"[{cell}]" for cell in range(len(board) * len(board[0]) + 1)]


def env_accepts(env, pid: int, move: str) -> bool:
    """Try ``move`` on a copy of the bare env (error allowance 0: any invalid move is flagged)."""
    probe = env
    while isinstance(probe, ta.Wrapper):
        probe = probe.env
    probe = copy.deepcopy(probe)
    rng_state = random.getstate()  # KuhnPoker deals new rounds from the global RNG
    probe.step(move)
    random.setstate(rng_state)
    return not probe.state.game_info[pid]["invalid_move"]


@pytest.mark.parametrize(
    "env_id", ["TicTacToe-v0-train", "KuhnPoker-v0", "ConnectFour-v0", "Nim-v0-medium", "SimpleTak-v0"]
)
def test_legal_moves_are_exactly_what_the_env_accepts(env_id):
    for seed in range(3):
        env = new_env(env_id, seed)
        rng = random.Random(seed)
        done = False
        while not done:
            pid, _ = env.get_observation()
            legal = legal_moves(env_id, env, pid)
            accepted = [m for m in candidate_moves(env_id, env.state.game_state) if env_accepts(env, pid, m)]
            assert sorted(legal) == sorted(accepted), (seed, env.state.game_state)
            done, _ = env.step(rng.choice(legal))


def test_tictactoe_counts():
    env = new_env("TicTacToe-v0-train", 0)
    pid, _ = env.get_observation()
    assert legal_moves("TicTacToe-v0-train", env, pid) == [f"[{i}]" for i in range(9)]
    env.step("[4]")
    pid, _ = env.get_observation()
    moves = legal_moves("TicTacToe-v0-train", env, pid)
    assert len(moves) == 8
    assert "[4]" not in moves


@pytest.mark.parametrize(
    ("env_id", "rows", "cols"), [("ConnectFour-v0", 6, 7), ("ConnectFour-v0-large", 12, 15)]
)
def test_connect_four_full_column_is_not_legal(env_id, rows, cols):
    env = new_env(env_id, 0)
    pid, _ = env.get_observation()
    assert len(legal_moves(env_id, env, pid)) == cols
    for _ in range(rows):  # alternating discs in column 0: fills it without four in a row
        env.step("[col 0]")
    pid, _ = env.get_observation()
    moves = legal_moves(env_id, env, pid)
    assert len(moves) == cols - 1
    assert "[col 0]" not in moves


def test_nim_counts():
    env = new_env("Nim-v0", 0)  # piles [3, 4, 5]
    pid, _ = env.get_observation()
    assert len(legal_moves("Nim-v0", env, pid)) == 12
    env.step("[0 3]")
    pid, _ = env.get_observation()
    moves = legal_moves("Nim-v0", env, pid)
    assert len(moves) == 9
    assert not any(m.startswith("[0 ") for m in moves)
    assert len(legal_moves("Nim-v0-large", new_env("Nim-v0-large", 0), 0)) == 5 + 7 + 9 + 11 + 2


@pytest.mark.parametrize(("env_id", "size"), [("SimpleTak-v0", 4), ("SimpleTak-v0-medium", 5)])
def test_simple_tak_counts(env_id, size):
    env = new_env(env_id, 0)
    pid, _ = env.get_observation()
    assert len(legal_moves(env_id, env, pid)) == size * size
    env.step("[5]")
    pid, _ = env.get_observation()
    moves = legal_moves(env_id, env, pid)
    assert len(moves) == size * size - 1
    assert "[5]" not in moves


def test_kuhn_poker_follows_the_betting_tree_and_the_player_to_move():
    env_id = "KuhnPoker-v0"
    env = new_env(env_id, 0)
    pid, _ = env.get_observation()
    assert pid == 1  # round 1 is opened by player 1, not player 0
    assert legal_moves(env_id, env, 1) == ["[check]", "[bet]"]
    with pytest.raises(ValueError, match="player 1 is to move"):
        legal_moves(env_id, env, 0)
    env.step("[bet]")
    pid, _ = env.get_observation()
    assert pid == 0
    assert legal_moves(env_id, env, 0) == ["[fold]", "[call]"]
    env.step("[call]")  # showdown; round 2 is opened by player 0
    pid, _ = env.get_observation()
    assert pid == 0
    assert legal_moves(env_id, env, 0) == ["[check]", "[bet]"]
    env.step("[check]")
    pid, _ = env.get_observation()
    assert legal_moves(env_id, env, pid) == ["[check]", "[bet]"]


def test_finished_game_has_no_legal_moves():
    env = new_env("Nim-v0", 0)
    for move in ("[0 3]", "[1 4]", "[2 5]"):
        env.step(move)
    with pytest.raises(ValueError, match="game is over"):
        legal_moves("Nim-v0", env, 0)


def test_unsupported_game_is_refused_with_the_supported_list():
    assert set(SUPPORTED_GAMES) == {"TicTacToe", "KuhnPoker", "ConnectFour", "Nim", "SimpleTak"}
    assert has_scripted_baseline("SimpleTak-v0-medium-train")
    assert not has_scripted_baseline("Poker-v0")
    with pytest.raises(NoScriptedBaselineError) as excinfo:
        make_scripted_policy("random", "Poker-v0-train")
    message = str(excinfo.value)
    assert "Poker-v0-train" in message
    assert all(game in message for game in SUPPORTED_GAMES)
    with pytest.raises(NoScriptedBaselineError):
        legal_moves("Snake-v0", object(), 0)


def test_unknown_scripted_policy_name():
    assert SCRIPTED_POLICIES == ("random", "heuristic", "optimal", "nash")
    with pytest.raises(ValueError, match="known: random, heuristic, optimal, nash"):
        make_scripted_policy("minimax", "TicTacToe-v0")


def test_every_game_with_a_reader_names_its_baselines_and_random_plays_them_all():
    assert set(SCRIPTED_BASELINES) == set(SUPPORTED_GAMES)
    assert all(names[0] == "random" for names in SCRIPTED_BASELINES.values())
    assert scripted_baselines("TicTacToe-v0-raw") == ("random", "heuristic", "optimal")
    assert scripted_baselines("KuhnPoker-v0-long-train") == ("random", "nash")
    assert scripted_baselines("ConnectFour-v0-large") == ("random", "heuristic")
    assert scripted_baselines("Poker-v0") == ()
    for game, names in SCRIPTED_BASELINES.items():
        for name in names:
            check_scripted_opponent(name, f"{game}-v0-train")


@pytest.mark.parametrize(("name", "env_id", "has"), [
    ("nash", "TicTacToe-v0", "random, heuristic, optimal"),
    ("optimal", "ConnectFour-v0-train", "random, heuristic"),
    ("heuristic", "KuhnPoker-v0-raw", "random, nash"),
    ("heuristic", "Nim-v0", "random"),
])
def test_a_baseline_the_game_lacks_is_refused_with_the_games_list(name, env_id, has):
    with pytest.raises(ValueError, match=f"game '{base_name(env_id)}' has the scripted baselines {has};") as info:
        make_scripted_policy(name, env_id)
    assert not isinstance(info.value, NoScriptedBaselineError)  # the game has a reader, not this baseline
    with pytest.raises(NoScriptedBaselineError):
        check_scripted_opponent("nash", "Poker-v0")


STRONG = [(env_id, name) for env_id in PLAYED_IDS for name in scripted_baselines(env_id) if name != "random"]
assert len(STRONG) == 10  # heuristic and optimal on 3 TicTacToe ids, nash on 2 KuhnPoker, heuristic on 2 ConnectFour


@pytest.mark.parametrize(("env_id", "name"), STRONG)
def test_strong_baselines_play_every_variant_without_invalid_moves(env_id, name):
    for seed in range(6):
        moves = play_with_policy(env_id, seed, name=name)
        assert moves


def play_with_policy(env_id: str, seed: int, *, disturb_global_rng: bool = False, name: str = "random") -> list[str]:
    policy = make_scripted_policy(name, env_id)
    env = new_env(env_id, seed)
    rng = random.Random(seed)
    moves, done, turn = [], False, 0
    while not done:
        pid, obs = env.get_observation()
        if disturb_global_rng:
            random.random()
        ctx = TurnContext(env_id=env_id, player_id=pid, observation=obs, turn_index=turn, env=env, rng=rng)
        out = asyncio.run(policy.act(ctx))
        assert out.format_ok
        assert out.completion_text == out.action
        moves.append(out.action)
        done, _ = env.step(out.action)
        turn += 1
    _, info = env.close()
    assert not any(i["invalid_move"] for i in info.values())
    return moves


def test_random_policy_acts_through_the_protocol():
    policy = RandomLegalPolicy()
    assert isinstance(policy, Policy)
    assert policy.ref.uid == "random"
    assert policy.ref.kind == "scripted"
    env = new_env("TicTacToe-v0-train", 3)
    pid, obs = env.get_observation()
    ctx = TurnContext("TicTacToe-v0-train", pid, obs, 0, env, random.Random(0))
    out = asyncio.run(policy.act(ctx))
    assert out.action in legal_moves("TicTacToe-v0-train", env, pid)


@pytest.mark.parametrize(("env_id", "name"), [("TicTacToe-v0-train", "random"), ("ConnectFour-v0-train", "random"),
                                           ("Nim-v0-large-train", "random"), ("TicTacToe-v0-train", "heuristic"),
                                           ("TicTacToe-v0-train", "optimal"), ("ConnectFour-v0-train", "heuristic")])
def test_same_seed_same_moves_whatever_the_global_rng_does(env_id, name):
    first = play_with_policy(env_id, 11, name=name)
    again = play_with_policy(env_id, 11, disturb_global_rng=True, name=name)
    assert first == again
    assert any(play_with_policy(env_id, s, name=name) != first for s in range(3))
