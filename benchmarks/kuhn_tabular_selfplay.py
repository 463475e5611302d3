"""The tabular twin of Kuhn self-play: what the learner's own update allows when every information set has
its own parameters.

A softmax table ``theta[information set, move]`` over Kuhn poker's 12 information sets plays mirror self-play
(both seats sample from it), in batches of at least ``batch`` moves, each move rewarded with its seat's chips for
the hand. The update is the library's: GRPO advantages (:func:`unstable.algorithms.group_advantages`, one group
per information set, as ``group_by: [env_id, prompt]`` makes one per prompt), :func:`unstable.algorithms.policy_loss`
with the KL (``--kl-estimator``, k3 by default) to a magnet at ``beta`` (the starting table, the current one
every ``magnet_every`` updates, or with ``magnet_ema`` an exponential average of the logits, as the learner
averages an adapter's weights), Adam. The exact exploitability
(:func:`unstable.eval.solvers.kuhn.kuhn_exploitability`, OpenSpiel's NashConv / 2) is read after every update,
and that of the reach-weighted average of the tables so far (fictitious play's output,
:class:`unstable.eval.average_policy.PolicyAverage`, as ``unstable eval --all-checkpoints`` reads a run's), so
the curve can be put beside a run of the 1M model on the same number of moves (``configs/kuhn-hand-selfplay-*.yaml``).

Starts: ``uniform`` (what ``warm_start: {teacher: random}`` teaches) or ``mixed`` (each information set its own
flat-Dirichlet mixture, as ``teacher: mixed``; seeded).

    .venv/bin/python benchmarks/kuhn_tabular_selfplay.py --updates 300 --beta 0.1 --start mixed --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import torch

from unstable.algorithms import group_advantages, policy_loss
from unstable.eval.average_policy import PolicyAverage
from unstable.eval.game_states import solved_game
from unstable.eval.solvers.kuhn import CARDS, INFO_SETS, LEGAL_ACTIONS, hand_result, kuhn_exploitability
from unstable.models.warmstart import random_mixture


def play_hand(probs: torch.Tensor, rng: random.Random) -> list[tuple[int, int, float]]:
    """One hand of mirror self-play from the table ``probs`` (12 x 2, rows in :data:`INFO_SETS` order, columns in
    :data:`LEGAL_ACTIONS` order): ``(information set, move, the mover's chips)`` for each move."""
    cards = rng.sample(CARDS, 2)
    history = ""
    moves: list[tuple[int, int]] = []  # (information set, move) per turn; the seat is the turn's parity
    while history in LEGAL_ACTIONS:  # the hand is not over: the seat to act chooses
        row = INFO_SETS.index(f"{cards[len(moves) % 2]}:{history}")
        move = 0 if rng.random() < float(probs[row, 0]) else 1
        moves.append((row, move))
        action = LEGAL_ACTIONS[history][move]
        history = f"{history},{action}" if history else action
    first = hand_result(history, CARDS.index(cards[0]) > CARDS.index(cards[1]))
    return [(row, move, float(first if i % 2 == 0 else -first)) for i, (row, move) in enumerate(moves)]


def table_of(probs: torch.Tensor) -> dict[str, dict[str, float]]:
    """``probs`` as a :data:`~unstable.eval.solvers.kuhn.KuhnTable`."""
    return {key: dict(zip(LEGAL_ACTIONS[key.split(":", 1)[1]], map(float, probs[i]), strict=True))
            for i, key in enumerate(INFO_SETS)}


def start_table(start: str, seed: int) -> torch.Tensor:
    """The starting logits: 0 (uniform) or the log of each information set's seeded random mixture."""
    if start == "uniform":
        return torch.zeros(len(INFO_SETS), 2)
    if start == "mixed":
        return torch.tensor([random_mixture(f"tabular/{seed}/{key}", 2) for key in INFO_SETS]).log()
    raise ValueError(f"start must be 'uniform' or 'mixed', got {start!r}")


def half_average(tables: list[dict[str, dict[str, float]]]) -> float:
    """The exploitability of the reach-weighted average of the second half of ``tables`` (as
    ``unstable eval --all-checkpoints --average-from`` reads a run's second half)."""
    average = PolicyAverage(solved_game("KuhnPoker-v0-train"))
    for table in tables[len(tables) // 2:]:
        average.add(table)
    return average.exploitability()


class TablePolicy:
    """The twin's parameters: one row of logits per information set."""

    def __init__(self, start: str, seed: int):
        self.theta = start_table(start, seed).requires_grad_(True)

    def parameters(self) -> list[torch.Tensor]:
        return [self.theta]

    def log_probs(self) -> torch.Tensor:
        """``[12, 2]`` log-probabilities over :data:`LEGAL_ACTIONS`, differentiable in the parameters."""
        return self.theta.log_softmax(-1)


def run(updates: int = 300, batch: int = 128, learning_rate: float = 0.05, beta: float = 0.0,
        magnet_every: int | None = None, start: str = "uniform", seed: int = 0, lr_schedule: str = "constant",
        scale_rewards: bool = True, kl_estimator: str = "k3", magnet_ema: float | None = None,
        policy: Any = None, grad_clip: float | None = None) -> dict[str, Any]:
    """Self-play the table for ``updates`` updates of at least ``batch`` moves; the exploitability after each.
    ``lr_schedule`` ``"linear"`` decays the rate to 0 over the updates, as the learner's does; ``scale_rewards``
    False keeps the group mean but not the std (Dr. GRPO). ``magnet_ema``: after every update the magnet's
    logits move that share of the way to the table's (``magnet_every`` then still copies the table outright).
    Each point of the curve has the average of all tables so far, every 50th the second half's too (``half``).
    ``policy``: another parameterisation of the 12 x 2 table (``parameters()``, ``log_probs()``), e.g. an
    LLM scoring the legal answers (``kuhn_scored_selfplay.py``); ``None``: the table of ``start``.
    ``grad_clip``: the global gradient-norm clip (the learner's ``grad_clip``), none by default."""
    rng = random.Random(seed)
    policy = policy if policy is not None else TablePolicy(start, seed)
    with torch.no_grad():
        magnet_logits = policy.log_probs().clone()  # log-probs: the magnet's softmax is the same as of logits
    magnet = magnet_logits.log_softmax(-1)
    params = policy.parameters()
    opt = torch.optim.Adam(params, lr=learning_rate)
    decay = torch.optim.lr_scheduler.LambdaLR(
        opt, (lambda u: 1 - u / updates) if lr_schedule == "linear" else (lambda u: 1.0))
    tables = [table_of(magnet_logits.exp())]  # the start's, then one per update
    average = PolicyAverage(solved_game("KuhnPoker-v0-train"))
    average.add(tables[0])
    first = kuhn_exploitability(tables[0]).exploitability
    curve = [{"update": 0, "moves": 0, "exploitability": first, "average": first, "half": first}]
    moves_played = 0
    for update in range(1, updates + 1):
        log_probs = policy.log_probs()
        probs = log_probs.detach().exp()
        steps: list[tuple[int, int, float]] = []
        while len(steps) < batch:
            steps += play_hand(probs, rng)
        moves_played += len(steps)
        rows, moves, rewards = (torch.tensor(x) for x in zip(*steps, strict=True))
        adv = group_advantages(rewards.float(), rows.tolist(), scale=scale_rewards)
        logp = log_probs[rows, moves][:, None]
        loss, _ = policy_loss(logp, logp.detach(), adv, torch.ones_like(logp, dtype=torch.bool),
                              max_generation_len=1, batch_sequences=len(steps), batch_tokens=len(steps),
                              ref_logp=magnet[rows, moves][:, None] if beta else None, beta=beta,
                              kl_estimator=kl_estimator)
        opt.zero_grad()
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        decay.step()
        with torch.no_grad():
            now = policy.log_probs()
        if magnet_ema:
            magnet_logits = (1 - magnet_ema) * magnet_logits + magnet_ema * now
        if magnet_every and update % magnet_every == 0:
            magnet_logits = now.clone()
        magnet = magnet_logits.log_softmax(-1)
        table = table_of(now.exp())
        tables.append(table)
        average.add(table)
        curve.append({"update": update, "moves": moves_played,
                      "exploitability": kuhn_exploitability(table).exploitability,
                      "average": average.exploitability()})
        if update % 50 == 0 or update == updates:
            curve[-1]["half"] = half_average(tables)
    return {"start": start, "seed": seed, "beta": beta, "magnet_every": magnet_every, "magnet_ema": magnet_ema,
            "learning_rate": learning_rate,
            "lr_schedule": lr_schedule, "scale_rewards": scale_rewards, "kl_estimator": kl_estimator, "batch": batch,
            "grad_clip": grad_clip, "curve": curve, "final_table": tables[-1]}


def summary_line(result: dict[str, Any]) -> str:
    """A run's exploitability at a few updates, its lowest, the mean of its last 50 and its averages at the end."""
    curve = result["curve"]
    ex = [c["exploitability"] for c in curve]
    marks = {u: ex[u] for u in (0, 50, 100, 200, 300, len(ex) - 1) if u < len(ex)}
    return (", ".join(f"{u}: {v:.3f}" for u, v in marks.items())
            + f"; lowest {min(ex):.3f}; last 50 mean {sum(ex[-50:]) / len(ex[-50:]):.3f}"
            + f"; average of all {curve[-1]['average']:.3f}, of the second half {curve[-1]['half']:.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--batch", type=int, default=128, help="moves an update (at least; whole hands)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "linear"])
    p.add_argument("--no-scale", action="store_true", help="advantages without the group's std (Dr. GRPO)")
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--magnet-every", type=int, default=None)
    p.add_argument("--magnet-ema", type=float, default=None, help="magnet logits move this share to the table's")
    p.add_argument("--kl-estimator", default="k3", choices=["k1", "k2", "k3"])
    p.add_argument("--start", default="uniform", choices=["uniform", "mixed"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", default=None, help="JSON result file")
    args = p.parse_args()
    results = [run(args.updates, args.batch, args.lr, args.beta, args.magnet_every, args.start, s, args.lr_schedule,
                   not args.no_scale, args.kl_estimator, args.magnet_ema) for s in args.seeds]
    for r in results:
        print(f"seed {r['seed']}: {summary_line(r)}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
