"""The one place where the plain components become Ray actors and are wired together.

Resource layout: the Tracker, registry, scheduler, buffer and collector are light (``num_cpus=0``).
The learner takes one CPU (and one GPU when there is one); each inference actor takes one CPU or
one GPU. With ``num_learner_workers=N`` each of the N learner workers takes what the one learner
takes (one CPU; on GPUs one CPU and one whole GPU each, the inference actors on the GPUs left).
On a 2-core laptop that is one core generating and one core learning, concurrently. A run
asking for more CPUs or GPUs than the cluster has would wait forever for its actors: once Ray is up,
and before any actor starts, :func:`check_resources` refuses it, naming the requests and the setting.

On a cluster the light actors live on the driver's node (which the run cannot outlive anyway), and
so does the learner when that node has the CPU/GPU it needs; the inference actors spread over the
nodes and restart (see :mod:`unstable.collection.collector`) if theirs dies. So losing a node that only runs
inference actors costs the games in flight there, not the run. ``resume_from`` restores the run's state first
(see :mod:`unstable.run.resume`).

The named actors (Tracker, buffers, inference actors) are named per run, ``<run_id>/<role>`` (see
:func:`~unstable.run.remote.actor_name`), so two runs in one Ray cluster, or two ``build()`` calls in
one process, never clash; the seed's scripts name their actors themselves (``"Tracker"``), as before.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from unstable.buffers import EpisodeBuffer, StepBuffer
from unstable.collection.collector import Collector
from unstable.collection.scheduler import GameScheduler
from unstable.games.extraction import custom_action_extractions
from unstable.games.templates import custom_templates
from unstable.inference.adapters import resolve_transport
from unstable.learners.catalog import resolve_learner
from unstable.learners.distributed import free_port
from unstable.learners.loop import SleepingEngines
from unstable.models.checks import check_adapter, check_model
from unstable.records import checkpoint_uid
from unstable.registry import ModelRegistry
from unstable.registry.model_registry import DEFAULT_LINEAGE, fixed_policy_ref
from unstable.reward_transformations import default_transforms
from unstable.run.evaluator import CheckpointHooks, start_evaluator
from unstable.run.league_preset import league_model_sampler, reset_rules
from unstable.run.remote import (
    ActorByName,
    ObjectStoreAdapters,
    actor_class,
    actor_name,
    new_run_id,
    start_inference_backends,
)
from unstable.run.resources import amounts as _amounts
from unstable.run.resources import short_of, wait_for_free_resources
from unstable.run.resume import (
    RunStateWriter,
    find_resume_point,
    lost_step_rows,
    restore_buffers,
    roll_back_registry,
)
from unstable.samplers.env_samplers import SuccessCurriculumEnvSampler, UniformRandomEnvSampler
from unstable.samplers.strategies import opponent_sampler
from unstable.tracking import Tracker
from unstable.tracking.wandb_writer import wandb_plan
from unstable.utils.quiet import quiet_ray_token_auth_notice
from unstable.utils.turn_lock import TurnLock

log = logging.getLogger(__name__)


def ensure_ray(address: str | None = None) -> None:
    """Connect to ``address`` (an existing cluster), or start a local Ray if none is running here
    (see :func:`init_local_ray`)."""
    quiet_ray_token_auth_notice()  # a new local cluster's notice, which every first run printed
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, namespace="unstable", log_to_driver=True)
    else:
        init_local_ray(namespace="unstable", include_dashboard=False, log_to_driver=True)


WORKER_NICENESS_ENV = "RAY_worker_niceness"
"""Ray's setting of its workers' niceness (default 15), read by the raylet, which ``ray.init`` starts."""


def init_local_ray(**init_kwargs: Any) -> None:
    """``ray.init(address="local", **init_kwargs)``, with the workers at the priority of the process
    that starts them.

    Ray starts its workers at niceness 15 (``RAY_worker_niceness``), which keeps its own daemons
    responsive but lets any process at normal priority take the CPU from the learner and the inference
    actors: on 2 cores beside two busy processes in the same session, the learner's arithmetic ran 21x
    slower (benchmarks/bench_worker_niceness.py) and the default job did not finish one learner update
    in 6 minutes (5 s each alone). A ``RAY_worker_niceness`` of the user's own is
    kept. A cluster started with ``ray start`` keeps whatever its raylets were started with.
    """
    own = WORKER_NICENESS_ENV in os.environ
    if not own:
        os.environ[WORKER_NICENESS_ENV] = "0"
    try:
        ray.init(address="local", **init_kwargs)
    finally:
        if not own:
            del os.environ[WORKER_NICENESS_ENV]


def gpu_layout(gpus: int, learners: int = 1) -> tuple[float, float, int]:
    """(GPUs per learner worker, GPUs per inference actor, number of actors) for a machine with
    ``gpus`` GPUs and ``learners`` learner workers.

    No GPU: everything on CPU, one actor. One GPU: learner and one actor share it. More: one
    for the learner, one actor on each of the others (the seed needed at least two GPUs). Several
    learner workers: a GPU each, and the inference actors on the others (at least one, so that
    :func:`check_resources` refuses a cluster with fewer than ``learners + 1`` GPUs).
    """
    if gpus <= 0:
        return 0.0, 0.0, 1
    if learners > 1:
        return 1.0, 1.0, max(gpus - learners, 1)
    if gpus == 1:
        return 0.5, 0.5, 1
    return 1.0, 1.0, gpus - 1


def inference_resources(cluster: dict[str, float], num_actors: int | None = None) -> dict[str, Any]:
    """How many inference actors a hand-wired collector (the seed's ``Collector(vllm_config=...)``)
    starts and what each reserves, as :class:`~unstable.inference.config.InferenceConfig` fields, laid
    out as build() does (:func:`gpu_layout`): no GPU, one CPU each; GPUs, the inference share of them
    (one GPU: half of it, the learner the other half; several: all but the learner's one) split evenly
    over ``num_actors`` (default: one per inference GPU), at most one GPU each."""
    gpus = _gpus(cluster)
    learner_gpus, _, default_actors = gpu_layout(gpus)
    count = num_actors or default_actors
    if not gpus:
        return {"num_actors": count, "actor_num_gpus": 0.0, "actor_num_cpus": 1.0}
    return {"num_actors": count, "actor_num_gpus": min(1.0, (gpus - learner_gpus) / count), "actor_num_cpus": 0.0}


@dataclass
class Actors:
    """The handles of one run's Ray actors as :func:`start_actors` started them, with the version each model
    starts at and, when resumed, the steps the previous run left in its buffers."""

    tracker: Any
    registry: Any
    scheduler: Any
    collector: Any
    inference: list[Any]  # RemoteBackend clients of the inference actors
    run_dir: str
    learners: dict[str, Any]  # model name -> learner actor (one entry in a one-model run)
    buffers: dict[str, Any]  # model name -> buffer actor
    run_id: str = ""  # the prefix of the run's actor names (see actor_name)
    turn_lock: Any = None  # the learners' TurnLock, when several share a device
    start_versions: dict[str, int] = field(default_factory=dict)  # model name -> its version at start (resumed)
    buffer_dropped_on_resume: int | None = None  # steps the previous run left in its buffers (resumed, stopped)
    learner_workers: dict[str, list[Any]] = field(default_factory=dict)  # model name -> its ranks 1..N-1
    evaluator: Any = None  # the in-run exploitability evaluator (unstable.run.evaluator), when there is one

    @property
    def learner(self) -> Any:
        """The first model's learner (the only one in a one-model run)."""
        return next(iter(self.learners.values()))

    @property
    def buffer(self) -> Any:
        """The first model's buffer."""
        return next(iter(self.buffers.values()))

    @property
    def start_version(self) -> int:
        """The furthest learner version at start (N when resumed from ckpt-N; 0 for a new run)."""
        return max(self.start_versions.values(), default=0)

    def all(self) -> list[Any]:
        """Every actor handle of the run, the collector first and the tracker (then the turn lock) last:
        the order :meth:`~unstable.run.build.Run.stop` kills them in."""
        lock = [self.turn_lock] if self.turn_lock is not None else []
        workers = [w for ws in self.learner_workers.values() for w in ws]
        evaluator = [self.evaluator] if self.evaluator is not None else []
        return [self.collector, *self.learners.values(), *workers, *(b.handle for b in self.inference), *evaluator,
                self.scheduler, *self.buffers.values(), self.registry, self.tracker, *lock]


def _env_sampler(cfg):
    samplers = cfg.samplers
    if samplers.env_sampling_strategy == "curriculum":
        return SuccessCurriculumEnvSampler(train_env_specs=list(cfg.train_envs), eval_env_specs=list(cfg.eval_envs),
                                           rng_seed=cfg.seed, window=samplers.env_curriculum_window,
                                           target=samplers.env_curriculum_target, width=samplers.env_curriculum_width)
    return UniformRandomEnvSampler(train_env_specs=list(cfg.train_envs), eval_env_specs=list(cfg.eval_envs),
                                   rng_seed=cfg.seed)


def start_actors(cfg, run_name: str) -> Actors:
    """Start every actor of a run from a validated :class:`~unstable.run.config.BuildConfig`, in the order a
    reader can follow: where each model resumes, Ray, the services (tracker, registry, scheduler), the
    buffers and the evaluator, the learners, the inference engines, the collector.

    One model or several take the same path: every model has a buffer and a learner, keyed by its name;
    its registry lineage is its name, or ``None`` in a one-model run (the seed's names: ``ckpt-N``, no
    metrics prefix). Models sharing a base model share its engines (see :func:`_start_engines`).
    """
    models = cfg.models
    lineage = {m.name: (m.name if len(models) > 1 else None) for m in models}  # registry lineage / metrics prefix
    points = _resume_points(cfg, lineage)
    resume = points[models[0].name] if points else None
    wandb = _wandb_plan(cfg)
    ensure_ray(cfg.ray_address)
    cluster = ray.cluster_resources()
    check_resources(models, cluster)
    wait_for_free_resources(resource_requests(models, cluster)[1], cluster)  # another process's run holds some
    driver_node = ray.get_runtime_context().get_node_id()
    # hard affinity: a soft one lets Ray place them on any node whose worker pool is less busy
    light = {"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(driver_node, soft=False)}
    run_id = new_run_id(run_name)
    tracker, registry, run_dir, in_memory = _start_tracking(cfg, run_name, run_id, lineage, points, resume, wandb,
                                                            light)
    scheduler = _start_scheduler(cfg, tracker, registry, run_dir, resume, light, lineage)
    checkpoints_dir = ray.get(tracker.get_checkpoints_dir.remote())
    # several learners take turns on their device instead of oversubscribing it; in sync mode the
    # collector takes turns with them
    turn_lock = None
    if len(models) > 1 or cfg.mode == "sync":
        turn_lock = actor_class(TurnLock).options(**light, max_concurrency=len(models) + 3).remote()
    buffers = {m.name: _start_buffer(m, light, tracker, cfg.seed, lineage[m.name], len(models) > 1, run_id)
               for m in models}
    buffer_dropped = restore_buffers(resume.state, buffers) if resume else None
    if buffer_dropped is not None:
        ray.get(tracker.log.remote({"buffer/dropped_on_resume": buffer_dropped}))
    evaluator, evaluate_hook = _start_evaluator(cfg, tracker, checkpoints_dir, points, light)
    learner_gpus, gpus_per_actor, default_actors = gpu_layout(_gpus(ray.cluster_resources()), _learner_workers(models))
    on_checkpoint = CheckpointHooks(RunStateWriter(run_dir, registry, scheduler, tracker, buffers), evaluate_hook)
    learners, workers, pending = _start_learners(cfg, lineage, points, buffers, checkpoints_dir, learner_gpus,
                                                 driver_node, tracker, registry, turn_lock, on_checkpoint, in_memory)
    # after the learners, so they have their place before the inference actors take theirs
    # by name, not handle: the inference actors may be restarted (see ActorByName)
    source = ActorByName(actor_name(run_id, "ModelRegistry")) if in_memory else None
    backends, groups, samplings, sleepers = _start_engines(models, lineage, gpus_per_actor, default_actors, run_id,
                                                           adapter_source=source)
    if sleepers:  # vLLM's sleep mode on the learner's GPU: the engines sleep while a learner updates
        sleeping = SleepingEngines([b.handle for b in sleepers], lock=turn_lock)
        ray.get([learner.set_turn_lock.remote(sleeping) for learner in learners.values()])
    collector = actor_class(Collector).options(**light, max_concurrency=1000).remote(
        tracker=tracker, game_scheduler=scheduler, backends=backends,
        buffers={lineage[n]: b for n, b in buffers.items()}, backend_groups=groups, samplings=samplings,
        sampling=samplings[lineage[models[0].name]], failure_budget=cfg.failure_budget,
        api_opponents=cfg.api_opponents, prompt_templates=custom_templates(),
        action_extractions=custom_action_extractions(), environments={env.name: env for env in cfg.environments},
        turn_lock=turn_lock if cfg.mode == "sync" else None)
    for learner, algorithm_kwargs in pending:  # only what it names (A2C: the critic's)
        ray.get(learner.initialize_algorithm.remote(**algorithm_kwargs))
    for name, learner in learners.items():
        _join_learner_workers(learner, workers[name])
    return Actors(tracker, registry, scheduler, collector, backends, run_dir, learners=learners, buffers=buffers,
                  turn_lock=turn_lock, start_versions={name: p.version for name, p in points.items()},
                  buffer_dropped_on_resume=buffer_dropped, run_id=run_id,
                  learner_workers={name: ws for name, ws in workers.items() if ws}, evaluator=evaluator)


def _resume_points(cfg, lineage: dict[str, str | None]) -> dict[str, Any]:
    """Where each model resumes (one point per model; they share the run's state snapshot), empty for a new
    run; the checkpoint each learner starts from must fit its base model (``model_name`` may be new)."""
    if not cfg.resume_from:
        return {}
    points = {m.name: find_resume_point(cfg.resume_from, lineage[m.name]) for m in cfg.models}
    for m in cfg.models:
        point = points[m.name]
        if point.checkpoint is not None:
            check_adapter(str(point.checkpoint), "the checkpoint to resume from", check_model(m.model_name))
    return points


def _wandb_plan(cfg) -> Any:
    """W&B is optional: without an API key it logs offline, and that is said once, here."""
    try:
        wandb = wandb_plan(cfg.tracker.wandb_project, cfg.tracker.use_wandb)
    except ImportError as exc:
        raise ValueError(str(exc)) from None
    if wandb.notice:
        print(f"unstable: {wandb.notice}", flush=True)
    return wandb


def _start_tracking(cfg, run_name: str, run_id: str, lineage: dict[str, str | None], points: dict, resume: Any,
                    wandb: Any, light: dict) -> tuple[Any, Any, str, bool]:
    """The Tracker and the ModelRegistry, restored when resumed (each model rolled back to its point), else
    with each model's base at version 0; the fixed opponents registered. Returns them, the run directory and
    whether adapters travel through Ray's object store."""
    # the caller's cwd, not the actor's
    run_dir = str(resume.run_dir) if resume else os.path.abspath(os.path.join(cfg.runs_dir, run_name))
    tracker = actor_class(Tracker).options(**light, name=actor_name(run_id, "Tracker")).remote(
        run_name=run_name, wandb_project=cfg.tracker.wandb_project, run_dir=run_dir, use_wandb=wandb.enabled,
        wandb_mode=wandb.mode, config=cfg.to_dict(), config_file=resume is None,
        wandb_id=resume.state["tracker"].get("wandb_id") if resume and resume.state else None)
    run_dir = ray.get(tracker.get_run_dir.remote())
    registry = actor_class(ModelRegistry).options(**light, name=actor_name(run_id, "ModelRegistry")).remote(
        tracker=tracker)
    in_memory = resolve_transport(cfg.checkpoint_transport) == "object_store"
    if in_memory:  # adapters reach inference through Ray's object store (see unstable.inference.adapters)
        ray.get(registry.set_adapter_store.remote(ObjectStoreAdapters()))
    if resume and resume.state:
        for point in points.values():  # each model's roll-back (if any) into the one snapshot loaded
            roll_back_registry(resume.state["registry"], point.lineage or DEFAULT_LINEAGE, point.version)
        ray.get(tracker.load_state_dict.remote(resume.state["tracker"]))
        ray.get(registry.load_state_dict.remote(resume.state["registry"]))
    else:
        for name in lineage.values():
            ray.get(registry.add_checkpoint.remote(uid=checkpoint_uid(0, name), path=None, iteration=0, lineage=name))
    if resume:
        for point in points.values():
            _register_missing_checkpoints(registry, point)
        for row, step in lost_step_rows(list(points.values())):  # stopped before its row reached the tracker
            ray.get(tracker.log_at.remote(row, step))
        ray.get(tracker.set_learner_step.remote(max(p.version for p in points.values())))
    samplers = cfg.samplers
    opponents = set(samplers.fixed_opponents if samplers.plays_fixed() else ())
    opponents |= {spec.fixed_opponent for spec in cfg.eval_envs if getattr(spec, "fixed_opponent", None)}
    opponents |= {p.policy for env in cfg.environments for p in env.participants if p.policy is not None}
    known = set(ray.get(registry.fixed_uids.remote()))
    for name in sorted(opponents):
        if fixed_policy_ref(name).uid not in known:
            ray.get(registry.add_fixed.remote(name=name))
    return tracker, registry, run_dir, in_memory


def _start_scheduler(cfg, tracker, registry, run_dir: str, resume: Any, light: dict,
                     lineage: dict[str, str | None]) -> Any:
    """The GameScheduler with the env sampler and the opponent sampler (a league's, when there is one),
    restored when resumed; the eval games of a model whose learner trains NFSP's average policy seat the average."""
    league = getattr(cfg, "league", None)
    fixed = tuple(fixed_policy_ref(name).uid for name in cfg.samplers.fixed_opponents)
    opponents_sampler = opponent_sampler(cfg.samplers, registry, cfg.seed, fixed, tracker, run_dir)
    # no logging_dir: the Tracker writes logs/failed_games.jsonl (both writing it listed each failure twice)
    scheduler = actor_class(GameScheduler).options(**light).remote(
        model_sampler=league_model_sampler(league, cfg.models, opponents_sampler, cfg.seed),
        env_sampler=_env_sampler(cfg), logging_dir=None, seed=cfg.seed,
        eval_average=tuple(key for m in cfg.models if m.learner.get("average_reservoir") is not None
                           for key in {lineage[m.name], m.name}))  # an eval spec may name the one model
    if resume and resume.state:
        ray.get(scheduler.load_state_dict.remote(resume.state["scheduler"]))
    return scheduler


def _start_learners(cfg, lineage: dict[str, str | None], points: dict, buffers: dict, checkpoints_dir: str,
                    learner_gpus: float, driver_node: str, tracker, registry, turn_lock, on_checkpoint,
                    in_memory: bool) -> tuple[dict[str, Any], dict[str, list[Any]], list[tuple[Any, dict]]]:
    """Each model's learner (rank 0, near the driver) and its other data-parallel ranks. Returns the
    learners and the other ranks by model, and each actor with the algorithm settings it is to be
    initialised with (after the engines have their place)."""
    models = cfg.models
    several = len(models) > 1
    learners, workers, pending = {}, {}, []
    rules = reset_rules(getattr(cfg, "league", None), models)  # a league's exploiters reset their adapters by these
    for m in models:
        learner_cls = resolve_learner(m.algorithm)
        resumed = {}
        point = points.get(m.name)
        if point is not None and point.checkpoint is not None:
            resumed = {"initial_lora_path": str(point.checkpoint), "initial_version": point.version,
                       "restore_training_state": True}
        learner_kwargs, algorithm_kwargs = m.learner_settings(learner_cls)
        cpus, gpus = _learner_share(learner_gpus, len(models))
        common = dict(model_name=m.model_name, lora_cfg=m.lora_cfg, **learner_kwargs,
                      output_dir=os.path.join(checkpoints_dir, m.name) if several else checkpoints_dir,
                      device=m.learner_device, seed=cfg.seed, lineage=lineage[m.name],
                      keep_last=None)  # keep every adapter: lagged opponents and the registry may point at old ones
        learner = actor_class(learner_cls).options(num_cpus=cpus, num_gpus=gpus,
                                                   **_near(driver_node, 1, learner_gpus)).remote(
            **common, buffer=buffers[m.name], tracker=tracker, model_registry=registry, turn_lock=turn_lock,
            on_checkpoint=on_checkpoint, publish_adapters=in_memory,
            **resumed, **({"reset_rule": rules[m.name]} if m.name in rules else {}))
        # ranks 1..N-1 get rank 0's weights and optimiser states with the first batch: they read no
        # checkpoint (their node may not see it), and build the adapter from the run's lora_cfg
        start = {k: v for k, v in resumed.items() if k == "initial_version"}
        workers[m.name] = [actor_class(learner_cls).options(num_cpus=cpus, num_gpus=gpus).remote(**common, **start)
                           for _ in range(m.num_learner_workers - 1)]
        pending.extend((w, algorithm_kwargs) for w in [learner, *workers[m.name]])
        learners[m.name] = learner
    return learners, workers, pending


def _start_evaluator(cfg, tracker, checkpoints_dir: str, points: dict, light: dict) -> tuple[Any, Any]:
    """The run's in-run exploitability evaluator and its learner hook (see :mod:`unstable.run.evaluator`),
    reading at the first model's eval sampling settings, from the checkpoint the run starts at."""
    m = cfg.models[0]
    sampling = m.inference_config(m.backend, 1, 0.0).sampling
    point = points.get(m.name)
    start = (point.version, str(point.checkpoint)) if point is not None and point.checkpoint is not None else (0, None)
    return start_evaluator(cfg, tracker, checkpoints_dir, sampling, start, light)


def _learner_workers(models) -> int:
    """The most learner workers any model asks for (only a one-model run may ask for more than one)."""
    return max(_workers(m) for m in models)


def _workers(m) -> int:
    """A model's learner workers (1 for a model declaration that does not say)."""
    return getattr(m, "num_learner_workers", 1)


def _join_learner_workers(rank0, others: list[Any]) -> None:
    """Start the process group of a model's learner workers, at a free port on rank 0's node (see
    :mod:`unstable.learners.distributed`; ``Run.start`` starts the other ranks' ``follow()``)."""
    if not others:
        return
    address, port = ray.get(rank0.__ray_call__.remote(_rendezvous))
    ranks = [rank0, *others]
    ray.get([w.join_data_parallel.remote(rank, len(ranks), address, port) for rank, w in enumerate(ranks)])


def _rendezvous(_learner: Any) -> tuple[str, int]:
    """Run inside rank 0's actor: its node's address and a port free there."""
    return ray.util.get_node_ip_address(), free_port()


def _start_buffer(m, light: dict, tracker, seed: int, lineage: str | None, several: bool, run_id: str):
    """A model's buffer actor, with its reward transforms (the defaults unless the model names its own)."""
    learner_cls = resolve_learner(m.algorithm)
    transforms = m.buffer.reward_transforms
    final, step, sampling = transforms or default_transforms()
    if transforms is None and learner_cls.normalizes_advantages:
        sampling = None  # A2C/PPO/GRPO normalise their advantages themselves (per env, per group)
    buffer_cls = EpisodeBuffer if learner_cls.needs_episodes else StepBuffer
    name = actor_name(run_id, f"Buffer-{m.name}" if several else "Buffer")
    return actor_class(buffer_cls).options(**light, name=name).remote(
        max_buffer_size=m.buffer.size, tracker=tracker, final_reward_transformation=final,
        step_reward_transformation=step, sampling_reward_transformation=sampling,
        max_staleness=m.buffer.max_staleness, seed=seed, dedupe=True, lineage=lineage,
        **({"whole_games": True} if m.buffer.whole_games else {}))


def _start_engines(models, lineage: dict[str, str | None], gpus_per_actor: float,
                   default_actors: int, run_id: str, adapter_source: Any = None
                   ) -> tuple[list[Any], dict[str, list[int]], dict[str | None, Any], list[Any]]:
    """The inference actors: one group per distinct base model, set up by the first model that uses
    it (the others' adapters are served by the same engines). Returns the backends, each lineage's
    backend indices, each lineage's sampling settings, and the backends to put to sleep while a
    learner updates (vLLM with ``enable_sleep_mode`` on the learner's GPU). The groups split the
    inference share of :func:`gpu_layout` between them: on CPU one CPU's worth of Ray's resources,
    on one GPU its inference half, on several GPUs each inference GPU holds an actor of every group."""
    by_base = _engine_groups(models)
    backends: list[Any] = []
    groups: dict[str, list[int]] = {}
    samplings: dict[str | None, Any] = {}
    sleepers: list[Any] = []
    for k, group in enumerate(by_base):
        first = group[0]
        backend = first.backend
        num_actors = first.inference.get("num_actors") or default_actors
        cpus, gpus = _engine_share(gpus_per_actor, len(by_base))
        engine = first.inference_config(backend, num_actors, gpus, cpus)
        prefix = "inference" if len(by_base) == 1 else f"inference-{k}"
        indices = list(range(len(backends), len(backends) + num_actors))
        started = start_inference_backends(engine, prefix=prefix, run_id=run_id, adapter_source=adapter_source)
        backends.extend(started)
        if engine.sleep_mode and 0 < gpus < 1:  # a GPU shared with the learner (gpu_layout's one-GPU case)
            sleepers.extend(started)
        elif engine.sleep_mode:
            log.info("enable_sleep_mode: the inference actors of %s have GPUs of their own, so they never need to "
                     "sleep for the learner", first.model_name)
        for m in group:
            groups[lineage[m.name]] = indices
            samplings[lineage[m.name]] = m.inference_config(backend, num_actors, gpus_per_actor).sampling
    return backends, groups, samplings, sleepers


def _engine_groups(models) -> list[list]:
    """The models grouped by base model, in order: each group shares one set of inference actors."""
    by_base: dict[str, list] = {}
    for m in models:
        by_base.setdefault(m.model_name, []).append(m)
    return list(by_base.values())


def _engine_share(gpus_per_actor: float, num_groups: int) -> tuple[float, float]:
    """(CPUs, GPUs) of one inference actor: the groups split the inference share of :func:`gpu_layout`
    (one GPU, or one CPU, holds them all); an actor on a GPU reserves no CPU."""
    gpus = gpus_per_actor / num_groups
    return (0.0 if gpus else 1 / num_groups), gpus


def _learner_share(learner_gpus: float, num_models: int) -> tuple[float, float]:
    """(CPUs, GPUs) of one learner: the learners share one CPU and the learner's GPU share."""
    return 1 / num_models, learner_gpus / num_models


def _gpus(resources: dict[str, float]) -> int:
    return int(resources.get("GPU", 0))


def resource_requests(models, cluster: dict[str, float]) -> tuple[list[tuple], dict[str, float]]:
    """What :func:`start_actors` asks Ray for on a cluster with ``cluster``'s resources: the rows
    ``(what, how many, CPUs each, GPUs each)`` (the learners and the inference actors; the Tracker,
    registry, scheduler, buffers and collector reserve nothing) and their sum, ``{"CPU": .., "GPU": ..}``."""
    learner_gpus, gpus_per_actor, default_actors = gpu_layout(_gpus(cluster), _learner_workers(models))
    rows = [(_learner_label(m, len(models)), _workers(m), *_learner_share(learner_gpus, len(models)))
            for m in models]
    groups = _engine_groups(models)
    for group in groups:
        count = group[0].inference.get("num_actors") or default_actors
        label = f"{count} inference actor{'s' if count > 1 else ''}"
        rows.append((label if len(groups) == 1 else f"{label} of {group[0].model_name}", count,
                     *_engine_share(gpus_per_actor, len(groups))))
    return rows, {"CPU": sum(n * c for _, n, c, _ in rows), "GPU": sum(n * g for _, n, _, g in rows)}


def check_resources(models, cluster: dict[str, float]) -> None:
    """Refuse a run whose actors the cluster can never hold all at once (they would wait forever).

    Counts what :func:`start_actors` asks Ray for (:func:`resource_requests`) against the
    cluster's total CPUs and GPUs (``ray.cluster_resources()``, or before Ray starts
    :func:`~unstable.run.resources.planned_resources`). Also refuses a CUDA learner on a cluster without GPUs.
    """
    learner_gpus, _, _ = gpu_layout(_gpus(cluster), _learner_workers(models))
    cuda = [m.learner_device for m in models if (m.learner_device or "").startswith("cuda")]
    if cuda and not learner_gpus:
        raise ValueError(f"learner_device={cuda[0]!r}, but the Ray cluster has no GPU "
                         f"({_amounts(cluster)}), so the learner would find no CUDA device: use 'cpu' or None, or "
                         "join a cluster with GPUs (ray_address=...)")
    rows, asked = resource_requests(models, cluster)
    short = short_of(asked, cluster)
    if not short:
        return
    parts = "; ".join(f"{what} {_amounts({'CPU': c, 'GPU': g})}{' each' if n > 1 else ''}" for what, n, c, g in rows)
    workers = "num_learner_workers or " if _learner_workers(models) > 1 else ""
    raise ValueError(f"the run asks Ray for {_amounts(asked)} ({parts}), but the cluster has {_amounts(cluster)}, so "
                     f"its actors would wait forever for {' and '.join(short)}: lower {workers}num_inference_actors "
                     "(inference['num_actors']), or give Ray more (ray.init(num_cpus=...) before build(), or a "
                     "larger cluster with ray_address=...)")


def _learner_label(m, num_models: int) -> str:
    n = _workers(m)
    who = "the learner" if n == 1 else f"{n} learner workers"
    return who if num_models == 1 else f"{who} of {m.name}"


def _near(node_id: str, cpus: float, gpus: float) -> dict:
    """Options pinning an actor to ``node_id`` if that node has the resources at all, else none."""
    node = next((n for n in ray.nodes() if n["NodeID"] == node_id and n["Alive"]), None)
    if node is None or node["Resources"].get("CPU", 0) < cpus or node["Resources"].get("GPU", 0) < gpus:
        return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


def _register_missing_checkpoints(registry, resume) -> None:
    """Register the complete checkpoints the state snapshot does not know yet (a kill between a
    checkpoint and its snapshot), oldest first, so the registry ends at the resumed version."""
    known = set(ray.get(registry.checkpoint_uids.remote()))
    for version, path in resume.complete_checkpoints.items():
        uid = checkpoint_uid(version, resume.lineage)
        if uid not in known:
            ray.get(registry.add_checkpoint.remote(uid=uid, path=str(path), iteration=version, lineage=resume.lineage))
