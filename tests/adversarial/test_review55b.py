"""Review 55b: the growth bound on Polars method chains (dpframe.plan.growth), second pass — list sizes, JSON
encodings, field names and formats.

Each test is one attack or one pinned refusal; those that found something say so in their docstring. Every attack
is checked on the bound (and a tiny row shows the real growth), never by computing gigabytes.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.plan.growth import MAX_GROWTH, growth
from dpframe.plan.rowlevel import TREE_DEPTH, _deeper

_WIDE = dp.PureDP(100)
_S = pl.DataFrame({"u": [0, 1, 2], "s": ["a", "bc", ""], "b": [True, False, True], "x": [1, 2, 3],
                   "d": [dt.datetime(2020, 1, 1)] * 3})
_SCHEMA = _S.schema
_R = "r" * 10_000


def _session(data: pl.DataFrame = _S) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0)


def _empty(e: pl.Expr, r: str = _R) -> pl.Expr:
    return e.str.replace_all("", r, literal=True)


def _encoded(e: pl.Expr, times: int) -> pl.Expr:
    for _ in range(times):
        e = pl.struct(e.alias("v")).struct.json_encode()
    return e


def _real(expr: pl.Expr, value: str) -> int:
    """How many bytes ``expr`` computes from one row ``s = value`` (a string's, or a list's or struct's JSON text)."""
    row = pl.DataFrame({"s": [value], "d": [dt.datetime(2020, 1, 1)], "x": [0]})
    if row.select(expr).dtypes[0] == pl.String:
        return int(row.select(expr.str.len_bytes()).item() or 0)
    text = row.select(pl.struct(expr.alias("v")).struct.json_encode()).item()
    return len(text.encode()) - len('{"v":}')


def _bound(expr: pl.Expr, value: str) -> int:
    a, b = growth(expr, {})
    return a * max(len(value.encode()), 1) + b


_MANY = ["a"] * 30_000
_GROUPS = pl.col("s").str.extract_groups("(" * 200 + "a*" + ")" * 200)
_GROWING: dict[str, tuple[pl.Expr, pl.Expr, str]] = {     # the refused expression, what it computes, on one row
    "extract_many overlapping, repeated patterns": (
        pl.col("s").str.extract_many(_MANY, overlapping=True),) * 2 + ("aa",),
    "find_many overlapping, repeated patterns": (pl.col("s").str.find_many(_MANY, overlapping=True),) * 2 + ("aa",),
    "json_encode nested over quotes": (_encoded(pl.col("s"), 15),) * 2 + ('"',),
    "json_encode of a long field name": (pl.struct(pl.col("s").alias("n" * 30_000)).struct.json_encode(),) * 2
    + ("a",),
    "json_encode of split_exact's fields": (
        _empty(pl.col("s").str.split_exact("x", 9_999).struct.json_encode(), "r" * 100),
        pl.col("s").str.split_exact("x", 9_999).struct.json_encode(), "a"),
    "json_encode of renamed fields": (pl.col("s").str.split_exact("x", 2).struct.rename_fields(
        [c * 9_000 for c in "mno"]).struct.json_encode(),) * 2 + ("a",),
    "to_string with a long format": (pl.col("d").dt.to_string("x" * 30_000),) * 2 + ("",),
    "to_string's specifiers, then a replacement": (_empty(pl.col("d").dt.to_string("%c" * 10), "r" * 1000),
                                                   pl.col("d").dt.to_string("%c" * 10), ""),
    "extract_groups nesting groups": (_empty(_GROUPS.struct.json_encode(), "r" * 100), _GROUPS, "aaaaaaaaaa"),
}


@pytest.mark.parametrize("name", list(_GROWING))
def test_the_bound_holds_on_a_tiny_row(name: str) -> None:
    """Found: each of these computed far more than its bound said (``growth`` gave ``(1, 1)`` for an overlapping
    ``extract_many`` of 30,000 patterns, which makes 30,000 matches per input byte; ``(1, 0)`` for JSON encodings
    nested 15 times, 2¹⁵ bytes per quote; a field name or a format of any length, or 200 nested regex groups, counted
    as one copy). The bound is what the refusal trusts: it must hold on every row (here one tiny one: what is really
    computed, in JSON form, is at most ``a·L + b``)."""
    _, computed, value = _GROWING[name]
    assert _real(computed, value) <= _bound(computed, value), (_real(computed, value), growth(computed, {}))


@pytest.mark.parametrize("name", list(_GROWING))
def test_a_chain_whose_values_multiply_is_refused_free(name: str) -> None:
    """Found: these built (the values above, then one more replacement or one more row of input, grow past any
    memory on the rows a private condition lets through); now each is refused when built, free, naming the
    argument."""
    expr, _, _ = _GROWING[name]
    sess = _session()
    with pytest.raises(dp.PlanError) as e:
        sess.table("t").with_columns(v=pl.when(pl.col("b")).then(expr).otherwise(None)).agg(
            dp.len()).collect(dp.PureDP(1))
    assert "bytes per byte of its input" in str(e.value) and f"{MAX_GROWTH:,}" in str(e.value), e.value
    assert e.value.argument == "v"
    assert sess.history().height == 0


_BOUNDED: dict[str, Any] = {
    "extract_many overlapping, a few patterns": lambda t: t.with_columns(
        v=pl.col("s").str.extract_many(["a", "b", "bc"], overlapping=True)).filter(pl.col("v").is_not_null()),
    "find_many": lambda t: t.with_columns(v=pl.col("s").str.find_many(["a", "b"])),
    "split and extract_all": lambda t: t.with_columns(v=pl.col("s").str.split(""),
                                                      w=pl.col("s").str.extract_all(".")),
    "json_encode a few deep, with names": lambda t: t.with_columns(
        v=_encoded(pl.struct(pl.col("s").alias("name"), pl.col("x")), 3)),
    "json_encode of split_exact": lambda t: t.with_columns(
        v=pl.col("s").str.split_exact("b", 20).struct.json_encode()),
    "to_string with an ordinary format": lambda t: t.with_columns(
        v=pl.col("d").dt.to_string("%Y-%m-%dT%H:%M:%S%.f").str.replace_all("-", "--", literal=True)),
    "extract_groups with names": lambda t: t.with_columns(
        v=pl.col("s").str.extract_groups(r"(?P<first>.)(?P<rest>.*)").struct.json_encode()),
}


@pytest.mark.parametrize("name", list(_BOUNDED))
def test_ordinary_list_json_and_format_chains_are_released(name: str) -> None:
    """What the bound keeps: overlapping matches of a few patterns, splits, JSON encodings a few deep, ordinary
    date formats and named regex groups."""
    sess = _session()
    _BOUNDED[name](sess.table("t")).agg(dp.len()).collect(dp.PureDP(1))
    assert sess.history()["status"].to_list() == ["committed"]


@pytest.mark.parametrize(("expr", "value"), [
    (pl.col("s").str.split(""), "abc"), (pl.col("s").str.extract_all(""), "abc"),
    (pl.col("s").str.extract_many(["a", "ab", "b"], overlapping=True), "abab"),
    (pl.col("s").str.find_many(["a", "ab", "b"], overlapping=True), "abab"),
    (pl.col("s").str.extract_many(["", "a"]), "aaa"),
    (_encoded(pl.col("s"), 3), "\x01\"\\"), (pl.col("s").str.split_exact("x", 30).struct.json_encode(), "a"),
    (pl.struct(pl.col("s").str.split(","), pl.col("s").alias("\x01" * 5)).struct.json_encode(), ",,,"),
    (pl.col("s").str.extract_groups("((.)(.))").struct.json_encode(), "\x01\x02"),
    ((pl.col("s").str.len_bytes().cast(pl.Float64) / 3).cast(pl.String), "ab"),
    (pl.col("s").str.len_bytes().cast(pl.Datetime("ns")).cast(pl.String), "a"),
    (pl.struct(*(pl.col("x").cast(pl.Float64).alias(f"f{i}") / 3 for i in range(20))).struct.json_encode(), ""),
    (pl.col("s").str.to_date("%y", strict=False).cast(pl.String), "20"),
    (pl.col("s").str.contains("x").cast(pl.String), ""),
])
def test_the_bound_holds_for_ordinary_values(expr: pl.Expr, value: str) -> None:
    """The bound on lists (their elements and a JSON comma and quotes each), JSON text (escapes, names, nulls),
    regex groups and numbers or dates longer than their input (a third, a datetime from one byte) holds on small rows,
    control characters and quotes included."""
    assert _real(expr, value) <= _bound(expr, value), (_real(expr, value), growth(expr, {}))


# ------------------------------------------------------------------------------- deep but allowed expressions

def _whens(n: int) -> pl.Expr:
    e = pl.col("x")
    for _ in range(n):
        e = pl.when(pl.col("x") > 1).then(e).otherwise(pl.col("x"))
    return e


@pytest.mark.parametrize("n", [32, 40, 61])
def test_integer_whens_nested_past_the_reader_are_refused_as_too_deep(n: int) -> None:
    """Found: 32 to 61 nested ``pl.when(...).then(...)`` over an integer column passed the nesting check (129 JSON
    levels), then the guard that casts each integer ternary to its planned type added two levels per ``when`` and
    Polars could not read the guarded tree back: a bare ``polars.exceptions.ComputeError`` ("could not deserialize
    input into an expression") instead of a dpframe error. The guarded tree's depth is now checked too: the same
    refusal as a deeper expression, naming the argument, free."""
    sess = _session()
    with pytest.raises(dp.PlanError) as e:
        sess.table("t").with_columns(v=_whens(n)).agg(dp.len()).collect(dp.PureDP(1))
    assert "nested too deep" in str(e.value) and e.value.argument == "v"
    assert sess.history().height == 0


def test_deep_chains_within_the_limits_build() -> None:
    """What stays: 25 nested integer ``when``s, and long chains of the other row-level kinds the growth walk
    recurses through (its recursion stays far inside Python's limit at the deepest tree the checks accept)."""
    sess = _session()
    e = pl.col("s")
    for _ in range(20):
        e = pl.concat_str(e.str.slice(0, 3), pl.lit("-"))
    sess.table("t").with_columns(v=_whens(25), w=e).agg(dp.len()).collect(dp.PureDP(1))
    assert sess.history()["status"].to_list() == ["committed"]


def test_the_growth_walk_stays_inside_the_recursion_limit_at_the_deepest_accepted_tree() -> None:
    """The growth walk recurses; at the deepest tree the size check lets through (``TREE_DEPTH`` JSON levels) of
    the kinds that cost it the most frames per level it returns (a RecursionError would still be refused as nested
    too deep by the builder, but the walk does not need that)."""
    for step in (lambda e: e + pl.col("x"), lambda e: pl.when(pl.col("b")).then(e).otherwise(None),
                 lambda e: e.abs(), lambda e: pl.struct(e)):
        e = pl.col("x")
        while not _deeper(json.loads(step(e).meta.serialize(format="json")), TREE_DEPTH):
            e = step(e)
        assert growth(e, {})[0] >= 1


# ------------------------------------------------------- the bound carried by selectors and multi-output steps

def _grown(t: dp.Frame) -> dp.Frame:
    return t.with_columns(v=_empty(pl.col("s"), "r" * 300))


_SELECTED: dict[str, Any] = {
    "a dtype selector": lambda t: _grown(t).with_columns(_empty(pl.col(pl.String), "r" * 300)),
    "a regex selector": lambda t: _grown(t).with_columns(_empty(pl.col("^v$"), "r" * 300)),
    "pl.all()": lambda t: _grown(t).with_columns(pl.all().exclude("u", "b", "x", "d").str.replace_all(
        "", "r" * 300, literal=True)),
    "select(pl.all()) then a replacement": lambda t: _grown(t).select(pl.all().exclude("u")).with_columns(
        w=_empty(pl.col("v"), "r" * 300)),
    "a selector step then a replacement": lambda t: _grown(t).with_columns(pl.col(pl.String).str.slice(0)).with_columns(
        w=_empty(pl.col("v"), "r" * 300)),
    "name.keep then a replacement": lambda t: _grown(t).with_columns(pl.col("v").str.slice(0).name.keep()).with_columns(
        w=_empty(pl.col("v"), "r" * 300)),
    "name.suffix then a replacement": lambda t: _grown(t).with_columns(pl.col("v").name.suffix("2")).with_columns(
        w=_empty(pl.col("v2"), "r" * 300)),
}


@pytest.mark.parametrize("name", list(_SELECTED))
def test_a_selector_carries_the_bound_of_the_columns_it_may_pick(name: str) -> None:
    """Found: the growth walk gave a selector (``pl.col(pl.String)``, ``pl.col("^v$")``, ``pl.all()``) the bound
    ``(0, 0)``, so a replacement over a selector picking an already-grown column was counted from nothing (301 × 301
    bytes per byte built); and a step whose expression had no single output name (a selector, ``name.keep()``) made
    the next step's bounds fail with a bare ``polars.exceptions.ComputeError`` ("unable to find root column name").
    A selector now carries the widest bound of the columns it may pick, and a step's bounds go to every column its
    expression outputs: each chain is refused as growing, free."""
    sess = _session()
    with pytest.raises(dp.PlanError) as e:
        _SELECTED[name](sess.table("t")).agg(dp.len()).collect(dp.PureDP(1))
    assert "bytes per byte of its input" in str(e.value), e.value
    assert sess.history().height == 0


def test_selectors_over_ungrown_columns_are_released() -> None:
    """What stays: selectors and ``name.keep()`` over the table's own columns, with a long replacement after."""
    sess = _session()
    sess.table("t").with_columns(pl.col(pl.String).str.slice(0).name.keep()).select(pl.all().exclude("u")).with_columns(
        w=_empty(pl.col("s"), "r" * 1_000)).agg(dp.len()).collect(dp.PureDP(1))
    assert sess.history()["status"].to_list() == ["committed"]


# ----------------------------------------------------------------------- a public table's values, joined in

_PUBLIC = pl.DataFrame({"k": [1, 2, 3], "v": ["x" * 2_000] * 3})


def _sql_session() -> dp.Session:
    data = pl.DataFrame({"u": [0, 1, 2], "k": [1, 2, 3], "s": ["a", "bc", ""]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0,
                      public_tables={"p": _PUBLIC})


@pytest.mark.parametrize("query", [
    "SELECT count(*) AS n FROM t JOIN p ON t.k = p.k WHERE length(repeat(p.v, 20)) > 0",
    "WITH b AS (SELECT k, repeat(v, 5) AS w FROM p) SELECT count(*) AS n FROM t JOIN b ON t.k = b.k "
    "WHERE CASE WHEN t.s = 'a' THEN length(repeat(b.w, 20)) ELSE 0 END > 0",
])
def test_a_joined_public_value_counts_its_own_length(query: str) -> None:
    """Found: a public table's columns joined to the private rows were bounded like the private table's
    (``(1, 0)``: as long as the private row's longest value), but a public value can be far longer — 2,000 bytes
    here, or as long as a public CTE makes it (``repeat(v, 10000)`` is evaluated on the public data when the query
    is built) — and only the private rows whose key matches get it. ``repeat(p.v, 20)`` was bounded as 20 bytes per
    byte of the private row and built (40,000 bytes per row from a 2-byte one). A joined public column is now
    bounded by its own longest value, read when the join is built (public data: free)."""
    sess = _sql_session()
    with pytest.raises(dp.PlanError) as e:
        sess.sql(query, backend="duckdb").collect(dp.PureDP(1))
    assert "bytes per byte of its input" in str(e.value), e.value
    assert sess.history().height == 0


def test_a_joined_public_value_within_the_bound_is_released() -> None:
    """What stays: reading and modestly growing a joined public value (2,000 bytes, repeated 10 times)."""
    sess = _sql_session()
    sess.sql("SELECT count(*) AS n FROM t JOIN p ON t.k = p.k WHERE length(repeat(p.v, 10)) > 0",
             backend="duckdb").collect(dp.PureDP(1))
    assert sess.history()["status"].to_list() == ["committed"]


# ----------------------------------------------------------------- a selector expanded into many inputs

_WIDE_TABLE = pl.DataFrame({"u": [0, 1, 2], **{f"c{i}": ["a", "b", ""] for i in range(12)}})


@pytest.mark.parametrize("make", [
    lambda: pl.concat_str(pl.col(pl.String)).str.replace_all("", "r" * 3_000, literal=True),
    lambda: pl.struct(pl.all().exclude("u")).struct.json_encode().str.replace_all("", "r" * 1_000, literal=True),
], ids=["concat_str", "struct"])
def test_a_selector_inside_a_function_counts_every_column_it_expands_to(make: Any) -> None:
    """Found: Polars expands a selector inside ``concat_str``/``pl.struct`` into one input per column, but the walk
    counted it once (as its widest column): on a table of 12 one-byte strings ``concat_str(pl.col(pl.String))``
    is 12 bytes from a 1-byte row, so a 3,000-character replacement after it made 36,000 bytes per byte of input,
    bounded as 3,001 and built. A selector now counts every column of the input it may pick (a bound: all of
    them), and its struct fields' names."""
    sess = dp.Session({"t": _WIDE_TABLE}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0)
    row = _WIDE_TABLE.head(1)
    assert row.select(make().str.len_bytes()).item() > MAX_GROWTH          # what it computes from a 1-byte row
    with pytest.raises(dp.PlanError) as e:
        sess.table("t").with_columns(v=make()).agg(dp.len()).collect(dp.PureDP(1))
    assert "bytes per byte of its input" in str(e.value), e.value
    assert sess.history().height == 0
