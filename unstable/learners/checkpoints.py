"""Checkpoint directories: atomic writes and retention (keep the last N plus every K-th)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

CKPT_PATTERN = re.compile(r"^ckpt-(\d+)$")


def checkpoint_dir(output_dir: str | Path, version: int) -> Path:
    """``output_dir/ckpt-{version}``."""
    return Path(output_dir) / f"ckpt-{version}"


def list_checkpoints(output_dir: str | Path) -> dict[int, Path]:
    """Existing ``ckpt-{N}`` directories under ``output_dir`` by version (temp dirs excluded)."""
    root = Path(output_dir)
    if not root.is_dir():
        return {}
    found = {}
    for child in root.iterdir():
        match = CKPT_PATTERN.match(child.name)
        if match and child.is_dir():
            found[int(match.group(1))] = child
    return found


def atomic_save(target: str | Path, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp_dir)`` on a fresh temp dir beside ``target``, then rename it to ``target``.

    Readers (inference servers loading the adapter) never see a half-written directory: the
    rename is atomic on one filesystem. On any error the temp dir is removed and the error raised.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise FileExistsError(f"{target} already exists; refusing to overwrite a checkpoint")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def versions_to_keep(versions: Iterable[int], keep_last: int | None, keep_every: int | None) -> set[int]:
    """The newest ``keep_last`` versions plus every multiple of ``keep_every`` (``None``: all / none)."""
    ordered = sorted(set(versions))
    if keep_last is None:
        return set(ordered)
    keep = set(ordered[-keep_last:])
    if keep_every is not None:
        keep |= {v for v in ordered if v % keep_every == 0}
    return keep


def apply_retention(output_dir: str | Path, keep_last: int | None, keep_every: int | None) -> list[int]:
    """Delete the ``ckpt-{N}`` dirs that :func:`versions_to_keep` drops; returns removed versions."""
    existing = list_checkpoints(output_dir)
    keep = versions_to_keep(existing, keep_last, keep_every)
    removed = sorted(v for v in existing if v not in keep)
    for version in removed:
        shutil.rmtree(existing[version])
    return removed
