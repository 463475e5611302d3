"""A reservoir of the policy's own past moves: NFSP's supervised-learning memory.

Vitter's algorithm R (1985): after ``n`` items were offered, each of them is in the reservoir with
probability ``capacity / n``, so a minibatch drawn from it is a uniform sample of the whole history,
which is what makes the network trained on it the *average* of the past policies (Heinrich & Silver
2016, arXiv 1603.01121, section 4). Plain Python, seeded, and its state is a dict a checkpoint keeps.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Reservoir(Generic[T]):
    """At most ``capacity`` items, a uniform sample of every item ever offered to :meth:`add`."""

    def __init__(self, capacity: int, seed: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.items: list[T] = []
        self.seen = 0  # items offered so far
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: T) -> None:
        """Algorithm R: keep the first ``capacity`` items, then the n-th replaces a random one with
        probability ``capacity / n``."""
        self.seen += 1
        if len(self.items) < self.capacity:
            self.items.append(item)
            return
        j = self._rng.randrange(self.seen)
        if j < self.capacity:
            self.items[j] = item

    def extend(self, items: Iterable[T]) -> None:
        for item in items:
            self.add(item)

    def sample(self, k: int) -> list[T]:
        """``min(k, len(self))`` distinct items, uniformly at random."""
        return self._rng.sample(self.items, min(k, len(self.items)))

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "items": list(self.items), "seen": self.seen, "rng": self._rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["capacity"] != self.capacity:
            raise ValueError(f"the saved reservoir holds up to {state['capacity']} items, this one "
                             f"{self.capacity}: resume with the same average_reservoir setting")
        self.items = list(state["items"])
        self.seen = int(state["seen"])
        self._rng.setstate(state["rng"])
