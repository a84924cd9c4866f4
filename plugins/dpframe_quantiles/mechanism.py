"""The ``quantile`` mechanism plugin: exact exponential-mechanism quantiles, joint for several q.

Handles ``dp.quantile`` / ``dp.median`` (and SQL ``MEDIAN`` / ``QUANTILE_CONT``). Per measure, the
backend computes each group's sorted codes on the column's public ordered domain
(:class:`~dpframe.domains.OrderedDomain`, statistic kind ``"sorted"``), and :func:`~dpframe_quantiles.em.
joint_quantiles` releases the quantiles (privacy argument in :mod:`dpframe_quantiles.em`).

Cost, from public facts only: each quantile measure gets an equal part of the mechanism's share, and
spends it in full whatever the data:

* pure ε: ε₀ = ε_part / ⌈log₂(k + 1)⌉ per level of the split tree (k = number of q);
* zCDP ρ: ρ₀ = ρ_part / ⌈log₂(k + 1)⌉ per level and ε₀ = √(8ρ₀) rounded *down* to a multiple of 2⁻⁴⁰
  (the EM is ε₀-bounded-range, hence ε₀²/8 ≤ ρ₀ -zCDP; Cesar & Rogers 2021), so the charge never
  under-reports;
* RDP / PLD sessions: the plan declares one ε₀-bounded-range curve (``accounting.exponential``) per
  level and measure. A level is bounded range as a whole: its sub-problems (and groups) hold disjoint
  rows, each sub-problem's log-likelihood ratio spans ≤ ε₀·cᵢ/m for the cᵢ of a unit's m rows in it, so
  their sum spans ≤ ε₀.

Values are encoded to their *nearest* grid point (``OrderedDomain(rounding="nearest")``) and a released
code decodes to that grid point, so a released value sits in the middle of the values it stands for
(on the grid: the value itself). Several q are released in the order they were requested.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": range(1000)})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(2), seed=3)
    >>> q = sess.table("t").agg(dp.quantile("x", [0.25, 0.75], bounds=(0, 10_000)))
    >>> q.cost(dp.PureDP(1))
    PureDP(epsilon=1)
    >>> lo, hi = q.collect(dp.PureDP(1))["x_quantile"][0]
    >>> 150 < lo < 350 and 650 < hi < 850
    True

"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl

from dpframe import accounting as acc
from dpframe.budgets import Budget, PureDP, divide, make, up
from dpframe.domains import OrderedDomain
from dpframe.errors import ArgumentError, BoundsError, BudgetError, SchemaError, one_of
from dpframe.measures import Measure, quantile_fractions
from dpframe.mechanism import MeasureContext, MechanismPlan, SortedCodes, Statistic
from dpframe.noise import RandomSource
from dpframe.noise.exponential import epsilon_from_rho as _epsilon_from_rho
from dpframe.planning import first
from dpframe_quantiles.em import (
    SUB_DENOMINATOR,
    depth,
    joint_quantiles,
    listing_reach,
    rank_error_bound,
    tie_spread,
    window,
)

_OPTIONS = frozenset({"q", "resolution", "bounds", "mechanism"})
_BETA = 0.05


@dataclass(frozen=True)
class ExponentialNoise:
    """How one quantile measure is randomised (rendered by ``explain()``)."""

    domain: OrderedDomain
    k: int
    epsilon_level: Fraction
    reach: int = 0

    def describe(self) -> str:
        levels = depth(self.k)
        how = "exponential mechanism" if self.k == 1 else f"joint recursive split, {levels} levels"
        near = f"; reads ranks within ±{self.reach} of each target" if self.reach else ""
        return (f"{how} over {self.domain.describe()}, ε₀ = {float(self.epsilon_level):.4g} per level "
                f"(exact sampling{near})")


def domain_of(measure: Measure, schema: pl.Schema) -> OrderedDomain:
    """The measure's ordered domain (validates the column, its type, bounds and resolution)."""
    assert measure.column is not None
    if measure.column not in schema:
        raise SchemaError(f"unknown column {measure.column!r}", argument="column",
                          fix=one_of(measure.column, schema.names()))
    bounds = measure.bounds if measure.bounds is not None else measure.option("bounds")
    if bounds is None:
        raise BoundsError("quantiles need public bounds", argument="bounds",
                          fix="pass bounds=(lower, upper) chosen without looking at the data, or estimate them "
                              "with frame.bounds(column) (which spends budget)")
    return OrderedDomain.of(measure.column, schema[measure.column], tuple(bounds), measure.option("resolution"),
                            rounding="nearest")


def requested_order(q: object) -> tuple[int, ...]:
    """For each requested q (in the order given), its index among the sorted probabilities.

    Example:
        >>> requested_order([0.9, 0.1, 0.5])
        (2, 0, 1)

    """
    items = list(q) if isinstance(q, list | tuple) else [q]
    ordered = quantile_fractions(q)
    return tuple(ordered.index(quantile_fractions(v)[0]) for v in items)


@dataclass
class QuantilePlan(MechanismPlan):
    """One joint release per measure."""

    domains: dict[str, OrderedDomain] = field(default_factory=dict)          # output -> domain
    inputs: dict[str, Statistic] = field(default_factory=dict)               # output -> its sorted codes
    probabilities: dict[str, tuple[Fraction, ...]] = field(default_factory=dict)
    levels: dict[str, Fraction] = field(default_factory=dict)                # output -> ε₀
    as_list: dict[str, bool] = field(default_factory=dict)
    order: dict[str, tuple[int, ...]] = field(default_factory=dict)       # output -> requested order
    max_rows: int = 1

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, dom in self.domains.items():
            codes = joint_quantiles(SortedCodes.of(stats[self.inputs[name].key]), dom.size, self.probabilities[name],
                                    self.levels[name], self.max_rows, rng)
            codes = codes[:, list(self.order[name])]
            flat = dom.decode_series(codes.reshape(-1), name)
            if self.as_list[name]:     # one list of k values per group (a reshape: no loop over groups)
                out[name] = flat.reshape((codes.shape[0], codes.shape[1])).cast(pl.List(flat.dtype)).alias(name)
            else:
                out[name] = flat
        return out

    def no_intervals(self) -> dict[str, str]:
        """Every quantile: its interval in value space would depend on the data near the released value."""
        return {name: NO_INTERVAL for name in self.domains}


NO_INTERVAL = ("an exponential-mechanism quantile has no data-independent interval in value space (one would depend "
               "on the data near the released value); explain() gives its rank error instead")
"""Why ``collect(..., ci=...)`` releases no interval columns for a quantile (:class:`dpframe.NoIntervalWarning`)."""


class QuantileMechanism:
    """``quantile`` measures: the exponential mechanism on an ordered domain, joint for several q.

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups), through the rank sensitivity ``max_rows``. Guarantee: ε-DP exponential mechanism
    (ε²/8-zCDP as bounded range under a ``dp.ZCDP`` budget).
    """

    name = "quantiles"
    handles = frozenset({"quantile"})
    notions = frozenset({"pure", "zcdp"})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        """Column, type, bounds, resolution and q — all before anything is charged."""
        unknown = sorted(set(dict(measure.options)) - _OPTIONS)
        if unknown:
            raise ArgumentError(f"quantile() takes no option {unknown[0]!r}", argument=unknown[0],
                               fix=f"options of quantile(): {sorted(_OPTIONS)}")
        if measure.column is None:
            raise ArgumentError("quantile() needs a column", argument="column",
                               fix="e.g. dp.quantile('age', 0.5, bounds=(0, 120))")
        if measure.option("q") is None:
            raise ArgumentError("quantile() needs q", argument="q", fix="pass q=0.5 or q=[0.25, 0.5, 0.75]")
        quantile_fractions(measure.option("q"))
        domain_of(measure, ctx.schema)

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        """One part per measure (each is one joint release)."""
        return len(measures)

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> QuantilePlan:
        if share.notion not in self.notions:
            raise BudgetError(f"quantiles are calibrated to pure or zCDP shares, not {share!r}", argument="budget",
                              fix="give the query a dp.PureDP or dp.ZCDP budget")
        m_rows = ctx.unit.max_rows
        part = divide(share, len(measures))
        plan = QuantilePlan(self.name, tuple(measures), (), make(share.notion, first(part) * len(measures)),
                            max_rows=m_rows)
        statistics: dict[str, Statistic] = {}
        curves: list[acc.PrivacyCurve] = []
        noise: dict[str, object] = {}
        accuracy: dict[str, str] = {}
        notes = ["quantiles: null and NaN values are ignored; values outside the bounds count as the nearest bound; "
                 "outputs are points of the public grid (each value counts as its nearest grid point); several q "
                 "come back in the order requested"]
        for m in measures:
            dom = domain_of(m, ctx.schema)
            qs = quantile_fractions(m.option("q"))
            levels = depth(len(qs))
            level = first(divide(part, levels))
            eps0 = level if isinstance(share, PureDP) else epsilon_from_rho(level)
            check_window(dom.size * (tie_spread(dom.size) if len(qs) > 1 else 1), eps0, m_rows)
            name = m.output_name
            plan.domains[name], plan.probabilities[name], plan.levels[name] = dom, qs, eps0
            plan.as_list[name] = isinstance(m.option("q"), tuple)
            plan.order[name] = requested_order(m.option("q"))
            curves += [acc.exponential(up(eps0))] * levels
            # only ranks near each q·n are read: the backend may list just those (exact either way)
            stat = replace(dom.statistic, near=qs, reach=listing_reach(dom.size, qs, eps0, m_rows))
            plan.inputs[name] = statistics.setdefault(stat.key, stat)
            noise[f"{name} ({dom.column})"] = ExponentialNoise(dom, len(qs), eps0, stat.reach)
            err = rank_error_bound(dom.size, len(qs), eps0, m_rows, _BETA)
            accuracy[name] = (f"rank error ≤ {math.ceil(err)} rows (95%, each q)"
                              + (f"; values on the grid {float(dom.step):g}" if dom.kind == "float" else ""))
            notes += grid_notes(name, dom, m.option("resolution"), math.ceil(err))
            if len(qs) > 1:
                notes.append(f"quantiles: {name}: the rank error above holds on tied data (a split can fall inside a "
                             f"run of rows equal to one value) while no value is held by {tie_spread(dom.size):,} or "
                             "more rows of a group; a longer run is split within its first rows or at its end, so "
                             "the other quantiles can miss by up to its excess")
        plan.statistics = tuple(statistics.values())
        plan.noise, plan.accuracy = noise, accuracy
        plan.privacy = tuple(curves)
        plan.notes = tuple(notes)
        return plan


def grid_notes(name: str, dom: OrderedDomain, resolution: object, err: int) -> list[str]:
    """What explain() says of a quantile's grid and of small inputs (public parameters only).

    Example:
        >>> import polars as pl
        >>> dom = OrderedDomain.of("delay", pl.Float64, (-60, 600), rounding="nearest")
        >>> for line in grid_notes("delay_median", dom, None, 150):
        ...     print(line[:100])
        quantiles: delay_median: the grid is 2^-22 = 2.38419e-07 (no resolution given: the finest with at mo
        quantiles: delay_median: with fewer than about 300 non-null values (per group) the released value is

    """
    out = []
    if dom.kind == "float" and resolution is None:
        hint = ("; if the column holds whole numbers (minutes, counts), pass resolution=1 for whole-number outputs"
                if dom.grid_exp < 0 else "")
        out.append(f"quantiles: {name}: the grid is 2^{dom.grid_exp} = {float(dom.step):g} (no resolution given: "
                   f"the finest with at most 2^32 points on the bounds; grid points are multiples of it){hint}")
    out.append(f"quantiles: {name}: with fewer than about {2 * err} non-null values (per group) the released value is "
               "mostly noise, and with none (an empty or all-null input) it is a random point of the bounds; release "
               f"dp.count('{dom.column}') with it to see how many values there were")
    return out


MAX_WINDOW = 2**61
"""The largest utility window (in utility units) the sampler's int64 arithmetic allows: window + a·n < 2⁶³."""


def check_window(size: int, epsilon_level: Fraction, max_rows: int) -> None:
    """Refuse (BudgetError, while planning) an ε₀ whose utility window would leave int64.

    The widest window is a sub-problem's, whose q has a denominator ≤ :data:`~dpframe_quantiles.em.SUB_DENOMINATOR`
    (scale ≥ ε₀/(2m·2²⁰)); ``size`` is a split's number of tie-broken codes (|X|·M) when there are several q.
    Public: the domain size, ε₀ and m only.

    Example:
        >>> check_window(2**32, Fraction(1, 10**30), 1)
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: ε₀ = 1e-30 per quantile is so small that the exact sampler's ...

    """
    if window(epsilon_level / (2 * max_rows * SUB_DENOMINATOR), size) > MAX_WINDOW:
        raise BudgetError(f"ε₀ = {float(epsilon_level):.3g} per quantile is so small that the exact sampler's "
                          "utility window leaves 64-bit integers", argument="budget",
                          fix="give the query a larger budget (the result would be uniform noise anyway)")


def epsilon_from_rho(rho: Fraction) -> Fraction:
    """The largest ε on the grid 2⁻⁴⁰ with ε²/8 ≤ ρ (the EM is ε-bounded-range ⇒ ε²/8-zCDP).

    A ρ below the grid's first step (ε would be 0) is a BudgetError, while planning: nothing is charged.

    Example:
        >>> epsilon_from_rho(Fraction(1, 8))
        Fraction(1, 1)
        >>> epsilon_from_rho(Fraction(1, 10**30))
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: ρ = 1e-30 is too small for the exponential mechanism ...

    """
    epsilon = _epsilon_from_rho(rho, bounded_range=True, bits=40)
    if epsilon <= 0:
        raise BudgetError(f"ρ = {float(rho):.3g} is too small for the exponential mechanism (its ε would be below "
                          "2⁻⁴⁰)", argument="budget", fix="give the query a larger budget")
    return epsilon
