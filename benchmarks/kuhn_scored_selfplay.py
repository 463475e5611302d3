"""Kuhn self-play with the 1M model scoring the legal answers: the recipe's update with the answer format taken away.

The Kuhn recipe's runs (``configs/kuhn-hand-selfplay-mmd.yaml``) reach a second-half average below 0.10 when
the table is conditioned on a legal answer, but the model also sends answers the game rejects, and in format
crises most of its mass leaves the legal answers. This benchmark asks what the same model would reach if it
could not leave them: its policy at an information set is the softmax, over the legal moves, of the
log-probability of each move's canonical answer (answer tokens and the stop token after them) after the
``qwen3-hand`` prompt. That is action scoring, the policy of GLAM (Carta et al., "Grounding Large Language
Models in Interactive Environments with Online Reinforcement Learning", ICML 2023, arXiv 2302.02662), and it
is the table :func:`unstable.eval.exploitability.legal_only` reads from a checkpoint.

Everything else is the tabular twin's (:func:`kuhn_tabular_selfplay.run`): mirror self-play hands sampled from
the policy's 12 x 2 table, at least ``--batch`` moves an update, GRPO advantages with one group per information
set, the library's :func:`~unstable.algorithms.policy_loss` with the KL to a magnet, Adam. The parameters are a
LoRA adapter (the recipe's rank 8, alpha 16, all seven projections) on the recipe's warm start, whose gradients
flow through the 24 scored answers. The exact exploitability of the scored table is read after every update:
it is the policy as played when the moves are chosen this way.

    .venv/bin/python benchmarks/kuhn_scored_selfplay.py --warm-start WARM_START_DIR --updates 800 --seeds 0

``--warm-start``: the model directory of the recipe's warm start (``unstable quickstart --config
configs/kuhn-hand-selfplay-mmd.yaml --seed N`` builds it into ``~/.cache/unstable/warm-starts/``; a run's
checkpoints name it as their ``base_model_name_or_path``); ``{seed}`` in it is replaced by each seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kuhn_tabular_selfplay import run, summary_line

from unstable.eval.game_states import kuhn_states
from unstable.eval.solvers.kuhn import INFO_SETS, LEGAL_ACTIONS
from unstable.games.extraction import answer_text
from unstable.games.templates import get_template

ENV_ID = "KuhnPoker-v0-chips-train"
TEMPLATE = "qwen3-hand"
RECIPE_LORA = {"lora_rank": 8, "lora_alpha": 16}


class ScoredPolicy:
    """A causal LM with a fresh LoRA adapter whose policy at each of Kuhn's 12 information sets is the softmax of
    the legal moves' answer log-probabilities (temperature 1, as the recipe samples)."""

    def __init__(self, model_dir: str, seed: int, lora: dict[str, Any] | None = None):
        from peft import get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from unstable.inference.adapters import complete_lora_cfg
        from unstable.learners.model_utils import lora_config

        torch.manual_seed(seed)  # the adapter's initial A matrices
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        eos = base.generation_config.eos_token_id
        eos = eos if eos is not None else self.tokenizer.eos_token_id
        self.eos = torch.tensor(sorted(set(eos if isinstance(eos, list) else [eos])))
        self.model = get_peft_model(base, lora_config(complete_lora_cfg({**RECIPE_LORA, **(lora or {})})))
        render = get_template(TEMPLATE)
        states = kuhn_states(ENV_ID)
        rows: list[list[int]] = []
        spans: list[tuple[int, int]] = []  # (first answer token's position, answer length) per row
        for key in INFO_SETS:  # "J:check,bet" -> the state ("J", ("check", "bet"))
            card, history = key.split(":", 1)
            state = states[(card, tuple(history.split(",")) if history else ())]
            prompt = self.tokenizer(render(state.observation), add_special_tokens=False)["input_ids"]
            if sorted(m.strip("[]") for m in state.moves) != sorted(LEGAL_ACTIONS[history]):
                raise AssertionError(f"{key}: the game's legal moves {state.moves} are not {LEGAL_ACTIONS[history]}")
            for move in LEGAL_ACTIONS[history]:
                answer = self.tokenizer(answer_text(f"[{move}]"), add_special_tokens=False)["input_ids"]
                rows.append(prompt + answer)
                spans.append((len(prompt), len(answer)))
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else int(self.eos[0])
        self.ids = torch.full((len(rows), width), pad, dtype=torch.long)
        self.mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):  # right padding: each answer's positions are its own
            self.ids[r, :len(row)] = torch.tensor(row)
            self.mask[r, :len(row)] = 1
        self.spans = spans

    def parameters(self) -> list[torch.Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def log_probs(self) -> torch.Tensor:
        """``[12, 2]``: log of the softmax over each information set's two answers' sequence log-probabilities."""
        logits = self.model(input_ids=self.ids, attention_mask=self.mask).logits.float()
        logp = logits.log_softmax(-1)
        scores = []
        for r, (start, length) in enumerate(self.spans):
            tokens = self.ids[r, start:start + length]
            answer = logp[r, start - 1:start + length - 1].gather(-1, tokens[:, None]).sum()
            stop = logp[r, start + length - 1, self.eos].logsumexp(-1)  # a stop token follows the answer
            scores.append(answer + stop)
        return torch.stack(scores).view(len(INFO_SETS), 2).log_softmax(-1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warm-start", required=True, help="a model directory; {seed} is replaced by the seed")
    p.add_argument("--updates", type=int, default=400)
    p.add_argument("--batch", type=int, default=128, help="moves an update (at least; whole hands)")
    p.add_argument("--lr", type=float, default=2e-3, help="the recipe's")
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--magnet-every", type=int, default=20)
    p.add_argument("--grad-clip", type=float, default=1.0, help="the recipe's grad_clip")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="JSON result file")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for seed in args.seeds:
        model_dir = args.warm_start.format(seed=seed)
        t0 = time.perf_counter()
        policy = ScoredPolicy(model_dir, seed)
        result = run(args.updates, args.batch, args.lr, args.beta, args.magnet_every, "scored", seed,
                     scale_rewards=False, policy=policy, grad_clip=args.grad_clip)
        result.update(warm_start=model_dir, wall_s=round(time.perf_counter() - t0, 1), policy="scored 1M model",
                      lora={**RECIPE_LORA})
        results.append(result)
        print(f"seed {seed} ({result['wall_s']} s): {summary_line(result)}", flush=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
