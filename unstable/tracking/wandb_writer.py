"""The Weights & Biases writer: one W&B run, stepped by the learner step.

Unlike UnstableBaselines 0.2, the project name passed in is the one used. Offline use needs no
network: set ``WANDB_MODE=offline`` (files go to ``<dir>/wandb/offline-run-*``; upload later with
``wandb sync``). The writer owns its run object (``run.log``, not the global ``wandb.log``), so
several trackers in one process do not write into each other's runs.

A run never dies for want of W&B: where no API key is configured (``WANDB_API_KEY``, or the
``~/.netrc`` entry ``wandb login`` writes), :func:`wandb_plan` logs offline and says so once, with
the fix; where ``wandb.init`` fails all the same (no network, a wrong key, a W&B server error),
:func:`start_wandb` logs offline, or not to W&B at all when even that fails, and says why once; a
failed ``log`` is counted and said once, and the run goes on. Only ``use_wandb=True`` without the
``wandb`` package is an error: the one failure known before Ray starts. A W&B that fails later
(``use_wandb=True`` included) never stops a run, whose metrics still go to ``metrics.jsonl``.

The mode is decided in the driver (:func:`wandb_plan`) and passed to the Tracker, so a Ray actor
does not depend on the ``WANDB_MODE`` the Ray cluster was started with.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import netrc
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

logger = logging.getLogger(__name__)

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
    """Whether a run logs to W&B, in which mode (``"online"``, ``"offline"``, ...; ``None`` only when
    off), and the one line to tell the user (``None``: nothing to say)."""

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
    package; in the mode ``WANDB_MODE`` names where it is set (``dryrun`` is ``offline``); else
    online with an API key, and offline (with a notice) without one. ``use_wandb=True`` without the
    package raises ``ImportError`` with the install command."""
    if use_wandb is False or (use_wandb is None and not project):
        return WandbPlan(False)
    if importlib.util.find_spec("wandb") is None:
        if use_wandb:
            raise ImportError(f"use_wandb=True but the wandb package is not installed; {INSTALL_HINT}, "
                              "or set use_wandb=False")
        return WandbPlan(False)
    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in ("offline", "dryrun", "disabled"):
        return WandbPlan(True, "offline" if mode == "dryrun" else mode)
    if has_wandb_credentials():
        return WandbPlan(True, mode or "online")
    return WandbPlan(True, "offline", "W&B has no API key here, so this run logs to W&B offline, in the run "
                     "directory's wandb/ (upload it later with `wandb sync`); to log online run `wandb login` "
                     "(or set WANDB_API_KEY), or turn W&B off with use_wandb=False or wandb_project=None")


def _cause(exc: BaseException) -> str:
    """``Type: first line of the message``, short enough for one line."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


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
        self.log_failures = 0

    @property
    def project(self) -> str:
        """The W&B project the run logs to."""
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

    def log(self, values: dict[str, float], learner_step: int) -> bool:
        """Log ``values`` at ``learner_step``; ``False`` if W&B failed (counted in ``log_failures``,
        said once): W&B is optional, so its failure never stops a run."""
        if not values:
            return True
        try:
            self.run.log({**values, STEP_METRIC: learner_step})
        except Exception as exc:  # any W&B error (network, service gone): count, say once, go on
            self.log_failures += 1
            if self.log_failures == 1:
                logger.warning("W&B failed to log at learner step %d (%s); the run goes on, its metrics still go to "
                               "metrics.jsonl, and further W&B failures are only counted "
                               "(system/wandb_log_failures)", learner_step, _cause(exc))
            return False
        return True

    def finish(self) -> None:
        """Finish the W&B run; a failure is said, not raised (the run's own files are already safe)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.run.finish()
        except Exception as exc:  # the run is over; W&B's upload failing must not make it fail
            logger.warning("W&B failed to finish its run (%s); its local files stay in the run directory's "
                           "wandb/ (upload them with `wandb sync`)", _cause(exc))


def start_wandb(wandb: Any, *, project: str | None, run_name: str, run_dir: str, config: dict[str, Any] | None,
                mode: str | None = None, run_id: str | None = None) -> WandbWriter | None:
    """A :class:`WandbWriter` in ``mode``; where ``wandb.init`` fails (no network, a wrong API key, a
    W&B server error, ...), one offline instead, or ``None`` (no W&B) if that fails too, said once
    with the cause and the fix. ``use_wandb=True`` does not make this an error: found only now, inside
    the Tracker, a W&B failure must not stop the run."""
    kwargs = {"project": project, "run_name": run_name, "run_dir": run_dir, "config": config, "run_id": run_id}
    try:
        return WandbWriter(wandb, mode=mode, **kwargs)
    except Exception as exc:  # W&B raises many kinds (CommError, UsageError, TimeoutError, ...)
        cause = _cause(exc)
    fix = "check the network and the API key (`wandb login --relogin`), or turn W&B off with use_wandb=False"
    if mode not in ("offline", "disabled"):
        try:
            writer = WandbWriter(wandb, mode="offline", **kwargs)
        except Exception as exc:  # same as above, now offline
            cause = f"{cause}; offline: {_cause(exc)}"
        else:
            logger.warning("W&B could not start (%s), so this run logs to W&B offline, in %s/wandb (upload it "
                           "later with `wandb sync`); to log online, %s", cause, run_dir, fix)
            return writer
    logger.warning("W&B could not start (%s), so this run does not log to W&B (its metrics still go to "
                   "metrics.jsonl); to log to W&B, %s", cause, fix)
    return None
