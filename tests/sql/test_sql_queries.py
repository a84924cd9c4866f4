"""Table-driven SQL tests: each supported query against the equivalent method-chain query.

For every supported case, on every backend that can run it, the SQL query and the frame-API query must
have the same plan (same measures, group keys, statistics and cost) and — with identically seeded
sessions — release exactly the same values. The data never loses a row to contribution bounding
(≤ 8 rows per user, max_rows = 10), so the Polars and DuckDB backends compute identical statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from sql_testkit import CITIES, DEVICES, REGIONS, make_session

import dpframe as dp

B = dp.ApproxDP(1.0, 1e-6)
P = dp.PureDP(1.0)


@dataclass
class Case:
    id: str
    sql: str
    frame: Callable[[dp.Session], dp.Query]
    post: Callable[[pl.DataFrame], pl.DataFrame] = lambda df: df
    budget: dp.Budget = P
    keys: dict[str, Any] | None = None
    duckdb_only: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def t(s: dp.Session, name: str = "visits") -> dp.Frame:
    return s.table(name)


SPEND = (0, 500)
CASES = [
    Case("count_star", "SELECT COUNT(*) FROM visits", lambda s: t(s).agg(dp.len())),
    Case("count_alias", "SELECT COUNT(*) AS n FROM visits", lambda s: t(s).agg(dp.len().alias("n"))),
    Case("count_one", "select count(1) as n from visits", lambda s: t(s).agg(dp.len().alias("n"))),
    Case("count_col", "SELECT COUNT(age) FROM visits", lambda s: t(s).agg(dp.count("age"))),
    Case("sum_clamp", "SELECT SUM(CLAMP(spend, 0, 500)) AS s FROM visits",
         lambda s: t(s).agg(dp.sum("spend", SPEND).alias("s"))),
    Case("avg_default_name", "SELECT AVG(CLAMP(spend, 0, 500)) FROM visits",
         lambda s: t(s).agg(dp.mean("spend", SPEND))),
    Case("var_samp", "SELECT VAR_SAMP(CLAMP(age, 0, 100)) AS v FROM visits",
         lambda s: t(s).agg(dp.var("age", (0, 100)).alias("v"))),
    Case("var_pop", "SELECT VAR_POP(CLAMP(age, 0, 100)) AS v FROM visits",
         lambda s: t(s).agg(dp.var("age", (0, 100), ddof=0).alias("v"))),
    Case("stddev", "SELECT STDDEV(CLAMP(age, 0, 100)) AS sd FROM visits",
         lambda s: t(s).agg(dp.std("age", (0, 100)).alias("sd"))),
    Case("stddev_pop_least_greatest", "SELECT STDDEV_POP(LEAST(GREATEST(age, 0), 100)) AS sd FROM visits",
         lambda s: t(s).agg(dp.std("age", (0, 100), ddof=0).alias("sd"))),
    Case("greatest_least_order", "SELECT SUM(GREATEST(LEAST(age, 100), 0)) AS s FROM visits",
         lambda s: t(s).agg(dp.sum("age", (0, 100)).alias("s"))),
    Case("declared_bounds", "SELECT SUM(spend) AS s, AVG(spend) AS a FROM visits",
         lambda s: t(s).agg(dp.sum("spend", (0, 250)).alias("s"), dp.mean("spend", (0, 250)).alias("a"))),
    Case("shared_statistics", "SELECT AVG(CLAMP(spend,0,500)) AS m, VAR_SAMP(CLAMP(spend,0,500)) AS v, "
         "COUNT(spend) AS c FROM visits",
         lambda s: t(s).agg(dp.mean("spend", SPEND).alias("m"), dp.var("spend", SPEND).alias("v"),
                            dp.count("spend").alias("c"))),
    Case("group_public_keys", "SELECT city, COUNT(*) AS n FROM visits GROUP BY city",
         lambda s: t(s).group_by("city", keys=CITIES).agg(dp.len().alias("n"))),
    Case("group_two_keys_all", "SELECT city, device, COUNT(*) AS n, SUM(CLAMP(spend, 0, 500)) AS s "
         "FROM visits GROUP BY ALL",
         lambda s: t(s).group_by("city", "device", keys={"city": CITIES, "device": DEVICES})
         .agg(dp.len().alias("n"), dp.sum("spend", SPEND).alias("s"))),
    Case("output_order", "SELECT COUNT(*) AS n, city FROM visits GROUP BY city",
         lambda s: t(s).group_by("city", keys=CITIES).agg(dp.len().alias("n")), post=lambda d: d.select("n", "city")),
    Case("key_not_in_output", "SELECT COUNT(*) AS n FROM visits GROUP BY device",
         lambda s: t(s).group_by("device", keys=DEVICES).agg(dp.len().alias("n")), post=lambda d: d.select("n")),
    Case("where_group_positional", "SELECT city, COUNT(*) AS n FROM visits WHERE age >= 18 GROUP BY 1",
         lambda s: t(s).filter(pl.col("age") >= 18).group_by("city", keys=CITIES).agg(dp.len().alias("n"))),
    Case("where_between_in", "SELECT COUNT(*) AS n FROM visits WHERE age BETWEEN 18 AND 65 "
         "AND device IN ('ios', 'android')",
         lambda s: t(s).filter(pl.col("age").is_between(18, 65), pl.col("device").is_in(["ios", "android"]))
         .agg(dp.len().alias("n"))),
    Case("where_or_null", "SELECT COUNT(*) AS n FROM visits WHERE spend > 1.5 OR age IS NULL",
         lambda s: t(s).filter((pl.col("spend") > 1.5) | pl.col("age").is_null()).agg(dp.len().alias("n"))),
    Case("where_like", "SELECT city, AVG(CLAMP(spend, 0, 500)) AS a FROM visits WHERE city LIKE 'A%' GROUP BY city",
         lambda s: t(s).filter(pl.col("city").str.starts_with("A")).group_by("city", keys=CITIES)
         .agg(dp.mean("spend", SPEND).alias("a"))),
    Case("where_not_distinct", "SELECT COUNT(*) AS n FROM visits WHERE NOT (city IS NOT DISTINCT FROM 'Oslo')",
         lambda s: t(s).filter(~pl.col("city").eq_missing("Oslo")).agg(dp.len().alias("n"))),
    Case("cte_derived", "WITH adults AS (SELECT user_id, city, spend * 2 AS s2 FROM visits WHERE age >= 18) "
         "SELECT SUM(CLAMP(s2, 0, 1000)) AS s FROM adults",
         lambda s: t(s).filter(pl.col("age") >= 18).with_columns((pl.col("spend") * 2).alias("s2"))
         .agg(dp.sum("s2", (0, 1000)).alias("s"))),
    Case("cte_without_unit_column", "WITH a AS (SELECT city, age FROM visits) "
         "SELECT city, AVG(CLAMP(age, 0, 100)) AS m FROM a GROUP BY city",
         lambda s: t(s).group_by("city", keys=CITIES).agg(dp.mean("age", (0, 100)).alias("m"))),
    Case("subquery_star", "SELECT COUNT(*) AS n FROM (SELECT * FROM visits WHERE age < 30) t",
         lambda s: t(s).filter(pl.col("age") < 30).agg(dp.len().alias("n"))),
    Case("nested_ctes", "WITH a AS (SELECT *, age + 1 AS age1 FROM visits), b AS (SELECT * FROM a WHERE age1 > 20) "
         "SELECT COUNT(*) AS n FROM b",
         lambda s: t(s).filter(pl.col("age") + 1 > 20).agg(dp.len().alias("n"))),
    Case("derived_aggregate_arg", "SELECT SUM(CLAMP(spend * 2, 0, 1000)) AS s FROM visits",
         lambda s: t(s).with_columns((pl.col("spend") * 2).alias("(spend * 2)"))
         .agg(dp.sum("(spend * 2)", (0, 1000)).alias("s"))),
    Case("case_indicator", "SELECT SUM(CLAMP(CASE WHEN device = 'ios' THEN 1 ELSE 0 END, 0, 1)) AS ios FROM visits",
         lambda s: t(s).with_columns(pl.when(pl.col("device") == "ios").then(1).otherwise(0)
                                     .alias("CASE  WHEN ((device = 'ios')) THEN (1) ELSE 0 END"))
         .agg(dp.sum("CASE  WHEN ((device = 'ios')) THEN (1) ELSE 0 END", (0, 1)).alias("ios"))),
    Case("count_case", "SELECT COUNT(CASE WHEN age > 40 THEN 1 END) AS old FROM visits",
         lambda s: t(s).with_columns(pl.when(pl.col("age") > 40).then(1).alias("CASE  WHEN ((age > 40)) THEN (1) "
                                                                                 "ELSE NULL END"))
         .agg(dp.count("CASE  WHEN ((age > 40)) THEN (1) ELSE NULL END").alias("old"))),
    Case("join_public_group", "SELECT c.region, COUNT(*) AS n FROM visits v JOIN cities c ON v.city = c.name "
         "GROUP BY c.region",
         lambda s: t(s, "vj").group_by("region", keys=REGIONS).agg(dp.len().alias("n"))),
    Case("left_join_using", "SELECT region, COUNT(*) AS n FROM visits LEFT JOIN (SELECT name AS city, region "
         "FROM cities) USING (city) GROUP BY region",
         lambda s: t(s, "vl").group_by("region", keys=[*REGIONS, None]).agg(dp.len().alias("n"))),
    Case("join_where_public", "SELECT c.region, SUM(CLAMP(v.spend, 0, 100)) AS s FROM visits AS v INNER JOIN "
         "cities AS c ON v.city = c.name WHERE c.population > 1000000 GROUP BY c.region",
         lambda s: t(s, "vj").filter(pl.col("population") > 1_000_000).group_by("region", keys=REGIONS)
         .agg(dp.sum("spend", (0, 100)).alias("s"))),
    Case("join_public_subquery", "SELECT p.r, COUNT(*) AS n FROM visits v JOIN (SELECT name, upper(region) AS r "
         "FROM cities) p ON v.city = p.name GROUP BY p.r",
         lambda s: t(s, "vj").with_columns(pl.col("region").str.to_uppercase().alias("r"))
         .group_by("r", keys=sorted({r.upper() for r in REGIONS})).agg(dp.len().alias("n"))),
    Case("public_cte_join", "WITH big AS (SELECT name FROM cities WHERE population > 1000000) "
         "SELECT COUNT(*) AS n FROM visits JOIN big ON city = name",
         lambda s: t(s, "vj").filter(pl.col("population") > 1_000_000).agg(dp.len().alias("n"))),
    Case("having_order_limit", "SELECT city, COUNT(*) AS n FROM visits GROUP BY city HAVING COUNT(*) > 5 "
         "ORDER BY n DESC, city LIMIT 3",
         lambda s: t(s).group_by("city", keys=CITIES).agg(dp.len().alias("n")),
         post=lambda d: d.filter(pl.col("n") > 5).sort(["n", "city"], descending=[True, False]).head(3)),
    Case("expression_over_aggregates", "SELECT SUM(CLAMP(spend, 0, 500)) / COUNT(*) AS per_row FROM visits",
         lambda s: t(s).agg(dp.sum("spend", SPEND), dp.len()),
         post=lambda d: d.select((pl.col("spend_sum") / pl.col("len")).alias("per_row"))),
    Case("hidden_having_measure", "SELECT city, COUNT(*) AS n FROM visits GROUP BY city "
         "HAVING AVG(CLAMP(spend, 0, 500)) > 10",
         lambda s: t(s).group_by("city", keys=CITIES).agg(dp.len().alias("n"), dp.mean("spend", SPEND)),
         post=lambda d: d.filter(pl.col("spend_mean") > 10).select("city", "n")),
    Case("order_by_key_offset", "SELECT device, COUNT(*) AS n FROM visits GROUP BY device ORDER BY device DESC "
         "LIMIT 2 OFFSET 1",
         lambda s: t(s).group_by("device", keys=DEVICES).agg(dp.len().alias("n")),
         post=lambda d: d.sort("device", descending=True).slice(1, 2)),
    Case("derived_key_with_keys_arg", "SELECT upper(city) AS c, COUNT(*) AS n FROM visits GROUP BY 1",
         lambda s: t(s).with_columns(pl.col("city").str.to_uppercase().alias("upper(city)"))
         .group_by("upper(city)", keys=[c.upper() for c in CITIES]).agg(dp.len().alias("n")),
         post=lambda d: d.rename({"upper(city)": "c"}), keys={"c": [c.upper() for c in CITIES]}),
    Case("private_keys", "SELECT age, COUNT(*) AS n FROM visits GROUP BY age",
         lambda s: t(s).group_by("age").agg(dp.len().alias("n")), budget=B),
    Case("case_insensitive_names", "select CITY, count(*) as N from VISITS group by City",
         lambda s: t(s).group_by("city", keys=CITIES).agg(dp.len().alias("N"))),
    Case("quoted_identifiers_comment_semicolon", '-- per city\nSELECT "city", COUNT(*) AS "n" FROM "visits" '
         'GROUP BY "city";', lambda s: t(s).group_by("city", keys=CITIES).agg(dp.len().alias("n"))),
    Case("from_first", "FROM visits SELECT COUNT(*) AS n WHERE device = 'web'",
         lambda s: t(s).filter(pl.col("device") == "web").agg(dp.len().alias("n"))),
    Case("zcdp_budget", "SELECT COUNT(*) AS n, SUM(CLAMP(age, 0, 100)) AS s FROM visits",
         lambda s: t(s).agg(dp.len().alias("n"), dp.sum("age", (0, 100)).alias("s")), budget=dp.ZCDP(0.5),
         extra={"budget": dp.ZCDP(100.0), "accountant": "zcdp"}),
    Case("date_part_keys", "SELECT year(day) AS y, COUNT(*) AS n FROM visits GROUP BY y",
         lambda s: t(s).with_columns(pl.col("day").dt.year().cast(pl.Int64, strict=False).alias("year(\"day\")"))
         .group_by('year("day")', keys=[2023, 2024]).agg(dp.len().alias("n")),
         post=lambda d: d.rename({'year("day")': "y"}), keys={"y": [2023, 2024]}),
    Case("count_distinct_unit", "SELECT city, COUNT(DISTINCT user_id) AS users, COUNT(*) AS n FROM visits "
         "GROUP BY city", lambda s: t(s).group_by("city", keys=CITIES).agg(dp.count_units().alias("users"),
                                                                          dp.len().alias("n"))),
    Case("count_distinct_values", "SELECT city, COUNT(DISTINCT device) AS devices, COUNT(DISTINCT age + 1) FROM "
         "visits GROUP BY city", lambda s: t(s).with_columns((pl.col("age") + 1).alias("(age + 1)"))
         .group_by("city", keys=CITIES).agg(dp.count_distinct("device").alias("devices"),
                                             dp.count_distinct("(age + 1)"))),
    Case("count_distinct_ordered", "SELECT city, COUNT(DISTINCT user_id) AS users, COUNT(DISTINCT device) AS d "
         "FROM visits GROUP BY city ORDER BY users DESC, city LIMIT 3",       # released as Int64 through ORDER BY
         lambda s: t(s).group_by("city", keys=CITIES).agg(dp.count_units().alias("users"),
                                                          dp.count_distinct("device").alias("d")),
         post=lambda d: d.sort(["users", "city"], descending=[True, False]).head(3)),
    Case("count_distinct_unit_renamed", "WITH a AS (SELECT user_id AS who FROM visits WHERE age > 30) "
         "SELECT COUNT(DISTINCT who) FROM a",
         lambda s: t(s).filter(pl.col("age") > 30).agg(dp.count_units())),
    Case("duckdb_only_function", "SELECT COUNT(*) AS n FROM visits WHERE strftime(day, '%m') = '01'",
         lambda s: t(s).filter(pl.col("day").dt.month() == 1).agg(dp.len().alias("n")), duckdb_only=True),
]


def _plans_match(q_sql: dp.Query, q_frame: dp.Query, budget: dp.Budget) -> None:
    p1, p2 = q_sql.plan(budget), q_frame.plan(budget)
    assert p1.session_cost == p2.session_cost
    assert p1.cost == p2.cost
    m1 = [(m.kind, m.bounds, m.options) for m in q_sql.node.measures]
    m2 = [(m.kind, m.bounds, m.options) for m in q_frame.node.measures]
    assert m1 == m2
    s1 = [(s.kind, s.lower, s.upper, s.shift, s.power, s.grid_exp) for s in p1.statistics()]
    s2 = [(s.kind, s.lower, s.upper, s.shift, s.power, s.grid_exp) for s in p2.statistics()]
    assert s1 == s2
    assert q_sql.node.grouped == q_frame.node.grouped
    if q_frame.node.keys is not None:
        assert q_sql.node.keys is not None
        assert q_sql.node.keys.rename(dict(zip(q_sql.node.keys.columns, q_frame.node.keys.columns))).equals(
            q_frame.node.keys)
    else:
        assert q_sql.node.keys is None


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_sql_matches_frame_api(case: Case, backend: str) -> None:
    s_sql = make_session(backend, seed=7, **case.extra)
    s_frame = make_session("polars", seed=7, **case.extra)
    q_sql = s_sql.sql(case.sql, keys=case.keys)
    q_frame = case.frame(s_frame)
    assert isinstance(q_sql, dp.Query)
    _plans_match(q_sql, q_frame, case.budget)
    if case.duckdb_only and backend == "polars":
        with pytest.raises(dp.PlanError, match="backend='duckdb'"):
            q_sql.collect(case.budget)
        assert s_sql.history().height == 0
        return
    got = q_sql.collect(case.budget)
    want = case.post(q_frame.collect(case.budget))
    assert_frame_equal(got, want, check_dtypes=True)
    assert s_sql.spent() == s_frame.spent()
    assert s_sql.history()["query"][0].startswith("SQL: ")


def test_there_are_at_least_forty_queries() -> None:
    from test_sql_errors import ERRORS

    assert len(CASES) + len(ERRORS) >= 40
    assert len(CASES) >= 20


def test_per_query_backend_override() -> None:
    s_sql, s_frame = make_session("polars", seed=3), make_session("polars", seed=3)
    q = s_sql.sql("SELECT COUNT(*) AS n FROM visits WHERE strftime(day, '%Y') = '2023'", backend="duckdb")
    got = q.collect(P)
    want = s_frame.table("visits").filter(pl.col("day").dt.year() == 2023).agg(dp.len().alias("n")).collect(P)
    assert_frame_equal(got, want)
    assert q.explain(P, format="json")["backend"] == "duckdb"


def test_explain_statement_charges_nothing(sess: dp.Session) -> None:
    q = sess.sql("EXPLAIN SELECT city, AVG(CLAMP(spend, 0, 500)) AS a FROM visits GROUP BY city HAVING a > 1")
    out = q.collect(P)
    text = out["explain"][0]
    assert "mean(spend, bounds=[0, 500])" in text and "post-processing" in text and "GroupBy ['city']" in text
    assert sess.history().height == 0 and sess.remaining() == sess.accountant.total
    assert q.explain(P) == text


def test_explain_json_and_cost_are_free(sess: dp.Session) -> None:
    q = sess.sql("SELECT device, COUNT(*) FROM visits GROUP BY device")
    info = q.explain(dp.PureDP(0.5), format="json")
    assert info["sql"].startswith("SELECT device") and info["refused"] is None
    assert q.cost(dp.PureDP(0.5)) == dp.ApproxDP(0.5, 0)
    assert sess.history().height == 0


def test_duckdb_only_node_is_explained_as_refused_on_polars(sess: dp.Session) -> None:
    q = sess.sql("SELECT COUNT(*) FROM visits WHERE strftime(day, '%Y') = '2023'")
    assert "REFUSED on this backend" in q.explain(P)
    assert "DuckDB only" in q.explain(P)


def test_median_and_quantile_cont_are_released_by_the_quantiles_plugin(sess: dp.Session) -> None:
    q = sess.sql("SELECT MEDIAN(CLAMP(age, 0, 100)) AS m, QUANTILE_CONT(CLAMP(age, 0, 100), [0.25, 0.75]) AS qs "
                 "FROM visits")
    assert [(m.kind, m.column, m.option("q")) for m in q.node.measures] == [
        ("quantile", "age", 0.5), ("quantile", "age", (0.25, 0.75))]
    assert {p.mechanism for p in q.plan(P).plans} == {"quantiles"}
    out = q.collect(P)
    assert out.schema == pl.Schema({"m": pl.Float64, "qs": pl.List(pl.Float64)})
    low, high = out["qs"][0]
    assert 0 <= low <= high <= 100 and 0 <= out["m"][0] <= 100
    assert sess.history().height == 1


def test_percentile_cont_within_group(sess: dp.Session) -> None:
    q = sess.sql("SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY CLAMP(age, 0, 100)) FROM visits")
    m = q.node.measures[0]
    assert (m.kind, m.column, m.bounds, m.option("q")) == ("quantile", "age", (0, 100), 0.9)


def test_released_output_has_no_private_columns(sess: dp.Session) -> None:
    out = sess.sql("SELECT city, COUNT(*) AS n FROM visits GROUP BY city").collect(P)
    assert out.columns == ["city", "n"] and out["city"].to_list() == sorted(CITIES)
