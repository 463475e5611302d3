"""Task data for single-turn environments: load rows from wherever they are, and turn a row into a prompt.

:func:`load_task_data` accepts a ``datasets.Dataset``, a ``DatasetDict`` with a split, a list of dicts,
a local ``.jsonl``/``.json``/``.csv``/``.parquet`` file or a Hugging Face Hub id. Everything but a Hub id
works offline. Local files are parsed by ``datasets``' own readers into memory, with a temporary cache
directory that is removed afterwards, so loading writes nothing to the user's Hugging Face cache. JSON
and Parquet keep their types; a CSV file's cells are all read as text.

:class:`PromptFormat` says how a row becomes a prompt (one column, or a ``str.format`` template over
columns) and checks that against the dataset's columns before any game is played.
"""

from __future__ import annotations

import csv
import difflib
import math
import os
import string
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where rows are loaded: every game process imports this module, few load data
    import datasets


def _read_csv_as_text(path: str, **kwargs: Any) -> datasets.Dataset:
    """CSV has no types: every cell is read as text (an answer ``007`` stays ``"007"``, an empty cell is
    ``""``), where type guessing would turn ``007`` into 7 and ``0.50`` into 0.5."""
    import datasets

    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    features = datasets.Features({name: datasets.Value("string") for name in header})
    return datasets.Dataset.from_csv(path, features=features, keep_default_na=False, **kwargs)


def _read_json(path: str, **kwargs: Any) -> datasets.Dataset:
    import datasets

    return datasets.Dataset.from_json(path, **kwargs)


def _read_parquet(path: str, **kwargs: Any) -> datasets.Dataset:
    import datasets

    return datasets.Dataset.from_parquet(path, **kwargs)


_READERS = {
    ".jsonl": _read_json,
    ".json": _read_json,
    ".csv": _read_csv_as_text,
    ".parquet": _read_parquet,
}
SUPPORTED_SUFFIXES = tuple(_READERS)


class DataFileNotFoundError(FileNotFoundError, ValueError):
    """A data file that does not exist (both a ``FileNotFoundError`` and a ``ValueError``)."""


def load_task_data(source: Any, *, split: str | None = None, where: str = "data") -> datasets.Dataset:
    """The rows of ``source`` as a non-empty ``datasets.Dataset``.

    ``source`` is one of: a ``Dataset`` (returned as is); a ``DatasetDict`` (``split`` picks one); a list
    of dicts with the same keys; a path to a file with one of :data:`SUPPORTED_SUFFIXES`; or a string
    that is neither an existing path nor ends in a data suffix, taken as a Hub id and loaded with
    ``datasets.load_dataset`` (needs the network or a warm HF cache). ``where`` names the source in
    error messages (e.g. ``"train_envs[0].data"``). ``split`` is used for a ``DatasetDict`` and a Hub id
    (without it a Hub id's splits are listed), and ignored for the other sources, which are one split.
    """
    import datasets

    if isinstance(source, datasets.Dataset):
        dataset = source
    elif isinstance(source, datasets.DatasetDict):
        dataset = _pick_split(source, split, where)
    elif isinstance(source, list):
        dataset = _from_rows(source, where)
    elif isinstance(source, os.PathLike):
        dataset = _from_file(Path(source), where)
    elif isinstance(source, str):
        dataset = _from_file(Path(source), where) if _is_data_path(source) else _from_hub(source, split, where)
    else:
        raise TypeError(
            f"{where}: cannot load task data from a {type(source).__name__}; give a datasets.Dataset, a "
            f"DatasetDict, a list of dicts, a path to a {'/'.join(SUPPORTED_SUFFIXES)} file or a Hub id"
        )
    if len(dataset) == 0:
        raise ValueError(f"{where} has no rows")
    return dataset


def _is_data_path(text: str) -> bool:
    return Path(text).suffix.lower() in _READERS or os.path.exists(text)


def _pick_split(dataset_dict: datasets.DatasetDict, split: str | None, where: str) -> datasets.Dataset:
    splits = sorted(dataset_dict)
    if split is None:
        raise ValueError(f"{where} is a DatasetDict: pass split= one of {splits}")
    if split not in dataset_dict:
        raise ValueError(f"{where} has no split {split!r}; splits: {splits}")
    return dataset_dict[split]


def _from_rows(rows: list, where: str) -> datasets.Dataset:
    import datasets

    if not rows:
        raise ValueError(f"{where} has no rows")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"{where}: row {i} is a {type(row).__name__}, not a dict")
    keys = list(rows[0])
    for i, row in enumerate(rows[1:], start=1):
        if set(row) != set(keys):
            raise ValueError(f"{where}: row {i} has keys {sorted(row)} but row 0 has {sorted(keys)}")
    return datasets.Dataset.from_list([dict(row) for row in rows])


def _from_file(path: Path, where: str) -> datasets.Dataset:
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(
            f"{where}: cannot read {str(path)!r}: supported files end in {', '.join(SUPPORTED_SUFFIXES)}"
        )
    if not path.is_file():
        raise DataFileNotFoundError(f"{where}: no such data file: {str(path)!r}")
    if path.stat().st_size == 0:
        raise ValueError(f"{where} has no rows (empty file {str(path)!r})")
    from datasets.exceptions import DatasetsError

    # keep_in_memory with a throw-away cache_dir: the rows live in memory, nothing is left on disk.
    with tempfile.TemporaryDirectory(prefix="unstable-data-") as cache_dir:
        try:
            return reader(str(path), keep_in_memory=True, cache_dir=cache_dir)
        except (DatasetsError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            if "corresponds to no data" in str(err):  # datasets' words for a file with no rows (a bare CSV header)
                raise ValueError(f"{where} has no rows (file {str(path)!r})") from err
            cause = err.__cause__ or err
            raise ValueError(f"{where}: could not parse {str(path)!r}: {_first_line(cause)}") from err


def _from_hub(name: str, split: str | None, where: str) -> datasets.Dataset:
    import datasets
    from datasets.exceptions import DatasetsError

    try:
        loaded = datasets.load_dataset(name, split=split)
    except (OSError, ValueError, DatasetsError) as err:
        raise ValueError(
            f"{where}: could not load {name!r} from the Hugging Face Hub ({_first_line(err)}); it is not a "
            "local file either. A local .jsonl/.json/.csv/.parquet file or a datasets.Dataset works offline"
        ) from err
    if isinstance(loaded, datasets.DatasetDict):
        return _pick_split(loaded, split, where)
    return loaded


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


@dataclass(frozen=True, slots=True)
class PromptFormat:
    """How a row becomes a prompt: exactly one of ``column`` (its value, as text) or ``template`` (a
    ``str.format`` template over column names, e.g. ``"What is {a} + {b}?"``; format specs such as
    ``{x:.2f}`` and conversions such as ``{name!r}`` are fine, positional fields are not)."""

    column: str | None = None
    template: str | None = None

    def __post_init__(self) -> None:
        if (self.column is None) == (self.template is None):
            raise ValueError("PromptFormat needs exactly one of column= or template=")
        if self.column is not None and not self.column:
            raise ValueError("PromptFormat column= is empty; give the name of the column that holds the prompt")
        if self.template is not None and not self.fields():
            raise ValueError(
                f"PromptFormat template {self.template!r} has no {{column}} field: every prompt would be the same"
            )

    def fields(self) -> list[str]:
        """The columns this format reads, in order of first use."""
        if self.column is not None:
            return [self.column]
        try:
            parsed = list(string.Formatter().parse(self.template))
        except ValueError as err:
            raise ValueError(f"PromptFormat template {self.template!r} is not a str.format template: {err}") from None
        names: list[str] = []
        for _, field, _, _ in parsed:
            if field is None:
                continue
            root = field.split(".", 1)[0].split("[", 1)[0]
            if not root or root.isdigit():
                raise ValueError(
                    f"PromptFormat template {self.template!r} has a positional field {{{field}}}; "
                    "name a column instead, e.g. {question}"
                )
            if root not in names:
                names.append(root)
        return names

    def check(self, columns: Sequence[str], where: str) -> None:
        """Raise a ``ValueError`` naming the first field that is not one of ``columns``."""
        available = list(columns)
        for name in self.fields():
            if name in available:
                continue
            what = f"prompt column {name!r}" if self.column is not None else f"prompt template field {{{name}}}"
            close = difflib.get_close_matches(name, available, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{where}: {what} is not a column; columns: {available}{hint}")

    def render(self, row: Mapping[str, Any]) -> str:
        """The prompt for ``row``."""
        if self.column is not None:
            return str(row[self.column])
        return self.template.format_map(row)


def split_dataset(
    dataset: datasets.Dataset, test_size: int | float, *, seed: int = 0
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """A deterministic ``(train, test)`` split: ``test_size`` rows (an int) or that fraction of the rows
    (a float in (0, 1), rounded up as ``Dataset.train_test_split`` does), shuffled with ``seed``."""
    n = len(dataset)
    if isinstance(test_size, bool) or not isinstance(test_size, int | float):
        raise TypeError(f"test_size must be an int (rows) or a float (fraction), not {test_size!r}")
    if isinstance(test_size, int) and not 1 <= test_size < n:
        raise ValueError(f"test_size={test_size} rows must be between 1 and {n - 1} (the dataset has {n} rows)")
    if isinstance(test_size, float) and not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size={test_size} as a fraction must be strictly between 0 and 1")
    if isinstance(test_size, float) and not math.ceil(test_size * n) < n:
        raise ValueError(f"test_size={test_size} of {n} rows leaves an empty train or test split")
    parts = dataset.train_test_split(test_size=test_size, seed=seed, keep_in_memory=True)
    return parts["train"], parts["test"]
