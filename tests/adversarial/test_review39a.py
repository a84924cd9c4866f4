"""Review 39a: the physical layout of the data owner's tables.

Scope: every oracle so far built its tables as plain Polars frames or wrote them to one Parquet or CSV file. A
data owner registers many other layouts — Arrow tables of many chunks (empty ones, sliced arrays with offsets,
dictionary-encoded columns whose dictionaries differ per chunk, large and view strings, Decimal256, date64,
times, durations, a null-typed column), Polars frames of several chunks and categoricals, pandas frames (nullable
and Arrow dtypes, categoricals with unused categories, object columns, a non-default index), Arrow streams, and
files: a directory of Parquet files (hive-partitioned too), several row groups, a file whose name holds glob
characters, CSV quirks. The privacy proof needs every backend and every step (the read when the session is
created, bounding, grouping, the DuckDB hand-over, each query's file scan) to see the same rows and values
whatever the layout, and one unit to stay one unit across chunks, files and row groups. Each test is an attack
that broke, kept with its fix, or a check that found the engine sound.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import dpframe as dp

from .composed import Storage, chains, extreme_rows
from .test_composed_oracle import check

_HUGE = dp.ApproxDP(1e6, 1e-3)    # noise far below one: a seeded count is the exact count of the kept rows


def _session(source: Any, backend: str, max_rows: int = 100) -> dp.Session:
    return dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit("u", max_rows=max_rows),
                      budget=dp.ApproxDP(1e9, 0.5), backend=backend, seed=1)


def _count(sess: dp.Session) -> int:
    out = sess.table("t").agg(n=dp.len()).collect(_HUGE)
    assert sess.history()["status"].to_list()[-1] == "committed"
    return int(out["n"].item())


# ---------------------------------------------------------------------------- 1. a path's file(s), as named


def _write(frame: pl.DataFrame, path: Path) -> None:
    if path.suffix == ".csv":
        frame.write_csv(path)
    else:
        frame.write_parquet(path)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("name", ["t[1].parquet", "t*.csv", *(pytest.param(n, marks=pytest.mark.slow)
                                                              for n in ("t?.parquet", "t*.parquet", "t[1].csv"))])
def test_a_file_named_with_glob_characters_is_that_file(tmp_path: Path, name: str, backend: str) -> None:
    """Attack: the data owner registers a file whose name holds glob characters (``t[1].parquet``). Polars'
    scans and DuckDB's ``read_parquet`` expanded the name as a pattern: the session read *other* files
    (``t1.parquet``'s 50 rows instead of the registered file's 3; ``t*.parquet`` both), whose versions the
    session never recorded — rewriting them between queries went unseen, the attack of ``test_changed_files.py``
    on bounding — and on the DuckDB backend every query failed after its charge (``PermissionException``: the
    files read were not the one allowed). Now a path is read as the one file it names: Polars scans it with
    ``glob=False``, and DuckDB scans only a regular file whose name has no pattern (anything else it reads
    through Polars)."""
    path = tmp_path / name
    _write(pl.DataFrame({"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]}), path)
    other = tmp_path / name.replace("[1]", "1").replace("?", "1").replace("*", "1")
    _write(pl.DataFrame({"u": [7] * 50, "x": [9.0] * 50}), other)
    sess = _session(path, backend)
    assert _count(sess) == 3
    _write(pl.DataFrame({"u": [8] * 70, "x": [9.0] * 70}), other)    # another file: not the table's
    assert _count(sess) == 3


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_directory_of_parquet_files_is_one_table_whose_units_span_its_files(tmp_path: Path, backend: str) -> None:
    """Attack: a directory named ``t.parquet`` holding several files (as Spark writes them), with unit 1's rows in
    two files. The DuckDB backend scanned the directory itself — its ``file_row_number`` restarts in each file, so
    its kept-row mask by position could not name one row — and every query failed after its charge
    (``PermissionException``). Now a directory is read through Polars on DuckDB too: unit 1 is one unit (under
    ``max_rows=1`` the count is the number of units) on both backends."""
    folder = tmp_path / "t.parquet"
    folder.mkdir()
    pl.DataFrame({"u": [1, 1, 1], "x": [1.0, 2.0, 3.0]}).write_parquet(folder / "a.parquet")
    pl.DataFrame({"u": [1, 1, 2], "x": [4.0, 5.0, 6.0]}).write_parquet(folder / "b.parquet")
    sess = _session(folder, backend, max_rows=1)
    assert [_count(sess) for _ in range(3)] == [2, 2, 2]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t[1].parquet", "t*.parquet"])
def test_a_file_named_with_glob_characters_is_that_file_on_spark(tmp_path: Path, name: str) -> None:
    """The same attack on the Spark backend, which reads a Parquet path itself (Hadoop's globbing read
    ``t1.parquet``'s 50 rows): a local path that is a pattern is read by Polars and its rows shipped."""
    path = tmp_path / name
    _write(pl.DataFrame({"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]}), path)
    _write(pl.DataFrame({"u": [7] * 50, "x": [9.0] * 50}), tmp_path / name.replace("[1]", "1").replace("*", "1"))
    assert _count(_session(path, "spark")) == 3


# ---------------------------------------------------------------------------- 2. Arrow types at registration


def _arrow(column: Any) -> Any:
    import pyarrow as pa

    return pa.table({"u": pa.array([1, 2, 3, 4]), "c": column})


def _refused(source: Any, backend: str = "polars") -> dp.SchemaError:
    with pytest.raises(dp.SchemaError) as caught:
        _session(source, backend)
    return caught.value


@pytest.mark.parametrize("kind", ["decimal256", "interval", "union", "offset time zone"])
def test_an_arrow_column_polars_cannot_import_is_refused_with_a_dpframe_error(kind: str) -> None:
    """Attack: an Arrow table with a column Polars cannot import — a ``decimal256`` (a Rust panic: ``Int256``
    unsupported), a ``month_day_nano_interval``, a union or a timestamp whose time zone is an offset (``+05:30``:
    ``ComputeError``) — made ``dp.Session`` raise the raw
    engine error (a ``PanicException`` derives from ``BaseException``: an ``except Exception`` around the session
    did not catch it). Now a ``SchemaError`` naming ``tables['t']``; the same for a pandas frame holding such a column
    (an ``ArrowDtype``)."""
    import decimal

    import pandas as pd
    import pyarrow as pa

    columns = {
        "decimal256": lambda: pa.array([decimal.Decimal(1)] * 4, pa.decimal256(50, 0)),
        "interval": lambda: pa.array([(1, 2, 3)] * 4, pa.month_day_nano_interval()),
        "union": lambda: pa.UnionArray.from_sparse(pa.array([0, 1, 0, 1], pa.int8()),
                                                   [pa.array([1, 2, 3, 4]), pa.array(["a"] * 4)]),
        "offset time zone": lambda: pa.array([0, 1, 2, 3], pa.timestamp("us", "+05:30")),
    }
    error = _refused(_arrow(columns[kind]()))
    assert error.argument == "tables['t']" and "cannot convert the Arrow table" in str(error)
    if kind == "decimal256":    # the same column in a pandas frame (an ArrowDtype)
        error = _refused(_arrow(columns[kind]()).to_pandas(types_mapper=pd.ArrowDtype))
        assert error.argument == "tables['t']" and "cannot convert the pandas DataFrame" in str(error)


def _json(texts: list[str]) -> Any:
    import pyarrow as pa

    texts_as_json = pa.ExtensionArray.from_storage(pa.json_(), pa.array(texts))
    return pa.table({"u": pa.array(range(len(texts))), "j": texts_as_json})


_JSON = ['{"a": 1}', "1", "null", "[1]"] * 3


@pytest.mark.parametrize(("sql", "storage"), [
    ("SELECT COUNT(*) AS n FROM t WHERE length(j) > 2", "memory"),
    ("SELECT COUNT(*) AS n FROM t WHERE json_type(j) = 'OBJECT'", "parquet"),
    *(pytest.param(sql, storage, marks=pytest.mark.slow) for sql, storage in (
        ("SELECT COUNT(*) AS n FROM t WHERE length(j) > 2", "parquet"),
        ("SELECT COUNT(*) AS n FROM t WHERE json_type(j) = 'OBJECT'", "memory")))])
def test_a_json_column_with_a_malformed_value_is_no_membership_oracle_on_duckdb(tmp_path: Path, sql: str,
                                                                                storage: str) -> None:
    """Attack: a column of Arrow's ``arrow.json`` extension type (a Parquet file's JSON column reads as one) reached
    DuckDB as its ``JSON`` type, whose values DuckDB takes as valid JSON without checking them. Where one unit's row
    held text that is not JSON (the extension type does not check it), ``length(j)`` or ``json_type(j)`` raised a
    ``FatalException`` — after the charge, only on D′, and the session's connection invalidated — while on D the
    query was released: a membership oracle. Now an extension-typed column is registered as its storage type
    (``String``): the same values, checked by every backend as text (``json_type`` of malformed text is NULL under
    ``TRY``); an extension nested in a list or struct is refused."""
    import pyarrow.parquet as pq

    def source(texts: list[str], name: str) -> Any:
        if storage == "memory":
            return _json(texts)
        path = tmp_path / f"{name}.parquet"
        pq.write_table(_json(texts), path)
        return path

    d, d_plus = (_session(source(texts, name), "duckdb", max_rows=2)
                 for texts, name in ((_JSON, "d"), (_JSON + ["{not json"], "d_plus")))
    assert d.table("t").schema["j"] == pl.String
    for sess in (d, d_plus):
        sess.sql(sql).collect(_HUGE)
        assert sess.history()["status"].to_list() == ["committed"]


def test_an_extension_type_nested_in_a_column_is_refused() -> None:
    """An ``arrow.json`` value inside a list or struct (its storage cannot be taken there): refused when the
    session is created, naming ``tables['t']``."""
    import pyarrow as pa

    texts = pa.ExtensionArray.from_storage(pa.json_(), pa.array(["1", "{bad", "2", "3"]))
    error = _refused(_arrow(pa.StructArray.from_arrays([texts], ["a"])), "duckdb")
    assert error.argument == "tables['t']" and "extension" in str(error)



@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("unit", ["o", "u"])
def test_a_column_of_python_objects_is_refused(backend: str, unit: str) -> None:
    """Attack: a Polars frame with an ``Object`` column (Python objects: ids parsed into ``str`` objects, tuples ...).
    The session accepted it. As the privacy unit, every query on the Polars backend was charged, then failed
    (``InvalidOperationError``: Polars cannot hash or group objects); the DuckDB backend was handed each object's
    *address* (Polars exports an ``Object`` column as 8-byte binaries), so its units were objects, not values: two
    equal ids held by two ``str`` objects were two units (one person's rows, one unit each, bounding undone), and a
    key or measured object column meant addresses there. Now an ``Object`` column is refused when the session is
    created (a ``SchemaError`` naming ``tables['t']`` and the column), as a public table's."""
    ids = ["".join(["i", "d"]) for _ in range(4)]     # four str objects, one value
    frame = pl.DataFrame({"u": [1, 1, 2, 2], "o": pl.Series(ids, dtype=pl.Object), "x": [1.0] * 4})
    with pytest.raises(dp.SchemaError) as caught:
        dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit(unit, max_rows=1), budget=dp.ApproxDP(1, 1e-6),
                   backend=backend)
    assert caught.value.argument == "tables['t']" and "'o'" in str(caught.value)
    with pytest.raises(dp.SchemaError) as caught:
        dp.Session({"t": frame.drop("o")}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(1, 1e-6),
                   backend=backend, public_tables={"p": frame.select("o")})
    assert caught.value.argument == "public_tables['p']"


# ---------------------------------------------------------------------------- 3. one unit whatever the layout


def _ids(rows: int = 120) -> pl.DataFrame:
    return pl.DataFrame({"u": [f"id{i % 30}" for i in range(rows)], "g": [("a", "b", "c")[i % 3] for i in range(rows)],
                         "x": [i / 4 for i in range(rows)]})


def _dictionary_chunks(frame: pl.DataFrame) -> Any:
    """Arrow chunks with int8 dictionary indices, each chunk its own dictionary (reversed, an unused entry, a null)."""
    import pyarrow as pa

    batches = []
    for start, stop in ((0, 0), (0, 50), (50, 51), (51, frame.height)):
        part = frame[start:stop]
        values = sorted(set(part["u"].to_list()), reverse=start % 2 == 0) + ["unused", None]
        indices = pa.array([values.index(v) for v in part["u"]], pa.int8())
        batches.append(pa.record_batch({"u": pa.DictionaryArray.from_arrays(indices, pa.array(values)),
                                        "g": part["g"].to_arrow(), "x": part["x"].to_arrow()}))
    return pa.Table.from_batches(batches)


def _layout(kind: str, frame: pl.DataFrame, folder: Path) -> Any:
    import pandas as pd
    import pyarrow.parquet as pq

    if kind == "arrow chunks":
        return pl.concat([frame[:0], frame[:1], frame[1:60], frame[60:]], rechunk=False).to_arrow()
    if kind == "dictionary chunks":
        return _dictionary_chunks(frame)
    if kind == "polars chunks, categorical":
        return pl.concat([frame[:40], frame[40:]], rechunk=False).with_columns(pl.col("u").cast(pl.Categorical))
    if kind == "pandas categorical, unused categories":
        return frame.to_pandas().astype({"u": pd.CategoricalDtype(["zz", *sorted(set(frame["u"]))])})
    if kind == "pandas ArrowDtype, other index":
        return frame.to_pandas(types_mapper=pd.ArrowDtype).set_axis(range(1000, 1000 + frame.height))
    if kind == "parquet row groups":
        pq.write_table(frame.to_arrow(), path := folder / "rg.parquet", row_group_size=7)
        return path
    if kind == "parquet directory":
        (path := folder / "dir.parquet").mkdir()
        for start in range(0, frame.height, 50):
            pq.write_table(frame[start:start + 50].to_arrow(), path / f"{start:04d}.parquet")
        return path
    assert kind == "hive partitions"
    pq.write_to_dataset(frame.to_arrow(), path := folder / "hive.parquet", partition_cols=["g"])
    return path


_LAYOUTS = ["dictionary chunks", "parquet directory"] + [   # the others under -m slow
    pytest.param(kind, marks=pytest.mark.slow) for kind in ("arrow chunks", "polars chunks, categorical",
                                                            "pandas categorical, unused categories",
                                                            "pandas ArrowDtype, other index", "parquet row groups",
                                                            "hive partitions")]


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("layout", _LAYOUTS)
def test_a_unit_split_across_chunks_files_or_dictionaries_is_one_unit(tmp_path: Path, layout: str,
                                                                     backend: str) -> None:
    """Checked sound: 30 units of 4 rows each, every unit's rows spread over Arrow chunks (an empty one, one of one
    row), dictionary chunks of int8 indices whose dictionaries differ (order, an unused entry, a null), Polars chunks
    of a categorical, a pandas categorical with unused categories, Parquet row groups of 7 rows, a directory of files
    and hive partitions: under ``max_rows=1`` the count is the number of units, by the method chain and by SQL, with
    the public keys each released, on both backends."""
    sess = _session(_layout(layout, _ids(), tmp_path), backend, max_rows=1)
    assert _count(sess) == 30
    assert sess.sql("SELECT COUNT(*) AS n FROM t").collect(_HUGE)["n"].item() == 30
    by_key = sess.table("t").group_by("g", keys=["a", "b", "c"]).agg(n=dp.len()).collect(_HUGE)
    assert by_key["n"].sum() == 30 and sess.history()["status"].to_list() == ["committed"] * 3


# ---------------------------------------------------------------------------- 4. the composed oracle on layouts


@dataclass(frozen=True)
class _Layout(Storage):
    """D and D′ as Arrow tables of chunks (an empty one, one of one row, slices with offsets), text as
    ``large_string`` or dictionary-encoded per chunk (``dictionary``: the session reads categoricals), or as a
    directory of three Parquet files (``suffix=".parquet"``)."""

    dictionary: bool = False

    def source(self, data: pl.DataFrame) -> object:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = data.drop(self.drop, strict=False).to_arrow()
        cuts = [0, 0, 1, table.num_rows // 2, table.num_rows]
        parts = [table.slice(a, b - a) for a, b in zip(cuts, cuts[1:], strict=False)]
        if self.suffix is not None:
            path = Path(tempfile.mkdtemp(prefix="dpframe-layout-")) / "t.parquet"
            path.mkdir()
            for j, part in enumerate(parts[1:]):
                pq.write_table(part, path / f"{j}.parquet")
            return path

        def text(column: Any) -> Any:
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
                    or pa.types.is_string_view(column.type) or pa.types.is_dictionary(column.type)):
                return column
            plain = column.cast(pa.large_string()) if not pa.types.is_dictionary(column.type) else column
            return plain.dictionary_encode() if self.dictionary and not pa.types.is_dictionary(plain.type) else plain

        batches = [pa.record_batch([text(c.combine_chunks()) for c in part.columns], names=part.column_names)
                   for part in parts]
        return pa.Table.from_batches(batches) if not self.dictionary else \
            pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")

    def remove(self, source: Path) -> None:
        shutil.rmtree(source.parent)      # the temporary folder holding the directory


_LAYOUT_STORAGES = [_Layout("arrow_chunks", drop=("e",)), _Layout("arrow_dictionary", drop=("e",), dictionary=True),
                    _Layout("parquet_directory", ".parquet", drop=("e",))]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("storage", _LAYOUT_STORAGES, ids=lambda s: s.name)
@settings(max_examples=40, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_chain_behaves_alike_on_neighbouring_layouts(backend: str, storage: Storage, data: st.DataObject) -> None:
    """Checked sound: the composed oracle (random method chains, tuned ones too, on D and D′ = D plus one unit of
    probe values) with D and D′ as chunked Arrow tables (text as ``large_string``, or dictionary-encoded per chunk:
    categoricals), or as directories of Parquet files: the same outcomes, warnings and ledger statuses on both."""
    event(check(data.draw(chains(storage=storage, tuned=data.draw(st.booleans()))),
          data.draw(extreme_rows(storage, many=data.draw(st.booleans()))), backend, storage,
          data.draw(st.sampled_from([1, 3]))))
