"""The ``unstable`` command line."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from unstable.cli.league_table import add_league_table_parser
from unstable.games.scripted_names import describe_scripted_baselines
from unstable.run.arguments import settings_help
from unstable.ui.options import add_dashboard_arguments
from unstable.utils.fields import add_field_options

# QuickstartConfig and WarmStartConfig fields offered as options (--warm-start-* for the latter),
# their --help made from the fields' docstrings
TASK_OPTIONS = ("out", "task", "level", "learning_steps", "learning_rate", "num_samples", "batch_size", "eval_problems",
                "format_weight", "seed")
TASK_WARM_START_OPTIONS = ["examples"]
# APIOpponentConfig fields offered as --api-* options of eval (build()'s api_timeout_s, api_max_retries, ...)
API_OPTIONS = ["timeout_s", "max_retries", "turn_deadline_s"]
WARM_START_OPTIONS = ["positions", "target_legal_mass", "target_greedy_legal", "max_rounds"]
QUICKSTART_OPTIONS = ["out", "learning_steps", "batch_size", "learning_rate", "lr_schedule", "eval_games",
                      "eval_workers", "seed", "algorithm", "max_staleness", "exploitability_eval"]


def plain_text(doc: str) -> str:
    """A docstring as ``--help`` shows it: reST's inline markup (````x````, ``:class:`~a.B```) taken out."""
    doc = re.sub(r":[a-z]+:`~?(?:[\w.]*\.)?([^`]+)`", r"\1", doc)
    return doc.replace("``", "")


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from unstable.local_models.tiny import build_tiny_model

    t0 = time.perf_counter()
    path = build_tiny_model(args.out, size=args.size, seed=args.seed, overwrite=args.overwrite)
    print(f"built tiny model ({args.size}, seed {args.seed}) at {path} in {time.perf_counter() - t0:.1f}s")
    return 0


def _print_game(record) -> None:
    from unstable.records import FailedGame

    if isinstance(record, FailedGame):
        print(f"  game {record.spec.game_id:>3}: FAILED ({record.describe()})")
        return
    seat = record.spec.eval_player_id
    moves = " ".join(f"{t.player_id}:{t.action}" for t in record.turns)
    verdict = record.outcome(seat) if seat is not None else "-"
    note = " (invalid move)" if record.invalid_player is not None else ""
    print(f"  game {record.game_id:>3} seed {record.seed:>4} model=P{seat}: {verdict:<4}{note}  {moves}")


def _cmd_play(args: argparse.Namespace) -> int:
    from unstable.eval.play import play_vs_opponent
    from unstable.inference.base import SamplingParams
    from unstable.local_models.resolve import resolve_model_name
    from unstable.utils.checks import check_int

    check_int("--concurrency", args.concurrency, 1)  # before the model loads, by the option's name
    t0 = time.perf_counter()
    print(f"resolving model {args.model!r} ...", flush=True)
    model = resolve_model_name(args.model)
    print(f"playing {args.games} games of {args.env}: {model} vs {args.opponent}", flush=True)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens)
    results, stats = play_vs_opponent(
        model,
        args.env,
        games=args.games,
        opponent=args.opponent,
        adapter_path=args.adapter,
        prompt_template=args.template,
        sampling=sampling,
        max_concurrent=args.concurrency,
        seed=args.seed,
        on_done=_print_game,
    )
    print(
        f"\n{stats.games} games in {time.perf_counter() - t0:.1f}s: {stats.wins} wins, {stats.draws} draws, "
        f"{stats.losses} losses ({stats.invalid_losses} by invalid move), {len(results) - stats.games} failed; "
        f"win rate {stats.win_rate:.2f}, well-formed answers {stats.format_ok_rate:.0%}"
    )
    return 0


def _cmd_quickstart(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from unstable.cli.quickstart import QuickstartConfig, load_quickstart_config, load_resumable, run_quickstart

    if args.resume:
        if args.config or args.out:
            raise ValueError("--resume RUN_DIR goes on with that run's own settings: give no --config or --out")
        cfg = load_resumable(args.resume)
    elif args.config:
        cfg = load_quickstart_config(args.config, **({"out": args.out} if args.out else {}))
    else:
        cfg = QuickstartConfig(out=args.out)
    changes = {k: getattr(args, k) for k in QUICKSTART_OPTIONS if k != "out" and getattr(args, k) is not None}
    if "batch_size" in changes:
        changes["mini_batch_size"] = min(cfg.mini_batch_size, changes["batch_size"])
    cfg = replace(cfg, **changes)
    ws_changes = {k: getattr(args, f"warm_start_{k}") for k in WARM_START_OPTIONS
                  if getattr(args, f"warm_start_{k}") is not None}
    if ws_changes:
        cfg = replace(cfg, warm_start=replace(cfg.warm_start, **ws_changes))
    print(f"unstable quickstart: {cfg.describe_training()} on {cfg.env_id} with the tiny {cfg.model_size} model "
          f"-> {cfg.out}", flush=True)
    try:
        summary = run_quickstart(cfg, say=lambda line: print(line, flush=True), resume=bool(args.resume))
    except KeyboardInterrupt:
        print(f"\nunstable quickstart: stopping; a finished warm start is cached (the next quickstart reuses it), "
              f"and what the job wrote is in {cfg.out} (go on: unstable quickstart --resume {cfg.out})",
              file=sys.stderr, flush=True)
        raise
    return 0 if summary["learner_steps"] == cfg.learning_steps else 1


def _cmd_task_quickstart(args: argparse.Namespace) -> int:
    from unstable.cli.quickstart import default_out_dir
    from unstable.cli.task_quickstart import TaskQuickstartConfig, run_task_quickstart
    from unstable.models.task_warmstart import TaskWarmStartConfig

    changes = {k: getattr(args, k) for k in TASK_OPTIONS if getattr(args, k) is not None}
    ws_changes = {k: getattr(args, f"warm_start_{k}") for k in TASK_WARM_START_OPTIONS
                  if getattr(args, f"warm_start_{k}") is not None}
    if ws_changes:
        changes["warm_start"] = TaskWarmStartConfig(**ws_changes)
    cfg = TaskQuickstartConfig(**{"out": default_out_dir(), **changes})
    print(f"unstable quickstart-task: GRPO on {cfg.task} (level {cfg.level}) with the tiny {cfg.model_size} model "
          f"-> {cfg.out}", flush=True)
    summary = run_task_quickstart(cfg, say=lambda line: print(line, flush=True))
    return 0 if summary["learner_steps"] == cfg.learning_steps else 1


def _cmd_eval(args: argparse.Namespace) -> int:
    from unstable.eval.evaluation import evaluate
    from unstable.inference.base import SamplingParams
    from unstable.models.checks import check_adapter
    from unstable.tracking.run_dir import atomic_write_json
    from unstable.utils.paths import check_writable_file

    given = {k: v for k, v in (("temperature", args.temperature), ("top_p", args.top_p)) if v is not None}
    sampling = SamplingParams(**given, max_new_tokens=args.max_new_tokens or 64)  # games: 0.6, 0.95, 64 unless given
    done = []

    def progress(record) -> None:
        done.append(record)
        if len(done) % max(1, args.games // 10) == 0 or len(done) == args.games:
            print(f"  {len(done)}/{args.games} games", flush=True)

    if args.out:  # before the first game: the results must have somewhere to go
        check_writable_file("--out", args.out)
    if (args.average_from or args.average_weights != "uniform") and not args.all_checkpoints:
        raise ValueError("--average-from and --average-weights weigh the checkpoints that --exploitability "
                         "--all-checkpoints reads: add those")
    if args.average_from < 0:
        raise ValueError(f"--average-from is a learner step >= 0, got {args.average_from}")
    if args.checkpoint_every != 1 and not args.all_checkpoints:
        raise ValueError("--checkpoint-every picks among the checkpoints that --exploitability --all-checkpoints "
                         "reads: add those")
    if args.checkpoint_every < 1:
        raise ValueError(f"--checkpoint-every is a number of learner steps >= 1, got {args.checkpoint_every}")
    model, adapter, template = args.model, args.adapter, args.template
    env_id, num_players = args.env or "TicTacToe-v0-train", 2 if args.num_players is None else args.num_players
    if args.run:
        if args.model or args.adapter:
            raise ValueError("give either --run (with --checkpoint) or --model/--adapter, not both")
        model, adapter, run_template = run_checkpoint(args.run, args.checkpoint)
        game = run_game(args.run, args.env)
        env_id = game.get("env_id", env_id)
        num_players = args.num_players if args.num_players is not None else game.get("num_players", 2)
        template = template or game.get("prompt_template") or run_template
    elif args.checkpoint:
        raise ValueError("--checkpoint names a checkpoint of a run: give --run RUN_DIR too")
    if not model:
        raise ValueError("give --model (a HF id, a local path or tiny), or --run RUN_DIR")
    if adapter is not None:  # a damaged one: said now, not as a loader's traceback
        check_adapter(adapter, "--adapter" if args.adapter else f"the checkpoint of {args.run}")
    if template is None:
        from unstable.models.warmstart import warm_start_template

        template = warm_start_template(model)
        if template is not None:
            print(f"prompt template {template!r}: the one {model} was warm-started with (--template overrides)",
                  flush=True)
    if args.exploitability:
        from unstable.cli.exploitability import run_exploitability

        return run_exploitability(args, model, adapter, template)
    template = template or "qwen3-zs"
    api = {f"api_{k}": getattr(args, f"api_{k}") for k in API_OPTIONS if getattr(args, f"api_{k}") is not None}
    print(f"evaluating {model}{f' + {adapter}' if adapter else ''} on {env_id} against {args.opponent}: "
          f"{args.games} games", flush=True)
    result = evaluate(model, env_id, opponent=args.opponent, games=args.games, adapter=adapter,
                      prompt_template=template, sampling=sampling, seed=args.seed, num_workers=args.workers,
                      greedy=args.greedy, num_players=num_players, torch_threads=args.torch_threads or None,
                      on_done=progress, **api)
    result.print()
    for line in result.failures:
        print(f"  {line}")
    if args.out:
        atomic_write_json(args.out, result.to_dict())
        print(f"results written to {args.out}")
    if result.games and result.overall.games == 0:  # nothing measured: not a result, an error
        first = result.failures[0] if result.failures else "no game finished"
        print(f"unstable eval: error: all {result.games} games failed, so there is nothing to report; the first: "
              f"{first}", file=sys.stderr)
        return 1
    return 0


def run_checkpoint(run_dir: str, uid: str | None = None) -> tuple[str, str | None, str | None]:
    """(base model, adapter directory, prompt template) of the checkpoint ``uid`` of a run: any
    model's in a run with several (``bob-ckpt-3``); ``None``: the first model's newest. ``ckpt-3/average``:
    that checkpoint's NFSP average policy (its ``average/`` adapter; the base model's is the base model)."""
    import os
    from pathlib import Path

    from unstable.records import AVERAGE_ADAPTER
    from unstable.run.resume import REGISTRY_FILE, read_run_files

    if uid is not None and uid.endswith(f"/{AVERAGE_ADAPTER}"):
        model, adapter, template = run_checkpoint(run_dir, uid.removesuffix(f"/{AVERAGE_ADAPTER}"))
        return model, os.path.join(adapter, AVERAGE_ADAPTER) if adapter is not None else None, template
    config, registry = read_run_files(run_dir)
    entries = {m["uid"]: m for m in registry["models"] if not m.get("fixed")}
    models = config.get("models") or [{"name": "model", "model_name": config.get("model_name")}]
    if uid is None:
        first = models[0].get("name", "model")
        mine = [m for m in entries.values() if (m.get("lineage") or "model") in (first, "model")]
        if not mine:
            raise ValueError(f"{Path(run_dir) / REGISTRY_FILE} holds no checkpoint of {first!r}: the run stopped "
                             "before its first")
        uid = max(mine, key=lambda m: m["iteration"])["uid"]
    if uid not in entries:
        raise ValueError(f"{uid!r} is not a checkpoint of {run_dir}; its checkpoints: {sorted(entries)}")
    entry = entries[uid]
    lineage = entry.get("lineage") or "model"
    model = next((m for m in models if m.get("name", "model") == lineage), models[0])
    envs = config.get("train_envs") or [{}]
    return model["model_name"], entry.get("path_or_name"), envs[0].get("prompt_template")


def run_game(run_dir: str, env_id: str | None = None) -> dict:
    """The game of a run that ``unstable eval --run`` plays: its ``config.json``'s training game (``env_id``,
    ``num_players``, ``prompt_template``) named ``env_id``, or its only one when ``env_id`` is ``None``. A run
    that trained on several games needs ``env_id`` (each is evaluated with its own command); an ``env_id``
    the run did not train on is played as given (``{"env_id": env_id}``)."""
    import json
    from pathlib import Path

    config = json.loads((Path(run_dir) / "config.json").read_text())
    by_id: dict[str, dict] = {}
    for spec in config.get("train_envs") or []:
        if spec.get("env_id"):  # a game (an environment is saved by its name and class)
            by_id.setdefault(spec["env_id"], spec)  # the first spec of a game gives its template
    games = list(by_id.values())
    if env_id is not None:
        return next((spec for spec in games if spec["env_id"] == env_id), {"env_id": env_id})
    if len(games) == 1:
        return games[0]
    if not games:
        raise ValueError(f"{run_dir} trained on no TextArena game (its environments are datasets): give --env")
    raise ValueError(f"{run_dir} trained on {len(games)} games ({', '.join(g['env_id'] for g in games)}): "
                     "give --env with the one to evaluate (one command per game)")


def _cmd_plot(args: argparse.Namespace) -> int:
    from unstable.ui.plots import plot_run

    paths = plot_run(args.run_dir)
    for path in paths:
        print(path)
    if not paths:
        print(f"no plots: {args.run_dir} has no metrics to plot yet")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    import unstable
    from unstable.run.config_file import load_config

    if args.resume:
        from unstable.run.resume import load_run_config

        if args.run_name is not None:
            raise ValueError("--run-name cannot be combined with --resume (the run keeps its directory)")
        if args.config:
            build_kwargs, start_kwargs = load_config(args.config, args.set)
        else:
            build_kwargs, start_kwargs = load_run_config(args.resume, args.set)
        build_kwargs["resume_from"] = args.resume
        source = f"resuming {args.resume}"
    elif args.config:
        build_kwargs, start_kwargs = load_config(args.config, args.set)
        if args.run_name is not None:  # "" too: build() refuses it, rather than picking a name itself
            build_kwargs["run_name"] = args.run_name
        source = args.config
    else:
        raise ValueError("give --config FILE (a new run) or --resume RUN_DIR (continue a run)")
    from unstable.cli.progress import wait_with_progress

    total = start_kwargs["learning_steps"]
    print(f"unstable train: {source} -> {total} learner steps in all", flush=True)
    if args.resume:  # decided from the run directory, before Ray, an inference actor and a learner start
        from unstable.run.resume import nothing_to_train

        done = nothing_to_train(args.resume, total)
        if done is not None:
            print(f"unstable: {done}", flush=True)
            print(f"run directory: {os.path.abspath(args.resume)}")
            return 0
    run = unstable.build(**build_kwargs)
    try:
        summary = run.start(**start_kwargs, block=False)
        if summary is None:  # training to do: a line per learner step while it runs
            summary = wait_with_progress(run, total, lambda line: print(line, flush=True))
    except Exception as exc:  # the run's error, raised by Run.wait() (from an actor): one message, not Ray's trace
        print(run_failure(exc, run.run_dir, _save_traceback(exc, run.run_dir)), file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"\nunstable train: stopping; {_what_stays(run.run_dir)}", file=sys.stderr, flush=True)
        raise
    finally:
        run.stop()
    print(f"done: {len(summary['checkpoints'])} checkpoints, collector {summary['collector']}")
    print(f"run directory: {summary['run_dir']}")
    return 0


def _save_traceback(exc: BaseException, run_dir: str) -> str | None:
    """Write the run's error with its full traceback (the actor's, as Ray gives it) to
    ``logs/run_error.txt``; returns that path, or ``None`` if it can't be written there."""
    import traceback

    path = os.path.join(run_dir, "logs", "run_error.txt")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def run_failure(exc: BaseException, run_dir: str, traceback_file: str | None = None) -> str:
    """What ``unstable train`` prints when a run stops with an error: the error and its causes, one
    line each (type and message; the remote traceback Ray adds is left out), and where to look next
    (``traceback_file``: where the full traceback was written)."""
    where, exc = _unwrap(exc)
    lines = [f"unstable train: error: the run stopped{f' in {where}' if where else ''}: {_describe(exc)}"]
    seen = {id(exc)}
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while cause is not None and id(cause) not in seen and len(lines) < 6:
        seen.add(id(cause))
        where, cause = _unwrap(cause)
        lines.append(f"  caused by{f' (in {where})' if where else ''} {_describe(cause)}")
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    failed = os.path.join(run_dir, "logs", "failed_games.jsonl")
    if traceback_file is not None:
        lines.append(f"  the full traceback is in {traceback_file}")
    lines.append(f"  failed games, with their tracebacks, are logged in {failed}; {_what_stays(run_dir)}")
    return "\n".join(lines)


def _what_stays(run_dir: str) -> str:
    """Where a stopped run's checkpoints are, and how to continue it (after an error, or Ctrl-C)."""
    return (f"the checkpoints written so far stay in {os.path.join(run_dir, 'checkpoints')} "
            f"(continue with: unstable train --resume {run_dir})")


def _unwrap(exc: BaseException) -> tuple[str | None, BaseException]:
    """A Ray task error's original exception, and the actor method it was raised in."""
    where = None
    while isinstance(getattr(exc, "cause", None), BaseException) and exc.cause is not exc:  # RayTaskError
        found = re.search(r"ray::(\S+?)(\(\))?(\x1b\[\d+m)?\s", str(exc))  # "ray::Collector.collect() (pid=..."
        where = found.group(1) if found else "an actor"
        exc = exc.cause
    return where, exc


def _describe(exc: BaseException) -> str:
    """``Type: message`` on one line."""
    message = " ".join(str(exc).split()) or "(no message)"
    if len(message) > 600:
        message = message[:600] + " ..."
    return f"{type(exc).__name__}: {message}"


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from unstable.ui.terminal_interface import run

    try:
        return run(args)
    except ConnectionError as exc:
        raise ValueError(str(exc)) from exc


def _cmd_replay(args: argparse.Namespace) -> int:
    from unstable.ui.replay import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    """The ``unstable`` parser: a subcommand per job, each with its handler in ``fn``."""
    parser = argparse.ArgumentParser(prog="unstable", description=plain_text(__doc__))
    opponent_help = (f"a scripted baseline ({describe_scripted_baselines()}), a LoRA adapter directory, "
                     "or an API model name")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tiny-model", help="build a tiny Qwen3-architecture model with a locally trained tokenizer")
    p.add_argument("--out", required=True, help="directory to write the HF model into")
    p.add_argument("--size", default="1m", help="model size (1m, 10m, 50m)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out directory")
    p.set_defaults(fn=_cmd_tiny_model)

    p = sub.add_parser("play", help="play a model against a scripted opponent and print the outcomes")
    p.add_argument("--model", default="tiny", help="HF id, local path, or tiny / tiny:<size>")
    p.add_argument("--adapter", default=None, help="a PEFT LoRA adapter directory to apply")
    p.add_argument("--env", default="TicTacToe-v0-train")
    p.add_argument("--opponent", default="random", help=opponent_help)
    p.add_argument("--games", type=int, default=20)
    p.add_argument("--template", default="qwen3-zs", help="prompt template")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=_cmd_play)

    p = sub.add_parser("train", help="train from a YAML config (build() and start() settings), or resume a run",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="settings (YAML keys, or --set key=value; nested sections too: models, samplers, "
                              "tracker, failure_budget, api_opponents; and start()'s learning_steps, "
                              "num_collection_workers, num_eval_workers):\n" + settings_help())  # not %-formatted
    p.add_argument("--config", default=None, help="YAML file; see configs/ for examples")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue this run from its newest complete checkpoint (settings from RUN_DIR/config.json, "
                        "or --config; learning_steps counts the steps already made)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--run-name", default=None)
    p.set_defaults(fn=_cmd_train)

    p = sub.add_parser("eval", help="evaluate a model against an opponent: win/draw/loss with 95%% intervals, per seat")
    p.add_argument("--model", default=None, help="HF id, local path, or tiny / tiny:<size> (or give --run)")
    p.add_argument("--adapter", default=None, help="a PEFT LoRA adapter directory to apply")
    p.add_argument("--run", default=None, metavar="RUN_DIR",
                   help="evaluate a checkpoint of this run: --checkpoint names it; its model, adapter, game, "
                        "players and prompt template come from the run unless given")
    p.add_argument("--checkpoint", default=None, metavar="UID",
                   help="with --run: a registry uid such as ckpt-5, or bob-ckpt-3 in a run with several models "
                        "(default: the first model's newest checkpoint); ckpt-5/average: its NFSP average policy")
    p.add_argument("--env", default=None,
                   help="the game (default: with --run, the run's game, which a run of several needs; else "
                        "TicTacToe-v0-train)")
    p.add_argument("--opponent", default="random", help=opponent_help)
    p.add_argument("--games", type=int, default=100)
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    p.add_argument("--greedy", action="store_true", help="the evaluated model decodes greedily (temperature 0)")
    p.add_argument("--workers", type=int, default=1, help="worker processes; 1 plays in this process")
    p.add_argument("--torch-threads", type=int, default=1, help="torch threads per process (0: torch's default)")
    p.add_argument("--num-players", type=int, default=None, help="players per game (default: the run's, else 2)")
    p.add_argument("--template", default=None, help="prompt template (default: the run's, else the one a "
                   "warm-started --model was trained with, else qwen3-zs)")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature (default 0.6; with --exploitability 1, as "
                        "unstable.evaluate_exploitability reads: the model's own distribution)")
    p.add_argument("--top-p", type=float, default=None,
                   help="nucleus (default 0.95; with --exploitability 1, as unstable.evaluate_exploitability reads)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="completion length (default 64; with --exploitability 32, as "
                        "unstable.evaluate_exploitability reads)")
    p.add_argument("--seed", type=int, default=0)
    add_field_options(p, "unstable.policies.api", "APIOpponentConfig", API_OPTIONS, prefix="api_")
    from unstable.cli.exploitability import add_exploitability_options  # here: the import block is shared

    add_exploitability_options(p)
    p.set_defaults(fn=_cmd_eval)

    p = sub.add_parser("plot", help="write learning-curve PNGs of a run into RUN_DIR/plots/")
    p.add_argument("run_dir", help="the run directory (holding metrics.jsonl)")
    p.set_defaults(fn=_cmd_plot)

    p = sub.add_parser("dashboard", help="live terminal dashboard of a run (via Ray, or from its run directory)")
    add_dashboard_arguments(p)
    p.set_defaults(fn=_cmd_dashboard)

    p = sub.add_parser("replay", help="print a run's game transcripts")
    p.add_argument("run_dir", help="the run directory (runs/<name>)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--game", type=int, default=None, help="the game with this id")
    which.add_argument("--last", type=int, default=None, help="the last N games (default 3)")
    p.add_argument("--env", default=None, help="only games of this env id")
    p.add_argument("--prompts", action="store_true", help="also print the exact prompts")
    p.add_argument("--max-chars", type=int, default=1500, help="cut longer texts in the middle (0: never)")
    p.set_defaults(fn=_cmd_replay)

    p = sub.add_parser("quickstart", help="the default CPU job: warm start, self-play training, evaluation, plots")
    p.add_argument("--config", default=None, metavar="YAML",
                   help="a YAML file of the job's settings (e.g. configs/tictactoe-vs-heuristic.yaml); "
                        "the options below override it")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="go on with a stopped quickstart (Ctrl-C) in RUN_DIR, with its settings: the warm start is "
                        "cached, training resumes from its newest checkpoint, then the final evaluation")
    add_field_options(p, "unstable.cli.quickstart", "QuickstartConfig", QUICKSTART_OPTIONS)
    add_field_options(p, "unstable.models.warmstart", "WarmStartConfig", WARM_START_OPTIONS, prefix="warm_start_")
    p.set_defaults(fn=_cmd_quickstart)

    p = sub.add_parser("quickstart-task", help="the single-turn CPU job: GRPO on a generated task (sorting "
                                               "3 digits), held-out exact-match accuracy before and after")
    add_field_options(p, "unstable.cli.task_quickstart", "TaskQuickstartConfig", TASK_OPTIONS)
    add_field_options(p, "unstable.models.task_warmstart", "TaskWarmStartConfig", TASK_WARM_START_OPTIONS,
                      prefix="warm_start_")
    p.set_defaults(fn=_cmd_task_quickstart)
    add_league_table_parser(sub)
    return parser


def _quiet_libraries() -> None:
    """Keep the terminal for our own progress: no per-load progress bars from transformers, here or
    in the Ray actors (which inherit this process's environment when it starts Ray)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    """``unstable ...``: run the subcommand and return its exit status; bad input (a ``ValueError``) or a path
    that cannot be read or written (an ``OSError``) prints one line on stderr and returns 2."""
    args = build_parser().parse_args(argv)
    if args.command not in ("dashboard", "replay", "plot"):  # these never load a model: start fast
        _quiet_libraries()
    try:
        return args.fn(args)
    except (ValueError, OSError) as exc:  # bad input, or a path that can't be read or written: one line
        print(f"unstable {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line (and the command's own on what was kept), not a traceback
        print(f"unstable {args.command}: interrupted", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
