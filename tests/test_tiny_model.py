"""The tiny Qwen3 model: builds offline, loads with the Auto classes, and is reproducible."""

from __future__ import annotations

import hashlib
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from unstable.games.templates import render_prompt
from unstable.models import TINY_SIZES, build_tiny_model, count_parameters, tiny_model_path


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "1m", "1m", seed=0)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def model(tiny_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_dir)


def test_directory_is_an_ordinary_hf_checkpoint(tiny_dir):
    names = {p.name for p in tiny_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= names


def test_model_loads_as_float32_qwen3_with_about_1m_parameters(model, tokenizer):
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.dtype == torch.float32
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.6e6 <= n_params <= 1.4e6
    assert n_params == count_parameters("1m")
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tokenizer)


@pytest.mark.parametrize(("size", "target"), [("10m", 10e6), ("50m", 50e6)])
def test_larger_sizes_are_in_range(size, target):
    assert 0.6 * target <= count_parameters(size) <= 1.4 * target


def test_config_ids_match_tokenizer(model, tokenizer):
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert tokenizer.eos_token_id == im_end
    assert tokenizer.pad_token_id == pad
    assert model.config.eos_token_id == [im_end, pad]
    assert model.config.pad_token_id == pad
    assert model.config.bos_token_id is None
    assert model.generation_config.eos_token_id == [im_end, pad]
    assert model.generation_config.pad_token_id == pad


def test_vocab_size(tokenizer):
    assert 2048 <= len(tokenizer) <= 4096


def test_chat_template_is_qwen_format(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    text = tokenizer.apply_chat_template([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                                         tokenize=False)
    assert text == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n"


@pytest.mark.parametrize("token", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"])
def test_special_tokens_are_single_ids(tokenizer, token):
    ids = tokenizer.encode(token, add_special_tokens=False)
    assert len(ids) == 1
    assert tokenizer.convert_ids_to_tokens(ids) == [token]


def test_template_markers_tokenize_to_special_ids(tokenizer):
    prompt = render_prompt("qwen3-reasoning", "Current Board: [4]")
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    im_start, im_end, think = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<think>"])
    assert ids[0] == im_start
    assert ids.count(im_start) == 2
    assert ids.count(im_end) == 1
    assert ids[-1] == think


@pytest.mark.parametrize("text", [
    "hello world",
    "Line one\n\n\tindented  double  spaces \r\n",
    "emoji 😀🎲♠️ and CJK 日本語, Ünïcödé → ✓",
    "\x00\x07 control \ufffd replacement",
    "\\boxed{[col 3]} [Offer: 3 Sheep, 2 Ore -> 5 Brick]",
    "<think>\nplan\n</think>\n\n\\boxed{4}<|im_end|>",
    "",
])
def test_unicode_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_game_text_is_compressed(tokenizer):
    text = "You are Player 0 in Tic Tac Toe. Available Moves: '[0]', '[1]'"
    assert len(tokenizer.encode(text, add_special_tokens=False)) < len(text) / 2


def test_generate_returns_tokens(model, tokenizer):
    inputs = tokenizer(render_prompt("qwen3-zs", "Current Board: [4]"), return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    prompt_len = inputs["input_ids"].shape[1]
    assert prompt_len < out.shape[1] <= prompt_len + 5
    assert int(out.max()) < len(tokenizer)


def test_same_seed_is_byte_identical(tiny_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again", "1m", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert _sha256(again / name) == _sha256(tiny_dir / name), name


def test_different_seed_changes_weights_not_tokenizer(tiny_dir, tmp_path):
    other = build_tiny_model(tmp_path / "other", "1m", seed=1)
    assert _sha256(other / "model.safetensors") != _sha256(tiny_dir / "model.safetensors")
    assert _sha256(other / "tokenizer.json") == _sha256(tiny_dir / "tokenizer.json")


def test_build_leaves_caller_rng_untouched(tmp_path):
    random.seed(123)
    torch.manual_seed(123)
    expected = (random.random(), torch.rand(1).item())
    random.seed(123)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", "1m", seed=5)
    assert (random.random(), torch.rand(1).item()) == expected


def test_unknown_size_lists_known_ones(tmp_path):
    with pytest.raises(ValueError, match="known sizes") as info:
        build_tiny_model(tmp_path / "m", "7b")
    for size in TINY_SIZES:
        assert repr(size) in str(info.value)
    assert not (tmp_path / "m").exists()


def test_refuses_to_overwrite_unless_asked(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        build_tiny_model(out, "1m")
    assert (out / "precious.txt").read_text() == "keep me"
    build_tiny_model(out, "1m", overwrite=True)
    assert not (out / "precious.txt").exists()
    assert (out / "model.safetensors").exists()


def test_an_out_dir_that_is_a_file_is_a_clear_error(tmp_path):
    (tmp_path / "f").write_text("keep me")
    with pytest.raises(ValueError, match=r"out_dir .*f' is a file, not a directory"):
        build_tiny_model(tmp_path / "f", "1m")
    with pytest.raises(ValueError, match=r"out_dir .*f/m': .*f is a file, not a directory"):
        build_tiny_model(tmp_path / "f" / "m", "1m")
    assert (tmp_path / "f").read_text() == "keep me"


def test_empty_out_dir_is_fine(tmp_path):
    (tmp_path / "m").mkdir()
    assert build_tiny_model(tmp_path / "m", "1m") == tmp_path / "m"


def test_tiny_model_path_builds_once(tmp_path):
    path = tiny_model_path("1m", seed=0, cache_dir=tmp_path)
    assert path == tmp_path / "1m-seed0-v1"
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert tiny_model_path("1m", seed=0, cache_dir=tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary directory left behind
    assert AutoTokenizer.from_pretrained(path).eos_token == "<|im_end|>"


def test_tiny_model_path_uses_unstable_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path))
    assert tiny_model_path("1m", seed=2) == tmp_path / "tiny-models" / "1m-seed2-v1"
    assert (tmp_path / "tiny-models" / "1m-seed2-v1" / "model.safetensors").exists()


def test_tiny_model_path_rejects_unknown_size(tmp_path):
    with pytest.raises(ValueError, match="known sizes"):
        tiny_model_path("huge", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_model_names_pick_a_tiny_size_and_seed(tmp_path, monkeypatch):
    from unstable.local_models.resolve import resolve_model_name

    monkeypatch.setenv("UNSTABLE_CACHE", str(tmp_path))
    assert resolve_model_name("tiny:1m:seed3") == str(tmp_path / "tiny-models" / "1m-seed3-v1")
    assert resolve_model_name("tiny", seed=4) == str(tmp_path / "tiny-models" / "1m-seed4-v1")
    for bad in ("tiny:1m:3", "tiny:1m:seed", "tiny:1m:seed1:x"):
        with pytest.raises(ValueError, match="tiny:<size>:seed<N>"):
            resolve_model_name(bad)
