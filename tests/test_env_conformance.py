"""One conformance test every environment passes, as PettingZoo's ``api_test``: the library's TextArena games,
OpenSpiel games through the bridge, and the single-turn, collaborative and parallel environments.

Each is played by the real turn loop (:func:`~unstable.collection.rollout.play_game`, or the environment's own
``play``) with test-double policies, and checked for: a reset that offers the first seat an observation; legal
moves that are offered and accepted (a random legal move is never invalid); turn order (the seat asked is the seat
the game says is to move; every seat plays); final rewards, one a seat, finite, summing to 0 where the game is
zero-sum; the same play under the same seed; and a bad answer handled by the game's rule (an invalid move that
loses at ``error_allowance=0`` and is asked again at 1; a low score in an environment).
"""

from __future__ import annotations

import asyncio
import importlib.util
import math

import pytest

from unstable.collection.rollout import play_game
from unstable.environments import (
    CollaborativeEnvironment,
    ParallelEnvironment,
    SingleTurnEnvironment,
    arithmetic_dataset,
    exact_match,
    reward_function,
)
from unstable.games.envs import check_env_id
from unstable.games.legal_moves import legal_moves
from unstable.policies.base import PolicyOutput
from unstable.records import AgentSpec, GameSpec, PolicyRef

BAD_ANSWER = "[definitely not a move]"
TEXTARENA_GAMES = ["TicTacToe-v0-train", "KuhnPoker-v0-train", "KuhnPoker-v0-chips-train", "ConnectFour-v0-train",
                   "Nim-v0-train", "SimpleTak-v0-train"]
OPENSPIEL_GAMES = ["openspiel:kuhn_poker", "openspiel:leduc_poker", "openspiel:goofspiel(num_cards=4)",
                   "openspiel:liars_dice", "openspiel:tic_tac_toe", "openspiel:phantom_ttt",
                   "openspiel:dark_hex(board_size=2)"]
NO_OPENSPIEL = pytest.mark.skipif(importlib.util.find_spec("pyspiel") is None,
                                  reason="open_spiel is not installed (pip install unstable-baselines[openspiel])")
GAMES = TEXTARENA_GAMES + [pytest.param(g, marks=NO_OPENSPIEL) for g in OPENSPIEL_GAMES]


class LegalPlayer:
    """Plays a legal move drawn with the seat's own generator; checks it is the seat to move; answers
    :data:`BAD_ANSWER` at the turns in ``bad_turns``."""

    def __init__(self, seat: int, bad_turns: tuple[int, ...] = ()) -> None:
        self.seat, self.bad_turns, self.ref = seat, bad_turns, PolicyRef(f"p{seat}", kind="checkpoint")

    async def act(self, ctx):
        assert ctx.player_id == self.seat
        moves = legal_moves(ctx.env_id, ctx.env, ctx.player_id)  # raises unless this seat is to move
        assert ctx.observation.strip() and moves and len(set(moves)) == len(moves)
        move = BAD_ANSWER if ctx.turn_index in self.bad_turns else ctx.rng.choice(moves)
        return PolicyOutput(action=move, completion_text=move, prompt=ctx.observation)


def _play(env_id: str, seed: int, error_allowance: int = 0, bad_turns: tuple[int, ...] = ()):
    spec = GameSpec(0, env_id, seed, tuple(AgentSpec(i, PolicyRef(f"p{i}")) for i in range(2)),
                    error_allowance=error_allowance, max_turns=200)
    return asyncio.run(play_game(spec, {i: LegalPlayer(i, bad_turns) for i in range(2)}))


def _zero_sum(env_id: str) -> bool:
    if env_id.startswith("openspiel:"):
        from unstable.games.openspiel import zero_sum

        return zero_sum(env_id)
    return True  # the library's TextArena games score a win +1 / -1 (Kuhn chips: +-1, +-2) and a draw 0


@pytest.mark.parametrize("env_id", GAMES)
def test_a_game_conforms(env_id):
    check_env_id(env_id, 2)
    plays = [_play(env_id, seed) for seed in (0, 1, 2)]
    for record in plays:
        assert record.turns and not any(t.invalid for t in record.turns)  # legal moves are accepted
        assert set(record.final_rewards) == {0, 1} and all(math.isfinite(r) for r in record.final_rewards.values())
        if _zero_sum(env_id):
            assert sum(record.final_rewards.values()) == pytest.approx(0.0)
    assert {t.player_id for r in plays for t in r.turns} == {0, 1}  # both seats are asked to move
    again = _play(env_id, 1)  # the same seed: the same deal, observations, moves and rewards
    assert [(t.player_id, t.observation, t.action) for t in again.turns] == \
           [(t.player_id, t.observation, t.action) for t in plays[1].turns]
    assert again.final_rewards == plays[1].final_rewards

    lost = _play(env_id, 0, error_allowance=0, bad_turns=(0,))
    mover = lost.turns[0].player_id
    assert len(lost.turns) == 1 and lost.turns[0].invalid
    assert lost.final_rewards[mover] < lost.final_rewards[1 - mover]
    retried = _play(env_id, 0, error_allowance=1, bad_turns=(0,))
    assert retried.turns[0].invalid and not retried.turns[1].invalid
    assert retried.turns[1].player_id == mover and retried.turns[1].observation.strip()


# ----------------------------------------------------------------------------- environments
@reward_function(name="correct")
def _correct(completion: str, answer: str) -> float:
    return exact_match(completion, answer)


DATA = arithmetic_dataset(6, seed=1)


def _answer(observation: str) -> str:
    question = observation[observation.rindex("What is"):]
    a, b = question.removeprefix("What is ").split("?")[0].split(" + ")
    return f"\\boxed{{{int(a) + int(b)}}}"


class Answerer:
    """Answers right (or :data:`BAD_ANSWER` when ``bad``); records which seats it was asked as."""

    def __init__(self, seat: int, bad: bool = False) -> None:
        self.seat, self.bad, self.ref = seat, bad, PolicyRef(f"p{seat}", kind="checkpoint")

    async def act(self, ctx):
        assert ctx.player_id == self.seat and ctx.observation.strip()
        text = BAD_ANSWER if self.bad else _answer(ctx.observation)
        return PolicyOutput(action=text, completion_text=text, prompt=ctx.observation)


ENVIRONMENTS = {
    "single-turn": lambda: SingleTurnEnvironment("add", reward_functions=[_correct], train_data=DATA,
                                                 prompt_column="question", num_samples=2),
    "collaborative": lambda: CollaborativeEnvironment("duo", participants=["Bob", "Alice"], round_spec="Bob -> Alice",
                                                      reward_functions=[_correct], train_data=DATA,
                                                      prompt_column="question"),
    "parallel": lambda: ParallelEnvironment("vote", participants=2, combiner=lambda prompt, answers: answers[0],
                                            reward_functions=[_correct], train_data=DATA, prompt_column="question"),
}


def _play_environment(env, seed: int, bad: bool = False):
    spec = GameSpec(0, env.env_id, seed, tuple(AgentSpec(i, PolicyRef(f"p{i}")) for i in range(2)),
                    environment=env.name, item=env.train_item(seed), split="train")
    return asyncio.run(env.play(spec, {i: Answerer(i, bad) for i in range(2)}))


@pytest.mark.parametrize("kind", list(ENVIRONMENTS))
def test_an_environment_conforms(kind):
    env = ENVIRONMENTS[kind]()
    record = _play_environment(env, 0)
    assert {t.player_id for t in record.turns} == {0, 1} and not any(t.invalid for t in record.turns)
    assert record.final_rewards == {0: 1.0, 1: 1.0}  # right answers score, each seat once
    again = _play_environment(env, 0)
    assert [(t.player_id, t.observation) for t in again.turns] == [(t.player_id, t.observation) for t in record.turns]
    assert again.final_rewards == record.final_rewards
    bad = _play_environment(env, 0, bad=True)
    assert bad.final_rewards == {0: 0.0, 1: 0.0}  # a bad answer is scored low, never an error


def test_an_openspiel_game_without_open_spiel_installed_says_how_to_install_it(monkeypatch):
    import sys

    from unstable.games import openspiel
    from unstable.games.envs import EnvNotAvailableError

    monkeypatch.setitem(sys.modules, "pyspiel", None)  # import pyspiel now raises ImportError
    openspiel.load_game.cache_clear()
    try:
        with pytest.raises(EnvNotAvailableError, match=r"pip install unstable-baselines\[openspiel\]"):
            check_env_id("openspiel:kuhn_poker", 2)
    finally:
        openspiel.load_game.cache_clear()
