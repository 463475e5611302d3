"""Read a run directory into the dashboard's data, incrementally, while the run writes it (or after).

:meth:`RunReader.info` returns the shape of :meth:`Tracker.get_interface_info` (see
:mod:`unstable.ui.dashboard`) rebuilt from the files alone, so the dashboard works for a run on
another machine (a synced folder) or one that has finished:

* ``metrics.jsonl``: moving means over the last ``window`` values of each key, latest values,
  counters (``*/games``, ``*/failed_games``), inference and buffer stats, ``registry/<uid>/mu``;
* ``registry/registry.json`` (written when a run ends): ratings, win/draw/loss and match counts;
  before it exists, match counts are counted from the transcripts;
* ``games/transcripts.jsonl``: the action-diversity window and match counts;
* ``config.json``: the run's configuration (buffer size for the fill gauge).

Each call reads only the bytes appended since the last one (a rotated or truncated file is read
again from its start); a half-written last line waits for the next call, a corrupt one is skipped
and counted in ``bad_lines``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any

from unstable.tracking.diversity import ActionDiversity, learner_sequences
from unstable.tracking.run_dir import CONFIG_FILE, METRICS_FILE
from unstable.tracking.transcripts import TRANSCRIPTS_FILE

logger = logging.getLogger(__name__)

# kept as series for sparklines
SERIES_KEYS = ("train/loss", "train/grad_norm", "train/reward_mean", "train/approx_kl", "train/clipfrac")
_LINE_FIELDS = ("time", "wall_s", "learner_step")


def is_counter(key: str) -> bool:
    """Tracker counters are written as running totals, not samples."""
    return key.endswith(("/games", "/failed_games", "/games_dropped", "/failed_games_unlogged"))


class JsonlTail:
    """The complete JSON lines appended to a file since the last :meth:`read`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.bad_lines = 0
        self._offset = 0
        self._inode: int | None = None

    def read(self) -> list[dict[str, Any]]:
        """The complete lines appended since the last call, parsed; a half-written last line waits for the next call.

        Empty while the file does not exist; a replaced or truncated file is read from its start. A corrupt line is
        skipped with a warning and counted in ``bad_lines``."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        if st.st_ino != self._inode or st.st_size < self._offset:
            self._inode, self._offset = st.st_ino, 0  # new (rotated) or truncated file: from the start
        if st.st_size == self._offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(st.st_size - self._offset)
        end = data.rfind(b"\n") + 1
        self._offset += end
        rows = []
        for raw in data[:end].splitlines():
            if not raw.strip():
                continue
            try:
                rows.append(json.loads(raw))
            except json.JSONDecodeError:
                self.bad_lines += 1
                logger.warning("%s: skipping a corrupt line", self.path)
        return rows


def _mean(values: Any) -> float:
    return sum(values) / len(values)


class RunReader:
    """Rebuilds the dashboard data of the run in ``run_dir`` from its files (see the module docstring)."""

    def __init__(self, run_dir: str | os.PathLike, window: int = 512, history: int = 2000):
        self.root = Path(run_dir).expanduser().resolve()
        self.window = window
        self._metrics = JsonlTail(self.root / METRICS_FILE)
        self._transcripts = JsonlTail(self.root / "games" / TRANSCRIPTS_FILE)
        self._windows: dict[str, deque[float]] = {}
        self._latest: dict[str, float] = {}
        self._measured_at: dict[str, int] = {}  # key -> the learner step of the line holding its latest value
        self._step: int | None = None  # the furthest learner step (a checkpoint's evaluation is stamped earlier)
        self._counts: dict[str, int] = {}
        self._last_line: dict[str, Any] = {}
        self._games: deque[list[float]] = deque(maxlen=history)
        self._history = history
        self._series: dict[str, deque[float]] = {key: deque(maxlen=history) for key in SERIES_KEYS}
        self._diversity = ActionDiversity(window=window, min_games=1)
        self._matches: dict[str, Counter[str]] = defaultdict(Counter)
        self._transcript_games = 0
        self._cache: dict[Path, tuple[float, Any]] = {}

    def _add_metrics(self, line: dict[str, Any]) -> None:
        self._last_line = {k: line.get(k) for k in _LINE_FIELDS}
        step = line.get("learner_step")
        if isinstance(step, int) and not isinstance(step, bool):
            self._step = step if self._step is None else max(self._step, step)
        for key, value in line.items():
            if key in _LINE_FIELDS or not isinstance(value, int | float):
                continue
            if is_counter(key):
                self._counts[key] = int(value)
                if key == "collect/games" and line.get("time") is not None:
                    self._games.append([float(line["time"]), float(value)])
                continue
            self._windows.setdefault(key, deque(maxlen=self.window)).append(float(value))
            self._latest[key] = float(value)
            if isinstance(step, int) and not isinstance(step, bool):
                self._measured_at[key] = step
            if key in self._series or key.split("/", 1)[-1] in SERIES_KEYS:  # also <model>/train/loss ...
                self._series.setdefault(key, deque(maxlen=self._history)).append(float(value))

    def _add_transcript(self, line: dict[str, Any]) -> None:
        self._transcript_games += 1
        if line.get("kind") != "game":
            return  # a failed game was not played out: no match, no moves to count
        seats = line.get("seats", [])
        uids = sorted({seat["uid"] for seat in seats})
        if len(uids) == 1 and len(seats) > 1:
            self._matches[uids[0]][uids[0]] += 1
        for a in uids:
            for b in uids:
                if a != b:
                    self._matches[a][b] += 1
        if not line.get("is_eval"):
            collecting = [seat["player_id"] for seat in seats if seat.get("collect_data")]
            turns = ((t["player_id"], t.get("action", ""), bool(t.get("invalid"))) for t in line.get("turns", []))
            sequences = learner_sequences(collecting, turns)
            if sequences:
                self._diversity.add(line["env_id"], sequences)

    def _json_file(self, path: Path) -> Any:
        """``path`` parsed, re-read only when its modification time changes; ``None`` if absent or unreadable."""
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return None
        cached = self._cache.get(path)
        if cached is None or cached[0] != mtime:
            try:
                cached = (mtime, json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError) as e:
                logger.warning("%s: not readable yet (%s)", path, e)
                return cached[1] if cached else None
            self._cache[path] = cached
        return cached[1]

    def _registry(self) -> dict[str, Any] | None:
        state = self._json_file(self.root / "registry" / "registry.json")
        if isinstance(state, dict) and "models" in state:
            ratings = {m["uid"]: {k: v for k, v in m.items() if k != "uid"} for m in state["models"]}
            current = state.get("current")  # each lineage's current checkpoint (before lineages: one uid)
            currents = current if isinstance(current, dict) else ({"model": current} if current else {})
            return {"current": next(iter(currents.values()), None), "currents": currents, "ratings": ratings,
                    "match_counts": state.get("matches", {}), "source": "registry.json"}
        ratings: dict[str, dict[str, float]] = defaultdict(dict)
        for key, value in self._latest.items():
            if key.startswith("registry/") and key.endswith(("/mu", "/sigma")):
                uid, field = key[len("registry/") :].rsplit("/", 1)
                ratings[uid][field] = value
        matches = {a: dict(row) for a, row in self._matches.items()}
        if not ratings and not matches:
            return None
        return {"current": None, "ratings": dict(ratings), "match_counts": matches, "source": "transcripts"}

    def _prefixed(self, namespace: str) -> dict[str, float]:
        return {key[len(namespace) :]: v for key, v in self._latest.items() if key.startswith(namespace)}

    def info(self) -> dict[str, Any]:
        """Read what was appended since the last call and return the dashboard data."""
        for line in self._metrics.read():
            self._add_metrics(line)
        for line in self._transcripts.read():
            self._add_transcript(line)
        means: dict[str, dict[str, float]] = defaultdict(dict)
        for key, values in sorted(self._windows.items()):
            means[key.split("/", 1)[0]][key] = _mean(values)
        inference: dict[str, dict[str, float]] = defaultdict(dict)
        for rest, value in self._prefixed("inference/").items():
            actor, _, stat = rest.partition("/")
            inference[actor][stat] = value
        games_per_env: dict[str, dict[str, int]] = {"collect": {}, "eval": {}}
        for key, n in self._counts.items():
            stage, _, rest = key.partition("/")
            if stage in games_per_env and rest.endswith("/games"):
                games_per_env[stage][rest[: -len("/games")]] = n
        config = self._json_file(self.root / CONFIG_FILE) or {}
        last_time = self._last_line.get("time")
        return {
            "run_name": config.get("run_name") or self.root.name,
            "run_dir": str(self.root),
            "source": "files",
            "learner_step": self._step,
            "wall_s": self._last_line.get("wall_s"),
            "age_s": time.time() - last_time if last_time else None,
            "means": dict(means),
            "latest": dict(self._latest),
            "measured_at": dict(self._measured_at),
            "counts": dict(self._counts),
            "games_per_env": games_per_env,
            "failed_games": {stage: self._counts.get(f"{stage}/failed_games", 0) for stage in ("collect", "eval")},
            "registry": self._registry(),
            "inference": dict(inference),
            "buffer": {f"buffer/{k}": v for k, v in self._prefixed("buffer/").items()},
            "diversity": self._diversity.snapshot(),
            "history": {"collect_games": list(self._games), **{k: list(v) for k, v in self._series.items()}},
            "config": config,
            "transcript_games": self._transcript_games,
            "bad_lines": self._metrics.bad_lines + self._transcripts.bad_lines,
        }
