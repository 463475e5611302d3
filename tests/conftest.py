"""Shared fixtures: one tiny model and two LoRA adapters per test session (built, never downloaded)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    from unstable.local_models.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", size="1m", seed=0))


def make_adapter(model_dir: str, out_dir, seed: int, rank: int = 4) -> str:
    """A random (non-zero) LoRA adapter, so it visibly changes the model's outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
    )
    get_peft_model(base, config).save_pretrained(str(out_dir))
    return str(out_dir)


def make_sample(prompt_ids=(1, 2), completion_ids=(3,), completion_logprobs=None, **kwargs):
    """A hand-made Sample (log-probs -0.1 per completion token unless given; sampled at temperature 1)."""
    from unstable.records import Sample

    if completion_logprobs is None:
        completion_logprobs = (-0.1,) * len(completion_ids)
    kwargs = {"finish_reason": "stop", "temperature": 1.0, "top_p": 1.0, **kwargs}
    return Sample(tuple(prompt_ids), tuple(completion_ids), tuple(completion_logprobs), **kwargs)


TTT = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}


def small_run_kwargs(model_dir, runs_dir, run_name: str = "t", **overrides) -> dict:
    """build() settings for a seconds-long mirror self-play run of TicTacToe with the tiny model."""
    import unstable

    kwargs = dict(
        model_name=model_dir,
        train_envs=[unstable.TrainEnvSpec(num_actors=2, **TTT)],
        eval_envs=[unstable.EvalEnvSpec(fixed_opponent="random", **TTT)],
        opponent_sampling_strategy="mirror",
        batch_size=16, mini_batch_size=8, learning_rate=1e-3, max_generation_len=16,
        lora_config={"lora_rank": 4, "lora_alpha": 8},
        activation_checkpointing=False, gradient_checkpointing=False,
        wandb_project=None, runs_dir=str(runs_dir), run_name=run_name, inference_backend="transformers",
    )
    kwargs.update(overrides)
    return kwargs


@pytest.fixture(scope="session")
def adapters(tiny_model_dir, tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("adapters")
    return make_adapter(tiny_model_dir, root / "a1", 1), make_adapter(tiny_model_dir, root / "a2", 2)


@pytest.fixture(scope="session")
def backend(tiny_model_dir):
    from unstable.inference.transformers_backend import TransformersBackend

    b = TransformersBackend(tiny_model_dir, max_batch_size=16, batch_wait_ms=2)
    yield b
    b.close()


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test session (starting one costs seconds), never a shared one.

    No WANDB_* variable is set here: a test that does not care about W&B turns it off
    (``wandb_project=None``, as :func:`small_run_kwargs`), and one about W&B sets the mode itself
    (``WANDB_MODE`` in the driver, which ``build()`` passes on to the Tracker actor, or the Tracker's
    ``wandb_mode``)."""
    import tempfile

    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    from unstable.run.wiring import init_local_ray

    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    init_local_ray(num_cpus=2, include_dashboard=False, namespace="unstable-tests", _temp_dir=temp_dir,
                   log_to_driver=False)
    yield ray
    ray.shutdown()


VOCAB = 96


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> str:
    """A tiny random Qwen3 without a tokenizer (vocabulary VOCAB): what the learner tests train."""
    import torch
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny") / "qwen3"
    transformers.Qwen3ForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if a failed validation ever reached Ray or the actors."""
    import unstable.run.wiring

    def must_not_run(*args, **kwargs):
        raise AssertionError("Ray or its actors were started before validation finished")

    monkeypatch.setattr(unstable.run.wiring, "start_actors", must_not_run)
    monkeypatch.setattr(unstable.run.wiring, "ensure_ray", must_not_run)
    for name in ("OPENROUTER_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def answering_model(tiny_model_dir, tmp_path_factory) -> str:
    """The tiny model after 40 supervised steps on random TicTacToe positions (the warm start's loss, soft
    labels over the legal moves): it answers ``\\boxed{cell}<|im_end|>`` often enough for a
    non-degenerate policy, and not always (some mass is left for "other")."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from unstable.models.warmstart import _encode, random_game_positions, supervised_step

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    torch.manual_seed(0)
    rng = random.Random(0)
    cache: dict = {}
    examples = [_encode(tok, "qwen3-board", p, tok.eos_token, rng, cache)
                for p in random_game_positions("TicTacToe-v0-train", 64, seed=0, few_moves_bias=1.0)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a busy 2-core machine made it several times slower
    try:
        for step in range(40):
            supervised_step(model, optimizer, [examples[(step * 16 + i) % 64] for i in range(16)], 0, 3e-3)
    finally:
        torch.set_num_threads(threads)
    out = tmp_path_factory.mktemp("answering") / "model"
    model.eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)
