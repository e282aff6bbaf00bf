"""Bad inputs are refused clearly, before anything is written.

A battery of bad configs, CLI arguments and objects users bring. Each must end with exit code 2 (or the API's
exception) and a message that names the offending input and says ``Fix:`` exactly once, and must leave a new
run folder unwritten. ``BATTERY`` is also what the resolve note counts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel

from mathcircuits.circuit import Circuit, Sender
from mathcircuits.cli import main
from mathcircuits.models import from_hf, wrap
from mathcircuits.models.tiny import tiny_tokenizer
from mathcircuits.pipeline import ConfigError, RunConfig

from helpers import assert_clear as _assert_clear
from helpers import sampled, unchecked

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())

# (id, sections merged over configs/tiny.yaml, words the message must contain)
BATTERY: list[tuple[str, dict, tuple[str, ...]]] = [
    ("lr-inf", {"compare": {"learning_rates": [1e400]}}, ("learning_rates", "finite")),
    ("lr-zero", {"compare": {"learning_rates": [0.0]}}, ("learning_rates", "positive")),
    ("lr-string", {"compare": {"learning_rates": ["fast"]}}, ("learning_rates",)),
    ("compare-modes-empty", {"compare": {"modes": []}}, ("compare.modes", "empty")),
    ("compare-mode-unknown", {"compare": {"modes": ["precise", "magic"]}}, ("magic",)),
    ("compare-mode-repeated", {"compare": {"modes": ["full", "full"]}}, ("repeated",)),
    (
        "compare-precise-K-too-big",
        {"compare": {"enabled": True, "modes": ["base", "precise@999"]}},
        ("precise@999", "heads"),
    ),
    ("finetune-modes-empty", {"finetune": {"modes": []}}, ("finetune.modes", "empty")),
    ("finetune-precise-K-too-big", {"finetune": {"modes": ["precise@500"]}}, ("precise@500", "heads")),
    ("finetune-mode-unknown", {"finetune": {"modes": ["precise@0"]}}, ("precise@0",)),
    ("finetune-lr-negative", {"finetune": {"learning_rate": -1.0}}, ("learning_rate",)),
    ("finetune-lr-nan", {"finetune": {"learning_rate": float("nan")}}, ("learning_rate", "finite")),
    ("circuit-senders-empty", {"circuit": {"senders": []}}, ("circuit.senders",)),
    ("circuit-receivers-empty", {"circuit": {"receivers": []}}, ("circuit.receivers",)),
    ("circuit-sender-kind", {"circuit": {"senders": ["attn"]}}, ("senders", "attn")),
    ("circuit-receiver-kind", {"circuit": {"receivers": ["o"]}}, ("receivers",)),
    ("circuit-screen-below-top-k", {"circuit": {"screen": 1, "top_k": 4}}, ("screen", "top_k")),
    ("circuit-n-random-negative", {"circuit": {"n_random": -1}}, ("n_random",)),
    ("benchmark-unknown", {"evaluation": {"benchmarks": ["GSM9K"]}}, ("GSM9K", "benchmarks")),
    (
        "compare-with-a-generation-benchmark",
        {"compare": {"enabled": True}, "evaluation": {"benchmarks": ["AddSub", "ARC-Easy"]}},
        ("AddSub", "likelihood", "compare"),
    ),
    ("word-problems-unknown", {"validation": {"word_problem_sets": ["MultiArith"]}}, ("MultiArith",)),
    (
        "operands-no-pair-div",
        {"data": {"operations": ["div"], "template_ids": None, "operand_range": [0, 0]}},
        ("operand_range", "div"),
    ),
    ("operands-reversed", {"data": {"operand_range": [9, 1]}}, ("operand_range",)),
    ("operation-unknown", {"data": {"operations": ["mod"]}}, ("mod",)),
    ("template-unknown", {"data": {"template_ids": ["nope_1"]}}, ("nope_1",)),
    ("heldout-all", {"data": {"heldout_templates": ["add_eq_1", "add_eq_2", "sub_eq_1"]}}, ("heldout_templates",)),
    ("device-cuda", {"model": {"device": "cuda"}}, ("model.device", "cuda")),
    ("device-garbage", {"model": {"device": "gpu0"}}, ("model.device",)),
    ("dtype-unknown", {"model": {"dtype": "float8"}}, ("dtype",)),
    ("fast-paths-unknown", {"model": {"fast_paths": "maybe"}}, ("fast_paths",)),
    ("source-missing-folder", {"model": {"source": "/nonexistent/model"}}, ("source",)),
    ("knockout-ks-out-of-range", {"validation": {"knockout_ks": [99]}}, ("knockout_ks",)),
    ("ablation-unknown", {"validation": {"ablation": "zero"}}, ("ablation",)),
    ("selection-rule-unknown", {"selection": {"rule": "best"}}, ("rule",)),
    ("patching-method-unknown", {"patching": {"method": "fast"}}, ("method",)),
    ("unknown-section", {"pathcing": {"method": "exact"}}, ("pathcing",)),
    ("unknown-key", {"patching": {"mehtod": "exact"}}, ("mehtod",)),
    ("list-for-scalar", {"finetune": {"max_steps": [2]}}, ("max_steps",)),
    ("scalar-for-list", {"data": {"operations": "add"}}, ("operations", "list")),
    ("bool-for-int", {"finetune": {"max_steps": True}}, ("max_steps",)),
    ("negative-count", {"data": {"n_per_template": -3}}, ("n_per_template",)),
]


def _config(tmp_path: Path, sections: dict) -> Path:
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in TINY.items()}
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values}
    path = tmp_path / "cfg.yaml"
    text = yaml.safe_dump(cfg).replace(".inf", "1e400") if any("1e400" in str(v) for v in sections.values()) else None
    path.write_text(text or yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("sections, words", sampled([pytest.param(s, w, id=i) for i, s, w in BATTERY]))
def test_bad_config_is_refused_before_anything_is_written(tmp_path, capsys, sections, words):
    out = tmp_path / "run"
    code = main(["run", "--config", str(_config(tmp_path, sections)), "--out", str(out), "--quiet"])
    _assert_clear(code, capsys.readouterr().err, words, out)


def test_learning_rate_written_as_yaml_string_is_a_number():
    """PyYAML reads ``1e-4`` (no dot) as a string; a float setting takes it as the number."""
    cfg = RunConfig.from_dict(
        yaml.safe_load("finetune: {learning_rate: 1e-4}\ncompare: {learning_rates: [1e-4, 3e-4]}")
    )
    assert cfg.finetune.learning_rate == 1e-4 and cfg.compare.learning_rates == (1e-4, 3e-4)
    assert all(math.isfinite(x) for x in cfg.compare.learning_rates)


def test_list_setting_hints_fit_the_value():
    with pytest.raises(ConfigError, match=r"make every element a finite number") as e:
        RunConfig.from_dict({"compare": {"learning_rates": ["x", 1e-3]}})
    assert "not a single value" not in str(e.value)
    with pytest.raises(ConfigError, match=r"write a YAML list .* not a single value"):
        RunConfig.from_dict({"compare": {"learning_rates": 1e-3}})


TINY_YAML = str(ROOT / "configs" / "tiny.yaml")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["run", "--config", TINY_YAML, "--model", "/nonexistent/dir"], ("--model", "source")),
        (["identify", "--config", TINY_YAML], ("needs stage 'data' first",)),
        (["run", "--config", "missing.yaml"], ("missing.yaml",)),
        (["run", "--config", TINY_YAML, "--model", "tiny-nosuchfamily"], ("nosuchfamily",)),
    ],
)
def test_bad_cli_arguments_are_refused(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    code = main([*argv, "--out", str(out), "--quiet"])
    _assert_clear(code, capsys.readouterr().err, words, out)


# ---- objects users bring ---------------------------------------------------------------------------------------


def _llama_config(vocab: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )


@pytest.mark.parametrize(
    "case", ["no-lm-head", "meta", "small-vocab", "string-tokenizer", "no-tokenizer", "not-a-model"]
)
def test_objects_users_bring_are_refused_clearly(case):
    tok = tiny_tokenizer()
    if case == "no-lm-head":
        obj, t, words = LlamaModel(_llama_config(len(tok))), tok, "no language-model head"
    elif case == "meta":
        with torch.device("meta"):
            obj = LlamaForCausalLM(_llama_config(len(tok)))
        t, words = tok, "meta device"
    elif case == "small-vocab":
        obj, t, words = LlamaForCausalLM(_llama_config(10)), tok, "head only 10"
    elif case == "string-tokenizer":
        obj, t, words = LlamaForCausalLM(_llama_config(len(tok))), "meta-llama/Llama-3-8B", "not an HF tokenizer"
    elif case == "no-tokenizer":
        obj, t, words = LlamaForCausalLM(_llama_config(len(tok))), None, "needs the tokenizer"
    else:
        obj, t, words = torch.nn.Linear(3, 3), tok, "Fix: pass an HF AutoModelForCausalLM"
    with unchecked(), pytest.raises((TypeError, ValueError)) as e:  # the library's own check, as a user meets it
        wrap(obj, t)
    text = str(e.value)
    assert words in text and text.count("Fix:") == 1


def test_from_hf_takes_a_good_model():
    tok = tiny_tokenizer()
    assert from_hf(LlamaForCausalLM(_llama_config(len(tok))), tok).spec.n_layers == 2


# ---- circuits ----------------------------------------------------------------------------------------------------


def test_sender_kind_and_head_are_checked():
    # (under pytest the runtime type checks may refuse the Literal first; without them __post_init__ does)
    with pytest.raises((ValueError, TypeError), match="attn"):
        Sender("attn", 0, 0)
    with pytest.raises(ValueError, match="a head sender names its query head"):
        Sender("head", 1)
    assert Sender("mlp", 2).name == "MLP2"


def test_circuit_file_with_a_head_outside_the_model_is_refused(tmp_path):
    from mathcircuits.circuit import Edge, Node
    from mathcircuits.models import load_model

    spec = load_model("tiny-llama").spec
    nodes = (Node("logits", -1, -1, "last"), Node("head", 1, 0, "last", depth=0))
    good = Circuit(model=spec, nodes=nodes, edges=(Edge("L1.H0@last", "logits", "logits", -0.1, -0.2, 0.0),),
                   metric="logit_diff", method="exact", n_pairs=4)  # fmt: skip
    good.save(tmp_path / "c.json")
    saved = json.loads((tmp_path / "c.json").read_text())
    saved["nodes"][1].update(layer=99, head=99)  # edited by hand: a head a 3-layer model does not have
    (tmp_path / "c.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"layer 99.*Fix:") as e:
        Circuit.load(tmp_path / "c.json")
    assert str(e.value).count("Fix:") == 1
