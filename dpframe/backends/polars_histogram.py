"""Many ``indicator_sum`` statistics over adjacent bins of one column, counted in one pass (ungrouped queries).

A grid of bins (``frame.bounds()``, ``bounds="auto"``, a histogram) asks for hundreds of statistics
``lower <= column < upper`` whose bins follow one another. One aggregation each costs a comparison pass
per bin and a Polars expression built per bin in Python (about 0.4 s for 644 bins over a million rows);
here each row's bin is found by one binary search over the edges and the bins are counted once.

Exactly :func:`~dpframe.backends.polars.statistic_expr`'s counts: the column is read as ``Float64`` as there,
and the search compares as the comparisons there do (``-0.0`` equals ``0.0``; tested with the edge values in
``tests/backends/test_polars_histogram.py``). With edges ``e_0 < e_1 < ... < e_k`` (the bins' float bounds),
the number of edges at or below a value ``v`` is ``i + 1`` exactly when ``e_i <= v < e_{i+1}``, i.e. when
``v`` is in bin ``i``; values below ``e_0`` or at or above ``e_k`` (infinities included) fall outside every
bin, and NaN and null rows are dropped, as the comparisons there count them in none.

Example:
    >>> from fractions import Fraction as F
    >>> from dpframe.mechanism import Statistic
    >>> bins = Statistic("indicator_sum", "x", F(0), F(1)), Statistic("indicator_sum", "x", F(1), F(3))
    >>> [h] = adjacent_bins(bins, least=2)
    >>> frame = pl.DataFrame({"x": [0.5, 1.0, 2.9, 3.0, None, float("nan")]})
    >>> h.counts(frame.select(h.expr("h"))["h"][0]).rows()
    [(1, 2)]

"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from dpframe.mechanism import Statistic

LEAST_BINS = 16
"""From this many adjacent bins on one column the count runs in one pass (fewer: one aggregation each)."""
_BIN, _COUNT = "bin", "count"


@dataclass(frozen=True)
class Bins:
    """Adjacent ``indicator_sum`` statistics of one column, in the order of their bins."""

    column: str
    stats: tuple[Statistic, ...]

    def edges(self) -> pl.Series:
        """The bins' float bounds: each lower one, then the last upper one (strictly increasing)."""
        return pl.Series([_bounds(s)[0] for s in self.stats] + [_bounds(self.stats[-1])[1]], dtype=pl.Float64)

    def expr(self, name: str) -> pl.Expr:
        """One aggregate: the ``(bin, count)`` pairs of the rows as a one-row list (``bin`` i + 1: bin i)."""
        value = pl.col(self.column).cast(pl.Float64)
        at = pl.lit(self.edges()).search_sorted(value, side="right").alias(_BIN)
        return at.filter(value.is_not_nan()).value_counts(name=_COUNT).implode().alias(name)

    def counts(self, pairs: pl.Series) -> pl.DataFrame:
        """The statistics as one row of Int64 columns (their keys), from :meth:`expr`'s pairs."""
        found = pairs.struct.unnest() if pairs.len() else pl.DataFrame({_BIN: [], _COUNT: []})
        out = np.zeros(len(self.stats) + 2, dtype=np.int64)
        out[found[_BIN].to_numpy().astype(np.int64)] = found[_COUNT].to_numpy()
        return pl.DataFrame([pl.Series(s.key, out[i + 1:i + 2], dtype=pl.Int64) for i, s in enumerate(self.stats)])


def adjacent_bins(statistics: Iterable[Statistic], least: int = LEAST_BINS) -> list[Bins]:
    """The columns whose ``indicator_sum`` statistics form one run of at least ``least`` adjacent bins.

    Adjacent: ordered by lower bound, each bin's float upper bound is the next one's float lower bound,
    and every bin is non-empty as floats. A column whose bins are not so (gaps, overlaps, duplicates)
    keeps one aggregation per statistic.
    """
    by_column: dict[str, list[Statistic]] = {}
    for s in statistics:
        if s.kind == "indicator_sum" and s.column is not None:
            by_column.setdefault(s.column, []).append(s)
    return [Bins(column, tuple(ordered)) for column, stats in by_column.items()
            if len(stats) >= least and _adjacent(ordered := sorted(stats, key=lambda s: _bounds(s)[0]))]


def _bounds(stat: Statistic) -> tuple[float, float]:
    """A bin's bounds as the floats :func:`~dpframe.backends.polars.statistic_expr` compares with."""
    assert stat.lower is not None and stat.upper is not None
    return float(stat.lower), float(stat.upper)


def _adjacent(stats: Sequence[Statistic]) -> bool:
    bounds = [_bounds(s) for s in stats]
    return all(lo < hi for lo, hi in bounds) and all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
