"""Learner configs: one dataclass per learner, validated on construction (and on ``replace``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from unstable.algorithms.policy_gradient import Correction, KLEstimator, LossType, RatioLevel
from unstable.inference.adapters import DEFAULT_LORA_CFG, complete_lora_cfg
from unstable.local_models.resolve import is_tiny_name, tiny_name_parts
from unstable.utils.checks import check_choice
from unstable.utils.schema import check_fields, setting

MAX_LEARNING_RATE = 1.0
"""The largest ``learning_rate``: LoRA adapters train at 1e-6 .. 1e-3; a rate above 1 (``1e6``, a typo'd
exponent) only turns the weights into NaNs after the run started."""
LR_SCHEDULES = ("constant", "linear")
MICRO_BATCHING = ("auto", "packed", "buckets")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention", "flash_attention_2")
LORA_COMPUTE_DTYPES = ("base", "float32")
OLD_LOGPROBS = ("recompute", "behaviour")
LEARNER_DTYPES = ("bfloat16", "bf16", "float16", "fp16", "float32", "fp32")
"""The base-weight dtypes a learner loads in (:func:`unstable.learners.model_utils.resolve_dtype`'s names)."""
STEP_FIELDS = ("env_id", "game_id", "player_id", "turn_index", "prompt")


@dataclass
class LearnerConfig:
    """Settings of :class:`~unstable.learners.REINFORCELearner` (and the base of A2C's)."""

    model_name: str
    """Base model: any Hugging Face id or local directory."""
    lora_cfg: dict[str, Any] = setting(factory=lambda: dict(DEFAULT_LORA_CFG))
    """LoRA settings; keys ``lora_rank``, ``lora_alpha``, ``lora_dropout``, ``target_modules``
    (missing keys take the defaults above)."""
    batch_size: int = setting(384, ge=1, flat="batch_size")
    """Steps per optimiser step (what ``train`` pulls from the buffer)."""
    mini_batch_size: int = setting(1, ge=1, flat="mini_batch_size")
    """Size of a forward/backward: a micro-batch holds at most ``mini_batch_size`` times the longest
    step's tokens, padding included. Steps of similar length are grouped (shorter ones share a
    pass) and a micro-batch is at most 10 % padding; gradients are accumulated over them."""
    learning_rate: float = setting(1e-5, gt=0, flat="learning_rate")
    """AdamW learning rate of the policy adapter (see ``lr_schedule``)."""
    lr_schedule: Literal[LR_SCHEDULES] = setting("constant", flat="lr_schedule")
    """``"constant"``, or ``"linear"``: decay from ``learning_rate`` towards 0 over the run, the
    update to version ``v`` using ``learning_rate * (1 - v / N)`` where ``train(n)`` sets the
    last version ``N = version + n`` (so a resumed run continues the same schedule)."""
    grad_clip: float = setting(0.2, gt=0, flat="gradient_clipping")
    """Global gradient-norm clip (``clip_grad_norm_``)."""
    weight_decay: float = setting(0.0, ge=0)
    """AdamW weight decay. The reference left torch's default (0.01) on the LoRA weights."""
    adam_eps: float = setting(1e-8, gt=0)
    """AdamW's ``eps`` (torch's default 1e-8), for every optimiser the learner steps. A step is
    ``lr * m / (sqrt(v) + eps)``: with the default, a weight whose gradients are tiny still moves by
    about ``lr`` once they point one way. An ``eps`` near the typical ``sqrt(v)`` (the learner's
    trainer state holds ``exp_avg_sq``) shrinks those steps, towards SGD with rate ``lr / eps``."""
    activation_checkpointing: bool = setting(True, flat="activation_checkpointing")
    """Take the sampled tokens' log-probs (and entropies) with the chunked head fused with the LM
    head (:func:`~unstable.algorithms.chunked_target_logprobs`): never more than
    ``logprob_chunk_tokens`` rows of the ``[tokens, vocabulary]`` float32 logits exist, in forward
    or backward, which recomputes each chunk's logits once. ``False``: the plain head, which holds
    the whole ``[tokens, vocabulary]`` logits and their float32 log-softmax until backward (about
    ``2 * tokens * vocab * 4`` bytes more at the update's peak). A model whose LM head is not a plain
    ``Linear`` (a logit soft-cap, a LoRA on the head) always takes the plain head."""
    logprob_chunk_tokens: int = setting(512, ge=1)
    """Rows of the logits the chunked head computes at once: its working memory is about four float32
    ``[logprob_chunk_tokens, vocabulary]`` tensors (Qwen3, 512 rows: ~1.2 GB)."""
    micro_batching: Literal[MICRO_BATCHING] = "auto"
    """How a part of the batch is cut into forward/backward passes. ``"buckets"``: steps of similar
    length padded together (``mini_batch_size``; best on a CPU, where attention is cheap and padding
    is not). ``"packed"``: the steps of a micro-batch concatenated into one row with position ids
    restarting per step (no padding, no attention between steps), up to
    ``max_tokens_per_micro_batch`` tokens (best on a GPU). ``"auto"``: packed on CUDA, else buckets."""
    attn_implementation: Literal[ATTN_IMPLEMENTATIONS] | None = None
    """The attention kernel of the learner's model (transformers' ``attn_implementation``):
    ``"sdpa"``, ``"eager"``, ``"flex_attention"`` or ``"flash_attention_2"`` (needs the flash-attn
    package). ``None``: transformers' default (SDPA). With packed rows SDPA is given a materialised
    block-diagonal mask; ``"flex_attention"`` skips the masked blocks instead (on an H200, 8 steps of
    4,096 tokens packed two a row: 1.13 s against 1.66 s a pass, after a first call of about a minute
    that compiles it; docs/hardware.md). No backward on a CPU (torch), so refused there."""
    max_tokens_per_micro_batch: int = setting(8192, ge=1)
    """``micro_batching="packed"``: tokens (prompt + completion) of one forward/backward, which
    bounds the activation memory; a longer step goes alone. Gradients are accumulated over the
    passes up to each optimiser step as with buckets."""
    gradient_checkpointing: bool = setting(True, flat="gradient_checkpointing")
    """Hugging Face per-decoder-layer checkpointing (non-reentrant). Costs time; on CPU leave it off."""
    use_trainer_cache: bool = setting(False, flat="use_trainer_cache")
    """Accepted for compatibility with 0.2 scripts; it did nothing there and must stay False."""
    initial_lora_path: str | None = None
    """A PEFT adapter directory to start from (its own ``adapter_config.json`` wins over
    ``lora_cfg``). For A2C a ``critic/`` subfolder, if present, restores the critic too."""
    initial_version: int = setting(0, ge=0)
    """Version of the starting weights; the first update writes ``ckpt-{initial_version + 1}``."""
    restore_training_state: bool = False
    """Resume: also restore the optimiser states, RNG states and skip counter saved in
    ``initial_lora_path/trainer_state.pt`` (its version must equal ``initial_version``)."""
    output_dir: str = "checkpoints"
    """Checkpoints go to ``output_dir/ckpt-{version}``."""
    lineage: str | None = None
    """The trainable model this learner trains, in a run with several: its checkpoints are registered
    as ``<lineage>-ckpt-N`` in that lineage, and its metrics are logged as ``<lineage>/train/...``.
    ``None``: the run's one model (``ckpt-N``, ``train/...``)."""
    device: str | None = None
    """``"cuda"``, ``"cuda:1"``, ``"cpu"``... ``None``: cuda if available else cpu."""
    dtype: Literal[LEARNER_DTYPES] | None = None
    """Base-weight dtype (``"bfloat16"``, ``"float16"``, ``"float32"``). ``None``: bf16 on CUDA,
    fp32 on CPU. LoRA weights and optimiser state stay float32 either way."""
    lora_compute_dtype: Literal[LORA_COMPUTE_DTYPES] = "base"
    """With bfloat16 base weights: ``"base"`` runs the LoRA products in bfloat16 too (autocast; the
    LoRA weights, gradients and optimiser state stay float32, as with TRL's ``bf16=True``);
    ``"float32"`` keeps PEFT's default, which casts every adapted layer's input to float32 and adds
    float32 products (more memory traffic than the frozen matmuls on a GPU). No effect with float16
    or float32 base weights (see :func:`unstable.learners.model_utils.lora_compute`)."""
    keep_last: int | None = setting(3, ge=1)
    """Keep the newest N checkpoints (``None`` keeps all)."""
    keep_every: int | None = setting(None, ge=1)
    """Also keep every checkpoint whose version is a multiple of K."""
    seed: int | None = None
    """``torch.manual_seed`` before building the adapters (reproducible LoRA init)."""
    max_train_len: int | None = setting(None, ge=2, flat="max_train_len")
    """Cut ``prompt + completion`` to its first N tokens for training (``None``: no cut)."""
    max_generation_len: int = setting(4096, ge=1, flat="max_generation_len")
    """The Dr. GRPO constant normaliser (the sampler's max new tokens)."""
    poll_interval_s: float = setting(0.5, gt=0)
    """``train``: seconds between ``buffer.size()`` polls while waiting for a full batch."""
    wait_timeout_s: float | None = 1800.0
    """``train``: give up (``TimeoutError``) when the buffer has gained no step for this long while
    the learner waits for a batch (``None``: wait forever). Steps arrive game by game, so a slow but
    healthy run (a 384-step batch on a 2-core CPU takes minutes) keeps resetting the clock; half an
    hour without a single finished train game means collection is stuck or gone, and a run that
    waits forever hides that."""
    max_consecutive_skips: int = setting(5, ge=1)
    """``train``: raise after this many non-finite updates in a row (one or two are tolerated)."""

    # ---- the policy loss (``unstable.algorithms.policy_loss``); the algorithm table of docs/algorithms.md
    loss_type: LossType = "dr_grpo"
    """How per-token losses become one number: ``"dr_grpo"`` (sum / (sequences * max_generation_len),
    Dr. GRPO's constant), ``"grpo"`` (mean per sequence, then over sequences), ``"bnpo"``/``"dapo"``
    (mean over all tokens of the batch)."""
    clip_ratio: float | None = None
    """PPO's clip epsilon: the ratio pi/pi_old is clipped to ``[1 - clip_ratio, 1 + clip_ratio_high]``.
    ``None``: no clipping (REINFORCE). Active only from the second optimiser step on a batch
    (``epochs`` or ``minibatches`` > 1), or always with ``old_logprobs="behaviour"``."""
    clip_ratio_high: float | None = None
    """Upper clip epsilon (DAPO's clip-higher); ``None``: the same as ``clip_ratio``."""
    ratio_level: RatioLevel = "token"
    """``"token"``: one ratio per token (PPO, GRPO); ``"sequence"``: GSPO's length-normalised
    sequence ratio ``exp(mean_t log(pi/pi_old))``, the same for every token of a completion;
    ``"sequence_token"``: GSPO-token, that ratio's value with a per-token gradient, which differs from
    ``"sequence"`` only where a completion's tokens have different advantages (a learner of your own:
    the built-in ones give each completion one advantage, so for them the update is the same)."""
    epochs: int = setting(1, ge=1)
    """Passes over each batch (PPO's epochs)."""
    minibatches: int = setting(1, ge=1)
    """Optimiser steps per epoch: the batch is shuffled and split into this many parts (at most
    ``batch_size // mini_batch_size``; each part is still accumulated in micro-batches)."""
    old_logprobs: Literal[OLD_LOGPROBS] = "recompute"
    """What the clipped ratio is taken against. ``"recompute"`` (default): the learner's own
    log-probs at the start of the update (one extra no-grad forward when ``epochs * minibatches >
    1``, free otherwise), as PPO and AReaL's decoupled PPO do; the gap from the behaviour policy
    that sampled the tokens (staleness, backend numerics) is then handled by
    ``off_policy_correction``. ``"behaviour"``: the log-probs recorded at generation, so the clip
    itself bounds how far the update moves from the policy that sampled (no correction then)."""
    off_policy_correction: Correction = "none"
    """Importance weights pi_old/mu against the behaviour log-probs ``mu`` the backend recorded:
    ``"token_truncate"``/``"sequence_truncate"`` (truncated IS: ``min(rho, correction_cap)``, per
    token or per completion), ``"token_mask"``/``"sequence_mask"`` (drop tokens or completions whose
    ratio leaves ``[correction_floor, correction_cap]``), or ``"none"``."""
    correction_cap: float = setting(2.0, ge=1)
    """Upper bound of the importance weight (truncate) or of the kept range (mask); >= 1."""
    correction_floor: float | None = setting(None, ge=0, le=1)
    """Lower bound of the kept range for the ``*_mask`` corrections (see
    :func:`unstable.algorithms.importance_weights` for the default)."""
    beta: float = setting(0.0, ge=0)
    """Weight of the KL penalty to the reference policy (0: none, and no reference forward)."""
    kl_estimator: KLEstimator = "k3"
    """``"k1"``, ``"k2"`` or ``"k3"`` (Schulman's estimators of KL(pi || pi_ref)). Where a token was drawn
    among a few (``legal_moves_only``) the KL over them is computed exactly instead
    (:func:`~unstable.algorithms.exact_kl`)."""
    reference_adapter: str | None = None
    """The KL reference: ``None`` is the base model with the adapter disabled (the warm start when
    the base is a warm-started model); a PEFT adapter directory is loaded frozen and used instead."""
    magnet_every: int | None = setting(None, ge=1)
    """Magnet-regularised self-play: every ``magnet_every`` updates the KL reference (the "magnet") becomes a
    frozen copy of the current policy, so ``beta``'s pull moves with the policy instead of holding it at
    its start (Magnetic Mirror Descent, Sokota et al. 2023, arXiv 2206.05825; R-NaD's regularisation
    policy, Perolat et al. 2022, arXiv 2206.15378). The first magnet is the starting policy; checkpoints
    carry it (``reference/``) so a resumed run keeps it; ``train/magnet_version`` is the version of the
    magnet an update was pulled towards. Needs ``beta > 0``. ``None``: the reference stays fixed (the
    base model, or ``reference_adapter``)."""
    average_reservoir: int | None = setting(None, ge=1)
    """NFSP's average policy (Heinrich & Silver 2016, arXiv 1603.01121): a second LoRA adapter, saved in each
    checkpoint's ``average/``, fitted by supervised learning to a reservoir of this many of the policy's own
    past moves (Vitter's algorithm R: a uniform sample of every move trained on), one step of
    ``average_batch_size`` moves per update (see :mod:`unstable.learners.average`). ``None``: no average
    policy. The opponent sampler's ``average_eta`` seats it in games (NFSP's anticipatory play). It is the policy
    NFSP reports: the eval games seat it instead of the policy, the in-run exploitability reads it beside the
    policy, and ``unstable quickstart`` evaluates it at the end beside the final checkpoint."""
    average_batch_size: int = setting(64, ge=1)
    """Moves drawn from the reservoir for each supervised step of the average policy."""
    average_learning_rate: float = setting(1e-4, gt=0, le=MAX_LEARNING_RATE)
    """AdamW learning rate of the average policy's adapter."""
    entropy_coef: float = setting(0.0, ge=0)
    """Weight of the entropy bonus (subtracted from the loss); 0: entropy is only measured. The entropy is
    the next-token entropy over the whole vocabulary at every completion token, which rewards illegal
    answers as much as legal ones; to keep a game policy stochastic over its moves, prefer ``beta`` with a
    magnet (the KL to a policy that spreads over the legal moves)."""

    def __post_init__(self) -> None:
        check_fields(self)  # first: the rules below compare the values
        if not self.model_name:
            raise ValueError("model_name is required (a Hugging Face id or a local path)")
        if is_tiny_name(self.model_name):
            tiny_name_parts(self.model_name)  # the name's form; the model is built where it is loaded
        self.lora_cfg = complete_lora_cfg(self.lora_cfg)
        for rule in (self._check_batch, self._check_learning_rate, self._check_policy_loss):
            rule()
        if self.device is not None:
            check_attention(self.attn_implementation, self.device)
        if self.wait_timeout_s is not None and not self.wait_timeout_s > 0:
            raise ValueError(f"wait_timeout_s must be > 0 or None (wait forever), got {self.wait_timeout_s}")
        if self.use_trainer_cache:
            raise ValueError("use_trainer_cache=True is not supported (it was a no-op in 0.2); leave it False")

    def _check_batch(self) -> None:
        if self.batch_size % self.mini_batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of mini_batch_size "
                             f"({self.mini_batch_size}); pick mini_batch_size from its divisors")
        if self.minibatches > self.batch_size // self.mini_batch_size:
            raise ValueError(f"minibatches ({self.minibatches}) must be at most batch_size // mini_batch_size "
                             f"({self.batch_size // self.mini_batch_size}): each optimiser step needs a micro-batch")

    def _check_learning_rate(self) -> None:
        if self.learning_rate > MAX_LEARNING_RATE:
            raise ValueError(f"learning_rate must be a number in (0, {MAX_LEARNING_RATE:g}], got "
                             f"{self.learning_rate!r}: LoRA adapters train at about 1e-6 .. 1e-3 (a missing minus in "
                             "the exponent?)")

    def _check_policy_loss(self) -> None:
        if self.clip_ratio is not None and not 0 < self.clip_ratio < 1:
            raise ValueError(f"clip_ratio must be in (0, 1) or None (no clipping), got {self.clip_ratio!r}")
        if self.clip_ratio_high is not None and not self.clip_ratio_high > 0:
            raise ValueError(f"clip_ratio_high must be > 0 or None (= clip_ratio), got {self.clip_ratio_high!r}")
        if self.clip_ratio_high is not None and self.clip_ratio is None:
            raise ValueError("clip_ratio_high needs clip_ratio (the lower side) too; "
                             "set both, or neither for no clipping")
        if self.correction_floor is not None and not self.off_policy_correction.endswith("_mask"):
            raise ValueError(f"correction_floor only applies to the *_mask corrections, "
                             f"not off_policy_correction={self.off_policy_correction!r}")
        if self.ratio_level.startswith("sequence") and self.off_policy_correction.startswith("token_"):
            raise ValueError(f"off_policy_correction={self.off_policy_correction!r} weighs single tokens, but "
                             f"ratio_level={self.ratio_level!r} (GSPO) treats a completion as one action; use "
                             "'sequence_truncate' or 'sequence_mask'")
        if self.old_logprobs == "behaviour" and self.off_policy_correction != "none":
            raise ValueError(f"off_policy_correction={self.off_policy_correction!r} corrects from the behaviour "
                             "policy to the recomputed old policy; with old_logprobs='behaviour' the ratio is "
                             "already taken against the behaviour policy; set off_policy_correction='none'")
        if self.reference_adapter is not None and self.beta == 0:
            raise ValueError("reference_adapter is only read for the KL penalty; set beta > 0 or drop it")
        if self.magnet_every is not None:
            if self.beta == 0:
                raise ValueError("magnet_every moves the KL reference; with beta = 0 there is no KL penalty: set "
                                 "beta > 0 (e.g. 0.1) or drop magnet_every")
            if self.reference_adapter is not None:
                raise ValueError("magnet_every makes the KL reference a copy of the policy; drop reference_adapter "
                                 "(the first magnet is the starting policy)")

    @property
    def uses_behaviour_ratio(self) -> bool:
        """True when the loss weighs samples by a ratio to the behaviour log-probs ``mu``."""
        return self.old_logprobs == "behaviour" or self.off_policy_correction != "none"


def check_attention(attn_implementation: str | None, device: Any) -> None:
    """``flex_attention`` needs a CUDA ``device`` (torch has no backward for it on a CPU)."""
    if attn_implementation == "flex_attention" and not str(device).startswith("cuda"):
        raise ValueError("attn_implementation 'flex_attention' has no backward on a CPU (torch); leave it None (SDPA) "
                         "there")


@dataclass
class A2CConfig(LearnerConfig):
    """Settings of :class:`~unstable.learners.A2CLearner`: the base settings plus the critic's."""

    infer_mini_batch_size: int = setting(16, ge=1)
    """Prompts per no-grad critic forward when computing values for GAE."""
    critic_learning_rate: float = setting(1e-5, gt=0)
    """AdamW learning rate of the critic (its LoRA adapter and value head)."""
    normalize_adv: bool = True
    """Z-score the GAE advantages per ``env_id`` before the policy loss (returns stay raw)."""
    gamma: float = setting(1.0, ge=0, le=1)
    """Discount between a player's consecutive turns."""
    gae_lambda: float = setting(1.0, ge=0, le=1)
    """GAE lambda (1.0: Monte-Carlo return minus the value baseline)."""



@dataclass
class PPOConfig(A2CConfig):
    """Settings of :class:`~unstable.learners.PPOLearner`: A2C's critic and GAE with PPO's clipped
    surrogate, two epochs of two mini-batches per batch, and truncated importance sampling from
    the behaviour policy (Schulman et al. 2017; the correction as in AReaL's decoupled PPO)."""

    clip_ratio: float | None = 0.2
    epochs: int = setting(2, ge=1)
    minibatches: int = setting(2, ge=1)
    off_policy_correction: Correction = "token_truncate"


@dataclass
class GRPOConfig(LearnerConfig):
    """Settings of :class:`~unstable.learners.GRPOLearner`: group-relative advantages (Shao et al.
    2024), the clipped surrogate, and truncated importance sampling from the behaviour policy."""

    clip_ratio: float | None = 0.2
    off_policy_correction: Correction = "token_truncate"
    group_by: tuple[str, ...] = ("env_id", "player_id")
    """The Step fields whose values form a group: each step's advantage is its reward minus its
    group's mean (over the batch). Games: the same env and seat (``("env_id", "player_id")``);
    single-turn tasks: the samples of one prompt (``("env_id", "prompt")``)."""
    scale_rewards: bool = True
    """Also divide by the group's standard deviation (GRPO); ``False`` is Dr. GRPO's unscaled form."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.group_by, list | tuple) or not self.group_by:
            raise ValueError(f"group_by must be a non-empty tuple of Step fields from {STEP_FIELDS}, "
                             f"got {self.group_by!r}")
        self.group_by = tuple(self.group_by)
        for name in self.group_by:
            check_choice("group_by", name, STEP_FIELDS)


@dataclass
class GSPOConfig(GRPOConfig):
    """Settings of :class:`~unstable.learners.GSPOLearner`: GRPO's advantages with GSPO's
    length-normalised sequence ratio and its small clip range (Zheng et al. 2025, 3e-4 / 4e-4),
    the loss averaged per sequence, and sequence-level truncated importance sampling."""

    ratio_level: RatioLevel = "sequence"
    clip_ratio: float | None = 3e-4
    clip_ratio_high: float | None = 4e-4
    loss_type: LossType = "grpo"
    off_policy_correction: Correction = "sequence_truncate"
