"""dp.quantile / dp.median in agg (grouped, ungrouped, both backends), costs, bad input, SQL."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction as F

import numpy as np
import polars as pl
import pytest
from dpframe_quantiles.mechanism import epsilon_from_rho

import dpframe as dp

N = 2_000
DATA = pl.DataFrame({
    "u": np.arange(N) % 500,
    "g": np.where(np.arange(N) % 2 == 0, "a", "b"),
    "x": np.random.default_rng(1).normal(50, 10, N),
    "i": np.arange(N),
    "d": [dt.date(2020, 1, 1) + dt.timedelta(days=int(k % 366)) for k in range(N)],
    "s": ["v"] * N,
})


def session(budget: dp.Budget = dp.PureDP(10), backend: str = "polars",
            unit: dp.PrivacyUnit | None = None) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=unit or dp.PrivacyUnit.row(), budget=budget, backend=backend, seed=4)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_grouped_and_ungrouped(backend: str) -> None:
    sess = session(backend=backend)
    out = sess.table("t").agg(dp.median("i", bounds=(0, 10_000)), dp.quantile("x", [0.1, 0.9], bounds=(0, 100)))
    df = out.collect(dp.PureDP(2))
    assert df.schema == pl.Schema({"i_median": pl.Float64, "x_quantile": pl.List(pl.Float64)})
    assert abs(df["i_median"][0] - 1000) < 150
    lo, hi = df["x_quantile"][0]
    assert 33 < lo <= hi < 67
    grouped = sess.table("t").group_by("g", keys=["a", "b", "z"]).agg(dp.quantile("i", 0.5, bounds=(0, 4000)))
    g = grouped.collect(dp.PureDP(2))
    assert g["g"].to_list() == ["a", "b", "z"]
    assert all(abs(v - 1000) < 200 for v in g["i_quantile"][:2])
    assert 0 <= g["i_quantile"][2] <= 4000        # no rows: uniform on the domain


def test_dates_come_back_as_dates() -> None:
    sess = session()
    q = dp.quantile("d", [0.25, 0.75], bounds=(dt.date(2019, 1, 1), dt.date(2022, 1, 1)))
    df = sess.table("t").agg(q).collect(dp.PureDP(2))
    lo, hi = df["d_quantile"][0]
    assert isinstance(lo, dt.date) and dt.date(2020, 2, 1) < lo <= hi < dt.date(2020, 12, 1)


@pytest.mark.parametrize(("budget", "measures", "charged"), [
    (dp.PureDP(1), [dp.median("i", bounds=(0, 9))], dp.PureDP(1)),
    (dp.PureDP(1), [dp.quantile("i", [k / 10 for k in range(1, 10)], bounds=(0, 9)), dp.len()], dp.PureDP(1)),
    (dp.ZCDP(F(1, 8)), [dp.median("i", bounds=(0, 9))], dp.ZCDP(F(1, 8))),
])
def test_cost_is_the_requested_budget(budget: dp.Budget, measures: list[dp.Measure], charged: dp.Budget) -> None:
    sess = session(dp.ZCDP(1) if isinstance(budget, dp.ZCDP) else dp.PureDP(10))
    q = sess.table("t").agg(*measures)
    assert q.cost(budget) == charged
    q.collect(budget)
    assert sess.spent() == charged


def test_per_level_epsilon_hand_checked() -> None:
    sess = session()
    plan = sess.table("t").agg(dp.quantile("i", [k / 10 for k in range(1, 10)], bounds=(0, 9)),
                               dp.median("x", bounds=(0, 1))).plan(dp.PureDP(1))
    (qp,) = plan.plans
    assert qp.levels == {"i_quantile": F(1, 8), "x_median": F(1, 2)}   # ε/2 per measure; deciles: 4 levels
    zplan = session(dp.ZCDP(1)).table("t").agg(dp.quantile("i", [0.2, 0.5, 0.8], bounds=(0, 9))).plan(dp.ZCDP(F(1, 4)))
    eps0 = zplan.plans[0].levels["i_quantile"]                          # ρ₀ = 1/8 per level ⇒ ε₀ = 1
    e = epsilon_from_rho(F(1, 4))                                       # √2 rounded down on the 2⁻⁴⁰ grid
    assert eps0 == 1 and e**2 / 8 <= F(1, 4) < (e + F(1, 2**40)) ** 2 / 8


def test_explain_reports_rank_error_and_mechanism() -> None:
    text = session().table("t").agg(dp.quantile("x", [0.25, 0.75], bounds=(0, 100), resolution=0.01)).explain(
        dp.PureDP(1))
    assert "rank error ≤" in text and "joint recursive split, 2 levels" in text and "grid 2^-7" in text


@pytest.mark.parametrize(("make", "error", "argument"), [
    (lambda: dp.quantile("x", 1.5, bounds=(0, 1)), dp.DPFrameError, "q"),
    (lambda: dp.quantile("x", -0.1, bounds=(0, 1)), dp.DPFrameError, "q"),
    (lambda: dp.quantile("x", float("nan"), bounds=(0, 1)), dp.DPFrameError, "q"),
    (lambda: dp.quantile("x", [0.5, 0.5], bounds=(0, 1)), dp.DPFrameError, "q"),
    (lambda: dp.quantile("x", [0.3, 0.30000001], bounds=(0, 1)), dp.DPFrameError, "q"),  # equal once rounded
    (lambda: dp.quantile("x", [], bounds=(0, 1)), dp.DPFrameError, "q"),
    (lambda: dp.quantile("x", 0.5, bounds=None), dp.BoundsError, "bounds"),
    (lambda: dp.quantile("x", 0.5, bounds=(1, 0)), dp.BoundsError, "bounds"),
    (lambda: dp.quantile("x", 0.5, bounds=(0, float("inf"))), dp.BoundsError, "bounds"),
])
def test_bad_measures_are_refused_at_construction(make: object, error: type, argument: str) -> None:
    with pytest.raises(error) as info:
        make()  # type: ignore[operator]
    assert info.value.argument == argument


@pytest.mark.parametrize(("measure", "error", "argument"), [
    (dp.quantile("s", 0.5, bounds=(0, 1)), dp.SchemaError, "s"),
    (dp.quantile("nope", 0.5, bounds=(0, 1)), dp.SchemaError, "column"),
    (dp.quantile("i", 0.5, bounds=(0, 2**63)), dp.BoundsError, "bounds['i']"),
    (dp.quantile("i", 0.5, bounds=(0.5, 9)), dp.BoundsError, "bounds['i']"),
    (dp.quantile("x", 0.5, bounds=(0, 1e20), resolution=1e-6), dp.BoundsError, "bounds['x']"),
    (dp.quantile("d", 0.5, bounds=(0, 9)), dp.BoundsError, "bounds['d']"),
    (dp.quantile("i", 0.5, bounds=(dt.date(2020, 1, 1), dt.date(2021, 1, 1))), dp.BoundsError, "bounds['i']"),
    (dp.measure("quantile", "i", bounds=(0, 9), q=2.0), dp.DPFrameError, "q"),
    (dp.measure("quantile", "i", bounds=(0, 9)), dp.DPFrameError, "q"),
    (dp.measure("quantile", "i", q=0.5), dp.BoundsError, "bounds"),
    (dp.measure("quantile", "i", bounds=(0, 9), q=0.5, typo=1), dp.DPFrameError, "typo"),
])
def test_bad_input_charges_nothing(measure: dp.Measure, error: type, argument: str) -> None:
    from dpframe.frame import Query
    from dpframe.plan.nodes import Aggregate
    from dpframe.sealed import _ENGINE

    sess = session()
    before = sess.spent()
    with pytest.raises(error) as info:    # agg() validates at build time ...
        sess.table("t").agg(measure)
    assert info.value.argument == argument and info.value.fix
    q = Query(sess, Aggregate(sess.table("t")._node, (), None, (measure,)), _engine=_ENGINE)   # ... the planner again
    for call in (q.cost, q.explain, q.collect):
        with pytest.raises(error) as info:
            call(dp.PureDP(1))
        assert info.value.argument == argument and info.value.fix
    assert sess.spent() == before and sess.history().height == 0


def test_contribution_bounding_uses_max_rows() -> None:
    sess = session(unit=dp.PrivacyUnit("u", max_rows=4))
    plan = sess.table("t").agg(dp.median("i", bounds=(0, 9))).plan(dp.PureDP(1))
    assert plan.plans[0].max_rows == 4
    df = sess.table("t").agg(dp.median("i", bounds=(0, 10_000))).collect(dp.PureDP(1))
    assert abs(df["i_median"][0] - 1000) < 300


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_sql_median_and_quantile_cont(backend: str) -> None:
    sess = session(backend=backend)
    q = sess.sql("SELECT g, MEDIAN(CLAMP(i, 0, 4000)) AS med, QUANTILE_CONT(CLAMP(x, 0, 100), [0.25, 0.75]) AS iqr "
                 "FROM t GROUP BY g", keys={"g": ["a", "b"]})
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    df = q.collect(dp.PureDP(1))
    assert df.columns == ["g", "med", "iqr"]
    assert all(abs(v - 1000) < 250 for v in df["med"])
    assert all(30 < a <= b < 70 for a, b in df["iqr"].to_list())
    with pytest.raises(dp.PlanError):
        sess.sql("SELECT QUANTILE_CONT(CLAMP(x, 0, 100), 1.5) FROM t").cost(dp.PureDP(1))
    assert sess.spent() == dp.PureDP(1)


# ------------------------------------------------------------------ requested order, nearest grid points, curves

@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_several_q_come_back_in_the_requested_order(backend: str) -> None:
    sess = session(dp.PureDP(200), backend)
    df = sess.table("t").agg(dp.quantile("i", [0.9, 0.1, 0.5], bounds=(0, 2000))).collect(dp.PureDP(50))
    hi, lo, mid = df["i_quantile"][0]
    assert abs(hi - 1800) < 40 and abs(lo - 200) < 40 and abs(mid - 1000) < 40
    sql = sess.sql("SELECT QUANTILE_CONT(CLAMP(i, 0, 2000), [0.9, 0.1]) AS q FROM t").collect(dp.PureDP(50))
    hi, lo = sql["q"][0]
    assert abs(hi - 1800) < 40 and abs(lo - 200) < 40
    from dpframe_quantiles.mechanism import requested_order

    assert requested_order((0.9, 0.1)) == (1, 0) and requested_order(0.5) == (0,)


def test_values_count_as_their_nearest_grid_point() -> None:
    data = pl.DataFrame({"a": [0.3] * 500, "b": [0.4] * 500, "c": [0.25] * 500, "t": [42.0] * 300 + [50.0] * 200})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(100), seed=1)
    out = sess.table("t").agg(*(dp.median(c, bounds=(0, 1), resolution=0.25).alias(c) for c in "abc"),
                              dp.median("t", bounds=(0, 100), resolution=2**-10).alias("t")).collect(dp.PureDP(20))
    assert out.row(0) == (0.25, 0.5, 0.25, 42.0)        # 0.4 → 0.5 (the lower cell edge was 0.25); tied data: itself


def test_rdp_sessions_charge_bounded_range_curves_per_level() -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-6),
                      accountant="rdp", seed=1)
    q = sess.table("t").agg(dp.quantile("i", [0.25, 0.5, 0.75], bounds=(0, 2000)), dp.median("x", bounds=(0, 100)))
    plan = q.plan(dp.PureDP(1))
    (qp,) = plan.plans
    curves = qp.privacy
    assert [c.spec for c in curves] == [{"kind": "exponential", "epsilon": 0.25}] * 2 + \
        [{"kind": "exponential", "epsilon": 0.5}]                         # ε/2 per measure; 3 quartiles: 2 levels
    want = dp.accounting.RDPCharge.of(list(curves))
    assert np.allclose(plan.session_cost.values, want.values) and plan.session_cost.delta0 == 0   # type: ignore[attr-defined]
    generic = dp.accounting.RDPCharge.of([dp.accounting.pure(1.0)])
    assert np.all(np.asarray(want.values) <= np.asarray(generic.values) + 1e-12)
