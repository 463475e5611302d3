"""UnstableBaselines 0.1 names, as thin aliases of today's components (the one place they live).

The 0.1 package page's training script runs unchanged through these:

=====================================================================  =====================================
0.1                                                                    today
=====================================================================  =====================================
``ModelPool(sample_mode="mirror", max_active_lora=3, tracker=t)``      a ``ModelRegistry`` whose games are
                                                                       scheduled by a model sampler
``pool.add_checkpoint(path=None, iteration=-1)``                       ``add_checkpoint(uid="base",
                                                                       path=None, iteration=0)``
``Collector(num_actors=2, step_buffer=b, model_pool=p, ...,``          ``Collector(vllm_config, tracker,``
``training_envs=[(env_id, n, template)], evaluation_envs=[...],``      ``buffer, game_scheduler)`` with a
``evaluation_opponent=name)``                                          ``GameScheduler`` built from them
``collector.collect(num_workers=384, num_eval_workers=16)``            ``collect(num_train_workers, ...)``
``StandardLearner(..., algorithm=unstable.algorithms.Reinforce())``    a ``REINFORCELearner(...)``
``learner.train(200)``                                                 ``train(200)``, then ``buffer.stop()``
=====================================================================  =====================================

What the 0.1 names meant, and how it maps:

* ``num_actors`` was the number of vLLM actors, one GPU each (the page's example: two actors and a
  one-GPU learner on three GPUs). It is the number of inference actors here, with one GPU each when
  the Ray cluster has GPUs, else one CPU each.
* ``sample_mode="mirror"``: every seat of a train game is the current checkpoint, and every seat is
  collected (0.2's mirror self-play; 0.1 collected one seat per game). ``"fixed"``: one seat is the
  checkpoint, the others are drawn uniformly from the fixed models (``pool.add_fixed(name)``).
  ``max_active_lora`` bounded the checkpoints 0.1's other modes sampled from; these two never used it.
* Evaluation games run all along, ``num_eval_workers`` in flight (0.1 stopped after 32 per env and
  checkpoint). ``evaluation_opponent`` defaults to ``"random"`` (the scripted baseline), as ``EvalEnvSpec`` does;
  0.1's default, Gemini over OpenRouter, needs a key.
* The learner writes its checkpoints to the tracker's run directory and keeps them all (as
  ``build()`` does: games in flight may still use an older one). When ``train(n)`` returns (or
  fails) it stops the buffer, which stops collection: "the collector will keep collecting episodes
  until the Learner tells it to stop".

What cannot mean the same thing here raises a ``ValueError`` saying what to use instead, and it does
so in the caller: ``Cls.remote(...)`` and ``Cls.options(...).remote(...)`` check the arguments before
the actor starts (an actor whose constructor fails only tells calls whose result is awaited, and the
0.1 script never awaits ``collect``).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from ray.actor import ActorHandle

from unstable.algorithms import Reinforce
from unstable.collection.scheduler import GameScheduler
from unstable.games.specs import DEFAULT_EVAL_OPPONENT, EvalEnvSpec, TrainEnvSpec
from unstable.inference.config import InferenceConfig, choose_backend
from unstable.registry.model_registry import fixed_policy_ref
from unstable.run.actors import Collector as _Collector
from unstable.run.actors import ModelRegistry, seed_inference_resources
from unstable.run.remote import RemoteCapable, actor_class
from unstable.samplers.env_samplers import UniformRandomEnvSampler
from unstable.samplers.model_samplers import BaseModelSampler, FixedOpponentModelSampler
from unstable.utils.calls import call
from unstable.utils.checks import check_int

__all__ = ["Collector", "ModelPool", "Reinforce", "StandardLearner"]


def _arguments(cls: type, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``cls(*args, **kwargs)``'s arguments by name (a TypeError for ones it does not take)."""
    bound = inspect.signature(cls).bind(*args, **kwargs)
    flat = dict(bound.arguments)
    for name, param in inspect.signature(cls).parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            flat.update(flat.pop(name, {}))
    return flat


class _ChecksArguments(RemoteCapable):
    """``Cls.remote(...)`` / ``Cls.options(...).remote(...)`` run ``Cls._check_arguments`` here first."""

    def remote(cls, *args: Any, **kwargs: Any) -> Any:
        cls._check_arguments(_arguments(cls, args, kwargs))
        return super().remote(*args, **kwargs)

    def options(cls, **options: Any) -> Any:
        return _CheckedOptions(cls, options)


class _CheckedOptions:
    def __init__(self, cls: type, options: dict[str, Any]):
        self._cls, self._options = cls, options

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        self._cls._check_arguments(_arguments(self._cls, args, kwargs))
        return RemoteCapable.options(self._cls, **self._options).remote(*args, **kwargs)


# ----------------------------------------------------------------------------------- algorithm
def _check_algorithm(algorithm: Any) -> None:
    if isinstance(algorithm, Reinforce) or algorithm is Reinforce:
        return
    raise ValueError(f"StandardLearner trains REINFORCE only (algorithm=unstable.algorithms.Reinforce()), got "
                     f"algorithm={algorithm!r}. For A2C use unstable.A2CLearner(...) or unstable.build("
                     "algorithm='a2c'); for a loss of your own subclass unstable.learners.BaseLearner")


# ----------------------------------------------------------------------------------- model pool
_SAMPLERS = {"mirror": BaseModelSampler, "fixed": FixedOpponentModelSampler}
_NOT_MAPPED = {
    "lagged": "0.1 drew uniformly over the last max_active_lora checkpoints including the current one; use "
              "unstable.samplers.model_samplers.LaggedModelSampler(model_registry=..., window=N) with a "
              "GameScheduler, or unstable.build(opponent_sampling_strategy='lagged', opponent_window=N)",
    "match-quality": "today's sampler weighs opponents by exp(quality / temperature), not by quality; use "
                     "unstable.samplers.model_samplers.MatchQualityModelSampler with a GameScheduler, or "
                     "unstable.build(opponent_sampling_strategy='match-quality')",
}


def _check_sample_mode(sample_mode: Any) -> None:
    if sample_mode in _SAMPLERS:
        return
    hint = _NOT_MAPPED.get(sample_mode, "there is no sampler for it here; subclass "
                                        "unstable.samplers.model_samplers.BaseModelSampler (see its docstring)")
    raise ValueError(f"ModelPool(sample_mode={sample_mode!r}) is not available: {hint}. "
                     f"ModelPool maps {sorted(_SAMPLERS)}")


def _model_sampler(sample_mode: str, model_registry: Any) -> BaseModelSampler:
    """The model sampler that plays ``sample_mode`` on ``model_registry`` (an object or actor handle)."""
    _check_sample_mode(sample_mode)
    return _SAMPLERS[sample_mode](model_registry=model_registry)


class ModelPool(ModelRegistry, metaclass=_ChecksArguments):
    """0.1's ``ModelPool``: a :class:`~unstable.registry.ModelRegistry` plus the ``sample_mode`` the
    collector schedules games with. ``lag_range`` belonged to 0.1's lagged mode and is not used."""

    def __init__(self, sample_mode: str, max_active_lora: int, tracker: Any = None,
                 lag_range: tuple[int, int] | None = None, beta: float = 4.0):
        self._check_arguments({"sample_mode": sample_mode, "max_active_lora": max_active_lora})
        super().__init__(tracker=tracker, beta=beta)
        self.sample_mode, self.max_active_lora, self.lag_range = sample_mode, max_active_lora, lag_range
        self.set_sampler(_model_sampler(sample_mode, self))

    @staticmethod
    def _check_arguments(arguments: dict[str, Any]) -> None:
        _check_sample_mode(arguments.get("sample_mode"))
        check_int("max_active_lora", arguments.get("max_active_lora"), 1)

    def get_sample_mode(self) -> str:
        """The ``sample_mode`` this pool was built with (``"mirror"`` or ``"fixed"``)."""
        return self.sample_mode

    def add_checkpoint(self, path: str | None = None, iteration: int = -1, uid: str | None = None,
                       inherit: bool = True) -> None:
        """0.1: ``add_checkpoint(path, iteration)`` registers ``ckpt-{iteration}``; ``path=None`` with
        iteration -1 (or 0) is the base model, registered as ``"base"`` at iteration 0 as ``build()``
        does. The learner calls it the 0.2 way, with ``uid=``."""
        if uid is None:
            uid = "base" if path is None and iteration <= 0 else f"ckpt-{iteration}"
            iteration = max(iteration, 0)
        super().add_checkpoint(uid=uid, path=path, iteration=iteration, inherit=inherit)


# ----------------------------------------------------------------------------------- learner
class StandardLearner(metaclass=_ChecksArguments):
    """0.1's ``StandardLearner``: holds a :class:`~unstable.learners.REINFORCELearner` (``self.learner``)
    built from ``step_buffer``, ``model_pool`` and ``tracker``; the other keywords (``batch_size``,
    ``lora_cfg``, ``max_train_len``, ``max_generation_len``, ...) are that learner's own.

    A wrapper, not a subclass, so that importing the 0.1 names (and ``unstable.Collector``, which
    lives here) does not load torch; the learner's modules are imported when one is built."""

    def __init__(self, model_name: str, step_buffer: Any = None, model_pool: Any = None, tracker: Any = None,
                 algorithm: Any = None, **kwargs: Any):
        self._check_arguments({"algorithm": algorithm})
        from unstable.learners.reinforce import REINFORCELearner

        if kwargs.get("output_dir") is None:
            kwargs["output_dir"] = (call(tracker, "get_checkpoints_dir")
                                    if getattr(tracker, "get_checkpoints_dir", None) is not None else "checkpoints")
        kwargs.setdefault("keep_last", None)
        self.learner = REINFORCELearner(model_name, buffer=step_buffer, tracker=tracker, model_registry=model_pool,
                                        **kwargs)

    @staticmethod
    def _check_arguments(arguments: dict[str, Any]) -> None:
        _check_algorithm(arguments.get("algorithm"))

    def train(self, iterations: int) -> list:
        """Train ``iterations`` updates, then stop the buffer (and so the collection)."""
        try:
            return self.learner.train(iterations)
        finally:
            if self.learner.buffer is not None:
                call(self.learner.buffer, "stop")


# ----------------------------------------------------------------------------------- collector
_LEGACY_COLLECTOR = ("num_actors", "step_buffer", "model_pool", "training_envs", "evaluation_envs",
                     "evaluation_opponent", "action_extraction")


def _check_opponent(name: Any) -> str:
    """``build()``'s rule: scripted, a readable adapter directory, or an API model with a key set."""
    from unstable.local_models.resolve import looks_like_path
    from unstable.models.checks import check_adapter
    from unstable.policies.api import DEFAULT_API_KEY_ENV
    from unstable.policies.scripted import SCRIPTED_POLICIES

    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"evaluation_opponent must be an opponent name, got {name!r}")
    if name in SCRIPTED_POLICIES:
        return name
    if looks_like_path(name):
        check_adapter(os.path.expanduser(name), "evaluation_opponent")
        return os.path.expanduser(name)
    if not os.environ.get(DEFAULT_API_KEY_ENV):
        raise ValueError(f"evaluation_opponent={name!r} is played over the API and needs a key in the environment "
                         f"variable {DEFAULT_API_KEY_ENV}; set it, or use a scripted opponent such as "
                         f"evaluation_opponent='random' (scripted: {list(SCRIPTED_POLICIES)})")
    return name


def _env_tuples(name: str, value: Any) -> list[tuple[str, int, str]]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{name} must be a list of (env_id, num_players, prompt_template) tuples, got {value!r}")
    for i, item in enumerate(value):
        if not (isinstance(item, list | tuple) and len(item) == 3):
            raise ValueError(f"{name}[{i}] must be an (env_id, num_players, prompt_template) tuple, got {item!r}")
    return [tuple(item) for item in value]


def _legacy_specs(arguments: dict[str, Any], sample_mode: str = "mirror"):
    """The 0.1 collector's envs as (train specs, eval specs); raises on what cannot be played."""
    extraction = arguments.get("action_extraction") or "default"
    train_envs = _env_tuples("training_envs", arguments["training_envs"])
    eval_envs = _env_tuples("evaluation_envs", arguments.get("evaluation_envs") or [])
    opponent = _check_opponent(arguments.get("evaluation_opponent") or DEFAULT_EVAL_OPPONENT) if eval_envs else None
    train, evals = [], []
    for i, (env_id, players, template) in enumerate(train_envs):
        seats = players if sample_mode == "mirror" else 1  # mirror: every seat is the learner's
        train.append(_spec(f"training_envs[{i}]", TrainEnvSpec, env_id, players, seats, template,
                           action_extraction_fn=extraction))
    for i, (env_id, players, template) in enumerate(eval_envs):
        evals.append(_spec(f"evaluation_envs[{i}]", EvalEnvSpec, env_id, players, template,
                           action_extraction_fn=extraction, fixed_opponent=opponent))
    return train, evals


def _spec(where: str, cls: type, *args: Any, **kwargs: Any) -> Any:
    try:
        return cls(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _check_collector_arguments(arguments: dict[str, Any]) -> None:
    legacy = sorted(k for k in _LEGACY_COLLECTOR if arguments.get(k) is not None)
    if not legacy:
        return
    new = sorted(k for k in ("buffer", "game_scheduler") if arguments.get(k) is not None)
    if new:
        raise TypeError(f"Collector got the 0.1 keywords {legacy} and the 0.2 keywords {new}: use one form, "
                        "Collector(num_actors, step_buffer, model_pool, vllm_config, training_envs, ...) or "
                        "Collector(vllm_config, tracker, buffer, game_scheduler)")
    missing = [k for k in ("step_buffer", "model_pool", "training_envs") if arguments.get(k) is None]
    if arguments.get("vllm_config") is None and arguments.get("inference") is None and not arguments.get("backends"):
        missing.append("vllm_config")
    if missing:
        raise TypeError(f"Collector with the 0.1 keywords also needs {missing}")
    check_int("num_actors", arguments.get("num_actors", 1), 1, allow_none=True)
    if arguments.get("vllm_config") is not None:
        InferenceConfig.from_vllm_config(arguments["vllm_config"])  # unknown keys, no model_name
    _legacy_specs(arguments)


def _inference_config(vllm_config: dict, num_actors: int) -> InferenceConfig:
    """0.1: ``num_actors`` vLLM actors of one GPU each (the learner on another); laid out as build()
    does (:func:`~unstable.run.wiring.inference_resources`): the GPUs left to inference split over them,
    at most one each, and one CPU each where Ray has no GPU."""
    return InferenceConfig.from_vllm_config(vllm_config, backend=choose_backend("auto"),
                                            **seed_inference_resources(num_actors))


class Collector(_Collector, metaclass=_ChecksArguments):
    """``unstable.Collector``: today's :class:`~unstable.collection.collector.Collector`, which also
    takes 0.1's keywords (see the module docstring). With none of them, every argument passes through."""

    def __init__(self, vllm_config: dict | None = None, tracker: Any = None, buffer: Any = None,
                 game_scheduler: Any = None, *, num_actors: int | None = None, step_buffer: Any = None,
                 model_pool: Any = None, training_envs: list | None = None, evaluation_envs: list | None = None,
                 evaluation_opponent: str | None = None, action_extraction: str | None = None, **kwargs: Any):
        arguments = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "__class__")}
        self._check_arguments({**arguments, **kwargs})
        if step_buffer is None:  # the 0.2 form
            super().__init__(vllm_config, tracker, buffer, game_scheduler, **kwargs)
            return
        mode = call(model_pool, "get_sample_mode")
        train, evals = _legacy_specs(arguments, mode)
        known = set(call(model_pool, "fixed_uids"))
        for name in sorted({spec.fixed_opponent for spec in evals}):
            if fixed_policy_ref(name).uid not in known:
                call(model_pool, "add_fixed", name)
        scheduler_args = {"model_sampler": _model_sampler(mode, model_pool),
                          "env_sampler": UniformRandomEnvSampler(train, evals)}
        # as its own actor when the pool is one, so its registry calls never block this actor's event loop
        scheduler = (actor_class(GameScheduler).options(num_cpus=0).remote(**scheduler_args)
                     if isinstance(model_pool, ActorHandle) else GameScheduler(**scheduler_args))
        if vllm_config is not None and "inference" not in kwargs and "backends" not in kwargs:
            kwargs["inference"] = _inference_config(vllm_config, num_actors or 1)
        super().__init__(None, tracker, step_buffer, scheduler, **kwargs)

    @staticmethod
    def _check_arguments(arguments: dict[str, Any]) -> None:
        _check_collector_arguments(arguments)

    async def collect(self, num_train_workers: int | None = None, num_eval_workers: int | None = 0, *,
                      num_workers: int | None = None) -> dict[str, int]:
        """0.2's ``collect(num_train_workers, num_eval_workers)``; 0.1 called the first ``num_workers``."""
        if (num_train_workers is None) == (num_workers is None):
            raise TypeError("collect() takes the number of train games in flight once: num_train_workers "
                            "(or 0.1's num_workers)")
        return await super().collect(num_train_workers if num_workers is None else num_workers, num_eval_workers)
