"""The histogram mechanism: one noisy count per public bin, all bins calibrated jointly.

Measure::

    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))

releases the columns ``age_hist_0_18``, ``age_hist_18_65`` and ``age_hist_65_100`` (integers): the
number of rows with ``e_i <= age < e_{i+1}``, plus noise. Bins are half-open, so a value equal to the
last edge, a value outside ``[e_0, e_k)``, a null and a NaN fall in no bin. ``bounds`` is the public
domain of the column; the edges must lie inside it. With ``.alias("ages")`` the columns are named
``ages_0_18``, ...

Privacy (proof sketch). Neighbouring datasets differ by one privacy unit, which after contribution
bounding owns at most m = ``max_rows`` rows (dpframe's one neighbouring relation). The exact histogram is
the vector h = (h_1, ..., h_k) of ``indicator_sum`` statistics. The bins are disjoint, so each row adds 1
to at most one coordinate, and the unit changes h by a vector d ≥ 0 with Σ d_i ≤ m. Hence

* L1 sensitivity ‖d‖₁ ≤ m: adding independent discrete Laplace noise of scale t = m/ε to every bin gives
  a joint pmf ratio Π exp(|d_i|/t) ≤ exp(‖d‖₁/t) ≤ e^ε, i.e. the *whole* histogram is ε-DP;
* L2 sensitivity ‖d‖₂ ≤ ‖d‖₁ ≤ m: independent discrete Gaussian noise of variance parameter
  σ² = m²/(2ρ) on every bin is ρ-zCDP for the whole vector (Canonne, Kamath & Steinke 2020, Thm. 14).

So one share pays for all bins, however many there are — unlike k separate counts, which would cost k
shares. With several histogram measures in a query, each gets an equal part of the mechanism's share
and the parts add up (basic / zCDP composition). The cost depends only on m, the share and the number
of measures: public facts, never the data. Everything after the noise (naming columns) is
post-processing.

The plan declares these guarantees as privacy curves (``MechanismPlan.privacy``, one per histogram
measure, see :func:`privacy_curve`), which RDP/PLD sessions compose instead of the bare cost.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": [1, 2, 3, 4], "age": [10.0, 30.0, 70.0, 40.0]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(1), seed=0)
    >>> hist = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))
    >>> sess.table("t").agg(hist).collect(budget=dp.PureDP(0.5)).columns
    ['age_hist_0_18', 'age_hist_18_65', 'age_hist_65_100']

"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
from dpframe import accounting as acc
from dpframe.budgets import Budget, divide, make, sqrt_down, up
from dpframe.errors import ArgumentError, BoundsError, PlanError, SchemaError
from dpframe.measures import Measure, within_float64
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.noise import RandomSource
from dpframe.sealed import plain

__all__ = ["MAX_BINS", "HistogramMechanism", "HistogramPlan", "bin_columns", "exact_edges", "parse_edges",
           "privacy_curve"]

#: The most bins one histogram measure may have.
MAX_BINS = 10_000
_OPTIONS = frozenset({"edges", "mechanism"})
_EDGES_FIX = ("pass edges=(e0, e1, ..., ek): at least two finite numbers, strictly increasing, inside bounds, "
              "chosen without looking at the data")


def parse_edges(edges: object, bounds: tuple[Fraction, Fraction] | None = None) -> tuple[Fraction, ...]:
    """Validate bin edges and return them as the float64 values the backends compare with, as exact Fractions.

    Raises BoundsError naming ``edges``. An edge no float64 holds (``2**53 + 1``, ``Fraction(1, 3)``) becomes its
    nearest float64: the backends compare every value in float64, so that is the bin's real bound, and the column
    names and notes show it (they showed ``2**53 + 1`` while counting from ``2**53``).

    Example:
        >>> parse_edges((0, 18, 65, 100))
        (Fraction(0, 1), Fraction(18, 1), Fraction(65, 1), Fraction(100, 1))
        >>> parse_edges((0, 2**53 + 1, 2**54))[1]
        Fraction(9007199254740992, 1)
        >>> parse_edges((18, 0))
        Traceback (most recent call last):
        ...
        dpframe.errors.BoundsError: edges: must be strictly increasing, but 18 >= 0. Fix: ...

    """
    return tuple(Fraction(float(e)) for e in exact_edges(edges, bounds))


def exact_edges(edges: object, bounds: tuple[Fraction, Fraction] | None = None) -> tuple[Fraction, ...]:
    """Validate the edges as :func:`parse_edges` does and return them as given, exactly (it rounds them to float64).

    Example:
        >>> exact_edges((0, 2**53 + 1, 2**54))[1]
        Fraction(9007199254740993, 1)

    """
    if edges is None:
        raise BoundsError("a histogram needs bin edges", argument="edges", fix=_EDGES_FIX)
    if isinstance(edges, str | bytes) or not isinstance(edges, Sequence | np.ndarray):
        raise BoundsError(f"expected a sequence of numbers, got {edges!r}", argument="edges", fix=_EDGES_FIX)
    values = list(edges)
    if len(values) < 2:
        raise BoundsError(f"need at least two edges (one bin), got {len(values)}", argument="edges", fix=_EDGES_FIX)
    if len(values) > MAX_BINS + 1:
        raise BoundsError(f"at most {MAX_BINS} bins, got {len(values) - 1}", argument="edges",
                          fix="use wider bins")
    out: list[Fraction] = []
    for e in map(plain, values):      # plain numbers: a subclass's methods would see the engine's values
        if isinstance(e, bool | np.bool_) or not isinstance(e, int | float | Fraction | np.integer | np.floating):
            raise BoundsError(f"edge {e!r} is not a number", argument="edges", fix=_EDGES_FIX)
        if isinstance(e, float | np.floating) and not math.isfinite(float(e)):
            raise BoundsError(f"edge {e} is not finite", argument="edges", fix=_EDGES_FIX)
        edge = (Fraction(int(e)) if isinstance(e, int | np.integer) else Fraction(e) if isinstance(e, Fraction)
                else Fraction(float(e)))      # a NumPy float32 is exact as a float, and no Rational itself
        out.append(within_float64(edge, "edge", "edges", _EDGES_FIX))
    for a, b in zip(out, out[1:]):
        if a < b and not float(a) < float(b):   # distinct, but not to the backends, which compare in float64
            raise BoundsError(f"edges {_exact(a)} and {_exact(b)} are distinct but the same float64 value "
                              f"({float(b)!r}): the backends compare in float64, so the bin between them would hold "
                              "nothing", argument="edges", fix=_EDGES_FIX + "; edges at least one float64 step apart")
        if not a < b:
            raise BoundsError(f"must be strictly increasing, but {_name(a)} >= {_name(b)}", argument="edges",
                              fix=_EDGES_FIX)
    if bounds is not None and (out[0] < bounds[0] or out[-1] > bounds[1]):
        raise BoundsError(f"edges [{_name(out[0])}, {_name(out[-1])}] are not inside bounds "
                          f"[{_name(bounds[0])}, {_name(bounds[1])}]", argument="edges", fix=_EDGES_FIX)
    return tuple(out)


def _name(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else repr(float(x))


def _exact(x: Fraction) -> str:
    """``x`` exactly, as an integer or a ratio (long ones shortened: their first digits and how many there are).

    Example:
        >>> _exact(Fraction(2**53 + 1)), _exact(Fraction(1, 10**40))
        ('9007199254740993', '1/1000000000000000000... (41 digits)')

    """
    def digits(n: int) -> str:
        text = str(n)      # an edge is a float64's size: at most ~1,100 digits, far below int's str() limit
        return text if len(text) <= 24 else f"{text[:19]}... ({len(text)} digits)"
    sign = "-" if x < 0 else ""
    whole = digits(abs(x.numerator))
    return f"{sign}{whole}" if x.denominator == 1 else f"{sign}{whole}/{digits(x.denominator)}"


def bin_columns(measure: Measure) -> list[str]:
    """Return the released column names: ``<column>_hist_<lo>_<hi>`` (or ``<alias>_<lo>_<hi>``).

    Example:
        >>> import dpframe as dp
        >>> bin_columns(dp.measure("histogram", "x", bounds=(0, 1), edges=(0, 0.5, 1)))
        ['x_hist_0_0.5', 'x_hist_0.5_1']

    """
    edges = parse_edges(measure.option("edges"))
    prefix = measure.name if measure.name is not None else f"{measure.column}_hist"
    return [f"{prefix}_{_name(a)}_{_name(b)}" for a, b in zip(edges, edges[1:])]


@dataclass
class HistogramPlan(MechanismPlan):
    """Per histogram measure: one calibrated noise, and the (output column, bin statistic) pairs it covers."""

    layout: tuple[tuple[Noise, tuple[tuple[str, Statistic], ...]], ...] = ()

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        """Exact bin counts plus independent integer noise per bin (and per group).

        One draw per histogram for all its bins and groups (a draw per bin cost ~0.4 ms each: 10,000 bins, 4 s).
        """
        out: dict[str, np.ndarray] = {}
        for noise, columns in self.layout:
            exact = np.stack([np.asarray(stats[stat.key], dtype=np.int64) for _, stat in columns])
            noisy = exact + noise.sample(exact.size, rng).reshape(exact.shape)
            out.update((name, noisy[i]) for i, (name, _) in enumerate(columns))
        return out


class HistogramMechanism:
    """Histograms over public bin edges: discrete Laplace (pure ε) or discrete Gaussian (zCDP) on every bin.

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups), through the sensitivities the engine declares from the unit's bounds. Guarantee: ε-DP
    (discrete Laplace) or ρ-zCDP (discrete Gaussian) per share.

    Example:
        >>> import dpframe as dp
        >>> from dpframe.testing import measure_context
        >>> hist = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))
        >>> plan = HistogramMechanism().plan([hist], measure_context(max_rows=2), dp.PureDP(0.5))
        >>> plan.cost, plan.layout[0][0].scale          # one share for all three bins: t = 2 / 0.5
        (PureDP(epsilon=1/2), Fraction(4, 1))

    """

    name = "histogram"
    handles = frozenset({"histogram"})
    notions = frozenset({"pure", "zcdp"})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        """Numeric column in the schema, bounds given, edges valid and inside the bounds, no unknown option."""
        if measure.column is None:
            raise SchemaError("a histogram needs a column", argument="column",
                              fix='dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))')
        if measure.column not in ctx.schema:
            raise SchemaError(f"unknown column {measure.column!r}", argument="column",
                              fix=f"use one of {list(ctx.schema.names())}")
        dtype = ctx.schema[measure.column]
        if not (dtype.is_numeric() or dtype == pl.Boolean):
            raise SchemaError(f"a histogram needs a numeric column; {measure.column!r} is {dtype}",
                              argument="column", fix="cast it first: .with_columns(pl.col(...).cast(pl.Float64))")
        unknown = sorted(k for k, _ in measure.options if k not in _OPTIONS)
        if unknown:
            raise ArgumentError(f"unknown option(s) {unknown}", argument="options",
                               fix=f"a histogram takes {sorted(_OPTIONS)}")
        if measure.bounds is None:
            raise BoundsError("a histogram needs bounds (the public domain of the column)", argument="bounds",
                              fix="pass bounds=(lower, upper) enclosing the edges")
        parse_edges(measure.option("edges"), measure.bounds)

    def values_per_group(self, measure: Measure) -> int:
        """How many values ``measure`` releases per group: its bins (1 for edges :meth:`validate` will refuse).

        Read before the measure is validated: the planner caps a query's values before validating any measure
        (:func:`dpframe.planning.passes.check_released`).

        Example:
            >>> import dpframe as dp
            >>> HistogramMechanism().values_per_group(dp.measure("histogram", "age", bounds=(0, 100),
            ...                                                  edges=(0, 18, 65, 100)))
            3

        """
        edges = measure.option("edges")
        if isinstance(edges, str | bytes) or not isinstance(edges, Sequence | np.ndarray):
            return 1
        return max(len(edges) - 1, 1)

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        """One part per histogram measure (all its bins share it)."""
        return len(measures)

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> HistogramPlan:
        """Split ``share`` equally over the measures; calibrate each histogram's noise to L1 = L2 = max_rows."""
        if not measures:
            raise PlanError("no histogram measures", argument="measures", fix="pass at least one measure")
        if share.notion not in self.notions:
            raise PlanError(f"histograms are calibrated to pure or zCDP shares, not {share!r}", argument="budget",
                            fix="give the query a dp.PureDP or dp.ZCDP budget")
        for m in measures:
            self.validate(m, ctx)
        part = divide(share, len(measures))
        sensitivity = Fraction(ctx.unit.max_rows)   # L1 and L2: each row lands in at most one bin
        seen: dict[str, str] = {}
        layout = []
        statistics: dict[str, Statistic] = {}
        noise_labels: dict[str, object] = {}
        accuracy: dict[str, str] = {}
        ci95: dict[str, float] = {}
        outputs: list[str] = []
        notes = []
        total = Fraction(0)
        for m in measures:
            assert m.column is not None
            given = exact_edges(m.option("edges"), m.bounds)
            edges = tuple(Fraction(float(e)) for e in given)      # parse_edges(...), parsed once
            names = bin_columns(m)
            rounded = [(a, b) for a, b in zip(given, edges) if a != b]
            if rounded:
                notes.append(f"{m.output_name}: {len(rounded)} edge(s) no float64 holds are compared as their nearest "
                             f"float64, which names the columns (e.g. {_exact(rounded[0][0])} as "
                             f"{_name(rounded[0][1])})")
            described = m.describe()        # once: it lists every edge (per bin, planning took O(bins²))
            for name in names:
                if name in seen:
                    raise PlanError(f"{described} and {seen[name]} both release a column {name!r}",
                                    argument="measures", fix="give one of them another name with .alias('...')")
                seen[name] = described
            noise = Noise.calibrate(sensitivity, part)
            stats = tuple(Statistic("indicator_sum", m.column, lo, hi) for lo, hi in zip(edges, edges[1:]))
            for s in stats:
                statistics.setdefault(s.key, s)
            layout.append((noise, tuple(zip(names, stats))))
            noise_labels[f"histogram({m.column}, {len(stats)} bins) → {names[0]}…"] = noise
            for name in names:
                accuracy[name] = f"±{noise.ci95():.4g} (95%; one share for all {len(stats)} bins)"
                ci95[name] = noise.ci95()
            outputs += names
            notes.append(f"{m.output_name}: columns {', '.join(names)} (bins [lo, hi); values outside, null "
                         f"and NaN are not counted)")
            cost = noise.cost()
            total += cost.rho if cost.notion == "zcdp" else cost.epsilon  # type: ignore[union-attr]
        return HistogramPlan(self.name, tuple(measures), tuple(statistics.values()), make(share.notion, total),
                             noise=noise_labels, accuracy=accuracy, notes=tuple(notes), outputs=tuple(outputs),
                             ci95=ci95, privacy=tuple(privacy_curve(noise) for noise, _ in layout),
                             layout=tuple(layout))


def privacy_curve(noise: Noise) -> acc.PrivacyCurve:
    """Return the privacy curve of one histogram's noise on all its bins (sensitivity m in L1 and L2).

    Discrete Laplace of scale t: the vector is m/t-DP, so the tight curve of any ε-DP mechanism
    (``acc.pure``). Discrete Gaussian of variance parameter σ²: ρ = m²/(2σ²) at every Rényi order
    (Canonne, Kamath & Steinke 2020, for vectors; ``acc.discrete_gaussian``).

    Example:
        >>> from dpframe.budgets import ZCDP, PureDP
        >>> privacy_curve(Noise.calibrate(Fraction(2), PureDP(Fraction(1, 2)))).label
        'ε-DP(ε=0.5)'
        >>> privacy_curve(Noise.calibrate(Fraction(2), ZCDP(Fraction(1, 8)))).rho
        0.125

    """
    if noise.distribution == "discrete_laplace":
        return acc.pure(up(noise.sensitivity / noise.scale))
    return acc.discrete_gaussian(sqrt_down(noise.scale), up(noise.sensitivity))


def describe_measure(measure: Measure) -> dict[str, Any]:
    """Edges and output columns of a histogram measure (for documentation and tests).

    Example:
        >>> import dpframe as dp
        >>> describe_measure(dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 50, 100)))["columns"]
        ['age_hist_0_50', 'age_hist_50_100']

    """
    edges = parse_edges(measure.option("edges"), measure.bounds)
    return {"edges": [float(e) for e in edges], "columns": bin_columns(measure)}
