"""EpisodeBuffer: whole per-player episodes, for learners that need complete trajectories (GAE).

Rewards are per turn, as a return-based learner needs them: each turn keeps its own step
shaping (format bonus, invalid-move penalty, ...), and the transformed game outcome is placed on
the player's **last** turn only. (UnstableBaselines 0.2 copied the outcome onto every turn, so
its GAE counted it once per remaining turn.) For a player with turns t=0..T-1 the reward is
``r_t = step_reward_t - final + final * [t == T-1]`` and ``sum_t r_t`` is the shaped return.
"""

from __future__ import annotations

from dataclasses import replace

from unstable.buffers.base import BufferBase, check_batch_size, swap_pop
from unstable.records import PlayerTrajectory, Step, TrainBatch


class EpisodeBuffer(BufferBase):
    """Stores one list of Steps per player per game; capacity and counters are in Steps.

    Once more than ``max_buffer_size`` Steps are held, random whole episodes are evicted (O(1)
    each). An episode is dropped as stale if any of its Steps is stale, since GAE needs all of it.
    """

    def _init_storage(self) -> None:
        self._episodes: list[list[Step]] = []
        self._num_steps = 0
        self._evicted_episodes = 0

    def size(self) -> int:
        """Number of Steps held, summed over the stored episodes."""
        return self._num_steps

    def num_episodes(self) -> int:
        """Number of episodes held."""
        return len(self._episodes)

    def _build_steps(
        self, player_traj: PlayerTrajectory, env_id: str | None, policy_version: int | None
    ) -> list[Step]:
        steps = super()._build_steps(player_traj, env_id, policy_version)
        out = []
        for k, step in enumerate(steps):
            final = step.step_info["final_after_transform"]
            turn_reward = step.reward - final + (final if k == len(steps) - 1 else 0.0)
            out.append(replace(step, reward=turn_reward, step_info={**step.step_info, "turn_reward": turn_reward}))
        return out

    def add_player_trajectory(
        self, player_traj: PlayerTrajectory, env_id: str | None = None, policy_version: int | None = None
    ) -> int:
        """Store one player's trajectory as a whole episode and evict random episodes beyond ``max_buffer_size``.

        Returns the number of Steps it produced: 0 for a duplicate (``dedupe=True``) or a trajectory with no
        sampled turns; an episode with any stale Step is dropped whole (counted under ``dropped_stale``).
        """
        if not self._receive(player_traj):
            return 0
        steps = self._build_steps(player_traj, env_id, policy_version)
        if not steps:
            return 0
        if any(self.is_stale(s) for s in steps):
            self._counts["dropped_stale"] += len(steps)
            return len(steps)
        self._episodes.append(steps)
        self._num_steps += len(steps)
        while self._num_steps > self.max_buffer_size:
            episode = self._pop_random_episode()
            self._counts["evicted"] += len(episode)
            self._evicted_episodes += 1
        return len(steps)

    def _pop_random_episode(self) -> list[Step]:
        episode = swap_pop(self._episodes, self._rng.randrange(len(self._episodes)))
        self._num_steps -= len(episode)
        return episode

    def _purge_stale(self) -> None:
        fresh = [ep for ep in self._episodes if not any(self.is_stale(s) for s in ep)]
        kept = sum(len(ep) for ep in fresh)
        self._counts["dropped_stale"] += self._num_steps - kept
        self._episodes = fresh
        self._num_steps = kept

    def get_batch(self, batch_size: int) -> TrainBatch:
        """Remove random whole episodes until they hold at least ``batch_size`` Steps and return them.

        The sampling reward transform runs once on all returned Steps together (so normalisation
        sees the whole batch); the :class:`~unstable.records.TrainBatch` keeps each episode's
        Steps together, in turn order, and records where each episode lies.
        """
        check_batch_size(batch_size)
        self._purge_stale()
        if self._num_steps < batch_size:
            raise ValueError(
                f"EpisodeBuffer holds {self._num_steps} Steps, fewer than the batch_size {batch_size} "
                "asked for; wait until size() >= batch_size"
            )
        episodes: list[list[Step]] = []
        taken = 0
        while taken < batch_size:
            episode = self._pop_random_episode()
            episodes.append(episode)
            taken += len(episode)
        self._counts["handed_out"] += taken
        batch = TrainBatch.from_episodes(episodes)
        batch = TrainBatch(tuple(self._sample_transform(list(batch.steps))), batch.episodes)
        self._log()
        return batch

    def stats(self) -> dict[str, int]:
        """:meth:`~unstable.buffers.base.BufferBase.stats` plus the ``episodes`` held and ``evicted_episodes``."""
        return {
            **super().stats(),
            "episodes": len(self._episodes),
            "evicted_episodes": self._evicted_episodes,
        }

    def clear(self) -> None:
        """Drop every stored episode (counted as ``cleared`` Steps); counters and transforms are kept."""
        self._counts["cleared"] += self._num_steps
        self._episodes = []
        self._num_steps = 0
