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


def test_the_grid_template_puts_each_cell_in_one_token_at_a_fixed_place_and_names_the_mark():
    """``qwen3-grid`` on real TicTacToe observations: the player's mark from the rules, one row of ``X|4|O`` per
    board row, and each cell a single token of the tiny models' tokenizer at the same index whichever cells
    are taken (in ``qwen3-board`` an empty cell is two tokens, so later cells move)."""
    from transformers import AutoTokenizer

    from unstable.eval.game_states import replay
    from unstable.local_models.tiny import tiny_model_path

    _, opening, _ = replay("TicTacToe-v0-train", ())
    player, later, _ = replay("TicTacToe-v0-train", ("[4]", "[0]", "[5]"))
    assert player == 1
    assert render_prompt("qwen3-grid", later) == ("<|im_start|>user\nYou are X.\nX|1|2\n3|O|O\n6|7|8\n"
                                                  "Answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n")
    assert "You are O.\n0|1|2\n3|4|5\n6|7|8\n" in render_prompt("qwen3-grid", opening)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path("1m")))
    tokens = [[tokenizer.decode([t]) for t in tokenizer(render_prompt(name, obs)).input_ids]
              for name in ("qwen3-grid", "qwen3-board") for obs in (opening, later)]
    grid_opening, grid_later, board_opening, board_later = tokens
    assert len(grid_opening) == len(grid_later) < len(board_later) < len(board_opening)
    cells = [i for i, t in enumerate(grid_opening) if t in "012345678" and t]
    assert len(cells) == 9 and [grid_later[i] for i in cells] == list("X123OO678")


def test_the_grid_template_refuses_a_board_it_cannot_read():
    with pytest.raises(ValueError, match=r"qwen3-grid.*use 'qwen3-board'"):
        render_prompt("qwen3-grid", "Board state:\n0 1 2 3 4 5 6\n-------------\n. . . . . . .")


def test_the_hand_template_shows_the_card_and_this_hands_moves_only():
    """``qwen3-hand`` on real Kuhn poker observations: the card, the moves of the current hand (in
    ``KuhnPoker-v0``'s later rounds, not the earlier rounds' ones) and the legal moves; the card is one token
    of the tiny models' tokenizer at the same index in every prompt."""
    from transformers import AutoTokenizer

    from unstable.local_models.tiny import tiny_model_path
    from unstable.models.warmstart import random_game_positions

    one_hand = random_game_positions("KuhnPoker-v0-chips-train", 40, seed=1)
    views = {render_prompt("qwen3-hand", p.observation).split("user\n")[1].split("\nAnswer")[0] for p in one_hand}
    assert {"Card: J\nPlayed: -\nMoves: [check] [bet]", "Card: Q\nPlayed: [check] [bet]\nMoves: [fold] [call]",
            "Card: K\nPlayed: [bet]\nMoves: [fold] [call]", "Card: J\nPlayed: [check]\nMoves: [check] [bet]"} <= views
    assert len(views) == 12  # Kuhn poker's information sets, each its own prompt
    three_hands = random_game_positions("KuhnPoker-v0-train", 60, seed=1)
    later = [p for p in three_hands if "### Starting round 3" in p.observation]
    assert later and all(render_prompt("qwen3-hand", p.observation).count("[") <= 4 for p in later)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path("1m")))
    rows = [[tokenizer.decode([t]) for t in tokenizer(render_prompt("qwen3-hand", p.observation)).input_ids]
            for p in one_hand]
    index = rows[0].index(" " + one_hand[0].observation.split("Your card is: '")[1][0])
    assert all(row[index] == " " + p.observation.split("Your card is: '")[1][0]
               for row, p in zip(rows, one_hand, strict=True))
    assert max(map(len, rows)) < 40


def test_the_hand_template_refuses_an_observation_without_a_hand():
    with pytest.raises(ValueError, match=r"qwen3-hand.*use 'qwen3-board'"):
        render_prompt("qwen3-hand", "Current Board:\n X | O | 2\nAvailable Moves: '[2]'")
