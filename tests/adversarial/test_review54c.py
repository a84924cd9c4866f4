"""Review 54c: a fresh red team of the SQL surface — an analyst who writes any SQL text and catches every exception.

Each attack runs one query on D and on D′ (D plus one unit) and compares what the analyst sees: the released
value's presence, the exception's type, the ledger's statuses. Each test is an attack that broke, kept with its
fix: it fails if the defence regresses.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp


def _outcome(data: pl.DataFrame, sql: str, backend: str = "duckdb") -> tuple[str, list[str]]:
    """What the analyst sees of one SQL query: ``released`` or the exception's type, and the ledger's statuses."""
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend=backend)
    try:
        sess.sql(sql).collect(dp.PureDP(1))
        seen = "released"
    except BaseException as e:  # noqa: BLE001 - the analyst catches everything
        seen = type(e).__name__
    return seen, sess.history()["status"].to_list() if sess.history().height else []


def _neighbours(column: str, usual: Any, extra: Any, **others: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """D (40 units, ``column`` = ``usual``) and D′ (D plus one unit whose ``column`` is ``extra``)."""
    base = pl.DataFrame({"u": range(40), column: [usual] * 40, **{k: [v] * 40 for k, v in others.items()}})
    plus = pl.concat([base, pl.DataFrame({"u": [99], column: [extra], **{k: [v] for k, v in others.items()}},
                                         schema=base.schema)])
    return base, plus


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN CAST(CAST(s AS JSON) AS BIT) END IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN CAST(s::JSON AS BIGNUM) END IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN TRY_CAST(s::JSON AS STRUCT(a BIT)) END IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN CAST('1'::JSON AS BIT) END IS NULL",
    "WITH a AS (SELECT u, CASE WHEN x > 100 THEN CAST(s::JSON AS BIT[]) END AS b FROM t) SELECT COUNT(b) AS n FROM a",
], ids=["json-to-bit", "json-to-bignum", "try-cast-struct-of-bit", "literal-json", "cte"])
def test_a_cast_that_fails_on_every_value_is_refused_when_built(sql: str) -> None:
    """DuckDB cannot read a BIT or BIGNUM (nor a VARIANT inside a list or struct) from JSON: ``CAST(j AS BIT)``
    raises a NotImplementedException on every value, JSON null included, an error that neither ``TRY(...)`` nor
    ``TRY_CAST`` turns into NULL. The SQL checker probed every function call on typical values of its arguments'
    types, but not casts: behind ``CASE WHEN x > 100`` the query was released on D and failed after its charge
    on D′ (one unit with ``x = 1000``), an exact answer to "is there such a unit?". Every cast is now probed as
    a call is, and refused when the query is built (nothing charged)."""
    d, d_plus = _neighbours("x", 1, 1000, s="1")
    seen = [_outcome(d, sql), _outcome(d_plus, sql)]
    assert seen[0] == seen[1] == ("PlanError", []), seen


@pytest.mark.parametrize(("sql", "usual", "extra"), [
    ("SELECT COUNT(*) AS n FROM t WHERE CAST(CAST(s AS JSON) AS VARIANT)::STRUCT(a INTEGER) IS NULL",
     '{"a": 1}', "{}"),
    ("SELECT COUNT(*) AS n FROM t WHERE TRY_CAST(s::JSON::VARIANT AS STRUCT(a INTEGER)) IS NULL", '{"a": 1}', "{}"),
    ("SELECT COUNT(*) AS n FROM t WHERE s::JSON::VARIANT::MAP(VARCHAR, INTEGER) IS NULL",
     '[{"key": "a", "value": 1}]', "[{}]"),
    ("SELECT COUNT(*) AS n FROM t WHERE {'x': s::JSON::variant}::STRUCT(x STRUCT(a INTEGER)) IS NULL",
     '{"a": 1}', "{}"),
    ("SELECT COUNT(*) AS n FROM t WHERE list_transform([s], lambda v: CAST(v::JSON AS VARIANT)::STRUCT(a INTEGER))[1] "
     "IS NULL", '{"a": 1}', "{}"),
    ("SELECT COUNT(*) AS n FROM t WHERE CAST(s::JSON AS STRUCT(a VARIANT)).a::STRUCT(b INTEGER) IS NULL",
     '{"a": {"b": 1}}', '{"a": {}}'),
], ids=["cast", "try-cast", "map", "nested-struct", "lambda", "variant-field"])
def test_a_variant_is_refused_when_built(sql: str, usual: str, extra: str) -> None:
    """A VARIANT holding an empty object fails to cast to a STRUCT (or a MAP, or a list of them) with a
    TypeMismatchException that ``TRY`` and ``TRY_CAST`` let through, on that value only (``{"a": 1}`` casts):
    a probe on typical values cannot see it. With the value in one unit's row the query was released on D and
    failed after its charge on D′. Only a cast to a type naming VARIANT makes one from a column (DuckDB casts
    nothing to VARIANT implicitly; ``stats`` is volatile and ``variant_bytes_to_variant`` refused), so such a
    cast is refused, inside a lambda too, when the query is built."""
    d, d_plus = _neighbours("s", usual, extra)
    seen = [_outcome(d, sql), _outcome(d_plus, sql)]
    assert seen[0] == seen[1] == ("PlanError", []), seen


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM t WHERE CAST(s::JSON AS VARCHAR) = '1'",
    "SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN TRY_CAST(s AS INTEGER) END IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE from_json(s::JSON, '{\"a\": \"INTEGER\"}').a IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE CAST(s AS JSON)::STRUCT(a INTEGER) IS NULL",
])
def test_casts_that_cannot_fail_still_run(sql: str) -> None:
    """The guard is not vacuous: JSON read as text or a struct, and a string cast to a number, run on both."""
    d, d_plus = _neighbours("x", 1, 1000, s="1")
    assert _outcome(d, sql) == _outcome(d_plus, sql) == ("released", ["committed"])
