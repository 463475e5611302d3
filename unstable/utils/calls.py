"""Calls that work the same on a local object and on a Ray actor handle, without importing Ray.

The core components (buffer, registry, tracker, scheduler, collector, learner) are ordinary classes,
and their collaborators may be ordinary objects (tests, one process) or actor handles (a run wired
by :mod:`unstable.run`). An actor handle's methods carry a ``.remote`` that returns an object ref;
a local object's methods do not. These helpers look for that attribute, so the core never imports
Ray: ``call`` waits for the answer (a ref's ``future().result()``, which raises the actor's error as
its own type, like ``ray.get``), ``acall`` awaits it, ``fire`` sends and does not wait, ``submit``
sends now and returns what to await later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


def _split(obj: Any, method: str) -> tuple[Any, Any]:
    fn = getattr(obj, method)
    return fn, getattr(fn, "remote", None)


def call(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``obj.method(*args)``, waiting for the answer if ``obj`` is an actor handle."""
    fn, remote = _split(obj, method)
    if remote is not None:
        return remote(*args, **kwargs).future().result()
    return fn(*args, **kwargs)


def fire(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call without waiting for an actor's answer (returns the object ref); local calls run now."""
    fn, remote = _split(obj, method)
    return remote(*args, **kwargs) if remote is not None else fn(*args, **kwargs)


async def acall(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Async :func:`call`: awaits the actor's object ref, or the local coroutine or value."""
    fn, remote = _split(obj, method)
    if remote is not None:
        return await remote(*args, **kwargs)
    result = fn(*args, **kwargs)
    if asyncio.iscoroutine(result):
        return await result
    return result


def submit(obj: Any, method: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """Start ``obj.method(*args)`` now and return an awaitable of its answer: an actor's object ref
    (the call is on its way before the caller awaits anything, so several actors work on their calls
    at once), or, for a local object, its answer (a coroutine is scheduled as a task). A local call's
    error is raised here, an actor's by the await."""
    fn, remote = _split(obj, method)
    if remote is not None:
        return remote(*args, **kwargs)
    result = fn(*args, **kwargs)
    if asyncio.iscoroutine(result):
        return asyncio.ensure_future(result)
    future = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future


def has_method(obj: Any, method: str) -> bool:
    """Whether ``obj`` (a local object or an actor handle) has ``method``: a collaborator written
    before a batched method existed (a test's fake, a user's subclass of nothing) is called item by item."""
    return callable(getattr(obj, method, None))


class CachedReads:
    """``obj``'s answers to the read-only methods in ``reads``, each asked once per arguments.

    For a batch of work that reads the same things many times from an actor (the scheduler drawing
    32 games reads the current checkpoint and the fixed opponents from the registry for each): the
    batch sees one snapshot and pays one round trip per distinct question. Any other method goes
    straight to ``obj``. Answers that are lists, dicts or sets are copied, so a caller that changes
    one does not change the next caller's.
    """

    def __init__(self, obj: Any, reads: frozenset[str] | set[str]):
        self._obj, self._reads = obj, frozenset(reads)
        self._answers: dict[tuple, Any] = {}

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_") or method not in self._reads:
            return getattr(self._obj, method)

        def read(*args: Any, **kwargs: Any) -> Any:
            key = (method, args, tuple(sorted(kwargs.items())))
            if key not in self._answers:
                self._answers[key] = call(self._obj, method, *args, **kwargs)
            answer = self._answers[key]
            return answer.copy() if isinstance(answer, list | dict | set) else answer

        return read
