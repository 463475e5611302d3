"""The default CPU job: warm-start a tiny model, train it by self-play, and measure the difference.

``unstable quickstart --out RUN_DIR`` (or :func:`run_quickstart`) does, on a laptop CPU:

1. builds (or reuses) the tiny 1M-parameter Qwen3-architecture model;
2. warm-starts it (cached): supervised fine-tuning on positions from random TicTacToe games, with
   the uniform distribution over the legal moves as the target, so it arrives like a pretrained
   base model does, reading the board and answering ``\\boxed{move}`` with a legal move, but with
   no strategy: it plays like the random-legal-move baseline (see :mod:`unstable.models.warmstart`);
3. evaluates that starting checkpoint against the random baseline (``eval_opponent``);
4. trains a LoRA adapter by **asynchronous mirror self-play** through :func:`unstable.build`
   (REINFORCE, the SPIRAL role baseline, a penalty on each invalid move, per-env z-scores);
5. evaluates the final checkpoint the same way (and, with NFSP's ``average_reservoir``, its average policy:
   ``summary.json``'s ``eval.final_average``) and writes ``RUN_DIR/summary.json`` and plots.

RUN_DIR is also the run's Tracker directory, so ``unstable dashboard RUN_DIR`` watches it live and
``unstable replay RUN_DIR`` shows its games. Evaluation decodes greedily (temperature 0): the
policy's most likely move, which is what one would deploy; training samples at ``temperature`` (1 by default).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from unstable.cli.progress import wait_with_progress
from unstable.eval.in_run import EXPLOITABILITY_EVAL
from unstable.eval.intervals import compare_intervals, comparison_line
from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
from unstable.inference.adapters import check_module_names
from unstable.learners.config import LR_SCHEDULES
from unstable.models.warmstart import WarmStartConfig
from unstable.records import AVERAGE_ADAPTER
from unstable.run.config import RUN_MODES, BuildConfig
from unstable.run.league_preset import DEFAULT_MODEL_NAME, league_config
from unstable.samplers.config import OPPONENT_SAMPLING_STRATEGIES, SamplerConfig, opponent_names
from unstable.utils.checks import check_str
from unstable.utils.schema import check_fields, setting
from unstable.utils.yaml_files import read_config_file

Printer = Callable[[str], None]

STRATEGIES = tuple(s for s in OPPONENT_SAMPLING_STRATEGIES if s != "none")  # "none" is "mirror" here
WARM_START_MAX_INVALID = 0.01
"""Above this rate of invalid greedy moves at the start, the job warns that the warm start is short."""


@dataclass
class QuickstartConfig:
    """Settings of the default job; the defaults are what ``unstable quickstart`` runs."""

    out: str | None = None
    """The run directory, which must not hold an earlier run (default: runs/quickstart-<date>-<time>)."""
    env_id: str = "TicTacToe-v0-train"
    model_size: str = "1m"
    prompt_template: str = "qwen3-board"
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    learning_steps: int = setting(20, ge=1)
    """Learner updates. Longer runs at these settings drift: see docs/default-job.md."""
    batch_size: int = setting(384, ge=1)
    """Moves per learner update."""
    mini_batch_size: int = setting(128, ge=1)
    learning_rate: float = setting(1e-3, gt=0)
    """Peak learning rate of the LoRA adapter (see ``lr_schedule``)."""
    lr_schedule: Literal[LR_SCHEDULES] = "linear"
    """``"linear"``: decay from ``learning_rate`` towards 0 over the run; or ``"constant"``."""
    lora_rank: int = setting(8, ge=1)
    lora_alpha: int = setting(16, ge=1)
    lora_target_modules: list[str] | None = setting(None, check=check_module_names)
    """The linear modules the adapter changes, by name (PEFT's ``target_modules``); ``None``: build()'s default,
    all seven projections. ``["q_proj", "k_proj", "v_proj", "o_proj"]`` leaves the MLP alone (docs/training.md,
    "How the format breaks")."""
    invalid_move_penalty: float = -1.0
    """Added to the reward of each invalid move (PenaltyForInvalidMove), on top of the game's outcome."""
    train_error_allowance: int = setting(2, ge=0)
    """Invalid moves in a row a player may retry in training games (evaluation allows none): an
    invalid move costs its penalty without ending the game, so game outcomes teach strategy."""
    num_collection_workers: int = setting(64, ge=1)
    num_eval_workers: int = setting(4, ge=0)
    """Eval games (vs ``eval_opponent``, sampled) kept in flight during training: the learning curve's data."""
    eval_games: int = setting(2000, ge=1)
    """Games per evaluation of the initial and of the final checkpoint (seats alternate)."""
    eval_workers: int = setting(2, ge=1)
    """Worker processes of each evaluation."""
    max_new_tokens: int = setting(16, ge=1)
    temperature: float = setting(1.0, gt=0)
    """Sampling temperature of the training games (and of the in-training eval games and exploitability
    reading); the initial and final evaluations decode greedily whatever it is."""
    top_p: float = setting(1.0, gt=0, le=1)
    """Nucleus of the training games' sampling (and of the in-training eval games and exploitability reading):
    below 1 it cuts the long tail of stray tokens that make answers the game rejects (on Kuhn, not the format
    crises that training adds: docs/training.md, "Fewer stray answers"). The learner models the
    distribution without the nucleus, so a learner that weighs samples by their behaviour ratio (GRPO's and
    PPO's default ``off_policy_correction``) is refused with it; set ``learner: {off_policy_correction: none}``."""
    legal_moves_only: bool = False
    """Every answer of the trained model is one of the legal moves' canonical answers, drawn from its
    distribution renormalised over them, in the training games, the evaluations and the exploitability
    reading; the learner trains on those renormalised log-probs (docs/training.md, "Answers drawn among
    the legal moves"). Needs ``top_p: 1``."""
    seed: int = setting(0, ge=0)
    """Seeds the tiny model, the warm start and the run."""
    algorithm: str = "reinforce"
    """The learner: ``"reinforce"``, ``"a2c"``, ``"ppo"``, ``"grpo"`` or ``"gspo"`` (docs/algorithms.md)."""
    max_staleness: int = setting(8, ge=0)
    """Drop training moves sampled more than this many learner versions ago (counted in ``buffer/dropped_stale``)."""
    mode: Literal[RUN_MODES] = "async"
    """``"async"`` (collect and train at once) or ``"sync"`` (take turns; needs ``max_staleness=0``), as in build()."""
    learner: dict[str, Any] = field(default_factory=dict)
    """More learner settings, as ``build(learner={...})`` takes them (e.g. ``{"beta": 0.05}``)."""
    opponent_sampling_strategy: Literal[STRATEGIES] = "mirror"
    """Who the learner plays in training games: ``"mirror"`` (itself), ``"fixed"`` (``fixed_opponents``),
    ``"lagged"``, ``"match-quality"``, ``"pool"`` or ``"pfsp"`` (past checkpoints and the fixed opponents),
    as in build()."""
    fixed_opponents: list[str] = field(default_factory=lambda: ["random"])
    """The fixed opponents (scripted baselines such as ``"heuristic"``) of the non-mirror strategies."""
    eval_opponent: str = "random"
    """The opponent of the initial, in-training and final evaluations (e.g. ``"heuristic"``)."""
    league: dict[str, Any] | None = None
    """The league preset, as build() takes it (e.g. ``{"exploiters": 1}``): the job's model becomes the main
    model, playing ``opponent_sampling_strategy`` (``"pfsp"`` by default) over its past checkpoints, its
    exploiters' and ``fixed_opponents``, beside main exploiters that play only its newest checkpoint
    (docs/training.md, "A league with main exploiters"). The evaluations measure the main model."""
    samplers: dict[str, Any] = field(default_factory=dict)
    """More opponent- and env-sampler settings, as build() takes them by their flat names (e.g.
    ``{"pfsp_weighting": "even", "opponent_window": 8}``; docs/training.md, "Leagues")."""
    exploitability_eval: Literal[EXPLOITABILITY_EVAL] = "auto"
    """``"auto"``: each checkpoint's exact exploitability is read during training (with eval games, on a game
    with a solver and a direct-answer template, as the default job's); ``"off"``: not (as in build())."""

    def __post_init__(self) -> None:
        if self.out is None:
            self.out = default_out_dir()
        check_str("out", self.out, what="a directory path")
        self.fixed_opponents = list(opponent_names(self.fixed_opponents))  # one name may be a string, as in build()
        check_fields(self)
        if self.mode == "sync" and self.max_staleness != 0:
            raise ValueError(f"mode='sync' trains every move on the version that played it, so it needs "
                             f"max_staleness=0, got {self.max_staleness}")
        _check_mappings(self)
        league_config(self.league)  # a mapping of league settings (checked again below, with the job's strategy)
        if (self.opponent_sampling_strategy == "mirror" and self.league is None and self.fixed_opponents
                and tuple(self.fixed_opponents) != SamplerConfig().fixed_opponents):  # build() names num_actors,
            # which the job sets from the strategy: said here in the job's own terms
            raise ValueError(f"fixed_opponents {list(self.fixed_opponents)} would never play: "
                             "opponent_sampling_strategy 'mirror' is self-play on both seats; choose a strategy that "
                             "plays them ('fixed', 'pfsp', 'psro', ...) or leave fixed_opponents out")
        # everything build() will check, said now rather than after the warm start and the first evaluation
        BuildConfig(**self.build_kwargs(model="tiny"))
        if self.warm_start.env_id != self.env_id or self.warm_start.prompt_template != self.prompt_template:
            raise ValueError("warm_start.env_id and warm_start.prompt_template must match env_id and prompt_template")

    def build_kwargs(self, model: str, **where: Any) -> dict[str, Any]:
        """What the job passes to build() for ``model`` (``where``: ``runs_dir`` and ``run_name``, or
        ``resume_from``)."""
        return dict(
            model_name=model,
            train_envs=[TrainEnvSpec(self.env_id, 2, num_actors=self._trained_seats(),
                                     prompt_template=self.prompt_template, error_allowance=self.train_error_allowance)],
            eval_envs=[EvalEnvSpec(self.env_id, 2, self.prompt_template, fixed_opponent=self.eval_opponent)]
            if self.num_eval_workers else None,
            opponent_sampling_strategy=self._strategy(),
            fixed_opponents=list(self.fixed_opponents),
            **self.samplers,
            **({} if self.league is None else {"league": {"main_opponents": self._league_opponents(), **self.league}}),
            algorithm=self.algorithm,
            learner=dict(self.learner),
            max_staleness=self.max_staleness,
            mode=self.mode,
            exploitability_eval=self.exploitability_eval,
            batch_size=self.batch_size,
            mini_batch_size=self.mini_batch_size,
            learning_rate=self.learning_rate,
            lr_schedule=self.lr_schedule,
            gradient_clipping=1.0,
            max_generation_len=self.max_new_tokens,
            lora_config={"lora_rank": self.lora_rank, "lora_alpha": self.lora_alpha,
                         **({} if self.lora_target_modules is None else {"target_modules": self.lora_target_modules})},
            activation_checkpointing=False,
            gradient_checkpointing=False,
            temperature=self.temperature,
            vllm_config={"top_p": self.top_p, **({"legal_moves_only": True} if self.legal_moves_only else {})},
            reward_transforms=_transforms(self),
            wandb_project=None,
            **where,
            seed=self.seed,
        )

    def _league_opponents(self) -> str:
        """The main model's strategy in a league: the job's, unless that is mirror self-play (then pfsp)."""
        return "pfsp" if self.opponent_sampling_strategy == "mirror" else self.opponent_sampling_strategy

    def describe_training(self) -> str:
        """Who the learner plays, in a few words: ``"self-play"``, ``"psro opponents"``, or a league's
        ``"a league: pfsp, 1 exploiter"``."""
        strategy = self._strategy()
        if self.league is not None:
            n = league_config({"main_opponents": strategy, **self.league}).exploiters
            return f"a league: {strategy}, {n} exploiter{'s' if n != 1 else ''}"
        return "self-play" if strategy == "mirror" else f"{strategy} opponents"

    def _trained_seats(self) -> int:
        """Seats of a train game that the learner plays and trains on: both in mirror self-play, unless NFSP's
        ``average_eta`` seats the average policy in the other; one with any other strategy (its opponent's seat)."""
        return 2 if self.opponent_sampling_strategy == "mirror" and self.samplers.get("average_eta") is None else 1

    def _strategy(self) -> str:
        """The strategy build() gets: the job's, or in a league the main model's (the preset requires they agree)."""
        return self.opponent_sampling_strategy if self.league is None else self._league_opponents()


def _check_mappings(cfg: QuickstartConfig) -> None:
    """``learner`` and ``samplers`` are mappings, and ``samplers`` names only settings the job does not set
    itself (build() checks their values)."""
    if not isinstance(cfg.learner, dict):
        raise ValueError(f"learner must be a mapping of learner settings (e.g. {{'beta': 0.05}}), got {cfg.learner!r}")
    if not isinstance(cfg.samplers, dict):
        raise ValueError(f"samplers must be a mapping of sampler settings, got {cfg.samplers!r}")
    own = {"opponent_sampling_strategy", "fixed_opponents"}
    known = set(SamplerConfig.__dataclass_fields__) - own
    unknown = sorted(set(cfg.samplers) - known)
    if unknown:
        hint = " (set them at the top level)" if set(unknown) & own else ""
        raise ValueError(f"samplers: unknown setting(s) {unknown}{hint}; known: {sorted(known)}")


def load_quickstart_config(path: str, **overrides: Any) -> QuickstartConfig:
    """A :class:`QuickstartConfig` from a YAML file of its fields (``warm_start`` as a mapping of
    :class:`~unstable.models.warmstart.WarmStartConfig`'s), with ``overrides`` on top."""
    data = read_config_file(path) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a quickstart config is a mapping of QuickstartConfig fields")
    known = set(QuickstartConfig.__dataclass_fields__)
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise ValueError(f"{path}: unknown quickstart settings {unknown}; known: {sorted(known)}")
    data.update(overrides)
    if not isinstance(data.get("warm_start"), WarmStartConfig):
        warm_start = data.get("warm_start") or {}
        if not isinstance(warm_start, dict):
            raise ValueError(f"{path}: warm_start must be a mapping of warm-start settings (e.g. {{max_rounds: 20}}), "
                             f"got {warm_start!r}")
        warm_start = dict(warm_start)
        for key in ("env_id", "prompt_template"):  # the warm start is for the job's game, unless it says otherwise
            if key in data:
                warm_start.setdefault(key, data[key])
        fields = set(WarmStartConfig.__dataclass_fields__)
        unknown = sorted(set(warm_start) - fields, key=str)
        if unknown:
            raise ValueError(f"{path}: unknown warm_start settings {unknown}; known: {sorted(fields)}")
        data["warm_start"] = WarmStartConfig(**warm_start)
    return QuickstartConfig(**data)


QUICKSTART_FILE = "quickstart.json"
"""The job's settings, written to its run directory before training, so ``quickstart --resume`` can go on."""


def load_resumable(run_dir: str) -> QuickstartConfig:
    """The settings of the quickstart run in ``run_dir`` (its ``quickstart.json``), to resume it."""
    path = Path(run_dir) / QUICKSTART_FILE
    if not path.is_file():
        raise ValueError(f"{run_dir} is not a quickstart run that reached training (no {QUICKSTART_FILE}); "
                         "start a new one: unstable quickstart")
    if (Path(run_dir) / "summary.json").is_file():
        raise ValueError(f"{run_dir} is a finished quickstart run (it holds summary.json): nothing to resume")
    return load_quickstart_config(str(path), out=str(run_dir))


def _check_out_dir(out: str) -> Path:
    path = Path(out)
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{out!r} already holds files; choose a new --out directory")
    return path


def _eval(model: str, adapter: str | None, cfg: QuickstartConfig, label: str, say: Printer) -> Any:
    from unstable.eval.evaluation import evaluate
    from unstable.inference.base import SamplingParams

    done = [0]
    step = max(1, cfg.eval_games // 4)

    def progress(_record: Any) -> None:
        done[0] += 1
        if done[0] % step == 0:
            say(f"  {label}: {done[0]}/{cfg.eval_games} games")

    return evaluate(model, cfg.env_id, opponent=cfg.eval_opponent, games=cfg.eval_games, adapter=adapter,
                    prompt_template=cfg.prompt_template, greedy=True, num_workers=cfg.eval_workers,
                    sampling=SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=cfg.max_new_tokens,
                                            legal_moves_only=cfg.legal_moves_only),
                    seed=cfg.seed + 10_000, on_done=progress)


def _transforms(cfg: QuickstartConfig) -> tuple:
    import unstable.reward_transformations as retra

    return (
        retra.ComposeFinalRewardTransforms([retra.RoleAdvantageByEnvFormatter()]),
        retra.ComposeStepRewardTransforms([retra.PenaltyForInvalidMove(0.0, cfg.invalid_move_penalty)]),
        retra.ComposeSamplingRewardTransforms([retra.NormalizeRewardsByEnv(True)]),
    )


def _train(model: str, cfg: QuickstartConfig, run_dir: Path, say: Printer) -> tuple[str, int]:
    """Self-play training through build(); returns the last checkpoint's path and the learner steps. A run
    directory that already holds checkpoints (``--resume``) goes on from its newest complete one."""
    import unstable

    where = ({"resume_from": str(run_dir)} if (run_dir / "checkpoints").is_dir()
             else {"runs_dir": str(run_dir.parent), "run_name": run_dir.name})
    run = unstable.build(**cfg.build_kwargs(model, **where))
    # a league's models keep their checkpoints apart; the main model is the job's, under the default name
    return train_to_checkpoint(run, cfg.learning_steps, cfg.num_collection_workers, cfg.num_eval_workers, say,
                               model=None if cfg.league is None else DEFAULT_MODEL_NAME)


def train_to_checkpoint(run: Any, learning_steps: int, collection_workers: int, eval_workers: int,
                        say: Printer, model: str | None = None) -> tuple[str, int]:
    """Train ``run`` for ``learning_steps`` with progress lines, stop it, and return its newest complete
    checkpoint and that checkpoint's step (the jobs evaluate it next). ``model``: in a run of several
    models (a league), the one whose checkpoints (``checkpoints/<model>/``) are meant."""
    from unstable.learners.checkpoints import latest_complete

    try:
        run.start(learning_steps, collection_workers, eval_workers, block=False)
        wait_with_progress(run, learning_steps, say)
    finally:
        run.stop()
    where = Path(run.run_dir, "checkpoints", *([model] if model else []))
    latest = latest_complete(where)
    if latest is None:
        raise RuntimeError(f"training finished without a checkpoint in {where}")
    return str(latest[1]), latest[0]


def _summary_entry(result: Any, adapter: str | None) -> dict[str, Any]:
    o = result.overall
    return {"win_rate": o.win_rate, "ci95": list(o.win_rate_ci95), "games": o.games, "draw_rate": o.draw_rate,
            "loss_rate": o.loss_rate, "invalid_move_rate": o.invalid_move_rate, "adapter": adapter,
            "per_seat": {str(seat): {"win_rate": s.win_rate, "ci95": list(s.win_rate_ci95), "games": s.games}
                         for seat, s in result.per_seat.items()}}


def run_quickstart(cfg: QuickstartConfig | None = None, say: Printer = print, resume: bool = False,
                   ) -> dict[str, Any]:
    """Run the default job and return the summary it writes to ``cfg.out/summary.json``. ``resume``: go on with
    the stopped job in ``cfg.out`` (:func:`load_resumable`): the warm start is cached, the training resumes from
    its newest checkpoint."""
    from unstable.local_models.tiny import tiny_model_path
    from unstable.models.checks import check_model, check_target_modules
    from unstable.models.warmstart import mixes, warm_start_path
    from unstable.run.preflight import check_api_opponents
    from unstable.tracking.run_dir import atomic_write_json
    from unstable.ui.plots import plot_run, pyplot

    cfg = cfg or QuickstartConfig()
    run_dir = (Path(cfg.out) if resume else _check_out_dir(cfg.out)).resolve()
    # before the warm start: a misspelt opponent is otherwise read as an API model minutes later
    check_api_opponents([cfg.eval_opponent, *(cfg.fixed_opponents if cfg._strategy() != "mirror" else ())])
    pyplot()  # the job ends with plots: without matplotlib, fail now rather than after the training
    t0 = time.perf_counter()
    say(f"[1/5] tiny model ({cfg.model_size})")
    base = tiny_model_path(cfg.model_size, seed=cfg.seed)
    if cfg.lora_target_modules is not None:  # before the warm start, not when build() loads the model
        check_target_modules(check_model(base), cfg.lora_target_modules, "lora_target_modules")
    ws = cfg.warm_start
    mixing = mixes(ws)
    own = ws.teacher in ("random", "mixed")  # a target of the warm start's own, not a baseline's
    teacher = (", labelled with a random mixture of the legal moves per position" if ws.teacher == "mixed"
               else "" if own else f", labelled with the {ws.teacher} baseline's "
               f"{'probabilities' if mixing else 'moves'}")
    likely = ("a legal most likely move" if own else f"one of the {ws.teacher} baseline's moves as most likely")
    close = f", within {ws.target_teacher_tv:.2f} (total variation) of its mixture," if mixing else ""
    say(f"[2/5] warm start on rounds of {ws.positions} random-game positions of {cfg.env_id}{teacher}, until "
        f"{100 * ws.target_legal_mass:.3g}% probability on legal moves{close} and {likely} in "
        f"{100 * ws.target_greedy_legal:.3g}% of held-out positions (at most {ws.max_rounds} rounds)")
    last_print = [0.0]

    def ws_progress(step: int, total: int, stats: dict[str, float]) -> None:
        if time.perf_counter() - last_print[0] > 10 or step == total:
            last_print[0] = time.perf_counter()
            line = (f"  round {stats['round']}, step {step}/{total}: loss {stats['loss']:.3f}, "
                    f"probability on legal moves {stats['legal_mass']:.1%}")
            if "held_out_legal_mass" in stats:
                line += (f" (held-out positions: {stats['held_out_legal_mass']:.1%}, most likely move legal in "
                         f"{stats['held_out_greedy_legal']:.1%}")
                if not own:
                    line += f", the {ws.teacher} baseline's in {stats['held_out_greedy_teacher']:.1%}"
                if mixing:
                    line += f", {stats['held_out_teacher_tv']:.3f} from its mixture"
                line += ")"
            if stats.get("undone"):
                line += "; lower than the round before, so that round's weights are kept and the warm start stops"
            say(line)

    model, cached = warm_start_path(base, cfg.warm_start, progress=ws_progress)
    say(f"  {'reused the cached' if cached else 'saved the'} warm start: {model}")
    say(f"[3/5] evaluating the starting checkpoint: {cfg.eval_games} greedy games vs {cfg.eval_opponent}")
    initial = _eval(str(model), None, cfg, "initial", say)
    say(f"  win rate {_fmt(initial)}")
    warnings = []
    if initial.overall.invalid_move_rate > WARM_START_MAX_INVALID:
        warnings.append(
            f"the warm start still makes invalid moves ({initial.overall.invalid_move_rate:.1%} of greedy moves): "
            f"self-play will spend its steps on legality rather than strategy; a longer warm start helps "
            f"(--warm-start-max-rounds {2 * ws.max_rounds}, or --warm-start-positions {2 * ws.positions})")
        say(f"  warning: {warnings[-1]}")
    how = ("self-play" if cfg._strategy() == "mirror" else
           f"{'league, ' if cfg.league is not None else ''}{cfg._strategy()} opponents")
    say(f"[4/5] {how} training: {cfg.learning_steps} learner steps of {cfg.batch_size} moves "
        f"(watch it: unstable dashboard {run_dir})")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / QUICKSTART_FILE, asdict(cfg))
    t_train = time.perf_counter()
    adapter, steps = _train(str(model), cfg, run_dir, say)
    train_s = time.perf_counter() - t_train
    say(f"[5/5] evaluating the final checkpoint ({Path(adapter).name}): {cfg.eval_games} greedy games "
        f"vs {cfg.eval_opponent}")
    final = _eval(str(model), adapter, cfg, "final", say)
    say(f"  win rate {_fmt(final)}")
    average, average_path = None, os.path.join(adapter, AVERAGE_ADAPTER)
    if cfg.learner.get("average_reservoir") is not None:  # NFSP reports its average policy: evaluated the same way
        say(f"  and its NFSP average policy ({Path(adapter).name}/{AVERAGE_ADAPTER}):")
        average = _eval(str(model), average_path, cfg, "final average", say)
        say(f"  win rate {_fmt(average)}")
    change = compare_intervals(initial.overall.win_rate_ci95, final.overall.win_rate_ci95)
    summary = {
        "env_id": cfg.env_id,
        "learner_steps": steps,
        "wall_s": round(time.perf_counter() - t0, 1),
        "train_wall_s": round(train_s, 1),
        "model": str(model),
        "warm_start_cached": cached,
        "eval": {"initial": _summary_entry(initial, None), "final": _summary_entry(final, adapter),
                 "opponent": cfg.eval_opponent, "decoding": "greedy"},
        "improved": change == "higher",
        "worse": change == "lower",
        "warnings": warnings,
        "config": asdict(cfg),
    }
    if average is not None:
        summary["eval"]["final_average"] = _summary_entry(average, average_path)
    atomic_write_json(run_dir / "summary.json", summary)
    atomic_write_json(run_dir / "eval_initial.json", initial.to_dict())
    atomic_write_json(run_dir / "eval_final.json", final.to_dict())
    plots = plot_run(run_dir)
    say("")
    opponent = "random-legal-move" if cfg.eval_opponent == "random" else repr(cfg.eval_opponent)
    say(f"win rate vs the {opponent} baseline ({cfg.eval_games} games each, 95% intervals):")
    say(f"  initial (warm start)    {_fmt(initial)}")
    say(f"  final ({steps} steps)   {_fmt(final)}")
    if average is not None:
        say(f"  its NFSP average        {_fmt(average)}")
    verdict = comparison_line(change, "win rate")
    say(f"  {verdict}; done in {summary['wall_s']:.0f}s")
    say(f"summary: {run_dir / 'summary.json'}; plots: {', '.join(p.name for p in plots)} in {run_dir / 'plots'}")
    say(f"next: unstable replay {run_dir} --last 3")
    return summary


def _fmt(result: Any) -> str:
    o = result.overall
    lo, hi = o.win_rate_ci95
    return f"{o.win_rate:.3f} [{lo:.3f}, {hi:.3f}] (draws {o.draw_rate:.2f}, invalid moves {o.invalid_move_rate:.1%})"


def default_out_dir(runs_dir: str = "runs") -> str:
    """A run directory under ``runs_dir`` named after the local time (``quickstart-YYYYmmdd-HHMMSS``); not created
    here."""
    return os.path.join(runs_dir, time.strftime("quickstart-%Y%m%d-%H%M%S"))
