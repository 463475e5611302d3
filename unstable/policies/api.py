"""A seat played by a model behind an OpenAI-compatible chat API (OpenRouter, vLLM server, ...).

The key is read from the environment only (never passed around, logged or saved). Each call may
take ``timeout_s``; timeouts, connection errors and retryable HTTP errors (408, 409, 429, 5xx) are
retried ``max_retries`` times with exponential backoff (``backoff_s``, doubling), and the whole turn
(calls and backoff) may take ``turn_deadline_s``; then an :class:`APIPolicyError` propagates and the
game is recorded as failed with its seed, counted by the collector's failure budget (see
:mod:`unstable.collection.failures`). A server that never answers therefore fails a turn after
``min(turn_deadline_s, timeout_s * (max_retries + 1) + backoff)`` (a server that sends its answer
byte by byte is cut off at ``timeout_s`` too). :class:`APIOpponentConfig` holds these settings for
a run (``build(api_timeout_s=..., api_max_retries=..., api_turn_deadline_s=...)``) and ``unstable
eval`` (``--api-timeout-s``, ``--api-max-retries``, ``--api-turn-deadline-s``).

The error's message, and the reply text, go through :func:`unstable.utils.secrets.redact`: a server
may echo the key (``Incorrect API key provided: sk-...``), and the message ends up in logs and
transcripts.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from unstable.games.extraction import get_action_extraction
from unstable.policies.base import PolicyError, PolicyOutput, TurnContext
from unstable.records import PolicyRef
from unstable.utils.schema import check_fields, setting
from unstable.utils.secrets import redact

DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
#: Where an API opponent's key comes from unless ``api_key_env`` says otherwise.
DEFAULT_API_KEY_ENV = "OPENROUTER_API_KEY"


@dataclass(frozen=True)  # no slots: ``APIOpponentConfig.timeout_s`` is the default, for APIPolicy's signature
class APIOpponentConfig:
    """How API opponents call their server (build()'s ``api_timeout_s``, ``api_max_retries`` and
    ``api_turn_deadline_s``).

    The defaults keep a training run moving when a server hangs: its turn, and so its game, fails
    after at most ``turn_deadline_s`` (45 s: calls of 20 s, 1 s and 2 s of backoff, and what is left
    for a third call), not minutes, while a 429 or a 5xx is still retried twice. Raise them for a
    model that takes longer to answer (a reasoning model with a large ``max_tokens``).
    """

    timeout_s: float = setting(20.0, gt=0, flat="api_timeout_s")
    """Seconds an API opponent's call may take before it is abandoned (and retried)."""
    max_retries: int = setting(2, ge=0, flat="api_max_retries")
    """Retries of an API opponent's call that timed out, could not connect or got 408/409/429/5xx (0: none)."""
    turn_deadline_s: float = setting(45.0, gt=0, flat="api_turn_deadline_s")
    """Seconds an API opponent's turn may take in all (its calls and the backoff between them); then its game fails."""

    def __post_init__(self) -> None:
        check_fields(self)

    def policy_kwargs(self) -> dict[str, float]:
        """These settings as :class:`APIPolicy`'s keyword arguments."""
        return {"timeout_s": self.timeout_s, "max_retries": self.max_retries, "turn_deadline_s": self.turn_deadline_s}


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
                 timeout_s: float = APIOpponentConfig.timeout_s, max_retries: int = APIOpponentConfig.max_retries,
                 turn_deadline_s: float = APIOpponentConfig.turn_deadline_s, backoff_s: float = 1.0,
                 uid: str | None = None):
        from openai import AsyncOpenAI

        APIOpponentConfig(timeout_s, max_retries, turn_deadline_s)  # checks them
        api_key = os.environ.get(api_key_env)
        base_url = base_url or os.environ.get("UNSTABLE_API_BASE_URL") or DEFAULT_BASE_URL
        if not api_key:
            raise ValueError(f"API opponent {model!r} needs an API key in the environment variable {api_key_env}")
        self.ref = PolicyRef(uid=uid or model, kind="api")
        self.model = model
        self.system_prompt = system_prompt
        self.extract = get_action_extraction(action_extraction)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.turn_deadline_s = turn_deadline_s
        self.client = AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)

    async def act(self, ctx: TurnContext) -> PolicyOutput:
        """Ask the API to answer ``ctx.observation`` under the system prompt, retrying as the module docstring says,
        and extract the move from the redacted reply; :class:`APIPolicyError` when the call fails for good."""
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": ctx.observation}]
        t0 = time.perf_counter()
        deadline = t0 + self.turn_deadline_s
        for attempt in range(self.max_retries + 1):
            try:  # wait_for: httpx's timeout bounds each read, not a reply that trickles in
                reply = await asyncio.wait_for(self.client.chat.completions.create(
                    model=self.model, messages=messages, temperature=self.temperature, max_tokens=self.max_tokens),
                    min(self.timeout_s, deadline - time.perf_counter()))
                break
            except (TimeoutError, APITimeoutError, APIConnectionError, APIStatusError) as exc:
                status = getattr(exc, "status_code", None)
                retryable = status is None or status in (408, 409, 429) or status >= 500
                backoff = self.backoff_s * 2**attempt
                out_of_time = time.perf_counter() + backoff >= deadline
                if attempt == self.max_retries or not retryable or out_of_time:
                    # from None: the original exception's text (which may echo the key) is not chained
                    raise APIPolicyError(f"API opponent {self.model!r} failed after {attempt + 1} attempt(s): "
                                         f"{self._failure_detail(exc, retryable and out_of_time)}", status) from None
                await asyncio.sleep(backoff)
        text = redact(reply.choices[0].message.content or "", (self.client.api_key,))
        found = self.extract(text)
        return PolicyOutput(action=found.action, format_ok=found.format_ok, completion_text=text,
                            prompt=ctx.observation, gen_seconds=time.perf_counter() - t0)

    def _failure_detail(self, exc: BaseException, out_of_time: bool) -> str:
        """Why the turn failed, naming the settings to raise; the exception's own text is redacted."""
        from openai import APITimeoutError

        if isinstance(exc, TimeoutError | APITimeoutError):
            detail = (f"the last call got no answer within {self.timeout_s:g} s (api_timeout_s; "
                      f"retries: api_max_retries={self.max_retries})")
        else:
            detail = redact(f"{type(exc).__name__}: {exc}", (self.client.api_key,))
        if out_of_time:
            detail += f"; the turn's {self.turn_deadline_s:g} s (api_turn_deadline_s) are spent"
        return detail
