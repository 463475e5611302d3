"""The learning signal, tested where the answer is known: a contextual bandit on Kuhn poker's opening.

The first player of ``KuhnPoker-v0-chips`` opens with its card (J, Q or K; the ``qwen3-hand`` prompt
``Card: J``, ``Moves: [check] [bet]``) against a fixed opponent that folds a Jack to a bet, calls with
a Queen or a King, and checks behind. The reward is the hand's chips, the opponent's card drawn from
the other two. Expected chips:

=====  ==========================  ===========================
card   ``[check]`` (showdown, 1)   ``[bet]`` (fold +1, call 2)
=====  ==========================  ===========================
J      -1                          -2 (both other cards call)
Q      0 (beats J, loses to K)     -0.5 (J folds +1, K calls -2)
K      +1                          +1.5 (J folds +1, Q calls +2)
=====  ==========================  ===========================

So the best move reads the card: check a Jack or a Queen, bet a King. A card-blind policy cannot do
better than 1/3 of the moves wrong. An answer that is not a legal move scores ``invalid_penalty``.

:func:`run_bandit` trains one of the library's learners (the same ``update`` a run makes) on
batches of these openings sampled through the transformers engine from its latest checkpoint,
and reads the exact probability of each move per card after every update
(:class:`~unstable.eval.policy_reading.PolicyReader`). :func:`run_tabular` applies the same
algorithm's update to a softmax table over the three cards: the curve the algorithm itself allows
on the same number of games.

    .venv/bin/python benchmarks/learning_signal.py --algorithm reinforce --steps 30
    .venv/bin/python benchmarks/learning_signal.py --algorithm grpo --tabular   # and the tabular twin
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_ID = "KuhnPoker-v0-chips-train"
TEMPLATE = "qwen3-hand"
CARDS = ("J", "Q", "K")
MOVES = ("[check]", "[bet]")
BEST = {"J": "[check]", "Q": "[check]", "K": "[bet]"}
RANK = {"J": 0, "Q": 1, "K": 2}


# The settings with which every learner reads the card (results: learning-signal-2026-11-28/bandit-seeds/):
# the KL to the warm start, which is uniform over the legal moves, keeps the moves spread (the plateau of
# Mei et al. 2020), and four clipped optimiser steps a batch (two epochs of two mini-batches, PPO's own)
# shorten the card-blind plateau; GRPO takes one group per card.
FOUR_STEPS = {"beta": 0.1, "epochs": 2, "minibatches": 2, "mini_batch_size": 32, "clip_ratio": 0.2}
RECIPE: dict[str, dict[str, Any]] = {
    "reinforce": FOUR_STEPS,
    "grpo": {**FOUR_STEPS, "group_by": ("env_id", "prompt")},
    "ppo": {**FOUR_STEPS, "critic_learning_rate": 1e-3},
}
BUDGET = 300  # updates of 64 openings; the test's learners reached 0.8 of the legal answers in 24-92 (seed 0)


def chips(card: str, move: str, other: str) -> float:
    """The first player's chips for opening ``move`` with ``card`` against the fixed opponent holding ``other``."""
    wins = RANK[card] > RANK[other]
    if move == "[check]":  # the opponent checks behind: showdown for the antes
        return 1.0 if wins else -1.0
    if other == "J":  # a bet: the opponent folds a Jack ...
        return 1.0
    return 2.0 if wins else -2.0  # ... and calls with a Queen or a King


def expected_chips(card: str, move: str) -> float:
    others = [c for c in CARDS if c != card]
    return sum(chips(card, move, o) for o in others) / len(others)


def opening_prompts() -> dict[str, str]:
    """The ``qwen3-hand`` prompt of the first player's opening with each card."""
    from unstable.eval.game_states import kuhn_states
    from unstable.games.templates import render_prompt

    states = kuhn_states(ENV_ID)
    return {card: render_prompt(TEMPLATE, states[(card, ())].observation) for card in CARDS}


def warm_start_model(positions: int = 2560, max_rounds: int = 4, seed: int = 0, teacher: str = "random") -> str:
    """The 1M model warm-started on legal Kuhn moves only, cached: ``"random"`` teaches uniform over them
    (card-blind), ``"mixed"`` a random mixture per hand (see :mod:`unstable.models.warmstart`)."""
    from unstable.local_models.tiny import tiny_model_path
    from unstable.models.warmstart import WarmStartConfig, warm_start_path

    cfg = WarmStartConfig(env_id=ENV_ID, prompt_template=TEMPLATE, positions=positions, max_rounds=max_rounds,
                          seed=seed, teacher=teacher)
    return str(warm_start_path(tiny_model_path("1m"), cfg)[0])


def make_learner(algorithm: str, model: str, out: str, batch: int, learning_rate: float, seed: int,
                 **settings: Any):
    from unstable.learners.catalog import resolve_learner

    cls = resolve_learner(algorithm)
    settings = {"mini_batch_size": batch, **settings}
    learner = cls(model, output_dir=out, batch_size=batch, learning_rate=learning_rate, device="cpu", seed=seed,
                  keep_last=2, gradient_checkpointing=False, **settings)
    learner.initialize_algorithm(max_train_len=None, max_generation_len=settings.get("max_generation_len", 16))
    return learner


def read_policy(backend, adapter: str | None, prompts: dict[str, str]) -> dict[str, dict[str, float]]:
    """The exact probability of each opening move per card (``other``: anything else)."""
    from unstable.eval.policy_reading import PolicyReader
    from unstable.inference.base import SamplingParams

    reader = PolicyReader(backend, adapter, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=16))
    dists = reader.read_exact([prompts[c] for c in CARDS], [MOVES] * len(CARDS))
    return {c: {**d.probs, "other": d.other} for c, d in zip(CARDS, dists, strict=True)}


def play_openings(backend, adapter: str | None, prompts: dict[str, str],
                  samples: int = 256) -> dict[str, dict[str, float]]:
    """Each card's moves as played: ``samples`` answers per card sampled at temperature 1 and read by the game's
    extraction, as shares of all answers (``invalid``: no legal move). Unlike :func:`read_policy`, an answer
    spelled otherwise than the canonical ``\\boxed{check}`` counts as the move it names."""
    from unstable.games.extraction import get_action_extraction
    from unstable.inference.base import GenerationRequest, SamplingParams

    extract = get_action_extraction("default")
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=16)
    out = {}
    for card in CARDS:
        results = backend.generate_batch([GenerationRequest(prompts[card], adapter, sampling)] * samples)
        moves = [extract(r.sample.text).action for r in results]
        out[card] = {m: moves.count(m) / samples for m in MOVES}
        out[card]["invalid"] = 1.0 - sum(out[card].values())
    return out


def best_share(policy: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each card's probability of its best move among the legal moves (the exact reading's ``other``, answers
    spelled otherwise than the canonical ``\\boxed{check}``, left out; the sampled invalid rate is reported
    beside it)."""
    return {c: policy[c][BEST[c]] / max(1e-12, sum(policy[c][m] for m in MOVES)) for c in CARDS}


def reached(reading: dict[str, Any], target: float, max_invalid: float) -> bool:
    """Whether an update's reading has every card's best move at ``target``: of all answers as played when it
    holds ``played`` (:func:`play_openings`), else among the legal answers of the exact reading, with at most
    ``max_invalid`` of the batch invalid."""
    if "played" in reading:
        return min(reading["played"][c][BEST[c]] for c in CARDS) >= target
    return min(reading["best"].values()) >= target and reading.get("invalid", 0.0) <= max_invalid


def run_bandit(algorithm: str = "reinforce", steps: int = 30, batch: int = 64, learning_rate: float = 1e-3,
               seed: int = 0, invalid_penalty: float = -4.0, target: float = 0.9, model: str | None = None,
               log: Callable[[str], None] = print, expected: bool = False, max_invalid: float = 0.05,
               absolute: bool = False, **settings: Any) -> dict[str, Any]:
    """Train ``algorithm`` on the bandit for at most ``steps`` updates of ``batch`` openings; stop once every
    card's best move has probability >= ``target`` among the legal moves and at most ``max_invalid`` of the
    batch's answers were invalid. ``absolute``: of all answers as played instead, the best move's share of
    128 answers a card (:func:`play_openings`), read once the exact reading is within 0.05 of ``target``: the
    exact reading's legal share counts the canonical ``\\boxed{bet}`` only, and a trained adapter also plays
    spellings the game reads (``\\boxed{oves\\boxed{bet}``) in other proportions. ``expected``: the reward
    is the move's expected chips (no noise from the opponent's card). Returns the per-update readings, the
    games played and the final adapter's moves as played (:func:`play_openings`)."""
    from unstable.games.extraction import get_action_extraction
    from unstable.inference.base import GenerationRequest, SamplingParams
    from unstable.inference.transformers_backend import TransformersBackend
    from unstable.records import Step, TrainBatch

    model = model or warm_start_model()
    prompts = opening_prompts()
    rng = random.Random(seed)
    extract = get_action_extraction("default")
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=16)
    backend = TransformersBackend(model, device="cpu", max_batch_size=batch)
    curve: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bandit-") as out:
        learner = make_learner(algorithm, model, out, batch, learning_rate, seed, **settings)
        adapter = None
        policy = read_policy(backend, adapter, prompts)
        curve.append({"update": 0, "games": 0, "best": best_share(policy), "policy": policy})
        log(f"{algorithm} update 0: best {fmt(best_share(policy))}")
        for update in range(1, steps + 1):
            cards = [rng.choice(CARDS) for _ in range(batch)]
            results = backend.generate_batch([GenerationRequest(prompts[c], adapter, sampling) for c in cards])
            batch_steps, rewards = [], []
            for i, (card, result) in enumerate(zip(cards, results, strict=True)):
                move = extract(result.sample.text).action
                legal = move in MOVES
                other = rng.choice([o for o in CARDS if o != card])
                if not legal:
                    reward = invalid_penalty
                else:
                    reward = expected_chips(card, move) if expected else chips(card, move, other)
                rewards.append(reward)
                batch_steps.append(Step(env_id=ENV_ID, game_id=update * batch + i, player_id=0, turn_index=0,
                                        sample=result.sample, reward=reward, final_reward=reward,
                                        policy_version=learner.version, format_ok=legal, invalid=not legal,
                                        is_last=True, prompt=prompts[card]))
            batch_of = TrainBatch.from_steps(batch_steps, group_episodes=learner.needs_episodes)  # PPO, A2C: episodes
            adapter = learner.update(batch_of).adapter_path
            policy = read_policy(backend, adapter, prompts)
            best = best_share(policy)
            invalid = sum(s.invalid for s in batch_steps) / len(batch_steps)
            curve.append({"update": update, "games": update * batch, "best": best, "policy": policy,
                          "reward_mean": sum(rewards) / len(rewards), "invalid": invalid})
            if absolute and min(best.values()) >= target - 0.05 and invalid <= max_invalid:
                curve[-1]["played"] = play_openings(backend, adapter, prompts, samples=128)
            log(f"{algorithm} update {update}: best {fmt(best)} reward {sum(rewards) / len(rewards):+.3f} "
                f"invalid {invalid:.2f}")
            if reached(curve[-1], target, max_invalid):
                break
        played = play_openings(backend, adapter, prompts)
        log(f"{algorithm} as played after update {curve[-1]['update']}: "
            + " ".join(f"{c} {played[c][BEST[c]]:.2f} (invalid {played[c]['invalid']:.2f})" for c in CARDS))
    backend.close()
    return {"algorithm": algorithm, "learning_rate": learning_rate, "batch": batch, "seed": seed,
            "expected": expected, "absolute": absolute, "settings": settings, "played": played,
            "reached": reached(curve[-1], target, max_invalid) and (not absolute or "played" in curve[-1]),
            "updates": curve[-1]["update"], "games": curve[-1]["games"],
            "seconds": round(time.perf_counter() - started, 1), "curve": curve}


def exact_updates(model: str, mode: str = "policy_gradient", steps: int = 60, learning_rate: float = 1e-3,
                  entropy: float = 0.0, seed: int = 0) -> list[dict[str, float]]:
    """The learner's LoRA adapter (the run default) on ``model``, trained without sampling: each step takes
    the exact gradient over the three openings and the two moves (the move token after ``\\boxed{``), Adam
    at ``learning_rate``. ``mode="policy_gradient"``: ``-sum_card sum_move pi (Q - V) log pi`` with each
    card's own baseline ``V = sum pi Q`` (expected chips), plus ``entropy`` times the entropy of the two
    moves; ``"supervised"``: cross-entropy to each card's best move. Returns each card's probability of its
    best move (among the two) after every step, the start first."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from unstable.learners import model_utils as mu
    from unstable.learners.config import DEFAULT_LORA_CFG

    if mode not in ("policy_gradient", "supervised"):
        raise ValueError(f"mode must be 'policy_gradient' or 'supervised', got {mode!r}")
    tok = AutoTokenizer.from_pretrained(model)
    torch.manual_seed(seed)
    lora = mu.attach_policy_adapter(AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32),
                                    DEFAULT_LORA_CFG, None)
    move_ids = [tok("\\boxed{" + m[1:-1] + "}", add_special_tokens=False).input_ids[2] for m in MOVES]
    prompts = opening_prompts()
    ids = {c: tok(prompts[c] + "\\boxed{", add_special_tokens=False, return_tensors="pt").input_ids for c in CARDS}
    q = {c: torch.tensor([expected_chips(c, m) for m in MOVES]) for c in CARDS}
    best = {c: MOVES.index(BEST[c]) for c in CARDS}
    opt = torch.optim.Adam([p for p in lora.parameters() if p.requires_grad], lr=learning_rate)
    curve = []
    for step in range(steps + 1):
        logp = {c: lora(ids[c]).logits[0, -1, move_ids].log_softmax(-1) for c in CARDS}
        curve.append({c: float(logp[c][best[c]].detach().exp()) for c in CARDS})
        if step == steps:
            break
        loss = torch.zeros(())
        for c in CARDS:
            pi = logp[c].exp()
            if mode == "supervised":
                loss = loss - logp[c][best[c]]
            else:
                weight = (pi * (q[c] - (pi * q[c]).sum())).detach()
                loss = loss - (weight * logp[c]).sum() - entropy * -(pi * logp[c]).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return curve


def run_tabular(algorithm: str = "grpo", steps: int = 300, batch: int = 64, learning_rate: float = 0.05,
                seed: int = 0, target: float = 0.9, beta: float = 0.0, magnet_every: int | None = None,
                group_by: tuple[str, ...] = ("env_id", "player_id"), expected: bool = False,
                epochs: int | None = None, minibatches: int | None = None, clip_ratio: float = 0.2,
                critic_learning_rate: float = 0.05) -> dict[str, Any]:
    """The tabular twin: the same bandit, batches and loss (:func:`unstable.algorithms.policy_loss`, with the
    KL to a magnet at ``beta``) for a softmax table ``theta[card, move]`` that starts uniform, stepped by
    Adam. Advantages as the algorithm takes them: ``"reinforce"`` the reward, ``"grpo"`` the reward minus
    its group's mean over its std (``group_by``: ``("env_id", "player_id")`` is one group for the whole
    batch, ``("env_id", "prompt")`` one per card), ``"ppo"`` the reward minus a critic table ``V[card]``
    (read before the update, regressed on the rewards at ``critic_learning_rate`` beside each policy step),
    normalised over the batch. Each batch takes ``epochs`` passes over ``minibatches`` shuffled parts, the
    ratio to the table at the start of the update clipped at ``clip_ratio`` from the second step on, as the
    learners do (``None``: the learner's default, 2 x 2 for PPO, 1 x 1 otherwise).
    ``learning_rate`` is the table's own (a table needs a larger one than a LoRA adapter); the curve is what
    the algorithm allows when every card has its own parameters."""
    import torch

    from unstable.algorithms import group_advantages, normalize, policy_loss, value_loss

    if algorithm not in ("reinforce", "grpo", "ppo"):
        raise ValueError(f"the tabular twin has reinforce, grpo and ppo, got {algorithm!r}")
    epochs = epochs or (2 if algorithm == "ppo" else 1)
    minibatches = minibatches or (2 if algorithm == "ppo" else 1)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    theta = torch.zeros(len(CARDS), len(MOVES), requires_grad=True)
    magnet = theta.detach().log_softmax(-1)
    opt = torch.optim.Adam([theta], lr=learning_rate)
    values = torch.zeros(len(CARDS), requires_grad=True)  # PPO's critic
    critic_opt = torch.optim.Adam([values], lr=critic_learning_rate)

    def best() -> dict[str, float]:
        probs = theta.detach().softmax(-1)
        return {c: float(probs[i, MOVES.index(BEST[c])]) for i, c in enumerate(CARDS)}

    curve = [{"update": 0, "games": 0, "best": best()}]
    for update in range(1, steps + 1):
        cards = torch.tensor([rng.randrange(len(CARDS)) for _ in range(batch)])
        old_logp_all = theta.detach().log_softmax(-1)
        moves = torch.multinomial(old_logp_all.exp()[cards], 1, generator=gen)[:, 0]
        rewards = torch.tensor([expected_chips(CARDS[c], MOVES[m]) if expected else
                                chips(CARDS[c], MOVES[m], rng.choice([o for o in CARDS if o != CARDS[c]]))
                                for c, m in zip(cards.tolist(), moves.tolist(), strict=True)])
        if algorithm == "reinforce":
            adv = rewards
        elif algorithm == "grpo":
            adv = group_advantages(rewards, [int(c) if "prompt" in group_by else 0 for c in cards.tolist()])
        else:
            adv = normalize(rewards - values.detach()[cards])
        for _ in range(epochs):
            order = torch.randperm(batch, generator=gen) if minibatches > 1 else torch.arange(batch)
            for part in order.chunk(minibatches):
                logp = theta.log_softmax(-1)[cards[part], moves[part]][:, None]
                loss, _ = policy_loss(logp, old_logp_all[cards[part], moves[part]][:, None], adv[part],
                                      torch.ones_like(logp, dtype=torch.bool), max_generation_len=1,
                                      batch_sequences=len(part), batch_tokens=len(part), clip_low=clip_ratio,
                                      ref_logp=magnet[cards[part], moves[part]][:, None] if beta else None, beta=beta)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if algorithm == "ppo":
                    critic_opt.zero_grad()
                    value_loss(values[cards[part]], rewards[part]).backward()
                    critic_opt.step()
        if magnet_every and update % magnet_every == 0:
            magnet = theta.detach().log_softmax(-1)
        curve.append({"update": update, "games": update * batch, "best": best()})
        if min(curve[-1]["best"].values()) >= target:
            break
    return {"algorithm": f"{algorithm}, tabular", "learning_rate": learning_rate, "batch": batch, "seed": seed,
            "expected": expected,
            "settings": {"beta": beta, "magnet_every": magnet_every, "group_by": list(group_by), "epochs": epochs,
                         "minibatches": minibatches, "clip_ratio": clip_ratio,
                         **({"critic_learning_rate": critic_learning_rate} if algorithm == "ppo" else {})},
            "reached": min(curve[-1]["best"].values()) >= target, "updates": curve[-1]["update"],
            "games": curve[-1]["games"], "curve": curve}


def fmt(best: dict[str, float]) -> str:
    return " ".join(f"{c} {p:.2f}" for c, p in best.items())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--algorithm", default="reinforce", help="reinforce, grpo, ppo, ...")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[],
                   help="a learner setting, key=value (JSON value); also expected=true, absolute=true (run_bandit)")
    p.add_argument("--recipe", action="store_true", help="start from RECIPE[algorithm]'s settings (--set overrides)")
    p.add_argument("--tabular", action="store_true", help="also run the tabular twin on the same budget")
    p.add_argument("--tabular-lr", type=float, default=0.05)
    p.add_argument("--out", default=None, help="JSON result file")
    args = p.parse_args()
    if args.recipe and args.algorithm not in RECIPE:
        p.error(f"--recipe has settings for {', '.join(RECIPE)}, not {args.algorithm!r}")
    settings = dict(RECIPE[args.algorithm]) if args.recipe else {}
    for item in args.set:
        key, value = item.split("=", 1)
        try:
            settings[key] = json.loads(value)
        except ValueError:
            settings[key] = value
    import torch

    torch.set_num_threads(1)
    results = [run_bandit(args.algorithm, args.steps, args.batch, args.lr, args.seed, **settings)]
    if args.tabular:
        tab = {k: settings[k] for k in ("beta", "magnet_every", "group_by", "epochs", "minibatches", "clip_ratio",
                                        "expected") if k in settings}
        results.append(run_tabular(args.algorithm, args.steps, args.batch, args.tabular_lr, args.seed, **tab))
    for r in results:
        print(f"{r['algorithm']}: reached {r['reached']} after {r['updates']} updates ({r['games']} games); "
              f"best {fmt(r['curve'][-1]['best'])}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
