"""The Weights & Biases writer: one W&B run, stepped by the learner step.

Unlike UnstableBaselines 0.2, the project name passed in is the one used. Offline use needs no
network: set ``WANDB_MODE=offline`` (files go to ``<dir>/wandb/offline-run-*``; upload later with
``wandb sync``). The writer owns its run object (``run.log``, not the global ``wandb.log``), so
several trackers in one process do not write into each other's runs.

A run never dies for want of W&B: where no API key is configured (``WANDB_API_KEY``, or the
``~/.netrc`` entry ``wandb login`` writes), :func:`wandb_plan` logs offline and says so once, with
the fix; only ``use_wandb=True`` without the ``wandb`` package is an error.
"""

from __future__ import annotations

import importlib
import importlib.util
import netrc
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

STEP_METRIC = "train/step"
INSTALL_HINT = "pip install unstable-baselines[wandb]"


def import_wandb() -> Any:
    """The ``wandb`` module; ``ImportError`` with the install command if it does not import."""
    try:
        return importlib.import_module("wandb")
    except ImportError as e:
        raise ImportError(f"use_wandb=True but the wandb package is not importable ({e}); {INSTALL_HINT}") from e


@dataclass(frozen=True)
class WandbPlan:
    """Whether a run logs to W&B, in which mode (``None``: as ``WANDB_MODE`` or W&B decide), and the
    one line to tell the user (``None``: nothing to say)."""

    enabled: bool
    mode: str | None = None
    notice: str | None = None


def has_wandb_credentials() -> bool:
    """An API key in ``WANDB_API_KEY`` or in the netrc entry of the W&B host (what ``wandb login``
    writes); read without any network call."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    try:
        found = netrc.netrc(os.environ.get("NETRC") or None).authenticators(host or "")
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(found and found[2])


def wandb_plan(project: str | None, use_wandb: bool | None) -> WandbPlan:
    """How a run uses W&B: off when ``use_wandb=False``, or ``None`` without a project or without the
    package; offline (with a notice) when no API key is configured and ``WANDB_MODE`` does not
    already say offline or disabled; else as configured. ``use_wandb=True`` without the package
    raises ``ImportError`` with the install command."""
    if use_wandb is False or (use_wandb is None and not project):
        return WandbPlan(False)
    if importlib.util.find_spec("wandb") is None:
        if use_wandb:
            raise ImportError(f"use_wandb=True but the wandb package is not installed; {INSTALL_HINT}, "
                              "or set use_wandb=False")
        return WandbPlan(False)
    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in ("offline", "dryrun", "disabled") or has_wandb_credentials():
        return WandbPlan(True)
    return WandbPlan(True, "offline", "W&B has no API key here, so this run logs to W&B offline, in the run "
                     "directory's wandb/ (upload it later with `wandb sync`); to log online run `wandb login` "
                     "(or set WANDB_API_KEY), or turn W&B off with use_wandb=False or wandb_project=None")


def _reinit_value(wandb: Any) -> Any:
    """``"create_new"`` where supported (wandb >= 0.19.10); older versions take a bool."""
    try:
        from packaging.version import Version
    except ImportError:  # pragma: no cover - packaging ships with transformers and wandb
        return True
    return "create_new" if Version(wandb.__version__) >= Version("0.19.10") else True


class WandbWriter:
    """Starts a W&B run and logs flat dicts of floats against :data:`STEP_METRIC`; ``run_id``: continue
    that run (a resumed run's; ``resume="allow"`` starts it afresh if W&B does not know it)."""

    def __init__(self, wandb: Any, *, project: str | None, run_name: str, run_dir: str, config: dict[str, Any] | None,
                 mode: str | None = None, run_id: str | None = None):
        self.run = wandb.init(
            project=project, name=run_name, dir=run_dir, config=config or {}, reinit=_reinit_value(wandb),
            **({"mode": mode} if mode else {}), **({"id": run_id, "resume": "allow"} if run_id else {}),
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
