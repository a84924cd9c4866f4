"""The vectorized bottom-k of :mod:`dpframe.backends._bounding` keeps exactly the rows of the law's definition.

:func:`dpframe.backends.polars.definition` is the law written out (copies numbered and re-hashed, a rank
over the unit); the fast functions must agree with it row for row on every path they take: units at or
under the limit, one-unit buckets decided by one sort, buckets holding copies, buckets shared by several
units (a second and third round on other bits of the unit hash), hashes equal in their high bits, and
units left to the exact fallback — forced here with unit hashes that collide on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

from dpframe.backends._bounding import U64s, smallest_per_id, smallest_per_unit
from dpframe.backends.polars import _copy_hash, definition, kept_mask

SEED = 11


def rehash(h: U64s, copy: Any) -> U64s:
    pairs = pl.DataFrame({"h": pl.Series(h, dtype=pl.UInt64), "j": pl.Series(copy, dtype=pl.Int64)})
    out: U64s = pairs.select(_copy_hash(pl.col("h"), pl.col("j"), SEED)).to_series().to_numpy()
    return out


def data(seed: int, units: int = 300, values: int = 50) -> tuple[pl.Series, U64s]:
    """Units of 1-3 rows and of 8-60 rows; ``values`` distinct row hashes per unit (few: many copies)."""
    rng = np.random.default_rng(seed)
    sizes = np.where(rng.random(units) < 0.6, rng.integers(1, 4, units), rng.integers(8, 61, units))
    ids = np.repeat(np.arange(units), sizes)
    rng.shuffle(ids)
    value = rng.integers(0, values, ids.size)
    hashes = pl.DataFrame({"u": ids, "v": value}).select(pl.struct("u", "v").hash(SEED)).to_series().to_numpy()
    return pl.Series("u", ids), hashes


def counting_exact(units: pl.Series, hashes: U64s, k: int, calls: list[int]) -> Any:
    def exact(at: Any) -> Any:
        calls.append(at.size)
        return definition(units.gather(at), hashes[at], SEED, k)
    return exact


@pytest.mark.parametrize("k", [1, 2, 5, 40])
@pytest.mark.parametrize("values", [3, 10**9])
def test_hashed_buckets_keep_the_rows_of_the_definition(k: int, values: int) -> None:
    for seed in range(4):
        units, hashes = data(seed, values=values)
        want = definition(units, hashes, SEED, k)
        calls: list[int] = []
        got = smallest_per_unit(units, units.hash(seed).to_numpy(), hashes, k, rehash,
                                counting_exact(units, hashes, k, calls))
        assert got.tolist() == want.tolist()
        assert not calls                      # distinct 64-bit unit hashes: the fast rounds decide everything


@pytest.mark.parametrize("k", [1, 3, 40])
def test_small_ids_keep_the_rows_of_the_definition(k: int) -> None:
    for seed in range(4):
        units, hashes = data(seed, values=5)
        ids = units.to_numpy().astype(np.intp)
        got = smallest_per_id(ids, int(ids.max()).bit_length(), hashes, k, rehash, lambda at: pytest.fail("exact"))
        assert got.tolist() == definition(units, hashes, SEED, k).tolist()


@pytest.mark.parametrize("distinct_top_bits", [1, 4, 64])
def test_shared_buckets_go_to_later_rounds_then_to_the_definition(distinct_top_bits: int) -> None:
    """Unit hashes that share their top bits (every unit in a few buckets), or are all equal (every round
    fails): later rounds or the exact fallback decide them, and the rows are still the definition's."""
    units, hashes = data(3)
    ids = units.to_numpy().astype(np.uint64)
    # the top bits say which of a few groups; bits 34-42 (read by the second round only) tell units apart
    unit_hash = (ids % np.uint64(distinct_top_bits)) << np.uint64(58) | (ids << np.uint64(34))
    if distinct_top_bits == 1:
        unit_hash[:] = 0
    for k in (1, 4):
        calls: list[int] = []
        got = smallest_per_unit(units, unit_hash, hashes, k, rehash, counting_exact(units, hashes, k, calls))
        assert got.tolist() == definition(units, hashes, SEED, k).tolist()
        assert bool(calls) == (distinct_top_bits == 1)


def test_hashes_equal_in_their_high_bits_are_decided_exactly() -> None:
    """Two different rows whose hashes agree above the low bits tie in the packed key: exact fallback."""
    units = pl.Series("u", [7] * 6 + [8] * 6)
    base = np.uint64(0xABCD) << np.uint64(40)
    hashes = np.array([base + np.uint64(i) for i in (5, 1, 4, 2, 3, 0)] * 2, dtype=np.uint64)
    for k in (1, 3, 5):
        calls: list[int] = []
        got = smallest_per_unit(units, units.hash(1).to_numpy(), hashes, k, rehash,
                                counting_exact(units, hashes, k, calls))
        assert got.tolist() == definition(units, hashes, SEED, k).tolist()
        assert calls
        ids = units.to_numpy().astype(np.intp) - 7
        got = smallest_per_id(ids, 1, hashes, k, rehash, lambda at: definition(units.gather(at), hashes[at], SEED, k))
        assert got.tolist() == definition(units, hashes, SEED, k).tolist()


@pytest.mark.parametrize("kind", ["str", "float", "wide int", "uint64", "int128", "int128 ids", "uint128", "float16"])
def test_kept_mask_for_every_unit_type(kind: str) -> None:
    """Strings and floats (NaN is one unit, -0.0 = 0.0) by hashed buckets; integers spanning ≥ 2²² values
    too; UInt64 ids above 2⁶³ by small ids (the offset wraps around and cancels); 128-bit integers, which
    numpy cannot hold, by hashed buckets compared in Polars (before: every bounded query failed)."""
    units, hashes = data(5, values=4)
    ids = units.to_numpy()
    floats = np.choose(ids % 3, [ids * 1.0, np.where(ids % 2, -0.0, 0.0), np.full(ids.size, np.nan)])
    series = {"str": pl.Series("u", [f"user{i}" for i in ids]), "float": pl.Series("u", floats),
              "wide int": pl.Series("u", ids * 2**40),
              "uint64": pl.Series("u", ids.astype(np.uint64) + np.uint64(2**63 + 5)),
              "int128": pl.Series("u", [int(i) * 2**70 - 2**100 for i in ids], dtype=pl.Int128),
              "int128 ids": pl.Series("u", ids, dtype=pl.Int128),
              "uint128": pl.Series("u", [int(i) + 2**127 for i in ids], dtype=pl.UInt128),
              "float16": pl.Series("u", floats, dtype=pl.Float16)}[kind]
    for k in (1, 6):
        assert kept_mask(series, hashes, SEED, k).tolist() == definition(series, hashes, SEED, k).tolist()


@pytest.mark.parametrize("k", [1, 2, 4])
def test_copies_next_to_hashes_equal_in_their_high_bits_are_decided_exactly(k: int) -> None:
    """Copies of a row (numbered in row order) beside another row whose hash agrees with theirs above the
    low bits: that bucket cannot be numbered from the packed keys, goes to the exact fallback, and every
    bucket keeps the definition's rows (the others decided by the copy path)."""
    base = np.uint64(0x5EED) << np.uint64(48)
    tied = [base + np.uint64(3)] * 3 + [base + np.uint64(1)] * 2 + [base + np.uint64(2) << np.uint64(20)]
    copies = [np.uint64(9) << np.uint64(50)] * 4 + [np.uint64(1) << np.uint64(60)] * 2 + [np.uint64(3) << np.uint64(55)]
    units = pl.Series("u", [0] * len(tied) + [1] * len(copies))
    hashes = np.array(tied + copies, dtype=np.uint64)
    order = np.random.default_rng(k).permutation(units.len())
    units, hashes = units.gather(order), hashes[order]
    want = definition(units, hashes, SEED, k)
    calls: list[int] = []
    ids = units.to_numpy().astype(np.intp)
    got = smallest_per_id(ids, 1, hashes, k, rehash, counting_exact(units, hashes, k, calls))
    assert got.tolist() == want.tolist()
    assert calls == [len(tied)]                 # only the tied unit's rows went to the definition


def test_the_copy_paths_fewer_hash_bits_leave_only_their_ties_to_the_definition() -> None:
    """The copy path packs (bucket, hash, row) into 64 bits: with 22 bucket bits and 2¹² rows, 30 bits of the
    hash. Two different hashes equal in those 30 bits (beside copies) leave their unit to the definition;
    a unit whose hashes differ there (also with copies) is decided by the copy path itself."""
    rng = np.random.default_rng(3)
    top = rng.integers(1, 2**29, 2000, dtype=np.uint64) << np.uint64(34)     # distinct in the kept 30 bits
    tied = top.copy()
    tied[1] = tied[0] + np.uint64(12345)                                     # differs only below them
    units = pl.Series("u", np.repeat([0, 2**21], 2000))
    hashes = np.concatenate([np.repeat(tied[:1000], 2), np.repeat(top[1000:], 2)])   # copies everywhere
    order = rng.permutation(units.len())
    units, hashes = units.gather(order), hashes[order]
    for k in (3, 700):
        calls: list[int] = []
        got = smallest_per_id(units.to_numpy().astype(np.intp), 22, hashes, k, rehash,
                              counting_exact(units, hashes, k, calls))
        assert got.tolist() == definition(units, hashes, SEED, k).tolist()
        assert calls == [2000]                   # unit 0 only


def test_copies_are_numbered_alike_with_the_split_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy path's sorts split across threads and its passes in steps of a few rows (runs of equal keys
    continue across steps): still the definition's rows."""
    from dpframe.backends import _bounding

    monkeypatch.setenv("DPFRAME_THREADS", "4")
    monkeypatch.setattr(_bounding, "CHUNK", 32)
    monkeypatch.setattr(_bounding, "STEP", 5)
    test_small_ids_keep_the_rows_of_the_definition(3)
    test_hashed_buckets_keep_the_rows_of_the_definition(2, 3)
    test_copies_next_to_hashes_equal_in_their_high_bits_are_decided_exactly(2)


@pytest.mark.parametrize("share", [0.0, 2.0])
def test_both_routes_of_the_copy_path_keep_the_definitions_rows(share: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every over-limit row down the copy path at once (ALL_COPIES = 0), or only the buckets holding copies
    after the main sort (never): the same rows, with copies, ties in the hash's kept bits and shared buckets."""
    from dpframe.backends import _bounding

    monkeypatch.setattr(_bounding, "ALL_COPIES", share)
    for k in (1, 3, 40):
        test_small_ids_keep_the_rows_of_the_definition(k)
    for values in (3, 10**9):
        test_hashed_buckets_keep_the_rows_of_the_definition(2, values)
    test_copies_next_to_hashes_equal_in_their_high_bits_are_decided_exactly(2)
    test_the_copy_paths_fewer_hash_bits_leave_only_their_ties_to_the_definition()
    for top in (1, 4):
        test_shared_buckets_go_to_later_rounds_then_to_the_definition(top)
    test_hashes_equal_in_their_high_bits_are_decided_exactly()
