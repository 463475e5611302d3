"""Real games played by the tiny model through the transformers backend."""

import asyncio

import pytest
import torch
from conftest import make_sample
from peft import PeftModel
from transformers import AutoModelForCausalLM

import unstable.reward_transformations as retra
from unstable.buffers import StepBuffer
from unstable.collection.rollout import play_game_sync, play_games
from unstable.games.extraction import INVALID_ACTION
from unstable.inference.base import GenerationResult, SamplingParams
from unstable.policies.llm import LLMPolicy
from unstable.policies.scripted import RandomLegalPolicy
from unstable.records import AgentSpec, GameRecord, GameSpec, PolicyRef, Sample

SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24)


def two_adapter_games(env_id, adapters, n):
    refs = [PolicyRef(f"ckpt-{i}", "checkpoint", path, version=i) for i, path in enumerate(adapters, start=1)]
    agents = tuple(AgentSpec(pid, refs[pid], collect_data=True, prompt_template="qwen3-zs") for pid in range(2))
    return refs, [GameSpec(g, env_id, seed=100 + g, agents=agents, error_allowance=3) for g in range(n)]


@pytest.mark.parametrize("env_id", ["TicTacToe-v0-train", "KuhnPoker-v0-train"])
def test_tiny_model_plays_full_games_with_two_adapters_in_one_batch(env_id, backend, adapters, tiny_model_dir):
    refs, specs = two_adapter_games(env_id, adapters, n=6)
    policies = {pid: LLMPolicy(backend, refs[pid], prompt_template="qwen3-zs", sampling=SAMPLING) for pid in (0, 1)}
    before = backend.stats()
    results = asyncio.run(play_games(specs, lambda s: policies, max_concurrent=6))
    after = backend.stats()
    assert all(isinstance(r, GameRecord) for r in results)
    # Concurrent games shared generate calls, so seats with different adapters were batched together.
    assert after["requests"] - before["requests"] > after["batches"] - before["batches"]
    models = {
        path: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), path) for path in adapters
    }
    checked = 0
    for record in results:
        assert record.final_rewards.keys() == {0, 1}
        for turn in record.turns:
            assert turn.policy == refs[turn.player_id]
            assert backend.tokenizer.decode(turn.prompt_ids) == turn.prompt
            assert backend.tokenizer.decode(turn.completion_ids, skip_special_tokens=True) == turn.completion_text
            assert len(turn.completion_logprobs) == len(turn.completion_ids) > 0
            assert turn.prompt.startswith("<|im_start|>user") and turn.observation in turn.prompt
            if checked < 6:  # log-probs are those of a fresh forward pass through the seat's adapter
                ids = torch.tensor([turn.prompt_ids + turn.completion_ids])
                with torch.no_grad():
                    logp = models[turn.policy.adapter_path](ids).logits.log_softmax(-1)[
                        0, len(turn.prompt_ids) - 1 : -1
                    ]
                fresh = logp.gather(-1, torch.tensor(turn.completion_ids)[:, None]).squeeze(-1)
                assert torch.allclose(fresh, torch.tensor(turn.completion_logprobs), atol=1e-4)
                checked += 1
    assert checked == 6


class RecordingBackend:
    """The real backend, keeping every result it hands out."""

    def __init__(self, backend):
        self.backend = backend
        self.results = []

    async def generate(self, request):
        result = await self.backend.generate(request)
        self.results.append(result)
        return result

    def stats(self):
        return self.backend.stats()


class RecordingPolicy:
    """An LLM seat that keeps every PolicyOutput it returns."""

    def __init__(self, policy):
        self.policy = policy
        self.ref = policy.ref
        self.outputs = []

    async def act(self, ctx):
        out = await self.policy.act(ctx)
        self.outputs.append(out)
        return out


def test_one_sample_object_from_backend_to_policy_output_turn_and_step(backend, adapters):
    """The backend's Sample is passed on by reference, never copied field by field."""
    recording = RecordingBackend(backend)
    ref = PolicyRef("ckpt-3", "checkpoint", adapters[0], version=3)
    llm = RecordingPolicy(LLMPolicy(recording, ref, prompt_template="qwen3-zs", sampling=SAMPLING))
    agents = (AgentSpec(0, ref, collect_data=True), AgentSpec(1, PolicyRef("random", "scripted"), collect_data=True))
    record = play_game_sync(GameSpec(0, "TicTacToe-v0-train", 7, agents, error_allowance=3),
                            {0: llm, 1: RandomLegalPolicy()})  # fmt: skip
    buffer = StepBuffer(100, None, *retra.default_transforms())
    buffer.add_game(record)
    steps = sorted(buffer.get_batch(buffer.size()), key=lambda s: s.turn_index)

    llm_turns = record.turns_of(0)
    assert len(llm_turns) == len(recording.results) == len(llm.outputs) == len(steps) > 0
    for result, out, turn, step in zip(recording.results, llm.outputs, llm_turns, steps, strict=True):
        assert isinstance(result.sample, Sample)
        assert out.sample is result.sample and turn.sample is result.sample and step.sample is result.sample
        assert (turn.prompt_ids, turn.completion_ids) == (step.prompt_ids, step.completion_ids)
        assert turn.completion_text == result.sample.text and turn.finish_reason == result.sample.finish_reason
        assert (result.sample.temperature, result.sample.top_p) == (SAMPLING.temperature, SAMPLING.top_p)
        assert result.sample.policy_version == step.policy_version == 3
    for turn in record.turns_of(1):  # the scripted seat sampled no tokens
        assert turn.sample is None and not turn.has_tokens
        assert (turn.prompt_ids, turn.completion_ids, turn.completion_logprobs) == ((), (), ())
    assert buffer.size() == 0 and {s.player_id for s in steps} == {0}  # no Steps for the scripted seat


class CannedBackend:
    """Returns fixed completions: for testing what the game does with garbage model output."""

    def __init__(self, texts):
        self.texts = list(texts)

    async def generate(self, request):
        text = self.texts.pop(0)
        return GenerationResult(make_sample((1, 2), (3,), (-0.5,), finish_reason="length", text=text))

    def stats(self):
        return {}


@pytest.mark.parametrize(
    "garbage", ["", "x" * 20000, "🙂🙃 ∑∫ \x00 \\boxed{", "I move to [4] now", "\\boxed{}", "\\boxed{99}"]
)
def test_garbage_model_output_is_an_invalid_move_not_a_crash(garbage):
    llm = LLMPolicy(CannedBackend([garbage]), PolicyRef("ckpt-0"), prompt_template="qwen3-zs")
    agents = (AgentSpec(0, llm.ref, collect_data=True), AgentSpec(1, PolicyRef("random", "scripted")))
    record = play_game_sync(GameSpec(0, "TicTacToe-v0-train", 5, agents), {0: llm, 1: RandomLegalPolicy()})
    assert record.num_turns == 1 and record.turns[0].invalid
    assert record.invalid_player == 0 and record.final_rewards == {0: -1.0, 1: 1.0}
    if "\\boxed{99}" not in garbage:
        assert record.turns[0].action == INVALID_ACTION and not record.turns[0].format_ok


def test_a_ten_thousand_digit_box_is_an_invalid_move_not_a_failed_game():
    """TextArena raised ``ValueError: Exceeds the limit (4300 digits)`` on it, failing the game."""
    llm = LLMPolicy(CannedBackend(["\\boxed{" + "4" * 10_000 + "}"]), PolicyRef("ckpt-0"))
    agents = (AgentSpec(0, llm.ref, collect_data=True), AgentSpec(1, PolicyRef("random", "scripted")))
    record = play_game_sync(GameSpec(0, "TicTacToe-v0-train", 5, agents), {0: llm, 1: RandomLegalPolicy()})
    assert isinstance(record, GameRecord) and record.num_turns == 1
    turn = record.turns[0]
    assert turn.invalid and turn.action == INVALID_ACTION and not turn.format_ok
    assert record.invalid_player == 0 and record.final_rewards == {0: -1.0, 1: 1.0}
