"""SQL functions whose value is the query's, not the row's: the transaction id, the clock (stop 29 review).

The finding: DuckDB marks ``txid_current()``, ``now()``, ``today()``, ``get_current_time()`` ... as
*consistent within a query*, not volatile, so the SQL allow-list let them into row-level expressions. But
the DuckDB backend runs several queries for one statistics request (the bounding candidates, a re-hash
of copies only where a unit over ``max_rows`` has copies, the exact fallback only for some units, then the
statistics), and the row filter is evaluated again in each. So ``WHERE txid_current() % 2 = 1`` counted
every row or none depending on how many queries bounding had run — on the data: one person with two
equal rows (D′) turned a count of 0 on D into 200 on D′, for any ε. ``now()`` would let the time bounding
took decide the rows the same way. They are now refused when the query is built, like ``random()``.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp


def _session(extra: bool) -> dp.Session:
    """D (200 people, one row each) or D′: one more person, with two equal rows (a copy to re-hash)."""
    users = list(range(200)) + ([999, 999] if extra else [])
    return dp.Session({"t": pl.DataFrame({"user": users, "g": ["a"] * len(users)})},
                      privacy_unit=dp.PrivacyUnit("user", max_rows=1), budget=dp.PureDP(10), backend="duckdb",
                      seed=1)


def test_the_transaction_id_cannot_tell_neighbours_apart() -> None:
    """The attack: before the fix the two counts were 0 and 200 (D′ re-hashes its copy: one query more)."""
    for parity in (0, 1):
        outcomes = []
        for extra in (False, True):
            sess = _session(extra)
            before = sess.spent()
            try:
                outcomes.append(sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE txid_current() % 2 = {parity}")
                                .collect(dp.PureDP(1))["n"][0] > 100)
            except dp.PlanError as e:
                outcomes.append(str(e))
                assert sess.spent() == before
        assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("expression", [
    "txid_current() % 2 = 0", "epoch_ms(now()) % 2 = 0", "today() > DATE '2000-01-01'",
    "current_date() > DATE '2000-01-01'", "epoch_us(get_current_time()) % 2 = 0",
    "epoch_ms(get_current_timestamp()) % 2 = 0", "transaction_timestamp() IS NULL",
    "current_localtimestamp() IS NULL", "current_localtime() IS NULL", "age(TIMESTAMPTZ '2000-01-01') IS NULL"])
def test_functions_of_the_query_not_the_row_are_refused_when_built(expression: str) -> None:
    sess = _session(False)
    before = sess.spent()
    with pytest.raises(dp.PlanError, match="not the row's"):
        sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE {expression}")
    assert sess.spent() == before and sess.history().height == 0


@pytest.mark.parametrize("keyword", ["CURRENT_DATE", "CURRENT_TIMESTAMP", "LOCALTIMESTAMP", "CURRENT_TIME"])
def test_the_keyword_forms_are_refused_too(keyword: str) -> None:
    """(Read as column names: no such column.)"""
    with pytest.raises(dp.DPFrameError, match=keyword):
        _session(False).sql(f"SELECT COUNT(*) AS n FROM t WHERE {keyword} IS NULL")


def test_age_between_two_timestamps_is_still_allowed() -> None:
    sess = _session(False)
    out = sess.sql("SELECT COUNT(*) AS n FROM t WHERE age(TIMESTAMP '2001-01-01', TIMESTAMP '2000-01-01') "
                   "> INTERVAL 1 DAY").collect(dp.PureDP(1))
    assert out.height == 1
