"""Partial ``sorted`` statistics on Polars: each group's codes near some ranks (see ``Statistic.near``).

The ``sorted`` statistic's codes are computed per row (:func:`code_values`; with contribution bounding
or a row plan, the bounded rows are materialised first so bounding runs once). Then
:class:`RankWindows` follows :mod:`dpframe.backends.rank_windows`:

1. every 8th row's codes (64th without grouping) give, per group and target q, window ends
   ``lo ≤ hi``; each target's window is then *shared* by all groups: ``[min lo, max hi]`` over the
   groups. Shared windows are literals, so no per-row join is needed;
2. the main aggregation counts each group's codes and ``#{x < lo}`` per window; a second aggregation
   over the rows inside a window lists their codes. A group the sample missed (a small one) gets
   its whole list instead, from one more pass over just those groups;
3. :func:`finish` sorts the listed codes and turns them into the struct ``{n, positions, codes}`` the
   mechanisms read through :class:`~dpframe.mechanism.SortedCodes`.

When the windows would hold more than half of the sampled codes (small groups, many targets, a small
ε, groups with very different values) the listing saves nothing: the plan then returns every group's
whole sorted list instead (same statistic, same key). Either way the answer is exact; only the time
differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from dpframe.backends._bounding import empty, sort
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.polars_lists import sorted_lists
from dpframe.backends.rank_windows import (
    OPEN_HIGH,
    OPEN_LOW,
    SAMPLE_STRIDE,
    SINGLE_STRIDE,
    partition_sample,
    window_bounds,
    window_positions,
    window_share,
)
from dpframe.domains import exact_int128
from dpframe.engine_output import ENGINE
from dpframe.mechanism import Statistic
from dpframe.mechanism.base import flat_lists
from dpframe.mechanism.sorted_codes import ranges
from dpframe.parallel import map_chunks, threads

WORTH = 0.5
"""Windows are used only if they hold at most half of the sampled codes (speed only; an empty sample
counts as all listed)."""

_CODE = "__dpframe_code{}"
_RAW = "__dpframe_raw{}"
_LO, _HI = "__dpframe_lo{}_{}", "__dpframe_hi{}_{}"
_BELOW, _IN = "__dpframe_below{}_{}", "__dpframe_in{}"
_ROW = "__dpframe_row"


def sorted_codes(col: pl.Expr, dtype: pl.DataType, stat: Statistic) -> pl.Expr:
    """The codes of the ``sorted`` statistic: of the non-null, non-NaN values, *unsorted*.

    :meth:`PolarsBackend.statistics` aggregates them into one list per group and sorts each list
    afterwards (:func:`sort_each`: several times faster than sorting inside the aggregation).
    """
    return code_values(col, dtype, stat).drop_nulls()


def code_values(col: pl.Expr, dtype: pl.DataType, stat: Statistic) -> pl.Expr:
    """One ``sorted`` code per row, null for a null or NaN value.

    Floats in float64 (clamp, shift, scale, truncate toward zero); integers, dates and datetimes exactly
    (clamped in Int64, or in Int128 where Int64 could overflow, e.g. unsigned 64-bit values; then divided
    by 2**grid_exp toward zero).

    Example:
        >>> stat = Statistic("sorted", "x", Fraction(0), Fraction(10), grid_exp=-1)
        >>> x = pl.Series([1.3, float("nan"), 99.0])
        >>> pl.select(code_values(pl.lit(x), pl.Float64(), stat)).to_series().to_list()
        [2, None, 20]

    """
    assert stat.lower is not None and stat.upper is not None
    if dtype.is_float():
        # When every clamped code fits in int64 (public: from the bounds), NaN is the only value a
        # non-strict cast turns into null — about 1.5× faster than replacing NaN by null first.
        widest = max(abs(stat.lower - stat.shift), abs(stat.upper - stat.shift)) * Fraction(2) ** (-stat.grid_exp)
        value = col.cast(pl.Float64)
        value = (value if widest < 2**62 else value.fill_nan(None)).clip(float(stat.lower), float(stat.upper))
        if stat.shift:
            value = value - float(stat.shift)
        if stat.grid_exp:
            value = value * 2.0 ** (-stat.grid_exp)
        return value.cast(pl.Int64, strict=widest >= 2**62)
    temporal = dtype == pl.Date or isinstance(dtype, pl.Datetime)
    lower, upper, shift = int(stat.lower), int(stat.upper), int(stat.shift)
    # A grid coarser than 1 divides (step), a finer one multiplies (scale): an integer is exactly on it.
    step = 2**stat.grid_exp if stat.grid_exp > 0 else 1
    scale = 2**-stat.grid_exp if stat.grid_exp < 0 else 1
    ints = col.cast(pl.Int64) if temporal else col
    # Int64 when that is exact (public: dtype and bounds): the column converts losslessly and no clamped
    # value, shifted, scaled or rounded, leaves int64; else Int128 (e.g. UInt64 values clamp correctly there).
    # Int64 arithmetic is several times faster than Int128 over millions of rows.
    exact = (temporal or dtype in _INT64_EXACT) and -2**63 <= min(lower, (lower - shift) * scale) and \
        max(upper, (upper - shift) * scale + step - 1) < 2**63
    # (a UInt128 value past Int128 is clamped to 2^127 - 1 first: a strict cast failed on it after the charge)
    ints = ints.cast(pl.Int64) if exact else exact_int128(ints, pl.Int64() if temporal else dtype)
    codes = ints.clip(lower, upper) - shift
    if stat.grid_exp > 0:         # truncation toward zero, as for floats (floor division only for codes ≥ 0)
        codes = pl.when(codes >= 0).then(codes // step).otherwise((codes + (step - 1)) // step)
    elif stat.grid_exp < 0:       # (once: codes // 2^-k, and below zero (c + 2^-k - 1) // 2^-k: -1 coded -15, not -8)
        codes = codes * scale
    return codes.cast(pl.Int64)


_INT64_EXACT = frozenset({pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32})
"""Integer dtypes whose every value is an Int64 value."""


@dataclass
class RankWindows:
    """The rows (with codes) and, per partial ``sorted`` statistic, its shared windows and expressions.

    ``near`` lists the statistics answered partially; empty when the windows were not worth it, in which
    case ``frame`` holds the codes and :meth:`aggregates` lists whole groups. ``ends[i]`` holds
    statistic i's windows ``(lo, hi)`` per target; ``sampled`` the groups the sample saw. ``raw[i]``, when
    set, holds the same windows on statistic i's float values (:func:`float_ends`): the passes over a
    stored table then compare values instead of computing every row's code.
    """

    frame: pl.LazyFrame
    stats: list[Statistic]
    near: list[Statistic]
    by: list[str] = field(default_factory=list)
    ends: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    sampled: pl.DataFrame = field(default_factory=pl.DataFrame)
    raw: dict[int, list[tuple[float, float]]] = field(default_factory=dict)

    @classmethod
    def plan(cls, frame: pl.LazyFrame, schema: pl.Schema, request: StatisticsRequest,
             stats: list[Statistic]) -> RankWindows:
        """Sample the codes and place the windows (materialising the bounded rows first if bounding ran)."""
        by = list(request.by)
        read = [s.column for s in request.statistics if s.column is not None and s not in stats]
        unit = [request.unit.column] if request.unit.column and any(s.kind == "units" for s in request.statistics) \
            else []
        codes = [code_values(pl.col(s.column), schema[s.column], s).alias(_CODE.format(i))
                 for i, s in enumerate(stats) if s.column is not None]
        materialised = bool(request.row_nodes or (request.unit.column is not None and request.contribution_bounding))
        # a stored table's float values, to compare with the windows' ends instead of computing every code
        floats = [] if materialised else [i for i, s in enumerate(stats) if _compares(schema, s)]
        values = [pl.col(str(stats[i].column)).cast(pl.Float64).alias(_RAW.format(i)) for i in floats]
        base = frame.select(*dict.fromkeys(by + unit + read), *codes, *values)
        stride = SAMPLE_STRIDE if by else SINGLE_STRIDE
        height: int | None = None               # the rows' count, where it is known without a query
        if materialised:
            rows = base.collect(engine=ENGINE)  # bounding or a row plan: run it once, read the rows twice more
            base, height = rows.lazy(), rows.height
            if height < WHOLE_BELOW:
                return cls(base, stats, [])
            sample = base.gather_every(stride)
        else:                                   # a stored table: codes of the sampled rows only
            sample = frame.gather_every(stride).select(*by, *codes)
        if by and request.keys is not None:
            if height is None:
                height = frame.select(pl.len()).collect(engine=ENGINE).item()
            if _hopeless(stats, request.keys.height, height, stride):
                return cls(base, stats, [])
        lists = [pl.col(_CODE.format(i)).drop_nulls() for i in range(len(stats))]
        grouped = sample.group_by(by).agg(lists) if by else sample.select([e.implode() for e in lists])
        sampled = grouped.collect(engine=ENGINE)
        placed = cls.placed(sampled, stats, by, stride, base)
        if placed is None:
            return cls(base, stats, [])
        sizes = sampled.select(pl.col(code_column(i)).list.len().sum() for i in floats).row(0) if floats else ()
        for i, size in zip(floats, sizes):
            if size * stride >= COMPARE_FROM and (ends := float_ends(stats[i], placed.ends[i])) is not None:
                placed.raw[i] = ends
        return placed

    @classmethod
    def placed(cls, sampled: pl.DataFrame, stats: list[Statistic], by: list[str], stride: int,
               frame: pl.LazyFrame | None = None) -> RankWindows | None:
        """The windows :func:`place_windows` puts from ``sampled`` (None: not worth it); for every backend.

        ``frame`` (the rows, with codes) is only used by the Polars backend's expressions.
        """
        ends = place_windows(sampled, stats, by, stride)
        if ends is None:
            return None
        return cls(pl.LazyFrame() if frame is None else frame, stats, stats, by, ends, sampled.select(by))

    def aggregates(self, stat: Statistic) -> list[pl.Expr]:
        """The main aggregation's expressions for ``stat``: the whole list, or the count and #{x < lo}."""
        i, k = self.stats.index(stat), stat.key
        code = pl.col(_CODE.format(i))
        if stat not in self.near:
            return [code.drop_nulls().alias(k)]
        if i in self.raw:      # the same counts from the values: code < lo exactly when value <= a
            value = pl.col(_RAW.format(i))
            return [value.is_not_nan().sum().cast(pl.Int64).alias(f"{k}#n"),
                    *[(value <= a).sum().cast(pl.Int64).alias(f"{k}#below{j}") for j, (a, _) in enumerate(self.raw[i])]]
        return [code.count().cast(pl.Int64).alias(f"{k}#n"),
                *[(code < lo).sum().cast(pl.Int64).alias(f"{k}#below{j}") for j, (lo, _) in enumerate(self.ends[i])]]

    def inside(self, stat: Statistic) -> pl.Expr:
        """Rows whose code lies in one of ``stat``'s windows."""
        i = self.stats.index(stat)
        if i in self.raw:      # lo <= code <= hi exactly when a < value <= b (NaN fails value <= b)
            value = pl.col(_RAW.format(i))
            return pl.any_horizontal([(value > a) & (value <= b) for a, b in self.raw[i]])
        code = pl.col(_CODE.format(i))
        return pl.any_horizontal([code.is_between(lo, hi) for lo, hi in self.ends[i]])

    def listed(self, stat: Statistic) -> pl.Expr:
        """The codes inside ``stat``'s windows (unsorted), named by its key."""
        i = self.stats.index(stat)
        if i in self.raw:      # the codes of the values inside only (code_values casts to float64 first)
            return code_values(pl.col(_RAW.format(i)).filter(self.inside(stat)), pl.Float64(), stat).alias(stat.key)
        return pl.col(_CODE.format(i)).filter(self.inside(stat)).alias(stat.key)

    def listed_lists(self, stat: Statistic, rows: bool = False) -> pl.LazyFrame:
        """Per group (grouping columns), the codes inside ``stat``'s windows as one unsorted list, named by its key.

        ``rows``: one row per code instead (grouping columns and code), for :func:`grouped_codes` to sort
        by key with :func:`~dpframe.backends.polars_lists.sorted_lists`.
        """
        return self._codes(self.frame.filter(self.inside(stat)), stat, rows)

    def unsampled(self, groups: pl.DataFrame) -> pl.DataFrame:
        """The groups (grouping columns of ``groups``) the sample did not see."""
        return groups.select(self.by).join(self.sampled, on=self.by, how="anti", nulls_equal=True)

    def whole(self, stat: Statistic, groups: pl.DataFrame, rows: bool = False) -> pl.LazyFrame:
        """Every code of the groups ``groups``: groups the sample missed.

        Grouping columns and one list per group, or with ``rows`` one row per code (see :meth:`listed_lists`).
        """
        return self._codes(self.frame.join(groups.lazy(), on=self.by, how="semi", nulls_equal=True), stat, rows)

    def _codes(self, frame: pl.LazyFrame, stat: Statistic, rows: bool) -> pl.LazyFrame:
        code = pl.col(_CODE.format(self.stats.index(stat))).alias(stat.key)
        return frame.select(*self.by, code).drop_nulls(stat.key) if rows else \
            frame.group_by(self.by).agg(code.drop_nulls())

    def lower_ends(self, stat: Statistic, groups: pl.DataFrame) -> npt.NDArray[np.int64]:
        """Each window's lower end for the groups (rows of ``groups``' grouping columns), shape (groups, targets).

        A group the sample missed has one open window: its whole list.
        """
        lows = np.array([lo for lo, _ in self.ends[self.stats.index(stat)]], dtype=np.int64)
        out = np.tile(lows, (groups.height, 1))
        if self.by:
            seen = groups.select(self.by).join(self.sampled.with_columns(pl.lit(True).alias("__dpframe_seen")),
                                               on=self.by, how="left", nulls_equal=True, maintain_order="left")
            out[~seen["__dpframe_seen"].fill_null(False).to_numpy()] = OPEN_LOW
        return out


HOPELESS = 0.95
"""The sample is skipped when groups of equal size (the rows over the public keys) would have windows holding
at least this share of their codes: many small groups (100,000 groups of 100 rows), where whole lists win."""
WHOLE_BELOW = 4096
"""Rows (counted without a query: bounded or row-planned tables) under which whole lists are read without a
sample: windows cannot pay on so few codes, and sampling and placing them cost a few milliseconds per query."""


def _hopeless(stats: Sequence[Statistic], groups: int, rows: int, stride: int) -> bool:
    """Whether windows would hold most codes anyway, judged from the group sizes if ``rows`` split evenly.

    True when every statistic's windows would hold at least :data:`HOPELESS` of the codes of ``groups``
    groups of equal size (a guess from sizes alone: it decides only how fast, never what).

    Example:
        >>> stat = Statistic("sorted", "x", Fraction(0), Fraction(1000), near=(Fraction(1, 2),), reach=44)
        >>> _hopeless([stat], 100_000, 10_000_000, 8), _hopeless([stat], 1_000, 10_000_000, 8)
        (True, False)

    """
    if not groups:
        return False
    sizes = np.full(groups, rows // (groups * stride), dtype=np.int64)
    return all(window_share(sizes, s.near, s.reach, stride) >= HOPELESS for s in stats)


def place_windows(sampled: pl.DataFrame, stats: Sequence[Statistic], by: list[str], stride: int
                  ) -> dict[int, list[tuple[int, int]]] | None:
    """Each statistic's shared windows ``(lo, hi)`` per target, from a sample of its codes; None: not worth it.

    ``sampled`` has the grouping columns ``by`` and, per statistic i, a list column ``code_column(i)`` of
    the codes of about one row in ``stride`` (the groups the sample saw). A group's windows come from
    :func:`~dpframe.backends.rank_windows.window_bounds`; the shared window of a target spans every
    group's. None when the windows would hold more than :data:`WORTH` of the sampled codes (then whole
    lists are cheaper). Any sample gives exact answers (:class:`~dpframe.mechanism.SortedCodes`
    completes a window that missed); a good one only saves time.

    Example:
        >>> stat = Statistic("sorted", "x", Fraction(0), Fraction(10**6), near=(Fraction(1, 2),), reach=10)
        >>> place_windows(pl.DataFrame({code_column(0): [list(range(1000))]}), [stat], [], 64)
        {0: [(418, 582)]}

    """
    ends: dict[int, list[tuple[int, int]]] = {}
    for i, s in enumerate(stats):
        column = sampled[code_column(i)]
        if by:      # if even each group's own windows would hold most codes, stop before sorting
            if window_share(column.list.len().to_numpy().astype(np.int64), s.near, s.reach, stride) > WORTH:
                return None
            values, offsets = flat_lists(sort_each(column))
        else:       # one group: its order statistics by a partition, not a sort
            values, offsets = flat_lists(column)
            values = partition_sample(values, s.near, s.reach, stride)
        lo, hi = window_bounds(values, offsets, s.near, s.reach, stride)
        ends[i] = [(int(lo[:, j].min()), int(hi[:, j].max())) if lo.size else (OPEN_LOW, OPEN_HIGH)
                   for j in range(len(s.near))]
        if not values.size or _share(values, ends[i]) > WORTH:
            return None             # most codes would be listed anyway: whole lists
    return ends


COMPARE_FROM = 1 << 18
"""Rows (estimated from the sample) from which a stored float column's windows are compared on its values
(:func:`float_ends`, about 1 ms to find); speed only."""
_SEARCH = 255
"""Candidates per end and round of :func:`float_ends`' search after its first (a 256-way split)."""


def _compares(schema: pl.Schema, stat: Statistic) -> bool:
    """Whether ``stat``'s codes are a non-decreasing function of its column's values as float64.

    And null exactly for a null or NaN value (the non-strict cast of :func:`code_values`): Float32 and Float64
    columns whose codes fit in 62 bits.
    """
    if stat.column is None or schema[stat.column] not in (pl.Float32, pl.Float64) or stat.lower is None or \
            stat.upper is None:
        return False
    widest = max(abs(stat.lower - stat.shift), abs(stat.upper - stat.shift)) * Fraction(2) ** (-stat.grid_exp)
    return widest < 2**62


def float_ends(stat: Statistic, ends: Sequence[tuple[int, int]]) -> list[tuple[float, float]] | None:
    """Each code window ``[lo, hi]`` as float64 ends ``(a, b)``; None where an end has no such float (an open end).

    For a value x (not NaN), code(x) < lo exactly when x <= a, and code(x) <= hi exactly when x <= b.

    The codes of :func:`code_values` on a float column are a non-decreasing function of the value (clip, shift,
    scale by a power of two, truncate: each step is monotone, rounding included), so ``{x : code(x) < c}`` is all
    floats up to some t. t is found by a search over float64's order evaluating the *same* Polars expression,
    and each end is checked the same way: code(t) < c <= code(t'), t' the next float above t. The ends are so
    exact (not an estimate), and a pass that compares values counts and lists what comparing codes would.

    Example:
        >>> stat = Statistic("sorted", "x", Fraction(0), Fraction(10), grid_exp=-1)
        >>> float_ends(stat, [(4, 7)])       # code = trunc(2x): code < 4 iff x < 2.0; code <= 7 iff x < 4.0
        [(1.9999999999999998, 3.9999999999999996)]

    """
    bounds = [c for lo, hi in ends for c in (lo, hi + 1 if hi != OPEN_HIGH else OPEN_HIGH)]
    if any(c in (OPEN_LOW, OPEN_HIGH) for c in bounds):
        return None
    target = np.array(bounds, dtype=np.int64)
    bottom, top = _order(np.array([-np.inf, np.inf]))
    # first round: both infinities and floats 2^k steps either side of the end's nominal value shift + c·2^grid_exp
    with np.errstate(over="ignore"):
        nominal = float(stat.shift) + np.ldexp(target.astype(np.float64), stat.grid_exp)
    centre = _order(nominal)
    away = np.uint64(1) << np.arange(63, dtype=np.uint64)
    below = np.where(centre[:, None] > bottom + away, centre[:, None] - away, bottom)
    above = np.where(centre[:, None] < top - away, centre[:, None] + away, top)
    first, final = np.full(target.size, bottom), np.full(target.size, top)
    picks = np.sort(np.column_stack([first, below, centre, above, final]), axis=1)
    while True:
        codes = _codes_at(stat, _value(picks.ravel())).reshape(picks.shape)
        last = (codes < target[:, None]).sum(axis=1)           # the codes below c: a prefix of each row (monotone)
        if (last == 0).any() or (last == picks.shape[1]).any():
            return None             # no value below an end, or every value below it: keep comparing codes
        rows = np.arange(target.size)
        low, high = picks[rows, last - 1], picks[rows, last]    # code(low) < c <= code(high)
        if (high - low <= 1).all():
            break
        step = np.maximum((high - low) // np.uint64(_SEARCH + 1), np.uint64(1))
        inner = np.minimum(low[:, None] + step[:, None] * np.arange(1, _SEARCH + 1, dtype=np.uint64),
                           high[:, None] - np.uint64(1))
        picks = np.column_stack([low, inner, high])
    found = _value(low)
    checked = _codes_at(stat, np.concatenate([found, _value(low + np.uint64(1))]))
    if (checked[:target.size] >= target).any() or (checked[target.size:] < target).any() or \
            (np.signbit(found) & (found == 0)).any():          # -0.0 compares equal to 0.0: no end
        return None
    return [(float(found[2 * j]), float(found[2 * j + 1])) for j in range(len(ends))]


def _order(values: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """float64 (not NaN) to uint64 in the same order: a positive float's sign bit set, a negative's bits flipped."""
    bits = values.view(np.uint64)
    flip = np.where(bits >> np.uint64(63), np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(1 << 63))
    out: npt.NDArray[np.uint64] = bits ^ flip
    return out


def _value(order: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
    """The inverse of :func:`_order`."""
    flip = np.where(order >> np.uint64(63), np.uint64(1 << 63), np.uint64(0xFFFFFFFFFFFFFFFF))
    out: npt.NDArray[np.float64] = (order ^ flip).view(np.float64)
    return out


def _codes_at(stat: Statistic, values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """:func:`code_values` of ``stat`` at float64 values (none NaN), by the same Polars expression."""
    codes = pl.select(code_values(pl.lit(pl.Series(values, dtype=pl.Float64)), pl.Float64(), stat)).to_series()
    out: npt.NDArray[np.int64] = codes.to_numpy()
    return out


def code_column(i: int) -> str:
    """The name of statistic i's code column in a sample (see :func:`place_windows`)."""
    return _CODE.format(i)


def _share(values: npt.NDArray[np.int64], ends: list[tuple[int, int]]) -> float:
    """The share of the sampled codes inside one of the windows."""
    hit = np.zeros(values.size, dtype=bool)
    for lo, hi in ends:
        hit |= (values >= lo) & (values <= hi)
    return float(hit.mean())


def fill_missing_groups(near: Sequence[Statistic]) -> list[pl.Expr]:
    """Public keys without rows: no codes, so zero counts."""
    return [pl.col(f"{s.key}#{a}").fill_null(0) for s in near
            for a in ["n", *(f"below{j}" for j in range(len(s.near)))]]


def grouped_codes(result: pl.DataFrame, lists: pl.DataFrame, by: list[str], key: str
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The listed codes per group of ``result``, sorted: (codes, offsets).

    ``lists`` holds one unsorted list of codes (``key``) per group (grouping columns ``by``), in any order;
    a group of ``result`` without a row there has no codes. Groups come in ``result``'s row order: a join
    of the two small frames gives each group's list, and :func:`sort_each` gathers and sorts the lists on
    the thread pool. ``lists`` may instead hold one row per code (an Int64 column ``key``) when ``by`` is
    one column :func:`~dpframe.backends.polars_lists.packs` accepts: one packed sort then lists them.

    Example:
        >>> result = pl.DataFrame({"g": ["a", "b", "c"]})
        >>> lists = pl.DataFrame({"g": ["c", "a"], "k": [[5, 4], [3, 1, 2]]})
        >>> [a.tolist() for a in grouped_codes(result, lists, ["g"], "k")]
        [[1, 2, 3, 4, 5], [0, 3, 3, 5]]

    """
    if not isinstance(lists.schema[key], pl.List):
        return flat_lists(sorted_lists(lists[by[0]], lists[key], result[by[0]]))
    order = (result.select(by).join(lists.select(by).with_row_index(_ROW), on=by, how="left", nulls_equal=True,
                                    maintain_order="left")[_ROW].cast(pl.Int64).fill_null(-1).to_numpy())
    return flat_lists(sort_each(lists[key], order))


def finish(out: pl.DataFrame, windows: RankWindows | None, lists: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Each partial ``sorted`` as the struct ``{n, positions, codes}`` (see :class:`Statistic`).

    ``lists`` holds, when grouped, each statistic's listed codes as one list per group (see
    :func:`grouped_codes`); without grouping they are the statistic's (single) list in ``out``. Codes are
    sorted here, in numpy.
    """
    if windows is None:
        return out
    for s in windows.near:
        k, targets = s.key, range(len(s.near))
        if windows.by:
            codes, offsets = grouped_codes(out, lists[k], windows.by, k)
        else:
            codes, offsets = flat_lists(out[k])
            codes = sort(codes)
        lo = windows.lower_ends(s, out)
        below = np.column_stack([out[f"{k}#below{j}"].to_numpy() for j in targets]).astype(np.int64)
        below[lo == OPEN_LOW] = 0              # whole lists (groups the sample missed) start at rank 0
        ranks = np.empty_like(codes)

        def place(first: int, end: int, codes: npt.NDArray[np.int64] = codes, offsets: npt.NDArray[np.int64] = offsets,
                  below: npt.NDArray[np.int64] = below, lo: npt.NDArray[np.int64] = lo,
                  ranks: npt.NDArray[np.int64] = ranks) -> None:   # groups [first, end): a contiguous slice
            a, b = int(offsets[first]), int(offsets[end])
            ranks[a:b] = window_positions(codes[a:b], offsets[first:end + 1] - a, below[first:end], lo[first:end])

        map_chunks(place, offsets.size - 1, LIST_CHUNK)
        arrays = [pl.from_arrow(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(v))) for v in (ranks, codes)]
        struct = pl.DataFrame({"n": out[f"{k}#n"], "positions": arrays[0], "codes": arrays[1]}).to_struct(k)
        helpers = [c for c in out.columns if c.startswith(f"{k}#") or c == k]
        out = out.drop(helpers).with_columns(struct)
    return out


def finish_lists(out: pl.DataFrame, windows: RankWindows | None) -> pl.DataFrame:
    """:func:`finish` when each partial statistic's listed codes come as one unsorted list per group (``out[key]``).

    The SQL backends aggregate them so (one query); nulls (a group without listed codes) are empty lists.
    """
    if windows is None or not windows.by:
        return finish(out, windows, {})
    empty = pl.lit([], dtype=pl.List(pl.Int64))
    return finish(out, windows, {s.key: out.select(*windows.by, pl.col(s.key).list.drop_nulls().fill_null(empty))
                                 for s in windows.near})


LIST_CHUNK = 256
"""Groups per task of :func:`finish` (ranks of the listed codes) on the thread pool."""
LONG_LIST = (64, 4096)
"""Chunks of lists averaging at least this many values are sorted list by list, in place, shorter ones by one
packed sort per chunk (:func:`sort_each`): the first value with at most two threads, the second with more.
Sorting list by list compares less (short sorts) but makes one Python call per list; from a few threads on,
those calls contend for the GIL (100,000 lists of 100 values: 130 ms on 1 thread, 720 ms on 16) while the
packed sorts scale (70 ms on 16)."""
LIST_VALUES = 1 << 17
"""About this many values per task of :func:`sort_each`: a chunk's arrays stay in a core's cache (the packed
sort's passes are memory-bound beyond it)."""


def sort_each(column: pl.Series, order: npt.NDArray[np.int64] | None = None) -> pl.Series:
    """A List[Int64] column with every list sorted (in numpy: several times faster than ``list.sort``).

    ``order``: the lists to return, by position in ``column`` (−1: an empty list), in one pass with the
    sort — a Polars gather of the lists (a join, a sort of the rows) would copy every value once more.
    Chunks of lists (about :data:`LIST_VALUES` values each) are sorted as tasks on the thread pool
    (:mod:`dpframe.parallel`; numpy's sort releases the GIL): long lists one by one, in place; short ones
    (:data:`LONG_LIST`) by one sort of (list, value) packed into a single integer when that fits in 63 bits,
    else a lexsort.

    Example:
        >>> sort_each(pl.Series("k", [[3, 1, 2], [], [9, 7]])).to_list()
        [[1, 2, 3], [], [7, 9]]
        >>> sort_each(pl.Series("k", [[3, 1, 2], [], [9, 7]]), np.array([2, -1, 0])).to_list()
        [[7, 9], [], [1, 2, 3]]

    """
    values, offsets = flat_lists(column)
    if order is None:
        starts, ends = offsets[:-1], offsets[1:]
    else:
        have = order >= 0
        picked = np.where(have, order, 0)
        padded = np.append(offsets, offsets[-1])           # (an empty column: only −1 may be asked for)
        starts, ends = np.where(have, padded[picked], 0), np.where(have, padded[picked + 1], 0)
        offsets = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)
    out = empty(int(offsets[-1]), np.int64)   # written chunk by chunk by the tasks; pooled memory: no fresh pages

    def sort_lists(first: int, end: int) -> None:
        lo, hi = int(offsets[first]), int(offsets[end])
        part = values[lo:hi] if order is None else values[ranges(starts[first:end], ends[first:end])]
        if hi - lo >= long_list * (end - first):
            out[lo:hi] = part
            for a, b in zip(offsets[first:end].tolist(), offsets[first + 1:end + 1].tolist()):
                out[a:b].sort()                      # in place: no copy, no wrapper per list
        elif hi > lo:
            group = np.repeat(np.arange(end - first, dtype=np.int64), np.diff(offsets[first:end + 1]))
            out[lo:hi] = _sort_by_group(part, group, end - first)

    n = offsets.size - 1
    long_list = LONG_LIST[threads() > 2]
    map_chunks(sort_lists, n, max(1, n * LIST_VALUES // max(int(offsets[-1]), 1)))
    listed = pl.from_arrow(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(out)))
    assert isinstance(listed, pl.Series)
    return listed.alias(column.name)


def _sort_by_group(values: npt.NDArray[np.int64], group: npt.NDArray[np.int64], groups: int
                   ) -> npt.NDArray[np.int64]:
    """``values`` ordered by (group, value), as one packed-integer sort when both fit in 63 bits, else a lexsort."""
    if not values.size:
        return values
    low = int(values.min())
    bits = (int(values.max()) - low).bit_length()
    if bits + groups.bit_length() <= 62:
        packed = sort((group << bits) | (values - low), spare=True, threaded=False)   # a task on the pool
        out: npt.NDArray[np.int64] = (packed & ((1 << bits) - 1)) + low
        return out
    ordered: npt.NDArray[np.int64] = values[np.lexsort((values, group))]
    return ordered
