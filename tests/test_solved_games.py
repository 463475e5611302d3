"""Every solved game answers what the evaluation asks of its :class:`SolvedGame`, in the names its solver reads:
a uniform table built from its states, moves and names scores what the solver scores for uniform play."""

from __future__ import annotations

import pytest

from unstable.eval.average_policy import PolicyAverage
from unstable.eval.exploitability import history_dependent
from unstable.eval.game_states import SOLVED_GAMES, has_solver, solved_game
from unstable.eval.solvers import kuhn_exploitability, tictactoe_exploitability, tictactoe_table, uniform_kuhn_table


def _uniform(env_id: str) -> float:
    """The solver's exploitability of uniform play, from its own table (OpenSpiel's for an OpenSpiel game)."""
    if env_id.startswith("openspiel:"):
        from open_spiel.python import policy
        from open_spiel.python.algorithms import exploitability

        from unstable.games.openspiel import load_game

        game = load_game(env_id)
        return exploitability.exploitability(game, policy.UniformRandomPolicy(game))
    if env_id.startswith("KuhnPoker"):
        return kuhn_exploitability(uniform_kuhn_table()).exploitability
    return tictactoe_exploitability(tictactoe_table()).exploitability


@pytest.mark.parametrize("env_id", [f"{name}-v0-train" for name in SOLVED_GAMES] + ["openspiel:kuhn_poker"])
def test_every_solved_game_answers_each_question(env_id):
    if env_id.startswith("openspiel:"):
        pytest.importorskip("pyspiel")
    game = solved_game(env_id)
    assert has_solver(env_id) and game.name in (*SOLVED_GAMES, "openspiel")
    states = game.states()
    table = {game.state_name(key): {game.move_name(m): 1 / len(s.moves) for m in s.moves} for key, s in states.items()}
    assert game.exploitability(table)["exploitability"] == pytest.approx(_uniform(env_id), abs=1e-9)
    assert history_dependent(game, "qwen3-board") is False
    if game.own_reach is not None:  # the checkpoint average: one table averages to itself
        assert game.own_reach(table).keys() == table.keys()
        average = PolicyAverage(game)
        average.add(table)
        assert average.exploitability() == pytest.approx(_uniform(env_id), abs=1e-9)
