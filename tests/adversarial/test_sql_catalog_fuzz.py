"""Guard: every DuckDB scalar call that raises an error ``TRY(...)`` does not catch is refused when the query is built.

Review 32 found such calls by running the DuckDB catalog under ``TRY`` (:mod:`tests.adversarial.catalog_fuzz`);
dpframe refuses them when the query is built (:mod:`dpframe.sql.uncaught`). The slow test reruns that fuzz
on the installed DuckDB, so a DuckDB upgrade that adds such a function (or a value that makes an old one fail)
fails the slow suite until the tables cover it. For each finding it builds these attacks, as an analyst would:

* the failing arguments, one at a time and all together, read a column: ``f(..., CASE WHEN x > 100 THEN
  <failing value> END, ...)``, NULL on every row but one unit's;
* the call behind a private condition: ``CASE WHEN x > 100 THEN f(<failing values>) END``.

Each must be refused when ``sess.sql`` builds it (a ``PlanError`` or ``SchemaError``, nothing charged), or, if
it is accepted, run on D′ (one unit with ``x = 1000``) on the DuckDB backend without failing.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.errors import PlanError, SchemaError
from tests.adversarial.catalog_fuzz import VALUES, Finding, call_sql, connect, run_isolated

_D_PLUS = pl.DataFrame({"u": range(41), "x": [1] * 40 + [1000]})


def _attacks(found: Finding) -> list[str]:
    """The failing call with each argument in turn, then all of them, read from one unit's row; then behind a
    private condition."""
    values = found.values
    plain = [i for i, v in enumerate(values) if not v.startswith("lambda ")]
    private = [[i] for i in plain] + ([plain] if len(plain) > 1 else [])
    where = [call_sql(found.name, tuple(f"CASE WHEN x > 100 THEN {v} END" if i in chosen else v
                                        for i, v in enumerate(values))) + " IS NULL" for chosen in private]
    where.append(f"CASE WHEN x > 100 THEN {call_sql(found.name, values)} END IS NULL")
    return [f"SELECT COUNT(*) AS n FROM t WHERE {w}" for w in where]


def _leak(found: Finding, sql: str) -> str | None:
    """None if dpframe refuses ``sql`` at build, free, or runs it on D′; else what went wrong."""
    sess = dp.Session({"t": _D_PLUS}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0,
                      backend="duckdb")
    try:
        frame = sess.sql(sql)
    except (PlanError, SchemaError):
        return None if sess.history().height == 0 else f"charged while refusing: {sql}"
    except Exception as e:  # noqa: BLE001 - any other exception is a finding of the guard
        return f"{type(e).__name__} (not a dpframe error) building {sql}: {e}"
    try:
        frame.collect(dp.PureDP(1))
    except Exception as e:  # noqa: BLE001
        return (f"{found.name}{found.params} accepted, then failed on D′ after its charge "
                f"({type(e).__name__}: {str(e).splitlines()[0][:160]}): {sql}")
    return None


def test_every_value_of_the_fuzz_evaluates() -> None:
    """The fuzz computes each value outside ``TRY``: one that fails to evaluate would be a false finding."""
    con = connect()
    bad = []
    for type_, values in VALUES.items():
        for v in values:
            if not v.startswith("lambda "):
                try:
                    con.execute(f"SELECT ({v}) IS NULL FROM range(2)").fetchall()
                except Exception as e:  # noqa: BLE001
                    bad.append(f"{type_}: {v} ({type(e).__name__})")
    assert not bad


@pytest.mark.parametrize("found", [
    Finding("like_escape", ("VARCHAR",) * 3, ("'a'", "'a'", "'xy'"), "", ""),
    Finding("repeat", ("VARCHAR", "BIGINT"), ("'a'", "9223372036854775807"), "", ""),
    Finding("weekday", ("INTERVAL",), ("INTERVAL 1 DAY",), "", ""),
    Finding("array_length", ("ANY[]", "BIGINT"), ("[1, 2]", "0"), "", ""),
], ids=lambda f: f.name)
def test_known_findings_are_refused(found: Finding) -> None:
    """A fixed sample of the fuzz's findings, each attack refused at build (the slow test reruns the catalog)."""
    assert [leak for sql in _attacks(found) if (leak := _leak(found, sql))] == []


def test_a_safe_call_reading_a_column_is_accepted() -> None:
    """The attacks' shape alone is not refused: a call that never fails runs on D′ (the guard is not vacuous)."""
    sess = dp.Session({"t": _D_PLUS}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0,
                      backend="duckdb")
    for sql in _attacks(Finding("lower", ("VARCHAR",), ("'A'",), "", "")):
        sess.sql(sql).collect(dp.PureDP(1))
    assert sess.history()["status"].to_list() == ["committed", "committed"]


@pytest.mark.slow
def test_every_catalog_call_that_try_cannot_save_is_refused_when_built() -> None:
    """Every deterministic scalar signature of the installed DuckDB, on adversarial values of its parameter types
    (generic ones, lists, maps and structs included) and every scalar macro, in a child process with a capped
    address space; each failure ``TRY`` lets through is refused at build. About two minutes on two cores."""
    found = run_isolated()
    names = {f.name for f in found}
    assert {"like_escape", "timezone", "weekday", "repeat", "array_length"} <= names, names
    leaks = [leak for f in found for sql in _attacks(f) if (leak := _leak(f, sql)) is not None]
    assert not leaks, "\n".join(leaks)
