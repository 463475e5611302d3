"""The single-turn CPU job: GRPO on a generated task, measured on held-out problems.

``unstable quickstart-task`` (or :func:`run_task_quickstart`) does, on a laptop CPU:

1. builds (or reuses) the tiny 1M-parameter model;
2. warm-starts it on the answer's form only (cached): ``Sort ascending: 5 2 7`` answered with the
   list's digits in a random order, as a game's warm start plays random legal moves, so it answers
   with the right digits and knows nothing of which order is right (see
   :mod:`unstable.models.task_warmstart`);
3. measures its exact-match accuracy on ``eval_problems`` held-out problems (greedy);
4. trains a LoRA adapter with GRPO through :func:`unstable.build`: a
   :class:`~unstable.environments.SingleTurnEnvironment` asks ``num_samples`` answers per problem,
   which form one group (``group_by=("env_id", "game_id")``, whole games per batch);
5. measures the final checkpoint the same way and writes ``RUN_DIR/summary.json``.

The default task sorts lists of 3 digits. Half of the 1,000 lists are held out
(:func:`~unstable.environments.generated.is_held_out_list`): training and the warm start draw from
the other half, and the evaluation plays each of the 500 held-out lists once.

``--task arithmetic`` adds two numbers. Its format warm start answers with a random number, which
does not depend on the question, and the 1M model it gives does not read the operands: GRPO then
learns one frequent answer, not addition (docs/environments.md has the measurement). At level 1, with only
100 problems, its held-out problems are independent draws that may repeat training problems;
``--level 2`` draws train and test from disjoint parts of its 10,000 problems.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from unstable.eval.intervals import compare_intervals, comparison_line
from unstable.models.task_warmstart import TaskWarmStartConfig
from unstable.utils.checks import check_int, check_positive


@dataclass
class TaskQuickstartConfig:
    """Settings of the single-turn job; the defaults are what ``unstable quickstart-task`` runs."""

    out: str | None = None
    """The run directory, which must not hold an earlier run (default: runs/quickstart-<date>-<time>)."""
    task: str = "sorting"
    """The generated task: ``"sorting"`` (sort a list of digits) or ``"arithmetic"`` (add two numbers; with
    the 1M model GRPO learns one frequent answer there, not addition)."""
    level: int = 3
    """Sorting: the list's length (3: 1,000 lists, 500 held out); arithmetic: operands of up to this many
    digits (1: 0..9, 100 problems)."""
    model_size: str = "1m"
    warm_start: TaskWarmStartConfig = field(default_factory=TaskWarmStartConfig)
    train_problems: int = 5000
    eval_problems: int = 500
    """Held-out problems of each evaluation (initial and final), greedy, exact match. For sorting they are
    distinct lists, at most half of ``10**level``."""
    num_samples: int = 8
    """Answers per problem: one GRPO group."""
    learning_steps: int = 60
    """Learner updates (GRPO)."""
    batch_size: int = 256
    """Answers per learner update (32 problems of 8)."""
    mini_batch_size: int | None = None
    """Answers per gradient step within an update; ``batch_size`` must be a multiple (default: the
    largest of 128, 64, 32, ... that divides ``batch_size``)."""
    learning_rate: float = 1e-3
    """Learning rate of the LoRA adapter (constant)."""
    format_weight: float = 0.2
    """Weight of the format reward (only digits in the box) next to exact match (weight 1): without it, on
    arithmetic, the many wrong answers' negative advantages pushed the answers out of the format within
    15 steps."""
    lora_rank: int = 16
    lora_alpha: int = 32
    num_collection_workers: int = 32
    """Problems in flight (each asks ``num_samples`` answers)."""
    max_new_tokens: int = 12
    seed: int = 0
    """Seeds the tiny model, the warm start, the problems and the run."""
    learner: dict[str, Any] = field(default_factory=dict)
    """More learner settings (``GRPOConfig`` fields), e.g. ``{"beta": 0.01}``."""

    def __post_init__(self) -> None:
        for name in ("level", "train_problems", "eval_problems", "num_samples", "learning_steps", "batch_size",
                     "lora_rank", "lora_alpha", "num_collection_workers", "max_new_tokens"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)
        if self.mini_batch_size is None:
            self.mini_batch_size = math.gcd(self.batch_size, 128)
        check_int("mini_batch_size", self.mini_batch_size, 1)
        if self.batch_size % self.mini_batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of mini_batch_size "
                             f"({self.mini_batch_size})")
        check_positive("learning_rate", self.learning_rate)
        if (self.warm_start.level, self.warm_start.task) != (self.level, self.task):
            self.warm_start = TaskWarmStartConfig(**{**asdict(self.warm_start), "level": self.level,
                                                     "task": self.task})


def task_environment(cfg: TaskQuickstartConfig) -> Any:
    """The job's environment: train problems, the held-out ``test`` set, exact-match and format rewards."""
    from unstable.environments import SingleTurnEnvironment, exact_match, reward_function
    from unstable.games.extraction import last_boxed_content
    from unstable.models.task_warmstart import task_dataset

    @reward_function(name="correct")
    def correct(completion: str, answer: str) -> float:
        return exact_match(completion, answer)

    @reward_function(name="format", weight=cfg.format_weight)
    def well_formed(completion: str) -> float:
        """Digits in the box: keeps the wrong answers' negative advantages from pushing out of the format."""
        found = last_boxed_content(completion)
        return float(found is not None and bool(found.split()) and all(t.isdigit() for t in found.split()))

    return SingleTurnEnvironment(
        cfg.task, reward_functions=[correct, well_formed], prompt_column="question", num_samples=cfg.num_samples,
        train_data=task_dataset(cfg.task, cfg.train_problems, cfg.level, seed=cfg.seed, split="train"),
        eval_data={"test": task_dataset(cfg.task, cfg.eval_problems, cfg.level, seed=cfg.seed, split="test")},
        seed=cfg.seed)


def _train(model: str, env: Any, cfg: TaskQuickstartConfig, run_dir: Path, say: Any) -> tuple[str, int]:
    import unstable
    from unstable.cli.quickstart import train_to_checkpoint

    run = unstable.build(
        model_name=model, train_envs=[env], algorithm="grpo",
        learner={"group_by": ("env_id", "game_id"), **cfg.learner},
        whole_games=True, reward_transforms=(None, None, None),
        batch_size=cfg.batch_size, mini_batch_size=cfg.mini_batch_size, learning_rate=cfg.learning_rate,
        gradient_clipping=1.0, max_generation_len=cfg.max_new_tokens, temperature=1.0,
        lora_config={"lora_rank": cfg.lora_rank, "lora_alpha": cfg.lora_alpha},
        activation_checkpointing=False, gradient_checkpointing=False, wandb_project=None,
        runs_dir=str(run_dir.parent), run_name=run_dir.name, seed=cfg.seed)
    return train_to_checkpoint(run, cfg.learning_steps, cfg.num_collection_workers, 0, say)


def run_task_quickstart(cfg: TaskQuickstartConfig | None = None, say: Any = print) -> dict[str, Any]:
    """Run the single-turn job and return the summary it writes to ``cfg.out/summary.json``."""
    from unstable.cli.quickstart import _check_out_dir
    from unstable.eval.environments import evaluate_environment
    from unstable.local_models.tiny import tiny_model_path
    from unstable.models.task_warmstart import task_warm_start_path
    from unstable.tracking.run_dir import atomic_write_json

    cfg = cfg or TaskQuickstartConfig()
    run_dir = _check_out_dir(cfg.out).resolve()
    env = task_environment(cfg)  # bad data settings (a level, too many held-out problems) fail before any work
    t0 = time.perf_counter()
    say(f"[1/5] tiny model ({cfg.model_size})")
    base = tiny_model_path(cfg.model_size, seed=cfg.seed)
    say(f"[2/5] warm start on the answer's form: rounds of {cfg.warm_start.examples} {cfg.task} problems (level "
        f"{cfg.level}) answered at random, until it answers unseen ones validly")
    def step_said(s: int, n: int, loss: float) -> None:
        if s == n or s % 100 == 1:
            say(f"  step {s}/{n}: loss {loss:.3f}")

    def round_said(r: int, valid: float) -> None:
        say(f"  round {r}: {valid:.0%} of its greedy answers to unseen problems are valid "
            f"(target {cfg.warm_start.target_valid:.0%})")

    model, cached = task_warm_start_path(base, cfg.warm_start, progress=step_said, on_round=round_said)
    say(f"  {'reused the cached' if cached else 'saved the'} warm start: {model}")
    say(f"[3/5] exact-match accuracy of the starting checkpoint on {cfg.eval_problems} held-out problems (greedy)")
    initial = evaluate_environment(str(model), env, "test", sampling=_sampling(cfg), success="correct")
    say(f"  {initial.line()}")
    say(f"[4/5] GRPO: {cfg.learning_steps} learner steps of {cfg.batch_size} answers ({cfg.num_samples} per problem)"
        f" (watch it: unstable dashboard {run_dir})")
    run_dir.mkdir(parents=True, exist_ok=True)
    t_train = time.perf_counter()
    adapter, steps = _train(str(model), env, cfg, run_dir, say)
    train_s = time.perf_counter() - t_train
    say(f"[5/5] accuracy of the final checkpoint ({Path(adapter).name})")
    final = evaluate_environment(str(model), env, "test", sampling=_sampling(cfg), adapter=adapter, success="correct")
    say(f"  {final.line()}")
    change = compare_intervals(initial.success_ci95, final.success_ci95)
    summary = {"task": cfg.task, "level": cfg.level, "learner_steps": steps,
               "wall_s": round(time.perf_counter() - t0, 1), "train_wall_s": round(train_s, 1), "model": str(model),
               "warm_start_cached": cached, "eval": {"initial": initial.to_dict(), "final": final.to_dict(),
                                                     "decoding": "greedy", "metric": "exact match"},
               "improved": change == "higher", "worse": change == "lower", "config": asdict(cfg)}
    atomic_write_json(run_dir / "summary.json", summary)
    say("")
    say(f"exact-match accuracy on {cfg.eval_problems} held-out problems (95% intervals):")
    say(f"  initial (warm start)    {initial.line()}")
    say(f"  final ({steps} steps)    {final.line()}")
    verdict = comparison_line(change, "accuracy")
    say(f"  {verdict}; done in {summary['wall_s']:.0f}s")
    say(f"summary: {run_dir / 'summary.json'}")
    return summary


def _sampling(cfg: TaskQuickstartConfig) -> Any:
    from unstable.inference.base import SamplingParams

    return SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=cfg.max_new_tokens)
