"""Warm start for the generated tasks: the answer's form, not the task.

As :mod:`unstable.models.warmstart` teaches a tiny model to answer a board with a legal move and no
strategy, this teaches it to answer a problem in the right form with a uniformly random answer
(:func:`~unstable.environments.generated.random_answer`), and nothing about which answer is right:

* sorting: ``Sort ascending: 5 2 7`` answered with the list's own digits in a **random order**, the
  analogue of a legal move. The model learns to copy the digits (measured with the 1M model and the
  default 32,768 examples: 98% of its greedy answers are a permutation of the list), and is right
  about as often as a random order is (24% at length 3); sorting them is left to RL.
* arithmetic: ``What is a + b?`` answered with a random number in the level's answer range. The
  answer does not depend on the question, so the warm start has no reason to read the operands, and
  with the 1M model it does not: it gives one number to every problem, and GRPO then moves that one
  number to a frequent sum rather than learning to add (the README has the measurement).

The examples come from their own stream (``split="warm-start"``) over all problems, the held-out
ones included: their answers are random, so they say nothing of which answer is right (a random
order of three distinct digits is the sorted one 1 time in 6, as for any other list). Drawn from the
train half of the sorting lists only, the same warm start learned to copy far worse (17% of its
greedy answers were a permutation of the list, against 95%). The result is cached like the game
warm start, keyed by the base model and every setting.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from unstable.environments.generated import arithmetic_dataset, random_answer, sorting_dataset
from unstable.games.templates import get_template, render_prompt
from unstable.learners.checkpoints import atomic_save
from unstable.models.warmstart import _Example, _fingerprint, _loss
from unstable.utils.checks import check_int, check_positive

TASK_WARM_START_VERSION = 3
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
    """Training examples (problems with random answers), each seen once. Copying the digits of a
    length-3 sorting list needs this many with the 1M model: 8,192 left 0.8% of its answers sorted."""
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


def task_warm_start(base_model: str | os.PathLike, out_dir: str | os.PathLike, cfg: TaskWarmStartConfig | None = None,
                    *, progress: Callable[[int, int, float], None] | None = None) -> Path:
    """Fine-tune ``base_model`` on problems answered with random numbers; save it to ``out_dir``.

    ``progress(step, total_steps, loss)`` is called every few steps.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = cfg or TaskWarmStartConfig()
    torch.manual_seed(cfg.seed)
    rng = random.Random(f"unstable/task-warm-start/{cfg.seed}")
    tokenizer = AutoTokenizer.from_pretrained(str(base_model))
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=torch.float32)
    model.train()
    end = tokenizer.eos_token or ""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = task_dataset(cfg.task, cfg.examples, cfg.level, seed=cfg.seed, split="warm-start")
    examples = []
    for row in rows:
        prompt = tokenizer(render_prompt(cfg.prompt_template, row["question"]), add_special_tokens=False).input_ids
        answer = tokenizer(f"\\boxed{{{random_answer(row, rng)}}}{end}", add_special_tokens=False).input_ids
        examples.append(_Example(prompt + answer, len(prompt), None, ()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    steps = math.ceil(len(examples) / cfg.batch_size)
    for step in range(steps):
        warm = (step + 1) / cfg.warmup_steps if step < cfg.warmup_steps else None
        frac = (step - cfg.warmup_steps) / max(1, steps - cfg.warmup_steps)
        scale = warm if warm is not None else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))
        for group in optimizer.param_groups:
            group["lr"] = cfg.learning_rate * scale
        loss, _ = _loss(model, examples[step * cfg.batch_size: (step + 1) * cfg.batch_size], pad_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if progress is not None and (step % 20 == 0 or step == steps - 1):
            progress(step + 1, steps, float(loss.detach()))
    model.eval()
    out = Path(out_dir)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "warm_start.json").write_text(json.dumps({"version": TASK_WARM_START_VERSION,
                                                         "base_model": str(base_model), **asdict(cfg)}, indent=2))

    if out.exists():
        shutil.rmtree(out)
    atomic_save(out, write)
    return out


def task_warm_start_path(base_model: str | os.PathLike, cfg: TaskWarmStartConfig | None = None, *,
                         cache_dir: str | os.PathLike | None = None,
                         progress: Callable[[int, int, float], None] | None = None) -> tuple[Path, bool]:
    """The cached task warm start of ``base_model`` under ``cfg``, built first if missing; ``(path, cached)``."""
    from unstable.models.tiny import _default_cache_root

    cfg = cfg or TaskWarmStartConfig()
    base = Path(base_model)
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"warm start needs a local model directory with config.json, got {base_model!r}")
    key = hashlib.sha256(json.dumps({"v": TASK_WARM_START_VERSION, "base": _fingerprint(base), **asdict(cfg)},
                                    sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else _default_cache_root().parent / "warm-starts"
    path = root / f"{base.name}-{cfg.task}-{key}"
    if (path / "warm_start.json").is_file():
        return path, True
    started = time.perf_counter()
    task_warm_start(base, path, cfg, progress=progress)
    (path / "build_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    return path, False
