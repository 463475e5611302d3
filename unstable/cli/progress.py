"""Progress of a run started with ``block=False``: a line per learner step, read from the Tracker."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Printer = Callable[[str], None]


def wait_with_progress(run: Any, total: int, say: Printer, every_s: float = 5.0) -> dict[str, Any]:
    """``run.wait()`` in a thread while this one prints a line per learner step from the Tracker;
    returns what ``run.wait()`` returns (its error is raised here)."""
    import threading

    import ray

    outcome: dict[str, Any] = {}

    def wait() -> None:
        try:
            outcome["summary"] = run.wait()
        except BaseException as exc:  # re-raised below, in the caller's thread
            outcome["error"] = exc

    waiter = threading.Thread(target=wait, name="run-wait", daemon=True)
    waiter.start()

    def read_info() -> dict | None:
        try:  # the actors live until run.stop(), so this also reports the last step
            return ray.get(run.actors.tracker.get_interface_info.remote(), timeout=10)
        except ray.exceptions.RayError:
            return None  # an actor died; the waiter has the cause

    report_progress(waiter, read_info, total, say, every_s)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["summary"]


def report_progress(waiter: Any, read_info: Callable[[], dict | None], total: int, say: Printer,
                    every_s: float = 5.0) -> None:
    """Until the ``waiter`` thread ends, a :func:`train_line` every ``every_s`` seconds in which the learner step
    moved; then one more if the last one is out of date (the run waits for its last checkpoint's
    exploitability after its last step: that reading lands after the step's line)."""
    t0 = time.perf_counter()
    printed: tuple[int, dict] | None = None  # the learner step and the readings' checkpoints of the last line
    while True:
        waiter.join(every_s)
        done = not waiter.is_alive()
        info = read_info()
        if info is not None:
            now = (info["learner_step"], dict(info.get("measured_at") or {}))
            if printed is None or now[0] != printed[0] or (done and now != printed):
                say(train_line(info, total, time.perf_counter() - t0))
                printed = now
        if done:
            break


def train_line(info: dict, total: int, elapsed: float) -> str:
    """One progress line from the Tracker's interface ``info``: learner step of ``total``, ``elapsed`` seconds,
    games collected, each model's loss, and the invalid move rate, mean sampled eval win rate and in-run
    exploitability (with the checkpoint it measured) when known."""
    means = {k: v for group in info["means"].values() for k, v in group.items()}
    games = sum(info["games_per_env"].get("collect", {}).values())
    parts = [f"  learner step {info['learner_step']:>3}/{total}", f"{elapsed:5.0f}s", f"{games} games"]
    for key in sorted(k for k in means if k.endswith("train/loss")):  # train/loss, or alice/train/loss ...
        model = key[: -len("train/loss")]
        parts.append(f"{model.replace('/', ' ')}loss {means[key]:+.3f}")
    invalid = next((v for k, v in means.items() if k.startswith("collect/") and k.endswith("invalid_move_rate")), None)
    if invalid is not None:
        parts.append(f"invalid moves {invalid:.1%}")
    win = [v for k, v in means.items() if k.startswith("eval/") and k.endswith("/win_rate")]
    if win:
        parts.append(f"eval win rate (sampled) {sum(win) / len(win):.2f}")
    measured = info.get("measured_at") or {}
    for key, value in sorted((info.get("latest") or {}).items()):  # the in-run exploitability, when there is one
        if key.startswith("eval/") and key.endswith("/exploitability") and key in measured:
            parts.append(f"exploitability {value:.3f} (ckpt-{measured[key]})")
    return ", ".join(parts)
