"""The report's small things a newcomer trips on: role panels that agree with claim C3, CircuitsVis views sized to
their content, whole subtitles in PNG exports, the verdict first on a phone, the preset named on a "not measured"
row."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from mathcircuits.analysis import AttentionByRole
from mathcircuits.claims.attention import claim_c3
from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import KeyComponents
from mathcircuits.report import ReportParts
from mathcircuits.report.sections.attention import AttentionSection
from mathcircuits.viz import attention_role_distributions

SPEC = ModelSpec(
    name="tiny", source="test", architecture="llama", n_layers=4, n_heads=2, n_kv_heads=2, d_head=8, d_model=16,
    d_mlp=32, vocab_size=50,
)  # fmt: skip

KEY = KeyComponents(model=SPEC, heads=(Head(2, 1), Head(3, 0)), mlps=(), head_scores=(-0.08, -0.03), mlp_scores=())


def _attention() -> AttentionByRole:
    """Two key heads and their layer-mates on 4 add and 4 sub pairs.

    L2.H1 reads the operands on add and the operator on sub, so classing per operation draws it in two panels;
    L3.H0 reads the operands everywhere; the layer-mates look at the prefix.
    """
    heads = (Head(2, 1), Head(3, 0), Head(2, 0), Head(3, 1))
    ops = ["add"] * 4 + ["sub"] * 4
    rows = []
    for op in ops:
        switch = [0.3, 0.3, 0.05, 0.25, 0.1] if op == "add" else [0.05, 0.05, 0.6, 0.2, 0.1]
        rows.append([switch, [0.3, 0.3, 0.05, 0.25, 0.1], [0.02, 0.02, 0.02, 0.9, 0.04], [0.03, 0.02, 0.02, 0.9, 0.03]])
    shares = torch.tensor(rows) + torch.linspace(-0.01, 0.01, 8)[:, None, None] * torch.tensor([1.0, -1.0, 0, 0, 0])
    return AttentionByRole(
        heads=heads,
        shares=shares,
        baselines=torch.tensor([0.05, 0.05, 0.05, 0.7, 0.15]).repeat(8, 1),
        operations=ops,
        pair_ids=list(range(8)),
        template_ids=[f"t{i % 4}" for i in range(8)],
        model=SPEC,
        sink=torch.full((8, 4), 0.2),
        sink_baselines=torch.full((8,), 0.1),
    )


def _panels(fig) -> dict[str, list[str]]:
    """Each panel's class and the heads its title names."""
    out = {}
    for a in fig.to_dict()["layout"]["annotations"]:
        m = re.match(r"(operand|operator|other key) heads: (.*)", a["text"])
        if m:
            out[m.group(1)] = [h for h in m.group(2).split(", ") if h != "none"]
    return out


def test_role_panels_class_each_key_head_as_claim_c3_does():
    att = _attention()
    per_operation = _panels(attention_role_distributions(att))
    assert "L2.H1" in per_operation["operand"] and "L2.H1" in per_operation["operator"]  # the old disagreement
    c3 = claim_c3(att, KEY)
    (section,) = AttentionSection.of(ReportParts(attention=att, key_components=KEY))
    figure = dict((f.name, f.figure) for f in section.figures())["attention_roles"]
    panels = _panels(figure)
    shown = [h for heads in panels.values() for h in heads]
    assert sorted(shown) == ["L2.H1", "L3.H0"]  # each key head once; the layer-mates are not key heads
    findings = c3.measurement.split(": ", 1)[1].split("; ")
    for kind, heads in panels.items():
        for h in heads:  # C3's finding that names the head says the panel's class
            (finding,) = [f for f in findings if re.search(rf"\b{re.escape(h)}\b", f)]
            assert finding.startswith(f"{kind} head"), (kind, h, finding)
    for kind in ("operand", "operator"):
        if f"no {kind} head" in c3.measurement:
            assert not panels.get(kind)


def test_attention_views_are_sized_to_their_prompt():
    from mathcircuits.analysis import HeadPatterns
    from mathcircuits.viz import attention_heads_view
    from mathcircuits.viz.circuitsvis import VIEW_MAX_PX, VIEW_PX_PER_HEAD, view_width

    def view(n_tokens: int, n_heads: int) -> int:
        tokens = [f"t{i}" for i in range(n_tokens)]
        pat = torch.tril(torch.ones(n_heads, n_tokens, n_tokens))
        patterns = HeadPatterns(
            heads=tuple(Head(l, 0) for l in range(n_heads)), prompts=[" ".join(tokens)], tokens=[tokens],
            roles=[["other"] * n_tokens], patterns=[pat / pat.sum(-1, keepdim=True)], pair_ids=[0],
            operations=["add"], model=SPEC,
        )  # fmt: skip
        fragment = attention_heads_view(patterns).fragment
        return int(re.match(r'<div class="cv-view" style="max-width: (\d+)px">', fragment).group(1))

    short, long_ = view(17, 2), view(200, 2)
    assert short == view_width(17, 2) < 600 < long_ == VIEW_MAX_PX  # a short prompt gets a small square
    assert view(4, 6) == 6 * VIEW_PX_PER_HEAD + 40  # a few tokens, many heads: room for a thumbnail per head


def test_long_subtitles_wrap_whole_in_static_exports():
    import plotly.graph_objects as go

    from mathcircuits.viz.export import CHAR_WIDTH, whole_title

    words = [f"word{i}" for i in range(60)]
    fig = go.Figure(go.Bar(y=[1, 2]))
    fig.update_layout(title="A short title<br><sup>" + " ".join(words) + "</sup>", width=700, height=400)
    out = whole_title(fig)
    lines = out.layout.title.text.split("<br>")
    assert lines[0] == "A short title" and len(lines) > 3
    room = (700 * 0.95 - 10) / (CHAR_WIDTH * 17 * 0.7)
    assert all(len(re.sub("<[^>]+>", "", x)) <= room for x in lines[1:])  # each line fits the width
    assert re.sub("<[^>]+>", "", " ".join(lines[1:])).split() == words  # every word, in order
    assert out.layout.height > 400 and out.layout.margin.t > 100  # the plot keeps its size below the title
    assert fig.layout.height == 400  # the figure itself is not changed
    fits = go.Figure(layout=dict(title="short<br><sup>a subtitle that fits</sup>"))
    assert whole_title(fits) is fits


def test_on_a_phone_the_verdict_comes_right_after_the_claim_name():
    from mathcircuits.report.html import CSS

    phone = CSS[CSS.index("@media (max-width: 600px)") :]
    assert "table.claims tr { display: flex; flex-direction: column;" in phone
    order = dict(re.findall(r"table\.claims (td[.:][\w()-]+) \{ order: (\d); \}", phone))
    assert order == {"td.id": "0", "td:nth-child(4)": "1"}  # the name, the verdict; the rest after (order 2)
    assert re.search(r"table\.claims td \{[^}]*order: 2;", phone)


def test_each_not_measured_row_names_the_preset_that_measures_it(tmp_path):
    from mathcircuits.claims import assess_claims
    from mathcircuits.claims.card import MEASURED_BY, Verdict
    from mathcircuits.claims.numbers import PAPER_N, claim_n1, claim_n2, claim_n3
    from mathcircuits.claims.paper import PAPER
    from mathcircuits.pipeline.config import RunConfig
    from mathcircuits.report import build_report

    card = assess_claims()  # nothing measured
    card = dataclasses.replace(card, claims=(*card.claims, claim_n1(None, None), claim_n2(None, None), claim_n3(None)))
    assert all(c.verdict == Verdict.NOT_MEASURED for c in card.claims)
    lines = "\n".join(card.lines())
    page = build_report(tmp_path / "r.html", ReportParts(claims=card)).read_text(encoding="utf-8")
    for c in card.claims:
        assert c.preset_text == f"measured by {MEASURED_BY[c.id]}"
        assert f"{c.id} " in lines and c.preset_text in lines and c.preset_text in page
    assert set(PAPER) | set(PAPER_N) == set(MEASURED_BY)  # every claim the card can show
    # each preset runs the stage its claims need
    stage = {"C6": "compare", "C6b": "compare", "N1": "numbers", "N2": "numbers", "N3": "numbers"}
    root = Path(__file__).resolve().parents[1]
    for cid, preset in MEASURED_BY.items():
        cfg = RunConfig.load(root / preset)
        if cid in stage:
            assert getattr(cfg, stage[cid]).enabled, (cid, preset)
        else:  # the core claims: identify, validate and analyze run in every preset
            assert preset == "configs/default.yaml"
    measured = dataclasses.replace(card.claims[0], verdict=Verdict.HOLDS)
    assert measured.preset_text == ""  # a measured row names no preset


def test_the_readme_image_is_drawn_by_the_readme_example_as_it_now_reads():
    from helpers import script_module

    hero = script_module("readme_image")
    root = Path(__file__).resolve().parents[1]
    assert f"]({hero.IMAGE.relative_to(root)})" in (root / "README.md").read_text()
    # made by scripts/readme_image.py from this very example: an edited example needs a new image
    assert hero.stamp_of(hero.IMAGE) == hero.digest(hero.readme_example())
    data = hero.IMAGE.read_bytes()
    again = hero.stamped(hero.stamped(data, "k", "one"), "k", "two")  # a second stamp replaces the first
    kinds = [kind for kind, _ in hero._chunks(again)]
    assert kinds.count(b"tEXt") == [k for k, _ in hero._chunks(data)].count(b"tEXt") + 1 and kinds[-1] == b"IEND"
    assert b"k\0two" in again and b"k\0one" not in again


def test_fine_tuning_figures_draw_each_modes_loss_and_accuracy_with_intervals():
    import pandas as pd

    from mathcircuits.finetune import SFTConfig, SFTResult
    from mathcircuits.stats.interval import wilson_interval
    from mathcircuits.viz import accuracy_before_after, sft_loss_curves

    def run(mode: str, losses: tuple[float, ...], n_trainable: int) -> SFTResult:
        return SFTResult(
            mode=mode, config=SFTConfig(mode=mode), model=SPEC, n_trainable=n_trainable, n_model_params=1000,
            global_step=len(losses), train_loss=losses[-1], loss_history=tuple(enumerate(losses, 1)), runtime_s=1.0,
            samples_per_second=1.0, output_dir="out",
        )  # fmt: skip

    fig = sft_loss_curves({"precise": run("precise", (2.0, 1.5, 1.2), 42), "full": run("full", (2.0, 1.0, 0.5), 1000)})
    lines = {t.name: t for t in fig.data}
    assert list(lines) == ["precise (4.2% of the parameters)", "full (100.0% of the parameters)"]
    assert list(lines["full (100.0% of the parameters)"].y) == [2.0, 1.0, 0.5]
    assert list(lines["precise (4.2% of the parameters)"].x) == [1, 2, 3]

    before = pd.DataFrame({"operation": ["add", "sub"], "n": [21, 27], "accuracy": [2 / 21, 3 / 27]})
    after = pd.DataFrame({"operation": ["add", "sub"], "n": [21, 27], "accuracy": [6 / 21, 7 / 27]})
    bars = accuracy_before_after({"before": before, "precise": after})
    assert [t.name for t in bars.data] == ["before", "precise"]
    iv = wilson_interval(6, 21)
    add = bars.data[1]
    assert add.y[0] == pytest.approx(100 * iv.value)
    assert add.error_y.array[0] == pytest.approx(100 * (iv.high - iv.value))
    assert add.error_y.arrayminus[0] == pytest.approx(100 * (iv.value - iv.low))
    assert "Wilson" in bars.layout.title.text


@pytest.mark.integration
def test_a_png_export_shows_the_whole_subtitle(tmp_path):
    import plotly.graph_objects as go
    from test_viz import _read_png

    from mathcircuits.viz import save_figures
    from mathcircuits.viz.export import find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium-based browser")
    long = " ".join(f"step {i}: 0.{i:02d} of 1234 pairs" for i in range(12))  # ~300 characters, digits and all
    fig = go.Figure(go.Bar(y=[1, 2]), layout=dict(title=f"Title<br><sup>{long}</sup>", width=600, height=360))
    (png,) = save_figures({tmp_path / "f.png": fig}, scale=1.0)
    img = _read_png(png).astype(int)
    top = img[: int(img.shape[0] * 0.3)]  # the title band
    dark = (top.max(-1) < 140).any(0)  # columns with text in them
    assert dark[: img.shape[1] // 2].any(), "no title text found"
    assert not dark[-12:].any(), "text runs into the right edge: the subtitle is cut"
