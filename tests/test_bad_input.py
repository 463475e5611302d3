"""Bad input: every build() argument, env-spec field, YAML config key and start() argument that is
wrong raises a ``ValueError`` naming the setting and what is allowed, before any Ray actor starts.

One table, :data:`CASES`: ``(kind, description, value, expected message regex)``. Kinds:

* ``build``: ``value`` overrides a valid set of build() arguments;
* ``train_env`` / ``eval_env``: ``value`` overrides one field of a valid spec mapping, passed to build();
* ``yaml``: ``value`` is ``(config text, --set overrides)``; the config is loaded and built;
* ``start``: ``value`` is start()'s keyword arguments;
* ``quickstart``: ``value`` is the text of a ``unstable quickstart --config`` file, loaded;
* ``cli``: ``value`` is ``(argv, files)``: the ``unstable`` command ``argv`` on a run directory ``$RUN`` (a
  valid one, see :data:`RUN_FILES`, with ``files`` written over it), as ``main()`` runs it.

``$MODEL`` stands for the tiny model directory and ``$TMP`` for a folder of broken model and
adapter directories (see :func:`bad_paths`). The older, shorter tables in ``test_config.py`` and
``test_orchestration.py`` stay; the cases here do not repeat them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

import unstable
from unstable.run.build import Run
from unstable.run.config_file import ConfigError, load_config

TTT = {"env_id": "TicTacToe-v0-train", "num_players": 2, "prompt_template": "qwen3-zs"}
TRAIN = {**TTT, "num_actors": 2}
EVAL = {**TTT, "fixed_opponent": "random"}
VALID = dict(
    model_name="$MODEL", train_envs=[TRAIN], eval_envs=[EVAL], opponent_sampling_strategy="mirror",
    batch_size=16, mini_batch_size=8, learning_rate=1e-3, max_generation_len=16, wandb_project=None,
    runs_dir="$TMP/runs", run_name="t", inference_backend="transformers",
)
VS_FIXED = {"opponent_sampling_strategy": "fixed", "train_envs": [{**TRAIN, "num_actors": 1}]}  # a seat for them
BASE_YAML = (
    "model_name: $MODEL\n"
    "train_envs:\n  - {env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2, prompt_template: qwen3-zs}\n"
    "runs_dir: $TMP/runs\n"
)
KEY = "sk-or-v1-0123456789abcdef0123456789"  # the shape of an OpenRouter key; never a real one
NOT_ROOT = pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
NO_OPENSPIEL = pytest.mark.skipif(importlib.util.find_spec("pyspiel") is None,
                                  reason="open_spiel is not installed (pip install unstable-baselines[openspiel])")
NO_VLLM = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")

BUILD_CASES = [
    # model_name
    ("model_name not a string", {"model_name": 123}, "model_name must be"),
    ("model_name blank", {"model_name": "  "}, "model_name must be"),
    ("model_name a list", {"model_name": ["tiny"]}, "model_name must be"),
    ("model_name relative path missing", {"model_name": "./no/such/model"}, "model_name: model path .* does not exist"),
    ("model_name dir without config.json", {"model_name": "$TMP/empty"}, "has no config.json"),
    ("model_name corrupt config.json", {"model_name": "$TMP/corrupt-model"}, "config.json cannot be read as JSON"),
    ("model_name is a LoRA adapter", {"model_name": "$TMP/adapter"}, "it is a LoRA adapter"),
    ("model_name is a file", {"model_name": "$TMP/a-file"}, "is a file"),
    ("model_name unknown tiny size", {"model_name": "tiny:7m"}, "unknown tiny model size '7m'"),
    # env specs as a whole
    ("train_envs missing (None)", {"train_envs": None}, "train_envs must be a non-empty list"),
    ("train_envs a string", {"train_envs": "TicTacToe-v0-train"}, "train_envs must be a non-empty list"),
    ("train_envs an EvalEnvSpec", {"train_envs": [EVAL]}, r"train_envs\[0\]: .*fixed_opponent"),
    ("eval_envs a string", {"eval_envs": "TicTacToe-v0-train"}, "eval_envs must be a non-empty list"),
    ("eval_envs holds a TrainEnvSpec mapping", {"eval_envs": [TRAIN]}, r"eval_envs\[0\]: .*num_actors"),
    ("eval_envs holds a number", {"eval_envs": [3]}, r"eval_envs\[0\] must be a EvalEnvSpec"),
    # strategies and algorithm
    ("algorithm upper case", {"algorithm": "REINFORCE"}, "algorithm must be one of"),
    ("algorithm None", {"algorithm": None}, "algorithm must be one of"),
    ("algorithm a list", {"algorithm": ["reinforce"]}, "algorithm must be one of"),
    ("env_sampling_strategy None", {"env_sampling_strategy": None}, "env_sampling_strategy must be one of"),
    ("opponent_sampling_strategy typo", {"opponent_sampling_strategy": "match_quality"},
     "opponent_sampling_strategy must be one of"),
    # fixed opponents
    ("fixed_opponents a number", {"fixed_opponents": 5}, "fixed_opponents must be a list"),
    ("fixed_opponents a dict", {"fixed_opponents": {"random": 1}}, "fixed_opponents must be a list"),
    ("fixed_opponents blank name", {"fixed_opponents": ["random", " "]}, "fixed_opponents must be a list"),
    ("fixed strategy without opponents", {"opponent_sampling_strategy": "fixed", "fixed_opponents": []},
     "needs at least one name in fixed_opponents"),
    ("fixed opponent dir without adapter_config.json", {**VS_FIXED, "fixed_opponents": ["$TMP/no-adapter-config"]},
     r"fixed_opponents\[0\] .* \(no adapter_config.json\)"),
    ("fixed opponent corrupt adapter_config.json", {**VS_FIXED, "fixed_opponents": ["$TMP/corrupt-adapter"]},
     "adapter_config.json cannot be read as JSON"),
    ("fixed opponent adapter without weights", {**VS_FIXED, "fixed_opponents": ["$TMP/adapter-no-weights"]},
     "has no adapter weights"),
    ("fixed opponent adapter_config.json a list", {**VS_FIXED, "fixed_opponents": ["$TMP/list-adapter"]},
     "must hold a JSON object"),
    ("fixed opponent path missing", {**VS_FIXED, "fixed_opponents": ["./no/such/ckpt-3"]},
     r"fixed_opponents\[0\] .* does not exist"),
    ("fixed API opponent without key", {**VS_FIXED, "fixed_opponents": ["openai/gpt-4o"]},
     "needs a key in the environment variable OPENROUTER_API_KEY"),
    ("fixed scripted opponent on an unsupported game",
     {"opponent_sampling_strategy": "fixed", "fixed_opponents": ["random"],
      "train_envs": [{"env_id": "Snake-v0", "num_players": 2, "num_actors": 1, "prompt_template": "qwen3-zs"}]},
     "no scripted baseline for 'Snake-v0'"),
    ("fixed scripted opponent that a train game lacks",
     {"opponent_sampling_strategy": "fixed", "fixed_opponents": ["random", "optimal"],
      "train_envs": [TRAIN, {**TRAIN, "env_id": "KuhnPoker-v0-train", "num_actors": 1}]},
     r"fixed_opponents\[1\] = 'optimal' is drawn for every train env .* 'KuhnPoker' has the scripted baselines "
     "random, nash"),
    # opponents that no seat is left for (VALID's one train env seats the learner twice)
    ("fixed strategy with every seat the learner's", {"opponent_sampling_strategy": "fixed"},
     r"opponent_sampling_strategy='fixed' draws opponents, but every seat of every train game is played by a "
     r"trained model .* leave the opponent a seat \(num_actors=1"),
    ("lagged strategy with every seat the learner's", {"opponent_sampling_strategy": "lagged"},
     "opponent_sampling_strategy='lagged' draws opponents, but every seat"),
    ("fixed_opponents with every seat the learner's", {"fixed_opponents": ["heuristic"]},
     r"fixed_opponents \['heuristic'\] would never play: every seat .* and opponent_sampling_strategy='mirror' "
     "draws no opponent"),
    # integers
    ("max_train_len 1", {"max_train_len": 1}, "max_train_len must be an integer >= 2"),
    ("max_generation_len 0", {"max_generation_len": 0}, "max_generation_len must be an integer >= 1"),
    ("max_generation_len float", {"max_generation_len": 16.0}, "max_generation_len must be an integer"),
    ("mini_batch_size 0", {"mini_batch_size": 0}, "mini_batch_size must be an integer >= 1"),
    ("mini_batch_size string", {"mini_batch_size": "8"}, "mini_batch_size must be an integer"),
    ("batch_size float", {"batch_size": 16.0}, "batch_size must be an integer"),
    ("buffer_size 0", {"buffer_size": 0}, "buffer_size must be an integer >= 1"),
    ("num_inference_actors 0", {"num_inference_actors": 0}, "num_inference_actors must be an integer >= 1"),
    ("opponent_lag 0", {"opponent_lag": 0}, "opponent_lag must be an integer >= 1"),
    ("opponent_window string", {"opponent_window": "4"}, "opponent_window must be an integer"),
    # league samplers
    ("pfsp_weighting unknown", {"pfsp_weighting": "squared"}, "pfsp_weighting must be one of"),
    ("pfsp_prior 0", {"pfsp_prior": 0}, r"pfsp_prior must be a number > 0"),
    ("pfsp_window 0", {"pfsp_window": 0}, "pfsp_window must be an integer >= 1"),
    ("psro_every 0", {"psro_every": 0}, "psro_every must be an integer >= 1"),
    ("psro_games_per_cell float", {"psro_games_per_cell": 4.0}, "psro_games_per_cell must be an integer"),
    ("psro_games_per_cell 10**12", {"psro_games_per_cell": 10**12},
     r"psro_games_per_cell must be an integer >= 1 and <= 1000, got 1000000000000 \(too large\)"),
    ("psro_pool_size 0", {"psro_pool_size": 0}, "psro_pool_size must be an integer >= 1"),
    ("psro_meta_solver unknown", {"psro_meta_solver": "alpharank"},
     r"psro_meta_solver must be one of \['nash', 'alpha-rank'\], got 'alpharank'"),
    ("rating_curriculum above 1", {"rating_curriculum": 1.5}, r"rating_curriculum must be a finite number in \[0, 1\]"),
    ("rating_curriculum_target a string", {"rating_curriculum_target": "high"},
     "rating_curriculum_target must be a finite number"),
    ("rating_curriculum_width 0", {"rating_curriculum_width": 0.0}, "rating_curriculum_width must be a number > 0"),
    ("env_curriculum_window float", {"env_curriculum_window": 8.0}, "env_curriculum_window must be an integer"),
    ("env_curriculum_target negative", {"env_curriculum_target": -0.5}, "env_curriculum_target must be a finite"),
    ("env_curriculum_width nan", {"env_curriculum_width": float("nan")}, "env_curriculum_width must be a number > 0"),
    ("env_sampling_strategy typo", {"env_sampling_strategy": "curriculums"}, "env_sampling_strategy must be one of"),
    ("pfsp strategy with every seat the learner's", {"opponent_sampling_strategy": "pfsp"},
     "opponent_sampling_strategy='pfsp' draws opponents, but every seat"),
    ("psro strategy with every seat the learner's", {"opponent_sampling_strategy": "psro"},
     "opponent_sampling_strategy='psro' draws opponents, but every seat"),
    ("psro strategy without a two-player train game",
     {"opponent_sampling_strategy": "psro",
      "train_envs": [{**TRAIN, "env_id": "Poker-v0-train", "num_players": 3, "num_actors": 1}]},
     "opponent_sampling_strategy='psro' fills its meta-game with two-player games"),
    ("rating_curriculum with every seat the learner's", {"rating_curriculum": 0.5},
     r"rating_curriculum=0.5 draws opponents, but every seat .* or set rating_curriculum=0"),
    ("pfsp with a scripted opponent that a train game lacks",
     {"opponent_sampling_strategy": "pfsp", "fixed_opponents": ["optimal"],
      "train_envs": [{**TRAIN, "env_id": "KuhnPoker-v0-train", "num_actors": 1}]},
     r"fixed_opponents\[0\] = 'optimal' is drawn for every train env"),
    # the league preset (the main model's strategy is main_opponents: VALID's "mirror" is overridden)
    ("league not a mapping", {"league": 3}, "league must be a mapping of league settings"),
    ("league unknown setting", {"league": {"exploiter": 1}}, r"unknown league settings \['exploiter'\]"),
    ("league exploiters 0", {"league": {"exploiters": 0}}, r"league\['exploiters'\] must be an integer >= 1"),
    ("league exploiters 1000", {"league": {"exploiters": 1000}},
     r"league\['exploiters'\] must be an integer >= 1 and <= 16, got 1000"),
    ("league exploiter_reset unknown", {"league": {"exploiter_reset": "base"}},
     r"league\['exploiter_reset'\] must be one of"),
    ("league reset_after_checkpoints 0", {"league": {"reset_after_checkpoints": 0}},
     r"league\['reset_after_checkpoints'\] must be an integer >= 1"),
    ("league reset_above_win_rate above 1", {"league": {"reset_above_win_rate": 1.5}},
     r"league\['reset_above_win_rate'\] must be a finite number in \[0, 1\]"),
    ("league reset_below_win_rate negative", {"league": {"reset_below_win_rate": -0.1}},
     r"league\['reset_below_win_rate'\] must be a finite number in \[0, 1\]"),
    ("league thresholds crossed", {"league": {"reset_below_win_rate": 0.8, "reset_above_win_rate": 0.7}},
     r"league\['reset_below_win_rate'\] \(0.8\) must be below"),
    ("league reset_window 0", {"league": {"reset_window": 0}}, r"league\['reset_window'\] must be an integer >= 1"),
    ("league main_opponents mirror", {"league": {"main_opponents": "mirror"}},
     r"league\['main_opponents'\] must be one of"),
    ("league and another opponent_sampling_strategy", {"league": {}},
     r"league\['main_opponents'\] is 'pfsp', but opponent_sampling_strategy is 'mirror'"),
    ("league with a one-player train env", {"league": {}, "opponent_sampling_strategy": "pfsp",
                                            "train_envs": [{**TRAIN, "num_players": 1, "num_actors": 1}]},
     "league: every train env needs at least 2 players"),
    ("max_staleness float", {"max_staleness": 1.5}, "max_staleness must be an integer >= 0"),
    ("whole_games not a bool", {"whole_games": "yes"}, "whole_games must be true or false"),
    ("seed negative", {"seed": -1}, "seed must be an integer >= 0"),
    ("seed bool", {"seed": True}, "seed must be an integer"),
    ("seed float", {"seed": 1.5}, "seed must be an integer"),
    # real numbers
    ("learning_rate string", {"learning_rate": "fast"}, "learning_rate must be a number > 0"),
    ("learning_rate inf", {"learning_rate": float("inf")}, "learning_rate must be a number > 0"),
    ("learning_rate zero", {"learning_rate": 0}, "learning_rate must be a number > 0"),
    ("lr_schedule unknown", {"lr_schedule": "cosine"}, "lr_schedule must be one of"),
    ("gradient_clipping zero", {"gradient_clipping": 0.0}, "gradient_clipping must be a number > 0"),
    ("gradient_clipping string", {"gradient_clipping": "0.2"}, "gradient_clipping must be a number > 0"),
    ("temperature negative", {"temperature": -0.1}, "temperature must be a finite number"),
    ("temperature bool", {"temperature": True}, "temperature must be a finite number"),
    ("temperature inf", {"temperature": float("inf")}, "temperature must be a finite number"),
    ("temperature string", {"temperature": "hot"}, "temperature must be a finite number"),
    # the collector's failure budget
    ("max_consecutive_failures 0", {"max_consecutive_failures": 0},
     "max_consecutive_failures must be an integer >= 1 or None"),
    ("max_failure_rate 0", {"max_failure_rate": 0.0}, r"max_failure_rate must be a finite number in \(0, 1\] or None"),
    ("max_failure_rate 1.5", {"max_failure_rate": 1.5}, "max_failure_rate must be a finite number in"),
    ("failure_rate_window None", {"failure_rate_window": None}, "failure_rate_window must be an integer >= 1"),
    # booleans
    ("activation_checkpointing 'yes'", {"activation_checkpointing": "yes"}, "activation_checkpointing must be true"),
    ("gradient_checkpointing 1", {"gradient_checkpointing": 1}, "gradient_checkpointing must be true or false"),
    ("use_wandb 'no'", {"use_wandb": "no"}, "use_wandb must be true or false or None"),
    ("use_trainer_cache 'false' (a string)", {"use_trainer_cache": "false"}, "use_trainer_cache must be true"),
    # lora_config
    ("lora_config a list", {"lora_config": [8, 16]}, "lora_config must be a dict or None"),
    ("lora_rank 0", {"lora_config": {"lora_rank": 0}}, r"lora_config\['lora_rank'\] must be an integer >= 1"),
    ("lora_rank string", {"lora_config": {"lora_rank": "8"}}, r"lora_config\['lora_rank'\] must be an integer"),
    ("lora_alpha negative", {"lora_config": {"lora_alpha": -1}}, r"lora_config\['lora_alpha'\] must be"),
    ("lora_dropout 1.0", {"lora_config": {"lora_dropout": 1.0}}, r"lora_config\['lora_dropout'\] must be .*\[0, 1\)"),
    ("target_modules empty", {"lora_config": {"target_modules": []}}, r"target_modules'\] must be a non-empty list"),
    ("target_modules a string", {"lora_config": {"target_modules": "q_proj"}},
     r"target_modules'\] must be a non-empty list"),
    ("target_modules the model lacks", {"lora_config": {"target_modules": ["q_proj", "nope_proj"]}},
     r"lora_config\['target_modules'\] names \['nope_proj'\], which the model .* does not have; its linear "
     r"modules: \[.*'q_proj'"),
    # vllm_config
    ("vllm_config a string", {"vllm_config": "fast"}, "vllm_config must be a dict or None"),
    ("vllm temperature negative", {"vllm_config": {"temperature": -1}}, r"vllm_config\['temperature'\]"),
    ("vllm top_p 0", {"vllm_config": {"top_p": 0}}, r"vllm_config\['top_p'\] must be .*\(0, 1\]"),
    ("vllm top_p 1.5", {"vllm_config": {"top_p": 1.5}}, r"vllm_config\['top_p'\]"),
    ("vllm max_tokens 0", {"vllm_config": {"max_tokens": 0}}, r"vllm_config\['max_tokens'\] must be an integer"),
    ("vllm max_parallel_seq string", {"vllm_config": {"max_parallel_seq": "many"}},
     r"vllm_config\['max_parallel_seq'\]"),
    ("vllm max_model_len float", {"vllm_config": {"max_model_len": 8192.0}}, r"vllm_config\['max_model_len'\]"),
    ("vllm legal_moves_only a string", {"vllm_config": {"legal_moves_only": "yes"}},
     r"vllm_config\['legal_moves_only'\] must be true or false"),
    ("legal_moves_only with a nucleus", {"vllm_config": {"legal_moves_only": True, "top_p": 0.9}},
     r"\['top_p'\]=0.9 with legal_moves_only=True"),
    ("vllm lora_config bad rank", {"vllm_config": {"lora_config": {"lora_rank": -4}}},
     r"vllm_config\['lora_config'\]\['lora_rank'\] must be an integer >= 1"),
    # where and how the run goes
    pytest.param("inference_backend vllm without vLLM", {"inference_backend": "vllm"}, "vLLM is not installed",
                 marks=NO_VLLM),
    ("inference_backend None", {"inference_backend": None}, "inference_backend must be one of"),
    ("wandb_project a number", {"wandb_project": 5}, "wandb_project must be a W&B project name"),
    ("wandb_project empty", {"wandb_project": ""}, "wandb_project must be a W&B project name or None"),
    ("ray_address a number", {"ray_address": 6379}, "ray_address must be a Ray address"),
    ("runs_dir a number", {"runs_dir": 5}, "runs_dir must be a directory path"),
    ("runs_dir an existing file", {"runs_dir": "$TMP/a-file"}, "runs_dir .* is a file"),
    ("run_name empty", {"run_name": ""}, "run_name must be a plain directory name"),
    ("run_name '..'", {"run_name": ".."}, "run_name must be a plain directory name"),
    ("run_name a number", {"run_name": 7}, "run_name must be a plain directory name"),
    ("run_name with NUL", {"run_name": "a\x00b"}, r"run_name must be a plain directory name.*'\\x00'"),
    ("run_name with a newline", {"run_name": "a\nb"}, r"run_name must be a plain directory name.*'\\n'"),
    ("run_name over 255 bytes", {"run_name": "é" * 128}, "run_name is 256 bytes in UTF-8; .* at most 255"),
    ("run_name a path through '..'", {"run_name": "../escape"}, "run_name must be a plain directory name"),
    ("run_name names a file in runs_dir", {"runs_dir": "$TMP", "run_name": "a-file"},
     "a-file exists and is not a directory; pick another run_name"),
    ("runs_dir with NUL", {"runs_dir": "$TMP/ru\x00ns"}, "runs_dir must be a directory path without control"),
    ("runs_dir below a file", {"runs_dir": "$TMP/a-file/runs"}, "runs_dir .*a-file is a file, not a directory"),
    ("runs_dir a name over 255 bytes", {"runs_dir": "$TMP/" + "r" * 256}, "runs_dir has a directory name of more"),
    ("runs_dir not writable (/proc)", {"runs_dir": "/proc/self/runs"}, "runs_dir .* is not writable by this user"),
    pytest.param("runs_dir read-only", {"runs_dir": "$TMP/read-only/runs"},
                 "runs_dir .* is not writable by this user", marks=NOT_ROOT),
    ("learner_device 'gpu'", {"learner_device": "gpu"}, "learner_device must be None"),
    ("learner_device an int", {"learner_device": 0}, "learner_device must be None"),
    ("learner_device cuda:1 (the learner sees one GPU)", {"learner_device": "cuda:1"},
     "learner_device='cuda:1', but the learner actor sees only the GPU Ray gives it, as cuda:0"),
    # learner: the learner's other settings
    ("learner a list", {"learner": [0.9]}, "learner must be a dict"),
    ("learner setting REINFORCE does not have", {"learner": {"gamma": 0.9}},
     r"unknown learner settings \['gamma'\] for REINFORCELearner"),
    ("learner repeats a flat argument", {"learner": {"batch_size": 8}}, r"set by \['build\(batch_size=...\)'\]"),
    ("learner sets what the run decides", {"learner": {"output_dir": "x"}}, r"set by \['the run'\]"),
    ("A2C gamma out of range", {"algorithm": "a2c", "learner": {"gamma": 1.5}}, r"learner settings: gamma must be"),
    ("reward_transforms a string", {"reward_transforms": "default"}, r"reward_transforms must be None or a \(final"),
    ("reward_transforms two items", {"reward_transforms": (None, None)}, "reward_transforms must be None or a"),
    ("reward_transforms not callable", {"reward_transforms": (1, None, None)}, "the final transform must be callable"),
    ("resume_from not a run directory", {"resume_from": "$TMP/empty"}, "resume_from must be the directory"),
    ("resume_from a number", {"resume_from": 5}, "resume_from must be the directory"),
    # the nested form: sections, and a setting given both ways
    ("models a string", {"models": "tiny"}, "models must be a non-empty list of model declarations"),
    ("models two declarations and flat model settings", {"models": [{"name": "a"}, {"name": "b"}]},
     r"\['batch_size'.*set one model's settings, but models declares 2"),
    ("models[0] unknown field", {"models": [{"learner_rate": 1e-3}]}, r"models\[0\]: .*learner_rate"),
    ("models[0] learner value", {"models": [{"learner": {"grad_clip": 0}}]}, r"models\[0\]: grad_clip must be"),
    ("models[0] buffer size", {"models": [{"buffer": {"size": 0}}]}, r"models\[0\]: buffer.size must be"),
    ("model_name flat and nested", {"models": [{"model_name": "tiny"}]},
     r"model_name is given twice: as build\(model_name=...\) and as models\[0\].model_name"),
    ("samplers unknown field", {"samplers": {"strategy": "mirror"}}, r"samplers: .*strategy"),
    ("samplers twin of a flat argument", {"samplers": {"opponent_sampling_strategy": "fixed"}},
     "opponent_sampling_strategy is given twice"),
    ("tracker a list", {"tracker": ["wandb"]}, "tracker must be a mapping"),
    ("tracker use_wandb", {"tracker": {"use_wandb": "no"}}, "use_wandb must be true or false"),
    ("failure_budget rate", {"failure_budget": {"max_failure_rate": 2}}, "max_failure_rate must be a finite number"),
    ("api_timeout_s zero", {"api_timeout_s": 0}, "api_timeout_s must be a number > 0, got 0"),
    ("api_max_retries negative", {"api_max_retries": -1}, "api_max_retries must be an integer >= 0, got -1"),
    ("api_turn_deadline_s zero", {"api_turn_deadline_s": 0}, "api_turn_deadline_s must be a number > 0, got 0"),
    ("api_opponents turn_deadline_s", {"api_opponents": {"turn_deadline_s": -1}},
     "api_opponents.turn_deadline_s must be a number > 0"),
    ("api_opponents timeout_s", {"api_opponents": {"timeout_s": "5"}}, "api_opponents.timeout_s must be a number > 0"),
    # unknown and secret arguments
    ("misspelt argument", {"learning_rte": 1e-3}, r"unknown build\(\) arguments \['learning_rte'\] .*'learning_rate'"),
    ("'extra' itself", {"extra": {"a": 1}}, r"unknown build\(\) arguments \['extra'\]"),
    ("api_key argument", {"api_key": KEY}, "api_key looks like an API key setting.*OPENROUTER_API_KEY"),
    ("OPENAI_API_KEY argument", {"OPENAI_API_KEY": KEY}, "OPENAI_API_KEY looks like an API key setting"),
    ("api_key inside vllm_config", {"vllm_config": {"api_key": KEY}}, r"vllm_config\.api_key looks like an API key"),
    # scale and modes
    ("checkpoint_transport unknown", {"checkpoint_transport": "disk"},
     r"checkpoint_transport must be one of \['auto', 'object_store', 'path'\], got 'disk'"),
    ("num_learner_workers 0", {"num_learner_workers": 0}, "num_learner_workers must be an integer >= 1, got 0"),
    ("num_learner_workers a fraction", {"num_learner_workers": 1.5}, "num_learner_workers must be an integer >= 1"),
    ("mode misspelt", {"mode": "synchronous"}, r"mode must be one of \['async', 'sync'\], got 'synchronous'"),
    ("exploitability_eval a bool", {"exploitability_eval": True},
     r"exploitability_eval must be one of \['auto', 'off'\], got True"),
    ("exploitability_eval 'on'", {"exploitability_eval": "on"},
     r"exploitability_eval must be one of \['auto', 'off'\], got 'on'"),
    ("exploitability_wait_s negative", {"exploitability_wait_s": -1},
     r"exploitability_wait_s must be a finite number in \[0, inf\), got -1"),
    ("exploitability_wait_s a word", {"exploitability_wait_s": "long"},
     "exploitability_wait_s must be a finite number .*got 'long'"),
    ("mode sync with staleness", {"mode": "sync", "max_staleness": 2},
     r"max_staleness=2, but mode='sync' trains every step on the version that played it"),
]

TRAIN_ENV_CASES = [
    ("env_id unknown", {"env_id": "NoSuchGame-v0"}, "unknown env id 'NoSuchGame-v0'"),
    ("env_id a number", {"env_id": 5}, "env_id must be a non-empty string"),
    ("env_id needs an API key", {"env_id": "Debate-v0"}, "needs an OpenRouter API key"),
    ("env_id needs Python 3.12", {"env_id": "Chess-v0"}, "Python 3.12"),
    pytest.param("OpenSpiel game unknown", {"env_id": "openspiel:leducpoker"},
                 "unknown OpenSpiel game 'leducpoker'.*did you mean leduc_poker", marks=NO_OPENSPIEL),
    pytest.param("OpenSpiel parameter of the wrong type", {"env_id": "openspiel:goofspiel(num_cards=four)"},
                 "OpenSpiel could not load 'goofspiel\\(num_cards=four\\)': .*num_cards", marks=NO_OPENSPIEL),
    pytest.param("OpenSpiel game of 4 players", {"env_id": "openspiel:hearts"},
                 "has 4 players; the OpenSpiel bridge plays two-player games", marks=NO_OPENSPIEL),
    pytest.param("OpenSpiel game with num_players 3", {"env_id": "openspiel:leduc_poker", "num_players": 3,
                                                      "num_actors": 1},
                 "openspiel:leduc_poker is played by 2 players, not 3", marks=NO_OPENSPIEL),
    ("num_players wrong for the game", {"num_players": 3, "num_actors": 1}, "The number of players has to be 2"),
    ("num_players a string", {"num_players": "2"}, "num_players must be an integer >= 1"),
    ("num_actors 0", {"num_actors": 0}, "num_actors must be an integer >= 1"),
    ("num_actors above num_players", {"num_actors": 3}, r"num_actors \(3\) cannot exceed num_players \(2\)"),
    ("prompt_template unknown", {"prompt_template": "qwen4-zs"}, "unknown prompt template 'qwen4-zs'"),
    ("prompt_template a list", {"prompt_template": ["qwen3-zs"]}, "prompt_template must be a template name"),
    ("action_extraction_fn unknown", {"action_extraction_fn": "regex"}, "unknown action extraction 'regex'"),
    ("action_extraction_fn None", {"action_extraction_fn": None}, "action_extraction_fn must be an extraction name"),
    ("error_allowance negative", {"error_allowance": -1}, "error_allowance must be an integer >= 0"),
    ("error_allowance float", {"error_allowance": 1.5}, "error_allowance must be an integer"),
    ("prompt_template qwen3-grid on Kuhn", {"env_id": "KuhnPoker-v0-train", "prompt_template": "qwen3-grid"},
     r"train_envs\[0\]: prompt_template 'qwen3-grid' does not fit KuhnPoker-v0-train: template 'qwen3-grid' reads a"),
    ("prompt_template qwen3-grid on ConnectFour", {"env_id": "ConnectFour-v0-train", "prompt_template": "qwen3-grid"},
     "prompt_template 'qwen3-grid' does not fit ConnectFour-v0-train"),
    ("prompt_template qwen3-hand on TicTacToe", {"prompt_template": "qwen3-hand"},
     "prompt_template 'qwen3-hand' does not fit TicTacToe-v0-train: template 'qwen3-hand' reads a Kuhn poker hand"),
    ("unknown spec field", {"fixed_opponent": "random"}, r"train_envs\[0\]: .*unexpected keyword argument"),
    ("spec field missing", {"num_actors": None}, "num_actors must be an integer"),
]

EVAL_ENV_CASES = [
    ("fixed_opponent empty", {"fixed_opponent": ""}, "fixed_opponent must be a non-empty string"),
    ("fixed_opponent a number", {"fixed_opponent": 3}, "fixed_opponent must be a non-empty string"),
    ("fixed_opponent dir without adapter_config.json", {"fixed_opponent": "$TMP/no-adapter-config"},
     "not a PEFT LoRA adapter directory"),
    ("fixed_opponent corrupt adapter", {"fixed_opponent": "$TMP/corrupt-adapter"}, "cannot be read as JSON"),
    ("fixed_opponent path missing", {"fixed_opponent": "/no/such/adapter"}, "fixed_opponent .* does not exist"),
    ("fixed_opponent API model without key", {"fixed_opponent": "google/gemini-2.0-flash-lite-001"},
     "needs a key in the environment variable OPENROUTER_API_KEY"),
    ("fixed_opponent random on an unsupported game",
     {"env_id": "Snake-v0", "fixed_opponent": "random"}, "no scripted baseline"),
    ("fixed_opponent a scripted baseline the game lacks", {"fixed_opponent": "nash"},
     "cannot play 'TicTacToe-v0-train': game 'TicTacToe' has the scripted baselines random, heuristic, optimal"),
    ("eval num_players 0", {"num_players": 0}, "num_players must be an integer >= 1"),
    ("eval prompt_template unknown", {"prompt_template": "chatml"}, "unknown prompt template"),
    ("eval prompt_template qwen3-hand on TicTacToe", {"prompt_template": "qwen3-hand"},
     r"eval_envs\[0\]: prompt_template 'qwen3-hand' does not fit TicTacToe-v0-train"),
    ("eval num_actors (a train-only field)", {"num_actors": 1}, "unexpected keyword argument 'num_actors'"),
]

YAML_CASES = [
    ("syntax: bad indentation", ("model_name: tiny\n  batch_size: 3\n", []), "not valid YAML"),
    ("syntax: tab indentation", ("model_name: tiny\ntrain_envs:\n\t- x\n", []), "not valid YAML"),
    ("syntax: unclosed quote", ('model_name: "tiny\n', []), "not valid YAML"),
    ("top level a string", ("just a string\n", []), "must hold a mapping of settings, got str"),
    ("top level a number", ("42\n", []), "must hold a mapping of settings, got int"),
    ("empty file", ("", []), r"missing required setting\(s\) \['model_name', 'train_envs'\]"),
    ("train_envs missing", ("model_name: $MODEL\n", []), r"missing required setting\(s\) \['train_envs'\]"),
    ("a key given twice", (BASE_YAML + "batch_size: 16\nbatch_size: 32\n", []), "duplicate key 'batch_size'"),
    ("unknown key with a suggestion", (BASE_YAML + "lerning_rate: 0.1\n", []),
     r"unknown config keys \['lerning_rate'\] \(did you mean 'learning_rate'"),
    ("non-string key", (BASE_YAML + "1: 2\nbogus: 3\n", []), r"unknown config keys \[1, 'bogus'\]"),
    ("python object tag", (BASE_YAML + "seed: !!python/object/apply:os.getcwd []\n", []), "not valid YAML"),
    ("api_key key", (BASE_YAML + f"api_key: {KEY}\n", []), "api_key looks like an API key setting"),
    ("OPENROUTER_API_KEY key", (BASE_YAML + "OPENROUTER_API_KEY: x\n", []), "OPENROUTER_API_KEY looks like an API key"),
    ("batch_size a word", (BASE_YAML + "batch_size: sixteen\n", []), "batch_size must be an integer"),
    ("learning_rate a word", (BASE_YAML + "learning_rate: fast\n", []), "learning_rate must be a number > 0"),
    ("train_envs a string", ("model_name: $MODEL\ntrain_envs: TicTacToe-v0-train\n", []),
     "train_envs must be a non-empty list"),
    ("train_envs item a list", ("model_name: $MODEL\ntrain_envs: [[TicTacToe-v0-train, 2, 2, qwen3-zs]]\n", []),
     r"train_envs\[0\] must be a TrainEnvSpec"),
    ("train_envs item missing fields", ("model_name: $MODEL\ntrain_envs: [{env_id: TicTacToe-v0-train}]\n", []),
     r"train_envs\[0\]: .*missing 3 required positional arguments"),
    ("model_name null", ("model_name: null\ntrain_envs: []\n", []), r"missing required setting\(s\) \['model_name'\]"),
    ("lora_config a number", (BASE_YAML + "lora_config: 8\n", []), "lora_config must be a dict"),
    ("use_wandb a word", (BASE_YAML + "use_wandb: maybe\n", []), "use_wandb must be true or false"),
    ("learning_steps 0", (BASE_YAML + "learning_steps: 0\n", []), "learning_steps must be an integer >= 1"),
    ("learning_steps true", (BASE_YAML + "learning_steps: true\n", []), "learning_steps must be an integer"),
    ("num_collection_workers a word", (BASE_YAML + "num_collection_workers: many\n", []),
     "num_collection_workers must be an integer >= 1"),
    ("num_eval_workers negative", (BASE_YAML + "num_eval_workers: -1\n", []),
     "num_eval_workers must be an integer >= 0"),
    ("--set without a key", (BASE_YAML, ["=5"]), "must look like key=value"),
    ("--set empty value", (BASE_YAML, ["batch_size="]), "batch_size must be an integer"),
    ("--set unknown key", (BASE_YAML, ["lr=0.1"]), r"unknown config keys \['lr'\]"),
    ("--set unknown env", (BASE_YAML, ["train_envs=[{env_id: Nope-v0, num_players: 2, num_actors: 2, "
                                       "prompt_template: qwen3-zs}]"]), "unknown env id 'Nope-v0'"),
    ("--set bad start value", (BASE_YAML, ["learning_steps=abc"]), "learning_steps must be an integer"),
    ("--set api_key", (BASE_YAML, [f"api_key={KEY}"]), "api_key looks like an API key setting"),
    ("--set not a string", (BASE_YAML, [5]), "must be a string like key=value"),
    ("config path a directory", ("$DIR", []), "is a directory"),
    ("a model's inference backend unknown",
     ("models: [{model_name: $MODEL, inference: {backend: gpu}}]\nruns_dir: $TMP/runs\n"
      "train_envs: [{env_id: TicTacToe-v0-train, num_players: 2, num_actors: 2, prompt_template: qwen3-zs}]\n", []),
     r"models\[0\]: inference\['backend'\] must be one of \['auto', 'transformers', 'vllm'\], got 'gpu'"),
    ("config not UTF-8", ("$BINARY", []), "not UTF-8"),
]

REGISTRY = "registry/registry.json"
RUN_FILES = {  # a one-model run's, with one checkpoint (not there: every case stops before it is read)
    "config.json": json.dumps({"model_name": "$MODEL", "train_envs": [TRAIN]}),
    REGISTRY: json.dumps({"models": [{"uid": "ckpt-1", "fixed": False, "iteration": 1, "mu": 25.0, "sigma": 8.3,
                                      "path_or_name": "checkpoints/ckpt-1"}]}),
}
NO_FIXED = json.dumps({"models": [{"uid": "ckpt-1", "iteration": 1, "mu": 25.0, "sigma": 8.3, "path_or_name": None}]})
CLI_CASES = [  # damaged run files and results with nowhere to go: tracebacks, or errors after every game
    ("league-table: registry a list", (["league-table", "$RUN"], {REGISTRY: "[]"}),
     r"run/registry: registry.json must hold a JSON object"),
    ("eval --run: registry without models", (["eval", "--run", "$RUN"], {REGISTRY: "{}"}),
     r"run/registry/registry.json is damaged: 'models' must be a list of registry entries"),
    ("eval --all-checkpoints: an entry without fixed",
     (["eval", "--exploitability", "--run", "$RUN", "--all-checkpoints"], {REGISTRY: NO_FIXED}),
     r"registry.json is damaged: its entry models\[0\] has no valid fixed"),
    ("league-table: config a list", (["league-table", "$RUN"], {"config.json": "[1, 2]"}),
     r"run: config.json must hold a JSON object"),
    ("eval --run: registry not JSON", (["eval", "--run", "$RUN"], {REGISTRY: "{not json"}),
     r"run/registry: registry.json cannot be read as JSON \(Expecting property name"),
    ("eval --all-checkpoints: no checkpoint",
     (["eval", "--exploitability", "--run", "$RUN", "--all-checkpoints"], {REGISTRY: '{"models": []}'}),
     r"registry.json holds no checkpoint of 'model': the run stopped before its first"),
    ("eval --average-from below 0",
     (["eval", "--exploitability", "--run", "$RUN", "--all-checkpoints", "--average-from", "-1"], {}),
     r"--average-from is a learner step >= 0, got -1"),
    ("eval --checkpoint-every below 1",
     (["eval", "--exploitability", "--run", "$RUN", "--all-checkpoints", "--checkpoint-every", "0"], {}),
     r"--checkpoint-every is a number of learner steps >= 1, got 0"),
    ("eval --checkpoint-every without --all-checkpoints",
     (["eval", "--exploitability", "--run", "$RUN", "--checkpoint-every", "10"], {}),
     r"--checkpoint-every picks among the checkpoints that --exploitability --all-checkpoints reads"),
    ("eval --average-weights without --all-checkpoints",
     (["eval", "--exploitability", "--run", "$RUN", "--average-weights", "linear"], {}),
     r"--average-from and --average-weights weigh the checkpoints that --exploitability --all-checkpoints reads"),
    ("league-table: no checkpoint", (["league-table", "$RUN"], {REGISTRY: '{"models": []}'}),
     r"registry.json holds no checkpoint"),
    ("eval --exploitability: a damaged adapter",
     (["eval", "--exploitability", "--model", "$MODEL", "--adapter", "$TMP/garbage-adapter"], {}),
     r"--adapter .*garbage-adapter.*: adapter_model.safetensors is not a readable safetensors file"),
    ("league-table --out an existing file", (["league-table", "$RUN", "--out", "$TMP/a-file"], {}),
     r"--out .*a-file' is a file, not a directory"),
    ("eval --out in a missing folder",
     (["eval", "--model", "$MODEL", "--games", "1", "--out", "$TMP/no/such/r.json"], {}),
     r"--out .*: the folder .*no/such does not exist"),
    ("eval --exploitability --out a directory",
     (["eval", "--exploitability", "--model", "$MODEL", "--out", "$TMP/empty"], {}), r"--out .*empty' is a directory"),
]

QUICKSTART_CASES = [  # before the warm start: each was a traceback, or an error minutes into the job
    ("non-string keys", "1: 2\nbogus: 3\n", r"unknown quickstart settings \[1, 'bogus'\]"),
    ("a NUL byte", "seed: 1\x00\n", r"is not valid YAML: unacceptable character #x0000: .* position 7$"),
    ("warm_start a list", "warm_start: [1, 2]\n", "warm_start must be a mapping of warm-start settings"),
    ("warm_start a word", "warm_start: abc\n", r"warm_start must be a mapping of warm-start settings .*, got 'abc'"),
    ("warm_start unknown setting", "warm_start: {bogus: 1}\n", r"unknown warm_start settings \['bogus'\]"),
    ("league a list", "league: [1]\n", "league must be a mapping of league settings"),
    ("learner a number", "learner: 5\n", "learner must be a mapping of learner settings"),
    ("learner setting the algorithm lacks", "learner: {gamma: 0.9}\n",
     r"unknown learner settings \['gamma'\] for REINFORCELearner"),
    ("learner minibatches the batch cannot hold", "learner: {minibatches: 4}\n",
     r"minibatches \(4\) must be at most batch_size // mini_batch_size"),
    ("algorithm unknown", "algorithm: dqn\n", "algorithm must be one of"),
    ("fixed_opponents a number", "fixed_opponents: 5\n", "fixed_opponents must be a list of opponent names"),
    ("out a number", "out: 5\n", "out must be a directory path"),
]

START_CASES = [
    ("learning_steps 0", {"learning_steps": 0}, "learning_steps must be an integer >= 1"),
    ("learning_steps a string", {"learning_steps": "5"}, "learning_steps must be an integer"),
    ("learning_steps bool", {"learning_steps": True}, "learning_steps must be an integer"),
    ("num_collection_workers 0", {"num_collection_workers": 0}, "num_collection_workers must be an integer >= 1"),
    ("num_eval_workers negative", {"num_eval_workers": -2}, "num_eval_workers must be an integer >= 0"),
    ("num_eval_workers None", {"num_eval_workers": None}, "num_eval_workers must be an integer"),
]


# every integer's range, every learner and engine setting, settings given twice with two values, and
# what used to be refused only after Ray had started (a run directory holding checkpoints, more actors
# than CPUs): the settings added since the first table, so that each build() setting has a case here
BIG = 2**64  # torch.manual_seed and every C integer refuse it; it passed build() and killed the learner
TOO_LARGE = r" must be an integer >= \d+ and <= 9223372036854775807(?: or None)?, got \d+ \(too large\)"
LEARNER_CASES = [
    ("logprob_chunk_tokens 0", {"learner": {"logprob_chunk_tokens": 0}},
     "logprob_chunk_tokens must be an integer >= 1"),
    ("max_tokens_per_micro_batch 0", {"learner": {"max_tokens_per_micro_batch": 0}},
     "max_tokens_per_micro_batch must be an integer >= 1"),
    ("micro_batching unknown", {"learner": {"micro_batching": "bins"}}, "micro_batching must be one of"),
    ("lora_compute_dtype unknown", {"learner": {"lora_compute_dtype": "bf16"}}, "lora_compute_dtype must be one of"),
    ("attn_implementation unknown", {"learner": {"attn_implementation": "flash"}},
     "attn_implementation must be one of"),
    ("attn_implementation flex_attention on a CPU", {"learner": {"attn_implementation": "flex_attention"}},
     "'flex_attention' has no backward on a CPU"),
    ("weight_decay negative", {"learner": {"weight_decay": -1}},
     r"learner settings: weight_decay must be a finite number in \[0, inf\)"),
    ("adam_eps 0", {"learner": {"adam_eps": 0}}, "learner settings: adam_eps must be a number > 0"),
    ("dtype float64", {"learner": {"dtype": "float64"}}, r"learner settings: dtype must be one of \['bfloat16'"),
    ("keep_every 0", {"learner": {"keep_every": 0}}, "keep_every must be an integer >= 1 or None"),
    ("poll_interval_s 0", {"learner": {"poll_interval_s": 0}}, "poll_interval_s must be a number > 0"),
    ("poll_interval_s a string", {"learner": {"poll_interval_s": "1"}},
     "poll_interval_s must be a number > 0, got '1'"),
    ("wait_timeout_s negative", {"learner": {"wait_timeout_s": -1}}, "wait_timeout_s must be > 0 or None"),
    ("max_consecutive_skips 0", {"learner": {"max_consecutive_skips": 0}},
     "max_consecutive_skips must be an integer >= 1"),
    ("max_consecutive_skips float", {"learner": {"max_consecutive_skips": 2.5}},
     "max_consecutive_skips must be an integer"),
    ("loss_type unknown", {"learner": {"loss_type": "ppo"}}, "loss_type must be one of"),
    ("clip_ratio negative", {"algorithm": "ppo", "learner": {"clip_ratio": -0.1}}, r"clip_ratio must be in \(0, 1\)"),
    ("clip_ratio_high 0", {"algorithm": "ppo", "learner": {"clip_ratio_high": 0.0}}, "clip_ratio_high must be > 0"),
    ("ratio_level unknown", {"learner": {"ratio_level": "episode"}}, "ratio_level must be one of"),
    ("epochs 0", {"learner": {"epochs": 0}}, "epochs must be an integer >= 1"),
    ("minibatches 0", {"learner": {"minibatches": 0}}, "minibatches must be an integer >= 1"),
    ("old_logprobs unknown", {"learner": {"old_logprobs": "cached"}}, "old_logprobs must be one of"),
    ("off_policy_correction unknown", {"learner": {"off_policy_correction": "clip"}},
     "off_policy_correction must be one of"),
    ("correction_cap below 1", {"learner": {"correction_cap": 0.5}},
     r"correction_cap must be a finite number in \[1, inf\)"),
    ("correction_floor without a mask correction", {"learner": {"correction_floor": 0.1}},
     "correction_floor only applies to the \\*_mask corrections"),
    ("beta negative", {"learner": {"beta": -1}}, r"beta must be a finite number in \[0, inf\)"),
    ("kl_estimator unknown", {"learner": {"kl_estimator": "k9"}}, "kl_estimator must be one of"),
    ("reference_adapter without beta", {"learner": {"reference_adapter": "$TMP/adapter"}},
     "reference_adapter is only read for the KL penalty"),
    ("magnet_every 0", {"learner": {"magnet_every": 0, "beta": 0.1}}, "magnet_every must be an integer >= 1"),
    ("magnet_every without beta", {"learner": {"magnet_every": 10}}, "with beta = 0 there is no KL penalty"),
    ("magnet_every with a reference_adapter", {"learner": {"magnet_every": 10, "beta": 0.1,
                                                           "reference_adapter": "$TMP/adapter"}},
     "drop reference_adapter"),
    ("average_reservoir 0", {"learner": {"average_reservoir": 0}}, "average_reservoir must be an integer >= 1"),
    ("average_batch_size 0", {"learner": {"average_batch_size": 0}}, "average_batch_size must be an integer >= 1"),
    ("average_learning_rate 1e6", {"learner": {"average_learning_rate": 1e6}},
     r"average_learning_rate must be a finite number in \(0, 1\]"),
    ("average_eta 1.5", {"learner": {"average_reservoir": 8}, "average_eta": 1.5},
     r"average_eta must be a finite number in \[0, 1\] or None, got 1.5"),
    ("average_eta without average_reservoir", {"average_eta": 0.1},
     "seats NFSP's average policy, which only the learner's average_reservoir trains"),
    ("average_eta with every seat trained", {"learner": {"average_reservoir": 8}, "average_eta": 0.1},
     r"average_eta=0.1 seats NFSP's average policy in the opponent's seat, but every seat of every train game is "
     r"played by a trained model \(num_actors == num_players"),
    ("average_eta against fixed opponents", {"learner": {"average_reservoir": 8}, "average_eta": 0.1, **VS_FIXED},
     "opponent_sampling_strategy='fixed' draws other opponents"),
    ("entropy_coef a string", {"learner": {"entropy_coef": "x"}},
     r"entropy_coef must be a finite number in \[0, inf\), got 'x'"),
    ("entropy_coef nan", {"learner": {"entropy_coef": float("nan")}}, "entropy_coef must be a finite number"),
    ("A2C gae_lambda 2", {"algorithm": "a2c", "learner": {"gae_lambda": 2}},
     r"gae_lambda must be a finite number in \[0, 1\]"),
    ("A2C critic_learning_rate 0", {"algorithm": "a2c", "learner": {"critic_learning_rate": 0}},
     "critic_learning_rate must be a number > 0"),
    ("A2C infer_mini_batch_size 0", {"algorithm": "a2c", "learner": {"infer_mini_batch_size": 0}},
     "infer_mini_batch_size must be an integer >= 1"),
    ("A2C normalize_adv a string", {"algorithm": "a2c", "learner": {"normalize_adv": "yes"}},
     "normalize_adv must be true or false, got 'yes'"),
    ("GRPO group_by a number", {"algorithm": "grpo", "learner": {"group_by": 5}}, "group_by must be a non-empty tuple"),
    ("GRPO group_by unknown field", {"algorithm": "grpo", "learner": {"group_by": ["seat"]}},
     "group_by must be one of"),
    ("GRPO scale_rewards a string", {"algorithm": "grpo", "learner": {"scale_rewards": "no"}},
     "scale_rewards must be true or false"),
]
ENGINE_CASES = [  # vllm_config's engine settings, checked whether or not vLLM is installed
    ("gpu_memory_utilization 1.5", {"gpu_memory_utilization": 1.5}, r"\['gpu_memory_utilization'\] must be"),
    ("enforce_eager a string", {"enforce_eager": "yes"}, r"\['enforce_eager'\] must be true or false"),
    ("enable_sleep_mode 1", {"enable_sleep_mode": 1}, r"\['enable_sleep_mode'\] must be true or false"),
    ("tensor_parallel_size 0", {"tensor_parallel_size": 0}, r"\['tensor_parallel_size'\] must be an integer >= 1"),
    ("pipeline_parallel_size 0", {"pipeline_parallel_size": 0}, r"\['pipeline_parallel_size'\] must be an integer"),
    ("max_num_seqs 0", {"max_num_seqs": 0}, r"\['max_num_seqs'\] must be an integer >= 1"),
    ("max_num_batched_tokens 0", {"max_num_batched_tokens": 0}, r"\['max_num_batched_tokens'\] must be an integer"),
    ("max_lora_rank 0", {"max_lora_rank": 0}, r"\['max_lora_rank'\] must be an integer >= 1"),
    ("max_loras 0", {"max_loras": 0}, r"vllm_config\['max_loras'\] must be an integer >= 1"),
    ("dtype float64", {"dtype": "float64"}, r"vllm_config\['dtype'\] must be one of"),
    ("kv_cache_dtype a number", {"kv_cache_dtype": 5}, r"\['kv_cache_dtype'\] must be a non-empty string or None"),
    ("quantization empty", {"quantization": ""}, r"\['quantization'\] must be a non-empty string or None"),
    ("enable_prefix_caching a string", {"enable_prefix_caching": "x"}, r"\['enable_prefix_caching'\] must be true"),
    ("enable_chunked_prefill a string", {"enable_chunked_prefill": "x"}, r"\['enable_chunked_prefill'\] must be"),
    ("swap_space negative", {"swap_space": -1}, r"\['swap_space'\] must be a finite number in \[0, inf\)"),
    ("cpu_offload_gb negative", {"cpu_offload_gb": -1}, r"\['cpu_offload_gb'\] must be a finite number"),
    ("block_size 0", {"block_size": 0}, r"\['block_size'\] must be an integer >= 1 or None"),
    ("trust_remote_code a string", {"trust_remote_code": "x"}, r"\['trust_remote_code'\] must be true or false"),
    ("download_dir a number", {"download_dir": 5}, r"\['download_dir'\] must be a non-empty string or None"),
    ("revision a number", {"revision": 5}, r"\['revision'\] must be a non-empty string or None"),
    ("engine seed 2**64", {"seed": BIG}, r"vllm_config\['seed'\] must be an integer >= 0 and <= 9223372036854775807"),
    ("an unknown engine key", {"enforce_eagerly": True}, r"unknown vllm_config keys \['enforce_eagerly'\]"),
]
RANGE_CASES = [
    ("seed 2**64", {"seed": BIG},
     r"seed must be an integer >= 0 and <= 4294967295, got 18446744073709551616 \(too large\)"),
    ("seed 2**32", {"seed": 2**32}, "seed must be an integer >= 0 and <= 4294967295"),
    ("batch_size 2**64", {"batch_size": BIG}, "batch_size must be an integer >= 1 and <= 9223372036854775807"),
    ("mini_batch_size 2**64", {"mini_batch_size": BIG}, "mini_batch_size" + TOO_LARGE),
    ("buffer_size 2**64", {"buffer_size": BIG}, "buffer_size" + TOO_LARGE),
    ("max_generation_len 2**63", {"max_generation_len": 2**63}, "max_generation_len" + TOO_LARGE),
    ("max_train_len 2**64", {"max_train_len": BIG}, "max_train_len" + TOO_LARGE),
    ("lora_rank 2**63", {"lora_config": {"lora_rank": 2**63}}, r"lora_config\['lora_rank'\]" + TOO_LARGE),
    ("lora_rank above what the model's modules can hold", {"lora_config": {"lora_rank": 100_000}},
     r"lora_config\['lora_rank'\] is 100000, above 128, the highest rank a LoRA update of its target modules can "
     r"have \(min\(in, out features\) of .*q_proj\): a higher rank adds memory.*use lora_rank <= 128"),
    ("models[0] lora rank above what the model holds", {"models": [{"lora": {"lora_rank": 129}}]},
     r"models\[0\].lora\['lora_rank'\] is 129, above 128"),
    ("num_learner_workers 2**70", {"num_learner_workers": 2**70}, "num_learner_workers" + TOO_LARGE),
    ("num_inference_actors 2**64", {"num_inference_actors": BIG}, "num_inference_actors" + TOO_LARGE),
    ("max_staleness 2**64", {"max_staleness": BIG}, "max_staleness" + TOO_LARGE),
    ("opponent_lag 2**64", {"opponent_lag": BIG}, "opponent_lag" + TOO_LARGE),
    ("opponent_window 2**64", {"opponent_window": BIG}, "opponent_window" + TOO_LARGE),
    ("max_consecutive_failures 2**64", {"max_consecutive_failures": BIG}, "max_consecutive_failures" + TOO_LARGE),
    ("failure_rate_window 2**64", {"failure_rate_window": BIG}, "failure_rate_window" + TOO_LARGE),
    ("api_max_retries 2**64", {"api_max_retries": BIG}, "api_max_retries" + TOO_LARGE),
    ("api_opponents max_retries negative", {"api_opponents": {"max_retries": -1}},
     "api_opponents.max_retries must be an integer >= 0"),
    ("learning_rate 1e6", {"learning_rate": 1e6}, r"learning_rate must be a number in \(0, 1\], got 1000000.0"),
    ("more inference actors than the machine has CPUs", {"num_inference_actors": 1000},
     r"the run asks Ray for 1001 CPU .*would wait forever for CPU: lower num_inference_actors"),
    ("a run directory holding checkpoints", {"run_name": "old"},
     r"runs/old already holds checkpoints of an earlier run: continue it with unstable train --resume"),
    ("a one-model run into a league run's directory", {"run_name": "league"},
     r"runs/league already holds checkpoints of an earlier run"),
    ("a league run into the directory of a run of other models",
     {"run_name": "pair", "league": {}, "opponent_sampling_strategy": "pfsp",
      "train_envs": [{**TRAIN, "num_actors": 1}]},
     r"runs/pair already holds checkpoints of an earlier run"),
    # one setting, two values
    ("temperature and vllm_config['temperature'] differ", {"temperature": 0.7, "vllm_config": {"temperature": 0.5}},
     r"temperature is given twice: as build\(temperature=0.7\) and as vllm_config\['temperature'\]=0.5"),
    ("vllm_config['max_tokens'] and max_generation_len differ", {"vllm_config": {"max_tokens": 32}},
     r"vllm_config\['max_tokens'\]=32 and max_generation_len=16 are one setting"),
    ("vllm_config['lora_config'] and lora_config differ",
     {"lora_config": {"lora_rank": 4}, "vllm_config": {"lora_config": {"lora_rank": 8}}},
     r"lora_config=\{'lora_rank': 4\} and the inference settings' lora_config .* differ"),
    # the nested model declaration's own fields, and the env specs' newer ones
    ("models[0] name with a slash", {"models": [{"name": "a/b"}]}, r"models\[0\]: name must be a lineage name"),
    ("models[0] inference a list", {"models": [{"inference": [1]}]}, "inference must be a mapping"),
    ("models[0] lora a number", {"models": [{"lora": 5}]}, r"models\[0\]: lora must be a dict or None"),
    ("models[0] warm_start a number", {"models": [{"warm_start": 5}]}, r"models\[0\]: warm_start must be a mapping"),
    ("models[0] learner_device", {"models": [{"learner_device": "gpu"}]}, r"models\[0\]: learner_device must be"),
    ("models[0] num_learner_workers 0", {"models": [{"num_learner_workers": 0}]},
     r"models\[0\]: num_learner_workers must be an integer >= 1"),
    ("models[0] algorithm unknown", {"models": [{"algorithm": "dqn"}]}, r"models\[0\]: algorithm must be one of"),
    ("train env seats name no model", {"train_envs": [{**TRAIN, "seats": ["x", "y"]}]},
     r"train_envs\[0\].seats names \['x', 'y'\], which are not a declared model"),
    ("train env weight 0", {"train_envs": [{**TRAIN, "weight": 0}]},
     r"train_envs\[0\]: weight must be a finite number"),
    ("eval env model not declared", {"eval_envs": [{**EVAL, "model": "nobody"}]},
     r"eval_envs\[0\].model is 'nobody', not a declared model"),
    *[(f"learner: {d}", v, m) for d, v, m in LEARNER_CASES],
    *[(f"vllm_config: {d}", {"vllm_config": v}, m) for d, v, m in ENGINE_CASES],
]
ENV_CASES = [  # dataset environments and round specs, as build(train_envs=[...]) gets them; see _environment
    ("single-turn num_samples 0", ("single", {"num_samples": 0}), "num_samples must be an integer >= 1"),
    ("single-turn eval_samples a float", ("single", {"eval_samples": 1.5}), "eval_samples must be an integer"),
    ("single-turn model a number", ("single", {"model": 5}), "model must be a trainable model's name or None"),
    ("dataset env seed negative", ("single", {"seed": -1}), "seed must be an integer >= 0"),
    ("dataset env seed 2**64", ("single", {"seed": BIG}), "seed" + TOO_LARGE),
    ("dataset env weight 0", ("single", {"weight": 0}), r"weight must be a finite number in \(0, inf\)"),
    ("dataset env train_data file missing", ("single", {"train_data": "no/such.jsonl"}), "no such data file"),
    ("dataset env prompt_column missing", ("single", {"prompt_column": "nope"}),
     "prompt column 'nope' is not a column"),
    ("dataset env prompt_format field missing", ("single", {"prompt_format": "{nope}", "prompt_column": None}),
     r"prompt template field \{nope\} is not a column"),
    ("dataset env without data", ("single", {"train_data": None}), "has neither train_data nor eval_data"),
    ("dataset env eval set name with a slash", ("single", {"eval_data": {"a/b": "DATA"}}), "an eval set name must be"),
    ("dataset env without reward functions", ("single", {"reward_functions": []}),
     "needs at least one reward function"),
    ("dataset env prompt_template unknown", ("single", {"prompt_template": "nope"}), "unknown prompt template 'nope'"),
    ("dataset env action_extraction unknown", ("single", {"action_extraction": "nope"}), "unknown action extraction"),
    ("dataset env two with one name", ("twice", {}), "two environments are named 'e'; names must be distinct"),
    ("round spec cut short", ("collab", {"round_spec": "Bob ->"}), "expected an actor name or '\\(' at position 6"),
    ("round spec unknown actor", ("collab", {"round_spec": "Bob -> Alcie"}), "unknown actor 'Alcie' at position 7"),
    ("round spec backwards range", ("collab", {"round_spec": "Bob*(3..1)"}), "a range must not run backwards"),
    ("round spec a number", ("collab", {"round_spec": 5}), "a round spec must be a string"),
    ("collaborative shared_reward a string", ("collab", {"shared_reward": "no"}),
     "shared_reward must be true or false"),
    ("collaborative without participants", ("collab", {"participants": []}), "needs participants with distinct names"),
    ("parallel participants 1", ("parallel", {"participants": 1}), "needs at least 2 participants, got 1"),
    ("parallel combiner not callable", ("parallel", {"combiner": 5}), "combiner must be a function"),
    ("parallel participant_reward unknown", ("parallel", {"participant_reward": "x"}),
     "participant_reward must be one"),
]


def _case(kind: str, row) -> object:
    marks = getattr(row, "marks", ())
    desc, value, match = row.values if hasattr(row, "marks") else row
    return pytest.param(kind, value, match, id=f"{kind}: {desc}", marks=marks)


CASES = [_case(kind, row) for kind, rows in [("build", BUILD_CASES), ("train_env", TRAIN_ENV_CASES),
                                             ("eval_env", EVAL_ENV_CASES), ("yaml", YAML_CASES),
                                             ("start", START_CASES), ("build", RANGE_CASES),
                                             ("env", ENV_CASES), ("quickstart", QUICKSTART_CASES),
                                             ("cli", CLI_CASES)]
         for row in rows]


def every_build_setting() -> set[str]:
    """Every name a build() or start() setting goes by, read from the declarations: the flat and nested
    arguments and every field of the sections they fill (unstable.run.arguments.DECLARED: a model
    declaration, the learner, buffer, samplers, tracker, failure budget, API opponents, the run), every
    registered learner's config, the league, the env specs, every vllm_config key and engine setting, and the
    LoRA keys; not the fields the run itself sets (device, output_dir, the inference actors' resources ...)."""
    import dataclasses

    from unstable.games.specs import EvalEnvSpec, TrainEnvSpec
    from unstable.inference.engine_settings import ENGINE_SETTINGS, VLLM_CONFIG_KEYS
    from unstable.learners.catalog import available_learners, resolve_learner
    from unstable.learners.config import DEFAULT_LORA_CFG
    from unstable.run.arguments import DECLARED
    from unstable.run.config import RUN_LEARNER_FIELDS
    from unstable.run.config_file import START_KEYS, build_keys
    from unstable.samplers.exploiters import LeagueConfig

    learners = [resolve_learner(name).config_cls for name in available_learners()]
    classes = [LeagueConfig, TrainEnvSpec, EvalEnvSpec, *learners]
    names = build_keys() | set(START_KEYS) | {f.name for cls in classes for f in dataclasses.fields(cls)}
    names |= {name for section, fields in DECLARED.items() if section != "inference" for name in fields}
    names |= {*VLLM_CONFIG_KEYS, "backend", "num_actors", *ENGINE_SETTINGS, *DEFAULT_LORA_CFG}
    return names - RUN_LEARNER_FIELDS


def test_the_table_covers_every_setting():
    """A setting without a case here fails this test: a new build() setting comes with its bad inputs."""
    assert len(CASES) >= 60
    text = repr([c.values for c in CASES])
    names = every_build_setting()
    assert {"num_learner_workers", "mode", "checkpoint_transport", "models", "gpu_memory_utilization", "gamma",
            "weight", "seats", "group_by"} <= names  # the enumeration reaches the nested and newer settings
    missing = [k for k in sorted(names) if not re.search(rf"\b{k}\b", text)]
    assert not missing, f"no bad-input case for {missing}"


@pytest.fixture(scope="module")
def bad_paths(tmp_path_factory) -> str:
    """Broken model and adapter directories: what a typo'd path or a half-copied checkpoint looks like."""
    root = tmp_path_factory.mktemp("bad")
    files = {
        "empty": {},
        "corrupt-model": {"config.json": "{not json"},
        "adapter": {"adapter_config.json": json.dumps({"peft_type": "LORA", "r": 4}), "adapter_model.safetensors": ""},
        "no-adapter-config": {"adapter_model.safetensors": ""},
        "corrupt-adapter": {"adapter_config.json": '{"r": 4', "adapter_model.safetensors": ""},
        "adapter-no-weights": {"adapter_config.json": "{}"},
        "list-adapter": {"adapter_config.json": "[1]", "adapter_model.bin": ""},
        "yaml-dir": {"x": ""},
        "garbage-adapter": {"adapter_config.json": json.dumps({"peft_type": "LORA", "r": 4,
                                                               "target_modules": ["q_proj"]}),
                            "adapter_model.safetensors": "not a safetensors file"},
    }
    for name, content in files.items():
        (root / name).mkdir()
        for file, text in content.items():
            (root / name / file).write_text(text)
    (root / "a-file").write_text("not a directory")
    (root / "runs" / "old" / "checkpoints" / "ckpt-1").mkdir(parents=True)  # an earlier run's, under runs_dir
    for run, model in (("league", "model"), ("pair", "alice")):  # runs of several models: checkpoints/<model>/
        (root / "runs" / run / "checkpoints" / model / "ckpt-1").mkdir(parents=True)
    (root / "read-only").mkdir(mode=0o555)
    (root / "binary.yaml").write_bytes(b"\xff\xfe\x00model_name: \x80\x81")
    return str(root)


def _fill(value, subs: dict[str, str]):
    if isinstance(value, str):
        for key, sub in subs.items():
            value = value.replace(key, sub)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, subs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_fill(v, subs) for v in value)
    return value


@pytest.mark.parametrize(("kind", "value", "match"), CASES)
def test_bad_input_is_a_clear_error_before_ray(kind, value, match, tiny_model_dir, bad_paths, tmp_path, no_ray):
    subs = {"$MODEL": tiny_model_dir, "$TMP": bad_paths, "$DIR": os.path.join(bad_paths, "yaml-dir"),
            "$BINARY": os.path.join(bad_paths, "binary.yaml")}
    value = _fill(value, subs)
    with pytest.raises(ValueError, match=match):
        if kind == "build":
            unstable.build(**{**_fill(VALID, subs), **value})
        elif kind in ("train_env", "eval_env"):
            name, base = ("train_envs", TRAIN) if kind == "train_env" else ("eval_envs", EVAL)
            unstable.build(**{**_fill(VALID, subs), name: [{**base, **value}]})
        elif kind == "yaml":
            text, overrides = value
            path = text if text in subs.values() else str(tmp_path / "c.yaml")
            if path != text:
                (tmp_path / "c.yaml").write_text(text)
            build_kwargs, _ = load_config(path, overrides)  # start()'s settings are checked here too
            unstable.build(**build_kwargs)
        elif kind == "env":
            unstable.build(**{**_fill(VALID, subs), "train_envs": _environment(*value), "eval_envs": []})
        elif kind == "cli":
            from unstable.cli.commands import build_parser

            argv, files = value
            for name, text in {**RUN_FILES, **files}.items():
                (tmp_path / "run" / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / "run" / name).write_text(_fill(text, subs))
            args = build_parser().parse_args([a.replace("$RUN", str(tmp_path / "run")) for a in argv])
            args.fn(args)  # what main() runs, and answers a ValueError of in one line
        elif kind == "quickstart":
            from unstable.cli.quickstart import load_quickstart_config

            (tmp_path / "q.yaml").write_text(value)
            load_quickstart_config(str(tmp_path / "q.yaml"))
        else:
            Run.start(object.__new__(Run), **value)  # no actors: a check that passed would fail on self.actors


@unstable.reward_function(name="correct")
def _correct(completion: str, answer: str) -> float:
    return float(completion.strip() == str(answer))


def _environment(kind: str, kwargs: dict) -> list:
    """The environments of an ``env`` case: ``kwargs`` over a valid one of that kind (``"twice"``: two
    valid single-turn environments of one name)."""
    from unstable.environments import (
        CollaborativeEnvironment,
        ParallelEnvironment,
        Participant,
        SingleTurnEnvironment,
        arithmetic_dataset,
    )

    data = arithmetic_dataset(20)
    kwargs = {k: ({n: data for n in v} if k == "eval_data" else v) for k, v in kwargs.items()}
    common = {"reward_functions": [_correct], "train_data": data, "prompt_column": "question"}
    if kind in ("single", "twice"):
        env = SingleTurnEnvironment("e", **{**common, **kwargs})
        return [env, SingleTurnEnvironment("e", **common)] if kind == "twice" else [env]
    if kind == "collab":
        seats = [Participant("Bob"), Participant("Alice")]
        return [CollaborativeEnvironment("c", **{"round_spec": "Bob -> Alice", "participants": seats, **common,
                                                 **kwargs})]
    return [ParallelEnvironment("p", **{"participants": 2, "combiner": lambda prompt, answers: answers[0], **common,
                                        **kwargs})]


def test_valid_inputs_still_pass(tiny_model_dir, adapters, bad_paths, tmp_path, no_ray, monkeypatch):
    """The checks are not stricter than the settings users write: paths, names and YAML's 1e-3."""
    from unstable.run.config import BuildConfig

    subs = {"$MODEL": tiny_model_dir, "$TMP": bad_paths}
    ok = BuildConfig(**_fill({**VALID, **VS_FIXED, "fixed_opponents": "random",
                              "eval_envs": [{**EVAL, "fixed_opponent": adapters[0]}],
                              "lora_config": {"target_modules": ("q_proj",), "lora_dropout": 0.05},
                              "vllm_config": {"temperature": 0, "top_p": 1.0, "max_tokens": 16},
                              "learner_device": "cpu", "temperature": 0}, subs))
    assert ok.samplers.fixed_opponents == ("random",) and ok.eval_envs[0].fixed_opponent == adapters[0]
    strong_evals = [{**EVAL, "fixed_opponent": "optimal"},
                    {**EVAL, "env_id": "KuhnPoker-v0-train", "fixed_opponent": "nash"},
                    {**EVAL, "env_id": "ConnectFour-v0-train", "fixed_opponent": "heuristic"}]
    strong = BuildConfig(**_fill({**VALID, **VS_FIXED, "fixed_opponents": ["heuristic", "optimal"],
                                  "eval_envs": strong_evals}, subs))
    assert strong.samplers.fixed_opponents == ("heuristic", "optimal")
    assert [s.fixed_opponent for s in strong.eval_envs] == ["optimal", "nash", "heuristic"]
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test-not-a-real-key-000000")
    BuildConfig(**_fill({**VALID, "eval_envs": [{**EVAL, "fixed_opponent": "google/gemini-2.0-flash-lite-001"}]}, subs))
    path = tmp_path / "c.yaml"
    path.write_text(_fill(BASE_YAML, subs) + "learning_rate: 1e-3\nmax_tokens_note_is_not_a_key: 1\n")
    with pytest.raises(ConfigError, match="max_tokens_note_is_not_a_key"):  # unknown, but not taken for a key
        load_config(str(path))
    path.write_text(_fill(BASE_YAML, subs) + "learning_rate: 1e-3\n")
    build_kwargs, _ = load_config(str(path), ["temperature=5e-1"])
    assert build_kwargs["learning_rate"] == 1e-3 and build_kwargs["temperature"] == 0.5
    assert BuildConfig(**build_kwargs).models[0].learner["learning_rate"] == 1e-3


def test_exploitability_eval_off_as_docs_evaluation_md_writes_it(tiny_model_dir, bad_paths, tmp_path, no_ray):
    """YAML reads an unquoted ``off`` as false: the documented ``exploitability_eval: off`` (and
    ``--set exploitability_eval=off``, and a quickstart config's) was refused as "got False"."""
    from unstable.cli.quickstart import load_quickstart_config
    from unstable.run.config import BuildConfig

    path = tmp_path / "c.yaml"
    path.write_text(_fill(BASE_YAML, {"$MODEL": tiny_model_dir, "$TMP": bad_paths}) + "exploitability_eval: off\n")
    for overrides in ([], ["exploitability_eval=off"]):
        build_kwargs, _ = load_config(str(path), overrides)
        assert BuildConfig(**build_kwargs).exploitability_eval == "off"
    path.write_text("exploitability_eval: off\n")
    assert load_quickstart_config(str(path)).exploitability_eval == "off"


@pytest.mark.parametrize("recipe", ["tictactoe-vs-heuristic.yaml", None])
def test_the_quickstart_seats_the_opponent_its_strategy_draws(recipe, tiny_model_dir, tmp_path, monkeypatch, no_ray):
    """The vs-heuristic recipe (strategy 'fixed') leaves the heuristic a seat; mirror self-play takes both."""
    from pathlib import Path

    import unstable.cli.quickstart as qs
    from unstable.run.config import BuildConfig

    built = []

    def build(**kwargs):
        built.append(BuildConfig(**kwargs))
        raise RuntimeError("stop here: no run in this test")

    monkeypatch.setattr(unstable, "build", build)
    cfg = qs.QuickstartConfig(out=str(tmp_path / "q"))
    if recipe:
        cfg = qs.load_quickstart_config(str(Path(__file__).parents[1] / "configs" / recipe), out=str(tmp_path / "q"))
    with pytest.raises(RuntimeError, match="stop here"):
        qs._train(tiny_model_dir, cfg, tmp_path / "q" / "run", say=lambda _: None)
    (spec,) = built[0].train_envs
    assert spec.num_actors == (1 if recipe else 2) and built[0].samplers.fixed_opponents == tuple(cfg.fixed_opponents)


@pytest.mark.parametrize(("strategy", "main_opponents"), [("mirror", "pfsp"), ("psro", "psro")])
def test_a_quickstart_league_reaches_build_with_one_strategy(strategy, main_opponents, tiny_model_dir, tmp_path,
                                                             monkeypatch, no_ray):
    """``league: {...}`` with the default strategy (mirror) passed the quickstart's checks, then build() refused
    it after the warm start and the first evaluation (main_opponents 'pfsp' against strategy 'mirror')."""
    import unstable.cli.quickstart as qs
    from unstable.run.config import BuildConfig

    built = []

    def build(**kwargs):
        built.append(BuildConfig(**kwargs))
        raise RuntimeError("stop here: no run in this test")

    monkeypatch.setattr(unstable, "build", build)
    cfg = qs.QuickstartConfig(out=str(tmp_path / "q"), opponent_sampling_strategy=strategy,
                              fixed_opponents=["heuristic"], league={"exploiters": 1})
    with pytest.raises(RuntimeError, match="stop here"):
        qs._train(tiny_model_dir, cfg, tmp_path / "q" / "run", say=lambda _: None)
    assert built[0].league.main_opponents == main_opponents
    assert [m.name for m in built[0].models] == ["model", "model-exploiter-1"]


def test_a_league_quickstart_evaluates_the_main_model_s_newest_checkpoint(tmp_path, monkeypatch):
    """A league keeps each model's checkpoints under checkpoints/<model>/; the quickstart looked in
    checkpoints/ itself and, after a whole run, said it had none. It now takes the main model's newest."""
    import unstable.cli.quickstart as qs

    for model, version in (("model", 2), ("model", 5), ("model-exploiter-1", 9)):
        ckpt = tmp_path / "run" / "checkpoints" / model / f"ckpt-{version}"
        ckpt.mkdir(parents=True)
        (ckpt / "COMPLETE").write_text("")

    class Run:
        run_dir = str(tmp_path / "run")

        def start(self, *args, **kwargs):
            pass

        def stop(self):
            pass

    monkeypatch.setattr(qs, "wait_with_progress", lambda *args: {})
    path, step = qs.train_to_checkpoint(Run(), 5, 1, 0, say=print, model="model")
    assert (path, step) == (str(tmp_path / "run" / "checkpoints" / "model" / "ckpt-5"), 5)
    with pytest.raises(RuntimeError, match=r"without a checkpoint in .*run/checkpoints$"):
        qs.train_to_checkpoint(Run(), 5, 1, 0, say=print)


def test_a_failed_build_leaves_ray_off_in_a_fresh_process(tiny_model_dir):
    """The strongest form of 'before any actor starts': in a new interpreter, Ray was never initialised."""
    code = (
        "import ray, unstable\n"
        "try:\n"
        f"    unstable.build(model_name={tiny_model_dir!r}, train_envs=[{TRAIN!r}], lora_config={{'lora_rank': 0}})\n"
        "except ValueError as exc:\n"
        "    print('error:', exc)\n"
        "print('ray initialised:', ray.is_initialized())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "error: lora_config['lora_rank'] must be an integer >= 1" in out.stdout
    assert "ray initialised: False" in out.stdout


@pytest.mark.parametrize(("settings", "line"), [
    ({"pfsp_weighting": "even"}, "pfsp_weighting='even' is a setting of opponent_sampling_strategy='pfsp'; this run "
                                 "has opponent_sampling_strategy='mirror', so it has no effect"),
    ({**VS_FIXED, "psro_every": 3}, "psro_every=3 is a setting of opponent_sampling_strategy='psro'; this run has "
                                    "opponent_sampling_strategy='fixed'"),
    ({"opponent_lag": 2}, "opponent_lag=2 is a setting of opponent_sampling_strategy='lagged'"),
    ({"env_curriculum_target": 0.7}, "env_curriculum_target=0.7 is a setting of env_sampling_strategy='curriculum'"),
])
def test_a_setting_of_a_strategy_not_in_use_is_one_warning_line_before_ray(settings, line, tiny_model_dir, bad_paths,
                                                                          capsys, no_ray):
    """Accepted with no word before: the run goes on (it has no effect), and the user hears it once."""
    with pytest.raises(AssertionError, match="Ray or its actors were started"):
        unstable.build(**_fill({**VALID, **settings}, {"$MODEL": tiny_model_dir, "$TMP": bad_paths}))
    out = capsys.readouterr().out
    assert out.count("unstable: warning:") == 1 and f"unstable: warning: {line}" in out
