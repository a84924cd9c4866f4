"""Fuzzing every public entry point: the only outcomes are a correct result or a dpframe error.

For adversarial frames, privacy units, budgets, bounds, measures, query plans and SQL text (see
``strategies.py``): ``dp.Session(...)`` (every constructor argument, ledger paths included), the ``Frame``
methods, ``agg``, ``explain``/``cost``/``collect`` and ``sess.sql`` (aggregates, ``TOP_K``, quantiles,
post-processing, sampling, ``EXPLAIN``) either succeed or raise a ``dp.DPFrameError`` — no other
exception, no hang (30 s per example) — and a refused call charges nothing. A released result has the
declared columns, one row per public key, and costs exactly what ``cost()`` said. The other entry points
are fuzzed in ``test_fuzz_queries.py``, ``test_fuzz_interactive.py`` and ``test_fuzz_accounting.py``.
With a huge ε the released counts and sums match a plain Polars computation (the results are *correct*,
not only well-formed).

Default run: the ``CI`` profile (derandomized, 60 examples per test). ``-m slow``: ``DEEP`` (1 500).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import dpframe as dp

from .checks import run_query
from .strategies import (
    CI,
    DEEP,
    KEYS,
    NUMBERS,
    Ledgered,
    budgets,
    duplicate_names,
    frames,
    measures,
    plans,
    time_limit,
)

UNITS = st.one_of(
    st.sampled_from([dp.PrivacyUnit.row, lambda: dp.PrivacyUnit("user"), lambda: dp.PrivacyUnit("user", max_rows=3),
                     lambda: dp.PrivacyUnit("user", max_rows=2, max_groups=1), lambda: dp.PrivacyUnit("k")]),
    st.tuples(st.one_of(st.sampled_from(["user", "nope", "x"]), NUMBERS), NUMBERS, st.one_of(st.none(), NUMBERS))
    .map(lambda a: (lambda: dp.PrivacyUnit(a[0], max_rows=a[1], max_groups=a[2]))))


def _session(data: Any, unit: Any, total: Any, backend: str) -> dp.Session | None:
    try:
        return dp.Session({"t": data}, privacy_unit=unit(), budget=total(), backend=backend, seed=0)
    except dp.DPFrameError:
        return None


def _build(sess: dp.Session, steps: list[tuple[str, Any]], ms: list[Any]) -> Any:
    node: Any = sess.table("t")
    for method, (args, kwargs) in steps:
        node = getattr(node, method)(*args, **kwargs)
    return node.agg(*[m() for m in ms])


def _check_result(out: pl.DataFrame, query: Any, budget: dp.Budget) -> None:
    plan = query.plan(budget)
    declared = [*query.node.by, *(name for p in plan.plans for name in p.output_names())]
    assert out.columns == declared, (out.columns, declared)
    if query.node.keys is not None:
        assert out.height == query.node.keys.height
    elif not query.node.by:
        assert out.height == 1


def _run_query(sess: dp.Session, make: Any, budget_thunk: Any) -> str:
    """Build, inspect and collect one query; returns the outcome (checked on the way)."""
    return run_query(sess, make, budget_thunk, _check_result)


def _fuzz_api(data: pl.DataFrame, unit: Any, total: Any, steps: list[Any], ms: list[Any], budget: Any,
              backend: str) -> None:
    with time_limit():
        sess = _session(data, unit, total, backend)
        if sess is None:
            return
        outcome = _run_query(sess, lambda: _build(sess, steps, ms), budget)
        event(outcome)
        assert outcome != "failed", "a query passed validation, was charged, then failed while running"


API = dict(data=frames(), unit=UNITS, total=budgets(), steps=plans(), ms=st.lists(measures(), min_size=0, max_size=3),
           budget=budgets(), backend=st.sampled_from(["polars", "duckdb"]))
SANE_API = dict(data=frames(min_rows=1), unit=st.just(lambda: dp.PrivacyUnit("user", max_rows=2)),
                total=st.just(lambda: dp.ApproxDP(100, Fraction(1, 1000))), steps=plans(),
                ms=st.lists(measures(), min_size=1, max_size=3), budget=budgets(sane=True),
                backend=st.sampled_from(["polars", "duckdb"]))


@CI
@given(**API)
def test_fuzz_public_api(**kw: Any) -> None:
    _fuzz_api(**kw)


@CI
@given(**SANE_API)
def test_fuzz_plans_on_a_valid_session(**kw: Any) -> None:
    """Mostly well-formed sessions and budgets, so the fuzzing reaches planning and execution."""
    _fuzz_api(**kw)


@pytest.mark.slow
@DEEP
@given(**API)
def test_fuzz_public_api_deep(**kw: Any) -> None:
    _fuzz_api(**kw)


@pytest.mark.slow
@DEEP
@given(**SANE_API)
def test_fuzz_plans_on_a_valid_session_deep(**kw: Any) -> None:
    _fuzz_api(**kw)


@CI
@given(data=frames(min_rows=1))
def test_duplicate_column_names_are_refused(data: pl.DataFrame) -> None:
    with pytest.raises(dp.SchemaError):
        dp.Session({"t": duplicate_names(data)}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))


@CI
@given(tables=st.one_of(st.none(), st.just({}), st.dictionaries(st.one_of(KEYS, st.integers()), st.one_of(
    st.none(), st.integers(), st.just(pl.DataFrame()), st.just(pl.DataFrame({"user": []})), st.text(max_size=5),
    st.just("missing.parquet"), st.just(pl.DataFrame({"user": [1]}).lazy())), max_size=2)),
       kwargs=st.dictionaries(st.sampled_from(["ledger", "backend", "accountant", "seed", "public_keys", "bounds"]),
                              st.one_of(NUMBERS, KEYS, st.just({"t.x": (0, 1)})), max_size=2))
def test_fuzz_session_arguments(tables: Any, kwargs: dict[str, Any]) -> None:
    kwargs.pop("ledger", None)          # a ledger path would write files in the working directory
    with time_limit():
        try:
            dp.Session(tables, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), **kwargs)
        except dp.DPFrameError:
            pass


LEDGERS = st.sampled_from([None, "new.ledger", "a dir", "missing/dir/x.ledger", "empty.ledger", "garbage.ledger",
                           "", "ok.ledger"])
CONSTRUCTOR = st.fixed_dictionaries({}, optional={
    "backend": st.one_of(st.sampled_from(["polars", "duckdb", "spark", "nope", ""]), NUMBERS),
    "accountant": st.one_of(st.sampled_from(["basic", "zcdp", "rdp", "pld", "nope"]), NUMBERS),
    "seed": st.one_of(st.integers(-5, 2**70), NUMBERS),
    "public_tables": st.sampled_from([{"p": pl.DataFrame({"k": ["a"]})}, {"t": pl.DataFrame({"k": ["a"]})}, {3: 4},
                                      "p", {"p": "missing.parquet"}]),
    "public_keys": st.sampled_from([{"t.k": ["a", "b"]}, {"t.nope": [1]}, {"k": ["a"]}, {"t.k": []}, "t.k"]),
    "bounds": st.sampled_from([{"t.x": (0, 1)}, {"t.x": (1, 0)}, {"t.k": (0, 1)}, {"t.x": "0,1"}, {"x": (0, 1)}]),
    "spark": st.sampled_from([object(), "spark"]),
})


@CI
@given(data=frames(min_rows=1), unit=st.one_of(UNITS, st.sampled_from([lambda: "user", lambda: None])),
       total=budgets(), ledger=LEDGERS, kwargs=CONSTRUCTOR)
def test_fuzz_session_constructor(tmp_path_factory: pytest.TempPathFactory, data: pl.DataFrame, unit: Any,
                                  total: Any, ledger: str | None, kwargs: dict[str, Any]) -> None:
    """Every constructor argument: a working, empty session or a dpframe error (ledger files are never reset)."""
    folder = tmp_path_factory.mktemp("ledgers")
    (folder / "a dir").mkdir()
    (folder / "empty.ledger").write_bytes(b"")
    (folder / "garbage.ledger").write_bytes(b"not a database" * 10)
    path = None if ledger is None else folder / ledger
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with time_limit():
        try:
            sess = dp.Session({"t": data}, privacy_unit=unit(), budget=total(), ledger=path, **kwargs)
        except dp.DPFrameError:
            event("refused")
        else:
            event("created")
            assert sess.history().height == 0 and repr(sess)
            assert sess.accountant.fits(sess._release.spent())
            sess.close()
    for name, content in before.items():
        assert (folder / name).read_bytes() == content, f"the session rewrote {name}"


# --------------------------------------------------------------------------------------------- SQL

AGGS = ["COUNT(*)", "COUNT(x)", "SUM(CLAMP(x, 0, 10))", "AVG(CLAMP(x, -1, 1))", "SUM(x)", "VAR_SAMP(CLAMP(x, 0, 1))",
        "STDDEV(CLAMP(x, 0, 5))", "MEDIAN(x)", "MAX(x)", "COUNT(DISTINCT user)", "SUM(CLAMP(x, 10, 0))",
        "SUM(CLAMP(x, 0, 'inf'))", "COUNT(*) FILTER (WHERE x > 1)", "SUM(CLAMP(user, 0, 1e308))",
        "MEDIAN(CLAMP(x, 0, 10))", "QUANTILE_CONT(CLAMP(x, 0, 10), 0.9)", "QUANTILE_CONT(CLAMP(x, 0, 10), [0.9, 0.1])",
        "QUANTILE_CONT(CLAMP(x, 0, 10), 2)", "APPROX_COUNT_DISTINCT(user)", "STDDEV_POP(CLAMP(x, 0, 1))"]
#: Whole statements beyond the SELECT-aggregate template: top-k, HAVING / ORDER BY / LIMIT post-processing,
#: sampling, subqueries and EXPLAIN.
STATEMENTS = [
    "SELECT k FROM t GROUP BY k HAVING TOP_K(COUNT(DISTINCT user), 2)",
    "SELECT k FROM t GROUP BY k HAVING TOP_K(COUNT(*), 0)",
    "SELECT k FROM t GROUP BY k HAVING TOP_K(SUM(CLAMP(x, 0, 5)), 1)",
    "SELECT k FROM t GROUP BY k HAVING TOP_K(COUNT(DISTINCT user), 99999999999999999999)",
    "SELECT k, COUNT(*) AS n FROM t GROUP BY k HAVING n > 1 ORDER BY n DESC LIMIT 2",
    "SELECT k, COUNT(*) AS n FROM t GROUP BY k ORDER BY x",
    "SELECT COUNT(*) FROM t USING SAMPLE 50%", "SELECT COUNT(*) FROM t TABLESAMPLE BERNOULLI(10)",
    "SELECT COUNT(*) FROM (SELECT * FROM t WHERE x > 0)", "EXPLAIN SELECT COUNT(*) FROM t",
    "SELECT COUNT(*) / 2 + 1 AS half FROM t", "SELECT k, COUNT(*) FROM t GROUP BY ALL",
]
WHERES = ["", "WHERE x > 1", "WHERE k = 'a'", "WHERE x IS NULL", "WHERE 1/0 > 1", "WHERE k LIKE '%'",
          "WHERE CAST(k AS INTEGER) > 1", "WHERE x IN (SELECT x FROM t)", "WHERE isnan(x)", "WHERE user = 1"]
TOKENS = ["SELECT", "FROM", "t", "GROUP", "BY", "k", ",", "(", ")", "'", '"', ";", "--", "/*", "*", "AS", "x",
          "HAVING", "ORDER", "LIMIT 1", "UNION ALL", "JOIN", "ON", "NULL", "😀", "\x00", "read_csv('x')", "$1", "?"]


@st.composite
def sql_text(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(STATEMENTS))
    group = draw(st.booleans())
    select = ", ".join(draw(st.lists(st.sampled_from(AGGS), min_size=1, max_size=3, unique=True)))
    text = (f"SELECT {'k, ' if group else ''}{select} FROM t {draw(st.sampled_from(WHERES))}"
            f"{' GROUP BY k' if group else ''}")
    words = text.split(" ")
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):     # mutations: insert, delete or replace a token
        i = draw(st.integers(0, len(words)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        token = draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=4)))
        if op == "insert":
            words.insert(i, token)
        elif words and i < len(words):
            words[i:i + 1] = [] if op == "delete" else [token]
    return " ".join(words)


def _check_sql(out: Any, query: Any, budget: Any) -> None:
    if isinstance(query, dp.Query) and query.post.sql is None:   # a selection of the released columns, renamed
        plan = query.plan(budget)
        released = {*query.node.by, *(name for p in plan.plans for name in p.output_names())}
        assert {source for _, source in query.post.columns} <= released, (query.post.columns, released)
        assert out.columns == [name for name, _ in query.post.columns], (out.columns, query.post.columns)
    elif isinstance(query, dp.Query):         # HAVING / ORDER BY / LIMIT / expressions: at most one row per group
        assert isinstance(out, pl.DataFrame)
        if query.node.keys is not None:
            assert out.height <= query.node.keys.height
        elif not query.node.by:
            assert out.height <= 1
    else:                                     # TOP_K: the key set (sorted by key), possibly short (a warning)
        assert isinstance(out, pl.DataFrame), out
        assert out.columns[0] == "k" and out.sort("k", nulls_last=False).equals(out), out


def _explain_only(sess: dp.Session, text: str, keys: Any, budget: Any) -> str | None:
    """``EXPLAIN SELECT ...``: collect returns the plan text and charges nothing (None: not such a query)."""
    try:
        query = sess.sql(text, keys=keys)
    except dp.DPFrameError:
        return None
    if not getattr(query, "explain_only", False):
        return None
    ledger = Ledgered(sess)
    try:
        out = query.collect(budget())
    except dp.DPFrameError as e:
        ledger.refused(e)
        return "refused"
    assert out.columns == ["explain"] and sess.spent() == ledger.spent and sess.history().height == ledger.rows
    return "explained"


def _fuzz_sql(text: str, keys: Any, budget: Any, backend: str) -> None:
    data = pl.DataFrame({"user": [1, 1, 2, 3, None], "k": ["a", "b", "a", None, "😀"],
                         "x": [1.0, math.nan, math.inf, None, -3.0]})
    with time_limit():
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
                          budget=dp.ApproxDP(50, Fraction(1, 1000)), backend=backend, seed=0)
        outcome = _explain_only(sess, text, keys, budget) or run_query(sess, lambda: sess.sql(text, keys=keys),
                                                                       budget, _check_sql)
        event(outcome)
        assert outcome != "failed", f"{text!r} passed validation, was charged, then failed while running"


SQL = dict(text=sql_text(), keys=st.one_of(st.none(), st.just({"k": ["a", "b", "😀"]}), st.just({"k": []}),
                                           st.just({"zz": [1]}), st.just({"k": [None, 1]})),
           budget=budgets(sane=True), backend=st.sampled_from(["polars", "duckdb"]))


@CI
@given(**SQL)
def test_fuzz_sql(**kw: Any) -> None:
    _fuzz_sql(**kw)


@pytest.mark.slow
@DEEP
@given(**SQL)
def test_fuzz_sql_deep(**kw: Any) -> None:
    _fuzz_sql(**kw)


# ----------------------------------------------------------------------------------- correctness

VALUES = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -0.0]), st.none())


@CI
@given(xs=st.lists(VALUES, min_size=1, max_size=30), keys=st.lists(st.sampled_from(["a", "b", "c"]), min_size=30,
                                                                    max_size=30),
       bounds=st.tuples(st.integers(-100, 0), st.integers(1, 100)), backend=st.sampled_from(["polars", "duckdb"]))
def test_results_are_correct_at_huge_epsilon(xs: list[Any], keys: list[str], bounds: tuple[int, int],
                                             backend: str) -> None:
    """With ε = 10⁷ per statistic the noise is far below a grid step: results equal the exact values."""
    data = pl.DataFrame({"x": pl.Series(xs, dtype=pl.Float64), "k": keys[:len(xs)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10**9), seed=1,
                      backend=backend)
    lo, hi = bounds
    out = (sess.table("t").group_by("k", keys=["a", "b", "c", "d"])
           .agg(dp.len(), dp.count("x"), dp.sum("x", bounds=bounds)).collect(dp.PureDP(3 * 10**7)))
    value = pl.col("x").fill_nan(None)
    exact = (pl.DataFrame({"k": ["a", "b", "c", "d"]})
             .join(data.group_by("k").agg(pl.len().alias("len"), value.count().alias("x_count"),
                                          value.clip(lo, hi).sum().alias("x_sum")), on="k", how="left")
             .fill_null(0).sort("k"))
    assert out["k"].to_list() == exact["k"].to_list()
    assert out["len"].to_list() == exact["len"].to_list()
    assert out["x_count"].to_list() == exact["x_count"].to_list()
    for got, want in zip(out["x_sum"].to_list(), exact["x_sum"].to_list()):
        assert abs(got - want) <= 1e-6 * max(abs(lo), hi) * len(xs) + 1e-9, (got, want)
