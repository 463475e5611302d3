"""What every benchmark script shares: models by architecture name, machine facts, timing, JSON and tables.

Each script writes ``benchmarks/results/<name>.json`` (``<name>-quick.json`` for ``--quick``):
``{"benchmark", "machine", "settings", "rows", "notes"}``, where every row is a flat dict and the
first column names what was measured. :func:`markdown_table` renders the rows; ``report.py``
renders every result file into ``benchmarks/results/RESULTS.md``.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

ARCHS = ("1m", "10m", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b")
# Qwen3-0.6B's shape (random init; same layer count, widths, vocabulary and head layout).
QWEN3_06B = dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960,
                 rope_theta=1_000_000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)


# The seed's model sizes, from the Qwen3 model cards' config.json (random init, built on the device).
QWEN3_SHAPES = {
    "qwen3-1.7b": dict(QWEN3_06B, hidden_size=2048, intermediate_size=6144),
    "qwen3-4b": dict(QWEN3_06B, hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, intermediate_size=9728),
    "qwen3-8b": dict(QWEN3_06B, hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                     intermediate_size=12288, tie_word_embeddings=False),
    "qwen3-tiny-test": dict(QWEN3_06B, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, intermediate_size=128),
}
RANDOM_INIT = "RANDOM_INIT"  # marker file: the directory holds a config and a tokenizer, no weights


def shape_dir(arch: str) -> str:
    """A directory with the config of ``arch`` (:data:`QWEN3_SHAPES`), the tiny models' tokenizer and
    the :data:`RANDOM_INIT` marker, no weights: inside :func:`random_init_on_device` the learner
    builds the model directly on its device in its dtype (no 16 GB written to disk and read back)."""
    from transformers import Qwen3Config

    from unstable.local_models.tiny import tiny_model_path

    tiny = tiny_model_path("1m")
    out = tiny.parent.parent / "bench-models" / f"{arch}-config-only"
    if (out / RANDOM_INIT).is_file():
        return str(out)
    tiny_cfg = json.loads((tiny / "config.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    Qwen3Config(**QWEN3_SHAPES[arch], bos_token_id=tiny_cfg.get("bos_token_id"),
                eos_token_id=tiny_cfg.get("eos_token_id"), pad_token_id=tiny_cfg.get("pad_token_id")
                ).save_pretrained(str(out))
    for f in tiny.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "generation_config", "chat_template")):
            shutil.copy(f, out / f.name)
    (out / RANDOM_INIT).write_text("random init on the device: see benchmarks/common.py\n")
    return str(out)


def random_init_on_device() -> None:
    """Make the learners build a :func:`shape_dir` model from its config, on their device in their
    dtype, with seed 0 (benchmarks only: it replaces ``unstable.learners.model_utils.load_base_model``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from unstable.learners import model_utils as mu

    load = mu.load_base_model
    if getattr(load, "random_init", False):
        return

    def load_base_model(model_name, device, dtype, gradient_checkpointing, attn_implementation=None):
        if not (Path(model_name) / RANDOM_INIT).is_file():
            return load(model_name, device, dtype, gradient_checkpointing, attn_implementation)
        torch.manual_seed(0)
        extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_name), dtype=dtype,
                                                     **extra).to(dtype)
        model.config.use_cache = False
        model.requires_grad_(False)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model

    load_base_model.random_init = True
    mu.load_base_model = load_base_model


def quiet_libraries() -> None:
    """Offline, quiet transformers/tokenizers (set before they are imported)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def add_common_args(parser: Any) -> None:
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke run (results to <name>-quick.json)")
    parser.add_argument("--out", default=str(RESULTS_DIR), help="folder for the JSON result (default: %(default)s)")


def model_dir(arch: str) -> str:
    """A local model directory for ``arch``: a tiny model, or a random-init Qwen3-0.6B-shaped one (bf16).

    The 0.6B-shaped model borrows the tiny models' tokenizer (its ids are all < 2048, inside the
    151936-token vocabulary), so nothing is downloaded; it is built once under ``$UNSTABLE_CACHE``.
    """
    from unstable.local_models.tiny import tiny_model_path

    if arch in ("1m", "10m", "50m"):
        return str(tiny_model_path(arch))
    if arch in QWEN3_SHAPES:
        return shape_dir(arch)
    if arch != "qwen3-0.6b":
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    tiny = tiny_model_path("1m")
    out = tiny.parent.parent / "bench-models" / "qwen3-0.6b-random-seed0"
    if (out / "config.json").is_file():
        return str(out)
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tiny_cfg = json.loads((tiny / "config.json").read_text())
    config = Qwen3Config(**QWEN3_06B, bos_token_id=tiny_cfg.get("bos_token_id"),
                         eos_token_id=tiny_cfg.get("eos_token_id"), pad_token_id=tiny_cfg.get("pad_token_id"))
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(str(tmp))
    for f in tiny.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "generation_config", "chat_template")):
            shutil.copy(f, tmp / f.name)
    tmp.rename(out)
    return str(out)


def machine() -> dict[str, Any]:
    """CPU model, cores this process may use, memory, load, library versions, git commit."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    info: dict[str, Any] = {
        "cpu": cpu, "cores": len(os.sched_getaffinity(0)), "load_avg_1m_at_start": os.getloadavg()[0],
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(), "executable": sys.executable,
    }
    for lib in ("torch", "transformers", "peft", "textarena", "ray", "vllm"):
        info[lib] = _version(lib)
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                            text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["git_commit"] = None
    return info


def _version(lib: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in (lib, f"{lib}-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def timed(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[list[float], Any]:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times; the wall seconds and last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its live child processes.

    Next to wall time it shows contention on a shared machine: tokens per CPU-second barely move
    when other jobs take the cores, tokens per wall-second do. (A child's time is lost if it exits.)
    """
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return total


def peak_rss_mib() -> float:
    """This process's peak resident memory (``ru_maxrss``, KiB on Linux) in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_result(name: str, args: Any, rows: list[dict[str, Any]], settings: dict[str, Any],
                 notes: Sequence[str] = (), info: dict[str, Any] | None = None) -> Path:
    """Write ``<out>/<name>[-quick].json`` and print its table; returns the path."""
    info = dict(info or machine())  # pass machine() taken at the start, so both load averages are right
    info["load_avg_1m_at_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}{'-quick' if args.quick else ''}.json"
    doc = {"benchmark": name, "quick": bool(args.quick), "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "machine": info, "settings": settings, "rows": rows, "notes": list(notes)}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(markdown_table(rows))
    print(f"\nwrote {path}")
    return path


def fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """A GitHub markdown table with the union of the rows' keys, in first-seen order."""
    if not rows:
        return "(no rows)"
    cols: list[str] = []
    for row in rows:
        cols.extend(k for k in row if k not in cols)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    lines += ["| " + " | ".join(fmt(row.get(c)) for c in cols) + " |" for row in rows]
    return "\n".join(lines)



def counting_scheduler_cls() -> type:
    """:class:`~unstable.collection.scheduler.GameScheduler` that also counts the finished games and their turns."""
    from unstable.collection.scheduler import GameScheduler
    from unstable.records import GameRecord

    class CountingScheduler(GameScheduler):
        games = 0
        turns = 0

        def update(self, result: Any) -> Any:
            if isinstance(result, GameRecord) and not result.spec.is_eval:
                self.games += 1
                self.turns += len(result.turns)
            return super().update(result)

        def counts(self) -> dict[str, float]:
            return {"games": float(self.games), "turns": float(self.turns)}

        def stamped_counts(self) -> dict[str, float]:
            """:meth:`counts` and when they were read (``time.monotonic()``, one clock for every process
            of the machine): an actor answers after the calls queued before it, so the caller's own
            clock would put the window's ends late by that wait."""
            return {**self.counts(), "at": time.monotonic()}

    return CountingScheduler


def local_components(env_ids: Sequence[str], run_dir: str | None, adapter_path: str | None = None) -> dict[str, Any]:
    """A run's collection side as plain objects: registry, scheduler (fixed "random" opponent), buffer, tracker.

    The learner's seat plays checkpoint ``ckpt-1`` at ``adapter_path`` when one is given, else the
    base model; the buffer never fills (no learner drains it here, so back-pressure never pauses).
    ``run_dir=None`` runs without a Tracker (no metrics or transcripts written). The scheduler
    counts finished train games and turns (``scheduler.counts()``).
    """
    from unstable.buffers import StepBuffer
    from unstable.games.specs import TrainEnvSpec
    from unstable.registry import ModelRegistry
    from unstable.reward_transformations import default_transforms
    from unstable.samplers.env_samplers import UniformRandomEnvSampler
    from unstable.samplers.model_samplers import FixedOpponentModelSampler
    from unstable.tracking import Tracker

    tracker = None
    if run_dir is not None:
        tracker = Tracker(run_name="bench", wandb_project=None, run_dir=run_dir, use_wandb=False)
    registry = ModelRegistry(tracker=tracker)
    registry.add_checkpoint(uid="base", path=None, iteration=0)
    if adapter_path is not None:
        registry.add_checkpoint(uid="ckpt-1", path=adapter_path, iteration=1)
    registry.add_fixed(name="random")
    specs = [TrainEnvSpec(env_id=e, num_players=2, num_actors=1, prompt_template="qwen3-zs") for e in env_ids]
    scheduler = counting_scheduler_cls()(
        model_sampler=FixedOpponentModelSampler(model_registry=registry, rng_seed=0),
        env_sampler=UniformRandomEnvSampler(train_env_specs=specs, rng_seed=0), seed=0)
    final, step, sampling = default_transforms()
    buffer = StepBuffer(max_buffer_size=10**9, tracker=tracker, final_reward_transformation=final,
                        step_reward_transformation=step, sampling_reward_transformation=sampling)
    return {"tracker": tracker, "registry": registry, "scheduler": scheduler, "buffer": buffer}


async def run_collector_for(collector: Any, workers: int, seconds: float, warmup_s: float,
                            probe: Callable[[], dict[str, float]] | None = None) -> dict[str, float]:
    """Run an in-process ``collector`` with ``workers`` train games in flight; count over a window.

    The window opens ``warmup_s`` after the start and lasts ``seconds``; returns the games and
    turns finished inside it (counted by the scheduler of :func:`local_components`) and the
    change of every number ``probe()`` returns (e.g. a backend's token counter).
    """
    import asyncio

    def snapshot() -> dict[str, float]:
        return {**collector.scheduler.counts(), **(probe() if probe else {})}

    task = asyncio.create_task(collector.collect(workers, 0))
    await asyncio.sleep(warmup_s)
    t0, before = time.perf_counter(), snapshot()
    await asyncio.sleep(seconds)
    t1, after = time.perf_counter(), snapshot()
    collector.stop()
    await task
    out = {k: after[k] - before[k] for k in after}
    out["seconds"] = t1 - t0
    return out


def pyplot() -> Any:
    """matplotlib's ``pyplot`` on the Agg backend: the plotting scripts draw to files, with no display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, out: str | Path) -> None:
    """Lay ``fig`` out and write it to ``out`` (its folder made) at the plots' 110 dpi, and say where."""
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
