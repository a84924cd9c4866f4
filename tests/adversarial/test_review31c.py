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
        # the clean file is still scanned by DuckDB itself; the other goes through Polars
        assert (sess._catalog.default_backend._tables["t"].path is None) == bad
    assert all(abs(a - ROWS) < 40 for a in answers[False] + answers[True]), answers

