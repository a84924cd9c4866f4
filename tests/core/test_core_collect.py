"""Collected results: shape, dtypes, order, public keys, ranges, determinism, and the huge-ε accuracy oracle.

With ε = 1e9 every count's noise is 0 and every sum's noise is a few grid steps (~1e-5 of the bound), so a
released value must equal the exact answer on the clamped, NaN/null-free data. That checks the
post-processing formulas (mean = c + S/n, var = (Q − S²/n)/(n − ddof), std = √var) end to end.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from core_testkit import HUGE, make_session

import dpframe as dp

LO, HI = 0, 100


def _oracle_data() -> pl.DataFrame:
    """25 units with 1–3 rows each; values inside and outside [0, 100], NaN, null, ±inf; groups a/b/c."""
    rng = np.random.default_rng(2024)
    units = np.repeat(np.arange(25), rng.integers(1, 4, 25))
    n = units.size
    x = rng.uniform(-20, 120, n).round(3)
    x[[3, 17]] = np.nan
    x[5], x[11] = np.inf, -np.inf
    g = rng.choice(np.array(["a", "b", "c"]), n)
    i = rng.integers(-5, 200, n)
    return pl.DataFrame({"u": units, "g": g, "x": x, "i": i}).with_columns(
        pl.when(pl.int_range(pl.len()) == 8).then(None).otherwise(pl.col("x")).alias("x"))


def _exact(df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    c = pl.col("x").fill_nan(None).clip(LO, HI)
    aggs = [pl.len().alias("len"), c.count().alias("x_count"), c.sum().alias("x_sum"), c.mean().alias("x_mean"),
            c.var(ddof=1).alias("x_var"), c.var(ddof=0).alias("x_var0"), c.std(ddof=1).alias("x_std"),
            pl.col("i").clip(0, 150).sum().alias("i_sum")]
    return df.group_by(by).agg(aggs).sort(by) if by else df.select(aggs)


MEASURES = (dp.len(), dp.count("x"), dp.sum("x", bounds=(LO, HI)), dp.mean("x", bounds=(LO, HI)),
            dp.var("x", bounds=(LO, HI)), dp.var("x", bounds=(LO, HI), ddof=0).alias("x_var0"),
            dp.std("x", bounds=(LO, HI)), dp.sum("i", bounds=(0, 150)))


def _check_against(out: pl.DataFrame, exact: pl.DataFrame) -> None:
    assert out["len"].to_list() == exact["len"].to_list()
    assert out["x_count"].to_list() == exact["x_count"].to_list()
    assert out["i_sum"].to_list() == pytest.approx(exact["i_sum"].to_list(), abs=1e-3)
    assert out["x_sum"].to_list() == pytest.approx(exact["x_sum"].to_list(), abs=1e-3)
    assert out["x_mean"].to_list() == pytest.approx(exact["x_mean"].to_list(), abs=1e-4)
    assert out["x_var"].to_list() == pytest.approx(exact["x_var"].to_list(), rel=1e-6, abs=1e-2)
    assert out["x_var0"].to_list() == pytest.approx(exact["x_var0"].to_list(), rel=1e-6, abs=1e-2)
    assert out["x_std"].to_list() == pytest.approx(exact["x_std"].to_list(), rel=1e-6, abs=1e-3)


def test_huge_epsilon_matches_the_exact_clamped_answer_ungrouped() -> None:
    df = _oracle_data()
    exact = _exact(df, [])
    assert exact["x_var"].item() < ((HI - LO) / 2) ** 2        # (so the var upper clip is not in play)
    s = make_session(df, budget=dp.PureDP(HUGE))
    out = s.table("t").agg(*MEASURES).collect(dp.PureDP(HUGE))
    _check_against(out, exact)


def test_huge_epsilon_matches_the_exact_clamped_answer_grouped() -> None:
    df = _oracle_data()
    exact = _exact(df, ["g"])
    assert (exact["len"] >= 3).all()
    s = make_session(df, budget=dp.PureDP(HUGE))
    out = s.table("t").group_by("g", keys=["c", "a", "b"]).agg(*MEASURES).collect(dp.PureDP(HUGE))
    assert out["g"].to_list() == ["a", "b", "c"]
    _check_against(out, exact)


def test_huge_rho_matches_the_exact_clamped_answer() -> None:
    df = _oracle_data()
    s = make_session(df, budget=dp.ZCDP(10**12))
    out = s.table("t").agg(*MEASURES).collect(dp.ZCDP(10**12))
    _check_against(out, _exact(df, []))


def test_huge_epsilon_with_filters_and_derived_columns() -> None:
    df = _oracle_data()
    s = make_session(df, budget=dp.PureDP(HUGE))
    out = (s.table("t").filter(pl.col("i") > 20).with_columns(x=pl.col("x") * 0.5 + 10)
           .group_by("g", keys=["a", "b", "c"]).agg(*MEASURES).collect(dp.PureDP(HUGE)))
    _check_against(out, _exact(df.filter(pl.col("i") > 20).with_columns(x=pl.col("x") * 0.5 + 10), ["g"]))


def test_huge_epsilon_bounding_caps_each_units_rows() -> None:
    df = pl.DataFrame({"u": [1] * 10 + [2] * 2 + [3], "x": [5.0] * 13})
    s = make_session(df, unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.PureDP(HUGE))
    out = s.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 10))).collect(dp.PureDP(HUGE))
    assert out["len"].item() == 3 + 2 + 1
    assert out["x_sum"].item() == pytest.approx(30.0, abs=1e-4)


def test_huge_epsilon_private_keys_release_groups_above_the_threshold() -> None:
    # With ε = 1e9 the selection noise is 0 and τ = 2: groups with ≥ 2 distinct units are released.
    df = pl.DataFrame({"u": [1, 2, 3, 4, 5, 6, 7, 8, 8, 8], "g": ["a", "a", "a", "b", "b", "c", "c", "d", "d", "d"]})
    s = make_session(df, unit=dp.PrivacyUnit("u", max_rows=5), budget=dp.ApproxDP(HUGE, 1e-3))
    q = s.table("t").group_by("g").agg(dp.len())
    assert q.plan(dp.ApproxDP(HUGE, 1e-6)).selection.threshold == 2
    out = q.collect(dp.ApproxDP(HUGE, 1e-6))
    assert sorted(out.rows()) == [("a", 3), ("b", 2), ("c", 2)]   # d has 3 rows but one unit


def test_empty_private_key_selection_keeps_the_schema() -> None:
    df = pl.DataFrame({"u": [1, 2], "g": ["a", "b"], "x": [1.0, 2.0]})
    s = make_session(df, unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, 1e-3))
    out = s.table("t").group_by("g").agg(dp.len(), dp.mean("x", bounds=(0, 5))).collect(dp.ApproxDP(1, 1e-9))
    assert out.height == 0
    assert out.schema == pl.Schema({"g": pl.String, "len": pl.Int64, "x_mean": pl.Float64})


# ----------------------------------------------------------------------------- shape, dtypes, order


def test_output_columns_and_dtypes(sess: dp.Session) -> None:
    out = (sess.table("t").group_by("city", keys=["a", "b", "c"])
           .agg(dp.len(), dp.count("spend"), dp.sum("spend", bounds=(0, 500)), dp.mean("spend", bounds=(0, 500)),
                dp.var("spend", bounds=(0, 500)), dp.std("spend", bounds=(0, 500)), dp.sum("flag", bounds=(0, 1)),
                dp.count("city").alias("cities"))
           .collect(dp.PureDP(1)))
    assert out.schema == pl.Schema({"city": pl.String, "len": pl.Int64, "spend_count": pl.Int64,
                                    "spend_sum": pl.Float64, "spend_mean": pl.Float64, "spend_var": pl.Float64,
                                    "spend_std": pl.Float64, "flag_sum": pl.Float64, "cities": pl.Int64})
    ungrouped = sess.table("t").agg(dp.len(), dp.mean("age", bounds=(0, 100))).collect(dp.PureDP(1))
    assert ungrouped.schema == pl.Schema({"len": pl.Int64, "age_mean": pl.Float64}) and ungrouped.height == 1


def test_integer_keys_keep_their_type_and_are_sorted(sess: dp.Session) -> None:
    out = sess.table("t").group_by("age", keys=[64, 17, 1000, 20]).agg(dp.len()).collect(dp.PureDP(1))
    assert out.schema["age"] == pl.Int64
    assert out["age"].to_list() == [17, 20, 64, 1000]


def test_rows_are_sorted_by_key_and_absent_public_keys_are_present(huge_sess: dp.Session) -> None:
    out = (huge_sess.table("t").group_by("city", keys=["zz", "c", "a", "b", "aa"])
           .agg(dp.len()).collect(dp.PureDP(HUGE)))
    assert out["city"].to_list() == ["a", "aa", "b", "c", "zz"]
    assert out["len"].to_list() == [5, 0, 4, 3, 0]


def test_multi_column_keys_sorted_lexicographically(huge_sess: dp.Session) -> None:
    out = (huge_sess.table("t").group_by("city", "flag", keys={"flag": [True, False], "city": ["b", "a"]})
           .agg(dp.len()).collect(dp.PureDP(HUGE)))
    assert out.select("city", "flag").rows() == [("a", False), ("a", True), ("b", False), ("b", True)]
    assert out["len"].to_list() == [2, 3, 2, 2]


def test_several_predicates_are_anded_and_null_predicates_drop_the_row(huge_sess: dp.Session) -> None:
    # spend: 10, 250.5, null, NaN, 499, 600, inf, -5, 42.25, 0, 100, -inf
    t = huge_sess.table("t")
    n = lambda f: f.agg(dp.len()).collect(dp.PureDP(HUGE // 10))["len"].item()  # noqa: E731
    assert n(t.filter(pl.col("spend") > 50)) == 6          # null → false; NaN > 50 is true in polars
    assert n(t.filter(pl.col("spend") > 50, pl.col("age") < 40)) == n(t.filter((pl.col("spend") > 50)
                                                                                 & (pl.col("age") < 40)))
    assert n(t.filter(pl.col("spend") > 50).filter(pl.col("age") < 40)) == 5
    assert n(t.filter(pl.col("spend").is_null())) == 1


def test_with_columns_can_replace_a_value_column(huge_sess: dp.Session) -> None:
    out = (huge_sess.table("t").with_columns(age=pl.col("age") * 2)
           .agg(dp.sum("age", bounds=(0, 1000))).collect(dp.PureDP(HUGE)))
    assert out["age_sum"].item() == pytest.approx(2 * (20 * 3 + 35 * 2 + 17 + 50 * 2 + 64 + 29 * 3), abs=1e-3)


# --------------------------------------------------------------------------------------- ranges


def test_means_stay_in_bounds_and_variances_are_non_negative() -> None:
    df = pl.DataFrame({"u": list(range(6)), "g": ["a", "a", "b", "b", "c", "c"], "x": [1.0, 9.0, 2.0, 2.0, 5.0, 6.0]})
    for seed in range(25):
        s = make_session(df, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=seed)
        out = (s.table("t").group_by("g", keys=["a", "b", "c", "empty"])
               .agg(dp.mean("x", bounds=(0, 10)), dp.var("x", bounds=(0, 10)), dp.std("x", bounds=(0, 10)))
               .collect(dp.PureDP(0.05)))
        assert out["x_mean"].is_between(0, 10).all()
        assert (out["x_var"] >= 0).all() and (out["x_std"] >= 0).all()
        assert out["x_std"].to_list() == pytest.approx(np.sqrt(out["x_var"].to_numpy()).tolist())
        assert out["x_mean"].is_finite().all() and out["x_var"].is_finite().all()


def test_counts_are_integers_and_noisy_at_small_epsilon(sess: dp.Session) -> None:
    outs = [sess.table("t").agg(dp.len()).collect(dp.PureDP(0.5))["len"].item() for _ in range(10)]
    assert all(isinstance(v, int) for v in outs)
    assert len(set(outs)) > 1      # noise is added (true value is 12, t = 3/0.5 = 6)


def test_row_level_unit() -> None:
    df = pl.DataFrame({"x": [1.0, 2.0, 3.0, 4.0]})
    s = make_session(df, unit=dp.PrivacyUnit.row(), budget=dp.PureDP(HUGE))
    out = s.table("t").agg(dp.len(), dp.mean("x", bounds=(0, 10))).collect(dp.PureDP(HUGE))
    assert out.row(0) == (4, pytest.approx(2.5, abs=1e-6))


# --------------------------------------------------------------------------------------------- bugs


def test_sample_variance_is_not_clipped_below_its_true_value() -> None:
    df = pl.DataFrame({"u": [1, 2, 3, 4], "x": [0.0, 10.0, 0.0, 10.0]})
    s = make_session(df, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(HUGE))
    out = s.table("t").agg(dp.var("x", bounds=(0, 10)), dp.std("x", bounds=(0, 10))).collect(dp.PureDP(HUGE))
    assert out["x_var"].item() == pytest.approx(100 / 3, abs=1e-3)
    assert out["x_std"].item() == pytest.approx(math.sqrt(100 / 3), abs=1e-3)


@pytest.mark.parametrize("measures", [
    (dp.mean("x", bounds=(-5, 5)),),
    (dp.var("x", bounds=(-5, 5)),),
    (dp.sum("x", bounds=(-5, 5)), dp.mean("x", bounds=(-5, 5))),
], ids=["mean", "var", "sum+mean"])
def test_bounds_symmetric_around_zero(measures) -> None:
    df = pl.DataFrame({"u": [1, 2, 3, 4], "x": [-4.0, -1.0, 2.0, 7.0]})
    s = make_session(df, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(HUGE))
    q = s.table("t").agg(*measures)
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    out = q.collect(dp.PureDP(HUGE))
    clamped = [-4.0, -1.0, 2.0, 5.0]
    if "x_mean" in out.columns:
        assert out["x_mean"].item() == pytest.approx(np.mean(clamped), abs=1e-4)
    if "x_var" in out.columns:
        assert out["x_var"].item() == pytest.approx(np.var(clamped, ddof=1), abs=1e-3)
    if "x_sum" in out.columns:
        assert out["x_sum"].item() == pytest.approx(sum(clamped), abs=1e-4)


def test_uncalibratable_noise_is_refused_before_charging() -> None:
    df = pl.DataFrame({"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    s = make_session(df, unit=dp.PrivacyUnit("u", max_rows=10), budget=dp.PureDP(1))
    with pytest.raises(dp.DPFrameError):
        s.table("t").agg(dp.len()).collect(dp.PureDP(1e-17))
    assert s.spent().epsilon == 0


@pytest.mark.parametrize("pred", [
    pl.col("s").cast(pl.Int64) > 0,
    pl.col("s").str.to_integer() > 0,
    pl.col("s").replace_strict({"1": 1, "2": 2, "3": 3}) > 0,
], ids=["cast", "to_integer", "replace_strict"])
def test_neighbouring_datasets_fail_alike(pred: pl.Expr) -> None:
    """Regression (was a privacy bug): a query must not fail on one neighbour and succeed on the other."""
    outcomes = []
    for last in ("3", "oops"):                     # neighbours: unit 3's single row differs
        df = pl.DataFrame({"u": [1, 2, 3], "s": ["1", "2", last]})
        s = make_session(df, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10))
        try:
            s.table("t").filter(pred).agg(dp.len()).collect(dp.PureDP(1))
            outcomes.append("ok")
        except dp.DPFrameError as e:
            outcomes.append(type(e).__name__)
    assert outcomes[0] == outcomes[1]


def test_one_row_unit_cannot_contribute_several_rows() -> None:
    """Regression (was a privacy bug): arr.explode() let one row-level unit contribute 5 rows."""
    df = pl.DataFrame({"a": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]}, schema={"a": pl.Array(pl.Int64, 5)})
    s = make_session(df, unit=dp.PrivacyUnit.row(), budget=dp.PureDP(HUGE))
    try:
        out = s.table("t").select(x=pl.col("a").arr.explode()).agg(dp.len()).collect(dp.PureDP(HUGE))
    except dp.PlanError:
        return                                    # refusing the query is a fine fix
    assert out["len"].item() <= df.height         # each unit (row) contributes at most one row
