"""Ray at the edge: the seed's ``Cls.remote(...)`` / ``Cls.options(...).remote(...)`` class methods,
the inference actors, and the client that turns Ray's actor errors into the core's own.

The core components are plain classes with no Ray in them. :class:`RemoteCapable` is the
metaclass of their actor-capable twins in :mod:`unstable.run.actors` (the seed's public names,
``unstable.Tracker`` ...): ``Cls(...)`` still builds a local object, and ``Cls.remote(...)``
starts the class as a Ray actor. Metaclass methods are invisible to the instances (and to Ray's
scan of actor methods), so the same class serves both ways. :func:`actor_class` does the same for
any class, e.g. a user's own learner.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import ray
from ray.exceptions import ActorDiedError, RayActorError

from unstable.inference.actor import InferenceActor
from unstable.inference.adapters import AdapterPayload
from unstable.inference.base import (
    GenerationRequest,
    GenerationResult,
    InferenceDeadError,
    InferenceUnavailableError,
)
from unstable.inference.config import InferenceConfig, local_backends

_RAY_CLASSES: dict[type, Any] = {}


class _DropOverwriteWarning(logging.Filter):
    """Ray warns that the actor class 'overwrites attribute remote': that is the point here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "overwrites attribute" not in record.getMessage()


def actor_class(cls: type) -> Any:
    """``ray.remote(cls)``, made once per class."""
    if cls not in _RAY_CLASSES:
        ray_logger = logging.getLogger("ray.actor")
        quiet = _DropOverwriteWarning()
        ray_logger.addFilter(quiet)
        try:
            _RAY_CLASSES[cls] = ray.remote(cls)
        finally:
            ray_logger.removeFilter(quiet)
    return _RAY_CLASSES[cls]


class RemoteCapable(type):
    """Metaclass: ``Cls(...)`` builds a local object; ``Cls.remote(...)`` starts a Ray actor."""

    def remote(cls, *args: Any, **kwargs: Any) -> Any:
        """Start the class as a Ray actor with ``args`` and ``kwargs``; returns its actor handle."""
        return actor_class(cls).remote(*args, **kwargs)

    def options(cls, **options: Any) -> Any:
        """The Ray actor class with Ray's actor ``options`` (``name=``, ``num_gpus=``, ...); ``.remote(...)``
        on it starts the actor."""
        return actor_class(cls).options(**options)


class RemoteBackend:
    """Client side of an :class:`~unstable.inference.actor.InferenceActor` handle, with the backend
    protocol. Ray's actor errors become the core's: a request to an actor that died or is restarting
    raises :class:`InferenceUnavailableError`; :meth:`ready` raises :class:`InferenceDeadError` once
    the actor has used up its restarts."""

    def __init__(self, handle: Any, name: str = "inference"):
        self.handle = handle
        self.name = name

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """The actor's :meth:`~unstable.inference.actor.InferenceActor.generate`; raises
        :class:`InferenceUnavailableError` if the actor died or is restarting."""
        try:
            return await self.handle.generate.remote(request)
        except RayActorError as exc:
            raise InferenceUnavailableError(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    async def stats(self) -> dict[str, Any]:
        """The actor's :meth:`~unstable.inference.actor.InferenceActor.stats`; raises
        :class:`InferenceUnavailableError` if the actor died or is restarting."""
        try:
            return await self.handle.stats.remote()
        except RayActorError as exc:
            raise InferenceUnavailableError(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    async def ready(self) -> bool:
        """True once the actor answers; :class:`InferenceUnavailableError` while it restarts."""
        try:
            return await self.handle.ready.remote()
        except ActorDiedError as exc:  # restarts used up
            raise InferenceDeadError(f"{self.name}: {exc}") from exc
        except RayActorError as exc:  # restarting, or its node is gone
            raise InferenceUnavailableError(f"{self.name}: {type(exc).__name__}: {exc}") from exc


def actor_name(run_id: str, role: str) -> str:
    """The Ray name of a run's actor: ``<run_id>/<role>``, ``role`` being ``Tracker``, ``ModelRegistry``,
    ``Buffer`` (``Buffer-<model>`` with several models) or ``inference-<i>``. ``run_id`` is the run's name and a
    random suffix (:func:`new_run_id`), so two runs in one Ray cluster never share a name, not even
    with the same run name (two ``runs_dir``, or a resume in the process that just stopped the run)."""
    return f"{run_id}/{role}"


class ActorByName:
    """A Ray actor found by its name when first used: what an actor that Ray may restart
    (``max_restarts > 0``: the inference actors) takes among its constructor arguments instead of
    the actor's handle. Ray keeps handles among constructor arguments in its object store, where a
    restart may no longer find them (ray-project/ray#53727), and logs an error line saying so at
    every start; a name is a plain string, looked up again after a restart. Its methods are the
    actor's (``.remote(...)``), so :mod:`unstable.utils.calls` calls it as the handle itself."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._handle: Any = None

    def __getstate__(self) -> dict[str, str]:
        return {"name": self.name}  # never the handle

    def __setstate__(self, state: dict[str, str]) -> None:
        self.name, self._handle = state["name"], None

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        if self._handle is None:
            self._handle = ray.get_actor(self.name)
        return getattr(self._handle, method)

    def __repr__(self) -> str:
        return f"ActorByName({self.name!r})"


def new_run_id(run_name: str) -> str:
    """``<run_name>-<8 hex digits>``: readable in ``ray list actors``, and new for every run."""
    return f"{run_name}-{secrets.token_hex(4)}"


class StoredAdapter:
    """An adapter's files in Ray's object store: the handle the registry gives inference actors.
    The ref sits inside this object, so Ray passes it along as a ref instead of resolving it."""

    def __init__(self, ref: Any):
        self.ref = ref

    async def fetch(self) -> AdapterPayload:
        """The adapter's :class:`~unstable.inference.adapters.AdapterPayload`, read from the object store."""
        return await self.ref


class ObjectStoreAdapters:
    """The registry's adapter store with ``checkpoint_transport="object_store"``: ``put`` copies an
    adapter's files into Ray's object store, owned by the caller: the registry actor, so the adapters
    a learner publishes outlive the learner's restarts (Ray 2.56 removed ``ray.put(_owner=...)``, so
    the learner sends the files to the registry, which puts them)."""

    def put(self, payload: AdapterPayload) -> StoredAdapter:
        """Copy ``payload`` into Ray's object store, owned by the calling process (the registry actor), and
        return its handle."""
        return StoredAdapter(ray.put(payload))


def start_inference_backends(cfg: InferenceConfig, prefix: str = "inference",
                             run_id: str | None = None, adapter_source: Any = None) -> list[Any]:
    """``cfg.num_actors`` backends: Ray actors named ``<prefix>-<i>`` (``<run_id>/<prefix>-<i>`` in a
    run, see :func:`actor_name`; wrapped in :class:`RemoteBackend`, which keeps
    the short name for metrics) when Ray is running, else local objects in this process.
    ``adapter_source``: the registry to fetch adapters from (see :class:`~unstable.inference.actor.InferenceActor`)."""
    if not ray.is_initialized():
        return local_backends(cfg)
    kwargs = cfg.backend_arguments()
    backends = []
    # SPREAD: several actors go to different nodes where they fit (one node lost, not all of them)
    placement = {"scheduling_strategy": "SPREAD"} if cfg.num_actors > 1 else {}
    for i in range(cfg.num_actors):
        name = f"{prefix}-{i}"
        handle = actor_class(InferenceActor).options(
            name=actor_name(run_id, name) if run_id else name,
            num_cpus=cfg.actor_num_cpus, num_gpus=cfg.actor_num_gpus, max_concurrency=10_000,
            max_restarts=cfg.max_restarts, max_task_retries=0, **placement,
        ).remote(cfg.backend, cfg.model_name, name=name, default_sampling=cfg.sampling,
                 adapter_source=adapter_source, **kwargs)
        backends.append(RemoteBackend(handle, name=name))
    return backends
