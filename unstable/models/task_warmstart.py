"""Warm start for the generated tasks: the answer's form, not the task.

As :mod:`unstable.models.warmstart` teaches a tiny model to answer a board with a legal move and no
strategy, this teaches it to answer a problem in the right form with a uniformly random answer
(:func:`~unstable.environments.generated.random_answer`), and nothing about which answer is right:

* sorting: ``Sort ascending: 5 2 7`` answered with the list's own digits in a **random order**, the
  analogue of a legal move. The model learns to copy the digits and is right about as often as a
  random order is (a quarter of the time at length 3, with repeated digits); sorting them is left to RL.
  Training goes on in rounds of new problems until the greedy answers to unseen ones are valid
  (:func:`valid_answer`) ``target_valid`` of the time, as the game warm start trains until its
  moves are legal.
* arithmetic: ``What is a + b?`` answered with a random number in the level's answer range. The
  answer does not depend on the question, so the warm start has no reason to read the operands, and
  with the 1M model it does not: it gives one number to every problem, and GRPO then moves that one
  number to a frequent sum rather than learning to add (docs/environments.md has the measurement).

The examples come from their own stream (``split="warm-start"``) over all problems, the held-out
ones included: their answers are random, so they say nothing of which answer is right (a random
order of three distinct digits is the sorted one 1 time in 6, as for any other list). Drawn from the
train half of the sorting lists only, the same warm start learned to copy far worse (17% of its
greedy answers were a permutation of the list, against 95%). The result is cached like the game
warm start, keyed by the base model and every setting.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from unstable.environments.generated import answer_range, arithmetic_dataset, random_answer, sorting_dataset
from unstable.games.extraction import last_boxed_content
from unstable.games.templates import get_template, render_prompt
from unstable.learners.checkpoints import atomic_save
from unstable.models.warmstart import _Example, cached_warm_start, lr_scale, supervised_step
from unstable.utils.checks import check_int, check_positive

TASK_WARM_START_VERSION = 4
"""Bump when the recipe changes: cached warm starts are keyed by it."""


@dataclass(frozen=True)
class TaskWarmStartConfig:
    """Settings of :func:`task_warm_start` (all part of the cache key)."""

    task: str = "sorting"
    """The generated task: ``"sorting"`` or ``"arithmetic"``."""
    level: int = 3
    """The arithmetic level (operands of up to ``level`` digits), or the sorting list's length."""
    prompt_template: str = "qwen3-task"
    """How problems are rendered: use the template the run will use."""
    examples: int = 32_768
    """Training examples per round (problems with random answers), each seen once."""
    target_valid: float = 0.9
    """Stop after the first round whose greedy answers to ``held_out`` unseen problems are valid this
    often: the list's own digits (sorting), a number in the answer range (arithmetic)."""
    max_rounds: int = 4
    """Rounds at most. With the 1M model one round of 32,768 examples learned to copy a length-3
    list's digits from seed 0 (95% of its greedy answers valid) and not from seed 1 (25%): whether
    the copying forms within a round depends on the seed, so the warm start goes on until it has."""
    held_out: int = 256
    batch_size: int = 64
    learning_rate: float = 3e-3
    """Peak AdamW learning rate (all weights), with linear warm-up and cosine decay to 10%."""
    warmup_steps: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("level", self.level, 1)
        if self.task not in ("arithmetic", "sorting"):
            raise ValueError(f"task must be 'arithmetic' or 'sorting', got {self.task!r}")
        get_template(self.prompt_template)
        check_int("examples", self.examples, 1)
        check_int("max_rounds", self.max_rounds, 1)
        check_int("held_out", self.held_out, 1)
        if not 0.0 <= self.target_valid <= 1.0:
            raise ValueError(f"target_valid must be within [0, 1], got {self.target_valid!r}")
        check_int("batch_size", self.batch_size, 1)
        check_int("warmup_steps", self.warmup_steps, 0)
        check_int("seed", self.seed, 0)
        check_positive("learning_rate", self.learning_rate)


def task_dataset(task: str, num_problems: int, level: int, *, seed: int, split: str) -> object:
    """The generated task's rows: arithmetic at ``level``, or sorting lists of length ``level``."""
    if task == "arithmetic":
        return arithmetic_dataset(num_problems, level=level, seed=seed, split=split,
                                  disjoint=None if split in ("train", "test") else False)
    if task == "sorting":
        return sorting_dataset(num_problems, length=level, seed=seed, split=split,
                               disjoint=split in ("train", "test"))
    raise ValueError(f"unknown task {task!r}; the generated tasks are 'arithmetic' and 'sorting'")


def valid_answer(row: Mapping[str, Any], completion: str) -> bool:
    """Whether ``completion`` answers ``row`` in the right form, right or wrong: a box holding the sorting
    list's own digits in any order, or a whole number in the arithmetic level's answer range."""
    content = last_boxed_content(completion)
    if content is None:
        return False
    if "items" in row:
        return sorted(content.split()) == sorted(map(str, row["items"]))
    low, high = answer_range(row["level"])
    return content.strip().isdigit() and low <= int(content) <= high


def valid_rate(model: Any, tokenizer: Any, rows: Any, prompt_template: str, *, batch_size: int = 64) -> float:
    """The share of ``rows`` that ``model`` answers validly (:func:`valid_answer`) when decoding greedily."""
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    valid = 0
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows.select(range(start, min(start + batch_size, len(rows))))
            enc = tokenizer([render_prompt(prompt_template, q) for q in batch["question"]], return_tensors="pt",
                            padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=2 * max(batch["level"]) + 8, do_sample=False,
                                     pad_token_id=pad_id)
            texts = tokenizer.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
            valid += sum(valid_answer(row, text) for row, text in zip(batch, texts, strict=True))
    finally:
        tokenizer.padding_side = side
    return valid / len(rows)


def task_warm_start(base_model: str | os.PathLike, out_dir: str | os.PathLike, cfg: TaskWarmStartConfig | None = None,
                    *, progress: Callable[[int, int, float], None] | None = None,
                    on_round: Callable[[int, float], None] | None = None) -> Path:
    """Fine-tune ``base_model`` on problems answered at random, in rounds of ``cfg.examples`` new problems
    until its greedy answers to unseen problems are valid ``cfg.target_valid`` of the time (or
    ``cfg.max_rounds``); save it to ``out_dir``, with each round's valid rate in ``warm_start.json``.

    ``progress(step, steps, loss)`` is called every few steps of a round, ``on_round(round, valid)`` after each.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = cfg or TaskWarmStartConfig()
    torch.manual_seed(cfg.seed)
    rng = random.Random(f"unstable/task-warm-start/{cfg.seed}")
    tokenizer = AutoTokenizer.from_pretrained(str(base_model))
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=torch.float32)
    end = tokenizer.eos_token or ""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    held_out = task_dataset(cfg.task, cfg.held_out, cfg.level, seed=cfg.seed, split="warm-start-check")
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    rounds: list[dict[str, float]] = []
    for round_ in range(1, cfg.max_rounds + 1):
        split = "warm-start" if round_ == 1 else f"warm-start-{round_}"  # new problems every round
        examples = []
        for row in task_dataset(cfg.task, cfg.examples, cfg.level, seed=cfg.seed, split=split):
            prompt = tokenizer(render_prompt(cfg.prompt_template, row["question"]), add_special_tokens=False).input_ids
            answer = tokenizer(f"\\boxed{{{random_answer(row, rng)}}}{end}", add_special_tokens=False).input_ids
            examples.append(_Example(prompt + answer, len(prompt), None, ()))
        model.train()
        steps = math.ceil(len(examples) / cfg.batch_size)
        for step in range(steps):  # linear warm-up, then cosine decay to 10%, in every round
            lr = cfg.learning_rate * lr_scale(step, steps, cfg.warmup_steps)
            loss, _ = supervised_step(model, optimizer, examples[step * cfg.batch_size: (step + 1) * cfg.batch_size],
                                      pad_id, lr)
            if progress is not None and (step % 20 == 0 or step == steps - 1):
                progress(step + 1, steps, float(loss.detach()))
        model.eval()
        valid = valid_rate(model, tokenizer, held_out, cfg.prompt_template, batch_size=cfg.batch_size)
        rounds.append({"round": round_, "examples": len(examples), "held_out_valid": valid})
        if on_round is not None:
            on_round(round_, valid)
        if valid >= cfg.target_valid:
            break
    out = Path(out_dir)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {"version": TASK_WARM_START_VERSION, "base_model": str(base_model), **asdict(cfg), "rounds": rounds}
        (tmp / "warm_start.json").write_text(json.dumps(record, indent=2))

    if out.exists():
        shutil.rmtree(out)
    atomic_save(out, write)
    return out


def task_warm_start_path(base_model: str | os.PathLike, cfg: TaskWarmStartConfig | None = None, *,
                         cache_dir: str | os.PathLike | None = None,
                         progress: Callable[[int, int, float], None] | None = None,
                         on_round: Callable[[int, float], None] | None = None) -> tuple[Path, bool]:
    """The cached task warm start of ``base_model`` under ``cfg``, built first if missing; ``(path, cached)``."""
    cfg = cfg or TaskWarmStartConfig()
    return cached_warm_start(base_model, asdict(cfg), TASK_WARM_START_VERSION, cfg.task, cache_dir,
                             lambda base, path: task_warm_start(base, path, cfg, progress=progress, on_round=on_round))
