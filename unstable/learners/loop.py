"""The training loop: wait for a batch, update, publish the checkpoint (SB3's ``learn()`` around ``train()``).

The learner's :meth:`~unstable.learners.BaseLearner.update` is pure: a
:class:`~unstable.records.TrainBatch` in, an :class:`~unstable.learners.UpdateResult` out, with no
buffer, registry or tracker in sight. :func:`run_training` is where those collaborators meet it,
each passed explicitly. They are duck-typed and may be plain objects or Ray actor handles (every
call goes through :func:`unstable.utils.calls.call`):

* ``buffer.size() -> int`` and ``buffer.get_batch(n) -> TrainBatch`` (required);
* ``buffer.set_learner_version(v)`` (optional; lets the buffer measure/bound staleness);
* ``registry.add_checkpoint(uid=f"ckpt-{v}", path=..., iteration=v)`` (optional; with
  ``config.lineage``, ``uid=f"{lineage}-ckpt-{v}"`` and ``lineage=...``);
* ``tracker.log(metrics: dict)`` (optional; with ``config.lineage`` the keys start ``<lineage>/``);
* ``tracker.write_error()`` (optional): the error that stopped the tracker's writes (a full disk, a
  read-only run directory), or ``None``; the loop raises it, so training stops with that cause;
* with ``publish_adapters=True``, ``add_checkpoint`` also gets the new checkpoint's adapter files
  (``adapter=``:func:`~unstable.inference.adapters.read_adapter`, just written, so read from the page
  cache): the registry puts them into its adapter store, from which inference actors fetch the adapter
  without the run directory;
* ``on_checkpoint(version)`` (optional), after the checkpoint is registered;
* ``learner.apply_reset_rule()`` (optional), at the start of each turn, before the batch is taken: a
  league exploiter's learner resets its adapter there when its rule says so
  (:class:`~unstable.samplers.exploiters.ExploiterReset`);
* ``turn_lock.acquire(holder)`` / ``turn_lock.release()`` (optional), held from taking the batch to
  publishing its checkpoint (``set_learner_version``, ``add_checkpoint``): learners that share one
  device (several trainable models on one CPU or GPU) take turns instead of oversubscribing it,
  and in ``build(mode="sync")`` the collector takes turns with them (it holds the lock while its
  games run, see :class:`~unstable.utils.turn_lock.TurnLock`); :class:`SleepingEngines` wraps it to
  put the vLLM engines on the learner's GPU to sleep for the turn.

An exception anywhere (the learner, a hook, the buffer) propagates: the run stops with its cause
and the checkpoints already written stay as they are (nothing is retried).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

from unstable.inference.adapters import read_adapter
from unstable.learners.protocol import Learner, UpdateResult
from unstable.records import TrainBatch, checkpoint_uid
from unstable.utils.calls import call
from unstable.utils.turn_lock import TurnLock  # noqa: F401  (its home before; tests and users import it here)


class SleepingEngines:
    """The learner's turn on a GPU it shares with vLLM engines: they sleep while it holds the turn.

    ``acquire`` takes ``lock`` (a :class:`~unstable.utils.turn_lock.TurnLock` or its actor, when there is
    one), then asks each engine to ``sleep(level)`` (vLLM's sleep mode: the engine finishes the requests it
    is running, frees its KV cache and, at level 1, moves its weights to CPU memory; requests that arrive
    meanwhile wait); ``release`` wakes them (``wake_up``) and then releases ``lock``. The engines are
    inference actors (or local :class:`~unstable.inference.actor.InferenceActor` objects) with those
    methods.
    """

    def __init__(self, engines: list[Any], lock: Any = None, level: int = 1):
        if not engines:
            raise ValueError("SleepingEngines needs at least one engine to put to sleep")
        self.engines, self.lock, self.level = list(engines), lock, level

    def acquire(self, holder: str = "") -> None:
        """Take ``lock`` (if any) for ``holder``, then put every engine to sleep; on an error, wake them and release."""
        if self.lock is not None:
            call(self.lock, "acquire", holder)
        try:
            for engine in self.engines:
                _wait(call(engine, "sleep", self.level))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Wake every engine, then release ``lock`` (even if a wake-up failed)."""
        try:
            for engine in self.engines:
                _wait(call(engine, "wake_up"))
        finally:
            if self.lock is not None:
                call(self.lock, "release")


def _wait(result: Any) -> Any:
    """A local async method's coroutine, run to its end here (an actor's call was already waited for)."""
    if inspect.iscoroutine(result):
        return asyncio.run(result)
    return result


def run_training(
    learner: Learner,
    iterations: int,
    *,
    buffer: Any,
    registry: Any = None,
    tracker: Any = None,
    on_checkpoint: Callable[[int], Any] | None = None,
    turn_lock: Any = None,
    publish_adapters: bool = False,
) -> list[UpdateResult]:
    """Run ``iterations`` successful updates; skipped (non-finite) batches do not count.

    Waiting polls ``buffer.size()`` every ``config.poll_interval_s`` seconds (cheap next to an
    update) until it holds ``batch_size`` steps, or raises ``TimeoutError`` once the buffer has
    gained nothing for ``config.wait_timeout_s``. ``config.max_consecutive_skips`` non-finite updates in a row raise
    ``RuntimeError``: something upstream is producing NaNs and the run should stop with the cause.
    """
    if buffer is None:
        raise ValueError("train() needs a buffer; pass buffer=... to the learner, or call update(batch)")
    cfg = learner.config
    results: list[UpdateResult] = []
    consecutive_skips = 0
    _call_optional(buffer, "set_learner_version", learner.version)
    lineage = getattr(cfg, "lineage", None)
    while len(results) < iterations:
        _wait_for_batch(buffer, cfg, learner.version)
        if turn_lock is not None:
            call(turn_lock, "acquire", lineage or "")
        try:
            _call_optional(learner, "apply_reset_rule")  # a league exploiter may start again (before its update)
            result = _take_turn(learner, buffer, registry, lineage, publish_adapters)
        finally:
            if turn_lock is not None:
                call(turn_lock, "release")
        _call_optional(tracker, "log", {f"{lineage}/{k}": v for k, v in result.metrics.items()}
                       if lineage else result.metrics)
        unwritable = _call_optional(tracker, "write_error")  # its metrics no longer reach the disk
        if unwritable is not None:
            raise unwritable
        if result.skipped:
            consecutive_skips += 1
            if consecutive_skips >= cfg.max_consecutive_skips:
                raise RuntimeError(
                    f"{consecutive_skips} non-finite updates in a row at version {learner.version}; "
                    "check the rewards and log-probs reaching the learner"
                )
            continue
        consecutive_skips = 0
        results.append(result)
        if on_checkpoint is not None:  # e.g. snapshot the registry/scheduler state for resuming
            on_checkpoint(result.version)
    return results


def _take_turn(learner: Learner, buffer: Any, registry: Any, lineage: str | None,
               publish_adapters: bool = False) -> UpdateResult:
    """Take a batch, update, and publish the new version (to the buffer, then the registry): what the
    learner does while it holds the turn lock, so that in sync mode the games that start after it
    are played by the new version."""
    batch = call(buffer, "get_batch", learner.config.batch_size)
    if not isinstance(batch, TrainBatch):
        raise TypeError(f"buffer.get_batch() returned {type(batch).__name__}; it must return a "
                        "unstable.records.TrainBatch (TrainBatch.from_steps / from_episodes)")
    result = learner.update(batch)
    if result.skipped:
        return result
    _call_optional(buffer, "set_learner_version", result.version)
    published = {}
    if publish_adapters and registry is not None and result.adapter_path is not None:
        published["adapter"] = read_adapter(result.adapter_path)
    _call_optional(
        registry,
        "add_checkpoint",
        uid=checkpoint_uid(result.version, lineage),
        path=result.adapter_path,
        iteration=result.version,
        **({"lineage": lineage} if lineage else {}),
        **published,
    )
    return result


def _wait_for_batch(buffer: Any, cfg: Any, version: int) -> None:
    """Wait until the buffer holds a batch; the timeout counts from the last step that arrived, so
    only a buffer that stops growing (collection stuck or stopped) ends in ``TimeoutError``."""
    size = call(buffer, "size")
    last_growth = time.monotonic()
    while size < cfg.batch_size:
        if cfg.wait_timeout_s is not None and time.monotonic() - last_growth > cfg.wait_timeout_s:
            raise TimeoutError(
                f"the learner (version {version}) waited {cfg.wait_timeout_s:g} s for a batch of "
                f"{cfg.batch_size} steps and no step arrived; the buffer holds {size}. Check whether collection "
                "stopped (Run.wait() raises the collector's error), the failed games in logs/failed_games.jsonl, "
                "and that the inference actors are alive; if one game honestly takes longer, raise wait_timeout_s"
            )
        time.sleep(cfg.poll_interval_s)
        new_size = call(buffer, "size")
        if new_size > size:
            last_growth = time.monotonic()
        size = new_size


def _call_optional(obj: object, method: str, *args: object, **kwargs: object) -> Any:
    """Call ``obj.method(...)`` if ``obj`` is given and has it (the hooks are optional); its answer, or ``None``."""
    if obj is not None and getattr(obj, method, None) is not None:
        return call(obj, method, *args, **kwargs)
    return None
