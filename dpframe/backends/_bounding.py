"""Exact contribution bounding in a few vectorized passes: each unit's k rows with the smallest hashes.

The law (the privacy guarantee, the same on every backend): every row has a seeded 64-bit hash ``h`` of
the values the statistics read; the j-th copy (j ≥ 1) of a row repeated in its unit (same ``h``) gets
``rehash(h, j)`` instead, so that every row, not every distinct row, has its own chance; each unit keeps
its ``k`` rows with the smallest (final) hashes. With a fresh random seed that is a uniformly random
subset of ``min(k, n)`` of the unit's ``n`` rows, and it depends only on the unit's own rows and the seed.

:func:`smallest_per_unit` computes exactly that set, without a window over the units (a rank per unit
costs about half a microsecond per unit in Polars, a sort of every row by (unit, hash) more):

0. **Which rows.** A row whose unit is null is never kept and ranks against nothing: the caller nulls
   the unit of every row it must not rank (no unit, a group outside the public keys, a group its unit
   did not choose under ``max_groups``), so one column says both (no row index, no filtered copy).
1. **Count.** Each row's unit goes to a bucket (22 bits of a seeded hash of the unit): one ``bincount``.
   A bucket with at most ``k`` rows holds units with at most ``k`` rows each: all are kept, nothing more
   to do (at 10 rows per unit and ``k = 10`` about half the rows; most rows of heavy-tailed data).
2. **Pure buckets.** The rest must be one unit per bucket: every row's unit is compared with the unit of
   one row of its bucket (its exact value, not a hash). Buckets holding several units go to step 5.
3. **Threshold.** In a pure bucket the rows sort by ``(bucket, h)`` packed into one 64-bit key (the
   bucket's bits on top, ``h``'s high bits below), and one sort of the keys (:func:`sort`: Polars' or
   numpy's, whichever is faster on this machine, on all its cores) gives every bucket's k-th smallest
   key ``T``: a row is kept iff its key ≤ ``T``. That is the definition's set exactly when no two keys of
   the bucket are equal (then the key order is the order of ``h``).
4. **Copies.** A bucket with two equal keys holds copies (or, rarely, two hashes equal in their high
   bits). Its rows are sorted by (bucket, hash, row) packed into 64 bits, so a row's copies follow it;
   they are numbered and re-hashed as the definition says, and the threshold is taken again over the
   new keys (:func:`_with_copies`). Two different hashes equal in the bits a key keeps (a truncation tie)
   are not resolved here: the bucket goes to step 5.
5. **Again, then exactly.** Rows of impure or unresolved buckets run steps 1-4 again with other bits of
   the unit hash (units that shared 22 bits rarely share the next 21), and whatever is left after three
   rounds (units whose 64-bit hashes collide, truncation ties) goes to ``exact``, the definition itself
   (a rank over the unit), on those rows only.

Every step either decides a row exactly as the definition does or hands its whole unit on, so the
result is the definition's set for every input: the same rows for the same seed, on any data. Which
step decides a unit depends on the data (and the seed) — only the time does, never the output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from dpframe.parallel import chunks, map_chunks, threads

U64s = npt.NDArray[np.uint64]
Rows = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

BUCKET_BITS = 22
"""Bits of the unit hash per round: 4M buckets (32 MiB of counts), so units rarely share one."""
ROUNDS = 3
"""Rounds over different bits of the unit hash (22, then 21 and 21 more: all 64) before the exact path."""
CHUNK = 1 << 20
"""Rows per chunk of the per-row passes, which run on all cores (:mod:`dpframe.parallel`)."""
STEP = 1 << 16
"""Rows per step of a per-row pass: numpy's temporaries stay small enough (≤ 512 KiB) that the C allocator
reuses their memory; larger ones get fresh pages from the OS every time, which costs more than the pass."""
ALL_COPIES = 0.8
"""From this share of the rows (of units over the limit) in buckets holding copies, every such row takes the
copy path at once: its three sorts beat the main path's sort plus the copy path on most of the rows (a count
alone over users and cities: 92 % of rows, 12 % faster; without copies the main path is ~45 % faster)."""
SAMPLE_BUCKETS = 64
"""The copy share is estimated on one bucket in this many (:func:`_copies_share`)."""
ID_SPAN = 4
"""Integer units are their own buckets only while they span fewer values than this many per row (or 2**16):
every pass of :func:`smallest_per_id` allocates and reads one count per value of the span, so 63 rows whose
ids reach 10**6 took 13 ms that way against 1.5 ms with the units hashed into buckets sized by the rows."""
PARALLEL_SORT = 4
"""Threads from which :func:`sort` splits a large sort across them (with fewer, one ``np.sort`` is faster)."""
POLARS_SORT_FROM = 1 << 14
"""Keys from which :func:`sort` hands a sort to Polars when Polars sorts faster here (:data:`SORT_ENGINE`)."""
SORT_ENGINE = ""
"""Whose sort :func:`sort` uses for large arrays, ``"numpy"`` or ``"polars"``; ``""``: not chosen yet, chosen by
timing both once per process on public random keys (:func:`sort_engine`). Speed only: both give the same array."""
UNIT_SALT = 0x2545F4914F6CDD1D
"""XORed into a query's seed for the unit hash that buckets units (speed only: any hash gives the same rows)."""
_ALL = np.uint64(2**64 - 1)
D = TypeVar("D", bound=np.generic)
K = TypeVar("K", np.uint64, np.int64)


def empty(n: int, dtype: type[D]) -> npt.NDArray[D]:
    """``np.empty(n, dtype)`` in memory from Arrow's pool, which keeps what it frees for the next query.

    numpy takes a large array's memory from the OS each time and gives it back when freed; first touching
    fresh pages costs more than the passes over them do (about 0.5 ms per MB on a virtual machine: most
    of the time of this module's steps, measured). Arrow's allocator (mimalloc by default) reuses them.

    Example:
        >>> a = empty(3, np.int64)
        >>> a[:] = 7
        >>> a.tolist()
        [7, 7, 7]

    """
    kind = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(n * kind.itemsize), dtype=kind)


def kept(units: pl.Series, row_hash: U64s, k: int, unit_seed: int, rehash: Callable[[U64s, Rows], U64s],
         exact: Callable[[Rows], Mask], ranked: Mask | None = None) -> Mask:
    """The law's kept rows (see :func:`smallest_per_unit` for the arguments): the fastest exact way.

    Integer units of up to 64 bits spanning fewer than 2**:data:`BUCKET_BITS` values and fewer than
    :data:`ID_SPAN` per row (ids in a range, the usual case) are their own buckets (:func:`smallest_per_id`;
    non-negative Int64 or UInt64 ones read in place, as their own ids); other units are bucketed by
    ``units.hash(unit_seed)``.
    A row whose unit is null, or that is not ``ranked`` (when given: a row the caller does not rank, such as
    a group outside the public keys), is never kept and uses up nothing of any unit's ``k``; ``exact`` is
    only called on ranked rows.

    Example:
        >>> units, h = pl.Series([1, 1, None, 1, 2]), np.array([30, 10, 1, 20, 5], dtype=np.uint64)
        >>> never = lambda rows: np.zeros(rows.size, dtype=bool)
        >>> kept(units, h, 2, 0, lambda h, j: h + j.astype(np.uint64), never).tolist()
        [False, True, False, True, True]
        >>> kept(units, h, 2, 0, lambda h, j: h + j.astype(np.uint64), never,
        ...      np.array([True, False, True, True, True])).tolist()
        [True, False, False, True, True]

    """
    if units.null_count():
        present = units.is_not_null().to_numpy()
        ranked = present if ranked is None else ranked & present
    if ranked is not None and ranked.all():
        ranked = None
    if not units.len() or ranked is not None and not ranked.any():
        return np.zeros(units.len(), dtype=bool)
    if _numpy_integer(units.dtype):
        low, high = units.min(), units.max()
        assert isinstance(low, int) and isinstance(high, int)
        span = min(2**BUCKET_BITS - 1, max(ID_SPAN * units.len(), 1 << 16))
        if high - low < span:
            if ranked is None:
                if 0 <= low and high < span and units.dtype in (pl.Int64, pl.UInt64):  # the values are the ids
                    return smallest_per_id(_chunks_as_ids(units), max(1, high.bit_length()), row_hash, k, rehash,
                                           exact)
                # (the ids are handed over, not kept here: smallest_per_id frees them once counted)
                return smallest_per_id(minus(units, low), max(1, (high - low).bit_length()), row_hash, k, rehash,
                                       exact)
            other = high - low + 1      # the bucket of the rows not ranked, never picked
            out = smallest_per_id(_ids_or(units, low, ranked, other), other.bit_length(), row_hash, k, rehash, exact,
                                  other)
            out &= ranked
            return out
    if ranked is None:
        return smallest_per_unit(units, units.hash(unit_seed).to_numpy(), row_hash, k, rehash, exact)
    at = np.flatnonzero(ranked)
    chosen = units.gather(at)
    out = np.zeros(ranked.size, dtype=bool)
    out[at] = smallest_per_unit(chosen, chosen.hash(unit_seed).to_numpy(), row_hash[at], k, rehash,
                                lambda rows: exact(at[rows]))
    return out


def crowded(units: pl.Series, k: int) -> Mask | None:
    """Which rows belong to a unit with more than ``k`` rows (a null unit: none of its rows).

    Only those rows can be dropped: a unit with at most ``k`` rows keeps them all, whatever their hashes,
    so a backend whose hashes are costly (DuckDB hashing strings) need only hash these. Computed for
    integer units spanning fewer than 2**:data:`BUCKET_BITS` values (one ``bincount``); ``None`` for
    others (then every row with a unit is ranked).

    Example:
        >>> crowded(pl.Series([5, 7, 5, None, 5, 7]), 2).tolist()
        [True, False, True, False, True, False]
        >>> crowded(pl.Series(["a", "b"]), 1) is None
        True

    """
    if not _numpy_integer(units.dtype):
        return None
    if units.len() == units.null_count():
        return np.zeros(units.len(), dtype=bool)
    low, high = units.min(), units.max()
    assert isinstance(low, int) and isinstance(high, int)
    if high - low >= 2**BUCKET_BITS - 1:
        return None
    ranked = units.is_not_null().to_numpy() if units.null_count() else None
    ids = minus(units if ranked is None else units.fill_null(low), low, True)
    counts = np.bincount(ids if ranked is None else ids[ranked], minlength=high - low + 1)
    over = counts > k
    mask = np.empty(ids.size, dtype=bool)

    def pick(a: int, b: int) -> None:
        np.take(over, ids[a:b], out=mask[a:b])

    in_steps(pick, ids.size)
    if ranked is not None:
        mask &= ranked
    return mask


def _numpy_integer(dtype: pl.DataType) -> bool:
    """Whether units of this type are integers numpy holds (128-bit ones are compared and hashed in Polars).

    Example:
        >>> _numpy_integer(pl.UInt64()), _numpy_integer(pl.Int128()), _numpy_integer(pl.String())
        (True, False, False)

    """
    return dtype.is_integer() and dtype not in (pl.Int128, pl.UInt128)


def minus(values: pl.Series, base: int, read_only: bool = False) -> npt.NDArray[np.intp]:
    """``values - base`` as intp (integers, no nulls), chunk by chunk on the thread pool into one array.

    Exact for results in ``[-2**63, 2**63)``: the arithmetic is modulo 2**64, so UInt64 values above 2**63
    wrap on the way in and back. With ``read_only`` (the caller writes nothing into the result), a column
    of one intp chunk with ``base == 0`` is returned as it is, without a copy.

    Example:
        >>> minus(pl.concat([pl.Series([5, 7]), pl.Series([9])], rechunk=False), 4).tolist()
        [1, 3, 5]

    """
    if read_only and base == 0 and values.n_chunks() == 1 and values.dtype == pl.Int64:
        ids: npt.NDArray[np.intp] = values.to_numpy()
        return ids
    out = empty(values.len(), np.intp)
    wrapped = np.intp((base + 2**63) % 2**64 - 2**63)

    def step(part: npt.NDArray[Any], a: int, b: int) -> None:
        np.subtract(part, wrapped, out=out[a:b], dtype=np.intp, casting="unsafe")

    in_parts([chunk.to_numpy() for chunk in values.get_chunks()], step)
    return out


def _chunks_as_ids(units: pl.Series) -> list[npt.NDArray[np.intp]]:
    """The chunks of an Int64 or UInt64 column without nulls, values in ``[0, 2**63)``, read in place as intp.

    Example:
        >>> [a.tolist() for a in _chunks_as_ids(pl.concat([pl.Series([5, 7]), pl.Series([9])], rechunk=False))]
        [[5, 7], [9]]

    """
    return [chunk.to_numpy().view(np.intp) for chunk in units.get_chunks()]


def _ids_or(units: pl.Series, base: int, ranked: Mask, other: int) -> npt.NDArray[np.intp]:
    """``units - base`` as intp (as :func:`minus`), and ``other`` in each row not ``ranked`` (null or not).

    A chunk's values are read in place, nulls included (a null's slot holds some value, replaced here),
    without a copy of the column with its nulls filled.

    Example:
        >>> _ids_or(pl.Series([5, None, 9]), 4, np.array([True, False, True]), 6).tolist()
        [1, 6, 5]

    """
    out = empty(units.len(), np.intp)
    wrapped = np.intp((base + 2**63) % 2**64 - 2**63)
    fill = np.intp(other)

    def step(part: npt.NDArray[Any], a: int, b: int) -> None:
        np.subtract(part, wrapped, out=out[a:b], dtype=np.intp, casting="unsafe")
        np.copyto(out[a:b], fill, where=~ranked[a:b])

    in_parts([_values(chunk) for chunk in units.get_chunks()], step)
    return out


def _values(chunk: pl.Series) -> npt.NDArray[Any]:
    """An integer chunk's values as numpy reads them in place; a null's slot holds an unspecified value."""
    if not chunk.null_count():
        values: npt.NDArray[Any] = chunk.to_numpy()
        return values
    array = chunk.to_arrow()
    kind = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(array.buffers()[1], dtype=kind, count=len(array), offset=array.offset * kind.itemsize)


def in_parts(parts: list[npt.NDArray[Any]], step: Callable[[npt.NDArray[Any], int, int], object]) -> None:
    """``step(values, a, b)`` over the rows of ``parts`` (their concatenation), ``values`` being rows ``[a, b)``.

    Pieces of at most :data:`CHUNK` rows are tasks on the thread pool, each stepping through its rows
    :data:`STEP` at a time (a Polars column's chunks read in place: no concatenation).
    """
    pieces: list[tuple[npt.NDArray[Any], int]] = []
    at = 0
    for part in parts:
        pieces += [(part[a:b], at + a) for a, b in chunks(part.size, CHUNK)]
        at += part.size

    def run(i: int, _: int) -> None:
        piece, start = pieces[i]
        for a, b in chunks(piece.size, STEP):
            step(piece[a:b], start + a, start + b)

    map_chunks(run, len(pieces), 1)


def smallest_per_unit(units: pl.Series, unit_hash: U64s, row_hash: U64s, k: int,
                      rehash: Callable[[U64s, Rows], U64s], exact: Callable[[Rows], Mask]) -> Mask:
    """Which rows the bounding law keeps: per unit, the ``k`` rows with the smallest final hashes.

    Args:
        units: each row's unit (no nulls); two rows belong to one unit iff their values are equal.
        unit_hash: a seeded 64-bit hash of each row's unit (equal units, equal hashes).
        row_hash: each row's hash ``h`` (equal for copies: rows a statistic cannot tell apart).
        k: rows kept per unit (≥ 1).
        rehash: ``rehash(h, j)``, the hash of the j-th copy (j ≥ 1) of a row with hash ``h``.
        exact: the law itself on some rows (the positions given: all rows of the units concerned); it
            returns their kept mask. Only called for the rare units the fast steps leave undecided.

    Returns:
        A boolean mask over the rows (see the module docstring for the steps and why it is exact).

    Example:
        >>> units = pl.Series([1, 1, 1, 2])
        >>> h = np.array([30, 10, 20, 5], dtype=np.uint64)
        >>> never = lambda rows: np.zeros(rows.size, dtype=bool)
        >>> smallest_per_unit(units, units.hash(1).to_numpy(), h, 2, lambda h, j: h + j.astype(np.uint64),
        ...                   never).tolist()
        [False, True, True, True]

    """
    keep = empty(unit_hash.size, np.bool_)
    keep.fill(True)
    values = units.to_numpy() if _numpy_integer(units.dtype) or units.dtype.is_float() else units
    rows: Rows | None = None
    for level in range(ROUNDS):
        hashes = unit_hash if rows is None else unit_hash[rows]
        bits = max(1, min(BUCKET_BITS, hashes.size.bit_length()))
        shift = np.uint64(max(64 - bits - 21 * level, 0))
        rows, keys, counts = _over(rows, _bucketed(hashes, shift, bits), row_hash, bits, k)
        del hashes
        if not rows.size:
            return keep
        buckets = _buckets_of(keys, bits)
        undecided = _impure(values, rows, buckets, bits)
        undecided |= _bottom_k(keep, rows, keys, counts, row_hash, bits, k, rehash, undecided)
        rows = rows[undecided[buckets]]
        keep[rows] = True
    if rows is not None and rows.size:
        keep[rows] = exact(rows)
    return keep


def _bucketed(hashes: U64s, shift: np.uint64, bits: int) -> npt.NDArray[np.intp]:
    """Each unit's bucket: ``bits`` bits of its hash from bit ``shift``, as intp, in steps into one array.

    (One numpy expression over the whole column held three row-sized temporaries.)

    Example:
        >>> _bucketed(np.array([0xAB, 0xCD], dtype=np.uint64), np.uint64(4), 4).tolist()
        [10, 12]

    """
    out = empty(hashes.size, np.intp)
    low = np.uint64((1 << bits) - 1)

    def step(a: int, b: int) -> None:
        part = out[a:b].view(np.uint64)
        np.right_shift(hashes[a:b], shift, out=part)
        part &= low

    in_steps(step, hashes.size)
    return out


def smallest_per_id(ids: npt.NDArray[np.intp] | list[npt.NDArray[np.intp]], bits: int, row_hash: U64s, k: int,
                    rehash: Callable[[U64s, Rows], U64s], exact: Callable[[Rows], Mask],
                    ignore: int | None = None) -> Mask:
    """:func:`smallest_per_unit` when each row's unit is given as a small id: equal ids ⇔ one unit.

    ``ids`` lie in ``[0, 2**bits)`` (e.g. integer units minus their minimum), one array or the arrays whose
    concatenation they are (a column's chunks, read in place): every id is its own bucket, so no unit
    hash, no purity check and no second round are needed — one count, one sort. Rows with the id
    ``ignore`` are left as they are (marked kept): the caller decides them. The ids are read by the count
    only and dropped after it: a caller that hands over an array it made keeps no reference to it, and
    the array is freed before the sort allocates its own.

    Example:
        >>> h = np.array([30, 10, 20, 5], dtype=np.uint64)
        >>> never = lambda rows: np.zeros(rows.size, dtype=bool)
        >>> smallest_per_id(np.array([0, 0, 0, 3]), 2, h, 2, lambda h, j: h + j.astype(np.uint64), never).tolist()
        [False, True, True, True]

    """
    keep = empty(row_hash.size, np.bool_)
    keep.fill(True)
    rows, keys, counts = _over(None, ids, row_hash, bits, k, ignore)
    del ids
    if rows.size:
        undecided = _bottom_k(keep, rows, keys, counts, row_hash, bits, k, rehash, np.zeros(1 << bits, dtype=bool))
        if undecided.any():
            rows = rows[undecided[_buckets_of(keys, bits)]]
            keep[rows] = exact(rows)
    return keep


def _over(rows: Rows | None, buckets: npt.NDArray[np.intp] | list[npt.NDArray[np.intp]], row_hash: U64s, bits: int,
          k: int, ignore: int | None = None) -> tuple[Rows, U64s, npt.NDArray[np.intp]]:
    """The rows of buckets with more than ``k`` rows, their keys (:func:`_keys`), and each bucket's count.

    ``rows``: the positions in ``row_hash`` of the rows ``buckets`` describes (``None``: all, in order).
    ``buckets``: one array, or arrays read as their concatenation (a column's chunks, not copied into one).
    The bucket ``ignore`` counts 0 (its rows are never picked). Every pass runs on the thread pool: a
    count per span of rows, their sum per range of buckets, then each span writes its rows and keys
    into its own slice of the output (its size known from its counts: no concatenation).
    """
    parts = buckets if isinstance(buckets, list) else [buckets]
    n = sum(part.size for part in parts)
    # One count per span, each 2**bits long: at most about one per 2**bits rows, to bound the memory.
    size = max(CHUNK, 1 << bits, -(-n // threads()))
    spans = chunks(n, size)
    starts = np.cumsum([0, *(part.size for part in parts)])

    def pieces(a: int, b: int) -> list[tuple[npt.NDArray[np.intp], int]]:
        """The rows ``[a, b)`` as views of the parts, each with the position of its first row."""
        first = int(np.searchsorted(starts, a, side="right")) - 1
        out = []
        for i in range(max(first, 0), len(parts)):
            lo, hi = max(a, int(starts[i])), min(b, int(starts[i + 1]))
            if lo >= b:
                break
            if lo < hi:
                out.append((parts[i][lo - starts[i]:hi - starts[i]], lo))
        return out

    def count(a: int, b: int) -> npt.NDArray[np.intp]:
        found = pieces(a, b)
        total: npt.NDArray[np.intp] = np.bincount(found[0][0], minlength=1 << bits)
        for piece, _ in found[1:]:
            total += np.bincount(piece, minlength=1 << bits)
        return total

    counted = map_chunks(count, n, size)
    counts = _summed(counted) if counted else np.zeros(1 << bits, dtype=np.intp)
    if ignore is not None:
        counts[ignore] = 0
    over = counts > k
    ends = np.cumsum([0, *(int(np.dot(part, over)) for part in counted)])   # each span's slice of the output
    del counted
    out_rows, out_keys = empty(int(ends[-1]), np.int64), empty(int(ends[-1]), np.uint64)

    def pick(i: int, _: int) -> None:
        start = int(ends[i])
        for piece, first in pieces(*spans[i]):
            for c, d in chunks(piece.size, STEP):     # in steps, so that numpy's temporaries reuse their memory
                big = np.flatnonzero(over[piece[c:d]])
                chosen = piece[c:d][big]
                big += first + c
                at = out_rows[start:start + big.size]
                at[:] = big if rows is None else rows[big]
                _keys(chosen, row_hash[at], bits, out_keys[start:start + big.size])
                start += big.size

    map_chunks(pick, len(spans), 1)
    return out_rows, out_keys, counts


def _summed(parts: list[npt.NDArray[np.intp]]) -> npt.NDArray[np.intp]:
    """The element-wise sum of equally long count arrays, range by range on the thread pool."""
    total = empty(parts[0].size, np.intp)
    total[:] = parts[0]

    def add(a: int, b: int) -> None:
        for part in parts[1:]:
            total[a:b] += part[a:b]

    if len(parts) > 1:
        in_steps(add, total.size)
    return total


def _bottom_k(keep: Mask, rows: Rows, keys: U64s, counts: npt.NDArray[np.intp], row_hash: U64s, bits: int, k: int,
              rehash: Callable[[U64s, Rows], U64s], skip: Mask) -> Mask:
    """Steps 3 and 4 on one-unit buckets: sets ``keep`` for ``rows``; returns the buckets left undecided.

    ``rows`` are all the rows of buckets with more than ``k`` rows (``counts`` per bucket), with their
    keys (:func:`_keys`); buckets in ``skip`` (impure: decided later) are ignored whatever this writes
    for them.
    """
    shift = np.uint64(64 - bits)
    undecided = np.zeros(1 << bits, dtype=bool)
    if _copies_share(keys, bits) >= ALL_COPIES:     # most buckets hold copies: all go down the copy path
        at, tops = rows, keys
    else:
        copies = _threshold(keep, rows, keys, counts, bits, k)
        copies &= ~skip
        if not copies.any():
            return undecided
        sub = _picked(rows.size, lambda a, b: copies[(keys[a:b] >> shift).view(np.intp)])
        at = _gathered(rows, sub, np.int64)
        tops = _gathered(keys, sub, np.uint64)
        del sub
    kept, unresolved = _with_copies(tops, _gathered(row_hash, at, np.uint64), bits, k, rehash)
    del tops

    def write(a: int, b: int) -> None:
        keep[at[a:b]] = kept[a:b]

    in_steps(write, at.size)
    undecided[unresolved] = True
    return undecided


def _copies_share(keys: U64s, bits: int) -> float:
    """The share of rows in buckets holding two equal keys, estimated on one bucket in :data:`SAMPLE_BUCKETS`.

    Every row of a sampled bucket is read, so its copies are seen whole. Speed only: it picks the route
    of :func:`_bottom_k`.

    Example:
        >>> keys = np.array([0, 0, 64, 64, 3], dtype=np.uint64) << np.uint64(56)
        >>> _copies_share(keys | np.array([1, 1, 2, 3, 4], dtype=np.uint64), 8)
        0.5

    """
    low = np.uint64(SAMPLE_BUCKETS - 1) << np.uint64(64 - bits)       # a bucket's low bits, in place
    sample = keys[_picked(keys.size, lambda a, b: keys[a:b] & low == 0)]
    if sample.size < 2:
        return 0.0
    sample.sort()
    buckets = _buckets_of(sample, bits)
    return float(np.isin(buckets, buckets[1:][sample[1:] == sample[:-1]]).mean())


def _threshold(keep: Mask, rows: Rows, keys: U64s, counts: npt.NDArray[np.intp], bits: int, k: int) -> Mask:
    """Step 3: keeps a row iff its key is at most its bucket's k-th smallest; returns the buckets with ties.

    The ties: two equal keys in a bucket (copies, or hashes equal in their high bits: step 4). Its
    row-sized arrays are freed on return, before step 4 allocates its own.
    """
    ordered = sort(keys)
    kth = _kth_smallest(ordered, counts, k)

    def decide(a: int, b: int) -> None:
        keep[rows[a:b]] = keys[a:b] <= kth[_buckets_of(keys[a:b], bits)]

    in_steps(decide, rows.size)
    equal = _picked(ordered.size - 1, lambda a, b: ordered[a + 1:b + 1] == ordered[a:b])
    copies = np.zeros(1 << bits, dtype=bool)
    copies[_buckets_of(ordered[equal], bits)] = True
    return copies


def in_steps(step: Callable[[int, int], object], n: int) -> None:
    """``step(a, b)`` over consecutive ranges ``[a, b)`` of ``range(n)``, on the cores (numpy frees the GIL).

    One task per :data:`CHUNK` items, each calling ``step`` on ranges of at most :data:`STEP` items.
    Steps must only read shared arrays or write disjoint slices.
    """
    def run(a: int, b: int) -> None:
        for c, d in chunks(b - a, STEP):
            step(a + c, a + d)

    if n:
        map_chunks(run, n, CHUNK)
    else:
        step(0, 0)


def sort_engine() -> str:
    """``"polars"`` when Polars' sort is faster than numpy's on one core of this machine, else ``"numpy"``.

    Timed once per process (:data:`SORT_ENGINE`), on 2**16 public random keys, best of three each. The two
    differ by machine: numpy's AVX-512 sort is its fastest on Intel cores, but on AMD Zen 4 (whose
    compress-store instruction it relies on is microcoded) it took 60 ns per key where Polars took 15.

    Example:
        >>> sort_engine() in ("numpy", "polars")
        True

    """
    global SORT_ENGINE
    if not SORT_ENGINE:
        keys = np.random.default_rng(0).integers(0, 2**64 - 1, 1 << 16, dtype=np.uint64, endpoint=True)
        ours, theirs = [], []
        for _ in range(3):
            copy = keys.copy()
            start = time.perf_counter()
            copy.sort()
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            pl.Series(keys).sort(multithreaded=False)
            theirs.append(time.perf_counter() - start)
        SORT_ENGINE = "polars" if min(theirs) < min(ours) else "numpy"
    return SORT_ENGINE


def sort(keys: npt.NDArray[K], spare: bool = False, threaded: bool = True) -> npt.NDArray[K]:
    """``np.sort(keys)`` (integer keys), by the faster sort of this machine (:func:`sort_engine`), on all cores.

    In Polars (from :data:`POLARS_SORT_FROM` keys): one sort on its thread pool (the result is read-only).
    In numpy, with :data:`PARALLEL_SORT` threads or more: each thread sorts a slice of the keys; the sorted
    slices are cut at the same values (quantiles of a sample) and each thread sorts the pieces between two
    cuts: ranges of values, concatenated in order. ``spare``: the caller no longer needs ``keys`` unsorted,
    so numpy may sort them in place (no copy). ``threaded=False``: on the calling thread only (for a task
    already on :mod:`dpframe.parallel`'s pool).

    Example:
        >>> sort(np.array([3, 1, 2], dtype=np.uint64)).tolist()
        [1, 2, 3]

    """
    if keys.size >= POLARS_SORT_FROM and sort_engine() == "polars":
        ordered: npt.NDArray[K] = pl.Series(keys).sort(multithreaded=threaded).to_numpy()
        return ordered
    parts = min(threads(), keys.size // CHUNK) if threaded else 1
    if parts < max(2, PARALLEL_SORT):
        out = keys if spare else empty(keys.size, keys.dtype.type)
        if not spare:
            out[:] = keys
        out.sort()
        return out
    runs = map_chunks(lambda a, b: np.sort(keys[a:b]), keys.size, -(-keys.size // parts))
    sample = np.sort(keys[:: max(1, keys.size // (64 * parts))])
    edges = sample[(np.arange(1, parts) * sample.size) // parts]
    cuts = [np.concatenate([[0], np.searchsorted(run, edges), [run.size]]) for run in runs]

    def between(i: int, _: int) -> npt.NDArray[K]:
        return np.sort(np.concatenate([run[cut[i]:cut[i + 1]] for run, cut in zip(runs, cuts)]))

    return np.concatenate(map_chunks(between, parts, 1))


def _keys(buckets: npt.NDArray[np.intp], hashes: U64s, bits: int, out: U64s | None = None) -> U64s:
    """One sortable key per row: the bucket in the top ``bits`` bits, the hash's high bits below (into ``out``)."""
    keys: U64s = np.left_shift(buckets, np.uint64(64 - bits), out=out, dtype=np.uint64, casting="unsafe")
    keys |= hashes >> np.uint64(bits)
    return keys


def _buckets_of(keys: U64s, bits: int) -> npt.NDArray[np.intp]:
    # (values below 2**bits, read as the 64-bit intp of every platform Polars runs on: no second pass)
    return (keys >> np.uint64(64 - bits)).view(np.intp)


def _kth_smallest(ordered: U64s, counts: npt.NDArray[np.intp], k: int) -> U64s:
    """Per bucket, the k-th smallest of its keys in ``ordered``; all ones where a bucket has at most k keys.

    ``ordered`` holds, sorted, the keys of every bucket with more than k keys (``counts[b]`` of them).
    """
    over = np.flatnonzero(counts > k)
    sizes = counts[over]
    out = empty(counts.size, np.uint64)
    out.fill(_ALL)
    out[over] = ordered[np.cumsum(sizes) - sizes + (k - 1)]
    return out


def _impure(values: npt.NDArray[np.generic] | pl.Series, rows: Rows, buckets: npt.NDArray[np.intp],
            bits: int) -> Mask:
    """The buckets (dense mask) whose rows are not all of one unit: each row compared with one of its bucket's.

    Numeric units compare in numpy (NaN ≠ NaN: a NaN unit is called impure, which only costs time);
    others with Polars' equality. Exact: a bucket called pure holds one unit.
    """
    if isinstance(values, pl.Series):
        first = np.empty(1 << bits, dtype=np.int64)
        first[buckets] = rows
        same = values.gather(rows).eq_missing(values.gather(first[buckets])).to_numpy()
    else:
        mine = values[rows]
        some = np.empty(1 << bits, dtype=values.dtype)
        some[buckets] = mine
        same = mine == some[buckets]
    out = np.zeros(1 << bits, dtype=bool)
    out[buckets[~same]] = True
    return out


def _with_copies(tops: U64s, hashes: U64s, bits: int, k: int,
                 rehash: Callable[[U64s, Rows], U64s]) -> tuple[Mask, npt.NDArray[np.intp]]:
    """Pure buckets holding equal keys: number the copies, re-hash them, take each bucket's k smallest.

    The rows (in row order) are all the rows of their buckets, each bucket holding more than ``k``; each
    row's bucket is the top ``bits`` bits of its entry in ``tops`` (its key, :func:`_keys`; the rest is
    not read). Returns the kept mask of these rows and the buckets left undecided (two different hashes
    that this cannot tell apart, before or after re-hashing: the caller hands them on).

    Count-only queries over a few columns have copies in most units (a user in one city twice), so this
    must be fast on millions of rows. Two sorts of packed 64-bit keys (no argsort, which costs about ten
    times as much):

    1. ``(bucket, high bits of the hash, row)``: a bucket's rows with one hash are adjacent, in row order,
       so a row's place in its run is its copy number (:func:`_ranks`), and the row is read off the key.
       A run holding two different hashes (equal in the bits kept: rare while buckets are small, certain
       in a bucket of many thousand rows) is not numbered here: its bucket is left undecided;
    2. ``(bucket, high bits of the final hash)``: each bucket's k-th smallest (:func:`_keys`), as in step 3.

    Large arrays come from :func:`empty` and are filled in steps (fresh pages would cost more than the
    passes); the final hashes become the second keys in place, and a row's bucket is read off its key
    (both sorts put the buckets alike), so at most four row-sized arrays are alive at once. Which copy
    gets which number does not change the statistics (copies are equal in every column they read); the
    numbering is the definition's all the same (row order).

    Example:
        >>> h = np.array([7, 7, 3, 7, 9], dtype=np.uint64) << np.uint64(40)    # rows 0, 1 and 3: copies
        >>> rehash = lambda h, j: h + (j.astype(np.uint64) << np.uint64(20))  # copy j: 7·2⁴⁰ + j·2²⁰
        >>> kept, undecided = _with_copies(np.zeros(5, dtype=np.uint64), h, 1, 3, rehash)
        >>> kept.tolist(), undecided.tolist()
        ([True, True, True, False, False], [])

    """
    n = tops.size
    row_bits = max(1, (n - 1).bit_length())
    hash_bits = max(0, 64 - bits - row_bits)
    up = np.uint64(64 - bits)
    top = np.uint64(((1 << bits) - 1) << (64 - bits))
    key = empty(n, np.uint64)

    def pack(a: int, b: int, key: U64s = key) -> None:
        np.bitwise_and(tops[a:b], top, out=key[a:b])
        if hash_bits:
            key[a:b] |= (hashes[a:b] >> np.uint64(64 - hash_bits)) << np.uint64(row_bits)
        key[a:b] |= np.arange(a, b, dtype=np.uint64)

    in_steps(pack, n)
    del pack              # (its default held the unsorted keys: freed once sorted)
    key = sort(key, spare=True)
    rows, final = empty(n, np.int64), empty(n, np.uint64)

    def unpack(a: int, b: int, key: U64s = key, final: U64s = final) -> None:
        np.bitwise_and(key[a:b], np.uint64((1 << row_bits) - 1), out=rows[a:b].view(np.uint64))
        np.take(hashes, rows[a:b], out=final[a:b])

    in_steps(unpack, n)
    copy = _ranks(key, row_bits)

    def tie(a: int, b: int, copy: Rows = copy, final: U64s = final) -> Mask:   # a later row of a run, another hash
        out: Mask = (copy[a + 1:b + 1] > 0) & (final[a + 1:b + 1] != final[a:b])
        return out

    tied = _picked(n - 1, tie)
    unresolved = [(key[tied + 1] >> up).view(np.intp)]
    for a, b in chunks(n, CHUNK):     # copy j ≥ 1 gets its own hash; a chunk at a time, so the temporaries
        later = np.flatnonzero(copy[a:b] > 0) + a      # stay small (in order: ``rehash`` may hold a connection)
        if later.size:
            final[later] = rehash(final[later], copy[later])
    del copy, tie, unpack

    def final_key(a: int, b: int, key: U64s = key, final: U64s = final) -> None:  # in place: (bucket, final hash)
        np.right_shift(final[a:b], np.uint64(bits), out=final[a:b])
        final[a:b] |= key[a:b] & top

    in_steps(final_key, n)
    del key, final_key
    keys = final
    ordered = sort(keys)
    same = _picked(n - 1, lambda a, b: ordered[a + 1:b + 1] == ordered[a:b])
    unresolved.append((ordered[same] >> up).view(np.intp))
    begin = np.zeros(1 << bits, dtype=np.int64)      # each bucket's first place (both sorts put buckets alike)
    starts = _picked(n - 1, lambda a, b: ordered[a + 1:b + 1] >> up != ordered[a:b] >> up) + 1
    begin[(ordered[starts] >> up).view(np.intp)] = starts     # (the first bucket's: 0, as initialised)
    kept = empty(n, np.bool_)

    def decide(a: int, b: int) -> None:     # a bucket's k-th smallest key: k − 1 after its first in `ordered`
        kept[rows[a:b]] = keys[a:b] <= ordered[begin[(keys[a:b] >> up).view(np.intp)] + (k - 1)]

    in_steps(decide, n)
    return kept, np.concatenate(unresolved)


def _ranks(values: U64s, shift: int) -> Rows:
    """Each position's distance from the start of its run of equal ``values >> shift`` (runs: adjacent).

    A scan, in three passes on the thread pool: each chunk finds the latest run start at or before each
    of its positions (−1 before its first), in steps that carry the start on; the chunks' last starts,
    carried across chunks in order, fill those −1; then the distances.

    Example:
        >>> _ranks(np.array([4, 4, 9, 9, 9, 1], dtype=np.uint64), 0).tolist()
        [0, 1, 0, 1, 2, 0]

    """
    n = values.size
    out = empty(n, np.int64)
    up = np.uint64(shift)

    def starts(a: int, b: int) -> int:
        start = -1
        for c, d in chunks(b - a, STEP):
            c, d = a + c, a + d
            here = out[c:d]
            new = np.empty(d - c, dtype=bool)
            new[0] = c == 0 or values[c] >> up != values[c - 1] >> up
            np.not_equal(values[c + 1:d] >> up, values[c:d - 1] >> up, out=new[1:])
            here[:] = np.where(new, np.arange(c, d, dtype=np.int64), -1)
            here[0] = max(int(here[0]), start)
            np.maximum.accumulate(here, out=here)
            start = int(here[-1])
        return start

    spans = chunks(n, CHUNK)
    lasts = map_chunks(starts, n, CHUNK)
    carried = np.maximum.accumulate(np.array([-1, *lasts[:-1]], dtype=np.int64))

    def distances(i: int, _: int) -> None:
        a, b = spans[i]
        for c, d in chunks(b - a, STEP):
            here = out[a + c:a + d]
            np.maximum(here, carried[i], out=here)
            np.subtract(np.arange(a + c, a + d, dtype=np.int64), here, out=here)

    map_chunks(distances, len(spans), 1)
    return out


def _picked(n: int, test: Callable[[int, int], Mask]) -> Rows:
    """The positions in ``range(n)`` where ``test(a, b)`` (a mask of positions ``[a, b)``) holds, in order.

    Example:
        >>> x = np.array([3, 8, 1, 9])
        >>> _picked(4, lambda a, b: x[a:b] > 2).tolist()
        [0, 1, 3]

    """
    def part(a: int, b: int) -> Rows:
        found: list[Rows] = [np.flatnonzero(test(a + c, a + d)) + (a + c) for c, d in chunks(b - a, STEP)]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    parts = map_chunks(part, n, CHUNK) if n > 0 else []
    out = empty(sum(p.size for p in parts), np.int64)
    return np.concatenate(parts, out=out) if parts else out


def _gathered(values: npt.NDArray[D], at: Rows, dtype: type[D]) -> npt.NDArray[D]:
    """``values[at]`` into memory from :func:`empty`, in steps on the thread pool."""
    out = empty(at.size, dtype)
    in_steps(lambda a, b: np.take(values, at[a:b], out=out[a:b]), at.size)
    return out
