"""Unsupported or unsafe SQL: each fails with a dpframe error quoting the problem, and charges nothing."""

from __future__ import annotations

import pytest
from sql_testkit import make_session

import dpframe as dp

P = dp.PureDP(1.0)

# (id, sql, error class, fragment of the message); "plan" in the id: fails at cost()/collect(), not at sql()
ERRORS = [
    ("syntax", "SELEC COUNT(*) FROM visits", dp.PlanError, 'syntax error at or near "SELEC"'),
    ("syntax_end", "SELECT COUNT(* FROM visits", dp.PlanError, "syntax error"),
    ("unknown_table", "SELECT COUNT(*) FROM nosuch", dp.SchemaError, "unknown table: 'nosuch'"),
    ("file_as_table", "SELECT COUNT(*) FROM 'visits.csv'", dp.SchemaError, "a file name cannot be read"),
    ("read_csv", "SELECT COUNT(*) FROM read_csv('/etc/passwd')", dp.PlanError, "read_csv('/etc/passwd')"),
    ("read_parquet_in_join", "SELECT COUNT(*) FROM visits JOIN read_parquet('x.parquet') p ON city = p.c",
     dp.PlanError, "table functions"),
    ("select_star", "SELECT * FROM visits", dp.PlanError, "SELECT * would release raw rows"),
    ("raw_column", "SELECT city FROM visits", dp.PlanError, "raw column would be released"),
    ("raw_column_with_aggregate", "SELECT city, COUNT(*) FROM visits", dp.PlanError, "raw column 'city'"),
    ("raw_column_in_order_by", "SELECT COUNT(*) FROM visits ORDER BY age", dp.PlanError, "raw column 'age'"),
    ("raw_column_in_having", "SELECT city, COUNT(*) FROM visits GROUP BY city HAVING age > 3", dp.PlanError,
     "raw column 'age'"),
    ("no_aggregate", "SELECT city FROM visits GROUP BY city", dp.PlanError, "computes no aggregate"),
    ("post_uncomputable", "SELECT city, COUNT(*) AS n FROM visits GROUP BY city ORDER BY n + DATE '2020-01-01'",
     dp.PlanError, "the output expressions cannot be computed"),
    ("missing_bounds_derived", "SELECT SUM(spend * 2) FROM visits", dp.BoundsError, "needs clipping bounds"),
    ("missing_bounds_column", "SELECT AVG(age) FROM visits", dp.BoundsError, "bounds={'visits.age'"),
    ("bounds_not_literal", "SELECT SUM(CLAMP(spend, 0, age)) FROM visits", dp.BoundsError, "numeric literals"),
    ("bounds_inverted", "SELECT SUM(CLAMP(spend, 500, 0)) FROM visits", dp.BoundsError, "below upper"),
    ("window", "SELECT COUNT(*) OVER () FROM visits", dp.PlanError, "window functions"),
    ("window_in_where", "SELECT COUNT(*) FROM visits WHERE row_number() OVER () < 5", dp.PlanError,
     "window functions combine rows"),
    ("scalar_subquery", "SELECT COUNT(*) FROM visits WHERE spend > (SELECT AVG(spend) FROM visits)", dp.PlanError,
     "subqueries"),
    ("aggregate_in_where", "SELECT COUNT(*) FROM visits WHERE age > AVG(age)", dp.PlanError,
     "aggregate avg() combines rows"),
    ("sum_distinct", "SELECT SUM(DISTINCT CLAMP(spend, 0, 9)) FROM visits", dp.PlanError, "SUM(DISTINCT"),
    ("count_distinct_two", "SELECT COUNT(DISTINCT city, device) FROM visits", dp.PlanError, "COUNT(DISTINCT"),
    ("count_distinct_clamp", "SELECT COUNT(DISTINCT CLAMP(age, 0, 9)) FROM visits", dp.PlanError, "COUNT(DISTINCT"),
    ("min", "SELECT MIN(age) FROM visits", dp.PlanError, "not differentially private"),
    ("quantile_disc", "SELECT QUANTILE_DISC(age, 0.5) FROM visits", dp.PlanError, "QUANTILE_CONT"),
    ("quantile_out_of_range", "SELECT QUANTILE_CONT(CLAMP(age, 0, 100), 1.5) FROM visits", dp.PlanError, "[0, 1]"),
    ("aggregate_filter", "SELECT COUNT(*) FILTER (WHERE age > 3) FROM visits", dp.PlanError, "FILTER"),
    ("private_join", "SELECT COUNT(*) FROM visits v JOIN vj w ON v.user_id = w.user_id", dp.PlanError,
     "two private tables"),
    ("join_inequality", "SELECT COUNT(*) FROM visits v JOIN cities c ON v.city < c.name", dp.PlanError,
     "equalities"),
    ("full_join", "SELECT COUNT(*) FROM visits FULL JOIN cities ON city = name", dp.PlanError, "FULL join"),
    ("duplicate_join_key", "SELECT COUNT(*) FROM visits v JOIN dupcities d ON v.city = d.name", dp.PlanError,
     "repeated values in its join key"),
    ("public_only", "SELECT COUNT(*) FROM cities", dp.PlanError, "only public tables"),
    ("union", "SELECT COUNT(*) FROM visits UNION SELECT COUNT(*) FROM visits", dp.PlanError, "UNION"),
    ("insert", "INSERT INTO visits VALUES (1)", dp.PlanError, "only SELECT"),
    ("two_statements", "SELECT COUNT(*) FROM visits; SELECT 1", dp.PlanError, "one statement"),
    ("random", "SELECT COUNT(*) FROM visits WHERE random() < 0.5", dp.PlanError, "volatile"),
    ("setseed", "SELECT COUNT(*) FROM visits WHERE setseed(0.5) IS NULL", dp.PlanError, "volatile"),
    ("error_function", "SELECT COUNT(*) FROM visits WHERE error('x') IS NULL", dp.PlanError, "side channel"),
    ("aggregate_macro_in_where", "SELECT COUNT(*) FROM visits WHERE geomean(spend) > 1", dp.PlanError,
     "aggregate geomean() combines rows"),
    ("aggregate_macro_in_cte", "WITH w AS (SELECT weighted_avg(spend, age) AS x FROM visits) "
     "SELECT SUM(CLAMP(x, 0, 1)) FROM w", dp.PlanError, "weighted_avg"),
    ("aggregate_macro_top_level", "SELECT geomean(spend) FROM visits", dp.PlanError, "GEOMEAN() is not supported"),
    ("catalog_macro", "SELECT COUNT(*) FROM visits WHERE pg_get_viewdef(1) IS NULL", dp.PlanError,
     "runs a subquery"),
    ("limit_in_subquery", "SELECT COUNT(*) FROM (SELECT * FROM visits LIMIT 10)", dp.PlanError,
     "LIMIT inside a subquery"),
    ("distinct_in_subquery", "SELECT COUNT(*) FROM (SELECT DISTINCT city FROM visits)", dp.PlanError, "DISTINCT"),
    ("group_in_cte", "WITH x AS (SELECT city, COUNT(*) AS n FROM visits GROUP BY city) "
     "SELECT SUM(CLAMP(n, 0, 10)) FROM x", dp.PlanError, "GROUP BY inside a subquery"),
    ("unknown_column", "SELECT COUNT(*) FROM visits WHERE nosuch > 1", dp.SchemaError, "unknown column 'nosuch'"),
    ("type_error", "SELECT COUNT(*) FROM visits WHERE day + 'x' > 1", dp.SchemaError, "WHERE"),
    ("rollup", "SELECT city, COUNT(*) FROM visits GROUP BY ROLLUP (city)", dp.PlanError, "ROLLUP"),
    ("sample", "SELECT COUNT(*) FROM visits USING SAMPLE 10%", dp.PlanError, "SAMPLE"),
    ("explain_analyze", "EXPLAIN ANALYZE SELECT COUNT(*) FROM visits", dp.PlanError, "EXPLAIN ANALYZE"),
    ("duplicate_output", "SELECT COUNT(*) AS n, SUM(CLAMP(spend, 0, 1)) AS n FROM visits", dp.PlanError,
     "two output columns are named 'n'"),
    ("schema_qualified", "SELECT COUNT(*) FROM main.visits", dp.PlanError, "schema- or catalog-qualified"),
    ("parameter", "SELECT COUNT(*) FROM visits WHERE age > ?", dp.PlanError, "parameter"),
    ("overwrite_unit", "SELECT COUNT(*) FROM (SELECT city, age AS user_id FROM visits)", dp.PlanError,
     "privacy-unit column 'user_id'"),
    ("unit_hidden_in_subquery", "SELECT COUNT(*) FROM (SELECT city FROM visits) t WHERE user_id > 3",
     dp.SchemaError, "unknown column 'user_id'"),
    ("clamp_outside_aggregate", "SELECT COUNT(*) FROM visits WHERE CLAMP(age, 0, 1) > 0", dp.PlanError,
     "only declares the bounds"),
    ("plan_non_numeric_sum", "SELECT SUM(CLAMP(city, 0, 1)) FROM visits", dp.SchemaError, "numeric"),
    ("plan_private_keys_pure", "SELECT age, COUNT(*) FROM visits GROUP BY age", dp.BudgetError, "public_keys="),
    # refusals quote the offending text (not a parse-tree node name)
    ("order_in_subquery_quoted", "SELECT COUNT(*) FROM (SELECT * FROM visits ORDER BY spend)", dp.PlanError,
     "ORDER BY inside a subquery is not supported (which rows are kept must not depend on other rows): "
     "'ORDER BY spend'"),
    ("limit_in_subquery_quoted", "SELECT COUNT(*) FROM (SELECT * FROM visits LIMIT 10)", dp.PlanError, "'LIMIT 10'"),
    ("distinct_in_subquery_quoted", "SELECT COUNT(*) FROM (SELECT DISTINCT city FROM visits)", dp.PlanError,
     "'SELECT DISTINCT city'"),
    ("union_in_subquery", "SELECT COUNT(*) FROM (SELECT * FROM visits WHERE age > 3 UNION ALL SELECT * FROM visits)",
     dp.PlanError, "UNION/INTERSECT/EXCEPT inside a subquery or CTE is not supported: "
     "'UNION ALL SELECT * FROM visits'"),
    ("except_in_cte", "WITH x AS (SELECT city FROM visits EXCEPT SELECT name FROM cities) SELECT COUNT(*) FROM x",
     dp.PlanError, "'EXCEPT SELECT name FROM cities'"),
    ("recursive_cte", "WITH RECURSIVE r AS (SELECT * FROM visits UNION ALL SELECT * FROM r) SELECT COUNT(*) FROM r",
     dp.PlanError, "recursive CTEs are not supported: 'WITH RECURSIVE r AS (SELECT * FROM visits UNION ALL"),
    ("pivot_in_from", "SELECT COUNT(*) FROM (PIVOT visits ON city USING COUNT(*))", dp.PlanError,
     "PIVOT/UNPIVOT is not supported: 'PIVOT visits ON city USING COUNT(*)'"),
    ("select_then_drop", "SELECT COUNT(*) FROM visits; DROP TABLE visits", dp.PlanError,
     "only SELECT queries are supported, got a DROP statement: 'DROP TABLE visits'"),
    ("two_selects_quoted", "SELECT COUNT(*) FROM visits; SELECT 1", dp.PlanError,
     "expected one statement, got 2: 'SELECT 1'"),
    ("select_distinct", "SELECT DISTINCT city, COUNT(*) FROM visits GROUP BY city", dp.PlanError,
     "SELECT DISTINCT is not supported: 'SELECT DISTINCT city, COUNT(*)'"),
    ("select_distinct_on", "SELECT DISTINCT ON (city) city, COUNT(*) FROM visits GROUP BY city", dp.PlanError,
     "'SELECT DISTINCT ON (city)'"),
    ("cube", "SELECT city, COUNT(*) FROM visits GROUP BY CUBE (city) ORDER BY 2", dp.PlanError,
     "GROUPING SETS / ROLLUP / CUBE are not supported: 'GROUP BY CUBE (city)'"),
    ("rollup_quoted", "SELECT city, device, COUNT(*) FROM visits GROUP BY ROLLUP (city, device)", dp.PlanError,
     "'GROUP BY ROLLUP (city, device)'"),
    ("grouping_sets", "SELECT city, COUNT(*) FROM visits GROUP BY GROUPING SETS ((city), ())", dp.PlanError,
     "'GROUP BY GROUPING SETS ((city), ())'"),
    ("union_top_level", "SELECT COUNT(*) FROM visits UNION ALL SELECT COUNT(*) FROM visits", dp.PlanError,
     "UNION/INTERSECT/EXCEPT are not supported: 'UNION ALL SELECT COUNT(*) FROM visits'"),
    ("intersect_top_level", "SELECT COUNT(*) FROM visits INTERSECT SELECT COUNT(*) FROM visits", dp.PlanError,
     "'INTERSECT SELECT COUNT(*) FROM visits'"),
    ("named_window", "SELECT COUNT(*) FROM visits WINDOW w AS (PARTITION BY city)", dp.PlanError,
     "named WINDOW clauses are not supported (window functions combine rows): 'WINDOW w AS (PARTITION BY city)'"),
    ("plan_clamp_huge_bounds", "SELECT SUM(CLAMP(spend, -1e308, 1e308)) FROM visits", dp.BoundsError,
     "bounds (-1e+308, 1e+308) are too large to compute with"),
    ("plan_quantile_string", "SELECT MEDIAN(CLAMP(city, 0, 100)) FROM visits", dp.SchemaError,
     "an ordered domain needs an integer, float, date or datetime column"),
    # a column type Polars cannot import (before: a Rust panic escaped sess.sql, not a dpframe error; then a
    # dpframe error quoting the panic, "called `Result::unwrap()` on an `Err` value": now refused by its type)
    ("interval_column", "SELECT to_months(CAST(age AS INTEGER)) AS m, COUNT(*) FROM visits GROUP BY m",
     dp.SchemaError, "is of the DuckDB type INTERVAL, which dpframe cannot read"),
    ("union_column", "SELECT COUNT(*) FROM (SELECT union_value(k := age) AS v FROM visits)", dp.SchemaError,
     "column 'v' is of the DuckDB type UNION(k BIGINT), which dpframe cannot read"),
]


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize(("sql", "error", "fragment"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_refused_and_nothing_charged(sql: str, error: type[Exception], fragment: str, backend: str) -> None:
    sess = make_session(backend)
    with pytest.raises(error) as info:
        sess.sql(sql).collect(P)
    assert fragment in str(info.value), str(info.value)
    assert isinstance(info.value, dp.DPFrameError)
    # the argument it names (a measure's refusal kept its "bounds: ..." text but dropped the argument: review 38c)
    assert info.value.argument is not None and str(info.value).startswith(f"{info.value.argument}:"), info.value
    assert sess.history().height == 0
    assert sess.remaining() == sess.accountant.total


def test_errors_name_the_argument_and_a_fix() -> None:
    sess = make_session()
    with pytest.raises(dp.BoundsError) as info:
        sess.sql("SELECT SUM(spend * 2) FROM visits")
    assert info.value.argument == "sql"
    assert "CLAMP((spend * 2), lower, upper)" in (info.value.fix or "") or "CLAMP(spend * 2" in (info.value.fix or "")


def test_bad_session_declarations() -> None:
    with pytest.raises(dp.SchemaError, match="has no column 'nope'"):
        make_session(bounds={"visits.nope": (0, 1)})
    with pytest.raises(dp.SchemaError, match="not numeric"):
        make_session(bounds={"visits.city": (0, 1)})
    with pytest.raises(dp.BoundsError):
        make_session(bounds={"visits.spend": (5, 1)})
    with pytest.raises(dp.SchemaError, match="'table.column'"):
        make_session(public_keys={"city": ["a"]})
    with pytest.raises(dp.SchemaError, match="duplicates"):
        make_session(public_keys={"visits.city": ["a", "a"]})
    with pytest.raises(dp.SchemaError, match="both a private and a public table"):
        make_session(public_tables={"visits": {"a": 1}})
    with pytest.raises(dp.SchemaError, match="do not fit the column type"):
        make_session(public_keys={"visits.age": ["x"]})


def test_bad_sql_arguments(sess: dp.Session) -> None:
    with pytest.raises(dp.PlanError, match="expected a SQL string"):
        sess.sql(42)  # type: ignore[arg-type]
    with pytest.raises(dp.PluginError, match="unknown backend"):
        sess.sql("SELECT COUNT(*) FROM visits", backend="nope")
    with pytest.raises(dp.SchemaError, match="does not GROUP BY"):
        sess.sql("SELECT COUNT(*) FROM visits GROUP BY city", keys={"nope": [1]})
    with pytest.raises(dp.BudgetError):
        sess.sql("SELECT COUNT(*) FROM visits").collect(0.5)  # type: ignore[arg-type]
    assert sess.history().height == 0


def test_insufficient_budget_charges_nothing() -> None:
    sess = make_session(budget=dp.PureDP(1.0))
    with pytest.raises(dp.BudgetExceededError):
        sess.sql("SELECT COUNT(*) FROM visits").collect(dp.PureDP(2.0))
    assert sess.history().height == 0


def test_refusals_are_short_and_never_name_parse_tree_nodes() -> None:
    sess = make_session()
    for _, sql, _, _ in ERRORS:
        with pytest.raises(dp.DPFrameError) as info:
            sess.sql(sql).collect(P)
        text = str(info.value)
        assert "_NODE" not in text and "_MODIFIER" not in text and "Fraction(" not in text, text
        assert len(text) < 600, text


def test_mixing_notions_names_the_budget_kind() -> None:
    sess = make_session()
    with pytest.raises(dp.BudgetConversionError, match=r"cannot be charged to an \(ε, δ\) budget"):
        sess.sql("SELECT COUNT(*) FROM visits").collect(dp.ZCDP(0.1))
    assert sess.history().height == 0

