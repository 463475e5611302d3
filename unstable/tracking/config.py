"""``TrackerConfig``: where a run's metrics go besides its run directory."""

from __future__ import annotations

from dataclasses import dataclass

from unstable.utils.checks import check_bool, check_str


@dataclass
class TrackerConfig:
    """The Tracker's W&B settings (build()'s flat arguments of the same names)."""

    wandb_project: str | None = "UnstableBaselines"
    """W&B project the run logs to (``None``: no W&B)."""
    use_wandb: bool | None = None
    """``None``: log to W&B if ``wandb`` imports and ``wandb_project`` is set."""

    def __post_init__(self) -> None:
        check_str("wandb_project", self.wandb_project, allow_none=True, what="a W&B project name")
        check_bool("use_wandb", self.use_wandb, allow_none=True)
