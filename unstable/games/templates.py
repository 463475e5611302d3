"""Prompt templates: how a TextArena observation becomes the text a model is asked to continue.

Every built-in template asks the model to reason first and then put its move in ``\\boxed{}``
(the convention of the seed library and of SPIRAL). Add your own with :func:`register_template`::

    unstable.register_template("terse", "Board:\\n{observation}\\nMove in \\\\boxed{{}}:")
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

TemplateFn = Callable[[str], str]

_ZERO_SUM = "You are playing a two-player zero-sum game. Make valid actions to win."
_SINGLE = "You are playing a single-player game. Make valid actions to solve it."
_REASON_THEN_BOX = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A registered template: its ``name``, the ``render`` function from observation to prompt and a one-line
    ``description``; calling it renders."""

    name: str
    render: TemplateFn
    description: str = ""

    def __call__(self, observation: str) -> str:
        return self.render(observation)


def _default(obs: str) -> str:
    return (
        "You are playing a two-player zero-sum game. Make valid moves to win. "
        "You should first reason about your next move, and then submit the move enclosed by \\boxed{}.\n"
        f"Observation: {obs}\n"
    )


def _qwen3_user(instruction: str, obs: str) -> str:
    return f"<|im_start|>user\n{instruction}\nObservation: {obs}\n{_REASON_THEN_BOX}<|im_end|>\n"


def _qwen3_zs(obs: str) -> str:
    return _qwen3_user(_ZERO_SUM, obs) + "<|im_start|>assistant\n"


def _qwen3_sp(obs: str) -> str:
    return _qwen3_user(_SINGLE, obs) + "<|im_start|>assistant\n"


def _qwen3_reasoning(obs: str) -> str:
    return _qwen3_user(_ZERO_SUM, obs) + "<|im_start|>assistant\n<think>"


_BOARD_MARKERS = ("Current Board:", "Board state:", "Current board:")


def board_view(obs: str) -> str:
    """The observation from its last board onwards (the board and the legal moves), or all of it.

    TextArena's ``-train`` board wrappers end every observation with the current board and the
    legal moves, after the game's rules and the move history; a small model needs only that part.
    Who is to move is left out: in alternating games like TicTacToe it follows from the board, and
    its digit ("Player 1") would sit among the move numbers a small model learns to pick from.
    """
    start = max(obs.rfind(marker) for marker in _BOARD_MARKERS)
    return obs[start:].strip() if start >= 0 else obs


def _qwen3_task(obs: str) -> str:
    return f"<|im_start|>user\n{obs}\nAnswer in \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"


def _qwen3_board(obs: str) -> str:
    return f"<|im_start|>user\n{board_view(obs)}\nAnswer in \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"


_MARK = re.compile(r"you will be '(\S)'")


def grid_view(obs: str) -> str:
    """The player's mark and the current board as a compact grid: one token a cell, at fixed offsets.

    TextArena draws TicTacToe's board as `` X | 4 | O `` rows between ``---+---+---`` rules, so an empty
    cell is two tokens (a space and its number) and a mark one: where a cell's token sits in the prompt
    depends on how many cells before it are taken. Here each row is ``X|4|O``: a cell is always one token at
    the same place, an empty one still shows its number (the move that fills it). Who the player is comes
    from the game's rules (``you will be 'O'``); in :func:`board_view` it is left to be inferred from the
    marks' count. Measured on the 1M model imitating the ``optimal`` player: rounds take half the time of
    ``qwen3-board``'s (31 tokens instead of 69), and 12 rounds of 20,480 positions made its greedy policy
    unexploitable (docs/training.md). Raises ``ValueError`` on an observation without such a board.
    """
    view = board_view(obs)
    rows = [line for line in view.splitlines() if "|" in line and "---" not in line]
    if not rows:
        raise ValueError("template 'qwen3-grid' reads a board drawn as rows of cells separated by '|' (TextArena's "
                         f"TicTacToe); this observation has none, so use 'qwen3-board': {view[:120]!r}")
    mark = _MARK.search(obs)
    you = f"You are {mark.group(1)}.\n" if mark else ""
    return you + "\n".join("|".join(cell.strip() for cell in row.split("|")) for row in rows)


def _qwen3_grid(obs: str) -> str:
    return f"<|im_start|>user\n{grid_view(obs)}\nAnswer in \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"


_HAND = "### Starting round"
_CARD = re.compile(r"Your card is: '([JQKA])'")
_BET = re.compile(r"Player \d, submitted move: '(\[\w+\])'")
_ACTIONS = re.compile(r"Your available actions are: (.+)")


def hand_view(obs: str) -> str:
    """The player's card, this hand's moves so far and the legal moves, in three short lines (Kuhn poker).

    TextArena's KuhnPoker prompt is ~200 tokens of rules with the card one token among them; each hand's
    bets follow as ``Player 1, submitted move: '[check]'.`` lines. Here: ``Card: J``, ``Played: [check]
    [bet]`` (``-`` before the first move), ``Moves: [fold] [call]``, about 20 tokens with the card always at the
    same place. Who opened is the number of moves played (the betting tree is the same in either seat).
    Raises ``ValueError`` on an observation without a hand and a card.
    """
    start = obs.rfind(_HAND)
    card = _CARD.search(obs, max(start, 0))
    actions = _ACTIONS.findall(obs)
    if start < 0 or card is None or not actions:
        raise ValueError("template 'qwen3-hand' reads a Kuhn poker hand ('### Starting round', \"Your card is: 'J'\" "
                         f"and the available actions); this observation has none, so use 'qwen3-board': "
                         f"{obs[-160:]!r}")
    played = " ".join(_BET.findall(obs, start)) or "-"
    moves = " ".join(m.strip("'\" ") for m in actions[-1].split(","))
    return f"Card: {card.group(1)}\nPlayed: {played}\nMoves: {moves}"


def _qwen3_hand(obs: str) -> str:
    return f"<|im_start|>user\n{hand_view(obs)}\nAnswer in \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"


_SPIEL_SEAT = re.compile(r"^You are player (\d+)\.$", re.MULTILINE)


def spiel_view(obs: str) -> str:
    """An OpenSpiel game's observation (:func:`unstable.games.openspiel.observation`) cut to what a small model
    needs: ``P<seat>``, the seat's view of the game (its information-state or board string) and the legal
    moves, each on its own lines in that order. Raises ``ValueError`` on any other observation."""
    seat = _SPIEL_SEAT.search(obs)
    state = obs.find("\nState:\n")
    moves = obs.rfind("\nMoves: ")
    if seat is None or state < 0 or moves < state:
        raise ValueError("template 'qwen3-spiel' reads an OpenSpiel game's observation ('openspiel:' env ids); "
                         f"this one is not, so use 'qwen3-board': {obs[-160:]!r}")
    return f"P{seat.group(1)}\n{obs[state + 8:moves]}\n{obs[moves + 1:]}"


def _qwen3_spiel(obs: str) -> str:
    return f"<|im_start|>user\n{spiel_view(obs)}\nAnswer in \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"


def _gemma3_zs(obs: str) -> str:
    return (
        f"<start_of_turn>user\n{_ZERO_SUM}\nObservation: {obs}\n{_REASON_THEN_BOX}<end_of_turn>\n<start_of_turn>model\n"
    )


def _llama_instruct_zs(obs: str) -> str:
    return (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"{_ZERO_SUM}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        f"Observation: {obs}\n{_REASON_THEN_BOX}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


_TEMPLATES: dict[str, PromptTemplate] = {}


def register_template(name: str, template: TemplateFn | str, *, description: str = "", overwrite: bool = False):
    """Register a prompt template under ``name``.

    ``template`` is either a function ``observation -> prompt`` or a format string with an
    ``{observation}`` field (literal braces doubled, as in ``str.format``).
    """
    if not isinstance(name, str) or not name:
        raise ValueError("template name must be a non-empty string")
    if name in _TEMPLATES and not overwrite:
        raise ValueError(f"prompt template {name!r} is already registered; pass overwrite=True to replace it")
    if isinstance(template, str):
        fmt = template
        if "{observation}" not in fmt:
            raise ValueError(f"template string for {name!r} must contain an '{{observation}}' field")
        fmt.format(observation="")  # fail now on unbalanced braces, not at the first game

        def render(obs: str, _fmt: str = fmt) -> str:
            return _fmt.format(observation=obs)

    elif callable(template):
        render = template
    else:
        raise TypeError(f"template must be a callable or a format string, got {type(template).__name__}")
    _TEMPLATES[name] = PromptTemplate(name=name, render=render, description=description)
    return _TEMPLATES[name]


def get_template(name: str) -> PromptTemplate:
    """The template registered under ``name``; ``ValueError`` listing the known ones when there is none."""
    try:
        return _TEMPLATES[name]
    except KeyError:
        raise ValueError(f"unknown prompt template {name!r}; known templates: {available_templates()}") from None


def available_templates() -> list[str]:
    """The names of the registered templates, sorted."""
    return sorted(_TEMPLATES)


def render_prompt(name: str, observation: str) -> str:
    """``observation`` rendered by the template registered under ``name``."""
    return get_template(name)(observation)


for _name, _fn, _desc in [
    ("default", _default, "plain text, no chat markers"),
    ("qwen3-zs", _qwen3_zs, "Qwen3 chat turn, two-player zero-sum game"),
    ("qwen3-sp", _qwen3_sp, "Qwen3 chat turn, single-player game"),
    ("qwen3-reasoning", _qwen3_reasoning, "Qwen3 chat turn with the assistant opening a <think> block"),
    ("gemma3-zs", _gemma3_zs, "Gemma 3 chat turn, two-player zero-sum game"),
    ("llama-instruct-zs", _llama_instruct_zs, "Llama 3 instruct turn with a system message"),
    ("qwen3-board", _qwen3_board, "Qwen3 chat turn with only the current board and moves (small models)"),
    ("qwen3-grid", _qwen3_grid, "Qwen3 chat turn with the player's mark and the board one token a cell (TicTacToe)"),
    ("qwen3-hand", _qwen3_hand, "Qwen3 chat turn with the player's card and the hand's moves (Kuhn poker)"),
    ("qwen3-spiel", _qwen3_spiel, "Qwen3 chat turn with the seat, its view and the moves (OpenSpiel games)"),
    ("qwen3-task", _qwen3_task, "Qwen3 chat turn: the task as it is, then 'Answer in \\boxed{}.' (environments)"),
]:
    register_template(_name, _fn, description=_desc)

_BUILT_IN = dict(_TEMPLATES)

# The seed library's name for the same table.
OBSERVATION_FORMATTING = _TEMPLATES


def custom_templates() -> dict[str, PromptTemplate]:
    """The templates registered in this process on top of the built-in ones (or replacing one).

    Registrations live in one process: build() hands these to the collector's Ray actor, which
    registers them there, so that a template registered in the user's script is the one played."""
    return {name: t for name, t in _TEMPLATES.items() if _BUILT_IN.get(name) is not t}
