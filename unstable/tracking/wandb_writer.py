"""The Weights & Biases writer: one W&B run, stepped by the learner step.

Unlike UnstableBaselines 0.2, the project name passed in is the one used. Offline use needs no
network: set ``WANDB_MODE=offline`` (files go to ``<dir>/wandb/offline-run-*``; upload later with
``wandb sync``). The writer owns its run object (``run.log``, not the global ``wandb.log``), so
several trackers in one process do not write into each other's runs.
"""

from __future__ import annotations

import importlib
from typing import Any

STEP_METRIC = "train/step"
INSTALL_HINT = "pip install unstable-baselines[wandb]"


def import_wandb(required: bool) -> Any | None:
    """The ``wandb`` module, or ``None`` if it is missing and not ``required``."""
    try:
        return importlib.import_module("wandb")
    except ImportError as e:
        if required:
            raise ImportError(f"use_wandb=True but the wandb package is not importable ({e}); {INSTALL_HINT}") from e
        return None


def _reinit_value(wandb: Any) -> Any:
    """``"create_new"`` where supported (wandb >= 0.19.10); older versions take a bool."""
    try:
        from packaging.version import Version
    except ImportError:  # pragma: no cover - packaging ships with transformers and wandb
        return True
    return "create_new" if Version(wandb.__version__) >= Version("0.19.10") else True


class WandbWriter:
    """Starts a W&B run and logs flat dicts of floats against :data:`STEP_METRIC`."""

    def __init__(self, wandb: Any, *, project: str | None, run_name: str, run_dir: str, config: dict[str, Any] | None):
        self.run = wandb.init(
            project=project, name=run_name, dir=run_dir, config=config or {}, reinit=_reinit_value(wandb)
        )
        self.run.define_metric(STEP_METRIC)
        self.run.define_metric("*", step_metric=STEP_METRIC)
        self.closed = False

    @property
    def project(self) -> str:
        return self.run.project

    def info(self) -> dict[str, Any]:
        """Plain data for the dashboard: project, run id and name, URL (None offline), mode."""
        return {
            "project": self.run.project,
            "id": self.run.id,
            "name": self.run.name,
            "url": self.run.url,
            "mode": self.run.settings.mode,
        }

    def log(self, values: dict[str, float], learner_step: int) -> None:
        if values:
            self.run.log({**values, STEP_METRIC: learner_step})

    def finish(self) -> None:
        if not self.closed:
            self.closed = True
            self.run.finish()
