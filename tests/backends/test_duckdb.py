"""The DuckDB backend's own guarantees: a private, locked connection; one query; method-chain fallback."""

from __future__ import annotations

from fractions import Fraction as F
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

import dpframe as dp
from dpframe.backends import duckdb as duckdb_backend
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.duckdb import KEEP, DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.mechanism import Statistic

DATA = pl.DataFrame({"u": [1, 1, 2, 3, 3, 3], "g": ["a", "b", "a", "a", "b", "b"], "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
REQ = StatisticsRequest("t", (), dp.PrivacyUnit("u", max_rows=2), ("g",), None,
                        (Statistic("rows"), Statistic("units")), 3)


def backend(**tables: pl.DataFrame) -> DuckDBBackend:
    b = DuckDBBackend()
    for name, df in tables.items():
        b.register(name, df.lazy())
    return b


def test_connection_is_locked_after_the_first_query(tmp_path: Path) -> None:
    secret = pl.DataFrame({"s": [42]})  # noqa: F841  (a caller variable a replacement scan would find)
    (tmp_path / "f.csv").write_text("a\n1\n")
    b = backend(t=DATA)
    b.statistics(REQ)
    con = b._con
    with pytest.raises(duckdb.Error):
        con.sql("SELECT * FROM secret").fetchall()
    with pytest.raises(duckdb.Error, match="disabled"):
        con.sql(f"SELECT * FROM read_csv('{tmp_path / 'f.csv'}')").fetchall()
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error):
        con.execute("INSTALL httpfs")


def test_parquet_is_scanned_in_place_and_nothing_else_is_readable(tmp_path: Path) -> None:
    path, other = tmp_path / "t.parquet", tmp_path / "other.parquet"
    DATA.write_parquet(path)
    DATA.write_parquet(other)
    b = DuckDBBackend()
    b.register_source("t", pl.scan_parquet(path), path)
    out = b.statistics(REQ)
    assert out["g"].to_list() == ["a", "b"] and out["__rows"].sum() == 5  # unit 3 keeps 2 of its 3 rows
    assert b._paths == [str(path.resolve())]
    with pytest.raises(duckdb.Error, match="disabled"):
        b._con.sql(f"SELECT * FROM read_parquet('{other}')").fetchall()


def test_statistics_read_the_table_through_the_bounding_mask_and_no_noise_in_sql() -> None:
    """Row level: one query, nothing registered. User level: the statistics query reads the table through
    the bounding mask (a 0/1 column beside the table's); the hashing ran in the candidates query."""
    b = backend(t=DATA)
    sql, frames = b.compile(StatisticsRequest("t", (), dp.PrivacyUnit.row(), ("g",), None, (Statistic("rows"),), 3))
    assert not frames and KEEP not in sql
    sql, frames = b.compile(REQ)
    (masked,) = frames.values()                  # the table's columns (shared, not copied) and the mask
    assert masked.column_names == [*DATA.columns, KEEP] and sum(masked[KEEP].to_pylist()) == 5
    assert f"WHERE {KEEP}" in sql and "hash(" not in sql
    assert "random" not in sql.lower() and "setseed" not in sql.lower()


def test_sums_run_in_doubles_or_64_bits_only_where_no_sum_can_leave_them(tmp_path: Path) -> None:
    """Six rows of terms ≤ 10 keep every partial sum below 2⁵³ (double sums); terms up to 2⁵² cannot leave
    64 bits (DuckDB's sum_no_overflow); terms up to SUM_LIMIT can (HUGEINT); the totals are exact every
    way, from memory and from Parquet."""
    small, large, huge = (Statistic("fixed_sum", "x", F(0), F(top), grid_exp=0) for top in (10, 2**52, 2**62))
    DATA.write_parquet(tmp_path / "t.parquet")
    for b in (backend(t=DATA), DuckDBBackend()):
        if not b._tables:
            b.register_source("t", pl.scan_parquet(tmp_path / "t.parquet"), tmp_path / "t.parquet")
        for stat, kind in ((small, "sum(trunc("), (large, "sum_no_overflow(CAST("), (huge, "sum(CAST(")):
            request = StatisticsRequest("t", (), dp.PrivacyUnit.row(), (), None, (stat,), 3)
            sql, _ = b.compile(request)
            assert [k for k in ("sum(trunc(", "sum_no_overflow(CAST(", "sum(CAST(") if k in sql] == [kind]
            assert b.statistics(request)[stat.key].item() == 21


def test_double_sums_are_exact_up_to_two_to_the_53() -> None:
    """4,000 terms of about ±2⁴⁰ (just within 2⁵³ in all) summed in doubles on DuckDB's threads: the exact
    integer total, equal to the Polars backend's 64-bit sum."""
    rng = np.random.default_rng(5)
    top = 2**40
    x = rng.integers(top - 2**20, top, 4000) * rng.choice([-1, 1], 4000)
    x[:2000] = np.abs(x[:2000])            # a large positive partial sum first, then cancellation
    frame = pl.DataFrame({"g": ["a"] * 4000, "x": (x + 0.75 * np.sign(x)).astype(np.float64)})
    stat = Statistic("fixed_sum", "x", F(-top), F(top), grid_exp=0)
    request = StatisticsRequest("t", (), dp.PrivacyUnit.row(), (), None, (stat,), 3)
    b = backend(t=frame)
    assert "sum(trunc(" in b.compile(request)[0]
    exact = int(np.sum(x.astype(object)))        # trunc(x ± 0.75) = x
    assert b.statistics(request)[stat.key].item() == exact
    polars = PolarsBackend()
    polars.register("t", frame.lazy())
    assert polars.statistics(request)[stat.key].item() == exact


def test_an_in_memory_table_is_handed_over_once_without_a_copy() -> None:
    """Registered once as Arrow sharing the frame's buffers (strings as views); queries reuse it."""
    df = DATA.with_columns(s=pl.col("g") + "x")
    b = backend(t=df)
    data = b._tables["t"].data
    assert data is not None and data.schema.field("s").type == pa.string_view()
    assert data.column("x").chunks[0].buffers()[1].address == df["x"].to_arrow().buffers()[1].address
    for request in (REQ, StatisticsRequest("t", (), dp.PrivacyUnit.row(), ("g",), None, (Statistic("rows"),), 3)):
        b.statistics(request)
    assert b._tables["t"].data is data


def test_reserved_and_case_clashing_columns_are_refused() -> None:
    with pytest.raises(dp.SchemaError, match="reserves"):
        backend(t=pl.DataFrame({"__dp_row": [1]}))
    with pytest.raises(dp.SchemaError, match="reserves"):
        backend(t=pl.DataFrame({"__dp_keep": [1]}))
    with pytest.raises(dp.SchemaError, match="differ only in case"):
        backend(t=pl.DataFrame({"a": [1], "A": [2]}))


def test_method_chain_on_duckdb_matches_polars() -> None:
    data = dp.datasets.visits(3_000)
    out = {}
    for name in ("polars", "duckdb"):
        sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=1_000),
                          budget=dp.PureDP(10), backend=name, seed=5)
        q = (sess.table("visits").filter(pl.col("age") >= 30).with_columns(double=pl.col("spend") * 2)
             .group_by("city", keys=sorted(data["city"].unique().to_list()))
             .agg(dp.len(), dp.mean("double", bounds=(0, 500))))
        out[name] = q.collect(dp.PureDP(1))
    assert_frame_equal(out["polars"], out["duckdb"])


def test_backend_is_listed_by_the_plugin_host() -> None:
    from dpframe.plugin import plugin_host

    assert "duckdb" in plugin_host().backend_names()
    assert any("backend duckdb" in p.provides for p in plugin_host().describe())


def test_unreadable_table_is_a_schema_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text('u,b\n1,2,3\n"x\n')
    with pytest.raises(dp.SchemaError) as info:
        dp.Session({"visits": bad}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), backend="duckdb")
    assert info.value.argument == "tables['visits']"
    assert "cannot read table 'visits': ComputeError" in str(info.value) and "\n" not in str(info.value)
    sess = dp.Session({"visits": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=1,
                      public_tables=None)
    sess._catalog._sources["broken"] = (pl.scan_csv(bad), bad)   # another backend registers it on first use
    with pytest.raises(dp.SchemaError, match=r"tables\['broken'\]"):
        sess.sql("SELECT COUNT(*) FROM visits", backend="duckdb").collect(dp.PureDP(0.5))
    assert sess.history().height == 0


@pytest.mark.parametrize("spread", [3_000, 60_000, "strings", "parquet", "large parquet", "parquet strings"])
def test_bounding_by_row_order_keeps_the_rows_of_the_numbered_query(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                    spread: int | str) -> None:
    """With no SQL row node, bounding reads the hashes of the rows it may drop from a scan filtered by a
    mask (their positions: the row order, which DuckDB keeps) and which rows are ranked from Polars: it
    keeps the rows the numbered candidates query keeps (positions, public keys and null units in SQL) —
    on a table of many Arrow chunks that DuckDB scans on several threads, with null units, null keys and
    rows outside the public keys (of one key column, and of two: a semi-join); with units of ~40 rows (all
    may lose rows), of ~2 (most keep all: from the second query on, the scan is filtered), and string
    units (every ranked row hashed), and from a Parquet file of many row groups, integer and string units
    (the columns read once by a plain scan into memory, :class:`_Columns`, against the numbered query of
    the file; a file too large to hold: its unit and key columns read, the hashes by a masked
    ``POSITIONAL JOIN``); for two seeds (the table's :class:`_Ranking` found again); with copies (rows
    equal in every column read: the same values kept), and without (the same rows kept).
    A scan that did not keep the row order would fail the ``i`` case. (Rows held as plain Arrow data are
    hashed by Polars instead, :func:`_local_hashes`, where the numbered query hashes in SQL: that path's
    rows are checked against the definition in ``test_bounding_fast.py``; here both paths hash in SQL.)"""
    monkeypatch.setattr(duckdb_backend, "_local_hashes", lambda *_: None)
    rng = np.random.default_rng(3)
    high = 3_000 if "strings" in str(spread) else 60_000 if "parquet" in str(spread) else int(spread)
    parts = [pl.DataFrame({"i": np.arange(j, j + 10_000), "u": rng.integers(0, high, 10_000),
                           "g": rng.choice(["a", "b", "c"], 10_000), "x": rng.choice([0.5, 1.5], 10_000)}).with_columns(
        u=pl.when(pl.col("x") * pl.col("u") % 7 == 0).then(None).otherwise(pl.col("u")),
        g=pl.when(pl.col("u") % 11 == 0).then(None).otherwise(pl.col("g")),
        h=pl.when(pl.col("i") % 13 == 0).then(None).otherwise(pl.col("i") % 3)) for j in range(0, 120_000, 10_000)]
    df = pl.concat(parts, rechunk=False)
    if spread in ("strings", "parquet strings"):
        df = df.with_columns(pl.col("u").cast(pl.String))
    if spread == "large parquet":      # (nothing held in memory, and no column read for it on any query)
        monkeypatch.setattr(duckdb_backend, "MEMORY_SHARE", 1 << 62)
        monkeypatch.setattr(DuckDBBackend, "_read_columns", lambda *_: pytest.fail("columns read to hold"))
    if "parquet" in str(spread):
        path = tmp_path / "t.parquet"
        df.write_parquet(path, row_group_size=7_000)
        b = DuckDBBackend()
        b.register_source("t", pl.scan_parquet(path), path)
        assert b._tables["t"].data is None
        data = df.to_arrow()
    else:
        b = backend(t=df)
        data = b._tables["t"].data
        assert data is not None and data.column("u").num_chunks > 1
    b._con.execute("SET threads = 4")
    unit = dp.PrivacyUnit("u", max_rows=3)
    two = pl.DataFrame({"g": ["a", "c", None, "b", "a"], "h": [0, 1, 1, None, 0]})    # (a repeated key too)
    for by, keys in ((("g",), pl.DataFrame({"g": ["a", "c", None]})), (("g", "h"), two), (("g",), None), ((), None)):
        for read in ("x", "i"):
            for seed in (11, 12):
                request = StatisticsRequest("t", (), unit, by, keys, (Statistic("nonnull", read),), seed)
                assert duckdb_backend._row_order(request, data)
                held = b._tables["t"].columns
                in_memory = held is not None and {"u", *by, read} <= set(held.data.column_names)
                by_order = b._keep(request, None)
                ranking = b._tables["t"].ranking
                # (the first query hashes every ranked row; on Parquet: numbered, unless its columns are in memory)
                first = read == "x" and seed == 11
                current = ranking is not None and ranking.key == ("u", by, 3) \
                    and duckdb_backend._same(ranking.keys, keys)
                assert current != (first and "parquet" in str(spread) and not in_memory)
                if ranking is not None and current:
                    assert ranking.hashed is not None and ranking.settled != first     # (null units: some never ranked)
                    if spread in (60_000, "parquet", "large parquet") and ranking.settled:
                        assert 0 < ranking.hashed.sum() < 0.7 * df.height
                with monkeypatch.context() as m:
                    m.setattr(duckdb_backend, "_row_order", lambda *_: False)
                    m.setattr(b._tables["t"], "columns", None)      # (on Parquet: the numbered query of the file)
                    numbered = b._keep(request, None)
                assert by_order.sum() > 0
                if read == "i":
                    assert np.array_equal(by_order, numbered)
                else:     # which of two copies is kept is the numbered query's row order: the values are the same
                    columns = ["u", *by, "x"]
                    assert_frame_equal(df.filter(by_order).select(columns).sort(columns),
                                       df.filter(numbered).select(columns).sort(columns))
    # Keys Polars might match otherwise than DuckDB (floats: NaN, -0.0, alone or beside others) stay in SQL.
    stats = (Statistic("rows"),)
    floats = StatisticsRequest("t", (), unit, ("x",), pl.DataFrame({"x": [0.5]}), stats, 11)
    pairs = StatisticsRequest("t", (), unit, ("g", "x"), pl.DataFrame({"g": ["a"], "x": [0.5]}), stats, 11)
    assert not duckdb_backend._row_order(floats, data) and not duckdb_backend._row_order(pairs, data)
    if "parquet" in str(spread):
        assert (b._tables["t"].columns is None) == (spread == "large parquet")


def test_parquet_columns_in_memory_are_those_of_the_current_file(tmp_path: Path) -> None:
    """From its second user-level query on, a Parquet file's columns are read once into memory (strings
    dictionary-encoded) and later queries run on them: the same answers as a fresh backend's, with null units
    and a unit over ``max_rows``. When the file is rewritten (which the catalog refuses anyway), the backend
    forgets them and the ranking (keyed on the file's version) and reads the new file."""
    path = tmp_path / "t.parquet"
    pl.DataFrame({"u": [1] * 6 + [2, None], "g": ["a"] * 7 + ["b"], "x": [1.0] * 8}).write_parquet(path)
    b = DuckDBBackend()
    b.register_source("t", pl.scan_parquet(path), path)
    unit = dp.PrivacyUnit("u", max_rows=2)
    rows = StatisticsRequest("t", (), unit, ("g",), pl.DataFrame({"g": ["a", "b"]}), (Statistic("rows"),), 7)
    sums = StatisticsRequest("t", (), unit, ("g",), pl.DataFrame({"g": ["a", "b"]}),
                             (Statistic("nonnull", "x"),), 8)
    for _ in range(3):
        assert b.statistics(rows)["__rows"].to_list() == [3, 0]       # unit 1: 2 of 6 rows, unit 2: 1, null: none
    held = b._tables["t"].columns
    assert held is not None and pa.types.is_dictionary(held.data.schema.field("g").type)
    assert b.statistics(sums)["__nonnull:x"].to_list() == [3, 0]
    new = pl.DataFrame({"u": [1] * 50 + [3] * 50 + [None] * 5, "g": ["b"] * 100 + ["a"] * 5, "x": [1.0] * 105})
    new.write_parquet(path)
    fresh = DuckDBBackend()
    fresh.register_source("t", pl.scan_parquet(path), path)
    for request in (rows, sums, rows):
        assert_frame_equal(b.statistics(request), fresh.statistics(request))
    assert b.statistics(rows)["__rows"].to_list() == [0, 4]


@pytest.mark.parametrize("case", ["keys", "null key", "70,000 keys", "unit is the key", "copies"])
def test_user_level_statistics_grouped_by_key_codes_match_polars(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """On an in-memory table (the first query of a ranking, and after it settled), a string key column's
    groups are each row's public-key code (one small integer column beside the table, 0 for a row bounding
    dropped or outside the keys), and the keys come back from the public keys: the same statistics as the
    Polars backend's for each seed, and as the DuckDB backend's without the codes — null units and keys,
    strings outside the keys (empty, non-ASCII, long enough to be held out of line, a prefix of a key), a
    repeated key, keys with no rows, units over ``max_rows``, every statistic kind of a group-by, a 16-bit and
    a 32-bit code, the unit as the key. With copies (rows equal in every column read: null ``x``), against
    the DuckDB backend only: each backend re-hashes copies with its own engine's hash."""
    rng = np.random.default_rng(11)
    words = ["a", "b", "", "é", "ab", "a" * 40, "a" * 39 + "b", "zz"]
    n = 20_000
    df = pl.DataFrame({"u": rng.integers(0, 2_500, n), "g": rng.choice(words, n), "x": rng.normal(5, 4, n)})
    df = df.with_columns(u=pl.when(pl.col("u") % 17 == 0).then(None).otherwise(pl.col("u")),
                         g=pl.when(pl.col("u") % 13 == 0).then(None).otherwise(pl.col("g")),
                         x=pl.when((pl.col("u") % 11 == 0) & (case == "copies")).then(None).otherwise(pl.col("x")))
    keys: list[str | None] = ["a", "", "é", "a" * 40, "b", "a", "never"]
    key, unit = "g", dp.PrivacyUnit("u", max_rows=3)
    if case in ("null key", "copies"):
        keys.append(None)
    elif case == "70,000 keys":
        keys = [*(f"k{i}" for i in range(70_000)), *keys]
    elif case == "unit is the key":
        df = df.with_columns(s=pl.col("u").cast(pl.String))
        key, unit = "s", dp.PrivacyUnit("s", max_rows=3)
        keys = [*(str(i) for i in range(0, 2_500, 3)), "never", None]
    public = pl.DataFrame({key: keys}, schema={key: pl.String})
    stats = (Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"),
             Statistic("fixed_sum", "x", F(-2), F(9), grid_exp=-4))
    duck, plain, polars = backend(t=df), backend(t=df), PolarsBackend()
    polars.register("t", df.lazy())
    sqls: list[str] = []
    run, codes = DuckDBBackend._run, duckdb_backend._key_codes

    def logged(self: DuckDBBackend, sql: str, frames: dict[str, object]) -> pl.DataFrame:
        sqls.append(sql)
        return run(self, sql, frames)

    monkeypatch.setattr(DuckDBBackend, "_run", logged)

    def without_codes(request: StatisticsRequest) -> pl.DataFrame:
        with monkeypatch.context() as m:
            m.setattr(duckdb_backend, "_key_codes", lambda *_: None)
            return plain.statistics(request)

    for seed in (3, 4, 5):
        request = StatisticsRequest("t", (), unit, (key,), public, stats, seed)
        got = duck.statistics(request)
        assert f"GROUP BY {KEEP}" in sqls[-1]
        assert_frame_equal(got, without_codes(request))
        if case != "copies":
            assert_frame_equal(got, polars.statistics(request))
        assert got[key].to_list() == pl.Series(keys).sort(nulls_last=False).to_list() and got["__rows"].sum() > 0
    ranking = duck._tables["t"].ranking
    assert ranking is not None and ranking.groups is not None and codes is duckdb_backend._key_codes
    assert ranking.groups.codes.dtype == (np.uint32 if case == "70,000 keys" else np.uint16)
    # other requests on the same table: max_groups (the numbered path's mask over the same rows, the codes of
    # the same keys), other keys (codes again), no keys, row level (no codes)
    groups = dp.PrivacyUnit(str(unit.column), max_rows=3, max_groups=1)
    for request, coded in ((StatisticsRequest("t", (), groups, (key,), public, stats, 6), True),
                           (StatisticsRequest("t", (), unit, (key,), public.head(2), stats, 6), True),
                           (StatisticsRequest("t", (), unit, (key,), None, stats, 6), False),
                           (StatisticsRequest("t", (), dp.PrivacyUnit.row(), (key,), public, stats[:1], 6), False)):
        got = duck.statistics(request)
        assert (f"GROUP BY {KEEP}" in sqls[-1]) == coded
        assert_frame_equal(got, without_codes(request))
