"""``python -m unstable.ui.terminal_interface [RUN_DIR]`` (or ``unstable dashboard``): watch a run live.

Where the data comes from (``--source auto``):

* **live**: a Ray cluster runs on this machine (or at ``--address``) with a Tracker actor in
  namespace ``"unstable"``: ``"<run_id>/Tracker"`` (started by ``unstable.build``, one per run) or
  ``"Tracker"`` (the seed's scripts). With ``RUN_DIR``, the one writing that run; without, the one
  whose metrics were written last. :meth:`Tracker.get_interface_info` and its run's ``Buffer``
  actor's stats (``"<run_id>/Buffer"``, or ``"Buffer"``);
* **files**: otherwise ``RUN_DIR`` (default: the most recently written run under ``./runs``) is
  read with :class:`~unstable.tracking.run_reader.RunReader`: a run elsewhere, or finished.

A live run that ends (its actors gone) carries on from its files. The screen is redrawn every
``--interval`` seconds (2) and follows the terminal's size; ``--once`` prints one frame and exits.
Machine stats: per GPU utilisation, memory and power via NVML when ``pynvml`` imports, and CPU and
memory (of the machine, and of the Ray worker processes when live) via psutil.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.live import Live

from unstable.tracking.run_dir import CONFIG_FILE, METRICS_FILE
from unstable.tracking.run_reader import SERIES_KEYS, RunReader
from unstable.ui.dashboard import render
from unstable.ui.options import add_dashboard_arguments

NAMESPACE = "unstable"
TRACKER_NAME = "Tracker"
BUFFER_NAME = "Buffer"


class RaySource:
    """Dashboard data from a live run's actors; falls back to the run's files when they are gone."""

    def __init__(self, tracker: Any, buffer: Any, run_dir: str, history: int = 2000, owns_ray: bool = False):
        self.tracker, self.buffer, self.run_dir, self.owns_ray = tracker, buffer, run_dir, owns_ray
        self.fallback: RunReader | None = None
        self._history: dict[str, list] = {"collect_games": [], **{key: [] for key in SERIES_KEYS}}
        self._limit = history
        self._last_step: int | None = None
        self._config: dict | None = None

    def info(self) -> dict[str, Any]:
        """The Tracker's interface info with the Buffer's stats, the step series kept here and the run's config.

        Once an actor cannot be reached, this and every later call read the run's files instead (and a Ray
        connection this source opened is shut down)."""
        import ray

        if self.fallback is not None:
            return self.fallback.info()
        try:
            info = ray.get(self.tracker.get_interface_info.remote(), timeout=10)
            if self.buffer is not None:
                stats = ray.get(self.buffer.stats.remote(), timeout=10)
                info["buffer"] = {**(info.get("buffer") or {}), **{f"buffer/{k}": v for k, v in stats.items()}}
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            self.fallback = RunReader(self.run_dir)
            if self.owns_ray:
                ray.shutdown()  # else Ray ends this process a minute after the cluster is gone
            return self.fallback.info()
        self._remember(info)
        info.update(source="ray", history=self._history, config=self._read_config())
        return info

    def _remember(self, info: dict[str, Any]) -> None:
        self._append("collect_games", [time.time(), float((info.get("counts") or {}).get("collect/games", 0))])
        step = info.get("learner_step")
        if step != self._last_step:
            self._last_step = step
            for key in SERIES_KEYS:
                if key in (info.get("latest") or {}):
                    self._append(key, info["latest"][key])

    def _append(self, key: str, value: Any) -> None:
        series = self._history[key]
        series.append(value)
        del series[: -self._limit]

    def _read_config(self) -> dict:
        if self._config is None:
            path = Path(self.run_dir) / CONFIG_FILE
            self._config = json.loads(path.read_text()) if path.exists() else {}
        return self._config


def _nvml() -> Any | None:
    """The initialised ``pynvml`` module, or ``None`` without it or without an NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    return pynvml


class SystemSampler:
    """GPU (NVML), machine CPU and memory, and the Ray worker processes' CPU and memory (psutil)."""

    def __init__(self, watch_ray_workers: bool = False):
        self.nvml = _nvml()
        self.watch_ray_workers = watch_ray_workers
        self._procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent(None)  # the first call only starts the measurement

    def gpus(self) -> list[dict[str, Any]]:
        """Per NVIDIA GPU: index, name, utilisation (%), memory used and total (GB) and power (W; ``None`` where the
        board does not report it). Needs NVML (``self.nvml`` not ``None``)."""
        nvml, out = self.nvml, []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            except nvml.NVMLError:
                power = None  # not every board reports power
            name = nvml.nvmlDeviceGetName(handle)
            out.append({"index": index, "name": name.decode() if isinstance(name, bytes) else name,
                        "util": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                        "mem_used_gb": mem.used / 1e9, "mem_total_gb": mem.total / 1e9, "power_w": power})
        return out

    def ray_workers(self) -> dict[str, Any]:
        """The number of this machine's ``ray::`` processes, their summed CPU percent (since the previous call) and
        their resident memory (GB)."""
        cpu = rss = 0.0
        alive = {}
        for proc in psutil.process_iter(["name"]):
            if not (proc.info["name"] or "").startswith("ray::"):
                continue
            proc = self._procs.get(proc.pid, proc)
            try:
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            alive[proc.pid] = proc
        self._procs = alive
        return {"count": len(alive), "cpu_percent": cpu, "rss_gb": rss / 1e9}

    def sample(self) -> dict[str, Any]:
        """The machine's CPU percent (since the previous call), cores and memory used and total (GB), with
        ``gpus`` when NVML is there and ``procs`` when watching the Ray workers."""
        memory = psutil.virtual_memory()
        out: dict[str, Any] = {
            "cpu_percent": psutil.cpu_percent(None),
            "cpus": psutil.cpu_count(),
            "mem_used_gb": (memory.total - memory.available) / 1e9,
            "mem_total_gb": memory.total / 1e9,
        }
        if self.nvml is not None:
            out["gpus"] = self.gpus()
        if self.watch_ray_workers:
            out["procs"] = self.ray_workers()
        return out


def latest_run(runs_dir: str | Path = "runs") -> Path | None:
    """The run under ``runs_dir`` whose ``metrics.jsonl`` was written last."""
    runs = [p.parent for p in Path(runs_dir).glob(f"*/{METRICS_FILE}")]
    return max(runs, key=lambda p: (p / METRICS_FILE).stat().st_mtime) if runs else None


def connect_ray(address: str | None, run_dir: Path | None) -> RaySource | None:
    """A :class:`RaySource` for the live run (the one in ``run_dir``, if given), or ``None``."""
    import ray

    started = not ray.is_initialized()  # in a process already on Ray (a notebook, a test), use that connection
    if started:
        try:
            ray.init(address=address or "auto", namespace=NAMESPACE, logging_level=logging.ERROR,
                     log_to_driver=False)
        except ConnectionError:
            return None

    def not_live() -> None:
        if started:
            ray.shutdown()

    live = live_trackers()
    if run_dir is not None:
        live = [t for t in live if Path(t[2]).resolve() == run_dir.resolve()]
    if not live:
        return not_live()
    name, tracker, live_dir = max(live, key=lambda t: _written_at(Path(t[2]) / METRICS_FILE))
    try:
        buffer = ray.get_actor(name[: -len(TRACKER_NAME)] + BUFFER_NAME, namespace=NAMESPACE)
    except ValueError:
        buffer = None
    return RaySource(tracker, buffer, live_dir, owns_ray=started)


def live_trackers() -> list[tuple[str, Any, str]]:
    """``(name, handle, run dir)`` of each live Tracker actor in :data:`NAMESPACE`: ``"Tracker"`` (the
    seed's scripts name it) and ``"<run_id>/Tracker"`` (``unstable.build``, one per run)."""
    import ray

    found = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = actor["name"]
        if actor["namespace"] != NAMESPACE or not (name == TRACKER_NAME or name.endswith(f"/{TRACKER_NAME}")):
            continue
        try:
            tracker = ray.get_actor(name, namespace=NAMESPACE)
            found.append((name, tracker, ray.get(tracker.get_run_dir.remote(), timeout=10)))
        except (ValueError, ray.exceptions.RayError):  # it ended meanwhile
            continue
    return found


def _written_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def open_source(args: argparse.Namespace) -> RaySource | RunReader:
    """Live through Ray if possible (``--source auto``/``ray``), else the run directory's files."""
    run_dir = Path(args.run_dir).expanduser() if args.run_dir else None
    if args.source != "files":
        live = connect_ray(args.address, run_dir)
        if live is not None:
            return live
        if args.source == "ray":
            raise ConnectionError(f"no live run: no Tracker actor in Ray namespace {NAMESPACE!r}"
                                  + (f" writing {run_dir}" if run_dir else ""))
    if run_dir is None:
        run_dir = latest_run(args.runs_dir)
        if run_dir is None:
            raise FileNotFoundError(f"no RUN_DIR given, no live run, and no run under {args.runs_dir}/")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    return RunReader(run_dir)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """``parser`` (a new one when ``None``) with the dashboard's arguments added."""
    parser = parser or argparse.ArgumentParser(prog="python -m unstable.terminal_interface", description=__doc__,
                                               formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_dashboard_arguments(parser)


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    """Open the source and draw until Ctrl-C (or one frame with ``--once``)."""
    if args.interval <= 0:
        raise ValueError(f"--interval must be > 0, got {args.interval}")
    source = open_source(args)
    sampler = SystemSampler(watch_ray_workers=isinstance(source, RaySource))
    console = console or Console()

    def frame() -> Any:
        info = source.info()
        info["system"] = sampler.sample()
        return render(info)

    if args.once:
        console.print(frame())
        return 0
    with Live(frame(), console=console, screen=True, auto_refresh=True, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(args.interval)
                live.update(frame())
        except KeyboardInterrupt:
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m unstable.ui.terminal_interface``: run the dashboard; when there is no run to show, or an
    argument is bad, print one line on stderr and return 2."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (FileNotFoundError, ConnectionError, ValueError) as exc:
        print(f"unstable dashboard: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
