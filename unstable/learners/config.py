"""Learner configs: one dataclass per learner, validated on construction (and on ``replace``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from unstable.utils.checks import check_choice

DEFAULT_LORA_CFG: dict[str, Any] = {
    "lora_rank": 32,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def _default_lora_cfg() -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, list) else v) for k, v in DEFAULT_LORA_CFG.items()}


LR_SCHEDULES = ("constant", "linear")


@dataclass
class LearnerConfig:
    """Settings of :class:`~unstable.learners.REINFORCELearner` (and the base of A2C's)."""

    model_name: str
    """Base model: any Hugging Face id or local directory."""
    lora_cfg: dict[str, Any] = field(default_factory=_default_lora_cfg)
    """LoRA settings; keys ``lora_rank``, ``lora_alpha``, ``lora_dropout``, ``target_modules``
    (missing keys take the defaults above)."""
    batch_size: int = 384
    """Steps per optimiser step (what ``train`` pulls from the buffer)."""
    mini_batch_size: int = 1
    """Steps per forward/backward; ``batch_size // mini_batch_size`` micro-steps are accumulated."""
    learning_rate: float = 1e-5
    """AdamW learning rate of the policy adapter (see ``lr_schedule``)."""
    lr_schedule: str = "constant"
    """``"constant"``, or ``"linear"``: decay from ``learning_rate`` towards 0 over the run, the
    update to version ``v`` using ``learning_rate * (1 - v / N)`` where ``train(n)`` sets the
    last version ``N = version + n`` (so a resumed run continues the same schedule)."""
    grad_clip: float = 0.2
    """Global gradient-norm clip (``clip_grad_norm_``)."""
    weight_decay: float = 0.0
    """AdamW weight decay. The reference left torch's default (0.01) on the LoRA weights."""
    activation_checkpointing: bool = True
    """Recompute the float32 log-prob head (logits -> token log-probs) in backward instead of
    storing it: saves ~``2 * tokens * vocab * 4`` bytes per micro-batch at the cost of one re-run."""
    gradient_checkpointing: bool = True
    """Hugging Face per-decoder-layer checkpointing (non-reentrant). Costs time; on CPU leave it off."""
    use_trainer_cache: bool = False
    """Accepted for compatibility with 0.2 scripts; it did nothing there and must stay False."""
    initial_lora_path: str | None = None
    """A PEFT adapter directory to start from (its own ``adapter_config.json`` wins over
    ``lora_cfg``). For A2C a ``critic/`` subfolder, if present, restores the critic too."""
    initial_version: int = 0
    """Version of the starting weights; the first update writes ``ckpt-{initial_version + 1}``."""
    restore_training_state: bool = False
    """Resume: also restore the optimiser states, RNG states and skip counter saved in
    ``initial_lora_path/trainer_state.pt`` (its version must equal ``initial_version``)."""
    output_dir: str = "checkpoints"
    """Checkpoints go to ``output_dir/ckpt-{version}``."""
    device: str | None = None
    """``"cuda"``, ``"cuda:1"``, ``"cpu"``... ``None``: cuda if available else cpu."""
    dtype: str | None = None
    """Base-weight dtype (``"bfloat16"``, ``"float16"``, ``"float32"``). ``None``: bf16 on CUDA,
    fp32 on CPU. LoRA weights and optimiser state stay float32 either way."""
    keep_last: int | None = 3
    """Keep the newest N checkpoints (``None`` keeps all)."""
    keep_every: int | None = None
    """Also keep every checkpoint whose version is a multiple of K."""
    seed: int | None = None
    """``torch.manual_seed`` before building the adapters (reproducible LoRA init)."""
    max_train_len: int | None = None
    """Cut ``prompt + completion`` to its first N tokens for training (``None``: no cut)."""
    max_generation_len: int = 4096
    """The Dr. GRPO constant normaliser (the sampler's max new tokens)."""
    poll_interval_s: float = 0.5
    """``train``: seconds between ``buffer.size()`` polls while waiting for a full batch."""
    wait_timeout_s: float | None = 1800.0
    """``train``: give up (``TimeoutError``) when the buffer has gained no step for this long while
    the learner waits for a batch (``None``: wait forever). Steps arrive game by game, so a slow but
    healthy run (a 384-step batch on a 2-core CPU takes minutes) keeps resetting the clock; half an
    hour without a single finished train game means collection is stuck or gone, and a run that
    waits forever hides that."""
    max_consecutive_skips: int = 5
    """``train``: raise after this many non-finite updates in a row (one or two are tolerated)."""

    def __post_init__(self) -> None:
        if not self.model_name:
            raise ValueError("model_name is required (a Hugging Face id or a local path)")
        for name in ("batch_size", "mini_batch_size", "max_generation_len", "max_consecutive_skips"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size % self.mini_batch_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of mini_batch_size "
                f"({self.mini_batch_size}); pick mini_batch_size from its divisors"
            )
        check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        for name in ("learning_rate", "grad_clip", "poll_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.wait_timeout_s is not None and not self.wait_timeout_s > 0:
            raise ValueError(f"wait_timeout_s must be > 0 or None (wait forever), got {self.wait_timeout_s}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.max_train_len is not None and self.max_train_len < 2:
            raise ValueError(f"max_train_len must be >= 2 or None, got {self.max_train_len}")
        for name in ("keep_last", "keep_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if self.initial_version < 0:
            raise ValueError(f"initial_version must be >= 0, got {self.initial_version}")
        if self.use_trainer_cache:
            raise ValueError("use_trainer_cache is not supported (it was a no-op in 0.2); leave it False")
        self.lora_cfg = _complete_lora_cfg(self.lora_cfg)


def _complete_lora_cfg(lora_cfg: dict[str, Any] | None) -> dict[str, Any]:
    cfg = _default_lora_cfg()
    unknown = set(lora_cfg or {}) - set(cfg)
    if unknown:
        raise ValueError(f"unknown lora_cfg keys {sorted(unknown)}; allowed: {sorted(cfg)}")
    cfg.update(lora_cfg or {})
    if cfg["lora_rank"] < 1:
        raise ValueError(f"lora_rank must be >= 1, got {cfg['lora_rank']}")
    if not 0.0 <= cfg["lora_dropout"] < 1.0:
        raise ValueError(f"lora_dropout must be in [0, 1), got {cfg['lora_dropout']}")
    cfg["target_modules"] = list(cfg["target_modules"])
    return cfg


@dataclass
class A2CConfig(LearnerConfig):
    """Settings of :class:`~unstable.learners.A2CLearner`: the base settings plus the critic's."""

    infer_mini_batch_size: int = 16
    """Prompts per no-grad critic forward when computing values for GAE."""
    critic_learning_rate: float = 1e-5
    """AdamW learning rate of the critic (its LoRA adapter and value head)."""
    normalize_adv: bool = True
    """Z-score the GAE advantages per ``env_id`` before the policy loss (returns stay raw)."""
    gamma: float = 1.0
    """Discount between a player's consecutive turns."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: Monte-Carlo return minus the value baseline)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.infer_mini_batch_size < 1:
            raise ValueError(f"infer_mini_batch_size must be >= 1, got {self.infer_mini_batch_size}")
        if not self.critic_learning_rate > 0:
            raise ValueError(f"critic_learning_rate must be > 0, got {self.critic_learning_rate}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
