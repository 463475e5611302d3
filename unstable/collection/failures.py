"""The collector's failure budget: how many failed games a run tolerates before it stops.

A failed game (TextArena raised, the model or an API opponent failed, the turn cap was hit) is
counted, logged with its seed and replaced. One now and then is normal; every game failing is not:
it means something systematic (an API opponent that always answers 401, an env that always raises,
an inference backend that rejects every prompt), and a run that keeps going only hides it while
the learner waits for data that never comes. So the collector keeps one :class:`FailureCounter` for
train games and one for eval games (a broken eval opponent must not hide behind healthy train
games) and stops collection when either spends its :class:`FailureBudget`, raising
:class:`FailureBudgetSpentError` *from* the exception of the first failure that spent it, so the
user sees that error's traceback.

A streak is counted twice: over all games of a kind, and over the games in which one policy's
turn failed, which only a finished game that policy took a turn in breaks. A broken opponent
whose games sometimes end before its first turn (the evaluated model's first move was illegal)
still stops the run: before, those games broke the streak, the failures stayed near half of the
window, and the run went on with its eval numbers from the games the opponent never played.

Games dropped because their inference actor died (``stage="inference"``) are not the game's fault
and neither count nor break a streak. Bugs in our code (a template, an action extraction, a
scripted policy) never reach the budget: the turn loop lets them propagate and the run stops at the
first one (see :mod:`unstable.collection.rollout`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from unstable.records import FailedGame, GameFailedError, GameRecord
from unstable.utils.schema import check_fields, setting


@dataclass(frozen=True, slots=True)
class FailureBudget:
    """When collection gives up. Either check can be turned off with ``None``.

    The defaults are far from what a healthy run produces (a few failed games in thousands), yet a
    run where every game fails stops within 32 games, and one where most games fail within a window.
    """

    max_consecutive_failures: int | None = setting(32, ge=1, flat="max_consecutive_failures")
    """Stop after this many failed games in a row (per kind: train, eval), and after this many games
    in a row whose failure was one policy's turn, of the games that policy played."""
    max_failure_rate: float | None = setting(0.5, gt=0, le=1, flat="max_failure_rate")
    """Stop when more than this fraction of the last ``failure_rate_window`` games of a kind
    failed (judged only once that many have ended: a bad start is the streak check's job)."""
    failure_rate_window: int = setting(200, ge=1, flat="failure_rate_window")
    """Games the failure rate is measured over."""

    def __post_init__(self) -> None:
        check_fields(self)


class FailureBudgetSpentError(RuntimeError):
    """Too many games failed; raised from the first failure's exception, which ``first`` describes."""

    def __init__(self, message: str, first: GameFailedError):
        super().__init__(message)
        self.first = first.failure

    def __reduce__(self) -> tuple:
        """Pickled across Ray (the collector raises it, the driver's ``Run.wait()`` gets it): the
        default rebuilds it from the message alone, which fails, and the driver saw a Ray
        ``UnserializableException`` instead."""
        return _budget_spent_error, (str(self), self.first)


def _budget_spent_error(message: str, first: FailedGame | None) -> FailureBudgetSpentError:
    error = FailureBudgetSpentError.__new__(FailureBudgetSpentError)
    RuntimeError.__init__(error, message)
    error.first = first
    return error


class FailureCounter:
    """The outcomes of one kind of game (``"train"`` or ``"eval"``) against a :class:`FailureBudget`."""

    def __init__(self, budget: FailureBudget, kind: str):
        self.budget, self.kind = budget, kind
        self._recent: deque[GameFailedError | None] = deque(maxlen=budget.failure_rate_window)
        self._streak = 0
        self._streak_first: GameFailedError | None = None
        self._policy_streaks: dict[str, tuple[int, GameFailedError]] = {}  # uid -> (failed in a row, the first)

    def record(self, outcome: GameFailedError | GameRecord | None) -> None:
        """Count one ended game (a :class:`GameRecord` or ``None``: it finished); raise
        :class:`FailureBudgetSpentError` once the budget is spent. A dropped game
        (``stage="inference"``) is not recorded at all."""
        failure = outcome if isinstance(outcome, GameFailedError) else None
        if failure is not None and failure.failure.stage == "inference":
            return
        self._recent.append(failure)
        if failure is None:
            self._streak, self._streak_first = 0, None
            for turn in outcome.turns if isinstance(outcome, GameRecord) else ():
                self._policy_streaks.pop(turn.policy.uid, None)
            return
        self._streak += 1
        self._streak_first = self._streak_first or failure
        b = self.budget
        if b.max_consecutive_failures is not None and self._streak >= b.max_consecutive_failures:
            self._spent(f"{self._streak} {self.kind} games failed in a row "
                        f"(max_consecutive_failures={b.max_consecutive_failures})", self._streak_first)
        if failure.failure.policy is not None:
            uid = failure.failure.policy.uid
            count, first = self._policy_streaks.get(uid, (0, failure))
            self._policy_streaks[uid] = (count + 1, first)
            if b.max_consecutive_failures is not None and count + 1 >= b.max_consecutive_failures:
                self._spent(f"{count + 1} {self.kind} games failed in a row in a turn of {uid!r}, counting only "
                            f"the games it played (max_consecutive_failures={b.max_consecutive_failures})", first)
        if b.max_failure_rate is not None and len(self._recent) == b.failure_rate_window:
            failed = [f for f in self._recent if f is not None]
            if len(failed) > b.max_failure_rate * b.failure_rate_window:
                self._spent(f"{len(failed)} of the last {b.failure_rate_window} {self.kind} games failed "
                            f"(max_failure_rate={b.max_failure_rate})", failed[0])

    def _spent(self, what: str, first: GameFailedError) -> None:
        f = first.failure
        message = (f"collection stopped: {what}. The first of them: {f.describe()}. Its traceback is the cause "
                   "below (and in logs/failed_games.jsonl); if such failures are expected, raise the limit "
                   "in build() (None turns a check off).")
        raise FailureBudgetSpentError(message, first) from (first.__cause__ or first)
