import pytest

from unstable.games.templates import available_templates, get_template, register_template, render_prompt

SEED_TEMPLATES = ["default", "qwen3-zs", "qwen3-sp", "qwen3-reasoning", "gemma3-zs", "llama-instruct-zs"]


@pytest.mark.parametrize("name", SEED_TEMPLATES)
def test_every_seed_template_renders_the_observation_and_asks_for_a_box(name):
    obs = "[GAME] You are Player 0.\nBoard:\n X | O | 2"
    prompt = render_prompt(name, obs)
    assert obs in prompt
    assert "\\boxed{}" in prompt
    assert name in available_templates()


def test_chat_templates_end_where_the_model_should_start_answering():
    assert render_prompt("qwen3-zs", "o").endswith("<|im_start|>assistant\n")
    assert render_prompt("qwen3-reasoning", "o").endswith("<|im_start|>assistant\n<think>")
    assert render_prompt("gemma3-zs", "o").endswith("<start_of_turn>model\n")
    assert render_prompt("llama-instruct-zs", "o").endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "single-player" in render_prompt("qwen3-sp", "o")


def test_register_custom_templates():
    register_template("test-fmt", "Board: {observation}\nAnswer in \\boxed{{}}", overwrite=True)
    assert render_prompt("test-fmt", "B") == "Board: B\nAnswer in \\boxed{}"
    register_template("test-fn", lambda o: o[::-1], overwrite=True)
    assert get_template("test-fn")("abc") == "cba"


def test_template_errors_are_clear():
    with pytest.raises(ValueError, match=r"unknown prompt template .qwen9.*qwen3-zs"):
        get_template("qwen9")
    with pytest.raises(ValueError, match="already registered"):
        register_template("default", "{observation}")
    with pytest.raises(ValueError, match="observation"):
        register_template("no-field", "just text", overwrite=True)
    with pytest.raises(ValueError):
        register_template("bad-braces", "{observation} {", overwrite=True)
    with pytest.raises(TypeError):
        register_template("bad-type", 42, overwrite=True)  # type: ignore[arg-type]
