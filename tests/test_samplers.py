"""Env and model samplers: validation, seeded distributions, the registry calls they make."""

from __future__ import annotations

from collections import Counter

import pytest

from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.records import PolicyRef
from unstable.registry import ModelRegistry
from unstable.samplers.env_samplers import BaseEnvSampler, UniformRandomEnvSampler
from unstable.samplers.model_samplers import (
    BaseModelSampler,
    FixedOpponentModelSampler,
    LaggedModelSampler,
    MatchQualityModelSampler,
    MirrorModelSampler,
)

N = 6000

TTT = TrainEnvSpec(env_id="TicTacToe-v0-train", num_players=2, num_actors=2, prompt_template="default")
KUHN = TrainEnvSpec(env_id="KuhnPoker-v0-train", num_players=2, num_actors=1, prompt_template="default")
NIM = TrainEnvSpec(env_id="Nim-v0-train", num_players=2, num_actors=2, prompt_template="default")
EVAL_TTT = EvalEnvSpec(env_id="TicTacToe-v0-train", num_players=2, prompt_template="default")


def assert_uniform(counts: Counter, keys: list, n: int, tol: float = 0.05) -> None:
    assert set(counts) == set(keys)
    for key in keys:
        assert abs(counts[key] / n - 1 / len(keys)) < tol, counts


# ----------------------------------------------------------------- env samplers
def test_env_sampler_uniform_and_env_list():
    sampler = UniformRandomEnvSampler([TTT, KUHN, NIM], [EVAL_TTT], rng_seed=1)
    assert sampler.env_list() == "TicTacToe-v0-train,KuhnPoker-v0-train,Nim-v0-train"
    assert sampler.has_eval()
    counts = Counter(sampler.sample("train").env_id for _ in range(N))
    assert_uniform(counts, [TTT.env_id, KUHN.env_id, NIM.env_id], N)
    assert sampler.sample("eval") is EVAL_TTT
    assert sampler.update(TTT.env_id, 1.0, -1.0) is None


def test_env_sampler_is_reproducible():
    a = UniformRandomEnvSampler([TTT, KUHN, NIM], rng_seed=7)
    b = UniformRandomEnvSampler([TTT, KUHN, NIM], rng_seed=7)
    assert [a.sample().env_id for _ in range(50)] == [b.sample().env_id for _ in range(50)]


def test_env_sampler_errors():
    with pytest.raises(ValueError, match="train_env_specs is empty"):
        UniformRandomEnvSampler([])
    with pytest.raises(TypeError, match="TrainEnvSpec"):
        UniformRandomEnvSampler([EVAL_TTT])
    with pytest.raises(TypeError, match="EvalEnvSpec"):
        UniformRandomEnvSampler([TTT], [TTT])
    sampler = UniformRandomEnvSampler([TTT])
    assert not sampler.has_eval()
    with pytest.raises(ValueError, match="has_eval"):
        sampler.sample("eval")
    with pytest.raises(ValueError, match="'train' or 'eval'"):
        sampler.sample("test")
    with pytest.raises(NotImplementedError, match="_pick"):
        BaseEnvSampler([TTT]).sample()


# ----------------------------------------------------------------- model samplers
def registry_with(n_ckpts: int, fixed: tuple[str, ...] = ()) -> ModelRegistry:
    reg = ModelRegistry()
    reg.add_checkpoint(uid="base", path=None, iteration=0)
    for v in range(1, n_ckpts):
        reg.add_checkpoint(uid=f"ckpt-{v}", path=f"/ckpts/{v}", iteration=v)
    for name in fixed:
        reg.add_fixed(name)
    return reg


def test_mirror_sampler_returns_current_checkpoint():
    reg = registry_with(3)
    sampler = BaseModelSampler(reg, rng_seed=0)
    assert MirrorModelSampler is BaseModelSampler
    expected = PolicyRef(uid="ckpt-2", kind="checkpoint", adapter_path="/ckpts/2", version=2, lineage="model")
    assert sampler.get_current_ckpt() == expected
    assert sampler.sample_opponent() == expected
    base = PolicyRef("base", "checkpoint", None, 0, lineage="model")
    assert BaseModelSampler(registry_with(1)).get_current_ckpt() == base
    with pytest.raises(ValueError, match="model_registry"):
        BaseModelSampler(None)


def test_model_samplers_have_no_way_to_rate_a_game():
    """Ratings are the registry's: the scheduler sends it the games (see test_scheduler.py)."""
    for cls in (BaseModelSampler, FixedOpponentModelSampler, LaggedModelSampler, MatchQualityModelSampler):
        assert not hasattr(cls, "update"), cls


def test_fixed_sampler_uniform_over_fixed_models():
    names = ("random", "google/gemini-2.0-flash-lite-001", "openai/gpt-4o-mini")
    sampler = FixedOpponentModelSampler(registry_with(3, fixed=names), rng_seed=0)
    refs = [sampler.sample_opponent() for _ in range(N)]
    assert_uniform(Counter(r.uid for r in refs), list(names), N)
    kinds = {r.uid: r.kind for r in refs}
    assert kinds == {"random": "scripted", names[1]: "api", names[2]: "api"}
    with pytest.raises(ValueError, match="add_fixed"):
        FixedOpponentModelSampler(registry_with(2), rng_seed=0).sample_opponent()


def test_lagged_sampler_picks_exactly_lag_back_and_clamps():
    reg = registry_with(6)  # base, ckpt-1 .. ckpt-5 (current)
    three_back = PolicyRef("ckpt-3", "checkpoint", "/ckpts/3", 3, lineage="model")
    assert LaggedModelSampler(reg, lag=2).sample_opponent() == three_back
    assert LaggedModelSampler(reg, lag=0).sample_opponent().uid == "ckpt-5"
    assert LaggedModelSampler(reg, lag=50).sample_opponent().uid == "base"
    reg.add_checkpoint(uid="ckpt-6", path="/ckpts/6", iteration=6)
    assert LaggedModelSampler(reg, lag=2).sample_opponent().uid == "ckpt-4"


def test_lagged_window_covers_exactly_the_last_n_older_checkpoints():
    sampler = LaggedModelSampler(registry_with(8, fixed=("random",)), window=3, rng_seed=0)
    counts = Counter(sampler.sample_opponent().uid for _ in range(N))
    assert_uniform(counts, ["ckpt-4", "ckpt-5", "ckpt-6"], N)
    wide = LaggedModelSampler(registry_with(3), window=10, rng_seed=0)
    assert {wide.sample_opponent().uid for _ in range(200)} == {"base", "ckpt-1"}
    alone = LaggedModelSampler(registry_with(1), window=3, rng_seed=0)
    assert alone.sample_opponent().uid == "base"  # only the current checkpoint: mirror


def test_lagged_sampler_arguments():
    reg = registry_with(2)
    with pytest.raises(ValueError, match="exactly one"):
        LaggedModelSampler(reg)
    with pytest.raises(ValueError, match="exactly one"):
        LaggedModelSampler(reg, lag=1, window=2)
    with pytest.raises(ValueError, match="lag"):
        LaggedModelSampler(reg, lag=-1)
    with pytest.raises(ValueError, match="window"):
        LaggedModelSampler(reg, window=0)
    with pytest.raises(RuntimeError, match="add_checkpoint"):
        LaggedModelSampler(ModelRegistry(), lag=1).sample_opponent()


def rated_registry() -> ModelRegistry:
    """Current checkpoint at mu 25; a near rival at 26, a far one at 40, a weak fixed model at 10."""
    reg = registry_with(1)
    reg.add_fixed("near", prior_mu=26.0)
    reg.add_fixed("far", prior_mu=40.0)
    reg.add_fixed("random", prior_mu=10.0)
    return reg


def test_match_quality_sampler_prefers_close_ratings():
    reg = rated_registry()
    sampler = MatchQualityModelSampler(reg, temperature=0.1, rng_seed=0)
    probs = sampler.probabilities()
    assert set(probs) == {"near", "far", "random"}
    assert sum(probs.values()) == pytest.approx(1.0)
    assert probs["near"] > probs["random"] > 0 and probs["near"] > probs["far"] > 0
    quality = {u: reg.match_quality("base", u) for u in probs}
    for u in probs:  # p ∝ exp(q / T)
        assert probs[u] / probs["near"] == pytest.approx(2.718281828 ** ((quality[u] - quality["near"]) / 0.1))
    counts = Counter(sampler.sample_opponent().uid for _ in range(N))
    for u in probs:
        assert abs(counts[u] / N - probs[u]) < 0.03
    assert counts.most_common(1)[0][0] == "near"


def test_match_quality_sampler_temperature_and_fixed_filter():
    reg = rated_registry()
    hot = MatchQualityModelSampler(reg, temperature=1000.0).probabilities()
    assert all(p == pytest.approx(1 / 3, abs=1e-3) for p in hot.values())
    reg.add_checkpoint(uid="ckpt-1", path="/ckpts/1", iteration=1)
    no_fixed = MatchQualityModelSampler(reg, include_fixed=False, rng_seed=0)
    assert no_fixed.probabilities() == {"base": 1.0}
    assert no_fixed.sample_opponent().uid == "base"
    alone = MatchQualityModelSampler(registry_with(1), rng_seed=0)
    assert alone.sample_opponent().uid == "base"  # nobody else: mirror
    with pytest.raises(ValueError, match="temperature"):
        MatchQualityModelSampler(reg, temperature=0.0)
