"""The turn loop with scripted policies (real TextArena games, no model)."""

import asyncio
import random

import pytest

from unstable.collection.rollout import play_game, play_game_sync, play_games
from unstable.policies.base import PolicyError, PolicyOutput
from unstable.policies.scripted import RandomLegalPolicy
from unstable.records import AgentSpec, FailedGame, GameFailedError, GameRecord, GameSpec, PolicyRef

GAMES = ["TicTacToe-v0-train", "KuhnPoker-v0-train", "ConnectFour-v0-train", "Nim-v0-train", "SimpleTak-v0-train"]


def spec(env_id, seed=0, game_id=0, error_allowance=0, max_turns=None):
    agents = tuple(AgentSpec(pid, PolicyRef(uid=f"random-{pid}", kind="scripted")) for pid in range(2))
    return GameSpec(game_id, env_id, seed, agents, error_allowance=error_allowance, max_turns=max_turns)


def randoms():
    return {0: RandomLegalPolicy("random-0"), 1: RandomLegalPolicy("random-1")}


class Scripted:
    """Plays a fixed list of actions in order (for hand-made positions)."""

    def __init__(self, actions, uid="scripted"):
        self.ref = PolicyRef(uid=uid, kind="scripted")
        self.actions = list(actions)

    async def act(self, ctx):
        return PolicyOutput(action=self.actions.pop(0), completion_text="")


def _line_winner(board, lines):
    for line in lines:
        marks = {board.get(c) for c in line}
        if len(marks) == 1 and None not in marks:
            return marks.pop()
    return None


def tictactoe_winner(record: GameRecord):
    board = {int(t.action.strip("[]")): t.player_id for t in record.turns}
    lines = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
    return _line_winner(board, lines)


def connect_four_winner(record: GameRecord, rows=6, cols=7):
    heights = [0] * cols
    board = {}
    for t in record.turns:
        c = int(t.action.strip("[]").replace("col", ""))
        board[(heights[c], c)] = t.player_id
        heights[c] += 1
    lines = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(4)]
                if all(0 <= rr < rows and 0 <= cc < cols for rr, cc in cells):
                    lines.append(cells)
    return _line_winner(board, lines)


@pytest.mark.parametrize("env_id", GAMES)
def test_scripted_games_end_with_zero_sum_rewards(env_id):
    for seed in range(10):
        record = play_game_sync(spec(env_id, seed), randoms())
        assert isinstance(record, GameRecord)
        assert record.final_rewards in ({0: 1.0, 1: -1.0}, {0: -1.0, 1: 1.0}, {0: 0.0, 1: 0.0})
        assert record.invalid_player is None
        assert not any(t.invalid for t in record.turns)
        assert record.num_turns == len(record.turns) > 0
        assert [t.turn_index for t in record.turns] == list(range(record.num_turns))
        outcomes = record.outcomes
        assert sorted(outcomes.values()) in (["loss", "win"], ["draw", "draw"])


@pytest.mark.parametrize(
    ("env_id", "winner_fn"), [("TicTacToe-v0-train", tictactoe_winner), ("ConnectFour-v0-train", connect_four_winner)]
)
def test_rewards_agree_with_an_independent_replay_of_the_moves(env_id, winner_fn):
    for seed in range(20):
        record = play_game_sync(spec(env_id, seed), randoms())
        winner = winner_fn(record)
        if winner is None:
            assert record.final_rewards == {0: 0.0, 1: 0.0}
        else:
            assert record.outcome(winner) == "win"


def test_kuhn_poker_first_player_is_honoured():
    record = play_game_sync(spec("KuhnPoker-v0-train", seed=0), randoms())
    assert record.turns[0].player_id == 1  # TextArena's KuhnPoker opens round 1 with player 1


def test_same_seed_same_game_even_when_games_interleave():
    specs = [spec("KuhnPoker-v0-train", seed=s, game_id=s) for s in range(12)]
    sequential = [play_game_sync(s, randoms()) for s in specs]
    interleaved = asyncio.run(play_games(specs, lambda s: randoms(), max_concurrent=12))
    for a, b in zip(sequential, interleaved, strict=True):
        assert [t.action for t in a.turns] == [t.action for t in b.turns]
        assert [t.observation for t in a.turns] == [t.observation for t in b.turns]
        assert a.final_rewards == b.final_rewards


def test_global_random_is_not_disturbed_by_games():
    random.seed(7)
    expected = random.Random(7).random()
    play_game_sync(spec("KuhnPoker-v0-train", seed=3), randoms())
    assert random.random() == expected


def test_invalid_move_ends_game_with_allowance_zero():
    policies = {0: Scripted(["[9]"]), 1: Scripted([])}
    record = play_game_sync(spec("TicTacToe-v0-train"), policies)
    assert record.num_turns == 1
    assert record.turns[0].invalid and record.turns[0].invalid_reason
    assert record.invalid_player == 0
    assert record.final_rewards == {0: -1.0, 1: 1.0}


def test_error_allowance_gives_retries_and_each_bad_try_is_a_turn():
    policies = {0: Scripted(["[9]", "[0]", "[1]", "[2]"]), 1: Scripted(["[8]", "[7]"])}
    record = play_game_sync(spec("TicTacToe-v0-train", error_allowance=1), policies)
    assert [t.invalid for t in record.turns][:2] == [True, False]
    assert record.turns[0].player_id == record.turns[1].player_id == 0
    assert record.invalid_player is None
    assert record.final_rewards == {0: 1.0, 1: -1.0}  # 0-1-2 row after one forgiven mistake


class Boom:
    """Plays random legal moves, then raises ``error`` from turn 2 on."""

    ref = PolicyRef(uid="boom", kind="scripted")

    def __init__(self, error):
        self.error = error

    async def act(self, ctx):
        if ctx.turn_index >= 2:
            raise self.error
        return await RandomLegalPolicy().act(ctx)


def test_failed_games_carry_seed_stage_and_turns():
    boom = Boom(PolicyError("model server went away"))
    with pytest.raises(GameFailedError) as info:
        play_game_sync(spec("TicTacToe-v0-train", seed=42), {0: boom, 1: boom})
    failure = info.value.failure
    assert failure.seed == 42 and failure.stage == "policy" and failure.error_type == "PolicyError"
    assert len(failure.turns) == 2 and "seed 42" in failure.describe()


@pytest.mark.parametrize("error", [ZeroDivisionError("template bug"), KeyError("board"), RuntimeError("oops")])
def test_a_bug_in_a_policy_propagates_with_the_game_it_happened_in(error):
    """Only PolicyError (the model or API failed) fails one game; any other error is a bug in our code or
    the user's (template, extraction, scripted policy) and must stop the caller, not be counted."""
    boom = Boom(error)
    with pytest.raises(type(error)) as info:
        play_game_sync(spec("TicTacToe-v0-train", seed=42, game_id=7), {0: boom, 1: boom})
    assert info.value is error  # the original object, with its traceback
    assert "turn 2 of game 7 (TicTacToe-v0-train, seed 42)" in "".join(info.value.__notes__)
    with pytest.raises(type(error)):  # a batch of games stops too, instead of returning FailedGames
        asyncio.run(play_games([spec("TicTacToe-v0-train", seed=s, game_id=s) for s in range(3)],
                               lambda s: {0: boom, 1: boom}))


def test_env_errors_and_turn_limit_are_failed_games_in_batches():
    good = spec("TicTacToe-v0-train", seed=1, game_id=1)
    capped = spec("ConnectFour-v0-train", seed=2, game_id=2, max_turns=3)
    bad_env = GameSpec(3, "NoSuchGame-v0", 0, good.agents)
    results = asyncio.run(play_games([good, capped, bad_env], lambda s: randoms()))
    assert isinstance(results[0], GameRecord)
    assert isinstance(results[1], FailedGame) and results[1].stage == "limit" and len(results[1].turns) == 3
    assert isinstance(results[2], FailedGame) and results[2].stage == "make"


def test_missing_policy_for_a_seat_is_an_error():
    with pytest.raises(ValueError, match="no policy for seats"):
        asyncio.run(play_game(spec("TicTacToe-v0-train"), {0: RandomLegalPolicy()}))
