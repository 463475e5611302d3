"""The run directory and the JSONL files in it.

Every run owns one folder (default ``./runs/<run_name>/``)::

    <run_dir>/
        config.json          the run's configuration (written atomically)
        metrics.jsonl        one line per Tracker.log / log_game call
        checkpoints/         LoRA adapters written by the learner
        logs/                failed_games.jsonl, scheduler logs
        games/               game transcripts
        registry/            rating snapshots
        wandb/               W&B's own files, when W&B is on

JSONL lines are flushed as they are written, so a crash loses at most the line being written;
:func:`read_jsonl` tolerates that half-written last line, and :class:`JsonlWriter` cuts it off
before appending again, so a resumed run never glues a new line onto a broken one.

``logs/failed_games.jsonl`` is a :class:`CappedJsonlWriter`: a run in which every game fails once
wrote 443 MB of it in 10 minutes. It keeps the *first* failures (they hold the cause) up to
:data:`FAILED_GAMES_MAX_BYTES`, each long text shortened to :data:`MAX_LOGGED_CHARS`, and counts
the ones it did not write.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RUN_SUBDIRS = ("checkpoints", "logs", "games", "registry")
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
FAILED_GAMES_FILE = "failed_games.jsonl"
FAILED_GAMES_MAX_BYTES = 20 * 1024 * 1024
"""Size at which ``logs/failed_games.jsonl`` stops growing (a resumed run counts what is there)."""
MAX_LOGGED_CHARS = 20_000
"""Longest text (a message, a traceback) a capped JSONL line holds; the middle of a longer one is cut."""


@dataclass(frozen=True, slots=True)
class RunDir:
    """The folder of one run; :meth:`create` makes it and its sub-folders."""

    root: Path

    @classmethod
    def create(cls, run_name: str, run_dir: str | os.PathLike | None = None) -> RunDir:
        """Make the folder (``run_dir``, default ``runs/<run_name>``) and its sub-folders, keeping what is there,
        and return it with an absolute ``root``; ``ValueError`` when ``run_name`` cannot name a folder and no
        ``run_dir`` is given."""
        if run_dir is None:
            if not run_name or os.sep in run_name or run_name in (".", ".."):
                raise ValueError(f"run_name {run_name!r} cannot name a folder; pass run_dir=... explicitly")
            run_dir = Path("runs") / run_name
        root = Path(run_dir).expanduser().resolve()
        for sub in RUN_SUBDIRS:
            (root / sub).mkdir(parents=True, exist_ok=True)
        return cls(root)

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``: the LoRA adapters the learner writes."""
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        """``logs/``: ``failed_games.jsonl`` and the scheduler's logs."""
        return self.root / "logs"

    @property
    def games(self) -> Path:
        """``games/``: the game transcripts."""
        return self.root / "games"

    @property
    def registry(self) -> Path:
        """``registry/``: the rating snapshots."""
        return self.root / "registry"

    @property
    def metrics_path(self) -> Path:
        """``metrics.jsonl``: one line per Tracker log call."""
        return self.root / METRICS_FILE

    @property
    def config_path(self) -> Path:
        """``config.json``: the run's configuration."""
        return self.root / CONFIG_FILE

    @property
    def failed_games_path(self) -> Path:
        """``logs/failed_games.jsonl``, capped at :data:`FAILED_GAMES_MAX_BYTES`."""
        return self.logs / FAILED_GAMES_FILE


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as JSON to a temporary file beside ``path``, then rename it over ``path``.

    Values JSON cannot encode (a reward-transform object in a config) are written as ``str(value)``.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class JsonlWriter:
    """Appends one JSON object per line and flushes each line to the OS at once."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        _cut_partial_last_line(self.path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def write(self, obj: dict[str, Any]) -> None:
        """Write one line; NaN/inf are not valid JSON, so callers must pass them as ``None``."""
        self._file.write(json.dumps(obj, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file (a second call does nothing)."""
        if not self._file.closed:
            self._file.close()


def shorten(text: str, max_chars: int = MAX_LOGGED_CHARS) -> str:
    """``text``, or its beginning and end with a note of how many characters were cut between them."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut ...]\n{text[len(text) - half:]}"


class CappedJsonlWriter(JsonlWriter):
    """A :class:`JsonlWriter` that keeps the first lines only: once the next line would take the
    file past ``max_bytes`` it writes no more, and counts each line it leaves out in
    :attr:`unwritten`. Top-level string values longer than ``max_chars`` are cut by :func:`shorten`."""

    def __init__(self, path: str | os.PathLike, max_bytes: int, max_chars: int = MAX_LOGGED_CHARS):
        super().__init__(path)
        self.max_bytes, self.max_chars = max_bytes, max_chars
        self.size = self.path.stat().st_size
        self.unwritten = 0

    @property
    def full(self) -> bool:
        """Whether a line has been left out: from then on nothing more is written."""
        return self.unwritten > 0

    def write(self, obj: dict[str, Any]) -> bool:  # type: ignore[override]
        """Write one line unless the file is full; return whether it was written."""
        obj = {key: shorten(value, self.max_chars) if isinstance(value, str) else value for key, value in obj.items()}
        line = json.dumps(obj, allow_nan=False) + "\n"
        size = len(line.encode("utf-8"))
        if self.full or self.size + size > self.max_bytes:
            self.unwritten += 1
            return False
        self._file.write(line)
        self._file.flush()
        self.size += size
        return True


def _cut_partial_last_line(path: Path) -> None:
    """Drop a half-written last line left by a crash, so appending starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        logger.warning("%s: dropping a half-written last line (%d bytes) left by a crash", path, len(data) - keep)
        f.truncate(keep)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Load a JSONL file; a broken *last* line (a crash mid-write) is skipped, a broken earlier one raises."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number == len(lines):
                logger.warning("%s: skipping a half-written last line", path)
                break
            raise ValueError(f"{path}:{number} is not valid JSON ({e}); the file is corrupt") from e
    return rows


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """All metric lines of a run (``run_dir`` may also be the ``metrics.jsonl`` path itself)."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / METRICS_FILE
    return read_jsonl(path)
