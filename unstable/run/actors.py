"""The seed's public component names, able to start as Ray actors.

Each class here is the plain component of its stage with :class:`~unstable.run.remote.RemoteCapable`
added, so the seed's "standard script" works as written::

    tracker = unstable.Tracker.options(name="Tracker").remote(run_name=..., wandb_project=...)

while ``unstable.Tracker(...)`` still builds a local object. Nothing else is added, except that the
:class:`Collector` here starts its inference backends from the seed's ``vllm_config``. At import each
class's ``__doc__`` becomes its component's own; the one-line docstrings in the source name the component.
"""

from __future__ import annotations

from typing import Any

from unstable import buffers, learners, registry, tracking
from unstable.collection import collector, scheduler
from unstable.inference import actor
from unstable.inference.config import InferenceConfig, choose_backend
from unstable.run.remote import RemoteCapable, start_inference_backends


class Tracker(tracking.Tracker, metaclass=RemoteCapable):
    """:class:`~unstable.tracking.Tracker`, which ``Tracker.remote(...)`` starts as a Ray actor."""

    __doc__ = tracking.Tracker.__doc__


class ModelRegistry(registry.ModelRegistry, metaclass=RemoteCapable):
    """:class:`~unstable.registry.ModelRegistry`, which ``ModelRegistry.remote(...)`` starts as a Ray actor."""

    __doc__ = registry.ModelRegistry.__doc__


class GameScheduler(scheduler.GameScheduler, metaclass=RemoteCapable):
    """:class:`~unstable.collection.scheduler.GameScheduler`, which ``GameScheduler.remote(...)`` starts as a Ray
    actor."""

    __doc__ = scheduler.GameScheduler.__doc__


class StepBuffer(buffers.StepBuffer, metaclass=RemoteCapable):
    """:class:`~unstable.buffers.StepBuffer`, which ``StepBuffer.remote(...)`` starts as a Ray actor."""

    __doc__ = buffers.StepBuffer.__doc__


class EpisodeBuffer(buffers.EpisodeBuffer, metaclass=RemoteCapable):
    """:class:`~unstable.buffers.EpisodeBuffer`, which ``EpisodeBuffer.remote(...)`` starts as a Ray actor."""

    __doc__ = buffers.EpisodeBuffer.__doc__


class REINFORCELearner(learners.REINFORCELearner, metaclass=RemoteCapable):
    """:class:`~unstable.learners.REINFORCELearner`, which ``REINFORCELearner.remote(...)`` starts as a Ray actor."""

    __doc__ = learners.REINFORCELearner.__doc__


class A2CLearner(learners.A2CLearner, metaclass=RemoteCapable):
    """:class:`~unstable.learners.A2CLearner`, which ``A2CLearner.remote(...)`` starts as a Ray actor."""

    __doc__ = learners.A2CLearner.__doc__


class InferenceActor(actor.InferenceActor, metaclass=RemoteCapable):
    """:class:`~unstable.inference.actor.InferenceActor`, which ``InferenceActor.remote(...)`` starts as a Ray actor."""

    __doc__ = actor.InferenceActor.__doc__


def seed_inference_resources(num_actors: int | None = None) -> dict[str, Any]:
    """:func:`unstable.run.wiring.inference_resources` on the running Ray cluster (no Ray: CPU)."""
    import ray

    from unstable.run.wiring import inference_resources

    return inference_resources(ray.cluster_resources() if ray.is_initialized() else {}, num_actors)


class Collector(collector.Collector, metaclass=RemoteCapable):
    """The seed's ``Collector(vllm_config, tracker, buffer, game_scheduler)``: it starts its inference
    backends (Ray actors when Ray is running, else local ones) from ``vllm_config`` or ``inference``,
    unless ``backends`` are given. From ``vllm_config`` they are laid out as build() lays them out
    (:func:`~unstable.run.wiring.inference_resources`): on a Ray cluster with GPUs each actor gets
    its share of them (on one GPU, half: give the hand-wired learner ``num_gpus=0.5``), else one CPU.
    See :class:`unstable.collection.collector.Collector`."""

    def __init__(self, vllm_config: dict | None = None, tracker: Any = None, buffer: Any = None,
                 game_scheduler: Any = None, *, inference: InferenceConfig | None = None,
                 backends: list[Any] | None = None, **kwargs: Any):
        if inference is None and vllm_config is not None:  # the layout build() would choose on this cluster
            inference = InferenceConfig.from_vllm_config(vllm_config, backend=choose_backend("auto"),
                                                         **seed_inference_resources())
        if backends is None:
            if inference is None:
                raise ValueError("Collector needs vllm_config, inference=InferenceConfig(...) or backends=[...]")
            backends = start_inference_backends(inference)
        if inference is not None:
            kwargs.setdefault("sampling", inference.sampling)
        super().__init__(tracker, buffer, game_scheduler, backends=backends, **kwargs)
