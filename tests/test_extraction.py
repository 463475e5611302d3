import random
import re

import pytest

from unstable.games.extraction import (
    INVALID_ACTION,
    MAX_ACTION_CHARS,
    Extraction,
    clean_boxed,
    extract_boxed_action,
    extract_boxed_or_raw,
    get_action_extraction,
    last_boxed_content,
    register_action_extraction,
)


@pytest.mark.parametrize(
    ("completion", "action", "ok"),
    [
        ("I think... \\boxed{3}", "[3]", True),
        ("\\boxed{[place 1 2]}", "[place 1 2]", True),
        ("a \\boxed{x} then \\boxed{y}", "[y]", True),  # the last box wins
        ("\\boxed{\\text{call}}", "[call]", True),  # nested braces
        ("\\boxed{\\textbf{\\text{bet}}}", "[bet]", True),  # nested commands
        ("\\boxed{multi\nline   answer}", "[multi line answer]", True),
        ("\\boxed{ 4 }", "[4]", True),
        ("\\boxed{[Offer: 3 Sheep -> 2 Ore]}", "[Offer: 3 Sheep -> 2 Ore]", True),
        ("\\boxed{a{b}c}", "[a{b}c]", True),
        ("\\fbox{5}", "[5]", True),
        ("no box here [4]", INVALID_ACTION, False),  # a bracket in free text is not a move
        ("\\boxed{}", INVALID_ACTION, False),
        ("\\boxed{   }", INVALID_ACTION, False),
        ("\\boxed{4", INVALID_ACTION, False),  # never closed
        ("\\boxed{2} and then \\boxed{5", "[2]", True),  # unclosed last box falls back to the complete one
        ("", INVALID_ACTION, False),
        ("🤖" * 500, INVALID_ACTION, False),
        ("\\boxed{🤖}", "[🤖]", True),
    ],
)
def test_default_extraction(completion, action, ok):
    assert extract_boxed_action(completion) == Extraction(action, ok)


def test_last_boxed_content_is_none_without_a_box():
    assert last_boxed_content("nothing") is None
    assert last_boxed_content("\\boxed{a}\\boxed{b}") == "b"


def test_boxed_or_raw_sends_free_text_but_flags_format():
    assert extract_boxed_or_raw("I accept your offer") == Extraction("I accept your offer", False)
    assert extract_boxed_or_raw("\\boxed{Accept}") == Extraction("[Accept]", True)
    assert extract_boxed_or_raw("   ") == Extraction(INVALID_ACTION, False)


def test_very_long_garbage_is_fast_and_safe():
    text = "\\boxed{" * 2000 + "x"
    assert extract_boxed_action(text) == Extraction(INVALID_ACTION, False)


def test_a_million_characters_of_nested_text_commands_unwrap_in_one_pass():
    """Unwrapping was one regex pass per nesting level: 28k characters took 1.2 s, a million hours."""
    depth = 1_000_000 // len("\\text{}")
    nested = "\\text{" * depth + "4" + "}" * depth
    assert clean_boxed(nested) == "4"
    assert clean_boxed("\\textbf {" * depth) == "\\textbf {" * depth  # never closed: kept as written
    assert extract_boxed_action("\\boxed{" + nested + "}") == Extraction(INVALID_ACTION, False)  # too long
    assert extract_boxed_action("\\boxed{3}" + "\\text{" * depth) == Extraction("[3]", True)
    shallow = 100
    assert extract_boxed_action("\\boxed{" + "\\text{" * shallow + "4" + "}" * shallow + "}") == Extraction("[4]", True)


_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textit|texttt|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")


def _clean_by_repeated_regex(content):
    """The definition clean_boxed keeps: unwrap brace-free commands until nothing changes."""
    previous = None
    while previous != content:
        previous = content
        content = _TEXT_COMMAND.sub(r"\1", content)
    return " ".join(content.split())


def test_one_pass_unwrap_matches_the_repeated_regex():
    pieces = ["\\text{", "\\textbf {", "\\mathrm{", "{", "}", "a", "b", " ", "\n", "[", "]", "\\", "x{"]
    rng = random.Random(0)
    for _ in range(5000):
        content = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert clean_boxed(content) == _clean_by_repeated_regex(content), content


def test_a_box_longer_than_the_cap_is_an_invalid_move():
    """TextArena raises on int() of more than 4,300 digits, which failed the game."""
    assert extract_boxed_action("\\boxed{" + "9" * 10_000 + "}") == Extraction(INVALID_ACTION, False)
    assert extract_boxed_action("\\boxed{" + "9" * (MAX_ACTION_CHARS + 1) + "}") == Extraction(INVALID_ACTION, False)
    assert extract_boxed_action("\\boxed{" + "9" * MAX_ACTION_CHARS + "}").format_ok
    assert extract_boxed_or_raw("[" + "9" * 10_000 + "]") == Extraction(INVALID_ACTION, False)
    assert extract_boxed_or_raw("x" * MAX_ACTION_CHARS) == Extraction("x" * MAX_ACTION_CHARS, False)


def test_registry_errors_and_custom_extraction():
    with pytest.raises(ValueError, match="unknown action extraction 'nope'"):
        get_action_extraction("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_action_extraction("default", extract_boxed_action)
    register_action_extraction("upper", lambda c: Extraction(f"[{c.upper()}]", True), overwrite=True)
    assert get_action_extraction("upper")("x") == Extraction("[X]", True)
    with pytest.raises(TypeError):
        register_action_extraction("bad", "not callable")  # type: ignore[arg-type]
