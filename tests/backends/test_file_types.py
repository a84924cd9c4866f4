"""A file-backed table means the same values on every backend: the session's schema (the Polars reading) rules.

Each case is a small Parquet file written by pyarrow with one column of a type some reader takes its own
way (a UUID, an INT96 timestamp, a decimal stored beyond its precision, Float16, TIME, durations, large
strings, dictionaries, nested columns, time zones, date64, unsigned integers). Every backend must return
the Polars backend's exact statistics for it, or refuse the table when it is registered (a SchemaError
naming ``tables['t']``), never answer differently.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpframe as dp
from dpframe.backends.base import SourceAware
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.errors import SchemaError
from dpframe.mechanism import Statistic
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.backends import assert_same, request

UNITS = [1, 2, 3, 4, 5]
UNIT = PrivacyUnit("u", max_rows=100)


def _decimals(precision: int, scale: int, unscaled: list[int]) -> pa.Array:
    """Decimals whose unscaled integers may exceed ``precision`` (pyarrow would refuse them from Python)."""
    data = b"".join(v.to_bytes(16, "little", signed=True) for v in unscaled)
    return pa.Array.from_buffers(pa.decimal128(precision, scale), len(unscaled), [None, pa.py_buffer(data)])


def _uuids() -> pa.Array:
    one, two = uuid.UUID(int=1).bytes, uuid.UUID(int=2).bytes
    return pa.array([one, two, one, None, two], pa.uuid())


# name -> (the column, pyarrow.parquet.write_table options, whether it is a group key)
CASES: dict[str, tuple[Callable[[], pa.Array], dict[str, Any], bool]] = {
    "uuid": (_uuids, {}, True),
    "int96": (lambda: pa.array([1_000_000_001, 5, 1_000_000_001, None, 7], pa.timestamp("ns")),
              {"use_deprecated_int96_timestamps": True}, True),
    "decimal_beyond_precision": (lambda: _decimals(3, 1, [12345, 5, -99999, 0, 5]),
                                 {"store_decimal_as_integer": True}, True),
    "decimal_beyond_precision_in_its_width": (lambda: _decimals(5, 1, [999_999_999, 5, -99_999, 0, 5]),
                                              {"store_decimal_as_integer": True}, True),
    "decimal": (lambda: _decimals(9, 2, [123, -456, 123, 0, 99]), {}, True),
    "float16": (lambda: pa.array([np.float16(1.5), np.float16(-2.5), None, np.float16(1.5), np.float16(0)],
                                 pa.float16()), {}, True),
    "time_ms": (lambda: pa.array([1000, 2000, None, 1000, 3], pa.time32("ms")), {}, True),
    "time_ns": (lambda: pa.array([1001, 2000, None, 1001, 3], pa.time64("ns")), {}, True),
    "duration_s": (lambda: pa.array([1, 2, None, 1, 3], pa.duration("s")), {}, True),
    "large_string": (lambda: pa.array(["a", "b", None, "a", "c"], pa.large_string()), {}, True),
    "large_binary": (lambda: pa.array([b"a", b"b", None, b"a", b"\xff"], pa.large_binary()), {}, True),
    "dictionary": (lambda: pa.array(["a", "b", "a", None, "c"]).dictionary_encode(), {}, True),
    "timestamp_tz": (lambda: pa.array([1, 2, None, 1, 3], pa.timestamp("us", "America/New_York")), {}, True),
    "timestamp_ms": (lambda: pa.array([1, 2, None, 1, 3], pa.timestamp("ms")), {}, True),
    "date64": (lambda: pa.array([86_400_000, 2 * 86_400_000, None, 86_400_000, 0], pa.date64()), {}, True),
    "uint64": (lambda: pa.array([1, 2**64 - 1, None, 1, 0], pa.uint64()), {}, True),
    "uint32": (lambda: pa.array([1, 2**32 - 1, None, 1, 0], pa.uint32()), {}, True),
    "list": (lambda: pa.array([[1], [2, 3], None, [], [4]], pa.list_(pa.int64())), {}, False),
    "struct": (lambda: pa.array([{"a": 1}, {"a": 2}, None, {"a": 1}, {"a": None}], pa.struct([("a", pa.int64())])),
               {}, False),
}


def _write(tmp_path: Path, case: str) -> Path:
    column, options, _ = CASES[case]
    path = tmp_path / f"{case}.parquet"
    pq.write_table(pa.table({"u": UNITS, "c": column()}), path, **options)
    return path


def _statistics(backend: Any, path: Path, case: str, keyed: bool = True) -> pl.DataFrame:
    """Exact statistics reading column ``c``: rows per public key (the Polars reading's values), else per unit."""
    frame = pl.scan_parquet(path)
    if isinstance(backend, SourceAware):
        backend.register_source("t", frame, path)
    else:
        backend.register("t", frame)
    schema = frame.collect_schema()
    stats: tuple[Statistic, ...] = (Statistic("rows"), Statistic("nonnull", "c"))
    if schema["c"].is_numeric():
        stats += (Statistic("fixed_sum", "c", Fraction(-10**6), Fraction(10**6), Fraction(0), 1, -4),)
    if keyed and CASES[case][2]:
        keys = frame.select("c").unique().collect()
        return backend.statistics(request(stats, UNIT, ("c",), keys))
    return backend.statistics(request(stats, UNIT, ("u",)))


@pytest.mark.parametrize("case", list(CASES))
def test_duckdb_reads_a_parquet_column_as_the_session_schema_says(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, case)
    want = _statistics(PolarsBackend(), path, case)
    assert want["__rows"].sum() == len(UNITS)
    assert_same(_statistics(DuckDBBackend(), path, case), want)


def test_uuid_keys_count_alike_in_sessions(tmp_path: Path) -> None:
    """The review's case: grouping a UUID column by public keys (its 16 bytes, as the schema says)."""
    path = _write(tmp_path, "uuid")
    keys = [uuid.UUID(int=1).bytes, uuid.UUID(int=2).bytes]
    counts = []
    for backend in ("polars", "duckdb"):
        sess = dp.Session({"t": path}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), backend=backend)
        assert sess.table("t").schema["c"] == pl.Binary
        plan = sess.table("t").group_by("c", keys=keys).agg(dp.len()).plan(dp.PureDP(1))
        counts.append(sess._catalog.backend().statistics(request(plan.statistics(), PrivacyUnit("u"), ("c",),
                                                                 pl.DataFrame({"c": keys})))["__rows"].to_list())
    assert counts[0] == counts[1] == [2, 2]


def test_duckdb_reads_small_decimals_stored_in_wide_integers_through_polars(tmp_path: Path) -> None:
    """DECIMAL(3, 1) stored as INT32: DuckDB keeps it in 16 bits (wrapping -9999.9); the table is read by Polars."""
    path = _write(tmp_path, "decimal_beyond_precision")
    backend = DuckDBBackend()
    backend.register_source("t", pl.scan_parquet(path), path)
    assert backend._tables["t"].path is None     # (read through Polars, held as Arrow data)
    for case in ("decimal", "decimal_beyond_precision_in_its_width"):   # DECIMAL(9, 2) in 4 bytes, DECIMAL(5, 1)
        ok = _write(tmp_path, case)                                     # in an INT32: DuckDB scans the file
        backend.register_source(case, pl.scan_parquet(ok), ok)
        assert backend._tables[case].path is not None


def test_duckdb_in_memory_decimals_beyond_their_precision(tmp_path: Path) -> None:
    """An in-memory decimal beyond its precision (read by Polars from such a file) keeps its value on DuckDB."""
    frame = pl.read_parquet(_write(tmp_path, "decimal_beyond_precision"))
    stats = (Statistic("fixed_sum", "c", Fraction(-10**6), Fraction(10**6), Fraction(0), 1, 0),)
    got = []
    for backend in (PolarsBackend(), DuckDBBackend()):
        backend.register("t", frame.lazy())
        got.append(backend.statistics(request(stats, UNIT)))
    assert got[0][stats[0].key].to_list() == [1234 + 0 - 9999 + 0 + 0]
    assert_same(got[1], got[0])


def test_duckdb_scans_a_file_whose_types_it_reads_as_the_schema_says(tmp_path: Path) -> None:
    """Equivalent readings (a dictionary as strings, any time zone's instants) keep DuckDB's own scan of the file."""
    for case in ("dictionary", "timestamp_tz", "large_string", "uint64", "list", "struct"):
        path = _write(tmp_path, case)
        backend = DuckDBBackend()
        backend.register_source("t", pl.scan_parquet(path), path)
        assert backend._tables["t"].path is not None, case


@pytest.mark.parametrize("case", ["uuid", "int96", "float16", "time_ms"])
def test_duckdb_reads_other_types_through_polars(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, case)
    backend = DuckDBBackend()
    backend.register_source("t", pl.scan_parquet(path), path)
    assert backend._tables["t"].path is None


def test_csv_tables_are_read_by_polars_on_every_backend(tmp_path: Path) -> None:
    """A CSV's column types are Polars' inference: DuckDB reads the session's frame, not the file."""
    path = tmp_path / "t.csv"
    path.write_text("u,c\n1,007\n2,2024-01-01\n3,1e3\n")
    sess = dp.Session({"t": path}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), backend="duckdb")
    assert dict(sess.table("t").schema) == {"u": pl.Int64, "c": pl.String}
    backend = sess._catalog.backend()
    assert isinstance(backend, DuckDBBackend) and backend._tables["t"].path is None
    keys = pl.DataFrame({"c": ["007", "1e3"]})
    got = backend.statistics(request((Statistic("rows"),), PrivacyUnit("u"), ("c",), keys))
    assert got["__rows"].to_list() == [1, 1]


@pytest.mark.parametrize("case", ["uuid", *[pytest.param(c, marks=pytest.mark.slow)
                                            for c in ("date64", "float16", "decimal_beyond_precision")]])
def test_spark_beside_a_polars_session_ships_what_it_reads_otherwise(spark_session: Any, tmp_path: Path,
                                                                     case: str) -> None:
    """A second backend (Spark) over a Parquet path Spark cannot read (a UUID, a Float16), or reads as other
    types (a date64 as a date), gets the rows the session read; one it reads as the schema says (a decimal
    beyond its precision, read whole) stays in Spark. Never other values."""
    from dpframe.backends.spark import SparkBackend

    path = _write(tmp_path, case)
    keyed = case != "decimal_beyond_precision"    # (Spark refuses such public keys: per unit instead)
    want = _statistics(PolarsBackend(), path, case, keyed)
    assert_same(_statistics(SparkBackend(spark_session), path, case, keyed), want)


def test_spark_beside_a_polars_session_refuses_a_column_it_cannot_hold(spark_session: Any, tmp_path: Path) -> None:
    """An INT96 timestamp: Spark keeps microseconds, the schema says nanoseconds, which Spark cannot hold."""
    from dpframe.backends.spark import SparkBackend

    path = _write(tmp_path, "int96")
    with pytest.raises(SchemaError, match=r"column 'c' has type Datetime\(time_unit='ns'.*cannot store exactly") \
            as info:
        SparkBackend(spark_session).register_source("t", pl.scan_parquet(path), path)
    assert info.value.argument == "tables['t']" and info.value.fix


@pytest.mark.slow
def test_duckdb_beside_a_spark_session_reads_the_file_as_spark_did(spark_session: Any, tmp_path: Path) -> None:
    """On backend="spark" a directory Spark wrote (Polars cannot list it: its ``.crc`` files) keeps Spark's reading
    as the session's schema (an INT96 timestamp: a zoned instant in microseconds); DuckDB (a naive TIMESTAMP) then
    reads the table through the session's frame. (A file Polars reads is read as Polars reads it,
    ``test_review39c.py``.)"""
    path = tmp_path / "spark_wrote"
    spark_session.read.parquet(str(_write(tmp_path, "int96"))).write.parquet(str(path))
    sess = dp.Session({"t": str(path)}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), backend="spark",
                      spark=spark_session)
    schema = sess.table("t").schema
    assert schema["c"] == pl.Datetime("us", "UTC")
    duckdb = sess._catalog.backend("duckdb")
    assert duckdb._tables["t"].path is None
    keys = pl.DataFrame({"c": [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC), None]},
                        schema={"c": schema["c"]})
    req = request((Statistic("rows"),), UNIT, ("c",), keys)
    got = duckdb.statistics(req)
    assert got["__rows"].to_list() == [1, 2]
    assert_same(got, sess._catalog.backend().statistics(req))


@pytest.mark.parametrize("kind", ["memory", "parquet"])
def test_float16_columns_in_sql_answer_alike_on_polars_and_duckdb(tmp_path: Path, kind: str) -> None:
    """Review 31's note: DuckDB takes no Float16 from Arrow, so ``sess.sql`` on a Float16 column raised DuckDB's
    NotImplementedException (and the DuckDB backend could not hold the table). Float16 is now handed over as
    the exact Float32; a seeded session releases the same values on both backends."""
    frame = pl.DataFrame({"u": range(100), "x": pl.Series([1.5, None] * 50, dtype=pl.Float16)})
    source: Any = frame
    if kind == "parquet":
        source = tmp_path / "t.parquet"
        frame.write_parquet(source)
    answers = []
    for backend in ("polars", "duckdb"):
        sess = dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(5), backend=backend,
                          seed=3)
        answers.append([sess.sql(q).collect(dp.PureDP(1)).item() for q in (
            "SELECT COUNT(*) AS n FROM t WHERE x IS NOT NULL", "SELECT SUM(CLAMP(x, 0, 2)) AS s FROM t")])
    assert answers[0] == answers[1]
