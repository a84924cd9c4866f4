"""Frame.interior_point / learn_threshold / learn_rectangle: costs, gate, results, bad input (nothing charged)."""

from __future__ import annotations

import datetime as dt
import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_learning import InteriorPoint, NoAnswer, Rectangle, Threshold

import dpframe as dp


def session(data: pl.DataFrame, budget: dp.Budget = dp.ApproxDP(100, 1e-5), **kw) -> dp.Session:
    kw.setdefault("privacy_unit", dp.PrivacyUnit.row())
    return dp.Session({"t": data}, budget=budget, seed=kw.pop("seed", 1), **kw)


@pytest.fixture
def frame() -> dp.Frame:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1000, 3000)
    data = pl.DataFrame({"x": x, "f": rng.normal(size=3000), "y": (x <= 400).astype(np.int64),
                         "b": x <= 400, "s": ["a"] * 3000, "d": [dt.date(2020, 1, 1) + dt.timedelta(days=int(v))
                                                               for v in x], "lab": (x % 3).astype(np.float64)})
    return session(data).table("t")


def test_interior_point_result_cost_and_charge(frame: dp.Frame) -> None:
    sess = frame._session
    q = frame.interior_point("x", bounds=(0, 2**40))
    assert q.cost(dp.PureDP(1)) == dp.ApproxDP(1, 0)
    out = q.collect(dp.PureDP(1))
    assert isinstance(out, InteriorPoint) and 0 <= out.value <= 999 and out.method == "exponential"
    assert sess.spent() == dp.ApproxDP(1, 0)


def test_explain_shows_every_method_requirement(frame: dp.Frame) -> None:
    text = frame.interior_point("x", bounds=(0, 2**40)).explain(dp.ApproxDP(1, 1e-6))
    eps = 0.9
    em = math.ceil(4 / eps * math.log((2**40 + 1) / 1e-6) * (1 + 1e-12))
    assert f"exponential    {em} rows   ← chosen" in text
    assert "binary_search" in text and "treelog" in text and "noisy count" in text
    pure = frame.interior_point("x", bounds=(0, 10)).explain(dp.PureDP(1), format="json")
    assert any("treelog" in line and "needs an (ε, δ) budget" in line for line in pure["details"])
    assert frame._session.spent().epsilon == 0


def test_methods_and_treelog_cost(frame: dp.Frame) -> None:
    for method in ("exponential", "binary_search"):
        out = frame.interior_point("x", bounds=(0, 1000), method=method).collect(dp.PureDP(2))
        assert 0 <= out.value <= 999 and out.method == method
    q = frame.interior_point("x", bounds=(0, 1000), method="treelog")
    assert q.cost(dp.ApproxDP(1, 1e-6)) == dp.ApproxDP(1, 1e-6)
    before = frame._session.spent()
    out = q.collect(dp.ApproxDP(1, 1e-6))                     # 3000 rows ≪ 10⁵: DP "no answer", charged
    assert isinstance(out, NoAnswer) and not out and out.required_rows > 10**5
    assert frame._session.spent() == before + dp.ApproxDP(1, 1e-6)


def test_too_few_rows_gives_no_answer_charged_in_full() -> None:
    sess = session(pl.DataFrame({"x": list(range(40))}), budget=dp.PureDP(2))
    out = sess.table("t").interior_point("x", bounds=(0, 2**30)).collect(dp.PureDP(1))
    assert isinstance(out, NoAnswer) and out.required_rows > 40 and out.reliable_rows > out.required_rows
    assert sess.spent() == dp.PureDP(1)


def test_gate_answers_reliably_from_the_stated_row_count() -> None:
    q0 = session(pl.DataFrame({"x": [1]})).table("t").interior_point("x", bounds=(0, 2**20))
    reliable = q0.plan(dp.PureDP(1)).params["gate"].reliable
    sess = session(pl.DataFrame({"x": [7] * reliable}), seed=3)
    results = [sess.table("t").interior_point("x", bounds=(0, 2**20)).collect(dp.PureDP(1)) for _ in range(20)]
    assert all(isinstance(r, InteriorPoint) and r.value == 7 for r in results)


def test_zcdp_session_and_rows_per_unit() -> None:
    data = pl.DataFrame({"u": np.repeat(np.arange(500), 3), "x": np.arange(1500)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.ZCDP(1), seed=2)
    q = sess.table("t").interior_point("x", bounds=(0, 10**6))
    assert q.cost(dp.PureDP(1)) == dp.ZCDP(Fraction(1, 2))
    text = q.explain(dp.PureDP(1))
    assert f"exponential    {math.ceil(12 / 0.9 * math.log((10**6 + 1) / 1e-6) * (1 + 1e-12))} rows" in text
    approx = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.ApproxDP(1, 1e-6))
    assert "max_rows=1" in approx.table("t").interior_point("x", bounds=(0, 10)).explain(dp.ApproxDP(1, 1e-6))
    out = q.collect(dp.ZCDP(Fraction(1, 2)))                  # ρ = 1/2 → ε = 1
    assert 0 <= out.value < 1500 and sess.spent() == dp.ZCDP(Fraction(1, 2))


def test_float_and_date_columns(frame: dp.Frame) -> None:
    out = frame.interior_point("f", bounds=(-10, 10), resolution=2**-10).collect(dp.PureDP(1))
    assert -5 < out.value < 5 and (out.value * 2**10).is_integer()
    day = frame.interior_point("d", bounds=(dt.date(2000, 1, 1), dt.date(2030, 1, 1))).collect(dp.PureDP(1))
    assert dt.date(2020, 1, 1) <= day.value <= dt.date(2022, 9, 27)


def test_duckdb_backend_runs_the_same_query() -> None:
    data = pl.DataFrame({"x": list(range(100, 700))})
    a = session(data, backend="duckdb", seed=4).table("t").interior_point("x", bounds=(0, 10**4)).collect(dp.PureDP(1))
    b = session(data, seed=4).table("t").interior_point("x", bounds=(0, 10**4)).collect(dp.PureDP(1))
    assert a == b


# ------------------------------------------------------------------------------- thresholds

def test_learn_threshold_direction_and_error(frame: dp.Frame) -> None:
    model = frame.learn_threshold("x", label="y", bounds=(0, 1000)).collect(dp.PureDP(1))
    assert isinstance(model, Threshold) and model.positive == "below"
    k = frame.learn_threshold("x", label="y", bounds=(0, 1000)).plan(dp.PureDP(1)).params["k"]
    xs = np.arange(1000)
    assert np.mean(model.predict(xs) != (xs <= 400)) <= 2 * k / 3000 + 0.05
    flipped = frame.with_columns(z=1 - pl.col("y")).learn_threshold("x", label="z", bounds=(0, 1000))
    assert flipped.collect(dp.PureDP(1)).positive == "above"
    boolean = frame.learn_threshold("x", label="b", bounds=(0, 1000), positive="below").collect(dp.PureDP(1))
    assert abs(boolean.threshold - 400) < 2 * k


def test_threshold_success_rate_above_the_stated_rows() -> None:
    rng = np.random.default_rng(5)
    fails = 0
    for run in range(10):
        u = int(rng.integers(100, 900))
        x = rng.integers(0, 1000, 4000)
        sess = session(pl.DataFrame({"x": x, "y": (x <= u).astype(np.int8)}), seed=run)
        q = sess.table("t").learn_threshold("x", label="y", bounds=(0, 1000), positive="below", beta=1e-3)
        k = q.plan(dp.PureDP(1)).params["k"]
        model = q.collect(dp.PureDP(1))
        fails += np.sum(model.predict(x) != (x <= u)) > 2 * k
    assert fails == 0


def test_labels_outside_01_are_dropped() -> None:
    x = np.arange(3000)
    y = np.where(x % 10 == 0, 7, (x <= 1200).astype(np.int64))
    sess = session(pl.DataFrame({"x": x, "y": y}))
    model = sess.table("t").learn_threshold("x", label="y", bounds=(0, 3000), positive="below").collect(dp.PureDP(1))
    assert abs(model.threshold - 1200) < 300


# ------------------------------------------------------------------------------- rectangles

def test_learn_rectangle_inside_true_box() -> None:
    rng = np.random.default_rng(8)
    n = 12000
    a, b = rng.integers(0, 100, n), rng.integers(0, 100, n)
    y = ((a >= 20) & (a <= 70) & (b >= 10) & (b <= 50)).astype(np.int64)
    sess = session(pl.DataFrame({"a": a, "b": b, "y": y}))
    for _ in range(3):
        box = sess.table("t").learn_rectangle(["a", "b"], label="y", bounds={"a": (0, 99), "b": (0, 99)}
                                              ).collect(dp.PureDP(2))
        assert isinstance(box, Rectangle) and not box.empty
        (a0, a1), (b0, b1) = box.intervals["a"], box.intervals["b"]
        assert 20 <= a0 <= a1 <= 70 and 10 <= b0 <= b1 <= 50
        pred = box.predict(pl.DataFrame({"a": a, "b": b}))
        assert np.all(pred <= y)                              # no false positives


def test_rectangle_accounting_sequential_vs_rsc() -> None:
    cols = {f"x{i}": np.arange(50) for i in range(60)}
    sess = session(pl.DataFrame({**cols, "y": [1] * 50}))
    features = list(cols)
    bounds = {f: (0, 49) for f in features}
    q = sess.table("t").learn_rectangle(features, label="y", bounds=bounds)
    rsc = q.explain(dp.ApproxDP(2, 1e-6), format="json")
    assert rsc["mechanisms"].endswith("(rsc accounting)")
    assert q.cost(dp.ApproxDP(2, 1e-6)) == dp.ApproxDP(q.plan(dp.ApproxDP(2, 1e-6)).cost.epsilon, 1e-6)
    assert q.plan(dp.ApproxDP(2, 1e-6)).cost.epsilon <= 2
    assert q.explain(dp.PureDP(2), format="json")["mechanisms"].endswith("(sequential accounting)")
    few = sess.table("t").learn_rectangle(features[:3], label="y", bounds={f: (0, 49) for f in features[:3]})
    assert few.explain(dp.ApproxDP(2, 1e-6), format="json")["mechanisms"].endswith("(sequential accounting)")
    assert few.cost(dp.ApproxDP(2, 1e-6)) == dp.ApproxDP(2, 0)
    assert sess.spent().epsilon == 0


# ------------------------------------------------------------------------------- bad input: nothing charged

BAD = [
    (lambda f: f.interior_point("x", bounds=None), dp.BoundsError),
    (lambda f: f.interior_point("x", bounds=(10, 0)), dp.BoundsError),
    (lambda f: f.interior_point("x", bounds=(0, float("inf"))), dp.BoundsError),
    (lambda f: f.interior_point("x", bounds=(0.5, 10)), dp.BoundsError),
    (lambda f: f.interior_point("x", bounds=(0, 2**70)), dp.BoundsError),
    (lambda f: f.interior_point("f", bounds=(0, 1), resolution=-1.0), dp.BoundsError),
    (lambda f: f.interior_point("d", bounds=(0, 10)), dp.BoundsError),
    (lambda f: f.interior_point("s", bounds=(0, 10)), dp.SchemaError),
    (lambda f: f.interior_point("nope", bounds=(0, 10)), dp.SchemaError),
    (lambda f: f.interior_point("x", bounds=(0, 10), method="magic"), dp.PlanError),
    (lambda f: f.interior_point("x", bounds=(0, 10), beta=0), dp.DPFrameError),
    (lambda f: f.learn_threshold("x", label="lab", bounds=(0, 1000)), dp.SchemaError),
    (lambda f: f.learn_threshold("x", label="s", bounds=(0, 1000)), dp.SchemaError),
    (lambda f: f.learn_threshold("s", label="y", bounds=(0, 1000)), dp.SchemaError),
    (lambda f: f.learn_threshold("x", label="x", bounds=(0, 1000)), dp.SchemaError),
    (lambda f: f.learn_threshold("x", label="y", bounds=(0, 1000), positive="left"), dp.PlanError),
    (lambda f: f.learn_rectangle(["x", "f"], label="y", bounds={"x": (0, 10)}), dp.SchemaError),
    (lambda f: f.learn_rectangle("x", label="y", bounds={"x": (0, 10)}), dp.SchemaError),
    (lambda f: f.learn_rectangle(["x", "f"], label="y", bounds={"x": (0, 10), "f": (3, -3)}), dp.BoundsError),
    (lambda f: f.learn_rectangle(["x", "s"], label="y", bounds={"x": (0, 10), "s": (0, 1)}), dp.SchemaError),
    # resolution is a dict per feature: a number (a bare TypeError from the plugin before), 0 (read as left
    # out) and a key that is not a feature are refused
    (lambda f: f.learn_rectangle(["x", "f"], label="y", bounds={"x": (0, 10), "f": (0, 1)}, resolution=0.5),
     dp.ArgumentError),
    (lambda f: f.learn_rectangle(["x", "f"], label="y", bounds={"x": (0, 10), "f": (0, 1)}, resolution=0),
     dp.ArgumentError),
    (lambda f: f.learn_rectangle(["x", "f"], label="y", bounds={"x": (0, 10), "f": (0, 1)}, resolution={"g": 1}),
     dp.ArgumentError),
    (lambda f: f.learn_rectangle(["x", "f"], label="y", bounds={"x": (0, 10), "f": (0, 1)}, resolution={"f": -1}),
     dp.BoundsError),
]


@pytest.mark.parametrize("build,error", BAD)
def test_bad_input_is_refused_uncharged(frame: dp.Frame, build, error) -> None:
    with pytest.raises(error):
        build(frame).collect(dp.PureDP(1))
    assert frame._session.spent().epsilon == 0


@pytest.mark.parametrize("budget", [dp.PureDP(1), "1", None, dp.ZCDP(1, delta=1e-6)])
def test_treelog_without_delta_or_bad_budget_is_refused_uncharged(frame: dp.Frame, budget) -> None:
    with pytest.raises(dp.DPFrameError):
        frame.interior_point("x", bounds=(0, 10), method="treelog").collect(budget)
    assert frame._session.spent().epsilon == 0


def test_approx_cost_on_a_pure_session_is_refused_uncharged() -> None:
    sess = session(pl.DataFrame({"x": [1, 2, 3]}), budget=dp.PureDP(5))
    with pytest.raises(dp.BudgetConversionError):
        sess.table("t").interior_point("x", bounds=(0, 10), method="treelog").collect(dp.ApproxDP(1, 1e-6))
    assert sess.spent().epsilon == 0


def test_extreme_cuts_are_all_or_nothing_also_outside_the_bounds() -> None:
    """A cut below every cell (or above) predicts the same for every input, values outside the bounds included.

    (Replaces a test of the old ``decode_edge``, which released the lower edge of the cut cell with ``≤``: that
    classifier differed from the learned one on gridded features — see test_float_thresholds_*.)
    """
    from dpframe.domains import OrderedDomain

    grid = OrderedDomain.of("x", pl.Float64, (0, 1), resolution=0.25)
    days = OrderedDomain.of("d", pl.Date, (dt.date(2024, 1, 1), dt.date(2024, 1, 10)))
    assert [grid.edge(c) for c in (-1, 0, 4, 5)] == [0.0, 0.0, 1.0, 1.25]
    assert [days.edge(c) for c in (9, 10)] == [dt.date(2024, 1, 10), dt.date(2024, 1, 11)]
    # Every row negative at the lower bound: the learned cut is below every cell.
    table = pl.DataFrame({"x": np.zeros(400), "y": np.zeros(400, dtype=np.int8)})
    sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(100), seed=1)
    model = sess.table("t").learn_threshold("x", label="y", bounds=(0, 1), resolution=0.25,
                                            positive="below").collect(dp.PureDP(50))
    assert isinstance(model, Threshold) and model.threshold == 0.0 and model.cut == 0
    assert not model.predict(np.array([0.0, -5.0, 0.3, 2.0])).any()     # x < 0.0 after clamping: never
    everything = Threshold("x", grid.edge(5), "below", grid.bounds, grid, 5)
    assert everything.predict(np.array([-1.0, 0.0, 1.0, 7.0])).tolist() == [1, 1, 1, 1]
    nothing = Threshold("x", grid.edge(5), "above", grid.bounds, grid, 5)
    assert nothing.predict(np.array([-1.0, 0.0, 1.0, 7.0])).tolist() == [0, 0, 0, 0]
