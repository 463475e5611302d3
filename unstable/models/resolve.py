"""Model names, kept importable under this name: the code is :mod:`unstable.local_models.resolve`."""

from unstable.local_models.resolve import (
    check_adapter_dir,
    check_model_dir,
    looks_like_path,
    read_json,
    resolve_model_name,
    resolve_tiny_name,
)

__all__ = ["check_adapter_dir", "check_model_dir", "looks_like_path", "read_json", "resolve_model_name",
           "resolve_tiny_name"]
