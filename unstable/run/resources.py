"""Whether a run's actors have room in Ray: asked before Ray starts, beside the runs this process
built, and in what the cluster has free (see :func:`unstable.run.wiring.resource_requests` for what a
run asks). A run whose actors Ray cannot place waits for them forever, without a word: these checks
refuse it instead, naming what holds the room and what to do.
"""

from __future__ import annotations

import time

import ray

from unstable.utils.machine import usable_cores


def planned_resources(ray_address: str | None) -> dict[str, float] | None:
    """The CPUs and GPUs the run's Ray has, asked before build() starts or joins one: the running
    Ray's (``ray.init(num_cpus=...)`` before build()); with none running and no ``ray_address``, what
    :func:`ensure_ray`'s local Ray will detect on this machine (Ray's own count: CPU affinity, cgroup
    limits, ``CUDA_VISIBLE_DEVICES``); ``None`` for a cluster not joined yet (checked once joined)."""
    if ray.is_initialized():
        return ray.cluster_resources()
    if ray_address:
        return None
    return {"CPU": float(_local_cpus()), "GPU": float(_local_gpus())}


def _local_cpus() -> int:
    try:  # Ray's count for a local start (affinity and cgroup quotas), which os.cpu_count() does not see
        from ray._private.utils import get_num_cpus

        return int(get_num_cpus())
    except (ImportError, AttributeError):
        return usable_cores()


def _local_gpus() -> int:
    try:  # Ray's own detection of a local start's GPUs
        from ray._private.accelerators import get_accelerator_manager_for_resource

        manager = get_accelerator_manager_for_resource("GPU")
        found = manager.get_current_node_num_accelerators()
        visible = manager.get_current_process_visible_accelerator_ids()
        return found if visible is None else min(found, len(visible))
    except (ImportError, AttributeError):
        import torch

        return torch.cuda.device_count()


def short_of(asked: dict[str, float], have: dict[str, float]) -> list[str]:
    return [k for k, v in asked.items() if v > have.get(k, 0) + 1e-9]


def check_room_beside(asked: dict[str, float], cluster: dict[str, float],
                      others: list[tuple[str, dict[str, float]]]) -> None:
    """Refuse a run asking for ``asked`` that fits the cluster alone but not beside the runs ``others``
    (``(who, what it holds)``: runs this process built and did not stop), whose actors hold their
    CPUs and GPUs until ``stop()``: its actors would wait for them forever, without a word."""
    held = {k: sum(h.get(k, 0) for _, h in others) for k in ("CPU", "GPU")}
    short = short_of({k: asked[k] + held[k] for k in asked}, cluster)
    if not short:
        return
    who = "; ".join(f"{name} holds {amounts(h)}" for name, h in others)
    raise ValueError(f"another run built in this process is still running ({who}), and this run needs "
                     f"{amounts(asked)} more of the cluster's {amounts(cluster)}, so its actors would wait forever "
                     f"for {' and '.join(short)}: call stop() on that run first (or build it as "
                     "`with unstable.build(...) as run:`), or give Ray more (ray.init(num_cpus=...) before the "
                     "first build())")


FREE_WAIT_S = 10.0
"""How long :func:`wait_for_free_resources` waits for resources being released (a run stopped just
before, whose actors Ray is still tearing down) before it refuses."""


def wait_for_free_resources(asked: dict[str, float], cluster: dict[str, float], timeout_s: float = FREE_WAIT_S) -> None:
    """Refuse a run asking for ``asked`` that fits the cluster but not what is free in it now: other
    actors (a run of another process, in a cluster joined with ``ray_address``) hold the rest, and
    would until they stop. Waits up to ``timeout_s`` for resources Ray is still releasing."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = ray.available_resources()
        short = short_of(asked, free)
        if not short:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    raise ValueError(f"the run asks Ray for {amounts(asked)}, but only {amounts(free)} of the cluster's "
                     f"{amounts(cluster)} are free: other actors hold the rest (another run, from another process "
                     f"or an earlier build() whose run was not stopped), so this run's actors would wait forever "
                     f"for {' and '.join(short)}: stop that run first (run.stop(), or end its process), or lower "
                     "num_inference_actors")


def amounts(resources: dict[str, float]) -> str:
    return " and ".join(f"{resources.get(k, 0):g} {k}" for k in ("CPU", "GPU"))
