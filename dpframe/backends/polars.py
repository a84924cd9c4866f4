"""The Polars backend: one LazyFrame query per private query, collected once.

Contribution bounding is part of that query. For a unit column ``u`` with ``max_rows = m`` it ranks
each unit's rows by a seeded 64-bit hash of the row's relevant values (unit, keys and every column a
statistic reads) and keeps ranks ≤ m; with ``max_groups = g`` it first keeps, per unit, the g distinct
group keys with the smallest seeded hashes. With a fresh random seed per query this keeps a uniformly
random subset of each unit's rows and groups. Why it is sound: what a unit keeps depends only on its
own rows and the seed — never on row order or on other units (unlike a positional shuffle) — so
bounding is a stable transformation: neighbouring tables stay neighbours, differing by at most m rows
in at most g groups. Two different rows of one unit tie only on a 64-bit hash collision; ties between
rows that agree on every column the statistics read are harmless (the rows are interchangeable).

Speed: the rank is only computed where it can matter. A unit with at most m rows keeps them all, and
counting a unit's rows is one vectorized pass, while a rank window costs about half a microsecond per
unit; so only the rows of units with more than m rows are ranked (with m = 1, a per-unit minimum of
the hash replaces the rank). See :func:`keep_smallest`: the rows kept are the same as ranking them all.

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

import polars as pl

from dpframe.backends.base import StatisticsRequest, int64_sums_are_exact
from dpframe.mechanism import LIST_KINDS, SUM_LIMIT, Statistic
from dpframe.plan.sample import apply_node

_SEED_MASK = (1 << 63) - 1
_HASH = "__dpframe_hash"
_ROWS = "__dpframe_rows"   # rows per group, to check that Int64 sums cannot wrap
_COUNT = "__dpframe_count"  # rows per unit, in bounding


def _hash(columns: list[str], seed: int) -> pl.Expr:
    """A seeded 64-bit hash of a row's values in ``columns`` (computed once, before the ranking window)."""
    return pl.struct(columns).hash(seed).alias(_HASH)


def statistic_expr(stat: Statistic, unit_column: str | None, schema: pl.Schema, wide: bool = False) -> pl.Expr:
    """The Polars aggregation computing ``stat`` exactly (an integer per group).

    A ``fixed_sum`` is an Int64 sum (exact when :func:`int64_sums_are_exact` holds for the group's row
    count; :meth:`PolarsBackend.statistics` checks and clips it), or with ``wide`` an Int128 sum clipped
    to ±SUM_LIMIT.
    """
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


def sorted_codes(col: pl.Expr, dtype: pl.DataType, stat: Statistic) -> pl.Expr:
    """The codes of the ``sorted`` statistic: of the non-null, non-NaN values, *unsorted*.

    Floats in float64 (clamp, shift, scale, truncate toward zero); integers, dates and datetimes exactly
    (clamped in Int128 so unsigned 64-bit values clamp correctly, then divided by 2**grid_exp toward zero).
    :meth:`PolarsBackend.statistics` aggregates them into one list per group and sorts each list
    afterwards (``list.sort``: several times faster than sorting inside the aggregation).
    """
    assert stat.lower is not None and stat.upper is not None
    if dtype.is_float():
        value = col.cast(pl.Float64)
        value = value.filter(value.is_not_nan()).clip(float(stat.lower), float(stat.upper))
        if stat.shift:
            value = value - float(stat.shift)
        if stat.grid_exp:
            value = value * 2.0 ** (-stat.grid_exp)
        return value.cast(pl.Int64)
    temporal = dtype == pl.Date or isinstance(dtype, pl.Datetime)
    ints = (col.drop_nulls().cast(pl.Int64) if temporal else col.drop_nulls()).cast(pl.Int128)
    codes = ints.clip(int(stat.lower), int(stat.upper)) - int(stat.shift)
    if stat.grid_exp:
        step = 2**stat.grid_exp   # truncation toward zero, as for floats (floor division only for codes ≥ 0)
        codes = pl.when(codes >= 0).then(codes // step).otherwise((codes + (step - 1)) // step)
    return codes.cast(pl.Int64)


def _rank_within(unit: str) -> pl.Expr:
    """1, 2, ... within each unit, in the order of the seeded hash column (see :func:`_hash`).

    The rank of a row depends only on its own values, its unit's other rows and the seed — not on
    row order or on other units — so keeping ranks ≤ m is a stable selection. Rows with equal values
    in the hashed columns (everything the statistics read) are interchangeable, so their tie order does
    not matter; two *different* rows of one unit tie only on a 64-bit hash collision.
    """
    return pl.col(_HASH).rank("ordinal").over(unit)


def keep_smallest(frame: pl.LazyFrame, unit: str, columns: list[str], seed: int, k: int) -> pl.LazyFrame:
    """Per unit, the ``min(k, n)`` rows (of its ``n``) with the smallest seeded hash of ``columns``.

    The rows kept are exactly those of ``filter(rank ≤ k)`` with :func:`_rank_within` (ties, i.e. rows
    equal in ``columns``, broken by position as ``rank("ordinal")`` does), computed faster. Polars
    evaluates a rank window unit by unit (about half a microsecond per unit), while a count or a minimum
    over the unit is a single vectorized pass, so:

    * ``k = 1``: keep the rows whose hash is their unit's minimum, then the first of those per unit;
    * otherwise units with ``n ≤ k`` keep every row and need no hash; only the rows of units with
      ``n > k`` are ranked (at 2 rows per unit on average, almost none).

    Row order is not kept (the statistics do not depend on it).

    Example:
        >>> lf = pl.LazyFrame({"u": [1, 1, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]})
        >>> keep_smallest(lf, "u", ["u", "x"], 7, 2).group_by("u").len().sort("u").collect().rows()
        [(1, 2), (2, 1)]

    """
    h = pl.col(_HASH)
    if k == 1:
        return (frame.with_columns(_hash(columns, seed)).filter(h == h.min().over(unit))
                .filter(pl.col(unit).is_first_distinct()).drop(_HASH))
    counted = frame.with_columns(pl.len().over(unit).alias(_COUNT))
    small = counted.filter(pl.col(_COUNT) <= k)
    big = (counted.filter(pl.col(_COUNT) > k).with_columns(_hash(columns, seed))
           .filter(_rank_within(unit) <= k).drop(_HASH))
    return pl.concat([small, big]).drop(_COUNT)


class PolarsBackend:
    """Runs plans on Polars LazyFrames (in memory or scanned from Parquet/CSV)."""

    name = "polars"

    def __init__(self) -> None:
        self._tables: dict[str, pl.LazyFrame] = {}

    def register(self, name: str, source: pl.LazyFrame) -> None:
        """Own a private table."""
        self._tables[name] = source

    def bounded(self, request: StatisticsRequest) -> pl.LazyFrame:
        """The row-level plan with contribution bounding applied (still lazy, still private)."""
        frame = self._tables[request.table]
        for position, node in enumerate(request.row_nodes):
            frame = apply_node(node, frame, request.seed, position)
        unit, by = request.unit, list(request.by)
        if unit.column is None:
            return frame  # no bounding: rows outside public keys are dropped by the final join
        if request.keys is not None:  # drop them before bounding, so they use none of a unit's rows
            frame = frame.join(request.keys.lazy(), on=by, how="semi", nulls_equal=True)
        u = unit.column
        frame = frame.filter(pl.col(u).is_not_null())
        if not request.contribution_bounding:
            return frame
        seed = request.seed & _SEED_MASK
        unit_and_keys = list(dict.fromkeys([u, *by]))  # grouping by the unit column itself is allowed
        if by and unit.max_groups is not None and unit.max_groups < unit.max_rows:
            pairs = keep_smallest(frame.select(unit_and_keys).unique(), u, unit_and_keys, seed, unit.max_groups)
            frame = frame.join(pairs, on=unit_and_keys, how="semi", nulls_equal=True)
        used = sorted({s.column for s in request.statistics if s.column is not None} - {u, *by})
        return keep_smallest(frame, u, [*unit_and_keys, *used], seed ^ 0x5DEECE66D, unit.max_rows)

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        """One query: bound, group, aggregate; public keys get a row even when empty (zeros).

        Sums run in Int64 with each group's row count alongside; only if a group is so large that an
        Int64 sum could wrap (:func:`int64_sums_are_exact`) is the query run again with Int128 sums.
        Either way a ``fixed_sum`` is exact, then clipped to ±SUM_LIMIT.
        """
        sums = [s for s in request.statistics if s.kind == "fixed_sum"]
        out = self._statistics(request, wide=False, count=bool(sums))
        if sums and not int64_sums_are_exact(sums, int(out.select(pl.col(_ROWS).max().fill_null(0)).item())):
            out = self._statistics(request, wide=True, count=True)
        if sums:
            out = out.drop(_ROWS).with_columns([pl.col(s.key).clip(-SUM_LIMIT, SUM_LIMIT) for s in sums])
        return out

    def _statistics(self, request: StatisticsRequest, wide: bool, count: bool) -> pl.DataFrame:
        frame = self.bounded(request)
        schema = frame.collect_schema()
        exprs = [statistic_expr(s, request.unit.column, schema, wide) for s in request.statistics]
        extra = [pl.len().cast(pl.Int64).alias(_ROWS)] if count else []
        by = list(request.by)
        lists = [pl.col(s.key).list.sort() for s in request.statistics if s.kind in LIST_KINDS]
        if not by:
            return frame.select([e.implode() if s.kind in LIST_KINDS else e
                                 for s, e in zip(request.statistics, exprs)] + extra).with_columns(lists).collect()
        out = frame.group_by(by).agg(exprs + extra).with_columns(lists)
        if request.keys is not None:
            out = (request.keys.lazy().join(out, on=by, how="left", nulls_equal=True)
                   .with_columns([pl.col(s.key).fill_null(pl.lit([], dtype=pl.List(pl.Int64)) if s.kind in LIST_KINDS
                                                          else 0) for s in request.statistics]))
        return out.sort(by, nulls_last=False).collect()
