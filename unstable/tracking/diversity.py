"""Action diversity: how varied are the moves the learner chooses? (the seed's TODO list; 0.1.0's ExplorationTracker)

The maths are pure functions with known answers (uniform over ``k`` moves has entropy ``log k``;
a single repeated move has entropy 0). :class:`ActionDiversity` keeps, per env, the action
sequences of the last ``window`` train games (one sequence per seat that collects data: the
learner's own moves, in order) and reports over that window:

* ``action_entropy``: Shannon entropy (nats) of the distribution of chosen moves;
* ``unique_action_fraction``: distinct moves / moves;
* ``unique_<n>gram_fraction`` for ``n`` in ``ngram_sizes`` (default 2, 3, 4): distinct n-grams of
  consecutive moves / n-grams, over all sequences (0.1.0's "Pct. Unique Action n-gram").

Only valid moves count (an invalid or unparsable answer is not a move; it is counted by
``invalid_move_rate``), and moves are compared after collapsing whitespace. Nothing is reported
for an env until its window holds ``min_games`` games: over one game every n-gram is unique. In TicTacToe a falling
``action_entropy`` or ``unique_3gram_fraction`` means the policy is settling on a few openings.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from unstable.records import GameRecord

DEFAULT_NGRAM_SIZES = (2, 3, 4)


def entropy(counts: Mapping[Any, float] | Iterable[float]) -> float:
    """Shannon entropy in nats of the distribution proportional to ``counts`` (0 for no or one outcome)."""
    values = [float(c) for c in (counts.values() if isinstance(counts, Mapping) else counts)]
    if any(c < 0 for c in values):
        raise ValueError(f"counts must be >= 0, got {values}")
    total = sum(values)
    if total == 0:
        return 0.0
    return max(0.0, -sum(c / total * math.log(c / total) for c in values if c > 0))


def move_distribution(moves: Iterable[Hashable]) -> dict[Hashable, float]:
    """Fraction of each distinct move, most frequent first."""
    counts = Counter(moves)
    total = sum(counts.values())
    return {move: n / total for move, n in counts.most_common()}


def unique_fraction(items: Sequence[Hashable]) -> float:
    """Distinct items / items (``nan`` for no items)."""
    return len(set(items)) / len(items) if items else math.nan


def ngrams(sequence: Sequence[Hashable], n: int) -> list[tuple[Hashable, ...]]:
    """The ``n``-grams of consecutive items (none if the sequence is shorter than ``n``)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [tuple(sequence[i : i + n]) for i in range(len(sequence) - n + 1)]


def unique_ngram_fraction(sequences: Iterable[Sequence[Hashable]], n: int) -> float:
    """Distinct ``n``-grams / ``n``-grams over all sequences (``nan`` when no sequence is ``n`` long)."""
    grams = [gram for seq in sequences for gram in ngrams(seq, n)]
    return unique_fraction(grams)


def normalize_action(action: str) -> str:
    """Moves that differ only in whitespace are the same move."""
    return " ".join(action.split())


def learner_sequences(collecting: Iterable[int], turns: Iterable[tuple[int, str, bool]]) -> list[list[str]]:
    """Per collecting seat, its valid moves in order; ``turns`` are ``(player_id, action, invalid)``."""
    seqs: dict[int, list[str]] = {pid: [] for pid in collecting}
    for pid, action, invalid in turns:
        if pid in seqs and not invalid and action.strip():
            seqs[pid].append(normalize_action(action))
    return [seq for seq in seqs.values() if seq]


def record_sequences(record: GameRecord) -> list[list[str]]:
    """:func:`learner_sequences` of a finished game."""
    collecting = [a.player_id for a in record.spec.agents if a.collect_data]
    return learner_sequences(collecting, ((t.player_id, t.action, t.invalid) for t in record.turns))


def diversity_stats(sequences: Sequence[Sequence[str]], ngram_sizes: Iterable[int] = DEFAULT_NGRAM_SIZES) -> dict:
    """The diversity metrics (names without prefix) of a window of sequences; ``nan`` where undefined."""
    moves = [move for seq in sequences for move in seq]
    stats = {"action_entropy": entropy(Counter(moves)) if moves else math.nan,
             "unique_action_fraction": unique_fraction(moves)}
    for n in ngram_sizes:
        stats[f"unique_{n}gram_fraction"] = unique_ngram_fraction(sequences, n)
    return stats


class _EnvWindow:
    """One env's window, with running counts so adding a game costs O(its moves), not O(window)."""

    def __init__(self, window: int, ngram_sizes: tuple[int, ...]):
        self.games: deque[list[list[str]]] = deque()
        self.window = window
        self.counts: dict[int, Counter[tuple[str, ...]]] = {n: Counter() for n in (1, *ngram_sizes)}

    def _apply(self, game: list[list[str]], sign: int) -> None:
        for n, counter in self.counts.items():
            for seq in game:
                for gram in ngrams(seq, n):
                    counter[gram] += sign
                    if counter[gram] == 0:
                        del counter[gram]

    def add(self, game: list[list[str]]) -> None:
        self.games.append(game)
        self._apply(game, +1)
        if len(self.games) > self.window:
            self._apply(self.games.popleft(), -1)

    def stats(self) -> dict[str, float]:
        moves = self.counts[1]
        total = sum(moves.values())
        out = {"action_entropy": entropy(moves) if total else math.nan,
               "unique_action_fraction": len(moves) / total if total else math.nan}
        for n, counter in self.counts.items():
            if n > 1:
                grams = sum(counter.values())
                out[f"unique_{n}gram_fraction"] = len(counter) / grams if grams else math.nan
        return out


class ActionDiversity:
    """Per-env moving window of the learner's action sequences (see the module docstring).

    :param window: train games kept per env (0.1.0 used 512).
    :param ngram_sizes: the ``n`` of the ``unique_<n>gram_fraction`` metrics.
    :param min_games: games an env's window needs before its metrics are reported.
    """

    def __init__(self, window: int = 512, ngram_sizes: Iterable[int] = DEFAULT_NGRAM_SIZES, min_games: int = 10):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 1 <= min_games <= window:
            raise ValueError(f"min_games must be in [1, window={window}], got {min_games}")
        self.window = window
        self.min_games = min_games
        self.ngram_sizes = tuple(ngram_sizes)
        if any(n < 2 for n in self.ngram_sizes):
            raise ValueError(f"ngram_sizes must be >= 2 (n=1 is unique_action_fraction), got {self.ngram_sizes}")
        self._envs: dict[str, _EnvWindow] = {}

    def add(self, env_id: str, sequences: list[list[str]]) -> dict[str, float]:
        """Add one game's sequences; return the env's window metrics (finite ones; none before ``min_games``)."""
        env = self._envs.setdefault(env_id, _EnvWindow(self.window, self.ngram_sizes))
        env.add([list(seq) for seq in sequences])
        if len(env.games) < self.min_games:
            return {}
        return {k: v for k, v in env.stats().items() if math.isfinite(v)}

    def stats(self, env_id: str) -> dict[str, float]:
        """The env's window metrics (``nan`` where undefined; equal to :func:`diversity_stats` of the window)."""
        env = self._envs.get(env_id)
        return env.stats() if env is not None else diversity_stats([], self.ngram_sizes)

    def samples(self, record: GameRecord) -> dict[str, list[float]]:
        """Tracker samples ``collect/<env>/<metric>`` for a train game with learner moves; ``{}`` otherwise."""
        if record.spec.is_eval:
            return {}
        sequences = record_sequences(record)
        if not sequences:
            return {}
        return {f"collect/{record.env_id}/{k}": [v] for k, v in self.add(record.env_id, sequences).items()}

    def snapshot(self, top: int = 10) -> dict[str, dict[str, Any]]:
        """For the dashboard, per env: games and moves in the window, its metrics and the ``top`` moves' shares."""
        out = {}
        for env_id, env in sorted(self._envs.items()):
            moves = env.counts[1]
            total = sum(moves.values())
            stats = {k: v for k, v in env.stats().items() if math.isfinite(v)}
            out[env_id] = {"games": len(env.games), "moves": total, "distinct": len(moves),
                           "top": [[gram[0], n / total] for gram, n in moves.most_common(top)], **stats}
        return out
