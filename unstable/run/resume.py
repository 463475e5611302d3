"""Resuming a stopped or killed run from its run directory.

What a run directory keeps for this (all written atomically: temp file or dir, then ``os.replace``):

* ``checkpoints/ckpt-N/`` (with several trainable models, ``checkpoints/<model>/ckpt-N/``): the
  adapter, ``trainer_state.pt`` (optimiser and RNG states, the version) and a ``COMPLETE`` marker,
  written by the learner after each update;
* ``run_state.json``: the registry (every checkpoint, ratings, match counts; the paths of the
  checkpoints relative to the run directory, so a moved or copied one resumes), the scheduler
  (game-id and seed counters, RNG states), the tracker (learner step, counters, W&B run id) and
  the buffers (RAE baselines; the steps held, counted as dropped on resume), written by
  :class:`RunStateWriter` after each checkpoint is registered and when the run ends;
* ``config.json``: ``build()``'s settings plus ``start()``'s, so ``unstable train --resume RUN_DIR``
  needs nothing else.

:func:`find_resume_point` picks the newest complete checkpoint (temp dirs of an interrupted write are removed;
a checkpoint is only registered once it is complete, so the registry never points at a partial one). A
complete checkpoint newer than the state snapshot (killed between the two writes) is registered on resume, and
its update's metrics row, kept in the checkpoint, is written to ``metrics.jsonl`` if the run stopped before
the row got there (:func:`lost_step_rows`). So a kill loses at most the learner step in progress, the games in
flight and the buffer's contents (re-collected with the resumed policy; after a stop they are counted,
:func:`restore_buffers`). A checkpoint without its marker (damaged, half-copied), or with it but without
``trainer_state.pt``, is set aside as ``ckpt-N.incomplete`` and the snapshot's registry is rolled back to the
newest complete checkpoint (:func:`roll_back_registry`); a resume says what it dropped.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstable.learners import checkpoints as ckpt
from unstable.local_models.resolve import read_json
from unstable.registry.model_registry import DEFAULT_LINEAGE
from unstable.tracking.run_dir import CONFIG_FILE, METRICS_FILE, atomic_write_json
from unstable.utils.calls import call
from unstable.utils.disk import writing

log = logging.getLogger(__name__)

RUN_STATE_FILE = "run_state.json"
REGISTRY_FILE = os.path.join("registry", "registry.json")
TRAINER_STATE = "trainer_state.pt"  # the learner's TRAINER_STATE_FILE (not imported: that module imports torch)
STEP_METRICS = "step_metrics.json"  # the learner's STEP_METRICS_FILE: the update's metrics row
_TAIL_BYTES = 4 << 20  # how much of the newest transcripts file is read to find the last game ids


class RunStateWriter:
    """Snapshots the registry, scheduler, tracker and buffers into ``<run_dir>/run_state.json``.

    A plain object holding actor handles (or local objects), so it can be handed to the learner
    as its ``on_checkpoint`` hook and called there after each registered checkpoint. ``buffers``:
    each model's buffer, by model name (their final reward transforms' RAE baselines are saved);
    ``stopped=True`` for the snapshot of a run that stops, whose buffers' contents are then what
    the run leaves behind (a resume counts them as dropped, :func:`restore_buffers`).
    """

    def __init__(self, run_dir: str | os.PathLike, registry: Any, scheduler: Any, tracker: Any,
                 buffers: dict[str, Any] | None = None, stopped: bool = False):
        self.run_dir = str(run_dir)
        self.registry, self.scheduler, self.tracker = registry, scheduler, tracker
        self.buffers, self.stopped = dict(buffers or {}), stopped

    def __call__(self, learner_version: int) -> None:
        registry = portable_registry(call(self.registry, "state_dict"), self.run_dir)
        state = {
            "format": 1,
            "time": time.time(),
            "learner_version": int(learner_version),
            "learner_versions": lineage_versions(registry),
            "registry": registry,
            "scheduler": call(self.scheduler, "state_dict"),
            "tracker": call(self.tracker, "state_dict"),
            "buffers": {name: call(buffer, "state_dict") for name, buffer in self.buffers.items()},
            "stopped": self.stopped,
        }
        for name, data in ((REGISTRY_FILE, state["registry"]), (RUN_STATE_FILE, state)):
            path = os.path.join(self.run_dir, name)
            with writing(path, self.run_dir):  # read-only or full: one clear error (RunDirUnwritableError)
                atomic_write_json(path, data)


def portable_registry(registry_state: dict[str, Any], run_dir: str | os.PathLike) -> dict[str, Any]:
    """A registry snapshot whose learner checkpoint paths inside ``run_dir`` are relative to it, so
    that a run directory moved or copied elsewhere still resumes (:func:`resolve_registry_paths`).
    Other paths (a fixed opponent's adapter, a checkpoint kept elsewhere) stay as they are."""
    root = os.path.abspath(run_dir)
    models = []
    for m in registry_state.get("models", []):
        path = m.get("path_or_name")
        if not m["fixed"] and path and os.path.isabs(path) and os.path.commonpath([root, path]) == root:
            m = {**m, "path_or_name": os.path.relpath(path, root)}
        models.append(m)
    return {**registry_state, "models": models}


def resolve_registry_paths(registry_state: dict[str, Any], run_dir: str | os.PathLike) -> None:
    """Undo :func:`portable_registry` (in place): relative learner checkpoint paths become paths
    under ``run_dir``, wherever the run directory is now."""
    for m in registry_state.get("models", []):
        path = m.get("path_or_name")
        if not m["fixed"] and path and not os.path.isabs(path):
            m["path_or_name"] = os.path.join(str(run_dir), path)


def read_run_files(run_dir: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run's ``config.json`` and registry snapshot (its learner paths under ``run_dir``, wherever it is now),
    as the commands that read its checkpoints take them (``unstable eval --run``, ``unstable league-table``).
    A file that is missing, not JSON, or not of the shape a run writes is a ``ValueError`` naming it."""
    paths = [Path(run_dir) / CONFIG_FILE, Path(run_dir) / REGISTRY_FILE]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"{run_dir} is not a run directory with checkpoints (missing {', '.join(missing)}; the "
                         "registry is written at each checkpoint and when the run stops)")
    config, registry = (read_json(str(p), str(p.parent)) for p in paths)
    models = config.get("models") or [config]
    envs = [config.get(key) or [] for key in ("train_envs", "eval_envs")]
    if not (isinstance(models, list) and all(isinstance(m, dict) and isinstance(m.get("model_name"), str)
                                             for m in models)):
        raise ValueError(f"{paths[0]} is damaged: it names no model_name for each model")
    if not all(isinstance(e, list) and all(isinstance(spec, dict) for spec in e) for e in envs):
        raise ValueError(f"{paths[0]} is damaged: train_envs and eval_envs must be lists of env settings")
    entries = registry.get("models")
    if not (isinstance(entries, list) and all(isinstance(m, dict) for m in entries)):
        raise ValueError(f"{paths[1]} is damaged: 'models' must be a list of registry entries")
    for i, m in enumerate(entries):
        fields = {"uid": isinstance(m.get("uid"), str), "fixed": isinstance(m.get("fixed"), bool),
                  "iteration": m.get("fixed") is True or type(m.get("iteration")) is int,
                  "path_or_name": isinstance(m.get("path_or_name"), str | None),
                  **{k: k not in m or type(m[k]) in (int, float) for k in ("mu", "sigma")}}  # a rating, if rated
        bad = [name for name, ok in fields.items() if not ok]
        if bad:
            raise ValueError(f"{paths[1]} is damaged: its entry models[{i}] has no valid {', '.join(bad)}")
    resolve_registry_paths(registry, run_dir)
    return config, registry


def lineage_versions(registry_state: dict[str, Any]) -> dict[str, int]:
    """Each lineage's current learner version in a registry snapshot (``ModelRegistry.state_dict()``)."""
    current = registry_state.get("current") or {}
    uids = set(current.values()) if isinstance(current, dict) else {current}
    return {m.get("lineage") or "model": int(m["iteration"]) for m in registry_state.get("models", [])
            if m["uid"] in uids and m.get("iteration") is not None}


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run (or, with several trainable models, one model of it) starts: the newest
    complete checkpoint and the state snapshot."""

    run_dir: Path
    version: int  # 0: no checkpoint yet (start from the base weights)
    checkpoint: Path | None
    state: dict[str, Any] | None  # run_state.json (scheduler counters already moved past the last games)
    lineage: str | None = None  # the model, in a run with several (its checkpoints: checkpoints/<lineage>/)

    @property
    def checkpoints_dir(self) -> Path:
        """The checkpoints' directory: ``checkpoints/``, or ``checkpoints/<lineage>/`` for one model of several."""
        root = self.run_dir / "checkpoints"
        return root / self.lineage if self.lineage else root

    @property
    def complete_checkpoints(self) -> dict[int, Path]:
        """Complete checkpoints up to :attr:`version`, by version."""
        found = ckpt.list_checkpoints(self.checkpoints_dir, complete_only=True)
        return {v: p for v, p in sorted(found.items()) if v <= self.version}


def find_resume_point(run_dir: str | os.PathLike, lineage: str | None = None) -> ResumePoint:
    """Inspect ``run_dir`` and say where a resumed run (or its model ``lineage``, in a run with
    several) starts; raises ``ValueError`` if it cannot."""
    root = Path(run_dir).expanduser().resolve()
    if not (root / "checkpoints").is_dir():
        raise ValueError(f"{root} is not a run directory (it has no checkpoints/ folder)")
    ckpt_dir = root / "checkpoints" / lineage if lineage else root / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)  # a model that had not checkpointed yet starts from its base weights
    removed = ckpt.clean_partial(ckpt_dir)
    if removed:
        log.warning("resume: removed %d unfinished checkpoint write(s) in %s: %s", len(removed), ckpt_dir, removed)
    damaged = []  # (version, what is wrong, where it was set aside)
    while (latest := ckpt.latest_complete(ckpt_dir)) is not None and not (latest[1] / TRAINER_STATE).is_file():
        damaged.append((latest[0], f"has no {TRAINER_STATE} (its optimiser state)", _set_aside(ckpt_dir, latest[0])))
    version, path = latest if latest is not None else (0, None)
    for v in sorted(v for v in ckpt.list_checkpoints(ckpt_dir) if v > version):
        damaged.append((v, f"has no {ckpt.COMPLETE_MARKER} marker", _set_aside(ckpt_dir, v)))
    for v, what, aside in sorted(damaged):
        _say(f"resume: {ckpt_dir / f'ckpt-{v}'} {what} (damaged or half-copied); set it aside as {aside} and "
             f"resuming from {f'ckpt-{version}' if version else 'the base weights'}")
    state = None
    state_path = root / RUN_STATE_FILE
    if state_path.is_file():
        state = json.loads(state_path.read_text(encoding="utf-8"))
        if state.get("format") != 1:
            raise ValueError(f"{state_path}: unknown run state format {state.get('format')!r}")
        resolve_registry_paths(state["registry"], root)  # where the run directory is now
        saved = state["learner_version"] if lineage is None else \
            state.get("learner_versions", lineage_versions(state["registry"])).get(lineage, 0)
        if saved > version:  # its newer checkpoints are gone or damaged: the registry goes back to ckpt-{version}
            dropped = roll_back_registry(state["registry"], lineage or DEFAULT_LINEAGE, version)
            if lineage is None:
                state["learner_version"] = version
            state.setdefault("learner_versions", {})[lineage or DEFAULT_LINEAGE] = version
            _say(f"resume: {RUN_STATE_FILE} is from learner version {saved}{f' of {lineage}' if lineage else ''} but "
                 f"the newest complete checkpoint is ckpt-{version}; rolled the registry back to it, dropping "
                 f"{', '.join(dropped) or 'nothing'} (ratings of the others keep the games played against them)")
        _skip_issued_games(state["scheduler"], root)
    return ResumePoint(root, version, path, state, lineage)


def lost_step_rows(points: list[ResumePoint]) -> list[tuple[dict[str, float], int]]:
    """The metrics row of each model's resume checkpoint that the run's ``metrics.jsonl`` lacks (the run stopped
    after the checkpoint was written and before its row reached the tracker), named as the learner logs it, with
    its learner step."""
    points = [p for p in points if p.checkpoint is not None and (p.checkpoint / STEP_METRICS).is_file()]
    if not points:
        return []
    logged = set()  # (model prefix, version) of every update row written
    metrics = points[0].run_dir / METRICS_FILE
    if metrics.is_file():
        with metrics.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by the stop
                    continue
                logged.update((k[: -len("train/version")], int(v)) for k, v in row.items()
                              if k.endswith("train/version") and isinstance(v, int | float))
    out = []
    for point in points:
        prefix = f"{point.lineage}/" if point.lineage else ""
        if (prefix, point.version) not in logged:
            row = json.loads((point.checkpoint / STEP_METRICS).read_text(encoding="utf-8"))
            out.append(({prefix + k: v for k, v in row.items()}, point.version))
    return out


def _set_aside(ckpt_dir: Path, version: int) -> str:
    """Rename a damaged ``ckpt-N`` to ``ckpt-N.incomplete`` (never deleted; no longer a checkpoint to
    resume from or to register); returns the new name."""
    aside = ckpt_dir / f"ckpt-{version}.incomplete"
    if aside.exists():
        aside = ckpt_dir / f"ckpt-{version}.incomplete-{int(time.time())}"
    (ckpt_dir / f"ckpt-{version}").rename(aside)
    return aside.name


def roll_back_registry(registry_state: dict[str, Any], lineage: str, version: int) -> list[str]:
    """Drop ``lineage``'s checkpoints newer than ``version`` from a registry snapshot (in place, with
    their match counts) and make its newest remaining one current; returns the dropped uids. Reads
    both snapshot formats (before lineages, every learner checkpoint is of :data:`DEFAULT_LINEAGE`)."""
    def mine(m: dict[str, Any]) -> bool:
        return not m["fixed"] and (m.get("lineage") or DEFAULT_LINEAGE) == lineage

    dropped = [m["uid"] for m in registry_state["models"] if mine(m) and m["iteration"] > version]
    registry_state["models"] = [m for m in registry_state["models"] if m["uid"] not in dropped]
    for table in ("matches", "results"):
        rows = registry_state.get(table) or {}
        registry_state[table] = {a: {b: v for b, v in row.items() if b not in dropped}
                                 for a, row in rows.items() if a not in dropped}
    keep = max((m for m in registry_state["models"] if mine(m)), key=lambda m: m["iteration"], default=None)
    current = registry_state.get("current")
    if isinstance(current, dict):
        if keep is not None:
            current[lineage] = keep["uid"]
        else:
            current.pop(lineage, None)
    elif dropped:
        registry_state["current"] = keep["uid"] if keep is not None else None
    return dropped


def restore_buffers(state: dict[str, Any] | None, buffers: dict[str, Any]) -> int | None:
    """Give each model's buffer (by model name) its saved state: the RAE baselines of its final reward
    transform. The Steps the previous run left in its buffers are not restored (they come from older
    policy versions; the resumed policy collects afresh): says how many, and returns that number, or
    ``None`` when it is not known (the run was killed, or its snapshot is older than this count)."""
    saved = (state or {}).get("buffers") or {}
    for name, buffer in buffers.items():
        if name not in saved:
            continue
        try:
            call(buffer, "load_state_dict", saved[name])
        except ValueError as exc:  # the run was resumed with other reward transforms
            _say(f"resume: the final reward transform of {name}'s buffer differs from the previous run's ({exc}); "
                 "its role baselines start afresh")
    if not saved:
        return None
    if not state.get("stopped"):
        _say("resume: the previous run stopped without saving its state (killed), so the steps in its buffer "
             "then were lost (not counted)")
        return None
    dropped = sum(int(b.get("steps", 0)) for b in saved.values())
    _say(f"resume: {dropped} buffered steps from the previous run were not restored (they came from older "
         "policy versions; the resumed policy collects afresh)")
    return dropped


def _say(message: str) -> None:
    """What a resume changed, where the user sees it (stdout, once) and in the logs (at INFO: a
    warning would print it a second time, on stderr, where logging is not configured)."""
    log.info(message)
    print(f"unstable: {message}", flush=True)


def resumed_versions(run_dir: str | os.PathLike) -> dict[str, int]:
    """Each model's learner version a resume of ``run_dir`` would start at (its newest complete
    checkpoint with its optimiser state; 0: none), by model name, read from the run directory without
    changing it (no Ray, nothing set aside): what :func:`find_resume_point` would pick, for deciding
    before anything starts whether there is anything left to train."""
    root = Path(run_dir).expanduser().resolve()
    path = root / CONFIG_FILE
    saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    models = saved.get("models") if isinstance(saved.get("models"), list) else []
    names = [m.get("name", "model") for m in models if isinstance(m, dict)] or ["model"]
    out = {}
    for name in names:
        found = ckpt.list_checkpoints(root / "checkpoints" / name if len(names) > 1 else root / "checkpoints",
                                      complete_only=True)
        out[name] = max((v for v, p in found.items() if (p / TRAINER_STATE).is_file()), default=0)
    return out


def nothing_to_train(run_dir: str | os.PathLike, learning_steps: int) -> str | None:
    """The message saying that a resume of ``run_dir`` to ``learning_steps`` has nothing to train
    (every model's learner is already there), or ``None`` when some learner has steps left."""
    versions = resumed_versions(run_dir)
    if any(v < learning_steps for v in versions.values()):
        return None
    at = ", ".join(f"{n} at step {v}" for n, v in versions.items()) if len(versions) > 1 else \
        f"the learner is already at step {next(iter(versions.values()))}"
    return f"{at} >= learning_steps ({learning_steps}); nothing to train (raise learning_steps to train on)"


def _skip_issued_games(scheduler_state: dict[str, Any], run_dir: Path) -> None:
    """Move the scheduler's game-id and seed counters past the games logged after the snapshot
    (the transcripts hold every finished or failed game), so no id or seed is issued twice."""
    from unstable.collection.scheduler import EVAL_SEED_OFFSET

    path = run_dir / "games" / "transcripts.jsonl"
    if not path.is_file():
        return
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - _TAIL_BYTES))
        lines = f.read().split(b"\n")[1:-1]  # the first may be cut by the seek, the last by a kill
    for raw in lines:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        game_id, seed = line.get("game_id"), line.get("seed")
        if isinstance(game_id, int):
            scheduler_state["next_game_id"] = max(scheduler_state["next_game_id"], game_id + 1)
        if isinstance(seed, int) and line.get("is_eval"):
            scheduler_state["eval_idx"] = max(scheduler_state["eval_idx"], seed - EVAL_SEED_OFFSET + 1)
        elif isinstance(seed, int):
            scheduler_state["train_idx"] = max(scheduler_state["train_idx"], seed + 1)


def load_run_config(run_dir: str | os.PathLike, overrides: list[str] | None = None,
                    reward_transforms: bool = False) -> tuple[dict, dict]:
    """``(build kwargs, start kwargs)`` from ``<run_dir>/config.json`` with ``key=value`` overrides,
    checked like any config file (:func:`unstable.run.config_file.load_config`; JSON is YAML).
    ``reward_transforms``: the caller gives the run's custom reward transforms again (``build(resume_from=...,
    reward_transforms=...)``), so the names saved for them are left out; otherwise such a run is refused."""
    from unstable.run.config_file import load_config

    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"{path} does not exist: is {run_dir} a run directory?")
    saved = json.loads(path.read_text(encoding="utf-8"))
    models = saved.get("models") if isinstance(saved.get("models"), list) else []
    buffers = [m.get("buffer") or {} for m in models if isinstance(m, dict)]  # nested; flat: the top level
    custom = [b for b in [saved, *buffers] if isinstance(b, dict) and b.get("reward_transforms") is not None]
    if custom and not reward_transforms:
        raise ValueError(f"{path}: the run used custom reward_transforms, which a config file cannot hold; "
                         "resume it from Python: unstable.build(resume_from=..., reward_transforms=...)")
    build, start = load_config(str(path), overrides)
    build.pop("resume_from", None)
    if custom:  # only their names were saved: the caller's objects take their place
        build.pop("reward_transforms", None)
        for model in build.get("models") or []:
            if isinstance(model, dict) and isinstance(model.get("buffer"), dict):
                model["buffer"].pop("reward_transforms", None)
    return build, start


def record_start_settings(run_dir: str | os.PathLike, settings: dict[str, Any],
                          config: dict[str, Any] | None = None) -> None:
    """Add ``start()``'s settings to ``config.json``, which then holds everything a resume needs.
    ``config``: build()'s settings to write under them (a resumed run's, which the Tracker does not
    write, so that a resume with nothing to train leaves the file as it was); ``None``: the file's."""
    path = Path(run_dir) / CONFIG_FILE
    if config is None:
        config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    atomic_write_json(path, {**config, **settings})
