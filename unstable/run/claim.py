"""One run per run directory: a claim file created atomically before anything else writes there.

``build()`` claims ``<run_dir>/RUN_CLAIM`` with an exclusive create (``O_CREAT | O_EXCL``) before Ray
starts, and ``Run.stop()`` releases it. A second run given the same directory while the first is
alive is refused with a clear error, instead of dying inside the learner after writing into the
first run's files. A claim whose process is gone (a crash, ``kill -9``) is stale and is taken over,
so ``--resume`` works after any stop. A claim from another machine cannot be checked for life (a
cluster's shared storage): it is refused, and the message says which file to delete once that run
is known to be gone.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

CLAIM_FILE = "RUN_CLAIM"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def claim_run_dir(run_dir: str | os.PathLike) -> Path:
    """Claim ``run_dir`` for this process (created if missing); raises ``ValueError`` if a live run
    holds it. Returns the claim file, for :func:`release_run_dir`."""
    root = Path(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    path = root / CLAIM_FILE
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
    for _ in range(2):  # a stale claim is removed once, then created again (exclusively: one of two racers wins)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read(path)
            pid = holder.get("pid")
            gone = holder.get("host") == mine["host"] and isinstance(pid, int) and not _alive(pid)
            unreadable = not holder and time.time() - _mtime(path) > 5  # a writer killed between create and write
            if gone or unreadable:
                path.unlink(missing_ok=True)  # its process is gone: a crashed or killed run
                continue
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["time"])) if isinstance(
                holder.get("time"), int | float) else "?"
            where = "this machine" if holder.get("host") == mine["host"] else f"host {holder.get('host')!r}"
            raise ValueError(f"run directory {root} is in use by another run (pid {holder.get('pid')} on {where}, "
                             f"started {started}); pick another run_name, or wait for that run to end (if it is "
                             f"gone, delete {path})") from None
        with os.fdopen(fd, "w") as f:
            json.dump(mine, f)
        return path
    raise ValueError(f"could not claim run directory {root}: another run claimed it at the same moment")


def release_run_dir(path: str | os.PathLike) -> None:
    """Remove this process's claim (left alone if another process has taken the directory since)."""
    path = Path(path)
    if _read(path).get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # unreadable or half-written: treated as held by nobody we can check
    return data if isinstance(data, dict) else {}
