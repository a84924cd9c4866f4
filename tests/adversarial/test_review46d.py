"""Review 46d: SQL ``COUNT(DISTINCT ...)`` (count_units / count_distinct) under an adversarial analyst."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp

N = 300
DATA = pl.DataFrame({"u": [i // 3 for i in range(N)], "g": ["a", "b", "c"] * (N // 3), "x": [i % 5 for i in range(N)]})


def session() -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.PureDP(10), seed=0)


@pytest.mark.parametrize("inner", ["u", "x", "(u)", "u + 0"])
@pytest.mark.parametrize("clause", ["FILTER (WHERE x > 2)", ""])
def test_count_distinct_with_filter_or_order_is_refused_free(inner: str, clause: str) -> None:
    """COUNT(DISTINCT ...) FILTER (WHERE ...) / ORDER BY inside: refused before any charge, as for every other
    aggregate (the FILTER was silently dropped: COUNT(DISTINCT u) FILTER (WHERE x > 2) released all users)."""
    sess = session()
    call = f"COUNT(DISTINCT {inner} ORDER BY {inner.strip('()')})" if not clause else \
        f"COUNT(DISTINCT {inner}) {clause}"
    with pytest.raises(dp.PlanError, match="FILTER|ORDER BY inside") as caught:
        sess.sql(f"SELECT g, {call} AS c FROM t GROUP BY g", keys={"g": ["a", "b", "c"]}).collect(dp.PureDP(1))
    assert caught.value.fix
    assert sess.history().height == 0


PUBLIC = pl.DataFrame({"g": ["a", "b", "c"], "u": [7, 7, 8]})      # named like the unit, one value per g


@pytest.mark.parametrize("query", [
    "SELECT t.g, COUNT(DISTINCT p.u) AS c FROM t JOIN p ON t.g = p.g GROUP BY t.g",
    "SELECT t.g, COUNT(DISTINCT p.u) AS c FROM t JOIN p USING (g) GROUP BY t.g",
    'SELECT t.g, COUNT(DISTINCT "P"."U") AS c FROM t JOIN p ON t.g = p.g GROUP BY t.g',
    "WITH j AS (SELECT t.g, p.u AS w FROM t JOIN p ON t.g = p.g) SELECT g, COUNT(DISTINCT w) AS c FROM j GROUP BY g",
])
def test_a_public_column_named_like_the_unit_is_counted_as_distinct_values(query: str) -> None:
    """COUNT(DISTINCT p.u) of a public table's ``u`` counts its distinct values (1 per group), not the privacy
    units (100 per group). Held: made to fail by dropping both the public and the private-table checks of the
    unit detection (compile.Compiler.measures / is_unit)."""
    sess = dp.Session({"t": DATA}, public_tables={"p": PUBLIC}, privacy_unit=dp.PrivacyUnit("u", max_rows=3),
                      budget=dp.PureDP(1e5), seed=0)
    out = sess.sql(query, keys={"g": ["a", "b", "c"]}).collect(dp.PureDP(1e4)).sort("g")
    assert out["c"].to_list() == [1, 1, 1]


def test_padded_tool_calls_and_top_k_releases_wait_a_whole_period(padded_holds: Any) -> None:
    """With pad, a sparse vector's test (a tool's use) and a TOP_K release (collect) leave at least pad after
    their request; a schema request (reads no row) does not wait. Held: made to fail by PADDED = ("collect",).

    Whether a request waits is read from the server's holds (``padded_holds``), not from its time: a slow machine
    may take a second to answer a schema request."""
    import secrets
    import time

    key, pad = secrets.token_bytes(32), 1.0
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.ApproxDP(10, 1e-5), seed=0)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key, pad=pad).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        sv = remote.sparse_vector(5, 1, dp.PureDP(1))
        took, held = {}, {}
        for name, ask in (("test", lambda: sv.test(remote.table("t").agg(dp.len()))),
                          ("top_k", lambda: remote.sql("SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(DISTINCT u), 2)")
                           .collect(dp.ApproxDP(1, 1e-6))),
                          ("schema", lambda: remote.schema("t"))):
            start, holds = time.monotonic(), len(padded_holds)
            ask()
            took[name], held[name] = time.monotonic() - start, padded_holds[holds:]
    assert took["test"] >= pad and took["top_k"] >= pad, took
    assert [len(held[name]) for name in ("test", "top_k", "schema")] == [1, 1, 0], held
    assert all(hold.period() is not None for hold in padded_holds), padded_holds
