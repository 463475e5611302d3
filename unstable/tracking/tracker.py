"""The one metrics recorder of a run: namespaced keys, moving means, writers for JSONL, W&B and the dashboard.

Every component reports here (``tracker.log({...})``, ``log_game``, ``log_inference``,
``log_registry``, ``log_buffer``, and ``log_at`` for a checkpoint's evaluation), locally or as the Ray
actor ``"Tracker"``. Each call is written at once as one line of ``<run_dir>/metrics.jsonl``, so a
crash loses nothing already logged; the values also feed a moving window per key (``window``
values, 512 as in UnstableBaselines 0.2) whose means go to W&B at most every ``flush_every_s``
seconds and to the dashboard through :meth:`Tracker.get_interface_info`. Non-finite values are
written as ``null``, counted under ``system/nonfinite/<key>``, and never averaged.

Each game also adds timing samples (:mod:`unstable.tracking.timings`) and action-diversity metrics
(:mod:`unstable.tracking.diversity`), and its transcript to ``games/transcripts.jsonl``
(:mod:`unstable.tracking.transcripts`).

A write the filesystem refuses (permission denied, read-only, disk full) is not retried: the
first one becomes :class:`~unstable.utils.disk.RunDirUnwritableError` (the path, the reason, the
fix), logged once and kept by :meth:`Tracker.write_error`; from then on the Tracker writes no file
and raises nothing (most calls come fire-and-forget from the collector and buffer, where an error
would only print a traceback per call). The learner's training loop and ``Run.wait()`` ask
:meth:`Tracker.write_error` and stop the run with it.

Counters (``counts()``): ``collect/games``, ``collect/<env>/games``, ``collect/failed_games`` (the
game raised), ``collect/games_dropped`` (its inference actor died) and the same under ``eval/``,
``collect/average_policy_games`` and ``collect/<env>/average_policy_games`` (games with a seat of NFSP's
average policy, :mod:`unstable.samplers.nfsp`),
``system/failed_games_unlogged`` (failed games not written because ``logs/failed_games.jsonl`` is full);
they go to W&B as they are, not averaged. ``state_dict()`` / ``load_state_dict()`` carry them and
the learner step over a resume; a resumed run's Tracker continues its W&B run (``wandb_id=``).

Not thread-safe: use one thread (or the Ray actor, which runs one call at a time).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unstable.records import FailedGame, GameRecord
from unstable.tracking.diversity import ActionDiversity
from unstable.tracking.game_metrics import failure_line, game_samples
from unstable.tracking.run_dir import (
    FAILED_GAMES_MAX_BYTES,
    CappedJsonlWriter,
    JsonlWriter,
    RunDir,
    atomic_write_json,
    shorten,
)
from unstable.tracking.timings import timing_samples
from unstable.tracking.transcripts import TranscriptConfig, TranscriptWriter
from unstable.tracking.wandb_writer import WandbWriter, import_wandb, start_wandb, wandb_plan
from unstable.utils.checks import check_int
from unstable.utils.disk import RunDirUnwritableError, writing

logger = logging.getLogger(__name__)

NAMESPACES = ("collect/", "train/", "eval/", "registry/", "inference/", "buffer/", "learner/", "system/", "league/")
STEP_KEYS = ("train/step", "train/version")  # a log() carrying one of these moves the learner step
UNLOGGED_FAILURES = "system/failed_games_unlogged"  # failed games counted but not written: the log was full


_MODEL_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/")


def check_key(key: str) -> None:
    """Raise ValueError unless ``key`` is ``<namespace>/<name>`` with an allowed namespace, or
    ``<model>/<namespace>/<name>`` (a model's own metrics in a run with several trainable models)."""
    def namespaced(k: str) -> bool:
        return any(k.startswith(p) and len(k) > len(p) for p in NAMESPACES)

    prefix = _MODEL_PREFIX.match(key) if isinstance(key, str) else None
    if not isinstance(key, str) or not (namespaced(key) or (prefix and namespaced(key[prefix.end():]))):
        raise ValueError(f"metric key {key!r} must start with one of {', '.join(NAMESPACES)} (or <model>/ and one "
                         "of them) followed by a name")


def _as_float(key: str, value: Any) -> float:
    check_key(key)
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"metric {key!r} must be a number, got {value!r}") from e


def _finite_or_none(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _mean(values: Any) -> float:
    return sum(values) / len(values)


class Tracker:
    """Records a run's metrics; see the module docstring.

    :param run_name: the run's name (W&B run name; default folder ``./runs/<run_name>``).
    :param wandb_project: W&B project; honoured as given.
    :param run_dir: the run folder, overriding the default; created with its sub-folders.
    :param use_wandb: ``None`` = on if ``wandb`` imports and ``wandb_project`` is set; ``True``
        requires wandb (ImportError with the install command otherwise); ``False`` = off. Without
        an API key W&B logs offline (see :func:`~unstable.tracking.wandb_writer.wandb_plan`); where
        ``wandb.init`` fails, offline or off, said once (:func:`~unstable.tracking.wandb_writer.start_wandb`),
        ``use_wandb=True`` included: a W&B failure never stops a run.
    :param wandb_mode: the W&B mode decided by the caller (``build()`` decides before Ray starts and
        tells the user, so the actor does not depend on the ``WANDB_MODE`` Ray started with);
        ``None``: decided here, the same way.
    :param wandb_id: the W&B run to continue (a resumed run's, from :meth:`state_dict`); ``None``: a new one.
    :param window: moving-window length per key.
    :param flush_every_s: least seconds between two W&B logs (``close()`` always flushes).
    :param config: the run's configuration, written to ``config.json`` and to W&B.
    :param config_file: whether ``config`` is written to ``config.json`` (``build()`` writes a resumed
        run's itself, and only once it has something to train).
    :param transcripts: how game transcripts are kept (default: all games, 50 MB x 5 rotated files).
    :param diversity_window: train games per env in the action-diversity window.
    :param failed_games_max_bytes: size at which ``logs/failed_games.jsonl`` stops growing; the
        first failures are kept and later ones only counted (``system/failed_games_unlogged``).
    """

    def __init__(
        self,
        run_name: str,
        wandb_project: str | None = None,
        run_dir: str | None = None,
        use_wandb: bool | None = None,
        window: int = 512,
        flush_every_s: float = 64.0,
        config: dict[str, Any] | None = None,
        transcripts: TranscriptConfig | None = None,
        diversity_window: int = 512,
        wandb_mode: str | None = None,
        config_file: bool = True,
        failed_games_max_bytes: int = FAILED_GAMES_MAX_BYTES,
        wandb_id: str | None = None,
    ):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if flush_every_s < 0:
            raise ValueError(f"flush_every_s must be >= 0, got {flush_every_s}")
        check_int("failed_games_max_bytes", failed_games_max_bytes, 1)
        self._failed_max_bytes = failed_games_max_bytes
        self.run_name = run_name
        self.window = window
        self.flush_every_s = flush_every_s
        self._dir = RunDir.create(run_name, run_dir)
        self._start = time.time()
        self._learner_step = 0
        self._windows: dict[str, deque[float]] = {}
        self._latest: dict[str, float] = {}
        self._measured_at: dict[str, int] = {}  # key -> the learner step its latest value measured (log_at)
        self._counters: Counter[str] = Counter()
        self._games_per_env: dict[str, Counter[str]] = {"collect": Counter(), "eval": Counter()}
        self._dirty: set[str] = set()
        self._registry: dict[str, Any] | None = None
        self._inference: dict[str, dict[str, float | None]] = {}
        self._buffer: dict[str, float | None] = {}
        self._closed = False
        if config is not None and config_file:
            atomic_write_json(self._dir.config_path, config)
        self._metrics = JsonlWriter(self._dir.metrics_path)
        self._write_error: RunDirUnwritableError | None = None  # see the module docstring
        self._failed: CappedJsonlWriter | None = None
        self._transcripts = TranscriptWriter(self._dir.games, transcripts)
        self._diversity = ActionDiversity(window=diversity_window, min_games=min(10, diversity_window))
        self._wandb = self._start_wandb(wandb_project, use_wandb, config, wandb_mode, wandb_id)
        self._last_flush = time.monotonic()

    def _start_wandb(self, project: str | None, use_wandb: bool | None, config: dict | None,
                     mode: str | None, run_id: str | None) -> WandbWriter | None:
        if mode is None:  # not decided by build(): decide here, and say it (the seed's scripts start a Tracker)
            plan = wandb_plan(project, use_wandb)
            if not plan.enabled:
                logger.info("not logging to W&B; metrics go to %s", self._dir.metrics_path)
                return None
            if plan.notice:
                logger.warning(plan.notice)
            mode = plan.mode
        wandb = import_wandb()
        return start_wandb(wandb, project=project, run_name=self.run_name, run_dir=str(self._dir.root), config=config,
                           mode=mode, run_id=run_id)

    # -- folders ---------------------------------------------------------------------------------
    def get_run_dir(self) -> str:
        """The run directory (the root of the folders below)."""
        return str(self._dir.root)

    def get_log_dir(self) -> str:
        """The run's ``logs/`` folder (``failed_games.jsonl``, scheduler logs)."""
        return str(self._dir.logs)

    def get_checkpoints_dir(self) -> str:
        """The run's ``checkpoints/`` folder, where the learner writes its adapters."""
        return str(self._dir.checkpoints)

    def get_games_dir(self) -> str:
        """The run's ``games/`` folder of game transcripts."""
        return str(self._dir.games)

    def get_registry_dir(self) -> str:
        """The run's ``registry/`` folder of rating snapshots."""
        return str(self._dir.registry)

    # -- recording -------------------------------------------------------------------------------
    def set_learner_step(self, step: int) -> None:
        """Set the learner step that later metrics rows, transcripts and failed-game lines are stamped with."""
        self._learner_step = int(step)

    def get_learner_step(self) -> int:
        """The learner step metrics are stamped with now (see :meth:`log`)."""
        return self._learner_step

    def state_dict(self) -> dict[str, Any]:
        """The learner step, the running counters and the W&B run id (JSON-able), for resuming a run."""
        return {"format": 1, "learner_step": self._learner_step, "counters": dict(self._counters),
                "games_per_env": {stage: dict(c) for stage, c in self._games_per_env.items()},
                "wandb_id": self._wandb.run.id if self._wandb is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the counters of a resumed run (moving windows start empty)."""
        if state.get("format") != 1:
            raise ValueError(f"unknown tracker state format {state.get('format')!r}")
        self._learner_step = int(state["learner_step"])
        self._counters = Counter({k: int(v) for k, v in state["counters"].items()})
        self._games_per_env = {stage: Counter(state["games_per_env"].get(stage, {})) for stage in ("collect", "eval")}
        self._dirty.update(self._counters)

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record namespaced scalars; ``step`` (or a ``train/step``/``train/version`` value) sets the learner
        step (with several models, a ``<model>/train/step`` moves it to the furthest model's)."""
        if self._dropped_after_close("log"):
            return
        values = {key: _as_float(key, value) for key, value in metrics.items()}
        if step is None:
            step = next((int(values[k]) for k in STEP_KEYS if k in values and math.isfinite(values[k])), None)
            # a model's learner in a run with several (``alice/train/step``): the run's step is the furthest
            model_steps = [int(v) for k, v in values.items()
                           if "/" in k and k.split("/", 1)[1] in STEP_KEYS and math.isfinite(v)]
            if step is None and model_steps:
                step = max(self._learner_step, *model_steps)
        if step is not None:
            self.set_learner_step(step)
        self._write({key: self._record(key, value) for key, value in values.items()})

    def log_at(self, metrics: dict[str, float], step: int) -> None:
        """Record namespaced scalars measured at learner step ``step`` (an evaluation of checkpoint
        ``step`` that finished later): the line is stamped ``learner_step=step`` and the run's learner
        step does not move. The dashboard shows each key's step (``measured_at``)."""
        if self._dropped_after_close("log_at"):
            return
        check_int("step", step, 0)
        values = {key: _as_float(key, value) for key, value in metrics.items()}
        line = {key: self._record(key, value) for key, value in values.items()}
        self._measured_at.update(dict.fromkeys(values, int(step)))
        self._write(line, step=int(step))

    def log_game(self, result: GameRecord | FailedGame) -> None:
        """Score a finished game (see :mod:`unstable.tracking.game_metrics`) or count a failed one."""
        if self._dropped_after_close("log_game"):
            return
        stage = "eval" if result.spec.is_eval else ("matrix" if result.spec.is_matrix else "collect")
        self._guarded(self._transcripts.path, lambda: self._transcripts.write(result, self._learner_step))
        if isinstance(result, FailedGame):
            self._log_failed(result, stage)
            return
        if stage == "matrix":  # a PSRO meta-game game: counted, not scored as training (no seat is the learner's)
            keys = ("league/matrix_games", f"league/{result.env_id}/matrix_games")
            self._write({key: self._count(key) for key in keys})
            return
        line: dict[str, float | None] = {}
        samples_by_key = {**game_samples(result), **timing_samples(result), **self._diversity.samples(result)}
        for key, samples in samples_by_key.items():
            for value in samples:
                self._record(key, value)
            line[key] = _mean(samples)
        self._games_per_env[stage][result.env_id] += 1
        counted = (f"{stage}/games", f"{stage}/{result.env_id}/games")
        if any(a.policy.average_of is not None for a in result.spec.agents):  # NFSP: an average policy played
            counted += (f"{stage}/average_policy_games", f"{stage}/{result.env_id}/average_policy_games")
        for key in counted:
            line[key] = self._count(key)
        self._write(line)

    def log_games(self, results: list[GameRecord | FailedGame]) -> None:
        """:meth:`log_game` for each result, in order: one call for a batch of finished games."""
        for result in results:
            self.log_game(result)

    def _log_failed(self, failure: FailedGame, stage: str) -> None:
        # an inference actor that died took the game with it: dropped, not a failure of the game
        key = f"{stage}/games_dropped" if failure.stage == "inference" else f"{stage}/failed_games"
        line = {key: self._count(key)}
        written = False

        def write() -> None:
            nonlocal written
            if self._failed is None:
                self._failed = CappedJsonlWriter(self._dir.failed_games_path, self._failed_max_bytes)
            written = self._failed.write(failure_line(failure, stage, self._learner_step))

        self._guarded(self._dir.failed_games_path, write)
        if written:
            logger.warning("%s", shorten(failure.describe()))
        elif self._failed is not None and self._failed.full:  # the log is full: count, keep the console quiet
            if self._failed.unwritten == 1:
                logger.warning("%s reached its cap of %d bytes: it keeps the first failures; later ones are only "
                               "counted (%s)", self._failed.path, self._failed_max_bytes, UNLOGGED_FAILURES)
            logger.debug("%s", shorten(failure.describe()))
            line[UNLOGGED_FAILURES] = self._count(UNLOGGED_FAILURES)
        else:  # the filesystem refused the write (said once by _guarded)
            logger.debug("%s", shorten(failure.describe()))
        self._write(line)

    def log_inference(self, actor_name: str, stats: dict[str, float]) -> None:
        """Inference-actor stats (queue sizes, tokens/s) as ``inference/<actor>/<key>``."""
        if self._dropped_after_close("log_inference"):
            return
        metrics = {f"inference/{actor_name}/{key}": value for key, value in stats.items()}
        self.log(metrics)
        self._inference[actor_name] = {key: _finite_or_none(value) for key, value in stats.items()}

    def log_registry(self, info: dict[str, Any]) -> None:
        """Keep the registry's latest snapshot for the dashboard; log ``registry/<uid>/mu`` and ``/sigma``.

        ``info`` must be JSON-able, e.g. ``{"ratings": {uid: {"mu": .., "sigma": ..}}, "match_counts": {..}}``.
        """
        if self._dropped_after_close("log_registry"):
            return
        try:
            snapshot = json.loads(json.dumps(info, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise TypeError(f"log_registry needs a JSON-able snapshot (string keys, finite numbers): {e}") from e
        self._registry = snapshot
        metrics = {}
        for uid, rating in snapshot.get("ratings", {}).items():
            for field in ("mu", "sigma"):
                if field in rating:
                    metrics[f"registry/{uid}/{field}"] = rating[field]
        if metrics:
            self.log(metrics)

    def log_buffer(self, stats: dict[str, float]) -> None:
        """Buffer stats as ``buffer/<key>`` (keys may already carry the ``buffer/`` prefix)."""
        if self._dropped_after_close("log_buffer"):
            return
        metrics = {f"buffer/{key.removeprefix('buffer/')}": value for key, value in stats.items()}
        self.log(metrics)
        self._buffer = {key: _finite_or_none(value) for key, value in metrics.items()}

    def _record(self, key: str, value: float) -> float | None:
        """Append a finite value to the key's window; count a non-finite one. Returns what JSONL gets."""
        if not math.isfinite(value):
            self._count(f"system/nonfinite/{key}")
            return None
        if key not in self._windows:
            self._windows[key] = deque(maxlen=self.window)
        self._windows[key].append(value)
        self._latest[key] = value
        self._dirty.add(key)
        return value

    def _count(self, key: str) -> int:
        self._counters[key] += 1
        self._dirty.add(key)
        return self._counters[key]

    def _write(self, metrics: dict[str, Any], step: int | None = None) -> None:
        now = time.time()
        stamp = self._learner_step if step is None else step
        line = {"time": now, "wall_s": now - self._start, "learner_step": stamp, **metrics}
        self._guarded(self._metrics.path, lambda: self._metrics.write(line))
        if self._wandb is not None and time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def _guarded(self, path: Path, write: Callable[[], Any]) -> None:
        """``write()`` to ``path`` unless a write was refused before; keep (and log, once) the first
        refusal instead of raising it (see the module docstring)."""
        if self._write_error is not None:
            return
        try:
            with writing(path, self._dir.root):
                write()
        except RunDirUnwritableError as exc:
            self._write_error = exc
            logger.error("%s. The Tracker writes nothing more; the run stops.", exc)

    def write_error(self) -> RunDirUnwritableError | None:
        """The write the filesystem refused (see the module docstring), or ``None`` while all are fine."""
        return self._write_error

    def _dropped_after_close(self, method: str) -> bool:
        if self._closed:
            logger.warning("Tracker.%s called after close(); dropped (a game or report still in flight?)", method)
        return self._closed

    # -- reading ---------------------------------------------------------------------------------
    def means(self, prefix: str = "") -> dict[str, float]:
        """Moving means of every key starting with ``prefix``."""
        return {key: _mean(w) for key, w in sorted(self._windows.items()) if key.startswith(prefix) and w}

    def latest(self, prefix: str = "") -> dict[str, float]:
        """The last finite value of every key starting with ``prefix``."""
        return {key: v for key, v in sorted(self._latest.items()) if key.startswith(prefix)}

    def counts(self) -> dict[str, int]:
        """Running counters: games and failed games per stage and env, non-finite values per key."""
        return dict(sorted(self._counters.items()))

    def get_interface_info(self) -> dict[str, Any]:
        """Everything the dashboard shows, as plain JSON-able data."""
        grouped: dict[str, dict[str, float]] = defaultdict(dict)
        for key, value in self.means().items():
            grouped[key.split("/", 1)[0]][key] = value
        return {
            "run_name": self.run_name,
            "run_dir": self.get_run_dir(),
            "learner_step": self._learner_step,
            "wall_s": time.time() - self._start,
            "means": dict(grouped),
            "latest": self.latest(),
            "measured_at": dict(sorted(self._measured_at.items())),
            "counts": self.counts(),
            "games_per_env": {stage: dict(c) for stage, c in self._games_per_env.items()},
            "failed_games": {stage: self._counters[f"{stage}/failed_games"] for stage in ("collect", "eval")},
            "registry": self._registry,
            "inference": {actor: dict(stats) for actor, stats in self._inference.items()},
            "buffer": dict(self._buffer),
            "wandb": self._wandb.info() if self._wandb is not None else None,
            "diversity": self._diversity.snapshot(),
        }

    # -- W&B and shutdown ------------------------------------------------------------------------
    def flush(self) -> None:
        """Send the means (and counters) of the keys changed since the last flush to W&B now."""
        self._last_flush = time.monotonic()
        if self._wandb is None or self._wandb.closed or not self._dirty:
            return
        values = {}
        for key in sorted(self._dirty):
            values[key] = float(self._counters[key]) if key in self._counters else _mean(self._windows[key])
        self._dirty.clear()
        if not self._wandb.log(values, self._learner_step):  # said once by the writer; the run goes on
            self._count("system/wandb_log_failures")

    def close(self) -> None:
        """Flush W&B, finish its run and close the files; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._wandb is not None:
                self.flush()
                self._wandb.finish()
        finally:
            self._metrics.close()
            self._transcripts.close()
            if self._failed is not None:
                self._failed.close()
