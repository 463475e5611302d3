"""``BufferConfig``: how much a run's buffer holds, how stale its steps may be, and how rewards are shaped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unstable.utils.schema import check_fields, setting


@dataclass
class BufferConfig:
    """Settings of a Step- or EpisodeBuffer (build()'s flat ``buffer_size``, ``max_staleness``,
    ``reward_transforms``)."""

    size: int | None = setting(None, ge=1, flat="buffer_size")
    """Steps the buffer holds before it drops the oldest; ``None``: twice the learner's ``batch_size``."""
    max_staleness: int | None = setting(8, ge=0, flat="max_staleness")
    """Drop steps sampled by a policy more than this many versions behind the learner (``None``: keep
    all); the buffer counts them (``buffer/dropped_stale``). The default job's steps are ~2.7 versions
    old on average and at most ~10; within the bound, the learners' importance weights correct for
    the age (``off_policy_correction``)."""
    reward_transforms: Any = setting(None, flat="reward_transforms")
    """``(final, step, sampling)`` reward-transform callables (each may be ``None``); ``None``: the
    default chain."""
    whole_games: bool = setting(False, flat="whole_games")
    """Hand the learner whole games (a StepBuffer): what GRPO over an environment's ``num_samples``
    answers per prompt needs, so that each group reaches the learner complete."""

    def __post_init__(self) -> None:
        check_fields(self)
        check_reward_transforms(self.reward_transforms)


def check_reward_transforms(value: Any) -> None:
    """Accept ``None`` or a ``(final, step, sampling)`` triple whose items are callables or ``None``; otherwise
    ``ValueError`` saying which part is wrong."""
    if value is None:
        return
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise ValueError("reward_transforms must be None or a (final, step, sampling) triple, e.g. "
                         f"unstable.reward_transformations.default_transforms(); got {value!r}")
    for name, fn in zip(("final", "step", "sampling"), value, strict=True):
        if fn is not None and not callable(fn):
            raise ValueError(f"reward_transforms: the {name} transform must be callable or None, got {fn!r}")
