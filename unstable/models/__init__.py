"""Models built here rather than downloaded: the tiny Qwen3 used by tests and the CPU job."""

from unstable.local_models.tiny import TINY_SIZES, build_tiny_model, count_parameters, tiny_model_path

__all__ = ["TINY_SIZES", "build_tiny_model", "count_parameters", "tiny_model_path"]
