"""StepBuffer / EpisodeBuffer: flattening, default reward chain, eviction, batches, staleness."""

from __future__ import annotations

import math
import pickle

import pytest
from conftest import make_sample

import unstable.reward_transformations as retra
from unstable.buffers import EpisodeBuffer, StepBuffer, swap_pop, trajectory_to_steps
from unstable.records import AgentSpec, GameRecord, GameSpec, PolicyRef, TrainBatch, Turn, player_trajectories

CKPT = PolicyRef("ckpt-2", adapter_path="/ckpt/2", version=2)
SCRIPTED = PolicyRef("random", kind="scripted")


def make_turn(index: int, pid: int, *, format_ok=True, invalid=False, policy=CKPT) -> Turn:
    tokens = policy.kind == "checkpoint"
    return Turn(
        turn_index=index,
        player_id=pid,
        observation=f"obs{index}",
        prompt=f"prompt{index}",
        completion_text=f"completion{index}",
        action=f"[{index}]",
        format_ok=format_ok,
        invalid=invalid,
        policy=policy,
        sample=make_sample((100 + index, 7), (200 + index,), (-0.1 * (index + 1),), policy_version=policy.version)
        if tokens
        else None,
    )


def make_game(game_id=0, env_id="TicTacToe-v0", *, p1_policy=CKPT, collect=(True, True)) -> GameRecord:
    """Four turns; player 1 writes a badly formatted answer, then makes an invalid move and loses."""
    turns = (
        make_turn(0, 0),
        make_turn(1, 1, format_ok=False, policy=p1_policy),
        make_turn(2, 0),
        make_turn(3, 1, invalid=True, policy=p1_policy),
    )
    spec = GameSpec(
        game_id=game_id,
        env_id=env_id,
        seed=game_id,
        agents=(
            AgentSpec(0, CKPT, collect_data=collect[0]),
            AgentSpec(1, p1_policy, collect_data=collect[1]),
        ),
    )
    return GameRecord(spec, turns, {0: 1.0, 1: -1.0}, {0: {}, 1: {"invalid_move": True}})


def default_buffer(cls=StepBuffer, size=100, **kwargs):
    final, step, sampling = retra.default_transforms()
    return cls(size, None, final, step, sampling, **kwargs)


def key(step):
    return (step.game_id, step.player_id, step.turn_index)


class FakeTracker:
    def __init__(self):
        self.logged = []

    def log(self, metrics):
        self.logged.append(metrics)


# ---- flattening ----------------------------------------------------------------------------------
def test_flattening_copies_tokens_and_flags():
    p0, p1 = player_trajectories(make_game())
    steps = trajectory_to_steps(p1)
    assert [s.turn_index for s in steps] == [0, 1]
    first, last = steps
    assert (first.prompt_ids, first.completion_ids, first.completion_logprobs) == ((101, 7), (201,), (-0.2,))
    assert (first.prompt, first.completion) == ("prompt1", "completion1")
    assert (first.format_ok, first.invalid, first.is_last) == (False, False, False)
    assert (last.format_ok, last.invalid, last.is_last) == (True, True, True)
    assert all(s.reward == -1.0 and s.final_reward == -1.0 for s in steps)  # no transforms
    assert {s.policy_version for s in steps} == {2}
    assert {s.policy_version for s in trajectory_to_steps(p0, policy_version=5)} == {5}
    assert {(s.env_id, s.game_id, s.player_id) for s in steps} == {("TicTacToe-v0", 0, 1)}


def test_default_chain_known_answer():
    buffer = default_buffer()
    assert buffer.add_game(make_game(0)) == 4
    steps = {key(s): s for s in buffer._steps}
    # player 0: RAE baseline 0 -> 1.0; each turn +1.5 (format) +1 (valid) = 3.5
    assert steps[(0, 0, 0)].reward == 3.5 and steps[(0, 0, 1)].reward == 3.5
    # player 1: -1.0; turn 0 badly formatted but valid: -1 + 0 + 1 = 0;
    # turn 1 formatted but invalid: -1 + 1.5 - 1 = -0.5
    assert steps[(0, 1, 0)].reward == 0.0
    assert steps[(0, 1, 1)].reward == -0.5
    assert steps[(0, 1, 1)].step_info == {
        "raw_reward": -1.0,
        "final_after_transform": -1.0,
        "step_reward": -0.5,
    }
    # second game: the baselines moved by tau = 0.001 towards +1 / -1
    buffer.add_game(make_game(1))
    steps = {key(s): s for s in buffer._steps}
    assert steps[(1, 0, 0)].step_info["final_after_transform"] == pytest.approx(0.999)
    assert steps[(1, 1, 1)].reward == pytest.approx(-0.999 + 1.5 - 1.0)


def test_default_chain_batch_is_z_scored_per_env():
    buffer = default_buffer()
    buffer.add_game(make_game(0, "A"))
    buffer.add_game(make_game(1, "B"))
    batch = buffer.get_batch(8)
    by_key = {key(s): s for s in batch}
    # env A rewards [3.5, 3.5, 0, -0.5]: mean 1.625, centred [1.875, 1.875, -1.625, -2.125],
    # population variance (2 * 1.875**2 + 1.625**2 + 2.125**2) / 4 = 3.546875
    std = math.sqrt(3.546875)
    assert by_key[(0, 0, 0)].reward == pytest.approx(1.875 / std)
    assert by_key[(0, 1, 1)].reward == pytest.approx(-2.125 / std)
    assert by_key[(0, 1, 1)].step_info["reward_before_sampling"] == -0.5
    for env in "AB":
        assert math.fsum(s.reward for s in batch if s.env_id == env) == pytest.approx(0.0, abs=1e-12)


def test_turns_without_tokens_are_skipped_and_not_transformed():
    calls = []

    def final(reward, pid, env_id=None):
        calls.append(pid)
        return reward

    buffer = StepBuffer(10, final_reward_transformation=final)
    assert buffer.add_game(make_game(p1_policy=SCRIPTED)) == 2
    assert calls == [0]
    assert {s.player_id for s in buffer._steps} == {0}


def test_add_game_only_adds_collected_seats():
    buffer = StepBuffer(10)
    assert buffer.add_game(make_game(collect=(False, True))) == 2
    assert {s.player_id for s in buffer._steps} == {1}


def test_env_id_mismatch_is_rejected():
    traj = player_trajectories(make_game())[0]
    buffer = StepBuffer(10)
    assert buffer.add_player_trajectory(traj, "TicTacToe-v0") == 2
    with pytest.raises(ValueError, match="env_id"):
        buffer.add_player_trajectory(traj, "Other-v0")


def test_non_finite_transform_output_fails_fast():
    buffer = StepBuffer(10, step_reward_transformation=lambda traj, i, r: math.nan)
    with pytest.raises(ValueError, match="non-finite"):
        buffer.add_game(make_game())


# ---- eviction and batches ------------------------------------------------------------------------
def test_swap_pop():
    items = ["a", "b", "c", "d"]
    assert swap_pop(items, 1) == "b" and items == ["a", "d", "c"]
    assert swap_pop(items, 2) == "c" and items == ["a", "d"]


def test_eviction_keeps_size_bounded_and_is_random():
    kept_early = False
    for seed in range(10):
        buffer = StepBuffer(10, seed=seed)
        for game_id in range(7):
            buffer.add_game(make_game(game_id))
            assert buffer.size() <= 10
        assert buffer.stats() == {
            "size": 10,
            "added": 28,
            "evicted": 18,
            "dropped_stale": 0,
            "handed_out": 0,
            "cleared": 0,
            "trajectories_received": 14,
            "duplicates": 0,
        }
        kept_early |= any(s.game_id < 4 for s in buffer._steps)  # FIFO would keep only games 4-6
    assert kept_early


def test_get_batch_removes_what_it_hands_out():
    tracker = FakeTracker()
    buffer = StepBuffer(100, tracker=tracker, seed=0)
    for game_id in range(3):
        buffer.add_game(make_game(game_id))
    batch = buffer.get_batch(5)
    assert len(batch) == 5 and len({key(s) for s in batch}) == 5
    assert buffer.size() == 7
    assert not {key(s) for s in batch} & {key(s) for s in buffer._steps}
    assert buffer.stats()["handed_out"] == 5
    assert tracker.logged[-1]["buffer/size"] == 7 and tracker.logged[-1]["buffer/handed_out"] == 5
    assert len(buffer.get_batch(7)) == 7 and buffer.size() == 0


def test_get_batch_with_too_few_steps_raises_and_keeps_them():
    buffer = StepBuffer(100)
    buffer.add_game(make_game())
    with pytest.raises(ValueError, match="fewer than"):
        buffer.get_batch(5)
    assert buffer.size() == 4
    with pytest.raises(ValueError, match="batch_size"):
        buffer.get_batch(0)


def test_sampling_transform_must_keep_length():
    buffer = StepBuffer(100, sampling_reward_transformation=lambda steps: steps[:1])
    buffer.add_game(make_game())
    with pytest.raises(ValueError, match="one Step per input"):
        buffer.get_batch(2)


def test_seeded_batches_are_deterministic():
    def batches(seed):
        buffer = StepBuffer(6, seed=seed)
        for game_id in range(5):
            buffer.add_game(make_game(game_id))
        return [key(s) for s in buffer.get_batch(3)] + [key(s) for s in buffer.get_batch(3)]

    assert batches(7) == batches(7)
    assert len({tuple(batches(seed)) for seed in range(5)}) > 1


# ---- staleness, back-pressure, lifecycle ---------------------------------------------------------
def test_stale_steps_are_dropped_and_counted():
    buffer = StepBuffer(100, max_staleness=1)
    for version in range(4):
        buffer.add_game(make_game(version), policy_version=version)
    buffer.set_learner_version(3)  # keep versions >= 2
    assert buffer.stats()["dropped_stale"] == 8
    assert buffer.add_game(make_game(9), policy_version=1) == 4  # already stale on arrival
    assert buffer.stats()["dropped_stale"] == 12
    assert sorted({s.policy_version for s in buffer.get_batch(8)}) == [2, 3]
    buffer.add_game(make_game(10))  # no override: the turns' policy version 2 is still fresh
    assert buffer.size() == 4
    buffer.set_learner_version(4)
    assert buffer.size() == 0 and buffer.stats()["dropped_stale"] == 16
    with pytest.raises(ValueError, match="backwards"):
        buffer.set_learner_version(2)


def test_steps_without_a_version_are_never_stale():
    buffer = StepBuffer(100, max_staleness=0)
    buffer.set_learner_version(10)
    unversioned = PolicyRef("ext", kind="checkpoint", version=None)
    buffer.add_game(make_game(p1_policy=unversioned, collect=(False, True)))
    assert buffer.size() == 2 and buffer.stats()["dropped_stale"] == 0


def test_continue_collection_until_stop_even_when_full():
    buffer = StepBuffer(2)
    buffer.add_game(make_game())
    assert buffer.continue_collection()
    buffer.stop()
    assert not buffer.continue_collection()


def test_clear_and_stats_invariant():
    buffer = StepBuffer(5, seed=1)
    for game_id in range(3):
        buffer.add_game(make_game(game_id))
    buffer.get_batch(2)
    buffer.clear()
    stats = buffer.stats()
    assert stats["size"] == 0 and stats["cleared"] == 3
    assert (
        stats["added"]
        == stats["size"] + stats["evicted"] + stats["dropped_stale"] + stats["handed_out"] + stats["cleared"]
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_buffer_size": 0},
        {"max_buffer_size": 1.5},
        {"max_buffer_size": 10, "max_staleness": -1},
        {"max_buffer_size": 10, "tracker": object()},
        {"max_buffer_size": 10, "final_reward_transformation": 1.0},
        {"max_buffer_size": 10, "seed": "x"},
    ],
)
def test_invalid_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        StepBuffer(**kwargs)


def test_buffer_pickles():
    buffer = default_buffer(seed=3)
    buffer.add_game(make_game())
    copy = pickle.loads(pickle.dumps(buffer))
    assert [key(s) for s in copy.get_batch(4)] == [key(s) for s in buffer.get_batch(4)]


# ---- EpisodeBuffer -------------------------------------------------------------------------------
def test_episode_buffer_returns_complete_episodes():
    buffer = EpisodeBuffer(100, seed=0)
    for game_id in range(3):
        buffer.add_game(make_game(game_id))
    assert (buffer.size(), buffer.num_episodes()) == (12, 6)
    batch = buffer.get_batch(3)
    episodes = batch.by_episode()
    assert batch.episodes == ((0, 1), (2, 3))
    assert len(episodes) == 2  # two episodes of two steps reach 3
    for episode in episodes:
        assert len({(s.game_id, s.player_id) for s in episode}) == 1
        assert [s.turn_index for s in episode] == [0, 1] and episode[-1].is_last
    assert (buffer.size(), buffer.num_episodes(), buffer.stats()["handed_out"]) == (8, 4, 4)
    with pytest.raises(ValueError, match="fewer than"):
        buffer.get_batch(9)


def test_buffers_hand_out_typed_batches():
    steps, episodes = StepBuffer(100, seed=0), EpisodeBuffer(100, seed=0)
    for buffer in (steps, episodes):
        buffer.add_game(make_game())
    loose = steps.get_batch(3)
    assert isinstance(loose, TrainBatch) and loose.episodes == () and loose.by_episode() == []
    assert len(loose) == 3 and list(loose) == list(loose.steps)
    whole = episodes.get_batch(4)
    assert sorted(whole.episodes) == [(0, 1), (2, 3)]
    assert pickle.loads(pickle.dumps(whole)) == whole  # crosses Ray as a value


def test_train_batch_checks_its_episodes():
    steps = trajectory_to_steps(player_trajectories(make_game())[0])  # player 0's two turns
    assert TrainBatch.from_steps(steps[::-1], group_episodes=True).episodes == ((1, 0),)
    assert TrainBatch.from_episodes([steps]).episodes == ((0, 1),)
    with pytest.raises(ValueError, match="exactly once"):
        TrainBatch(tuple(steps), ((0,),))
    with pytest.raises(ValueError, match="whole player episodes"):
        TrainBatch(tuple(steps), ((1, 0),))  # not in turn order
    with pytest.raises(ValueError, match="whole player episodes"):
        TrainBatch.from_steps(steps[:1], group_episodes=True)  # the last turn is missing


def test_episode_buffer_evicts_whole_episodes():
    buffer = EpisodeBuffer(5, seed=0)
    for game_id in range(2):
        buffer.add_game(make_game(game_id))
    stats = buffer.stats()
    assert (stats["size"], stats["episodes"], stats["evicted"], stats["evicted_episodes"]) == (4, 2, 4, 2)
    assert all(len(ep) == 2 for ep in buffer._episodes)


def test_episode_buffer_transforms_the_whole_batch_then_regroups():
    buffer = EpisodeBuffer(100, sampling_reward_transformation=retra.NormalizeRewards(), seed=0)
    buffer.add_game(make_game())
    episodes = buffer.get_batch(4).by_episode()
    rewards = {ep[0].player_id: [s.reward for s in ep] for ep in episodes}
    assert rewards == {0: [0.0, 1.0], 1: [0.0, -1.0]}  # the batch mean is 0, not each episode's


def test_episode_buffer_puts_the_outcome_on_the_last_turn_and_keeps_per_turn_shaping():
    step = retra.ComposeStepRewardTransforms([retra.RewardForFormat(1.5), retra.PenaltyForInvalidMove(1.0, -1.0)])
    buffer = EpisodeBuffer(100, step_reward_transformation=step, seed=0)
    buffer.add_game(make_game())
    rewards = {ep[0].player_id: [s.reward for s in ep] for ep in buffer.get_batch(4).by_episode()}
    # player 0 (won, +1): shaping 2.5 per turn; player 1 (lost, -1): bad format then an invalid move.
    assert rewards == {0: [2.5, 3.5], 1: [1.0, -0.5]}
    assert sum(rewards[1]) == -1.0 + 1.0 + 0.5  # the shaped return: outcome plus each turn's shaping


def test_episode_buffer_drops_stale_episodes():
    buffer = EpisodeBuffer(100, max_staleness=0)
    buffer.add_game(make_game(0), policy_version=0)
    buffer.add_game(make_game(1), policy_version=1)
    buffer.set_learner_version(1)
    assert (buffer.size(), buffer.num_episodes(), buffer.stats()["dropped_stale"]) == (4, 2, 4)
    buffer.clear()
    assert buffer.stats()["cleared"] == 4 and buffer.num_episodes() == 0


def test_is_full_signals_back_pressure():
    buf = StepBuffer(max_buffer_size=4)
    assert not buf.is_full()
    buf.add_game(make_game())  # 2 collected seats x 2 turns
    assert buf.is_full() and buf.continue_collection()
    buf.get_batch(1)
    assert not buf.is_full()
