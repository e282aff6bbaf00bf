"""DeltaTable: the saved "m / m low / m high / m Δ / m Δ low / m Δ high" layout, written and read back in one place."""

import math

import pandas as pd
import pytest

from mathcircuits.stats import DeltaTable, Interval
from mathcircuits.stats.deltas import no_interval
from mathcircuits.viz import sft_delta_bars

NAN = math.nan


def _table() -> DeltaTable:
    """base and two tuned models; "tuned" gains a planted +7.5 points [+2.5, +12.5] on SVAMP."""
    changes = {
        "base": {"SVAMP": Interval(0.0, 0.0, 0.0, 40), "ARC": Interval(0.0, 0.0, 0.0, 20)},
        "tuned": {"SVAMP": Interval(7.5, 2.5, 12.5, 40), "ARC": Interval(-5.0, -15.0, 5.0, 20)},
        "old": {"SVAMP": no_interval(1.0), "ARC": no_interval(NAN)},
    }
    levels = {
        "base": {"SVAMP": Interval(30.0, 18.0, 45.0, 40), "ARC": Interval(50.0, 30.0, 70.0, 20)},
        "tuned": {"SVAMP": Interval(37.5, 24.0, 53.0, 40), "ARC": Interval(45.0, 26.0, 66.0, 20)},
        "old": {"SVAMP": Interval(31.0, 19.0, 46.0, 40), "ARC": no_interval(NAN)},
    }
    extra = {"tuned params": {"base": 0, "tuned": 1200}, "note": {"old": "from an older run"}}
    return DeltaTable("base", changes, levels, extra, index_name="model")


def test_to_dataframe_writes_the_saved_columns_and_reads_back():
    table = _table()
    df = table.to_dataframe()
    assert df.index.name == "model" and list(df.index) == ["base", "tuned", "old"]
    assert list(df.columns) == [
        "SVAMP", "SVAMP low", "SVAMP high", "SVAMP Δ", "SVAMP Δ low", "SVAMP Δ high",
        "ARC", "ARC low", "ARC high", "ARC Δ", "ARC Δ low", "ARC Δ high",
        "tuned params", "note",
    ]  # fmt: skip
    assert (df.loc["tuned", "SVAMP Δ"], df.loc["tuned", "SVAMP Δ low"], df.loc["tuned", "SVAMP Δ high"]) == (
        7.5,
        2.5,
        12.5,
    )  # the planted change, in its three columns
    assert df.loc["tuned", "SVAMP"] == 37.5 and math.isnan(df.loc["old", "SVAMP Δ low"])
    assert math.isnan(df.loc["old", "tuned params"]) and df.loc["old", "note"] == "from an older run"
    back = DeltaTable.from_dataframe(df)
    assert back.baseline == "base" and back.rows == table.rows and back.metrics == ("SVAMP", "ARC")
    assert back.change("tuned", "SVAMP") == Interval(7.5, 2.5, 12.5, 0, method="none")
    assert back.level("tuned", "ARC") == Interval(45.0, 26.0, 66.0, 0, method="none")
    assert back.extra["tuned params"]["tuned"] == 1200 and back.extra["note"]["old"] == "from an older run"
    pd.testing.assert_frame_equal(back.to_dataframe(), df)  # the round trip keeps every cell


def test_changes_only_and_no_metrics():
    only = DeltaTable("base", {"base": {"math": Interval(0.0, 0.0, 0.0, 9)}, "x": {"math": Interval(4.0, 1.0, 7.0, 9)}})
    assert list(only.to_dataframe().columns) == ["math Δ", "math Δ low", "math Δ high"]
    assert only.level("x", "math") is None and only.compared == ("x",)
    assert DeltaTable.from_dataframe(only.to_dataframe()).levels == {}
    bare = DeltaTable("base", {"base": {}, "x": {}}, extra={"tuned params": {"base": 0, "x": 5}})
    assert bare.metrics == () and list(bare.to_dataframe()["tuned params"]) == [0, 5]


def test_refuses_a_missing_baseline_or_ragged_rows():
    with pytest.raises(ValueError, match="baseline 'base' is not among the rows.*Fix:"):
        DeltaTable("base", {"x": {"m": no_interval(1.0)}})
    with pytest.raises(ValueError, match=r"rows \['x'\] lack.*Fix:"):
        DeltaTable("base", {"base": {"m": no_interval(0.0)}, "x": {}})


def test_delta_bars_draw_each_compared_row_with_its_interval():
    fig = sft_delta_bars(_table(), ["SVAMP"])
    assert [t.name for t in fig.data] == ["tuned", "old"]  # the baseline is not drawn
    tuned = fig.data[0]
    assert list(tuned.y) == [7.5] and list(tuned.error_y.array) == [5.0] and list(tuned.error_y.arrayminus) == [5.0]
    assert list(fig.data[1].error_y.array) == [0.0]  # no interval: no bar, not NaN
    assert "Change against base" in fig.layout.title.text
