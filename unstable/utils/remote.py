"""Ray at the edge: plain classes that can also be started as Ray actors, and calls that work on both.

Every core component (buffer, registry, tracker, scheduler, collector, learner) is an ordinary
class, tested in-process. Giving it ``metaclass=RemoteCapable`` adds the two class methods the
seed's scripts use, ``Cls.remote(...)`` and ``Cls.options(name=...).remote(...)``, which start it
as a Ray actor. Metaclass methods are invisible to the instances (and to Ray's scan of actor
methods), so the same class serves both ways. :func:`call` / :func:`acall` invoke a method on
either a local object or an actor handle, so components can be wired either way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

_RAY_CLASSES: dict[type, Any] = {}


class _DropOverwriteWarning(logging.Filter):
    """Ray warns that the actor class 'overwrites attribute remote': that is the point here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "overwrites attribute" not in record.getMessage()


def _ray_class(cls: type) -> Any:
    import ray

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
        return _ray_class(cls).remote(*args, **kwargs)

    def options(cls, **options: Any) -> Any:
        return _ray_class(cls).options(**options)


def is_actor(obj: Any) -> bool:
    try:
        from ray.actor import ActorHandle
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    return isinstance(obj, ActorHandle)


def call(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``obj.method(*args)`` for a local object; ``ray.get(obj.method.remote(*args))`` for an actor."""
    if is_actor(obj):
        import ray

        return ray.get(getattr(obj, method).remote(*args, **kwargs))
    return getattr(obj, method)(*args, **kwargs)


def fire(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call without waiting for an actor's answer (returns the ObjectRef); local calls run now."""
    if is_actor(obj):
        return getattr(obj, method).remote(*args, **kwargs)
    return getattr(obj, method)(*args, **kwargs)


async def acall(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Async :func:`call`: awaits the actor's ObjectRef, or the local coroutine/value."""
    if is_actor(obj):
        return await getattr(obj, method).remote(*args, **kwargs)
    result = getattr(obj, method)(*args, **kwargs)
    if asyncio.iscoroutine(result):
        return await result
    return result
