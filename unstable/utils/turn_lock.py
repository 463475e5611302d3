"""The turn lock that learners sharing a device, and the collector in ``build(mode="sync")``, take turns with.

It lives apart from :mod:`unstable.learners` on purpose: ``build()`` runs it as a Ray actor of its own,
and that actor's process imports only this module (``unstable.learners`` would import torch,
transformers and PEFT, several seconds of CPU and ~0.5 GB for a lock).
"""

from __future__ import annotations


class TurnLock:
    """A lock that learners sharing a device hold while they update, and that the collector holds
    while its games run in ``build(mode="sync")`` (so collecting and training alternate).

    Plain Python; ``unstable.build()`` runs one as a threaded Ray actor (so one learner's blocked
    ``acquire`` does not hold up the other's ``release``) and hands it to the learners (and, in sync
    mode, to the collector, which polls :meth:`try_acquire` from its event loop instead of
    blocking it). ``stats()`` counts the turns it has let through, by holder."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self.turns: dict[str, int] = {}

    def acquire(self, holder: str = "") -> None:
        """Wait for the lock and take it, counting a turn for ``holder``."""
        self._lock.acquire()
        self.turns[holder] = self.turns.get(holder, 0) + 1

    def try_acquire(self, holder: str = "") -> bool:
        """Take the lock if it is free (never waits); whether it was taken."""
        if not self._lock.acquire(blocking=False):
            return False
        self.turns[holder] = self.turns.get(holder, 0) + 1
        return True

    def release(self) -> None:
        """Release the lock (``RuntimeError`` if it is not held)."""
        self._lock.release()

    def stats(self) -> dict[str, int]:
        """Turns let through so far, by holder."""
        return dict(self.turns)
