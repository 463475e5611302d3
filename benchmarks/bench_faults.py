"""The fault table: each fault injected into a tiny real run, and what the run did about it.

Every run is the tiny 1M model learning TicTacToe (mirror self-play, 16-step batches, LoRA rank 4,
the transformers backend) in a process of its own (``fault_driver.py``), with its own local Ray
started by ``build()`` as a user's script would. Each fault is injected once learner step 1 is
saved (``ckpt-1`` complete):

* ``driver kill -9``: the driver process gets SIGKILL; then a new process resumes the run
  (``build(resume_from=...)``, what ``unstable train --resume`` does);
* ``inference actor kill -9``: SIGKILL to the ``ray::InferenceActor`` process; that run takes at least
  three steps after the kill, more than its buffer holds, so it needs the restarted actor;
* ``learner kill -9``: SIGKILL to the learner's process; the run stops, then is resumed;
* ``node lost (2-node cluster)``: a two-node local cluster (one inference actor per node), the
  worker node removed;
* ``API opponent 500s, then hangs``: a third of the train games are against an API opponent (a
  local OpenAI-compatible server, ``api_timeout_s=1``, ``api_max_retries=1``) that answers 500
  during learner step 2, never answers during step 3, and is healthy again after;
* ``checkpoints dir unwritable``: the checkpoints folder stops taking writes (``chattr +i`` as root,
  whom file modes do not stop, else ``chmod 555``); the run should stop, keep its checkpoints,
  and resume once the folder takes writes again;
* ``same run name twice at once``: two drivers started together with one ``run_name``.

Columns: *survived* (the run finished its learner steps, after a resume where the fault stops it;
for the same name twice: one run finished and the other was refused before Ray started), *games
lost* (failed + dropped, and for a killed driver the games in flight at the kill), *trajectories
lost / duplicated* (sent by the collector and never received by the buffer / received twice),
*checkpoints intact* (every ``ckpt-N`` from 1 to the last has its ``COMPLETE`` marker and its
adapter config, weights and ``trainer_state.pt`` load, with that version), *recover (s)* (from the
injection until the next learner step is saved, in the same run or the resumed one; for the inference
actor, not before the collector has it answering again).

    .venv/bin/python benchmarks/bench_faults.py               # every fault, 4 learner steps each
    .venv/bin/python benchmarks/bench_faults.py --quick       # CI's short version (tests/test_fault_table.py)
    .venv/bin/python benchmarks/bench_faults.py --only learner-kill,disk
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import add_common_args, machine, markdown_table, quiet_libraries, write_result
from fault_harness import (
    ORPHAN_WAIT_S,
    Driver,
    FakeAPI,
    actor_pid,
    check_checkpoints,
    checkpoint_after,
    complete_versions,
    lost,
    refusing_writes,
    wait_for,
)

quiet_libraries()

TTT = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}
INJECT_AFTER = 1  # each fault is injected once this many learner steps are saved


def run_settings(model: str, runs_dir: Path, run_name: str, **overrides: Any) -> dict[str, Any]:
    """build() settings of a tiny run (tests/conftest.py's small run)."""
    return {"model_name": model, "train_envs": [dict(TTT, num_actors=2)],
            "eval_envs": [dict(TTT, fixed_opponent="random")], "opponent_sampling_strategy": "mirror",
            "batch_size": 16, "mini_batch_size": 8, "learning_rate": 1e-3, "max_generation_len": 16,
            "lora_config": {"lora_rank": 4, "lora_alpha": 8}, "activation_checkpointing": False,
            "gradient_checkpointing": False, "wandb_project": None, "runs_dir": str(runs_dir),
            "run_name": run_name, "inference_backend": "transformers", **overrides}


class Bench:
    """What every fault needs: the model, a scratch folder, the step count and a time limit."""

    def __init__(self, model: str, work: Path, steps: int, timeout_s: float):
        self.model, self.work, self.steps, self.timeout_s = model, work, steps, timeout_s
        self.drivers: list[Driver] = []

    def driver(self, name: str, env: dict[str, str] | None = None, start: bool = True, **job: Any) -> Driver:
        """A fault_driver.py process (started unless ``start=False``) for ``job``."""
        job = {"learning_steps": self.steps, "workers": 8, "eval_workers": 2, **job}
        d = Driver(self.work / name, job, env=env)
        self.drivers.append(d)
        if start:
            d.start()
        return d

    def new_run(self, name: str, run_name: str | None = None, env: dict[str, str] | None = None,
                start: bool = True, job: dict[str, Any] | None = None, **overrides: Any) -> Driver:
        """A new run named ``run_name`` (default ``name``) with these build() settings."""
        build = run_settings(self.model, self.work / "runs", run_name or name, **overrides)
        return self.driver(name, env=env, start=start, build=build, **(job or {}))

    def resume(self, name: str, run_dir: str) -> Driver:
        return self.driver(name, build={"resume_from": run_dir})

    def until_step(self, d: Driver, step: int = INJECT_AFTER) -> Path:
        """The run's checkpoints folder, once ``step`` learner steps are saved (raises if the run ended)."""
        wait_for(lambda: d.run_dir() is not None or d.poll() is not None, self.timeout_s, "the run directory")
        if d.run_dir() is None and RAY_START_TIMEOUT in d.log_tail():
            # Ray's own start-up timed out (a loaded machine), before the run began: start it again, once,
            # as a user would; the fault is injected into the run, not into Ray's start
            print(f"[faults] {d.folder.name}: Ray did not start ({RAY_START_TIMEOUT}); starting it again", flush=True)
            d.kill_all()
            for leftover in ("progress.jsonl", "result.json"):
                (d.folder / leftover).unlink(missing_ok=True)
            d.start()
            wait_for(lambda: d.run_dir() is not None or d.poll() is not None, self.timeout_s, "the run directory")
        if d.run_dir() is None:
            raise RuntimeError(f"the run ended before it started: {d.log_tail()}")
        ckpts = Path(d.run_dir()) / "checkpoints"
        wait_for(lambda: len(complete_versions(ckpts)) >= step or d.poll() is not None, self.timeout_s,
                 f"ckpt-{step}")
        if len(complete_versions(ckpts)) < step:
            raise RuntimeError(f"the run ended before ckpt-{step}: {d.log_tail()}")
        return ckpts

    def finish(self, d: Driver) -> dict[str, Any]:
        """The driver's result once it has ended, with its exit code (``exit``)."""
        d.wait(self.timeout_s)
        return {**(d.result() or {}), "exit": d.poll()}

    def close(self) -> None:
        for d in self.drivers:
            d.kill_all()


RAY_START_TIMEOUT = "Deadline Exceeded"  # what Ray says when its node does not come up in time


def finished(result: dict[str, Any], steps: int) -> bool:
    s = result.get("summary") or {}
    return not result.get("error") and bool(s.get("checkpoints")) and s["checkpoints"][-1] == f"ckpt-{steps}"


def books(*results: dict[str, Any]) -> tuple[int, int, int, list[str]]:
    """(games lost, trajectories lost, duplicated) over the runs' summaries, and any book that does
    not balance (a game started and never ended as finished / failed / dropped / cancelled)."""
    games = sent_lost = dup = 0
    unbalanced = []
    for r in results:
        s = r.get("summary")
        if not s:
            continue
        g, t, d = lost(s["collector"], s["buffer"])
        games, sent_lost, dup = games + g, sent_lost + t, dup + d
        c = s["collector"]
        ended = sum(c[k] for k in ("train_finished", "eval_finished", "failed", "dropped", "cancelled"))
        if c["train_started"] + c["eval_started"] != ended:
            unbalanced.append(f"{c['train_started'] + c['eval_started']} games started, {ended} ended")
    return games, sent_lost, dup, unbalanced


def row(fault: str, survived: bool, outcome: str, games: int | None, traj: int | None, dup: int | None,
        ckpts: Path | None, steps: int, recover: float | None, t0: float, unbalanced: list[str] = (),
        ended: float | None = None) -> dict[str, Any]:
    """One row of the table (a run whose books do not balance did not survive, whatever else it did);
    its wall time runs from ``t0`` to ``ended`` (default: now)."""
    intact, which = check_checkpoints(ckpts, steps) if ckpts is not None else (None, "-")
    if unbalanced:
        survived, outcome = False, f"{outcome}; the books do not balance: {', '.join(unbalanced)}"
    return {"fault": fault, "survived": survived, "games lost": games, "trajectories lost": traj,
            "duplicated": dup, "checkpoints intact": intact, "checkpoints": which,
            "recover (s)": None if recover is None else round(recover, 1),
            "wall (s)": round((ended or time.time()) - t0, 1), "what happened": outcome}


# ---------------------------------------------------------------------------------- the faults
def driver_kill(b: Bench) -> dict[str, Any]:
    t0 = time.time()
    d = b.new_run("driver-kill")
    ckpts = b.until_step(d)
    at_kill = d.progress() or {}
    version = max(complete_versions(ckpts))
    killed_at = time.time()
    lived = d.kill_driver()  # the resume starts at once, as a user's would; Ray's leftovers are counted after
    c, buf = at_kill.get("collector", {}), at_kill.get("buffer", {})
    in_flight = c.get("train_started", 0) + c.get("eval_started", 0) - sum(
        c.get(k, 0) for k in ("train_finished", "eval_finished", "failed", "dropped", "cancelled"))
    r = b.finish(b.resume("driver-kill-resume", d.run_dir()))
    ended = time.time()
    lived = lived()
    games, traj, dup, unbalanced = books(r)
    ok = finished(r, b.steps)
    start = r.get("start_version")
    after_kill = sorted(v for v, m in complete_versions(ckpts).items() if m > killed_at and start and v <= start)
    outcome = (f"killed after ckpt-{version} with {in_flight} games in flight and {buf.get('size', 0)} steps in its "
               "buffer (sampled < 0.5 s before; lost, as docs/resume-faults.md says)")
    if after_kill:
        outcome += f"; its learner lived on and saved {', '.join(f'ckpt-{v}' for v in after_kill)}"
    actors = max((s for name, s in lived.items() if name.startswith("ray::") and "Agent" not in name), default=0)
    agents = max((s for name, s in lived.items() if "Agent" in name), default=0)
    left = sorted(name for name, s in lived.items() if s >= ORPHAN_WAIT_S)
    outcome += f"; its actors lived on for up to {actors:.1f} s, Ray's agent processes for {agents:.0f} s"
    if left:
        outcome += f" ({', '.join(left)} still ran {ORPHAN_WAIT_S:.0f} s after the kill, then killed here)"
    outcome += f"; resumed from ckpt-{start}" + (", finished" if ok else f", resume failed: {failure(r)}")
    traj_at_kill = c.get("trajectories_sent", 0) - buf.get("trajectories_received", 0)
    first_new = min((m for v, m in complete_versions(ckpts).items() if start is not None and v > start), default=None)
    return row("driver kill -9, then resume", ok, outcome, games + in_flight + lost_before(c),
               traj + traj_at_kill, dup + buf.get("duplicates", 0), ckpts, b.steps,
               None if first_new is None else first_new - killed_at, t0, unbalanced, ended)


def failure(result: dict[str, Any]) -> str:
    """The first line of what stopped (or refused) a run, without the ``unstable train`` prefix."""
    text = result.get("error") or result.get("refused") or "no result"
    line = text.splitlines()[0].removeprefix("unstable train: error: ")
    if len(line) > 200 and ". " in line[:200]:  # Ray's long actor-death text: its first sentence
        line = line[:line.index(". ") + 1] + " ..."
    return line if len(line) <= 240 else line[:240] + " ..."


def lost_before(collector: dict[str, int]) -> int:
    return collector.get("failed", 0) + collector.get("dropped", 0)


def recover_after(ckpts: Path, t: float) -> float | None:
    after = checkpoint_after(ckpts, t)
    return None if after is None else after - t


def actor_kill(b: Bench, actor: str, job: dict[str, Any] | None = None) -> tuple[Driver, Path, float]:
    d = b.new_run(f"{actor.lower()}-kill", job=job)
    ckpts = b.until_step(d)
    pid = wait_for(lambda: actor_pid(d, actor), 60, f"the {actor} process")
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    return d, ckpts, killed_at


def inference_kill(b: Bench) -> dict[str, Any]:
    # The buffer holds two batches, so a run could take its last two steps on games played before the
    # kill and never need the restarted actor: this run takes three steps after the kill at least
    steps = max(b.steps, INJECT_AFTER + 3)
    t0 = time.time()
    d, ckpts, killed_at = actor_kill(b, "InferenceActor", job={"learning_steps": steps})
    r = b.finish(d)
    games, traj, dup, unbalanced = books(r)
    ok = finished(r, steps)
    c = (r.get("summary") or {}).get("collector", {})
    answering, noticed = answered_again(d.samples(), killed_at)
    step = checkpoint_after(ckpts, killed_at)
    recover = None if answering is None or step is None else max(answering, step) - killed_at
    how = ("the collector routed around it until it answered again" if noticed else
           "it answered again; the collector's calls waited for the restart" if answering else
           "never seen answering again")
    outcome = (f"Ray restarted it ({how}); {c.get('dropped', 0)} games in flight on it dropped, "
               f"{c.get('failed', 0)} failed; " + ("finished" if ok else f"did not finish: {failure(r)}"))
    return row("inference actor kill -9", ok and answering is not None, outcome, games, traj, dup,
               ckpts, steps, recover, t0, unbalanced)


def answered_again(samples: list[dict[str, Any]], killed_at: float) -> tuple[float | None, bool]:
    """When the (only) inference actor was first seen answering after the kill, and whether the collector
    noticed the restart. Seen answering: the collector's probe got an answer (``inference_recovered``), or
    model games finished after a sample taken once the kill had landed (the killed process answers
    nothing, so those games were served by the restarted one)."""
    after = [s for s in samples if s["time"] > killed_at + PROGRESS_GRACE_S]
    if not after:
        return None, False
    first = after[0]["collector"]
    for s in after:
        c = s["collector"]
        if c["inference_recovered"] > 0:
            return s["time"], True
        if finished_games(c) > finished_games(first):
            return s["time"], False
    return None, False


def finished_games(collector: dict[str, int]) -> int:
    return collector.get("train_finished", 0) + collector.get("eval_finished", 0)


PROGRESS_GRACE_S = 1.0  # a game whose last move was answered just before the kill has ended by then


def stopped_then_resumed(b: Bench, d: Driver, name: str) -> tuple[bool, dict, dict]:
    """Wait for a run the fault should stop (with an error: exit code 1); then resume it.
    (stopped with an error?, the first run's result, the resumed run's)."""
    first = b.finish(d)
    stopped = d.poll() == 1 and bool(first.get("error"))
    resumed = b.finish(b.resume(f"{name}-resume", d.run_dir()))
    return stopped, first, resumed


def stop_and_resume_outcome(stopped: bool, first: dict, resumed: dict, ok: bool) -> str:
    how = f"stopped: {failure(first)}" if stopped else f"did not stop with an error (exit {first.get('exit')})"
    return how + "; " + (f"resumed from ckpt-{resumed.get('start_version')}, finished" if ok
                         else f"resume failed: {failure(resumed)}")


def learner_kill(b: Bench) -> dict[str, Any]:
    t0 = time.time()
    d, ckpts, killed_at = actor_kill(b, "Learner")
    stopped, first, resumed = stopped_then_resumed(b, d, "learner-kill")
    games, traj, dup, unbalanced = books(first, resumed)
    ok = finished(resumed, b.steps)
    return row("learner kill -9, then resume", stopped and ok,
               stop_and_resume_outcome(stopped, first, resumed, ok), games, traj, dup, ckpts, b.steps,
               recover_after(ckpts, killed_at), t0, unbalanced)


def node_loss(b: Bench) -> dict[str, Any]:
    t0 = time.time()
    d = b.new_run("node-loss", job={"two_nodes": True, "remove_node_after": INJECT_AFTER}, num_inference_actors=2)
    r = b.finish(d)
    games, traj, dup, unbalanced = books(r)
    ok = finished(r, b.steps)
    c = (r.get("summary") or {}).get("collector", {})
    ckpts = Path(r["run_dir"]) / "checkpoints" if r.get("run_dir") else None
    removed = r.get("injected_at")
    outcome = (("worker node removed after ckpt-1; " if removed else "the node was never removed; ")
               + f"{c.get('dropped', 0)} games in flight there dropped; "
               + ("finished on the head node" if ok else f"did not finish: {failure(r)}"))
    return row("node lost (2-node cluster)", ok and bool(removed), outcome, games, traj, dup,
               ckpts, b.steps, recover_after(ckpts, removed) if ckpts and removed else None, t0, unbalanced)


API_CALLS_PER_PHASE = 6  # each failing phase lasts until the server has refused this many calls ...
API_STEPS_PER_PHASE = 1  # ... and the learner has saved this many steps meanwhile (training went on)


def api_errors(b: Bench) -> dict[str, Any]:
    t0 = time.time()
    steps = b.steps + 4  # room for the two failing phases and a healthy one after them
    with FakeAPI() as api:
        d = b.new_run("api", env=api.env(), job={"learning_steps": steps}, train_envs=[dict(TTT, num_actors=1)],
                      opponent_sampling_strategy="fixed", fixed_opponents=["fake/api-opponent", "heuristic"],
                      api_timeout_s=1.0, api_max_retries=1)
        ckpts = b.until_step(d)
        injected = time.time()
        during = {}
        for phase in ("500", "hang"):
            at = max(complete_versions(ckpts))
            api.phase = phase
            wait_for(lambda p=phase, a=at: (api.counts.get(p, 0) >= API_CALLS_PER_PHASE
                                            and max(complete_versions(ckpts)) >= a + API_STEPS_PER_PHASE)
                     or d.poll() is not None, b.timeout_s, f"the {phase} phase")
            during[phase] = max(complete_versions(ckpts)) - at
        healed_at = max(complete_versions(ckpts))
        api.phase = "ok"
        r = b.finish(d)
        counts = dict(api.counts)
    games, traj, dup, unbalanced = books(r)
    ok = finished(r, steps)
    c = (r.get("summary") or {}).get("collector", {})
    outcome = (f"{counts.get('500', 0)} calls got a 500 while the learner made {steps_text(during['500'])}, then "
               f"{counts.get('hang', 0)} calls got no answer while it made {steps_text(during['hang'])}: "
               f"{c.get('failed', 0)} games against it failed (counted, logged), the rest went on; healthy again "
               f"after ckpt-{healed_at}, "
               f"{counts.get('ok', 0)} calls answered in all; "
               + ("finished" if ok else f"did not finish: {failure(r)}"))
    return row("API opponent 500s, then hangs", ok, outcome, games, traj, dup, ckpts, steps,
               recover_after(ckpts, injected), t0, unbalanced)


def steps_text(n: int) -> str:
    return f"{n} step{'' if n == 1 else 's'}"


def disk_unwritable(b: Bench) -> dict[str, Any]:
    t0 = time.time()
    d = b.new_run("disk")
    ckpts = b.until_step(d)
    with refusing_writes(ckpts) as how:
        injected = time.time()
        before = complete_versions(ckpts)
        first = b.finish(d)
        kept = complete_versions(ckpts)
    stopped = d.poll() == 1 and bool(first.get("error"))
    resumed = b.finish(b.resume("disk-resume", d.run_dir()))
    games, traj, dup, unbalanced = books(first, resumed)
    ok = finished(resumed, b.steps)
    kept_ok = before.keys() <= kept.keys() and all(kept[v] == m for v, m in before.items())
    outcome = (f"{how} on checkpoints/: " + stop_and_resume_outcome(stopped, first, resumed, ok)
               + ("" if kept_ok else "; checkpoints written before it were lost or changed"))
    return row("checkpoints dir unwritable", stopped and kept_ok and ok, outcome, games, traj,
               dup, ckpts, b.steps, recover_after(ckpts, injected), t0, unbalanced)


def same_name(b: Bench) -> dict[str, Any]:
    t0 = time.time()
    pair = [b.new_run(f"same-name-{k}", run_name="same-name", start=False) for k in (1, 2)]
    for d in pair:  # together: each a fresh process, so neither has a head start
        d.start()
    results = [b.finish(d) for d in pair]
    winners = [r for r in results if finished(r, b.steps)]
    refused = [r for r in results if r.get("refused")]
    games, traj, dup, unbalanced = books(*winners)
    clean = len(winners) == 1 and len(refused) == 1 and not refused[0].get("ray_started")
    ckpts = Path(winners[0]["run_dir"]) / "checkpoints" if winners else None
    if refused:
        r = refused[0]
        why = (f"the other was refused {r['ended_at'] - r['started_at']:.1f} s after it started, "
               f"{'after' if r.get('ray_started') else 'before'} Ray started: {failure(r)}")
    else:
        why = "neither was refused: " + "; ".join(failure(r) for r in results)
    outcome = f"{len(winners)} of 2 finished; {why}"
    return row("same run name twice at once", clean, outcome, games, traj, dup, ckpts, b.steps,
               None, t0, unbalanced)


FAULTS: dict[str, Callable[[Bench], dict[str, Any]]] = {
    "driver-kill": driver_kill, "inference-kill": inference_kill, "learner-kill": learner_kill,
    "node-loss": node_loss, "api": api_errors, "disk": disk_unwritable, "same-name": same_name,
}
QUICK = ("learner-kill", "same-name")
"""CI's short version: the faults no test of their own covers in a real process of a user's (an inference
actor killed: tests/test_reliability.py; the checkpoints folder unwritable, then resume:
tests/test_unwritable.py)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--only", default=None, help=f"comma-separated faults (of {', '.join(FAULTS)})")
    parser.add_argument("--steps", type=int, default=None, help="learner steps per run (default 4; --quick 3)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds any one run may take")
    parser.add_argument("--work", default=None, help="scratch folder for the runs (default: a temp dir)")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(QUICK if args.quick else FAULTS)
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        parser.error(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    steps = args.steps or (3 if args.quick else 4)
    if "api" in names and steps < INJECT_AFTER + 3:
        parser.error(f"the api fault needs --steps >= {INJECT_AFTER + 3} (healthy, 500s, hanging, healthy)")
    import tempfile

    from unstable.local_models.tiny import tiny_model_path

    info = machine()
    work = Path(args.work or tempfile.mkdtemp(prefix="faults-", dir="/tmp"))
    bench = Bench(str(tiny_model_path("1m")), work, steps, args.timeout)
    rows = []
    try:
        for name in names:
            print(f"== {name}", flush=True)
            t0 = time.time()
            try:
                rows.append(FAULTS[name](bench))
            except Exception as exc:  # the harness failed (a run never got to ckpt-1): a row that says so
                rows.append(row(name, False, f"harness: {type(exc).__name__}: {exc}"[:600], None, None, None, None,
                                steps, None, t0))
            finally:
                bench.close()
            print(markdown_table(rows[-1:]), flush=True)
    finally:
        bench.close()
    settings = {"model": "tiny 1m", "env": "TicTacToe-v0-train", "learning_steps": steps, "batch_size": 16,
                "inject_after_step": INJECT_AFTER, "collection_workers": 8, "eval_workers": 2, "work": str(work)}
    notes = ["survived: finished its learner steps (after --resume where the fault stops the run); same name twice: "
             "one run finished and the other was refused before Ray started",
             "recover (s): from the injection until the next learner step was saved (same run or the resumed one; "
             "for the inference actor, not before the collector had it answering again)",
             "the driver kill's wall time leaves out the 90 s in which the harness watches the killed driver's "
             "processes go away (concurrently with the resume)",
             f"wall times on {info['cores']} cores, 1-min load average {info['load_avg_1m_at_start']:.1f} at start"]
    write_result("faults", args, rows, settings, notes, info)
    sys.exit(0 if all(r["survived"] for r in rows) else 1)


if __name__ == "__main__":
    main()
