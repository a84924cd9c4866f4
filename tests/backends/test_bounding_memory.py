"""The contribution bounding's memory (issue 17): no row-sized copy it does not need, the same rows kept.

The kept rows are the definition's on every route (tests/backends/test_bounding_exact.py and
test_bounding_fast.py); these tests pin what the routes allocate: integer units read in place, the rows
that are not ranked told apart by a flag beside the unit column (no copy of the units with them nulled),
the row hashes computed a slice at a time, and the copy path holding at most four row-sized arrays.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import polars as pl
import pytest

from dpframe.backends import _bounding
from dpframe.backends import polars as polars_backend
from dpframe.backends._bounding import U64s, kept
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.polars import PolarsBackend, _copy_hash, definition, kept_mask, row_hashes
from dpframe.mechanism import Statistic
from dpframe.privacy_unit import PrivacyUnit

SEED = 5


def rehash(h: U64s, copy: Any) -> U64s:
    pairs = pl.DataFrame({"h": pl.Series(h, dtype=pl.UInt64), "j": pl.Series(copy, dtype=pl.Int64)})
    out: U64s = pairs.select(_copy_hash(pl.col("h"), pl.col("j"), SEED)).to_series().to_numpy()
    return out


def chunked(values: Any, dtype: pl.DataType, parts: int = 3) -> pl.Series:
    """``values`` as a Series of ``parts`` chunks (a table read from a file has one per row group)."""
    pieces = np.array_split(np.asarray(values, dtype=object), parts)
    return pl.concat([pl.Series("u", list(p), dtype=dtype) for p in pieces], rechunk=False)


def units_and_hashes(seed: int, n: int = 3000, users: int = 200, values: int = 4) -> tuple[np.ndarray, U64s]:
    """Units with 1-30 rows, few values per unit (copies), and their row hashes."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, users, n)
    value = rng.integers(0, values, n)
    hashes = pl.DataFrame({"u": ids, "v": value}).select(pl.struct("u", "v").hash(SEED)).to_series().to_numpy()
    return ids, hashes


def expected(units: pl.Series, hashes: U64s, k: int, ranked: np.ndarray | None = None) -> list[bool]:
    """The definition's rows: units nulled where not ranked, then ranked by one window (null: never kept)."""
    nulled = units if ranked is None else pl.select(pl.when(pl.Series(ranked)).then(units)).to_series()
    out = np.zeros(units.len(), dtype=bool)
    at = np.flatnonzero(nulled.is_not_null().to_numpy())
    out[at] = definition(nulled.gather(at), hashes[at], SEED, k)
    return out.tolist()


def fail(*_: Any, **__: Any) -> Any:
    raise AssertionError("a row-sized copy of the units")


@pytest.mark.parametrize("dtype", [pl.Int64(), pl.UInt64()])
def test_non_negative_integer_units_are_read_in_place(dtype: pl.DataType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids from 0 (or a little more) in a column of several chunks: no ``minus`` copy of the column, same rows."""
    monkeypatch.setattr(_bounding, "minus", fail)
    for seed, offset in ((0, 0), (1, 7), (2, 1000)):
        ids, hashes = units_and_hashes(seed)
        units = chunked(ids + offset, dtype)
        assert units.n_chunks() == 3
        for k in (1, 3):
            got = kept(units, hashes, k, SEED, rehash, lambda at: pytest.fail("exact"))
            assert got.tolist() == expected(units, hashes, k)


@pytest.mark.parametrize("kind", ["int", "negative", "str"])
@pytest.mark.parametrize("nulls", [False, True])
def test_rows_not_ranked_are_a_flag_beside_the_units(kind: str, nulls: bool) -> None:
    """``kept(..., ranked)`` keeps the rows of the definition on the units nulled where not ranked: a row not
    ranked is never kept and uses up nothing, whether its unit is null, small, or a string."""
    for seed in range(3):
        ids, hashes = units_and_hashes(seed)
        rng = np.random.default_rng(seed + 10)
        values: list[Any] = (ids.tolist() if kind == "int" else (ids - 10**6).tolist() if kind == "negative"
                             else [f"user-{i}" for i in ids])
        if nulls:
            values = [None if rng.random() < 0.1 else v for v in values]
        units = chunked(values, pl.String() if kind == "str" else pl.Int64())
        ranked = rng.random(ids.size) < 0.7
        for k in (1, 4):
            got = kept(units, hashes, k, SEED, rehash,
                       lambda at: definition(units.gather(at), hashes[at], SEED, k), ranked)
            assert got.tolist() == expected(units, hashes, k, ranked)
            assert not got[~ranked].any()


def test_rows_not_ranked_read_the_units_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer units with nulls or rows not ranked: their values are read in place, no copy with nulls filled."""
    ids, hashes = units_and_hashes(4)
    values = [None if i % 7 == 0 else int(v) for i, v in enumerate(ids)]
    units = chunked(values, pl.Int64())
    ranked = np.arange(ids.size) % 5 != 0
    want = expected(units, hashes, 2, ranked)
    monkeypatch.setattr(pl.Series, "fill_null", fail)
    got = kept(units, hashes, 2, SEED, rehash, lambda at: definition(units.gather(at), hashes[at], SEED, 2), ranked)
    assert got.tolist() == want


def test_bounded_hands_the_unit_column_itself_and_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows outside the public keys are not ranked: the backend passes the unit column as it is (no nulled
    copy) with a mask of the ranked rows, and the kept rows are the definition's on the nulled units."""
    rng = np.random.default_rng(3)
    n = 4000
    frame = pl.DataFrame({"u": rng.integers(0, 300, n), "g": rng.choice(["a", "b", "c"], n),
                          "x": rng.choice([0.5, 1.5], n)})
    seen: list[tuple[pl.Series, Any]] = []
    real = polars_backend.kept_mask

    def spy(units: pl.Series, hashes: U64s, seed: int, k: int, ranked: Any = None) -> Any:
        seen.append((units, ranked))
        return real(units, hashes, seed, k, ranked)

    monkeypatch.setattr(polars_backend, "kept_mask", spy)
    backend = PolarsBackend()
    backend.register("t", frame.lazy())
    keys = pl.DataFrame({"g": ["a", "b"]})
    request = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=2), ("g",), keys, (Statistic("rows"),), 99)
    got = backend.bounded(request).collect()
    (units, ranked), = seen
    assert units.null_count() == 0 and units.equals(frame["u"])
    assert ranked is not None and ranked.tolist() == frame["g"].is_in(["a", "b"]).to_list()
    seed = 99 & ((1 << 63) - 1) ^ 0x5DEECE66D
    hashes = row_hashes(frame.select("u", "g"), seed)      # the columns the statistics read
    nulled = frame.select(pl.when(pl.col("g").is_in(["a", "b"])).then(pl.col("u"))).to_series()
    want = kept_mask(nulled, hashes, seed, 2)
    assert got.equals(frame.filter(pl.Series(want)).select("u", "g"))


def test_row_hashes_are_hashed_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same hashes as ``hash_rows`` over the whole frame (slices across the frame's chunks too), each call
    on at most CHUNK rows: no second row-sized array inside one call."""
    monkeypatch.setattr(polars_backend, "CHUNK", 700)
    rng = np.random.default_rng(1)
    frame = pl.concat([pl.DataFrame({"u": rng.integers(0, 50, m), "f": rng.random(m),
                                     "s": [("x", "yy", None)[i] for i in rng.integers(0, 3, m)]})
                       for m in (1000, 450, 1300)], rechunk=False)
    want = frame.hash_rows(17).to_numpy()
    heights: list[int] = []
    real = pl.DataFrame.hash_rows

    def spy(self: pl.DataFrame, *args: Any, **kwargs: Any) -> pl.Series:
        heights.append(self.height)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "hash_rows", spy)
    got = row_hashes(frame, 17)
    assert got.tolist() == want.tolist()
    assert max(heights) <= 700 and sum(heights) == frame.height
    assert row_hashes(frame.clear(), 17).size == 0


class Tracked:
    """:func:`~dpframe.backends._bounding.empty` counting the bytes its arrays hold while alive, and their peak."""

    def __init__(self) -> None:
        self.live = self.peak = 0
        self.real = _bounding.empty

    def __call__(self, n: int, dtype: Any) -> Any:
        out = self.real(n, dtype)
        self.live += out.nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(out, self.freed, out.nbytes)
        return out

    def freed(self, nbytes: int) -> None:
        self.live -= nbytes


def test_the_copy_path_holds_at_most_four_row_sized_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_with_copies`` on n rows: its own arrays (from Arrow's pool; numpy's sort, in place) peak at four of
    8n bytes and the kept mask, and it keeps the rows of the definition."""
    monkeypatch.setattr(_bounding, "SORT_ENGINE", "numpy")
    n = 200_000
    rng = np.random.default_rng(2)
    buckets = np.sort(rng.integers(0, 1 << 10, n))
    hashes = (rng.integers(0, 5, n).astype(np.uint64) + buckets.astype(np.uint64) * np.uint64(7)) * np.uint64(
        0x9E3779B97F4A7C15)      # few values per bucket: copies everywhere
    tops = buckets.astype(np.uint64) << np.uint64(64 - 10)
    tracked = Tracked()
    monkeypatch.setattr(_bounding, "empty", tracked)
    got, unresolved = _bounding._with_copies(tops, hashes, 10, 3, rehash)
    assert tracked.peak <= 4 * 8 * n + n + (1 << 16)
    assert unresolved.size == 0
    assert got.tolist() == definition(pl.Series(buckets), hashes, SEED, 3).tolist()
