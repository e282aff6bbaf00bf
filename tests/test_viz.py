"""Figures, CircuitsVis views, export and the HTML report, on result values built by hand (no model needed)."""

from __future__ import annotations

import dataclasses
import html
import math
import re
import struct
import zlib
from pathlib import Path

import pytest
import torch

from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.ablation.transfer import transfer_row
from mathcircuits.analysis import ROLES, AttentionByRole, HeadPatterns, MLPProbeResult
from mathcircuits.claims import assess_claims
from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.report import ReportParts, build_report
from mathcircuits.report.build import report_figures, report_html
from mathcircuits.report.html import CARD_END_COLOUR
from mathcircuits.stats import Uncertainty
from mathcircuits.viz import (
    ChromiumMissingError,
    attention_heads_view,
    attention_role_distributions,
    attention_role_means,
    knockout_curves,
    patching_heatmap,
    patching_heatmaps,
    probe_case_trajectory,
    probe_similarity_curves,
    save_figure,
    save_figures,
    screenshot_html,
)
from mathcircuits.viz.circuitsvis import circuitsvis_bundle, split_bundle
from mathcircuits.viz.export import find_chromium, whole_title

SPEC = ModelSpec(
    name="toy",
    source="toy",
    architecture="Toy",
    n_layers=4,
    n_heads=3,
    n_kv_heads=3,
    d_head=8,
    d_model=24,
    d_mlp=48,
    vocab_size=50,
)
needs_chromium = pytest.mark.skipif(
    find_chromium() is None, reason="no Chromium-based browser (apt-get install -y chromium, or set BROWSER_PATH)"
)


Knockout = KnockoutResult  # the ablation stage's result, with the fields these figures read


def patching(op: str, seed: int, n_pairs: int = 6) -> PatchingResult:
    g = torch.Generator().manual_seed(seed)
    heads = torch.randn(4, 3, generator=g) * 0.02
    heads[2, 1] = -0.08
    heads[0, 2] = float("nan")  # a sender that was not patched
    return PatchingResult(
        head_effects=heads,
        mlp_effects=torch.randn(4, generator=g) * 0.3,
        metric="relative_logit",
        method="test",
        model=SPEC,
        n_pairs=n_pairs,
        operations=[op],
    )


def key() -> KeyComponents:
    return KeyComponents(
        model=SPEC, heads=(Head(2, 1), Head(3, 0)), mlps=(1,), head_scores=(-0.08, -0.03), mlp_scores=(-0.4,)
    )


def knockouts() -> list[Knockout]:
    rnd = torch.tensor([[0.9, 0.88, 0.85, 0.8], [0.9, 0.86, 0.84, 0.83], [0.9, 0.9, 0.8, 0.78]])
    return [
        Knockout([0, 1, 2, 3], [0.9, 0.6, 0.3, 0.1], rnd, 0.9, "add"),
        Knockout([0, 1, 2, 3], [0.8, 0.7, 0.5, 0.4], rnd - 0.1, 0.8, "sub"),
    ]


def attention() -> AttentionByRole:
    """Head 0 reads the operands, head 1 the operator, head 2 the prefix; 3 add pairs and 2 sub pairs."""
    per_head = torch.tensor([[0.3, 0.4, 0.05, 0.15, 0.1], [0.02, 0.03, 0.6, 0.25, 0.1], [0.01, 0.01, 0.01, 0.9, 0.07]])
    shares = per_head[None].repeat(5, 1, 1) + torch.linspace(-0.01, 0.01, 5)[:, None, None] * torch.tensor(
        [1.0, -1.0, 0, 0, 0]
    )
    base = torch.tensor([0.05, 0.05, 0.05, 0.7, 0.15])[None].repeat(5, 1)
    return AttentionByRole(
        heads=(Head(2, 1), Head(3, 0), Head(1, 2)),
        shares=shares,
        baselines=base,
        operations=["add"] * 3 + ["sub"] * 2,
        pair_ids=list(range(5)),
        template_ids=["t1", "t2", "t1", "t3", "t3"],
        model=SPEC,
    )


def probes() -> MLPProbeResult:
    g = torch.Generator().manual_seed(1)
    n, L = 5, 4

    def r(scale: float = 0.2) -> torch.Tensor:
        return (torch.rand(n, L, generator=g) - 0.5) * scale

    scores = torch.tensor([[0.5, 0.2, 0.1], [0.9, 0.3, -0.1], [2.0, 0.5, 0.4], [3.0, 1.0, 0.2]])
    return MLPProbeResult(
        model=SPEC,
        space="lens",
        input_sim_a=r(),
        input_sim_b=r(),
        input_sim_answer=r(),
        input_sim_others=r(),
        update_sim_answer=r(),
        update_sim_others=r(),
        update_direct_answer=r(2.0),
        update_direct_margin=torch.tensor([[0.0, 0.1, 0.6, 1.2]]).repeat(n, 1),
        lens_rank=torch.tensor([[40.0, 12.0, 1.0, 0.0]]).repeat(n, 1),
        lens_prob=torch.rand(n, L, generator=g),
        operations=["add"] * 3 + ["sub"] * 2,
        pair_ids=list(range(5)),
        answers=["7", "12", "9", "3", "5"],
        candidate_numbers=list(range(10)),
        candidate_tokens=list(range(10, 20)),
        candidate_texts=[str(i) for i in range(10)],
        case_row=0,
        case_prompt="2 + 4 = 6\n4 + 3 = ",
        case_answer="7",
        case_answer_label="7",
        case_top_numbers=[["3", "4", "7"], ["4", "7", "3"], ["7", "8", "6"], ["7", "6", "8"]],
        case_top_number_scores=scores,
        case_top_tokens=[["a", "b", "c"]] * L,
        case_top_token_scores=scores,
        case_lens_top=[" the", "4", "7", "7"],
    )


def patterns() -> HeadPatterns:
    tokens = ["4", " +", " 3", " =", " "]
    pat = torch.tril(torch.rand(2, 5, 5))
    pat = pat / pat.sum(-1, keepdim=True)
    return HeadPatterns(
        heads=(Head(2, 1), Head(3, 0)),
        prompts=["4 + 3 = "],
        tokens=[tokens],
        roles=[["operand_a", "operator", "operand_b", "other", "other"]],
        patterns=[pat],
        pair_ids=[0],
        operations=["add"],
        model=SPEC,
    )


# ---------------------------------------------------------------- heatmap


def test_patching_heatmap_data_colours_and_key_marks():
    res = patching("add", 0)
    fig = patching_heatmap(res, key())
    d = fig.to_dict()
    heads, mlps = d["data"][0], d["data"][1]
    expected = [[None if math.isnan(v) else v for v in row] for row in res.head_effects.tolist()]
    assert [[None if v is None else pytest.approx(v) for v in row] for row in heads["z"]] == expected
    assert [row[0] for row in mlps["z"]] == pytest.approx(res.mlp_effects.tolist())
    for axis, values in (("coloraxis", res.head_effects), ("coloraxis2", res.mlp_effects)):
        ca = d["layout"][axis]
        finite = values[torch.isfinite(values)]
        assert ca["cmid"] == 0 and ca["cmin"] == -ca["cmax"] and ca["cmax"] == pytest.approx(float(finite.abs().max()))
    marks = {t["name"]: t for t in d["data"][2:]}
    assert list(zip(marks["key heads"]["y"], marks["key heads"]["x"])) == [(2, 1), (3, 0)]
    assert list(marks["key MLPs"]["y"]) == [1]
    assert "add" in d["layout"]["title"]["text"] and d["layout"]["yaxis"]["title"]["text"] == "layer"
    assert "effect" in heads["hovertemplate"]


def test_patching_heatmaps_per_operation_and_weighted_overall():
    a, s = patching("add", 0, n_pairs=6), patching("sub", 1, n_pairs=2)
    figs = patching_heatmaps({"add": a, "sub": s}, key())
    assert list(figs) == ["add", "sub", "overall"]
    z = torch.tensor(
        [[float("nan") if v is None else v for v in row] for row in figs["overall"].to_dict()["data"][0]["z"]]
    )
    expected = 0.75 * a.head_effects + 0.25 * s.head_effects
    assert torch.allclose(z, expected, equal_nan=True)
    assert "weighted" in figs["overall"].layout.title.text
    given = patching_heatmaps({"add": a}, overall=s)
    assert list(given) == ["add", "overall"]
    with pytest.raises(ValueError, match="no results"):
        patching_heatmaps({})


# ---------------------------------------------------------------- knockout


def test_knockout_curves_ranked_random_band_and_baseline():
    kos = knockouts()
    d = knockout_curves(kos).to_dict()
    by_name = {t["name"]: t for t in d["data"]}
    assert list(by_name["add: effect rank"]["y"]) == pytest.approx(kos[0].ranked_accuracy)
    mean, std = kos[0].random_accuracy.mean(0), kos[0].random_accuracy.std(0)
    assert list(by_name["add: random rank (mean)"]["y"]) == pytest.approx(mean.tolist())
    band = by_name["add: random ± std (3 seeds)"]
    assert list(band["y"][:4]) == pytest.approx((mean + std).clamp(max=1).tolist())
    assert list(band["y"][4:]) == pytest.approx((mean - std).flip(0).tolist())
    assert (
        d["layout"]["xaxis"]["title"]["text"].startswith("number of heads")
        and d["layout"]["yaxis"]["title"]["text"] == "accuracy"
    )
    assert {s["y0"] for s in d["layout"]["shapes"]} == {0.9, 0.8}
    assert len(knockout_curves(kos[0]).data) == 3  # a single result works too


def test_knockout_curves_take_the_ablation_stage_result():
    stand_in = knockouts()[0]
    real = KnockoutResult(
        ks=stand_in.ks,
        ranked_accuracy=stand_in.ranked_accuracy,
        random_accuracy=stand_in.random_accuracy,
        baseline_accuracy=stand_in.baseline_accuracy,
        operation="add",
    )
    ours = {t.name: t.y for t in knockout_curves(stand_in).data}
    theirs = {t.name: t.y for t in knockout_curves(real).data}
    assert ours.keys() == theirs.keys() and all(list(ours[k]) == list(theirs[k]) for k in ours)
    std = real.to_dataframe()["random_std"].tolist()  # the figure's band uses the same std as the result's table
    band = theirs["add: random ± std (3 seeds)"]
    assert list(band[:4]) == pytest.approx(
        [min(1.0, m + s) for m, s in zip(real.random_accuracy.mean(0).tolist(), std)]
    )


# ---------------------------------------------------------------- attention by role


def test_attention_role_distributions_panels_and_values():
    att = attention()
    assert att.classify() == ("operand", "operator", "neither")
    fig = attention_role_distributions(att)
    d = fig.to_dict()
    titles = [a["text"] for a in d["layout"]["annotations"]]
    assert titles[0].startswith("operand heads: L2.H1") and titles[1].startswith("operator heads: L3.H0")
    box = next(t for t in d["data"] if t["type"] == "box" and t["name"] == "add" and t["xaxis"] == "x")
    assert len(box["y"]) == 3 * len(ROLES)  # 3 add pairs x 1 operand head x 5 roles
    assert list(box["y"][: len(ROLES)]) == pytest.approx(att.shares[0, 0].tolist())
    assert "share" in box["hovertemplate"]
    violins = attention_role_distributions(att, kind="violin", classes=("operator",))
    assert {t["type"] for t in violins.to_dict()["data"]} == {"violin", "scatter"}
    with pytest.raises(ValueError, match="kind"):
        attention_role_distributions(att, kind="bars")


def test_attention_role_means_heatmap():
    att = attention()
    d = attention_role_means(att, "sub").to_dict()
    assert d["data"][0]["z"] == [pytest.approx(row) for row in att.mean("sub").tolist()]
    assert d["data"][0]["y"][0] == "L2.H1 (operand)"


# ---------------------------------------------------------------- MLP probes


def test_probe_similarity_curves_use_the_means():
    pr = probes()
    d = probe_similarity_curves(pr, "add").to_dict()
    line = next(t for t in d["data"] if t.get("name") == "input · A")
    assert list(line["y"]) == pytest.approx(pr.input_sim_a[:3].mean(0).tolist())
    bars = next(t for t in d["data"] if t["type"] == "bar")
    assert list(bars["y"]) == pytest.approx([0.0, 0.1, 0.6, 1.2])
    summ = pr.layer_summary("add")  # the bars' error bars are the bootstrap interval of the mean margin
    assert list(bars["error_y"]["arrayminus"]) == pytest.approx(
        (summ.update_direct_margin - summ.update_direct_margin_low).tolist()
    )
    top1 = next(t for t in d["data"] if t.get("name") == "answer top-1 (logit lens)")
    assert list(top1["y"]) == [0, 0, 0, 1]
    assert list(top1["error_y"]["array"]) == pytest.approx((summ.lens_top1_high - summ.lens_top1).tolist())
    margin = pr.by_layer("update_direct_margin", "add")  # the figure's intervals are the summary's
    assert [iv.low for iv in margin] == summ.update_direct_margin_low.tolist() and margin[2].n == 3
    assert pr.first_raising_layer() == 2 and any("L2" in a.get("text", "") for a in d["layout"]["annotations"])
    assert pr.lens_top1_layer() == 3 and pr.lens_top1_layer("sub", min_share=1.0) == 3


def test_probe_case_trajectory_cells_and_answer_marks():
    pr = probes()
    d = probe_case_trajectory(pr).to_dict()
    cells = d["data"][0]
    assert cells["text"][0] == ["3", "4", "7", "7"]  # top-1 number of each layer
    assert cells["zmid"] == 0
    answer = next(t for t in d["data"] if t.get("name") == "answer '7'")
    assert list(answer["x"]) == [0, 1, 2, 3] and list(answer["y"]) == ["#3", "#2", "#1", "#1"]
    ranks = next(t for t in d["data"] if t.get("name") == "answer rank + 1")
    assert list(ranks["y"]) == [41, 13, 2, 1]
    assert "4 + 3" in d["layout"]["title"]["text"]


# ---------------------------------------------------------------- CircuitsVis


def test_attention_view_inlines_the_bundle_and_no_cdn(tmp_path):
    view = attention_heads_view(patterns(), 0)
    assert circuitsvis_bundle()[:2000] in view.fragment
    assert "unpkg.com" not in view.fragment and "unpkg.com" not in view.page()
    assert "></div>" in view.fragment.split("<script")[0]  # the target div is closed
    assert "L2.H1" in view.fragment and view._repr_html_() == view.fragment
    out = view.save(tmp_path / "view.html")
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    stripped, removed = split_bundle(view.fragment)
    assert removed and len(stripped) < 20_000 and "CircuitsVis.render" in stripped
    only = attention_heads_view(patterns(), 0, heads=[(3, 0)])
    assert "L3.H0" in only.fragment and "L2.H1" not in only.fragment
    with pytest.raises(IndexError, match="out of range"):
        attention_heads_view(patterns(), 3)


# ---------------------------------------------------------------- export


def test_html_export_is_atomic_and_offline(tmp_path):
    fig = patching_heatmap(patching("add", 0), key())
    [out] = save_figure(fig, tmp_path / "heat.html")
    text = out.read_text(encoding="utf-8")
    assert (
        not re.search(r"<script[^>]*\bsrc=", text) and len(text) > 1_000_000
    )  # plotly.js inlined, no script loaded from a URL
    assert [p.name for p in tmp_path.iterdir()] == ["heat.html"]  # no temporary files left
    with pytest.raises(ValueError, match="suffix"):
        save_figure(fig, tmp_path / "heat.txt")
    with pytest.raises(ValueError, match="format"):
        save_figure(fig, tmp_path / "heat", formats=("gif",))


def test_static_export_explains_a_missing_chromium(tmp_path, monkeypatch):
    import mathcircuits.viz.export as export

    monkeypatch.setattr(export, "find_chromium", lambda: None)
    with pytest.raises(ChromiumMissingError, match="apt-get install -y chromium"):
        save_figure(patching_heatmap(patching("add", 0)), tmp_path / "heat.png")
    assert not list(tmp_path.iterdir())


@pytest.mark.integration
@needs_chromium
def test_static_export_png_svg_pdf_in_one_batch(tmp_path):
    fig = knockout_curves(knockouts())
    paths = save_figures({tmp_path / "ko": fig}, formats=("png", "svg", "pdf"))
    assert [p.name for p in paths] == ["ko.png", "ko.svg", "ko.pdf"]
    png, svg, pdf = (p.read_bytes() for p in paths)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and b"<svg" in svg[:500] and pdf[:4] == b"%PDF"
    width, height = struct.unpack(">II", png[16:24])
    drawn = whole_title(fig)  # its subtitle wrapped to the width, the height grown by the added line
    assert (width, height) == (drawn.layout.width * 2, drawn.layout.height * 2)  # the layout's size, at scale 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ko.pdf", "ko.png", "ko.svg"]


# ---------------------------------------------------------------- report


def _read_png(path: Path):
    """Decode an 8-bit, non-interlaced RGB(A) PNG into a [H, W, 3] uint8 array (enough for Chromium screenshots)."""
    import numpy as np

    data = path.read_bytes()
    pos, idat = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    assert depth == 8 and interlace == 0 and ctype in (2, 6)
    bpp = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8).reshape(h, 1 + w * bpp)
    out = np.zeros((h, w * bpp), dtype=np.uint8)
    prev = np.zeros(w * bpp, dtype=np.int64)
    for y in range(h):
        f, line = int(raw[y, 0]), raw[y, 1:].astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:
            cur = line.reshape(w, bpp).cumsum(0).reshape(-1) % 256
        elif f == 2:
            cur = (line + prev) % 256
        else:  # average / Paeth depend on the decoded left neighbour: byte by byte
            lst, up, c = line.tolist(), prev.tolist(), [0] * len(line)
            for i in range(len(lst)):
                a = c[i - bpp] if i >= bpp else 0
                b = up[i]
                if f == 3:
                    c[i] = (lst[i] + ((a + b) >> 1)) & 255
                else:
                    cc = up[i - bpp] if i >= bpp else 0
                    p = a + b - cc
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - cc)
                    c[i] = (lst[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else cc)) & 255
            cur = np.array(c, dtype=np.int64)
        out[y] = cur
        prev = cur
    return out.reshape(h, w, bpp)[..., :3]


def _stable_key() -> KeyComponents:
    return dataclasses.replace(
        key(),
        stability=(0.97, 0.41),
        stability_others={"L1.H2": 0.35},
        stability_sizes=(2,) * 50,
        stability_depths=(0.8,) * 50,
        stability_n_boot=50,
    )


def _transfer() -> TransferResult:
    rows = [
        transfer_row(
            "add (identification templates, correct)", [1] * 20, [1] * 4 + [0] * 16, [[1] * 19 + [0]] * 3, True
        ),
        transfer_row("add two-digit operands", [1] * 2 + [0] * 30, None, []),
    ]
    return TransferResult(rows=tuple(rows), key_heads=[Head(2, 1), Head(3, 0)], n_random=3)


def _report() -> ReportParts:
    return ReportParts.of(**_report_parts())


def _report_parts() -> dict:
    import pandas as pd

    k = _stable_key()
    return dict(
        title="test report",
        claims=assess_claims(key=k, transfer=_transfer(), attention=attention()),  # C4 reads the MLP margin now
        model_spec=SPEC,
        data_summary={  # as the data stage's summary: a list of dicts must not show as Python text
            "pairs": 8,
            "operations": "add, sub",
            "accuracy_by_operation": [{"operation": "add", "n": 6, "accuracy": 0.5}, {"operation": "sub", "n": 2}],
        },
        accuracy_table=pd.DataFrame({"operation": ["add", "sub"], "n": [6, 2], "accuracy": [0.5, 1.0]}),
        patching={"add": patching("add", 0), "sub": patching("sub", 1, 2)},
        key_components=k,
        knockout=knockouts(),
        transfer=_transfer(),
        attention=attention(),
        probes=probes(),
        patterns=patterns(),
        evaluation=_evaluation(),
        notes="made by hand",
    )


def _evaluation():
    """The evaluate stage's table: held-out arithmetic per item, base and precise."""
    from mathcircuits.evaluation import EvalResult, compare_table
    from mathcircuits.evaluation.table import ARITHMETIC

    items = {"base": [0, 1] * 20, "precise": [1, 1, 0, 1] * 10}
    res = {m: EvalResult(m, {}, {}).with_benchmark(ARITHMETIC, "arithmetic", xs) for m, xs in items.items()}
    return compare_table(res, "base", uncertainty=Uncertainty(n_boot=200))


def _visible_text(page: str) -> str:
    """The page's text as a reader sees it: no scripts, styles or tags."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_report_html_is_self_contained(tmp_path):
    path = build_report(tmp_path / "report.html", _report())
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc=", text) and "unpkg.com" not in text  # every script inline, no CDN import
    assert text.count(circuitsvis_bundle()[:5000]) == 1  # the CircuitsVis bundle is inlined once
    # 3 heatmaps (add, sub, overall), top heads, stability, knockout, transfer, 3 attention, 2 probe figures,
    # and the evaluation's changes against base with their paired-bootstrap intervals
    assert text.count("Plotly.newPlot(") == 13 and "Change against base" in text
    for section in (
        "Path patching",
        "Knockout",
        "Transfer",
        "Attention of key heads",
        "MLP probes",
        "interactive",
        "Key heads and how stable",
        "Appendix",
    ):
        assert section in text
    minimal = build_report(tmp_path / "small.html", ReportParts.of(patching=patching("add", 0)))
    small = minimal.read_text(encoding="utf-8")
    assert small.count("Plotly.newPlot(") == 2 and "CircuitsVis" not in small  # heatmap + top heads


def test_report_leads_with_the_claims_card_and_ends_with_the_data_tables(tmp_path):
    text = _visible_text(build_report(tmp_path / "report.html", _report()).read_text(encoding="utf-8"))
    text = text[text.index("Claims card") :]  # after the title and the table of contents
    order = [text.index(s) for s in ("Claims card", "Path patching (identify)", "Knockout (validate)", "Appendix")]
    assert order == sorted(order)
    card = text[order[0] : order[1]]
    assert card.count("C") >= 6 and all(f"C{i} " in card for i in range(1, 7))
    assert "not measured (stage validate off)" in card  # no knockout was given
    assert "not measurable on this model" in text  # the near-chance transfer set says so
    assert text.index("Model") > order[3], "the model table sits in the appendix, after the findings"


def test_report_shows_no_raw_python_dict_or_list_text(tmp_path):
    text = _visible_text(build_report(tmp_path / "report.html", _report()).read_text(encoding="utf-8"))
    raw = re.findall(r"\{'|\['|\[\{|\[\(|\(\d+, \d+\)|': ", text)
    assert not raw, f"raw Python text in the report: {raw[:5]}"
    assert "accuracy by operation" in text and "add" in text  # the list of dicts is shown, as a table


@pytest.mark.integration
@needs_chromium
def test_report_renders_in_headless_chromium(tmp_path):
    import numpy as np

    path = build_report(tmp_path / "report.html", _report())
    shot = screenshot_html(path, tmp_path / "report.png", width=1280, height=2400, scale=0.5)
    img = _read_png(shot).astype(np.int16)
    assert img.shape[:2] == (1200, 640)
    # the first heatmap sits below the model table and the key components;
    # blank or failed scripts leave only grey text there
    region = img[400:900]
    saturated = (region.max(-1) - region.min(-1)) > 60
    colours = {tuple(px) for px in region[saturated].tolist()}
    assert saturated.mean() > 0.03, f"only {saturated.mean():.1%} coloured pixels: the figures did not render"
    assert len(colours) > 30, f"only {len(colours)} distinct colours in the heatmap region"


@pytest.mark.integration
@needs_chromium
def test_claims_card_is_on_the_first_screen_of_a_laptop(tmp_path):
    """At 1366x768 the whole card, down to the bar that closes it, shows without scrolling."""
    import numpy as np

    path = build_report(tmp_path / "report.html", _report())
    img = _read_png(screenshot_html(path, tmp_path / "first.png", width=1366, height=768, scale=1.0))
    assert img.shape[:2] == (768, 1366)
    bar = np.array([int(CARD_END_COLOUR[i : i + 2], 16) for i in (1, 3, 5)])
    rows = np.nonzero((np.abs(img.astype(int) - bar).max(-1) <= 2).sum(1) > 600)[0]
    assert len(rows) >= 3, "the claims card's closing bar is not on the first screen"
    assert rows.max() < 768 - 10


def test_report_gives_a_circuit_its_own_section(tmp_path):
    from mathcircuits.circuit import Circuit, CircuitSettings, Edge, Node

    nodes = (
        Node("logits", -1, -1, "logits"),
        Node("head", 2, 1, "last", 0, "operand mover"),
        Node("mlp", 1, -1, "last", 1),
    )
    edges = (
        Edge("L2.H1@last", "logits", "logits", -0.3, -0.4, -0.2),
        Edge("MLP1@last", "L2.H1@last", "v", -0.1, -0.2, 0.05),
    )
    circ = Circuit(
        model=SPEC,
        nodes=nodes,
        edges=edges,
        metric="relative_logit",
        method="exact",
        n_pairs=8,
        settings=CircuitSettings(depth=2, threshold=0.01),
    )
    parts = _report_parts() | {"circuit": {"add": circ}}
    page = build_report(tmp_path / "report.html", ReportParts.of(**parts)).read_text(encoding="utf-8")
    text = _visible_text(page)
    assert "Circuit (add)" in text and "Circuit edges (add)" in text
    assert page.count("Plotly.newPlot(") == 14  # the circuit graph joins the 13 figures
    assert not re.findall(r"\{'|': ", text), "the circuit's settings must not show as a Python dict"


def test_each_section_renders_the_figures_it_built_under_its_own_heading():
    parts = ReportParts.of(**(_report_parts() | {"extra_figures": {"more": knockout_curves(knockouts())}}))
    built = report_figures(parts)
    anchors = [s.anchor for s, _ in built.sections]
    assert anchors == ["claims", "patching", "key", "knockout", "transfer", "attention", "probes", "evaluation",
                       "views", "extra"]  # fmt: skip
    names = [f.name for _, figs in built.sections for f in figs]
    assert len(names) == len(set(names)) == 14
    marked = built.sections[1][1][0].figure
    marked.update_layout(title="built once")  # the page embeds the figures given, it builds none again
    page = report_html(parts, built)
    assert page.count("built once") == 1 and page.count('<div class="fig">') == len(names)
    for section, figs in built.sections:  # between a section's heading and the next, exactly its own figures
        start = page.index(f'id="{section.anchor}"')
        end = page.find("<h2 ", start + len(section.anchor) + 5)
        assert page[start:end].count('<div class="fig">') == len(figs), section.anchor
    saved = built.saved()
    assert {"patching_top_heads", "patching_overall", "patching_add", "knockout", "attention_excess"} <= set(saved)
    assert not {"attention_means", "evaluation", "more"} & set(saved)  # on the page only, not written as files
