"""Checks of names and directories a run will write, before anything is written: what the
filesystem would refuse later, mid-run, as a bare ``OSError``, is a ``ValueError`` here that names
the setting and the fix."""

from __future__ import annotations

import os
from pathlib import Path

NAME_MAX = 255  # bytes of one path component on Linux, macOS and Windows filesystems


def check_dir_name(name: str, value: object) -> None:
    """``value`` must be one directory name: a non-empty string without '/', control characters (NUL,
    newline ...) or a '.'/'..' meaning, at most :data:`NAME_MAX` bytes in UTF-8."""
    what = f"{name} must be a plain directory name (not empty, '.' or '..'; no '/' or control characters)"
    if not isinstance(value, str) or not value.strip() or value in (".", "..") or "/" in value or os.sep in value:
        raise ValueError(f"{what}, got {value!r}")
    bad = sorted({c for c in value if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ValueError(f"{what}; it holds {', '.join(repr(c) for c in bad)}: got {value!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be valid text (it holds a lone surrogate), got {value!r}") from None
    if size > NAME_MAX:
        raise ValueError(f"{name} is {size} bytes in UTF-8; a directory name can have at most {NAME_MAX}: "
                         f"give a shorter one (got {value[:40]!r}...)")


def check_dir_path(name: str, value: str) -> None:
    """``value`` (a path) must hold no NUL or other control characters and no component longer than
    :data:`NAME_MAX` bytes."""
    bad = sorted({c for c in value if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ValueError(f"{name} must be a directory path without control characters; it holds "
                         f"{', '.join(repr(c) for c in bad)}: got {value!r}")
    try:
        long = [part for part in Path(value).parts if len(part.encode("utf-8")) > NAME_MAX]
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be valid text (it holds a lone surrogate), got {value!r}") from None
    if long:
        raise ValueError(f"{name} has a directory name of more than {NAME_MAX} bytes ({long[0][:40]!r}...); "
                         "give a shorter path")


def check_writable_dir(name: str, path: str | os.PathLike) -> None:
    """``path`` must be a directory this process can create files in, or be creatable: its nearest
    existing ancestor is a directory it can write to. Raises ``ValueError`` saying which part is wrong."""
    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    existing = target
    while not os.path.exists(existing) and existing != os.path.dirname(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        where = f"{name} {os.fspath(path)!r}" if existing == target else f"{name} {os.fspath(path)!r}: {existing}"
        raise ValueError(f"{where} is a file, not a directory; give a directory path (created if missing)")
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == target else f" (it would be created in {existing})"
        raise ValueError(f"{name} {os.fspath(path)!r} is not writable by this user{made}; give a directory "
                         "you can write to, or change its permissions")


def check_writable_file(name: str, path: str | os.PathLike) -> None:
    """``path`` must be a file this process can write (create, or replace): not a directory, in an existing
    directory it can write to. Checked before the work whose results it will hold."""
    target = os.path.abspath(os.fspath(path))
    if os.path.isdir(target):
        raise ValueError(f"{name} {os.fspath(path)!r} is a directory; give a file path")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise ValueError(f"{name} {os.fspath(path)!r}: the folder {folder} does not exist; create it first, or give "
                         "a file in an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {os.fspath(path)!r}: the folder {folder} is not writable by this user")
