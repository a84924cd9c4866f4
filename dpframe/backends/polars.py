"""The Polars backend: one LazyFrame query per private query, collected once.

Contribution bounding is part of that query. For a unit column ``u`` with ``max_rows = m`` each row gets a
seeded 64-bit hash of its relevant values (unit, keys and every column a statistic reads) and each unit
keeps its m rows with the smallest hashes. Rows of a unit that agree on all those values (copies) would
share one hash, so the j-th copy (j ≥ 1) is hashed again together with j: every row, not every distinct
row, has its own chance (9 copies of a row and 1 other row, m = 1: a copy is kept 9 times in 10). With
``max_groups = g`` it first keeps, per unit, the g distinct group keys with the smallest seeded hashes
(a choice among the unit's distinct keys, however many rows each has). With a fresh random seed per
query this keeps a uniformly random subset of each unit's rows and groups. Why it is sound: what a
unit keeps depends only on its own rows (as a multiset) and the seed — never on row order or on other
units (unlike a positional shuffle) — so bounding is a stable transformation: neighbouring tables stay
neighbours, differing by at most m rows in at most g groups. Two different rows of one unit tie only on
a 64-bit hash collision; which of a row's copies is kept does not matter (they are interchangeable).

Speed: the rows are not ranked unit by unit (a rank window costs about half a microsecond per unit).
One query computes each row's unit, hash and whether it is ranked at all; :func:`~dpframe.backends._bounding.kept`
picks the kept positions in a few vectorized numpy passes (a count per bucket of units, one sort of the
rows of units over the limit), exactly the rows of the definition; the statistics query then reads
the table through that mask. See :func:`keep_smallest`.

Example:
    >>> import polars as pl
    >>> from dpframe.mechanism import LIST_KINDS, Statistic
    >>> from dpframe.privacy_unit import PrivacyUnit
    >>> b = PolarsBackend(); b.register("t", pl.LazyFrame({"u": [1, 1, 2], "x": [1.0, 2.0, 3.0]}))
    >>> req = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=1), (), None, (Statistic("rows"),), 7)
    >>> b.statistics(req)["__rows"].item()
    2

"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from dpframe.backends._bounding import CHUNK, UNIT_SALT, Mask, Rows, U64s, empty, kept
from dpframe.backends.base import STATISTIC_KINDS, StatisticsRequest, int64_sums_are_exact
from dpframe.backends.bins import adjacent_bins, with_counts
from dpframe.backends.polars_lists import packs, sorted_lists
from dpframe.backends.polars_windows import (
    RankWindows,
    code_column,
    code_values,
    fill_missing_groups,
    finish,
    sort_each,
    sorted_codes,
)
from dpframe.engine_output import ENGINE, STREAMING
from dpframe.mechanism import LIST_KINDS, SUM_LIMIT, Statistic
from dpframe.parallel import map_chunks
from dpframe.plan.sample import apply_node
from dpframe.sealed import plain_cache

_SEED_MASK = (1 << 63) - 1
_HASH = "__dpframe_hash"
_ROWS = "__dpframe_rows"   # rows per group, to check that Int64 sums cannot wrap
_KEEP = "__dpframe_keep"   # the bounding mask
_UNIT = "__dpframe_unit"   # the unit column, in definition()
_RANKED = "__dpframe_ranked"  # whether a row is ranked at all, in bounding
_COPY = "__dpframe_copy"  # which copy of a repeated row (0, 1, ...), in bounding
_ORDER = "__dpframe_order"  # a group's row in the aggregate, while the small columns are joined and sorted
_HIST = "__dpframe_histogram"  # a grid's (bin, count) pairs, one column per binned column


def row_hashes(rows: pl.DataFrame, seed: int) -> U64s:
    """A seeded 64-bit hash of each row's values (all of ``rows``' columns): equal rows hash alike.

    Polars' ``hash_rows`` (about twice as fast as hashing a struct of the columns), a slice of
    :data:`~dpframe.backends._bounding.CHUNK` rows at a time on the thread pool, into one array from
    :func:`~dpframe.backends._bounding.empty` (a row's hash depends on its values alone: the same hashes).
    Over the whole frame at once, ``hash_rows`` held two row-sized arrays, and its result went to Polars'
    allocator, which keeps freed pages for a while: 77 MB more at the peak of a 10M-row query, and slower.
    Copies (equal rows) share a hash and are re-hashed in :func:`definition`.

    Example:
        >>> h = row_hashes(pl.DataFrame({"u": [1, 1, 2], "x": [0.5, 0.5, 0.5]}), 7)
        >>> bool(h[0] == h[1]), bool(h[0] == h[2])
        (True, False)

    """
    out = empty(rows.height, np.uint64)

    def part(a: int, b: int) -> None:
        out[a:b] = rows.slice(a, b - a).hash_rows(seed).to_numpy()

    if rows.height:
        map_chunks(part, rows.height, CHUNK)
    return out


def statistic_expr(stat: Statistic, unit_column: str | None, schema: pl.Schema, wide: bool = False) -> pl.Expr:
    """The Polars aggregation computing ``stat`` exactly (an integer per group).

    A ``fixed_sum`` is an Int64 sum (exact when :func:`int64_sums_are_exact` holds for the group's row
    count; :meth:`PolarsBackend.statistics` checks it), or with ``wide`` an Int128 sum, clipped to ±SUM_LIMIT
    (on the aggregated value: one per group).

    A function of public values only (the statistic's fields, the unit column, the type of the column it
    reads): built once per such key (:func:`~dpframe.sealed.plain_cache`, on the plain values) and reused, as
    a Polars expression is immutable. Building one took about 80 µs, paid by every query. The ``wide`` form,
    asked for only when a group's row count (private) calls for it, is built each time: no entry of the cache
    depends on the data.

    Example:
        >>> schema = pl.Schema({"x": pl.Float64})
        >>> stat = Statistic("nonnull", "x")
        >>> statistic_expr(stat, None, schema) is statistic_expr(Statistic("nonnull", "x"), None, schema)
        True

    """
    if wide:
        return _built(stat, unit_column, schema, wide)
    dtype = None if stat.column is None else schema[stat.column]
    return _narrow(tuple(getattr(stat, name) for name in _STATISTIC_FIELDS), unit_column, dtype)


_STATISTIC_FIELDS = tuple(f.name for f in dataclasses.fields(Statistic))


@plain_cache(maxsize=4096)
def _narrow(fields: tuple[object, ...], unit_column: str | None, dtype: pl.DataType | None) -> pl.Expr:
    """:func:`statistic_expr` (not ``wide``) of the statistic with these ``fields``, its column of type ``dtype``."""
    stat = Statistic(*fields)  # type: ignore[arg-type]
    return _built(stat, unit_column, pl.Schema({} if stat.column is None or dtype is None else {stat.column: dtype}),
                  False)


def _built(stat: Statistic, unit_column: str | None, schema: pl.Schema, wide: bool) -> pl.Expr:
    """:func:`statistic_expr`, built."""
    aggregate = _aggregate(stat, unit_column, schema, wide)
    return aggregate.clip(-SUM_LIMIT, SUM_LIMIT).alias(stat.key) if stat.kind == "fixed_sum" else aggregate


def _aggregate(stat: Statistic, unit_column: str | None, schema: pl.Schema, wide: bool) -> pl.Expr:
    """:func:`statistic_expr` before a ``fixed_sum``'s total is clipped."""
    if stat.kind == "rows":
        return pl.len().cast(pl.Int64).alias(stat.key)
    if stat.kind == "units":
        count = pl.col(unit_column).n_unique() if unit_column else pl.len()
        return count.cast(pl.Int64).alias(stat.key)
    assert stat.column is not None
    col = pl.col(stat.column)
    floating = schema[stat.column].is_float()
    if stat.kind == "nonnull":
        # is_not_nan is null on null, and sum skips nulls: counts values that are neither null nor NaN.
        present = col.is_not_nan() if floating else col.is_not_null()
        return present.sum().cast(pl.Int64).alias(stat.key)
    if stat.kind == "distinct":
        # n_unique counts null as one value, and every NaN as one more: taken off (a filter in the group-by
        # context cost 2.5x the whole count); 0.0 and -0.0 are one value.
        values = col.n_unique().cast(pl.Int64) - col.is_null().any().cast(pl.Int64)
        if floating:
            values -= col.is_nan().any().cast(pl.Int64)
        return values.alias(stat.key)
    assert stat.lower is not None and stat.upper is not None
    if stat.kind == "sorted":
        return sorted_codes(col, schema[stat.column], stat).alias(stat.key)
    value = col.cast(pl.Float64)
    if stat.kind == "indicator_sum":
        inside = (value >= float(stat.lower)) & (value < float(stat.upper))  # NaN compares false
        return inside.sum().cast(pl.Int64).alias(stat.key)
    clamped = value.clip(float(stat.lower), float(stat.upper))
    if stat.shift:
        clamped = clamped - float(stat.shift)
    powered = clamped if stat.power == 1 else clamped**stat.power
    if stat.grid_exp:
        powered = powered * 2.0 ** (-stat.grid_exp)
    # Truncation toward zero onto the grid: |trunc(y)| ≤ |y|, inside Statistic.row_bound() and clipped to
    # ±SUM_LIMIT, so always inside Int64. The saturating cast (``wrap_numerical``: Rust's ``as``, no range
    # check and no validity mask, about 1.5× faster than ``strict=False``) truncates toward zero like the
    # checked one on every such value and maps NaN (clip keeps NaN) to 0, which adds nothing to the sum —
    # exactly what skipping it (a null from the checked cast) does. (Only ``fixed_sum`` relies on this: a
    # count never reads these terms.)
    if 2 * stat.row_bound() > SUM_LIMIT:   # public: only then can a term exceed the limit
        powered = powered.clip(-float(SUM_LIMIT), float(SUM_LIMIT))
    term = powered.cast(pl.Int64, wrap_numerical=True)
    if wide:
        return term.cast(pl.Int128).sum().clip(-SUM_LIMIT, SUM_LIMIT).cast(pl.Int64).alias(stat.key)
    return term.sum().alias(stat.key)


def _copy_hash(hashes: pl.Expr, copy: pl.Expr, seed: int) -> pl.Expr:
    """The hash of the j-th copy (j = ``copy`` ≥ 1, Int64) of a row whose hash is ``hashes``."""
    return pl.struct(hashes, copy).hash(seed)


def definition(units: pl.Series, hashes: U64s, seed: int, k: int) -> Mask:
    """The bounding law itself, row by row: which of these rows (hashes from :func:`_hash`) are kept.

    Copies (rows of a unit with one hash) are numbered 0, 1, ... in row order and copy j ≥ 1 is
    re-hashed with j; each unit keeps its k rows with the smallest hashes (``rank("ordinal")`` over the
    unit: two different rows tie only on a 64-bit collision). A window over the unit: slow with many
    units, used only for the few units :func:`~dpframe.backends._bounding.smallest_per_unit` leaves
    undecided — and the reference the fast path is tested against.

    Example:
        >>> import numpy as np
        >>> units = pl.Series([1, 1, 1, 2])
        >>> definition(units, np.array([30, 10, 20, 5], dtype=np.uint64), 3, 2).tolist()
        [False, True, True, True]

    """
    h = pl.col(_HASH)
    copy = pl.int_range(pl.len(), dtype=pl.Int64).over(_UNIT, _HASH)
    final = pl.when(copy == 0).then(h).otherwise(_copy_hash(h, copy, seed))
    frame = pl.DataFrame({_UNIT: units, _HASH: pl.Series(hashes, dtype=pl.UInt64)})
    out: Mask = frame.select(final.rank("ordinal").over(_UNIT) <= k).to_series().to_numpy()
    return out


def kept_mask(units: pl.Series, hashes: U64s, seed: int, k: int, ranked: Mask | None = None) -> Mask:
    """Which rows the bounding law keeps, given each row's unit and hash (:func:`_hash`, with ``seed``).

    Exactly :func:`definition`'s rows among the rows with a unit that are ``ranked`` (all, if ``None``;
    a null unit or a row not ranked is never kept and uses up nothing of its unit's ``k``), computed
    by :func:`~dpframe.backends._bounding.kept` (a count per unit bucket and one sort, no window over
    the units).

    Example:
        >>> rows = pl.DataFrame({"u": [1, 1, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]})
        >>> int(kept_mask(rows["u"], row_hashes(rows, 7), 7, 2).sum())
        3

    """
    def rehash(h: U64s, copy: Rows) -> U64s:
        pairs = pl.DataFrame({_HASH: pl.Series(h, dtype=pl.UInt64), _COPY: pl.Series(copy, dtype=pl.Int64)})
        out: U64s = pairs.select(_copy_hash(pl.col(_HASH), pl.col(_COPY), seed)).to_series().to_numpy()
        return out

    def exact(at: Rows) -> Mask:
        return definition(units.gather(at), hashes[at], seed, k)

    return kept(units, hashes, k, seed ^ UNIT_SALT, rehash, exact, ranked)


def keep_smallest(frame: pl.LazyFrame, unit: str, columns: list[str], seed: int, k: int) -> pl.LazyFrame:
    """Per unit, a uniformly random ``min(k, n)`` of its ``n`` rows (a function of the seed and its rows).

    The rows of :func:`definition` with each row's hash of its values in ``columns`` (which include
    ``unit``), computed by :func:`kept_mask`. ``frame`` is collected once; the result reads it through
    the mask.

    Example:
        >>> lf = pl.LazyFrame({"u": [1, 1, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]})
        >>> keep_smallest(lf, "u", ["u", "x"], 7, 2).group_by("u").len().sort("u").collect().rows()
        [(1, 2), (2, 1)]

    """
    data = frame.collect(engine=ENGINE)
    mask = kept_mask(data[unit], row_hashes(data.select(columns), seed), seed, k)
    return data.lazy().filter(pl.lit(pl.Series(_KEEP, mask)))


class PolarsBackend:
    """Runs plans on Polars LazyFrames (in memory or scanned from Parquet/CSV)."""

    name = "polars"
    statistic_kinds = STATISTIC_KINDS    # every kind (see dpframe.backends.base.ListsKinds)

    def __init__(self) -> None:
        self._tables: dict[str, pl.LazyFrame] = {}

    def register(self, name: str, source: pl.LazyFrame) -> None:
        """Own a private table."""
        self._tables[name] = source

    def bounded(self, request: StatisticsRequest) -> pl.LazyFrame:
        """The row-level plan with contribution bounding applied (still lazy, still private).

        With bounding, one query reads the columns the statistics need (the unit, the keys, the measured
        columns) and whether each row is ranked (a unit, a public key, a chosen group: the others use none
        of their unit's rows); the kept rows (:func:`kept_mask`) become a mask the returned frame filters
        those same rows with (the mask is aligned with them by position: nothing is read twice). Rows
        derived by a row plan are computed once first (a join, for one, need not give its rows in the
        same order twice).
        """
        frame = self._tables[request.table]
        for position, node in enumerate(request.row_nodes):
            frame = apply_node(node, frame, request.seed, position)
        unit, by = request.unit, list(request.by)
        if unit.column is None:
            return frame  # no bounding: rows outside public keys are dropped by the final join
        u = unit.column
        if not request.contribution_bounding:
            if request.keys is not None:
                frame = frame.join(request.keys.lazy(), on=by, how="semi", nulls_equal=True)
            return frame.filter(pl.col(u).is_not_null())
        if request.row_nodes:
            frame = frame.collect(engine=ENGINE).lazy()
        eligible = pl.col(u).is_not_null()
        if request.keys is not None:  # rows outside the keys must use none of a unit's rows
            eligible &= _among(by, request.keys)
        seed = request.seed & _SEED_MASK
        unit_and_keys = list(dict.fromkeys([u, *by]))  # grouping by the unit column itself is allowed
        if by and unit.max_groups is not None and unit.max_groups < unit.max_rows:
            pairs = frame.filter(eligible).select(unit_and_keys).unique().collect(engine=ENGINE)
            hashes = row_hashes(pairs, seed)
            eligible &= _among(unit_and_keys, pairs.filter(kept_mask(pairs[u], hashes, seed, unit.max_groups)))
        used = sorted({s.column for s in request.statistics if s.column is not None} - {u, *by})
        row_seed = seed ^ 0x5DEECE66D
        # A row that is not ranked is never kept and uses up nothing (a flag beside the unit column: no copy
        # of the units with those rows nulled).
        hashed = [*unit_and_keys, *used]
        rows = frame.select(*hashed, eligible.fill_null(False).alias(_RANKED)).collect(engine=ENGINE)
        flags = rows.drop_in_place(_RANKED)
        ranked = None if flags.all() else flags.to_numpy()
        del flags
        keep = kept_mask(rows[u], row_hashes(rows, row_seed), row_seed, unit.max_rows, ranked)
        # the rows read once: the statistics read every column they need from them, so a source that
        # is scanned (a file) is not read a second time, and the mask always fits the rows it was made for
        return rows.lazy().filter(pl.lit(pl.Series(_KEEP, keep)))

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        """One query: bound, group, aggregate; public keys get a row even when empty (zeros).

        Sums run in Int64 with each group's row count alongside; only if a group is so large that an
        Int64 sum could wrap (:func:`int64_sums_are_exact`) is the query run again with Int128 sums.
        Either way a ``fixed_sum`` is exact, then clipped to ±SUM_LIMIT (inside the query).
        """
        sums = [s for s in request.statistics if s.kind == "fixed_sum"]
        out = self._statistics(request, wide=False, count=bool(sums))
        if sums and not int64_sums_are_exact(sums, int(out[_ROWS].max() or 0)):  # type: ignore[arg-type]
            out = self._statistics(request, wide=True, count=True)
        if sums:
            out.drop_in_place(_ROWS)
        return out

    def _statistics(self, request: StatisticsRequest, wide: bool, count: bool) -> pl.DataFrame:
        frame = self.bounded(request)
        schema = frame.collect_schema()
        near = [s for s in request.statistics if s.kind == "sorted" and s.near]
        windows = RankWindows.plan(frame, schema, request, near) if near else None
        if windows is not None:
            frame, near = windows.frame, windows.near
        by = list(request.by)
        bins = [] if by else adjacent_bins(request.statistics)     # a grid's bins: counted in one pass
        binned = {s for b in bins for s in b.stats}
        exprs = [e for s in request.statistics if s not in binned for e in
                 (windows.aggregates(s) if windows is not None and s in windows.stats else
                  [statistic_expr(s, request.unit.column, schema, wide)])]
        extra = [pl.len().cast(pl.Int64).alias(_ROWS)] if count else []
        lists = [s.key for s in request.statistics if s.kind in LIST_KINDS and s not in near]
        packed = len(by) == 1 and packs(schema[by[0]])    # lists by one packed sort (polars_lists)
        if not by:
            listed = [windows.listed(s) for s in near] if windows is not None else []
            listed_keys = _list_keys(request)
            hist = [f"{_HIST}{i}" for i in range(len(bins))]
            counted = [b.polars(h) for b, h in zip(bins, hist)]
            single = frame.select([e.implode() if e.meta.output_name() in listed_keys else e
                                   for e in exprs + listed] + extra + counted).collect(engine=ENGINE)
            single = with_counts(single, bins, hist)
            return finish(_sorted_lists(single, lists), windows, {})
        # packed: whole lists come from one sort of the rows' codes below, not from this aggregation
        listed_keys = _list_keys(request)
        out = frame.group_by(by).agg([e for e in exprs if not (packed and e.meta.output_name() in listed_keys)] + extra)
        inside: list[pl.DataFrame] = []
        if windows is not None and near:   # and per statistic the (few) codes inside its windows, a list per group
            queries = [out, *[windows.listed_lists(s, packed) for s in near]]
            if windows.raw:    # value comparisons share no work between the queries: one at a time on the cores
                main, *inside = [q.collect(engine=STREAMING) for q in queries]
            else:
                main, *inside = pl.collect_all(queries, engine=STREAMING)
            missed = windows.unsampled(main)
            if missed.height:              # small groups the sample missed: all their codes instead
                whole = pl.collect_all([windows.whole(s, missed, packed) for s in near], engine=ENGINE)
                inside = [pl.concat([part.join(missed, on=by, how="anti", nulls_equal=True), full])
                          for part, full in zip(inside, whole)]
            out = main.lazy()
        inside_of = dict(zip([s.key for s in near], inside))
        if not lists:      # the keys are joined to the (small) aggregate and sorted, in the same query
            if request.keys is not None:
                out = (request.keys.lazy().join(out, on=by, how="left", nulls_equal=True)
                       .with_columns([pl.col(s.key).fill_null(0) for s in request.statistics if s not in near])
                       .with_columns(fill_missing_groups(near)))
            return finish(out.sort(by, nulls_last=False).collect(engine=ENGINE), windows, inside_of)
        # with lists, the aggregate without them is joined and sorted; each list column then follows its
        # rows' new order in the same numpy pass that sorts the lists
        if packed:
            rows = [frame.select(*by, _row_code(s, windows, schema).alias(s.key)).drop_nulls(s.key)
                    for s in request.statistics if s.key in lists]
            agg, *parts = pl.collect_all([out, *rows], engine=ENGINE)
        else:
            agg = out.collect(engine=ENGINE)
        small = agg.drop(lists, strict=False).with_row_index(_ORDER).lazy()
        if request.keys is not None:
            small = (request.keys.lazy().join(small, on=by, how="left", nulls_equal=True)
                     .with_columns([pl.col(s.key).fill_null(0) for s in request.statistics
                                    if s not in near and s.kind not in LIST_KINDS])
                     .with_columns(fill_missing_groups(near)))
        ordered = small.sort(by, nulls_last=False).collect(engine=ENGINE)
        if packed:
            result = ordered.drop(_ORDER).with_columns([sorted_lists(part[by[0]], part[k], ordered[by[0]])
                                                        for k, part in zip(lists, parts)])
        else:
            order = ordered[_ORDER].cast(pl.Int64).fill_null(-1).to_numpy()
            result = ordered.drop(_ORDER).with_columns([sort_each(agg[k], order) for k in lists])
        return finish(result, windows, inside_of)


def _among(columns: list[str], table: pl.DataFrame) -> pl.Expr:
    """Whether a row's values in ``columns`` are one of ``table``'s rows (nulls match nulls, as in the keys' join)."""
    if len(columns) == 1:
        return pl.col(columns[0]).is_in(table[columns[0]].implode(), nulls_equal=True)
    return pl.struct(columns).is_in(table.select(pl.struct(columns)).to_series().implode(), nulls_equal=True)


def _sorted_lists(out: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``out`` with the lists of the columns ``keys`` sorted (aggregated unsorted: sorting after is faster)."""
    return out.with_columns([sort_each(out[k]) for k in keys]) if keys else out


def _row_code(stat: Statistic, windows: RankWindows | None, schema: pl.Schema) -> pl.Expr:
    """One ``sorted`` code per row for ``stat`` (null: no value), read from the windows' rows where they hold it."""
    if windows is not None and stat in windows.stats:
        return pl.col(code_column(windows.stats.index(stat)))
    assert stat.column is not None
    return code_values(pl.col(stat.column), schema[stat.column], stat)


def _list_keys(request: StatisticsRequest) -> set[str]:
    """The output names of the request's list statistics (built once per query: a grid asks for hundreds)."""
    return {s.key for s in request.statistics if s.kind in LIST_KINDS}
