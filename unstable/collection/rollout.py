"""The turn loop: play one TextArena game from a :class:`GameSpec` to the end.

Games are coroutines so that one process can keep many in flight while their model calls are
batched together. Two TextArena facts shape the loop:

* ``env.reset(seed=...)`` seeds the **global** ``random`` module and games keep drawing from it
  (cards, dice). Interleaved games would perturb each other, so each game gets its own saved
  ``random`` state that is swapped in around every env call (no ``await`` happens inside).
* After ``env.step`` TextArena has already cleared its invalid-move flag, so the loop records
  invalid moves by wrapping the state's ``set_invalid_move`` for this one env.

What fails a game and what stops the run: an error of TextArena (``make``, ``reset``, ``env``
stages), of the model or an API opponent (:class:`~unstable.policies.base.PolicyError`,
``policy``), a dead inference server (``inference``) or the turn cap (``limit``) fails this game
only, as a :class:`GameFailedError` the caller counts. Any other error a policy raises is a bug in
our code or the user's (a prompt template, an action extraction, a scripted policy): counting it
would fail every game the same way while the learner waits for data, so it propagates unchanged,
with a note naming the game, seed, turn and seat, and stops the run with its traceback.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import textarena as ta

from unstable.environments.base import ask_policy, game_failure
from unstable.games.envs import make_env
from unstable.policies.base import Policy, PolicyOutput, TurnContext
from unstable.records import FailedGame, GameFailedError, GameRecord, GameSpec, Turn

DEFAULT_MAX_TURNS = 1000


class _GameRandom:
    """Context manager that swaps this game's ``random`` state in and out of the global module."""

    def __init__(self) -> None:
        self._state: Any = None
        self._outer: Any = None

    def __enter__(self) -> None:
        self._outer = random.getstate()
        if self._state is not None:
            random.setstate(self._state)

    def __exit__(self, *exc: object) -> None:
        self._state = random.getstate()
        random.setstate(self._outer)


def _watch_invalid_moves(env: Any) -> list[str]:
    """Record every ``set_invalid_move`` call of this env's state; returns the (shared) list."""
    calls: list[str] = []
    state = env.state
    original = state.set_invalid_move

    def recording(*args: Any, **kwargs: Any) -> Any:
        reason = args[0] if args else kwargs.get("reason", "")
        calls.append(str(reason))
        return original(*args, **kwargs)

    state.set_invalid_move = recording
    return calls


def _as_text(observation: Any) -> str:
    """``-raw`` envs return message tuples; everything else already returns a string."""
    if isinstance(observation, str):
        return observation
    lines = []
    for item in observation:
        if isinstance(item, tuple) and len(item) >= 2:
            sender = "GAME" if item[0] == ta.GAME_ID else f"Player {item[0]}"
            lines.append(f"[{sender}] {item[1]}")
        else:
            lines.append(str(item))
    return "\n".join(lines)


def _seat_rng(seed: int, player_id: int) -> random.Random:
    return random.Random(f"{seed}:{player_id}")


async def play_game(spec: GameSpec, policies: Mapping[int, Policy]) -> GameRecord:
    """Play ``spec`` with ``policies[player_id]`` in each seat and return the finished record.

    Raises :class:`GameFailedError` (carrying a :class:`FailedGame` with the seed, the stage and
    the turns played so far) if TextArena raises, a policy raises :class:`PolicyError` or
    :class:`InferenceUnavailableError`, or the game exceeds its turn cap. Any other error of a
    policy is a bug and propagates as it is (see the module docstring).
    """
    missing = {a.player_id for a in spec.agents} - set(policies)
    if missing:
        raise ValueError(f"game {spec.game_id}: no policy for seats {sorted(missing)}")
    scope = _GameRandom()
    turns: list[Turn] = []
    started = time.perf_counter()
    stage = "make"
    try:
        with scope:
            env = make_env(spec.env_id)
            stage = "reset"
            env.reset(num_players=spec.num_players, seed=spec.seed)
            env.state.error_allowance = spec.error_allowance
            invalid_calls = _watch_invalid_moves(env)
    except Exception as exc:
        raise game_failure(spec, stage, exc, turns) from exc

    rngs = {a.player_id: _seat_rng(spec.seed, a.player_id) for a in spec.agents}
    max_turns = spec.max_turns or DEFAULT_MAX_TURNS
    done = False
    while not done:
        if len(turns) >= max_turns:
            raise game_failure(spec, "limit", RuntimeError(f"game exceeded {max_turns} turns"), turns)
        try:
            with scope:
                player_id, raw_obs = env.get_observation()
            observation = _as_text(raw_obs)
        except Exception as exc:
            raise game_failure(spec, "env", exc, turns) from exc
        policy = policies[player_id]
        ctx = TurnContext(spec.env_id, player_id, observation, len(turns), env, rngs[player_id])
        t0 = time.perf_counter()
        out: PolicyOutput = await ask_policy(policy, ctx, spec, turns)
        gen_seconds = out.gen_seconds or (time.perf_counter() - t0)
        n_invalid = len(invalid_calls)
        t1 = time.perf_counter()
        try:
            with scope:
                done, _info = env.step(action=out.action)
        except Exception as exc:
            raise game_failure(spec, "env", exc, turns) from exc
        invalid = len(invalid_calls) > n_invalid
        turns.append(
            Turn(
                turn_index=len(turns),
                player_id=player_id,
                observation=observation,
                prompt=out.prompt,
                completion_text=out.completion_text,
                action=out.action,
                format_ok=out.format_ok,
                invalid=invalid,
                policy=policy.ref,
                sample=out.sample,
                invalid_reason=invalid_calls[-1] if invalid else None,
                gen_seconds=gen_seconds,
                env_seconds=time.perf_counter() - t1,
            )
        )
    try:
        with scope:
            rewards, game_info = env.close()
        final_rewards = {int(pid): float(r) for pid, r in rewards.items()}
    except Exception as exc:
        raise game_failure(spec, "env", exc, turns) from exc
    return GameRecord(
        spec=spec,
        turns=tuple(turns),
        final_rewards=final_rewards,
        game_info={int(pid): dict(info) for pid, info in game_info.items()},
        wall_seconds=time.perf_counter() - started,
    )


def play_game_sync(spec: GameSpec, policies: Mapping[int, Policy]) -> GameRecord:
    """:func:`play_game` for code that is not already inside an event loop."""
    return asyncio.run(play_game(spec, policies))


async def play_games(
    specs: Iterable[GameSpec],
    make_policies: Callable[[GameSpec], Mapping[int, Policy]],
    *,
    max_concurrent: int = 32,
    on_done: Callable[[GameRecord | FailedGame], None] | None = None,
) -> list[GameRecord | FailedGame]:
    """Play many games with at most ``max_concurrent`` in flight; results in input order.

    Failed games come back as :class:`FailedGame` records (they never stop the others); a bug
    raised by a policy propagates (see the module docstring).
    """
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
    gate = asyncio.Semaphore(max_concurrent)

    async def one(spec: GameSpec) -> GameRecord | FailedGame:
        """Play ``spec`` once a slot is free; its record, or its :class:`FailedGame` if it failed."""
        async with gate:
            try:
                result: GameRecord | FailedGame = await play_game(spec, make_policies(spec))
            except GameFailedError as err:
                result = err.failure
        if on_done is not None:
            on_done(result)
        return result

    return list(await asyncio.gather(*(one(s) for s in specs)))
