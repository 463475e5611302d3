"""``TrackerConfig``: where a run's metrics go besides its run directory."""

from __future__ import annotations

from dataclasses import dataclass

from unstable.utils.schema import check_fields, setting


@dataclass
class TrackerConfig:
    """The Tracker's W&B settings (build()'s flat arguments of the same names)."""

    wandb_project: str | None = setting("UnstableBaselines", what="a W&B project name", flat="wandb_project")
    """W&B project the run logs to (``None``: no W&B)."""
    use_wandb: bool | None = setting(None, flat="use_wandb")
    """``None``: log to W&B if ``wandb`` imports and ``wandb_project`` is set."""

    def __post_init__(self) -> None:
        check_fields(self)
