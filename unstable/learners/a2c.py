"""A2C: REINFORCE with a learned critic and GAE advantages.

Read top to bottom: :meth:`A2CLearner._update` computes ``V(s_t)`` with the critic, GAE per
episode, the policy gradient (REINFORCE's, with the normalised advantages) and the critic's
regression towards the returns; :class:`~unstable.learners.BaseLearner` steps both optimisers.

The critic is a second LoRA adapter (``"critic"``) on the *same* frozen base model plus a
``Linear(hidden, 1)`` value head, with its own AdamW. ``V(s_t)`` is read from the final hidden
state at the **last prompt token**: in a causal model that is the only position that has seen the
whole observation (0.2 read position 0, which only sees the first token).

Rewards and GAE: ``Step.reward`` is taken as the per-turn reward ``r_t`` of the player's MDP
(whatever the buffer's reward transforms made it). The batch's ``episodes`` (whole player
episodes, as an :class:`~unstable.buffers.EpisodeBuffer` hands them out) say which steps form one
episode and in which turn order; each ends at ``is_last`` (bootstrap value 0). GAE runs per
episode with ``gamma``/``gae_lambda``; with the defaults (1, 1) the advantage is
``sum_{k>=t} r_k - V(s_t)``. So a buffer for A2C should put
the game outcome on the last turn only (plus any per-turn shaping): if it copies the outcome onto
every turn, as 0.2's StepBuffer does, GAE will add it up once per remaining turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from unstable.algorithms import compute_gae, explained_variance, group_normalize, value_loss
from unstable.learners import model_utils as mu
from unstable.learners.batching import collate_prompts, pack_rows
from unstable.learners.config import A2CConfig
from unstable.learners.reinforce import REINFORCELearner, _Totals
from unstable.records import Step, TrainBatch

CRITIC_ADAPTER = "critic"  # PEFT saves a non-default adapter in a subfolder of this name
VALUE_HEAD_FILE = "value_head.safetensors"


class A2CLearner(REINFORCELearner):
    """Actor-critic: policy loss as REINFORCE with GAE advantages, value loss ``0.5 * MSE``.

    Checkpoints hold the policy adapter at the root (what inference loads) and the critic in
    ``critic/`` (its adapter + ``value_head.safetensors``); ``initial_lora_path`` restores both.
    ``update`` trains on every step it is given (an episode buffer hands out whole episodes
    totalling at least ``batch_size`` steps; 0.2 subsampled them back to ``batch_size``).
    """

    config_cls = A2CConfig
    config: A2CConfig
    needs_episodes = True
    normalizes_advantages = True

    def __init__(self, model_name: str, **kwargs) -> None:
        super().__init__(model_name, **kwargs)
        cfg = self.config
        critic_dir = Path(cfg.initial_lora_path) / CRITIC_ADAPTER if cfg.initial_lora_path else None
        if critic_dir is not None and critic_dir.is_dir():
            self.model.load_adapter(str(critic_dir), adapter_name=CRITIC_ADAPTER, is_trainable=True)
        else:
            self.model.add_adapter(CRITIC_ADAPTER, mu.lora_config(cfg.lora_cfg))
        self.model.set_adapter(mu.POLICY_ADAPTER)
        hidden = self.model.get_base_model().config.get_text_config().hidden_size
        self.value_head = nn.Linear(hidden, 1).to(self.device)  # float32 whatever the base dtype
        if critic_dir is not None and (critic_dir / VALUE_HEAD_FILE).is_file():
            self.value_head.load_state_dict(load_file(str(critic_dir / VALUE_HEAD_FILE)))
        critic_lora = mu.adapter_parameters(self.model, CRITIC_ADAPTER)
        self.critic_params = [*critic_lora, *self.value_head.parameters()]
        self.critic_optimizer = torch.optim.AdamW(
            self.critic_params, lr=cfg.critic_learning_rate, weight_decay=cfg.weight_decay, eps=cfg.adam_eps
        )

    def initialize_algorithm(
        self,
        infer_mini_batch_size: int = 16,
        critic_learning_rate: float = 1e-5,
        normalize_adv: bool = True,
        gamma: float = 1.0,
        gae_lambda: float = 1.0,
        max_train_len: int | None = None,
        max_generation_len: int = 4096,
    ) -> None:
        """0.2 API: set the critic and GAE settings (validated like the config)."""
        self.config = replace(
            self.config,
            infer_mini_batch_size=infer_mini_batch_size,
            critic_learning_rate=critic_learning_rate,
            normalize_adv=normalize_adv,
            gamma=gamma,
            gae_lambda=gae_lambda,
            max_train_len=max_train_len,
            max_generation_len=max_generation_len,
        )
        for group in self.critic_optimizer.param_groups:
            group["lr"] = critic_learning_rate

    # ---------------------------------------------------------------------------------- update
    def _update(self, batch: TrainBatch) -> dict[str, float]:
        steps = batch.steps
        # 1. critic (no gradient) and GAE per episode
        advantages, returns, old_values = self.advantages(batch)
        # 2. policy: the shared policy-gradient update with the (per-env normalised) advantages;
        # 3. critic: regress V(s_t) towards the returns on the same micro-batches (_auxiliary_backward)
        policy_adv = advantages
        if self.config.normalize_adv:
            policy_adv = group_normalize(advantages, [s.env_id for s in steps])
        self._returns = returns
        metrics = self.policy_gradient(steps, policy_adv)
        metrics.update(
            {
                "train/value_mean": float(old_values.mean()),
                "train/explained_variance": explained_variance(old_values, returns),
                "train/adv_mean": float(advantages.mean()),
                "train/adv_std": float(advantages.std(unbiased=False)),
                "train/return_mean": float(returns.mean()),
            }
        )
        return metrics

    def _auxiliary_backward(self, steps: Sequence[Step], rows: list[int], part_size: int, epoch: int,
                            totals: _Totals) -> None:
        """The critic's regression on the policy's micro-batch, weighted by its share of the part."""
        with self._adapter(CRITIC_ADAPTER):
            predicted = self.values([steps[i] for i in rows])
            target = self._returns[rows].to(self.device)
            loss = value_loss(predicted, target) * (len(rows) / part_size)
            self._backward(loss, "value loss")
        totals.add("value_loss", loss.detach())
        if epoch == 0:
            totals.add("value_abs_err", (predicted.detach() - target).abs().sum())

    def _metrics(self, totals: _Totals, n: int, optimizer_steps: int) -> dict[str, float]:
        metrics = super()._metrics(totals, n, optimizer_steps)
        metrics["train/value_loss"] = totals.get("value_loss") / optimizer_steps
        metrics["train/value_mae"] = totals.get("value_abs_err") / n
        return metrics

    # ---------------------------------------------------------------------------------- critic
    def advantages(self, batch: TrainBatch) -> tuple[Tensor, Tensor, Tensor]:
        """``(advantages, returns, values)`` per step of ``batch``: GAE per episode with the current critic."""
        rewards = torch.tensor([s.reward for s in batch.steps], dtype=torch.float32)
        values = torch.stack(self._sharded(batch.steps, lambda steps: list(self._old_values(steps))))
        advantages = torch.zeros_like(rewards)
        returns = torch.zeros_like(rewards)
        for episode in batch.episodes:
            idx = list(episode)
            adv, ret = compute_gae(rewards[idx], values[idx], self.config.gamma, self.config.gae_lambda)
            advantages[idx] = adv
            returns[idx] = ret
        return advantages, returns, values

    def values(self, steps: Sequence[Step]) -> Tensor:
        """``V(s)`` of each step's prompt (call inside ``self._adapter(CRITIC_ADAPTER)``)."""
        input_ids, attention_mask = collate_prompts(steps, self.config.max_train_len, self.pad_id)
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        last = attention_mask.sum(dim=1) - 1
        if self.packed:  # one row, position ids restarting per prompt (see batching.pack_rows)
            ids, positions, offsets = pack_rows(attention_mask, input_ids)
            with self._lora_compute():
                hidden = mu.decoder_body(self.model)(input_ids=ids, position_ids=positions, use_cache=False)
            at_last_prompt_token = hidden.last_hidden_state[0, offsets + last]
        else:
            with self._lora_compute():
                hidden = mu.decoder_body(self.model)(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=False
                ).last_hidden_state
            at_last_prompt_token = hidden[torch.arange(hidden.shape[0], device=self.device), last]
        return self.value_head(at_last_prompt_token.float()).squeeze(-1)

    @torch.no_grad()
    def _old_values(self, steps: Sequence[Step]) -> Tensor:
        self.model.eval()
        chunk = self.config.infer_mini_batch_size
        try:
            with self._adapter(CRITIC_ADAPTER):
                parts = [self.values(steps[i : i + chunk]).cpu() for i in range(0, len(steps), chunk)]
        finally:
            self.model.train()
        return torch.cat(parts)

    # ------------------------------------------------------------------- optimisers, checkpoints
    def _param_groups(self) -> dict[str, tuple[torch.optim.Optimizer, list[nn.Parameter]]]:
        groups = super()._param_groups()
        groups["train/critic_grad_norm"] = (self.critic_optimizer, self.critic_params)
        return groups

    def _write_checkpoint(self, directory: Path) -> None:
        self.model.save_pretrained(str(directory), selected_adapters=[*self._saved_adapters(), CRITIC_ADAPTER])
        state = {k: v.detach().cpu().contiguous() for k, v in self.value_head.state_dict().items()}
        save_file(state, str(directory / CRITIC_ADAPTER / VALUE_HEAD_FILE))
