"""Exploitability of a policy table on any two-player OpenSpiel game, by OpenSpiel's own best response.

The table maps each information state (the game's ``information_state_string`` of the player to move) to
move labels (:func:`unstable.games.openspiel.move_labels`) and their probabilities. It becomes a
``TabularPolicy`` and goes to ``open_spiel.python.algorithms.exploitability.exploitability``: NashConv / 2 in
a two-player zero-sum game, the mean over the seats of a best response's expected return against the policy
(the headline of the Kuhn solver too, so the two agree on ``kuhn_poker``; tests/test_openspiel.py).

A table's mass off the legal moves (an invalid answer) has no counterpart in a generic game: each state's
probabilities are renormalised over its legal moves (a state with none is read as uniform). The mass is
reported by the reading (``other_mean``) rather than scored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unstable.games.openspiel import load_game, move_labels

OpenSpielTable = Mapping[str, Mapping[str, float]]


def tabular_policy(env_id: str, table: OpenSpielTable) -> Any:
    """``table`` as OpenSpiel's ``TabularPolicy`` of the game of ``env_id``; ``ValueError`` naming a missing
    information state or a move that is not legal there."""
    from open_spiel.python import policy as spiel_policy

    game = load_game(env_id)
    tabular = spiel_policy.TabularPolicy(game)
    for key, row in tabular.state_lookup.items():
        if key not in table:
            raise ValueError(f"{env_id}: the table has no entry for information state {key!r}")
        state = tabular.states[row]
        labels = move_labels(state)
        unknown = set(table[key]) - set(labels)
        if unknown:
            raise ValueError(f"{env_id}: at {key!r} moves {sorted(unknown)} are not legal (legal: {labels})")
        probs = [max(0.0, float(table[key].get(label, 0.0))) for label in labels]
        total = sum(probs)
        probs = [p / total for p in probs] if total > 0 else [1.0 / len(labels)] * len(labels)
        tabular.action_probability_array[row, :] = 0.0
        for action, p in zip(state.legal_actions(), probs, strict=True):
            tabular.action_probability_array[row, action] = p
    return tabular


def openspiel_exploitability(env_id: str, table: OpenSpielTable) -> dict[str, Any]:
    """``table`` solved on ``env_id`` (see the module docstring): ``exploitability``, ``nash_conv``, ``states``, and as
    the Kuhn solver names them ``best_response_first`` (a best responder's expected return when the policy is
    player 0) and ``best_response_second`` (when it is player 1)."""
    from open_spiel.python.algorithms import expected_game_score, exploitability

    game = load_game(env_id)
    policy = tabular_policy(env_id, table)
    result = exploitability.nash_conv(game, policy, return_only_nash_conv=False)
    on_policy = expected_game_score.policy_value(game.new_initial_state(), [policy] * game.num_players())
    responses = [float(gain + value) for gain, value in zip(result.player_improvements, on_policy, strict=True)]
    return {"exploitability": float(result.nash_conv) / game.num_players(), "nash_conv": float(result.nash_conv),
            "best_response_first": responses[1], "best_response_second": responses[0],
            "states": len(policy.state_lookup)}
