"""Checkpoint directories: atomic writes, the newest complete one, and retention (last N plus every K-th).

A checkpoint is written into a temp dir beside its target, its files are fsync'ed, a ``COMPLETE``
marker is written last, and the dir is renamed to ``ckpt-{N}``: a kill at any moment leaves either
no ``ckpt-{N}`` or a complete one. :func:`latest_complete` is what a resumed run starts from;
:func:`clean_partial` removes the temp dirs a kill left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

CKPT_PATTERN = re.compile(r"^ckpt-(\d+)$")
COMPLETE_MARKER = "COMPLETE"
TEMP_PATTERN = re.compile(r"^\.ckpt-\d+\.(tmp|del)-")  # a write or a deletion that a kill interrupted


def checkpoint_dir(output_dir: str | Path, version: int) -> Path:
    """``output_dir/ckpt-{version}``."""
    return Path(output_dir) / f"ckpt-{version}"


def is_complete(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint dir whose write finished (it holds the ``COMPLETE`` marker)."""
    return (Path(path) / COMPLETE_MARKER).is_file()


def list_checkpoints(output_dir: str | Path, complete_only: bool = False) -> dict[int, Path]:
    """Existing ``ckpt-{N}`` directories under ``output_dir`` by version (temp dirs excluded)."""
    root = Path(output_dir)
    if not root.is_dir():
        return {}
    found = {}
    for child in root.iterdir():
        match = CKPT_PATTERN.match(child.name)
        if match and child.is_dir() and (not complete_only or is_complete(child)):
            found[int(match.group(1))] = child
    return found


def latest_complete(output_dir: str | Path) -> tuple[int, Path] | None:
    """``(version, path)`` of the newest complete checkpoint, or ``None`` if there is none."""
    found = list_checkpoints(output_dir, complete_only=True)
    if not found:
        return None
    version = max(found)
    return version, found[version]


def clean_partial(output_dir: str | Path) -> list[str]:
    """Remove the temp dirs of interrupted writes and deletions; returns their names.

    A ``ckpt-{N}`` without the marker (not written by :func:`atomic_save`) is left alone, but
    :func:`latest_complete` never picks it.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return []
    removed = []
    for child in root.iterdir():
        if TEMP_PATTERN.match(child.name) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    return sorted(removed)


def _fsync_tree(root: Path) -> None:
    """Flush every file under ``root`` to disk, so the marker never outlives the data after a crash."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a directory
        pass
    finally:
        os.close(fd)


def atomic_save(target: str | Path, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp_dir)`` on a fresh temp dir beside ``target``, then rename it to ``target``.

    Readers (inference servers loading the adapter) never see a half-written directory: the
    rename is atomic on one filesystem. The ``COMPLETE`` marker is written after every file is on
    disk. On any error the temp dir is removed and the error raised.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise FileExistsError(f"{target} already exists; refusing to overwrite a checkpoint")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(tmp)
        _fsync_tree(tmp)
        (tmp / COMPLETE_MARKER).write_text("ok\n")
        os.replace(tmp, target)
        _fsync_dir(target.parent)
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
        # rename first (atomic), so a kill mid-deletion never leaves a half-deleted ckpt-N behind
        doomed = existing[version].with_name(f".{existing[version].name}.del-{os.getpid()}")
        os.replace(existing[version], doomed)
        shutil.rmtree(doomed)
    return removed
