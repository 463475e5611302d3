"""The round DSL of collaborative environments: the tree a spec parses to, its expansions, and its errors."""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pytest

from unstable.environments.round_spec import (
    Actor,
    Choice,
    Repeat,
    RoundSpec,
    RoundSpecError,
    Sequence,
    parse_round_spec,
)

A, B, C, D = Actor("A"), Actor("B"), Actor("C"), Actor("D")
NO_TURN = "the spec gives no turn at all (every part of it is repeated 0 times)"
TOO_LONG = ("the spec is too long at position {}: an episode may have at most 1000 turns "
            "(parse_round_spec's max_turns), found")


def test_the_actors_library_example():
    spec = parse_round_spec("Bob -> Alice -> (Bob/Alice)*5")
    bob, alice = Actor("Bob"), Actor("Alice")
    assert spec.root == Sequence((bob, alice, Repeat(Choice((bob, alice)), 5, 5)))
    assert spec.actors == ("Bob", "Alice")
    assert (spec.min_turns, spec.max_turns) == (7, 7)
    assert [actor.position for actor in (spec.root.items[0], spec.root.items[1])] == [0, 7]
    assert [option.position for option in spec.root.items[2].body.options] == [17, 21]


@pytest.mark.parametrize(
    ("text", "root"),
    [
        ("(A -> (B/C)*2)*(1..3) -> D", Sequence((Repeat(Sequence((A, Repeat(Choice((B, C)), 2, 2))), 1, 3), D))),
        ("A*2*3", Repeat(Repeat(A, 2, 2), 3, 3)),
        ("(A -> B)*(0..2)*3", Repeat(Repeat(Sequence((A, B)), 0, 2), 3, 3)),
        ("A -> B / C -> D", Choice((Sequence((A, B)), Sequence((C, D))))),  # '/' binds looser than '->'
        ("A -> B*2", Sequence((A, Repeat(B, 2, 2)))),  # '*' binds tighter than '->'
        ("A / B*2", Choice((A, Repeat(B, 2, 2)))),
        ("(A -> B) -> C", Sequence((A, B, C))),  # a sequence in a sequence is one sequence
        ("(A/B)/C", Choice((Choice((A, B)), C))),  # but not a choice in a choice: C is drawn half the time
        ("((A))", A),
        ("A*(2..2)", Repeat(A, 2, 2)),  # a range of one count is that count
        ("A*007", Repeat(A, 7, 7)),
    ],
)
def test_structure_and_precedence(text, root):
    assert parse_round_spec(text).root == root


@pytest.mark.parametrize(
    "text",
    ["Bob->Alice->(Bob/Alice)*5", "  Bob  ->  Alice  ->  ( Bob / Alice ) * 5  ", "Bob\t->\nAlice\r\n->(Bob/\tAlice)*5"],
)
def test_whitespace_is_free_between_tokens(text):
    bob, alice = Actor("Bob"), Actor("Alice")
    assert parse_round_spec(text).root == Sequence((bob, alice, Repeat(Choice((bob, alice)), 5, 5)))


def test_whitespace_inside_a_range_count():
    assert parse_round_spec("A * ( 1 .. 3 )").root == Repeat(A, 1, 3)


@pytest.mark.parametrize(
    ("text", "actors"),
    [
        ("agent-1 -> model.v2 -> _judge", ("agent-1", "model.v2", "_judge")),
        ("a-b->c", ("a-b", "c")),  # a '-' before '>' is the arrow, not part of the name
        ("a--->b", ("a--", "b")),
        ("Qwen3-4B.lora_2 / gpt-4o", ("Qwen3-4B.lora_2", "gpt-4o")),
        ("Bob -> Alice -> Bob -> Carol", ("Bob", "Alice", "Carol")),  # first appearance, once each
        ("Zoë -> _x", ("Zoë", "_x")),
    ],
)
def test_actor_names(text, actors):
    assert parse_round_spec(text).actors == actors


def test_positions_are_kept_but_not_compared():
    spec = parse_round_spec("  Alice -> (Bob)")
    assert [actor.position for actor in spec.root.items] == [2, 12]
    assert spec.root == Sequence((Actor("Alice", 99), Actor("Bob", 0)))


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("Bob->Alice->(Bob/Alice)*5", "Bob -> Alice -> (Bob / Alice)*5"),
        ("(A->(B/C)*2)*(1..3)->D", "(A -> (B / C)*2)*(1..3) -> D"),
        ("A*2*3", "A*2*3"),
        ("(A/B)/C", "(A / B) / C"),
        ("A/(B/C)", "A / (B / C)"),
        ("(A->B)/(C->D)", "A -> B / C -> D"),
        ("((A))*(0..4)", "A*(0..4)"),
        ("((A -> B)*2)*3", "(A -> B)*2*3"),
    ],
)
def test_str_is_canonical_and_parses_back_to_the_same_tree(text, canonical):
    spec = parse_round_spec(text)
    assert str(spec) == canonical
    assert parse_round_spec(canonical).root == spec.root


def test_fixed_sequences_expand_exactly():
    spec = parse_round_spec("A -> B*2 -> (C -> D)*2 -> A")
    assert spec.expand(random.Random(0)) == ("A", "B", "B", "C", "D", "C", "D", "A")


def test_a_fixed_spec_draws_no_randomness():
    rng = random.Random(3)
    state = rng.getstate()
    parse_round_spec("A -> B*3").expand(rng)
    assert rng.getstate() == state


def test_expansion_is_reproducible_with_a_seeded_rng():
    spec = parse_round_spec("(A -> (B/C)*2)*(1..3) -> (D/A)*(0..4)")
    first = [spec.expand(random.Random(seed)) for seed in range(50)]
    assert first == [spec.expand(random.Random(seed)) for seed in range(50)]
    rng_a, rng_b = random.Random(7), random.Random(7)
    assert [spec.expand(rng_a) for _ in range(20)] == [spec.expand(rng_b) for _ in range(20)]
    assert len(set(first)) > 10  # and the seeds do matter


def test_choice_is_uniform():
    rng = random.Random(0)
    counts = Counter(parse_round_spec("Bob / Alice").expand(rng)[0] for _ in range(2000))
    assert set(counts) == {"Bob", "Alice"}
    assert all(0.45 <= count / 2000 <= 0.55 for count in counts.values())


def test_a_choice_in_a_choice_is_drawn_level_by_level():
    rng = random.Random(1)
    counts = Counter(parse_round_spec("(A/B)/C").expand(rng)[0] for _ in range(2000))
    assert 0.45 <= counts["C"] / 2000 <= 0.55
    assert 0.20 <= counts["A"] / 2000 <= 0.30


def test_each_repetition_draws_its_own_choice():
    spec = parse_round_spec("(Bob/Alice)*5")
    rng = random.Random(2)
    orders = [spec.expand(rng) for _ in range(2000)]
    assert all(len(order) == 5 for order in orders)
    for turn in range(5):
        assert 0.45 <= sum(order[turn] == "Bob" for order in orders) / 2000 <= 0.55
    all_same = sum(len(set(order)) == 1 for order in orders) / 2000  # 2 / 32 = 0.0625 if the picks are independent
    assert 0.03 <= all_same <= 0.10


@pytest.mark.parametrize(("text", "counts"), [("A*(2..4)", {2, 3, 4}), ("(A)*(0..2)", {0, 1, 2}), ("A*(1..1)", {1})])
def test_ranged_repeat_counts_cover_exactly_the_range(text, counts):
    rng = random.Random(0)
    seen = Counter(len(parse_round_spec(text).expand(rng)) for _ in range(600))
    assert set(seen) == counts
    assert all(count >= 600 / len(counts) * 0.7 for count in seen.values())


@pytest.mark.parametrize(
    ("text", "min_turns", "max_turns"),
    [
        ("A", 1, 1),
        ("Bob -> Alice -> (Bob/Alice)*5", 7, 7),
        ("(A -> (B/C)*2)*(1..3) -> D", 4, 10),
        ("A -> B / C", 1, 2),
        ("(A -> B)*(0..2)*3", 0, 12),
        ("(A)*(0..1)*(0..1)", 0, 1),  # may give no turn, but can give one
        ("A*2*3", 6, 6),
        ("(A*(1..2) / B*(3..5))*(2..3)", 2, 15),
    ],
)
def test_turn_bounds(text, min_turns, max_turns):
    spec = parse_round_spec(text)
    assert (spec.min_turns, spec.max_turns) == (min_turns, max_turns)
    rng = random.Random(0)
    lengths = {len(spec.expand(rng)) for _ in range(500)}
    assert min(lengths) == min_turns
    assert max(lengths) == max_turns


NOT_A_NAME = "(a spec holds actor names, '->', '/', '*', parentheses and counts)"
COUNT = "a count after '*' (an integer, or a range such as (1..3))"


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("", "expected an actor name or '(' at position 0, found end of spec", 0),
        ("   ", "expected an actor name or '(' at position 3, found end of spec", 3),
        ("Bob -> -> Alice", "expected an actor name or '(' at position 7, found '->'", 7),
        ("-> Alice", "expected an actor name or '(' at position 0, found '->'", 0),
        ("Bob ->", "expected an actor name or '(' at position 6, found end of spec", 6),
        ("Bob / ", "expected an actor name or '(' at position 6, found end of spec", 6),
        ("Bob / / Alice", "expected an actor name or '(' at position 6, found '/'", 6),
        ("()", "expected an actor name or '(' at position 1, found ')'", 1),
        ("Bob -> 2", "expected an actor name or '(' at position 7, found '2'", 7),
        ("Bob*", f"expected {COUNT} at position 4, found end of spec", 4),
        ("Bob * Alice", f"expected {COUNT} at position 6, found 'Alice'", 6),
        ("Bob*0", NO_TURN, 0),
        ("Bob*(3..1)", "a range must not run backwards (its start above its end) at position 4, found 3..1", 4),
        ("Bob*(0..0)", NO_TURN, 0),
        ("(Bob*0 / Alice*(0..0))*3", NO_TURN, 0),
        ("Bob*1000000000", f"{TOO_LONG.format(4)} the count 1000000000", 4),
        ("Alice*99999999999", f"{TOO_LONG.format(6)} the count 99999999999", 6),
        ("Bob*(1..1001)", f"{TOO_LONG.format(4)} a part that gives up to 1001 turns", 4),
        ("Bob*" + "9" * 5000, f"{TOO_LONG.format(4)} a count of 5000 digits", 4),  # not int()-ed: no ValueError
        ("(Bob -> Alice)*501", f"{TOO_LONG.format(15)} a part that gives up to 1002 turns", 15),
        ("(Bob*10)*(0..101)", f"{TOO_LONG.format(9)} a part that gives up to 1010 turns", 9),
        ("Bob*999 -> Alice -> Bob", f"{TOO_LONG.format(17)} a part that gives up to 1001 turns", 17),
        ("Bob*(1 3)", "expected '..' in the range at position 7, found '3'", 7),
        ("Bob*(..3)", "expected an integer at position 5, found '..'", 5),
        ("Bob*(1..)", "expected an integer at position 8, found ')'", 8),
        ("Bob*(1..3", "unclosed '(' at position 4: expected ')' at position 9, found end of spec", 9),
        ("Bob*(1..3 Alice", "expected ')' to close the range at position 10, found 'Alice'", 10),
        ("(Bob -> Alice", "unclosed '(' at position 0: expected ')' at position 13, found end of spec", 13),
        ("((Bob) -> Alice", "unclosed '(' at position 0: expected ')' at position 15, found end of spec", 15),
        ("(Bob Alice)", "expected '->', '/', '*' or ')' at position 5, found 'Alice'", 5),
        ("Bob -> Alice)", "unmatched ')' at position 12: no '(' is open", 12),
        ("Bob Alice", "expected '->', '/', '*' or end of spec at position 4, found 'Alice'", 4),
        ("Bob $ Alice", f"unexpected character '$' at position 4 {NOT_A_NAME}", 4),
        ("Bob*-1", f"unexpected character '-' at position 4 {NOT_A_NAME}", 4),
        ("Bob*(1...3)", f"unexpected character '.' at position 8 {NOT_A_NAME}", 8),
        ("Bob - > Alice", f"unexpected character '-' at position 4 {NOT_A_NAME}", 4),
        ("Bob- > Alice", f"unexpected character '>' at position 5 {NOT_A_NAME}", 5),  # 'Bob-' is a name, '>' is not
        ("Bob => Alice", f"unexpected character '=' at position 4 {NOT_A_NAME}", 4),
        ("Bob -> -> $", "expected an actor name or '(' at position 7, found '->'", 7),  # the first mistake is reported
    ],
)
def test_invalid_specs_say_what_and_where(text, message, position):
    with pytest.raises(RoundSpecError) as caught:
        parse_round_spec(text)
    error = caught.value
    assert (error.position, error.spec, error.reason) == (position, text, message)
    assert str(error).splitlines() == [message, f"  {text}", " " * (position + 2) + "^"]


def test_the_caret_line_stays_under_the_mistake_when_the_spec_has_tabs_and_newlines():
    with pytest.raises(RoundSpecError) as caught:
        parse_round_spec("Bob\t->\n->")
    assert str(caught.value) == "expected an actor name or '(' at position 7, found '->'\n  Bob -> ->\n         ^"


def test_the_documented_example_error():
    with pytest.raises(RoundSpecError) as caught:
        parse_round_spec("Bob -> -> Alice")
    assert str(caught.value) == "expected an actor name or '(' at position 7, found '->'\n  Bob -> -> Alice\n         ^"


@pytest.mark.parametrize(
    ("text", "actors", "message", "position"),
    [
        ("Bob -> Alcie", ["Bob", "Alice"], "unknown actor 'Alcie' at position 7 (did you mean 'Alice'?); "
         "the actors are: Alice, Bob", 7),
        ("(Bob/Zed)*2", {"Bob", "Alice"}, "unknown actor 'Zed' at position 5; the actors are: Alice, Bob", 5),
        ("Bob", [], "unknown actor 'Bob' at position 0; no actors are declared", 0),
        ("Bob -> Alcie -> $", ["Bob", "Alice"], "unknown actor 'Alcie' at position 7 (did you mean 'Alice'?); "
         "the actors are: Alice, Bob", 7),
    ],
)
def test_unknown_actors(text, actors, message, position):
    with pytest.raises(RoundSpecError) as caught:
        parse_round_spec(text, actors)
    assert (caught.value.reason, caught.value.position) == (message, position)
    assert str(caught.value).splitlines()[2] == " " * (position + 2) + "^"


def test_known_actors_pass_and_unused_ones_are_fine():
    spec = parse_round_spec("Bob -> (Bob/Alice)*2", actors=iter(["Alice", "Bob", "Carol"]))
    assert spec.actors == ("Bob", "Alice")


def test_actors_given_as_one_string_are_refused():
    with pytest.raises(TypeError, match="collection of names"):
        parse_round_spec("Bob", actors="Bob")


@pytest.mark.parametrize(("value", "shown"), [(None, "None"), (5, "5"), (["A"], "['A']")])
def test_a_spec_that_is_not_a_string(value, shown):
    with pytest.raises(RoundSpecError) as caught:
        parse_round_spec(value)
    assert str(caught.value).splitlines() == [f"a round spec must be a string, found {type(value).__name__}",
                                              f"  {shown}", "  ^"]


def test_nesting_too_deep_is_an_error_not_a_recursion_error():
    text = "(" * 150 + "A" + ")" * 150
    with pytest.raises(RoundSpecError) as caught:
        parse_round_spec(text)
    assert caught.value.position == 100
    assert parse_round_spec("(" * 100 + "A" + ")" * 100).root == A


def test_the_error_is_a_value_error_and_survives_pickling():
    with pytest.raises(ValueError) as caught:
        parse_round_spec("Bob ->")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (type(copy), str(copy), copy.position, copy.spec) == (RoundSpecError, str(caught.value), 6, "Bob ->")


def test_hand_built_trees():
    spec = RoundSpec("built", Sequence((A, Repeat(Choice((B, C)), 1, 2))))
    assert (spec.actors, spec.min_turns, spec.max_turns, str(spec)) == (("A", "B", "C"), 2, 3, "A -> (B / C)*(1..2)")
    with pytest.raises(RoundSpecError, match="must be able to give a turn"):
        RoundSpec("empty", Sequence(()))
    with pytest.raises(RoundSpecError, match="must be able to give a turn"):
        RoundSpec("empty", Choice(()))
    with pytest.raises(TypeError, match="not a round spec node"):
        RoundSpec("bad", Sequence((A, "B")))  # type: ignore[arg-type]
    assert RoundSpec("skip", Sequence((A, Repeat(B, 0, 0)))).max_turns == 1
    for low, high in [(2, 1), (-1, 2)]:
        with pytest.raises(ValueError, match="a Repeat needs"):
            Repeat(A, low, high)


def test_nodes_are_frozen():
    spec = parse_round_spec("A -> B")
    with pytest.raises(AttributeError):
        spec.root.items = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        spec.max_turns = 3  # type: ignore[misc]


@pytest.mark.parametrize(("text", "lengths"), [("A -> B*0", {1}), ("A -> B*(0..0)", {1}), ("A -> B*(0..2)", {1, 2, 3})])
def test_a_count_of_zero_skips_the_part_in_both_forms(text, lengths):
    """0 is an ordinary count, fixed (``*0``: never) or as a range's start (``*(0..2)``: may be skipped); only
    a spec that can give no turn at all is refused."""
    spec = parse_round_spec(text)
    rng = random.Random(0)
    assert {len(spec.expand(rng)) for _ in range(200)} == lengths
    assert (spec.min_turns, spec.max_turns) == (min(lengths), max(lengths))


def test_the_longest_expansion_is_bounded_at_parse_time():
    """``Bob*1000000000`` once parsed and then expanded for minutes: the bound is checked while parsing,
    without building anything of the spec's expanded size."""
    assert parse_round_spec("Bob*1000").max_turns == 1000  # the default bound, reached exactly
    assert parse_round_spec("(Bob -> Alice)*(0..500)").max_turns == 1000
    assert parse_round_spec("Bob*5", max_turns=5).max_turns == 5
    with pytest.raises(RoundSpecError, match=r"at most 4 turns .* found a part that gives up to 5 turns") as caught:
        parse_round_spec("Bob*5", max_turns=4)
    assert caught.value.position == 4
    for bad in (0, -1, 2.5, True, None):
        with pytest.raises(ValueError, match="max_turns must be a positive integer"):
            parse_round_spec("Bob", max_turns=bad)  # type: ignore[arg-type]
