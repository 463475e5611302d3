"""Answers drawn among the legal moves (``legal_moves_only``): the backend's choice mask, the learner's
renormalised log-probs, the exact reading of the same policy, a Kuhn game through the turn loop, and the
settings refused before Ray."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from test_learners import FAST

from unstable.inference.base import GenerationRequest, SamplingParams, allowed_next, allowed_path
from unstable.learners import GRPOLearner, REINFORCELearner
from unstable.records import Step, TrainBatch

KUHN = ("\\boxed{check}", "\\boxed{bet}", "\\boxed{fold}")
SAMPLING = SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=12, legal_moves_only=True)


def prompt(card: str) -> str:
    return f"<|im_start|>user\nCard: {card}. Answer in \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"


def as_steps(results) -> list[Step]:
    return [Step(env_id="E", game_id=i, player_id=0, turn_index=0, sample=r.sample, reward=(-1.0) ** i,
                 final_reward=(-1.0) ** i, policy_version=0, format_ok=True, invalid=False, is_last=True)
            for i, r in enumerate(results)]


def test_allowed_next_follows_the_answers_token_by_token():
    choices = ((5, 1, 7, 9), (5, 2, 7, 9), (5, 1, 8, 9))
    assert allowed_next(choices, ()) == (5,)
    assert allowed_next(choices, (5,)) == (1, 2)
    assert allowed_next(choices, (5, 1)) == (7, 8)
    assert allowed_next(choices, (5, 2)) == (7,)
    assert allowed_next(choices, (5, 1, 7, 9)) == ()  # complete
    assert allowed_next(choices, (6,)) == ()  # left them
    assert allowed_path(choices, (5, 1, 8, 9)) == ((5,), (1, 2), (7, 8), (9,))


def test_the_backend_draws_only_the_choices_with_their_renormalised_logprobs(backend):
    """Every completion is one of the answers with its stop token; a token drawn alone has log-prob 0, and an
    answer's summed log-probs are the exact reading's log-probability of it; 600 draws of one prompt land
    within 4.5 standard errors of that reading."""
    from unstable.eval.policy_reading import PolicyReader

    answers = {backend.choice_ids(text): text for text in KUHN}
    results = backend.generate_batch([GenerationRequest(prompt(c), None, SAMPLING, 0, KUHN) for c in "JQK" * 4])
    reader = PolicyReader(backend, None, SAMPLING)
    exact = reader.read_exact([prompt(c) for c in "JQK"], [["[check]", "[bet]", "[fold]"]] * 3)
    assert all(d.other == pytest.approx(0.0, abs=1e-6) and sum(d.probs.values()) == pytest.approx(1.0) for d in exact)
    for i, result in enumerate(results):
        sample = result.sample
        assert sample.completion_ids in answers and sample.finish_reason == "stop"
        assert sample.allowed == allowed_path(tuple(answers), sample.completion_ids)
        for logp, allowed in zip(sample.completion_logprobs, sample.allowed, strict=True):
            assert (logp == 0.0) == (len(allowed) == 1)
        move = "[" + answers[sample.completion_ids][len("\\boxed{"):-1] + "]"
        assert math.fsum(sample.completion_logprobs) == pytest.approx(math.log(exact[i % 3].probs[move]), abs=1e-4)
    many = backend.generate_batch([GenerationRequest(prompt("Q"), None, SAMPLING, 0, KUHN)] * 600)
    for text in KUHN:
        share = sum(r.sample.text == text for r in many) / len(many)
        p = exact[1].probs["[" + text[len("\\boxed{"):-1] + "]"]
        assert share == pytest.approx(p, abs=4.5 * math.sqrt(p * (1 - p) / len(many))), text


def test_a_request_whose_answer_cannot_fit_fails_alone(backend):
    short = dataclasses.replace(SAMPLING, max_new_tokens=3)
    outcomes = backend.generate_outcomes([GenerationRequest(prompt("J"), None, short, 0, KUHN),
                                          GenerationRequest(prompt("J"), None, SAMPLING, 0, KUHN),
                                          GenerationRequest(prompt("J"), None, SAMPLING, 0, ())])
    assert isinstance(outcomes[0], ValueError) and "more than the 3 new tokens" in str(outcomes[0])
    assert outcomes[1].sample.text in KUHN
    assert isinstance(outcomes[2], ValueError) and "at least one answer" in str(outcomes[2])


@pytest.mark.parametrize("chunked_head", [True, False])
def test_the_learner_scores_the_drawn_tokens_as_the_backend_drew_them(backend, tiny_model_dir, tmp_path, chunked_head):
    """The learner's log-probs of the same weights equal the recorded ones (every first ratio 1), with the
    chunked head and the plain one; an update moves the adapter; a record whose token was not allowed is
    refused. (REINFORCE on rewards of one sign: a per-prompt baseline would cancel two equal answers.)"""
    results = backend.generate_batch([GenerationRequest(prompt(c), None, SAMPLING, 0, KUHN) for c in "JQK" * 2])
    steps = [dataclasses.replace(s, reward=0.1 * (i + 1)) for i, s in enumerate(as_steps(results))]
    lrn = REINFORCELearner(tiny_model_dir, output_dir=str(tmp_path / "out"), batch_size=6, mini_batch_size=3,
                           **{**FAST, "activation_checkpointing": chunked_head})
    recomputed = torch.cat(lrn._logprobs_no_grad(steps))
    recorded = torch.tensor([lp for s in steps for lp in s.completion_logprobs])
    torch.testing.assert_close(recomputed, recorded, atol=2e-4, rtol=0)
    before = [p.detach().clone() for p in lrn.policy_params]
    metrics = lrn.update(TrainBatch.from_steps(steps)).metrics
    assert abs(metrics["train/approx_kl"]) < 1e-6 and metrics["train/entropy"] < math.log(3) + 1e-4
    assert any(not torch.equal(b, p) for b, p in zip(before, lrn.policy_params, strict=True))
    sample = steps[0].sample
    wrong = dataclasses.replace(sample, allowed=tuple((t + 1,) if len(a) > 1 else a
                                                      for t, a in zip(sample.completion_ids, sample.allowed,
                                                                      strict=True)))
    with pytest.raises(ValueError, match="not among the tokens"):
        lrn._logprobs_no_grad([dataclasses.replace(steps[0], sample=wrong)])


def test_a_kuhn_game_played_with_legal_moves_only_never_sends_a_rejected_answer(backend):
    from unstable.collection.rollout import play_game_sync
    from unstable.policies.llm import LLMPolicy
    from unstable.records import AgentSpec, GameSpec, PolicyRef

    refs = [PolicyRef(uid=f"p{i}", kind="checkpoint") for i in range(2)]
    for seed in range(6):
        spec = GameSpec(game_id=seed, env_id="KuhnPoker-v0-chips-train", seed=seed,
                        agents=tuple(AgentSpec(i, refs[i], prompt_template="qwen3-hand") for i in range(2)))
        policies = {i: LLMPolicy(backend, refs[i], prompt_template="qwen3-hand", sampling=SAMPLING) for i in range(2)}
        record = play_game_sync(spec, policies)
        assert record.turns and not any(t.invalid or not t.format_ok for t in record.turns)
        assert all(t.sample.allowed and t.completion_text in (*KUHN, "\\boxed{call}") for t in record.turns)


def test_settings_that_cannot_draw_among_the_legal_moves_are_refused(tiny_model_dir, tmp_path, monkeypatch):
    import unstable.run.config
    from unstable.run.config import BuildConfig

    with pytest.raises(ValueError, match="legal_moves_only needs top_p=1"):
        SamplingParams(top_p=0.9, legal_moves_only=True)
    base = dict(model_name=tiny_model_dir, opponent_sampling_strategy="mirror", batch_size=16, mini_batch_size=8,
                learning_rate=1e-3, max_generation_len=16, wandb_project=None, runs_dir=str(tmp_path), run_name="t",
                inference_backend="transformers", vllm_config={"top_p": 1.0, "legal_moves_only": True})
    kuhn = {"env_id": "KuhnPoker-v0-chips-train", "num_players": 2, "num_actors": 2, "prompt_template": "qwen3-hand"}
    config = BuildConfig(**base, train_envs=[kuhn])
    assert config.models[0].inference_config().sampling.legal_moves_only
    other = {"env_id": "Battleship-v0", "num_players": 2, "num_actors": 2, "prompt_template": "qwen3-zs"}
    with pytest.raises(ValueError, match=r"train_envs\[1\] \(Battleship-v0\) has no legal-move reader"):
        BuildConfig(**base, train_envs=[kuhn, other])
    monkeypatch.setattr(unstable.run.config, "choose_backend", lambda requested: requested)  # as if vLLM were installed
    with pytest.raises(ValueError, match="needs the transformers inference backend"):
        BuildConfig(**{**base, "inference_backend": "vllm"}, train_envs=[kuhn])


def test_exact_kl_sums_over_the_whole_distribution():
    """``sum_k p_k log(p_k / q_k)`` (Kullback & Leibler 1951) on values not exact in binary, with padding."""
    from unstable.algorithms import exact_kl

    p = torch.tensor([[0.1, 0.9, 0.0], [0.3, 0.3, 0.4]]).log()
    q = torch.tensor([[0.3, 0.7, 0.5], [0.3, 0.3, 0.4]]).log()
    expected = 0.1 * math.log(0.1 / 0.3) + 0.9 * math.log(0.9 / 0.7)  # 0.11632...
    torch.testing.assert_close(exact_kl(p, q), torch.tensor([expected, 0.0]), atol=1e-6, rtol=0)
    p.requires_grad_(True)
    exact_kl(p, q)[0].backward()  # d/dlogp_k = p_k (log p_k - log q_k + 1): finite, and 0 on the padding
    assert p.grad[0, 2] == 0 and torch.isfinite(p.grad).all()


def test_the_kl_to_the_reference_is_exact_where_the_answer_was_drawn_among_a_few(backend, tiny_model_dir, tmp_path):
    """With ``beta`` > 0 the learner's KL to the reference at a move token is the exact KL between the two
    distributions over the legal moves' tokens (0 on a forced token), not the k3 estimate at the drawn one."""
    from test_policy_learners import perturb

    from unstable.algorithms import exact_kl, kl_penalty

    results = backend.generate_batch([GenerationRequest(prompt(c), None, SAMPLING, 0, KUHN) for c in "JQK" * 2])
    steps = as_steps(results)
    lrn = GRPOLearner(tiny_model_dir, output_dir=str(tmp_path / "out"), batch_size=6, mini_batch_size=3,
                      **{**FAST, "beta": 0.5})
    perturb(lrn)  # the policy moves away from the reference (the base model)
    now = lrn._logprobs_no_grad(steps, with_allowed=True)
    ref = lrn._logprobs_no_grad(steps, reference=True, with_allowed=True)
    exact = sum(float(exact_kl(now[i][1][c][None], ref[i][1][c][None])) for i in range(len(steps)) for c in now[i][1])
    estimate = sum(float(kl_penalty(now[i][0], ref[i][0]).sum()) for i in range(len(steps)))
    tokens = sum(len(s.completion_ids) for s in steps)
    assert exact > 1e-4 and abs(exact - estimate) > 1e-4
    metrics = lrn.update(TrainBatch.from_steps(steps)).metrics
    assert metrics["train/kl_ref"] == pytest.approx(exact / tokens, rel=1e-3)
