"""Metrics: one recorder per run (:class:`Tracker`) writing JSONL, W&B and the dashboard's data."""

from unstable.tracking.game_metrics import game_samples
from unstable.tracking.run_dir import RunDir, read_jsonl, read_metrics
from unstable.tracking.tracker import NAMESPACES, Tracker, check_key

__all__ = ["NAMESPACES", "RunDir", "Tracker", "check_key", "game_samples", "read_jsonl", "read_metrics"]
