"""Review 34b: composed SQL queries on neighbouring datasets, found by the SQL composed exception-oracle fuzzer.

``test_sql_composed_oracle.py`` runs random ``sess.sql(...)`` queries (derived expressions in WHERE, GROUP BY
keys and aggregate arguments, CTEs, subqueries, public joins, HAVING/ORDER BY/LIMIT, TOP_K, ``ci=``) on D and
on D′ = D plus one unit of adversarial values, on the DuckDB and Polars backends, and compares what the analyst
sees; it also flags a query charged, then failed, whatever the data. Each test is a defect it led to, kept with
its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp

from .composed import base

_OUTPUTS = [
    "SELECT CAST(CAST(COUNT(*) AS VARCHAR) || 'x' AS INTEGER) AS n FROM t",
    "SELECT COUNT(*) AS n FROM t HAVING CAST('a' || COUNT(*) AS INTEGER) > 0",
    "SELECT COUNT(*) AS n FROM t ORDER BY CAST(COUNT(*) || '-' || COUNT(*) AS DATE)",
    "SELECT COUNT(*) AS n, error('no ' || COUNT(*)) AS e FROM t",
    "SELECT SUM(CLAMP(x, 0, 1)) AS s, repeat('x', 100000000000) AS e FROM t",
    "SELECT c, COUNT(*) AS n FROM t GROUP BY c HAVING CAST(c AS INTEGER) > 0",         # c has public keys a, b, c
    "SELECT year(d) AS y, COUNT(*) AS n FROM t GROUP BY y ORDER BY CAST(y || 'x' AS INTEGER)",
]


def _session(backend: str) -> dp.Session:
    return dp.Session({"t": base()}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 1e-3),
                      backend=backend, seed=0, public_keys={"t.c": ["a", "b", "c"]})


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@pytest.mark.parametrize("text", _OUTPUTS)
def test_an_output_expression_that_fails_on_every_release_is_refused_when_built(text: str, backend: str) -> None:
    """Post-processing of the released values was checked on an empty frame only, where no expression runs: an
    output, HAVING or ORDER BY expression that fails on any row (a string that never converts, ``error()``, a
    string too long to build), or on every public key (all are released), was accepted, charged, then failed —
    whatever the data. It is now checked on released rows (each aggregate 1, then 1000; the public keys or a NULL
    key) and refused before anything is charged."""
    sess = _session(backend)
    keys = {"y": [2020, 2021]} if "year(d)" in text else None
    with pytest.raises(dp.PlanError, match="the output expressions cannot be computed"):
        sess.sql(text, keys=keys)
    assert sess.history().height == 0


@pytest.mark.parametrize("text", [
    "SELECT s AS k, COUNT(*) AS n FROM t GROUP BY k HAVING TRY_CAST(k AS INTEGER) > 0",
    "SELECT year(d) AS y, COUNT(*) AS n FROM t GROUP BY y HAVING CAST(y AS VARCHAR) LIKE '20%'",
    "SELECT CAST(SUM(CLAMP(x, 0, 1)) AS TINYINT) AS s, COUNT(*) / 0 AS r FROM t",
    "SELECT COUNT(*) AS n, ln(COUNT(*) - 1) AS l FROM t",                  # fails at 1 only
])
def test_an_output_expression_that_can_run_is_still_accepted(text: str) -> None:
    """The check is not over-eager: expressions that run on the released rows pass (private keys are checked as
    NULL, and an expression that fails at one stand-in value only is left to the run: a failure there is
    post-processing of released values)."""
    sess = _session("duckdb")
    out = sess.sql(text).collect(dp.ApproxDP(1, 1e-6))
    assert isinstance(out, pl.DataFrame)
    assert sess.history()["status"].to_list() == ["committed"]


@pytest.mark.parametrize("text", [
    "SELECT year(d) AS y, COUNT(*) AS n FROM t GROUP BY year(d)",
    "SELECT i AS y, COUNT(*) AS n FROM t GROUP BY i",
])
def test_keys_name_a_group_key_by_its_output_name_when_group_by_repeats_the_expression(text: str) -> None:
    """``keys=`` names a key by its output name (docs/sql.md): ``SELECT year(d) AS y ... GROUP BY year(d)``
    releases a column ``y``, but ``keys={'y': ...}`` was refused ("keys= names ['y'], which the query does not
    GROUP BY") unless the GROUP BY wrote the alias or an ordinal — the fuzzer met it in one query in twenty."""
    out = _session("duckdb").sql(text, keys={"y": [2020, 2021]}).collect(dp.PureDP(1))
    assert out["y"].to_list() == [2020, 2021]
