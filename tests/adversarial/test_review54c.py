"""Review 54c: a fresh red team of the SQL surface — an analyst who writes any SQL text and catches every exception.

Each attack runs one query on D and on D′ (D plus one unit) and compares what the analyst sees: the released
value's presence, the exception's type, the ledger's statuses. Each test is an attack that broke, kept with its
fix: it fails if the defence regresses.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest

import dpframe as dp

from .test_review32 import _neighbours, _outcome  # D, D′ and what the analyst sees of one SQL query


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


def _grouped(data: pl.DataFrame, sql: str, keys: dict[str, list[Any]] | None, unit: dp.PrivacyUnit,
             budget: dp.Budget) -> tuple[str, list[str]]:
    """:func:`_outcome` of a grouped query with ``keys=`` under ``unit`` (DuckDB)."""
    sess = dp.Session({"t": data}, privacy_unit=unit, budget=dp.ApproxDP(10, 1e-6), seed=0, backend="duckdb")
    try:
        sess.sql(sql, keys=keys).collect(budget)
        seen = "released"
    except BaseException as e:  # noqa: BLE001 - the analyst catches everything
        seen = type(e).__name__
    return seen, sess.history()["status"].to_list() if sess.history().height else []


_HUGE = "17014118346046923173168730371588410572"          # times 10: a HUGEINT of 39 digits
_UHUGE = "340282366920938463463374607431768211455"        # 2**128 - 1
_GROUPS = dp.PrivacyUnit("u", max_rows=3, max_groups=1)


@pytest.mark.parametrize(("sql", "column", "extra", "keys", "unit", "budget"), [
    ("SELECT CAST(s AS HUGEINT) * 10 AS k, COUNT(*) AS n FROM t GROUP BY k", "s", _HUGE, {"k": [10]},
     dp.PrivacyUnit("u"), dp.PureDP(1)),
    ("SELECT CAST(s AS UHUGEINT) AS k, COUNT(*) AS n FROM t GROUP BY k", "s", _UHUGE, {"k": [1]},
     dp.PrivacyUnit("u"), dp.PureDP(1)),
    ("SELECT CAST(s AS UHUGEINT) AS k, COUNT(*) AS n FROM t GROUP BY k", "s", _UHUGE, {"k": [1]}, _GROUPS,
     dp.PureDP(1)),
    ("SELECT CAST(s AS HUGEINT) * 10 AS k, COUNT(*) AS n FROM t GROUP BY k", "s", _HUGE, None, _GROUPS,
     dp.ApproxDP(1, 1e-7)),
    ("WITH a AS (SELECT u, CAST(s AS HUGEINT) * 10 AS h FROM t) SELECT h, COUNT(*) AS n FROM a GROUP BY h", "s",
     _HUGE, {"h": [10]}, dp.PrivacyUnit("u"), dp.PureDP(1)),
], ids=["hugeint-public-keys", "uhugeint-public-keys", "uhugeint-max-groups", "hugeint-private-keys-max-groups",
        "hugeint-cte"])
def test_a_derived_128_bit_key_runs_as_the_type_it_was_checked_as(sql: str, column: str, extra: str,
                                                                   keys: dict[str, list[Any]] | None,
                                                                   unit: dp.PrivacyUnit, budget: dp.Budget) -> None:
    """A derived column of DuckDB type HUGEINT or UHUGEINT comes back to Polars as ``Decimal(38, 0)``, so the plan
    (its public keys, the groups ``max_groups`` chose) holds it as a 38-digit decimal, while the DuckDB backend
    computed the 128-bit integer: joined with those keys, a value of 39 digits (or above 2**127, which the
    handover even wraps to a negative number) failed to convert — a ConversionException outside ``TRY``, after
    the charge, on D′ only. A derived column now runs as the type its Polars type is handed to DuckDB as
    (``TRY_CAST`` to ``DECIMAL(38, 0)``: a value that does not fit is NULL, as a 128-bit column's is)."""
    d, d_plus = _neighbours(column, "1", extra)
    seen = [_grouped(d, sql, keys, unit, budget), _grouped(d_plus, sql, keys, unit, budget)]
    assert seen[0] == seen[1] == ("released", ["committed"]), seen


def test_a_time_with_time_zone_is_refused_when_built() -> None:
    """DuckDB's TIME WITH TIME ZONE comes back to Polars as a plain ``Time``: grouped with public keys, the
    backend cast the derived column to the keys' type, a cast DuckDB does not implement (ConversionException):
    behind ``WHERE x > 100`` the query was released on D (no row reached the cast) and failed after its charge
    on D′. Like INTERVAL, the type is refused when the query is built, with the cast to write instead."""
    sql = "SELECT CAST(s AS TIMETZ) AS k, COUNT(*) AS n FROM t WHERE x > 100 GROUP BY k"
    d, d_plus = _neighbours("x", 1, 1000, s="12:00:00+00")
    keys = {"k": [dt.time(12)]}
    seen = [_grouped(data, sql, keys, dp.PrivacyUnit("u"), dp.PureDP(1)) for data in (d, d_plus)]
    assert seen[0] == seen[1] == ("SchemaError", []), seen
    fixed = sql.replace("CAST(s AS TIMETZ)", "CAST(CAST(s AS TIMETZ) AS TIME)")
    seen = [_grouped(data, fixed, keys, dp.PrivacyUnit("u"), dp.PureDP(1)) for data in (d, d_plus)]
    assert seen[0] == seen[1] == ("released", ["committed"]), seen


@pytest.mark.parametrize(("cast", "value", "key"), [
    ("JSON", "1", "not json"),
    ("UUID", "00000000-0000-0000-0000-000000000000", "abc"),
])
def test_a_derived_text_key_is_compared_as_text(cast: str, value: str, key: str) -> None:
    """A JSON or UUID key comes back to Polars as a string, and public keys of a string column may be any string:
    the backend cast each key to the derived column's DuckDB type, and a key that is no JSON (no UUID) failed
    after the charge on every dataset. The derived column now runs as the VARCHAR it was checked as."""
    sql = f"SELECT CAST(s AS {cast}) AS k, COUNT(*) AS n FROM t WHERE x > 100 GROUP BY k"
    d, d_plus = _neighbours("x", 1, 1000, s=value)
    seen = [_grouped(data, sql, {"k": [key, value]}, dp.PrivacyUnit("u"), dp.PureDP(1)) for data in (d, d_plus)]
    assert seen[0] == seen[1] == ("released", ["committed"]), seen


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM t WHERE ((CASE WHEN x > 100 THEN weekday(to_days(x)) END)::VARCHAR -> '$') IS NULL",
    "WITH a AS (SELECT u, (CASE WHEN x > 100 THEN isodow(to_days(x)) END)::VARCHAR -> '$' AS j FROM t) "
    "SELECT COUNT(j) AS n FROM a",
    "SELECT COUNT(*) AS n FROM t WHERE coalesce(((CASE WHEN x > 100 THEN weekday(to_days(x)) END)::VARCHAR -> '$'), "
    "'1') = '1'",
], ids=["where", "cte", "inside-a-call"])
def test_the_left_side_of_an_arrow_is_checked(sql: str) -> None:
    """DuckDB parses ``a -> b`` as a lambda and binds it as ``json_extract(a, b)`` wherever no list function takes
    it. The checker walked a lambda's body only, taking its left side for parameter names: the left side escaped
    every check — the probe of calls that fail on every value (a week day of an INTERVAL behind ``CASE WHEN
    x > 100``: released on D, failed after its charge on D′), the refused functions (``now()``,
    ``current_setting(...)``), the column resolution. An arrow outside a list function's lambda argument is now
    checked as the ``json_extract`` call DuckDB runs (and rendered as one)."""
    d, d_plus = _neighbours("x", 1, 1000)
    seen = [_outcome(d, sql), _outcome(d_plus, sql)]
    assert seen[0] == seen[1] == ("PlanError", []), seen


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM t WHERE (now()::VARCHAR -> '$') IS NOT NULL",
    "SELECT COUNT(*) AS n FROM t WHERE (current_setting('threads')::VARCHAR -> '$') IS NOT NULL",
    "SELECT COUNT(*) AS n FROM t WHERE list_transform([x], y::VARCHAR -> now()) IS NOT NULL",
])
def test_refused_functions_stay_refused_beside_an_arrow(sql: str) -> None:
    d, _ = _neighbours("x", 1, 1000)
    assert _outcome(d, sql) == ("PlanError", [])


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT COUNT(*) AS n FROM t WHERE (s -> '$.a') = '1'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE (s::JSON -> 'a') = '1'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE (s -> 'a' -> '$') = '1'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE list_transform([x], y -> y + 1)[1] = 2", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE list_reduce([x, x], (a, b) -> a + b) = 2", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE [y + 1 FOR y IN [x]][1] = 2", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE list_transform([s], lambda y: y ->> '$.a')[1] = '1'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE list_transform([s], lambda y: (y -> '$.a'))[1] = '1'", 40),
])
def test_json_arrows_and_lambdas_still_run(sql: str, expected: int) -> None:
    """The arrow as JSON extraction and as a lambda (either syntax — DuckDB 2 refuses the arrow's, dpframe runs it as
    ``lambda y: ...`` —, a list comprehension) still run."""
    data = pl.DataFrame({"u": range(40), "x": [1] * 40, "s": ['{"a": 1}'] * 40})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend="duckdb")
    q = sess.sql(sql)
    assert q.collect(dp.PureDP(10)).item() == pytest.approx(expected, abs=10)


def _built(sql: str) -> str:
    """``refused`` (a dpframe PlanError, nothing charged) or ``built``: the query is built but never run here."""
    data = pl.DataFrame({"u": range(4), "x": [1] * 4, "s": ["[]"] * 4})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend="duckdb")
    try:
        sess.sql(sql)
    except dp.errors.PlanError:
        return "refused" if sess.history().height == 0 else "charged"
    return "built"


_DEEP = "repeat(repeat('[', 10000), 10) || CAST(x AS VARCHAR) || repeat(repeat(']', 10000), 10)"


@pytest.mark.parametrize("sql", [
    f"WITH a AS (SELECT u, x, {_DEEP} AS j FROM t) SELECT COUNT(*) AS n FROM a WHERE CASE WHEN x > 100 THEN "
    "json_contains(j, j) END",
    "SELECT COUNT(*) AS n FROM t WHERE json_contains(s, s)",
    "SELECT COUNT(*) AS n FROM t WHERE length(json_pretty(s::JSON)) > 1",
    "SELECT COUNT(*) AS n FROM t WHERE s ->> '$..a' IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE json_extract(s, '$.**') IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE json_extract_string(s, ['$.a', '$..*']) IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE (s -> '$..*') IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE json_exists(s, s)",
], ids=["constructed-depth", "json-contains", "json-pretty", "recursive-arrow", "recursive-extract",
        "recursive-in-list", "recursive-single-arrow", "path-from-a-row"])
def test_json_calls_that_crash_or_explode_on_deep_values_are_refused(sql: str) -> None:
    """JSON nested 80,000 levels deep (a 160 KB string: a row's value, or ``repeat(repeat('[', 10000), 10)``
    around a column) crashed the process in ``json_contains`` (a stack overflow, which no handler sees: on D the
    query was released, on D′ — one unit with ``x = 1000`` behind ``CASE WHEN x > 100`` — the Python process died
    with a segmentation fault); ``json_pretty`` and a recursive path (``$..a``, ``$.**``) take memory that grows
    with the square of the depth (a 200 KB value asked for 16 GB: an out-of-memory error ``TRY`` does not catch).
    They are refused when the query is built: ``json_contains`` and ``json_pretty`` always, a JSON path unless
    it is a literal without recursive descent. (Built only here: running the first attack kills the process.)"""
    assert _built(sql) == "refused"


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM t WHERE s ->> '$[0]' IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE json_extract(s, ['$.a', '$[0]']) IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE (s -> '$[*]') IS NULL",
    "SELECT COUNT(*) AS n FROM t WHERE json_array_length(s, '$') = 0",
    "SELECT COUNT(*) AS n FROM t WHERE json_extract(s, 0) IS NULL",
])
def test_plain_json_paths_are_still_built(sql: str) -> None:
    assert _built(sql) == "built"
