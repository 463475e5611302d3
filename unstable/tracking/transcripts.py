"""Game transcripts: every finished game, train and eval, and every failed one, as one JSON line.

Written by the Tracker to ``<run_dir>/games/transcripts.jsonl`` and read back by ``unstable
replay`` and the dashboard. A line holds what it takes to understand (and replay from its seed)
one game: env, game id, seed, the seats and the policy each was played by (uid, kind, adapter
path, learner version), and per turn the observation, the exact prompt, the completion, the
parsed action, the format and invalid-move flags, the generation and env-step times and the
token counts; then the raw final rewards, outcomes and game info. Failed games carry their
``failure`` (stage, error, traceback) and the turns played before it.

Size is bounded by rotation, like :class:`logging.handlers.RotatingFileHandler`: when the next
line would push the file past ``max_bytes``, ``transcripts.jsonl`` becomes ``transcripts.jsonl.1``
(``.1`` becomes ``.2`` and so on; the oldest beyond ``backups`` is deleted). The files together stay
under about ``(backups + 1) * max_bytes``. ``sample_rate`` < 1 keeps that fraction of the finished
games (failed games are always kept: they are rare and are what you want to look at).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstable.records import FailedGame, GameRecord, Turn
from unstable.tracking.run_dir import _cut_partial_last_line, read_jsonl

TRANSCRIPTS_FILE = "transcripts.jsonl"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class TranscriptConfig:
    """How the Tracker keeps game transcripts."""

    enabled: bool = True  # False: write no transcripts at all
    max_bytes: int = 50 * 1024 * 1024  # rotate the file before it grows past this
    backups: int = 5  # rotated files kept (transcripts.jsonl.1 ... .<backups>); 0 = keep only the current file
    sample_rate: float = 1.0  # fraction of finished games written (failed games: all)
    seed: int = 0  # seeds the sampling, so a rerun keeps the same games

    def __post_init__(self) -> None:
        if self.max_bytes < 1024:
            raise ValueError(f"max_bytes must be >= 1024 (one game is often several KB), got {self.max_bytes}")
        if self.backups < 0:
            raise ValueError(f"backups must be >= 0, got {self.backups}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1]; to keep no transcripts pass enabled=False, "
                             f"got {self.sample_rate}")


def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become ``None``, tuples lists, unknown objects ``str``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


def _turn(t: Turn) -> dict[str, Any]:
    return {
        "turn": t.turn_index, "player_id": t.player_id, "uid": t.policy.uid, "policy_version": t.policy.version,
        "observation": t.observation, "prompt": t.prompt, "completion": t.completion_text, "action": t.action,
        "format_ok": t.format_ok, "invalid": t.invalid, "invalid_reason": t.invalid_reason,
        "finish_reason": t.finish_reason, "gen_seconds": t.gen_seconds, "env_seconds": t.env_seconds,
        "prompt_tokens": len(t.prompt_ids), "completion_tokens": len(t.completion_ids),
    }  # fmt: skip


def transcript_line(result: GameRecord | FailedGame, learner_step: int = 0) -> dict[str, Any]:
    """The JSON-able transcript of one finished or failed game."""
    spec = result.spec
    seats = [{"player_id": a.player_id, "uid": a.policy.uid, "kind": a.policy.kind,
              "adapter_path": a.policy.adapter_path, "version": a.policy.version, "lineage": a.policy.lineage,
              "collect_data": a.collect_data, "prompt_template": a.prompt_template,
              "action_extraction": a.action_extraction} for a in spec.agents]
    line: dict[str, Any] = {
        "format": FORMAT_VERSION, "kind": "failed" if isinstance(result, FailedGame) else "game",
        "time": time.time(), "learner_step": learner_step, "game_id": spec.game_id, "env_id": spec.env_id,
        "seed": spec.seed, "is_eval": spec.is_eval, "eval_player_id": spec.eval_player_id, "seats": seats,
        "num_turns": len(result.turns), "turns": [_turn(t) for t in result.turns],
    }  # fmt: skip
    if isinstance(result, FailedGame):
        line["failure"] = {"stage": result.stage, "error_type": result.error_type, "message": result.message,
                           "traceback": result.traceback,
                           "policy": result.policy_uid}
    else:
        line.update(final_rewards=result.final_rewards, outcomes=result.outcomes, game_info=result.game_info,
                    invalid_player=result.invalid_player, wall_seconds=result.wall_seconds)
    return _clean(line)


class TranscriptWriter:
    """Appends transcripts to ``<games_dir>/transcripts.jsonl`` with rotation (see the module docstring)."""

    def __init__(self, games_dir: str | os.PathLike, config: TranscriptConfig | None = None):
        self.config = config or TranscriptConfig()
        self.path = Path(games_dir) / TRANSCRIPTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rng = random.Random(self.config.seed)
        self._file = None
        self._size = 0
        self.written = 0

    def write(self, result: GameRecord | FailedGame, learner_step: int = 0) -> bool:
        """Append one game (unless disabled or not sampled); return whether it was written."""
        if not self.config.enabled:
            return False
        if isinstance(result, GameRecord) and self._rng.random() >= self.config.sample_rate:
            return False
        data = (json.dumps(transcript_line(result, learner_step), allow_nan=False) + "\n").encode("utf-8")
        if self._file is None:
            self._open()
        if self._size > 0 and self._size + len(data) > self.config.max_bytes:
            self._rotate()
        self._file.write(data)
        self._file.flush()
        self._size += len(data)
        self.written += 1
        return True

    def _open(self) -> None:
        _cut_partial_last_line(self.path)
        self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for the run
        self._size = self._file.tell()

    def _rotate(self) -> None:
        self.close()
        backups = self.config.backups
        if backups == 0:
            self.path.unlink()
        else:
            for i in range(backups - 1, 0, -1):
                older = self.path.with_name(f"{TRANSCRIPTS_FILE}.{i}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{TRANSCRIPTS_FILE}.{i + 1}"))
            os.replace(self.path, self.path.with_name(f"{TRANSCRIPTS_FILE}.1"))
        self._open()

    def close(self) -> None:
        """Close the current file, if open; the next :meth:`write` opens it again."""
        if self._file is not None and not self._file.closed:
            self._file.close()
        self._file = None


def transcript_files(path: str | os.PathLike) -> list[Path]:
    """The transcript files of a run, oldest first; ``path`` is the run dir, its ``games/`` dir or a file."""
    path = Path(path)
    if path.is_dir():
        path = path / "games" / TRANSCRIPTS_FILE if (path / "games").is_dir() else path / TRANSCRIPTS_FILE
    rotated = []
    for candidate in path.parent.glob(f"{path.name}.*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit():
            rotated.append((int(suffix), candidate))
    files = [p for _, p in sorted(rotated, reverse=True)]
    return [*files, path] if path.exists() else files


def read_transcripts(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every transcript still on disk, oldest first (a file rotated away while reading is skipped)."""
    lines = []
    for file in transcript_files(path):
        try:
            lines.extend(read_jsonl(file))
        except FileNotFoundError:
            continue
    return lines
