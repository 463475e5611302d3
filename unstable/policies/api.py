"""A seat played by a model behind an OpenAI-compatible chat API (OpenRouter, vLLM server, ...).

The key is read from the environment only (never passed around, logged or saved). Timeouts and
HTTP errors are retried with exponential backoff; after ``max_retries`` an :class:`APIPolicyError`
propagates and the game is recorded as failed with its seed. Its message, and the reply text, go
through :func:`unstable.utils.secrets.redact`: a server may echo the key (``Incorrect API key
provided: sk-...``), and the message ends up in logs and transcripts.
"""

from __future__ import annotations

import asyncio
import os
import time

from unstable.games.extraction import get_action_extraction
from unstable.policies.base import PolicyError, PolicyOutput, TurnContext
from unstable.records import PolicyRef
from unstable.utils.secrets import redact

DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
#: Where an API opponent's key comes from unless ``api_key_env`` says otherwise.
DEFAULT_API_KEY_ENV = "OPENROUTER_API_KEY"


class APIPolicyError(PolicyError):
    """An API call that failed for good; the message is redacted and ``status_code`` kept.

    A :class:`PolicyError`: the game is counted as failed, not treated as a bug."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class APIPolicy:
    """``model`` is the provider's model name, e.g. ``"google/gemini-2.0-flash-lite-001"``."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = DEFAULT_API_KEY_ENV,
                 system_prompt: str = "You are playing a game. Reason briefly, then give your move in \\boxed{}.",
                 action_extraction: str = "default", temperature: float = 0.6, max_tokens: int = 1024,
                 timeout_s: float = 60.0, max_retries: int = 3, backoff_s: float = 1.0, uid: str | None = None):
        from openai import AsyncOpenAI

        api_key = os.environ.get(api_key_env)
        base_url = base_url or os.environ.get("UNSTABLE_API_BASE_URL") or DEFAULT_BASE_URL
        if not api_key:
            raise ValueError(f"API opponent {model!r} needs an API key in the environment variable {api_key_env}")
        self.ref = PolicyRef(uid=uid or model, kind="api")
        self.model = model
        self.system_prompt = system_prompt
        self.extract = get_action_extraction(action_extraction)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.client = AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)

    async def act(self, ctx: TurnContext) -> PolicyOutput:
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": ctx.observation}]
        t0 = time.perf_counter()
        for attempt in range(self.max_retries + 1):
            try:
                reply = await self.client.chat.completions.create(
                    model=self.model, messages=messages, temperature=self.temperature, max_tokens=self.max_tokens)
                break
            except (APITimeoutError, APIConnectionError, APIStatusError) as exc:
                status = getattr(exc, "status_code", None)
                retryable = status is None or status in (408, 409, 429) or status >= 500
                if attempt == self.max_retries or not retryable:
                    detail = redact(f"{type(exc).__name__}: {exc}", (self.client.api_key,))
                    # from None: the original exception's text (which may echo the key) is not chained
                    raise APIPolicyError(f"API opponent {self.model!r} failed after {attempt + 1} attempt(s): "
                                         f"{detail}", status) from None
                await asyncio.sleep(self.backoff_s * 2**attempt)
        text = redact(reply.choices[0].message.content or "", (self.client.api_key,))
        found = self.extract(text)
        return PolicyOutput(action=found.action, format_ok=found.format_ok, completion_text=text,
                            prompt=ctx.observation, gen_seconds=time.perf_counter() - t0)
