"""Can the 1M model learn a per-board answer from reward alone? TicTacToe's immediate wins as a contextual bandit.

Self-play on TicTacToe from a start that knows only the rules did not learn (docs/training.md), where the
tabular twin of the same update did. This isolates the per-board learning signal: the contexts are boards on
which the player to move can win at once (``--boards`` of them, fixed), the reward of an answer is 1 for a
winning cell, 0 for another legal cell and ``--invalid-penalty`` for an answer the game would refuse, minus the
batch's mean (one baseline, as one GRPO group). Each update trains the library's learner (``--algorithm``,
the run's ``beta`` to the warm start) on ``--batch`` answers sampled from its latest adapter, boards drawn
uniformly from the training set. After every ``--read-every`` updates the exact policy is read on the training
boards and on as many held-out ones: the mean probability of a winning cell (``win``) and of an answer that is
not a legal cell (``invalid``). Several ``--lrs`` run one after another on the same boards and batches.

The tabular twin: a softmax table over the training boards' empty cells, the same rewards and baseline on the
same board draws, plain gradient steps of ``--table-lr`` (0.05, the self-play twin's) on the logits.

    .venv/bin/python benchmarks/tictactoe_bandit.py --lrs 2e-3,5e-3,1e-2 --updates 60
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import add_common_args, machine, quiet_libraries, write_result
from learning_signal import make_learner

ROOT = Path(__file__).resolve().parents[1]


def win_boards(env_id: str, template: str, count: int, seed: int) -> tuple[list[dict], list[dict]]:
    """``count`` training and ``count`` held-out boards where the player to move wins at once: prompt, legal
    moves, winning moves."""
    from unstable.eval.game_states import tictactoe_states
    from unstable.eval.solvers.tictactoe import reachable_boards, to_move
    from unstable.games.templates import render_prompt
    from unstable.policies.baselines import completing_cells

    def wins(board: str) -> tuple[str, ...]:
        return tuple(f"[{c}]" for c in completing_cells(tuple(m.strip() for m in board), to_move(board)))

    chosen = random.Random(seed).sample([b for b in reachable_boards() if wins(b)], 2 * count)
    states = tictactoe_states(env_id, chosen)
    rows = [{"board": b, "prompt": render_prompt(template, states[b].observation), "moves": states[b].moves,
             "wins": wins(b)} for b in chosen]
    return rows[:count], rows[count:]


def read(backend: Any, adapter: str | None, rows: list[dict], top_p: float) -> dict[str, float]:
    """Mean exact probability of a winning cell, and of anything but a legal cell, over ``rows`` (as sampled
    at ``top_p``)."""
    from unstable.eval.policy_reading import PolicyReader
    from unstable.inference.base import SamplingParams

    reader = PolicyReader(backend, adapter, SamplingParams(temperature=1.0, top_p=top_p, max_new_tokens=16))
    dists = reader.read_exact([r["prompt"] for r in rows], [r["moves"] for r in rows])
    win = [sum(d.probs[m] for m in r["wins"]) for r, d in zip(rows, dists, strict=True)]
    return {"win": sum(win) / len(win), "invalid": sum(d.other for d in dists) / len(dists)}


def train_only_unsure_tokens(below: float) -> None:
    """An experiment on the loss, not a library setting: the policy-gradient term of the learners counts only the
    tokens the policy gave a probability below ``below`` (a sampled format token the policy was sure of gets no
    advantage; the KL term still counts every token). It asks whether the negative advantages of bad answers, which
    also push down their format tokens, are what breaks the format at large learning rates."""
    import unstable.learners.reinforce as reinforce

    original = reinforce.policy_loss

    def masked(logp, old_logp, advantages, mask, **settings):
        unsure = (logp.detach().exp() < below).to(logp.dtype)
        per_row = advantages.to(logp.dtype)
        return original(logp, old_logp, (per_row[:, None] if per_row.dim() == 1 else per_row) * unsure, mask,
                        **settings)

    reinforce.policy_loss = masked


def run_model(model: str, lr: float, train: list[dict], held: list[dict], draws: list[list[int]], args: Any,
              env_id: str) -> list[dict[str, Any]]:
    from unstable.games.extraction import get_action_extraction
    from unstable.inference.base import GenerationRequest, SamplingParams
    from unstable.inference.transformers_backend import TransformersBackend
    from unstable.records import Step, TrainBatch

    extract = get_action_extraction("default")
    sampling = SamplingParams(temperature=1.0, top_p=args.top_p, max_new_tokens=16)
    backend = TransformersBackend(model, device="cpu", max_batch_size=args.batch)
    curve, adapter, started = [], None, time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ttt-bandit-") as out:
        lora = {"lora_cfg": {"target_modules": args.lora_targets.split(",")}} if args.lora_targets else {}
        learner = make_learner(args.algorithm, model, out, args.batch, lr, args.seed, beta=args.beta, **lora)
        curve.append({"update": 0, "train": read(backend, None, train, args.top_p),
                      "held_out": read(backend, None, held, args.top_p)})
        for update, picks in enumerate(draws, start=1):
            rows = [train[i] for i in picks]
            results = backend.generate_batch([GenerationRequest(r["prompt"], adapter, sampling) for r in rows])
            moves = [extract(res.sample.text).action for res in results]
            raw = [1.0 if m in r["wins"] else 0.0 if m in r["moves"] else args.invalid_penalty
                   for r, m in zip(rows, moves, strict=True)]
            mean = sum(raw) / len(raw)
            steps = [Step(env_id=env_id, game_id=update * args.batch + i, player_id=0, turn_index=0,
                          sample=res.sample, reward=x - mean, final_reward=x - mean, policy_version=learner.version,
                          format_ok=m in r["moves"], invalid=m not in r["moves"], is_last=True, prompt=r["prompt"])
                     for i, (r, res, m, x) in enumerate(zip(rows, results, moves, raw, strict=True))]
            adapter = learner.update(TrainBatch.from_steps(steps, group_episodes=learner.needs_episodes)).adapter_path
            if update % args.read_every == 0 or update == len(draws):
                refused = Counter(res.sample.text for res, m, r in zip(results, moves, rows, strict=True)
                                  if m not in r["moves"])  # this update's answers the game would refuse
                point = {"update": update, "sampled_reward": mean, "refused_answers": dict(refused.most_common(5)),
                         "train": read(backend, adapter, train, args.top_p),
                         "held_out": read(backend, adapter, held, args.top_p), "seconds": time.perf_counter() - started}
                curve.append(point)
                print(f"lr {lr:g} update {update}: train win {point['train']['win']:.3f} invalid "
                      f"{point['train']['invalid']:.3f}; held-out win {point['held_out']['win']:.3f}", flush=True)
    backend.close()
    return curve


def run_table(train: list[dict], draws: list[list[int]], args: Any) -> list[dict[str, Any]]:
    """The twin: one softmax row per training board over its legal cells, uniform at the start."""
    rng = random.Random(args.seed)
    logits = [{m: 0.0 for m in r["moves"]} for r in train]

    def probs(i: int) -> dict[str, float]:
        z = sum(math.exp(v) for v in logits[i].values())
        return {m: math.exp(v) / z for m, v in logits[i].items()}

    def win() -> float:
        return sum(sum(probs(i)[m] for m in r["wins"]) for i, r in enumerate(train)) / len(train)

    curve = [{"update": 0, "train": {"win": win(), "invalid": 0.0}}]
    for update, picks in enumerate(draws, start=1):
        chosen = [(i, rng.choices(list(p), weights=list(p.values()))[0]) for i in picks for p in [probs(i)]]
        raw = [1.0 if m in train[i]["wins"] else 0.0 for i, m in chosen]
        mean = sum(raw) / len(raw)
        for (i, m), x in zip(chosen, raw, strict=True):  # REINFORCE on the logits: (x - mean) * (onehot - p)
            p = probs(i)
            for cell in logits[i]:
                logits[i][cell] += args.table_lr * (x - mean) * ((cell == m) - p[cell])
        if update % args.read_every == 0 or update == len(draws):
            curve.append({"update": update, "train": {"win": win(), "invalid": 0.0}})
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--config", default=str(ROOT / "configs" / "tictactoe-grid-selfplay-mmd.yaml"),
                        help="the quickstart config whose warm start (with --teacher) is the model")
    parser.add_argument("--teacher", default="random")
    parser.add_argument("--lrs", default="2e-3,5e-3,1e-2")
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--boards", type=int, default=64)
    parser.add_argument("--read-every", type=int, default=10)
    parser.add_argument("--algorithm", default="reinforce")
    parser.add_argument("--beta", type=float, default=0.05)
    parser.add_argument("--invalid-penalty", type=float, default=-1.0)
    parser.add_argument("--table-lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0,
                        help="the model's nucleus when it samples and when it is read (1: the whole distribution)")
    parser.add_argument("--train-only-unsure", type=float, default=None, metavar="P",
                        help="experiment: the policy-gradient term counts only tokens sampled with probability < P")
    parser.add_argument("--lora-targets", default=None, metavar="NAMES",
                        help="the adapted modules, comma-separated (default: the library's, all seven projections)")
    args = parser.parse_args()
    if args.train_only_unsure is not None:
        train_only_unsure_tokens(args.train_only_unsure)
    if args.quick:
        args.lrs, args.updates, args.boards, args.batch, args.read_every = "5e-3", 2, 8, 8, 1
    quiet_libraries()
    from unstable.cli.quickstart import load_quickstart_config
    from unstable.local_models.tiny import tiny_model_path
    from unstable.models.warmstart import warm_start_path

    info = machine()
    cfg = load_quickstart_config(args.config)
    ws = dataclasses.replace(cfg.warm_start, teacher=args.teacher)
    model = str(warm_start_path(tiny_model_path(cfg.model_size, seed=cfg.seed), ws)[0])
    train, held = win_boards(cfg.env_id, cfg.prompt_template, args.boards, args.seed)
    rng = random.Random(args.seed)
    draws = [[rng.randrange(len(train)) for _ in range(args.batch)] for _ in range(args.updates)]
    curves = {"table": run_table(train, draws, args)}
    for lr in (float(x) for x in args.lrs.split(",")):
        curves[f"lr {lr:g}"] = run_model(model, lr, train, held, draws, args, cfg.env_id)
    rows = []
    for name, curve in curves.items():
        for point in curve:
            rows.append({"learner": name, "update": point["update"], "answers": point["update"] * args.batch,
                         "train win": point["train"]["win"], "train invalid": point["train"]["invalid"],
                         "held-out win": point.get("held_out", {}).get("win"),
                         "held-out invalid": point.get("held_out", {}).get("invalid")})
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "quick")} | {"model": model,
                                                                                     "boards_train": len(train)}
    refused = [f"{name}, update {p['update']}: the sampled answers the game would refuse, most common first: "
               f"{p['refused_answers']}" for name, curve in curves.items() for p in curve if p.get("refused_answers")]
    write_result("tictactoe-bandit", args, rows, settings, info=info, notes=[
        *refused,
        "win: mean exact probability of a winning cell over the boards; invalid: of an answer that is no legal cell",
        "table: REINFORCE on a softmax table over the training boards, same draws and rewards, lr --table-lr"])


if __name__ == "__main__":
    main()
