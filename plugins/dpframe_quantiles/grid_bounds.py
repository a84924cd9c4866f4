"""``Frame.bounds`` on numeric columns: two exponential-mechanism quantiles over a coarse relative grid.

The candidates are the bins of a public grid — 0 and ± 2^(k/4), so every 19%
(:func:`dpframe.tuning.grid.value_edges`), restricted to ``domain`` when one is given. The backend
computes the exact number of rows per bin (contribution-bounded as any query: a unit adds ≤ m =
``max_rows`` rows); each quantile q = a/b is drawn over the bins with the tie-aware exponential
mechanism of :mod:`dpframe_quantiles.em`, with its target moved *inwards* by the rank error
R = (2m/ε₀)·ln(bins/β) (:func:`inward_shift`, public), never past the median: for q = a/b the utility is
−max(2b·L − T, T − 2b·C, 0) with T = min(2a·n + 2b·R, b·n) for the low bound (max(2a·n − 2b·R, b·n) for
the high one), L and C the rows below and up to the bin. One row moves 2b·L and 2b·C by ≤ 2b and T by
≤ max(2a, b) ≤ 2b, so m rows move the utility by ≤ 2b·m: drawn with probability ∝ exp(ε₀·u/(4b·m)) it is
ε₀-DP (and ε₀-bounded-range: ε₀²/8-zCDP). ε₀ = ε/2 each (zCDP: ε₀²/8 ≤ ρ/2); two draws compose to ε
(ρ). With probability ≥ 1 − β each bound's rank is within R of its target: at or inside the requested
quantile. The low bound is the lower edge of its bin, the high bound the upper edge of its bin; when both
fall in one outer bin (beyond the grid's ends) the result is the grid's end bin next to it, never an empty
range (x, x) that later queries would refuse as bounds.

Why a coarse grid: the EM's rank error grows with the logarithm of the number of candidates. Over the
whole 64-bit range (2⁶² points) ln|X| ≈ 46, and the wide empty stretches beyond the data carry so much
weight that heavy-tailed data get bounds near their extremes; over ~500 bins ln|X| ≈ 6 and each empty
stretch is a single candidate; the inward target keeps the rank error from pushing a bound outwards,
so on heavy-tailed data the bounds sit near the central mass, not the extremes. With little data
(n/max_rows rows against R) the targets reach the median and the range narrows: that is what the
budget can resolve.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [float(v) for v in range(1, 1001)] * 20})},
    ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), seed=0)
    >>> sess.table("t").bounds("x").collect(dp.PureDP(1))      # 1% and 99% of 1..1000: 10 and 990
    (11.3, 1020.0)

"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl

from dpframe import accounting as acc
from dpframe.budgets import divide, make, up
from dpframe.errors import BoundsError
from dpframe.family import Explain, FamilyPlan, Source
from dpframe.measures import check_bounds
from dpframe.mechanism import Statistic
from dpframe.noise import exponential_index_grouped
from dpframe.planning import budget_of, first, sampling_rate
from dpframe.tuning.grid import OUTER, value_edges
from dpframe_quantiles.mechanism import epsilon_from_rho

BETA = 0.05
"""The chance that a released bound lies beyond its requested quantile (outwards)."""


def inward_shift(bins: int, eps0: Fraction, m: int) -> int:
    """R = ⌈(2m/ε₀)·ln(bins/β)⌉ ranks: the EM lands within R of its target with probability ≥ 1 − β.

    Public (accuracy only: any R gives the same privacy). 2m/ε₀ is exact: as a float it overflowed (a raw
    OverflowError while planning) for ε₀ below ~10⁻³⁰⁸.

    Example:
        >>> inward_shift(500, Fraction(1, 2), 1), len(str(inward_shift(500, Fraction(1, 10**320), 1)))
        (37, 322)

    """
    return math.ceil(2 * m / eps0 * Fraction(math.log(bins / BETA)))


def grid(column: str, dtype: pl.DataType, domain: Any, resolution: Any) -> tuple[Fraction, ...]:
    """The bin edges: the relative grid, inside ``domain`` (its ends added), without |x| < ``resolution``."""
    edges = value_edges(dtype, 4)
    if resolution is not None:
        if isinstance(resolution, bool) or not isinstance(resolution, int | float) or not 0 < resolution < math.inf:
            raise BoundsError(f"expected a positive number, got {resolution!r}", argument="resolution",
                              fix="pass the smallest magnitude worth telling from 0, e.g. resolution=0.01")
        edges = tuple(e for e in edges if e == 0 or abs(e) >= Fraction(resolution))
        if len(edges) < 2 and domain is None:      # only 0 is left: no range to release
            top = float(max(value_edges(dtype, 4)))
            raise BoundsError(f"resolution {resolution!r} is above every edge of the grid (up to {top:g}): no range "
                              "is left", argument="resolution",
                              fix="pass a resolution below the magnitudes of the column, or a domain=(lower, upper)")
    if domain is not None:
        lo, hi = check_bounds(domain, argument=f"bounds[{column!r}]")
        edges = (lo, *(e for e in edges if lo < e < hi), hi)
    return edges


class GridBoundsQuery:
    """A private (low, high) of a numeric column: two EM quantiles over the bins of a relative grid."""

    def __init__(self, source: Source, column: str, qs: tuple[Fraction, Fraction], domain: Any, resolution: Any
                 ) -> None:
        self.source, self.column, self.qs = source, column, qs
        self.edges = grid(column, source.schema[column], domain, resolution)
        self.domain = (self.edges[0], self.edges[-1])
        cuts = (-OUTER, *self.edges, OUTER)
        self.statistics = tuple(Statistic("indicator_sum", column, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:]))

    @property
    def backend(self) -> str | None:
        """The backend this query runs on (None: the session's)."""
        return self.source.backend

    def plan(self, budget: object) -> FamilyPlan[tuple[Any, Any]]:
        """Cost ε (or ρ), ε₀ = ε/2 per quantile; free."""
        budget = budget_of(budget)
        m = self.source.unit.max_rows          # a DPFrameError for max_rows="auto": free
        half = first(divide(budget, 2))
        eps0 = half if budget.notion != "zcdp" else epsilon_from_rho(half)
        cost = make(budget.notion, first(budget))
        rate = sampling_rate(self.source.node)
        charge = self.source.context.accountant.charge_plan(cost, [acc.exponential(up(eps0))] * 2, rate)
        bins = len(self.statistics)
        error = inward_shift(bins, eps0, m)
        lines = (f"bounds({self.column}): quantiles {', '.join(str(q) for q in self.qs)} by the exponential mechanism "
                 f"over {bins} bins (0 and ± every 19% up to {float(self.edges[-1]):g}), ε₀ = {float(eps0):.4g} "
                 f"each; each target rank is moved {error} rows inwards (its rank error at 95%, never past the "
                 "median), so each bound lies at or inside its quantile with probability ≥ 95%; the result is the "
                 "edges of the chosen bins",)
        notes = ("bounds: rows are bounded by the privacy unit first (≤ max_rows each); null and NaN values are "
                 "ignored; values beyond the grid count in its outer bins",)
        steps = (*(n.describe() for n in self.source.node.lineage()),
                 f"ContributionBound: {self.source.unit.describe()}")
        explain = Explain("dpframe bounds query", steps, lines, notes,
                          {"bins": bins, "epsilon_per_quantile": float(eps0), "rank_error": error})
        return FamilyPlan(budget, cost, charge, "quantiles (bounds grid)", explain,
                          lambda reader, rng: self._run(reader, rng, eps0, m))

    def _run(self, reader: Any, rng: Any, eps0: Fraction, m: int) -> tuple[Any, Any]:
        exact = reader.statistics(self.source.node, self.statistics)
        counts = np.asarray([int(exact[s.key][0]) if exact.height else 0 for s in self.statistics], dtype=np.int64)
        below, upto = np.concatenate([[0], np.cumsum(counts)[:-1]]), np.cumsum(counts)
        n, shift = int(upto[-1]), inward_shift(counts.size, eps0, m)
        picks = []
        for q, side in zip(self.qs, (1, -1)):
            a, b = q.numerator, q.denominator
            # target rank q·n moved inwards by the rank error R, never past the median (all times 2b: integers)
            target = min(2 * a * n + 2 * b * shift, b * n) if side == 1 else max(2 * a * n - 2 * b * shift, b * n)
            utility = -np.maximum(np.maximum(2 * b * below - target, target - 2 * b * upto), 0)
            picks.append(int(exponential_index_grouped(utility, eps0 / (4 * b * m), rng, [0, counts.size])[0]))
        cuts = (self.edges[0], *self.edges, self.edges[-1])        # the outer bins end at the grid's ends
        low = min(cuts[picks[0]], cuts[picks[1]])
        high = max(cuts[picks[0] + 1], cuts[picks[1] + 1])
        if low == high:     # both in one outer bin: with the grid's bin next to it, a range later queries accept
            low, high = (self.edges[0], self.edges[1]) if low == self.edges[0] else (self.edges[-2], self.edges[-1])
        if self.source.schema[self.column].is_integer():
            return int(low), int(high)
        return float(low), float(high)

    def describe(self) -> str:
        """One line for the history."""
        return f"bounds({self.column}) q={', '.join(str(q) for q in self.qs)} over a relative grid"
