"""Task data for single-turn environments: every kind of source, prompt formats, and the generated tasks.

Fast and offline: files are written to tmp_path, the Hub test runs with the Hub switched off.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from unstable.environments.data import (
    DataFileNotFoundError,
    PromptFormat,
    load_task_data,
    split_dataset,
)
from unstable.environments.generated import (
    answer_range,
    arithmetic_dataset,
    exact_match,
    generated_task,
    is_held_out,
    is_held_out_list,
    random_answer,
    sorting_dataset,
)

ROWS = [{"question": "What is 1 + 2?", "answer": "3"}, {"question": "What is 2 + 2?", "answer": "4"}]
REPO = Path(__file__).resolve().parents[1]


# --- load_task_data -----------------------------------------------------------------------------


def test_a_dataset_is_returned_as_is():
    dataset = datasets.Dataset.from_list(ROWS)
    assert load_task_data(dataset) is dataset


def test_a_dataset_dict_needs_a_known_split():
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS), "test": datasets.Dataset.from_list(ROWS)})
    assert load_task_data(dd, split="test").num_rows == 2
    with pytest.raises(ValueError, match=r"^env\.data is a DatasetDict: pass split= one of \['test', 'train'\]$"):
        load_task_data(dd, where="env.data")
    with pytest.raises(ValueError, match=r"^data has no split 'valid'; splits: \['test', 'train'\]$"):
        load_task_data(dd, split="valid")


def test_a_list_of_dicts_with_the_same_keys():
    dataset = load_task_data(ROWS)
    assert dataset.column_names == ["question", "answer"]
    assert dataset[1] == ROWS[1]


def test_a_list_of_dicts_names_the_row_with_other_keys():
    rows = [*ROWS, {"question": "What is 3 + 3?", "solution": "6"}]
    with pytest.raises(ValueError, match=r"^data: row 2 has keys \['question', 'solution'\] but row 0 has"):
        load_task_data(rows)
    with pytest.raises(TypeError, match=r"row 1 is a str, not a dict"):
        load_task_data([ROWS[0], "oops"])


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_local_files(tmp_path, suffix, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")  # read at import
    path = tmp_path / f"rows{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    elif suffix == ".json":
        path.write_text(json.dumps(ROWS))
    elif suffix == ".csv":
        datasets.Dataset.from_list(ROWS).to_csv(str(path), index=False)
    else:
        datasets.Dataset.from_list(ROWS).to_parquet(str(path))
    for source in (path, str(path)):
        dataset = load_task_data(source)
        assert dataset.to_list() == ROWS
        assert dataset.cache_files == []  # in memory
    assert not (tmp_path / "hf-cache").exists()  # nothing written to the user's cache


def test_csv_cells_are_read_as_text(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text('question,answer\nPad 7 to three digits,007\n"Halve 1, as a decimal",0.50\nNothing,\n')
    dataset = load_task_data(path)
    assert dataset["answer"][:] == ["007", "0.50", ""]
    assert dataset["question"][1] == "Halve 1, as a decimal"


def test_a_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataFileNotFoundError, match=f"^data: no such data file: '{missing}'$"):
        load_task_data(str(missing))
    with pytest.raises(FileNotFoundError):
        load_task_data(missing)


def test_an_unsupported_suffix_lists_the_supported_ones(tmp_path):
    path = tmp_path / "rows.txt"
    path.write_text("What is 1 + 2?\n")
    expected = f"^data: cannot read '{path}': supported files end in .jsonl, .json, .csv, .parquet$"
    with pytest.raises(ValueError, match=expected):
        load_task_data(str(path))
    with pytest.raises(ValueError, match="supported files end in"):
        load_task_data(tmp_path)  # a directory


def test_empty_sources_have_no_rows(tmp_path):
    with pytest.raises(ValueError, match=r"^train\.data has no rows$"):
        load_task_data(datasets.Dataset.from_dict({"question": []}), where="train.data")
    with pytest.raises(ValueError, match=r"^data has no rows$"):
        load_task_data([])
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"^data has no rows \(empty file"):
        load_task_data(tmp_path / "empty.jsonl")
    (tmp_path / "header.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match=r"^data has no rows \(file"):
        load_task_data(tmp_path / "header.csv")


def test_a_malformed_file_says_where_it_fails(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "a"}\n{"question": \n')
    with pytest.raises(ValueError, match=r"^data: could not parse '.*bad\.jsonl': ArrowInvalid: JSON parse error"):
        load_task_data(tmp_path / "bad.jsonl")


def test_a_hub_id_offline_says_what_works_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    # datasets and huggingface_hub read these at import, which may have happened before this test
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-home" / "datasets")
    with pytest.raises(ValueError) as info:
        load_task_data("no-such-user/no-such-dataset", split="train", where="train_envs[0].data")
    message = str(info.value)
    assert message.startswith("train_envs[0].data: could not load 'no-such-user/no-such-dataset' from the Hugging")
    assert "(ConnectionError: " in message
    assert message.endswith("A local .jsonl/.json/.csv/.parquet file or a datasets.Dataset works offline")


def test_other_types_are_refused():
    with pytest.raises(TypeError, match=r"^data: cannot load task data from a dict; give a datasets\.Dataset"):
        load_task_data({"question": ["a"]})


# --- PromptFormat -------------------------------------------------------------------------------


def test_prompt_from_a_column_or_a_template():
    row = {"question": "What is 1 + 2?", "a": 1, "b": 2, "x": 0.5}
    assert PromptFormat(column="question").render(row) == "What is 1 + 2?"
    assert PromptFormat(column="a").render(row) == "1"
    template = PromptFormat(template="Add {a} and {b:03d}; then {x:.2f} and {question!r}.")
    assert template.fields() == ["a", "b", "x", "question"]
    template.check(list(row), where="env")
    assert template.render(row) == "Add 1 and 002; then 0.50 and 'What is 1 + 2?'."


def test_prompt_format_missing_columns_suggest_a_close_match():
    columns = ["question", "answer"]
    with pytest.raises(ValueError) as info:
        PromptFormat(column="questoin").check(columns, where="train_envs[0]")
    assert str(info.value) == (
        "train_envs[0]: prompt column 'questoin' is not a column; columns: ['question', 'answer']; "
        "did you mean 'question'?"
    )
    with pytest.raises(ValueError) as info:
        PromptFormat(template="Q: {question}\nA: {anwser}").check(columns, where="env")
    assert str(info.value) == (
        "env: prompt template field {anwser} is not a column; columns: ['question', 'answer']; did you mean 'answer'?"
    )
    with pytest.raises(ValueError) as info:
        PromptFormat(template="{zzz}").check(columns, where="env")
    assert str(info.value) == "env: prompt template field {zzz} is not a column; columns: ['question', 'answer']"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "PromptFormat needs exactly one of column= or template="),
        ({"column": "q", "template": "{q}"}, "PromptFormat needs exactly one of column= or template="),
        ({"column": ""}, "PromptFormat column= is empty; give the name of the column that holds the prompt"),
        ({"template": "What is {} + {b}?"}, "PromptFormat template 'What is {} + {b}?' has a positional field {}; "
         "name a column instead, e.g. {question}"),
        ({"template": "What is {0}?"}, "PromptFormat template 'What is {0}?' has a positional field {0}; "
         "name a column instead, e.g. {question}"),
        ({"template": "no fields"}, "PromptFormat template 'no fields' has no {column} field: "
         "every prompt would be the same"),
        ({"template": "{a"}, "PromptFormat template '{a' is not a str.format template: "
         "expected '}' before end of string"),
    ],
)
def test_prompt_format_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError) as info:
        PromptFormat(**kwargs)
    assert str(info.value) == message


# --- split_dataset ------------------------------------------------------------------------------


def test_split_dataset_is_deterministic_and_validated():
    dataset = datasets.Dataset.from_dict({"i": list(range(20))})
    train, test = split_dataset(dataset, 5, seed=3)
    assert (len(train), len(test)) == (15, 5)
    assert sorted(train["i"][:] + test["i"][:]) == list(range(20))
    again_train, again_test = split_dataset(dataset, 5, seed=3)
    assert (again_train["i"][:], again_test["i"][:]) == (train["i"][:], test["i"][:])
    assert split_dataset(dataset, 5, seed=4)[1]["i"][:] != test["i"][:]
    assert split_dataset(dataset, 0.25, seed=3)[1].num_rows == 5
    for bad in (0, 20, 0.0, 1.0, 0.99):
        with pytest.raises(ValueError, match="test_size="):
            split_dataset(dataset, bad)
    with pytest.raises(TypeError, match="test_size must be an int"):
        split_dataset(dataset, True)


# --- generated tasks ----------------------------------------------------------------------------


def _digest(dataset) -> str:
    return hashlib.sha256(json.dumps(dataset.to_list(), sort_keys=True).encode()).hexdigest()


def test_generated_rows_are_deterministic():
    assert arithmetic_dataset(50, level=3, seed=7).to_list() == arithmetic_dataset(50, level=3, seed=7).to_list()
    assert sorting_dataset(50, length=5, seed=7).to_list() == sorting_dataset(50, length=5, seed=7).to_list()
    assert _digest(arithmetic_dataset(50, level=3, seed=7)) != _digest(arithmetic_dataset(50, level=3, seed=8))


def test_generated_rows_are_the_same_in_another_process():
    code = (
        "import hashlib, json; from unstable.environments.generated import arithmetic_dataset, sorting_dataset; "
        "rows = arithmetic_dataset(50, level=3, seed=7).to_list() + sorting_dataset(50, length=5, seed=7).to_list(); "
        "print(hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    rows = arithmetic_dataset(50, level=3, seed=7).to_list() + sorting_dataset(50, length=5, seed=7).to_list()
    assert out.stdout.strip() == hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_train_and_test_are_different_streams():
    for disjoint in (False, True):
        train = arithmetic_dataset(100, level=1, split="train", disjoint=disjoint)
        test = arithmetic_dataset(100, level=1, split="test", disjoint=disjoint)
        assert train["question"][:] != test["question"][:]
    assert sorting_dataset(20, split="train")["question"][:] != sorting_dataset(20, split="test")["question"][:]


def test_disjoint_splits_share_no_problem():
    train = arithmetic_dataset(2000, level=2, split="train")  # disjoint is the default from level 2
    test = arithmetic_dataset(2000, level=2, split="test")
    train_pairs = set(zip(train["a"], train["b"], strict=True))
    test_pairs = set(zip(test["a"], test["b"], strict=True))
    assert not train_pairs & test_pairs
    assert all(is_held_out(a, b) for a, b in test_pairs)
    assert len(test_pairs) > 500  # drawn from the ~1,000 held-out problems, not a handful
    level1_test = arithmetic_dataset(200, level=1, split="test", disjoint=True)
    assert len(set(level1_test["question"])) == 10  # the level-1 held-out part has exactly 10 problems
    with pytest.raises(ValueError, match=r"disjoint=True splits the problems into \['train', 'test'\]"):
        arithmetic_dataset(5, level=2, split="validation")
    assert arithmetic_dataset(5, level=2, split="validation", disjoint=False).num_rows == 5


def test_sorting_holds_out_half_the_lists_and_tests_on_distinct_ones():
    for length in (2, 3, 4):  # the hash splits these lengths exactly in half
        lists = list(itertools.product(range(10), repeat=length))
        assert sum(map(is_held_out_list, lists)) == len(lists) // 2
    test = sorting_dataset(500, length=3, split="test")  # every held-out list of length 3, once each
    assert len({tuple(items) for items in test["items"]}) == 500
    assert all(is_held_out_list(items) for items in test["items"])
    for split in ("train", "warm-start", "validation"):  # every other split draws from the other half
        rows = sorting_dataset(2000, length=3, split=split)
        assert not any(is_held_out_list(items) for items in rows["items"])
        assert len({tuple(items) for items in rows["items"]}) < 2000  # with replacement
    with pytest.raises(ValueError, match=r"^the test split of length-3 lists has 500 distinct held-out lists; "
                                         r"got num_problems=501 \(use a longer length, or disjoint=False\)$"):
        sorting_dataset(501, length=3, split="test")
    mixed = sorting_dataset(2000, length=3, split="test", disjoint=False)
    assert 0 < sum(map(is_held_out_list, mixed["items"])) < 2000


def test_the_sorting_warm_start_answers_are_random_orders_of_every_list():
    """The warm start sees all lists, held-out ones too, answered in a random order: the sorted one only by chance."""
    from unstable.models.task_warmstart import task_dataset

    rows = [row for row in task_dataset("sorting", 6000, 3, seed=0, split="warm-start") if len(set(row["items"])) == 3]
    assert 0.4 < sum(is_held_out_list(row["items"]) for row in rows) / len(rows) < 0.6
    rng = random.Random(0)
    answers = [random_answer(row, rng) for row in rows]
    assert all(sorted(a.split()) == sorted(map(str, row["items"])) for a, row in zip(answers, rows, strict=True))
    sorted_share = sum(a == row["answer"] for a, row in zip(answers, rows, strict=True)) / len(rows)
    assert abs(sorted_share - 1 / 6) < 0.03  # chance: one of the 3! orders


@pytest.mark.parametrize("level", [1, 2, 3, 6])
def test_arithmetic_rows_are_correct(level):
    dataset = arithmetic_dataset(300, level=level, seed=1)
    assert dataset.column_names == ["question", "answer", "a", "b", "level"]
    largest = 10**level - 1
    for row in dataset:
        assert 0 <= row["a"] <= largest and 0 <= row["b"] <= largest
        assert row["a"] + row["b"] == int(row["answer"])
        assert row["question"] == f"What is {row['a']} + {row['b']}?"
        assert row["level"] == level
    assert max(max(dataset["a"]), max(dataset["b"])) > largest // 10  # the top digit is used
    assert answer_range(level) == (0, 2 * largest)


def test_sorting_rows_are_sorted():
    for length in (2, 5, 8):
        for row in sorting_dataset(100, length=length, seed=2):
            assert len(row["items"]) == length and row["level"] == length
            assert row["answer"] == " ".join(map(str, sorted(row["items"])))
            assert row["question"] == "Sort ascending: " + " ".join(map(str, row["items"]))


def test_generated_arguments_are_checked():
    with pytest.raises(ValueError, match="level must be an int from 1 to 6, got 7"):
        arithmetic_dataset(5, level=7)
    with pytest.raises(ValueError, match="length must be an int from 2 to 8, got 1"):
        sorting_dataset(5, length=1)
    with pytest.raises(ValueError, match="num_problems must be a positive int, got 0"):
        arithmetic_dataset(0)
    with pytest.raises(ValueError, match=r"^unknown generated task 'addition'; known: \['arithmetic', 'sorting'\]$"):
        generated_task("addition", 5)
    assert generated_task("sorting", 3, length=4).to_list() == sorting_dataset(3, length=4).to_list()


def test_random_answer_stays_in_the_answer_range():
    rng = random.Random(0)
    row = arithmetic_dataset(1, level=2)[0]
    answers = [int(random_answer(row, rng)) for _ in range(2000)]
    assert min(answers) >= 0 and max(answers) <= 198
    assert len(set(answers)) > 150


@pytest.mark.parametrize(
    ("completion", "answer", "reward"),
    [
        ("7 + 5 is twelve, so \\boxed{12}", "12", 1.0),
        (" \\boxed{ 12 }", "12", 1.0),
        ("\\boxed{13}", "12", 0.0),
        ("first \\boxed{13}, no: \\boxed{12}", "12", 1.0),
        ("first \\boxed{12}, no: \\boxed{13}", "12", 0.0),
        ("12", "12", 0.0),
        ("\\boxed{\\text{12}}", "12", 1.0),
        ("\\boxed{1  2 3}", "1 2 3", 1.0),
    ],
)
def test_exact_match(completion, answer, reward):
    assert exact_match(completion, answer) == reward
