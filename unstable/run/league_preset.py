"""The league preset, ``build(league={...})``: a main model and its main exploiters, in ordinary settings.

:func:`expand_league` is the one place the preset becomes settings, before anything else reads them,
so ``config.json`` shows what it became:

* ``models``: the main model (the first declared) and ``exploiters`` copies of its declaration named
  ``<main>-exploiter-<i>`` (same base model, warm start, LoRA, learner and inference settings);
* ``train_envs``: each given train env once per model, with ``seats`` ``[<model>, "opponent", ...]``
  (the model learns from one seat; the model sampler fills the others);
* ``samplers.opponent_sampling_strategy``: ``league['main_opponents']`` (``"pfsp"``): the main model's
  opponents, drawn from its past checkpoints, the exploiters' checkpoints and ``fixed_opponents``;
* ``league``: the preset's settings with every default filled in.

The settings it expands into are read back as they are (a resumed run's ``config.json``, or a
config that declares the exploiters itself): the preset checks them instead of expanding again.
What the ordinary settings cannot say is wired by :func:`league_model_sampler` (an exploiter's
opponent is the main model's newest checkpoint) and :func:`reset_rules` (each exploiter's learner
runs :class:`~unstable.samplers.exploiters.ExploiterReset`). See :mod:`unstable.samplers.exploiters`
for the rules and the paper.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from unstable.games.specs import OPPONENT_SEAT, TrainEnvSpec
from unstable.samplers.exploiters import ExploiterModelSampler, ExploiterReset, LeagueConfig
from unstable.utils.schema import relabel, unknown_names

DEFAULT_MODEL_NAME = "model"  # a declaration without ``name`` (ModelConfig's default)


def league_config(value: Any) -> LeagueConfig | None:
    """``league`` as a :class:`LeagueConfig`: a mapping of its fields, a LeagueConfig, or ``None`` (no league)."""
    if value is None or isinstance(value, LeagueConfig):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"league must be a mapping of league settings (e.g. {{'exploiters': 1}}) or None, "
                         f"got {type(value).__name__}")
    known = [f.name for f in dataclasses.fields(LeagueConfig)]
    unknown = [k for k in value if k not in known]
    if unknown:
        raise ValueError(unknown_names("league settings", unknown, known))
    try:
        return LeagueConfig(**value)
    except ValueError as exc:
        raise ValueError(relabel(str(exc), {k: f"league['{k}']" for k in known})) from None


def expand_league(nested: dict[str, Any]) -> tuple[dict[str, Any], LeagueConfig | None]:
    """build()'s nested arguments with the ``league`` preset expanded (see the module docstring), and the
    preset's config (``None`` without one). Already expanded settings are checked and kept."""
    league = league_config(nested.get("league"))
    if league is None:
        return nested, None
    out = dict(nested)
    models = [dict(m) for m in nested.get("models") or [{}]]
    main = models[0].get("name", DEFAULT_MODEL_NAME)
    exploiters = league.exploiter_names(main)
    declared = [m.get("name", DEFAULT_MODEL_NAME) for m in models]
    if declared == [main]:
        models += [{**copy.deepcopy(models[0]), "name": name} for name in exploiters]
    elif declared != [main, *exploiters]:
        raise ValueError(f"league: declare the main model alone (it is models[0]); the preset adds its exploiters "
                         f"{exploiters}. Got models {declared}")
    elif league.exploiter_reset == "main":
        _check_same_adapter(models)
    out["models"] = models
    out["train_envs"] = _league_train_envs(nested.get("train_envs"), main, exploiters)
    samplers = dict(nested.get("samplers") or {})
    strategy = samplers.setdefault("opponent_sampling_strategy", league.main_opponents)
    if strategy != league.main_opponents:
        raise ValueError(f"league['main_opponents'] is {league.main_opponents!r}, but opponent_sampling_strategy is "
                         f"{strategy!r}: in a league the main model's opponents are drawn by main_opponents; "
                         "leave opponent_sampling_strategy out")
    out["samplers"] = samplers
    out["league"] = dataclasses.asdict(league)
    return out, league


def _check_same_adapter(models: list[dict]) -> None:
    """``exploiter_reset="main"`` loads the main model's adapter into each exploiter: same base and LoRA."""
    main = models[0]
    for m in models[1:]:
        for key in ("model_name", "lora"):
            if m.get(key) != main.get(key):
                raise ValueError(f"league['exploiter_reset']='main' loads the main model's adapter into "
                                 f"{m.get('name')!r}, whose {key} ({m.get(key)!r}) differs from the main model's "
                                 f"({main.get(key)!r}): give them the same, or use exploiter_reset='warm_start'")


def _league_train_envs(value: Any, main: str, exploiters: list[str]) -> list:
    """Each train env once per model (seated ``[model, "opponent", ...]``), or, when every spec already has
    seats, the given specs, checked: each seats one model, an exploiter only against ``"opponent"``."""
    if isinstance(value, dict | TrainEnvSpec):
        value = [value]
    if not isinstance(value, list | tuple) or not value or not all(isinstance(s, dict | TrainEnvSpec) for s in value):
        raise ValueError(f"league: train_envs must be a non-empty list of TrainEnvSpec (or mappings of its fields); "
                         f"the preset seats each model in each of them. Got {value!r}")
    seats = [s.get("seats") if isinstance(s, dict) else s.seats for s in value]
    if all(s is None for s in seats):
        return [_seated(spec, name) for name in (main, *exploiters) for spec in value]
    if any(s is None for s in seats):
        raise ValueError("league: give train_envs without seats (the preset seats each model), or every one with "
                         "the seats the preset writes")
    for i, spec_seats in enumerate(seats):
        named = [s for s in spec_seats if s != OPPONENT_SEAT]
        if len(set(named)) != 1 or named[0] not in (main, *exploiters):
            raise ValueError(f"league: train_envs[{i}].seats {list(spec_seats)} must seat one of the league's models "
                             f"{[main, *exploiters]} against 'opponent' seats")
    for name in (main, *exploiters):
        if not any(name in s for s in seats):
            raise ValueError(f"league: no train env seats {name!r}; leave out seats to let the preset seat every model")
    return list(value)


def _seated(spec: dict | TrainEnvSpec, name: str) -> dict | TrainEnvSpec:
    """``spec`` with one seat for model ``name`` and ``"opponent"`` in the others."""
    players = spec.get("num_players") if isinstance(spec, dict) else spec.num_players
    if not isinstance(players, int) or isinstance(players, bool) or players < 2:
        raise ValueError(f"league: every train env needs at least 2 players (an exploiter plays the main model), "
                         f"got num_players={players!r}")
    seats = (name, *([OPPONENT_SEAT] * (players - 1)))
    if isinstance(spec, dict):
        return {**spec, "num_actors": 1, "seats": list(seats)}
    return dataclasses.replace(spec, num_actors=1, seats=seats)


def league_model_sampler(league: LeagueConfig | None, models: Any, base: Any, seed: int) -> Any:
    """The run's model sampler: ``base`` (the main model's strategy), with the exploiters' seats facing
    the main model's newest checkpoint when the run is a league."""
    if league is None:
        return base
    main = models[0].name
    return ExploiterModelSampler(base, main, league.exploiter_names(main), rng_seed=seed)


def reset_rules(league: LeagueConfig | None, models: Any) -> dict[str, ExploiterReset]:
    """Each exploiter's reset rule, by model name (none without a league)."""
    if league is None:
        return {}
    main = models[0].name
    return {name: ExploiterReset(league, name, main) for name in league.exploiter_names(main)}
