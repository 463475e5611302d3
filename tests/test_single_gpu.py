"""Single-GPU mode without a GPU: ``vllm_config`` engine settings and their checks, vLLM's sleep/wake
around learner updates (a stand-in engine in the real :class:`VLLMBackend` engine thread), and the
GPUs the seed's hand-wired collector gives its inference actors (a function of the cluster's
resources). What needs a real GPU (vLLM's sleep freeing memory for the learner) is not run here.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from conftest import make_sample

from unstable.inference.base import GenerationRequest, SamplingParams
from unstable.inference.config import InferenceConfig
from unstable.inference.engine_settings import check_engine_settings
from unstable.learners.loop import SleepingEngines, TurnLock, run_training
from unstable.learners.protocol import UpdateResult
from unstable.records import Step, TrainBatch


# ---------------------------------------------------------------------------------- engine settings
def test_vllm_config_takes_engine_settings_and_hands_them_to_vllm():
    cfg = InferenceConfig.from_vllm_config(
        {"model_name": "m", "gpu_memory_utilization": 0.3, "enforce_eager": True, "enable_sleep_mode": True,
         "tensor_parallel_size": 1, "max_num_seqs": 16, "dtype": "bfloat16", "seed": 3, "max_lora_rank": 64,
         "lora_config": {"lora_rank": 8}}, backend="vllm")
    assert cfg.max_parallel_seq == 16 and cfg.sleep_mode
    kwargs = cfg.backend_arguments()
    assert kwargs["max_batch_size"] == 16 and kwargs["max_lora_rank"] == 64  # the explicit rank wins
    assert {k: kwargs[k] for k in ("gpu_memory_utilization", "enforce_eager", "enable_sleep_mode", "dtype", "seed")} \
        == {"gpu_memory_utilization": 0.3, "enforce_eager": True, "enable_sleep_mode": True, "dtype": "bfloat16",
            "seed": 3}


@pytest.mark.parametrize(("gpus", "expected"), [(0.5, 0.45), (0.25, 0.225), (1.0, None), (0.0, None)])
def test_a_shared_gpu_gets_a_memory_split_by_default(gpus, expected):
    cfg = InferenceConfig.from_vllm_config({"model_name": "m"}, backend="vllm", actor_num_gpus=gpus)
    assert cfg.backend_arguments().get("gpu_memory_utilization") == expected
    given = InferenceConfig.from_vllm_config({"model_name": "m", "gpu_memory_utilization": 0.7}, backend="vllm",
                                             actor_num_gpus=gpus)
    assert given.backend_arguments()["gpu_memory_utilization"] == 0.7  # the user's value is kept


def test_the_transformers_backend_takes_dtype_and_leaves_engine_settings_out():
    cfg = InferenceConfig.from_vllm_config({"model_name": "m", "dtype": "float32", "enforce_eager": True,
                                            "gpu_memory_utilization": 0.5})
    kwargs = cfg.backend_arguments()
    assert kwargs["dtype"] == "float32" and "enforce_eager" not in kwargs and "gpu_memory_utilization" not in kwargs
    assert "dtype" not in InferenceConfig.from_vllm_config({"model_name": "m", "dtype": "auto"}).backend_arguments()


@pytest.mark.parametrize(("settings", "match"), [
    ({"gpu_memory_utilization": 0}, r"vllm_config\['gpu_memory_utilization'\] must be a finite number in \(0, 1\]"),
    ({"gpu_memory_utilization": 1.1}, r"in \(0, 1\]"),
    ({"gpu_memory_utilization": "0.5"}, "gpu_memory_utilization"),
    ({"enforce_eager": 1}, r"enforce_eager'\] must be true or false"),
    ({"enable_sleep_mode": "yes"}, "enable_sleep_mode"),
    ({"tensor_parallel_size": 0}, r"tensor_parallel_size'\] must be an integer >= 1"),
    ({"max_num_seqs": 2.5}, "max_num_seqs"),
    ({"dtype": "fp8"}, r"dtype'\] must be one of"),
    ({"swap_space": -1}, "swap_space"),
    ({"seed": -2}, "seed"),
    ({"model": "other"}, r"vllm_config\['model'\] is set by unstable itself.*model_name"),
    ({"logprobs_mode": "raw_logprobs"}, "processed_logprobs"),
])
def test_engine_settings_are_checked(settings, match):
    with pytest.raises(ValueError, match=match):
        InferenceConfig.from_vllm_config({"model_name": "m", **settings})


def test_an_unknown_key_without_vllm_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown vllm_config keys \['gpu_memory_utilisation'\] \(did you mean "
                                         r"'gpu_memory_utilization'.*known: \[.*'enforce_eager'"):
        check_engine_settings({"gpu_memory_utilisation": 0.5}, fields=None)


def test_an_unknown_key_with_vllm_is_checked_against_its_engine_args():
    fields = frozenset({"gpu_memory_utilization", "kv_cache_memory_bytes", "enforce_eager", "enable_sleep_mode"})
    check_engine_settings({"kv_cache_memory_bytes": 10**9}, fields=fields)  # a field of EngineArgs: passed on
    with pytest.raises(ValueError, match=r"'kv_cache_memory_bytes' for 'kv_cache_memory_byte'.*EngineArgs"):
        check_engine_settings({"kv_cache_memory_byte": 10**9}, fields=fields)
    with pytest.raises(ValueError, match=r"\['swap_space'\] are not settings of the installed vLLM"):
        check_engine_settings({"swap_space": 4}, fields=fields)  # ours, but gone from this vLLM


def test_build_checks_engine_settings_before_ray(tiny_model_dir, tmp_path, monkeypatch):
    from conftest import small_run_kwargs

    import unstable
    import unstable.run.wiring

    monkeypatch.setattr(unstable.run.wiring, "start_actors", lambda *a, **k: pytest.fail("actors started"))
    with pytest.raises(ValueError, match=r"vllm_config\['gpu_memory_utilization'\] must be"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, vllm_config={"gpu_memory_utilization": 2}))
    with pytest.raises(ValueError, match=r"unknown vllm_config keys \['enforce_eagre'\] \(did you mean 'enforce_eager"):
        unstable.build(**small_run_kwargs(tiny_model_dir, tmp_path, vllm_config={"enforce_eagre": True}))
    cfg = unstable.run.config.BuildConfig(**small_run_kwargs(tiny_model_dir, tmp_path, vllm_config={
        "gpu_memory_utilization": 0.5, "enable_sleep_mode": True}))
    assert cfg.models[0].inference["enable_sleep_mode"] is True


# ---------------------------------------------------------------------------------- sleep and wake
class FakeEngine:
    """Stands in for vLLM's LLMEngine: each request takes three steps of one token; it records every
    call, and any step, request or sleep made in a state where vLLM would not allow it."""

    def __init__(self):
        self.model_config = SimpleNamespace(max_model_len=64)
        self.running: dict[str, int] = {}
        self.asleep = False
        self.events: list[str] = []
        self.violations: list[str] = []

    def add_request(self, request_id, prompt, sampling, lora_request=None):
        if self.asleep:
            self.violations.append(f"request {request_id} added while asleep")
        self.running[request_id] = 3

    def step(self):
        if self.asleep:
            self.violations.append("generated while asleep")
        time.sleep(0.005)
        outputs = []
        for rid in list(self.running):
            self.running[rid] -= 1
            done = self.running[rid] == 0
            if done:
                del self.running[rid]
            sample = SimpleNamespace(token_ids=[7], logprobs=[{7: SimpleNamespace(logprob=-0.5)}],
                                     finish_reason="length" if done else None)
            outputs.append(SimpleNamespace(request_id=rid, finished=done, outputs=[sample]))
        self.events.append("step")
        return outputs

    def reset_prefix_cache(self):
        self.events.append("reset_prefix_cache")

    def sleep(self, level=1):
        if self.running:
            self.violations.append(f"slept with {len(self.running)} requests running")
        self.asleep = True
        self.events.append(f"sleep({level})")

    def wake_up(self, tags=None):
        self.asleep = False
        self.events.append("wake_up")


class FakeTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [1, 2, 3]}

    def decode(self, ids, skip_special_tokens=True):
        return "x" * len(ids)


def fake_vllm_backend(sleep_mode: bool = True):
    """The real VLLMBackend (its engine thread, queue and sleep logic) serving a FakeEngine."""
    from unstable.inference.vllm_backend import VLLMBackend, VLLMBackendConfig

    backend = object.__new__(VLLMBackend)
    backend.config = VLLMBackendConfig(model_name="fake", engine_kwargs={"enable_sleep_mode": sleep_mode})
    engine = FakeEngine()
    backend._attach(engine, FakeTokenizer(), {0}, lambda **kwargs: kwargs, None)
    return backend, engine


REQUEST = GenerationRequest("prompt", None, SamplingParams(temperature=1.0, max_new_tokens=8), policy_version=0)


def test_sleep_finishes_running_requests_holds_new_ones_and_wake_serves_them():
    backend, engine = fake_vllm_backend()
    try:
        running = [backend.submit(REQUEST) for _ in range(4)]
        backend.sleep(1).result(timeout=10)
        assert all(f.done() for f in running)  # drained before it slept
        assert engine.asleep and engine.events[-2:] == ["reset_prefix_cache", "sleep(1)"]
        waiting = [backend.submit(REQUEST) for _ in range(3)]
        time.sleep(0.3)
        assert not any(f.done() for f in waiting) and engine.events[-1] == "sleep(1)"  # nothing generated
        assert backend.stats()["asleep"] == 1
        backend.wake_up().result(timeout=10)
        results = [f.result(timeout=10) for f in waiting]
        assert [r.sample.completion_ids for r in results] == [(7, 7, 7)] * 3
        assert engine.events.index("wake_up") < len(engine.events) - 1 and engine.events[-1] == "step"
        stats = backend.stats()
        assert stats["sleeps"] == 1 and stats["asleep"] == 0 and stats["asleep_seconds"] >= 0.3
        assert engine.violations == []
    finally:
        backend.close()


def test_a_backend_without_sleep_mode_refuses_to_sleep():
    backend, _ = fake_vllm_backend(sleep_mode=False)
    try:
        with pytest.raises(ValueError, match="enable_sleep_mode=True"):
            backend.sleep()
    finally:
        backend.close()


def _step(version: int) -> Step:
    return Step(env_id="e", game_id=version, player_id=0, turn_index=0, sample=make_sample(policy_version=version),
                reward=1.0, final_reward=1.0, policy_version=version, format_ok=True, invalid=False, is_last=True)


class ListBuffer:
    def __init__(self, batches: int, size: int):
        self.steps = [_step(0) for _ in range(batches * size)]

    def size(self):
        return len(self.steps)

    def get_batch(self, n):
        batch, self.steps = self.steps[:n], self.steps[n:]
        return TrainBatch.from_steps(batch)


class LoggingLearner:
    def __init__(self, log: list[str], batch_size: int = 2):
        self.config = SimpleNamespace(batch_size=batch_size, poll_interval_s=0.01, wait_timeout_s=5,
                                      max_consecutive_skips=3, lineage=None)
        self.version, self.log = 0, log

    def update(self, batch):
        self.log.append(f"update {self.version}")
        self.version += 1
        return UpdateResult(self.version, None, {})


class LoggingEngine:
    """An inference actor as the learner sees it (a local InferenceActor's methods are coroutines)."""

    def __init__(self, name: str, log: list[str], fail: bool = False):
        self.name, self.log, self.fail = name, log, fail

    async def sleep(self, level):
        if self.fail:
            raise RuntimeError("cannot sleep")
        self.log.append(f"sleep {self.name} {level}")

    async def wake_up(self):
        self.log.append(f"wake {self.name}")


class LoggingLock(TurnLock):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def acquire(self, holder=""):
        super().acquire(holder)
        self.log.append("acquire")

    def release(self):
        self.log.append("release")
        super().release()


def test_the_engines_sleep_around_every_update_in_order():
    log: list[str] = []
    engines = [LoggingEngine("a", log), LoggingEngine("b", log)]
    run_training(LoggingLearner(log), 2, buffer=ListBuffer(2, 2), turn_lock=SleepingEngines(engines, LoggingLock(log)))
    turn = ["acquire", "sleep a 1", "sleep b 1", "update {}", "wake a", "wake b", "release"]
    assert log == [e.format(v) for v in (0, 1) for e in turn]


def test_an_engine_that_cannot_sleep_stops_training_with_the_others_awake_and_the_lock_free():
    log: list[str] = []
    lock = LoggingLock(log)
    sleeping = SleepingEngines([LoggingEngine("a", log), LoggingEngine("b", log, fail=True)], lock)
    with pytest.raises(RuntimeError, match="cannot sleep"):
        run_training(LoggingLearner(log), 1, buffer=ListBuffer(1, 2), turn_lock=sleeping)
    assert log == ["acquire", "sleep a 1", "wake a", "wake b", "release"] and "update 0" not in log
    assert lock.try_acquire()


def test_the_inference_actor_sleeps_its_vllm_backend_and_the_learner_waits_for_it():
    """SleepingEngines -> InferenceActor.sleep -> VLLMBackend.sleep: the update runs only once the
    engine sleeps, and requests sent during the update are served after it."""
    from unstable.inference.actor import InferenceActor

    backend, engine = fake_vllm_backend()
    actor = object.__new__(InferenceActor)
    actor.name, actor.backend = "inference-0", backend
    log: list[str] = []
    in_flight = [backend.submit(REQUEST) for _ in range(3)]

    class Learner(LoggingLearner):
        def update(self, batch):
            assert engine.asleep and all(f.done() for f in in_flight)
            self.queued = backend.submit(REQUEST)  # a game's next turn, sent during the update
            time.sleep(0.1)
            assert not self.queued.done()
            return super().update(batch)

    learner = Learner(log)
    try:
        run_training(learner, 1, buffer=ListBuffer(1, 2), turn_lock=SleepingEngines([actor]))
        assert not engine.asleep and learner.queued.result(timeout=10).sample.completion_ids == (7, 7, 7)
        assert engine.violations == []
    finally:
        backend.close()


# ---------------------------------------------------------------------------------- seed collector GPUs
@pytest.mark.parametrize(("cluster", "num_actors", "expected"), [
    ({"CPU": 2}, None, (1, 0.0, 1.0)),
    ({"CPU": 2}, 2, (2, 0.0, 1.0)),
    ({"CPU": 16, "GPU": 1}, None, (1, 0.5, 0.0)),  # one GPU: half for inference, half for the learner
    ({"CPU": 16, "GPU": 2}, None, (1, 1.0, 0.0)),
    ({"CPU": 16, "GPU": 3}, 2, (2, 1.0, 0.0)),  # the 0.1 page's layout: two actors, a learner GPU
    ({"CPU": 16, "GPU": 2}, 2, (2, 0.5, 0.0)),  # more actors than inference GPUs: they share
    ({"CPU": 64, "GPU": 8}, None, (7, 1.0, 0.0)),
])
def test_hand_wired_inference_actors_get_the_gpus_build_would_give_them(cluster, num_actors, expected):
    from unstable.run.wiring import gpu_layout, inference_resources

    got = inference_resources(cluster, num_actors)
    assert (got["num_actors"], got["actor_num_gpus"], got["actor_num_cpus"]) == expected
    learner_gpus, per_actor, count = gpu_layout(int(cluster.get("GPU", 0)))
    if num_actors is None:  # the same layout as build()'s
        assert (got["num_actors"], got["actor_num_gpus"]) == (count, per_actor)
    assert got["num_actors"] * got["actor_num_gpus"] + learner_gpus <= cluster.get("GPU", 0) or not learner_gpus


def test_the_seed_collector_starts_its_actors_with_that_layout(monkeypatch, tiny_model_dir):
    """``unstable.Collector(vllm_config=...)`` (the 0.2 form) asks the cluster, and starts its
    inference actors with its GPUs (they started with num_gpus=0 before)."""
    import ray

    import unstable
    import unstable.run.actors as actors

    started = []
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    monkeypatch.setattr(actors, "start_inference_backends", lambda cfg: started.append(cfg) or [object()])
    unstable.Collector(vllm_config={"model_name": tiny_model_dir}, buffer=object(), game_scheduler=object())
    (cfg,) = started
    assert (cfg.num_actors, cfg.actor_num_gpus, cfg.actor_num_cpus) == (1, 0.5, 0.0)


def test_turn_lock_try_acquire_never_waits():
    lock = TurnLock()
    assert lock.try_acquire("collector")
    got = []
    thread = threading.Thread(target=lambda: got.append(lock.try_acquire("other")))
    thread.start()
    thread.join(timeout=5)
    assert got == [False]
    lock.release()
    assert lock.try_acquire("other") and lock.stats() == {"collector": 1, "other": 1}
