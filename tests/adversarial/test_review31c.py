"""Review 31c: file values that only the engine reading the file itself rejects (follow-up to review 31).

Review 31 made session creation read every value of a file once with Polars. The DuckDB backend reads a
Parquet file with its own reader and the Spark backend reads its sources itself (Polars never sees
them): a value only that reader rejects made every query reading its column fail after its charge, on
D′ and not on D. Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpframe as dp

ROWS = 200


def _times(path: Path, bad: bool) -> str:
    """A TIME column (microseconds); D′'s extra unit's value is 200 hours, which DuckDB's reader refuses."""
    values = [i * 10**6 for i in range(ROWS)] + ([200 * 3600 * 10**6] if bad else [])
    times = pa.Array.from_buffers(pa.time64("us"), len(values), [None, pa.array(values, pa.int64()).buffers()[1]])
    pq.write_table(pa.table({"u": range(len(values)), "t": times}), path)
    return "t"


def _json(path: Path, bad: bool) -> str:
    """A string column of Parquet's JSON logical type; D′'s extra unit's value is not JSON (DuckDB parses it)."""
    values = [f'{{"a": {i}}}' for i in range(ROWS)] + (["oops{"] if bad else [])
    pq.write_table(pa.table({"u": range(len(values)), "j": pa.array(values, pa.json_())}), path)
    return "j"


def _int96(path: Path, bad: bool) -> str:
    """An INT96 timestamp column (Impala's, Spark's legacy); D′'s extra unit's Julian day is 2**31 - 1, which
    DuckDB's reader refuses ("Int96 timestamp is out of range") and Polars reads."""
    marker = pa.array([i * 10**9 for i in range(ROWS)] + ([1] if bad else []), pa.timestamp("ns"))
    pq.write_table(pa.table({"u": range(len(marker)), "w": marker}), path, use_deprecated_int96_timestamps=True,
                   use_dictionary=False, compression="none", write_statistics=False)
    if bad:   # the one value 1 ns after the epoch: nanoseconds of the day, then the Julian day of 1970-01-01
        data, one = path.read_bytes(), struct.pack("<qi", 1, 2440588)
        assert data.count(one) == 1
        path.write_bytes(data.replace(one, struct.pack("<qi", 1, 2**31 - 1)))
    return "w"


@pytest.mark.parametrize("write", [_times, _json, _int96], ids=["time", "json", "int96"])
def test_a_parquet_value_only_duckdb_rejects_does_not_fail_a_duckdb_query(write: Any, tmp_path: Path) -> None:
    """DuckDB's Parquet reader refuses a TIME beyond a day, a JSON value that does not parse and an INT96
    timestamp beyond its range; Polars reads all three (and so passed the file at session creation). With
    one unit's row holding such a value, ``agg(dp.count(column))`` or any SQL reading the column failed
    after its charge ("the query failed while running (InvalidInputException)") and answered without the
    row. DuckDB now reads a file itself only after one scan of every column at registration succeeds;
    otherwise it reads the file through Polars (Arrow), which reads every value."""
    answers = {}
    for bad in (False, True):
        path = tmp_path / f"{bad}.parquet"
        column = write(path, bad)
        sess = dp.Session({"t": str(path)}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10),
                          seed=0, backend="duckdb")
        sql = f"SELECT COUNT(*) AS n FROM t WHERE {column} IS NOT NULL"
        answers[bad] = [sess.table("t").agg(dp.count(column)).collect(dp.PureDP(1)).item(),
                        sess.sql(sql).collect(dp.PureDP(1)).item()]
        assert sess.history()["status"].to_list() == ["committed", "committed"]
        # each goes through Polars: a TIME or INT96 column always does (DuckDB reads them in microseconds, the
        # session's schema in nanoseconds), and a JSON column too since review 39a (the session reads it as its
        # storage, String; DuckDB's reader as JSON)
        assert sess._catalog.default_backend._tables["t"].path is None
    assert all(abs(a - ROWS) < 40 for a in answers[False] + answers[True]), answers


def _far_milliseconds(path: Path, bad: bool) -> None:
    """A millisecond timestamp column; D′'s extra unit's value, 2**62 ms, overflows Spark's microseconds."""
    values = [i * 1000 for i in range(ROWS)] + ([2**62] if bad else [])
    pq.write_table(pa.table({"u": range(len(values)), "t": pa.array(values, pa.timestamp("ms"))}), path)


def test_a_parquet_value_only_spark_rejects_is_refused_when_the_session_is_created(
        spark_session: Any, tmp_path: Path) -> None:
    """The Spark backend reads a Parquet path itself (the catalog's Polars read skipped it): a millisecond
    timestamp of 2**62 ms fails Spark's conversion to microseconds (``ArithmeticException``) and made
    ``agg(dp.count("t"))`` fail after its charge with the row, answer without it. Spark now reads every
    value of the tables it holds once, when the session is created; nothing is charged."""
    for bad in (False, True):
        path = tmp_path / f"{bad}.parquet"
        _far_milliseconds(path, bad)
        make = lambda: dp.Session({"t": str(path)}, privacy_unit=dp.PrivacyUnit("u", max_rows=1),  # noqa: E731
                                  budget=dp.PureDP(10), seed=0, backend="spark", spark=spark_session)
        if not bad:
            assert abs(make().table("t").agg(dp.count("t")).collect(dp.PureDP(1)).item() - ROWS) < 40
            continue
        with pytest.raises(dp.SchemaError, match="cannot read table 't'") as info:
            make()
        assert info.value.argument == "tables['t']"


def test_a_spark_dataframe_that_fails_on_one_row_is_refused_when_the_session_is_created(
        spark_session: Any, tmp_path: Path) -> None:
    """A Spark DataFrame is a plan Spark runs again for every query: ``cast(s AS INT)`` (ANSI mode, Spark
    4's default) fails on one unit's ``'oops'``. Session creation only asked whether the table was empty
    (the first partition), so every query reading ``x`` failed after its charge with the row and
    answered without it. Every value is read once when the session is created."""
    folder = str(tmp_path / "d")    # two files: the first partition has no 'oops'
    numbers = pa.table({"u": range(ROWS), "s": [str(i) for i in range(ROWS)]})
    spark_session.createDataFrame(numbers).write.parquet(folder)
    spark_session.createDataFrame(pa.table({"u": [ROWS], "s": ["oops"]})).write.mode("append").parquet(folder)
    frame = spark_session.read.parquet(folder).selectExpr("u", "CAST(s AS INT) AS x")
    with pytest.raises(dp.SchemaError, match="cannot read table 't'") as info:
        dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10), seed=0,
                   backend="spark", spark=spark_session)
    assert info.value.argument == "tables['t']"


@pytest.mark.parametrize("kind", ["parquet", "frame"])
def test_a_value_only_spark_rejects_does_not_fail_a_query_on_spark_beside_another_backend(
        spark_session: Any, tmp_path: Path, kind: str) -> None:
    """A session on another backend creates the Spark backend on the first query that names it. It read a
    Parquet path with Spark: the file Polars had read in full failed every Spark query reading the far
    timestamp, after its charge. A DataFrame was shipped through Arrow's checked cast to microseconds:
    ``sess.sql(..., backend="spark")`` raised ``ArrowInvalid`` (free) exactly when a row was that far.
    Where Spark cannot read every value of a path, the session's rows are shipped; shipped millisecond
    datetimes beyond Spark's microseconds become null (as on DuckDB)."""
    path = tmp_path / "t.parquet"
    _far_milliseconds(path, True)
    source = str(path) if kind == "parquet" else pl.read_parquet(path)
    sess = dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10), seed=0)
    q = sess.sql("SELECT COUNT(*) AS n FROM t WHERE t IS NOT NULL", backend="spark")
    assert abs(q.collect(dp.PureDP(1)).item() - ROWS) < 40


def test_a_csv_row_no_query_can_read_is_refused_by_name_on_spark(spark_session: Any, tmp_path: Path) -> None:
    """The Spark backend ships a CSV file's rows (read by Polars) to Spark; the catalog skipped its full read
    for a backend that loads its own tables, so the ``oops`` row of review 31 surfaced as a raw Polars
    ``ComputeError`` from the shipping. Spark keeps only Spark-side tables to itself: the catalog reads the
    others, and the error names the table."""
    path = tmp_path / "t.csv"
    path.write_text("u,x\n" + "".join(f"{i},{i % 10}\n" for i in range(5000)) + "9999,oops\n")
    with pytest.raises(dp.SchemaError, match="cannot read table 't'") as info:
        dp.Session({"t": str(path)}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0,
                   backend="spark", spark=spark_session)
    assert info.value.argument == "tables['t']"
