"""Two trainable models take turns on one problem, in the order a round spec draws.

    python examples/collaborative_sorting.py --steps 10

Alice and Bob are two LoRA adapters on the same format-warm-started tiny model (the one
``unstable quickstart-task`` uses). Each episode is a list of 3 digits to sort; the turns follow
``'Bob -> Alice -> (Bob/Alice)*2'``: Bob answers, Alice sees his answer and gives hers, then two
more turns by either. Each is rewarded for its own last answer (exact match, plus the format
reward), and each model's learner trains on its own turns only, with GRPO over each model's
batch. The script prints both learners' progress and the run directory.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import unstable
from unstable.cli.task_quickstart import TaskQuickstartConfig
from unstable.environments import CollaborativeEnvironment, Participant, exact_match, sorting_dataset
from unstable.games.extraction import last_boxed_content

ROUND_SPEC = "Bob -> Alice -> (Bob/Alice)*2"


@unstable.reward_function(name="correct")
def correct(completion: str, answer: str) -> float:
    return exact_match(completion, answer)


@unstable.reward_function(name="format", weight=0.2)
def well_formed(completion: str) -> float:
    found = last_boxed_content(completion)
    return float(found is not None and bool(found.split()) and all(t.isdigit() for t in found.split()))


def main(steps: int = 10, out: str | None = None, batch_size: int = 64, workers: int = 16,
         warm_start_examples: int | None = None) -> dict:
    from unstable.local_models.tiny import tiny_model_path
    from unstable.models.task_warmstart import task_warm_start_path

    warm_start = TaskQuickstartConfig().warm_start
    if warm_start_examples is not None:  # a quicker, weaker warm start (the tests use one)
        warm_start = replace(warm_start, examples=warm_start_examples)
    model, _ = task_warm_start_path(tiny_model_path("1m"), warm_start)
    env = CollaborativeEnvironment(
        "duo", participants=[Participant("Bob", model="bob", system_prompt="You are Bob. Answer first."),
                             Participant("Alice", model="alice", system_prompt="You are Alice. Check Bob's answer.")],
        round_spec=ROUND_SPEC, reward_functions=[correct, well_formed], prompt_column="question",
        train_data=sorting_dataset(2000, split="train"))
    learner = {"batch_size": batch_size, "mini_batch_size": min(batch_size, 64), "learning_rate": 1e-3,
               "max_generation_len": 12, "activation_checkpointing": False, "gradient_checkpointing": False}
    runs_dir = Path(out or tempfile.mkdtemp(prefix="collaborative-"))
    run = unstable.build(
        models=[{"name": name, "model_name": str(model), "algorithm": "grpo", "learner": learner,
                 "lora": {"lora_rank": 8, "lora_alpha": 16},
                 "buffer": {"reward_transforms": (None, None, None)}, "inference": {"backend": "transformers"}}
                for name in ("alice", "bob")],
        train_envs=[env], wandb_project=None, runs_dir=str(runs_dir), run_name="duo")
    try:
        summary = run.start(learning_steps=steps, num_collection_workers=workers, num_eval_workers=0)
    finally:
        run.stop()
    print(f"run directory: {run.run_dir}")
    return {"run_dir": run.run_dir, "summary": summary}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="learner steps of each model")
    parser.add_argument("--out", default=None, help="where the run directory goes (default: a temporary directory)")
    main(**{k: v for k, v in vars(parser.parse_args()).items() if v is not None})
