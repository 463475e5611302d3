"""Evaluate a model against a fixed opponent: N games, alternating seats, rates with 95% intervals.

:func:`evaluate` (and ``unstable eval``) plays game ``i`` with the model in seat ``i % num_players``
and seed ``seed + i``, so every seat is covered equally and a rerun deals the same games. The
opponent is a scripted baseline of the game (``"random"``, the random-legal-move baseline, for every
game with a legal-move reader; ``"heuristic"``, ``"optimal"``, ``"nash"`` where the game has them, see
:mod:`unstable.games.scripted_names`), a LoRA adapter directory (played by the same base model, sharing
its backend and batches) or an API model name (an OpenAI-compatible chat API).

Win/draw/loss rates get Wilson score intervals (sound near 0 and 1 and for few games, where the
normal approximation is not); the mean reward gets Student's t interval.

Parallelism: inside a process, concurrent games are batched into one ``generate`` call;
``num_workers > 1`` spawns that many processes that split the games, each with its own model.
Every process (this one included, restored afterwards) runs torch with ``torch_threads`` intra-op
threads, 1 by default. Measured on the 2-core machine this was written on (shared with other jobs,
load 2.5-5), TicTacToe vs random, untrained tiny models, 64 new tokens, start-up included:

    games, model        in process, 1 torch thread   2 workers, 1 thread each        in process, 2 torch threads
    300, ``tiny:1m``    13.3, 14.0 s                 13.7, 15.6, 20.8, 24.0, 33.1 s  57, 71, 91 s
    100, ``tiny:10m``   23.5, 27.4 s                 21.3, 24.2, 26.0, 31.1 s        17.3, 28.5, 115, 273 s

Two workers were no faster than one batching process with one thread, and two intra-op threads
were fastest only while the other cores happened to be idle (busy-waiting threads collapse when a
core is taken). Hence the defaults: one in-process worker, one thread. More workers pay off with
more free cores. A script that passes ``num_workers > 1`` needs the ``if __name__ == "__main__":``
guard (the workers are spawned, and re-import the main module).
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from typing import Any, Protocol

from rich.markup import escape

from unstable.eval.intervals import mean_interval, wilson_interval
from unstable.inference.base import SamplingParams
from unstable.policies.api import APIOpponentConfig
from unstable.records import AgentSpec, FailedGame, GameRecord, GameSpec, PolicyRef
from unstable.utils.checks import check_int, check_positive


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class OutcomeStats:
    """The evaluated model's results over a set of games (all of them, or one seat's)."""

    games: int
    wins: int
    draws: int
    losses: int
    win_rate: float
    win_rate_ci95: tuple[float, float]
    draw_rate: float
    draw_rate_ci95: tuple[float, float]
    loss_rate: float
    loss_rate_ci95: tuple[float, float]
    mean_reward: float
    mean_reward_ci95: tuple[float, float]
    turns: int  # the model's own turns
    format_ok_rate: float  # fraction of the model's turns with a well-formed answer
    invalid_move_rate: float  # fraction of the model's turns the game rejected as invalid
    invalid_losses: int  # games ended by the model's invalid move

    @classmethod
    def from_records(cls, records: Sequence[GameRecord]) -> OutcomeStats:
        """Score ``spec.eval_player_id`` of each finished game."""
        outcomes = [r.outcome(r.spec.eval_player_id) for r in records]
        rewards = [float(r.final_rewards[r.spec.eval_player_id]) for r in records]
        turns = [t for r in records for t in r.turns_of(r.spec.eval_player_id)]
        n = len(records)
        counts = {k: outcomes.count(k) for k in ("win", "draw", "loss")}
        rates = {k: (c / n if n else math.nan, wilson_interval(c, n)) for k, c in counts.items()}
        return cls(
            n, counts["win"], counts["draw"], counts["loss"], *rates["win"], *rates["draw"], *rates["loss"],
            statistics.fmean(rewards) if rewards else math.nan, mean_interval(rewards), len(turns),
            sum(t.format_ok for t in turns) / len(turns) if turns else math.nan,
            sum(t.invalid for t in turns) / len(turns) if turns else math.nan,
            sum(r.invalid_player == r.spec.eval_player_id for r in records),
        )


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def _stats_from_dict(d: dict[str, Any]) -> OutcomeStats:
    nan = math.nan
    fixed = {k: (tuple(nan if x is None else x for x in v) if k.endswith("_ci95") else (nan if v is None else v))
             for k, v in d.items()}
    return OutcomeStats(**fixed)


@dataclass(frozen=True)
class EvalResult:
    """What :func:`evaluate` found; ``to_dict()`` is the JSON written by ``unstable eval --out``."""

    model: str
    adapter: str | None
    env_id: str
    opponent: str
    num_players: int
    games: int  # games asked for; ``overall.games`` finished, ``failed`` did not
    failed: int
    overall: OutcomeStats
    per_seat: dict[int, OutcomeStats]
    sampling: dict[str, float]
    greedy: bool
    seed: int
    num_workers: int
    wall_s: float
    failures: tuple[str, ...] = field(default=())  # one line per failed game, with its seed

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready dicts: seats as string keys, non-finite floats (the rates of a seat with no
        finished game) as ``None``."""
        d = asdict(self)
        d["per_seat"] = {str(seat): asdict(s) for seat, s in self.per_seat.items()}
        return _json_safe(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        """The result back from :meth:`to_dict`'s JSON (``None`` statistics read as NaN)."""
        d = dict(d)
        d["overall"] = _stats_from_dict(d["overall"])
        d["per_seat"] = {int(seat): _stats_from_dict(s) for seat, s in d["per_seat"].items()}
        d["failures"] = tuple(d.get("failures", ()))
        return cls(**d)

    def table(self) -> Any:
        """A Rich table: one row for all games, one per seat of the model; intervals under the values."""
        from rich import box
        from rich.table import Table

        title = f"{self.model}{f' + {self.adapter}' if self.adapter else ''} vs {self.opponent} on {self.env_id}"
        mode = "greedy" if self.greedy else "sampled"
        caption = (f"{self.games} games ({self.failed} failed), {self.wall_s:.1f}s, {mode}; [lo, hi] = 95% interval; "
                   "reward = mean final reward; fmt ok, invalid = share of the model's moves")
        table = Table(title=escape(title), caption=escape(caption), box=box.SIMPLE_HEAD, show_edge=False,
                      collapse_padding=True)
        for col in ("seat", "games", "win", "draw", "loss", "reward", "fmt ok", "invalid"):
            table.add_column(col, justify="left" if col == "seat" else "right", no_wrap=True)
        rows = [("all", self.overall)] + [(f"P{seat}", s) for seat, s in sorted(self.per_seat.items())]
        for name, s in rows:
            table.add_row(name, str(s.games), _rate(s.win_rate, s.win_rate_ci95), _rate(s.draw_rate, s.draw_rate_ci95),
                          _rate(s.loss_rate, s.loss_rate_ci95), _reward(s.mean_reward, s.mean_reward_ci95),
                          _pct(s.format_ok_rate), _pct(s.invalid_move_rate))
        return table

    def print(self) -> None:
        """Print :meth:`table` to the terminal."""
        from rich.console import Console

        Console().print(self.table())


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


def _rate(x: float, ci: tuple[float, float]) -> str:
    return "-" if math.isnan(x) else escape(f"{x:.0%}\n[{ci[0] * 100:.0f}, {ci[1] * 100:.0f}]")


def _reward(x: float, ci: tuple[float, float]) -> str:
    if math.isnan(x):
        return "-"
    return escape(f"{x:+.2f}" + ("" if math.isnan(ci[0]) else f"\n[{ci[0]:+.2f}, {ci[1]:+.2f}]"))


# ----------------------------------------------------------------------------- playing
@dataclass(frozen=True)
class EvalJob:
    """Everything a worker process needs to play its share of the games (picklable)."""

    model: str  # HF id or local path (already resolved)
    env_id: str
    opponent: str = "random"  # a scripted baseline's name, a LoRA adapter directory, or an API model name
    adapter: str | None = None  # LoRA adapter the evaluated model plays with
    num_players: int = 2
    prompt_template: str = "qwen3-zs"
    sampling: SamplingParams = field(default_factory=SamplingParams)  # the evaluated model's
    opponent_sampling: SamplingParams = field(default_factory=SamplingParams)  # an LLM opponent's
    seed: int = 0
    max_concurrent: int = 32  # games in flight (and rows per batch) per process
    torch_threads: int | None = 1  # torch intra-op threads per process; None: leave torch's setting
    api: APIOpponentConfig = field(default_factory=APIOpponentConfig)  # an API opponent's timeout and retries

    @property
    def model_ref(self) -> PolicyRef:
        """The evaluated model's :class:`~unstable.records.PolicyRef` (uid ``"model"``, with ``adapter``)."""
        return PolicyRef(uid="model", kind="checkpoint", adapter_path=self.adapter)

    def game_spec(self, i: int) -> GameSpec:
        """The spec of game ``i``: the model in seat ``i % num_players`` (seats rotate), the opponent in the others,
        seed ``seed + i``."""
        from unstable.registry.model_registry import fixed_policy_ref

        seat = i % self.num_players
        model = self.model_ref
        opp = fixed_policy_ref(self.opponent)
        agents = tuple(AgentSpec(p, model if p == seat else opp, prompt_template=self.prompt_template)
                       for p in range(self.num_players))
        return GameSpec(game_id=i, env_id=self.env_id, seed=self.seed + i, agents=agents, is_eval=True,
                        eval_player_id=seat)

    def policies(self, backend: Any) -> Callable[[GameSpec], dict[int, Any]]:
        """The policy of each seat of a spec: the model (with ``adapter``) and the opponent, LLMs on ``backend``."""
        return _policies(self, backend)


class PlayJob(Protocol):
    """What :func:`play_eval_games` needs of a job (picklable, for worker processes): :class:`EvalJob`, or the
    cross-play table's :class:`~unstable.eval.crossplay.CrossPlayJob`, whose seats are both LLM checkpoints."""

    model: str  # the base model every LLM seat plays with, one backend per process
    seed: int
    max_concurrent: int
    torch_threads: int | None

    def game_spec(self, i: int) -> GameSpec:
        """The spec of game ``i``."""

    def policies(self, backend: Any) -> Callable[[GameSpec], dict[int, Any]]:
        """The policy of each seat of a spec, LLMs served by ``backend``."""


def _policies(job: EvalJob, backend: Any) -> Callable[[GameSpec], dict[int, Any]]:
    from unstable.policies.llm import LLMPolicy
    from unstable.registry.model_registry import fixed_policy_ref

    model = LLMPolicy(backend, job.model_ref, prompt_template=job.prompt_template, sampling=job.sampling)
    ref = fixed_policy_ref(job.opponent)
    if ref.kind == "scripted":
        from unstable.policies.scripted import make_scripted_policy

        opponent = make_scripted_policy(job.opponent, job.env_id)
    elif ref.kind == "checkpoint":
        opponent = LLMPolicy(backend, ref, prompt_template=job.prompt_template, sampling=job.opponent_sampling)
    else:
        from unstable.policies.api import APIPolicy

        opponent = APIPolicy(job.opponent, **job.api.policy_kwargs())
    return lambda spec: {a.player_id: model if a.player_id == spec.eval_player_id else opponent for a in spec.agents}


def _play(job: PlayJob, indices: Sequence[int], backend: Any, on_done: Callable | None = None) -> list:
    import torch

    from unstable.collection.rollout import play_games

    torch.manual_seed(job.seed * 1_000_003 + indices[0])
    specs = [job.game_spec(i) for i in indices]
    return asyncio.run(play_games(specs, job.policies(backend), max_concurrent=job.max_concurrent, on_done=on_done))


_WORKER_BACKEND: list[Any] = []  # the backend of this worker process, built once by _worker_init


def _worker_init(job: PlayJob) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    from unstable.inference.transformers_backend import TransformersBackend

    if job.torch_threads:
        torch.set_num_threads(job.torch_threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    _WORKER_BACKEND.append(TransformersBackend(job.model, max_batch_size=job.max_concurrent))


def _worker_play(job: PlayJob, indices: list[int]) -> list[GameRecord | FailedGame]:
    return _play(job, indices, _WORKER_BACKEND[0])


def play_eval_games(job: PlayJob, games: int, *, num_workers: int = 1,
                    on_done: Callable[[GameRecord | FailedGame], None] | None = None) -> list[GameRecord | FailedGame]:
    """Play games ``0 .. games-1`` of ``job``; results in game order, failed games included."""
    if games < 1 or num_workers < 1:
        raise ValueError(f"need games >= 1 and num_workers >= 1, got games={games}, num_workers={num_workers}")
    num_workers = min(num_workers, games)
    if num_workers == 1:
        import torch

        from unstable.inference.transformers_backend import TransformersBackend

        threads = torch.get_num_threads()
        torch.set_num_threads(job.torch_threads or threads)
        backend = TransformersBackend(job.model, max_batch_size=job.max_concurrent)
        try:
            return _play(job, range(games), backend, on_done)
        finally:
            backend.close()
            torch.set_num_threads(threads)
    n_chunks = math.ceil(math.ceil(games / job.max_concurrent) / num_workers) * num_workers  # even shares
    size = math.ceil(games / n_chunks)
    chunks = [list(range(i, min(i + size, games))) for i in range(0, games, size)]
    results: dict[int, GameRecord | FailedGame] = {}
    with ProcessPoolExecutor(num_workers, mp_context=get_context("spawn"), initializer=_worker_init,
                             initargs=(job,)) as pool:
        for future in as_completed([pool.submit(_worker_play, job, chunk) for chunk in chunks]):
            for record in future.result():
                results[record.spec.game_id] = record
                if on_done is not None:
                    on_done(record)
    return [results[i] for i in range(games)]


def _check_opponent(opponent: str, api: APIOpponentConfig) -> str:
    """As build() checks a fixed opponent: a path (``./x``, ``/x``, ``~/x``) must be an adapter
    directory, and any other name that is not scripted is played over the API and needs a key.
    Returns the name, a path with ``~`` expanded."""
    from unstable.local_models.resolve import check_adapter_dir, looks_like_path
    from unstable.policies.scripted import SCRIPTED_POLICIES
    from unstable.registry.model_registry import fixed_policy_ref

    if opponent not in SCRIPTED_POLICIES and looks_like_path(opponent):
        check_adapter_dir(os.path.expanduser(opponent), "opponent")  # missing: says so, not "no API key"
        return os.path.expanduser(opponent)
    ref = fixed_policy_ref(opponent)
    if ref.kind == "api":
        from unstable.policies.api import APIPolicy

        APIPolicy(opponent, **api.policy_kwargs())  # raises now if the key is missing
    return opponent


def evaluate(model: str, env_id: str, opponent: str = "random", games: int = 100, adapter: str | None = None,
             prompt_template: str = "qwen3-zs", sampling: SamplingParams | None = None, seed: int = 0,
             num_workers: int = 1, greedy: bool = False, num_players: int = 2, max_concurrent: int = 32,
             torch_threads: int | None = 1, api_timeout_s: float = APIOpponentConfig.timeout_s,
             api_max_retries: int = APIOpponentConfig.max_retries,
             api_turn_deadline_s: float = APIOpponentConfig.turn_deadline_s,
             on_done: Callable[[GameRecord | FailedGame], None] | None = None) -> EvalResult:
    """Play ``games`` games of ``model`` (+ ``adapter``) against ``opponent``, alternating seats.

    ``sampling`` defaults to temperature 0.6, top-p 0.95, 64 new tokens (raise it for thinking
    models); ``greedy`` sets the evaluated model's temperature to 0 (an LLM opponent keeps
    ``sampling``, so games still differ). ``num_workers > 1`` spawns worker processes (see the
    module docstring for when that pays off); ``torch_threads`` is each process's torch thread count
    (``None``: torch's own). An API opponent's calls time out after ``api_timeout_s`` and are retried
    ``api_max_retries`` times within ``api_turn_deadline_s`` a turn (see
    :class:`~unstable.policies.api.APIOpponentConfig`). ``on_done`` is
    called with each finished or failed game, in this process.
    """
    from unstable.games.specs import EvalEnvSpec
    from unstable.local_models.resolve import resolve_model_name

    EvalEnvSpec(env_id, num_players, prompt_template, fixed_opponent=opponent)  # validates env, template, baseline
    check_positive("api_timeout_s", api_timeout_s)
    check_int("api_max_retries", api_max_retries, 0)
    check_positive("api_turn_deadline_s", api_turn_deadline_s)
    api = APIOpponentConfig(api_timeout_s, api_max_retries, api_turn_deadline_s)
    opponent = _check_opponent(opponent, api)
    if adapter is not None and not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
        raise FileNotFoundError(f"adapter {adapter!r} is not a PEFT LoRA adapter directory")
    base = sampling or SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=64)
    job = EvalJob(resolve_model_name(model), env_id, opponent, adapter, num_players, prompt_template,
                  replace(base, temperature=0.0) if greedy else base, base, seed, max_concurrent, torch_threads, api)
    t0 = time.perf_counter()
    results = play_eval_games(job, games, num_workers=num_workers, on_done=on_done)
    finished = [r for r in results if isinstance(r, GameRecord)]
    failures = tuple(r.describe() for r in results if isinstance(r, FailedGame))
    per_seat = {seat: OutcomeStats.from_records([r for r in finished if r.spec.eval_player_id == seat])
                for seat in range(num_players)}
    return EvalResult(job.model, adapter, env_id, opponent, num_players, games, len(failures),
                      OutcomeStats.from_records(finished), per_seat, asdict(job.sampling), greedy, seed,
                      min(num_workers, games), time.perf_counter() - t0, failures)
