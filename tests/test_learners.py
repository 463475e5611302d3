"""Learners on a tiny random Qwen3 (CPU, fp32): what changes, what is saved, and edge cases."""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import VOCAB, make_sample

from unstable.algorithms import masked_sum, token_logprobs
from unstable.learners import A2CLearner, REINFORCELearner
from unstable.learners.batching import collate
from unstable.learners.checkpoints import atomic_save, list_checkpoints, versions_to_keep
from unstable.records import Step, TrainBatch, episode_indices

FAST = {"gradient_checkpointing": False, "activation_checkpointing": False, "seed": 0, "lora_cfg": {"lora_rank": 4}}


def make_step(game=0, turn=0, reward=1.0, prompt=(3, 4, 5), completion=(6, 7), last=True, player=0, env="E"):
    return Step(
        env_id=env,
        game_id=game,
        player_id=player,
        turn_index=turn,
        sample=make_sample(prompt, completion, (-1.0,) * len(completion), policy_version=0),
        reward=reward,
        final_reward=reward,
        policy_version=0,
        format_ok=True,
        invalid=False,
        is_last=last,
    )


def episodes(num_games=4, turns=2, seed=0, reward=None) -> list[Step]:
    """Whole two-turn episodes with random prompts/completions of varied lengths."""
    rng = random.Random(seed)
    out = []
    for g in range(num_games):
        for t in range(turns):
            ids = [rng.randrange(VOCAB) for _ in range(rng.randint(4, 12))]
            out.append(
                make_step(
                    g,
                    t,
                    rng.choice([-1.0, 1.0]) if reward is None else reward,
                    ids,
                    [rng.randrange(VOCAB) for _ in range(rng.randint(1, 6))],
                    last=t == turns - 1,
                )
            )
    return out


def batch(steps) -> TrainBatch:
    """What an episode buffer would hand out for these (whole-episode) steps, in their order."""
    return TrainBatch.from_steps(steps, group_episodes=True)


def learner(cls, model_dir, tmp_path, **kwargs):
    opts = {**FAST, "batch_size": 8, "mini_batch_size": 8, "learning_rate": 1e-3, **kwargs}
    return cls(model_dir, output_dir=str(tmp_path / f"out-{len(list(tmp_path.iterdir()))}"), **opts)


def completion_logp(lrn, steps) -> torch.Tensor:
    """Fresh forward pass: summed log-prob of each step's sampled completion."""
    lrn.model.eval()
    batch = collate(steps, None, 0)
    with torch.no_grad():
        logits = lrn.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    lrn.model.train()
    return masked_sum(token_logprobs(logits, batch.input_ids), batch.completion_mask[:, 1:])


def test_collate_uses_sampled_ids_pads_right_and_truncates_the_end():
    steps = [make_step(prompt=(1, 2, 3), completion=(4, 5)), make_step(prompt=(6,), completion=(7, 8, 9))]
    full = collate(steps, None, pad_id=0)
    assert full.input_ids.tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]]
    assert full.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert full.completion_mask.int().tolist() == [[0, 0, 0, 1, 1], [0, 1, 1, 1, 0]]
    cut = collate(steps, 3, pad_id=0)
    assert cut.input_ids.tolist() == [[1, 2, 3], [6, 7, 8]] and cut.num_truncated == 2
    assert cut.completion_mask.int().tolist() == [[0, 0, 0], [0, 1, 1]]


def test_first_update_moves_lora_b_then_lora_a_never_base(model_dir, tmp_path):
    lrn = learner(REINFORCELearner, model_dir, tmp_path)
    assert lrn.device.type == "cpu" and lrn.dtype == torch.float32
    before = {n: p.detach().clone() for n, p in lrn.model.named_parameters()}
    lrn.update(batch(episodes()))
    after1 = {n: p.detach().clone() for n, p in lrn.model.named_parameters()}
    lrn.update(batch(episodes(seed=1)))
    names = list(before)
    lora_a = [n for n in names if ".lora_A." in n]
    lora_b = [n for n in names if ".lora_B." in n]
    assert len(lora_a) == len(lora_b) == 2 * 7  # 2 layers x q,k,v,o,gate,up,down
    # lora_B starts at zero, so dL/dA = 0 on the first step: only B moves (weight decay is 0)
    assert all(not torch.equal(before[n], after1[n]) for n in lora_b)
    assert all(torch.equal(before[n], after1[n]) for n in lora_a)
    assert all(not torch.equal(after1[n], p) for n, p in lrn.model.named_parameters() if n in lora_a)
    assert all(torch.equal(before[n], p) for n, p in lrn.model.named_parameters() if "lora_" not in n)


def test_adam_eps_reaches_every_optimiser_and_damps_small_gradients(model_dir, tmp_path):
    """Adam's first step moves each weight by about lr whatever its gradient's size; an eps far above
    the gradients makes the step about lr * |g| / eps (torch.optim.AdamW's update)."""
    def first_step(lrn):
        before = {n: p.detach().clone() for n, p in lrn.model.named_parameters() if ".lora_B." in n}
        lrn.update(batch(episodes()))
        moved = dict(lrn.model.named_parameters())
        return max((moved[n] - p).abs().max().item() for n, p in before.items())

    assert first_step(learner(A2CLearner, model_dir, tmp_path)) == pytest.approx(1e-3, rel=0.01)
    damped = learner(A2CLearner, model_dir, tmp_path, adam_eps=0.1)
    assert [g["eps"] for opt in damped._optimizers() for g in opt.param_groups] == [0.1, 0.1]  # policy, critic
    assert first_step(damped) < 1e-4


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_advantage_sign_moves_sampled_logprob(model_dir, tmp_path, sign):
    lrn = learner(REINFORCELearner, model_dir, tmp_path)
    steps = [dataclasses.replace(s, reward=sign) for s in episodes()]
    start = completion_logp(lrn, steps)
    for _ in range(2):
        lrn.update(batch(steps))
    delta = completion_logp(lrn, steps) - start
    assert (sign * delta > 0).all(), delta


def test_update_result_metrics_and_checkpoint(model_dir, tmp_path):
    lrn = learner(REINFORCELearner, model_dir, tmp_path, max_train_len=10)
    result = lrn.update(batch(episodes()))
    assert result.version == 1 and not result.skipped
    assert result.adapter_path == str(tmp_path / "out-0" / "ckpt-1")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(result.adapter_path))
    for key in ("loss", "grad_norm", "tokens", "seq_logp_mean", "lr", "pct_truncated", "version"):
        assert f"train/{key}" in result.metrics
    assert 0 < result.metrics["train/pct_truncated"] < 100
    assert result.metrics["train/grad_norm"] > 0 and result.metrics["train/skipped_nonfinite"] == 0


def test_saved_adapter_reloads_in_fresh_process(model_dir, tmp_path):
    lrn = learner(REINFORCELearner, model_dir, tmp_path, learning_rate=1e-2)
    path = lrn.update(batch(episodes())).adapter_path
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    lrn.model.eval()
    with torch.no_grad():
        expected = lrn.model(input_ids=ids).logits
        with lrn.model.disable_adapter():
            base = lrn.model(input_ids=ids).logits
    assert not torch.allclose(expected, base)  # the adapter really changes the model
    script = textwrap.dedent("""
        import sys, torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sys.argv[1]), sys.argv[2]).eval()
        with torch.no_grad():
            torch.save(model(input_ids=torch.tensor([[1, 5, 9, 13, 17, 21]])).logits, sys.argv[3])
    """)
    out = tmp_path / "logits.pt"
    subprocess.run([sys.executable, "-c", script, model_dir, path, str(out)], check=True, timeout=120)
    torch.testing.assert_close(torch.load(out), expected)


@pytest.mark.parametrize("cls", [REINFORCELearner, A2CLearner])
def test_gradient_accumulation_equals_full_batch(model_dir, tmp_path, cls):
    lrn = learner(cls, model_dir, tmp_path)
    steps = episodes(seed=3)
    lrn.update(batch(steps))  # make lora_B non-zero so every LoRA weight has a gradient
    grads = {}
    for mini in (1, 2, 8):
        lrn.config = dataclasses.replace(lrn.config, mini_batch_size=mini)
        lrn._zero_grad()
        lrn._update(batch(steps))
        params = lrn.policy_params + getattr(lrn, "critic_params", [])
        grads[mini] = [p.grad.clone() for p in params]
    for mini in (1, 2):
        for g_full, g_acc in zip(grads[8], grads[mini], strict=True):
            scale = g_full.abs().max().item()
            assert scale > 0
            torch.testing.assert_close(g_acc, g_full, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("cls", [REINFORCELearner, A2CLearner])
def test_checkpointing_does_not_change_gradients(model_dir, tmp_path, cls):
    """Per-layer and log-prob-head recomputation give the same gradients (adapter switching included)."""
    grads = []
    for ckpt in (False, True):
        lrn = learner(cls, model_dir, tmp_path, gradient_checkpointing=ckpt, activation_checkpointing=ckpt)
        assert lrn.model.get_base_model().is_gradient_checkpointing == ckpt
        lrn.model.train()  # as update() does; HF only checkpoints in training mode
        torch.manual_seed(7)
        with torch.no_grad():
            for name, param in lrn.model.named_parameters():
                if ".lora_B." in name:
                    param.normal_(std=0.1)
        lrn._update(batch(episodes(seed=5)))
        grads.append([p.grad.clone() for p in lrn.policy_params + getattr(lrn, "critic_params", [])])
    for g_plain, g_ckpt in zip(*grads, strict=True):
        torch.testing.assert_close(g_ckpt, g_plain, rtol=1e-4, atol=1e-5 * g_plain.abs().max().item() + 1e-12)


@pytest.mark.parametrize("cls", [REINFORCELearner, A2CLearner])
def test_equal_rewards_give_finite_update(model_dir, tmp_path, cls):
    result = learner(cls, model_dir, tmp_path).update(batch(episodes(reward=1.0)))
    assert not result.skipped and all(torch.isfinite(torch.tensor(v)) for v in result.metrics.values())


@pytest.mark.parametrize("cls", [REINFORCELearner, A2CLearner])
def test_nan_reward_is_skipped_and_counted(model_dir, tmp_path, cls):
    lrn = learner(cls, model_dir, tmp_path)
    steps = episodes()
    steps[3] = dataclasses.replace(steps[3], reward=float("nan"))
    before = [p.detach().clone() for p in lrn.policy_params]
    result = lrn.update(batch(steps))
    assert result.skipped and result.version == 0 and result.adapter_path is None
    assert result.metrics["train/skipped_nonfinite"] == 1 and result.metrics["train/skipped_total"] == 1
    assert list_checkpoints(lrn.config.output_dir) == {}
    assert all(torch.equal(b, p) and p.grad is None for b, p in zip(before, lrn.policy_params, strict=True))
    assert lrn.update(batch(episodes())).version == 1


def test_retention_keeps_last_n_and_every_kth_without_temp_dirs(model_dir, tmp_path):
    assert versions_to_keep(range(1, 8), 2, 3) == {3, 6, 7}
    assert versions_to_keep(range(1, 8), None, 3) == set(range(1, 8))
    assert versions_to_keep([1, 2], 3, None) == {1, 2}
    lrn = learner(REINFORCELearner, model_dir, tmp_path, keep_last=2, keep_every=3)
    steps = episodes(num_games=1)
    for _ in range(7):
        lrn.update(batch(steps))
    assert sorted(os.listdir(lrn.config.output_dir)) == ["ckpt-3", "ckpt-6", "ckpt-7"]


def test_atomic_save_cleans_up_on_failure_and_refuses_overwrite(tmp_path):
    def broken(directory):
        (directory / "half.bin").write_bytes(b"x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_save(tmp_path / "ckpt-1", broken)
    assert os.listdir(tmp_path) == []
    atomic_save(tmp_path / "ckpt-1", lambda d: (d / "ok").write_text("1"))
    with pytest.raises(FileExistsError):
        atomic_save(tmp_path / "ckpt-1", lambda d: None)
    assert os.listdir(tmp_path) == ["ckpt-1"]


def test_a2c_value_reads_last_prompt_token(model_dir, tmp_path):
    lrn = learner(A2CLearner, model_dir, tmp_path)
    a, b = make_step(prompt=(5, 1, 2, 3)), make_step(prompt=(5, 9, 8, 7), completion=(1, 2, 3, 4))
    with torch.no_grad(), lrn._adapter("critic"):
        values = lrn.values([a, b, make_step(prompt=(5, 1, 2, 3), completion=(9,))])
    assert values[0] != values[1]  # same first token, different observation
    assert values[0] == values[2]  # the completion does not enter V(s)


def test_a2c_gae_per_episode(model_dir, tmp_path):
    lrn = learner(A2CLearner, model_dir, tmp_path)
    steps = episodes(num_games=3, turns=3)
    random.Random(0).shuffle(steps)
    adv, ret, values = lrn.advantages(batch(steps))
    for i, step in enumerate(steps):  # gamma = lambda = 1: reward-to-go within the episode minus V
        to_go = sum(s.reward for s in steps if s.game_id == step.game_id and s.turn_index >= step.turn_index)
        assert ret[i].item() == pytest.approx(to_go, abs=1e-6)
        assert adv[i].item() == pytest.approx(to_go - values[i].item(), abs=1e-6)


def test_a2c_needs_whole_episodes():
    with pytest.raises(ValueError, match="whole player episodes"):
        episode_indices([make_step(turn=0, last=False), make_step(turn=2, last=True)])
    with pytest.raises(ValueError, match="whole player episodes"):
        episode_indices([make_step(turn=0, last=False)])
    assert episode_indices([make_step(turn=1, last=True), make_step(player=1), make_step(turn=0, last=False)]) == [
        [2, 0],
        [1],
    ]


def test_update_takes_a_typed_batch_and_a2c_its_episodes(model_dir, tmp_path):
    with pytest.raises(TypeError, match="TrainBatch"):
        learner(REINFORCELearner, model_dir, tmp_path).update(episodes())
    with pytest.raises(ValueError, match="whole player episodes"):
        learner(A2CLearner, model_dir, tmp_path).update(TrainBatch.from_steps(episodes()))  # loose steps
    assert A2CLearner.needs_episodes and not REINFORCELearner.needs_episodes


def test_a2c_checkpoint_restores_policy_and_critic(model_dir, tmp_path):
    lrn = learner(A2CLearner, model_dir, tmp_path)
    path = lrn.update(batch(episodes())).adapter_path
    assert {"adapter_config.json", "adapter_model.safetensors", "value_head.safetensors"} <= set(
        os.listdir(os.path.join(path, "critic"))
    )
    resumed = learner(A2CLearner, model_dir, tmp_path, initial_lora_path=path, initial_version=1)
    probe = episodes(num_games=2)
    torch.testing.assert_close(completion_logp(resumed, probe), completion_logp(lrn, probe))
    torch.testing.assert_close(resumed._old_values(probe), lrn._old_values(probe))
    assert resumed.version == 1 and resumed.update(batch(probe)).adapter_path.endswith("ckpt-2")


def test_config_validation(model_dir, tmp_path):
    with pytest.raises(ValueError, match="multiple of mini_batch_size"):
        REINFORCELearner(model_dir, batch_size=10, mini_batch_size=4)
    with pytest.raises(ValueError, match="unknown lora_cfg keys"):
        REINFORCELearner(model_dir, lora_cfg={"rank": 4})
    with pytest.raises(ValueError, match="use_trainer_cache"):
        REINFORCELearner(model_dir, use_trainer_cache=True)
    with pytest.raises(ValueError, match="gamma"):
        learner(A2CLearner, model_dir, tmp_path).initialize_algorithm(gamma=1.5)
    (tmp_path / "used" / "ckpt-4").mkdir(parents=True)
    with pytest.raises(ValueError, match="already holds ckpt-4"):
        REINFORCELearner(model_dir, output_dir=str(tmp_path / "used"), **FAST)


class FakeBuffer:
    def __init__(self, batches):
        self.batches, self.polls, self.versions = list(batches), 0, []

    def size(self):
        self.polls += 1
        return 0 if self.polls == 1 else 10**6  # empty on the first poll: the learner must wait

    def get_batch(self, n):
        return self.batches.pop(0)

    def set_learner_version(self, v):
        self.versions.append(v)


class Recorder:
    def __init__(self):
        self.calls = []

    def log(self, metrics):
        self.calls.append(metrics)

    def add_checkpoint(self, **kwargs):
        self.calls.append(kwargs)


def test_train_loop_with_episode_batches_and_hooks(model_dir, tmp_path):
    eps = episodes()
    nested = TrainBatch.from_episodes([eps[i : i + 2] for i in range(0, len(eps), 2)])  # as an EpisodeBuffer does
    bad = batch([dataclasses.replace(s, reward=float("nan")) for s in eps])
    buffer, tracker, registry = FakeBuffer([nested, bad, nested]), Recorder(), Recorder()
    lrn = learner(
        A2CLearner, model_dir, tmp_path, poll_interval_s=0.01, buffer=buffer, tracker=tracker, model_registry=registry
    )
    results = lrn.train(2)
    assert [r.version for r in results] == [1, 2] and buffer.versions == [0, 1, 2]
    assert [c["uid"] for c in registry.calls] == ["ckpt-1", "ckpt-2"]
    assert [c["train/skipped_nonfinite"] for c in tracker.calls] == [0, 1, 0]
    assert buffer.polls >= 2


def test_run_training_takes_its_collaborators_explicitly(model_dir, tmp_path):
    """The loop, not the learner, knows the buffer, registry, tracker and checkpoint hook."""
    from unstable.learners import run_training

    lrn = learner(REINFORCELearner, model_dir, tmp_path, poll_interval_s=0.01)
    assert lrn.buffer is None and lrn.tracker is None and lrn.model_registry is None
    buffer, tracker, registry, published = FakeBuffer([batch(episodes())] * 2), Recorder(), Recorder(), []
    results = run_training(lrn, 2, buffer=buffer, registry=registry, tracker=tracker, on_checkpoint=published.append)
    assert [r.version for r in results] == [1, 2] == published and buffer.versions == [0, 1, 2]
    assert [c["uid"] for c in registry.calls] == ["ckpt-1", "ckpt-2"] and len(tracker.calls) == 2
    with pytest.raises(TypeError, match="TrainBatch"):
        run_training(lrn, 1, buffer=FakeBuffer([episodes()]))  # a buffer handing out a plain list


def test_linear_lr_schedule_decays_to_zero_over_the_trained_steps(model_dir, tmp_path):
    eps = episodes()
    buffer = FakeBuffer([batch(eps)] * 4)
    lrn = learner(REINFORCELearner, model_dir, tmp_path, poll_interval_s=0.01, buffer=buffer, lr_schedule="linear",
                  learning_rate=1e-3)
    results = lrn.train(4)
    assert [r.metrics["train/lr"] for r in results] == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
    # the schedule ends at 0 after the last step train() was asked for
    assert lrn.current_lr() == 0.0 and lrn.last_version == 4
    constant = learner(REINFORCELearner, model_dir, tmp_path, learning_rate=1e-3)
    assert constant.update(batch(eps)).metrics["train/lr"] == 1e-3
    with pytest.raises(ValueError, match="lr_schedule"):
        learner(REINFORCELearner, model_dir, tmp_path, lr_schedule="cosine")


def test_train_on_an_empty_buffer_times_out_with_what_to_check(model_dir, tmp_path):
    """No data ever arrives (collection died or is stuck): train() stops instead of waiting forever."""
    from unstable.buffers import StepBuffer
    from unstable.learners.config import LearnerConfig

    assert LearnerConfig(model_name="m").wait_timeout_s == 1800.0  # finite by default, not None
    lrn = learner(REINFORCELearner, model_dir, tmp_path, buffer=StepBuffer(64), poll_interval_s=0.01,
                  wait_timeout_s=0.2)
    with pytest.raises(TimeoutError, match=r"waited 0.2 s for a batch of 8 steps and no step arrived; the buffer "
                                           r"holds 0\. Check whether collection stopped"):
        lrn.train(1)
    assert lrn.version == 0


def test_the_learner_wait_counts_from_the_last_step_that_arrived(model_dir, tmp_path):
    """A slow but healthy collector (one step per poll, far slower in total than wait_timeout_s) is
    waited for; only a buffer that stops growing times out."""

    class Trickle(FakeBuffer):
        def size(self):
            self.polls += 1
            return self.polls  # one more step at each poll: 8 polls before a batch of 8

    eps = episodes()
    lrn = learner(REINFORCELearner, model_dir, tmp_path, buffer=Trickle([batch(eps)]), poll_interval_s=0.05,
                  wait_timeout_s=0.15)
    assert [r.version for r in lrn.train(1)] == [1]  # waited ~0.35 s > wait_timeout_s in all
    with pytest.raises(ValueError, match="wait_timeout_s must be > 0 or None"):
        learner(REINFORCELearner, model_dir, tmp_path, wait_timeout_s=0)
