"""The learning layer by hand, without Ray: self-play games -> buffers -> REINFORCE and A2C updates.

    python examples/learning_loop.py --games 64

1. The tiny model plays ``--games`` games of KuhnPoker-v0-train against itself (both seats
   collected), all in flight at once so their model calls are batched.
2. The games go through a StepBuffer with the seed's default reward chain, then 3 REINFORCE
   updates; and through an EpisodeBuffer, then 3 A2C updates.
3. The adapters the learners wrote are loaded into the same inference backend for more games.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import unstable
import unstable.reward_transformations as retra
from unstable import AgentSpec, GameRecord, GameSpec, PolicyRef, SamplingParams
from unstable.policies.llm import LLMPolicy

ENV = "KuhnPoker-v0-train"


def self_play(backend, ref: PolicyRef, games: int, first_seed: int) -> list[GameRecord]:
    agents = tuple(AgentSpec(pid, ref, collect_data=True, prompt_template="qwen3-zs") for pid in (0, 1))
    specs = [GameSpec(first_seed + i, ENV, first_seed + i, agents) for i in range(games)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=24)
    policy = LLMPolicy(backend, ref, prompt_template="qwen3-zs", sampling=sampling)
    results = asyncio.run(unstable.play_games(specs, lambda spec: {0: policy, 1: policy}, max_concurrent=games))
    records = [r for r in results if isinstance(r, GameRecord)]
    print(f"  {ref.uid}: {len(records)}/{games} games finished, {sum(r.num_turns for r in records)} turns")
    return records


def train(learner_cls, buffer, records, updates: int, batch_size: int, out_dir: str, model: str):
    for record in records:
        buffer.add_game(record)
    learner = learner_cls(model, lora_cfg={"lora_rank": 8, "lora_alpha": 16}, batch_size=batch_size,
                          mini_batch_size=batch_size // 2, learning_rate=1e-3, output_dir=out_dir,
                          activation_checkpointing=False, gradient_checkpointing=False, seed=0)
    learner.initialize_algorithm(max_generation_len=24)
    results = []
    for _ in range(updates):
        batch = buffer.get_batch(batch_size)
        result = learner.update(batch)  # a TrainBatch: loose Steps, or whole episodes for A2C
        print(f"  {learner_cls.__name__} v{result.version}: loss {result.metrics['train/loss']:+.4f} "
              f"grad_norm {result.metrics['train/grad_norm']:.3f} -> {result.adapter_path}")
        results.append(result)
    return results


def main(games: int = 64, out: str | None = None) -> dict:
    out = out or tempfile.mkdtemp(prefix="unstable-example-")
    t0 = time.perf_counter()
    model = str(unstable.tiny_model_path("1m"))
    backend = unstable.TransformersBackend(model)
    print(f"1. self-play: {games} games of {ENV}")
    records = self_play(backend, PolicyRef("base", "checkpoint", None, version=0), games, first_seed=0)

    print("2. learning")
    final, step, sampling = retra.default_transforms()
    steps_buffer = unstable.StepBuffer(10_000, None, final, step, sampling, seed=0)
    batch = max(2, min(32, 2 * (sum(len(r.turns) for r in records) // 8) // 2))
    reinforce = train(unstable.REINFORCELearner, steps_buffer, records, 3, batch, f"{out}/reinforce", model)
    final, step, _ = retra.default_transforms()
    episodes = unstable.EpisodeBuffer(10_000, None, final, step, None, seed=0)
    a2c = train(unstable.A2CLearner, episodes, records, 3, batch, f"{out}/a2c", model)

    print("3. the new adapters play the next games")
    for result in (reinforce[-1], a2c[-1]):
        ref = PolicyRef(f"ckpt-{result.version}", "checkpoint", result.adapter_path, version=result.version)
        self_play(backend, ref, max(2, games // 8), first_seed=10_000)
    print(f"done in {time.perf_counter() - t0:.1f}s; adapters under {out}")
    backend.close()
    return {"reinforce": [r.adapter_path for r in reinforce], "a2c": [r.adapter_path for r in a2c],
            "loaded": backend.loaded_adapters()}


if __name__ == "__main__":
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=64)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    main(args.games, args.out)
