"""Issue 19 item 5: Polars habits work or say what to do; expressions in measures and keys; per-query bounds."""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.habits import FRAME, GROUP_BY, QUERY

DATA = pl.DataFrame({"u": [i // 10 for i in range(2000)], "origin": ["JFK", "LGA", "EWR", "JFK", "LGA"] * 400,
                     "delay": [(i * 37) % 120 - 20 for i in range(2000)], "dep_time": [905, 1410, 1755, 620] * 500})
BIG = dp.PureDP(10**6)   # noise far below one unit: results are the exact bounded statistics


def session(unit: dp.PrivacyUnit | None = None, budget: dp.Budget = dp.ApproxDP(10**7, 1e-6)) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=unit or dp.PrivacyUnit("u", max_rows=10), budget=budget, seed=0)


def test_every_listed_habit_says_what_to_do_and_charges_nothing() -> None:
    sess = session()
    frame = sess.table("t")
    owners = {"Frame": (frame, FRAME), "GroupBy": (frame.group_by("origin"), GROUP_BY),
              "Query": (frame.agg(dp.len()), QUERY)}
    for owner, (obj, table) in owners.items():
        for name in table:
            with pytest.raises(dp.PolarsHabitError, match="Polars habit") as err:
                {"__len__": len, "__iter__": iter, "__getitem__": lambda o: o["x"]}.get(name, lambda o: getattr(
                    o, name))(obj)
            assert isinstance(err.value, AttributeError | TypeError) and "Fix: " in str(err.value), (owner, name)
            assert err.value.fix and "(" in err.value.fix, name               # names a call to make instead
        assert not hasattr(obj, "head") and bool(obj)
    with pytest.raises(AttributeError) as plain:
        frame.frobnicate  # noqa: B018
    assert not isinstance(plain.value, dp.PolarsHabitError)
    assert sess.history().height == 0


def test_public_polars_methods_work() -> None:
    frame = session().table("t")
    assert frame.width == 4 and frame.dtypes == list(DATA.schema.dtypes()) and frame.collect_schema() == DATA.schema
    assert frame.drop("delay", ["dep_time"]).columns == ["u", "origin"]
    assert frame.rename({"delay": "arr_delay"}).columns == ["u", "origin", "arr_delay", "dep_time"]
    for bad in (lambda: frame.drop("u"), lambda: frame.rename({"u": "id"}), lambda: frame.drop("nope")):
        with pytest.raises(dp.DPFrameError, match="Fix: "):
            bad()


def test_a_measure_of_an_expression_is_the_measure_of_the_derived_column() -> None:
    q = session().table("t").agg(dp.mean(pl.col("delay") > 15, bounds=(0, 1)), late=dp.sum(pl.col("delay") > 15,
                                                                                             bounds=(0, 1)))
    text = str(q.explain(BIG))
    assert 'WithColumns [[(col("delay")) > (dyn int: 15)].alias("delay_mean")]' in text   # one derived column
    out = q.collect(BIG)
    assert out.columns == ["delay_mean", "late"]
    exact = (DATA["delay"] > 15).sum()
    assert out["late"][0] == pytest.approx(exact, abs=1) and out["delay_mean"][0] == pytest.approx(exact / 2000, 1e-3)


@pytest.mark.parametrize("expr, why", [
    (pl.col("delay").sum(), "combines several rows"),
    (pl.col("origin").str.to_integer(base=1, strict=False), "fails on some values"),
    (pl.col("origin").cast(pl.Int64), "strict cast"),
])
def test_measure_expressions_pass_the_with_columns_checks(expr: pl.Expr, why: str) -> None:
    sess = session()
    with pytest.raises(dp.PlanError, match=why):
        sess.table("t").agg(dp.mean(expr, bounds=(0, 1)))
    with pytest.raises(dp.PlanError, match=why):
        sess.table("t").with_columns(expr.alias("y"))
    assert sess.history().height == 0


def test_measure_expressions_that_cannot_be_one_column_are_refused() -> None:
    with pytest.raises(dp.DPFrameError, match="several outputs"):
        dp.mean(pl.all(), bounds=(0, 1))
    with pytest.raises(dp.PlanError, match="cannot inspect"):
        dp.mean(pl.col("delay").map_elements(lambda v: v, return_dtype=pl.Int64), bounds=(0, 1))


def test_group_by_accepts_expressions() -> None:
    t = session().table("t")
    plain = t.group_by("origin").agg(dp.len()).collect(dp.ApproxDP(10**6, 1e-7))
    assert t.group_by(pl.col("origin")).agg(dp.len()).collect(dp.ApproxDP(10**6, 1e-7)).equals(plain)
    hours = t.group_by((pl.col("dep_time") // 100).alias("hour"), keys=[6, 9, 14, 17]).agg(dp.len()).collect(BIG)
    assert hours["hour"].to_list() == [6, 9, 14, 17] and hours["len"].to_list() == [500] * 4
    with pytest.raises(dp.PlanError, match=r"alias\('dep_time_key'\)"):
        t.group_by(pl.col("dep_time") // 100)


def test_bound_tightens_planning_and_execution_together() -> None:
    t = session().table("t")   # each unit: 10 rows over the 5 origins (2 each); session max_rows=10
    keys = ["EWR", "JFK", "LGA"]
    full = t.group_by("origin", keys=keys).agg(dp.len())
    one = t.bound(max_groups=1).group_by("origin", keys=keys).agg(dp.len())
    two_rows = t.bound(max_rows=2).filter(pl.col("delay") > -100).agg(dp.len())
    assert "Δ=10" in str(full.explain(dp.PureDP(1))) and "Δ=10" in str(one.explain(dp.PureDP(1)))
    assert "Δ=2" in str(two_rows.explain(dp.PureDP(1))) and "≤ 2 rows per unit" in str(two_rows.explain(dp.PureDP(1)))
    assert sum(full.collect(BIG)["len"]) == 2000
    assert 400 <= sum(one.collect(BIG)["len"]) <= 800     # 200 units, each its 4 JFK, 4 LGA or 2 EWR rows
    assert two_rows.collect(BIG)["len"][0] == 400          # 200 units × 2 rows
    assert "≤ 1 groups" in str(t.bound(max_groups=1).bound(max_rows=3).agg(dp.len()).explain(dp.PureDP(1)))


def test_bound_is_never_looser_than_the_session() -> None:
    sess = session()
    for kwargs, arg in (({"max_rows": 11}, "max_rows"), ({"max_groups": 11}, "max_groups"), ({}, "bound")):
        with pytest.raises(dp.PlanError) as err:
            sess.table("t").bound(**kwargs)
        assert err.value.argument == arg
    with pytest.raises(dp.PlanError, match="its own unit"):
        session(dp.PrivacyUnit.row()).table("t").bound(max_rows=1)
    tight = sess.table("t").bound(max_rows=2)
    # a later bound cannot loosen
    assert "≤ 2 rows" in str(tight.bound(max_rows=5).agg(dp.len()).explain(dp.PureDP(1)))


def test_sql_median_is_named_like_dp_median() -> None:
    sess = session(budget=dp.PureDP(10**7))
    out = sess.sql("SELECT MEDIAN(CLAMP(delay, -20, 100)), QUANTILE_CONT(CLAMP(delay, -20, 100), 0.5) FROM t")
    assert out.collect(BIG).columns == ["delay_median", "delay_quantile"]
    assert sess.table("t").agg(dp.median("delay", bounds=(-20, 100))).collect(BIG).columns == ["delay_median"]


@pytest.mark.parametrize("score, dtype", [(None, pl.Int64), (dp.len(), pl.Int64), (dp.sum("delay", bounds=(0, 100)),
                                                                                      pl.Float64)])
def test_top_k_scores_are_typed_like_the_agg_measure(score: dp.Measure | None, dtype: pl.DataType) -> None:
    out = session().table("t").group_by("origin").top_k(k=2, score=score, release_scores=True).collect(
        dp.ApproxDP(50, 1e-7))
    assert out.schema[out.columns[1]] == dtype


def test_a_defaulted_max_rows_is_explained_everywhere() -> None:
    assert repr(dp.PrivacyUnit("u")) == "PrivacyUnit('u', max_rows=1)" and dp.PrivacyUnit("u") == dp.PrivacyUnit(
        "u", max_rows=1)
    sess = session(dp.PrivacyUnit("u"))
    t = sess.table("t")
    for q, budget in ((t.agg(dp.len()), dp.PureDP(1)), (t.group_by("origin").top_k(k=1), dp.ApproxDP(1, 1e-7)),
                      (sess.sql("SELECT COUNT(*) FROM t"), dp.PureDP(1))):
        e = q.explain(budget)
        assert "max_rows was not given, so it is 1" in e and "dp.PrivacyUnit('u', max_rows=N)" in e
    assert "max_rows was not given" not in session().table("t").agg(dp.len()).explain(dp.PureDP(1))
    assert "(the default)" in sess._repr_html_()
