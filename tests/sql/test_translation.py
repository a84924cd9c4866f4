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
from polars.testing import assert_frame_equal
from sql_testkit import VISITS, make_session

import dpframe as dp
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
    # integer extremes: DuckDB's overflow error becomes NULL under TRY; the translation must agree
    "k": pl.Series([-128, 127, 100, None, -1, 0, 64], dtype=pl.Int8),
    "l": pl.Series([-(2**63), 2**63 - 1, 2**62, None, -1, 3, -(2**62)], dtype=pl.Int64),
    "u": pl.Series([0, 255, 3, None, 128, 1, 16], dtype=pl.UInt8),
    "w": pl.Series([0, 2**64 - 1, 2**63, None, 1, 2, 2**32], dtype=pl.UInt64),
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
    # overflow → NULL (Int8, Int64, UInt8, UInt64 extremes; mixed widths; literals)
    "k + k", "k - 1", "k + 1", "k * k", "k * 2", "-k", "abs(k)", "k + l", "k * l",
    "l + l", "l - 1", "l + 1", "l * l", "l * 4611686018427387904", "-l", "abs(l)", "l - k",
    "u - 1", "u + u", "u * u", "-u", "abs(u)", "w + w", "w - 1", "-w", "abs(w)",
    "(k + k) - k", "-(l * 2) + 1", "CASE WHEN k > 0 THEN k * 2 ELSE -k END",
]
DUCKDB_ONLY = [
    "i // j", "i % j", "greatest(x, y)", "CAST(x AS INTEGER)", "CAST(x AS VARCHAR)", "strftime(d, '%Y')",
    "date_trunc('month', d)", "regexp_matches(s, 'a.c')", "length(s)", "TRY_CAST(s AS INTEGER)",
    "i * 1.5", "list_value(i, j)", "w * w", "w * 2",
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



# (query, column, the exact value without noise): overflowing rows are NULL on both backends
OVERFLOWING = [
    ("SELECT COUNT(*) AS n FROM visits WHERE age * 4611686018427387904 < 0", "n", 0),
    ("WITH t AS (SELECT user_id, CAST(age AS TINYINT) AS a FROM visits) "
     "SELECT COUNT(a + a + a) AS n FROM t", "n", int(VISITS["age"].is_between(0, 42).sum())),
    ("SELECT COUNT(-(age - 9223372036854775807 - 20)) AS n FROM visits", "n", int((VISITS["age"] >= 20).sum())),
]


@pytest.mark.parametrize(("sql", "column", "exact"), OVERFLOWING)
def test_integer_overflow_gives_the_same_answer_on_both_backends(sql: str, column: str, exact: int) -> None:
    """An overflowing integer expression is NULL on both backends (DuckDB: TRY; Polars: exact Int128 check)."""
    out = {}
    for backend in ("polars", "duckdb"):
        query = make_session(backend).sql(sql)
        assert not any("DuckDB only" in n.describe() for n in query.node.lineage())
        out[backend] = query.collect(dp.PureDP(100.0))
    assert_frame_equal(out["polars"], out["duckdb"])
    assert abs(out["polars"][column].item() - exact) <= 1


_ZONES_SCRIPT = """
import datetime as dt, polars as pl, dpframe as dp
ts = [dt.datetime(2020, 1, 1, 1, 0, tzinfo=dt.timezone.utc)] * 40
out = []
for zone in ["UTC", "America/New_York"]:
    df = pl.DataFrame({"u": range(40), "ts": ts}).with_columns(pl.col("ts").dt.convert_time_zone(zone))
    for backend in ["polars", "duckdb"]:
        s = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=0, backend=backend)
        q = s.sql("SELECT COUNT(*) AS n FROM t WHERE hour(ts) = 1 AND day(ts) = 1 AND year(ts) = 2020")
        out.append(q.collect(dp.PureDP(1))["n"][0] > 20)      # 40 rows or 0, noise of scale 1
print(out)
"""


def test_zoned_timestamp_fields_are_read_in_utc_on_every_backend_and_machine() -> None:
    """DuckDB read ``hour(ts)`` of a zoned timestamp in the machine's time zone, and the Polars translation in
    the column's: on a machine in Tokyo a UTC column's 01:00 was hour 10 on DuckDB and 1 on Polars, and an
    America/New_York column's was 1 on DuckDB (UTC machine) and 20 on Polars. Every dpframe connection now
    runs in UTC and the translation reads the fields in UTC, so both backends agree on every machine."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TZ="Asia/Tokyo")
    done = subprocess.run([sys.executable, "-c", _ZONES_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([True] * 4)
