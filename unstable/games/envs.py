"""Which TextArena env ids can be played here, and clear errors for the ones that cannot.

TextArena 0.7.4 registers ~700 ids, but some cannot run on an offline Python 3.11 machine: word
games download NLTK corpora when their module is imported, a few games need an OpenRouter key for
a jury or game master, some modules use Python 3.12 f-string syntax, and a handful are broken in the
wheel. :func:`check_env_id` rejects those up front with the reason and some ids that do work,
then makes and resets the env once (with the requested player count) so anything else TextArena
would refuse is refused at spec creation rather than in the middle of a run.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import random
import re
import sys

import textarena as ta
from textarena.envs.registration import ENV_REGISTRY

from unstable.games import openspiel

# Games known to work offline on Python 3.11 with TextArena 0.7.4 (two-player unless noted);
# offered as suggestions.
RECOMMENDED_ENV_IDS = (
    "TicTacToe-v0-train",
    "KuhnPoker-v0-train",
    "SimpleTak-v0-train",
    "ConnectFour-v0-train",
    "Nim-v0-train",
    "SimpleNegotiation-v0-train",
    "Poker-v0-train",
    "Snake-v0-train",
)

_NEEDS_NLTK = {
    "Codenames",
    "DontSayIt",
    "Hangman",
    "LetterAuction",
    "WordChains",
    "WordLadder",
    "WordSearch",
    "Wordle",
    "SpellingBee",
}
_NEEDS_API_KEY = {"Debate", "ScenarioPlanning", "GuessWho", "TwentyQuestions"}
_BROKEN_IN_WHEEL = {
    "ScorableGames": "its games_descriptions/ folder is missing from the textarena 0.7.4 wheel",
    "UsedCarNegotiation": "its instructions/ folder is missing from the textarena 0.7.4 wheel",
    "UsedCar": "it is registered with a module that does not exist in textarena 0.7.4",
    "CharacterConclave": "it calls State.add_observation() with a missing argument in textarena 0.7.4",
    "BabyAiText": "it needs the 'gym' package, which textarena does not declare",
}


class EnvNotAvailableError(ValueError):
    """An env id that cannot be played here; the message says why and what to use instead."""


def base_name(env_id: str) -> str:
    """``"TicTacToe-v0-train"`` -> ``"TicTacToe"``."""
    return re.split(r"-v\d", env_id, maxsplit=1)[0]


def _suggest(env_id: str) -> str:
    base = base_name(env_id)
    candidates = [i for i in ENV_REGISTRY if base_name(i) != base and _static_problem(i) is None]
    close = difflib.get_close_matches(env_id, candidates, n=8, cutoff=0.6)
    close = [i for i in close if _syntax_problem(i) is None][:3]
    recommended = [i for i in RECOMMENDED_ENV_IDS if base_name(i) != base][:4]
    picks = list(dict.fromkeys([*close, *recommended]))
    return "Ids that work here include: " + ", ".join(picks[:6]) + "."


@functools.cache
def _syntax_problem(env_id: str) -> str | None:
    """Compile (never execute) the env's module; report syntax this Python cannot read."""
    entry = ENV_REGISTRY[env_id].entry_point
    module_name = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    try:
        spec = importlib.util.find_spec(module_name)  # imports the parent package
    except SyntaxError as exc:
        return f"its package does not compile on this Python ({exc.msg}, line {exc.lineno})"
    except (ImportError, ValueError) as exc:
        return f"its module {module_name!r} cannot be found ({exc})"
    if spec is None or spec.origin is None:
        return f"its module {module_name!r} cannot be found"
    with open(spec.origin, encoding="utf-8") as fh:
        source = fh.read()
    try:
        compile(source, spec.origin, "exec")
    except SyntaxError as exc:
        if sys.version_info < (3, 12) and "f-string" in str(exc):
            return (
                f"its module uses Python 3.12 f-string syntax ({exc.msg}, line {exc.lineno}) and this is "
                f"Python {sys.version_info.major}.{sys.version_info.minor}; run on Python >= 3.12 to use it"
            )
        return f"its module has a syntax error in textarena {ta.__version__} ({exc.msg}, line {exc.lineno})"
    return None


@functools.cache
def _static_problem(env_id: str) -> str | None:
    base = base_name(env_id)
    if base in _NEEDS_NLTK:
        return (
            "it downloads NLTK word lists from the network when it is created, and this machine is "
            "offline (pre-provisioned NLTK_DATA is not supported)"
        )
    if base in _NEEDS_API_KEY:
        return "it needs an OpenRouter API key and network access for its jury or game master"
    if base in _BROKEN_IN_WHEEL:
        return _BROKEN_IN_WHEEL[base]
    return None


@functools.cache
def _probe(env_id: str, num_players: int) -> str | None:
    """Make and reset the env once; returns TextArena's complaint, if any."""
    return _start(env_id, num_players)[0]


@functools.cache
def _start(env_id: str, num_players: int) -> tuple[str | None, str]:
    """Make and reset the env once: TextArena's complaint (or ``None``) and the first observation."""
    problem = _syntax_problem(env_id)
    if problem is not None:
        return problem, ""
    state = random.getstate()  # reset() seeds the global RNG; leave the caller's untouched
    try:
        env = ta.make(env_id)
        env.reset(num_players=num_players, seed=0)
        observation = env.get_observation()[1]
    except Exception as exc:
        return f"TextArena could not start it with num_players={num_players}: {type(exc).__name__}: {exc}", ""
    finally:
        random.setstate(state)
    return None, observation if isinstance(observation, str) else str(observation)


def first_observation(env_id: str, num_players: int) -> str:
    """The first player's observation at the start of a game of ``env_id`` (seed 0; cached), for a check
    that a prompt template can read the game before any game is played."""
    check_env_id(env_id, num_players)
    return _start(env_id, num_players)[1]


def check_env_id(env_id: str, num_players: int | None = None) -> None:
    """Raise :class:`EnvNotAvailableError` unless ``env_id`` can be played here.

    With ``num_players`` the env is also made and reset once (a few milliseconds, cached). An
    ``openspiel:`` id (:mod:`unstable.games.openspiel`) is loaded by OpenSpiel and registered here.
    """
    if not isinstance(env_id, str) or not env_id:
        raise EnvNotAvailableError(f"env_id must be a non-empty string, got {env_id!r}")
    if openspiel.is_openspiel_id(env_id):
        _check_openspiel(env_id)
    if env_id not in ENV_REGISTRY:
        raise EnvNotAvailableError(
            f"unknown env id {env_id!r} (not registered in textarena {ta.__version__}). {_suggest(env_id)}"
        )
    problem = _static_problem(env_id)
    if problem is None and num_players is not None:
        problem = _probe(env_id, num_players)
    elif problem is None:
        problem = _syntax_problem(env_id)
    if problem is not None:
        raise EnvNotAvailableError(f"env {env_id!r} cannot be played here: {problem}. {_suggest(env_id)}")


def _check_openspiel(env_id: str) -> None:
    """Load and register an ``openspiel:`` id, so the checks below and ``ta.make`` see it."""
    try:
        openspiel.register(env_id)
    except (ImportError, ValueError) as exc:
        raise EnvNotAvailableError(f"env {env_id!r} cannot be played here: {exc}") from None


def make_env(env_id: str):
    """``ta.make(env_id)``, after registering an ``openspiel:`` id in this process (a Ray worker included)."""
    if openspiel.is_openspiel_id(env_id):
        openspiel.register(env_id)
    return ta.make(env_id)


def _register_own_envs() -> None:
    """The library's own variants of TextArena games, registered beside TextArena's (every process that
    imports this module, Ray workers included, has them)."""
    from unstable.games import kuhn_chips

    kuhn_chips.register()


_register_own_envs()
