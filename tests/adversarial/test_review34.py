"""Review 34 (lead): privacy-unit values that two backends would tell apart differently; a closed session.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses. The privacy proof
needs every step to agree on which rows form one unit (docs/guarantees.md, "unit equality"); a value the
DuckDB backend cannot hold is converted on the way in, and two units converted to one value are one unit
there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from fractions import Fraction

import polars as pl
import pytest

import dpframe as dp


def _struct_units() -> pl.DataFrame:
    """Two units that differ only beyond 38 digits, inside a struct: DuckDB would receive ``{a: NULL}`` twice."""
    a = pl.Series([2**127 - 1, 2**127 - 1, 2**127 - 2, 2**127 - 2], dtype=pl.UInt128)
    return pl.DataFrame({"a": a, "x": [-1.0, -1.0, 1.0, 1.0]}).select(pl.struct("a").alias("u"), "x")


@pytest.mark.parametrize("dtype", [pl.Datetime("ms"), pl.List(pl.Datetime("ms", "UTC")),
                                   pl.Struct({"a": pl.UInt128()}), pl.Array(pl.Int128(), 2)],
                         ids=["datetime-ms", "list-datetime-ms", "struct-uint128", "array-int128"])
def test_a_unit_that_duckdb_cannot_hold_whole_is_refused_by_its_type(dtype: pl.DataType) -> None:
    """Attack: a unit column whose type holds a 128-bit integer or a millisecond datetime *inside* a struct,
    list or array. Review 33e refused a plain 128-bit unit on DuckDB; a nested one was accepted. DuckDB is
    handed 128-bit integers as ``DECIMAL(38, 0)`` and datetimes in microseconds by a non-strict cast, so the
    two units of :func:`_struct_units` both arrived as ``{a: NULL}``: one unit of four rows. With
    ``max_rows=2`` that unit kept two rows chosen among both units' rows, so adding the second unit could
    *swap* the first one's kept rows (a sum over ``(-1, 1)`` moved by up to 4, where one unit's
    sensitivity is 2). A plain millisecond datetime beyond the microsecond range lost its rows (NULL unit).
    Fix: the type decides (`handover.lossless`): a `SchemaError` naming `privacy_unit` when the session is
    created, nothing read, nothing charged."""
    one = pl.DataFrame({"u": pl.Series([None], dtype=dtype), "x": [1.0]})
    with pytest.raises(dp.SchemaError) as refused:
        dp.Session({"t": one}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(1),
                   backend="duckdb")
    assert refused.value.argument == "privacy_unit" and "String" in (refused.value.fix or "")


def test_the_polars_backend_keeps_such_units_apart() -> None:
    """The same units on the Polars backend are two units: four rows, two kept each (``max_rows=2``)."""
    sess = dp.Session({"t": _struct_units()}, privacy_unit=dp.PrivacyUnit("u", max_rows=2),
                      budget=dp.PureDP(10**6), seed=7)
    assert sess.table("t").agg(n=dp.len()).collect(dp.PureDP(10**5)).item() == 4
    with pytest.raises(dp.SchemaError) as later:
        sess.sql("SELECT COUNT(*) AS n FROM t", backend="duckdb")
    assert later.value.argument == "privacy_unit" and sess.spent() == dp.PureDP(10**5)


def test_units_duckdb_holds_whole_stay_accepted() -> None:
    """Microsecond datetimes, 64-bit integers and structs of them reach DuckDB as themselves: accepted."""
    when = [dt.datetime(2020, 1, 1), dt.datetime(2021, 1, 1)]
    data = pl.DataFrame({"d": when, "i": [1, 2]}).select(pl.struct("d", "i").alias("u"), pl.lit(1.0).alias("x"))
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10**6),
                      backend="duckdb", seed=7)
    assert sess.table("t").agg(n=dp.len()).collect(dp.PureDP(10**5)).item() == 2


@pytest.mark.parametrize("kind", ["sparse_vector", "target_charging", "individual_filter"])
def test_a_stream_opened_before_the_session_closed_reads_nothing_after(kind: str) -> None:
    """Attack (review 34c): open a sparse vector, a target-charging channel or an individual filter, then
    ``sess.close()``. Each answered every later call (within its reservation, so no budget was overspent),
    although a closed session promises to read nothing (``Session.closed``); the filter even released a
    fresh sum. Fix: every private read, and a stream's or filter's call before it runs, asks the release
    context (`ReleaseContext.check_readable`): a `LedgerError` naming the session, nothing read."""
    budget = dp.ZCDP(100, Fraction(1, 10**5)) if kind == "individual_filter" else dp.ApproxDP(100, 1e-5)
    data = pl.DataFrame({"u": range(50), "x": [float(i % 11) for i in range(50)]})
    s = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=0)
    q = s.table("t").agg(dp.len())
    call: Callable[[], object]
    if kind == "sparse_vector":
        sv = s.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1))
        call = lambda: sv.test(q)  # noqa: E731
    elif kind == "target_charging":
        ch = s.target_charging(epsilon=1, max_hits=2, delta=1e-6).__enter__()
        call = lambda: ch.test(q, threshold=10**6)  # noqa: E731
    else:
        f = s.individual_filter(dp.ZCDP(1))
        call = lambda: f.collect(s.table("t").agg(dp.sum("x", bounds=(0, 10))), budget=dp.ZCDP(0.01))  # noqa: E731
    s.close()
    with pytest.raises(dp.LedgerError, match="closed"):
        call()


@pytest.mark.parametrize("budget", [dp.PureDP(1), dp.ZCDP(Fraction(1, 2)), dp.ApproxDP(1, Fraction(1, 10**6))],
                         ids=["pure", "zcdp", "approx"])
def test_the_session_total_handed_out_is_a_copy(budget: dp.Budget) -> None:
    """Attack (review 34c): ``object.__setattr__`` — Python's documented way around a frozen dataclass — on
    ``sess.accountant.total``. It was the accountant's own object, so raising its ε (or ρ) raised the total
    the ledger checks charges against: three more queries ran on a spent PureDP(1) session. Fix: ``total``
    hands out a copy; the accountant checks its own. (Python's reflection on the engine's own objects is
    patching the engine, which docs/guarantees.md leaves to trusted code; this route was one object away.)"""
    data = pl.DataFrame({"x": [1.0] * 10})
    s = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=budget)
    s.table("t").agg(dp.len()).collect(budget)
    total = s.accountant.total
    field = {"pure": "epsilon", "zcdp": "rho", "approx": "epsilon"}[budget.notion]
    object.__setattr__(total, field, 10**6)
    assert s.accountant.total == budget
    with pytest.raises(dp.BudgetExceededError):
        s.table("t").agg(dp.len()).collect(budget)


@pytest.mark.parametrize("sql", ["SELECT to_days(COUNT(*)) AS n FROM t",
                                 "SELECT [to_days(COUNT(*))] AS n FROM t"], ids=["interval", "interval-list"])
def test_an_interval_output_is_refused_in_words(sql: str) -> None:
    """Review 34b's note: an INTERVAL among a SQL query's outputs was refused (free) with Polars' own import
    error, which names an unstable environment flag (``POLARS_IMPORT_INTERVAL_AS_STRUCT``) as the fix. It is
    now a PlanError naming the output and what to return instead, nothing charged."""
    s = dp.Session({"t": pl.DataFrame({"u": range(20)})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    with pytest.raises(dp.PlanError, match="'n' is an INTERVAL") as refused:
        s.sql(sql)
    assert refused.value.argument == "sql" and "POLARS_IMPORT" not in str(refused.value)
    assert s.history().height == 0
