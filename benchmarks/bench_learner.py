"""(c) Learner: real (non-pad) tokens/s of a learner update vs the same tokens trained with no padding.

The batch is ``--batch`` steps from real game turns: TicTacToe and KuhnPoker games played by
random legal moves (TextArena), each turn's observation rendered with the ``qwen3-zs`` template and
tokenised with the model's tokenizer (prompts of ~150-550 tokens, growing with the turn); turns are
drawn at random from the games. Completion lengths are drawn from a log-normal (median
``--completion-median`` tokens, sigma ``--completion-sigma``) cut at ``--max-new-tokens`` (a
generation stops there: the skewed lengths of reasoning turns, some cut at the cap); their ids are
random. Everything is deterministic from ``--seed``. The same base model and LoRA adapter (the run
default: rank 32, alpha 32 on q,k,v,o,gate,up,down) serve every variant:

* ``update``: ``REINFORCELearner.update`` as a run does it (validation, micro-batches of steps of
  similar length, forward, LM head and float32 log-prob head on the completion positions only with
  activation checkpointing, REINFORCE loss, backward, clipping, AdamW, checkpoint written to disk);
* ``update, padded (before)``: the same update with the code of commit ``--before`` (micro-batches
  of ``mini_batch_size`` steps padded to their longest, logits, log-probs and entropy from the
  earliest completion position of the micro-batch on), loaded from git into this process;
* ``ideal: bare fwd+bwd, one step a pass``: each step alone (no padding, no other step in its
  attention), LM head on its completion positions, log-softmax, masked mean, ``backward()``;
  nothing else: no optimiser, no checkpoint. The ideal the update is measured against;
* ``bare fwd+bwd, packed rows``: the same, with the steps of each of the update's micro-batches
  concatenated into one row, position ids restarting per step (transformers then builds a
  block-diagonal mask: no cross-attention, but dense attention over the whole row on CPU SDPA);
* ``update, LoRA products in float32 (PEFT's default)``, with bfloat16 base weights only (``--dtype
  bfloat16``, the CUDA default): the update with ``lora_compute_dtype="float32"``, where ``update``
  and the bare passes run the LoRA products in bfloat16 (``unstable.learners.model_utils.lora_compute``).

All variants run in **one process, interleaved**: each round runs every variant once, in an order
rotated from round to round, after one untimed warm-up round. The ratio ``update / ideal`` is taken
within each round (so both saw the same contention) and reported as the median and interquartile
range over the rounds; CPU seconds (``time.process_time``) per call are reported too (less affected
by other jobs on a shared machine). "Real tokens" are the tokens of the steps (prompt + completion,
no padding); "trained tokens" only the completion tokens the loss is taken on.

    .venv/bin/python benchmarks/bench_learner.py                  # 1m and 10m, ~10 minutes on 2 cores
    .venv/bin/python benchmarks/bench_learner.py --quick          # seconds
    python benchmarks/bench_learner.py --device cuda --arch qwen3-0.6b   # GPU, bf16 base weights
    .venv/bin/python benchmarks/bench_learner.py --arch 10m --dtype bfloat16 --no-before   # CPU, bf16

CPU runs use ``torch.set_num_threads(--threads)`` (default 1). On CUDA each call also reports its
``torch.cuda.max_memory_allocated`` over the memory held before it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types

from common import ROOT, add_common_args, machine, model_dir, quiet_libraries, random_init_on_device, write_result
from flops import peak_bf16_flops, update_flops

LORA = {"lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
ENVS = ("TicTacToe-v0-train", "KuhnPoker-v0-train")
BEFORE = "ca68e4a"  # the last commit whose learner padded micro-batches to their longest step
UPDATE, BEFORE_UPDATE, IDEAL, PACKED = ("update", "update, padded (before)", "ideal: bare fwd+bwd, one step a pass",
                                        "bare fwd+bwd, packed rows")
FP32_LORA = "update, LoRA products in float32 (PEFT's default)"
FLEX = "flex_attention"
# --extra: variants that change how the same work runs (attention kernel, compiled decoder layers)
EXTRA = {
    "flex": ("update, flex_attention", dict(attn=FLEX)),
    "flex-compiled": ("update, flex_attention, compiled layers", dict(attn=FLEX, compiled=True)),
    "compiled": ("update, compiled layers", dict(compiled=True)),
    "packed-flex": ("bare fwd+bwd, packed rows, flex_attention", dict(packed=True, attn=FLEX)),
    "ideal-compiled": ("bare fwd+bwd, one step a pass, compiled layers", dict(compiled=True)),
}


# ------------------------------------------------------------------------------------- the batch
def game_prompts(tokenizer, seed: int, games: int) -> list[tuple[str, list[int]]]:
    """``(env_id, prompt ids)`` of every turn of ``games`` random games, alternating the envs."""
    import textarena as ta

    from unstable.games.templates import render_prompt
    from unstable.policies.scripted import legal_moves

    state = random.getstate()  # TextArena's reset() reseeds the global RNG
    turns = []
    try:
        for g in range(games):
            env_id = ENVS[g % len(ENVS)]
            rng = random.Random(f"{seed}/{g}")
            env = ta.make(env_id)
            env.reset(num_players=2, seed=seed * 1000 + g)
            done = False
            while not done:
                player_id, obs = env.get_observation()
                turns.append((env_id, tokenizer(render_prompt("qwen3-zs", obs), add_special_tokens=False)["input_ids"]))
                done, _ = env.step(action=rng.choice(legal_moves(env_id, env, player_id)))
            env.close()
    finally:
        random.setstate(state)
    return turns


def game_steps(path: str, n: int, seed: int, median_len: float, sigma: float, max_new: int) -> list:
    """``n`` Steps: prompts of real game turns, completion lengths log-normal, cut at ``max_new``."""
    from transformers import AutoTokenizer

    from unstable.records import Sample, Step

    tokenizer = AutoTokenizer.from_pretrained(path)
    turns = game_prompts(tokenizer, seed, games=max(8, n))
    rng = random.Random(seed)
    steps = []
    for i, (env_id, prompt) in enumerate(rng.sample(turns, n)):
        drawn = max(1, round(rng.lognormvariate(math.log(median_len), sigma)))
        length = min(drawn, max_new)
        completion = tuple(rng.randrange(3, tokenizer.vocab_size) for _ in range(length))
        finish = "length" if drawn >= max_new else "stop"
        sample = Sample(tuple(prompt), completion, (-1.0,) * length, finish, 1.0, 1.0, 0)
        steps.append(Step(env_id=env_id, game_id=i, player_id=i % 2, turn_index=0, sample=sample,
                          reward=rng.choice((-1.0, 1.0)), final_reward=1.0, policy_version=0, format_ok=True,
                          invalid=False, is_last=True))
    return steps


# ------------------------------------------------------------------------------------ variants
def long_steps(n: int, seq_len: int, vocab: int, seed: int, mixed: bool = False) -> list:
    """``n`` Steps of ``seq_len`` tokens each (``mixed``: of lengths drawn uniformly from
    ``seq_len / 8`` to ``seq_len``), the first half prompt, the second completion (random ids)."""
    from unstable.records import Sample, Step

    rng = random.Random(seed)
    steps = []
    for i in range(n):
        length = rng.randint(seq_len // 8, seq_len) if mixed else seq_len
        half = length // 2
        prompt = tuple(rng.randrange(3, vocab) for _ in range(length - half))
        completion = tuple(rng.randrange(3, vocab) for _ in range(half))
        sample = Sample(prompt, completion, (-1.0,) * half, "length", 1.0, 1.0, 0)
        steps.append(Step(env_id=ENVS[i % 2], game_id=i, player_id=i % 2, turn_index=0, sample=sample,
                          reward=rng.choice((-1.0, 1.0)), final_reward=1.0, policy_version=0, format_ok=True,
                          invalid=False, is_last=True))
    return steps


def learner_before(commit: str):
    """``REINFORCELearner`` with the micro-batching and forward of ``commit`` (from git), on today's base."""
    def module(path: str, name: str) -> types.ModuleType:
        source = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout
        mod = types.ModuleType(name)
        sys.modules[name] = mod  # dataclasses look their module up there
        exec(compile(source, f"{commit}:{path}", "exec"), mod.__dict__)  # our own history
        return mod

    batching = module("unstable/learners/batching.py", "batching_before")
    reinforce = module("unstable/learners/reinforce.py", "reinforce_before")
    for name in ("TokenBatch", "collate", "kept_completion_tokens", "micro_batches"):
        setattr(reinforce, name, getattr(batching, name))
    return reinforce.REINFORCELearner


def bare_pass(model, device, micro_rows: list[list[list[int]]], prompt_lens: list[list[int]], packed: bool,
              dtype=None):
    """A callable: forward+backward over the steps, one pass per step (``packed=False``) or per
    micro-batch concatenated into one row; the LM head only at completion positions."""
    import torch

    from unstable.learners import model_utils as mu

    passes = []
    for rows, plens in zip(micro_rows, prompt_lens, strict=True):
        pairs = list(zip(rows, plens, strict=True))
        groups = [pairs] if packed else [[pair] for pair in pairs]
        for group in groups:
            ids = [t for r, _ in group for t in r]
            positions = [i for r, _ in group for i in range(len(r))]
            where, start = [], 0
            for r, p in group:
                where.extend(range(start + p - 1, start + len(r) - 1))  # positions that predict a completion token
                start += len(r)
            ids_t = torch.tensor([ids], device=device)
            passes.append((ids_t, torch.tensor([positions], device=device), torch.tensor(where, device=device),
                           ids_t[0, torch.tensor(where, device=device) + 1]))
    body, head = mu.decoder_body(model), model.get_output_embeddings()

    def step() -> None:
        for ids, positions, where, targets in passes:
            kwargs = {"position_ids": positions} if packed else {}
            with mu.lora_compute(model, dtype):  # as the update's forward passes
                hidden = body(input_ids=ids, use_cache=False, **kwargs).last_hidden_state[0, where]
            logp = head(hidden).float().log_softmax(-1).gather(-1, targets[:, None])
            (-logp.mean()).backward()
        model.zero_grad(set_to_none=True)

    return step


def prepare(model, attn: str | None = None, compiled: bool = False):
    """``model`` (a PEFT model) with the attention kernel ``attn`` and, ``compiled``, each decoder
    layer compiled on its own (``nn.Module.compile``: regional compilation, one graph all layers
    share). Returns it."""
    from unstable.learners import model_utils as mu

    if attn:
        model.get_base_model().set_attn_implementation(attn)
    if compiled:
        for layer in mu.decoder_body(model).layers:
            layer.compile()
    return model


def profile_call(call, cuda: bool, top: int = 25) -> dict:
    """One call of ``call`` under ``torch.profiler``: wall seconds, the device's busy seconds (its
    kernels' self time summed) and the ``top`` operators by self device time (CPU time on a CPU),
    each with its share, plus the device time by kind of kernel (matmul, attention, other)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        call()
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attr, 0) > 0]
    if cuda:  # kernels only: the CUDA runtime's CPU-side entries carry no device time
        events = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(getattr(e, attr) for e in events) / 1e6
    kinds: dict[str, float] = {}
    for e in events:
        kinds[kernel_kind(e.key)] = kinds.get(kernel_kind(e.key), 0.0) + getattr(e, attr) / 1e6
    events.sort(key=lambda e: getattr(e, attr), reverse=True)
    return {"wall_s": round(wall, 4), "busy_s": round(busy, 4), "busy_share_of_wall": round(busy / wall, 3),
            "time_by_kind_s": {k: round(v, 4) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
            "top": [{"name": e.key[:200], "calls": e.count, "self_s": round(getattr(e, attr) / 1e6, 4),
                     "share": round(getattr(e, attr) / 1e6 / busy, 4)} for e in events[:top]]}


def kernel_kind(name: str) -> str:
    """A kernel's (or CPU operator's) kind by its name: matmul, attention, copy/cast/fill, or elementwise/other."""
    import re

    low = name.lower()
    if re.search(r"flash|fmha|attention|flex|sdpa", low):
        return "attention"
    if re.search(r"gemm|xmma|cutlass|nvjet|cublas|matmul|(^|[_:])(add|b)?mm([_\d]|$)|aten::linear", low):
        return "matmul"
    if re.search(r"copy|cast|fill", low):
        return "copy/cast/fill"
    return "elementwise/other"


def measure(args: argparse.Namespace, arch: str, save) -> tuple[list[dict], dict]:
    import torch
    from transformers import AutoConfig

    from unstable.learners import REINFORCELearner
    from unstable.learners import model_utils as mu
    from unstable.learners.batching import collate, kept_length
    from unstable.records import TrainBatch

    torch.set_num_threads(args.threads)
    random_init_on_device()  # the qwen3-1.7b/4b/8b shapes are built on the device, not read from disk
    path = model_dir(arch)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    if args.seq_len:
        steps = long_steps(args.batch, args.seq_len, min(AutoConfig.from_pretrained(path).vocab_size, 2048),
                           args.seed, mixed=args.mixed_lengths)
    else:
        steps = game_steps(path, args.batch, args.seed, args.completion_median, args.completion_sigma,
                           args.max_new_tokens)
    real = sum(kept_length(s, None) for s in steps)
    trained = sum(len(s.completion_ids) for s in steps)
    batch = TrainBatch.from_steps(steps)
    dtype = mu.resolve_dtype(args.dtype, device)
    opts = dict(lora_cfg=LORA, batch_size=args.batch, mini_batch_size=args.mini_batch, learning_rate=1e-5,
                device=str(device), keep_last=1, gradient_checkpointing=args.gradient_checkpointing,
                activation_checkpointing=True, seed=0, micro_batching=args.micro_batching,
                max_tokens_per_micro_batch=args.max_tokens, dtype=args.dtype)
    out = tempfile.TemporaryDirectory(prefix="bench-learner-")
    extra = [EXTRA[k] for k in args.extra.split(",") if k] if args.extra else []
    learners = {UPDATE: REINFORCELearner(path, output_dir=f"{out.name}/after", **opts)} if not args.no_update else {}
    if dtype == torch.bfloat16 and not args.no_fp32_lora:
        learners[FP32_LORA] = REINFORCELearner(path, output_dir=f"{out.name}/fp32-lora", lora_compute_dtype="float32",
                                               **opts)
    if not args.no_before:
        learners[BEFORE_UPDATE] = learner_before(args.before)(path, output_dir=f"{out.name}/before", **opts)
    for i, (name, how) in enumerate(extra):
        if name.startswith("update"):
            lrn = REINFORCELearner(path, output_dir=f"{out.name}/extra-{i}", attn_implementation=how.get("attn"),
                                   **opts)  # the learner's own setting
            learners[name] = lrn
            prepare(lrn.model, None, how.get("compiled", False))
    for lrn in learners.values():
        lrn.initialize_algorithm(max_train_len=None, max_generation_len=args.max_new_tokens)

    def bare_model(attn: str | None = None, compiled: bool = False):
        torch.manual_seed(0)
        base = mu.load_base_model(path, device, dtype, False)
        model = mu.attach_policy_adapter(base, LORA, None).to(device)
        model.train()
        return prepare(model, attn, compiled)

    model = bare_model()
    reference = learners[UPDATE] if UPDATE in learners else REINFORCELearner(path, output_dir=f"{out.name}/cut", **opts)
    cut = reference.micro_batches(steps)  # the bare passes take the update's micro-batches
    rows = [[list(steps[i].prompt_ids) + list(steps[i].completion_ids) for i in idx] for idx in cut]
    plens = [[len(steps[i].prompt_ids) for i in idx] for idx in cut]
    calls = {name: (lambda lrn=lrn: lrn.update(batch)) for name, lrn in learners.items()}
    calls[IDEAL] = bare_pass(model, device, rows, plens, packed=False, dtype=dtype)
    if not args.no_packed:
        calls[PACKED] = bare_pass(model, device, rows, plens, packed=True, dtype=dtype)
    for name, how in extra:
        if not name.startswith("update"):
            calls[name] = bare_pass(bare_model(how.get("attn"), how.get("compiled", False)), device, rows, plens,
                                    packed=how.get("packed", False), dtype=dtype)
    names = list(calls)
    config = AutoConfig.from_pretrained(path)
    lengths = [kept_length(s, None) for s in steps]
    rank, targets = LORA["lora_rank"], LORA["target_modules"]
    flops = {name: update_flops(config, lengths, trained, rank, targets,
                                gradient_checkpointing=args.gradient_checkpointing and name in learners,
                                chunked_head=getattr(learners.get(name), "_fused_head", False)) for name in names}
    peak_flops = peak_bf16_flops(torch.cuda.get_device_name(device)) if cuda else None
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    peak: dict[str, list[float]] = {n: [] for n in names}
    warmup_s: dict[str, float] = {}
    facts = {"real_tokens": real, "trained_tokens": trained,
             "padded_tokens_one_batch": collate(steps, None, 0).input_ids.numel(),
             "model_flops_per_update": flops[IDEAL]["model"], "peak_bf16_flops": peak_flops,
             "packed": reference.packed, "micro_batches_after": [len(c) for c in cut],
             "step_lengths": sorted(lengths),
             "prompt_lens": sorted(len(s.prompt_ids) for s in steps),
             "completion_lens": sorted(len(s.completion_ids) for s in steps)}
    if UPDATE in flops:
        facts["hardware_flops_per_update"] = flops[UPDATE]["hardware"]

    def summary() -> list[dict]:
        rows_out = []
        for name in names:
            if not wall[name]:
                continue
            ratio = [i / w for i, w in zip(wall[IDEAL], wall[name], strict=True)]
            ratio_cpu = [i / w for i, w in zip(cpu[IDEAL], cpu[name], strict=True)]
            q1, _, q3 = quartiles(ratio)
            c1, _, c3 = quartiles(ratio_cpu)
            seconds = statistics.median(wall[name])
            row = {"arch": arch, "variant": name, "s/update": seconds,
                   "CPU-s/update": statistics.median(cpu[name]),
                   "real tok/s": real / seconds, "trained tok/s": trained / seconds,
                   "real tok/CPU-s": real / statistics.median(cpu[name]),
                   "x ideal (median)": statistics.median(ratio), "x ideal IQR": f"{q1:.2f}-{q3:.2f}",
                   "x ideal CPU (median)": statistics.median(ratio_cpu), "x ideal CPU IQR": f"{c1:.2f}-{c3:.2f}",
                   "rounds": len(ratio), "first call s (compiles)": round(warmup_s[name], 2)}
            if cuda:
                row["peak over held MiB"] = max(peak[name])
                row["model TFLOP/s"] = flops[name]["model"] / seconds / 1e12
                if peak_flops:  # unknown GPU: no MFU rather than a guess
                    row["MFU"] = flops[name]["model"] / seconds / peak_flops
                    row["HFU"] = flops[name]["hardware"] / seconds / peak_flops
            rows_out.append(row)
        facts["seconds_per_round"] = {n: {"wall": [round(t, 4) for t in wall[n]],
                                          "cpu": [round(t, 4) for t in cpu[n]]} for n in names}
        return rows_out

    facts["errors"] = {}
    for r in range(args.rounds + 1):  # round 0 warms up (and compiles)
        for name in names[r % len(names):] + names[: r % len(names)]:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                held = torch.cuda.memory_allocated()
            t0, c0 = time.perf_counter(), time.process_time()
            if not r:  # a variant that cannot run here (e.g. flex_attention's backward on a CPU) is left out
                try:
                    calls[name]()
                except Exception as exc:
                    facts["errors"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    print(f"{arch} {name}: left out, {facts['errors'][name]}", flush=True)
                    continue
            else:
                calls[name]()
            if cuda:
                torch.cuda.synchronize()
            if not r:
                warmup_s[name] = time.perf_counter() - t0
                continue
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            if cuda:
                peak[name].append((torch.cuda.max_memory_allocated() - held) / 2**20)
        if not r:
            names = [n for n in names if n not in facts["errors"]]
            if IDEAL not in names:
                raise SystemExit(f"the ideal pass failed: {facts['errors'][IDEAL]}")
        print(f"{arch} round {r}: " + ", ".join(f"{n} {(wall[n] or [warmup_s[n]])[-1]:.3f}s" for n in names),
              flush=True)
        facts["first_call_s"] = {n: round(s, 3) for n, s in warmup_s.items()}
        save(summary(), facts)  # round 0 too: a step cut in round 1 keeps the first calls (compiles)
    if args.profile:  # after the timed rounds (a step's timeout keeps them): reading a GPU trace takes a while
        facts["profile"] = {}
        keys = {"update": UPDATE, "ideal": IDEAL, "packed": PACKED, "fp32-lora": FP32_LORA,
                **{k: v[0] for k, v in EXTRA.items()}}
        wanted = names if args.profile == "all" else [keys.get(k, k) for k in args.profile.split(",")]
        for name in [n for n in wanted if n in names]:
            facts["profile"][name] = profile_call(calls[name], cuda)
            print(f"{arch} profile of {name}: " + json.dumps(
                {k: v for k, v in facts["profile"][name].items() if k != "top"}), flush=True)
            save(summary(), facts)
    out.cleanup()
    return summary(), facts


def quartiles(values: list[float]) -> tuple[float, float, float]:
    return tuple(statistics.quantiles(values, n=4)) if len(values) > 1 else (values[0],) * 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--arch", default=None, help="comma-separated: 1m, 10m, qwen3-0.6b, qwen3-1.7b, qwen3-4b, "
                        "qwen3-8b (the last three random-init on the device; default 1m,10m)")
    parser.add_argument("--seq-len", type=int, default=None, help="steps of this many tokens (half prompt, half "
                        "completion, random ids) instead of game turns")
    parser.add_argument("--mixed-lengths", action="store_true", help="with --seq-len: steps of lengths drawn "
                        "uniformly from seq_len/8 to seq_len")
    parser.add_argument("--micro-batching", default="auto", choices=("auto", "packed", "buckets"),
                        help="the learner's micro_batching (auto: packed on CUDA)")
    parser.add_argument("--max-tokens", type=int, default=8192, help="the learner's max_tokens_per_micro_batch")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="the learners' per-layer checkpointing")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=None, help="base weights' dtype (default: bf16 on cuda, fp32 on cpu)")
    parser.add_argument("--no-fp32-lora", action="store_true", help="leave out the float32-LoRA update "
                                                                     "(bfloat16 base weights)")
    parser.add_argument("--batch", type=int, default=None, help="steps per update (default 16)")
    parser.add_argument("--mini-batch", type=int, default=None, help="the learner's mini_batch_size (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="completion cap (and max_generation_len)")
    parser.add_argument("--completion-median", type=float, default=64.0, help="median completion length drawn")
    parser.add_argument("--completion-sigma", type=float, default=0.8, help="log-normal sigma of completion lengths")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 12, after 1 warm-up)")
    parser.add_argument("--seed", type=int, default=0, help="games, turns and lengths drawn")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU")
    parser.add_argument("--before", default=BEFORE, help="commit of the padded learner compared against")
    parser.add_argument("--no-before", action="store_true", help="leave out the padded learner of --before")
    parser.add_argument("--no-packed", action="store_true", help="leave out the packed-rows bare pass")
    parser.add_argument("--no-update", action="store_true", help="leave out the update as a run does it")
    parser.add_argument("--extra", default="", help="comma-separated variants to add: " + ", ".join(
        f"{k} ({v[0]})" for k, v in EXTRA.items()))
    parser.add_argument("--profile", default="", help="comma-separated variants (update, ideal, packed, fp32-lora "
                        "or an --extra key; or 'all') to profile once with torch.profiler after the timed rounds: "
                        "top kernels by device time")
    parser.add_argument("--name", default=None, help="result file name (default learner[-cuda])")
    args = parser.parse_args()
    args.batch = args.batch or (4 if args.quick else 16)
    args.mini_batch = args.mini_batch or (2 if args.quick else 4)
    args.rounds = args.rounds or (2 if args.quick else 12)
    if args.quick:
        args.max_new_tokens = min(args.max_new_tokens, 32)
        args.completion_median = min(args.completion_median, 16.0)
    if args.batch % args.mini_batch:
        raise SystemExit(f"--batch ({args.batch}) must be a multiple of --mini-batch ({args.mini_batch})")
    unknown = [k for k in args.extra.split(",") if k and k not in EXTRA]
    if unknown:
        raise SystemExit(f"--extra: unknown {unknown}; known: {', '.join(EXTRA)}")
    quiet_libraries()
    archs = (args.arch or ("1m" if args.quick else "1m,10m")).split(",")
    info = machine()
    settings = {"archs": archs, "batch": args.batch, "mini_batch_size": args.mini_batch, "envs": list(ENVS),
                "template": "qwen3-zs", "max_new_tokens": args.max_new_tokens,
                "completion_lengths": f"lognormal(median {args.completion_median}, sigma {args.completion_sigma}), "
                                      f"cut at {args.max_new_tokens}",
                "seed": args.seed, "timed_rounds": args.rounds, "warmup_rounds": 1, "lora": LORA,
                "gradient_checkpointing": args.gradient_checkpointing, "activation_checkpointing": True,
                "dtype": args.dtype or "the learner's default (bf16 on cuda, fp32 on cpu)",
                "micro_batching": args.micro_batching, "max_tokens_per_micro_batch": args.max_tokens,
                "seq_len": args.seq_len, "mixed_lengths": args.mixed_lengths, "extra": args.extra,
                "torch_threads": args.threads,
                "device": args.device or ("cuda" if info.get("gpu") else "cpu"), "before_commit": args.before}
    notes = ["real tok/s counts the steps' tokens (prompt + completion, no padding); trained tok/s the completion "
             "tokens only.", "x ideal = s/update of the ideal (each step alone, no padding, no optimiser or "
             "checkpoint) / s/update of the variant, taken within each round, then the median and interquartile "
             "range over the rounds; x ideal CPU the same with CPU seconds.",
             "All variants ran interleaved in one process; the machine may have been shared (see the load "
             "averages): trust the ratios and CPU-s more than single wall times.",
             "batch_facts[arch].profile: one call of a variant under torch.profiler after the timed rounds; "
             "busy_s sums the device kernels' self time (CPU operators' on a CPU), so busy_share_of_wall "
             "below 1 is time the device waited for the host."]
    name = args.name or "learner" + (f"-{args.device}" if args.device == "cuda" else "")
    rows: list[dict] = []
    facts: dict = {}

    def save(arch_rows: list[dict], arch_facts: dict, arch: str | None = None) -> None:
        """Write what is measured so far (a step's timeout keeps every finished round)."""
        facts[arch or current[0]] = arch_facts
        write_result(name, args, rows + arch_rows, {**settings, "batch_facts": facts}, notes, info=info)

    current = [None]
    for arch in archs:
        current[0] = arch
        arch_rows, arch_facts = measure(args, arch, save)
        rows += arch_rows
        facts[arch] = arch_facts
    write_result(name, args, rows, {**settings, "batch_facts": facts}, notes, info=info)
    print(json.dumps({a: {k: v for k, v in f.items() if k not in ("seconds_per_round", "profile")}
                      for a, f in facts.items()}))


if __name__ == "__main__":
    sys.exit(main())
