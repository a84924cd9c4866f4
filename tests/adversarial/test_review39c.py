"""Review 39c: what the Spark backend reads, against what Polars reads.

Scope: the Spark backend reads a local Parquet path itself (a file, a directory of files, hive partitions) where
the session's reference reading is Polars' (:func:`dpframe.tables.load_table`): on a session whose backend is
Spark, and beside another backend (``backend="spark"`` on one query of a Polars session). The privacy proof needs
every backend to read the same rows and values and to agree on which rows form one unit. Each test is an attack
— a layout where Spark's reader (its schema taken from one file, its case-insensitive names, the files it skips
or adds, its own types for partition values and INT96 timestamps) read other rows, values, types or nulls than
Polars — kept with its fix, or a check that found the engine sound: D/D′ comparisons of user- and row-level
queries on the layouts Spark reads itself, with one unit spread over files and partitions (``max_rows=1``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpframe as dp

_HUGE = dp.ApproxDP(1e6, 1e-3)    # noise far below one: a seeded count is the exact count of the kept rows


def _session(source: Any, backend: str, spark: Any = None, max_rows: int = 100) -> dp.Session:
    return dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit("u", max_rows=max_rows),
                      budget=dp.ApproxDP(1e9, 0.5), backend=backend, seed=1,
                      spark=spark if backend == "spark" else None)


def _count(sess: dp.Session, backend: str | None = None) -> int:
    """The count of the table's rows kept by bounding, on the session's backend or on ``backend``."""
    out = sess.sql("SELECT COUNT(*) AS n FROM t", backend=backend).collect(_HUGE)
    assert sess.history()["status"].to_list()[-1] == "committed"
    return int(out["n"].item())


def _folder(tmp_path: Path, files: dict[str, pl.DataFrame | pa.Table | str]) -> Path:
    """A directory ``t.parquet`` holding ``files`` (relative path: Parquet frame, Arrow table or text)."""
    folder = tmp_path / "t.parquet"
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        elif isinstance(content, pa.Table):
            pq.write_table(content, path)
        else:
            content.write_parquet(path)
    return folder


_BASE = pl.DataFrame({"u": [1, 2], "x": [1.0, 2.0]})

# Files whose columns differ from the first file's: Polars refuses the directory; Spark took one file's schema.
_MISMATCHED: dict[str, dict[str, pl.DataFrame | pa.Table | str]] = {
    "a column missing": {"a.parquet": _BASE, "b.parquet": pl.DataFrame({"u": [3]})},
    "an extra column": {"a.parquet": pl.DataFrame({"u": [3]}), "b.parquet": _BASE},
    "the unit column in another case": {"a.parquet": _BASE, "b.parquet": pl.DataFrame({"U": [3], "x": [3.0]})},
    "a column in another case": {"a.parquet": _BASE, "b.parquet": pl.DataFrame({"u": [3], "X": [3.0]})},
    "a narrower type": {"a.parquet": pl.DataFrame({"u": [1, 2], "x": [1, 2**40]}),
                        "b.parquet": pl.DataFrame({"u": [3], "x": [3]}, schema={"u": pl.Int64, "x": pl.Int32})},
}


@pytest.mark.parametrize("layout", [*(pytest.param(k, marks=pytest.mark.slow) if k != "the unit column in another case"
                                      else k for k in _MISMATCHED)])
def test_a_parquet_directory_whose_files_have_other_columns_is_refused_on_spark(
        spark_session: Any, tmp_path: Path, layout: str) -> None:
    """Attack: a Parquet directory whose files do not have the same columns. Polars refuses it when the session is
    created; Spark took the schema of one file (by default, without ``mergeSchema``) and read the others against
    it: a column another file lacks was read as null there, a column only later files have was dropped, a file
    naming the unit column ``U`` had its rows counted under unit ``u`` (Spark's names ignore case), a file whose
    ``x`` is ``Int32`` was read as the first file's ``Int64``. Which file gives the schema depends on the files'
    names, so one unit's file could decide every other row's values. Now the Spark backend reads a local path only
    where every file Polars reads has the same columns and types (their footers): otherwise a SchemaError naming
    ``tables['t']``, nothing charged — as on Polars."""
    folder = _folder(tmp_path, _MISMATCHED[layout])
    with pytest.raises(dp.SchemaError) as polars_error:
        _count(_session(folder, "polars"))
    with pytest.raises(dp.SchemaError) as spark_error:
        _session(folder, "spark", spark_session)
    assert polars_error.value.argument == spark_error.value.argument == "tables['t']"


# Layouts Polars reads: Spark read other files, or other types.
_OTHER_READINGS: dict[str, dict[str, pl.DataFrame | pa.Table | str]] = {
    "hidden files": {"a.parquet": _BASE, "_b.parquet": pl.DataFrame({"u": [7, 7, 7], "x": [0.0] * 3}),
                     ".c.parquet": pl.DataFrame({"u": [8], "x": [0.0]})},
    "a subdirectory": {"a.parquet": _BASE, "sub/b.parquet": pl.DataFrame({"u": [9], "x": [0.0]})},
    "a date partition": {"k=2020-01-01/a.parquet": _BASE,
                         "k=2020-01-02/a.parquet": pl.DataFrame({"u": [3], "x": [0.0]})},
    "an integer partition": {"k=01/a.parquet": _BASE, "k=2/a.parquet": pl.DataFrame({"u": [3], "x": [0.0]})},
    "INT96 timestamps": {"a.parquet": pa.table({"u": [1, 2], "t": pa.array([0, 10**15], pa.timestamp("us"))})},
}


def _int96(folder: Path) -> None:
    table = pq.read_table(folder / "a.parquet")
    pq.write_table(table, folder / "a.parquet", use_deprecated_int96_timestamps=True)


@pytest.mark.parametrize("layout", [*(pytest.param(k, marks=pytest.mark.slow) if k != "hidden files" else k
                                      for k in _OTHER_READINGS)])
@pytest.mark.parametrize("backend", ["spark", pytest.param("polars", marks=pytest.mark.slow)])
def test_spark_reads_a_local_parquet_path_as_polars_reads_it(spark_session: Any, tmp_path: Path, layout: str,
                                                             backend: str) -> None:
    """Attack: layouts Polars and Spark read differently. Polars reads every file under a directory (``_b.parquet``,
    ``.c.parquet``, ``sub/b.parquet``); Spark skips files whose names start with ``_`` or ``.`` and plain
    subdirectories. Polars reads ``k=2020-01-01`` as a Date and ``k=01`` as an Int64, Spark as a String and an
    Int32; an INT96 timestamp is naive in Polars and UTC in Spark. A session on the Spark backend read other rows
    and types than the same session on Polars, and a Polars session's ``backend="spark"`` query read Spark's rows
    (the types agreed) while its other queries read Polars': the backends disagreed on the table. Now the Spark
    backend reads a local path itself only where Spark reads the files Polars reads, with the schema Polars
    reads; otherwise it reads the path through Polars and ships the rows: the same rows, units and schema."""
    folder = _folder(tmp_path, _OTHER_READINGS[layout])
    if layout == "INT96 timestamps":
        _int96(folder)
    reference = _session(folder, "polars")
    sess = _session(folder, backend, spark_session)
    assert sess.table("t").schema == reference.table("t").schema
    assert _count(sess, "spark") == _count(reference)


def test_a_table_whose_columns_differ_only_in_case_is_refused_on_spark(spark_session: Any) -> None:
    """Attack: a table with columns ``u`` and ``U`` (Polars tells them apart). Spark's names ignore case: the session
    opened on the Spark backend and every query failed after its charge (``AMBIGUOUS_REFERENCE``). Now refused
    when the session is created, as on DuckDB: a SchemaError naming the columns, nothing charged."""
    frame = pl.DataFrame({"u": [1, 1, 2], "U": [5, 6, 7]})
    with pytest.raises(dp.SchemaError, match="differ only in case"):
        _session(frame, "spark", spark_session)
    sess = _session(frame, "polars")
    with pytest.raises(dp.DPFrameError, match="differ only in case"):
        _count(sess, "spark")
    assert sess.history().height == 0


# ---------------------------------------------------------------------------- layouts Spark reads itself: D and D′


_Layout = Callable[[Path, pl.DataFrame], Path]


def _files(tmp_path: Path, frame: pl.DataFrame) -> Path:
    """Rows split over three files in ``u``-independent order: a unit's rows in several files."""
    return _folder(tmp_path, {f"part-{i}.parquet": frame[i::3] for i in range(3)})


def _partitions(tmp_path: Path, frame: pl.DataFrame) -> Path:
    """Hive partitions by a string ``k``: a unit's rows in several partitions."""
    return _folder(tmp_path, {f"k={k}/part.parquet": frame.filter(pl.col("k") == k).drop("k")
                              for k in frame["k"].unique().sort()})


def _table(extra_unit: bool) -> pl.DataFrame:
    rows = [(1, "a", 1.0), (1, "b", 2.0), (1, "c", 4.0), (2, "a", 8.0), (2, "b", 16.0), (3, "c", 32.0)]
    if extra_unit:
        rows += [(4, "a", 64.0), (4, "b", 64.0), (4, "c", 64.0)]
    return pl.DataFrame(rows, schema={"u": pl.Int64, "k": pl.String, "x": pl.Float64}, orient="row")


@pytest.mark.slow
@pytest.mark.parametrize("layout", [_files, _partitions], ids=["files", "partitions"])
def test_one_unit_spread_over_files_and_partitions_is_one_unit_on_spark(spark_session: Any, tmp_path: Path,
                                                                        layout: _Layout) -> None:
    """A check (sound): on layouts Spark reads itself, a unit whose rows lie in several files or partitions is one
    unit (``max_rows=1``: the count is the number of units), on D and on D′ = D plus one unit spread over every
    file; a row-level query counts every row; user- and row-level queries succeed on both and differ by at most
    the added unit's rows, and the session's schema is Polars'."""
    answers = []
    for extra in (False, True):
        folder = layout(tmp_path / str(extra), _table(extra))
        spark, polars = (_session(folder, b, spark_session, max_rows=1) for b in ("spark", "polars"))
        assert spark.table("t").schema == polars.table("t").schema
        per_unit = [_count(spark) for _ in range(2)]
        rows = dp.Session({"t": folder}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(1e9, 0.5),
                          backend="spark", seed=1, spark=spark_session)
        row_count = rows.table("t").agg(n=dp.len()).collect(_HUGE)["n"].item()
        total = spark.table("t").agg(s=dp.sum("x", bounds=(0, 100))).collect(_HUGE)["s"].item()
        answers.append((per_unit, row_count, round(total)))
    assert [a[:2] for a in answers] == [([3, 3], 6), ([4, 4], 9)]
    assert 1 + 8 + 32 <= answers[0][2] <= 4 + 16 + 32
    assert answers[1][2] - answers[0][2] == 64   # each unit of D keeps the same row in D′: the added unit's one


@pytest.mark.slow
def test_a_directory_spark_wrote_is_read_by_spark_and_its_files_checked(spark_session: Any, tmp_path: Path) -> None:
    """A directory Spark wrote (``_SUCCESS``, ``.crc`` files: Polars refuses the mixed extensions) is still read by
    Spark itself; once a later write appends files with another column, it is refused (Spark read them against
    one file's schema)."""
    folder = str(tmp_path / "t.parquet")
    spark_session.createDataFrame([(1, 1.0), (1, 2.0), (2, 3.0)], "u long, x double").repartition(2) \
        .write.parquet(folder)
    assert _count(_session(folder, "spark", spark_session, max_rows=1)) == 2
    spark_session.createDataFrame([(3, 1.0, "a")], "u long, x double, y string").write.mode("append").parquet(folder)
    with pytest.raises(dp.SchemaError, match="different columns") as error:
        _session(folder, "spark", spark_session)
    assert error.value.argument == "tables['t']"
