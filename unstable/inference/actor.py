"""One inference backend (one model and its adapter cache) behind the methods an actor serves.

``InferenceActor`` is a plain class; the wiring (:mod:`unstable.run.wiring`) starts it as an async
Ray actor, so many ``generate`` calls run on its event loop at once and requests from every game
routed to it meet in the backend's batching queue. The collector gives each game one actor
(round-robin), which keeps a game's adapters on one cache. Ray's side of it, restarts and the
client that turns Ray's errors into :class:`~unstable.inference.base.InferenceUnavailableError`,
is :class:`unstable.run.remote.RemoteBackend`.

With an ``adapter_source`` (the registry, when ``checkpoint_transport="object_store"``), a request
for an adapter the backend does not hold in memory first fetches it: ``adapter_source.adapter_handle(path)``
gives a handle (``None``: load ``path`` from disk as usual), ``handle.fetch()`` the
:class:`~unstable.inference.adapters.AdapterPayload` (from Ray's object store; a payload is also
accepted as its own handle), and ``backend.add_adapter(path, payload)`` makes the backend serve
``path`` from it. Concurrent requests for one adapter share one fetch.
"""

from __future__ import annotations

import asyncio
from typing import Any

from unstable.inference.adapters import AdapterPayload
from unstable.inference.base import GenerationRequest, GenerationResult, SamplingParams
from unstable.utils.calls import acall


def make_backend(kind: str, model_name: str, **kwargs: Any):
    """Build an inference backend by name (``"transformers"``; ``"vllm"`` where installed)."""
    if kind == "transformers":
        from unstable.inference.transformers_backend import TransformersBackend

        return TransformersBackend(model_name, **kwargs)
    if kind == "vllm":
        from unstable.inference.vllm_backend import VLLMBackend  # type: ignore[import-not-found]

        return VLLMBackend(model_name, **kwargs)
    raise ValueError(f"unknown inference backend {kind!r}; known: 'transformers', 'vllm'")


class InferenceActor:
    """One backend (one model + its adapter cache) serving many concurrent games."""

    def __init__(self, backend: str = "transformers", model_name: str = "", name: str = "inference-0",
                 default_sampling: SamplingParams | None = None, adapter_source: Any = None,
                 **backend_kwargs: Any):
        self.name = name
        self.backend = make_backend(backend, model_name, **backend_kwargs)
        self.default_sampling = default_sampling or SamplingParams()
        self.adapter_source = adapter_source
        self._fetches: dict[str, asyncio.Task] = {}
        self.adapter_fetches = 0

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Complete ``request`` on the backend, first fetching its adapter from ``adapter_source`` when the
        backend does not hold it in memory."""
        path = request.adapter_path
        if self.adapter_source is not None and path is not None and not self.backend.has_adapter(path):
            await self._fetch(path)
        return await self.backend.generate(request)

    async def _fetch(self, path: str) -> None:
        """Fetch adapter ``path`` into the backend (one fetch however many requests wait for it)."""
        task = self._fetches.get(path)
        if task is None:
            task = asyncio.ensure_future(self._fetch_now(path))
            self._fetches[path] = task
            task.add_done_callback(lambda _: self._fetches.pop(path, None))
        await asyncio.shield(task)

    async def _fetch_now(self, path: str) -> None:
        handle = await acall(self.adapter_source, "adapter_handle", path)
        if handle is None:
            return
        payload = handle if isinstance(handle, AdapterPayload) else await acall(handle, "fetch")
        self.backend.add_adapter(path, payload)
        self.adapter_fetches += 1

    async def submit_prompt(self, prompt: str, lora_path: str | None = None) -> str:
        """The seed's text-only API: complete ``prompt`` with the actor's default sampling."""
        result = await self.backend.generate(GenerationRequest(prompt, lora_path, self.default_sampling))
        return result.sample.text

    async def sleep(self, level: int = 1) -> None:
        """Put the engine to sleep (vLLM's sleep mode) once its running requests are done; see
        :meth:`unstable.inference.vllm_backend.VLLMBackend.sleep`."""
        if getattr(self.backend, "sleep", None) is None:
            raise ValueError(f"{self.name}: the {type(self.backend).__name__} has no sleep mode (the vLLM backend "
                             "with enable_sleep_mode=True has)")
        await asyncio.wrap_future(self.backend.sleep(level))

    async def wake_up(self) -> None:
        """Wake the engine after :meth:`sleep`; requests that waited meanwhile then run."""
        if getattr(self.backend, "wake_up", None) is None:
            raise ValueError(f"{self.name}: the {type(self.backend).__name__} has no sleep mode")
        await asyncio.wrap_future(self.backend.wake_up())

    def stats(self) -> dict[str, Any]:
        """The backend's counters, plus this actor's ``name`` and its number of ``adapter_fetches``."""
        return {"name": self.name, "adapter_fetches": self.adapter_fetches, **self.backend.stats()}

    def ready(self) -> bool:
        """Always ``True``: an answer means the actor is up with its backend built (the collector probes a
        restarting actor with it, through :meth:`unstable.run.remote.RemoteBackend.ready`)."""
        return True
