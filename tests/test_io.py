"""The one save/load protocol: round trips in both formats, and a clear error for every bad file."""

from __future__ import annotations

import json

import pytest
import torch

from mathcircuits import ResultFileError
from mathcircuits.ablation import HeadMeans, TransferResult
from mathcircuits.finetune import SliceSet, head_slices
from mathcircuits.models import Head, ModelSpec, load_hf_model
from mathcircuits.patching import KeyComponents, PatchingResult, PatchSettings, SelectionConfig, SelectionSource

SPEC = ModelSpec(
    name="toy",
    source="toy",
    architecture="ToyForCausalLM",
    n_layers=3,
    n_heads=2,
    n_kv_heads=1,
    d_head=4,
    d_model=8,
    d_mlp=16,
    vocab_size=20,
    model_type="toy",
)


def _patching(**over) -> PatchingResult:
    g = torch.Generator().manual_seed(0)
    fields = {
        "head_effects": torch.randn(3, 2, generator=g),
        "mlp_effects": torch.randn(3, generator=g),
        "metric": "logit_diff",
        "method": "exact",
        "model": SPEC,
        "n_pairs": 4,
        "pair_ids": [0, 1, 2, 3],
        "operations": ["add"],
        "per_pair_heads": torch.randn(4, 3, 2, generator=g),
        "per_pair_mlps": None,
        "seconds": 1.5,
        "settings": PatchSettings(senders=("heads", "mlps"), batch_size=4, chunk_rows=64),
    }
    return PatchingResult(**{**fields, **over})


def _key() -> KeyComponents:
    return KeyComponents(
        model=SPEC,
        heads=(Head(2, 1), Head(0, 0)),
        mlps=(1,),
        head_scores=(-0.3, -0.1),
        mlp_scores=(-0.2,),
        selection=SelectionConfig(rule="topk", k=2),
        source=SelectionSource(operations=("add",)),
    )


def _assert_same_patching(a: PatchingResult, b: PatchingResult) -> None:
    assert torch.equal(a.head_effects, b.head_effects) and torch.equal(a.mlp_effects, b.mlp_effects)
    assert torch.equal(a.per_pair_heads, b.per_pair_heads) and b.per_pair_mlps is None
    assert (a.metric, a.method, a.model, a.n_pairs, a.pair_ids, a.operations, a.seconds) == (
        b.metric,
        b.method,
        b.model,
        b.n_pairs,
        b.pair_ids,
        b.operations,
        b.seconds,
    )
    assert a.settings == b.settings  # nested records and their tuples come back as they were


@pytest.mark.parametrize("suffix", [".pt", ".json"])
def test_round_trip_in_both_formats_keeps_types(tmp_path, suffix):
    res = _patching()
    back = PatchingResult.load(res.save(tmp_path / f"res{suffix}"))
    _assert_same_patching(res, back)
    assert isinstance(back.model, ModelSpec) and isinstance(back.settings.senders, tuple)
    key = _key()
    again = KeyComponents.load(key.save(tmp_path / f"key{suffix}"))
    assert again == key and isinstance(again.heads[0], tuple)
    means = HeadMeans(means=torch.rand(3, 2, 4), n_prompts=5, model=SPEC)
    m2 = HeadMeans.load(means.save(tmp_path / f"means{suffix}"))
    assert torch.equal(m2.means, means.means) and m2.model == SPEC and m2.n_prompts == 5


@pytest.mark.parametrize("suffix", [".json", ".pt"])
def test_heads_are_saved_as_pairs_and_load_as_heads(tmp_path, suffix):
    res = TransferResult(rows=(), key_heads=[Head(2, 1), Head(0, 0)], n_random=3)
    path = res.save(tmp_path / f"t{suffix}")
    back = TransferResult.load(path)
    assert back.key_heads == res.key_heads and all(type(h) is Head for h in back.key_heads)
    if suffix == ".json":
        assert json.loads(path.read_text())["key_heads"] == [[2, 1], [0, 0]]
    with pytest.raises(ResultFileError, match=r"key_heads\[0\].*Head \(2 items\)"):
        TransferResult.from_dict({**res.to_dict(), "key_heads": [[2, 1, 0]]})


def test_json_is_readable_and_headed(tmp_path):
    path = _key().save(tmp_path / "key.json")
    d = json.loads(path.read_text())
    assert d["__kind__"] == "mathcircuits.KeyComponents" and d["__version__"] == KeyComponents.VERSION
    assert d["heads"] == [[2, 1], [0, 0]] and d["model"]["name"] == "toy"


def test_to_dict_from_dict_round_trip_and_kind_check():
    key = _key()
    assert KeyComponents.from_dict(key.to_dict()) == key
    with pytest.raises(ResultFileError, match="holds a KeyComponents, not a PatchingResult"):
        PatchingResult.from_dict(key.to_dict())


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _bad_files(tmp_path, good):
    """(label, path, expected words in the message) for each kind of broken file of ``good``'s class."""
    pt = good.save(tmp_path / "good.pt")
    js = good.save(tmp_path / "good.json")
    raw = pt.read_bytes()
    d = json.loads(js.read_text())
    other = HeadMeans(means=torch.rand(3, 2, 4), n_prompts=1, model=SPEC).save(tmp_path / "means.pt")
    return [
        ("truncated .pt", _write(tmp_path / "trunc.pt", raw[: len(raw) // 2]), ["truncated or corrupted"]),
        ("truncated .json", _write(tmp_path / "trunc.json", js.read_bytes()[:40]), ["neither", "valid JSON"]),
        ("garbage", _write(tmp_path / "garbage.pt", bytes(range(256)) * 4), ["neither", "valid JSON"]),
        ("zip garbage", _write(tmp_path / "zip.pt", b"PK\x03\x04" + b"\x00" * 60), ["truncated or corrupted"]),
        ("empty", _write(tmp_path / "empty.pt", b""), ["empty (0 bytes)"]),
        ("no header", _write(tmp_path / "plain.json", b'{"heads": []}'), ["no kind/version header"]),
        ("not a dict", _write(tmp_path / "list.json", b"[1, 2]"), ["holds a list"]),
        ("wrong kind", other, ["holds a HeadMeans", "HeadMeans.load()"]),
        (
            "newer version",
            _write(tmp_path / "newer.json", json.dumps({**d, "__version__": 99}).encode()),
            ["newer mathcircuits", "version 99"],
        ),
        (
            "extra field",
            _write(tmp_path / "extra.json", json.dumps({**d, "colour": "red"}).encode()),
            ["unknown field", "colour"],
        ),
        (
            "missing field",
            _write(tmp_path / "missing.json", json.dumps({k: v for k, v in d.items() if k != "model"}).encode()),
            ["lacks field", "model"],
        ),
        (
            "mistyped field",
            _write(
                tmp_path / "typed.json",
                json.dumps({**d, "n_pairs" if "n_pairs" in d else "stability_seed": [1]}).encode(),
            ),
            ["should be"],
        ),
        (
            "bad model spec",
            _write(tmp_path / "spec.json", json.dumps({**d, "model": {**d["model"], "n_layers": "3"}}).encode()),
            ["model", "n_layers", "should be of type int"],
        ),
    ]


@pytest.mark.parametrize("make", [_patching, _key], ids=["PatchingResult", "KeyComponents"])
def test_every_bad_file_names_the_file_the_problem_and_the_fix(tmp_path, make):
    good = make()
    cls = type(good)
    for label, path, words in _bad_files(tmp_path, good):
        with pytest.raises(ResultFileError) as info:
            cls.load(path)
        msg = str(info.value)
        assert str(path) in msg, (label, msg)
        assert info.value.fix, (label, msg)
        for w in words:
            assert w in msg, (label, w, msg)
    with pytest.raises(FileNotFoundError, match="nothere.pt does not exist"):
        cls.load(tmp_path / "nothere.pt")
    with pytest.raises(ResultFileError, match="is a folder"):
        cls.load(tmp_path)


def test_files_of_an_older_format_are_refused_with_the_stage_to_rerun(tmp_path):
    """No format is migrated before 1.0: the old headers are recognised and refused, naming the stage."""
    res = _patching()
    torch.save({"__kind__": "PatchingResult", "fields": {"n_pairs": 4}}, tmp_path / "old.pt")  # unversioned .pt
    v1 = {"kind": "mathcircuits.KeyComponents", "version": 1, "heads": [[2, 1], [0, 0]], "mlps": [1]}  # JSON v1
    (tmp_path / "key_v1.json").write_text(json.dumps(v1))
    older = {**res.to_dict(), "__version__": PatchingResult.VERSION - 1}  # the current header, one version back
    torch.save(older, tmp_path / "older.pt")
    for cls, path, stage in (
        (PatchingResult, tmp_path / "old.pt", "identify"),
        (KeyComponents, tmp_path / "key_v1.json", "identify"),
        (PatchingResult, tmp_path / "older.pt", "identify"),
    ):
        with pytest.raises(ResultFileError) as info:
            cls.load(path)
        msg = str(info.value)
        assert str(path) in msg and "older mathcircuits (format version" in msg, msg
        assert f"this one reads version {cls.VERSION}" in msg and f"mathcircuits {stage} --force" in msg, msg
    assert PatchingResult.load(res.save(tmp_path / "now.pt")).settings == res.settings  # the current format loads


def test_slices_of_the_old_format_ask_for_a_rerun_and_new_ones_check_their_counts(tmp_path):
    model, _ = load_hf_model("tiny-llama")
    ss = head_slices(model, [(0, 1)], mlps=[2])
    d = ss.to_dict()
    assert d["n_tuned"] == ss.n_tuned and SliceSet.from_dict(d) == ss
    facts = {
        k: d["model"][k]
        for k in ("name", "model_type", "architecture", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_model")
    }
    old = {
        "kind": "mathcircuits.SliceSet",
        "version": 1,
        **{k: v for k, v in d.items() if not k.startswith("__")},
        "model": facts,
    }
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(ResultFileError, match=r"older mathcircuits.*mathcircuits finetune --force"):
        SliceSet.load(tmp_path / "old.json")
    (tmp_path / "edited.json").write_text(json.dumps({**d, "n_tuned": d["n_tuned"] + 1}))
    with pytest.raises(ResultFileError, match="n_tuned"):
        SliceSet.load(tmp_path / "edited.json")


def test_model_spec_from_hf_equals_the_loaded_spec_but_the_name():
    from mathcircuits.models import load_model

    for source in ("tiny-llama", "tiny-gpt2"):
        hf, _ = load_hf_model(source)
        assert ModelSpec.from_hf(hf, source, source) == load_model(source).spec


def test_model_spec_from_dict_is_strict():
    with pytest.raises(ValueError, match=r"unknown field.*'colour'"):
        ModelSpec.from_dict({**SPEC.to_dict(), "colour": "red"})
    with pytest.raises(ValueError, match=r"lacks field.*'d_mlp'"):
        ModelSpec.from_dict({k: v for k, v in SPEC.to_dict().items() if k != "d_mlp"})
