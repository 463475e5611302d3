"""Moves per second of the whole RL loop beside the model's own forward+backward limit, in one run.

The loop: ``unstable quickstart --config CONFIG`` (default: the Kuhn self-play recipe,
``configs/kuhn-hand-selfplay-kl-groups.yaml``, 1M tiny model) for ``--steps`` learner updates, with no
in-run exploitability and no eval games during training, so what is timed is games + inference +
learner. Its rate is the moves trained per second between update ``--skip`` and the last (the run's
``metrics.jsonl`` timestamps; start-up and the first updates left out), with the learner's share of that
time (``train/update_seconds``), and the inference engine's seconds a request and rows a call over the run
(its ``inference/<actor>/...`` counters).

The limit: the same moves as training rows (the run's own prompts and completions, tokenised as the
learner gets them), through a bare forward+backward of the base model with a fresh LoRA adapter of the
run's rank, in mini-batches of the run's ``mini_batch_size``, on every core (no game, no optimiser, no
checkpoint): moves per second if the machine did nothing but the learner's arithmetic. Then the update
itself on the same rows (``Learner.update``), to split the loop's gap into the learner's own overhead
and what the rest of the loop costs. Then the inference of the same moves alone (:func:`generation`): the
update and the generation one after the other give the serial rate, which a loop that overlaps them on
the same cores should beat (``loop / serial`` above 1) and cannot beat by more than their sum over the
larger of the two.

    .venv/bin/python benchmarks/bench_moves.py --steps 12            # ~4 minutes on 2 cores
    .venv/bin/python benchmarks/bench_moves.py --config configs/kuhn-hand-selfplay-mmd.yaml --modes async sync
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import add_common_args, machine, quiet_libraries, timed, write_result

quiet_libraries()
ROOT = Path(__file__).resolve().parents[1]


def run_loop(config: str, steps: int, out: Path, mode: str | None = None) -> dict[str, Any]:
    """The quickstart run (in ``mode``, else the config's; sync trains no stale move): its config and wall time."""
    from unstable.cli.quickstart import load_quickstart_config, run_quickstart

    cfg = load_quickstart_config(config, out=str(out), learning_steps=steps, exploitability_eval="off",
                                 num_eval_workers=0, eval_games=10, eval_workers=1,
                                 **({"mode": mode} if mode else {}), **({"max_staleness": 0} if mode == "sync" else {}))
    started = time.perf_counter()
    run_quickstart(cfg, say=lambda _: None)
    return {"cfg": cfg, "wall_s": time.perf_counter() - started}


def loop_rate(run_dir: Path, skip: int) -> dict[str, float]:
    """Moves trained per second between update ``skip`` and the last, and the learner's share of that time."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    updates = sorted((r for r in rows if "train/batch_steps" in r), key=lambda r: r["learner_step"])
    window = [r for r in updates if r["learner_step"] > skip]
    if not window:
        raise SystemExit(f"only {len(updates)} updates: give --steps above --skip ({skip})")
    start = next(r["time"] for r in updates if r["learner_step"] == skip) if skip else rows[0]["time"]
    seconds = window[-1]["time"] - start
    update_s = sum(r["train/update_seconds"] for r in window)
    moves = sum(r["train/batch_steps"] for r in window)
    engines = {}  # each inference actor's last counters (running totals over the run)
    for r in rows:
        for key, value in r.items():
            if key.startswith("inference/"):
                engines.setdefault(key.split("/")[1], {})[key.split("/")[2]] = value
    requests = sum(e.get("requests", 0) for e in engines.values())
    generate = sum(e.get("generate_seconds", 0) for e in engines.values())
    batches = sum(e.get("batches", 0) for e in engines.values())
    return {"updates": len(window), "seconds": seconds, "moves": moves, "moves_per_s": moves / seconds,
            "learner_busy_share": update_s / seconds, "update_s_mean": update_s / len(window),
            "generate_ms_per_request": 1000 * generate / requests if requests else None,
            "mean_batch_size": requests / batches if batches else None}


def run_model(run_dir: Path) -> str:
    """The model the run trained (its ``config.json``'s first model)."""
    return json.loads((run_dir / "config.json").read_text())["models"][0]["model_name"]


def train_turns(run_dir: Path) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each (game, turn) of the run's train games, in the order the transcripts hold them."""
    for path in sorted((run_dir / "games").glob("transcripts.jsonl*")):
        for line in path.read_text().splitlines():
            game = json.loads(line)
            if game.get("kind") == "game" and not game.get("is_eval"):
                yield from ((game, turn) for turn in game["turns"])


def training_steps(run_dir: Path, tokenizer: Any, n: int) -> list[Any]:
    """The last ``n`` collected moves of the run as learner Steps (prompt and completion tokenised as the
    transcripts hold them, rewards +-1 alternating, one GRPO group per prompt as the run's)."""
    from unstable.records import Sample, Step

    steps: list[Any] = []
    for game, turn in train_turns(run_dir):
        prompt = tuple(tokenizer(turn["prompt"], add_special_tokens=False)["input_ids"])
        completion = tuple(tokenizer(turn["completion"], add_special_tokens=False)["input_ids"])
        if not completion:
            continue
        completion += (tokenizer.eos_token_id,)
        sample = Sample(prompt, completion, (-1.0,) * len(completion), "stop", 1.0, 1.0, 0)
        i = len(steps)
        steps.append(Step(env_id=game["env_id"], game_id=game["game_id"], player_id=turn["player_id"],
                          turn_index=0, sample=sample, reward=(-1.0, 1.0)[i % 2], final_reward=1.0,
                          policy_version=0, format_ok=True, invalid=False, is_last=True,
                          prompt=turn["prompt"], completion=turn["completion"]))
    return steps[-n:]


def padded_pass(model: Any, micro_batches: list[list[Any]]) -> Any:
    """A callable: forward+backward of each micro-batch as one padded batch (rows right-padded to the longest,
    an attention mask), the LM head only at the positions that predict a completion token, no optimiser.
    For these short, similar rows (a Kuhn move: ~39 tokens) the cheapest shape on a CPU."""
    import torch

    from unstable.learners import model_utils as mu

    passes = []
    for batch in micro_batches:
        width = max(len(s.prompt_ids) + len(s.completion_ids) for s in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        rows, cols = [], []
        for r, s in enumerate(batch):
            tokens = list(s.prompt_ids) + list(s.completion_ids)
            ids[r, : len(tokens)] = torch.tensor(tokens)
            mask[r, : len(tokens)] = 1
            rows += [r] * len(s.completion_ids)
            cols += range(len(s.prompt_ids) - 1, len(tokens) - 1)
        where = (torch.tensor(rows), torch.tensor(cols))
        passes.append((ids, mask, where, ids[where[0], where[1] + 1]))
    body, head = mu.decoder_body(model), model.get_output_embeddings()

    def step() -> None:
        for ids, mask, where, targets in passes:
            hidden = body(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state[where]
            logp = head(hidden).float().log_softmax(-1).gather(-1, targets[:, None])
            (-logp.mean()).backward()
        model.zero_grad(set_to_none=True)

    return step


def limit(cfg: Any, run_dir: Path, threads: int, repeats: int) -> dict[str, Any]:
    """The bare forward+backward rate and the run's learner's update rate on the run's own moves."""
    import torch
    from transformers import AutoTokenizer

    from unstable.learners import model_utils as mu
    from unstable.learners.catalog import resolve_learner
    from unstable.records import TrainBatch
    from unstable.run.config import BuildConfig

    torch.set_num_threads(threads)
    model_path = run_model(run_dir)
    m = BuildConfig(model_name=model_path, algorithm=cfg.algorithm, learner=dict(cfg.learner),
                    batch_size=cfg.batch_size, mini_batch_size=cfg.mini_batch_size,
                    learning_rate=cfg.learning_rate, max_generation_len=cfg.max_new_tokens, gradient_clipping=1.0,
                    lora_config={"lora_rank": cfg.lora_rank, "lora_alpha": cfg.lora_alpha},
                    activation_checkpointing=False, gradient_checkpointing=False,
                    train_envs=[{"env_id": cfg.env_id, "num_players": 2, "num_actors": 2,
                                "prompt_template": cfg.prompt_template}]).models[0]
    learner_cls = resolve_learner(m.algorithm)
    ctor, init = m.learner_settings(learner_cls)
    learner = learner_cls(model_name=model_path, lora_cfg=m.lora_cfg, **ctor, device="cpu", seed=0, keep_last=1,
                          output_dir=tempfile.mkdtemp(prefix="bench-moves-"))
    learner.initialize_algorithm(**init)
    steps = training_steps(run_dir, AutoTokenizer.from_pretrained(model_path), cfg.batch_size)
    cut = learner.micro_batches(steps)
    model = mu.attach_policy_adapter(mu.load_base_model(model_path, torch.device("cpu"), None, False), m.lora_cfg,
                                     None)
    model.train()
    bare_s, _ = timed(padded_pass(model, [[steps[i] for i in idx] for idx in cut]), repeats)
    batch = TrainBatch.from_steps(steps)
    update_s, _ = timed(lambda: learner.update(batch), repeats)
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in steps)
    return {"moves": len(steps), "tokens": tokens, "tokens_per_move": tokens / len(steps), "threads": threads,
            "learner": learner_cls.__name__, "bare_s": min(bare_s), "update_s": min(update_s),
            "bare_moves_per_s": len(steps) / min(bare_s), "update_moves_per_s": len(steps) / min(update_s),
            "bare_tokens_per_s": tokens / min(bare_s)}


def generation(cfg: Any, run_dir: Path, threads: int, repeats: int) -> dict[str, Any]:
    """The inference side of the same moves, alone: the run's last ``batch_size`` prompts generated through the
    transformers engine with its last checkpoint's adapter at the run's sampling settings, in one call (the
    engine batches them as it batches the games in flight)."""
    import torch

    from unstable.inference.base import GenerationRequest, SamplingParams
    from unstable.inference.transformers_backend import TransformersBackend

    torch.set_num_threads(threads)
    model_path = run_model(run_dir)
    prompts = [turn["prompt"] for _, turn in train_turns(run_dir)][-cfg.batch_size:]
    adapter = max((run_dir / "checkpoints").glob("ckpt-*"), key=lambda p: int(p.name.split("-")[-1]))
    sampling = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    backend = TransformersBackend(model_path, device="cpu")
    try:
        requests = [GenerationRequest(prompt, str(adapter), sampling) for prompt in prompts]
        generate_s, _ = timed(lambda: backend.generate_batch(requests), repeats)
    finally:
        backend.close()
    best = min(generate_s)
    return {"moves": len(prompts), "generate_s": best, "generate_moves_per_s": len(prompts) / best}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "kuhn-hand-selfplay-kl-groups.yaml"))
    p.add_argument("--steps", type=int, default=12, help="learner updates of the loop")
    p.add_argument("--skip", type=int, default=3, help="updates left out of the loop's rate (start-up)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats of the bare pass and the update")
    p.add_argument("--threads", type=int, default=None, help="torch threads of the limit (default: every core)")
    p.add_argument("--modes", nargs="+", choices=("async", "sync"), default=None,
                   help="run the loop once in each mode, side by side (default: the config's mode)")
    add_common_args(p)
    args = p.parse_args()
    import os

    if args.quick:  # a smoke run: 5 updates, 2 left out, 2 repeats
        args.steps, args.skip, args.repeats = min(args.steps, 5), min(args.skip, 2), min(args.repeats, 2)
    threads = args.threads or len(os.sched_getaffinity(0))
    info = machine()  # at the start, so both load averages are recorded
    loops = {}
    with tempfile.TemporaryDirectory(prefix="bench-moves-") as tmp:
        for mode in args.modes or [None]:  # one loop per mode, the limit from the first's moves
            out = Path(tmp) / f"run-{mode or 'config'}"
            run = run_loop(args.config, args.steps, out, mode)
            loops[mode or run["cfg"].mode] = {**loop_rate(out, args.skip), "run_wall_s": run["wall_s"]}
            if len(loops) == 1:
                bound = limit(run["cfg"], out, threads, args.repeats)
                gen = generation(run["cfg"], out, threads, args.repeats)
    serial_s = bound["update_s"] + gen["generate_s"] * bound["moves"] / gen["moves"]  # one after the other
    config = Path(args.config).resolve()
    rows = []
    for mode, loop in loops.items():
        rows.append({"config": str(config.relative_to(ROOT)) if config.is_relative_to(ROOT) else str(config),
                     "mode": mode, "loop moves/s": loop["moves_per_s"],
                     "learner busy share": loop["learner_busy_share"],
                     "update s (in the loop)": loop["update_s_mean"], "update s (alone)": bound["update_s"],
                     "bare fwd+bwd s": bound["bare_s"], "limit moves/s (bare)": bound["bare_moves_per_s"],
                     "update-alone moves/s": bound["update_moves_per_s"],
                     "loop / limit": loop["moves_per_s"] / bound["bare_moves_per_s"],
                     "generate s (alone)": gen["generate_s"] * bound["moves"] / gen["moves"],
                     "generate ms/move (loop)": loop["generate_ms_per_request"],
                     "generate ms/move (alone)": 1000 * gen["generate_s"] / gen["moves"],
                     "rows a generate call (loop)": loop["mean_batch_size"],
                     "serial moves/s": bound["moves"] / serial_s,
                     "loop / serial": loop["moves_per_s"] * serial_s / bound["moves"],
                     "tokens/move": bound["tokens_per_move"], "bare tokens/s": bound["bare_tokens_per_s"]})
    print(json.dumps(rows, indent=2))
    write_result("moves", args, rows, {"steps": args.steps, "skip": args.skip, "threads": threads, "loops": loops,
                                       "limit": bound, "generation": gen}, info=info)


if __name__ == "__main__":
    main()
