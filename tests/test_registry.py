"""ModelRegistry: TrueSkill maths checked against the trueskill package, bookkeeping, persistence, Ray."""

from __future__ import annotations

import json
import os

import pytest
import trueskill

import unstable
from unstable.records import AgentSpec, GameRecord, GameSpec, PolicyRef
from unstable.registry import DEFAULT_DRAW_PROBABILITY, ModelRegistry, fixed_policy_ref, score_ranks

GEMINI = "google/gemini-2.0-flash-lite-001"


def make_env(beta: float = 4.0) -> trueskill.TrueSkill:
    return trueskill.TrueSkill(beta=beta, draw_probability=DEFAULT_DRAW_PROBABILITY)


def registry_with_base() -> ModelRegistry:
    reg = ModelRegistry()
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    return reg


def record(policies: list[PolicyRef], rewards: list[float], env_id: str = "TicTacToe-v0-train") -> GameRecord:
    agents = tuple(AgentSpec(player_id=i, policy=p) for i, p in enumerate(policies))
    spec = GameSpec(game_id=0, env_id=env_id, seed=0, agents=agents)
    return GameRecord(spec=spec, turns=(), final_rewards=dict(enumerate(rewards)), game_info={})


def test_score_ranks_share_ties():
    assert score_ranks([1, -1]) == [0, 1]
    assert score_ranks([0, 0]) == [0, 0]
    assert score_ranks([1, 0, -1, 1]) == [0, 2, 3, 0]


def test_win_moves_ratings_exactly_as_trueskill():
    reg = registry_with_base()
    reg.add_fixed("random")
    reg.update_ratings(["base", "random"], [1.0, -1.0], env_id="TicTacToe-v0-train")
    ts = make_env()
    (winner,), (loser,) = ts.rate([(ts.create_rating(),), (ts.create_rating(),)], ranks=[0, 1])
    assert reg.ratings()["base"] == pytest.approx((winner.mu, winner.sigma))
    assert reg.ratings()["random"] == pytest.approx((loser.mu, loser.sigma))
    assert winner.mu > 25.0 > loser.mu
    base, rnd = reg.get_model("base"), reg.get_model("random")
    assert (base["games"], base["wins"], base["draws"], base["losses"]) == (1, 1, 0, 0)
    assert (rnd["games"], rnd["wins"], rnd["draws"], rnd["losses"]) == (1, 0, 0, 1)
    assert reg.match_counts() == {"base": {"random": 1}, "random": {"base": 1}}
    assert reg.match_results()["base"]["random"] == {"win": 1, "draw": 0, "loss": 0}
    assert reg.match_results()["random"]["base"] == {"win": 0, "draw": 0, "loss": 1}


def test_draw_is_a_draw_for_both_sides():
    reg = registry_with_base()
    reg.add_fixed("random", prior_mu=20.0)
    reg.update_ratings(["random", "base"], [0.0, 0.0])
    ts = make_env()
    (a,), (b,) = ts.rate([(ts.create_rating(20.0),), (ts.create_rating(),)], ranks=[0, 0])
    assert reg.ratings()["random"] == pytest.approx((a.mu, a.sigma))
    assert reg.ratings()["base"] == pytest.approx((b.mu, b.sigma))
    for uid in ("base", "random"):
        m = reg.get_model(uid)
        assert (m["wins"], m["draws"], m["losses"]) == (0, 1, 0)
    assert reg.match_results()["base"]["random"] == {"win": 0, "draw": 1, "loss": 0}


def test_mirror_game_counts_but_does_not_rate():
    reg = registry_with_base()
    before = reg.ratings()["base"]
    reg.update_ratings(["base", "base"], [1.0, -1.0])
    m = reg.get_model("base")
    assert reg.ratings()["base"] == before
    assert (m["games"], m["self_games"], m["wins"], m["draws"], m["losses"]) == (1, 1, 0, 0, 0)
    assert reg.match_counts() == {"base": {"base": 1}}
    assert reg.match_results() == {}


def test_shared_uid_rated_once_by_best_seat():
    reg = registry_with_base()
    reg.add_fixed("random")
    reg.update_ratings(["base", "random", "base"], [-1.0, 0.0, 1.0])  # base's best seat beats random
    ts = make_env()
    (w,), (lo,) = ts.rate([(ts.create_rating(),), (ts.create_rating(),)], ranks=[0, 1])
    assert reg.ratings()["base"] == pytest.approx((w.mu, w.sigma))
    assert reg.ratings()["random"] == pytest.approx((lo.mu, lo.sigma))
    assert reg.get_model("base")["games"] == 1
    assert reg.get_model("base")["wins"] == 1


def test_single_seat_game_counts_without_rating():
    reg = registry_with_base()
    reg.update_ratings(["base"], [1.0])
    assert reg.ratings()["base"] == (25.0, pytest.approx(25.0 / 3))
    assert reg.get_model("base")["wins"] == 1
    assert [m["uid"] for m in reg.get_all_models()] == ["base"]  # no dummy "env" model


def test_record_game_uses_policies_and_adds_unknown_fixed_models():
    reg = registry_with_base()
    base = reg.policy_ref()
    reg.record_game(record([PolicyRef("random", kind="scripted"), base], [1.0, -1.0]))
    assert reg.get_model("random")["kind"] == "scripted"
    assert reg.get_model("random")["fixed"] is True
    assert reg.get_model("random")["wins"] == 1
    assert reg.get_model("base")["losses"] == 1
    assert reg.ratings()["random"][0] > 25.0 > reg.ratings()["base"][0]
    with pytest.raises(KeyError, match="unknown uids"):
        reg.update_ratings(["base", "nobody"], [1.0, 0.0])


def test_checkpoint_inheritance_and_ordering():
    reg = registry_with_base()
    reg.add_fixed("random")
    for i in range(10):  # alternating results: sigma shrinks below half the default
        reg.update_ratings(["base", "random"], [1.0, -1.0] if i % 2 else [-1.0, 1.0])
    mu, sigma = reg.ratings()["base"]
    assert sigma < 25.0 / 6
    reg.add_checkpoint(uid="ckpt-1", path="/ckpts/1", iteration=1)
    assert reg.get_current_ckpt() == "ckpt-1"
    assert reg.ratings()["ckpt-1"] == pytest.approx((mu, min(2 * sigma, 25.0 / 3)))
    assert reg.ratings()["ckpt-1"][1] == pytest.approx(2 * sigma)  # no cap needed
    reg.add_checkpoint(uid="ckpt-2", path="/ckpts/2", iteration=2)
    assert reg.ratings()["ckpt-2"][1] == pytest.approx(25.0 / 3)  # 4 * sigma would exceed the default: capped
    reg.add_checkpoint(uid="fresh", path="/ckpts/3", iteration=3, inherit=False)
    assert reg.ratings()["fresh"] == pytest.approx((25.0, 25.0 / 3))
    assert reg.checkpoint_uids() == ["base", "ckpt-1", "ckpt-2", "fresh"]
    assert reg.get_name_or_lora_path("ckpt-2") == "/ckpts/2"
    assert reg.get_name_or_lora_path("base") is None
    assert reg.policy_ref("ckpt-1") == PolicyRef("ckpt-1", "checkpoint", "/ckpts/1", 1, lineage="model")
    assert reg.policy_ref("random") == PolicyRef("random", "scripted", None, None)


def test_errors():
    reg = ModelRegistry()
    with pytest.raises(RuntimeError, match="add_checkpoint"):
        reg.get_current_ckpt()
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    with pytest.raises(ValueError, match="already registered"):
        reg.add_checkpoint(uid="base", path=None, iteration=1)
    reg.add_checkpoint(uid="ckpt-5", path="/x", iteration=5)
    with pytest.raises(ValueError, match="iteration 2 < current"):
        reg.add_checkpoint(uid="ckpt-2", path="/y", iteration=2)
    reg.add_fixed(GEMINI)
    with pytest.raises(ValueError, match="already registered"):
        reg.add_fixed(GEMINI)
    with pytest.raises(ValueError, match="one score per seat"):
        reg.update_ratings(["base"], [1.0, 2.0])
    with pytest.raises(KeyError, match="unknown uid"):
        reg.get_model("nope")
    with pytest.raises(RuntimeError, match="set_sampler"):
        reg.sample_opponent()


def test_fixed_kinds(tmp_path):
    assert fixed_policy_ref("random") == PolicyRef("random", "scripted")
    assert fixed_policy_ref(GEMINI) == PolicyRef(GEMINI, "api")
    assert fixed_policy_ref(str(tmp_path)) == PolicyRef(str(tmp_path), "checkpoint", str(tmp_path))
    reg = ModelRegistry()
    assert reg.add_fixed(GEMINI) == GEMINI
    assert reg.get_model(GEMINI)["kind"] == "api"
    assert reg.fixed_uids() == [GEMINI]
    assert reg.checkpoint_uids() == []


def test_sampler_delegation():
    from unstable.samplers.model_samplers import FixedOpponentModelSampler

    reg = registry_with_base()
    reg.add_fixed("random")
    reg.set_sampler(FixedOpponentModelSampler(model_registry=object()))
    assert reg.sample_opponent() == PolicyRef("random", "scripted")


class FakeTracker:
    def __init__(self):
        self.snapshots: list[dict] = []

    def log_registry(self, info: dict) -> None:
        self.snapshots.append(json.loads(json.dumps(info, allow_nan=False)))  # must be JSON-able


def test_tracker_gets_snapshots_on_checkpoints_and_every_log_every_games():
    tracker = FakeTracker()
    reg = ModelRegistry(tracker=tracker, log_every=2)
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    reg.add_fixed("random")
    for _ in range(5):
        reg.update_ratings(["base", "random"], [1.0, -1.0])
    assert len(tracker.snapshots) == 3  # the checkpoint, then games 2 and 4
    last = tracker.snapshots[-1]
    assert last["games_recorded"] == 4 and last["current"] == "base"
    assert set(last["ratings"]) == {"base", "random"}
    assert last["ratings"]["base"]["wins"] == 4
    assert last["ratings"]["random"]["mu"] < 25.0 < last["ratings"]["base"]["mu"]
    info = reg.interface_info()
    assert info["match_counts"]["base"]["random"] == 5
    assert info["match_results"]["base"]["random"]["win"] == 5


def test_real_tracker_takes_the_snapshot(tmp_path):
    tracking = pytest.importorskip("unstable.tracking.tracker")
    tracker = tracking.Tracker(run_name="reg-test", run_dir=str(tmp_path / "run"), use_wandb=False)
    reg = ModelRegistry(tracker=tracker, log_every=1)
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    reg.add_fixed(GEMINI)
    reg.update_ratings(["base", GEMINI], [1.0, -1.0])
    assert tracker.latest("registry/")[f"registry/{GEMINI}/mu"] == pytest.approx(reg.ratings()[GEMINI][0])
    assert tracker.get_interface_info()["registry"]["match_counts"] == {"base": {GEMINI: 1}, GEMINI: {"base": 1}}
    tracker.close()


def test_save_load_round_trip(tmp_path):
    reg = ModelRegistry(beta=3.0, draw_probability=0.1)
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    reg.add_fixed("random")
    reg.add_fixed(GEMINI, prior_mu=30.0)
    reg.update_ratings(["base", "random"], [1.0, -1.0])
    reg.update_ratings(["base", GEMINI], [0.0, 0.0])
    reg.update_ratings(["base", "base"], [1.0, -1.0])
    reg.add_checkpoint(uid="ckpt-1", path=str(tmp_path / "c1"), iteration=1)
    path = reg.save(str(tmp_path / "sub" / "registry.json"))
    assert not os.path.exists(path + ".tmp")
    with open(path) as f:
        assert json.load(f)["current"] == {"model": "ckpt-1"}  # plain JSON: each lineage's current
    loaded = ModelRegistry.load(path)
    assert loaded.state_dict() == reg.state_dict()
    assert loaded.get_current_ckpt() == "ckpt-1"
    assert (loaded.beta, loaded.draw_probability) == (3.0, 0.1)
    reg.update_ratings(["ckpt-1", "random"], [1.0, -1.0])
    loaded.update_ratings(["ckpt-1", "random"], [1.0, -1.0])
    assert loaded.ratings() == reg.ratings()


def test_registry_as_ray_actor_with_plain_sampler(ray_session, tmp_path):
    """The seed's wiring: the registry is an actor, the sampler a plain object that calls it via ``call``."""
    from unstable.samplers.model_samplers import FixedOpponentModelSampler
    from unstable.utils.calls import call

    ray = ray_session
    handle = unstable.ModelRegistry.options(name="ModelRegistry-test_registry").remote()
    try:
        ray.get(handle.add_checkpoint.remote(uid="base", path=None, iteration=0))
        ray.get(handle.add_fixed.remote(name="random"))
        sampler = FixedOpponentModelSampler(model_registry=handle, rng_seed=0)
        current = sampler.get_current_ckpt()
        assert current == PolicyRef("base", "checkpoint", None, 0, lineage="model")
        opponent = sampler.sample_opponent()
        assert opponent == PolicyRef("random", "scripted")
        call(handle, "record_game", record([current, opponent], [1.0, -1.0]))
        assert call(handle, "get_model", "base")["wins"] == 1
        ray.get(handle.save.remote(str(tmp_path / "r.json")))
        assert ModelRegistry.load(str(tmp_path / "r.json")).get_model("random")["losses"] == 1
    finally:
        ray.kill(handle)
