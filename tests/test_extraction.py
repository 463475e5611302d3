import pytest

from unstable.games.extraction import (
    INVALID_ACTION,
    Extraction,
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


def test_registry_errors_and_custom_extraction():
    with pytest.raises(ValueError, match="unknown action extraction 'nope'"):
        get_action_extraction("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_action_extraction("default", extract_boxed_action)
    register_action_extraction("upper", lambda c: Extraction(f"[{c.upper()}]", True), overwrite=True)
    assert get_action_extraction("upper")("x") == Extraction("[X]", True)
    with pytest.raises(TypeError):
        register_action_extraction("bad", "not callable")  # type: ignore[arg-type]
