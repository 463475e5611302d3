"""How a run serves model calls: :class:`InferenceConfig` (mapped from the seed's ``vllm_config``
keys), the choice of backend, and the backends built in this process.

Starting the backends as Ray actors is the wiring's job (:mod:`unstable.run.wiring`); this module
builds plain, local ones and knows nothing of Ray.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any, Literal

from unstable.inference.actor import make_backend
from unstable.inference.adapters import complete_lora_cfg
from unstable.inference.base import SamplingParams
from unstable.inference.engine_settings import (
    SHARED_GPU_MEMORY_UTILIZATION,
    VLLM_CONFIG_KEYS,
    check_engine_settings,
)
from unstable.utils.schema import check_fields, setting

log = logging.getLogger(__name__)

_ANNOUNCED: set[str] = set()


@dataclass
class InferenceConfig:
    """How the collector serves model calls (mapped from the seed's ``vllm_config`` keys)."""

    model_name: str = setting(what="a HF model id, a local model directory or 'tiny'")
    """The base model the backends load: a HF id, a local directory or ``"tiny"``."""
    backend: Literal["auto", "transformers", "vllm"] = setting("transformers", flat="inference_backend")
    """``"transformers"``, ``"vllm"`` or ``"auto"`` (vLLM when it imports; build()'s default), which
    :func:`choose_backend` resolves before a backend is made."""
    num_actors: int = setting(1, ge=1, flat="num_inference_actors")
    """Inference actors (build(): one per GPU left after the learner's, else one)."""
    temperature: float = setting(0.6, ge=0, flat="temperature")
    """Sampling temperature of model seats in training and eval games (0: greedy). The learners
    compute their log-probs at each sample's own temperature, so the gradient and any importance
    ratio belong to the distribution that was sampled."""
    top_p: float = setting(1.0, gt=0, le=1)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p. The
    learners do not model the nucleus, so the default is 1 (exact); below 1 is refused with the
    algorithms that weigh samples by a ratio to the behaviour policy (see docs/algorithms.md's algorithm
    table), and a plain REINFORCE gradient then belongs to the un-truncated tempered policy."""
    max_tokens: int = setting(4096, ge=1)
    """New tokens per answer at most (the seed's max_generation_len)."""
    legal_moves_only: bool = setting(False)
    """Model seats answer with one of the legal moves' canonical answers (``\\boxed{move}``), drawn token by
    token from the model's distribution renormalised over the tokens that continue one of them; the learners
    train on those renormalised log-probs and the exploitability reading reads them. Needs the transformers
    backend, top_p=1 and games with a legal-move reader (docs/training.md, "Answers drawn among the legal moves")."""
    max_parallel_seq: int = setting(128, ge=1)
    """Requests batched into one generate call at most."""
    max_loras: int = setting(8, ge=1)
    """LoRA adapters kept loaded per backend at once (older ones are evicted), and, where decoding is
    compiled (vLLM; transformers on CUDA), the most one batch serves (a batch with more goes in parts)."""
    max_model_len: int = setting(8192, ge=1)
    """vLLM: the context length the engine reserves memory for."""
    lora_config: dict | None = None
    """The adapters' LoRA settings (vLLM sizes its LoRA slots by lora_rank)."""
    actor_num_cpus: float = setting(1.0, ge=0)
    """CPUs each inference actor reserves in Ray."""
    actor_num_gpus: float = setting(0.0, ge=0)
    """GPUs each inference actor reserves in Ray."""
    backend_kwargs: dict | None = None
    """Extra keyword arguments of the backend's constructor (e.g. dtype, device)."""
    max_restarts: int = setting(3, ge=0)
    """Ray restarts of each inference actor before it counts as dead for good."""
    engine: dict | None = None
    """vLLM engine settings, passed to its ``EngineArgs`` (``gpu_memory_utilization``, ``enforce_eager``,
    ``enable_sleep_mode``, ``tensor_parallel_size``, ``dtype``, ``seed`` ...; see
    :mod:`unstable.inference.engine_settings`). The transformers backend uses ``dtype`` only."""

    def __post_init__(self) -> None:
        check_fields(self)  # "tiny" stays a name: the backends build (or find) the tiny model
        if self.legal_moves_only and self.top_p < 1:
            raise ValueError(f"top_p={self.top_p} with legal_moves_only=True: the learners and the reading model the "
                             "answers renormalised over the legal moves without a nucleus; use top_p=1")
        if self.lora_config is not None:
            self.lora_config = complete_lora_cfg(self.lora_config, "lora_config")

    @classmethod
    def from_vllm_config(cls, cfg: dict, *, where: str = "vllm_config", **overrides: Any) -> InferenceConfig:
        """The seed's ``vllm_config``: its own keys set the fields, any other key is an engine setting
        (checked by :func:`~unstable.inference.engine_settings.check_engine_settings`; errors name them
        ``where[key]``)."""
        if not isinstance(cfg, dict):
            raise ValueError(f"vllm_config must be a dict, got {type(cfg).__name__}")
        ours = {k: v for k, v in cfg.items() if k in VLLM_CONFIG_KEYS}
        engine = {k: v for k, v in cfg.items() if k not in VLLM_CONFIG_KEYS}
        check_engine_settings(engine, where)
        if "max_num_seqs" in engine:  # vLLM's name for max_parallel_seq
            seqs = engine.pop("max_num_seqs")
            if ours.setdefault("max_parallel_seq", seqs) != seqs:
                raise ValueError(f"vllm_config sets max_parallel_seq={ours['max_parallel_seq']} and "
                                 f"max_num_seqs={seqs}, which are one setting (vLLM's name and the seed's): give one")
        if "model_name" not in cfg:
            raise ValueError("vllm_config needs 'model_name'")
        return cls(**{**ours, "engine": engine or None, **overrides})

    @property
    def sleep_mode(self) -> bool:
        """Whether the vLLM engines sleep while a learner on their GPU updates (``enable_sleep_mode``)."""
        return self.backend == "vllm" and bool((self.engine or {}).get("enable_sleep_mode"))

    @property
    def sampling(self) -> SamplingParams:
        """The default :class:`~unstable.inference.base.SamplingParams`: ``temperature``, ``top_p``,
        ``max_tokens`` (as ``max_new_tokens``) and ``legal_moves_only``."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_tokens,
                              legal_moves_only=self.legal_moves_only)

    def backend_arguments(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~unstable.inference.actor.make_backend` for this config."""
        kwargs: dict[str, Any] = {"max_batch_size": self.max_parallel_seq, "max_loras": self.max_loras}
        engine = dict(self.engine or {})
        if self.backend == "vllm":
            kwargs.update(max_model_len=self.max_model_len,
                          max_lora_rank=(self.lora_config or {}).get("lora_rank", 32))
            if 0 < self.actor_num_gpus < 1:  # a GPU shared with the learner: leave it the rest
                share = round(self.actor_num_gpus * SHARED_GPU_MEMORY_UTILIZATION, 4)
                engine.setdefault("gpu_memory_utilization", share)
            kwargs.update(engine)
        else:
            if engine.get("dtype") not in (None, "auto"):
                kwargs["dtype"] = engine.pop("dtype")
            ignored = sorted(k for k in engine if k != "dtype")
            if ignored and "transformers-ignores" not in _ANNOUNCED:
                _ANNOUNCED.add("transformers-ignores")
                log.warning("the transformers backend ignores the vLLM engine settings %s", ignored)
        kwargs.update(self.backend_kwargs or {})
        return kwargs


def choose_backend(requested: str) -> str:
    """``auto`` picks vLLM when it imports, else transformers, and says which (once per process)."""
    if requested == "auto":
        chosen = "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"
        if chosen not in _ANNOUNCED:
            _ANNOUNCED.add(chosen)
            log.warning("inference backend: %s (auto)%s", chosen, "" if chosen == "vllm" else
                        "; vLLM is not installed, so the transformers backend serves vllm_config requests")
        return chosen
    if requested == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError("inference_backend='vllm' but vLLM is not installed: on GPUs pip install "
                         "unstable-baselines[vllm]; on CPUs bash scripts/install_vllm_cpu.sh .venv; "
                         "or use 'auto' / 'transformers'")
    return requested


def local_backends(cfg: InferenceConfig) -> list[Any]:
    """``cfg.num_actors`` backends in this process (no Ray)."""
    backend = choose_backend(cfg.backend)
    return [make_backend(backend, cfg.model_name, **cfg.backend_arguments()) for _ in range(cfg.num_actors)]
