"""Review 54d: a fresh red team of the DuckDB and Spark backends (same law as Polars, no data-dependent failure).

**A decimal stored beyond its precision failed Spark after the charge, or made it refuse to start.** A Parquet
``DECIMAL(3, 1)`` column stored in an INT32 may hold ``12345`` (1234.5, five digits): Polars, DuckDB (which
reads it whole where the storage is no wider than its own, ``DuckDBBackend._narrowed``) and Spark's reader all
read it, and Spark's registration check (one job hashing every value) passed. But Spark holds it as an
unchecked ``DECIMAL(3, 1)``, and every step that hands the column over to Arrow (a row-level step run through
Polars on the executors, ``toArrow``) failed on it ("BigDecimal precision cannot be greater than that in the
Arrow vector: 5 > 3"): ``filter(pl.col("d") > 100).agg(dp.len())`` was charged, then failed on D and not on D′
(an oracle: a native filter placed first decides whether the row reaches that step), and Spark's executor
printed the value on standard error. A frame in memory holding such a value (``pl.from_arrow`` of an Arrow
``decimal128(3, 1)`` array cast unsafely) could not be shipped at all: the session refused to start with a raw
``pyspark`` ``ArithmeticException`` quoting the value, and on a Polars session ``sess.sql(..., backend="spark")``
answered "backend 'spark' could not be created (ArithmeticException)" on D and ran on D′: a free oracle.
Spark now holds every decimal column as ``DECIMAL(38, s)`` (its scale, the widest precision: decided by the
type, never the values), which holds every value the other backends hold, and hands group keys back to their
declared precision unchecked, as DuckDB does.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpframe as dp

D3 = pl.Decimal(3, 1)


def _decimals(over: bool) -> pa.Table:
    """Four rows of a ``DECIMAL(3, 1)`` column; with ``over``, one row holds 1234.5 (beyond the precision)."""
    values = [Decimal("1234.5") if over else Decimal("12.5"), Decimal("1.5"), Decimal("-99.9"), Decimal("1.5")]
    column = pa.array(values, pa.decimal128(38, 1)).cast(pa.decimal128(3, 1), safe=False)
    return pa.table({"u": [1, 2, 3, 4], "d": column, "x": [1.0, 2.0, 3.0, 4.0]})


def _session(source: Any, backend: str, spark: Any = None) -> dp.Session:
    return dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(100), backend=backend,
                      seed=3, **({"spark": spark} if spark is not None else {}))


QUERIES = {
    "through Polars": lambda f: f.filter(pl.col("d") > 100).agg(dp.len()),
    "native filter first": lambda f: f.filter(pl.col("u") == 1).filter(pl.col("d") > 100).agg(dp.len()),
    "sum": lambda f: f.agg(dp.sum("d", bounds=(-2000, 2000))),
    "public keys": lambda f: f.group_by("d", keys=pl.DataFrame({"d": pl.Series([Decimal("1.5"), None], dtype=D3)}))
    .agg(dp.len(), dp.sum("x", bounds=(0, 10))),
}


# (default run: the oracle on D; every query on D and D' under -m slow)
CASES = [pytest.param(over, name, marks=() if over and name == "native filter first" else pytest.mark.slow,
                      id=f"{'D' if over else 'D_prime'}-{name}") for over in (True, False) for name in QUERIES]


@pytest.mark.parametrize(("over", "name"), CASES)
def test_a_decimal_stored_beyond_its_precision_reads_as_on_polars_on_spark(tmp_path: Path, over: bool, name: str,
                                                                           spark_session: Any) -> None:
    """Attack: a Parquet ``DECIMAL(3, 1)`` in an INT32 holding 1234.5 (D) or 12.5 (D′): every query below ran
    on Polars and DuckDB, and on Spark those handing the column to Arrow were charged, then failed on D alone.
    Now Spark and DuckDB release, for one seed, what Polars releases, on D and D′, from the file and from memory
    (Spark: a DataFrame too)."""
    path = tmp_path / "t.parquet"
    pq.write_table(_decimals(over), path, store_decimal_as_integer=True)
    frame = pl.from_arrow(_decimals(over))
    query = QUERIES[name]
    want = query(_session(path, "polars").table("t")).collect(budget=dp.PureDP(10))
    sources: list[tuple[str, Any]] = [("duckdb", path), ("spark", path)]
    if not (over and name == "native filter first"):     # (the default run: the file Spark reads alone)
        sources += [("duckdb", frame), ("spark", frame), ("spark", spark_session.read.parquet(str(path)))]
    for backend, source in sources:
        sess = _session(source, backend, spark_session if backend == "spark" else None)
        got = query(sess.table("t")).collect(budget=dp.PureDP(10))
        assert got.equals(want), (backend, type(source).__name__, got, want)
        assert sess.spent() == dp.PureDP(10)


@pytest.mark.parametrize("over", [True, False], ids=["D", "D'"])
def test_spark_beside_polars_starts_alike_whatever_the_decimals_hold(over: bool, spark_session: Any) -> None:
    """Attack: on a Polars session, the first ``sess.sql(..., backend="spark")`` ships the tables to Spark; a
    decimal beyond its precision failed the shipping ("backend 'spark' could not be created
    (ArithmeticException)", free) on D and not on D′. Now both run, as on Polars."""
    sess = _session(pl.from_arrow(_decimals(over)), "polars")
    sql = "SELECT COUNT(*) AS n, SUM(CLAMP(d, -2000, 2000)) AS s FROM t"
    want = sess.sql(sql).collect(budget=dp.PureDP(10))
    sess = _session(pl.from_arrow(_decimals(over)), "polars")
    got = sess.sql(sql, backend="spark").collect(budget=dp.PureDP(10))
    assert got.equals(want), (got, want)


def _digits_39(over: bool) -> pl.DataFrame:
    """A ``Decimal(38, 0)`` column; with ``over``, one value is 10**38 (39 digits: an int128 holds it)."""
    column = pa.array([Decimal(10**37 + 5 if not over else 10**37), Decimal(2), Decimal(3)], pa.decimal128(38, 0))
    if over:   # 10**37 -> 10**38: rescaled to scale 1 unsafely, then read as scale 0
        column = column.cast(pa.decimal128(38, 1), safe=False).view(pa.decimal128(38, 0))
    frame = pl.from_arrow(pa.table({"u": [1, 2, 3], "d": column, "x": [1.0, 2.0, 3.0]}))
    assert isinstance(frame, pl.DataFrame)
    return frame


@pytest.mark.parametrize("over", [True, False], ids=["D", "D'"])
def test_spark_beside_polars_starts_alike_whatever_the_digits_of_a_decimal(over: bool, spark_session: Any) -> None:
    """Attack: a ``Decimal(38, 0)`` value of 39 digits (an int128 holds 10**38) cannot be shipped to Spark at all:
    the first ``sess.sql(..., backend="spark")`` of a Polars session was refused, free, on D and not on D′. It was
    then shipped as null (as a millisecond datetime beyond microseconds is); since review 55f a table holding one
    is refused when the session is created, on every backend (the data owner's act: no session over D exists to
    ask), and on D′ the backend starts and a query not reading the column answers as on Polars."""
    sql = "SELECT COUNT(*) AS n, SUM(CLAMP(x, 0, 10)) AS s FROM t"
    if over:
        with pytest.raises(dp.SchemaError, match="more than 38 digits"):
            _session(_digits_39(over), "polars")
        return
    want = _session(_digits_39(over), "polars").sql(sql).collect(budget=dp.PureDP(10))
    got = _session(_digits_39(over), "polars").sql(sql, backend="spark").collect(budget=dp.PureDP(10))
    assert got.equals(want), (got, want)


def _strings(valid: bool) -> pa.Table:
    """Six rows; without ``valid``, unit 2's string is the bytes ff fe (not UTF-8), as a Parquet STRING may hold."""
    values = [b"ab", b"\xff\xfe" if not valid else b"cd", b"ef", b"ab", b"cd", b"ef"]
    return pa.table({"u": [1, 2, 3, 4, 5, 6], "s": pa.array(values, pa.binary()).view(pa.string()),
                     "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})


@pytest.mark.parametrize("valid", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["D", "D'"])
def test_a_parquet_string_that_is_not_utf8_is_refused_by_spark_as_by_polars(tmp_path: Path, valid: bool,
                                                                             spark_session: Any) -> None:
    """Attack: a Parquet STRING column holding bytes that are not UTF-8 in one row. Polars and DuckDB refuse the
    file when the session is created; Spark's reader does not look, and its registration check (hashing every
    value) passed. Then ``filter(pl.col("u") == 2).with_columns(v=pl.col("s").str.to_uppercase()).agg(dp.len())``
    (Polars on the executors) was charged, then failed on D and ran on D′: an oracle on unit 2's string (and a
    group key released from such a string was a frame Polars panicked on). Now Spark's check reads every string
    as UTF-8 too: the session is refused before any charge (a SchemaError naming the table), from the path and
    from a Spark DataFrame alike."""
    path = tmp_path / "t.parquet"
    pq.write_table(_strings(valid), path)

    def query(frame: dp.Frame) -> Any:
        return frame.filter(pl.col("u") == 2).with_columns(v=pl.col("s").str.to_uppercase()).agg(dp.len())

    for source in (path, spark_session.read.parquet(str(path))):
        if valid:
            want = query(_session(path, "polars").table("t")).collect(budget=dp.PureDP(10))
            assert query(_session(source, "spark", spark_session).table("t")).collect(budget=dp.PureDP(10)).equals(want)
            continue
        with pytest.raises(dp.SchemaError) as e:
            _session(source, "spark", spark_session)
        assert e.value.argument == "tables['t']" and "UTF-8" in str(e.value) and "\\xff" not in str(e.value)
    if not valid:
        with pytest.raises(dp.SchemaError):
            _session(path, "polars")


@pytest.mark.parametrize(("unit", "zone"), [("us", None), ("ns", None), ("us", "UTC")])
def test_the_int64_extremes_of_a_datetime_are_values_on_duckdb_as_on_polars(unit: str, zone: str | None,
                                                                             tmp_path: Path) -> None:
    """Attack: a datetime of ±(2⁶³ − 1) (Polars: year ±294247 in microseconds) is ±infinity to DuckDB, whose
    ``epoch_us`` of it is NULL: DuckDB's quantile codes dropped those rows (as if null) where Polars clamps them to
    the bounds, so one seed released another quantile (2009-09-29 for 2026-06-02 below) from other rows, and a
    row's presence moved the DuckDB release differently from Polars'. Now DuckDB codes them as Polars does."""
    extremes = pl.Series([0, 2**63 - 1, -(2**63 - 1), 5, 2**63 - 1, 7]).cast(pl.Datetime(unit))  # type: ignore[arg-type]
    frame = pl.DataFrame({"u": range(6), "t": extremes.dt.replace_time_zone(zone)})
    tz = dt.UTC if zone else None
    bounds = (dt.datetime(1970, 1, 1, tzinfo=tz), dt.datetime(2030, 1, 1, tzinfo=tz))
    frame.write_parquet(tmp_path / "t.parquet")     # (DuckDB reads the file itself)
    out = [_session(source, backend).table("t").agg(dp.quantile("t", [0.25, 0.5, 0.75], bounds=bounds))
           .collect(budget=dp.PureDP(10)) for backend, source in
           [("polars", frame), ("duckdb", frame), ("duckdb", tmp_path / "t.parquet")]]
    assert out[0].equals(out[1]) and out[0].equals(out[2]), out
