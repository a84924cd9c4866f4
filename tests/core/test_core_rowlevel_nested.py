"""The row-level check looks at every node of an expression, at any depth (audit issue 2, G1 and G2).

A cross-row operation must be refused wherever it sits: inside an alias, an arithmetic operation, a
``when``, a function argument, a struct... and Categorical physical codes (which depend on the order
in which the process first saw each string) must never reach a value.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import polars as pl
import pytest
from core_testkit import HUGE, make_session

import dpframe as dp
from dpframe.plan.rowlevel import check_row_level

SCHEMA = pl.Schema({"u": pl.Int64, "x": pl.Float64, "i": pl.Int64, "s": pl.String, "d": pl.Datetime("us"),
                    "l": pl.List(pl.Int64), "cat": pl.Categorical(), "e": pl.Enum(["a", "b"])})

# Cross-row operations, each placed below in every expression position.
CROSS_ROW: dict[str, Callable[[], pl.Expr]] = {
    "len": lambda: pl.len(),
    "count": lambda: pl.col("x").count(),
    "sum": lambda: pl.col("x").sum(),
    "mean": lambda: pl.col("x").mean(),
    "over": lambda: pl.col("x").over("s"),
    "cum_sum": lambda: pl.col("x").cum_sum(),
    "cum_count": lambda: pl.col("x").cum_count(),
    "shift": lambda: pl.col("x").shift(1),
    "rank": lambda: pl.col("x").rank(),
    "unique": lambda: pl.col("x").unique(),
    "sort": lambda: pl.col("x").sort(),
    "implode": lambda: pl.col("x").implode().list.len(),
    "first": lambda: pl.col("x").first(),
    "has_nulls": lambda: pl.col("x").has_nulls().cast(pl.Float64, strict=False),
    "is_sorted": lambda: pl.col("x").is_sorted().cast(pl.Float64, strict=False),
    "int_range": lambda: pl.int_range(pl.len()).cast(pl.Float64, strict=False),
}

# Expression positions: each wraps a float-valued expression ``e``.
POSITIONS: dict[str, Callable[[pl.Expr], pl.Expr]] = {
    "bare": lambda e: e,
    "alias": lambda e: e.alias("n"),
    "plus": lambda e: e + 1,
    "right operand": lambda e: pl.col("x") * e,
    "comparison": lambda e: e > 3,
    "when predicate": lambda e: pl.when(e > 3).then(1).otherwise(0),
    "when branch": lambda e: pl.when(pl.col("x") > 3).then(e).otherwise(0),
    "otherwise": lambda e: pl.when(pl.col("x") > 3).then(1).otherwise(e),
    "clip bound": lambda e: pl.col("x").clip(0, e),
    "fill_null value": lambda e: pl.col("x").fill_null(e),
    "coalesce": lambda e: pl.coalesce(pl.col("x"), e),
    "horizontal": lambda e: pl.sum_horizontal(pl.col("x"), e),
    "struct field": lambda e: pl.struct(e.alias("n"), pl.col("x")).struct.field("n"),
    "cast": lambda e: e.cast(pl.String, strict=False),
    "nested alias": lambda e: (e.alias("a") + 1).alias("b").abs(),
    "is_between": lambda e: pl.col("x").is_between(e, 10),
    "name.suffix": lambda e: e.name.suffix("_n"),
    "keep name": lambda e: (e + 1).name.keep(),
}

CASES = [(f"{op} in {pos}", wrap(make())) for op, make in CROSS_ROW.items() for pos, wrap in POSITIONS.items()]


@pytest.mark.parametrize("expr", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_cross_row_operations_are_refused_at_any_depth(expr: pl.Expr) -> None:
    with pytest.raises(dp.PlanError) as info:
        check_row_level(expr, "exprs", SCHEMA)
    assert info.value.argument == "exprs" and info.value.fix


@pytest.mark.parametrize("expr", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_cross_row_operations_are_refused_without_a_schema(expr: pl.Expr) -> None:
    with pytest.raises(dp.PlanError):
        check_row_level(expr, "exprs")


@pytest.mark.parametrize("position", POSITIONS.values(), ids=POSITIONS.keys())
def test_the_same_positions_accept_a_row_level_value(position: Callable[[pl.Expr], pl.Expr]) -> None:
    """The wrappers themselves are fine: the refusals above come from the nested operation."""
    check_row_level(position(pl.col("x").abs() + 1), "exprs", SCHEMA)


def test_nested_len_names_the_operation() -> None:
    for expr in (pl.len().alias("n"), pl.len() + 1, pl.col("x") * pl.len(), pl.when(pl.len() > 3).then(1)):
        with pytest.raises(dp.PlanError, match="uses 'Len', which combines several rows"):
            check_row_level(expr, "predicate")


LEN_EXPLOITS: dict[str, Callable[[dp.Frame], dp.Frame]] = {
    "filter(len > 1000)": lambda f: f.filter(pl.len() > 1000),
    "filter(x * len > 1000)": lambda f: f.filter(pl.col("x") * pl.len() > 1000),
    "filter(when(len > 1000))": lambda f: f.filter(pl.when(pl.len() > 1000).then(True).otherwise(False)),
    "with_columns(len.alias)": lambda f: f.with_columns(pl.len().alias("n")).filter(pl.col("n") > 1000),
    "with_columns(n=len + 0)": lambda f: f.with_columns(n=pl.len() + 0).filter(pl.col("n") > 1000),
    "select(len.alias)": lambda f: f.select(pl.col("x"), pl.len().alias("n")).filter(pl.col("n") > 1000),
}


@pytest.mark.parametrize("attack", LEN_EXPLOITS.values(), ids=LEN_EXPLOITS.keys())
def test_len_exploit_is_refused_through_every_frame_method_and_charges_nothing(
        attack: Callable[[dp.Frame], dp.Frame]) -> None:
    """The audit's exploit: with pl.len() one unit's presence decided every other row's filter."""
    data = pl.DataFrame({"u": range(1001), "x": [1.0] * 1001})
    sess = make_session(data, unit=dp.PrivacyUnit("u"))
    with pytest.raises(dp.PlanError, match="Len"):
        attack(sess.table("t")).agg(dp.len())
    assert sess.spent().epsilon == 0


def test_a_row_level_filter_moves_the_count_by_at_most_one_unit() -> None:
    """What the refused exploit broke: on neighbours D and D + one unit, an allowed filter moves the
    exact count (huge ε: no noise) by at most that unit's rows, here 1."""
    counts = []
    for n in (1000, 1001):
        data = pl.DataFrame({"u": range(n), "x": [1.0] * n})
        sess = make_session(data, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(HUGE))
        q = sess.table("t").filter((pl.col("x") * 2 > 1) & pl.col("x").is_not_null()).agg(dp.len())
        counts.append(q.collect(dp.PureDP(HUGE))["len"].item())
    assert counts == [1000, 1001]


# --- Categorical codes (G2) ---

CATEGORICAL_REFUSED = {
    "to_physical of a categorical column": pl.col("cat").to_physical(),
    "to_physical in a predicate": pl.col("cat").to_physical() % 2 == 0,
    "reinterpret": pl.col("cat").to_physical().reinterpret(signed=True),
    "max_horizontal": pl.max_horizontal(pl.col("cat"), pl.col("cat")),
    "min_horizontal": pl.min_horizontal("cat", "s"),
    "cast of a categorical to a number": pl.col("cat").cast(pl.UInt32, strict=False),
    "cast to Categorical": pl.col("s").cast(pl.Categorical, strict=False),
    "cast to Categorical, then to String": pl.col("s").cast(pl.Categorical, strict=False).cast(pl.String,
                                                                                              strict=False),
    "cast to List(Categorical)": pl.col("l").cast(pl.List(pl.Categorical), strict=False),
    "Categorical literal": pl.lit("a", dtype=pl.Categorical),
    "to_physical of a selector": pl.all().to_physical(),
}
CATEGORICAL_ACCEPTED = {
    "equality": pl.col("cat") == "a",
    "ordering (lexical)": pl.col("cat") < "m",
    "cast to String": pl.col("cat").cast(pl.String, strict=False),
    "cast to Enum": pl.col("cat").cast(pl.Enum(["a", "b"]), strict=False),
    "is_in": pl.col("cat").is_in(["a", "b"]),
    "is_null": pl.col("cat").is_null(),
    "hash (of the string)": pl.col("cat").hash(7),
    "fill_null": pl.col("cat").fill_null("z").cast(pl.String, strict=False),
    "Enum codes are public": pl.col("s").cast(pl.Enum(["a", "b"]), strict=False).to_physical(),
    "Enum column codes": pl.col("e").to_physical(),
    "to_physical of a date": pl.col("d").to_physical(),
    "a string named Categorical": pl.col("s") == "Categorical",
}


@pytest.mark.parametrize("expr", CATEGORICAL_REFUSED.values(), ids=CATEGORICAL_REFUSED.keys())
def test_categorical_codes_are_refused(expr: pl.Expr) -> None:
    with pytest.raises(dp.PlanError, match="Categorical") as info:
        check_row_level(expr, "exprs", SCHEMA)
    assert "Enum" in (info.value.fix or "") or "string" in (info.value.fix or "")


@pytest.mark.parametrize("expr", CATEGORICAL_ACCEPTED.values(), ids=CATEGORICAL_ACCEPTED.keys())
def test_categorical_values_by_string_and_enum_codes_are_accepted(expr: pl.Expr) -> None:
    check_row_level(expr, "exprs", SCHEMA)


def test_categorical_column_of_a_registered_table_cannot_leak_codes() -> None:
    data = pl.DataFrame({"u": [1, 2, 3], "name": ["b", "a", "c"]}).with_columns(pl.col("name").cast(pl.Categorical))
    sess = make_session(data)
    t = sess.table("t")
    with pytest.raises(dp.PlanError, match="Categorical"):
        t.filter(pl.col("name").to_physical() % 2 == 0)
    with pytest.raises(dp.PlanError, match="Categorical"):
        t.with_columns(code=pl.col("name").to_physical())
    with pytest.raises(dp.PlanError, match="Categorical"):
        t.select(pl.max_horizontal("name", "name").alias("m"))
    assert t.filter(pl.col("name") == "a").group_by("name", keys=["a", "b"]).agg(dp.len()) is not None
    assert sess.spent().epsilon == 0


CAT_ESCAPE = """
import polars as pl, dpframe as dp
names = [f"user-{i:05d}" for i in range(1000)]
d = pl.DataFrame({"user": list(range(1000)), "name": names, "x": [int(i % 2 == 0) for i in range(1000)]})
s = dp.Session({"t": d}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(10))
try:
    s.table("t").filter((pl.col("name").cast(pl.Categorical, strict=False).to_physical() % 2 == 0)
                        & (pl.col("x") == 1)).agg(dp.len())
    print("ALLOWED")
except dp.PlanError as e:
    print("REFUSED", s.spent().epsilon, str(e))
"""


def test_the_audit_categorical_exploit_is_refused_in_a_fresh_process() -> None:
    """scratch-2/cat_escape.py: the neighbour stored first shifted every other row's code (500 → 251)."""
    out = subprocess.run([sys.executable, "-c", CAT_ESCAPE], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.startswith("REFUSED 0 predicate: uses 'ToPhysical'"), out.stdout + out.stderr
    assert "Categorical's physical codes" in out.stdout


# --- other cross-row or failing forms found while making the list strict ---

OTHER_REFUSED = {
    "has_nulls": pl.col("x").has_nulls(),
    "is_sorted": pl.col("x").is_sorted(),
    "date parsing with an inferred format": pl.col("s").str.to_date(strict=False),
    "datetime parsing ambiguous='infer'": pl.col("s").str.to_datetime("%Y-%m-%d %H:%M", ambiguous="infer",
                                                                      strict=False),
    "replace_time_zone ambiguous='infer'": pl.col("d").dt.replace_time_zone("Europe/London", ambiguous="infer"),
    "replace with a column (reads the whole column)": pl.col("i").replace(pl.col("u"), 0),
    "is_in a scalar column (reads the whole column)": pl.col("i").is_in(pl.col("u")),
    "integer pow with a column exponent (fails on negatives)": pl.col("i").pow(pl.col("u")),
    "regex pattern from a column": pl.col("s").str.extract(pl.col("s"), 1),
    "duration string from a column": pl.col("d").dt.offset_by(pl.col("s")),
    "dt.replace from a column": pl.col("d").dt.replace(day=pl.col("i")),
    "slice length from a column": pl.col("s").str.slice(0, pl.col("i")),
    "name.map (Python)": pl.col("x").name.map(str.upper),
}
OTHER_ACCEPTED = {
    "is_in a list column": pl.col("i").is_in(pl.col("l")),
    "float pow with a column exponent": pl.col("x").pow(pl.col("i")),
    "pow with a float column exponent": pl.col("i").pow(pl.col("x")),
    "date parsing with a format": pl.col("s").str.to_date("%Y-%m-%d", strict=False),
    "replace with literals": pl.col("i").replace(1, 0),
    "contains a column pattern, non-strict": pl.col("s").str.contains(pl.col("s"), literal=True, strict=False),
    "starts_with a column": pl.col("s").str.starts_with(pl.col("s")),
    "duration from a column": pl.col("d") + pl.duration(days=pl.col("i")),
    "name.suffix": pl.col("x").name.suffix("_2"),
}


@pytest.mark.parametrize("expr", OTHER_REFUSED.values(), ids=OTHER_REFUSED.keys())
def test_other_cross_row_or_failing_forms_are_refused(expr: pl.Expr) -> None:
    with pytest.raises(dp.PlanError):
        check_row_level(expr, "exprs", SCHEMA)


@pytest.mark.parametrize("expr", OTHER_ACCEPTED.values(), ids=OTHER_ACCEPTED.keys())
def test_other_row_level_forms_are_accepted(expr: pl.Expr) -> None:
    check_row_level(expr, "exprs", SCHEMA)


def test_is_in_a_scalar_column_really_reads_other_rows() -> None:
    """Why it is refused: Polars reads the whole column as the set (row 2 matches row 0's value)."""
    with pytest.warns(DeprecationWarning):
        out = pl.DataFrame({"x": [1, 2, 3], "y": [3, 9, 31]}).select(pl.col("x").is_in(pl.col("y")))
    assert out["x"].to_list() == [False, False, True]


def test_a_select_of_literals_only_is_refused(sess: dp.Session) -> None:
    """It would give a single row whatever the data (the row-count probe at build time)."""
    row_sess = make_session(pl.DataFrame({"x": [1, 2, 3]}), unit=dp.PrivacyUnit.row())
    with pytest.raises(dp.PlanError, match="rows for 3 input rows"):
        row_sess.table("t").select(pl.lit(1).alias("one"))
    assert row_sess.spent().epsilon == 0


def test_a_row_node_failing_on_null_rows_is_refused_at_build_time() -> None:
    """The null-row probe of ``_derive``: a node that works on no rows but fails on some rows."""
    from dataclasses import dataclass

    from dpframe.plan.nodes import RowNode, Scan, _derive

    def fail_on_rows(s: pl.Series) -> pl.Series:
        if s.len():
            raise pl.exceptions.ComputeError("boom")
        return s

    @dataclass(frozen=True, eq=False)
    class Failing(RowNode):
        def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
            return frame.with_columns(pl.col("i").map_batches(fail_on_rows, return_dtype=pl.Int64))

        def describe(self) -> str:
            return "Failing"

    schema = pl.Schema({"i": pl.Int64})
    node = Failing(Scan.of("t", schema), schema)
    with pytest.raises(dp.PlanError, match="fails on null values") as info:
        _derive(schema, node, "exprs")
    assert info.value.argument == "exprs"
