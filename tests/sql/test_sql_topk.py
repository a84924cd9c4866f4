"""``HAVING TOP_K(score, k)``: the same top-k query as the method chain, always a frame; bad input refused uncharged."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from dpframe_topk import TopKFailed, TopKPartial

import dpframe as dp

COUNTS = {"a": 400, "b": 300, "c": 200, "d": 20, "e": 10, "f": 5}
KEYS = sorted(COUNTS)
APPROX = dp.ApproxDP(2, 1e-6)


def _data() -> pl.DataFrame:
    rows, user = [], 0
    for city, n in COUNTS.items():
        for _ in range(n):
            rows.append((user, city, user % 7))
            rows.append((user, "a" if city != "a" else "b", user % 7))   # each user touches two cities
            user += 1
    return pl.DataFrame(rows, schema=["user", "city", "spend"], orient="row")


def _session(seed: int = 0, **kw: Any) -> dp.Session:
    return dp.Session({"v": _data()}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
                      budget=dp.ApproxDP(100, 1e-3), seed=seed, **kw)


def _plan(explained: object) -> str:
    """An explanation without its numbered row steps (a SQL ``WHERE`` and a chain's ``filter`` are the same step
    written in two syntaxes; the mechanisms, cost and notes must match)."""
    return re.sub(r"(?m)^ +\d+\. .*\n", "", str(explained))


def _collect(q: Any, budget: dp.Budget) -> tuple[pl.DataFrame, Any]:
    """A SQL top-k's frame and the outcome of its dp.TopKWarning (None when the key set was released in full)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = q.collect(budget)
    short = [w.message for w in caught if isinstance(w.message, dp.TopKWarning)]
    assert isinstance(out, pl.DataFrame) and len(short) <= 1
    return out, short[0].outcome if short else None


CASES = [
    # (SQL, method-chain twin, budget, session options)
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(DISTINCT user), NULL)",
     lambda s: s.table("v").group_by("city").top_k(k=None, score=dp.count_units()), APPROX, {}),
    # the unit renamed in a CTE is still the unit (was refused: the check read the compiled column name)
    ("WITH w AS (SELECT user AS uid, city FROM v) SELECT city FROM w GROUP BY city "
     "HAVING TOP_K(COUNT(DISTINCT uid), NULL)",
     lambda s: s.table("v").group_by("city").top_k(k=None, score=dp.count_units()), APPROX, {}),
    ("SELECT city FROM v WHERE spend >= 2 GROUP BY city HAVING TOP_K(COUNT(*), 3)",
     lambda s: s.table("v").filter(pl.col("spend") >= 2).group_by("city").top_k(k=3, score=dp.len()), APPROX, {}),
    ("SELECT city, SUM(CLAMP(spend, 0, 6)) FROM v GROUP BY city "
     "HAVING TOP_K(SUM(CLAMP(spend, 0, 6)), 2, method := 'limited_domain')",
     lambda s: s.table("v").group_by("city").top_k(k=2, score=dp.sum("spend", bounds=(0, 6)),
                                                  method="limited_domain", release_scores=True), APPROX, {}),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(DISTINCT user), 3, method := 'gumbel')",
     lambda s: s.table("v").group_by("city", keys=KEYS).top_k(k=3, method="gumbel"), dp.PureDP(3),
     {"public_keys": {"v.city": KEYS}}),
    ("SELECT city, COUNT(DISTINCT user) FROM v GROUP BY city HAVING TOP_K(COUNT(DISTINCT user), 2, method := 'tct')",
     lambda s: s.table("v").group_by("city", keys=KEYS).top_k(k=2, method="tct", release_scores=True),
     dp.ApproxDP(8, 1e-6), {"public_keys": {"v.city": KEYS}}),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), NULL, k_max := 4, ptr := 'laplace', "
     "delta_t := 1e-7, lam := 2)",
     lambda s: s.table("v").group_by("city").top_k(k=None, score=dp.len(), k_max=4, ptr="laplace", delta_t=1e-7,
                                                  lam=2), APPROX, {}),
]


@pytest.mark.parametrize(("sql", "chain", "budget", "options"), CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_same_query_as_the_method_chain(sql: str, chain: Callable[[dp.Session], Any], budget: dp.Budget,
                                         options: dict[str, Any], seed: int) -> None:
    s1, s2 = _session(seed, **options), _session(seed, **options)
    q_sql, q_chain = s1.sql(sql), chain(s2)
    assert q_sql.cost(budget) == q_chain.cost(budget)
    assert _plan(q_chain.explain(budget)) in _plan(q_sql.explain(budget))
    (out_sql, outcome), out_chain = _collect(q_sql, budget), q_chain.collect(budget)
    assert s1.spent() == s2.spent() == s1.accountant.charge(budget)
    assert out_sql.columns[0] == "city"
    if isinstance(out_chain, pl.DataFrame):
        assert outcome is None and out_sql.to_dicts() == out_chain.to_dicts()
    else:   # the same outcome (its reason spelled in SQL); the frame holds what was released
        assert type(outcome) is type(out_chain) and (outcome.k, outcome.method) == (out_chain.k, out_chain.method)
        assert out_sql.rows() == (out_chain.keys.rows() if isinstance(out_chain, TopKPartial) else [])


def test_duckdb_backend_and_output_names() -> None:
    s1, s2 = _session(3), _session(3)
    q = s1.sql("SELECT city AS place, COUNT(DISTINCT user) AS users FROM v GROUP BY city "
               "HAVING TOP_K(COUNT(DISTINCT user), 3)", backend="duckdb")
    assert "backend: duckdb" in q.explain(APPROX)
    out = q.collect(APPROX)
    twin = s2.table("v").group_by("city").top_k(k=3, release_scores=True).collect(APPROX)
    assert out.columns == ["place", "users"]
    assert out.rows() == twin.rows()
    assert out["place"].to_list() == ["a", "b", "c"]


def test_multi_key_group_by_and_failed_result() -> None:
    sess = _session(5)
    out, failed = _collect(sess.sql("SELECT city, spend FROM v GROUP BY city, spend HAVING TOP_K(COUNT(*), NULL)"),
                           dp.ApproxDP(0.01, 1e-6))
    assert isinstance(failed, TopKFailed) and not failed and out.height == 0
    assert sess.spent() == dp.ApproxDP(0.01, 1e-6)
    # (city, spend) groups over all spends have no stable top-2 (the a-groups are within a few rows of
    # each other): a fixed k is then a typed failure (an empty frame and a warning), never "no keys".
    out, failed = _collect(sess.sql("SELECT spend, city FROM v GROUP BY city, spend HAVING TOP_K(COUNT(*), 2)"),
                           APPROX)
    assert isinstance(failed, TopKFailed) and not failed and out.height == 0
    big = dp.ApproxDP(8, 1e-6)
    out = sess.sql("SELECT spend, city FROM v WHERE spend = 0 GROUP BY city, spend HAVING TOP_K(COUNT(*), 2)") \
        .collect(big)
    twin_session = _session(5)
    twin = twin_session.table("v").filter(pl.col("spend") == 0).group_by("city", "spend").top_k(k=2, score=dp.len())
    _collect(twin_session.sql("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), NULL)"),
             dp.ApproxDP(0.01, 1e-6))                               # the same draws before it
    _collect(twin_session.sql("SELECT spend, city FROM v GROUP BY city, spend HAVING TOP_K(COUNT(*), 2)"), APPROX)
    assert out.columns == ["spend", "city"]
    assert out.select("city", "spend").rows() == twin.collect(big).rows() == [("a", 0), ("b", 0)]


def test_explain_select_charges_nothing() -> None:
    sess = _session()
    before = sess.spent()
    out = sess.sql("EXPLAIN SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2)").collect(APPROX)
    assert "top-k" in out["explain"][0] and "sql: SELECT city" in out["explain"][0]
    assert sess.spent() == before


BAD = [
    ("SELECT city FROM v WHERE TOP_K(COUNT(*), 2) GROUP BY city", "whole HAVING clause"),
    ("SELECT TOP_K(COUNT(*), 2) FROM v GROUP BY city", "whole HAVING clause"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2) AND COUNT(*) > 3", "whole HAVING clause"),
    ("SELECT COUNT(*) FROM v HAVING TOP_K(COUNT(*), 2)", "no GROUP BY"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2) ORDER BY city", "ORDER BY"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2) LIMIT 1", "ORDER BY / LIMIT"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*))", "score aggregate and k"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(city, 2)", "score aggregate and k"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2.5)", "whole-number literal"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), spend)", "whole-number literal"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 0)", "≥ 1"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, mode := 'x')", "no option 'mode'"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, method := 3)", "string literal"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, method := 'best')", "unknown method"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(DISTINCT city), 2)", "privacy-unit column"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(SUM(DISTINCT spend), 2)", "not a TOP_K score"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(AVG(CLAMP(spend, 0, 5)), 2)", "not a score top-k can rank"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(SUM(spend), 2)", "needs clipping bounds"),
    ("SELECT city, COUNT(*) FROM v GROUP BY city HAVING TOP_K(COUNT(DISTINCT user), 2)", "optionally the TOP_K"),
    ("SELECT upper(city) FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2)", "not expressions"),
    ("SELECT spend FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2)", "raw column"),
    ("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, method := 'gumbel')", "public key domain"),
]


@pytest.mark.parametrize(("sql", "message"), BAD)
def test_bad_input_is_refused_uncharged(sql: str, message: str) -> None:
    sess = _session()
    before = sess.spent()
    with pytest.raises(dp.DPFrameError, match=message):
        sess.sql(sql).collect(APPROX)
    assert sess.spent() == before


def test_budget_and_backend_refusals_are_uncharged() -> None:
    sess = _session()
    before = sess.spent()
    stable = sess.sql("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), NULL)")
    with pytest.raises(dp.BudgetError, match="needs δ > 0"):
        stable.collect(dp.PureDP(1))
    duck_only = sess.sql("SELECT city FROM v WHERE spend % 2 = 0 GROUP BY city HAVING TOP_K(COUNT(*), NULL)")
    assert "REFUSED on this backend" in duck_only.explain(APPROX)
    with pytest.raises(dp.PlanError, match="backend='duckdb'"):
        duck_only.collect(APPROX)
    assert sess.spent() == before
    _collect(sess.sql("SELECT city FROM v WHERE spend % 2 = 0 GROUP BY city HAVING TOP_K(COUNT(*), NULL)",
                      backend="duckdb"), APPROX)


def test_history_records_the_sql_text() -> None:
    sess = _session()
    q = sess.sql("SELECT city FROM v GROUP BY city   HAVING TOP_K(COUNT(*), NULL)")
    _collect(q, APPROX)
    assert sess.history()["query"].to_list() == ["SQL: SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), NULL)"]
    assert repr(q) == "<dp.TopKQuery SQL: SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), NULL)>"
    assert q.k is None and q.method == "stable"        # the family query's attributes read through


def _short_sessions(seed: int) -> tuple[dp.Session, dp.Session]:
    # A clear top-2 ("a", "b") but k=4 over keys from the data: StableTopK finds 2, limited domain cannot add
    # keys nobody has: a partial result (fixed seeds: the same draws in both sessions).
    rows = [(u, "a") for u in range(300)] + [(1000 + u, "b") for u in range(250)]
    data = pl.DataFrame(rows, schema=["u", "k"], orient="row")
    return tuple(dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(100, 1e-3), seed=seed)
                 for _ in range(2))    # type: ignore[return-value]


@pytest.mark.parametrize(("sql", "budget", "kind", "rows"), [
    ("SELECT k AS key, COUNT(DISTINCT u) AS n FROM v GROUP BY k HAVING TOP_K(COUNT(DISTINCT u), 4)",
     dp.ApproxDP(8, 1e-6), TopKPartial, 2),
    ("SELECT k AS key, COUNT(DISTINCT u) AS n FROM v GROUP BY k HAVING TOP_K(COUNT(DISTINCT u), NULL)",
     dp.ApproxDP(0.01, 1e-6), TopKFailed, 0),
])
def test_a_short_top_k_is_a_frame_and_a_warning(sql: str, budget: dp.Budget, kind: type, rows: int) -> None:
    """What a SQL user gets: a frame with the full result's columns and dtypes, the released keys (possibly
    none), a dp.TopKWarning whose outcome is the method chain's (reason spelled in SQL); only the cost charged."""
    s_sql, s_chain = _short_sessions(2)
    q = s_sql.sql(sql)
    with pytest.warns(dp.TopKWarning, match="TOP_K released") as caught:
        out = q.collect(budget)
    chain = s_chain.table("v").group_by("k").top_k(k=q.k, release_scores=True).collect(budget)
    warned = caught[0].message
    assert isinstance(warned, dp.TopKWarning) and isinstance(warned.outcome, TopKPartial | TopKFailed)
    outcome = warned.outcome
    assert type(outcome) is type(chain) is kind and not outcome
    assert out.schema == pl.Schema({"key": pl.String, "n": pl.Int64}) and out.height == rows
    assert s_sql.spent() == s_chain.spent() == s_sql.accountant.charge(budget) == q.cost(budget)
    if isinstance(outcome, TopKPartial):
        assert isinstance(chain, TopKPartial) and outcome.keys.equals(out) and out.rows() == chain.keys.rows()
    # The same reason (released facts: counts of keys, which test failed), then what to try, in SQL words:
    why = chain.reason.split("; try ")[0]
    assert outcome.reason.startswith(why + "; try ") and "TOP_K(score, " in outcome.reason
    assert "top_k(" not in outcome.reason and "k=None" not in outcome.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.TopKWarning)    # a strict caller gets an exception carrying the outcome
        with pytest.raises(dp.TopKWarning) as raised:
            q.collect(budget)
    assert isinstance(raised.value.outcome, TopKFailed)
    assert "sql result: always a frame" in q.explain(budget)


def test_sql_top_k_gives_a_replacement_family_the_protocol_arguments_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's top-k family (``replaces="top_k"``) gets the protocol's arguments only, built under
    ``dpframe.family.written_in_sql()`` (how the built-in words its fixes in SQL; not an argument)."""
    from dpframe.family import written_in_sql
    from dpframe.plugin import PluginHost

    built_in_sql: list[bool] = []

    class Replacement:
        name, attach = "top_k", "group_by"

        def build(self, source: object, /, *, k: object, score: object, method: object, release_scores: object,
                  k_max: object, lam: object, ptr: object, delta_t: object) -> None:
            built_in_sql.append(written_in_sql())      # its signature takes the protocol's arguments only
            raise dp.PlanError("the replacement stops here", argument="k", fix="none")

    sess = _session()
    family = PluginHost.family
    monkeypatch.setattr(PluginHost, "family",
                        lambda host, name: Replacement() if name == "top_k" else family(host, name))
    with pytest.raises(dp.PlanError, match="the replacement stops here"):
        sess.sql("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2)")
    assert built_in_sql == [True]
    assert not written_in_sql()         # only while SQL builds it
