"""The transformers backend: one HF model, many LoRA adapters, requests batched across games.

Like the seed's vLLM actor, requests from many concurrent games are queued and drained every
few milliseconds into one ``generate`` call. Rows of one call may use different adapters (PEFT's
``adapter_names=``), so the current checkpoint, past checkpoints and the base model share a batch.
Adapters are loaded by path on first use and kept in an LRU cache of ``max_loras``; an adapter
directory that changes on disk is reloaded, so a stale adapter is never served for a path.
Generation runs in a worker thread so the event loop keeps accepting requests meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import warnings
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from unstable.inference.base import GenerationRequest, GenerationResult, make_sample

log = logging.getLogger(__name__)

BASE_ADAPTER = "__base__"  # PEFT's name for "no adapter" rows in a mixed batch


@dataclass
class TransformersBackendConfig:
    """Settings of :class:`TransformersBackend`."""

    model_name: str
    device: str | None = None  # None: cuda if available, else cpu
    dtype: str | None = None  # None: bfloat16 on cuda, float32 on cpu
    max_batch_size: int = 32  # rows per generate call
    batch_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    max_loras: int = 8  # adapters kept loaded at once (least recently used are evicted)

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ValueError("model_name must be a HF model id or a local path")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")
        if self.max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {self.max_loras}")
        if self.dtype not in (None, "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be one of float32, bfloat16, float16 or None, got {self.dtype!r}")


def _adapter_key(path: str) -> tuple[str, int]:
    """An adapter's identity: its real path and the modification time of its weights."""
    real = os.path.realpath(path)
    if not os.path.isfile(os.path.join(real, "adapter_config.json")):
        raise FileNotFoundError(f"no PEFT adapter at {path!r} (adapter_config.json missing)")
    stamps = [os.stat(os.path.join(real, f)).st_mtime_ns for f in os.listdir(real) if f.startswith("adapter_")]
    return real, max(stamps)


class TransformersBackend:
    """See the module docstring. ``generate`` is the async API; ``generate_batch`` the sync core."""

    def __init__(self, model_name: str, **kwargs: Any):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = TransformersBackendConfig(model_name=model_name, **kwargs)
        cfg = self.config
        self.device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype_name = cfg.dtype or ("bfloat16" if self.device.type == "cuda" else "float32")
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model_name)
        base = AutoModelForCausalLM.from_pretrained(cfg.model_name, dtype=getattr(torch, dtype_name))
        self.model: Any = base.to(self.device).eval()
        self._peft = False
        self._adapters: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._adapter_counter = 0
        gen_cfg = base.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.max_length = getattr(base.config, "max_position_embeddings", None)
        self._lock = threading.Lock()  # one generate at a time (the model is not thread-safe)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        self._loop_state: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue, asyncio.Task]] = {}
        self._stats = {
            "requests": 0,
            "batches": 0,
            "completion_tokens": 0,
            "generate_seconds": 0.0,
            "adapter_loads": 0,
            "adapter_evictions": 0,
        }

    # ------------------------------------------------------------------ adapters
    def _adapter_name(self, path: str | None, in_use: set[str]) -> str:
        if path is None:
            return BASE_ADAPTER
        key = _adapter_key(path)
        if key in self._adapters:
            self._adapters.move_to_end(key)
            in_use.add(self._adapters[key])
            return self._adapters[key]
        from peft import PeftModel

        self._adapter_counter += 1
        name = f"a{self._adapter_counter}"
        if not self._peft:
            self.model = PeftModel.from_pretrained(self.model, key[0], adapter_name=name).eval()
            self._peft = True
        else:
            self.model.load_adapter(key[0], adapter_name=name)
        self.model.eval()
        self._adapters[key] = name
        self._stats["adapter_loads"] += 1
        in_use.add(name)
        self._evict(in_use)
        return name

    def _evict(self, in_use: set[str]) -> None:
        while len(self._adapters) > self.config.max_loras:
            victim = next((k for k, n in self._adapters.items() if n not in in_use), None)
            if victim is None:  # every loaded adapter is needed by this batch
                return
            with warnings.catch_warnings():  # PEFT warns when the deleted adapter was the "active" one
                warnings.simplefilter("ignore", UserWarning)
                self.model.delete_adapter(self._adapters.pop(victim))
            self._stats["adapter_evictions"] += 1

    def loaded_adapters(self) -> list[str]:
        return [path for path, _ in self._adapters]

    # ------------------------------------------------------------------ sync core
    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Complete ``requests`` (grouped by temperature/top_p into as few calls as possible)."""
        with self._lock:
            groups: dict[tuple[float, float], list[int]] = {}
            for i, req in enumerate(requests):
                groups.setdefault((req.sampling.temperature, req.sampling.top_p), []).append(i)
            results: list[GenerationResult | None] = [None] * len(requests)
            for idx in groups.values():
                for i, res in zip(idx, self._generate_group([requests[i] for i in idx]), strict=True):
                    results[i] = res
            return results  # type: ignore[return-value]

    def _encode(self, prompt: str, max_new_tokens: int) -> tuple[list[int], int]:
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids and prompt:  # AutoTokenizer loads a model folder without tokenizer files as an empty one
            raise ValueError(f"the tokenizer of {self.config.model_name} turns the prompt into no tokens (it has "
                             f"{len(self.tokenizer)} entries): its tokenizer files (tokenizer.json, "
                             "tokenizer_config.json) are missing or empty; copy them into the model folder")
        if self.max_length is not None:
            room = self.max_length - len(ids)
            if room < 1:
                raise ValueError(
                    f"prompt of {len(ids)} tokens does not fit the model's {self.max_length}-token context"
                )
            max_new_tokens = min(max_new_tokens, room)
        return ids, max_new_tokens

    @torch.no_grad()
    def _generate_group(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        t0 = time.perf_counter()
        encoded = [self._encode(r.prompt, r.sampling.max_new_tokens) for r in requests]
        in_use: set[str] = set()
        names = [self._adapter_name(r.adapter_path, in_use) for r in requests]
        width = max(len(ids) for ids, _ in encoded)
        input_ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for row, (ids, _) in enumerate(encoded):  # left padding
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        sampling = requests[0].sampling
        kwargs: dict[str, Any] = {
            "max_new_tokens": max(n for _, n in encoded),
            "do_sample": not sampling.greedy,
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids),
            "output_scores": True,
            "return_dict_in_generate": True,
        }
        if not sampling.greedy:  # top_k=0 overrides any top_k in the model's generation_config
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if self._peft:
            kwargs["adapter_names"] = names
        out = self.model.generate(
            input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs
        )
        new_tokens = out.sequences[:, width:].cpu()
        # output_scores are the logits after temperature and top-p (-inf outside the nucleus): their
        # log-softmax is the distribution each token was drawn from (greedy: the raw logits).
        logprobs = torch.stack(out.scores, dim=1).float().log_softmax(-1).cpu()
        chosen = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        elapsed = time.perf_counter() - t0
        results = []
        for row, req in enumerate(requests):
            limit = encoded[row][1]
            ids = new_tokens[row, :limit].tolist()
            stop = next((k for k, tok in enumerate(ids) if tok in self.eos_ids), None)
            finish = "stop" if stop is not None else "length"
            n = stop + 1 if stop is not None else len(ids)
            completion = tuple(ids[:n])
            sample = make_sample(
                req,
                prompt_ids=tuple(encoded[row][0]),
                completion_ids=completion,
                completion_logprobs=tuple(chosen[row, :n].tolist()),
                finish_reason=finish,
                text=self.tokenizer.decode(completion, skip_special_tokens=True),
            )
            results.append(GenerationResult(sample, adapter_path=req.adapter_path, gen_seconds=elapsed))
            self._stats["completion_tokens"] += n
        self._stats["requests"] += len(requests)
        self._stats["batches"] += 1
        self._stats["generate_seconds"] += elapsed
        return results

    # ------------------------------------------------------------------ async batching
    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Queue ``request``; it is completed in the next batch with whatever else is waiting."""
        loop = asyncio.get_running_loop()
        queue = self._queue_for(loop)
        future: asyncio.Future = loop.create_future()
        await queue.put((request, future, time.perf_counter()))
        return await future

    def _queue_for(self, loop: asyncio.AbstractEventLoop) -> asyncio.Queue:
        state = self._loop_state.get(id(loop))
        if state is None or state[0] is not loop or state[2].done():
            queue: asyncio.Queue = asyncio.Queue()
            task = loop.create_task(self._batch_loop(queue))
            self._loop_state = {id(loop): (loop, queue, task)}  # one live loop at a time
            return queue
        return state[1]

    async def _batch_loop(self, queue: asyncio.Queue) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            if self.config.batch_wait_ms:
                await asyncio.sleep(self.config.batch_wait_ms / 1000)
            while len(batch) < self.config.max_batch_size and not queue.empty():
                batch.append(queue.get_nowait())
            requests = [req for req, _, _ in batch]
            started = time.perf_counter()
            try:
                results = await loop.run_in_executor(self._executor, self.generate_batch, requests)
            except Exception as exc:
                for _, fut, _ in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut, queued_at), res in zip(batch, results, strict=True):
                if not fut.done():
                    res = _with_queue_time(res, started - queued_at)
                    fut.set_result(res)

    def stats(self) -> dict[str, Any]:
        s = dict(self._stats)
        s["mean_batch_size"] = s["requests"] / s["batches"] if s["batches"] else 0.0
        s["tokens_per_second"] = s["completion_tokens"] / s["generate_seconds"] if s["generate_seconds"] else 0.0
        s["loaded_adapters"] = len(self._adapters)
        queue = next(iter(self._loop_state.values()), (None, None, None))[1]
        s["queue_size"] = queue.qsize() if queue is not None else 0
        return s

    def close(self) -> None:
        for _, _, task in self._loop_state.values():
            task.cancel()
        self._loop_state.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _with_queue_time(res: GenerationResult, queued: float) -> GenerationResult:
    from dataclasses import replace

    return replace(res, queue_seconds=max(0.0, queued))
