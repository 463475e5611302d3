"""A seat played by a language model through an inference backend."""

from __future__ import annotations

from unstable.games.extraction import answer_text, get_action_extraction
from unstable.games.legal_moves import legal_moves
from unstable.games.templates import get_template
from unstable.inference.base import GenerationRequest, InferenceBackend, InferenceUnavailableError, SamplingParams
from unstable.policies.base import PolicyError, PolicyOutput, TurnContext
from unstable.records import PolicyRef


class LLMPolicy:
    """Render the observation with a prompt template, generate, extract the move. With
    ``sampling.legal_moves_only`` the completion is drawn among the legal moves' canonical answers
    (:attr:`~unstable.inference.base.GenerationRequest.choices`).

    The backend is shared by every seat and game in the process, so requests from all of them
    are batched together; ``ref.adapter_path`` picks the LoRA adapter (``None`` = base weights).

    An error of the backend (a prompt longer than the context, an adapter it cannot load, the
    engine failing) is the model's: it becomes a :class:`PolicyError`, a counted failed game. An
    error of the template or the extraction is a bug and propagates as it is.
    """

    def __init__(
        self,
        backend: InferenceBackend,
        ref: PolicyRef,
        *,
        prompt_template: str = "default",
        action_extraction: str = "default",
        sampling: SamplingParams | None = None,
    ):
        self.backend = backend
        self.ref = ref
        self.template = get_template(prompt_template)
        self.extract = get_action_extraction(action_extraction)
        self.sampling = sampling or SamplingParams()

    async def act(self, ctx: TurnContext) -> PolicyOutput:
        """Render the observation, generate with the backend and extract the move; ``gen_seconds`` counts the time
        queued too. A backend error becomes a :class:`~unstable.policies.base.PolicyError`, except
        ``InferenceUnavailableError`` (the server is gone), which propagates as it is."""
        prompt = self.template(ctx.observation)
        choices = None
        if self.sampling.legal_moves_only:  # the legal moves' canonical answers, as the warm start teaches them
            choices = tuple(answer_text(move) for move in legal_moves(ctx.env_id, ctx.env, ctx.player_id))
        request = GenerationRequest(prompt, self.ref.adapter_path, self.sampling, self.ref.version, choices)
        try:
            result = await self.backend.generate(request)
        except InferenceUnavailableError:  # the server died: the turn loop drops the game
            raise
        except Exception as exc:  # vLLM, torch and Ray raise many types; all are the model server's
            name = getattr(self.backend, "name", type(self.backend).__name__)
            raise PolicyError(f"inference backend {name} failed: {type(exc).__name__}: {exc}") from exc
        found = self.extract(result.sample.text)
        return PolicyOutput(
            action=found.action,
            format_ok=found.format_ok,
            completion_text=result.sample.text,
            prompt=prompt,
            sample=result.sample,
            gen_seconds=result.gen_seconds + result.queue_seconds,
        )
