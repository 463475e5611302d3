"""An inference backend hosted in a Ray actor, and the client that lets policies use it.

``InferenceActor`` is an async actor: Ray runs many ``generate`` calls on its event loop at once,
so requests from every game routed to it meet in the backend's batching queue. The collector
gives each game one actor (round-robin), which keeps a game's adapters on one cache.

The collector starts these actors with ``max_restarts`` (see ``unstable.collection.collector``): if one dies,
Ray starts it again (loading the model anew). Requests that were in flight, or sent while it
restarts, fail; :class:`RemoteBackend` turns Ray's error into :class:`InferenceUnavailableError`
so the game is recorded as dropped, never retried.
"""

from __future__ import annotations

from typing import Any

from unstable.inference.base import GenerationRequest, GenerationResult, InferenceUnavailableError, SamplingParams
from unstable.utils.remote import RemoteCapable


def make_backend(kind: str, model_name: str, **kwargs: Any):
    """Build an inference backend by name (``"transformers"``; ``"vllm"`` where installed)."""
    if kind == "transformers":
        from unstable.inference.transformers_backend import TransformersBackend

        return TransformersBackend(model_name, **kwargs)
    if kind == "vllm":
        from unstable.inference.vllm_backend import VLLMBackend  # type: ignore[import-not-found]

        return VLLMBackend(model_name, **kwargs)
    raise ValueError(f"unknown inference backend {kind!r}; known: 'transformers', 'vllm'")


class InferenceActor(metaclass=RemoteCapable):
    """One backend (one model + its adapter cache) serving many concurrent games."""

    def __init__(self, backend: str = "transformers", model_name: str = "", name: str = "inference-0",
                 default_sampling: SamplingParams | None = None, **backend_kwargs: Any):
        self.name = name
        self.backend = make_backend(backend, model_name, **backend_kwargs)
        self.default_sampling = default_sampling or SamplingParams()

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return await self.backend.generate(request)

    async def submit_prompt(self, prompt: str, lora_path: str | None = None) -> str:
        """The seed's text-only API: complete ``prompt`` with the actor's default sampling."""
        result = await self.backend.generate(GenerationRequest(prompt, lora_path, self.default_sampling))
        return result.text

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, **self.backend.stats()}

    def ready(self) -> bool:
        return True


class RemoteBackend:
    """Client side of an :class:`InferenceActor` handle, with the backend protocol."""

    def __init__(self, handle: Any, name: str = "inference"):
        self.handle = handle
        self.name = name

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        from ray.exceptions import RayActorError

        try:
            return await self.handle.generate.remote(request)
        except RayActorError as exc:
            raise InferenceUnavailableError(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    async def stats(self) -> dict[str, Any]:
        """Awaitable (the actor answers remotely); ``unstable.utils.remote.acall`` awaits either kind.
        Raises :class:`InferenceUnavailableError` while the actor is dead or restarting."""
        from ray.exceptions import RayActorError

        try:
            return await self.handle.stats.remote()
        except RayActorError as exc:
            raise InferenceUnavailableError(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    async def ready(self) -> bool:
        """True once the actor answers; raises Ray's ``ActorDiedError`` if it is dead for good and
        ``ActorUnavailableError`` while it is restarting."""
        return await self.handle.ready.remote()
