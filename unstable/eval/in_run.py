"""Exploitability during a run: each new checkpoint's exact exploitability, read beside training.

With ``build(exploitability_eval="auto")`` (the default), a run whose ``eval_envs`` hold a game with an
exact solver (TicTacToe, KuhnPoker: :data:`~unstable.eval.game_states.SOLVED_GAMES`) played with a
direct-answer template (``qwen3-board``, ``qwen3-task``: the exact reading applies, see
:func:`~unstable.eval.policy_reading.default_method`) evaluates its checkpoints' exploitability while
it trains, with :func:`~unstable.eval.exploitability.evaluate_exploitability` at the sampling settings
its eval games use (temperature, top-p, ``max_generation_len``). :func:`plan_exploitability` picks those
envs and says why it leaves the others out (the run prints it once): the K-sample estimate of a template
that lets the model reason first costs states x samples generations, far too slow beside training.

:class:`ExploitabilityEvaluator` holds its own copy of the base model (a
:class:`~unstable.inference.transformers_backend.TransformersBackend`, on CPU) and evaluates in a
thread of its own. :meth:`~ExploitabilityEvaluator.submit` only records a checkpoint, so the learner's
``on_checkpoint`` hook (:class:`SubmitCheckpoint`) waits for no evaluation; the thread evaluates the
newest checkpoint submitted whenever it is free (a checkpoint that a newer one overtook meanwhile is
skipped, and counted), and :meth:`~ExploitabilityEvaluator.finish`, at the end of the run, waits for the
last one. Each result goes to the Tracker with ``log_at(metrics, step)``: stamped with the learner step
of the checkpoint it measured (``ckpt-N`` at step N, the base model at 0), not the step the run had
reached when it finished. The keys (:func:`exploitability_metrics`), for each env:

* ``eval/<env>/exploitability``: the solver's headline (TicTacToe: the best response's mean score over
  the two seats, 0 = unexploitable, 1 = always beaten; KuhnPoker: chips per hand);
* ``eval/<env>/exploitability_first`` / ``_second``: the best response's value when the policy moves
  first / second (per seat);
* ``eval/<env>/exploitability_other_mass``: the mean mass not on a legal move's canonical answer;
* ``eval/<env>/exploitability_legal``: the exploitability of the table conditioned on a legal answer (the
  TicTacToe and Kuhn headlines count ``other`` as a loss, an upper bound: :mod:`unstable.eval.exploitability`;
  on an OpenSpiel game the two are the same number);
* ``eval/<env>/exploitability_wall_s``: what the evaluation took;
* KuhnPoker also ``eval/<env>/exploitability_textarena``: the hand scored as TextArena's env pays it;
* ``eval/<env>/exploitability_average``: the exploitability of the reach-weighted average of every
  checkpoint this evaluator has read so far, each weighted equally (fictitious play's output,
  :mod:`unstable.eval.average_policy`). Checkpoints a newer one overtook are not in it, and a resumed run
  starts a new average; ``unstable eval --exploitability --run RUN --all-checkpoints`` reads every one.
* ``eval/<env>/exploitability_nfsp_average`` and ``eval/<env>/exploitability_nfsp_average_other_mass``, in a
  run that trains NFSP's average policy (``average_reservoir``): the same reading of the checkpoint's
  ``average/`` adapter (the network fitted to the policy's past moves, :mod:`unstable.learners.average`;
  the base model's average is the base model). Not the same as ``exploitability_average``, the average
  of the checkpoints' tables computed exactly.

The same ``eval/<env>/exploitability`` key as ``unstable eval --exploitability --all-checkpoints`` writes,
so ``unstable plot`` draws either. An evaluation's error is kept and raised by the next ``submit`` (the
learner's hook, so the run stops with its cause) and by ``finish``.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from unstable.eval.average_policy import PolicyAverage
from unstable.eval.exploitability import ExploitabilityResult, evaluate_exploitability, history_dependent
from unstable.eval.game_states import has_solver, solved_game
from unstable.eval.policy_reading import default_method
from unstable.games.extraction import register_action_extraction
from unstable.games.specs import EvalEnvSpec
from unstable.inference.adapters import AdapterPayload, read_adapter
from unstable.inference.base import SamplingParams
from unstable.learners.checkpoints import checkpoint_dir
from unstable.records import AVERAGE_ADAPTER
from unstable.utils.calls import call
from unstable.utils.checks import check_choice
from unstable.utils.machine import usable_cores

EXPLOITABILITY_EVAL = ("auto", "off")
"""``exploitability_eval`` settings: ``"auto"`` evaluates every eval env that supports it, ``"off"`` none."""


@dataclass(frozen=True, slots=True)
class ExploitabilityTarget:
    """An env evaluated in-run: its id and the template and action extraction its eval games use."""

    env_id: str
    prompt_template: str
    action_extraction: str = "default"


def plan_exploitability(eval_envs: Sequence[Any], setting: str = "auto", *, models: int = 1,
                        ) -> tuple[tuple[ExploitabilityTarget, ...], tuple[str, ...]]:
    """The envs of ``eval_envs`` to evaluate in-run, and a line for each solvable one left out, saying why
    (games without a solver are left out silently). ``models``: the run's trainable models (only a
    one-model run is evaluated yet)."""
    check_choice("exploitability_eval", setting, EXPLOITABILITY_EVAL)
    if setting == "off":
        return (), ()
    targets: dict[str, ExploitabilityTarget] = {}
    skipped: list[str] = []
    for spec in eval_envs:
        if not isinstance(spec, EvalEnvSpec) or not has_solver(spec.env_id):
            continue
        where = f"{spec.env_id} ({spec.prompt_template})"
        if spec.env_id in targets:
            if targets[spec.env_id].prompt_template != spec.prompt_template:
                skipped.append(f"{where}: already evaluated with {targets[spec.env_id].prompt_template}")
        elif default_method(spec.prompt_template) != "exact":
            skipped.append(f"{where}: the template lets the model reason before it answers, so its policy can only "
                           "be estimated from sampled completions (states x samples generations), too slow to run "
                           "beside training; after the run: unstable eval --exploitability --run RUN "
                           "--all-checkpoints --method sampled")
        elif history_dependent(solved_game(spec.env_id), spec.prompt_template):
            skipped.append(f"{where}: the template shows the move history, so the seat has no policy over boards; "
                           "use a board-view template (qwen3-board)")
        else:
            targets[spec.env_id] = ExploitabilityTarget(spec.env_id, spec.prompt_template, spec.action_extraction_fn)
    if targets and models > 1:
        return (), (f"{', '.join(targets)}: a run with several trainable models is not evaluated in-run yet; after "
                    "the run: unstable eval --exploitability --model MODEL --adapter CHECKPOINT",)
    return tuple(targets.values()), tuple(skipped)


def exploitability_metrics(result: ExploitabilityResult) -> dict[str, float]:
    """The in-run metrics of one evaluation (see the module docstring)."""
    key = f"eval/{result.env_id}/exploitability"
    out = {key: result.exploitability, f"{key}_first": result.solver["best_response_first"],
           f"{key}_second": result.solver["best_response_second"], f"{key}_other_mass": result.other_mean,
           f"{key}_wall_s": result.wall_s}
    if result.legal_exploitability is not None:
        out[f"{key}_legal"] = result.legal_exploitability
    if "textarena_exploitability" in result.solver:
        out[f"{key}_textarena"] = result.solver["textarena_exploitability"]
    return out


class ExploitabilityEvaluator:
    """Evaluates a run's checkpoints on ``targets`` at ``sampling``, newest first, in a thread of its own
    (see the module docstring); results go to ``tracker.log_at``. ``backend``: a
    :class:`~unstable.inference.transformers_backend.TransformersBackend` of ``model_name`` to use
    (default: one of its own on ``device``). ``torch_threads`` and ``nice`` (added to the process's
    niceness, so the OS gives the learner and the inference actors the CPU first) apply to the whole
    process: the run's evaluator actor, a process of its own, uses one thread and ``nice=4`` while
    the run trains, and every core for what is left once it is done (``finish(every_core=True)``).
    ``action_extractions`` (name -> function): extractions registered in the user's process
    (:func:`~unstable.games.extraction.custom_action_extractions`), which a Ray actor starts without.
    ``nfsp_average``: also read each checkpoint's NFSP average policy (its ``average/`` adapter)."""

    def __init__(self, model_name: str, targets: Sequence[ExploitabilityTarget], sampling: SamplingParams,
                 tracker: Any = None, *, device: str = "cpu", torch_threads: int | None = None, nice: int = 0,
                 backend: Any = None, action_extractions: dict[str, Any] | None = None, nfsp_average: bool = False):
        if not targets:
            raise ValueError("ExploitabilityEvaluator needs at least one target (see plan_exploitability)")
        self.averages = {t.env_id: PolicyAverage(game) for t in targets  # env -> the average of the checkpoints read
                         if (game := solved_game(t.env_id)).own_reach is not None}
        for name, extraction in (action_extractions or {}).items():
            register_action_extraction(name, extraction, overwrite=True)
        if nice:
            os.nice(nice)
        if torch_threads:
            import torch

            torch.set_num_threads(torch_threads)
        if backend is None:
            from unstable.inference.transformers_backend import TransformersBackend

            backend = TransformersBackend(model_name, device=device)
        self.model_name, self.targets, self.sampling, self.tracker = model_name, tuple(targets), sampling, tracker
        self.backend, self.nfsp_average = backend, nfsp_average
        self.evaluated: list[int] = []  # learner steps evaluated, in order
        self.skipped: list[int] = []  # learner steps a newer checkpoint overtook before their turn
        self._cond = threading.Condition()
        self._pending: tuple[int, str | None, AdapterPayload | None, AdapterPayload | None] | None = None
        self._current: int | None = None  # the learner step being evaluated now
        self._closed = False
        self._every_core = False
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._loop, name="exploitability", daemon=True)
        self._thread.start()

    def submit(self, version: int, adapter: str | None = None, payload: AdapterPayload | None = None,
               average: AdapterPayload | None = None) -> None:
        """Queue checkpoint ``version`` (``adapter``: its directory, ``None`` for the base model; ``payload``:
        its files, when this process cannot read the directory; ``average``: its ``average/`` adapter's files),
        replacing one not started yet. Raises the error of an evaluation that failed."""
        with self._cond:
            self._raise()
            if self._closed:
                raise RuntimeError("the exploitability evaluator has finished; it takes no more checkpoints")
            if self._pending is not None:
                self.skipped.append(self._pending[0])
            self._pending = (version, adapter, payload, average)
            self._cond.notify_all()

    def finish(self, timeout: float | None = None, every_core: bool = False) -> dict[str, list[int]]:
        """Evaluate what is queued, stop the thread, and return the steps ``evaluated`` and ``skipped``;
        raises an evaluation's error, or ``TimeoutError`` after ``timeout`` seconds. ``every_core``: an
        evaluation that starts from now on uses as many torch threads as the process may use cores
        (a run calls it once its games and updates are done, so the one thread it kept to is free)."""
        state = self.wait(timeout, every_core)
        if not state["done"]:
            raise TimeoutError(f"the exploitability evaluation did not finish within {timeout:g} s")
        return {"evaluated": state["evaluated"], "skipped": state["skipped"]}

    def wait(self, timeout: float | None = None, every_core: bool = False) -> dict[str, Any]:
        """:meth:`finish` that returns after ``timeout`` seconds whether or not the evaluation is done:
        ``done``, the steps ``evaluated`` and ``skipped``, and, while not done, the step being read
        (``current``) and the one queued after it (``pending``). Raises an evaluation's error."""
        with self._cond:
            self._closed = True
            self._every_core = self._every_core or every_core
            self._cond.notify_all()
        self._thread.join(timeout)
        self._raise()
        with self._cond:
            pending = self._pending[0] if self._pending is not None else None
            return {"done": not self._thread.is_alive(), "evaluated": list(self.evaluated),
                    "skipped": list(self.skipped), "current": self._current, "pending": pending}

    def raise_priority(self, niceness: int = 0) -> str | None:
        """Set every thread of this process to ``niceness`` (the run's training is over: nothing to leave the
        CPU to); ``None`` once done, else why not (lowering a niceness needs a privilege most users lack)."""
        tasks = "/proc/self/task"
        threads = [int(t) for t in os.listdir(tasks)] if os.path.isdir(tasks) else [0]  # Linux: nice is per thread
        try:
            for tid in threads:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except OSError as exc:
            return f"niceness {os.getpriority(os.PRIO_PROCESS, 0)} -> {niceness}: {exc.strerror or exc}"
        return None

    def commands(self, versions: Sequence[int], run_dir: str) -> list[str]:
        """The ``unstable eval --exploitability`` commands that read ``versions`` (learner steps of the run in
        ``run_dir``; 0: the base model) later, as this evaluator reads them."""
        out = []
        reading = (f"--temperature {self.sampling.temperature:g} --top-p {self.sampling.top_p:g} "
                   f"--max-new-tokens {self.sampling.max_new_tokens}"
                   f"{' --legal-moves-only' if self.sampling.legal_moves_only else ''}")
        for version in versions:
            where = (f"--model {shlex.quote(self.model_name)}" if version == 0
                     else f"--run {shlex.quote(str(run_dir))} --checkpoint ckpt-{version}")
            out += [f"unstable eval --exploitability {where} --env {t.env_id} --template {t.prompt_template} "
                    f"{reading}" for t in self.targets]
        return out

    def evaluate(self, version: int, adapter: str | None = None, payload: AdapterPayload | None = None,
                 average: AdapterPayload | None = None) -> dict[str, float]:
        """Evaluate checkpoint ``version`` now, in the caller's thread, log its metrics and return them
        (``average``: the files of its NFSP average policy, read with ``nfsp_average``)."""
        average_path = os.path.join(adapter, AVERAGE_ADAPTER) if adapter is not None else None
        for path, files in ((adapter, payload), (average_path, average)):
            if files is not None:
                self.backend.add_adapter(path, files)
        metrics: dict[str, float] = {}
        for target in self.targets:
            result = self._read(target, adapter)
            metrics |= exploitability_metrics(result)
            if (checkpoints := self.averages.get(target.env_id)) is not None:
                checkpoints.add(result.policy)
                metrics[f"eval/{target.env_id}/exploitability_average"] = checkpoints.exploitability()
            if self.nfsp_average:  # the base model's average is the base model: read once
                nfsp = result if average_path is None else self._read(target, average_path)
                key = f"eval/{target.env_id}/exploitability_nfsp_average"
                metrics |= {key: nfsp.exploitability, f"{key}_other_mass": nfsp.other_mean}
        if self.tracker is not None:
            call(self.tracker, "log_at", metrics, version)
        self.evaluated.append(version)
        return metrics

    def _read(self, target: ExploitabilityTarget, adapter: str | None) -> ExploitabilityResult:
        return evaluate_exploitability(
            self.model_name, target.env_id, adapter, prompt_template=target.prompt_template,
            temperature=self.sampling.temperature, top_p=self.sampling.top_p,
            max_new_tokens=self.sampling.max_new_tokens, action_extraction=target.action_extraction,
            backend=self.backend, legal_moves_only=self.sampling.legal_moves_only)

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the in-run exploitability evaluation failed: {self._error}") from self._error

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                job, self._pending = self._pending, None
                every_core, self._current = self._every_core, job[0]
            if every_core:  # in this thread: torch's thread count is read per thread
                import torch

                torch.set_num_threads(usable_cores())
            try:
                self.evaluate(*job)
            except Exception as exc:  # not swallowed: submit() and finish() raise it (see the module docstring)
                with self._cond:
                    self._error = exc
                return
            finally:
                self._current = None


class SubmitCheckpoint:
    """A learner's ``on_checkpoint`` hook: hands each new checkpoint of ``checkpoints_dir`` to ``evaluator``
    (an :class:`ExploitabilityEvaluator` or its actor). The adapter is read here, in the learner's
    process, and sent with the call, so the evaluator needs no access to the run directory; with
    ``nfsp_average``, its ``average/`` adapter too."""

    def __init__(self, evaluator: Any, checkpoints_dir: str, nfsp_average: bool = False):
        self.evaluator, self.checkpoints_dir, self.nfsp_average = evaluator, str(checkpoints_dir), nfsp_average

    def __call__(self, version: int) -> None:
        path = checkpoint_dir(self.checkpoints_dir, version)
        call(self.evaluator, "submit", version, str(path), *checkpoint_files(path, self.nfsp_average))


def checkpoint_files(path: Any, nfsp_average: bool = False) -> tuple[AdapterPayload, ...]:
    """The files :meth:`ExploitabilityEvaluator.submit` takes for the checkpoint at ``path``: its adapter's,
    and with ``nfsp_average`` its ``average/`` adapter's."""
    if not nfsp_average:
        return (read_adapter(path),)
    return read_adapter(path), read_adapter(os.path.join(path, AVERAGE_ADAPTER))
