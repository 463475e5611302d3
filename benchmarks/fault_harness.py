"""The fault table's tools (``bench_faults.py``): driver processes, the processes they start, the
checkpoints they leave, a misbehaving API server and a folder that refuses writes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import psutil

ROOT = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).resolve().parent / "fault_driver.py"
ORPHAN_WAIT_S = 90.0  # how long a killed driver's Ray processes get to go away by themselves (its agents: ~60 s)

T = TypeVar("T")


def wait_for(fn: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """``fn()``'s first truthy value; ``TimeoutError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(interval)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Driver:
    """A ``fault_driver.py`` process running one job, in a session of its own, with its own Ray
    folder; it remembers every process it started so that none outlives the fault."""

    def __init__(self, folder: Path, job: dict[str, Any], env: dict[str, str] | None = None):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.env = folder, env or {}
        self.job = {**job, "progress": str(folder / "progress.jsonl"), "result": str(folder / "result.json")}
        self.proc: subprocess.Popen | None = None
        self.ray_tmp: str | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.titles: dict[int, str] = {}  # pid -> what ps shows, taken while the process lived

    def start(self) -> None:
        (self.folder / "job.json").write_text(json.dumps(self.job))
        self.ray_tmp = tempfile.mkdtemp(prefix="ray-ft-", dir="/tmp")  # short: Ray's socket paths have a limit
        env = {**os.environ, "RAY_TMPDIR": self.ray_tmp, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline",
               "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
               **self.env}
        env.pop("RAY_ADDRESS", None)
        with open(self.folder / "driver.log", "w") as log:
            self.proc = subprocess.Popen([sys.executable, str(DRIVER), str(self.folder / "job.json")], cwd=ROOT,
                                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    # ----------------------------------------------------------------- what it says
    def run_dir(self) -> str | None:
        """The run's directory, once it exists."""
        build = self.job["build"]
        path = build.get("resume_from") or os.path.join(build["runs_dir"], build["run_name"])
        return path if os.path.isdir(os.path.join(path, "checkpoints")) else None

    def samples(self) -> list[dict[str, Any]]:
        """The run's counters so far, every half second: ``{"time", "collector", "buffer"}``."""
        try:
            lines = Path(self.job["progress"]).read_text().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # the last line, half written
                continue
        return out

    def progress(self) -> dict[str, Any] | None:
        """The newest sample of :meth:`samples`."""
        samples = self.samples()
        return samples[-1] if samples else None

    def result(self) -> dict[str, Any] | None:
        return _read_json(Path(self.job["result"]))

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise TimeoutError(f"{self.folder.name} did not end within {timeout:.0f} s: {self.log_tail()}") from None

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return (self.folder / "driver.log").read_text()[-chars:]
        except OSError:
            return ""

    # ----------------------------------------------------------------- its processes
    def processes(self) -> list[psutil.Process]:
        """The driver and every process under it now (Ray's), remembered for :meth:`kill_all`."""
        try:
            me = psutil.Process(self.proc.pid)
            found = [me, *me.children(recursive=True)]
        except psutil.NoSuchProcess:
            found = []
        for p in found:
            self.seen.setdefault(p.pid, p)
            self.titles.setdefault(p.pid, _title(p))
        return found

    def kill_driver(self) -> Callable[[], dict[str, float]]:
        """``kill -9`` of the driver alone, as a user or the OOM killer would. Returns a function
        that waits until :data:`ORPHAN_WAIT_S` after the kill and says how long each process the
        driver had started (Ray's) lived on after it, by name (the longest of each name); those
        alive then are killed and count as :data:`ORPHAN_WAIT_S`."""
        self.processes()
        killed_at = time.monotonic()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        rest = [p for p in self.seen.values() if p.pid != self.proc.pid and self.titles.get(p.pid) != "?"]
        names = self.titles
        lived: dict[int, float] = {}

        def watch() -> None:
            while len(lived) < len(rest) and time.monotonic() - killed_at < ORPHAN_WAIT_S:
                for p in rest:
                    if p.pid not in lived and not _alive(p):
                        lived[p.pid] = time.monotonic() - killed_at
                time.sleep(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        def report() -> dict[str, float]:
            watcher.join()
            out: dict[str, float] = {}
            for p in rest:
                if p.pid not in lived:
                    lived[p.pid] = ORPHAN_WAIT_S
                    with suppress(psutil.Error):
                        p.kill()
                name = names[p.pid]
                out[name] = max(out.get(name, 0.0), round(lived[p.pid], 1))
            return out

        return report

    def kill_all(self) -> None:
        """Kill whatever this driver started that is still running, and remove its Ray folder."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.processes()
        for p in self.seen.values():
            try:
                if p.is_running():
                    p.kill()
            except psutil.NoSuchProcess:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.ray_tmp:
            shutil.rmtree(self.ray_tmp, ignore_errors=True)


def _title(p: psutil.Process) -> str:
    """A process's name as ``ps`` shows it (Ray's workers: ``ray::<Class>``, with the method cut off)."""
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return "?"
    if not cmd:
        return p.name()
    if cmd[0].startswith("ray::"):
        return cmd[0].split()[0].split(".")[0]
    first = os.path.basename(cmd[0])
    script = next((a for a in cmd[1:] if not a.startswith("-")), None)
    return os.path.basename(script) if first.startswith("python") and script else first


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def actor_pid(d: Driver, name: str) -> int | None:
    """The pid of the driver's Ray worker running the actor class whose name contains ``name``."""
    for p in d.processes():
        title = _title(p)
        if title.startswith("ray::") and name in title:
            return p.pid
    return None


# ---------------------------------------------------------------------------------- checkpoints
def complete_versions(ckpts: Path) -> dict[int, float]:
    """Complete checkpoints by version, with the time each was finished (its marker's mtime)."""
    from unstable.learners.checkpoints import COMPLETE_MARKER, list_checkpoints

    out = {}
    for version, path in list_checkpoints(ckpts, complete_only=True).items():
        try:
            out[version] = (path / COMPLETE_MARKER).stat().st_mtime
        except OSError:
            continue
    return out


def checkpoint_after(ckpts: Path, t: float) -> float | None:
    """When the first checkpoint finished after time ``t`` was finished (``None``: none was)."""
    times = [m for m in complete_versions(ckpts).values() if m > t]
    return min(times, default=None)


def check_checkpoints(ckpts: Path, steps: int) -> tuple[bool, str]:
    """Whether ``ckpt-1`` ... ``ckpt-<steps>`` are all there and load (marker, adapter config and
    weights, ``trainer_state.pt`` naming its version); and what was found."""
    import torch
    from safetensors.torch import load_file

    from unstable.learners.checkpoints import list_checkpoints

    found = list_checkpoints(ckpts)
    problems = [f"ckpt-{v} missing" for v in range(1, steps + 1) if v not in found]
    for version, path in sorted(found.items()):
        try:
            if not (path / "COMPLETE").is_file():
                raise ValueError("no COMPLETE marker")
            json.loads((path / "adapter_config.json").read_text())
            if not load_file(str(path / "adapter_model.safetensors")):
                raise ValueError("no adapter weights")
            state = torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False)
            if state.get("version") != version:
                raise ValueError(f"trainer_state.pt says version {state.get('version')}")
        except Exception as exc:  # any way it fails to load is the answer
            problems.append(f"ckpt-{version}: {type(exc).__name__}: {exc}"[:200])
    aside = sorted(p.name for p in ckpts.iterdir() if ".incomplete" in p.name) if ckpts.is_dir() else []
    span = f"ckpt-1..{max(found)}" if found else "none"
    return not problems, "; ".join(problems) or span + (f" (set aside: {', '.join(aside)})" if aside else "")


# ---------------------------------------------------------------------------------- the run's counters
def lost(collector: dict[str, int], buffer: dict[str, int]) -> tuple[int, int, int]:
    """(games failed or dropped, trajectories sent and not received, trajectories received twice)."""
    return (collector["failed"] + collector["dropped"],
            collector["trajectories_sent"] - buffer["trajectories_received"], buffer["duplicates"])


# ---------------------------------------------------------------------------------- an API that fails
class FakeAPI:
    """An OpenAI-compatible chat server on localhost whose ``phase`` the harness sets: ``"ok"``
    (a legal-looking move), ``"500"`` (an internal server error) or ``"hang"`` (reads the request
    and never answers). ``counts`` counts the calls per phase; :meth:`env` points API opponents here."""

    def __init__(self) -> None:
        self.phase = "ok"
        self.counts: dict[str, int] = {}
        self.release = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                phase = api.phase
                api.counts[phase] = api.counts.get(phase, 0) + 1
                if phase == "hang":
                    api.release.wait()
                    return
                status, reply = (500, {"error": {"message": "internal error", "type": "server_error"}}) \
                    if phase == "500" else (200, {
                        "id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "\\boxed{4}"}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def env(self) -> dict[str, str]:
        return {"OPENROUTER_API_KEY": "fault-table-not-a-key",
                "UNSTABLE_API_BASE_URL": f"http://127.0.0.1:{self.server.server_address[1]}/v1"}

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------------------- a folder that refuses writes
@contextmanager
def refusing_writes(folder: Path) -> Iterator[str]:
    """``folder`` takes no new entries inside the block; yields how. Root ignores file modes, so as
    root the folder is made immutable (``chattr +i``, as a read-only mount behaves); otherwise
    ``chmod 555``. Raises ``RuntimeError`` where neither stops a write."""
    if os.geteuid() == 0:
        how, undo = "chattr +i", ["chattr", "-i", str(folder)]
        done = shutil.which("chattr") and not subprocess.run(["chattr", "+i", str(folder)],
                                                             capture_output=True).returncode
        if not done:
            raise RuntimeError(f"cannot make {folder} refuse writes: root, and chattr +i failed")
    else:
        how, undo = "chmod 555", ["chmod", oct(folder.stat().st_mode & 0o7777)[2:], str(folder)]
        folder.chmod(0o555)
    try:
        try:
            os.rmdir(tempfile.mkdtemp(dir=folder))
        except PermissionError:
            pass
        else:
            raise RuntimeError(f"{folder} still takes writes after {how}")
        yield how
    finally:
        subprocess.run(undo, check=True)
