"""Decontamination in the benchmark loader: a test split never holds a problem of its folder's train split."""

import json

import pytest

from mathcircuits.data.benchmark_files import (
    decontaminate,
    default_benchmark_root,
    read_benchmark_split,
    record_question,
)
from mathcircuits.evaluation import load_benchmark


def _write(folder, name, questions):
    records = [{"instruction": q, "input": "", "output": "", "answer": str(i)} for i, q in enumerate(questions)]
    (folder / f"{name}.json").write_text(json.dumps(records))


def test_test_split_drops_train_questions(tmp_path):
    folder = tmp_path / "SVAMP"
    folder.mkdir()
    _write(folder, "train", ["What is 2 plus 3?", "How many apples?"])
    _write(folder, "test", ["what is 2  plus 3?", "How many pears?", "How many apples?", "Sum of 4 and 5?"])
    test = read_benchmark_split("SVAMP", "test", tmp_path)
    assert [record_question(r) for r in test] == ["How many pears?", "Sum of 4 and 5?"]
    assert len(read_benchmark_split("SVAMP", "test", tmp_path, decontaminated=False)) == 4
    assert len(read_benchmark_split("SVAMP", "train", tmp_path)) == 2


def test_decontaminate_keeps_order_and_everything_new():
    test = [{"instruction": q, "answer": "1"} for q in ("a", "b", "c")]
    assert decontaminate(test, [{"instruction": "B", "answer": "0"}]) == [test[0], test[2]]
    assert decontaminate(test, []) == test


@pytest.mark.skipif(default_benchmark_root() is None, reason="no benchmark folder")
@pytest.mark.parametrize("name", ["SVAMP", "AddSub", "SingleEq", "GSM8K"])
def test_real_benchmarks_are_disjoint_from_train(name):
    test = load_benchmark(name, split="test")
    train = load_benchmark(name, split="train")
    assert test, f"{name}: decontamination left no test item"
    assert not {i.question for i in test} & {i.question for i in train}
