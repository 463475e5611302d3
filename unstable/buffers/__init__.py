"""Replay buffers between the collector and the learner: games -> trajectories -> Steps -> batches."""

from __future__ import annotations

from unstable.buffers.base import BufferBase, MetricsSink, swap_pop, trajectory_to_steps
from unstable.buffers.episode_buffer import EpisodeBuffer
from unstable.buffers.step_buffer import StepBuffer

__all__ = ["BufferBase", "EpisodeBuffer", "MetricsSink", "StepBuffer", "swap_pop", "trajectory_to_steps"]
