"""The example third-party plugin (plugins/dpframe_histogram), installed, through dpframe's public API."""

from __future__ import annotations

import importlib.metadata as md
from fractions import Fraction

import polars as pl
import pytest

import dpframe as dp
from dpframe.plugin import plugin_host

INSTALL = "run `pip install -e plugins/dpframe_histogram` (from the repository root) to install the example plugin"
HIST = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))
BINS = ["age_hist_0_18", "age_hist_18_65", "age_hist_65_100"]


@pytest.fixture(autouse=True)
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail (not skip) when the plugin is missing; never let a blocked-plugins setting leak in."""
    monkeypatch.delenv("DPFRAME_BLOCK_PLUGINS", raising=False)
    names = {ep.name: ep.value for ep in md.entry_points(group="dpframe")}
    if names.get("histogram") != "dpframe_histogram":
        pytest.fail(f"the dpframe-histogram plugin is not installed: {INSTALL}")


def _people() -> pl.DataFrame:
    rows = [(u, ["paris", "lyon", "nice"][u % 3], float((u * 37) % 100)) for u in range(300)]
    return pl.DataFrame(rows, schema={"user": pl.Int64, "city": pl.String, "age": pl.Float64}, orient="row")


def _session(budget: dp.Budget = dp.PureDP(10), **kw: object) -> dp.Session:
    return dp.Session({"people": _people()}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=budget,
                      seed=7, **kw)  # type: ignore[arg-type]


def test_plugin_host_lists_histogram() -> None:
    host = plugin_host()
    found = [(plugin, m.name) for plugin, m in host.mechanisms()]
    assert ("histogram", "histogram") in found, found
    info = {row.name: row for row in host.describe()}
    assert info["histogram"].package == "dpframe-histogram" and "histogram" in info["histogram"].provides
    assert host.mechanism_for("histogram", "pure").name == "histogram"


def test_ungrouped_histogram() -> None:
    sess = _session()
    q = sess.table("people").agg(HIST)
    assert q.cost(budget=dp.PureDP(1)) == dp.PureDP(1)
    out = q.collect(budget=dp.PureDP(1))
    assert out.columns == BINS and out.height == 1
    age = _people()["age"]
    exact = [int(((age >= lo) & (age < hi)).sum()) for lo, hi in ((0, 18), (18, 65), (65, 100))]
    # 2 rows per unit at most, Laplace(t = 2): within ±40 with overwhelming probability.
    assert all(abs(int(out[c][0]) - e) < 40 for c, e in zip(BINS, exact)), (out, exact)
    assert sess.spent() == dp.PureDP(1)


def test_grouped_with_public_keys_and_other_measures() -> None:
    sess = _session()
    q = (sess.table("people").filter(pl.col("age") >= 10)
         .group_by("city", keys=["lyon", "nice", "paris", "rome"]).agg(HIST, dp.len()))
    assert q.cost(budget=dp.PureDP(1)) == dp.PureDP(1)        # 2 parts: histogram 1/2, len 1/2
    out = q.collect(budget=dp.PureDP(1))
    assert out.columns == ["city", *BINS, "len"]
    assert out["city"].to_list() == ["lyon", "nice", "paris", "rome"]
    assert out.schema["age_hist_0_18"] == pl.Int64


def test_grouped_with_private_keys() -> None:
    sess = _session(dp.ApproxDP(10, 1e-5))
    out = sess.table("people").group_by("city").agg(HIST).collect(budget=dp.ApproxDP(2, 1e-6))
    assert set(out["city"].to_list()) <= {"paris", "lyon", "nice"} and out.height >= 1
    assert out.columns == ["city", *BINS]


def test_zcdp_session() -> None:
    sess = _session(dp.ZCDP(1))
    q = sess.table("people").agg(HIST)
    assert q.cost(budget=dp.ZCDP(Fraction(1, 4))) == dp.ZCDP(Fraction(1, 4))
    assert "discrete Gaussian" in q.explain(budget=dp.ZCDP(Fraction(1, 4)))
    q.collect(budget=dp.ZCDP(Fraction(1, 4)))
    assert sess.spent() == dp.ZCDP(Fraction(1, 4))


def test_explain_names_mechanism_noise_and_columns() -> None:
    sess = _session()
    text = sess.table("people").agg(HIST).explain(budget=dp.PureDP(Fraction(1, 2)))
    assert "via histogram" in text and "discrete Laplace(t=4, Δ=2)" in text
    assert "age_hist_0_18, age_hist_18_65, age_hist_65_100" in text
    info = sess.table("people").agg(HIST).explain(budget=dp.PureDP(Fraction(1, 2)), format="json")
    assert info["measures"][0]["mechanism"] == "histogram" and "3 bins" in info["measures"][0]["accuracy"]
    assert sess.spent().epsilon == 0        # explain is free


@pytest.mark.parametrize("edges, fragment", [
    ((5,), "at least two edges"),
    ((0, 65, 18, 100), "strictly increasing"),
    ((0, float("inf")), "not finite"),
    ((-5, 50), "not inside bounds"),
    ("0,18", "sequence of numbers"),
])
def test_bad_edges_are_refused_and_charge_nothing(edges: object, fragment: str) -> None:
    sess = _session()
    bad = dp.measure("histogram", "age", bounds=(0, 100), edges=edges)
    with pytest.raises(dp.BoundsError, match=fragment) as info:
        sess.table("people").agg(bad).collect(budget=dp.PureDP(1))
    assert info.value.argument == "edges"
    assert sess.spent().epsilon == 0 and sess.history().height == 0


def test_other_bad_input() -> None:
    sess = _session()
    for m, err in [(dp.measure("histogram", "city", bounds=(0, 1), edges=(0, 1)), dp.SchemaError),
                   (dp.measure("histogram", "age", edges=(0, 1)), dp.BoundsError),
                   (dp.measure("histogram", "nope", bounds=(0, 1), edges=(0, 1)), dp.SchemaError)]:
        with pytest.raises(err):
            sess.table("people").agg(m).collect(budget=dp.PureDP(1))
    clash = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 40)).alias("age_hist")
    with pytest.raises(dp.PlanError, match="age_hist_0_18"):
        sess.table("people").agg(HIST, clash).collect(budget=dp.PureDP(1))
    assert sess.spent().epsilon == 0


def test_blocking_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPFRAME_BLOCK_PLUGINS", "histogram")
    host = plugin_host()
    assert "histogram" not in [m.name for _, m in host.mechanisms()]
    assert "aggregates" in [m.name for _, m in host.mechanisms()]
    sess = _session()
    with pytest.raises(dp.PluginError, match="histogram"):
        sess.table("people").agg(HIST).explain(budget=dp.PureDP(1))
    with pytest.raises(dp.PluginError):
        sess.table("people").agg(HIST).collect(budget=dp.PureDP(1))
    assert sess.spent().epsilon == 0
    sess.table("people").agg(dp.len()).collect(budget=dp.PureDP(1))   # the built-ins still work
    monkeypatch.delenv("DPFRAME_BLOCK_PLUGINS")
    assert "histogram" in [m.name for _, m in plugin_host().mechanisms()]
