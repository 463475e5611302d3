"""KuhnPoker-v0-chips: Kuhn's (1950) game in TextArena's KuhnPoker env, scored in chips."""

from __future__ import annotations

import random

import pytest
import textarena as ta

from unstable.games.envs import check_env_id

ENV = "KuhnPoker-v0-chips-train"
CARDS = "JQK"


def _play(seed: int, moves: list[str]) -> tuple[dict[int, int], dict[int, int], int]:
    """Play ``moves`` from a reset with ``seed``: the rewards, the cards dealt and who opened."""
    env = ta.make(ENV)
    state = random.getstate()
    try:
        env.reset(num_players=2, seed=seed)
    finally:
        random.setstate(state)
    inner = env.unwrapped if hasattr(env, "unwrapped") else env
    while hasattr(inner, "env"):
        inner = inner.env
    cards = dict(inner.state.game_state["player_cards"])
    opener, _ = env.get_observation()
    done = False
    for move in moves:
        assert not done
        done, _ = env.step(move)
    assert done
    rewards, _ = env.close()
    return rewards, cards, opener


def _kuhn_payoff(history: tuple[str, ...], opener_card: int, other_card: int) -> int:
    """The opener's chips in Kuhn poker (ante 1, bet 1), from the game's definition."""
    higher = 1 if opener_card > other_card else -1
    return {("check", "check"): higher, ("bet", "fold"): 1, ("check", "bet", "fold"): -1,
            ("bet", "call"): 2 * higher, ("check", "bet", "call"): 2 * higher}[history]


@pytest.mark.parametrize("history", [("check", "check"), ("bet", "fold"), ("check", "bet", "fold"),
                                     ("bet", "call"), ("check", "bet", "call")])
def test_every_deal_pays_the_chips_of_kuhn_poker(history):
    check_env_id(ENV, num_players=2)
    deals = {}
    for seed in range(200):
        rewards, cards, opener = _play(seed, [f"[{m}]" for m in history])
        deals[cards[opener], cards[1 - opener]] = (rewards, opener)
        assert opener == 1  # one hand a game: TextArena's first round, which player 1 opens
        expected = _kuhn_payoff(history, cards[opener], cards[1 - opener])
        assert rewards == {opener: expected, 1 - opener: -expected}
    assert len(deals) == 6  # every deal was seen


def test_an_invalid_move_costs_the_ante_and_the_prompt_says_chips():
    rewards, _, opener = _play(0, ["[raise]", "[raise]"])  # TextArena's default allows one invalid move
    assert rewards == {opener: -1, 1 - opener: 1}
    env = ta.make(ENV)
    env.reset(num_players=2, seed=0)
    _, observation = env.get_observation()
    assert "one hand of Kuhn Poker" in observation and "Your score is the chips you win or lose" in observation
    assert "Your available actions are: '[check]', '[bet]'" in observation


def test_textarena_s_own_kuhn_poker_is_unchanged():
    """The variant is a subclass: the 3-round KuhnPoker-v0 still pays one chip a round (the reason it exists)."""
    env = ta.make("KuhnPoker-v0-train")
    env.reset(num_players=2, seed=0)
    for move in ("[bet]", "[call]"):
        env.step(move)
    inner = env
    while hasattr(inner, "env"):
        inner = inner.env
    # round 1's pot was the two antes only (+1 / -1); both have anted again for round 2
    assert sorted(inner.state.game_state["player_chips"].values()) == [-2, 0]
