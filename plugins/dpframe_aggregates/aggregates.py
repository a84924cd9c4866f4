"""Counts, sums, means, variances and standard deviations with exact discrete noise.

Privacy (proof sketch). Under add/remove of one privacy unit, after contribution bounding a unit owns
at most m = ``max_rows`` rows. Each measure is post-processing of a few exact integer statistics:

* rows, non-null count: each row adds 1, so the L1 (and L2) sensitivity of the per-group vector is m;
* distinct values of a column (``count_distinct``): a row adds at most 1 (a value no other kept row of the
  group holds), and which rows the other units keep does not depend on this one's (the bounding law is
  per unit), so a unit moves each group's count by at most its rows there: sensitivity m, as a count;
* distinct units (``count_units``): a unit adds 1 to each group it appears in, and after bounding it
  appears in at most G = min(``max_groups`` or m, m) groups (one group without a group-by), so the per-group
  vector moves by 0 or 1 in ≤ G coordinates: L1 sensitivity G, L2 sensitivity √G (rounded up to a
  rational, so the cost is never under-reported), L∞ 1;
* fixed-point clamped sums Σ trunc((clamp(x) − c)^p / 2^k): each row adds at most
  b = ⌈max|bound − c|^p / 2^k⌉ + 1 grid steps (see :meth:`Statistic.row_bound`), so sensitivity m·b.

Each distinct statistic gets an equal part of the mechanism's share and discrete Laplace noise
(pure ε: scale Δ/εᵢ) or discrete Gaussian noise (zCDP: σ² = Δ²/(2ρᵢ)). Statistics shared by several
measures (e.g. the count of ``spend`` used by both ``mean`` and ``var``) are noised once and reused.
By basic (resp. zCDP) composition the whole costs Σεᵢ = ε (resp. Σρᵢ = ρ); everything after the noise
(mean = c + S/n, var = (Q − S²/n)/(n − ddof), clamping, sqrt) is post-processing. A sum next to a
mean/var/std of the same column and bounds is post-processing too: Σx = S + c·n from their centred sum
S = Σ(x − c) and count n (fewer statistics, and never more noise than a sum of its own).

Grid: sums are computed on the grid 2^k with k = ⌊log₂(noise scale)⌋ − 20 (rounding error ≈ 10⁻⁶ of the
noise), raised if needed so one row is ≤ 2³¹ grid steps (exact int64 sums up to 2³² rows).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import polars as pl

from dpframe import accounting as acc
from dpframe.accounting import PrivacyCurve
from dpframe.budgets import Budget, PureDP, divide, down, make, sqrt_down, up
from dpframe.errors import ArgumentError, BoundsError, BudgetError, SchemaError, one_of
from dpframe.measures import COUNT_KINDS, Measure, check_ddof
from dpframe.mechanism import (
    MAX_GRID_EXPONENT,
    MIN_GRID_EXPONENT,
    MeasureContext,
    MechanismPlan,
    Noise,
    Statistic,
    sample_batch,
)
from dpframe.mechanism.deferred import DeferredMapping, DeferredTuple
from dpframe.noise import RandomSource
from dpframe_aggregates.partition_selection import sqrt_up

COUNTS = COUNT_KINDS
"""The measures that are one noisy count (whole numbers, the count's noise)."""
TOTALS = COUNTS | {"sum"}
"""The measures that are one noisy count or sum (exact intervals)."""
_KINDS = frozenset({*TOTALS, "mean", "var", "std"})


@dataclass(frozen=True)
class Need:
    """A statistic template before calibration: kind, column, bounds, centre and power."""

    kind: str                      # "rows" | "nonnull" | "distinct" | "units" | "sum"
    column: str | None = None
    bounds: tuple[Fraction, Fraction] | None = None
    shift: Fraction = Fraction(0)
    power: int = 1


def _needs(m: Measure) -> dict[str, Need]:
    """The statistics a measure is computed from, by role: n (a count), s (Σ), q (Σ of squares)."""
    if m.kind == "len":
        return {"n": Need("rows")}
    if m.kind == "count_units":
        return {"n": Need("units")}
    if m.kind == "count_distinct":
        return {"n": Need("distinct", m.column)}
    count = Need("nonnull", m.column)
    if m.kind == "count":
        return {"n": count}
    assert m.bounds is not None
    if m.kind == "sum":
        return {"s": Need("sum", m.column, m.bounds)}
    mid = _centre(m)  # a float, so the backend subtracts it exactly
    needs = {"n": count, "s": Need("sum", m.column, m.bounds, mid, 1)}
    if m.kind in ("var", "std"):
        needs["q"] = Need("sum", m.column, m.bounds, mid, 2)
    return needs


def _needs_of(measures: Sequence[Measure]) -> dict[str, dict[str, Need]]:
    """Each measure's statistics by role, a ``sum`` sharing those of a mean/var/std on its column and bounds.

    Σx = Σ(x − c) + c·n: with the centred sum Σ(x − c) and the count n already noised for the mean, the sum
    is their post-processing. That is never less accurate than a sum of its own: the query has one
    statistic fewer (a larger part for every statistic), and the centred noise plus c times the count's
    noise has sensitivity √(w² + c²) ≤ |c| + w (w the half-width of the bounds) — and one pass over the
    data fewer.
    """
    needs = {m.output_name: _needs(m) for m in measures}
    centred = {(m.column, m.bounds): needs[m.output_name] for m in measures if m.kind in ("mean", "var", "std")}
    for m in measures:
        if m.kind == "sum" and (m.column, m.bounds) in centred:
            shared = centred[(m.column, m.bounds)]
            needs[m.output_name] = {"n": shared["n"], "s": shared["s"]}
    return needs



def grid_exponent(noise_scale: Fraction, magnitude: Fraction) -> int:
    """K with 2^k ≈ noise_scale / 2^20, raised so that ``magnitude`` / 2^k ≤ 2^31 and k ≥ −1022.

    A coarser grid is always sound (each row's bound is computed on it), only less accurate; a grid
    beyond 2¹⁰²³ (so much noise that its unit is not a float) is refused while planning.

    Example:
        >>> grid_exponent(Fraction(1), Fraction(100)), grid_exponent(Fraction(1, 10**400), Fraction(1, 10**400))
        (-20, -1022)

    """
    k_noise = math.floor(_log2(noise_scale)) - 20 if noise_scale > 0 else -20
    k_range = math.ceil(_log2(magnitude)) - 31 if magnitude > 0 else k_noise
    k = max(k_noise, k_range, MIN_GRID_EXPONENT)
    if k > MAX_GRID_EXPONENT:
        raise BudgetError("this budget is so small that the sum's noise exceeds the float64 range",
                          argument="budget", fix="give the query a larger budget, or narrow the bounds")
    return k


def _log2(x: Fraction) -> float:
    """log₂ of a positive Fraction, without converting it to a float (which overflows beyond 1e308)."""
    return math.log2(x.numerator) - math.log2(x.denominator)


def _noise_scale(sensitivity_real: Fraction, share: Budget) -> Fraction:
    if isinstance(share, PureDP):
        return sensitivity_real / share.epsilon
    return sensitivity_real / Fraction(math.sqrt(2 * float(share.rho)))  # type: ignore[union-attr]


@dataclass
class AggregatePlan(MechanismPlan):
    """Noise per distinct statistic, then post-processing per measure."""

    noises: dict[str, Noise] | None = None
    roles: dict[str, dict[str, str]] | None = None   # output -> role -> statistic key

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.noises is not None and self.roles is not None
        exact = {key: np.asarray(stats[key], dtype=np.int64) for key in self.noises}
        draws = sample_batch([(noise, exact[key].size) for key, noise in self.noises.items()], rng)
        noisy = {key: (exact[key] + z).astype(np.float64) * float(noise.unit)
                 for (key, noise), z in zip(self.noises.items(), draws, strict=True)}
        out: dict[str, np.ndarray] = {}
        for m in self.measures:
            roles = self.roles[m.output_name]
            values = {role: noisy[key] for role, key in roles.items()}
            out[m.output_name] = _finish(m, values)
            if self.confidence is not None:
                out[f"{m.output_name}_ci_low"], out[f"{m.output_name}_ci_high"] = _interval(
                    m, out[m.output_name], values, {role: self.noises[key] for role, key in roles.items()},
                    self.confidence)
        return out

    def interval_outputs(self) -> tuple[str, ...]:
        """Every measure: exact intervals for counts and sums, conservative ones for mean, var and std."""
        return tuple(m.output_name for m in self.measures)

    def half_widths(self, confidence: float) -> dict[str, float]:
        """Counts and sums: the half-width of the interval of ``collect(ci=...)`` (:func:`_half_width`).

        A sum released with a mean of its column and bounds is Σ(x − c) + c·n: both noises count (the centred
        sum's alone understated it by c times the count's noise, and accuracy targets bought too little budget).
        """
        assert self.noises is not None and self.roles is not None
        out: dict[str, float] = {}
        for m in self.measures:
            if m.kind in TOTALS:
                roles = self.roles[m.output_name]
                out[m.output_name] = _half_width(m, {role: self.noises[key] for role, key in roles.items()},
                                                 confidence)
        return out


def _interval(m: Measure, value: np.ndarray, v: dict[str, np.ndarray], noise: dict[str, Noise],
              confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """A noise-only interval around each released value that holds with probability ≥ ``confidence``.

    Counts and sums: value ± the noise's exact half-width (the interval covers the statistic before the
    noise: the clamped, grid-rounded sum; bounding and clipping bias are not covered); a sum shared with a
    mean (Σ(x − c) + c·n) adds the two half-widths, each at level 1 − (1 − confidence)/2. Mean, var, std: each
    noisy statistic (n, Σ, Σ²) gets an interval at level 1 − (1 − confidence)/r (r statistics: Bonferroni, so
    all hold together with probability ≥ confidence), and the interval is the range of the measure's
    formula over that box, bounded to what values in ``bounds`` allow — conservative.
    """
    if m.kind in TOTALS:
        half = _half_width(m, noise, confidence)
        if m.kind != "sum":       # counts are whole numbers, and so are their half-widths (unit 1)
            return value - int(half), value + int(half)
        return value - half, value + half
    assert m.bounds is not None
    lo, hi = float(m.bounds[0]), float(m.bounds[1])
    mid = (lo + hi) / 2
    each = 1 - (1 - confidence) / len(v)
    n_lo = np.maximum(v["n"] - noise["n"].half_width(each), 1.0)
    n_hi = np.maximum(v["n"] + noise["n"].half_width(each), 1.0)
    s_half = noise["s"].half_width(each)
    s_lo, s_hi = v["s"] - s_half, v["s"] + s_half
    if m.kind == "mean":
        corners = np.stack([s_lo / n_lo, s_lo / n_hi, s_hi / n_lo, s_hi / n_hi])
        return np.clip(mid + corners.min(axis=0), lo, hi), np.clip(mid + corners.max(axis=0), lo, hi)
    q_half = noise["q"].half_width(each)
    with np.errstate(over="ignore", invalid="ignore"):     # as in _finish: noisy squares may leave float64
        s2_max = np.maximum(s_lo**2, s_hi**2)
        s2_min = np.where((s_lo <= 0) & (s_hi >= 0), 0.0, np.minimum(s_lo**2, s_hi**2))
        top, bottom = v["q"] + q_half - s2_min / n_hi, v["q"] - q_half - s2_max / n_lo
        ddof = int(m.option("ddof", 1))
        d_lo, d_hi = np.maximum(n_lo - ddof, 1.0), np.maximum(n_hi - ddof, 1.0)
        candidates = np.stack([bottom / d_lo, bottom / d_hi, top / d_lo, top / d_hi])
        cap = ((hi - lo) / 2) ** 2 * n_hi / d_lo
        var_lo, var_hi = np.clip(candidates.min(axis=0), 0.0, cap), np.clip(candidates.max(axis=0), 0.0, cap)
        return (var_lo, var_hi) if m.kind == "var" else (np.sqrt(var_lo), np.sqrt(var_hi))


def _finish(m: Measure, v: dict[str, np.ndarray]) -> np.ndarray:
    """Post-processing of the noisy statistics (already in output units) into the measure's value."""
    if m.kind in COUNTS:
        return np.asarray(np.rint(v["n"]).astype(np.int64))
    if m.kind == "sum":
        return v["s"] + float(_centre(m)) * v["n"] if "n" in v else v["s"]   # shared: Σ(x − c) + c·n
    assert m.bounds is not None
    lo, hi = float(m.bounds[0]), float(m.bounds[1])
    mid = (lo + hi) / 2
    n = np.maximum(v["n"], 1.0)
    centred = v["s"] / n
    if m.kind == "mean":
        return np.asarray(np.clip(mid + centred, lo, hi))
    ddof = int(m.option("ddof", 1))
    denominator = np.maximum(n - ddof, 1.0)
    # Bounds near 1e150 at a small budget: the noisy centred mean squared can leave float64 (a function of the
    # noisy values only); numpy's overflow warning is not raised (an analyst's "error" filter made it a failure).
    with np.errstate(over="ignore", invalid="ignore"):
        var = (v["q"] - n * centred**2) / denominator
        # Values in [lo, hi] have population variance ≤ ((hi − lo)/2)²; with ddof the bound scales by n/(n − ddof).
        var = np.clip(var, 0.0, ((hi - lo) / 2) ** 2 * n / denominator)
        return var if m.kind == "var" else np.asarray(np.sqrt(var))


class AggregateMechanism:
    """len / count / count_units / count_distinct / sum / mean / var / std, discrete Laplace or Gaussian noise.

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups), through the sensitivities the engine declares from the unit's bounds (a mechanism sees
    statistics only). Guarantee: ε-DP (discrete Laplace) or ρ-zCDP (discrete Gaussian) per share.
    """

    name = "aggregates"
    handles = _KINDS
    notions = frozenset({"pure", "zcdp"})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        """Each kind gets exactly the column, bounds and options it needs; sums need numeric columns."""
        kind = measure.kind
        allowed = {"mechanism"} | ({"ddof"} if kind in ("var", "std") else set())
        unknown = sorted(set(dict(measure.options)) - allowed)
        if unknown:
            raise ArgumentError(f"{kind}() takes no option {unknown[0]!r}", argument=unknown[0],
                               fix=f"options of {kind}(): {sorted(allowed)}")
        if kind in ("var", "std"):
            check_ddof(measure.option("ddof", 1))
        if kind == "len" and (measure.column is not None or measure.bounds is not None):
            raise ArgumentError("len() counts rows and takes no column or bounds", argument="column",
                               fix="use dp.len(), or dp.count(column) to count non-null values")
        if kind == "count_units" and (measure.column is not None or measure.bounds is not None):
            raise ArgumentError("count_units() counts privacy units and takes no column or bounds",
                               argument="column", fix="use dp.count_units()")
        if kind not in ("len", "count_units") and measure.column is None:
            raise ArgumentError(f"{kind}() needs a column", argument="column", fix=f"e.g. dp.{kind}('spend', ...)")
        if kind in ("count", "count_distinct") and measure.bounds is not None:
            raise ArgumentError(f"{kind}() takes no bounds", argument="bounds", fix="drop bounds=")
        if kind in ("sum", "mean", "var", "std") and measure.bounds is None:
            raise BoundsError(f"{kind}() needs clipping bounds", argument="bounds",
                              fix=f"pass dp.{kind}(column, bounds=(lower, upper)) chosen without looking at the data")
        if measure.column is None:
            return
        if measure.column not in ctx.schema:
            raise SchemaError(f"unknown column {measure.column!r}", argument="column",
                              fix=one_of(measure.column, ctx.schema.names()))
        dtype = ctx.schema[measure.column]
        if kind == "count_distinct":
            if dtype.is_nested() or dtype == pl.Object:
                raise SchemaError(f"count_distinct() of a {dtype} column is not supported", argument="column",
                                  fix="count the distinct values of a plain column (numbers, text, dates, booleans)")
            return
        if measure.kind != "count" and dtype.is_temporal():
            raise SchemaError(f"{measure.kind}() of a {dtype} column is not supported: a {measure.kind} of dates has "
                              "no numeric bounds", argument="column", fix=temporal_fix(measure.kind, measure.column))
        if measure.kind != "count" and not (dtype.is_numeric() or dtype == pl.Boolean):
            raise SchemaError(f"{measure.kind}() needs a numeric column; {measure.column!r} is {dtype}",
                              argument="column",
                              fix="cast it first: .with_columns(pl.col(...).cast(pl.Float64, strict=False))")
        if measure.bounds is not None:
            top = max(abs(b) for b in measure.bounds)
            if top ** (2 if measure.kind in ("var", "std") else 1) > Fraction(2) ** 1000:
                lo, hi = (float(b) for b in measure.bounds)
                raise BoundsError(f"bounds ({lo:g}, {hi:g}) are too large to compute with", argument="bounds",
                                  fix="use bounds below 1e300 in absolute value (1e150 for var and std)")

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        """One part per distinct statistic (shared statistics are noised once)."""
        return len({need for roles in _needs_of(measures).values() for need in roles.values()})

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> AggregatePlan:
        needs = _needs_of(measures)
        distinct = list(dict.fromkeys(need for roles in needs.values() for need in roles.values()))
        part = divide(share, len(distinct))
        m_rows = Fraction(ctx.unit.max_rows)
        statistics: dict[Need, Statistic] = {}
        noises: dict[str, Noise] = {}
        for need in distinct:
            if need.kind == "units":
                stat = Statistic("units")
                noises[stat.key] = Noise.calibrate(units_sensitivity(ctx, share.notion), part)
                statistics[need] = stat
                continue
            if need.kind != "sum":       # rows, nonnull, distinct: one row adds at most 1
                stat = Statistic("rows") if need.kind == "rows" else \
                    Statistic("distinct" if need.kind == "distinct" else "nonnull", need.column)
                unit = Fraction(1)
            else:
                assert need.bounds is not None
                lo, hi = need.bounds
                magnitude = max(abs(lo - need.shift), abs(hi - need.shift)) ** need.power
                k = grid_exponent(_noise_scale(m_rows * magnitude, part), magnitude)
                stat = Statistic("fixed_sum", need.column, lo, hi, need.shift, need.power, k)
                unit = Fraction(2) ** k
            statistics[need] = stat
            noises[stat.key] = Noise.calibrate(m_rows * stat.row_bound(), part, unit)
        roles = {name: {role: statistics[need].key for role, need in of.items()} for name, of in needs.items()}
        cells = ctx.unit.groups_per_unit if ctx.grouped else 1    # the coordinates one unit can change
        cost = _sum([n.cost() for n in noises.values()], share.notion)
        measures = tuple(measures)
        stats = tuple(statistics.values())
        # What only explain() (noise labels, accuracy texts, half-widths) and the curve accountants (privacy
        # curves) read: built on their first read, from the calibrated noises (public) alone.
        return AggregatePlan(self.name, measures, stats, cost,
                             noise=DeferredMapping(lambda: {_label(s): noises[s.key] for s in stats}),
                             accuracy=DeferredMapping(lambda: _accuracies(measures, noises, roles)),
                             ci95=DeferredMapping(lambda: _ci95s(measures, noises, roles)),
                             privacy=DeferredTuple(lambda: [noise_curve(n, cells) for n in noises.values()]),
                             notes=small_input_notes(measures), noises=noises, roles=roles)


def _accuracies(measures: Sequence[Measure], noises: Mapping[str, Noise],
                roles: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Each measure's accuracy text (explain())."""
    return {m.output_name: _accuracy(m, {r: noises[k] for r, k in roles[m.output_name].items()}) for m in measures}


def _ci95s(measures: Sequence[Measure], noises: Mapping[str, Noise],
           roles: Mapping[str, Mapping[str, str]]) -> dict[str, float]:
    """The 95% half-widths of the counts and sums (explain())."""
    return {m.output_name: _half_width(m, {r: noises[k] for r, k in roles[m.output_name].items()}, 0.95)
            for m in measures if m.kind in TOTALS}


def temporal_fix(kind: str, column: str) -> str:
    """What to do instead of a sum, mean, var or std of a date or datetime column.

    Example:
        >>> print(temporal_fix("mean", "day")[:60])
        dp.median('day', bounds=(date, date)) and dp.quantile work o

    """
    return (f"dp.median({column!r}, bounds=(date, date)) and dp.quantile work on dates; for a {kind} in days "
            f"since 1970, measure an expression: dp.{kind}(pl.col({column!r}).to_physical(), bounds=(lo_days, "
            "hi_days)) (a Date's days; .dt.epoch('s') gives seconds)")


def units_sensitivity(ctx: MeasureContext, notion: str) -> Fraction:
    """Sensitivity of the per-group distinct-unit counts: L1 = G (pure), L2 = √G rounded up (zCDP).

    G = the groups one unit can touch after bounding (``PrivacyUnit.groups_per_unit``), 1 without a
    group-by.

    Example:
        >>> from dpframe.testing import measure_context
        >>> ctx = measure_context(max_rows=4, grouped=True)
        >>> units_sensitivity(ctx, "pure"), units_sensitivity(ctx, "zcdp")
        (Fraction(4, 1), Fraction(2, 1))

    """
    groups = ctx.unit.groups_per_unit if ctx.grouped else 1
    return Fraction(groups) if notion == "pure" else sqrt_up(groups)


def noise_curve(noise: Noise, cells: int) -> PrivacyCurve:
    """The privacy curve of calibrated noise on a (possibly vector) statistic.

    ``cells``: how many coordinates (groups) one unit can change — 1 without a group-by, else
    ``PrivacyUnit.groups_per_unit``. On several, the dimension-free bounds: discrete Laplace with L1
    sensitivity Δ and scale t is Δ/t-DP whatever the dimension (the tight ε-DP curve); discrete Gaussian
    with L2 sensitivity Δ and σ² is ρ = Δ²/(2σ²) in RDP at every order. On one coordinate with an
    integer sensitivity (counts; sums in grid steps) the neighbouring outputs differ only there, so the
    pair is exactly the 1-D pair (Z, Z + Δ) — its exact privacy profile (discrete Laplace: a geometric
    sum; discrete Gaussian: CKS20 Thm 7 while σ and Δ ≤ 10⁴, beyond within about z²/(12σ²) above it, from above)
    is what a PLD session composes. (With Δ = 1 the
    discrete Laplace loss is ±Δ/t: randomized response, the ε-DP curve itself; the gain comes with
    Δ > 1, e.g. ``max_rows`` rows or a sum's grid steps.) Floats are rounded so that a curve never
    under-reports: scales down, ε up.

    Example:
        >>> count = Noise.calibrate(Fraction(3), PureDP(1))              # 3 rows per unit: t = 3
        >>> one, many = noise_curve(count, 1), noise_curve(count, 2)
        >>> one.delta_at(0.5) < many.delta_at(0.5)      # the exact 1-D curve is tighter than ε = 1
        True

    """
    sensitivity = noise.sensitivity
    exact = cells == 1 and sensitivity.denominator == 1 and sensitivity <= 2**53   # (the exact curves' range)
    if noise.distribution == "discrete_laplace":
        if exact:
            return acc.discrete_laplace(down(noise.scale), int(sensitivity))
        return acc.pure(up(sensitivity / noise.scale))
    sigma = sqrt_down(noise.scale)
    # (the exact profile tabulates the pmf while σ, Δ ≤ 10⁴; beyond, the Gaussian profile plus a proven lattice term)
    return acc.discrete_gaussian(sigma, float(sensitivity) if exact else up(sensitivity), scalar=exact)


def _sum(costs: list[Budget], notion: str) -> Budget:
    first = sum((c.epsilon if c.notion == "pure" else c.rho for c in costs), Fraction(0))  # type: ignore[union-attr]
    return make("pure" if notion == "pure" else "zcdp", first)


def _label(s: Statistic) -> str:
    if s.kind in ("rows", "nonnull", "units", "distinct"):
        return {"rows": "count(rows)", "units": "count(distinct units)", "distinct": f"count(distinct {s.column})"}.get(
            s.kind, f"count({s.column} not null)")
    centre = f" − {float(s.shift):g}" if s.shift else ""
    power = "²" if s.power == 2 else ""
    return f"Σ (clamp({s.column}){centre}){power}"


def _half_width(m: Measure, noise: dict[str, Noise], confidence: float) -> float:
    """Half-width of a ``confidence`` interval for the noise of a count or sum (exact; a shared sum: Bonferroni)."""
    if m.kind != "sum":
        return noise["n"].half_width(confidence)
    if "n" not in noise:
        return noise["s"].half_width(confidence)
    each = 1 - (1 - confidence) / 2          # Σx = Σ(x − c) + c·n: both noises within their half-widths
    return noise["s"].half_width(each) + abs(float(_centre(m))) * noise["n"].half_width(each)


def _centre(m: Measure) -> Fraction:
    """The centre c that mean/var/std subtract (the midpoint of the bounds, as a float)."""
    assert m.bounds is not None
    return Fraction(float((m.bounds[0] + m.bounds[1]) / 2))


def small_input_notes(measures: Sequence[Measure]) -> tuple[str, ...]:
    """What explain() says of means, variances and deviations over few or no values (public: no data read).

    Example:
        >>> import dpframe as dp
        >>> print(small_input_notes([dp.mean("x", bounds=(0, 10)), dp.len()])[0][:91])
        aggregates: x_mean: its ± is divided by n, the count of non-null values: with few values it

    """
    ratios = [m for m in measures if m.kind in ("mean", "var", "std")]
    if not ratios:
        return ()
    names = ", ".join(m.output_name for m in ratios)
    counts = ", ".join(dict.fromkeys(f"dp.count({m.column!r})" for m in ratios))
    return (f"aggregates: {names}: its ± is divided by n, the count of non-null values: with few values it is mostly "
            "noise, and with none (an empty or all-null input, or a group without values) the noisy n is floored "
            "at 1, so a mean is the centre of the bounds plus noise and a variance is noise clipped to its range; "
            f"release {counts} alongside to see n",)


def _accuracy(m: Measure, noise: dict[str, Noise]) -> str:
    if m.kind in TOTALS:
        return f"±{_half_width(m, noise, 0.95):.4g} (95%)"
    if m.kind == "mean":
        return f"≈ ±{noise['s'].ci95():.4g}/n (95%, n = count of values)"
    root = "√" if m.kind == "std" else ""
    return f"≈ {root}(±{noise['q'].ci95():.4g}/n) (95%, n = count of values; plus the mean's error)"
