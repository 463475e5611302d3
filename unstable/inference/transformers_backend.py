"""The transformers backend: one HF model, many LoRA adapters, requests batched across games.

Like the seed's vLLM actor, requests from many concurrent games are queued and drained every
few milliseconds into one ``generate`` call. Rows of one call may use different adapters, so the
current checkpoint, past checkpoints and the base model share a batch: the adapters are held by
:class:`~unstable.inference.multi_lora.MultiLora`, not PEFT, whose per-call hooks a compiled step
would recompile for. Adapters are loaded by path on first use and kept in an LRU cache of
``max_loras``; an adapter directory that changes on disk is reloaded, so a stale adapter is never
served for a path. Generation runs in a worker thread so the event loop keeps accepting requests
meanwhile.

On CUDA every batch, with adapters or without, uses a static KV cache (``kv_cache="auto"``), so
transformers compiles its decoding step (``torch.compile``, CUDA graphs): the batch's adapters are
stacked and routed by a mask, tensors updated in place, so a new adapter or a new mix of rows does not
recompile; such a batch stacks at most ``max_loras`` adapters (more go in another call). Prompts are
left-padded to a multiple of ``STATIC_WIDTH_STEP`` tokens and batches to a power of two rows (copies
of the first row, whose outputs are dropped), so that few shapes occur. Elsewhere the cache is dynamic
and decoding eager (``kv_cache="static"`` forces the static cache, not compiled on CPU). A kind of batch
(base weights only, or with adapters) whose static-cache generate fails but works with the dynamic
cache uses the dynamic cache from then on (logged once). Only the sampled tokens' log-probs leave the
device (:func:`chosen_logprobs`, one step at a time), never a ``[batch, steps, vocabulary]`` tensor.

Adapters also arrive in memory (:meth:`TransformersBackend.add_adapter`, an
:class:`~unstable.inference.adapters.AdapterPayload`, fetched from Ray's object store by the inference
actor): a request for that path then never touches the disk.

Requests fail one by one, as in the vLLM backend: an error that belongs to one request (its adapter
is missing or cannot be loaded, its prompt does not fit, its sampling settings are not
:class:`~unstable.inference.base.SamplingParams`) fails that request alone, and the rest of its batch
generates. An adapter that failed to load is remembered (until its files change), so it is not
reloaded for every request. When ``generate`` itself fails for a batch (out of memory, say), the batch
is retried in parts, first one part per adapter, then halves, so an error fails only the requests it
can be pinned on and never those of another adapter.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from unstable.inference.adapters import PAYLOADS_PER_LORA, AdapterPayload, read_adapter
from unstable.inference.base import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    allowed_next,
    allowed_path,
    make_sample,
)
from unstable.inference.multi_lora import MultiLora
from unstable.local_models.resolve import resolve_tiny_name

log = logging.getLogger(__name__)

MEMORY_PREFIX = "memory:"  # adapter keys of in-memory adapters (add_adapter) start with it
STATIC_WIDTH_STEP = 64  # with a static cache, prompts are left-padded to a multiple of this many tokens
MAX_BROKEN_ADAPTERS = 64  # adapter versions remembered as unloadable (least recently seen are forgotten)


@dataclass
class TransformersBackendConfig:
    """Settings of :class:`TransformersBackend`."""

    model_name: str
    device: str | None = None  # None: cuda if available, else cpu
    dtype: str | None = None  # None: bfloat16 on cuda, float32 on cpu
    max_batch_size: int = 32  # rows per generate call
    batch_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    max_loras: int = 8  # adapters kept loaded (least recently used are evicted); the most a static-cache call stacks
    kv_cache: str = "auto"  # "auto": static (decoding compiled) on cuda, dynamic elsewhere; "static" everywhere
    # (on cpu: not compiled); "dynamic" nowhere

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ValueError("model_name must be a HF model id or a local path")
        self.model_name = resolve_tiny_name(self.model_name)
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")
        if self.max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {self.max_loras}")
        if self.dtype not in (None, "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be one of float32, bfloat16, float16 or None, got {self.dtype!r}")
        if self.kv_cache not in ("auto", "static", "dynamic"):
            raise ValueError(f"kv_cache must be 'auto', 'static' or 'dynamic', got {self.kv_cache!r}")


def _adapter_key(path: str) -> tuple[str, int]:
    """An adapter's identity: its real path and the modification time of its weights."""
    real = os.path.realpath(path)
    if not os.path.isfile(os.path.join(real, "adapter_config.json")):
        raise FileNotFoundError(f"no PEFT adapter at {path!r} (adapter_config.json missing)")
    stamps = [os.stat(os.path.join(real, f)).st_mtime_ns for f in os.listdir(real) if f.startswith("adapter_")]
    return real, max(stamps)


@dataclass(frozen=True, slots=True)
class _Row:
    """One request, ready to generate: its index in the batch, prompt ids, token limit and adapter name
    (``None``: the base weights)."""

    index: int
    request: GenerationRequest
    prompt_ids: list[int]
    max_new_tokens: int
    adapter: str | None
    choices: tuple[tuple[int, ...], ...] | None = None  # token ids of each allowed answer, a stop token last


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
        self._lora = MultiLora(self.model)
        self._adapters: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._broken: OrderedDict[tuple[str, int], BaseException] = OrderedDict()  # adapters that failed to load
        self._adapter_counter = 0
        self._payloads: OrderedDict[str, AdapterPayload] = OrderedDict()  # in-memory adapters by source
        self._payload_lock = threading.Lock()
        self._choice_ids: dict[str, tuple[int, ...]] = {}
        gen_cfg = base.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.max_length = getattr(base.config, "max_position_embeddings", None)
        # which batches (False: base weights only, True: with adapters) use the static cache; a kind whose
        # static/compiled generate failed falls back to the dynamic cache for good (logged once)
        static = cfg.kv_cache == "static" or (cfg.kv_cache == "auto" and self.device.type == "cuda")
        self._static = {False: static, True: static}
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
            "adapter_load_failures": 0,
            "failed_requests": 0,
            "batch_retries": 0,
        }

    # ------------------------------------------------------------------ adapters
    def _adapter_name(self, path: str | None, in_use: set[str]) -> str | None:
        if path is None:
            return None
        with self._payload_lock:
            payload = self._payloads.get(path)
            if payload is not None:  # the payloads are kept least recently used first out
                self._payloads.move_to_end(path)
        memory = (MEMORY_PREFIX + path, 0)
        key = memory if payload is not None or memory in self._adapters else _adapter_key(path)
        if key in self._adapters:
            self._adapters.move_to_end(key)
            in_use.add(self._adapters[key])
            return self._adapters[key]
        if key in self._broken:  # failed before and unchanged since: do not load it again
            self._broken.move_to_end(key)
            raise _adapter_error(path, self._broken[key])
        self._adapter_counter += 1
        name = f"a{self._adapter_counter}"
        try:  # nothing of a refused adapter is kept
            payload = payload if payload is not None else read_adapter(key[0])
            self._lora.add(name, payload.config(), payload.state_dict(), path)
        except Exception as exc:
            self._broken[key] = exc
            while len(self._broken) > MAX_BROKEN_ADAPTERS:
                self._broken.popitem(last=False)
            self._stats["adapter_load_failures"] += 1
            raise _adapter_error(path, exc) from exc
        self._adapters[key] = name
        self._stats["adapter_loads"] += 1
        in_use.add(name)
        self._evict(in_use)
        return name

    # ------------------------------------------------------------------ adapters in memory
    def add_adapter(self, source: str, payload: AdapterPayload) -> None:
        """Serve requests for adapter ``source`` from ``payload`` (its files in memory), not from disk.
        The payloads of the ``PAYLOADS_PER_LORA * max_loras`` most recently used adapters are kept (an
        adapter evicted from the loaded ones is loaded again from them); the inference actor fetches an
        older one again."""
        with self._payload_lock:  # the event loop adds while the generate thread reads
            self._payloads[source] = payload
            self._payloads.move_to_end(source)
            while len(self._payloads) > PAYLOADS_PER_LORA * self.config.max_loras:
                self._payloads.popitem(last=False)

    def has_adapter(self, source: str) -> bool:
        """Whether a request for ``source`` is served from memory (:meth:`add_adapter`)."""
        with self._payload_lock:
            return source in self._payloads or (MEMORY_PREFIX + source, 0) in self._adapters

    def _evict(self, in_use: set[str]) -> None:
        while len(self._adapters) > self.config.max_loras:
            victim = next((k for k, n in self._adapters.items() if n not in in_use), None)
            if victim is None:  # every loaded adapter is needed by this batch
                return
            self._lora.remove(self._adapters.pop(victim))
            self._stats["adapter_evictions"] += 1

    def loaded_adapters(self) -> list[str]:
        """The adapters now loaded, least recently used first: real paths, or the source of one added in memory."""
        return [path.removeprefix(MEMORY_PREFIX) for path, _ in self._adapters]

    # ------------------------------------------------------------------ sync core
    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Complete ``requests``; if any failed, raise the first one's error once all are done."""
        outcomes = self.generate_outcomes(requests)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes  # type: ignore[return-value]

    def generate_outcomes(self, requests: list[GenerationRequest]) -> list[GenerationResult | Exception]:
        """Each request's result, or the error that failed it alone (see the module docstring).
        Requests are grouped by temperature/top_p into as few ``generate`` calls as possible; with the
        static cache, each with at most ``max_loras`` adapters (as vLLM's ``max_loras``: the adapters
        one compiled batch stacks)."""
        with self._lock:
            outcomes: list[GenerationResult | Exception | None] = [None] * len(requests)
            groups: dict[tuple[float, float], list[_Row]] = {}
            in_use: set[str] = set()  # every adapter of this batch stays loaded until it has run
            for i, req in enumerate(requests):
                try:
                    row = self._prepare(i, req, in_use)
                except Exception as exc:
                    outcomes[i] = exc
                    continue
                groups.setdefault((req.sampling.temperature, req.sampling.top_p), []).append(row)
            for rows in groups.values():
                static = self._static[_has_adapters(rows)]
                for part in _at_most_adapters(rows, self.config.max_loras) if static else [rows]:
                    self._generate_isolated(part, outcomes)
            self._stats["failed_requests"] += sum(isinstance(o, BaseException) for o in outcomes)
            return outcomes  # type: ignore[return-value]

    def _prepare(self, index: int, req: GenerationRequest, in_use: set[str]) -> _Row:
        if not isinstance(req, GenerationRequest):
            raise TypeError(f"a request must be a GenerationRequest, got {type(req).__name__}")
        if not isinstance(req.sampling, SamplingParams):
            raise TypeError(f"a request's sampling must be a SamplingParams, got {type(req.sampling).__name__}")
        if not isinstance(req.prompt, str):
            raise TypeError(f"a request's prompt must be a str, got {type(req.prompt).__name__}")
        ids, max_new_tokens = self._encode(req.prompt, req.sampling.max_new_tokens)
        choices = None
        if req.choices is not None:
            if not req.choices:
                raise ValueError("a request's choices must name at least one answer")
            choices = tuple(dict.fromkeys(self.choice_ids(text) for text in req.choices))
            longest = max(len(c) for c in choices)
            if longest > max_new_tokens:
                raise ValueError(f"an allowed answer is {longest} tokens with its stop token, more than the "
                                 f"{max_new_tokens} new tokens this request may generate")
        return _Row(index, req, ids, max_new_tokens, self._adapter_name(req.adapter_path, in_use), choices)

    def choice_ids(self, text: str) -> tuple[int, ...]:
        """The token ids of the allowed answer ``text`` and the stop token after it, tokenized as the warm start
        teaches answers (``text + eos_token`` in one call)."""
        ids = self._choice_ids.get(text)
        if ids is None:
            end = self.tokenizer.eos_token or ""
            ids = list(self.tokenizer(text + end, add_special_tokens=False)["input_ids"])
            if not ids or ids[-1] not in self.eos_ids:
                ids.append(min(self.eos_ids))
            ids = self._choice_ids[text] = tuple(ids)
        return ids

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

    def _generate_isolated(self, rows: list[_Row], outcomes: list) -> None:
        """Generate ``rows`` together; if that fails, retry them in parts (one part per adapter, then
        halves) until the error is pinned on single requests, which fail with it."""
        try:
            results = self._generate_rows(rows)
        except Exception as exc:
            if torch.cuda.is_available() and isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            if len(rows) == 1:
                outcomes[rows[0].index] = exc
                return
            self._stats["batch_retries"] += 1
            log.warning("generate failed for a batch of %d requests (%s: %s); retrying it in parts",
                        len(rows), type(exc).__name__, exc)
            for part in _split(rows):
                self._generate_isolated(part, outcomes)
            return
        for row, result in zip(rows, results, strict=True):
            outcomes[row.index] = result

    @torch.no_grad()
    def _generate_rows(self, rows: list[_Row]) -> list[GenerationResult]:
        t0 = time.perf_counter()
        lora = _has_adapters(rows)
        static = self._static[lora]
        width = max(len(row.prompt_ids) for row in rows)
        padded = rows
        if static:  # few distinct cache shapes, so few recompiles and CUDA graphs of the decoding step:
            width = -(-width // STATIC_WIDTH_STEP) * STATIC_WIDTH_STEP  # prompts to a multiple of 64 tokens,
            size = min(1 << (len(rows) - 1).bit_length(), max(self.config.max_batch_size, len(rows)))
            padded = rows + [rows[0]] * (size - len(rows))  # rows to a power of two (copies, dropped after)
        input_ids = torch.full((len(padded), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(padded), width), dtype=torch.long)
        for i, row in enumerate(padded):  # left padding
            input_ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids, dtype=torch.long)
            attention[i, width - len(row.prompt_ids) :] = 1
        sampling = rows[0].request.sampling
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": attention.to(self.device),
            "max_new_tokens": max(row.max_new_tokens for row in rows),
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
        if any(row.choices for row in rows):  # before temperature and top-p, as HF applies processors first
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList([_ChoiceMask([row.choices for row in padded], width)])
        self._lora.route([row.adapter for row in padded], dense=static)
        out = self._generate_call(kwargs, lora, static)
        new_tokens = out.sequences[: len(rows), width:]
        # output_scores are the logits after temperature and top-p (-inf outside the nucleus): the
        # distribution each token was drawn from (greedy: the raw logits). Only the chosen tokens'
        # log-probs leave the device.
        n_rows = len(rows)
        chosen = torch.stack([chosen_logprobs(s[:n_rows], new_tokens[:, t]) for t, s in enumerate(out.scores)], 1).cpu()
        new_tokens = new_tokens.cpu()
        elapsed = time.perf_counter() - t0
        results = []
        for i, row in enumerate(rows):
            ids = new_tokens[i, : row.max_new_tokens].tolist()
            stop = next((k for k, tok in enumerate(ids) if tok in self.eos_ids), None)
            finish = "stop" if stop is not None else "length"
            n = stop + 1 if stop is not None else len(ids)
            completion = tuple(ids[:n])
            sample = make_sample(
                row.request,
                prompt_ids=tuple(row.prompt_ids),
                completion_ids=completion,
                completion_logprobs=tuple(chosen[i, :n].tolist()),
                finish_reason=finish,
                text=self.tokenizer.decode(completion, skip_special_tokens=True),
                allowed=allowed_path(row.choices, completion) if row.choices else (),
            )
            results.append(GenerationResult(sample, adapter_path=row.request.adapter_path, gen_seconds=elapsed))
            self._stats["completion_tokens"] += n
        self._stats["requests"] += len(rows)
        self._stats["batches"] += 1
        self._stats["generate_seconds"] += elapsed
        return results

    def _generate_call(self, kwargs: dict[str, Any], lora: bool, static: bool) -> Any:
        """``model.generate`` with the static cache (compiled by transformers on CUDA) when ``static``;
        if that fails for a reason other than memory, this kind of batch uses the dynamic cache from now on."""
        if not static:
            return self.model.generate(**kwargs)
        try:
            return self.model.generate(**kwargs, cache_implementation="static")
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:
            out = self.model.generate(**kwargs)  # fails too: the batch's own error (a broken adapter), raised
            self._static[lora] = False
            log.warning("generate with a static KV cache failed for a batch %s adapters (%s: %s) and worked with the "
                        "dynamic cache; such batches use the dynamic cache from now on",
                        "with" if lora else "without", type(exc).__name__, exc)
            return out

    @torch.no_grad()
    def forward(self, adapter_path: str | None, **model_inputs: Any) -> Any:
        """One forward pass of the model (``model_inputs`` as for the HF model) with every row on the
        adapter at ``adapter_path`` (``None``: the base weights), between generate calls."""
        with self._lock:
            self._lora.route([self._adapter_name(adapter_path, set())] * model_inputs["input_ids"].shape[0])
            return self.model(**model_inputs)

    def decoding(self) -> dict[str, str]:
        """The KV cache each kind of batch now uses: ``{"base": "static" | "dynamic", "lora": ...}``."""
        return {"base": "static" if self._static[False] else "dynamic",
                "lora": "static" if self._static[True] else "dynamic"}

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
                outcomes = await loop.run_in_executor(self._executor, self.generate_outcomes, requests)
            except Exception as exc:  # a bug of this backend, not of one request: nothing can be trusted
                outcomes = [exc] * len(batch)
            for (_, fut, queued_at), outcome in zip(batch, outcomes, strict=True):
                if fut.done():
                    continue
                if isinstance(outcome, BaseException):
                    fut.set_exception(outcome)
                else:
                    fut.set_result(_with_queue_time(outcome, started - queued_at))

    def stats(self) -> dict[str, Any]:
        """The request, batch, token and adapter counters, plus ``mean_batch_size``, ``tokens_per_second``,
        ``loaded_adapters`` (a count) and ``queue_size`` (requests waiting for a batch)."""
        s = dict(self._stats)
        s["mean_batch_size"] = s["requests"] / s["batches"] if s["batches"] else 0.0
        s["tokens_per_second"] = s["completion_tokens"] / s["generate_seconds"] if s["generate_seconds"] else 0.0
        s["loaded_adapters"] = len(self._adapters)
        queue = next(iter(self._loop_state.values()), (None, None, None))[1]
        s["queue_size"] = queue.qsize() if queue is not None else 0
        return s

    def close(self) -> None:
        """Cancel the batching loops and shut the generation thread down without waiting for it."""
        for _, _, task in self._loop_state.values():
            task.cancel()
        self._loop_state.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)


class _ChoiceMask:
    """A logits processor: in each row with ``choices``, every token that does not continue one of them gets
    ``-inf``, so the next token is drawn from the model's distribution renormalised over those that do. A
    row whose answer is complete (it goes on with padding) is left as it is."""

    def __init__(self, choices: list[tuple[tuple[int, ...], ...] | None], width: int):
        self.choices = choices
        self.width = width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[:, self.width:].tolist()
        for b, choices in enumerate(self.choices):
            allowed = allowed_next(choices, generated[b]) if choices else ()
            if allowed:
                keep = torch.tensor(allowed, device=scores.device)
                kept = scores[b, keep]
                scores[b] = -math.inf
                scores[b, keep] = kept
        return scores


def chosen_logprobs(scores: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log_softmax(scores)[row, tokens[row]]`` for each row of ``scores`` ``[batch, vocab]``, in float32,
    on the scores' device, without the ``[batch, vocab]`` log-softmax: ``scores[token] - logsumexp(scores)``."""
    s = scores.float()
    return s.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(s, dim=-1)


def _adapter_error(path: str, cause: BaseException) -> RuntimeError:
    return RuntimeError(f"could not load the LoRA adapter {path!r} ({type(cause).__name__}: {cause}); its files are "
                        "damaged or it was made for another model: replace it, or stop using it as a policy")


def _has_adapters(rows: list[_Row]) -> bool:
    """Whether any of ``rows`` is on an adapter (the kind of batch whose KV cache ``_static`` says)."""
    return any(row.adapter is not None for row in rows)


def _by_adapter(rows: list[_Row]) -> dict[str | None, list[_Row]]:
    """``rows`` grouped by adapter (``None``: the base weights), in order of first appearance."""
    groups: dict[str | None, list[_Row]] = {}
    for row in rows:
        groups.setdefault(row.adapter, []).append(row)
    return groups


def _at_most_adapters(rows: list[_Row], limit: int) -> list[list[_Row]]:
    """``rows`` in parts of at most ``limit`` adapters each (base rows go with the first part), keeping
    each adapter's rows together and the parts as few as the first-fit order allows."""
    by_adapter = _by_adapter(rows)
    base = by_adapter.pop(None, [])
    parts = [base]
    names: list[int] = [0]
    for adapter_rows in by_adapter.values():
        if names[-1] == limit:
            parts.append([])
            names.append(0)
        parts[-1].extend(adapter_rows)
        names[-1] += 1
    return [part for part in parts if part]


def _split(rows: list[_Row]) -> list[list[_Row]]:
    """A failed batch in parts: one per adapter if it has several, else two halves."""
    by_adapter = _by_adapter(rows)
    if len(by_adapter) > 1:
        return list(by_adapter.values())
    half = len(rows) // 2
    return [rows[:half], rows[half:]]


def _with_queue_time(res: GenerationResult, queued: float) -> GenerationResult:
    from dataclasses import replace

    return replace(res, queue_seconds=max(0.0, queued))
