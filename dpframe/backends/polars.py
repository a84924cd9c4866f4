"""The Polars backend: one LazyFrame query per private query, collected once.

Contribution bounding is part of that query. For a unit column ``u`` with ``max_rows = m`` it ranks
each unit's rows by a seeded 64-bit hash of the row's relevant values (unit, keys and every column a
statistic reads) and keeps ranks ≤ m. Rows of a unit that agree on all those values (copies) would
share one hash, so the j-th copy (j ≥ 1) is hashed again together with j: every row, not every distinct
row, has its own chance (9 copies of a row and 1 other row, m = 1: a copy is kept 9 times in 10). With
``max_groups = g`` it first keeps, per unit, the g distinct group keys with the smallest seeded hashes
(a choice among the unit's distinct keys, however many rows each has). With a fresh random seed per
query this keeps a uniformly random subset of each unit's rows and groups. Why it is sound: what a
unit keeps depends only on its own rows (as a multiset) and the seed — never on row order or on other
units (unlike a positional shuffle) — so bounding is a stable transformation: neighbouring tables stay
neighbours, differing by at most m rows in at most g groups. Two different rows of one unit tie only on
a 64-bit hash collision; which of a row's copies is kept does not matter (they are interchangeable).

Speed: the hash and rank are only computed where they can matter. A unit with at most m rows keeps them
all, and counting a unit's rows is one vectorized pass, while a rank window costs about half a
microsecond per unit; so only the rows of units with more than m rows are ranked (with m = 1 every
row is hashed and a per-unit minimum of the hash replaces the rank), and only rows whose hash repeats
are numbered as copies. See :func:`keep_smallest`: the rows kept are the same as ranking them all.

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
from dpframe.backends.polars_windows import RankWindows, fill_missing_groups, finish, sort_each, sorted_codes
from dpframe.mechanism import LIST_KINDS, SUM_LIMIT, Statistic
from dpframe.plan.sample import apply_node

_SEED_MASK = (1 << 63) - 1
_HASH = "__dpframe_hash"
_ROWS = "__dpframe_rows"   # rows per group, to check that Int64 sums cannot wrap
_COUNT = "__dpframe_count"  # rows per unit, in bounding
_COPIES = "__dpframe_copies"  # rows sharing a row's hash, in bounding
_COPY = "__dpframe_copy"  # which copy of a repeated row (0, 1, ...), in bounding


def _hash(columns: list[str], seed: int) -> pl.Expr:
    """A seeded 64-bit hash of a row's values in ``columns`` (before :func:`_number_copies`)."""
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


def _number_copies(frame: pl.LazyFrame, unit: str, seed: int) -> pl.LazyFrame:
    """Give every copy of a repeated row its own hash: the j-th copy (j ≥ 1) gets ``hash((h, j))``.

    ``frame`` holds the seeded value hash ``h`` (:func:`_hash`) of each row. Rows of one unit that agree
    on every hashed column share ``h``; ranking them by ``h`` alone would keep or drop all of them
    together, so a unit's rows would be chosen uniformly among its *distinct* rows, not among its rows
    (9 copies of a value and 1 other row, one row kept: the copies would win half the time, not 9 in
    10). Here the copies of a row in a unit are numbered 0, 1, ..., c - 1 and copy j ≥ 1 is re-hashed
    with j, so the unit's n rows carry n different hashes. Copies are interchangeable (equal in every
    column a statistic reads), so which one gets which number does not matter: a unit's hashes are a
    function of its multiset of rows and the seed alone — never of row order or other units.

    Copy 0 keeps ``h``, so only repeated hashes need any work: the rows whose ``h`` occurs once (a
    count over ``h``, one vectorized pass) are left alone; the others are sorted by (``h``, unit) and
    numbered by their position in their run. (Counting over ``h`` alone may also route a row that
    merely collides with another unit's row: it is then numbered 0 in its own (``h``, unit) run.)

    Example:
        >>> lf = pl.LazyFrame({"u": [1, 1, 1, 2], "x": [5, 5, 5, 5]}).with_columns(_hash(["u", "x"], 3))
        >>> _number_copies(lf, "u", 3).group_by("u").agg(pl.col(_HASH).n_unique()).sort("u").collect().rows()
        [(1, 3), (2, 1)]

    """
    flagged = frame.with_columns(pl.len().over(_HASH).alias(_COPIES))
    once = flagged.filter(pl.col(_COPIES) == 1)
    h, u, position = pl.col(_HASH), pl.col(unit), pl.int_range(pl.len())
    starts = h.ne_missing(h.shift()) | u.ne_missing(u.shift())     # the first row of a run of copies
    copy = (position - pl.when(starts).then(position).forward_fill()).alias(_COPY)
    repeated = (flagged.filter(pl.col(_COPIES) > 1).sort(_HASH, unit).with_columns(copy)
                .with_columns(pl.when(pl.col(_COPY) == 0).then(h).otherwise(pl.struct(h, _COPY).hash(seed))
                              .alias(_HASH)).drop(_COPY))
    return pl.concat([once, repeated]).drop(_COPIES)


def keep_smallest(frame: pl.LazyFrame, unit: str, columns: list[str], seed: int, k: int,
                  distinct: bool = False) -> pl.LazyFrame:
    """Per unit, a uniformly random ``min(k, n)`` of its ``n`` rows (a function of the seed and its rows).

    The definition: each row gets a seeded hash of its values in ``columns`` (which include ``unit``),
    the j-th copy (j ≥ 1) of a row repeated in a unit ``hash((h, j))`` instead (:func:`_number_copies`:
    copies must not share one hash, or the choice would be uniform over distinct rows, not rows); each
    unit keeps its k rows with the smallest hashes (``rank("ordinal") ≤ k`` over the unit: two different
    rows tie only on a 64-bit collision). ``distinct=True`` says the rows are already distinct in
    ``columns`` (as the distinct keys ``max_groups`` picks from), so no copy needs numbering.

    Computed faster than that definition says: Polars evaluates a rank window unit by unit (about half a
    microsecond per unit), while a count or a minimum over the unit is a single vectorized pass, so

    * ``k = 1``: keep the rows whose hash is their unit's minimum, then the first of those per unit
      (two rows share the minimum only on a collision);
    * otherwise units with ``n ≤ k`` keep every row and need no hash; only the rows of units with
      ``n > k`` are hashed and ranked (at 2 rows per unit on average, almost none).

    Row order is not kept (the statistics do not depend on it).

    Example:
        >>> lf = pl.LazyFrame({"u": [1, 1, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]})
        >>> keep_smallest(lf, "u", ["u", "x"], 7, 2).group_by("u").len().sort("u").collect().rows()
        [(1, 2), (2, 1)]

    """
    def hashed(rows: pl.LazyFrame) -> pl.LazyFrame:
        rows = rows.with_columns(_hash(columns, seed))
        return rows if distinct else _number_copies(rows, unit, seed)

    h = pl.col(_HASH)
    if k == 1:
        return (hashed(frame).filter(h == h.min().over(unit)).filter(pl.col(unit).is_first_distinct())
                .drop(_HASH))
    # Read by both branches (and twice inside the second): cached explicitly, as the optimizer would
    # otherwise count the units twice.
    counted = frame.with_columns(pl.len().over(unit).alias(_COUNT)).cache()
    small = counted.filter(pl.col(_COUNT) <= k)
    big = hashed(counted.filter(pl.col(_COUNT) > k)).filter(h.rank("ordinal").over(unit) <= k).drop(_HASH)
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
            pairs = keep_smallest(frame.select(unit_and_keys).unique(), u, unit_and_keys, seed, unit.max_groups,
                                 distinct=True)
            frame = frame.join(pairs, on=unit_and_keys, how="semi", nulls_equal=True)
        used = sorted({s.column for s in request.statistics if s.column is not None} - {u, *by})
        return keep_smallest(frame, u, [*unit_and_keys, *used], seed ^ 0x5DEECE66D, unit.max_rows)

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
        exprs = [e for s in request.statistics for e in
                 (windows.aggregates(s) if windows is not None and s in windows.stats else
                  [_clipped(statistic_expr(s, request.unit.column, schema, wide), s)])]
        extra = [pl.len().cast(pl.Int64).alias(_ROWS)] if count else []
        by = list(request.by)
        lists = [s.key for s in request.statistics if s.kind in LIST_KINDS and s not in near]
        if not by:
            listed = [windows.listed(s) for s in near] if windows is not None else []
            single = frame.select([e.implode() if _is_list(e, request) else e for e in exprs + listed] + extra)
            return finish(_sorted_lists(single.collect(), lists), windows, {})
        out = frame.group_by(by).agg(exprs + extra)
        inside: list[pl.DataFrame] = []
        if windows is not None and near:   # and per statistic the (few) rows inside its windows, ungrouped
            main, *inside = pl.collect_all([out, *[frame.filter(windows.inside(s)).select(*by, windows.listed(s))
                                                   for s in near]], engine="streaming")
            missed = windows.unsampled(main)
            if missed.height:              # small groups the sample missed: all their rows instead
                whole = pl.collect_all([windows.whole(s, missed) for s in near])
                inside = [pl.concat([part.join(missed, on=by, how="anti", nulls_equal=True), full])
                          for part, full in zip(inside, whole)]
            out = main.lazy()
        if request.keys is not None:       # the keys and the (small) aggregate are joined after the big query
            empty = pl.lit([], dtype=pl.List(pl.Int64))
            out = (request.keys.lazy().join(out.collect().lazy(), on=by, how="left", nulls_equal=True)
                   .with_columns([pl.col(s.key).fill_null(empty if s.kind in LIST_KINDS else 0)
                                  for s in request.statistics if s not in near])
                   .with_columns(fill_missing_groups(near)))
        result = _sorted_lists(out.sort(by, nulls_last=False).collect(), lists)
        return finish(result, windows, dict(zip([s.key for s in near], inside)))


def _clipped(expr: pl.Expr, stat: Statistic) -> pl.Expr:
    """A ``fixed_sum`` aggregate clipped to ±SUM_LIMIT (on the aggregated values: one per group)."""
    return expr.clip(-SUM_LIMIT, SUM_LIMIT).alias(stat.key) if stat.kind == "fixed_sum" else expr


def _sorted_lists(out: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``out`` with the lists of the columns ``keys`` sorted (aggregated unsorted: sorting after is faster)."""
    return out.with_columns([sort_each(out[k]) for k in keys]) if keys else out


def _is_list(e: pl.Expr, request: StatisticsRequest) -> bool:
    return e.meta.output_name() in {s.key for s in request.statistics if s.kind in LIST_KINDS}
