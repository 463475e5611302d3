"""The OpenSpiel bridge: ``openspiel:`` env ids, the ``qwen3-spiel`` template, and exploitability by OpenSpiel's
own best response, checked against the library's Kuhn solver on the same tables (to 1e-9)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyspiel", reason="open_spiel is not installed (pip install unstable-baselines[openspiel])")

from unstable.eval.exploitability import evaluate_exploitability, has_solver
from unstable.eval.game_states import openspiel_states
from unstable.eval.in_run import exploitability_metrics
from unstable.eval.solvers import kuhn_exploitability, kuhn_nash_table
from unstable.eval.solvers.openspiel import openspiel_exploitability
from unstable.games.templates import render_prompt

KUHN = "openspiel:kuhn_poker"
CARDS = "JQK"
# OpenSpiel's kuhn_poker history letters (p = pass, b = bet) -> the library solver's history names
HISTORIES = {"": "", "p": "check", "b": "bet", "pb": "check,bet"}


def _library_action(history: str, label: str) -> str:
    """OpenSpiel's ``[Pass]``/``[Bet]`` as the library names the move there (a pass facing a bet is a fold)."""
    facing_bet = history.endswith("b")
    if label == "[Pass]":
        return "fold" if facing_bet else "check"
    return "call" if facing_bet else "bet"


def _as_library_table(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """An OpenSpiel kuhn_poker table (info state ``"0pb"`` -> label -> p) as the library's Kuhn table."""
    out = {}
    for key, probs in table.items():
        card, history = CARDS[int(key[0])], key[1:]
        out[f"{card}:{HISTORIES[history]}"] = {_library_action(history, m): p for m, p in probs.items()}
    return out


def _random_table(states, rng: random.Random) -> dict[str, dict[str, float]]:
    table = {}
    for key, state in states.items():
        weights = [rng.random() for _ in state.moves]
        table[key] = {m: w / sum(weights) for m, w in zip(state.moves, weights, strict=True)}
    return table


def test_kuhn_bridge_equals_the_library_solver_to_1e9_on_the_same_tables():
    states = openspiel_states(KUHN)
    assert len(states) == 12 and {s.moves for s in states.values()} == {("[Pass]", "[Bet]")}
    rng = random.Random(0)
    tables = [_random_table(states, rng) for _ in range(20)]
    tables.append({k: {s.moves[0]: 1.0} for k, s in states.items()})  # always pass: far from Nash
    for table in tables:
        bridge = openspiel_exploitability(KUHN, table)
        library = kuhn_exploitability(_as_library_table(table))
        for name in ("exploitability", "best_response_first", "best_response_second"):
            assert bridge[name] == pytest.approx(getattr(library, name), abs=1e-9), name
    nash = kuhn_nash_table(alpha=0.2)
    back = {}
    for key in states:
        card, history = CARDS[int(key[0])], key[1:]
        probs = nash[f"{card}:{HISTORIES[history]}"]
        back[key] = {m: probs[_library_action(history, m)] for m in states[key].moves}
    assert openspiel_exploitability(KUHN, back)["exploitability"] == pytest.approx(0.0, abs=1e-9)


def test_a_table_with_an_illegal_move_or_a_missing_state_is_refused():
    states = openspiel_states(KUHN)
    table = {k: {"[Pass]": 1.0} for k in states}
    with pytest.raises(ValueError, match="not legal"):
        openspiel_exploitability(KUHN, {**table, "0": {"[Raise]": 1.0}})
    with pytest.raises(ValueError, match="no entry for information state '0'"):
        openspiel_exploitability(KUHN, {k: v for k, v in table.items() if k != "0"})


def test_the_template_shows_the_seat_its_view_and_the_moves_only():
    states = openspiel_states("openspiel:leduc_poker")
    assert len(states) == 936
    state = next(s for s in states.values() if len(s.history) == 3)  # two cards dealt, one move made
    prompt = render_prompt("qwen3-spiel", state.observation)
    assert prompt.startswith("<|im_start|>user\nP1\n[Observer: 1][Private: ")
    assert "Moves: [Fold] [Call] [Raise]\nAnswer in \\boxed{}." in prompt or "Moves: [Call] [Raise]\n" in prompt
    assert "OpenSpiel game" not in prompt
    with pytest.raises(ValueError, match="qwen3-spiel"):
        render_prompt("qwen3-spiel", "Current Board: ...")


def test_every_openspiel_game_has_a_solver_and_kuhn_reads_end_to_end(tiny_model_dir):
    assert has_solver("openspiel:liars_dice") and not has_solver("ConnectFour-v0-train")
    result = evaluate_exploitability(tiny_model_dir, KUHN, prompt_template="qwen3-spiel", max_new_tokens=8)
    assert result.method == "exact" and result.states == 12
    library = kuhn_exploitability(_as_library_table(_renormalised(result.policy))).exploitability
    assert result.exploitability == pytest.approx(library, abs=1e-9)
    assert 0 < result.exploitability < 1.5  # the untrained model is exploitable, less than always-pass (1.5)
    assert result.other_mean > 0 and result.legal_exploitability == result.exploitability  # renormalised already
    metrics = exploitability_metrics(result)  # what a run logs for it each checkpoint
    key = f"eval/{KUHN}/exploitability"
    assert metrics[key] == result.exploitability
    assert (metrics[f"{key}_first"] + metrics[f"{key}_second"]) / 2 == pytest.approx(result.exploitability, abs=1e-9)


def _renormalised(policy: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The read table over legal moves only, as the bridge scores it (invalid mass renormalised away)."""
    return {k: {m: p / sum(probs.values()) for m, p in probs.items()} for k, probs in policy.items()}


def test_the_leduc_quickstart_config_loads(tmp_path):
    from pathlib import Path

    from unstable.cli.quickstart import load_quickstart_config

    config = Path(__file__).resolve().parent.parent / "configs" / "leduc-selfplay.yaml"
    cfg = load_quickstart_config(str(config), out=str(tmp_path / "run"))
    assert (cfg.env_id, cfg.prompt_template) == ("openspiel:leduc_poker", "qwen3-spiel")
    assert cfg.warm_start.env_id == cfg.env_id and cfg.invalid_move_penalty < -13  # below Leduc's worst hand
