"""The tabular twin of TicTacToe self-play: what the learner's own update allows when every board has its own
parameters, on the number of games a run of the 1M model plays.

A softmax table ``theta[board, cell]`` over the 4,520 reachable boards (illegal cells masked) plays mirror
self-play (both seats sample from it), in batches of at least ``batch`` moves, each move rewarded with its seat's
result (+1 win, 0 draw, -1 loss). The update is the library's, as ``configs/tictactoe-grid-selfplay-mmd.yaml``
sets it: GRPO advantages (:func:`unstable.algorithms.group_advantages`, one group per seat, as the default
``group_by: [env_id, player_id]``; not divided by the group's std with ``--no-scale``),
:func:`unstable.algorithms.policy_loss` with the KL to a magnet at ``beta`` (the starting table, or the current one
every ``magnet_every`` updates: MMD, Sokota et al. 2023), Adam. Every ``--read-every`` updates the exact
exploitability (:func:`unstable.eval.solvers.tictactoe.tictactoe_exploitability`) of the table as sampled and of
its greedy policy is read, with the greedy policy's wins against the heuristic and draws against the optimal
player, so the curve can be put beside the run's on the same number of games.

Starts: ``uniform`` (``warm_start: {teacher: random}``) or ``mixed`` (each board its own flat-Dirichlet mixture
over its legal cells, as ``teacher: mixed``; seeded).

    .venv/bin/python benchmarks/tictactoe_tabular_selfplay.py --updates 1500 --beta 1.0 --magnet-every 20 \\
        --no-scale --start mixed --seeds 0 1 2

Measured (docs/training.md, TicTacToe "From a start that knows only the rules"): the moving magnet's greedy table
is never safe, even after 20,000 updates; a magnet fixed at the uniform start (``--start uniform --beta 0.05``,
no ``--magnet-every``: MMD's entropy term) is safe at 28k-48k games on two seeds of three.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

from unstable.algorithms import group_advantages, policy_loss
from unstable.eval.solvers.tictactoe import EMPTY_BOARD, reachable_boards, tictactoe_exploitability, to_move, winner
from unstable.models.warmstart import random_mixture

BOARDS = reachable_boards()
INDEX = {board: i for i, board in enumerate(BOARDS)}
LEGAL = torch.tensor([[mark == " " for mark in board] for board in BOARDS])


def start_logits(start: str, seed: int) -> torch.Tensor:
    """The starting logits: uniform over each board's empty cells, or the log of its seeded random mixture;
    illegal cells at -inf."""
    logits = torch.full((len(BOARDS), 9), float("-inf"))
    for i, board in enumerate(BOARDS):
        cells = [c for c in range(9) if board[c] == " "]
        probs = [1 / len(cells)] * len(cells) if start == "uniform" else random_mixture(f"tabular/{seed}/{board}",
                                                                                       len(cells))
        logits[i, cells] = torch.tensor(probs).log()
    return logits


def play_game(probs: torch.Tensor, rng: random.Random) -> list[tuple[int, int, int, float]]:
    """One game of mirror self-play: ``(board index, cell, seat, the seat's result)`` for each move."""
    board, moves = EMPTY_BOARD, []
    while winner(board) is None and " " in board:
        row = INDEX[board]
        cell = rng.choices(range(9), weights=probs[row].tolist())[0]
        moves.append((row, cell, len(moves) % 2))
        board = board[:cell] + to_move(board) + board[cell + 1:]
    won = winner(board)
    first = 0.0 if won is None else (1.0 if won == "O" else -1.0)  # TextArena's first mover plays O
    return [(row, cell, seat, first if seat == 0 else -first) for row, cell, seat in moves]


def table_of(probs: torch.Tensor) -> dict[str, dict[int, float]]:
    return {board: {c: float(probs[i, c]) for c in range(9) if board[c] == " "} for i, board in enumerate(BOARDS)}


def greedy(probs: torch.Tensor) -> torch.Tensor:
    """The greedy policy of ``probs``: all its mass on each board's most likely cell."""
    return torch.nn.functional.one_hot(probs.argmax(-1), 9).float()


def reading(probs: torch.Tensor) -> dict[str, float]:
    sampled = tictactoe_exploitability(table_of(probs))
    best = tictactoe_exploitability(table_of(greedy(probs)))
    return {"exploitability": sampled.exploitability, "greedy_exploitability": best.exploitability,
            "greedy_vs_heuristic_win": (best.vs_heuristic_first[0] + best.vs_heuristic_second[0]) / 2,
            "greedy_vs_optimal_draw": (best.vs_optimal_first[1] + best.vs_optimal_second[1]) / 2}


def run(updates: int, batch: int = 128, learning_rate: float = 0.05, beta: float = 0.0,
        magnet_every: int | None = None, start: str = "mixed", seed: int = 0, scale_rewards: bool = True,
        read_every: int = 50) -> dict[str, Any]:
    rng = random.Random(seed)
    theta = start_logits(start, seed).requires_grad_(True)
    magnet = theta.detach().log_softmax(-1)
    opt = torch.optim.Adam([theta], lr=learning_rate)
    curve = [{"update": 0, "games": 0, "moves": 0, **reading(theta.detach().softmax(-1))}]
    games = moves_played = 0
    started = time.perf_counter()
    for update in range(1, updates + 1):
        probs = theta.detach().softmax(-1)
        steps: list[tuple[int, int, int, float]] = []
        while len(steps) < batch:
            steps += play_game(probs, rng)
            games += 1
        moves_played += len(steps)
        rows, cells, seats, rewards = (torch.tensor(x) for x in zip(*steps, strict=True))
        adv = group_advantages(rewards.float(), seats.tolist(), scale=scale_rewards)
        logp = theta.log_softmax(-1)[rows, cells][:, None]
        loss, _ = policy_loss(logp, logp.detach(), adv, torch.ones_like(logp, dtype=torch.bool),
                              max_generation_len=1, batch_sequences=len(steps), batch_tokens=len(steps),
                              ref_logp=magnet[rows, cells][:, None] if beta else None, beta=beta)
        opt.zero_grad()
        loss.backward()
        theta.grad[~LEGAL] = 0  # -inf logits stay -inf (Adam would turn a nan gradient into nan weights)
        opt.step()
        if magnet_every and update % magnet_every == 0:
            magnet = theta.detach().log_softmax(-1)
        if update % read_every == 0 or update == updates:
            curve.append({"update": update, "games": games, "moves": moves_played,
                          **reading(theta.detach().softmax(-1))})
            print(f"seed {seed} update {update}: {curve[-1]}", flush=True)
    return {"start": start, "seed": seed, "beta": beta, "magnet_every": magnet_every, "learning_rate": learning_rate,
            "scale_rewards": scale_rewards, "batch": batch, "wall_s": time.perf_counter() - started, "curve": curve}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=1500)
    p.add_argument("--batch", type=int, default=128, help="moves an update (at least; whole games)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--no-scale", action="store_true", help="advantages without the group's std (Dr. GRPO)")
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--magnet-every", type=int, default=None)
    p.add_argument("--start", default="mixed", choices=["uniform", "mixed"])
    p.add_argument("--read-every", type=int, default=50)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", default=None, help="JSON result file")
    args = p.parse_args()
    results = [run(args.updates, args.batch, args.lr, args.beta, args.magnet_every, args.start, s, not args.no_scale,
                   args.read_every) for s in args.seeds]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
