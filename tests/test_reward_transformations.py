"""Known-answer tests for the three reward-transform pipelines."""

from __future__ import annotations

import json
import math

import pytest
from conftest import make_sample

import unstable.reward_transformations as retra
from unstable.records import PlayerTrajectory, PolicyRef, Step, Turn


def make_turn(index: int, *, format_ok: bool = True, invalid: bool = False) -> Turn:
    return Turn(
        turn_index=index,
        player_id=0,
        observation="obs",
        prompt="p",
        completion_text="c",
        action="[a]",
        format_ok=format_ok,
        invalid=invalid,
        policy=PolicyRef("ckpt-1", version=1),
        sample=make_sample((1, 2), (3,), (-0.5,), policy_version=1),
    )


def make_traj(*turns: Turn) -> PlayerTrajectory:
    return PlayerTrajectory(
        game_id=0,
        env_id="E",
        seed=0,
        player_id=0,
        turns=turns,
        final_reward=1.0,
        outcome="win",
        num_players=2,
        game_length=2 * len(turns),
    )


def make_step(reward: float, env_id: str = "E", turn_index: int = 0) -> Step:
    return Step(
        env_id=env_id,
        game_id=0,
        player_id=0,
        turn_index=turn_index,
        sample=make_sample((1,), (2,), (-0.1,), policy_version=0),
        reward=reward,
        final_reward=reward,
        policy_version=0,
        format_ok=True,
        invalid=False,
        is_last=False,
        step_info={"raw_reward": reward},
    )


# ---- final ---------------------------------------------------------------------------------------
def test_ema_update_known_answer():
    assert retra.ema_update(0.0, 1.0, 0.5) == 0.5
    assert retra.ema_update(2.0, 0.0, 0.25) == 1.5


def test_role_advantage_reads_baseline_before_update():
    rae = retra.RoleAdvantageFormatter(tau=0.5)
    advantages, baselines = [], []
    for reward in [1.0, 1.0, -1.0]:
        advantages.append(rae(reward, 0))
        baselines.append(rae.baselines[0])
    assert advantages == [1.0, 0.5, -1.75]
    assert baselines == [0.5, 0.75, -0.125]


def test_role_advantage_is_per_pid_and_shared_across_envs():
    rae = retra.RoleAdvantageFormatter(role_adv=0.5, tau=0.5)
    assert rae(1.0, 0, "A") == 0.5  # 1 - 0.5; baseline -> 0.75
    assert rae(1.0, 1, "A") == 0.5  # pid 1 has its own baseline, starting at role_adv
    assert rae(1.0, 0, "B") == 0.25  # same pid in another env shares the baseline 0.75
    assert rae(-1.0, 0) == -1.875  # env_id is optional


def test_role_advantage_by_env_keeps_one_baseline_per_env_and_pid():
    rae = retra.RoleAdvantageByEnvFormatter(tau=0.5)
    assert rae(1.0, 0, "A") == 1.0
    assert rae(1.0, 0, "A") == 0.5
    assert rae(1.0, 0, "B") == 1.0
    assert rae(-1.0, 1, "A") == -1.0
    assert rae.baselines == {("A", 0): 0.75, ("B", 0): 0.5, ("A", 1): -0.5}
    assert retra.RoleAdvantageByEnvFormatter(default_role_adv=0.25, tau=1.0)(1.0, 0, "A") == 0.75


def test_role_advantage_by_env_needs_env_id():
    with pytest.raises(ValueError, match="env_id"):
        retra.RoleAdvantageByEnvFormatter()(1.0, 0)


@pytest.mark.parametrize("reward", [math.nan, math.inf])
def test_role_advantage_rejects_non_finite_rewards(reward):
    rae = retra.RoleAdvantageFormatter()
    with pytest.raises(ValueError, match="finite"):
        rae(reward, 0)
    assert rae.baselines == {}


def test_compose_final_applies_in_order():
    def double(r, pid, env_id=None):
        return 2 * r

    def add_one(r, pid, env_id=None):
        return r + 1

    assert retra.ComposeFinalRewardTransforms([double, add_one])(3.0, 0, "E") == 7.0
    assert retra.ComposeFinalRewardTransforms([add_one, double])(3.0, 0, "E") == 8.0
    assert retra.ComposeFinalRewardTransforms([])(3.0, 0) == 3.0


def test_role_baselines_survive_a_json_round_trip_into_fresh_transforms():
    """A resumed run restarted the RAE baselines from zero: they are now saved in run_state.json."""
    final = retra.default_transforms()[0]
    by_pid = retra.RoleAdvantageFormatter(tau=0.5)
    for reward, pid, env in [(1.0, 0, "A"), (-1.0, 1, "A"), (1.0, 0, "B")]:
        final(reward, pid, env)
        by_pid(reward, pid, env)
    state = json.loads(json.dumps(final.state_dict()))
    again = retra.default_transforms()[0]
    again.load_state_dict(state)
    assert again.transforms[0].baselines == final.transforms[0].baselines == {
        ("A", 0): 0.001, ("A", 1): -0.001, ("B", 0): 0.001}
    assert again(1.0, 0, "A") == final(1.0, 0, "A") == 0.999
    other = retra.RoleAdvantageFormatter(tau=0.5)
    other.load_state_dict(json.loads(json.dumps(by_pid.state_dict())))
    assert other.baselines == by_pid.baselines == {0: 0.75, 1: -0.5}
    # a snapshot of other transforms does not load silently
    with pytest.raises(ValueError, match="RoleAdvantageFormatter"):
        retra.RoleAdvantageByEnvFormatter().load_state_dict(by_pid.state_dict())
    with pytest.raises(ValueError, match="holds 1 final reward transforms, this one 2"):
        retra.ComposeFinalRewardTransforms([by_pid, by_pid]).load_state_dict(state)


# ---- step ----------------------------------------------------------------------------------------
def test_reward_for_format():
    traj = make_traj(make_turn(0, format_ok=True), make_turn(1, format_ok=False))
    t = retra.RewardForFormat(reward=1.5, penalty=-0.5)
    assert t(traj, 0, 0.25) == 1.75
    assert t(traj, 1, 0.25) == -0.25
    assert retra.RewardForFormat()(traj, 1, 0.25) == 0.25


def test_penalty_for_invalid_move():
    traj = make_traj(make_turn(0, invalid=False), make_turn(1, invalid=True))
    t = retra.PenaltyForInvalidMove(reward=1.0, penalty=-1.0)
    assert t(traj, 0, 0.5) == 1.5
    assert t(traj, 1, 0.5) == -0.5
    assert retra.PenaltyForInvalidMove(penalty=-2.0)(traj, 0, 0.5) == 0.5


def test_compose_step_applies_in_order():
    traj = make_traj(make_turn(0, format_ok=True, invalid=True))
    chain = retra.ComposeStepRewardTransforms(
        [retra.RewardForFormat(1.5), retra.PenaltyForInvalidMove(1.0, -1.0)]
    )
    assert chain(traj, 0, 0.25) == 0.75  # 0.25 + 1.5 - 1

    def double(traj, i, r):
        return 2 * r

    assert retra.ComposeStepRewardTransforms([retra.RewardForFormat(1.0), double])(traj, 0, 1.0) == 4.0
    assert retra.ComposeStepRewardTransforms([double, retra.RewardForFormat(1.0)])(traj, 0, 1.0) == 3.0


# ---- sampling ------------------------------------------------------------------------------------
def test_normalize_known_answers():
    assert retra.normalize([1.0, 2.0, 3.0, 6.0]) == [-2.0, -1.0, 0.0, 3.0]
    # population std of [1, 3] is 1 (the sample std would be sqrt(2) and give +-0.707)
    assert retra.normalize([1.0, 3.0], z_score=True) == pytest.approx([-1.0, 1.0], abs=1e-7)
    # [0, 0, 6]: mean 2, centred [-2, -2, 4], population variance 24 / 3 = 8
    expected = [-2 / math.sqrt(8), -2 / math.sqrt(8), 4 / math.sqrt(8)]
    assert retra.normalize([0.0, 0.0, 6.0], z_score=True) == pytest.approx(expected)


@pytest.mark.parametrize("values", [[0.1, 0.1, 0.1], [5.0], [-2.0, -2.0]])
@pytest.mark.parametrize("z_score", [False, True])
def test_normalize_equal_values_give_exact_zeros(values, z_score):
    assert retra.normalize(values, z_score) == [0.0] * len(values)
    assert retra.normalize([], z_score) == []


def test_normalize_rewards_on_steps_keeps_raw_value():
    steps = [make_step(1.0), make_step(3.0, "F")]
    out = retra.NormalizeRewards(z_score=True)(steps)
    assert [s.reward for s in out] == pytest.approx([-1.0, 1.0], abs=1e-7)
    assert [s.step_info["reward_before_sampling"] for s in out] == [1.0, 3.0]
    assert out[0].step_info["raw_reward"] == 1.0
    assert steps[0].reward == 1.0 and "reward_before_sampling" not in steps[0].step_info  # inputs untouched


def test_normalize_rewards_by_env_buckets_and_keeps_order():
    steps = [make_step(1.0, "A", 0), make_step(5.0, "B", 1), make_step(3.0, "A", 2), make_step(5.0, "B", 3)]
    out = retra.NormalizeRewardsByEnv()(steps)
    assert [s.turn_index for s in out] == [0, 1, 2, 3]
    assert [s.reward for s in out] == [-1.0, 0.0, 1.0, 0.0]
    z = retra.NormalizeRewardsByEnv(z_score=True)(steps)
    assert [s.reward for s in z] == pytest.approx([-1.0, 0.0, 1.0, 0.0], abs=1e-7)
    assert not any(math.isnan(s.reward) for s in z)


def test_compose_sampling_applies_in_order_and_keeps_first_raw_value():
    def double(steps):
        return [retra.with_reward(s, 2 * s.reward) for s in steps]

    steps = [make_step(1.0), make_step(3.0)]
    out = retra.ComposeSamplingRewardTransforms([retra.NormalizeRewards(), double])(steps)
    assert [s.reward for s in out] == [-2.0, 2.0]
    assert [s.step_info["reward_before_sampling"] for s in out] == [1.0, 3.0]
    out = retra.ComposeSamplingRewardTransforms([double, retra.NormalizeRewards()])(steps)
    assert [s.reward for s in out] == [-2.0, 2.0]


# ---- construction --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: retra.RoleAdvantageFormatter(tau=0.0),
        lambda: retra.RoleAdvantageFormatter(tau=1.5),
        lambda: retra.RoleAdvantageFormatter(tau=math.nan),
        lambda: retra.RoleAdvantageFormatter(role_adv=math.inf),
        lambda: retra.RoleAdvantageByEnvFormatter(tau=-0.1),
        lambda: retra.RoleAdvantageByEnvFormatter(default_role_adv="0"),
        lambda: retra.RewardForFormat(reward=math.nan),
        lambda: retra.RewardForFormat(reward="1.5"),
        lambda: retra.PenaltyForInvalidMove(penalty=-math.inf),
        lambda: retra.NormalizeRewards(z_score=1),
        lambda: retra.NormalizeRewardsByEnv(z_score="yes"),
        lambda: retra.ComposeFinalRewardTransforms([1.0]),
        lambda: retra.ComposeStepRewardTransforms(retra.RewardForFormat()),
        lambda: retra.ComposeSamplingRewardTransforms("NormalizeRewards"),
    ],
)
def test_invalid_arguments_are_rejected(make):
    with pytest.raises(ValueError):
        make()


def test_tau_one_is_allowed():
    rae = retra.RoleAdvantageFormatter(tau=1)
    assert rae(1.0, 0) == 1.0
    assert rae(3.0, 0) == 2.0


def test_default_transforms_match_the_seed_chain():
    final, step, sampling = retra.default_transforms()
    (rae,) = final.transforms
    assert isinstance(rae, retra.RoleAdvantageByEnvFormatter) and (rae.initial, rae.tau) == (0.0, 0.001)
    fmt, inv = step.transforms
    assert (type(fmt), fmt.reward, fmt.penalty) == (retra.RewardForFormat, 1.5, 0.0)
    assert (type(inv), inv.reward, inv.penalty) == (retra.PenaltyForInvalidMove, 1.0, -1.0)
    (norm,) = sampling.transforms
    assert isinstance(norm, retra.NormalizeRewardsByEnv) and norm.z_score is True
    assert retra.default_transforms()[0].transforms[0] is not rae  # fresh state each call


def test_every_builtin_has_a_docstring():
    for name in retra.__all__:
        assert getattr(retra, name).__doc__, name
