"""Differential test of the SQL → Polars translation: every translated expression gives DuckDB's answers.

Each expression is lowered the way ``sess.sql`` lowers a projection; DuckDB evaluates its SQL (under
``TRY``, as the DuckDB backend does) and Polars evaluates the translation, on data full of NULL, NaN,
±inf, negative numbers and awkward strings. Expressions dpframe cannot translate faithfully must come
back untranslated (DuckDB only).
"""

from __future__ import annotations

import datetime as dt
import math

import duckdb
import polars as pl
import pytest

from dpframe.plan.nodes import Scan
from dpframe.sql.expr import build_project, rewrite
from dpframe.sql.nodes import guard
from dpframe.sql.sandbox import parse_expression
from dpframe.sql.scope import Column, Scope

INF, NAN = float("inf"), float("nan")
DATA = pl.DataFrame({
    "i": [7, -7, 0, None, 3, -1, 2**40],
    "j": [2, 3, -2, 1, None, 0, 5],
    "x": [1.5, NAN, -2.5, None, INF, -INF, 0.0],
    "y": [0.0, 1.0, NAN, 2.0, -0.5, 3.0, None],
    "s": ["abc", "A%b", None, "", "a_c", "ÄÖü", "xyz"],
    "b": [True, False, None, True, False, True, None],
    "d": [dt.date(2024, 2, 29), None, dt.date(1999, 12, 31), dt.date(2024, 1, 1), dt.date(2000, 1, 1),
          dt.date(2024, 12, 31), dt.date(1970, 1, 1)],
})
SCAN = Scan.of("t", DATA.schema)
SCOPE = Scope([Column(c, c, frozenset({"t"}), f"t.{c}") for c in DATA.columns])

TRANSLATED = [
    "i + j", "i - j", "i * j", "i / j", "x / y", "-x", "x * 2", "i + 1", "x + i",
    "i > j", "x >= y", "x = y", "x <> 1.5", "x < 0", "s = 'abc'", "s < 'b'",
    "i IS NULL", "x IS NOT NULL", "x IS DISTINCT FROM y", "i IS NOT DISTINCT FROM j",
    "i IN (7, 3)", "i NOT IN (7, 3)", "s IN ('abc', 'xyz')", "x BETWEEN -3 AND 2", "b AND i > 0", "b OR x > 0",
    "NOT b", "CASE WHEN i > 0 THEN 'pos' WHEN i < 0 THEN 'neg' ELSE 'zero' END",
    "CASE WHEN x > 0 THEN x END", "CASE i WHEN 7 THEN 1 ELSE 0 END", "COALESCE(i, j, 0)", "COALESCE(x, y)",
    "NULLIF(i, 0)", "s LIKE 'a%'", "s LIKE '%_c'", "s NOT LIKE 'A\\%%'", "s || '!'", "lower(s)", "upper(s)",
    "abs(i)", "abs(x)", "starts_with(s, 'a')", "ends_with(s, 'c')", "contains(s, 'b')", "isnan(x)",
    "sqrt(x)", "exp(y)", "ln(x)", "round(x)", "round(y, 1)", "greatest(i, j)", "least(s, 'b')",
    "year(d)", "month(d)", "day(d)", "CAST(i AS DOUBLE)", "CAST(b AS INTEGER)", "CAST(i AS VARCHAR)",
    "CAST(i AS INTEGER)", "CAST(x AS FLOAT)",
]
DUCKDB_ONLY = [
    "i // j", "i % j", "greatest(x, y)", "CAST(x AS INTEGER)", "CAST(x AS VARCHAR)", "strftime(d, '%Y')",
    "date_trunc('month', d)", "regexp_matches(s, 'a.c')", "length(s)", "TRY_CAST(s AS INTEGER)",
    "i * 1.5", "list_value(i, j)",
]


def _project(sql: str):  # noqa: ANN202
    expr, _ = rewrite(parse_expression(sql), SCOPE, sql, "test")
    return build_project(SCAN, [("r", expr)], sql, "test")


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    return a == b


@pytest.mark.parametrize("sql", TRANSLATED)
def test_translation_matches_duckdb(sql: str) -> None:
    node = _project(sql)
    assert node.polars is not None, node.polars_unavailable
    con = duckdb.connect()
    con.register("t", DATA.to_arrow())
    want = con.sql(f"SELECT {guard(node.items[0][1])} AS r FROM t").pl()
    got = DATA.lazy().pipe(node.apply).collect()
    assert got.schema == node.schema == want.schema, (got.schema, node.schema, want.schema)
    for a, b in zip(got["r"].to_list(), want["r"].to_list()):
        assert _same(a, b), (sql, got["r"].to_list(), want["r"].to_list())


@pytest.mark.parametrize("sql", DUCKDB_ONLY)
def test_untranslatable_runs_on_duckdb_only(sql: str) -> None:
    node = _project(sql)
    assert node.polars is None and node.polars_unavailable
    assert "DuckDB only" in node.describe()
