"""Partial ``sorted`` statistics on Polars: each group's codes near some ranks (see ``Statistic.near``).

The ``sorted`` statistic's codes are computed once per row (:func:`code_values`; with contribution
bounding or a row plan, the bounded rows are materialised first so they are computed once). Then
:class:`RankWindows` follows :mod:`dpframe.backends.rank_windows`:

1. every 16th row's codes (64th without grouping) give, per group and target q, window ends
   ``lo ≤ hi`` (joined back per group; literals without grouping);
2. the main aggregation counts each group's codes and, per window, ``#{x < lo}``; a second aggregation
   over the few rows inside a window lists their codes, sorted;
3. :func:`finish` turns those into the struct ``{n, positions, codes}`` the mechanisms read through
   :class:`~dpframe.mechanism.SortedCodes`.

When the windows would hold more than half of the sampled codes (small groups, many targets, a small
ε) the listing saves nothing: the plan then returns every group's whole sorted list instead (same
statistic, same key). Either way the answer is exact; only the time differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from dpframe.backends.base import StatisticsRequest
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
from dpframe.mechanism import Statistic
from dpframe.mechanism.base import flat_lists

WORTH = 0.5
"""Windows are used only if they hold at most half of the sampled codes (speed only; an empty sample
counts as all listed)."""

_LOOP_GROUPS = 20_000
"""Up to this many groups, window codes are sorted group by group in numpy; beyond, by ``list.sort``."""
_CODE = "__dpframe_code{}"
_LO, _HI = "__dpframe_lo{}_{}", "__dpframe_hi{}_{}"
_BELOW, _IN = "__dpframe_below{}_{}", "__dpframe_in{}"


def sorted_codes(col: pl.Expr, dtype: pl.DataType, stat: Statistic) -> pl.Expr:
    """The codes of the ``sorted`` statistic: of the non-null, non-NaN values, *unsorted*.

    :meth:`PolarsBackend.statistics` aggregates them into one list per group and sorts each list
    afterwards (``list.sort``: several times faster than sorting inside the aggregation).
    """
    return code_values(col, dtype, stat).drop_nulls()


def code_values(col: pl.Expr, dtype: pl.DataType, stat: Statistic) -> pl.Expr:
    """One ``sorted`` code per row, null for a null or NaN value.

    Floats in float64 (clamp, shift, scale, truncate toward zero); integers, dates and datetimes exactly
    (clamped in Int128 so unsigned 64-bit values clamp correctly, then divided by 2**grid_exp toward zero).
    """
    assert stat.lower is not None and stat.upper is not None
    if dtype.is_float():
        value = col.cast(pl.Float64).fill_nan(None).clip(float(stat.lower), float(stat.upper))
        if stat.shift:
            value = value - float(stat.shift)
        if stat.grid_exp:
            value = value * 2.0 ** (-stat.grid_exp)
        return value.cast(pl.Int64)
    temporal = dtype == pl.Date or isinstance(dtype, pl.Datetime)
    ints = (col.cast(pl.Int64) if temporal else col).cast(pl.Int128)
    codes = ints.clip(int(stat.lower), int(stat.upper)) - int(stat.shift)
    if stat.grid_exp:
        step = 2**stat.grid_exp   # truncation toward zero, as for floats (floor division only for codes ≥ 0)
        codes = pl.when(codes >= 0).then(codes // step).otherwise((codes + (step - 1)) // step)
    return codes.cast(pl.Int64)


@dataclass
class RankWindows:
    """The rows (with codes, window ends and flags) and, per partial ``sorted`` statistic, its expressions.

    ``near`` lists the statistics answered partially; empty when the windows were not worth it, in which
    case ``frame`` holds the codes and :meth:`aggregates` lists whole groups.
    """

    frame: pl.LazyFrame
    stats: list[Statistic]
    near: list[Statistic]
    by: list[str] = field(default_factory=list)
    ends: pl.DataFrame = field(default_factory=pl.DataFrame)   # per sampled group: the window ends

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
        base = frame.select(*dict.fromkeys(by + unit + read), *codes)
        stride = SAMPLE_STRIDE if by else SINGLE_STRIDE
        if request.row_nodes or (request.unit.column is not None and request.contribution_bounding):
            base = base.collect().lazy()        # bounding or a row plan: run it once, read the rows three times
            sample = base.gather_every(stride)
        else:                                   # a stored table: codes of the sampled rows only
            sample = frame.gather_every(stride).select(*by, *codes)
        lists = [pl.col(_CODE.format(i)).drop_nulls() for i in range(len(stats))]
        sampled = (sample.group_by(by).agg([e.sort() for e in lists]) if by else
                   sample.select([e.implode() for e in lists])).collect()
        ends: dict[str, np.ndarray] = {}
        for i, s in enumerate(stats):
            values, offsets = flat_lists(sampled[_CODE.format(i)])
            if not by:  # one group: its order statistics by a partition, not a sort
                values = partition_sample(values, s.near, s.reach, stride)
            sizes = np.diff(offsets)
            if window_share(sizes, s.near, s.reach, stride) > WORTH:
                return cls(base, stats, [])     # most codes would be listed anyway: whole lists
            lo, hi = window_bounds(values, offsets, s.near, s.reach, stride)
            for j in range(len(s.near)):
                ends[_LO.format(i, j)], ends[_HI.format(i, j)] = lo[:, j], hi[:, j]
        columns = [pl.Series(k, v, dtype=pl.Int64) for k, v in ends.items()]
        bounds = sampled.select(by).with_columns(columns) if by else pl.DataFrame(columns)
        if not by:
            windowed = base.with_columns([pl.lit(int(v[0]), dtype=pl.Int64).alias(k) for k, v in ends.items()])
        else:
            windowed = (base.join(bounds.lazy(), on=by, how="left", nulls_equal=True, maintain_order="none")
                        .with_columns([pl.col(k).fill_null(OPEN_LOW if k.startswith("__dpframe_lo") else OPEN_HIGH)
                                       for k in ends]))
        flags = []
        for i, s in enumerate(stats):
            c, targets = pl.col(_CODE.format(i)), range(len(s.near))
            flags += [(c < pl.col(_LO.format(i, j))).alias(_BELOW.format(i, j)) for j in targets]
            flags.append(pl.any_horizontal([c.is_between(pl.col(_LO.format(i, j)), pl.col(_HI.format(i, j)))
                                            for j in targets]).alias(_IN.format(i)))
        return cls(windowed.with_columns(flags), stats, stats, by, bounds)

    def aggregates(self, stat: Statistic) -> list[pl.Expr]:
        """The main aggregation's expressions for ``stat``: the whole list, or the per-window numbers."""
        i, k, targets = self.stats.index(stat), stat.key, range(len(stat.near))
        code = pl.col(_CODE.format(i))
        if stat not in self.near:
            return [code.drop_nulls().alias(k)]
        return [code.count().cast(pl.Int64).alias(f"{k}#n"),
                *[pl.col(_BELOW.format(i, j)).sum().cast(pl.Int64).alias(f"{k}#below{j}") for j in targets]]

    def inside(self, stat: Statistic) -> pl.Expr:
        """Rows whose code lies in one of ``stat``'s windows."""
        return pl.col(_IN.format(self.stats.index(stat)))

    def listed(self, stat: Statistic) -> pl.Expr:
        """The codes inside ``stat``'s windows (unsorted), named by its key."""
        return pl.col(_CODE.format(self.stats.index(stat))).filter(self.inside(stat)).alias(stat.key)

    def lower_ends(self, stat: Statistic, groups: pl.DataFrame) -> npt.NDArray[np.int64]:
        """Each window's lower end for the groups (rows of ``groups``' grouping columns), shape (groups, targets).

        A group the sample missed had open windows.
        """
        i, targets = self.stats.index(stat), range(len(stat.near))
        names = [_LO.format(i, j) for j in targets]
        ends = (groups.select(self.by).join(self.ends.select(*self.by, *names), on=self.by, how="left",
                                            nulls_equal=True, maintain_order="left") if self.by
                else self.ends.select(names))
        out: npt.NDArray[np.int64] = ends.select(pl.col(names).fill_null(OPEN_LOW)).to_numpy().astype(np.int64)
        return out


def fill_missing_groups(near: Sequence[Statistic]) -> list[pl.Expr]:
    """Public keys without rows: no codes, so zero counts."""
    return [pl.col(f"{s.key}#{a}").fill_null(0) for s in near
            for a in ["n", *(f"below{j}" for j in range(len(s.near)))]]


def finish(out: pl.DataFrame, windows: RankWindows | None) -> pl.DataFrame:
    """Each partial ``sorted`` as the struct ``{n, positions, codes}`` (see :class:`Statistic`).

    The listed codes are sorted here, group by group with numpy (far faster than ``list.sort`` on many
    mid-sized lists).
    """
    if windows is None:
        return out
    for s in windows.near:
        k, targets = s.key, range(len(s.near))
        codes, offsets = flat_lists(out[k])
        codes = sort_groups(codes, offsets) if offsets.size <= _LOOP_GROUPS else \
            flat_lists(out[k].list.sort())[0]
        below = np.column_stack([out[f"{k}#below{j}"].to_numpy() for j in targets]).astype(np.int64)
        ranks = window_positions(codes, offsets, below, windows.lower_ends(s, out))
        lists = [pl.from_arrow(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(v))) for v in (ranks, codes)]
        struct = pl.DataFrame({"n": out[f"{k}#n"], "positions": lists[0], "codes": lists[1]}).to_struct(k)
        out = out.drop([f"{k}#below{j}" for j in targets] + [f"{k}#n"]).with_columns(struct)
    return out


def sort_groups(values: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``values`` with each group ``values[offsets[g]:offsets[g + 1]]`` sorted (a copy).

    Example:
        >>> sort_groups(np.array([3, 1, 2, 9, 7]), np.array([0, 3, 5])).tolist()
        [1, 2, 3, 7, 9]

    """
    out = values.copy()
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        if b - a > 1:
            out[a:b].sort()
    return out
