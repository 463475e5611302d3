"""Procedurally generated single-turn tasks, shipped with the package: no download, any number of problems.

Every task is deterministic from its arguments: the rows are drawn from a ``random.Random`` seeded
with a string naming the task, its level, the seed and the split (a string seed is hashed with SHA-512
by ``random``, not with the salted ``hash()``), so the same call gives the same rows in every process
and on every machine, and ``split="train"`` and ``split="test"`` are independent streams.

* :func:`arithmetic_dataset`: ``"What is 7 + 5?"`` -> ``"12"``, operands of up to ``level`` digits.
* :func:`sorting_dataset`: ``"Sort ascending: 3 1 2"`` -> ``"1 2 3"``, ``length`` single digits; half the
  lists are held out for ``split="test"``.

Answers are scored with :func:`exact_match` on the last ``\\boxed{...}`` of a completion.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from unstable.games.extraction import clean_boxed, last_boxed_content

ARITHMETIC_LEVELS = range(1, 7)
SORTING_LENGTHS = range(2, 9)
if TYPE_CHECKING:  # imported when rows are made: every game process imports this module
    import datasets

HELD_OUT_BUCKETS = 10
"""A problem belongs to the held-out ("test") part when its crc32 is 0 modulo this: about 1 in 10."""
_DISJOINT_SPLITS = ("train", "test")


def answer_range(level: int) -> tuple[int, int]:
    """The smallest and largest sum of two operands of up to ``level`` digits."""
    _check_choice("level", level, ARITHMETIC_LEVELS)
    return 0, 2 * (10**level - 1)


def is_held_out(a: int, b: int) -> bool:
    """Whether the problem ``a + b`` is in the fixed held-out ("test") part of the problem space.

    A stable hash (crc32 of ``"a+b"``), so the partition is the same everywhere: at level 1 exactly 10
    of the 100 problems are held out, at level 2 1,006 of 10,000.
    """
    return zlib.crc32(f"{a}+{b}".encode()) % HELD_OUT_BUCKETS == 0


def arithmetic_dataset(
    num_problems: int, *, level: int = 1, seed: int = 0, split: str = "train", disjoint: bool | None = None
) -> datasets.Dataset:
    """``num_problems`` additions of two operands with up to ``level`` digits (level 1: 0..9, level 2: 0..99,
    ... level 6), columns ``question``, ``answer`` (the sum as text), ``a``, ``b`` and ``level``.

    Problems are drawn uniformly with replacement, so one may repeat within a split.

    ``disjoint=True`` makes train and test share no problem: ``split="train"`` draws only from problems
    outside the held-out part (:func:`is_held_out`, about 90%), ``split="test"`` only from inside it, and
    no other split name is allowed. It is the default from level 2 on (10,000 problems or more, so the
    held-out part has at least 1,000). At level 1 the default is ``False``: the space has only 100
    problems and a disjoint test split would hold just 10 distinct ones (``disjoint=True`` still works,
    with exactly those 10). With ``disjoint=False`` every split draws from the whole space and train and
    test may overlap.
    """
    _check_count(num_problems)
    _check_choice("level", level, ARITHMETIC_LEVELS)
    _check_split(split)
    if disjoint is None:
        disjoint = level >= 2
    if disjoint and split not in _DISJOINT_SPLITS:
        raise ValueError(f"disjoint=True splits the problems into {list(_DISJOINT_SPLITS)}; got split={split!r}")
    rng = random.Random(f"unstable/arithmetic/{level}/{seed}/{split}")
    largest = 10**level - 1
    want_held_out = split == "test"
    rows: dict[str, list] = {"question": [], "answer": [], "a": [], "b": [], "level": []}
    while len(rows["a"]) < num_problems:
        a, b = rng.randint(0, largest), rng.randint(0, largest)
        if disjoint and is_held_out(a, b) != want_held_out:
            continue  # rejection keeps the draw uniform over the chosen part
        rows["question"].append(f"What is {a} + {b}?")
        rows["answer"].append(str(a + b))
        rows["a"].append(a)
        rows["b"].append(b)
        rows["level"].append(level)
    import datasets

    return datasets.Dataset.from_dict(rows)


def is_held_out_list(items: Sequence[int]) -> bool:
    """Whether the sorting list ``items`` is in the held-out ("test") half of the lists of its length.

    A stable hash (crc32 of the list as written in the question is even), so the partition is the same
    everywhere. It splits lengths 2 to 5 exactly in half (50 of 100, 500 of 1,000, 5,000 of 10,000, ...).
    """
    return zlib.crc32(" ".join(map(str, items)).encode()) % 2 == 0


def sorting_dataset(
    num_problems: int, *, length: int = 3, seed: int = 0, split: str = "train", disjoint: bool = True
) -> datasets.Dataset:
    """``num_problems`` lists of ``length`` single digits (0..9) to sort ascending, columns ``question``,
    ``answer`` (the sorted digits, space-separated), ``items`` (the list as given) and ``level`` (= length).

    ``disjoint=True`` (the default) holds half of the lists out (:func:`is_held_out_list`):
    ``split="test"`` gives *distinct* held-out lists, so at most half of the ``10**length`` lists (500 at
    length 3), and every other split draws uniformly, with replacement, from the other half, so no list
    is in both. ``disjoint=False``: every split draws from all lists, with replacement, and they may overlap.
    """
    _check_count(num_problems)
    _check_choice("length", length, SORTING_LENGTHS)
    _check_split(split)
    distinct = disjoint and split == "test"
    if distinct and num_problems > 10**length // 2:
        raise ValueError(f"the test split of length-{length} lists has {10**length // 2} distinct held-out lists; "
                         f"got num_problems={num_problems} (use a longer length, or disjoint=False)")
    rng = random.Random(f"unstable/sorting/{length}/{seed}/{split}")
    rows: dict[str, list] = {"question": [], "answer": [], "items": [], "level": []}
    seen: set[tuple[int, ...]] = set()
    while len(rows["items"]) < num_problems:
        items = [rng.randint(0, 9) for _ in range(length)]
        if disjoint and is_held_out_list(items) != (split == "test"):
            continue  # rejection keeps the draw uniform over the chosen half
        if distinct:
            if tuple(items) in seen:
                continue
            seen.add(tuple(items))
        rows["question"].append("Sort ascending: " + " ".join(map(str, items)))
        rows["answer"].append(" ".join(map(str, sorted(items))))
        rows["items"].append(items)
        rows["level"].append(length)
    import datasets

    return datasets.Dataset.from_dict(rows)


GENERATED_TASKS: dict[str, Callable[..., datasets.Dataset]] = {
    "arithmetic": arithmetic_dataset,
    "sorting": sorting_dataset,
}


def generated_task(name: str, num_problems: int, **kwargs: Any) -> datasets.Dataset:
    """The generated task ``name`` (a key of :data:`GENERATED_TASKS`) with its own keyword arguments."""
    try:
        make = GENERATED_TASKS[name]
    except KeyError:
        raise ValueError(f"unknown generated task {name!r}; known: {sorted(GENERATED_TASKS)}") from None
    return make(num_problems, **kwargs)


def random_answer(row: Mapping[str, Any], rng: random.Random) -> str:
    """A uniformly random integer in the arithmetic row's answer range, as text; for a sorting row,
    its digits in a uniformly random order (every digit used once, the order not learned).

    The answer's *format* without the arithmetic, for a warm start that teaches how to answer before
    what to answer (as a random legal move teaches a game's rules without its strategy).
    """
    if "items" in row:
        items = list(row["items"])
        rng.shuffle(items)
        return " ".join(map(str, items))
    low, high = answer_range(row["level"])
    return str(rng.randint(low, high))


def exact_match(completion: str, answer: str) -> float:
    """1.0 if the last ``\\boxed{...}`` in ``completion`` holds ``answer``, else 0.0 (also with no box).

    The box is read as the game extraction reads it (``\\text{}`` unwrapped, runs of whitespace made one
    space), and so is ``answer``, so ``\\boxed{ 12 }`` matches ``"12"`` and ``\\boxed{1  2 3}`` ``"1 2 3"``.
    """
    content = last_boxed_content(completion)
    if content is None:
        return 0.0
    return 1.0 if clean_boxed(content) == " ".join(answer.split()) else 0.0


def _check_count(num_problems: int) -> None:
    if isinstance(num_problems, bool) or not isinstance(num_problems, int) or num_problems < 1:
        raise ValueError(f"num_problems must be a positive int, got {num_problems!r}")


def _check_choice(name: str, value: int, allowed: range) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ValueError(f"{name} must be an int from {allowed.start} to {allowed.stop - 1}, got {value!r}")


def _check_split(split: str) -> None:
    if not isinstance(split, str) or not split:
        raise ValueError(f"split must be a non-empty string such as 'train' or 'test', got {split!r}")
