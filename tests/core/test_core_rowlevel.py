"""The row-level check (dpframe/plan/rowlevel.py): element-wise expressions pass, cross-row ones are refused."""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.plan.rowlevel import check_row_level

ACCEPTED = {
    "compare": pl.col("x") >= 18,
    "arith": (pl.col("x") + 1) * 2 - pl.col("y") / 3,
    "and/or/not": (pl.col("x") > 0) & ~(pl.col("y") < 1) | pl.col("b"),
    "lit": pl.lit(3),
    "lit list (scalar)": pl.lit([1, 2]),
    "non-strict cast": pl.col("x").cast(pl.Float64, strict=False),
    "non-strict parse": pl.col("c").str.strptime(pl.Date, "%Y-%m-%d", strict=False),
    "alias": pl.col("x").alias("z"),
    "when/then": pl.when(pl.col("x") > 0).then(pl.lit(1)).otherwise(pl.col("y")),
    "abs/log/exp/pow": pl.col("x").abs().log1p().exp() ** 2,
    "sqrt": pl.col("x").sqrt(),
    "clip": pl.col("x").clip(0, 10),
    "clip by column": pl.col("x").clip(pl.col("y"), 10),
    "round/floor/ceil": pl.col("x").round(1).floor().ceil(),
    "sign": pl.col("x").sign(),
    "is_null/is_nan": pl.col("x").is_null() | pl.col("x").is_nan(),
    "is_between": pl.col("x").is_between(0, 1),
    "is_in literal list": pl.col("c").is_in(["a", "b"]),
    "fill_null value": pl.col("x").fill_null(0),
    "fill_null column": pl.col("x").fill_null(pl.col("y")),
    "fill_nan": pl.col("x").fill_nan(0),
    "coalesce": pl.coalesce("x", pl.lit(0)),
    "str ops": pl.col("c").str.to_uppercase().str.contains("A", strict=False) & (pl.col("c").str.len_chars() > 1),
    "concat_str": pl.concat_str("c", pl.lit("-"), "c"),
    "dt ops": pl.col("d").dt.year() > 2000,
    "struct": pl.struct("x", "c").struct.field("x"),
    "horizontal": pl.sum_horizontal("x", "y") + pl.max_horizontal("x", "y") - pl.min_horizontal("x", "y"),
    "hash": pl.col("x").hash(42),
    "selectors": pl.all(),
    "trig": pl.col("x").sin() + pl.col("x").arctan(),
}

REJECTED = {
    "sum": pl.col("x").sum(),
    "mean in predicate": pl.col("x") > pl.col("x").mean(),
    "min inside clip": pl.col("x").clip(pl.col("x").min(), 10),
    "agg inside when": pl.when(pl.col("x") > pl.col("x").median()).then(1).otherwise(0),
    "agg inside fill_null": pl.col("x").fill_null(pl.col("x").mean()),
    "count": pl.col("x").count(),
    "first": pl.col("x").first(),
    "n_unique": pl.col("x").n_unique(),
    "std": pl.col("x").std(),
    "implode/is_in column": pl.col("x").is_in(pl.col("y").implode()),
    "over": pl.col("x").sum().over("c"),
    "over (element-wise inner)": (pl.col("x") + 1).over("c"),
    "rolling": pl.col("x").rolling_mean(2),
    "ewm": pl.col("x").ewm_mean(alpha=0.5),
    "cum_sum": pl.col("x").cum_sum(),
    "cum_count": pl.col("x").cum_count(),
    "cum_max": pl.col("x").cum_max(),
    "shift": pl.col("x").shift(1),
    "diff": pl.col("x").diff(),
    "pct_change": pl.col("x").pct_change(),
    "rank": pl.col("x").rank(),
    "sort": pl.col("x").sort(),
    "sort_by": pl.col("x").sort_by("y"),
    "arg_sort": pl.col("x").arg_sort(),
    "top_k": pl.col("x").top_k(2),
    "head": pl.col("x").head(2),
    "tail": pl.col("x").tail(2),
    "slice": pl.col("x").slice(0, 2),
    "gather": pl.col("x").gather([0]),
    "gather_every": pl.col("x").gather_every(2),
    "pl.len": pl.len(),
    "int_range(len)": pl.int_range(pl.len()),
    "is_duplicated": pl.col("x").is_duplicated(),
    "is_unique": pl.col("x").is_unique(),
    "is_first_distinct": pl.col("x").is_first_distinct(),
    "any": pl.col("b").any(),
    "fill_null forward": pl.col("x").fill_null(strategy="forward"),
    "fill_null mean": pl.col("x").fill_null(strategy="mean"),
    "fill_null zero (strategy)": pl.col("x").fill_null(strategy="zero"),
    "interpolate": pl.col("x").interpolate(),
    "series literal": pl.lit(pl.Series([1, 2, 3])),
    "series in arithmetic": pl.col("x") + pl.lit(pl.Series([1, 2, 3])),
    "sample": pl.col("x").sample(n=1),
    "shuffle": pl.col("x").shuffle(),
    "reverse": pl.col("x").reverse(),
    "unique": pl.col("x").unique(),
    "drop_nulls": pl.col("x").drop_nulls(),
    "filter expr": pl.col("x").filter(pl.col("x") > 1),
    "explode": pl.col("l").explode(),
    "list.eval": pl.col("l").list.eval(pl.element().rank()),
    "cumulative_eval": pl.col("x").cumulative_eval(pl.element().sum()),
    "str.join (vertical)": pl.col("c").str.join(","),
    "value_counts": pl.col("x").value_counts(),
    "mode": pl.col("x").mode(),
    "rle_id": pl.col("x").rle_id(),
    "search_sorted": pl.col("x").search_sorted(1),
    "append": pl.col("x").append(pl.col("y")),
    "repeat_by": pl.col("x").repeat_by(2),
    "dot": pl.col("x").dot(pl.col("y")),
    "map_elements": pl.col("x").map_elements(lambda v: v, return_dtype=pl.Float64),
    "map_batches": pl.col("x").map_batches(lambda s: s),
    # one row in, several rows out
    "arr.explode": pl.col("a").arr.explode(),
    "list.explode": pl.col("l").list.explode(),
    "reshape": pl.col("x").reshape((-1, 2)),
    "repeat": pl.repeat(1, 3),
    "int_ranges": pl.int_ranges(0, pl.col("x")),
    # can fail on some private values (a failure would be an observable, non-DP signal)
    "strict cast": pl.col("c").cast(pl.Int64),
    "strict cast inside": (pl.col("c").cast(pl.Int64) + 1) > 0,
    "str.to_integer": pl.col("c").str.to_integer(),
    "strict strptime": pl.col("c").str.strptime(pl.Datetime, "%Y"),
    "replace_strict": pl.col("c").replace_strict({"a": 1}, default=0),
    "json_decode": pl.col("c").str.json_decode(pl.Int64),
    "list.get": pl.col("l").list.get(3),
}


@pytest.mark.parametrize("expr", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_element_wise_expressions_are_accepted(expr: pl.Expr) -> None:
    assert check_row_level(expr, "predicate") is None


@pytest.mark.parametrize("expr", REJECTED.values(), ids=REJECTED.keys())
def test_cross_row_expressions_are_refused(expr: pl.Expr) -> None:
    with pytest.raises(dp.PlanError) as info:
        check_row_level(expr, "my_arg")
    assert info.value.argument == "my_arg"
    assert info.value.fix
    assert str(info.value).startswith("my_arg:")


def test_refusal_names_the_operation() -> None:
    with pytest.raises(dp.PlanError, match="Agg:Mean"):
        check_row_level(pl.col("x") > pl.col("x").mean(), "predicate")
    with pytest.raises(dp.PlanError, match="Over"):
        check_row_level(pl.col("x").sum().over("c"), "predicate")
    with pytest.raises(dp.PlanError, match="Python function"):
        check_row_level(pl.col("x").map_elements(lambda v: v, return_dtype=pl.Int64), "predicate")


@pytest.mark.parametrize("value", ["x", 3, None, pl.Series([1]), pl.DataFrame({"x": [1]}), True])
def test_non_expressions_are_refused(value: object) -> None:
    with pytest.raises(dp.PlanError) as info:
        check_row_level(value, "predicate")
    assert info.value.argument == "predicate"


@pytest.mark.parametrize("expr", list(REJECTED.values())[:12], ids=list(REJECTED.keys())[:12])
def test_cross_row_expressions_are_refused_by_frame_methods(sess: dp.Session, expr: pl.Expr) -> None:
    """Every frame method that takes expressions runs the check (and names its argument)."""
    t = sess.table("t")
    with pytest.raises(dp.PlanError) as info:
        t.filter(pl.col("age") > 0, expr)
    assert info.value.argument == "predicate"
    with pytest.raises(dp.PlanError) as info:
        t.with_columns(expr.alias("new"))
    assert info.value.argument == "exprs"
    with pytest.raises(dp.PlanError) as info:
        t.with_columns(new=expr)
    assert info.value.argument == "new"
    with pytest.raises(dp.PlanError):
        t.select(expr.alias("new"))


def test_replace_with_lists_is_accepted() -> None:
    check_row_level(pl.col("c").replace(["a", "b"], ["x", "y"]), "exprs")
    check_row_level(pl.col("c").replace(pl.Series(["a"]), pl.Series([1.5])), "exprs")


@pytest.mark.parametrize("expr", [
    pl.col("c") + pl.lit(pl.Series(["a", "b"])),                                  # a Series outside replace
    pl.col("c").replace(pl.col("d"), ["x"]),                                      # old values from a column
    pl.col("c").cast(pl.Categorical).replace(["a"], ["x"]),                      # category codes
])
def test_replace_series_exceptions_stay_refused(expr: pl.Expr) -> None:
    with pytest.raises(dp.PlanError):
        check_row_level(expr, "exprs")

