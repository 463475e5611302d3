"""StepBuffer: a bounded bag of Steps for on-policy, REINFORCE-style learners."""

from __future__ import annotations

from unstable.buffers.base import BufferBase, check_batch_size, swap_pop
from unstable.records import PlayerTrajectory, Step, TrainBatch


class StepBuffer(BufferBase):
    """Stores Steps; evicts random ones in O(1) each once more than ``max_buffer_size`` are held.

    ``get_batch(n)`` samples n Steps uniformly without replacement, removes them, runs the
    sampling reward transform on them and returns them as a :class:`~unstable.records.TrainBatch`
    of loose Steps. See :mod:`unstable.buffers.base` for
    the back-pressure and staleness rules.

    ``whole_games=True`` samples whole games instead (every held Step of a game, in random game
    order, as many games as fit in n; at least one): the answers an environment samples for one
    prompt form one GRPO group, and a group split across batches loses its members' comparison.
    """

    def __init__(self, *args, whole_games: bool = False, **kwargs):
        self.whole_games = bool(whole_games)
        super().__init__(*args, **kwargs)

    def _init_storage(self) -> None:
        self._steps: list[Step] = []

    def size(self) -> int:
        """Number of Steps held."""
        return len(self._steps)

    def add_player_trajectory(
        self, player_traj: PlayerTrajectory, env_id: str | None = None, policy_version: int | None = None
    ) -> int:
        """Store one player's Steps (stale ones are counted under ``dropped_stale`` instead) and evict random
        Steps beyond ``max_buffer_size``; returns the number of Steps it produced (0 for a duplicate when
        ``dedupe=True``)."""
        if not self._receive(player_traj):
            return 0
        steps = self._build_steps(player_traj, env_id, policy_version)
        for step in steps:
            if self.is_stale(step):
                self._counts["dropped_stale"] += 1
            else:
                self._steps.append(step)
        while len(self._steps) > self.max_buffer_size:
            swap_pop(self._steps, self._rng.randrange(len(self._steps)))
            self._counts["evicted"] += 1
        return len(steps)

    def _purge_stale(self) -> None:
        fresh = [s for s in self._steps if not self.is_stale(s)]
        self._counts["dropped_stale"] += len(self._steps) - len(fresh)
        self._steps = fresh

    def get_batch(self, batch_size: int) -> TrainBatch:
        """Remove and return ``batch_size`` random Steps, after the sampling reward transform."""
        check_batch_size(batch_size)
        self._purge_stale()
        if len(self._steps) < batch_size:
            raise ValueError(
                f"StepBuffer holds {len(self._steps)} Steps, fewer than the batch_size {batch_size} "
                "asked for; wait until size() >= batch_size"
            )
        picks = self._whole_games(batch_size) if self.whole_games else self._rng.sample(range(len(self._steps)),
                                                                                         batch_size)
        batch = [self._steps[i] for i in picks]
        for i in sorted(picks, reverse=True):  # descending, so no swapped-in item is a later pick
            swap_pop(self._steps, i)
        self._counts["handed_out"] += len(batch)
        batch = self._sample_transform(batch)
        self._log()
        return TrainBatch.from_steps(batch)

    def _whole_games(self, batch_size: int) -> list[int]:
        """Indices of whole games, in random order, that fit in ``batch_size`` (at least one game)."""
        games: dict[tuple[str, int], list[int]] = {}
        for i, step in enumerate(self._steps):
            games.setdefault((step.env_id, step.game_id), []).append(i)
        groups = list(games.values())
        self._rng.shuffle(groups)
        picks: list[int] = []
        for group in groups:
            if not picks or len(picks) + len(group) <= batch_size:
                picks.extend(group)
        return picks

    def clear(self) -> None:
        """Drop every stored Step (counted as ``cleared``); counters and transforms are kept."""
        self._counts["cleared"] += len(self._steps)
        self._steps = []
