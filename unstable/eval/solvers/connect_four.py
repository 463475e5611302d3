"""Bounds on the exploitability of a ConnectFour policy from a depth-limited best response.

ConnectFour (6 x 7) has about 4.5e12 positions, too many for an exact best response, which would need
the policy's move distribution at every position it can reach. Searching only the first ``depth``
plies gives an **interval**, not an estimate: the best response's expected score (+1 win, 0 draw,
-1 loss, the responder's view) against the policy is at least the value of the depth-limited
expectimax that scores every unfinished position at the horizon -1 (a real strategy that plays the
best first ``depth`` plies and assumes the worst afterwards), and at most the one that scores them
+1 (max and expectation are monotone in the leaf values). Exploitability bounds are the seats'
means (Johanson et al., IJCAI 2011; Lanctot et al., NeurIPS 2017). The lower bound is what catches a
policy that misses wins and blocks; the upper bound stays near 1 until ``depth`` reaches the end
of most games, so it says little at depths that are cheap.

Positions are TextArena 0.7.4's ``game_state["board"]`` rows (top to bottom, ``"."`` empty) joined
into one 42-character string. Player 0 drops ``X`` and moves first (``ConnectFour/env.py``), so ``X``
is to move when the counts are equal. The table gives ``{column: probability}`` over open columns;
the mass left over is an invalid move, which loses the game (``unstable`` plays with
``error_allowance=0``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from unstable.policies.baselines import connect_four_winning_columns

ROWS, COLS = 6, 7
EMPTY_POSITION = "." * (ROWS * COLS)
ConnectFourTable = Mapping[str, Mapping[int, float]]
Bounds = tuple[float, float]
_TOLERANCE = 1e-9


def connect_four_to_move(position: str) -> str:
    """``"X"`` (player 0, first) when the counts are equal, else ``"O"``."""
    return "X" if position.count("X") == position.count("O") else "O"


def position_key(rows: Sequence[Sequence[str]]) -> str:
    """The table key of TextArena's ``game_state["board"]`` (6 rows of 7, ``"."`` empty)."""
    return "".join(cell for row in rows for cell in row)


def _rows(position: str) -> list[str]:
    return [position[r * COLS : (r + 1) * COLS] for r in range(ROWS)]


def _open_columns(position: str) -> list[int]:
    return [c for c in range(COLS) if position[c] == "."]


def _drop(position: str, col: int) -> str:
    row = max(r for r in range(ROWS) if position[r * COLS + col] == ".")
    i = row * COLS + col
    return position[:i] + connect_four_to_move(position) + position[i + 1 :]


def connect_four_positions(depth: int) -> list[str]:
    """Every position reachable in fewer than ``depth`` plies where the game is not over (the policy's
    table needs those where it is to move: its seat's mark to move)."""
    seen, frontier = {EMPTY_POSITION}, [EMPTY_POSITION]
    for _ in range(depth - 1):
        nxt = []
        for position in frontier:
            wins = set(connect_four_winning_columns(_rows(position), connect_four_to_move(position)))
            for col in _open_columns(position):
                after = _drop(position, col)
                if col not in wins and "." in after[:COLS] and after not in seen:
                    seen.add(after)
                    nxt.append(after)
        frontier = nxt
    return sorted(seen, key=lambda p: (COLS * ROWS - p.count("."), p))


@dataclass(frozen=True, slots=True)
class ConnectFourExploitabilityBounds:
    """Lower and upper bounds on the best response's expected score when the policy moves first
    (player 0, ``X``) and second, and on their mean, from a ``depth``-ply search. Not exact."""

    depth: int
    best_response_first: Bounds
    best_response_second: Bounds
    exploitability: Bounds

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values (bounds as ``[lower, upper]``)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


class _Search:
    def __init__(self, table: ConnectFourTable, me: str, depth: int, allow_invalid_mass: bool = False):
        self.table, self.me, self.depth, self.allow_invalid_mass = table, me, depth, allow_invalid_mass
        self.memo: dict[str, Bounds] = {}

    def policy(self, position: str) -> Mapping[int, float]:
        try:
            probs = self.table[position]
        except KeyError:
            raise ValueError(f"ConnectFour table has no entry for position {position!r} ({self.me} to move); "
                             f"give every position of connect_four_positions({self.depth}) where it is to move"
                             ) from None
        open_cols = _open_columns(position)
        if any(col not in open_cols for col in probs) or sum(probs.values()) > 1 + 1e-6:
            raise ValueError(f"ConnectFour table at {position!r}: {dict(probs)} must give open columns "
                             f"{open_cols} probabilities summing to at most 1")
        if sum(probs.values()) < 1 - 1e-6 and not self.allow_invalid_mass:
            raise ValueError(f"ConnectFour table at {position!r}: probabilities sum to {sum(probs.values()):.6g} < 1; "
                             "the rest would count as an invalid move (a loss): give each position a distribution, "
                             "or pass allow_invalid_mass=True if the rest is meant as invalid moves")
        return probs

    def bounds(self, position: str) -> Bounds:
        """(lower, upper) of the responder's expected score from ``position`` on (nobody has won yet)."""
        if position in self.memo:
            return self.memo[position]
        if ROWS * COLS - position.count(".") >= self.depth:
            return -1.0, 1.0
        mover = connect_four_to_move(position)
        wins = set(connect_four_winning_columns(_rows(position), mover))
        mover_wins = 1.0 if mover != self.me else -1.0

        def child(col: int) -> Bounds:
            if col in wins:
                return mover_wins, mover_wins
            after = _drop(position, col)
            return (0.0, 0.0) if "." not in after[:COLS] else self.bounds(after)

        if mover != self.me:
            values = [child(col) for col in _open_columns(position)]
            result = max(lo for lo, _ in values), max(hi for _, hi in values)
        else:
            probs = self.policy(position)
            invalid = 1.0 - sum(probs.values())
            invalid = invalid if invalid > _TOLERANCE else 0.0
            lo = hi = invalid  # an invalid move: the responder wins
            for col, p in probs.items():
                if p > 0:
                    c_lo, c_hi = child(col)
                    lo, hi = lo + p * c_lo, hi + p * c_hi
            result = lo, hi
        self.memo[position] = result
        return result


def connect_four_exploitability_bounds(table: ConnectFourTable, depth: int = 4, *,
                                       allow_invalid_mass: bool = False) -> ConnectFourExploitabilityBounds:
    """Bounds from a ``depth``-ply best-response search in both seats (see the module docstring).
    ``allow_invalid_mass``: a position's probabilities may sum below 1, the rest an invalid move (a loss; a
    model's reading); else such a table is refused."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1 ply, got {depth}")
    first = _Search(table, "X", depth, allow_invalid_mass).bounds(EMPTY_POSITION)
    second = _Search(table, "O", depth, allow_invalid_mass).bounds(EMPTY_POSITION)
    mean = (first[0] + second[0]) / 2, (first[1] + second[1]) / 2
    return ConnectFourExploitabilityBounds(depth, first, second, mean)
