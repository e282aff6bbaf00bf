import json
from pathlib import Path

import pytest

from mathcircuits.data import (
    GenerationConfig,
    PairError,
    PairSet,
    TemplateError,
    accuracy_table,
    correct_pairs,
    default_template_dir,
    filter_correct,
    fresh_pairs,
    generate_pairs,
    load_templates,
    score_pairs,
    word_problem_dataset,
)
from mathcircuits.data.benchmark_files import (
    default_benchmark_root,
    find_benchmark_file,
    read_word_problems,
    record_question,
)
from mathcircuits.data.operands import compute_answer
from mathcircuits.data.pairset import pair_keys
from mathcircuits.data.templates import load_template_set
from mathcircuits.models.tiny import tiny_tokenizer
from mathcircuits.pipeline import ConfigError

from helpers import unchecked


def test_every_template_file_loads(template_sets):
    files = sorted(default_template_dir().glob("*.yaml"))
    assert len(files) == len(template_sets) >= 3
    by_op = {}
    for s in template_sets:
        for t in s.templates:
            by_op.setdefault(t.operation, []).append(t)
    assert {op: len(v) for op, v in by_op.items() if op != "add"} == {"sub": 9, "mul": 9, "div": 9, "pow": 2}
    assert len(by_op["add"]) == 9 + 12
    extra = next(s for s in template_sets if s.name == "paper_addition_extra")
    assert len(extra.word_pools["name"]) == 100 == len(set(extra.word_pools["name"]))


@pytest.mark.parametrize(
    "op,a,b,expected",
    [
        ("add", 3, 5, "8"),
        ("sub", 3, 5, None),
        ("sub", 9, 4, "5"),
        ("mul", 7, 8, "56"),
        ("div", 8, 2, "4"),
        ("div", 7, 2, None),
        ("div", 3, 0, None),
        ("pow", 2, 5, "32"),
    ],
)
def test_answer_rules(op, a, b, expected):
    assert compute_answer(op, a, b) == expected


def test_non_integer_division_when_asked():
    assert compute_answer("div", 7, 2, integer_only=False) == "3.5"
    assert compute_answer("sub", 3, 5, allow_negative=True) == "-2"


def test_pairs_are_token_aligned_and_positions_are_right(template_sets):
    tok = tiny_tokenizer()
    ds = generate_pairs(tok, template_sets, GenerationConfig(operations=("add", "sub", "mul", "div"), n_per_template=3))
    assert len(ds) == 36 * 3 + 12 * 3
    for r in ds.dataset:
        assert len(r["tokens"]) == len(r["cf_tokens"]) == r["n_tokens"]
        diff = [i for i, (x, y) in enumerate(zip(r["tokens"], r["cf_tokens"])) if x != y]
        assert diff and set(diff) <= set(r["pos_op"]), r["template_id"]
        text = tok.decode([r["tokens"][i] for i in r["pos_a"]])
        assert text.strip() == str(r["a"])
        assert tok.decode([r["tokens"][i] for i in r["pos_b"]]).strip() == str(r["b"])
        assert r["pos_last"] == r["n_tokens"] - 1
        assert tok.decode(r["answer_tokens"]).strip() == r["answer"]
        # one shot of each operation of the template's set (division shown), at least the paper's three
        n_ops = next(len(t.fewshot_examples) for t in template_sets if r["template_id"] in {u.id for u in t.templates})
        assert r["prefix_len"] > 0 and r["prompt"].count("\n") == max(3, n_ops)


def test_seed_reproduces_and_changes(template_sets):
    tok = tiny_tokenizer()
    cfg = GenerationConfig(operations=("add",), n_per_template=4, seed=1)
    a = generate_pairs(tok, template_sets, cfg)
    b = generate_pairs(tok, template_sets, cfg)
    c = generate_pairs(tok, template_sets, GenerationConfig(operations=("add",), n_per_template=4, seed=2))
    assert a.prompts == b.prompts
    assert a.prompts != c.prompts


def test_multi_digit_and_refusing_multi_token_answers(template_sets):
    tok = tiny_tokenizer()
    ds = generate_pairs(
        tok,
        template_sets,
        GenerationConfig(
            operations=("add",), template_ids=("add_eq_1",), operand_range=(10, 99), n_per_template=5, fewshot=False
        ),
    )
    assert all(len(r["pos_a"]) == 2 and r["prefix_len"] == 0 for r in ds.dataset)
    single = generate_pairs(
        tok,
        template_sets,
        GenerationConfig(
            operations=("add",), template_ids=("add_eq_1",), multi_token_answers="refuse", n_per_template=50
        ),
    )
    assert all(len(r["answer_tokens"]) == 1 for r in single.dataset) and all(
        int(r["answer"]) < 10 for r in single.dataset
    )


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "t.yaml"
    p.write_text(body)
    return p


GOOD = """schema_version: 1
name: t
counterfactual_vocab: {symbols: ["<", ">"]}
templates:
  - {id: x1, operation: add, text: "{A} {OP} {B} =", op: "+", cf_vocab: symbols}
"""


def test_good_minimal_template_loads(tmp_path):
    s = load_template_set(_write(tmp_path, GOOD))
    assert s.templates[0].placeholders == ("A", "OP", "B")


@pytest.mark.parametrize(
    "replace,match",
    [
        (('"{A} {OP} {B} ="', '"{A} {OP} {B} {C} ="'), "no word pool"),
        (('"{A} {OP} {B} ="', '"{A} + {B} ="'), r"0 \{OP\}"),
        (("operation: add", "operation: modulo"), "operation 'modulo' is unknown"),
        (("cf_vocab: symbols}", "cf_vocab: words}"), "cf_vocab 'words' is not defined"),
        (("schema_version: 1", "schema_version: 7"), "schema_version"),
        (('op: "+"', 'op: "<"'), "in its own counterfactual vocabulary"),
    ],
)
def test_bad_templates_fail_clearly(tmp_path, replace, match):
    with pytest.raises(TemplateError, match=match) as info:
        load_template_set(_write(tmp_path, GOOD.replace(*replace)))
    assert info.value.fix and "t.yaml" in info.value.problem  # the file named; a fix of its own


def test_duplicate_ids_across_files_fail(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD.replace("name: t", "name: u"))
    with pytest.raises(TemplateError, match="in both"):
        load_templates(tmp_path)


def test_unalignable_counterfactual_is_refused(tmp_path):
    body = GOOD.replace('symbols: ["<", ">"]', 'symbols: ["<<<"]')
    sets = [load_template_set(_write(tmp_path, body))]
    with pytest.raises(PairError, match="tokenizes to as many tokens"):
        generate_pairs(tiny_tokenizer(), sets, GenerationConfig(fewshot=False))


def test_unknown_operation_in_config():
    with unchecked(), pytest.raises(PairError, match="unknown"):  # the config's own check, past beartype's
        GenerationConfig(operations=("mod",))
    with pytest.raises(ConfigError, match=r"operations=\['mod'\] is not list of one of 'add'"):
        GenerationConfig.from_dict({"operations": ["mod"]})


def test_filter_keeps_only_correct_pairs(tiny_llama, template_sets):
    config = GenerationConfig(operations=("add",), template_ids=("add_eq_1", "add_eq_2"), n_per_template=6)
    ds = generate_pairs(tiny_llama.tokenizer, template_sets, config)
    scored = score_pairs(tiny_llama, ds)
    # a fake "model" that always predicts the right tokens makes every pair correct
    import torch

    answers = {tuple(t): a for t, a in zip(ds.tokens, ds.answer_tokens)}

    def oracle(tokens):
        out = torch.zeros(tokens.shape[0], tokens.shape[1], len(tiny_llama.tokenizer))
        for row, seq in enumerate(tokens.tolist()):
            for prompt, ans in answers.items():
                if seq[: len(prompt)] == list(prompt):
                    for k, t in enumerate(ans):
                        out[row, len(prompt) - 1 + k, t] = 10.0
        return out

    perfect = score_pairs(oracle, ds)
    assert all(perfect.correct)
    assert len(filter_correct(perfect)) == len(ds)
    assert len(filter_correct(scored)) == sum(scored.correct)
    table = accuracy_table(scored)
    assert set(table["template_id"]) == {"add_eq_1", "add_eq_2", "(all)"}
    assert ((table["accuracy"] >= 0) & (table["accuracy"] <= 1)).all()
    with pytest.raises(ValueError, match="score_pairs"):
        filter_correct(ds)


def test_dataset_save_load_round_trip(tmp_path, template_sets):
    import datasets

    ds = generate_pairs(tiny_tokenizer(), template_sets, GenerationConfig(n_per_template=2))
    ds.save(tmp_path / "pairs")
    back = PairSet.load(tmp_path / "pairs")
    assert back.prompts == ds.prompts and back.pos_op == ds.pos_op and back.tokens == ds.tokens
    assert not list((tmp_path / "pairs").glob("cache-*.arrow"))
    # the folder is the datasets library's own format, as earlier runs wrote it
    assert datasets.load_from_disk(str(tmp_path / "pairs")).to_dict() == ds.dataset.to_dict()


def test_pair_sets_draw_no_datasets_bars_and_keep_their_values(tmp_path, template_sets, capsys):
    import datasets

    ds = generate_pairs(tiny_tokenizer(), template_sets, GenerationConfig(n_per_template=3)).shuffle(seed=1)
    part = ds.select(range(0, len(ds), 2))  # a selection: saving and add_column flatten its indices
    capsys.readouterr()
    was_on = datasets.is_progress_bar_enabled()
    part.save(tmp_path / "part")
    staged = part.with_fact_stages(["late"] * len(part))
    assert capsys.readouterr().err == ""  # no "Saving the dataset" or "Flattening the indices" bar
    assert datasets.is_progress_bar_enabled() == was_on  # the user's own datasets setting is left as it was
    assert PairSet.load(tmp_path / "part").tokens == part.tokens and staged.tokens == part.tokens
    assert staged.fact_stages == ("late",) * len(part)


# ------------------------------------------------------------------ correct pairs for an operation


@pytest.mark.slow
def test_correct_pairs_is_the_generate_score_filter_recipe(tiny_llama, template_sets):
    kwargs = {"n_per_template": 40, "fewshot": False, "forms": None}
    every = correct_pairs(tiny_llama, "sub", n=None, templates=template_sets, **kwargs)
    by_hand = filter_correct(
        score_pairs(
            tiny_llama,
            generate_pairs(
                tiny_llama.tokenizer,
                template_sets,
                GenerationConfig(operations=("sub",), fewshot=False, n_per_template=40),
            ),
        )
    )
    assert len(every) >= 2, "the fixed seed gives this random model a few correct subtractions"
    assert every.prompts == by_hand.prompts and all(every.correct)
    assert set(every.operations) == {"sub"}
    first = correct_pairs(tiny_llama, "sub", n=2, templates=template_sets, **kwargs)
    assert first.prompts == every.prompts[:2]
    with pytest.raises(PairError, match=rf"{len(every)} of \d+ 'sub' pairs.*Fix: raise n_per_template"):
        correct_pairs(tiny_llama, "sub", n=len(every) + 1, templates=template_sets, **kwargs)
    # as a user meets it: the call's own argument check names the choices
    with unchecked(), pytest.raises(ValueError, match="operation must be one of 'add', 'sub'"):
        correct_pairs(tiny_llama, "mod", templates=template_sets, forms=None)


def test_correct_pairs_stops_scoring_at_n_and_draws_equations(tiny_llama, template_sets, monkeypatch):
    import mathcircuits.data.correct as correct_module  # to count what it scores

    kwargs = {"n_per_template": 40, "fewshot": False, "templates": template_sets, "progress": False}
    every = correct_pairs(tiny_llama, "sub", n=None, **kwargs)
    assert set(every.forms) == {"equation"}, "the default draws the short equation templates only"
    assert len(every) >= 2, "the fixed seed gives this random model a few correct subtractions"
    ids = tuple(t.id for ts in template_sets for t in ts.templates if t.operation == "sub" and t.form == "equation")
    config = GenerationConfig(operations=("sub",), fewshot=False, n_per_template=40, template_ids=ids)
    generated = len(generate_pairs(tiny_llama.tokenizer, template_sets, config))
    scored = []
    real = correct_module.score_pairs
    monkeypatch.setattr(correct_module, "score_pairs", lambda m, d, **kw: scored.append(len(d)) or real(m, d, **kw))
    first = correct_pairs(tiny_llama, "sub", n=2, batch_size=8, **kwargs)
    assert first.prompts == every.prompts[:2]
    # the second correct pair is row pair_id of the generation: scoring stops with the batch that holds it
    needed = (every.pair_ids[1] // 8 + 1) * 8
    assert sum(scored) == min(needed, generated) and max(scored) <= 8, (scored, needed, generated)
    assert sum(scored) < generated, "early stop scored fewer pairs than were generated"
    with pytest.raises(PairError, match=r"form in \['word'\].*Fix: choose forms from"):
        correct_pairs(tiny_llama, "sub", n=2, forms=("word",), **kwargs)


def test_fresh_pairs_share_no_pair_with_the_given_ones(tiny_llama, template_sets):
    kwargs = {"templates": template_sets, "progress": False}
    first = correct_pairs(tiny_llama, "sub", n=2, n_per_template=40, fewshot=False, **kwargs)
    fresh = fresh_pairs(tiny_llama, first, n=3, **kwargs)
    assert len(fresh) == 3 and all(fresh.correct)
    assert not set(pair_keys(fresh)) & set(pair_keys(first)) and len(set(pair_keys(fresh))) == 3
    assert set(fresh.template_ids) <= set(first.template_ids) and set(fresh.operations) == {"sub"}
    assert min(fresh.pair_ids) > max(first.pair_ids)
    assert all(p == 0 for p in fresh.prefix_len), "no few-shot prefix, like the given pairs"


# ------------------------------------------------------------------------------- benchmark files

WORD_PROBLEMS = [
    {"instruction": "Tom has 3 apples and gets 4 more. How many?", "input": "", "output": "3 + 4 = 7", "answer": "7"},
    {"instruction": "Half of 5?", "input": "", "output": "", "answer": "2.5"},
    {"instruction": "A debt of 2 grows by 3.", "input": "How much is owed?", "output": "", "answer": "5.0"},
    {"instruction": "Temperature drops from 1 by 4.", "input": "", "output": "", "answer": "-3"},
]


@pytest.fixture
def bench_root(tmp_path):
    (tmp_path / "SVAMP").mkdir()
    (tmp_path / "SVAMP" / "test.json").write_text(json.dumps(WORD_PROBLEMS))
    (tmp_path / "AddSub").mkdir()
    (tmp_path / "AddSub" / "train.json").write_text(json.dumps(WORD_PROBLEMS[:1]))
    return tmp_path


def test_default_benchmark_root_has_one_rule(bench_root, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MATHCIRCUITS_BENCHMARKS", str(bench_root))
    assert default_benchmark_root() == bench_root
    monkeypatch.setenv("MATHCIRCUITS_BENCHMARKS", str(bench_root / "missing"))
    with pytest.raises(FileNotFoundError, match=r"MATHCIRCUITS_BENCHMARKS.*not an existing folder.*Fix"):
        default_benchmark_root()
    monkeypatch.delenv("MATHCIRCUITS_BENCHMARKS")
    work = tmp_path_factory.mktemp("work")
    (work / "repo").mkdir()
    monkeypatch.chdir(work / "repo")
    assert default_benchmark_root() is None
    (work / "repo" / "shared" / "data" / "benchmarks").mkdir(parents=True)
    assert default_benchmark_root() == Path.cwd() / "shared" / "data" / "benchmarks"
    (work / "shared" / "data" / "benchmarks").mkdir(parents=True)  # ../shared wins over ./shared
    assert default_benchmark_root() == Path.cwd().parent / "shared" / "data" / "benchmarks"


def test_find_benchmark_file_from_root_folder_or_file(bench_root):
    file = bench_root / "SVAMP" / "test.json"
    assert find_benchmark_file("SVAMP", "test", bench_root) == file
    assert find_benchmark_file("SVAMP", "test", bench_root / "SVAMP") == file
    assert find_benchmark_file("SVAMP", "test", file) == file
    assert find_benchmark_file("SVAMP", "train", bench_root) is None


def test_read_word_problems_concatenates_and_checks(bench_root):
    records = read_word_problems(bench_root / "SVAMP" / "test.json", bench_root / "AddSub" / "train.json")
    assert [r["source"] for r in records] == ["SVAMP"] * 4 + ["AddSub"]
    assert [r["answer"] for r in records] == ["7", "2.5", "5.0", "-3", "7"]
    assert len(read_word_problems(bench_root / "SVAMP" / "test.json", limit=2)) == 2
    assert record_question(records[2]) == "A debt of 2 grows by 3.\nHow much is owed?"
    assert record_question(records[0]) == WORD_PROBLEMS[0]["instruction"]
    with pytest.raises(FileNotFoundError, match=r"nope.json does not exist.*Fix"):
        read_word_problems(bench_root / "nope.json")
    bad = bench_root / "bad.json"
    bad.write_text(json.dumps([{"question": "no instruction"}]))
    with pytest.raises(ValueError, match=r"bad.json is not an LLM-Adapters JSON list.*Fix"):
        read_word_problems(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json is not valid JSON.*Fix"):
        read_word_problems(bad)


def test_word_problem_dataset_keeps_non_negative_integer_answers(bench_root):
    tok = tiny_tokenizer()
    ds = word_problem_dataset(tok, bench_root / "SVAMP" / "test.json", limit=None, seed=0)
    assert sorted(ds.answers) == ["5", "7"]  # 2.5 and -3 are dropped
    for prompt, toks, ans, answer in zip(ds.prompts, ds.tokens, ds.answer_tokens, ds.answers):
        assert prompt.rstrip().endswith("Answer: The answer is")
        assert tok.decode(toks) == prompt and tok.decode(toks + ans) == "Answer: ".join(
            [prompt.rsplit("Answer: ", 1)[0], "The answer is " + answer]
        )
    assert set(ds.template_ids) == {"SVAMP"}
    shot = word_problem_dataset(tok, bench_root / "SVAMP" / "test.json", limit=None, seed=0, fewshot=1)
    assert len(shot) == 1 and shot.prompts[0].count("Question:") == 2


def test_operand_counterfactuals_change_both_operands_and_the_answer_and_stay_aligned(template_sets):
    tok = tiny_tokenizer()
    cfg = GenerationConfig(operations=("add", "mul"), n_per_template=4, counterfactual="operands")
    ds = generate_pairs(tok, template_sets, cfg)
    for r in ds.dataset:
        assert r["counterfactual"] == "operands" and len(r["tokens"]) == len(r["cf_tokens"])
        assert r["cf_a"] != r["a"] and r["cf_b"] != r["b"] and r["cf_answer"] != r["answer"]
        assert r["cf_answer"] == compute_answer(r["operation"], r["cf_a"], r["cf_b"])
        a_at = r["pos_a"][-1]
        assert r["tokens"][a_at] != r["cf_tokens"][a_at], "operand A differs at its position"
        assert r["tokens"][: r["prefix_len"]] == r["cf_tokens"][: r["prefix_len"]], "the few-shot prefix is shared"
    op = generate_pairs(tok, template_sets, GenerationConfig(operations=("add",), n_per_template=4))
    assert not op.has("cf_a"), "the operator counterfactual is unchanged"
    with pytest.raises(Exception, match="counterfactual"):
        GenerationConfig(counterfactual="numbers")
