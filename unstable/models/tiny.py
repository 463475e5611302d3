"""The tiny models, kept importable under this name: the code is :mod:`unstable.local_models.tiny`."""

from unstable.local_models.tiny import TINY_SIZES, build_tiny_model, count_parameters, tiny_model_path

__all__ = ["TINY_SIZES", "build_tiny_model", "count_parameters", "tiny_model_path"]
