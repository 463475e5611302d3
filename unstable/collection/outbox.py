"""The collector's outbox: finished games on their way to the buffers, the scheduler and the tracker, in batches.

Sent one by one, every finished game cost the collector several Ray round trips (the buffer, the
scheduler, which waited for the registry, the tracker), each awaited in turn. The outbox holds the
games back and sends them together, so a run pays a few round trips per batch:

* train games to the buffer of each model whose seats they collected (``add_games``);
* every result, train, eval or failed, to the scheduler (``update_many``), which rates them in the
  registry in one call;
* every result to the tracker (``log_games``), not awaited.

A batch goes out once ``flush_games`` games are held or the oldest has waited ``flush_interval_s``
(the collector asks :meth:`Outbox.due`), and always when collection stops (:meth:`Outbox.close`).

Pipelined. A batch's calls are all started at once (:func:`~unstable.utils.calls.submit`), so the
buffers, the scheduler and the tracker work on it in parallel while the collector plays the next
games; the next flush first waits for their answers (one batch in flight at a time, in order). An
error of a component is raised by that wait: by the next flush, by :meth:`Outbox.close`, or at once
when every component is a local object. Each part of a batch is sent once whatever happens to the
others, so one component's error never makes another miss or see a game twice.

``trajectories_sent`` (in the collector's counters) counts the player trajectories a buffer
acknowledged; a collaborator without the batched method gets one call per game.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from unstable.records import FailedGame, GameRecord, player_trajectories
from unstable.utils.calls import fire, has_method, submit


class Outbox:
    """See the module docstring. ``buffers`` maps a model (``None``: the only one) to its buffer;
    ``counts`` is the collector's counter dict, where ``trajectories_sent`` (and, per model,
    ``trajectories_sent/<name>``) are added up."""

    def __init__(self, buffers: dict[str | None, Any], scheduler: Any, tracker: Any, counts: dict[str, int], *,
                 flush_games: int, flush_interval_s: float):
        self.buffers, self.scheduler, self.tracker, self.counts = buffers, scheduler, tracker, counts
        self.flush_games, self.flush_interval_s = flush_games, flush_interval_s
        self._games: dict[str | None, list[GameRecord]] = {name: [] for name in buffers}
        self._results: list[GameRecord | FailedGame] = []
        self._since: float | None = None  # when the oldest held game was held
        # the batch in flight: (model name or None for the scheduler, its games, the answers to await)
        self._in_flight: list[tuple[str | None, list[GameRecord], list[Awaitable[Any]]]] = []
        self.sent_games = self.sent_steps = 0  # train games the one buffer took, and the steps they made
        self._batched = {"add_games": {name: has_method(b, "add_games") for name, b in buffers.items()},
                         "update_many": has_method(scheduler, "update_many"),
                         "log_games": tracker is not None and has_method(tracker, "log_games")}

    def __len__(self) -> int:
        """Games held (not sent yet)."""
        return len(self._results)

    def hold(self, result: GameRecord | FailedGame, models: list[str | None]) -> None:
        """Hold a finished game: for the scheduler and the tracker, and for the buffers of ``models``."""
        for name in models:
            self._games[name].append(result)
        self._results.append(result)
        if self._since is None:
            self._since = time.monotonic()

    def due(self) -> bool:
        """Whether the held games should go out now (``flush_games`` held, or the oldest is old enough)."""
        return bool(self._results) and (len(self._results) >= self.flush_games or
                                        time.monotonic() - self._since >= self.flush_interval_s)

    def wait_s(self, longest: float) -> float:
        """How long the collector may wait for a game before the held ones are due (at most ``longest``)."""
        if self._since is None:
            return longest
        return min(longest, max(0.0, self._since + self.flush_interval_s - time.monotonic()))

    async def flush(self) -> None:
        """Wait for the batch in flight, then start sending what is held (see the module docstring)."""
        await self.settle()
        for name in self.buffers:
            if self._games[name]:
                games, self._games[name] = self._games[name], []
                self._in_flight.append((name, games, self._to_buffer(name, games)))
        if self._results:
            results, self._results, self._since = self._results, [], None
            self._in_flight.append((None, [], self._to_scheduler(results)))
            self._to_tracker(results)
        if all(isinstance(a, asyncio.Future) and a.done() for _, _, answers in self._in_flight for a in answers):
            await self.settle()  # local components answered already: their errors come out now

    async def settle(self) -> None:
        """Wait for every answer of the batch in flight; count what the buffers took; raise the first error."""
        in_flight, self._in_flight = self._in_flight, []
        first: BaseException | None = None
        for name, games, answers in in_flight:
            for i, answer in enumerate(answers):
                try:
                    steps = await answer
                except Exception as exc:  # the others still count; the first error is raised below
                    first = first or exc
                    continue
                if games:  # a buffer's answer: one for the batch, or one per game
                    taken = games if len(answers) == 1 else [games[i]]
                    self._count_sent(name, taken)
                    if name is None and isinstance(steps, int):  # add_game(s) answer the steps they made
                        self.sent_games += len(taken)
                        self.sent_steps += steps
        if first is not None:
            raise first

    async def close(self) -> None:
        """Send what is held and wait until every component has it."""
        await self.flush()
        await self.settle()

    def _to_buffer(self, name: str | None, games: list[GameRecord]) -> list[Awaitable[Any]]:
        buffer = self.buffers[name]
        if self._batched["add_games"][name]:
            return [_started(buffer, "add_games", games)]
        return [_started(buffer, "add_game", game) for game in games]

    def _to_scheduler(self, results: list[GameRecord | FailedGame]) -> list[Awaitable[Any]]:
        if self._batched["update_many"]:
            return [_started(self.scheduler, "update_many", results)]
        return [_started(self.scheduler, "update", result) for result in results]

    def _to_tracker(self, results: list[GameRecord | FailedGame]) -> None:
        if self.tracker is None:
            return
        if self._batched["log_games"]:
            fire(self.tracker, "log_games", results)
            return
        for result in results:
            fire(self.tracker, "log_game", result)

    def _count_sent(self, name: str | None, games: list[GameRecord]) -> None:
        sent = sum(len(player_trajectories(game, lineage=name)) for game in games)
        self.counts["trajectories_sent"] += sent
        if name is not None:
            self.counts[f"trajectories_sent/{name}"] += sent


def _started(obj: Any, method: str, *args: Any) -> Awaitable[Any]:
    """:func:`submit`, with a local object's error kept for the await (so the other parts still go out)."""
    try:
        return submit(obj, method, *args)
    except Exception as exc:  # raised again by Outbox.settle
        failed = asyncio.get_running_loop().create_future()
        failed.set_exception(exc)
        return failed
