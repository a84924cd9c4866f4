"""Review 55k: SQL build-time denial of service — nested lambdas and public CTEs, both free and data-independent.

Building a query runs DuckDB's binder on it several times (parse, schema, probes) on the process-wide checking
connection, under its lock (:func:`dpframe.sql.sandbox._shared`): on a ``dpframe serve`` server every other client's
query waits while one is bound. DuckDB binds a lambda's body again for each enclosing lambda (its cost doubles a level:
``list_filter`` nested 14 deep in the body took 0.2 s of CPU in DuckDB alone, 16 deep seconds). A public CTE is run
when the query is built, with no bound on what its expressions allocate. Each test builds only: a refusal is cheap.
"""

from __future__ import annotations

import time

import polars as pl
import pytest

import dpframe as dp
from dpframe.sql.parse import MAX_LAMBDA_DEPTH, lambda_depth, parse


def _session() -> dp.Session:
    data = pl.DataFrame({"u": range(40), "x": [1] * 40, "s": ["ab"] * 40, "li": [[1, 2]] * 40})
    public = pl.DataFrame({"k": [1, 2, 3], "name": ["a", "b", "c"]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0,
                      public_tables={"p": public}, backend="duckdb")


def _nested_filters(depth: int) -> str:
    """``depth`` list_filter calls, each in the previous one's lambda body."""
    expr = "true"
    for i in range(depth):
        expr = f"len(list_filter([1, 2], lambda v{i}: {expr})) > 0"
    return expr


def _nested_comprehensions(depth: int) -> str:
    expr = "true"
    for _ in range(depth):
        expr = f"len([y for y in [1, 2] if {expr}]) > 0"
    return expr


@pytest.mark.parametrize("nest", [_nested_filters, _nested_comprehensions])
def test_lambdas_nested_past_the_cap_are_refused_before_duckdb_binds_them(nest: object) -> None:
    assert callable(nest)
    sess = _session()
    start = time.perf_counter()
    with pytest.raises(dp.errors.PlanError, match="lambdas nested") as e:
        sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE {nest(24)}")       # unchecked: 2^24 body bindings
    assert time.perf_counter() - start < 2
    assert e.value.argument == "sql" and str(MAX_LAMBDA_DEPTH) in str(e.value)
    with pytest.raises(dp.errors.PlanError, match="lambdas nested"):
        sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE {nest(MAX_LAMBDA_DEPTH + 1)}")
    assert sess.history().height == 0


def test_lambdas_up_to_the_cap_still_build_and_run() -> None:
    sess = _session()
    q = sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE {_nested_filters(MAX_LAMBDA_DEPTH)}")
    assert q.collect(dp.PureDP(5)).item() == pytest.approx(40, abs=15)
    # lambdas side by side (not nested) and in each other's list argument are not nesting
    side = " AND ".join(f"len(list_filter(li, lambda v{i}: v{i} > 0)) = 2" for i in range(MAX_LAMBDA_DEPTH + 2))
    chain = "li"
    for i in range(MAX_LAMBDA_DEPTH + 2):
        chain = f"list_filter({chain}, lambda w{i}: w{i} > 0)"
    sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE {side}")
    assert lambda_depth(parse(f"SELECT len({chain}) = 2 AS c FROM t").node) == 1
    assert lambda_depth(parse(f"SELECT {_nested_comprehensions(3)} AS c FROM t").node) == 3


@pytest.mark.parametrize("sql", [
    # 10⁸ bytes a row, run by DuckDB when the query was built (three rows: 300 MB; a larger public table: more)
    "WITH b AS (SELECT k, repeat(repeat('x', 10000), 10000) AS w FROM p) "
    "SELECT COUNT(*) AS n FROM t JOIN b ON t.x = b.k",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT k, repeat(repeat(name, 10000), 10000) AS w FROM p) b ON t.x = b.k",
    # each CTE within the bound alone, the chain 10¹⁰ times the input
    "WITH a AS (SELECT k, repeat(name, 10000) AS w FROM p), b AS (SELECT k, repeat(w, 10000) AS w FROM a) "
    "SELECT COUNT(*) AS n FROM t JOIN b ON t.x = b.k",
    # in a nested subquery of the public one, in its WHERE
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT k FROM (SELECT k, repeat(repeat(name, 10000), 10000) AS w FROM p)) b "
    "ON t.x = b.k",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT k FROM p WHERE length(repeat(repeat(name, 10000), 10000)) > 1) b "
    "ON t.x = b.k",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT a.k FROM p a JOIN p c ON length(repeat(repeat(a.name, 10000), 10000)) "
    "> c.k) b ON t.x = b.k",
    "SELECT COUNT(*) AS n FROM t JOIN (SELECT k FROM p ORDER BY repeat(repeat(name, 10000), 10000)) b ON t.x = b.k",
])
def test_a_public_subquery_past_the_growth_bound_is_refused_before_it_runs(sql: str) -> None:
    sess = _session()
    start = time.perf_counter()
    with pytest.raises(dp.errors.PlanError, match="may grow") as e:
        sess.sql(sql)
    assert time.perf_counter() - start < 2
    assert e.value.argument == "sql"
    assert sess.history().height == 0


def test_ordinary_public_subqueries_still_run() -> None:
    sess = _session()
    q = sess.sql("WITH b AS (SELECT k, upper(name) || '_' || name AS w FROM p WHERE k < 3) "
                 "SELECT COUNT(*) AS n FROM t JOIN b ON t.x = b.k")
    assert q.collect(dp.PureDP(5)).item() == pytest.approx(40, abs=15)
    # a long chain of public CTEs, each adding a little: the additions add up, they do not multiply
    chain = ", ".join(["c0 AS (SELECT k, name FROM p)"] + [f"c{i} AS (SELECT k, name || 'ab' AS name FROM c{i - 1})"
                                                            for i in range(1, 40)])
    sess.sql(f"WITH {chain} SELECT COUNT(*) AS n FROM t JOIN c39 ON t.x = c39.k")


# ---------------------------------------------------------------------------------------------------------------
# Build time super-linear in the query's length: each copy of a part doubles what is bound, translated and probed.
# ---------------------------------------------------------------------------------------------------------------

def _nested(template: str, inner: str, depth: int) -> str:
    for i in range(depth):
        inner = template.format(inner, i)
    return inner


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
def test_nested_integer_arithmetic_builds_in_linear_time(backend: str) -> None:
    """``((x + 1) + 1) ...``: the Polars form held each operand twice (its overflow guard): 20 deep took a minute."""
    sess = _session()
    start = time.perf_counter()
    sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE {_nested('({} + {})', 'x', 30)} > 0", backend=backend)
    assert time.perf_counter() - start < 2


def test_integer_overflow_is_still_null_in_the_polars_form() -> None:
    """As ``TRY(x + 9223372036854775807)`` in DuckDB: NULL, not a wrapped-around number (the guard is a cast now)."""
    sess = _session()
    q = sess.sql("SELECT COUNT(*) AS n FROM t WHERE (x + 9223372036854775807) IS NULL AND (-x - x) * 2 = -4",
                 backend="polars")
    assert q.collect(dp.PureDP(5)).item() == pytest.approx(40, abs=15)


@pytest.mark.parametrize(("template", "inner"), [
    ("nullif({}, {})", "x"),                                     # DuckDB's macro: CASE WHEN a = b THEN NULL ELSE a END
    ("split_part({}, 'a', {} + 1)", "s"),                        # a macro reading its string twice
    ("(({}) BETWEEN false AND true OR {} < 0)", "x > 0"),        # BETWEEN's Polars form holds its input twice
])
def test_parts_bound_exponentially_often_are_refused_at_parse(template: str, inner: str) -> None:
    sess = _session()
    start = time.perf_counter()
    with pytest.raises(dp.errors.PlanError, match="more than 64") as e:
        sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE ({_nested(template, inner, 30)}) IS NOT NULL")
    assert time.perf_counter() - start < 2
    assert e.value.argument == "sql" and sess.history().height == 0
    sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE ({_nested(template, inner, 6)}) IS NOT NULL")   # 64 copies: built
