"""``BaseLearner``: the plumbing every learner shares; the algorithms live in their own files.

Plain Python (no Ray). :meth:`BaseLearner.update` is pure: a :class:`~unstable.records.TrainBatch`
in, an :class:`UpdateResult` out. Around the subclass's :meth:`BaseLearner._update` (forward, loss
and backward, as read top to bottom in ``reinforce.py`` / ``a2c.py``) it validates the batch,
zeroes, clips and steps the optimisers, skips non-finite updates and writes the checkpoint.
:meth:`BaseLearner.train` hands the buffer, tracker and model registry given to the constructor
to :func:`unstable.learners.loop.run_training`, which pulls batches and publishes checkpoints.

A new algorithm subclasses ``BaseLearner``, implements ``_update(batch)`` (and
``initialize_algorithm(...)`` for its settings), and is passed to ``unstable.build(algorithm=...)``
as a class or as a name given to :func:`unstable.learners.register_learner`.

Each checkpoint ``ckpt-N`` holds the adapter(s) and ``trainer_state.pt`` (optimiser states, the
version, RNG states, the skip counter), so ``initial_lora_path=ckpt-N, initial_version=N,
restore_training_state=True`` continues training exactly where ckpt-N left off (see
:func:`unstable.learners.checkpoints.latest_complete`).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from unstable.learners import checkpoints as ckpt
from unstable.learners import model_utils as mu
from unstable.learners.batching import validate_steps
from unstable.learners.config import LearnerConfig, check_attention
from unstable.learners.distributed import DataParallelLearner
from unstable.learners.loop import run_training
from unstable.learners.protocol import UpdateResult
from unstable.local_models.resolve import resolve_tiny_name
from unstable.records import Step, TrainBatch
from unstable.utils.disk import writing

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer_state.pt"
STEP_METRICS_FILE = "step_metrics.json"
"""The metrics row of the update that made a checkpoint (its ``train/update_seconds`` without the write)."""


class NonFiniteError(ArithmeticError):
    """Internal: a loss or gradient was NaN/inf; the update is skipped (never escapes ``update``)."""


class BaseLearner(DataParallelLearner):
    """Trains a LoRA adapter on batches of Steps (:class:`~unstable.records.TrainBatch`).

    Construct with the 0.2 keyword arguments (see :class:`LearnerConfig` for every field and its
    default), e.g. ``REINFORCELearner(model_name, lora_cfg=..., batch_size=384, ...)``.
    ``buffer``, ``tracker``, ``model_registry``, ``on_checkpoint``, ``turn_lock``, ``publish_adapters`` and
    ``reset_rule`` are only used by :meth:`train`.

    Subclasses implement :meth:`_update`; one that needs whole episodes in every batch (GAE) sets
    ``needs_episodes = True``, and ``unstable.build()`` then gives it an EpisodeBuffer; one that
    normalises its own advantages sets ``normalizes_advantages = True``, and ``build()`` then leaves
    the default per-env z-scoring out of the buffer's reward transforms. With several learner
    workers (``build(num_learner_workers=N)``) the copies train together as described in
    :mod:`unstable.learners.distributed`; a learner whose ``_update`` shards its work says so with
    ``supports_data_parallel = True``.
    """

    config_cls: ClassVar[type[LearnerConfig]] = LearnerConfig
    needs_episodes: ClassVar[bool] = False
    normalizes_advantages: ClassVar[bool] = False  # True: build() leaves out the default per-env z-scoring

    def __init__(
        self,
        model_name: str,
        *,
        buffer: Any = None,
        tracker: Any = None,
        model_registry: Any = None,
        on_checkpoint: Any = None,
        turn_lock: Any = None,
        publish_adapters: bool = False,
        reset_rule: Any = None,
        **kwargs: Any,
    ) -> None:
        self.config = self.config_cls(model_name=resolve_tiny_name(model_name), **kwargs)  # "tiny": built here
        self.publish_adapters = publish_adapters  # train() sends each checkpoint's adapter files to the registry
        self.buffer, self.tracker, self.model_registry = buffer, tracker, model_registry
        self.turn_lock = turn_lock  # learners sharing a device take turns: see unstable.learners.loop
        self.on_checkpoint = on_checkpoint  # called as on_checkpoint(version) after each registered checkpoint
        # called as reset_rule(self) before each update: a league exploiter's (unstable.samplers.exploiters)
        self.reset_rule = reset_rule
        cfg = self.config
        self._restore_from: Path | None = None
        if cfg.restore_training_state:
            state_file = Path(cfg.initial_lora_path or "") / TRAINER_STATE_FILE
            if cfg.initial_lora_path is None or not state_file.is_file():
                raise ValueError(f"restore_training_state=True needs initial_lora_path to be a checkpoint holding "
                                 f"{TRAINER_STATE_FILE}; {state_file} does not exist")
            self._restore_from = state_file
        stale = [v for v in ckpt.list_checkpoints(cfg.output_dir) if v > cfg.initial_version]
        if stale:
            raise ValueError(
                f"{cfg.output_dir} already holds ckpt-{max(stale)}; use a fresh output_dir, or resume from the "
                "last checkpoint (initial_lora_path, initial_version, restore_training_state=True; "
                "unstable.learners.checkpoints.latest_complete finds it)"
            )
        self.device = mu.resolve_device(cfg.device)
        check_attention(cfg.attn_implementation, self.device)
        self.dtype = mu.resolve_dtype(cfg.dtype, self.device)
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        base = mu.load_base_model(cfg.model_name, self.device, self.dtype, cfg.gradient_checkpointing,
                                  cfg.attn_implementation)
        self.model = mu.attach_policy_adapter(base, cfg.lora_cfg, cfg.initial_lora_path)
        self.model.to(self.device)
        self.policy_params = mu.adapter_parameters(self.model, mu.POLICY_ADAPTER)
        self.optimizer = torch.optim.AdamW(self.policy_params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                           eps=cfg.adam_eps)
        self.pad_id = mu.pad_token_id(base)
        self.vocab_size = mu.vocab_size(base)
        self._logits_to_keep = mu.supports_logits_to_keep(self.model)
        self.version = cfg.initial_version
        self.adapter_path: str | None = cfg.initial_lora_path
        self.skipped_total = 0
        self._norms: list[dict[str, float]] = []  # pre-clip gradient norms of this update's optimiser steps
        self.last_version: int | None = None  # where a "linear" lr schedule reaches 0; set by train()

    # ------------------------------------------------------------------------------ setup, loop
    def initialize_algorithm(self, max_train_len: int | None = None, max_generation_len: int = 4096) -> None:
        """Set the truncation and Dr. GRPO lengths (0.2 API; the config defaults already work)."""
        self.config = replace(self.config, max_train_len=max_train_len, max_generation_len=max_generation_len)

    def set_turn_lock(self, turn_lock: Any) -> None:
        """Replace the turn lock held around each update (the wiring sets a
        :class:`~unstable.learners.loop.SleepingEngines` once the inference actors it sleeps exist)."""
        self.turn_lock = turn_lock

    def train(self, iterations: int) -> list[UpdateResult]:
        """Pull batches from ``buffer`` and update until ``iterations`` checkpoints are written.

        See :func:`unstable.learners.loop.run_training` for the duck-typed hooks it calls. With
        several learner workers this is rank 0's, while the others :meth:`follow`.
        """
        self.last_version = self.version + iterations
        results = run_training(self, iterations, buffer=self.buffer, registry=self.model_registry,
                               tracker=self.tracker, on_checkpoint=self.on_checkpoint, turn_lock=self.turn_lock,
                               publish_adapters=self.publish_adapters)
        self.release_followers()  # the other learner workers' follow() returns too
        return results

    def apply_reset_rule(self) -> str | None:
        """Before an update: ask ``reset_rule`` (if any) whether to reset the adapter (see
        :meth:`reset_adapter`); its reason, or ``None``. A resumed learner's rule state is restored first."""
        if self.reset_rule is None:
            return None
        self._restore_pending_state()
        return self.reset_rule(self)

    def reset_adapter(self, adapter_path: str | None = None) -> None:
        """Start the policy adapter again: from the adapter at ``adapter_path`` (same LoRA shape), or
        (``None``) from a fresh one, which plays as the base model does. The policy optimiser's state
        (Adam's moments and step count) starts again too; the version goes on counting."""
        mu.reset_policy_adapter(self.model, adapter_path)
        self.optimizer.state.clear()
        logger.info("version %d: policy adapter reset to %s", self.version, adapter_path or "a fresh adapter")

    def _lora_compute(self):
        """Context of the learner's forward passes: the LoRA products in the base dtype (see
        ``LearnerConfig.lora_compute_dtype`` and :func:`~unstable.learners.model_utils.lora_compute`)."""
        return mu.lora_compute(self.model, self.dtype, self.config.lora_compute_dtype)

    def current_lr(self) -> float:
        """The policy learning rate of the next update under ``config.lr_schedule``."""
        cfg = self.config
        if cfg.lr_schedule == "constant" or self.last_version is None or self.last_version <= 0:
            return cfg.learning_rate
        return cfg.learning_rate * max(0.0, 1.0 - self.version / self.last_version)

    # ---------------------------------------------------------------------------------- update
    def update(self, batch: TrainBatch) -> UpdateResult:
        """One optimiser step over ``batch``, then save ``ckpt-{version}`` and apply retention.

        If any loss or gradient norm is NaN/inf, nothing is stepped or saved: the gradients are
        dropped and the result carries ``train/skipped_nonfinite = 1`` (no exception). A checkpoint
        folder the filesystem refuses (read-only, full) raises
        :class:`~unstable.utils.disk.RunDirUnwritableError`.
        """
        self._restore_pending_state()
        self._check_batch(batch)
        self._share_batch(batch)  # rank 0 of several learner workers sends it to the others
        self._nonfinite = None
        start = time.perf_counter()
        trained_version = self.version
        steps = batch.steps
        self.model.train()
        self._zero_grad()
        self._norms = []
        try:
            metrics = self._update(batch)
            if not self._norms:  # an algorithm with one optimiser step per batch leaves it to us
                self._optimizer_step()
        except NonFiniteError as err:
            if not self._norms:
                return self._skip(steps, trained_version, str(err), start)
            # earlier mini-batches already moved the weights: keep them, drop the rest of this batch
            logger.warning("stopping update at version %d after %d optimiser steps: %s",
                           trained_version, len(self._norms), err)
            self._zero_grad()
            metrics = {"train/stopped_nonfinite": 1.0}
        self.version += 1
        self._on_new_version()
        if self.data_parallel is not None and self.data_parallel.rank > 0:  # rank 0 writes the checkpoint
            return UpdateResult(self.version, None, self._step_metrics(metrics, steps, trained_version, start))
        target = ckpt.checkpoint_dir(self.config.output_dir, self.version)
        row = self._step_metrics(metrics, steps, trained_version, start)
        with writing(target):  # a full disk or read-only folder: one clear error (earlier checkpoints stay)
            # the step's metrics go into its checkpoint: a run stopped before the row reached the tracker
            # gets it back on resume (unstable.run.resume.lost_step_rows)
            self.adapter_path = str(ckpt.atomic_save(target, lambda directory: self._write_all(directory, row)))
            ckpt.apply_retention(self.config.output_dir, self.config.keep_last, self.config.keep_every)
        row["train/update_seconds"] = time.perf_counter() - start  # the checkpoint's write included
        return UpdateResult(self.version, self.adapter_path, row)

    def _step_metrics(self, metrics: dict[str, float], steps: Sequence[Step], trained_version: int,
                      start: float) -> dict[str, float]:
        metrics.update({name: sum(n[name] for n in self._norms) / len(self._norms) for name in self._norms[0]})
        metrics["train/optimizer_steps"] = float(len(self._norms))
        metrics.update(self._common_metrics(steps, trained_version, start, skipped=False))
        if self.data_parallel is not None:
            metrics["train/learner_workers"] = float(self.data_parallel.world_size)
        return metrics

    def _optimizer_step(self) -> None:
        """Clip the accumulated gradients, set the learning rate, step every optimiser, zero the
        gradients. :meth:`update` calls it once after ``_update``; an algorithm that takes several
        optimiser steps per batch (PPO's mini-batches and epochs) calls it itself after each one.
        Raises ``NonFiniteError`` (nothing stepped) if a gradient norm is NaN/inf. With several
        learner workers the gradients are first summed over them (:mod:`unstable.learners.distributed`),
        and all skip together if a loss on any of them was NaN/inf."""
        if self.data_parallel is not None:
            failed = self._sum_gradients()
            reason, self._nonfinite = self._nonfinite, None
            if failed:
                raise NonFiniteError(reason or f"a loss is not finite on {failed} other learner worker(s)")
        norms = self._clip_gradients()
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        for optimizer in self._optimizers():
            optimizer.step()
        self._zero_grad()
        self._norms.append(norms)

    def _update(self, batch: TrainBatch) -> dict[str, float]:
        """The algorithm: forward, loss and backward over ``batch`` (summing gradients in ``.grad``,
        each loss through :meth:`_backward`); return its metrics (``train/...``).

        :meth:`update` has zeroed the gradients before, and clips and steps the optimisers after
        unless ``_update`` called :meth:`_optimizer_step` itself (several steps per batch). The
        pre-clip gradient norms are averaged over the steps taken.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement _update(batch)")

    def _check_batch(self, batch: TrainBatch) -> None:
        """Fail fast on a batch this learner cannot train on (before any forward pass)."""
        if not isinstance(batch, TrainBatch):
            raise TypeError(f"update() takes a unstable.records.TrainBatch, got {type(batch).__name__}; "
                            "wrap Steps with TrainBatch.from_steps(steps)")
        validate_steps(batch.steps, self.vocab_size)
        if self.needs_episodes and not batch.episodes:
            raise ValueError(f"{type(self).__name__} needs whole player episodes: feed it from an EpisodeBuffer, "
                             "or build the batch with TrainBatch.from_steps(steps, group_episodes=True)")

    def _param_groups(self) -> dict[str, tuple[torch.optim.Optimizer, list[nn.Parameter]]]:
        """Metric name of the pre-clip gradient norm -> (optimiser, its parameters)."""
        return {"train/grad_norm": (self.optimizer, self.policy_params)}

    def _on_new_version(self) -> None:
        """Called once the weights of ``self.version`` are final, before its checkpoint is written."""

    def _saved_adapters(self) -> list[str]:
        """The adapters a checkpoint holds: the policy at the root, any other in a subfolder of its name."""
        return [mu.POLICY_ADAPTER]

    def _write_checkpoint(self, directory: Path) -> None:
        """Write the adapter(s) into ``directory`` (standard PEFT layout at the root)."""
        self.model.save_pretrained(str(directory), selected_adapters=self._saved_adapters())

    def _write_all(self, directory: Path, row: dict[str, float]) -> None:
        self._write_checkpoint(directory)
        torch.save(self.training_state(), directory / TRAINER_STATE_FILE)
        (directory / STEP_METRICS_FILE).write_text(json.dumps(row), encoding="utf-8")

    # ------------------------------------------------------------------------------ resuming
    def training_state(self) -> dict[str, Any]:
        """What a checkpoint needs besides the weights to continue training exactly: optimiser
        states (one per parameter group), the version, the skip counter and the RNG states."""
        rng: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            "format": 1,
            "version": self.version,
            "skipped_total": self.skipped_total,
            "optimizers": {name: opt.state_dict() for name, (opt, _) in self._param_groups().items()},
            "rng": rng,
            **({"reset_rule": self.reset_rule.state_dict()} if hasattr(self.reset_rule, "state_dict") else {}),
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`training_state` saved (the adapter weights are loaded separately)."""
        if state.get("format") != 1:
            raise ValueError(f"unknown trainer state format {state.get('format')!r}")
        groups = self._param_groups()
        if set(state["optimizers"]) != set(groups):
            raise ValueError(f"trainer state holds optimisers {sorted(state['optimizers'])}, "
                             f"this learner has {sorted(groups)}")
        for name, (optimizer, _) in groups.items():
            mu.load_optimizer_state(optimizer, state["optimizers"][name])
        self.version = int(state["version"])
        self.skipped_total = int(state["skipped_total"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        if "cuda" in state["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        if "reset_rule" in state and hasattr(self.reset_rule, "load_state_dict"):
            self.reset_rule.load_state_dict(state["reset_rule"])

    def _restore_pending_state(self) -> None:
        """Load ``trainer_state.pt`` of ``initial_lora_path`` once, before the first update (subclasses
        build their optimisers after ``BaseLearner.__init__``, so it cannot happen there)."""
        if self._restore_from is None:
            return
        state = torch.load(self._restore_from, map_location="cpu", weights_only=False)
        if int(state["version"]) != self.config.initial_version:
            raise ValueError(f"{self._restore_from} is from version {state['version']}, "
                             f"but initial_version is {self.config.initial_version}")
        self.load_training_state(state)
        self._restore_from = None
        logger.info("restored optimiser and RNG state of version %d", self.version)

    # --------------------------------------------------------------------------------- helpers
    @staticmethod
    def _backward(loss: Tensor, what: str) -> None:
        """``loss.backward()``, or skip the whole update (no step, no checkpoint) if it is NaN/inf."""
        if not torch.isfinite(loss):
            raise NonFiniteError(f"{what} is {float(loss.detach())}")
        loss.backward()

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        return [opt for opt, _ in self._param_groups().values()]

    def _zero_grad(self) -> None:
        for optimizer in self._optimizers():
            optimizer.zero_grad(set_to_none=True)

    def _clip_gradients(self) -> dict[str, float]:
        """Clip each group to ``grad_clip``; return the norms measured before clipping."""
        norms = {}
        for name, (_, params) in self._param_groups().items():
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip))
            if not math.isfinite(norm):
                raise NonFiniteError(f"{name} is {norm}")
            norms[name] = norm
        return norms

    def _skip(self, steps: Sequence[Step], trained_version: int, reason: str, start: float) -> UpdateResult:
        self._zero_grad()
        self.skipped_total += 1
        logger.warning("skipping update at version %d (no step, no checkpoint): %s", trained_version, reason)
        metrics = self._common_metrics(steps, trained_version, start, skipped=True)
        return UpdateResult(self.version, self.adapter_path, metrics)

    def _common_metrics(
        self, steps: Sequence[Step], trained_version: int, start: float, skipped: bool
    ) -> dict[str, float]:
        """Metrics every learner logs; staleness = learner version trained - sampling version."""
        rewards = [s.reward for s in steps]
        staleness = [trained_version - s.policy_version for s in steps if s.policy_version is not None]
        metrics = {
            "train/version": float(self.version),
            "train/lr": float(self.optimizer.param_groups[0]["lr"]),
            "train/batch_steps": float(len(steps)),
            "train/reward_mean": sum(rewards) / len(rewards),
            "train/skipped_nonfinite": float(skipped),
            "train/skipped_total": float(self.skipped_total),
            "train/update_seconds": time.perf_counter() - start,
        }
        if staleness:
            metrics["train/staleness_mean"] = sum(staleness) / len(staleness)
            metrics["train/staleness_max"] = float(max(staleness))
            metrics.update(staleness_histogram(staleness))
        return metrics


STALENESS_BINS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, None))


def staleness_histogram(staleness: Sequence[int]) -> dict[str, float]:
    """The share of a batch's steps per staleness bin, as ``train/staleness_frac/<bin>`` metrics
    (bins ``0``, ``1``, ``2``, ``3-4``, ``5-8``, ``9+`` learner versions behind)."""
    out = {}
    for low, high in STALENESS_BINS:
        label = str(low) if low == high else (f"{low}+" if high is None else f"{low}-{high}")
        count = sum(1 for s in staleness if s >= low and (high is None or s <= high))
        out[f"train/staleness_frac/{label}"] = count / len(staleness)
    return out
