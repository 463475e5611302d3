"""The in-run exploitability evaluator as a Ray actor (the plain class: :mod:`unstable.eval.in_run`).

It lives on the driver's node with the other light actors and reserves no CPU from Ray: it is one more
process beside the learner and the inference actors, with one torch thread, at a lower priority
(:data:`EVALUATOR_NICENESS`), so it reads policies mostly with CPU time they leave idle instead of
taking a core from them. The learner never waits for it (its hook only queues the checkpoint);
``Run.wait()`` waits for the last checkpoint's evaluation once training and collection have stopped, at
niceness 0 where the OS permits it, for at most ``exploitability_wait_s``. The measurement is optional:
if the actor dies, the run goes on without it (:class:`OptionalHook`) and ends as it would have.
"""

from __future__ import annotations

from typing import Any

from ray.exceptions import RayActorError

from unstable.eval.in_run import ExploitabilityEvaluator, SubmitCheckpoint, checkpoint_files, plan_exploitability
from unstable.games.extraction import custom_action_extractions
from unstable.inference.base import SamplingParams
from unstable.run.remote import actor_class

EVALUATOR_NICENESS = 4
"""Added to the evaluator process's niceness: where the learner and the inference actors want every core,
the OS gives them the CPU first (Linux weighs a thread 4 steps nicer about 0.41 of one at the other's
priority). 4 is the gap the evaluator's costs in docs/evaluation.md were measured at, when Ray's workers ran at
niceness 15 and the evaluator at the limit, 19; with the workers at 0 (:func:`~unstable.run.wiring.init_local_ray`),
10 left it 0.11 and it read almost no checkpoint before training ended."""


class CheckpointHooks:
    """Several ``on_checkpoint`` hooks, called in order (a ``None`` is left out)."""

    def __init__(self, *hooks: Any):
        self.hooks = [hook for hook in hooks if hook is not None]

    def __call__(self, version: int) -> None:
        for hook in self.hooks:
            hook(version)


class OptionalHook:
    """A learner hook that feeds an optional side actor (the evaluator): if the actor dies, the run goes on
    without it, said once, instead of the learner's hook raising and stopping the run."""

    def __init__(self, hook: Any, what: str):
        self.hook, self.what, self.dead = hook, what, False

    def __call__(self, version: int) -> None:
        if self.dead:
            return
        try:
            self.hook(version)
        except RayActorError as exc:
            self.dead = True
            print(f"unstable: warning: the {self.what} died ({type(exc).__name__}); the run goes on without it",
                  flush=True)


def start_evaluator(cfg: Any, tracker: Any, checkpoints_dir: str, sampling: SamplingParams,
                    start: tuple[int, str | None], options: dict[str, Any]) -> tuple[Any, Any]:
    """The evaluator actor of a run and the learner hook that feeds it, or ``(None, None)`` when the run
    has nothing to evaluate (``exploitability_eval="off"``, or no eval env that supports it; each env
    left out is said once, with why). ``start``: the checkpoint the run starts from, ``(version, its
    directory)`` (``(0, None)``: the base model), evaluated first."""
    targets, skipped = plan_exploitability(cfg.eval_envs, cfg.exploitability_eval, models=len(cfg.models))
    for line in skipped:
        print(f"unstable: no in-run exploitability for {line}", flush=True)
    if not targets:
        return None, None
    model = cfg.models[0]
    nfsp = model.learner.get("average_reservoir") is not None  # NFSP's average policy: read it too
    evaluator = actor_class(ExploitabilityEvaluator).options(**options).remote(
        model.model_name, targets, sampling, tracker, torch_threads=1, nice=EVALUATOR_NICENESS,
        action_extractions=custom_action_extractions(), nfsp_average=nfsp)
    version, path = start
    files = checkpoint_files(path, nfsp) if path else ()
    evaluator.submit.remote(version, path, *files)  # its error: at the next submit
    legal = ", legal moves only" if sampling.legal_moves_only else ""
    print(f"unstable: in-run exploitability of each checkpoint on {', '.join(t.env_id for t in targets)} "
          f"(T={sampling.temperature:g}, top_p={sampling.top_p:g}{legal}; exploitability_eval='off' turns it off)",
          flush=True)
    hook = OptionalHook(SubmitCheckpoint(evaluator, checkpoints_dir, nfsp), "in-run exploitability evaluator")
    return evaluator, hook
