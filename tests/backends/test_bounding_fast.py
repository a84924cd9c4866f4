"""The fast contribution bounding keeps exactly the rows of the one-window definition.

Both backends bound a unit's rows by ranking them on a seeded hash of the values the statistics read
— the j-th copy (j ≥ 1) of a row repeated in its unit re-hashed with j, so copies do not share one
hash — and keeping ranks ≤ max_rows. The backends rank only the units that have more rows than that
(Polars: a count per unit, a minimum per unit when max_rows = 1, and copies numbered only where a
hash repeats; DuckDB: a GROUP BY count and an anti-join of the rows ranked past max_rows). These tests
compare them with the plain definition, written out here independently of the backends' code (copies
numbered by one window over (unit, hash)): the same rows kept on tables mixing small units, big units,
many repeated rows, NULL units and several unit types, for max_rows = 1 and larger, with and without
max_groups. Copies are interchangeable (equal in every column a statistic reads), so what is compared
is the multiset of kept values — and, where the row id is itself read by a statistic, the row ids.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pytest

from dpframe.backends import _bounding
from dpframe.backends import duckdb as duckdb_backend
from dpframe.backends._bounding import smallest_per_unit
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend, keep_smallest, statistic_expr
from dpframe.mechanism import Statistic
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.backends import assert_same, reference

SEED_MASK = (1 << 63) - 1
ROW_SALT = 0x5DEECE66D
STATS = (Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"),
         Statistic("fixed_sum", "x", Fraction(0), Fraction(3), Fraction(0), 1, -4))


def stats_for(unit_kind: str) -> tuple[Statistic, ...]:
    """STATS, without ``units`` for float units (the Python reference counts each NaN as its own unit)."""
    return STATS if unit_kind != "float" else tuple(s for s in STATS if s.kind != "units")


def table(seed: int, unit_kind: str = "int") -> pl.DataFrame:
    """Units of 1-3 rows (most) and 8-30 rows (some), few distinct values (many duplicate rows), NULL units."""
    rng = np.random.default_rng(seed)
    sizes = np.where(rng.random(120) < 0.8, rng.integers(1, 4, 120), rng.integers(8, 31, 120))
    ids = np.repeat(np.arange(120), sizes)
    rng.shuffle(ids)
    n = ids.size
    u: Any = ids
    if unit_kind == "str":
        u = [f"user-{i}" for i in ids]
    elif unit_kind == "float":   # -0.0 and 0.0 are one unit, NaN is one unit (as in the group-by)
        u = np.choose(ids % 4, [ids * 1.0, np.where(ids % 8 == 1, -0.0, 0.0), np.full(n, np.nan), ids + 0.5])
    df = pl.DataFrame({"u": u, "g": rng.choice(["a", "b", "c"], n), "x": rng.choice([0.5, 1.5, 2.5], n),
                       "i": np.arange(n)})
    return df.with_columns(pl.when(pl.col("i") % 17 == 3).then(None).otherwise(pl.col("u")).alias("u"))


# ------------------------------------------------------------------------------------ reference: Polars


def copy_hash(h: pl.Expr, copy: pl.Expr, seed: int) -> pl.Expr:
    """Copy 0 of a row keeps its hash ``h``; copy j ≥ 1 gets the hash of (h, j)."""
    return pl.when(copy == 0).then(h).otherwise(pl.struct(h, copy).hash(seed))


def polars_reference(df: pl.DataFrame, unit: PrivacyUnit, by: tuple[str, ...], used: list[str],
                     seed: int) -> pl.DataFrame:
    """The bounded rows by the definition: number the copies, rank every unit's rows on the hash, keep rank ≤ m."""
    u = unit.column
    assert u is not None
    seed &= SEED_MASK
    frame = df.filter(pl.col(u).is_not_null())
    unit_and_keys = list(dict.fromkeys([u, *by]))
    if by and unit.max_groups is not None and unit.max_groups < unit.max_rows:
        pairs = frame.select(unit_and_keys).unique()
        pairs = (pairs.with_columns(pairs.hash_rows(seed).alias("h"))
                 .filter(pl.col("h").rank("ordinal").over(u) <= unit.max_groups).drop("h"))
        frame = frame.join(pairs, on=unit_and_keys, how="semi", nulls_equal=True)
    frame = frame.with_columns(frame.select([*unit_and_keys, *used]).hash_rows(seed ^ ROW_SALT).alias("h"))
    copy = pl.int_range(pl.len(), dtype=pl.Int64).over(u, "h").alias("copy")
    frame = frame.with_columns(copy_hash(pl.col("h"), copy, seed ^ ROW_SALT).alias("h"))
    return frame.filter(pl.col("h").rank("ordinal").over(u) <= unit.max_rows).drop("h")


def kept_values(frame: pl.DataFrame, columns: list[str]) -> list[tuple[Any, ...]]:
    """The multiset of kept values (sorted rows; NaN and -0.0 written so that equal values compare equal)."""
    return sorted(tuple(repr(v + 0.0) if isinstance(v, float) else v for v in row)
                  for row in frame.select(columns).rows())


@pytest.mark.parametrize("unit_kind", ["int", "str", "float"])
@pytest.mark.parametrize("max_rows", [1, 2, 5, 40])
def test_polars_keeps_the_rows_of_the_definition(unit_kind: str, max_rows: int) -> None:
    for seed in range(3):
        df = table(seed, unit_kind)
        b = PolarsBackend()
        b.register("t", df.lazy())
        for by in [(), ("g",)]:
            unit = PrivacyUnit("u", max_rows=max_rows)
            req = StatisticsRequest("t", (), unit, by, None, stats_for(unit_kind), seed * 1_000_003 + 17)
            got = b.bounded(req).collect()
            want = polars_reference(df, unit, by, ["x"], req.seed)
            hashed = ["u", *by, "x"]      # what the statistics read: other columns may differ between copies
            assert kept_values(got, hashed) == kept_values(want, hashed)
            assert_same(b.statistics(req), reference(want, req.statistics, "u", by))
            ids = StatisticsRequest("t", (), unit, by, None, (Statistic("nonnull", "i"),), req.seed)
            assert sorted(b.bounded(ids).collect()["i"]) == sorted(polars_reference(df, unit, by, ["i"], req.seed)["i"])


@pytest.mark.parametrize("max_rows, max_groups", [(5, 1), (5, 2), (2, 1)])
def test_polars_keeps_the_groups_and_rows_of_the_definition(max_rows: int, max_groups: int) -> None:
    for seed in range(3):
        df = table(seed + 10)
        b = PolarsBackend()
        b.register("t", df.lazy())
        unit = PrivacyUnit("u", max_rows=max_rows, max_groups=max_groups)
        req = StatisticsRequest("t", (), unit, ("g",), None, STATS, seed + 5)
        want = polars_reference(df, unit, ("g",), ["x"], req.seed)
        assert kept_values(b.bounded(req).collect(), ["u", "g", "x"]) == kept_values(want, ["u", "g", "x"])


def test_keep_smallest_gives_copies_their_own_hashes() -> None:
    """Rows equal in every hashed column are separate rows: a unit of n copies keeps min(k, n) of them."""
    df = pl.DataFrame({"u": [1, 2, 1, 1, 2, 1, 3], "i": [0, 1, 2, 3, 4, 5, 6]})
    for k in (1, 2, 3):
        got = keep_smallest(df.lazy(), "u", ["u"], 99, k).group_by("u").len().sort("u").collect()
        assert got.rows() == [(1, min(k, 4)), (2, min(k, 2)), (3, 1)]


def test_keep_smallest_keeps_copies_with_their_multiplicity() -> None:
    """9 copies of 0 and one 1 per unit, k = 1: the 1 is kept in about a tenth of the units (not half)."""
    df = pl.DataFrame({"u": np.repeat(np.arange(5_000), 10), "x": np.tile([0] * 9 + [1], 5_000)})
    for k, want in [(1, 500), (3, 1_500)]:
        got = keep_smallest(df.lazy(), "u", ["u", "x"], 99, k).collect()
        assert got.height == 5_000 * k and abs(got["x"].sum() - want) < 5 * (want * 0.9) ** 0.5


def test_keep_smallest_does_not_depend_on_row_order_or_other_units() -> None:
    """The kept multiset of each unit, copies included, is the same after shuffling and adding a unit."""
    rng = np.random.default_rng(8)
    df = pl.DataFrame({"u": np.repeat(np.arange(400), 9), "x": rng.integers(0, 3, 3_600)})
    bigger = pl.concat([df, pl.DataFrame({"u": [-1] * 50, "x": [1] * 50})]).sample(fraction=1.0, shuffle=True, seed=9)
    for k in (1, 4):
        a = keep_smallest(df.lazy(), "u", ["u", "x"], 5, k).collect()
        b = keep_smallest(bigger.lazy(), "u", ["u", "x"], 5, k).filter(pl.col("u") >= 0).collect()
        assert kept_values(a, ["u", "x"]) == kept_values(b, ["u", "x"])


# ------------------------------------------------------------------------------------ reference: DuckDB


def duckdb_reference(df: pl.DataFrame, unit: PrivacyUnit, by: tuple[str, ...], used: list[str],
                     seed: int, hasher: str = "polars") -> pl.DataFrame:
    """The definition in DuckDB SQL: copies numbered in row order, one window over every unit, ties by row.

    The rows' hashes as the backend takes them: Polars' ``hash_rows`` for rows it holds as Arrow data
    (``hasher="polars"``), else DuckDB's ``hash`` of each column and its null flag.
    """
    con = duckdb.connect()
    columns = list(dict.fromkeys([str(unit.column), *by, *used]))
    salted = (seed & SEED_MASK) ^ ROW_SALT
    if hasher == "polars":
        con.register("t", df.with_row_index("r").with_columns(h=df.select(columns).hash_rows(salted)).to_arrow())
        hash_sql = "h"
    else:
        con.register("__t", df.with_row_index("r").to_arrow())
        con.execute("CREATE VIEW t AS SELECT *, NULL::UBIGINT AS h FROM __t")
        hash_sql = f"hash({', '.join(f'{c}, {c} IS NULL' for c in columns)}, {salted})"
    out = con.sql(f"SELECT * EXCLUDE (r, h, c) FROM (SELECT *, row_number() OVER (PARTITION BY u, h ORDER BY r) - 1 "
                  f"AS c FROM (SELECT * EXCLUDE (h), {hash_sql} AS h FROM t WHERE u IS NOT NULL)) "
                  f"QUALIFY rank() OVER (PARTITION BY u ORDER BY CASE WHEN c = 0 THEN h ELSE hash(h, c, {salted}) END, "
                  f"r) <= {unit.max_rows}").pl()
    return out.with_columns(pl.col(c).cast(df.schema[c]) for c in out.columns)


@pytest.mark.parametrize("unit_kind", ["int", "str", "float"])
@pytest.mark.parametrize("max_rows", [1, 3, 40])
def test_duckdb_keeps_the_rows_of_the_definition(unit_kind: str, max_rows: int) -> None:
    for seed in range(3):
        df = table(seed, unit_kind)
        b = DuckDBBackend()
        b.register("t", df.lazy())
        unit = PrivacyUnit("u", max_rows=max_rows)
        for by in [(), ("g",)]:
            req = StatisticsRequest("t", (), unit, by, None, stats_for(unit_kind), seed * 7919 + 3)
            want = duckdb_reference(df, unit, by, ["x"], req.seed)
            assert_same(b.statistics(req), reference(want, req.statistics, "u", by))
            # The row ids themselves: with "i" read by a statistic, each kept set is a set of distinct rows.
            ids = (Statistic("sorted", "i", Fraction(0), Fraction(10**6), Fraction(0)),)
            got = b.statistics(StatisticsRequest("t", (), unit, (), None, ids, req.seed))
            assert got[ids[0].key].item().to_list() == sorted(duckdb_reference(df, unit, (), ["i"], req.seed)["i"])


@pytest.mark.parametrize("unit_kind", ["int", "str"])
def test_duckdb_hashes_a_parquet_files_rows_itself_on_every_path(unit_kind: str, tmp_path: Path) -> None:
    """In memory, rows are hashed by Polars (the definition's rows under its hash, above); from a Parquet
    file always by DuckDB — its first query (the numbered one) and later ones (its columns held in memory)
    alike — so a seeded query keeps the same rows whatever the table's history or the machine's memory."""
    df = table(1, unit_kind)
    df.write_parquet(tmp_path / "t.parquet")
    b = DuckDBBackend()
    b.register_source("t", pl.scan_parquet(tmp_path / "t.parquet"), tmp_path / "t.parquet")
    unit = PrivacyUnit("u", max_rows=3)
    for seed, by in ((11, ()), (12, ()), (13, ("g",)), (12, ())):
        req = StatisticsRequest("t", (), unit, by, None, stats_for(unit_kind), seed)
        want = duckdb_reference(df, unit, by, ["x"], req.seed, "duckdb")
        assert_same(b.statistics(req), reference(want, req.statistics, "u", by))
    assert b._tables["t"].columns is not None          # (the later queries read the columns held in memory)


@pytest.mark.parametrize("unit_kind", ["str", "int"])
@pytest.mark.parametrize("max_rows", [1, 3])
def test_duckdb_exact_fallback_keeps_the_rows_of_the_definition(max_rows: int, unit_kind: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unit left to the exact path (unit hashes made all equal): DuckDB's own definition in SQL, with
    its copy hashes, still keeps the reference's rows (integer units: only those of units with more than
    ``max_rows`` rows are ranked)."""
    calls: list[int] = []

    def colliding(units: Any, hashes: Any, k: int, seed: int, rehash: Any, exact: Any) -> Any:
        def counted(at: Any) -> Any:
            calls.append(at.size)
            return exact(at)
        return smallest_per_unit(units, np.zeros(units.len(), dtype=np.uint64), hashes, k, rehash, counted)

    monkeypatch.setattr(duckdb_backend, "kept", colliding)
    for seed in range(2):
        df = table(seed, unit_kind)
        b = DuckDBBackend()
        b.register("t", df.lazy())
        unit = PrivacyUnit("u", max_rows=max_rows)
        req = StatisticsRequest("t", (), unit, (), None, STATS, seed * 31 + 1)
        want = duckdb_reference(df, unit, (), ["x"], req.seed)
        assert_same(b.statistics(req), reference(want, req.statistics, "u", ()))
    assert calls


# ------------------------------------------------------------------------------ fixed_sum's float → int cast


def test_fixed_sum_cast_truncates_toward_zero_and_skips_nan() -> None:
    """The saturating cast of statistic_expr: values already inside Int64 truncate toward zero, NaN adds 0.

    It relies on Polars' ``wrap_numerical`` float → Int64 cast (Rust ``as``); this pins that behaviour.
    """
    values = pl.Series([float("nan"), 1.75, -1.75, 0.5, -0.5, None, float("inf"), float("-inf"), -3.0])
    assert values.cast(pl.Int64, wrap_numerical=True).to_list() == \
        [0, 1, -1, 0, 0, None, 2**63 - 1, -(2**63), -3]
    stat = Statistic("fixed_sum", "x", Fraction(-2), Fraction(2), Fraction(0), 1, -1)   # terms: trunc(2·clamp(x))
    df = pl.DataFrame({"x": values})
    got = df.select(statistic_expr(stat, None, df.schema)).item()
    assert got == 0 + 3 - 3 + 1 - 1 + 4 - 4 - 4


@pytest.mark.parametrize("kind", ["random", "few values", "one value"])
def test_split_sort_sorts_like_numpy(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The split sort (several threads) on small chunks, so that every size takes the split path.
    monkeypatch.setenv("DPFRAME_THREADS", "5")
    monkeypatch.setattr(_bounding, "CHUNK", 16)
    rng = np.random.default_rng(3)
    for n in [80, 81, 1_000, 4_099]:
        keys = {"random": rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True),
                "few values": rng.integers(0, 4, n).astype(np.uint64),
                "one value": np.full(n, 2**64 - 1, dtype=np.uint64)}[kind]
        assert np.array_equal(_bounding.sort(keys), np.sort(keys))


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
@pytest.mark.parametrize("engine", ["numpy", "polars"])
def test_each_sort_engine_sorts_like_numpy(engine: str, dtype: type[np.integer[Any]],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Both engines, from the first key on, on extremes, repeats, no keys; on the pool's threads or not.
    monkeypatch.setattr(_bounding, "SORT_ENGINE", engine)
    monkeypatch.setattr(_bounding, "POLARS_SORT_FROM", 0)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(4)
    for n in [0, 1, 2, 1_000]:
        for keys in [rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True),
                     rng.choice(np.array([info.min, 0, info.max], dtype=dtype), n)]:
            for threaded in (True, False):
                got = _bounding.sort(keys.copy(), spare=True, threaded=threaded)
                assert got.dtype == dtype and np.array_equal(got, np.sort(keys))
                assert np.array_equal(_bounding.sort(keys, threaded=threaded), np.sort(keys))


def test_the_sort_engine_is_chosen_once_by_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bounding, "SORT_ENGINE", "")
    first = _bounding.sort_engine()
    assert first in ("numpy", "polars") and _bounding.SORT_ENGINE == first
    monkeypatch.setattr(_bounding, "pl", None)           # timing again would need Polars' sort
    assert _bounding.sort_engine() == first


def test_polars_keeps_the_rows_of_the_definition_with_the_split_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPFRAME_THREADS", "4")
    monkeypatch.setattr(_bounding, "CHUNK", 32)
    test_polars_keeps_the_rows_of_the_definition("int", 2)
    test_polars_keeps_the_rows_of_the_definition("str", 1)


def test_both_backends_keep_the_rows_of_the_definition_in_small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-row passes in steps of a few rows (several steps per chunk and per thread, the last one short)."""
    monkeypatch.setenv("DPFRAME_THREADS", "3")
    monkeypatch.setattr(_bounding, "CHUNK", 40)
    monkeypatch.setattr(_bounding, "STEP", 7)
    test_polars_keeps_the_rows_of_the_definition("int", 2)
    test_polars_keeps_the_rows_of_the_definition("str", 1)
    test_duckdb_keeps_the_rows_of_the_definition("int", 3)
