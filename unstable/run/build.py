"""``unstable.build()``: validate a run's settings, start its Ray actors, and return a handle.

Everything is validated **before** Ray starts: a wrong value raises ``ValueError`` naming the
argument and what is allowed. Then, like the seed's "standard script", build() starts a Tracker,
a ModelRegistry (with the base model as checkpoint 0 and any fixed opponents), a GameScheduler
(with the env and model samplers), a Step- or EpisodeBuffer with the reward-transform chain, the
inference actors, a Collector and a learner (see :mod:`unstable.run.wiring`). ``Run.start()``
collects and trains concurrently and returns when the learner has made ``learning_steps`` updates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
import weakref
from typing import Any

from unstable.run.arguments import argument_names, merge_arguments
from unstable.run.claim import claim_run_dir, release_run_dir
from unstable.run.config import BuildConfig, StartConfig
from unstable.run.preflight import check_resume_from, preflight
from unstable.utils.disk import RunDirUnwritableError
from unstable.utils.paths import NAME_MAX

log = logging.getLogger(__name__)

PROGRESS_S = 15.0  # how often Run.wait() says how the wait for the last exploitability reading goes
WATCH_INTERVAL_S = 2.0  # how often Run.wait() asks the Tracker whether its writes still reach the disk
# the runs this process built and has not stopped: their actors hold CPUs/GPUs until stop() (a Run
# dropped unstopped takes its actors with it, as Ray ends actors whose handles are gone)
_LIVE_RUNS: weakref.WeakSet = weakref.WeakSet()


def build(**kwargs: Any) -> Run:
    """Validate the settings (:class:`~unstable.run.config.BuildConfig`), check them against the world
    (:func:`~unstable.run.preflight.preflight`), then start Ray (local unless ``ray_address`` names a
    cluster) and all actors.

    ``resume_from=RUN_DIR`` continues that run (in that directory) from its newest complete
    checkpoint; settings not given are read from ``RUN_DIR/config.json``.
    """
    if kwargs.get("resume_from") is not None:
        from unstable.run.resume import load_run_config

        saved, _ = load_run_config(check_resume_from(kwargs["resume_from"]),
                                   reward_transforms=kwargs.get("reward_transforms") is not None)
        known = argument_names()
        unknown = {k: kwargs.pop(k) for k in list(kwargs) if k not in known}  # BuildConfig names them
        kwargs = {**merge_arguments(saved, kwargs), **unknown}  # flat or nested, over the saved sections
    return Run(preflight(BuildConfig(**kwargs)))


def default_run_name(model_name: str) -> str:
    """``<model>-<YYYYmmdd-HHMMSS>-<4 hex digits>``: readable, in start order when sorted, and distinct
    for runs started in the same second (which the time alone was not)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = secrets.token_hex(2)
    base = os.path.basename(model_name.rstrip("/")) or "run"
    room = NAME_MAX - len(f"-{stamp}-{suffix}".encode())
    base = base.encode()[:room].decode(errors="ignore")  # a run name is one directory name
    return f"{base}-{stamp}-{suffix}"


def _claim_default_run_dir(cfg: BuildConfig) -> tuple[str, Any]:
    """A new default-named run directory under ``runs_dir``, claimed; a name that is taken (another
    run's, even one started in the same second) is passed over for a fresh one."""
    for _ in range(8):
        name = default_run_name(cfg.models[0].model_name)
        path = os.path.abspath(os.path.join(cfg.runs_dir, name))
        if os.path.lexists(path):
            continue
        try:
            return name, claim_run_dir(path)
        except ValueError:  # another run claimed it between the two lines above
            continue
    raise ValueError(f"could not find a free run directory name under {cfg.runs_dir}; give run_name")


def _check_room(cfg: BuildConfig) -> None:
    """Refuse, before Ray starts, a run whose actors could never all be placed: more CPUs or GPUs than
    the Ray it will start or join has (:func:`~unstable.run.resources.planned_resources`), or more than is
    left beside the runs this process built and has not stopped. Either would wait for Ray forever."""
    import ray

    from unstable.run.resources import check_room_beside, planned_resources
    from unstable.run.wiring import check_resources, resource_requests

    cluster = planned_resources(cfg.ray_address)
    if cluster is None:  # a cluster not joined yet: start_actors checks it once joined
        return
    check_resources(cfg.models, cluster)
    if not ray.is_initialized():  # ray.shutdown() ended the actors of every run built before it
        _LIVE_RUNS.clear()
    live = list(_LIVE_RUNS)
    if live:
        others = [(f"run {run.run_name!r} ({run.run_dir})", resource_requests(run.config.models, cluster)[1])
                  for run in live]
        check_room_beside(resource_requests(cfg.models, cluster)[1], cluster, others)


class LearnerDiedError(RuntimeError):
    """A learner's actor died (``kill -9``, out of memory, its node lost): the run stops. Its
    checkpoints so far are whole (each is written atomically), so the run resumes from the newest."""

    def __init__(self, model: str | None, run_dir: str):
        whose = "the learner" if model is None else f"the learner of model {model!r}"
        super().__init__(f"{whose} died (killed, out of memory, or its node lost); the checkpoints written so far "
                         f"are intact: continue the run with `unstable train --resume {run_dir}`")
        self.model, self.run_dir = model, run_dir

    def __reduce__(self):
        return type(self), (self.model, self.run_dir)


class Run:
    """The handle build() returns: ``start()``, ``wait()``, ``stop()``, plus the actor handles."""

    def __init__(self, cfg: BuildConfig):
        from unstable.run.wiring import start_actors

        self.config = cfg
        _check_room(cfg)  # before the run directory is claimed or Ray is started or asked for actors
        # the run directory is claimed before anything writes there: a second run given it is refused
        # here, not mid-run
        if cfg.resume_from:
            self.run_name = os.path.basename(cfg.resume_from.rstrip("/"))
            self._claim = claim_run_dir(cfg.resume_from)
        elif cfg.run_name is not None:
            self.run_name = cfg.run_name
            self._claim = claim_run_dir(os.path.abspath(os.path.join(cfg.runs_dir, self.run_name)))
        else:
            self.run_name, self._claim = _claim_default_run_dir(cfg)
        try:
            self.actors = start_actors(cfg, self.run_name)
        except BaseException:
            release_run_dir(self._claim)
            raise
        self.run_dir = self.actors.run_dir
        _LIVE_RUNS.add(self)
        self.run_id = self.actors.run_id  # its actors' names start with it (unstable.run.remote.actor_name)
        self.start_version = self.actors.start_version  # > 0 when resumed from ckpt-N
        print(f"unstable: run directory {self.run_dir}"
              + (f" (resumed at learner step {self.start_version})" if cfg.resume_from else ""), flush=True)
        self._train_refs: list = []
        self._follow_refs: list = []  # the learner workers' follow() while rank 0 trains
        self._learner_of: dict = {}  # a train() ref -> its model's name, to say whose learner died
        self._collect_ref = None
        self._started = False
        self._stopped = False  # stop() was called: a wait() still running in another thread has nothing to report
        self.exploitability: dict | None = None  # the learner steps the in-run evaluator read and skipped, at the end

    def start(self, learning_steps: int = 200, num_collection_workers: int = 256, num_eval_workers: int = 16,
              *, block: bool = True) -> dict | None:
        """Collect with that many games in flight and train until the learner (every model's, with
        several) has made ``learning_steps`` updates in all (a resumed run makes only the ones still
        missing)."""
        import ray

        StartConfig(learning_steps, num_collection_workers, num_eval_workers)  # checks them
        from unstable.run.resume import record_start_settings

        a = self.actors
        self._started = True
        learners = a.learners
        remaining = {name: learning_steps - a.start_versions.get(name, 0) for name in learners}
        done = [name for name, n in remaining.items() if n <= 0]
        for name in done:
            who = "the learner" if len(learners) == 1 else f"{name}'s learner"
            print(f"unstable: {who} is already at step {learning_steps - remaining[name]} >= learning_steps "
                  f"({learning_steps}); nothing to train", flush=True)
        if len(done) == len(learners):  # config.json stays as it was: this call changed nothing
            return self.summary() if block else None
        # a resumed run's config.json is rewritten only now, when it trains (the Tracker left it alone)
        record_start_settings(self.run_dir, {"learning_steps": learning_steps,
                                             "num_collection_workers": num_collection_workers,
                                             "num_eval_workers": num_eval_workers},
                              config=self.config.to_dict() if self.config.resume_from else None)
        self._collect_ref = a.collector.collect.remote(num_collection_workers, num_eval_workers)
        self._train_refs, self._learner_of, self._follow_refs = [], {}, []
        for name, learner in learners.items():
            if remaining[name] > 0:  # learner workers 1..N-1 follow rank 0 until its train() returns
                self._follow_refs += [w.follow.remote() for w in getattr(a, "learner_workers", {}).get(name, ())]
                self._train_refs.append(learner.train.remote(remaining[name]))
                self._learner_of[self._train_refs[-1]] = name
            else:  # its buffer takes no more games: collection goes on for the others
                ray.get(a.buffers[name].stop.remote())
        return self.wait() if block else None

    def wait(self) -> dict:
        """Block until training is done (every learner's, with several models); then stop
        collection and return a short summary.

        An error of a learner or of the collector is raised here with its cause; the checkpoints
        written so far stay as they are. The collector's error comes first: when collection stops
        (a bug in a template, a spent failure budget) the learner can only time out waiting for
        data, and its ``TimeoutError`` would hide the cause. A run directory that can no longer be
        written (a learner's checkpoint, the Tracker's metrics: read-only, full) comes before both:
        :class:`~unstable.utils.disk.RunDirUnwritableError`, raised once, naming the path and how to
        resume, whatever else failed after it.
        """
        import ray

        if not self._started:
            raise RuntimeError("start() has not been called")
        if not self._train_refs:
            return self.summary()
        failed = True
        try:
            pending = list(self._train_refs)
            followers = list(getattr(self, "_follow_refs", ()))  # learner workers 1..N-1
            while pending:
                ready, _ = ray.wait([*pending, self._collect_ref, *followers], num_returns=1,
                                    timeout=WATCH_INTERVAL_S)
                unwritable = self._tracker_write_error()
                if unwritable is not None:
                    raise unwritable
                if self._collect_ref in ready and not any(r in ready for r in pending):
                    stats = ray.get(self._collect_ref)  # raises the collector's error
                    raise RuntimeError(f"collection stopped before training finished (collector: {stats}); "
                                       "was the run stopped from elsewhere?")
                for ref in [r for r in followers if r in ready]:
                    followers.remove(ref)
                    try:
                        ray.get(ref)  # done with rank 0's train(); an error stops the run with its cause
                    except ray.exceptions.ActorDiedError as exc:
                        raise LearnerDiedError(None, self.run_dir) from exc
                for ref in [r for r in pending if r in ready]:
                    pending.remove(ref)
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        collected, _ = ray.wait([self._collect_ref], timeout=0)
                        if collected and unwritable_cause(exc) is None:
                            ray.get(self._collect_ref)  # the collector's error is the cause: raise it instead
                        if isinstance(exc, ray.exceptions.ActorDiedError):
                            raise LearnerDiedError(self._learner_of.get(ref), self.run_dir) from exc
                        raise
            failed = False
        except Exception as exc:  # an unwritable run directory is the cause of whatever failed after it
            unwritable = unwritable_cause(exc) or self._tracker_write_error()
            if unwritable is None:
                raise
            raise unwritable.for_run(self.run_dir) from unwritable.os_error
        finally:
            self._train_refs = []
            self._finish_collection(quiet=failed)
        self._finish_evaluation()
        return self.summary()

    def _finish_evaluation(self) -> None:
        """Wait for the in-run exploitability of the last checkpoint (see :mod:`unstable.run.evaluator`) at
        niceness 0, saying how it goes every :data:`PROGRESS_S`, for at most ``exploitability_wait_s``; an
        evaluation's error is raised here. An evaluator that died, or one past the bound, costs a line."""
        import ray

        evaluator = getattr(self.actors, "evaluator", None)
        if evaluator is None or self.exploitability is not None:
            return
        bound = self.config.exploitability_wait_s
        try:
            refused = ray.get(evaluator.raise_priority.remote())
            if refused:
                print(f"unstable: could not raise the exploitability evaluator's priority ({refused}); it reads "
                      "the rest as it was", flush=True)
            print(f"unstable: waiting for the last checkpoint's exploitability (at most {bound:g} s: "
                  "exploitability_wait_s)", flush=True)
            start = time.monotonic()
            while True:
                left = bound - (time.monotonic() - start)
                state = ray.get(evaluator.wait.remote(max(0.0, min(PROGRESS_S, left)), every_core=True))
                waited = time.monotonic() - start
                if state["done"] or waited >= bound:
                    break
                print(f"unstable: still reading the exploitability of learner step {state['current']} "
                      f"({waited:.0f} s of at most {bound:g})", flush=True)
            unread = [v for v in (state["current"], state["pending"]) if v is not None and not state["done"]]
            if unread:
                commands = ray.get(evaluator.commands.remote(unread, self.run_dir))
                print(f"unstable: stopped waiting after {bound:g} s (exploitability_wait_s): the exploitability of "
                      f"learner step {', '.join(map(str, unread))} was not read; read it later with:\n  "
                      + "\n  ".join(commands), flush=True)
            self.exploitability = {"evaluated": state["evaluated"], "skipped": state["skipped"], "not_read": unread}
        except ray.exceptions.RayActorError as exc:
            print(f"unstable: warning: the in-run exploitability evaluator died ({type(exc).__name__}); the run ends "
                  "without the exploitability of its last checkpoints (unstable eval --exploitability --run "
                  f"{self.run_dir} --all-checkpoints reads them)", flush=True)
            self.exploitability = {"evaluated": [], "skipped": [], "not_read": [], "died": True}

    def _tracker_write_error(self) -> RunDirUnwritableError | None:
        """The write the Tracker's filesystem refused, if any (``None`` too if it does not answer)."""
        import ray

        try:
            return ray.get(self.actors.tracker.write_error.remote(), timeout=60)
        except ray.exceptions.RayError:
            return None

    def _finish_collection(self, quiet: bool = False) -> None:
        """Stop collection and save the run state; ``quiet``: an error is already on its way up. Nothing once
        stop() has run: that saved the state, and the actors are gone (a wait() that was still running in
        another thread, as under ``unstable train`` when Ctrl-C stops it, gets here after them)."""
        import ray

        if self._stopped:
            return
        a = self.actors
        try:
            ray.get([buffer.stop.remote() for buffer in a.buffers.values()])
            if self._collect_ref is not None:
                self._await_collector(timeout=120)
        except ray.exceptions.RayError as exc:
            if not quiet:
                raise
            log.warning("collector: %s", exc)
        finally:
            self._collect_ref = None
        self._save_stopped_state(quiet)

    def _save_stopped_state(self, quiet: bool) -> None:
        """The run state of a run that stops (what its buffers leave behind), for a resume."""
        from unstable.learners.checkpoints import latest_complete
        from unstable.run.resume import RunStateWriter

        a = self.actors
        try:
            latest = latest_complete(os.path.join(self.run_dir, "checkpoints"))
            RunStateWriter(self.run_dir, a.registry, a.scheduler, a.tracker, a.buffers, stopped=True)(
                latest[0] if latest else 0)
        except Exception as exc:
            if not quiet:
                raise
            log.warning("could not save the run state after an error: %s", exc)

    def summary(self) -> dict:
        """What the run holds now: ``run_dir``, the ``checkpoints`` (uids, each model's oldest first), the
        collector's and the first buffer's stats, every model's buffer stats under ``buffers`` with several
        models, for a resumed run ``resume`` (the version it started from and the steps the previous run left in
        its buffers, ``None`` if that run was killed), and, once ``wait()`` has returned in a run with in-run
        exploitability (:mod:`unstable.run.evaluator`), ``exploitability``: the learner steps ``evaluated`` and
        ``skipped``."""
        import ray

        a = self.actors
        out = {
            "run_dir": self.run_dir,
            "checkpoints": ray.get(a.registry.checkpoint_uids.remote()),
            "collector": ray.get(a.collector.stats.remote()),
            "buffer": ray.get(a.buffer.stats.remote()),
        }
        if len(a.buffers) > 1:
            out["buffers"] = {name: ray.get(b.stats.remote()) for name, b in a.buffers.items()}
        if self.exploitability is not None:  # the in-run exploitability: the learner steps evaluated and skipped
            out["exploitability"] = self.exploitability
        if self.config.resume_from:  # the steps the previous run left in its buffers (None: killed, not known)
            out["resume"] = {"from_version": self.start_version, "buffer_dropped": a.buffer_dropped_on_resume}
        return out

    def stop(self) -> None:
        """Stop collection and training, shut the run's actors down (Ray itself keeps running) and
        release the run directory."""
        import ray

        _LIVE_RUNS.discard(self)
        release_run_dir(self._claim)
        if not ray.is_initialized():
            return
        a = self.actors
        in_flight, self._stopped = self._collect_ref is not None, True  # stopped mid-run (Ctrl-C, or the caller)
        try:
            ray.get(a.collector.stop.remote(), timeout=10)
            if in_flight:  # its games cancel before what they call is killed (else each logs a dead actor)
                with contextlib.suppress(ray.exceptions.RayError):  # its error is the run's to report, not the stop's
                    self._await_collector(timeout=60)
            ray.get([b.stop.remote() for b in a.buffers.values()], timeout=10)
            if in_flight:  # the learners stop first, so no checkpoint lands after the state that names the last one
                for learner in a.learners.values():
                    ray.kill(learner, no_restart=True)
                self._save_stopped_state(quiet=True)
            ray.get(a.tracker.close.remote(), timeout=30)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            log.warning("while stopping: %s", exc)
        for handle in a.all():
            ray.kill(handle, no_restart=True)

    def _await_collector(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for :meth:`Collector.collect` to return after :meth:`Collector.stop`
        (it cancels the games in flight), then warn and go on; its error is raised."""
        import ray

        try:  # self._collect_ref stays: a wait() running in another thread still waits on it
            ray.get(self._collect_ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            log.warning("collector did not stop within %.0f s; killing it", timeout)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def unwritable_cause(exc: BaseException) -> RunDirUnwritableError | None:
    """The :class:`RunDirUnwritableError` that ``exc`` is or carries (inside Ray's task errors, which
    nest when it passed through several actors, or as a cause), else ``None``."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if type(e) is RunDirUnwritableError:  # not Ray's RayTaskError subclass of it, which wraps it as .cause
            return e
        stack.extend(c for c in (getattr(e, "cause", None), e.__cause__, e.__context__) if isinstance(c, BaseException))
    return None
