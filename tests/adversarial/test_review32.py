"""Review 32: the SQL surface — row-level SQL whose failure ``TRY(...)`` does not turn into NULL, and column types
the SQL checks derived differently from what the DuckDB backend runs.

Each attack runs one query on D and on D′ (D plus one unit) and compares what the analyst sees: the released
value's presence, the exception's type, the ledger's statuses. Each test is an attack that broke, kept with its
fix: it fails if the defence regresses.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp


def _outcome(data: pl.DataFrame | str, sql: str, backend: str = "duckdb") -> tuple[str, list[str]]:
    """What the analyst sees of one SQL query: ``released`` or the exception's type, and the ledger's statuses."""
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend=backend)
    try:
        sess.sql(sql).collect(dp.PureDP(1))
        seen = "released"
    except BaseException as e:  # noqa: BLE001 - the analyst catches everything
        seen = type(e).__name__
    return seen, sess.history()["status"].to_list() if sess.history().height else []


def _neighbours(column: str, usual: Any, extra: Any, **others: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    base = pl.DataFrame({"u": range(40), column: [usual] * 40, **{k: [v] * 40 for k, v in others.items()}})
    plus = pl.concat([base, pl.DataFrame({"u": [99], column: [extra], **{k: [v] for k, v in others.items()}},
                                         schema=base.schema)])
    return base, plus


@pytest.mark.parametrize(("sql", "column", "usual", "extra"), [
    ("SELECT COUNT(*) AS n FROM t WHERE 'a%' LIKE 'a%' ESCAPE s", "s", "x", "xy"),
    ("SELECT COUNT(*) AS n FROM t WHERE 'ab' NOT ILIKE 'a%' ESCAPE s", "s", "x", "%"),
    ("SELECT COUNT(*) AS n FROM t WHERE timezone(s, TIMESTAMP '2020-01-01') IS NULL", "s", "UTC", "Mars/Olympus"),
    ("SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN 'a' LIKE 'a' ESCAPE 'xy' END", "x", 1, 1000),
    ("SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN timezone('bogus', TIMESTAMP '2020-01-01') END "
     "IS NULL", "x", 1, 1000),
    ("SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN weekday(to_days(x)) END IS NULL", "x", 1, 1000),
    ("SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN time_bucket(INTERVAL 0 DAY, DATE '2020-01-01') "
     "END IS NULL", "x", 1, 1000),
    ("WITH a AS (SELECT u, CASE WHEN x > 100 THEN isodow(to_days(1)) END AS w FROM t) SELECT COUNT(w) AS n FROM a",
     "x", 1, 1000),
    ("SELECT COUNT(*) AS n FROM t WHERE length(repeat('x', x)) > 0", "x", 1, 2**50),
    ("SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN list_transform([to_days(x)], lambda v: weekday(v))[1] "
     "END IS NULL", "x", 1, 1000),
    ("SELECT COUNT(*) AS n FROM t WHERE array_length([1, 2], x) = 2", "x", 1, 0),
], ids=["like-escape", "ilike-escape-%", "timezone-name", "escape-existence", "timezone-existence",
        "interval-part-existence", "time-bucket-existence", "cte-existence", "repeat-allocation",
        "lambda-body-existence", "array-length-dimension"])
def test_an_error_try_does_not_catch_is_refused_when_the_query_is_built(sql: str, column: str, usual: Any,
                                                                        extra: Any) -> None:
    """DuckDB's ``TRY(...)`` turns conversion, range and invalid-input errors into NULL, not others: ``LIKE ...
    ESCAPE`` with a pattern ending in (or an escape longer than) one character raises a SyntaxException, an
    unknown time zone, a zero ``time_bucket`` period and a week day of an INTERVAL a NotImplementedException, a
    huge ``repeat`` an OutOfMemoryException. With the value in one unit's row, or the call behind ``CASE WHEN
    <private condition>``, the query was released on D and failed after its charge on D′ (an exact answer to
    "is there such a unit?"). Every such call is now refused when the query is built (a probe runs each
    sub-expression on adversarial values of its columns; sizes and escapes must be literals), nothing charged.
    A call inside a lambda body runs when the probe runs the lambda's list function on a typical list: that
    list once held one NULL element (``'[2020-01-01 00:00:00]'`` cast to ``INTERVAL[]``), so ``weekday(v)``
    never ran and the lambda case was charged, then failed; a typical list now holds a typical element.
    ``array_length``'s dimension other than 1 raises a NotImplementedException (found by the catalog fuzz over
    list parameters, ``test_sql_catalog_fuzz.py``): the dimension must be a literal."""
    d, d_plus = _neighbours(column, usual, extra)
    seen = [_outcome(d, sql), _outcome(d_plus, sql)]
    assert seen[0] == seen[1] == ("PlanError", []), seen


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM t WHERE s LIKE 'a!%' ESCAPE '!'",
    "SELECT COUNT(*) AS n FROM t WHERE timezone('UTC', TIMESTAMP '2020-01-01') IS NOT NULL AND s <> ''",
    "SELECT COUNT(*) AS n FROM t WHERE length(lpad(s, 20, '*')) = 20",
])
def test_the_safe_forms_still_run(sql: str) -> None:
    """A literal escape and pattern, a known time zone and a literal pad length run, and agree on D and D′."""
    d, d_plus = _neighbours("s", "a%", "zz")
    assert _outcome(d, sql) == _outcome(d_plus, sql) == ("released", ["committed"])


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_float16_column_works_in_sql(backend: str) -> None:
    """Known finding of stop 31: DuckDB cannot import Arrow's half floats. SQL on a table with a ``Float16``
    column failed with a raw ``NotImplementedException`` (not a dpframe error), a DuckDB-backend session refused
    an in-memory table holding one, and on a Parquet file every method-chain query with a row node failed after
    its charge. The column is handed to DuckDB as ``Float32`` (every half float is one), so all of them run."""
    data = pl.DataFrame({"u": range(40), "x": pl.Series([1.5, None] * 20, dtype=pl.Float16)})
    assert _outcome(data, "SELECT COUNT(*) AS n FROM t WHERE x IS NOT NULL", backend) == ("released", ["committed"])
    assert _outcome(data, "WITH a AS (SELECT u, x FROM t) SELECT COUNT(x) AS n FROM a", backend)[1] == ["committed"]


def test_a_float16_parquet_file_runs_method_chain_row_nodes_on_duckdb(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pl.DataFrame({"u": range(40), "x": pl.Series([1.5, None] * 20, dtype=pl.Float16)}).write_parquet(path)
    sess = dp.Session({"t": str(path)}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0,
                      backend="duckdb")
    sess.table("t").filter(pl.col("x").is_not_null()).agg(dp.len()).collect(dp.PureDP(1))
    sess.sql("SELECT COUNT(*) AS n FROM t WHERE x > 1").collect(dp.PureDP(1))
    assert sess.history()["status"].to_list() == ["committed", "committed"]


def test_sql_types_are_derived_as_the_duckdb_backend_hands_the_columns_over() -> None:
    """The DuckDB backend hands a Duration column over as its integer count (DuckDB's INTERVAL does not come
    back), but SQL expressions were typed against an INTERVAL: ``WHERE dur > INTERVAL 2 HOUR`` was accepted,
    charged, and failed while running (BinderException) on every dataset. It is now typed as what runs and
    refused before anything is charged."""
    data = pl.DataFrame({"u": range(40), "dur": [dt.timedelta(hours=3)] * 40})
    seen, statuses = _outcome(data, "SELECT COUNT(*) AS n FROM t WHERE dur > INTERVAL 2 HOUR")
    assert statuses == [] and seen in ("SchemaError", "PlanError")
    assert _outcome(data, "SELECT COUNT(*) AS n FROM t WHERE dur IS NOT NULL") == ("released", ["committed"])
