"""Warm start: teach a freshly built model to read a board and answer with a legal move.

A real base model arrives at RL able to follow the answer format and read a game's state; the
tiny models are random weights. :func:`warm_start` closes that gap the way a pretraining stage
would, on text the library generates itself: it plays random games with the scripted
random-legal-move player, renders every position with the run's prompt template, and fine-tunes
all weights to answer ``\\boxed{move}``. The target at the move token is the **uniform distribution
over the legal moves** (a soft label), so the warm-started model plays like the random baseline:
legal moves, no strategy. Whatever it wins beyond random play later is learned by RL. With
``teacher="heuristic"`` the target is uniform over the moves the one-ply heuristic picks from (win
now, else block, else any legal move), so RL starts from a model that knows those rules; with
``teacher="optimal"`` (TicTacToe) it is uniform over the minimax-best cells: imitation of perfect
play, which measures what the model can represent rather than what RL finds. With ``teacher="nash"``
(Kuhn poker) the target is the equilibrium's own mixture (bet a Jack 1/3 of the time, ...), so the
model must learn probabilities that depend on its card, not just which moves are good.

``teacher="mixed"`` is a random policy that knows only the rules: each position's target is its own
distribution over the legal moves, drawn from a flat Dirichlet seeded by the position's text (so a
position seen twice gets the same one). The uniform target of ``"random"`` is the same for every hand
with the same legal moves, so it teaches the model to ignore what tells those hands apart: on Kuhn poker
(``qwen3-hand``) the 1M model's last hidden state at the answer no longer tells a Jack from a King
(relative distance 0.32 before, 0.002 after), and policy-gradient RL from there stays card-blind for
hundreds of updates. A target that differs from hand to hand, at random, keeps the model reading its
card without teaching it anything about what to do with it (``benchmarks/results/learning-signal-2026-11-28``).

How much of that a fixed budget teaches depends on the random weights: with the 1M model, 20,480
positions took seed 0 to 98.7% probability on legal moves and seed 1 to 86%. So the warm start
trains in rounds of ``positions`` fresh positions, each with its own warm-up and cosine decay, and
stops once, on held-out positions, the probability on legal moves reaches ``target_legal_mass``
and the most likely move is legal in ``target_greedy_legal`` of them (or after ``max_rounds``).
A round that lowers the held-out probability on legal moves by more than :data:`UNDO_DROP` is undone
(the previous round's weights are kept, and the warm start stops): on KuhnPoker's long prompts, the
second round's return to the peak learning rate took the 1M model from 83% to 60% and made it answer
as if every position were the opening.
Held-out positions come from random games, so they miss states only the model's own play reaches:
seed 4 passed both checks in one round (98.4%, 100%), yet chose an illegal cell in 3.1% of its
greedy moves against random. ``unstable quickstart`` measures that, and warns.

The result is an ordinary Hugging Face directory, cached by :func:`warm_start_path` under a key of
the base model and every setting, so later runs (and the evaluation of the initial checkpoint)
reuse it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from unstable.games.envs import base_name, check_env_id, make_env
from unstable.games.extraction import answer_text, extract_boxed_action
from unstable.games.templates import get_template, render_prompt
from unstable.learners.checkpoints import atomic_save
from unstable.policies.baselines import MOVE_DISTRIBUTIONS, UNIFORM_MOVE_SETS
from unstable.policies.scripted import legal_moves
from unstable.utils.schema import check_fields, setting

WARM_START_VERSION = 6
"""Bump when the recipe changes: cached warm starts are keyed by it."""
UNDO_DROP = 0.02
"""How far a round may lower the held-out probability on legal moves before it is undone. Rounds that
go on learning move it by less: the optimal teacher's fifth round on the 1M model lowered it from 0.993
to 0.992 while the teacher's move became the most likely one in 89.6% of positions instead of 88.9%."""


@dataclass(frozen=True)
class WarmStartConfig:
    """Settings of :func:`warm_start` (all part of the cache key)."""

    env_id: str = "TicTacToe-v0-train"
    """The game whose positions are generated (it needs a scripted legal-move reader)."""
    prompt_template: str = "qwen3-board"
    """How positions are rendered: use the template the run will use."""
    positions: int = setting(20_480, ge=1)
    """Training examples per round: positions from random games (after ``few_moves_bias``), each
    seen once."""
    target_legal_mass: float = setting(0.97, ge=0, le=1)
    """Stop after the first round whose held-out probability on legal moves reaches this ..."""
    target_greedy_legal: float = setting(0.99, ge=0, le=1)
    """... and whose most likely move is legal in this fraction of the held-out positions ..."""
    target_teacher_tv: float = setting(0.05, ge=0, le=1)
    """... and, for a teacher that mixes with set probabilities (Kuhn poker's ``"nash"``), whose distribution
    over the legal moves is within this total variation distance of the teacher's, on average over the
    held-out positions (read at temperature 1: the probabilities are what it must learn, not the most likely
    move)."""
    max_rounds: int = setting(4, ge=1)
    """Rounds at most (``positions`` each); 1 trains on ``positions`` and stops, as before rounds."""
    held_out: int = setting(512, ge=1)
    """Positions (from games the training never sees) on which the legal-move probability is measured."""
    batch_size: int = setting(64, ge=1)
    learning_rate: float = setting(3e-3, gt=0)
    """Peak AdamW learning rate (all weights), with linear warm-up and cosine decay to 10%."""
    warmup_steps: int = setting(30, ge=0)
    few_moves_bias: float = setting(1.0, ge=0)
    """Keep a position with k legal moves with probability min(1, few_moves_bias / k) (0: keep all).

    Random games are mostly openings, where nearly every move is legal and a board-blind model is
    right; keeping positions in inverse proportion to their legal moves makes the examples that
    need the board common. Measured on TicTacToe with the 1M model and 160 steps: sampled legal
    moves 64% (0), 76% (3), 94% (1); greedy 87%, 95%, 100%."""
    weight_decay: float = setting(0.0, ge=0)
    seed: int = setting(0, ge=0)
    teacher: str = "random"
    """Whose moves the model learns to play: ``"random"`` (the target is uniform over the legal moves:
    no strategy), ``"mixed"`` (a random policy: each position its own seeded mixture over the legal moves,
    no strategy either, but the model must keep reading the state; see the module docstring) or a scripted
    baseline that picks uniformly from a set, e.g. ``"heuristic"`` for
    TicTacToe and ConnectFour (win now, else block, else any legal move; the target is uniform over
    that set), ``"optimal"`` for TicTacToe (the minimax-best cells), or a baseline that mixes with set
    probabilities, ``"nash"`` for Kuhn poker (the target is its distribution). Positions still come from random
    games, so they cover the board; only the label changes. A teacher gives RL a start that already
    plays the baseline's rules, and leaves what the baseline does not know (openings, forks) to be
    learned."""

    def __post_init__(self) -> None:
        check_fields(self)
        check_env_id(self.env_id)
        get_template(self.prompt_template)
        check_teacher(self.teacher, self.env_id)


def mixes(cfg: WarmStartConfig) -> bool:
    """Whether ``cfg``'s teacher mixes with set probabilities (its distribution, not a set, is the target)."""
    return cfg.teacher == "mixed" or (base_name(cfg.env_id), cfg.teacher) in MOVE_DISTRIBUTIONS


def check_teacher(teacher: object, env_id: str) -> None:
    """Fail early on a warm-start ``teacher`` that is not ``"random"`` or a baseline of the game that picks
    uniformly from a set or with set probabilities."""
    known = ["random", "mixed", *sorted(name for game, name in (*UNIFORM_MOVE_SETS, *MOVE_DISTRIBUTIONS)
                               if game == base_name(env_id))]
    if teacher not in known:
        raise ValueError(f"warm_start.teacher must be one of {known} for {env_id!r}, got {teacher!r}")


def _teacher_moves(teacher: str, env_id: str, env: Any, player: int,
                   moves: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The moves ``teacher`` plays in this position and, for a teacher that mixes with set probabilities,
    the probability of each (empty: uniform over the moves; all legal ``moves`` for ``"random"``)."""
    if teacher == "random":
        return moves, ()
    key = (base_name(env_id), teacher)
    if key in MOVE_DISTRIBUTIONS:
        probs = {m: float(p) for m, p in MOVE_DISTRIBUTIONS[key](env_id, env, player).items() if p > 0}
        targets, weights = tuple(probs), tuple(probs.values())
    else:
        targets, weights = tuple(UNIFORM_MOVE_SETS[key](env_id, env, player)), ()
    if not targets or not set(targets) <= set(moves):
        raise RuntimeError(f"teacher {teacher!r} chose {targets} outside the legal moves {moves} of {env_id!r}")
    return targets, weights


def random_mixture(key: str, size: int) -> tuple[float, ...]:
    """A distribution over ``size`` moves drawn from the flat Dirichlet (uniform on the simplex), the same for
    the same ``key``: normalised exponential draws (Devroye 1986, ch. XI.4)."""
    rng = random.Random(key)
    draws = [rng.expovariate(1.0) for _ in range(size)]
    return tuple(d / sum(draws) for d in draws)


@dataclass(frozen=True, slots=True)
class Position:
    """One position of a random game: what the player to move saw and the moves it could play."""

    observation: str
    moves: tuple[str, ...]
    targets: tuple[str, ...] = ()
    """The moves the warm start's teacher plays (empty: all of ``moves``) ..."""
    weights: tuple[float, ...] = ()
    """... with these probabilities (empty: uniformly)."""


def _position_stream(env_id: str, seed: int, num_players: int, few_moves_bias: float,
                     stream: str, teacher: str = "random") -> Iterator[Position]:
    """Endless positions from games between random-legal-move players, in a fixed order per
    ``(env_id, seed, stream)``; different streams play different games.

    TextArena's ``reset`` seeds the global ``random`` module: the stream keeps its own copy of that
    state and the caller's is restored around every game.
    """
    rng = random.Random(f"warm-start/{env_id}/{seed}" if stream == "train" else f"warm-start/{env_id}/{seed}/{stream}")
    env_seed = seed * 1_000_003 + (0 if stream == "train" else 500_000)
    game_state = None
    game = 0
    while True:
        outer = random.getstate()
        positions: list[Position] = []
        try:
            if game_state is not None:
                random.setstate(game_state)
            env = make_env(env_id)
            env.reset(num_players=num_players, seed=env_seed + game)
            game += 1
            done = False
            while not done:
                player, observation = env.get_observation()
                moves = tuple(legal_moves(env_id, env, player))
                if few_moves_bias <= 0 or rng.random() < few_moves_bias / len(moves):
                    if teacher == "mixed":
                        targets, weights = moves, random_mixture(f"{seed}/{observation}", len(moves))
                    else:
                        targets, weights = ((), ()) if teacher == "random" else _teacher_moves(
                            teacher, env_id, env, player, moves)
                    positions.append(Position(observation, moves, targets, weights))
                done, _ = env.step(rng.choice(moves))
            env.close()
            game_state = random.getstate()
        finally:
            random.setstate(outer)
        yield from positions


def random_game_positions(env_id: str, count: int, seed: int = 0, num_players: int = 2, few_moves_bias: float = 0.0,
                          stream: str = "train", teacher: str = "random") -> list[Position]:
    """``count`` positions from games between random-legal-move players, in a fixed order.

    ``few_moves_bias`` > 0 keeps a position with ``k`` legal moves with probability
    ``min(1, few_moves_bias / k)``: fewer openings, more late positions, where picking a legal move
    actually depends on the board. A longer ``count`` extends a shorter one (same prefix); another
    ``stream`` name draws other games. ``teacher`` (a :class:`WarmStartConfig` teacher) fills each
    position's ``targets``. The caller's global ``random`` state is left as it was.
    """
    return list(islice(_position_stream(env_id, seed, num_players, few_moves_bias, stream, teacher), count))


@dataclass(frozen=True, slots=True)
class _Example:
    ids: list[int]  # prompt + answer + end-of-turn token
    prompt_len: int
    choice_pos: int | None  # index in ids of the token that names the move (soft label), or None
    choice_ids: tuple[int, ...]  # the legal moves' token ids at choice_pos
    target_ids: tuple[int, ...] = ()  # the teacher's moves' token ids at choice_pos (a subset of choice_ids)
    target_weights: tuple[float, ...] = ()  # their probabilities, summing to 1 (empty: uniform)


def _answer_ids(tokenizer, move: str, end: str) -> list[int]:
    """The answer's token ids for ``move``, checked to extract back to ``move``."""
    ids = tokenizer(answer_text(move) + end, add_special_tokens=False).input_ids
    text = tokenizer.decode(ids)
    if extract_boxed_action(text).action != move:
        raise ValueError(f"answer {text!r} does not extract to the move {move!r}")
    return ids


def _encode(tokenizer, prompt_template: str, position: Position, end: str, rng: random.Random,
            answer_cache: dict[str, list[int]] | None = None) -> _Example:
    """Tokenize a position with every legal answer and label softly the first token where they part.

    The soft label there is the teacher's distribution over the answers, summed over those that share that
    token; the example goes on with one answer drawn by the teacher's weights, labelled token by token, so
    that each answer's ending is learnt after its own move token (always going on with the first answer taught
    one seed of the 1M model to close ``\\boxed{check}`` but answer ``\\boxed{betbetbet}``). Its expected loss is the
    cross-entropy of the teacher's distribution over whole answers: exact when the parting token names
    the answer, as OpenSpiel's ``[Fold]``/``[Call]``/``[Raise]`` of one, two and two tokens do.

    ``answer_cache`` (move -> answer ids) lets many positions share one tokenization per move.
    """
    cache = {} if answer_cache is None else answer_cache
    prompt_ids = tokenizer(render_prompt(prompt_template, position.observation), add_special_tokens=False).input_ids
    for move in position.moves:
        if move not in cache:
            cache[move] = _answer_ids(tokenizer, move, end)
    answers = [cache[m] for m in position.moves]
    targets = position.targets or position.moves
    weights = position.weights or (1.0,) * len(targets)
    first = answers[0]
    part = min((next((i for i, (x, y) in enumerate(zip(a, first, strict=False)) if x != y),
                     min(len(a), len(first))) for a in answers[1:]), default=None)
    if part is None or any(part >= len(a) for a in answers):  # one move: nothing to choose; or a prefix of another
        move = rng.choices(targets, weights)[0]
        return _Example(prompt_ids + cache[move], len(prompt_ids), None, ())
    move = rng.choices(targets, weights)[0]  # every answer's own ending is trained after its move token
    on_token: dict[int, float] = {}
    for m, w in zip(targets, weights, strict=True):
        on_token[cache[m][part]] = on_token.get(cache[m][part], 0.0) + w
    shared = len(on_token) < len(targets)  # answers that part later: their weights add up on one token
    return _Example(prompt_ids + cache[move], len(prompt_ids), len(prompt_ids) + part,
                    tuple(dict.fromkeys(a[part] for a in answers)), tuple(on_token),
                    tuple(on_token.values()) if position.weights or shared else ())


def _loss(model, batch: list[_Example], pad_id: int) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy on the answer tokens; at the move token, against the teacher's distribution over its
    moves (uniform unless it mixes with set probabilities; all legal moves for the ``"random"`` teacher).
    ``legal_mass`` and ``greedy_legal`` measure the legal moves; ``greedy_teacher`` how often the most likely
    move is one the teacher plays; ``teacher_tv`` the total variation distance between the model's
    distribution over the legal moves (renormalised) and the teacher's.

    Rows are left-padded so every answer ends at the last column, and only the last columns' logits
    are computed (``logits_to_keep``): the vocabulary projection of the prompt tokens is skipped.
    """
    width = max(len(e.ids) for e in batch)
    keep = max(len(e.ids) - e.prompt_len for e in batch) + 1
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    rows, cols, targets, soft = [], [], [], []  # cols: index into the kept logits predicting the token
    for row, e in enumerate(batch):
        offset = width - len(e.ids)
        ids[row, offset:] = torch.tensor(e.ids)
        mask[row, offset:] = 1
        for t in range(e.prompt_len, len(e.ids)):
            rows.append(row)
            cols.append(offset + t - 1 - (width - keep))
            targets.append(e.ids[t])
            soft.append(e.choice_ids if t == e.choice_pos else ())
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
    logp = torch.log_softmax(logits[torch.tensor(rows), torch.tensor(cols)].float(), dim=-1)  # (N, vocab)
    is_soft = torch.tensor([bool(c) for c in soft])
    nll = -logp.gather(1, torch.tensor(targets)[:, None])[:, 0]
    stats = {"legal_mass": math.nan, "greedy_legal": math.nan, "greedy_teacher": math.nan,
             "teacher_tv": math.nan, "choices": float(is_soft.sum())}
    if is_soft.any():
        labelled = [e for e in batch if e.choice_pos is not None]  # the soft rows' examples, in their order
        teacher = [dict(zip(e.target_ids or e.choice_ids, _teacher_probs(e), strict=True)) for e in labelled]
        choices, valid = _padded([e.choice_ids for e in labelled])
        aims, aim_valid = _padded([tuple(t) for t in teacher])
        aim_probs, _ = _padded([tuple(t.values()) for t in teacher], float)
        on_choices, _ = _padded([tuple(t.get(c, 0.0) for c in e.choice_ids) for t, e in zip(teacher, labelled,
                                                                                          strict=True)], float)
        picked = logp[is_soft].gather(1, choices)
        aimed = logp[is_soft].gather(1, aims)
        nll[is_soft] = -(aimed * aim_probs).sum(1)
        legal = picked.detach().exp() * valid
        stats["legal_mass"] = float(legal.sum(1).mean())
        stats["teacher_tv"] = float(0.5 * ((legal / legal.sum(1, keepdim=True) - on_choices) * valid)
                                    .abs().sum(1).mean())
        best = logp[is_soft].detach().argmax(-1, keepdim=True)  # the greedy move token
        stats["greedy_legal"] = float(((choices == best) & (valid > 0)).any(1).float().mean())
        stats["greedy_teacher"] = float(((aims == best) & (aim_valid > 0)).any(1).float().mean())
    return nll.mean(), stats


def _teacher_probs(e: _Example) -> tuple[float, ...]:
    """The teacher's probability of each of its move tokens (``target_ids``, else every legal one):
    ``target_weights`` normalised, or uniform."""
    aims = e.target_ids or e.choice_ids
    if not e.target_weights:
        return (1.0 / len(aims),) * len(aims)
    total = sum(e.target_weights)
    return tuple(w / total for w in e.target_weights)


def _padded(rows: list[tuple], kind: type = int) -> tuple[Tensor, Tensor]:
    """Rows (token ids, or with ``kind=float`` probabilities) padded with 0 to one width, and the 1/0 mask of
    the real entries."""
    width = max(len(r) for r in rows)
    return (torch.tensor([[kind(x) for x in r] + [kind(0)] * (width - len(r)) for r in rows]),
            torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows]))


def held_out_legality(model, examples: list[_Example], pad_id: int, batch_size: int = 64) -> dict[str, float]:
    """On ``examples``: the mean probability ``model`` puts on the legal moves at the move token
    (``legal_mass``), the fraction where its most likely token there is a legal move (``greedy_legal``)
    and one the teacher plays (``greedy_teacher``, equal to ``greedy_legal`` for the random teacher), and the
    total variation distance from the teacher's distribution over the legal moves (``teacher_tv``)."""
    was_training = model.training
    model.eval()
    totals, count = {"legal_mass": 0.0, "greedy_legal": 0.0, "greedy_teacher": 0.0, "teacher_tv": 0.0}, 0.0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            _, stats = _loss(model, examples[i: i + batch_size], pad_id)
            if stats["choices"]:
                for key in totals:
                    totals[key] += stats[key] * stats["choices"]
                count += stats["choices"]
    model.train(was_training)
    return {key: total / count if count else math.nan for key, total in totals.items()}


def warm_start(base_model: str | os.PathLike, out_dir: str | os.PathLike, cfg: WarmStartConfig | None = None, *,
               progress: Callable[[int, int, dict[str, float]], None] | None = None) -> Path:
    """Fine-tune ``base_model`` on random-game positions and save the result to ``out_dir``.

    ``progress(step, total_steps, stats)`` is called every few steps (stats: ``loss``,
    ``legal_mass``: the probability the model puts on legal moves at the move token, ``round``;
    at the end of a round also ``held_out_legal_mass`` and ``held_out_greedy_legal``, see
    :func:`held_out_legality`). ``step`` counts within the round.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = cfg or WarmStartConfig()
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base_model))
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=torch.float32)
    model.train()
    end = tokenizer.eos_token or ""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    answer_cache: dict[str, list[int]] = {}
    stream = _position_stream(cfg.env_id, cfg.seed, 2, cfg.few_moves_bias, "train", cfg.teacher)
    held_rng = random.Random(f"held-out/{cfg.seed}")
    held_out = [_encode(tokenizer, cfg.prompt_template, p, end, held_rng, answer_cache)
                for p in random_game_positions(cfg.env_id, cfg.held_out, cfg.seed, few_moves_bias=cfg.few_moves_bias,
                                               stream="held-out", teacher=cfg.teacher)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    steps = math.ceil(cfg.positions / cfg.batch_size)
    rounds: list[dict[str, float]] = []
    best: tuple[float, dict[str, Tensor]] | None = None  # the last kept round's held-out legal mass and weights
    for round_ in range(1, cfg.max_rounds + 1):
        examples = [_encode(tokenizer, cfg.prompt_template, p, end, rng, answer_cache)
                    for p in islice(stream, cfg.positions)]
        rng.shuffle(examples)
        for step in range(steps):
            batch = examples[step * cfg.batch_size: (step + 1) * cfg.batch_size]
            lr = cfg.learning_rate * lr_scale(step, steps, cfg.warmup_steps)
            loss, stats = supervised_step(model, optimizer, batch, pad_id, lr)
            stats = {"loss": float(loss.detach()), "legal_mass": stats["legal_mass"], "round": round_}
            if step == steps - 1:
                legality = held_out_legality(model, held_out, pad_id, cfg.batch_size)
                held = {f"held_out_{k}": v for k, v in legality.items()}
                stats |= held
                rounds.append({"positions": cfg.positions, **held})
                if best is not None and held["held_out_legal_mass"] < best[0] - UNDO_DROP:
                    model.load_state_dict(best[1])  # this round made the model worse: keep the previous one
                    rounds[-1]["undone"] = True
                    stats["undone"] = True
            if progress is not None and (step % 10 == 0 or step == steps - 1):
                progress(step + 1, steps, stats)
        if rounds[-1].get("undone"):
            break
        if (rounds[-1]["held_out_legal_mass"] >= cfg.target_legal_mass
                and rounds[-1]["held_out_greedy_legal"] >= cfg.target_greedy_legal
                and rounds[-1]["held_out_greedy_teacher"] >= cfg.target_greedy_legal
                and (not mixes(cfg) or rounds[-1]["held_out_teacher_tv"] <= cfg.target_teacher_tv)):
            break
        if round_ < cfg.max_rounds:  # another round follows: keep these weights in case it makes things worse
            best = (rounds[-1]["held_out_legal_mass"],
                    {k: v.detach().clone() for k, v in model.state_dict().items()})
    model.eval()
    out = Path(out_dir)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "warm_start.json").write_text(json.dumps({"version": WARM_START_VERSION, "base_model": str(base_model),
                                                         **asdict(cfg), "rounds": rounds}, indent=2))

    if out.exists():
        shutil.rmtree(out)
    atomic_save(out, write)
    return out


def warm_start_template(model: str | os.PathLike) -> str | None:
    """The prompt template a local warm start (this module's or a task warm start) was trained with, from its
    ``warm_start.json``; ``None`` for anything else (a Hub id, a directory without that file or that key)."""
    try:
        record = json.loads((Path(model) / "warm_start.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = record.get("prompt_template") if isinstance(record, dict) else None
    return template if isinstance(template, str) else None


def lr_scale(step: int, steps: int, warmup_steps: int) -> float:
    """The warm starts' learning-rate factor at ``step`` (0-based) of ``steps``: a linear warm-up over
    ``warmup_steps``, then a cosine decay from 1 to 0.1 (a half cosine, as in Loshchilov & Hutter's SGDR,
    https://arxiv.org/abs/1608.03983, eq. 5, with a floor of 10%)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    frac = (step - warmup_steps) / max(1, steps - warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))


def supervised_step(model: Any, optimizer: torch.optim.Optimizer, batch: list[_Example], pad_id: int,
                    lr: float) -> tuple[Tensor, dict[str, float]]:
    """One supervised step of a warm start on ``batch`` at learning rate ``lr`` (gradients clipped to norm
    1): the loss and :func:`_loss`'s statistics."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss, stats = _loss(model, batch, pad_id)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss, stats


def _fingerprint(base_model: Path) -> str:
    """A hash of the base model's weights and config, so a rebuilt base invalidates the cache."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(base_model)):
        if name.endswith((".json", ".safetensors", ".bin")):
            h.update(name.encode())
            h.update((base_model / name).read_bytes())
    return h.hexdigest()[:16]


def warm_start_path(base_model: str | os.PathLike, cfg: WarmStartConfig | None = None, *,
                    cache_dir: str | os.PathLike | None = None,
                    progress: Callable[[int, int, dict[str, float]], None] | None = None) -> tuple[Path, bool]:
    """The cached warm start of ``base_model`` under ``cfg``, built first if missing.

    Returns ``(path, cached)``; ``cached`` says whether an earlier build was reused.
    """
    cfg = cfg or WarmStartConfig()
    settings = asdict(cfg)
    if settings["teacher"] == "random":  # the recipe before teachers existed: its cached builds stay valid
        del settings["teacher"]
    if not mixes(cfg):  # a setting that changes nothing for this teacher, added later: its cached builds stay valid
        del settings["target_teacher_tv"]
    return cached_warm_start(base_model, settings, WARM_START_VERSION, cfg.env_id, cache_dir,
                             lambda base, path: warm_start(base, path, cfg, progress=progress))


def cached_warm_start(base_model: str | os.PathLike, settings: dict, version: int, label: str,
                      cache_dir: str | os.PathLike | None, build: Callable[[Path, Path], object]) -> tuple[Path, bool]:
    """The cache both warm starts share: ``<cache>/<base>-<label>-<key>``, the key a hash of ``version``,
    the base model's files and ``settings``; ``build(base, path)`` makes a missing one (its time is
    kept in ``build_seconds.txt``). Returns ``(path, cached)``."""
    from unstable.local_models.tiny import _default_cache_root

    base = Path(base_model)
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"warm start needs a local model directory with config.json, got {base_model!r}")
    key = hashlib.sha256(json.dumps({"v": version, "base": _fingerprint(base), **settings},
                                    sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else _default_cache_root().parent / "warm-starts"
    path = root / f"{base.name}-{label}-{key}"
    if (path / "warm_start.json").is_file():
        return path, True
    started = time.perf_counter()
    build(base, path)
    (path / "build_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    return path, False
