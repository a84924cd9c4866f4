"""Review 54k: a growth bound for SQL's string functions (as review 54i's for method chains).

Each DuckDB call's size argument is capped (``SIZE_LIMIT``, 10,000), but nested calls multiplied:
``repeat(repeat(s, 10000), 10000)`` is 10⁸ copies of ``s`` on each row that reaches it, behind a private condition
(``CASE WHEN x > 100``) gigabytes on one unit's rows only: an out-of-memory failure after the charge (an oracle), or
the process killed. Every SQL expression now gets a worst case ``a·L + b`` (``dpframe.sql.growth``), carried through
CTEs and subqueries, and one above ``MAX_GROWTH`` is refused when built, free. The attacks are only built here: running
them could exhaust the machine's memory.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.plan.growth import MAX_GROWTH
from dpframe.sql.growth import sql_growth
from dpframe.sql.sandbox import parse_expression


def _session() -> dp.Session:
    data = pl.DataFrame({"u": range(40), "x": [1] * 40, "s": ["ab"] * 40, "t": ["cd"] * 40,
                         "l": [["a", "b"]] * 40})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend="duckdb")


_GUARD = "CASE WHEN x > 100 THEN {} END"


@pytest.mark.parametrize("grow", [
    "repeat(repeat(s, 10000), 10000)",
    "repeat(repeat(s, 200), 200)",
    "lpad(repeat(s, 10000), 10000, repeat('ab', 5000))",
    "rpad(s, 10000, repeat(repeat('x', 100), 100))",
    "replace(replace(s, 'a', repeat('x', 1000)), 'x', repeat('y', 1000))",
    "replace(s, '', repeat('x', 10000)) || replace(s, '', repeat('x', 10000))",
    "regexp_replace(regexp_replace(s, '(.)', repeat('\\1', 200), 'g'), '(.)', repeat('\\1', 200), 'g')",
    "concat(" + ", ".join(["repeat(s, 10000)"] * 3) + ")",
    "repeat(s, 10000) || repeat(s, 10000) || repeat(s, 10000)",
    "concat_ws(repeat('-', 10000), s, s, s)",
    "upper(upper(upper(repeat(s, 10000))))",
    "to_base64(repeat(s, 10000)::BLOB) || repeat(s, 10000)",
    "printf('%99999999s', s)",
    "printf(s, x)",
    "format('{:>99999999}', s)",
    "bar(x, 0, 1, 100000000)",
    "list_resize(list_resize(l, 10000, s), 10000)",
    "array_to_string(list_resize([repeat(s, 10000)], 10000), ',')",
    "list_transform(list_resize(l, 10000), lambda v: repeat(v, 10000))",
    "list_reduce(l, lambda acc, v: acc || acc)",
    "repeat(s || t, 10000) || repeat(s, 10000) || repeat(t, 10000)",
    "array_to_string(string_split(array_to_string(string_split(s, ''), repeat('-', 200)), ''), repeat('-', 200))",
    "list_aggregate(string_split(list_aggregate(string_split(s, ''), 'string_agg', repeat('-', 200)), ''), "
    "'string_agg', repeat('-', 200))",
    "array_to_string(string_split(s, ''), s)",
    "json_object('k', json_object('k', json_object('k', repeat(s, 1000))::VARCHAR)::VARCHAR)::VARCHAR",
    "json_array(json_array(json_array(json_array(json_array(json_array(s)::VARCHAR)::VARCHAR)::VARCHAR)::VARCHAR)"
    "::VARCHAR)::VARCHAR",
    "array_to_string(list_transform(string_split(repeat(',', 10000), ','), lambda v: repeat('x', 10000)), '')",
])
def test_nested_growth_is_refused_free_when_built(grow: str) -> None:
    sess = _session()
    sql = f"SELECT COUNT(*) AS n FROM t WHERE length({_GUARD.format(grow)}) > 1"
    with pytest.raises(dp.errors.PlanError, match="sql") as e:
        sess.sql(sql)
    assert "grow" in str(e.value) and "Fix:" in str(e.value)
    assert sess.history().height == 0


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM t GROUP BY repeat(repeat(s, 10000), 10000)",
    "SELECT repeat(repeat(s, 10000), 10000) AS k, COUNT(*) AS n FROM t GROUP BY k",
    "WITH a AS (SELECT u, x, repeat(s, 10000) AS r FROM t) SELECT COUNT(*) AS n FROM a "
    "WHERE length(repeat(r, 10000)) > 1",
    "WITH a AS (SELECT u, x, repeat(s, 10000) AS r FROM t), b AS (SELECT u, r || r || r AS r3 FROM a) "
    "SELECT COUNT(*) AS n FROM b WHERE length(r3) > 1",
    "SELECT COUNT(*) AS n FROM (SELECT u, repeat(s, 200) AS r FROM t) WHERE length(repeat(r, 200)) > 1",
    "SELECT COUNT(*) AS n FROM (SELECT * FROM (SELECT u, x, repeat(s, 10000) AS r FROM t) WHERE x > 1) "
    "WHERE length(r || r || r) > 1",
])
def test_growth_is_carried_through_ctes_subqueries_and_group_by(sql: str) -> None:
    sess = _session()
    with pytest.raises(dp.errors.PlanError, match="grow"):
        sess.sql(sql)
    assert sess.history().height == 0


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT COUNT(*) AS n FROM t WHERE upper(s) = 'AB'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE s || t = 'abcd'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE concat(s, t) = 'abcd'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE length(lpad(s, 10, '0')) = 10", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE replace(s, 'a', 'xy') = 'xyb'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE length(repeat(s, 10000)) = 20000", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE length(lpad(s, 10000, 'x')) = 10000", 40),
    ("WITH a AS (SELECT u, repeat(s, 100) AS r FROM t) SELECT COUNT(*) AS n FROM a WHERE length(repeat(r, 100)) "
     "= 20000", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE s IN (" + ", ".join(f"'{'v' * 1000}{i}'" for i in range(30)) + ", 'ab')", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE len(list_transform(l, lambda v: v || 'x')) = 2", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE list_reduce(l, lambda acc, v: acc || v) = 'ab'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE printf('%5s', s) = '   ab'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE array_to_string(string_split(s, ''), '-') = 'a-b'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE list_string_agg(l) = 'a,b'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE json_object('k', s)::VARCHAR = '{\"k\":\"ab\"}'", 40),
])
def test_ordinary_string_sql_still_runs(sql: str, expected: int) -> None:
    sess = _session()
    assert sess.sql(sql).collect(dp.PureDP(10)).item() == pytest.approx(expected, abs=10)


def test_the_bound_of_plain_calls() -> None:
    assert sql_growth(parse_expression("repeat(s, 3)"), {}) == (3, 0)
    assert sql_growth(parse_expression("s || 'ab'"), {"s": (2, 1)}) == (2, 3)
    assert sql_growth(parse_expression("lpad(s, 10, 'x')"), {}) == (1, 10)
    assert sql_growth(parse_expression("CASE WHEN x > 1 THEN repeat(s, 5) ELSE s END"), {}) == (5, 0)
    assert sum(sql_growth(parse_expression("repeat(repeat(s, 200), 200)"), {})) > MAX_GROWTH
