"""The cross-play table over a run's checkpoints and baselines, and ``unstable league-table`` end to end.

The run directory is made the cheap way: real LoRA adapters in ``checkpoints/``, a real
:class:`~unstable.registry.model_registry.ModelRegistry` saved as the run saves it (relative paths),
and the ``config.json`` keys the command reads; the games are real TextArena games of the tiny model.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import TTT

from unstable.eval.crossplay import CellResult, CrossPlayResult, play_cross_play
from unstable.inference.base import SamplingParams
from unstable.records import GameRecord, PolicyRef
from unstable.samplers.metagame import nash_averaging


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, adapters, tmp_path_factory) -> str:
    """A run with the base model and two checkpoints; ckpt-2 rated above random by five won games."""
    from unstable.registry.model_registry import ModelRegistry

    run = tmp_path_factory.mktemp("league") / "run"
    for v, adapter in enumerate(adapters, start=1):
        shutil.copytree(adapter, run / "checkpoints" / f"ckpt-{v}")
    (run / "config.json").write_text(json.dumps({
        "models": [{"name": "model", "model_name": tiny_model_dir}], "train_envs": [TTT],
        "eval_envs": [{**TTT, "fixed_opponent": "random"}]}))
    registry = ModelRegistry()
    registry.add_checkpoint("base", None, 0)
    for v in (1, 2):
        registry.add_checkpoint(f"ckpt-{v}", os.path.join("checkpoints", f"ckpt-{v}"), v)
    registry.add_fixed("random")
    for _ in range(5):
        registry.update_ratings(["ckpt-2", "random"], [1.0, -1.0])
    registry.save(str(run / "registry" / "registry.json"))
    return str(run)


def test_cross_play_seats_alternate_checkpoints_meet_each_other_and_the_optimal_player_never_loses(
        tiny_model_dir, adapters):
    players = [PolicyRef("base"), PolicyRef("ckpt-1", adapter_path=adapters[0]),
               PolicyRef("ckpt-2", adapter_path=adapters[1]), PolicyRef("optimal", kind="scripted"),
               PolicyRef("random", kind="scripted")]
    records = []
    result = play_cross_play(tiny_model_dir, TTT["env_id"], players, games_per_cell=4,
                             sampling=SamplingParams(temperature=1.0, max_new_tokens=16), on_done=records.append)
    assert len(records) == 10 * 4 and not result.failures
    games = [r for r in records if isinstance(r, GameRecord)]
    pairs = Counter(frozenset(a.policy.uid for a in r.spec.agents) for r in games)
    assert set(pairs.values()) == {4} and len(pairs) == 10  # every pair met, four times
    seats = Counter((r.spec.agents[r.spec.eval_player_id].policy.uid, r.spec.eval_player_id) for r in games)
    assert all(seats[row, seat] == 2 * (4 - i) for i, row in enumerate(result.players[:4]) for seat in (0, 1))
    adapter_games = [r for r in games if {a.policy.adapter_path for a in r.spec.agents} == set(adapters)]
    assert len(adapter_games) == 4 and all(r.turns for r in adapter_games)  # adapter against adapter
    optimal = [result.cell("optimal", other) for other in result.players if other != "optimal"]
    assert all(c.losses == 0 and c.games == 4 for c in optimal)  # perfect play: seat bookkeeping is right
    payoffs, lower, upper = result.matrices()
    assert np.allclose(payoffs, -payoffs.T) and (np.diag(payoffs) == 0).all()
    assert ((lower <= payoffs + 1e-12) & (payoffs <= upper + 1e-12)).all()


def test_a_cell_counts_the_row_entrys_outcomes_and_its_mirror_is_the_negative():
    cell = CellResult.from_outcomes("a", "b", ["win"] * 3 + ["draw"] * 6 + ["loss"], failed=1)
    assert (cell.games, cell.payoff, cell.failed) == (10, pytest.approx(0.2), 1)
    table = CrossPlayResult(("a", "b"), (cell,), games_per_cell=11)
    back = table.cell("b", "a")
    assert (back.wins, back.losses, back.payoff) == (1, 3, pytest.approx(-0.2))
    assert back.payoff_ci95 == pytest.approx((-cell.payoff_ci95[1], -cell.payoff_ci95[0]))
    with pytest.raises(KeyError, match="no cell"):
        table.cell("a", "c")


def test_cross_play_refuses_bad_tables_before_loading_a_model(tiny_model_dir):
    two = [PolicyRef("random", kind="scripted"), PolicyRef("optimal", kind="scripted")]
    with pytest.raises(ValueError, match="games_per_cell must be even"):
        play_cross_play(tiny_model_dir, TTT["env_id"], two, games_per_cell=3)
    with pytest.raises(ValueError, match="uids must be unique"):
        play_cross_play(tiny_model_dir, TTT["env_id"], [two[0], two[0]])
    with pytest.raises(ValueError, match="at least 2 entries"):
        play_cross_play(tiny_model_dir, TTT["env_id"], two[:1])
    with pytest.raises(ValueError, match="'nash' cannot play"):
        play_cross_play(tiny_model_dir, TTT["env_id"], [two[0], PolicyRef("nash", kind="scripted")])
    with pytest.raises(ValueError, match="pairs must be"):
        play_cross_play(tiny_model_dir, TTT["env_id"], two, pairs=[(0, 0)])


def test_league_table_command_prints_the_table_and_writes_json_and_heat_map(run_dir, tmp_path, capsys):
    from unstable.cli.commands import main

    out = tmp_path / "league"
    assert main(["league-table", run_dir, "--games-per-cell", "2", "--checkpoints", "last:2", "--baselines",
                 "random,optimal", "--max-new-tokens", "16", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for text in ("cross-play on TicTacToe-v0-train", "Nash support:", "α-Rank (alpha 100, m 50)", "3-cycles",
                 "TrueSkill", "12/12 games"):
        assert text in printed
    table = json.loads((out / "league_table.json").read_text())
    assert table["players"] == ["ckpt-1", "ckpt-2", "random", "optimal"]
    assert len(table["cells"]) == 6 and all(c["games"] + c["failed"] == 2 for c in table["cells"])
    nash = nash_averaging(table["payoffs"])  # the JSON's mixture is the one of its own matrix
    assert table["nash"]["mixture"] == pytest.approx(nash.mixture, abs=1e-9)
    assert sum(table["alpharank"]["pi"]) == pytest.approx(1.0)
    assert table["trueskill"]["ckpt-2"]["mu"] > table["trueskill"]["ckpt-1"]["mu"]  # from the registry
    assert table["settings"]["adapters"]["ckpt-2"] == os.path.join(run_dir, "checkpoints", "ckpt-2")
    assert (out / "league_table.png").stat().st_size > 10_000


def test_league_table_command_says_what_is_wrong(run_dir, tmp_path, capsys):
    from unstable.cli.commands import main

    assert main(["league-table", str(tmp_path)]) == 2
    assert "not a run directory with checkpoints" in capsys.readouterr().err
    assert main(["league-table", run_dir, "--checkpoints", "ckpt-9"]) == 2
    assert "'ckpt-9'] is not a checkpoint of the run" in capsys.readouterr().err
    assert main(["league-table", run_dir, "--checkpoints", "last:0"]) == 2
    assert "needs a whole number" in capsys.readouterr().err


def test_checkpoint_selection():
    from unstable.cli.league_table import select_checkpoints

    uids = ["base", "ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]
    assert select_checkpoints(uids, "all") == uids
    assert select_checkpoints(uids, "last:2") == ["ckpt-3", "ckpt-4"]
    assert select_checkpoints(uids, "every:3") == ["base", "ckpt-3", "ckpt-4"]  # and the newest
    assert select_checkpoints(uids, "every:2") == ["base", "ckpt-2", "ckpt-4"]
    assert select_checkpoints(uids, "base, ckpt-4") == ["base", "ckpt-4"]


def test_league_table_help_prints(capsys):
    from unstable.cli.commands import main

    with pytest.raises(SystemExit) as info:
        main(["league-table", "--help"])
    assert info.value.code == 0 and "--games-per-cell" in capsys.readouterr().out


@pytest.mark.slow
def test_league_table_of_a_trained_run(ray_session, tiny_model_dir, tmp_path, capsys):
    """A real two-step mirror self-play run, then its league table: the registry, paths and config as a run
    writes them."""
    from conftest import small_run_kwargs

    import unstable
    from unstable.cli.commands import main

    run = unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, "league"))
    try:
        run.start(learning_steps=2, num_collection_workers=8, num_eval_workers=2)
    finally:
        run.stop()
    assert main(["league-table", run.run_dir, "--games-per-cell", "2", "--baselines", "random",
                 "--max-new-tokens", "16"]) == 0
    table = json.loads((Path(run.run_dir) / "league" / "league_table.json").read_text())
    assert table["players"] == ["base", "ckpt-1", "ckpt-2", "random"]
    assert sum(table["nash"]["mixture"]) == pytest.approx(1.0)
    assert "random" in table["trueskill"] and table["settings"]["adapters"]["base"] is None


def test_a_kept_table_grows_by_the_cells_it_lacked_and_an_unplayed_cell_stops_the_analysis():
    from unstable.eval.league import analyse_league

    old = CrossPlayResult(("a", "b"), (CellResult.from_outcomes("a", "b", ["win", "loss", "win", "win"]),), 4)
    new = CrossPlayResult(("b", "c", "a"), (CellResult.from_outcomes("b", "c", ["win"] * 4),
                                            CellResult.from_outcomes("c", "a", ["draw"] * 4),
                                            CellResult.from_outcomes("b", "a", ["win"] * 4)), 4)
    grown = old.merged(new)
    assert grown.players == ("a", "b", "c") and len(grown.cells) == 3
    payoffs, _, _ = grown.matrices()
    assert payoffs.tolist() == [[0.0, -1.0, 0.0], [1.0, 0.0, 1.0], [0.0, -1.0, 0.0]]  # b-a replaced by the new cell
    table = analyse_league(grown, "TicTacToe-v0-train")
    assert table.nash.mixture == pytest.approx([0, 1, 0], abs=1e-12)  # b beats both
    unplayed = CrossPlayResult(("a", "b", "c"), (*old.cells, CellResult.from_outcomes("a", "c", [], failed=4)), 4)
    with pytest.raises(ValueError, match=r"cells without a finished game: \[\('a', 'c'\), \('b', 'c'\)\]"):
        analyse_league(unplayed, "TicTacToe-v0-train")
