"""PSRO: the meta-solver's known answers, when updates happen, the games that fill the matrix, resume.

Known answers on values not exact in binary (payoffs 0.1, 0.2, 0.3), cross-checked against
OpenSpiel's CFR+ on the same matrix game; the registry and scheduler are real (no Ray), and the
last test plays real TextArena games with scripted policies standing in for checkpoints."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from test_league import TTT_VS, play

from unstable.collection.scheduler import GameScheduler
from unstable.records import FailedGame, GameRecord
from unstable.registry import ModelRegistry
from unstable.samplers.env_samplers import UniformRandomEnvSampler
from unstable.samplers.metagame import meta_solver
from unstable.samplers.psro import MatrixGame, PSROModelSampler, metagame, missing_games

RPS = [[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]]
# a cycle 1 > 0 > 2 > 1 of unequal margins; A p = 0 gives p ∝ (a_12, -a_02, a_01) = (0.2, 0.3, 0.1) / 0.6
SKEWED = [[0.0, -0.1, 0.3], [0.1, 0.0, -0.2], [-0.3, 0.2, 0.0]]
SKEWED_NASH = [1 / 3, 1 / 2, 1 / 6]


class FakeTracker:
    """Keeps what ``log`` was given."""

    def __init__(self):
        self.lines: list[dict[str, float]] = []

    def log(self, metrics: dict[str, float]) -> None:
        self.lines.append(dict(metrics))


def registry_with(*checkpoints: str, fixed: tuple[str, ...] = ()) -> ModelRegistry:
    reg = ModelRegistry()
    for i, uid in enumerate(checkpoints):
        reg.add_checkpoint(uid=uid, path=None if i == 0 else f"/ckpts/{i}", iteration=i)
    for name in fixed:
        reg.add_fixed(name)
    return reg


def add_checkpoint(reg: ModelRegistry, i: int) -> str:
    reg.add_checkpoint(uid=f"ckpt-{i}", path=f"/ckpts/{i}", iteration=i)
    return f"ckpt-{i}"


def openspiel_nash(payoffs: list[list[float]]) -> list[float]:
    """The row player's average strategy of OpenSpiel's CFR+ on the zero-sum matrix game."""
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.convert_to_turn_based(pyspiel.create_matrix_game(payoffs, [[-x for x in r] for r in payoffs]))
    solver = pyspiel.CFRPlusSolver(game)
    for _ in range(2000):
        solver.evaluate_and_update_policy()
    return [p for _, p in solver.average_policy().get_state_policy(game.new_initial_state())]


def serve(sched: GameScheduler, outcome, rounds: int = 50, batch: int = 8) -> Counter:
    """Draw ``rounds`` batches of train jobs and report each back, the reward of seat 0 from
    ``outcome(uid_0, uid_1)`` (a learner seat against itself draws); returns the matrix jobs per pair."""
    matrix: Counter = Counter()
    for _ in range(rounds):
        jobs = sched.next_train_jobs(batch)
        results = []
        for job in jobs:
            a, b = (job.agent(pid).policy.uid for pid in (0, 1))
            if job.is_matrix:
                assert not any(agent.collect_data for agent in job.agents)
                matrix[frozenset((a, b))] += 1
            reward = 0.0 if a == b else outcome(a, b)
            results.append(GameRecord(spec=job, turns=(), final_rewards={0: reward, 1: -reward}, game_info={}))
        sched.update_many(results)
    return matrix


# ----------------------------------------------------------------- the meta-solver
@pytest.mark.parametrize("solver", ["nash", "alpha-rank"])
def test_rock_paper_scissors_gives_the_uniform_mixture(solver):
    assert meta_solver(solver)(RPS) == pytest.approx([1 / 3] * 3, abs=1e-9)


def test_a_skewed_cycle_gives_the_nash_computed_by_hand_and_by_openspiel():
    assert meta_solver("nash")(SKEWED) == pytest.approx(SKEWED_NASH, abs=1e-9)
    assert openspiel_nash(SKEWED) == pytest.approx(SKEWED_NASH, abs=2e-3)


def test_meta_solver_refuses_an_unknown_name():
    with pytest.raises(ValueError, match=r"psro_meta_solver must be one of \['nash', 'alpha-rank'\], got 'ne'"):
        meta_solver("ne")


def test_the_sampler_solves_the_registrys_games_into_its_mixture():
    """The registry's recorded games make SKEWED exactly ((wins - losses) / 10 games), so the update
    plays no game and the opponent mixture is (1/3, 1/2, 1/6)."""
    reg = registry_with("ckpt-0")
    sampler = PSROModelSampler(reg, every=2, games_per_cell=10)
    assert sampler.next_matrix_game() is None and sampler.probabilities() == {}  # mirror until the first update
    add_checkpoint(reg, 1)
    add_checkpoint(reg, 2)
    play(reg, "ckpt-0", "ckpt-1", wins=4, draws=1, losses=5)  # -0.1
    play(reg, "ckpt-0", "ckpt-2", wins=4, draws=5, losses=1)  # +0.3
    play(reg, "ckpt-1", "ckpt-2", wins=3, draws=2, losses=5)  # -0.2
    assert sampler.next_matrix_game() is None
    assert sampler.last is not None and sampler.last.matrix_games == 0
    for row, expected in zip(sampler.last.payoffs, SKEWED, strict=True):
        assert list(row) == pytest.approx(expected, abs=1e-12)
    expected = dict(zip(["ckpt-0", "ckpt-1", "ckpt-2"], SKEWED_NASH, strict=True))
    assert sampler.probabilities() == pytest.approx(expected, abs=1e-9)


def test_metagame_and_missing_games_known_answers():
    results = {"a": {"b": {"win": 3, "draw": 1, "loss": 6}}, "b": {"a": {"win": 6, "draw": 1, "loss": 3}}}
    payoffs, games = metagame(results, ["a", "b", "c"])
    assert payoffs[0][1] == pytest.approx(-0.3, abs=1e-15) and payoffs[1][0] == -payoffs[0][1]
    assert payoffs[0][2] == payoffs[2][0] == payoffs[1][2] == payoffs[0][0] == 0.0
    assert games == [[0, 10, 0], [10, 0, 0], [0, 0, 0]]
    plan = list(missing_games(["a", "b", "c"], [[0, 11, 1], [11, 0, 0], [1, 0, 0]], per_cell=2))
    assert Counter((g.row, g.col) for g in plan) == {("a", "c"): 1, ("b", "c"): 2}
    assert [g.row_seat for g in plan if (g.row, g.col) == ("b", "c")] == [0, 1]  # the seats alternate
    assert plan[0] == MatrixGame("a", "c", 1)  # a's second game against c: the other seat


def test_an_update_makes_its_matrix_games_as_it_hands_them_out():
    """The plan of an update was a list built whole and consumed with list.pop(0): 10**5 games per cell took
    19 s and 10**7 never returned. 40 checkpoints at the bound (1000 games per cell, 780,000 games) now hand
    out their first games at once, holding no list of them."""
    import tracemalloc

    reg = registry_with(*(f"ckpt-{i}" for i in range(40)))
    sampler = PSROModelSampler(reg, every=1, games_per_cell=1000, pool_size=40)
    assert sampler.next_matrix_game() is None  # counts the checkpoints from here
    add_checkpoint(reg, 40)
    tracemalloc.start()
    try:
        first = [sampler.next_matrix_game() for _ in range(3)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == [MatrixGame("ckpt-1", "ckpt-2", 0), MatrixGame("ckpt-1", "ckpt-3", 0),
                     MatrixGame("ckpt-1", "ckpt-4", 0)]
    assert peak < 2_000_000, f"{peak} bytes to hand out 3 games"
    with pytest.raises(ValueError, match=r"psro_games_per_cell must be an integer >= 1 and <= 1000"):
        PSROModelSampler(reg, games_per_cell=1001)


# ----------------------------------------------------------------- when it updates, what it plays
def psro_scheduler(reg: ModelRegistry, sampler: PSROModelSampler) -> GameScheduler:
    return GameScheduler(sampler, UniformRandomEnvSampler([TTT_VS], rng_seed=0), seed=0)


def stronger(a: str, b: str) -> float:
    """The later checkpoint wins; 'random' loses to every checkpoint."""
    rank = {"random": -1}
    ra, rb = (rank.get(u, int(u.split("-")[1]) if u.startswith("ckpt-") else 0) for u in (a, b))
    return 1.0 if ra > rb else (-1.0 if ra < rb else 0.0)


def test_an_update_comes_every_psro_every_checkpoints(tmp_path):
    """every=3: after 2 new checkpoints no update, after 3 the first, after 9 the third; each is a line
    of the log file and a set of tracker metrics, and the mixture covers the pool."""
    reg = registry_with("ckpt-0", fixed=("random",))
    tracker, log = FakeTracker(), tmp_path / "psro.jsonl"
    sampler = PSROModelSampler(reg, every=3, games_per_cell=2, pool_size=4, tracker=tracker, log_path=str(log),
                               fixed_opponents=("random",), rng_seed=0)
    sched = psro_scheduler(reg, sampler)
    updates = []
    for i in range(1, 10):
        serve(sched, stronger, rounds=3)
        add_checkpoint(reg, i)
        serve(sched, stronger, rounds=6)  # enough for an update's matrix games and the draw that solves it
        updates.append(sampler.last.update if sampler.last else 0)
    assert updates == [0, 0, 1, 1, 1, 2, 2, 2, 3]
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["update"] for x in lines] == [1, 2, 3] and [x["checkpoints"] for x in lines] == [4, 7, 10]
    assert lines[-1]["pool"] == ["ckpt-6", "ckpt-7", "ckpt-8", "ckpt-9", "random"]
    assert [m["league/psro/updates"] for m in tracker.lines] == [1, 2, 3]
    # the newest checkpoint beats every other entry of the pool: the Nash mixture is all on it
    assert sampler.probabilities() == pytest.approx({"ckpt-9": 1.0})
    assert tracker.lines[-1]["league/psro/mixture/ckpt-9"] == pytest.approx(1.0)


def test_missing_cells_are_filled_to_the_budget_and_not_beyond():
    """Pool base, ckpt-1, ckpt-2, random; budget 4; recorded: ckpt-1 v base 10 games, ckpt-2 v random 5,
    ckpt-1 v random 2. Missing: 0 + 0 + 2 + 4 (base v ckpt-2) + 4 (base v random) + 4 (ckpt-1 v
    ckpt-2) = 14 matrix games, and a failed one is not replaced."""
    reg = registry_with("base", "ckpt-1", fixed=("random",))
    play(reg, "ckpt-1", "base", wins=6, losses=4)
    play(reg, "ckpt-1", "random", wins=2)
    sampler = PSROModelSampler(reg, every=1, games_per_cell=4, fixed_opponents=("random",), rng_seed=0)
    sched = psro_scheduler(reg, sampler)
    sched.next_train_jobs(1)  # the sampler counts checkpoints from here
    reg.add_checkpoint(uid="ckpt-2", path="/ckpts/2", iteration=2)
    play(reg, "ckpt-2", "random", wins=5)
    jobs = sched.next_train_jobs(20)
    matrix = [j for j in jobs if j.is_matrix]
    assert len(matrix) == 14 and all(j.is_matrix for j in jobs[:14]) and not any(j.is_matrix for j in jobs[14:])
    per_pair = Counter(frozenset(a.policy.uid for a in j.agents) for j in matrix)
    assert per_pair == {frozenset(p): n for p, n in [(("ckpt-1", "random"), 2), (("base", "ckpt-2"), 4),
                                                       (("base", "random"), 4), (("ckpt-1", "ckpt-2"), 4)]}
    first = matrix[0]
    assert {a.policy.uid for a in first.agents} == {"base", "ckpt-2"}
    failed = FailedGame(spec=first, stage="env", error_type="ValueError", message="boom")
    results = [GameRecord(spec=j, turns=(), final_rewards={0: 1.0, 1: -1.0}, game_info={}) for j in jobs[1:]]
    sched.update_many([failed, *results])
    assert sampler.last is None  # solved at the next draw, once the registry has the batch
    assert not any(j.is_matrix for j in sched.next_train_jobs(8))
    games = {(a, b): sum(c.values()) for a, row in reg.match_results().items() for b, c in row.items()}
    assert {k: v for k, v in games.items() if k[0] < k[1]} == {
        ("base", "ckpt-1"): 10, ("ckpt-1", "random"): 4, ("ckpt-2", "random"): 5,
        ("base", "ckpt-2"): 3, ("base", "random"): 4, ("ckpt-1", "ckpt-2"): 4}
    assert sampler.last.matrix_games == 14 and sched.stats()["matrix_jobs"] == 14
    assert sampler.last.pool == ("base", "ckpt-1", "ckpt-2", "random")
    assert sampler.last.games[0][2] == 3 and sampler.last.games[2][0] == 3


# ----------------------------------------------------------------- resume
def test_resume_restores_the_matrix_the_mixture_and_an_update_in_progress():
    """The scheduler's state (with the sampler's) and the registry's, through JSON, into new objects:
    the same last matrix and mixture; an update that had games out is planned again from the
    registry's counts, so only the games still missing are played."""
    reg = registry_with("ckpt-0", fixed=("random",))
    sampler = PSROModelSampler(reg, every=2, games_per_cell=2, fixed_opponents=("random",), rng_seed=0)
    sched = psro_scheduler(reg, sampler)
    for i in (1, 2):
        serve(sched, stronger, rounds=2)
        add_checkpoint(reg, i)
    serve(sched, stronger, rounds=4)
    assert sampler.last is not None and sampler.last.update == 1
    for i in (3, 4):
        add_checkpoint(reg, i)
    out = [j for j in sched.next_train_jobs(5) if j.is_matrix]  # the second update opens: 5 of its games out
    assert len(out) == 5
    state = json.loads(json.dumps({"scheduler": sched.state_dict(), "registry": reg.state_dict()}))

    reg2 = ModelRegistry()
    reg2.load_state_dict(state["registry"])
    sampler2 = PSROModelSampler(reg2, every=2, games_per_cell=2, fixed_opponents=("random",), rng_seed=0)
    sched2 = psro_scheduler(reg2, sampler2)
    sched2.load_state_dict(state["scheduler"])
    assert sampler2.last == sampler.last
    assert sampler2.probabilities() == sampler.probabilities() == pytest.approx({"ckpt-2": 1.0})
    # the 5 games out were lost with the old run: the new one plans all of the update's games again
    pool = ("ckpt-0", "ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4", "random")
    _, games = metagame(reg2.match_results(), pool)
    expected = len(list(missing_games(pool, games, 2)))
    replayed = serve(sched2, stronger, rounds=8)
    assert sum(replayed.values()) == expected > 5
    assert sampler2.last.update == 2 and sampler2.last.pool == pool
    assert sampler2.probabilities() == pytest.approx({"ckpt-4": 1.0})


def test_a_resume_from_an_older_state_takes_the_later_updates_from_the_log(tmp_path):
    """The run state is saved at checkpoints; a kill after update 3 resumed from a state that held update 1,
    so psro.jsonl got a second update 2 (another pool) and update 2's matrix games were played again. The
    log's lines are the updates' saved state: the resumed sampler goes on from update 3."""
    log = tmp_path / "psro.jsonl"
    reg = registry_with("ckpt-0", fixed=("random",))
    sampler = PSROModelSampler(reg, every=1, games_per_cell=2, pool_size=3, fixed_opponents=("random",),
                               log_path=str(log), rng_seed=0)
    sched = psro_scheduler(reg, sampler)
    saved = None
    for i in (1, 2, 3):
        serve(sched, stronger, rounds=2)
        add_checkpoint(reg, i)  # a checkpoint: the state is saved, then the update opens
        if i == 2:
            saved = json.loads(json.dumps({"scheduler": sched.state_dict(), "registry": reg.state_dict()}))
        serve(sched, stronger, rounds=6)
    assert sampler.last.update == 3 and saved["scheduler"]["samplers"]["model_sampler"]["updates"] == 1

    reg2 = ModelRegistry()  # killed: the resume has the state of ckpt-2 and registers the later checkpoint
    reg2.load_state_dict(saved["registry"])
    add_checkpoint(reg2, 3)
    sampler2 = PSROModelSampler(reg2, every=1, games_per_cell=2, pool_size=3, fixed_opponents=("random",),
                                log_path=str(log), rng_seed=0)
    sched2 = psro_scheduler(reg2, sampler2)
    sched2.load_state_dict(saved["scheduler"])
    assert sampler2.last == sampler.last and sampler2.probabilities() == sampler.probabilities()
    assert sum(serve(sched2, stronger, rounds=3).values()) == 0  # no update replayed before a new checkpoint
    add_checkpoint(reg2, 4)
    serve(sched2, stronger, rounds=6)
    assert sampler2.last.update == 4
    assert [json.loads(x)["update"] for x in log.read_text().splitlines()] == [1, 2, 3, 4]


# ----------------------------------------------------------------- real games, real collector
def test_matrix_games_through_the_collector_reach_the_registry_and_no_buffer():
    """The real collector and scheduler, TextArena TicTacToe with random legal moves in every seat:
    the matrix games are played, rated and logged, and none of them reaches the buffer."""
    from test_batched_collection import Buffer, GameLog, NoModel, Scheduler, Scripted, collect_until

    reg = registry_with("base", fixed=("random",))
    sampler = PSROModelSampler(reg, every=2, games_per_cell=3, fixed_opponents=("random",), rng_seed=0)
    scheduler = Scheduler(sampler, UniformRandomEnvSampler([TTT_VS]), seed=0)
    assert sampler.next_matrix_game() is None
    add_checkpoint(reg, 1)
    add_checkpoint(reg, 2)
    buffer, tracker = Buffer(10**6, dedupe=True), GameLog()
    collector = Scripted(tracker=tracker, buffer=buffer, game_scheduler=scheduler, backends=[NoModel()])
    stats = asyncio.run(collect_until(collector, 4, 40))
    assert stats["failed"] == 0
    scheduler.next_train_job()  # the draw after the last matrix game solves the update
    assert sampler.last is not None and sampler.last.matrix_games == 6 * 3
    matrix_ids = set(scheduler.results) - set(buffer.game_ids)
    assert len(matrix_ids) == 18 and set(buffer.game_ids) <= set(scheduler.results)
    assert matrix_ids <= set(tracker.game_ids)
    assert all(g == 3 for i, row in enumerate(sampler.last.games) for j, g in enumerate(row) if i != j)
    assert sum(sampler.last.mixture) == pytest.approx(1.0)


def test_psro_on_real_tictactoe_games_puts_the_mixture_on_the_player_nobody_beats():
    """Real TextArena games played by the scheduler's specs: the learner's checkpoints play random
    legal moves, the fixed 'optimal' plays perfect TicTacToe (it never loses). The meta-game's
    max-entropy Nash is 'optimal' alone: no checkpoint scores above 0 against it."""
    from unstable.collection.rollout import play_game_sync
    from unstable.policies.scripted import RandomLegalPolicy, make_scripted_policy

    reg = registry_with("ckpt-0", fixed=("random", "optimal"))
    sampler = PSROModelSampler(reg, every=2, games_per_cell=6, fixed_opponents=("random", "optimal"), rng_seed=0)
    sched = psro_scheduler(reg, sampler)
    fixed = {name: make_scripted_policy(name, TTT_VS.env_id) for name in ("random", "optimal")}

    def play_all(n: int) -> None:
        for _ in range(n):
            jobs = sched.next_train_jobs(8)
            sched.update_many([play_game_sync(job, {a.player_id: fixed.get(a.policy.uid) or
                                                    RandomLegalPolicy(uid=a.policy.uid) for a in job.agents})
                               for job in jobs])

    play_all(1)
    add_checkpoint(reg, 1)
    add_checkpoint(reg, 2)
    play_all(12)
    assert sampler.last is not None
    results = reg.match_results()
    assert all(results[c]["optimal"]["win"] == 0 for c in ("ckpt-0", "ckpt-1", "ckpt-2"))
    assert sampler.probabilities() == pytest.approx({"optimal": 1.0}, abs=1e-6)


# ----------------------------------------------------------------- config and wiring
def test_yaml_settings_build_the_psro_sampler(tiny_model_dir, tmp_path, no_ray):
    """A config's ``samplers:`` section chooses PSRO and its settings; mixed with the rating curriculum,
    the scheduler still finds it (the mix's base) and saves its state through the mix."""
    from unstable.run.config import BuildConfig
    from unstable.run.config_file import load_config
    from unstable.samplers.league import CurriculumMixModelSampler
    from unstable.samplers.strategies import opponent_sampler

    path = tmp_path / "psro.yaml"
    path.write_text(
        f"model_name: {tiny_model_dir}\nruns_dir: {tmp_path}/runs\n"
        "train_envs:\n  - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 1, prompt_template: qwen3-zs}\n"
        "samplers: {opponent_sampling_strategy: psro, psro_every: 3, psro_games_per_cell: 4, psro_pool_size: 6,\n"
        "           psro_meta_solver: alpha-rank, fixed_opponents: [random], rating_curriculum: 0.25}\n")
    cfg = BuildConfig(**load_config(str(path))[0])
    reg = registry_with("ckpt-0", fixed=("random",))
    mix = opponent_sampler(cfg.samplers, reg, 0, ("random",), run_dir=str(tmp_path / "run"))
    assert isinstance(mix, CurriculumMixModelSampler) and isinstance(mix.base, PSROModelSampler)
    psro = mix.base
    assert (psro.every, psro.games_per_cell, psro.pool_size, psro.solver_name) == (3, 4, 6, "alpha-rank")
    assert psro.fixed_opponents == ("random",) and psro.log_path == str(tmp_path / "run" / "psro.jsonl")
    sched = GameScheduler(mix, UniformRandomEnvSampler([TTT_VS], rng_seed=0), seed=0)
    for i in (1, 2, 3):
        serve(sched, stronger, rounds=1)
        add_checkpoint(reg, i)
    serve(sched, stronger, rounds=8)  # at most 10 pairs x 4 games, then the draw that solves it
    assert psro.last is not None and psro.last.solver == "alpha-rank"
    assert json.loads((tmp_path / "run" / "psro.jsonl").read_text())["mixture"] == list(psro.last.mixture)
    state = json.loads(json.dumps(sched.state_dict()))
    again = opponent_sampler(cfg.samplers, reg, 0, ("random",))
    GameScheduler(again, UniformRandomEnvSampler([TTT_VS], rng_seed=0), seed=0).load_state_dict(state)
    assert again.base.last == psro.last and again.base.probabilities() == psro.probabilities()


def test_the_scheduler_finds_psro_under_wrappers():
    """A sampler that draws from a ``base`` (a league's, say) around a curriculum mix around PSRO: the
    scheduler still plays PSRO's matrix games."""
    from unstable.samplers.league import CurriculumMixModelSampler, RatingCurriculumModelSampler
    from unstable.samplers.model_samplers import BaseModelSampler

    class Wrapper(BaseModelSampler):
        def __init__(self, base):
            super().__init__(base.model_registry)
            self.base = base

        def sample_opponent(self, lineage=None):
            return self.base.sample_opponent(lineage)

    reg = registry_with("ckpt-0", fixed=("random",))
    psro = PSROModelSampler(reg, every=1, games_per_cell=1, fixed_opponents=("random",))
    mix = CurriculumMixModelSampler(psro, RatingCurriculumModelSampler(reg), weight=0.5)
    sched = GameScheduler(Wrapper(mix), UniformRandomEnvSampler([TTT_VS], rng_seed=0), seed=0)
    serve(sched, stronger, rounds=1)
    add_checkpoint(reg, 1)
    matrix = serve(sched, stronger, rounds=2)
    # 3 pairs, one game each; ckpt-0 v random has its game already (the curriculum drew random in training)
    assert sum(matrix.values()) == 2 and psro.last is not None


# ----------------------------------------------------------------- a real run
@pytest.mark.slow
def test_a_psro_run_plays_logs_and_resumes_its_meta_game_after_a_kill(ray_session, tiny_model_dir, tmp_path):
    """build() with the tiny model, PSRO after every checkpoint: the updates are in psro.jsonl and the
    metrics, and the matrix games were played (rated, in no buffer: the buffer only ever saw the learner's
    seats). Killed once the log holds an update newer than the run state saved at the last checkpoint (every
    actor, as ``kill -9`` leaves the run directory), the resumed run goes on from the log's newest update:
    it used to resume from the saved state's older one, so psro.jsonl got that update number twice and its
    matrix games were played again (issue 39, item 5)."""
    from conftest import TTT, small_run_kwargs
    from test_reliability import eventually

    import unstable
    from unstable.tracking import read_metrics

    kwargs = small_run_kwargs(tiny_model_dir, tmp_path, "psro", train_envs=[unstable.TrainEnvSpec(num_actors=1, **TTT)],
                              opponent_sampling_strategy="psro", fixed_opponents=["random"], psro_every=1,
                              psro_games_per_cell=2, psro_pool_size=3)
    run = unstable.build(**kwargs)
    run_dir = Path(run.run_dir)

    def logged() -> list[dict]:
        path = run_dir / "psro.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []

    def saved_updates() -> int:  # the PSRO updates in the run state saved at the last checkpoint
        path = run_dir / "run_state.json"
        state = json.loads(path.read_text()) if path.is_file() else None
        return state["scheduler"]["samplers"]["model_sampler"]["updates"] if state else 0

    try:  # each update is solved between two checkpoints, each run state saved at one: kill in between
        run.start(learning_steps=6, num_collection_workers=8, num_eval_workers=0, block=False)
        ahead = eventually(lambda: logged() and logged()[-1]["update"] > saved_updates(), timeout=600)
        for handle in [*run.actors.learners.values(), *run.actors.all()]:  # the learners first: no state saved after
            ray_session.kill(handle, no_restart=True)
    finally:
        run.stop()  # the actors are dead: it saves no state, only releases the run directory
    before = logged()
    assert ahead and saved_updates() < before[-1]["update"], (saved_updates(), before)

    resumed = unstable.build(resume_from=str(run_dir))
    try:
        state = ray_session.get(resumed.actors.scheduler.state_dict.remote())["samplers"]["model_sampler"]
        assert state["last"] == before[-1] and state["updates"] == before[-1]["update"]
        # the next update's matrix games are played between learner steps: wait for its line, then stop
        resumed.start(learning_steps=resumed.actors.start_version + 6, num_collection_workers=8, num_eval_workers=0,
                      block=False)
        assert eventually(lambda: len(logged()) > len(before), timeout=600), "no PSRO update after the resume"
    finally:
        resumed.stop()
    lines = logged()
    assert [x["update"] for x in lines] == list(range(1, len(lines) + 1))  # one line per update, none replayed
    assert lines[len(before)]["checkpoints"] > before[-1]["checkpoints"]  # the next one came with a new checkpoint
    assert lines[0]["pool"][-1] == "random" and all(sum(x["mixture"]) == pytest.approx(1.0) for x in lines)
    assert all(g >= 2 for x in lines for i, row in enumerate(x["games"]) for j, g in enumerate(row) if i != j)
    metrics = read_metrics(str(run_dir))
    assert any("league/psro/updates" in m for m in metrics) and any("league/matrix_games" in m for m in metrics)
