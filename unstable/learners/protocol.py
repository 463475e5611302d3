"""What the training loop needs of a learner, and what one update returns.

Kept apart from :mod:`unstable.learners.base` so that :mod:`unstable.learners.loop` depends on
this small contract only, not on the model code (``base`` imports ``loop``, never the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from unstable.records import TrainBatch


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What one ``update`` produced.

    ``adapter_path`` is the checkpoint written by this update; after a skipped (non-finite)
    update it is the previous checkpoint, which is ``None`` while the learner is still at the
    base weights. ``version`` is unchanged by a skipped update.
    """

    version: int
    adapter_path: str | None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def skipped(self) -> bool:
        """Whether the update was skipped for a non-finite loss or gradient (``train/skipped_nonfinite``)."""
        return bool(self.metrics.get("train/skipped_nonfinite", 0))


class Learner(Protocol):
    """A learner as :func:`unstable.learners.loop.run_training` drives it.

    ``config`` needs ``batch_size``, ``poll_interval_s``, ``wait_timeout_s`` and
    ``max_consecutive_skips`` (see :class:`~unstable.learners.LearnerConfig`); ``version`` is the
    version of the current weights. :class:`~unstable.learners.BaseLearner` is one.
    """

    config: Any
    version: int

    def update(self, batch: TrainBatch) -> UpdateResult:
        """Train one step on ``batch`` and say what it produced (the new version and checkpoint, metrics)."""
        ...
