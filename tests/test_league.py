"""League samplers: PFSP weights and win rates, the rating curriculum, mixtures, and the env curriculum.

Known answers on values not exact in binary (p = 0.1, 0.3), draws checked against the weights with a
chi-square test, and the registry and scheduler real (no Ray)."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import pytest
import trueskill
from scipy.stats import chisquare
from test_samplers import KUHN, NIM, TTT  # the same three train specs

from unstable.collection.scheduler import GameScheduler
from unstable.games.specs import TrainEnvSpec
from unstable.records import AgentSpec, GameRecord, GameSpec, PolicyRef
from unstable.registry import ModelRegistry
from unstable.registry.model_registry import DEFAULT_DRAW_PROBABILITY
from unstable.samplers.env_samplers import SuccessCurriculumEnvSampler, UniformRandomEnvSampler, success
from unstable.samplers.league import (
    CurriculumMixModelSampler,
    MixtureModelSampler,
    PFSPModelSampler,
    RatingCurriculumModelSampler,
    closeness_weights,
    league_pool,
    pfsp_weight,
    pfsp_weights,
    win_rate,
)
from unstable.samplers.model_samplers import FixedOpponentModelSampler

N = 20_000
TTT_VS = TrainEnvSpec(env_id="TicTacToe-v0-train", num_players=2, num_actors=1, prompt_template="default")


def record(a: PolicyRef, b: PolicyRef, reward_a: float) -> GameRecord:
    agents = (AgentSpec(player_id=0, policy=a), AgentSpec(player_id=1, policy=b))
    spec = GameSpec(game_id=0, env_id="TicTacToe-v0-train", seed=0, agents=agents)
    return GameRecord(spec=spec, turns=(), final_rewards={0: reward_a, 1: -reward_a}, game_info={})


def play(reg: ModelRegistry, a: str, b: str, wins: int = 0, draws: int = 0, losses: int = 0) -> None:
    ra, rb = reg.policy_ref(a), reg.policy_ref(b)
    for reward, n in ((1.0, wins), (0.0, draws), (-1.0, losses)):
        for _ in range(n):
            reg.record_game(record(ra, rb, reward))


def league_registry() -> ModelRegistry:
    """base, ckpt-1, ckpt-2 (current), and the fixed 'random' and 'heuristic'."""
    reg = ModelRegistry()
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    reg.add_checkpoint(uid="ckpt-1", path="/ckpts/1", iteration=1)
    reg.add_checkpoint(uid="ckpt-2", path="/ckpts/2", iteration=2)
    reg.add_fixed("random")
    reg.add_fixed("heuristic")
    return reg


def assert_draws_match(counts: Counter, probs: dict[str, float], n: int) -> None:
    """Chi-square goodness of fit of the draws to ``probs`` (a fixed seed; fails by chance 1 in 10^4)."""
    assert set(counts) <= set(probs), counts
    keys = list(probs)
    observed = [counts[k] for k in keys]
    expected = [probs[k] * n for k in keys]
    assert chisquare(observed, expected).pvalue > 1e-4, (counts, probs)


# ----------------------------------------------------------------- PFSP maths
@pytest.mark.parametrize(("p", "hard", "even", "linear"), [(0.1, 0.81, 0.09, 0.9), (0.3, 0.49, 0.21, 0.7),
                                                          (0.0, 1.0, 0.0, 1.0), (1.0, 0.0, 0.0, 0.0)])
def test_pfsp_weight_known_answers(p, hard, even, linear):
    assert pfsp_weight(p, "hard") == pytest.approx(hard, abs=1e-12)
    assert pfsp_weight(p, "even") == pytest.approx(even, abs=1e-12)
    assert pfsp_weight(p, "linear") == pytest.approx(linear, abs=1e-12)


def test_pfsp_weights_normalise_and_fall_back_to_uniform():
    assert pfsp_weights([0.1, 0.3, 0.5], "hard") == pytest.approx([0.81 / 1.55, 0.49 / 1.55, 0.25 / 1.55])
    assert pfsp_weights([0.1, 0.3, 0.5], "even") == pytest.approx([0.09 / 0.55, 0.21 / 0.55, 0.25 / 0.55])
    assert pfsp_weights([0.1, 0.7], "linear") == pytest.approx([0.9 / 1.2, 0.3 / 1.2])
    assert pfsp_weights([1.0, 1.0], "hard") == [0.5, 0.5]  # beats both surely: AlphaStar's uniform fallback
    assert pfsp_weights([0.0, 1.0, 1.0], "even") == pytest.approx([1 / 3] * 3)
    assert pfsp_weights([], "hard") == []


def test_pfsp_weight_errors():
    with pytest.raises(ValueError, match="pfsp_weighting must be one of"):
        pfsp_weight(0.5, "squared")
    with pytest.raises(ValueError, match=r"win rate must be in \[0, 1\]"):
        pfsp_weight(1.1)


def test_win_rate_counts_a_draw_half_with_a_beta_prior():
    assert win_rate(3, 2, 5, prior=1.0) == pytest.approx(5 / 12)
    assert win_rate(0, 0, 0, prior=0.3) == 0.5
    assert win_rate(9, 1, 0, prior=0.1) == pytest.approx(9.6 / 10.2)
    with pytest.raises(ValueError, match="prior pseudo-count must be > 0"):
        win_rate(1, 0, 0, prior=0.0)


# ----------------------------------------------------------------- PFSP over the registry
def test_pfsp_win_rates_from_the_registry_and_draws_match_the_weights():
    reg = league_registry()
    play(reg, "ckpt-2", "base", wins=8, losses=2)
    play(reg, "ckpt-2", "random", wins=9, draws=1)
    play(reg, "ckpt-2", "ckpt-1", wins=3, losses=7)
    play(reg, "ckpt-1", "base", wins=1, losses=9)  # counts for base (ckpt-1 is newer), never for ckpt-1
    sampler = PFSPModelSampler(reg, weighting="hard", prior=1.0, window=4, fixed_opponents=("random",), rng_seed=3)
    rates = sampler.win_rates()
    assert rates == pytest.approx({"base": (8 + 1 + 1) / (20 + 2), "ckpt-1": 4 / 12, "random": 10.5 / 12})
    probs = sampler.probabilities()
    weights = {uid: (1 - p) ** 2 for uid, p in rates.items()}
    assert probs == pytest.approx({uid: w / sum(weights.values()) for uid, w in weights.items()})
    assert "heuristic" not in probs and "ckpt-2" not in probs  # not a given fixed opponent; the learner itself
    counts = Counter(sampler.sample_opponent().uid for _ in range(N))
    assert_draws_match(counts, probs, N)
    assert counts.most_common(1)[0][0] == "ckpt-1"  # the one the learner loses to


def test_pfsp_window_and_weightings():
    reg = league_registry()
    play(reg, "ckpt-1", "random", wins=10)
    play(reg, "ckpt-2", "random", losses=2)
    newest = PFSPModelSampler(reg, window=1, fixed_opponents=("random",))
    assert newest.win_rates()["random"] == pytest.approx(1 / 4)
    both = PFSPModelSampler(reg, window=2, weighting="even", fixed_opponents=("random",))
    assert both.win_rates()["random"] == pytest.approx(11 / 14)
    p = 11 / 14
    expected = {"base": 0.25, "ckpt-1": 0.25, "random": p * (1 - p)}  # base and ckpt-1 unplayed: p = 0.5
    total = sum(expected.values())
    assert both.probabilities() == pytest.approx({uid: w / total for uid, w in expected.items()})


def test_pfsp_all_fixed_models_when_none_given_and_mirror_when_the_pool_is_empty():
    reg = league_registry()
    assert set(PFSPModelSampler(reg).probabilities()) == {"base", "ckpt-1", "random", "heuristic"}
    lone = ModelRegistry()
    lone.add_checkpoint(uid="base", path=None, iteration=0)
    assert PFSPModelSampler(lone).sample_opponent().uid == "base"


def test_pfsp_settings_are_checked():
    reg = league_registry()
    with pytest.raises(ValueError, match="pfsp_weighting must be one of"):
        PFSPModelSampler(reg, weighting="easy")
    with pytest.raises(ValueError, match="prior pseudo-count must be > 0"):
        PFSPModelSampler(reg, prior=-1)
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        PFSPModelSampler(reg, window=0)


def test_pfsp_win_rates_survive_a_saved_registry(tmp_path):
    reg = league_registry()
    play(reg, "ckpt-2", "ckpt-1", wins=2, draws=3, losses=4)
    before = PFSPModelSampler(reg).probabilities()
    loaded = ModelRegistry.load(reg.save(str(tmp_path / "registry.json")))
    assert loaded.match_results()["ckpt-2"]["ckpt-1"] == {"win": 2, "draw": 3, "loss": 4}
    assert PFSPModelSampler(loaded).probabilities() == pytest.approx(before)


def test_pfsp_reads_one_lineage_of_several():
    reg = ModelRegistry()
    for lineage in ("main", "exploiter"):
        reg.add_checkpoint(uid=f"{lineage}-base", path=None, iteration=0, lineage=lineage)
        reg.add_checkpoint(uid=f"{lineage}-ckpt-1", path=f"/{lineage}/1", iteration=1, lineage=lineage)
    play(reg, "main-ckpt-1", "exploiter-ckpt-1", losses=10)
    play(reg, "exploiter-ckpt-1", "main-base", wins=10)
    main = PFSPModelSampler(reg).win_rates("main")
    assert set(main) == {"main-base", "exploiter-base", "exploiter-ckpt-1"}
    assert main["exploiter-ckpt-1"] == pytest.approx(1 / 22)  # main-ckpt-1's 10 losses and main-base's 10
    assert PFSPModelSampler(reg).win_rates("exploiter")["main-base"] == pytest.approx(11 / 12)
    assert league_pool(reg, "exploiter") == ["main-base", "main-ckpt-1", "exploiter-base"]


# ----------------------------------------------------------------- rating curriculum
def test_closeness_weights_known_answers():
    assert closeness_weights([0.4, 0.5], 0.5, 0.1) == pytest.approx([math.exp(-0.5) / (1 + math.exp(-0.5)),
                                                                     1 / (1 + math.exp(-0.5))])
    assert closeness_weights([0.3, 0.7], 0.5, 0.2) == pytest.approx([0.5, 0.5])
    with pytest.raises(ValueError, match="width must be > 0"):
        closeness_weights([0.5], 0.5, 0.0)


def test_rating_curriculum_uses_trueskills_own_match_quality():
    reg = league_registry()
    play(reg, "ckpt-2", "base", wins=3)
    play(reg, "ckpt-2", "ckpt-1", draws=2, losses=1)
    env = trueskill.TrueSkill(beta=4.0, draw_probability=DEFAULT_DRAW_PROBABILITY)
    ratings = {uid: env.create_rating(mu, sigma) for uid, (mu, sigma) in reg.ratings().items()}
    expected_q = {uid: trueskill.quality_1vs1(ratings["ckpt-2"], ratings[uid], env=env)
                  for uid in ("base", "ckpt-1", "random")}
    # the closed form for two unplayed models (25, 25/3) under beta 4: sqrt(2 beta^2 / (2 beta^2 + 2 sigma^2))
    unplayed = trueskill.quality_1vs1(env.create_rating(), env.create_rating(), env=env)
    assert unplayed == pytest.approx(math.sqrt(32 / (32 + 2 * (25 / 3) ** 2)))
    sampler = RatingCurriculumModelSampler(reg, target=0.5, width=0.1, fixed_opponents=("random",), rng_seed=5)
    assert sampler.qualities() == pytest.approx(expected_q)
    kernel = {uid: math.exp(-0.5 * ((q - 0.5) / 0.1) ** 2) for uid, q in expected_q.items()}
    assert sampler.probabilities() == pytest.approx({uid: w / sum(kernel.values()) for uid, w in kernel.items()})
    best = RatingCurriculumModelSampler(reg, width=0.05, fixed_opponents=("random",))
    top = max(expected_q, key=expected_q.get)
    assert max(best.probabilities(), key=best.probabilities().get) == top
    n = 3000  # each draw asks TrueSkill for three qualities: slower than the other samplers' draws
    counts = Counter(sampler.sample_opponent().uid for _ in range(n))
    assert_draws_match(counts, sampler.probabilities(), n)


def test_rating_curriculum_settings_are_checked():
    reg = league_registry()
    with pytest.raises(ValueError, match=r"target must be a match quality in \[0, 1\]"):
        RatingCurriculumModelSampler(reg, target=1.5)
    with pytest.raises(ValueError, match="width must be > 0"):
        RatingCurriculumModelSampler(reg, width=-0.1)


def test_curriculum_mix_draws_its_share_from_the_curriculum():
    reg = league_registry()
    base = FixedOpponentModelSampler(reg)
    curriculum = MixtureModelSampler(reg, {"ckpt-1": 1.0})
    mix = CurriculumMixModelSampler(base, curriculum, weight=0.3, rng_seed=11)
    counts = Counter(mix.sample_opponent().uid for _ in range(N))
    assert_draws_match(counts, {"ckpt-1": 0.3, "random": 0.35, "heuristic": 0.35}, N)
    other = league_registry()
    other.set_sampler(mix)  # the registry points the sampler at itself: both components follow
    assert base.model_registry is other and curriculum.model_registry is other
    assert base.rng is mix.rng and curriculum.rng is mix.rng
    with pytest.raises(ValueError, match=r"weight must be a number in \[0, 1\]"):
        CurriculumMixModelSampler(base, curriculum, weight=1.2)


# ----------------------------------------------------------------- mixtures (PSRO's plug-in point)
def test_mixture_sampler_normalises_drops_unknown_uids_and_round_trips():
    reg = league_registry()
    sampler = MixtureModelSampler(reg, rng_seed=2)
    assert sampler.sample_opponent().uid == "ckpt-2"  # no mixture yet: mirror
    sampler.set_mixture({"base": 1, "ckpt-1": 1, "random": 1, "gone": 3})
    assert sampler.probabilities() == pytest.approx({"base": 1 / 3, "ckpt-1": 1 / 3, "random": 1 / 3})
    counts = Counter(sampler.sample_opponent().uid for _ in range(N))
    assert_draws_match(counts, sampler.probabilities(), N)
    copy = MixtureModelSampler(reg)
    copy.load_state_dict(sampler.state_dict())
    assert copy.probabilities() == sampler.probabilities()
    sched = GameScheduler(sampler, UniformRandomEnvSampler([TTT_VS]), seed=0)
    resumed = GameScheduler(MixtureModelSampler(reg), UniformRandomEnvSampler([TTT_VS]), seed=0)
    resumed.load_state_dict(json.loads(json.dumps(sched.state_dict())))  # through JSON, as a resume reads it
    assert resumed.model_sampler.probabilities() == sampler.probabilities()
    with pytest.raises(ValueError, match="finite numbers >= 0"):
        sampler.set_mixture({"base": -0.1, "ckpt-1": 1.1})
    with pytest.raises(ValueError, match="needs a weight > 0"):
        sampler.set_mixture({"base": 0.0})


# ----------------------------------------------------------------- env curriculum
def test_success_maps_rewards_to_zero_one():
    assert [success(r) for r in (-1.0, -0.4, 0.0, 0.2, 1.0, 3.0, -2.0)] == pytest.approx(
        [0.0, 0.3, 0.5, 0.6, 1.0, 1.0, 0.0])


def test_env_curriculum_prefers_envs_near_the_target_success():
    sampler = SuccessCurriculumEnvSampler([TTT, KUHN, NIM], rng_seed=4, window=4, target=0.5, width=0.25)
    for _ in range(4):
        sampler.update(TTT.env_id, 1.0, -1.0)  # always wins: success 1.0
        sampler.update(KUHN.env_id, -0.4, 0.4)  # success 0.3
    assert sampler.success_rates() == pytest.approx({TTT.env_id: 1.0, KUHN.env_id: 0.3, NIM.env_id: 0.5})
    kernel = [math.exp(-2.0), math.exp(-0.5 * 0.8 ** 2), 1.0]  # (0.5/0.25)^2 = 4, (0.2/0.25)^2 = 0.64, 0
    assert sampler.probabilities() == pytest.approx([k / sum(kernel) for k in kernel])
    counts = Counter(sampler.sample().env_id for _ in range(N))
    probs = dict(zip([TTT.env_id, KUHN.env_id, NIM.env_id], sampler.probabilities(), strict=True))
    assert_draws_match(counts, probs, N)
    for _ in range(4):  # the window forgets: TicTacToe now at 0.5
        sampler.update(TTT.env_id, 0.0, 0.0)
    assert sampler.success_rates()[TTT.env_id] == 0.5


def test_env_curriculum_state_survives_the_schedulers_resume():
    reg = league_registry()
    env = SuccessCurriculumEnvSampler([TTT_VS, KUHN], rng_seed=1, window=3)
    sched = GameScheduler(PFSPModelSampler(reg, rng_seed=1), env, seed=0)
    for reward in (1.0, 1.0, -1.0):
        job = sched.next_train_job()
        mine = next(a.player_id for a in job.agents if a.collect_data)
        sched.update(GameRecord(spec=job, turns=(), final_rewards={mine: reward, 1 - mine: -reward}, game_info={}))
    state = sched.state_dict()
    fresh_env = SuccessCurriculumEnvSampler([TTT_VS, KUHN], rng_seed=1, window=3)
    fresh = GameScheduler(PFSPModelSampler(reg, rng_seed=1), fresh_env, seed=0)
    fresh.load_state_dict(state)
    assert fresh_env.success_rates() == env.success_rates() != {TTT_VS.env_id: 0.5, KUHN.env_id: 0.5}
    assert [fresh.next_train_job().env_id for _ in range(20)] == [sched.next_train_job().env_id for _ in range(20)]


def test_env_curriculum_settings_are_checked():
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        SuccessCurriculumEnvSampler([TTT], window=0)
    with pytest.raises(ValueError, match=r"target must be a success rate in \[0, 1\]"):
        SuccessCurriculumEnvSampler([TTT], target=-0.1)
    with pytest.raises(ValueError, match="width must be a number > 0"):
        SuccessCurriculumEnvSampler([TTT], width=0)


# ----------------------------------------------------------------- through the scheduler
def _pfsp_scheduler(*fixed: str) -> tuple[ModelRegistry, PFSPModelSampler, GameScheduler]:
    """A registry with the learner's checkpoint ``base`` and the ``fixed`` opponents, a PFSP ('hard')
    sampler over them, and a TicTacToe scheduler that draws with it."""
    reg = ModelRegistry()
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    for name in fixed:
        reg.add_fixed(name)
    sampler = PFSPModelSampler(reg, weighting="hard", fixed_opponents=fixed, rng_seed=0)
    return reg, sampler, GameScheduler(sampler, UniformRandomEnvSampler([TTT_VS], rng_seed=0), seed=0)


def test_pfsp_through_the_scheduler_seats_the_opponent_the_learner_loses_to():
    """Scheduler + registry, no Ray: the learner loses 80% to 'heuristic' and wins 90% against
    'random'; after the registry has seen the games, PFSP ('hard') seats 'heuristic' far more often."""
    _, sampler, sched = _pfsp_scheduler("random", "heuristic")
    outcomes = random.Random(0)
    p_win = {"random": 0.9, "heuristic": 0.2}
    seated: Counter = Counter()
    for i in range(600):
        jobs = sched.next_train_jobs(8)
        results = []
        for job in jobs:
            mine = next(a for a in job.agents if a.collect_data)
            theirs = next(a for a in job.agents if not a.collect_data)
            if i >= 300:
                seated[theirs.policy.uid] += 1
            reward = 1.0 if outcomes.random() < p_win[theirs.policy.uid] else -1.0
            rewards = {mine.player_id: reward, theirs.player_id: -reward}
            results.append(GameRecord(spec=job, turns=(), final_rewards=rewards, game_info={}))
        sched.update_many(results)
    rates = sampler.win_rates()
    assert rates["random"] > 0.75 > 0.35 > rates["heuristic"]  # few games against 'random' once PFSP has learned
    # the stationary share of 'heuristic' is 0.8^2 / (0.8^2 + 0.1^2) = 0.985
    assert seated["heuristic"] / sum(seated.values()) > 0.95


# ----------------------------------------------------------------- config and wiring
def test_yaml_settings_build_the_league_samplers(tiny_model_dir, tmp_path, no_ray):
    """A config's ``samplers:`` section chooses PFSP, the rating curriculum and the env curriculum; the
    run wires exactly those samplers with those settings."""
    from unstable.run.config import BuildConfig
    from unstable.run.config_file import load_config
    from unstable.run.wiring import _env_sampler
    from unstable.samplers.strategies import opponent_sampler

    path = tmp_path / "league.yaml"
    path.write_text(
        f"model_name: {tiny_model_dir}\nruns_dir: {tmp_path}/runs\n"
        "train_envs:\n  - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 1, prompt_template: qwen3-zs}\n"
        "samplers: {opponent_sampling_strategy: pfsp, pfsp_weighting: even, pfsp_prior: 0.5, pfsp_window: 2,\n"
        "           fixed_opponents: [random, heuristic], rating_curriculum: 0.25, rating_curriculum_width: 0.2,\n"
        "           env_sampling_strategy: curriculum, env_curriculum_window: 16, env_curriculum_target: 0.6}\n")
    build_kwargs, _ = load_config(str(path))
    cfg = BuildConfig(**build_kwargs)
    reg = league_registry()
    mix = opponent_sampler(cfg.samplers, reg, 0, cfg.samplers.fixed_opponents)  # scripted: uid = name
    assert isinstance(mix, CurriculumMixModelSampler) and mix.weight == 0.25
    assert isinstance(mix.base, PFSPModelSampler) and isinstance(mix.curriculum, RatingCurriculumModelSampler)
    assert (mix.base.weighting, mix.base.prior, mix.base.window) == ("even", 0.5, 2)
    assert mix.base.fixed_opponents == mix.curriculum.fixed_opponents == ("random", "heuristic")
    assert (mix.curriculum.target, mix.curriculum.width) == (None, 0.2)
    env = _env_sampler(cfg)
    assert isinstance(env, SuccessCurriculumEnvSampler) and (env.window, env.target) == (16, 0.6)
    plain = BuildConfig(**{**build_kwargs, "samplers": {"opponent_sampling_strategy": "pfsp"}})
    assert isinstance(opponent_sampler(plain.samplers, reg, 0), PFSPModelSampler)
    assert isinstance(_env_sampler(plain), UniformRandomEnvSampler)


def test_the_docs_yaml_example_is_a_valid_config(tiny_model_dir, tmp_path, no_ray):
    """docs/training.md's league example, with a model and a runs directory added, passes every check."""
    from doc_examples import REPO, section_block

    from unstable.run.config import BuildConfig
    from unstable.run.config_file import load_config

    block = section_block(REPO / "docs" / "training.md", "## League opponents and curricula", "yaml")
    path = tmp_path / "league.yaml"
    path.write_text(f"model_name: {tiny_model_dir}\nruns_dir: {tmp_path}/runs\n{block}")
    cfg = BuildConfig(**load_config(str(path))[0])
    assert (cfg.samplers.opponent_sampling_strategy, cfg.samplers.rating_curriculum) == ("pfsp", 0.2)
    assert cfg.samplers.env_sampling_strategy == "curriculum"


def test_pfsp_on_real_tictactoe_games_seats_the_opponent_that_wins():
    """Real TextArena games through the scheduler and the registry (no Ray): the learner's seat plays
    uniformly random legal moves (a weak checkpoint's stand-in), the opponents are the scripted
    'random' (the learner wins about half) and 'optimal' (it never wins). PFSP ('hard') learns the
    win rates from the recorded games and seats 'optimal' most (stationary share about 0.96 / 1.21)."""
    from unstable.collection.rollout import play_game_sync
    from unstable.policies.scripted import RandomLegalPolicy, make_scripted_policy

    reg, sampler, sched = _pfsp_scheduler("random", "optimal")
    opponents = {name: make_scripted_policy(name, TTT_VS.env_id) for name in ("random", "optimal")}
    learner = RandomLegalPolicy(uid="base")
    seated: Counter = Counter()
    for i in range(40):
        jobs = sched.next_train_jobs(8)
        records = []
        for job in jobs:
            policies = {a.player_id: learner if a.collect_data else opponents[a.policy.uid] for a in job.agents}
            if i >= 20:
                seated.update(a.policy.uid for a in job.agents if not a.collect_data)
            records.append(play_game_sync(job, policies))
        sched.update_many(records)
    rates = sampler.win_rates()
    assert rates["optimal"] < 0.1 and 0.3 < rates["random"] < 0.7, rates
    assert reg.match_results()["base"]["optimal"]["win"] == 0
    assert seated["optimal"] / sum(seated.values()) > 0.65, seated
