"""Counts, sums, means, variances and standard deviations with exact discrete noise.

Privacy (proof sketch). Under add/remove of one privacy unit, after contribution bounding a unit owns
at most m = ``max_rows`` rows. Each measure is post-processing of a few exact integer statistics:

* rows, non-null count: each row adds 1, so the L1 (and L2) sensitivity of the per-group vector is m;
* fixed-point clamped sums Σ round((clamp(x) − c)^p / 2^k): each row adds at most
  b = ⌈max|bound − c|^p / 2^k⌉ + 1 grid steps (see :meth:`Statistic.row_bound`), so sensitivity m·b.

Each distinct statistic gets an equal part of the mechanism's share and discrete Laplace noise
(pure ε: scale Δ/εᵢ) or discrete Gaussian noise (zCDP: σ² = Δ²/(2ρᵢ)). Statistics shared by several
measures (e.g. the count of ``spend`` used by both ``mean`` and ``var``) are noised once and reused.
By basic (resp. zCDP) composition the whole costs Σεᵢ = ε (resp. Σρᵢ = ρ); everything after the noise
(mean = c + S/n, var = (Q − S²/n)/(n − ddof), clamping, sqrt) is post-processing.

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

from dpframe.budgets import Budget, PureDP, make
from dpframe.errors import BoundsError, DPFrameError, SchemaError
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.noise import RandomSource

_KINDS = frozenset({"len", "count", "sum", "mean", "var", "std"})
Need = tuple[str, str | None, int]


def _needs(measure: Measure) -> list[Need]:
    """(statistic kind, column, power) pairs a measure needs; shift/bounds are added later."""
    col = measure.column
    if measure.kind == "len":
        return [("rows", None, 0)]
    if measure.kind == "count":
        return [("nonnull", col, 0)]
    if measure.kind == "sum":
        return [("sum0", col, 1)]
    if measure.kind == "mean":
        return [("nonnull", col, 0), ("sumc", col, 1)]
    return [("nonnull", col, 0), ("sumc", col, 1), ("sumc", col, 2)]


def _need_key(measure: Measure, need: Need) -> tuple[object, ...]:
    kind, col, power = need
    return (kind, col, power, measure.bounds if kind in ("sum0", "sumc") else None)


def grid_exponent(noise_scale: Fraction, magnitude: Fraction) -> int:
    """K with 2^k ≈ noise_scale / 2^20, raised so that ``magnitude`` / 2^k ≤ 2^31."""
    k_noise = math.floor(math.log2(noise_scale)) - 20 if noise_scale > 0 else -20
    k_range = math.ceil(math.log2(magnitude)) - 31 if magnitude > 0 else k_noise
    return max(k_noise, k_range)


def _noise_scale(sensitivity_real: Fraction, share: Budget) -> Fraction:
    if isinstance(share, PureDP):
        return sensitivity_real / share.epsilon
    return sensitivity_real / Fraction(math.sqrt(2 * float(share.rho)))  # type: ignore[union-attr]


@dataclass
class AggregatePlan(MechanismPlan):
    """Noise per distinct statistic, then post-processing per measure."""

    noises: dict[str, Noise] | None = None

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.noises is not None
        noisy: dict[str, np.ndarray] = {}
        for key, noise in self.noises.items():
            exact = np.asarray(stats[key], dtype=np.int64)
            noisy[key] = exact + noise.sample(exact.size, rng)
        by_need = {s.key: s for s in self.statistics}
        return {m.output_name: _finish(m, noisy, by_need, self.noises) for m in self.measures}


def _finish(m: Measure, noisy: dict[str, np.ndarray], stats: dict[str, Statistic],
            noises: dict[str, Noise]) -> np.ndarray:
    def find(kind: str, power: int = 1) -> tuple[np.ndarray, float]:
        for key, s in stats.items():
            if s.kind == kind and s.column == m.column and (kind != "fixed_sum" or (
                    s.power == power and (s.lower, s.upper) == m.bounds and (s.shift != 0) == (m.kind != "sum"))):
                return noisy[key], float(noises[key].unit)
        raise AssertionError(f"missing statistic {kind} for {m}")

    if m.kind == "len":
        return find("rows")[0]
    if m.kind == "count":
        return find("nonnull")[0]
    if m.kind == "sum":
        s, unit = find("fixed_sum")
        return s.astype(np.float64) * unit
    assert m.bounds is not None
    lo, hi = float(m.bounds[0]), float(m.bounds[1])
    shift = (lo + hi) / 2
    n = np.maximum(find("nonnull")[0].astype(np.float64), 1.0)
    s, unit = find("fixed_sum", 1)
    centred = s.astype(np.float64) * unit / n
    if m.kind == "mean":
        return np.clip(shift + centred, lo, hi)
    q, unit2 = find("fixed_sum", 2)
    ddof = int(m.option("ddof", 1))
    var = (q.astype(np.float64) * unit2 - n * centred**2) / np.maximum(n - ddof, 1.0)
    var = np.clip(var, 0.0, ((hi - lo) / 2) ** 2)
    return var if m.kind == "var" else np.asarray(np.sqrt(var))


class AggregateMechanism:
    """len / count / sum / mean / var / std with discrete Laplace (pure) or discrete Gaussian (zCDP)."""

    name = "aggregates"
    handles = _KINDS
    notions = frozenset({"pure", "zcdp"})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        """Each kind gets exactly the column, bounds and options it needs; sums need numeric columns."""
        kind = measure.kind
        allowed = {"mechanism"} | ({"ddof"} if kind in ("var", "std") else set())
        unknown = sorted(set(dict(measure.options)) - allowed)
        if unknown:
            raise DPFrameError(f"{kind}() takes no option {unknown[0]!r}", argument=unknown[0],
                               fix=f"options of {kind}(): {sorted(allowed)}")
        if kind in ("var", "std") and measure.option("ddof", 1) not in (0, 1):
            raise DPFrameError(f"must be 0 or 1, got {measure.option('ddof')!r}", argument="ddof",
                               fix="pass ddof=0 (population) or ddof=1 (sample)")
        if kind == "len" and (measure.column is not None or measure.bounds is not None):
            raise DPFrameError("len() counts rows and takes no column or bounds", argument="column",
                               fix="use dp.len(), or dp.count(column) to count non-null values")
        if kind != "len" and measure.column is None:
            raise DPFrameError(f"{kind}() needs a column", argument="column", fix=f"e.g. dp.{kind}('spend', ...)")
        if kind == "count" and measure.bounds is not None:
            raise DPFrameError("count() takes no bounds", argument="bounds", fix="drop bounds=")
        if kind in ("sum", "mean", "var", "std") and measure.bounds is None:
            raise BoundsError(f"{kind}() needs clipping bounds", argument="bounds",
                              fix=f"pass dp.{kind}(column, bounds=(lower, upper)) chosen without looking at the data")
        if measure.column is None:
            return
        if measure.column not in ctx.schema:
            raise SchemaError(f"unknown column {measure.column!r}", argument="column",
                              fix=f"use one of {list(ctx.schema.names())}")
        dtype = ctx.schema[measure.column]
        if measure.kind != "count" and not (dtype.is_numeric() or dtype == pl.Boolean):
            raise SchemaError(f"{measure.kind}() needs a numeric column; {measure.column!r} is {dtype}",
                              argument="column",
                              fix="cast it first: .with_columns(pl.col(...).cast(pl.Float64, strict=False))")
        if measure.bounds is not None:
            top = max(abs(b) for b in measure.bounds)
            if top ** (2 if measure.kind in ("var", "std") else 1) > Fraction(2) ** 1000:
                raise BoundsError(f"bounds {measure.bounds} are too large to compute with", argument="bounds",
                                  fix="use bounds below 1e150 in absolute value")

    def _distinct(self, measures: Sequence[Measure]) -> dict[tuple[object, ...], tuple[Measure, Need]]:
        out: dict[tuple[object, ...], tuple[Measure, Need]] = {}
        for m in measures:
            for need in _needs(m):
                out.setdefault(_need_key(m, need), (m, need))
        return out

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        """One part per distinct statistic."""
        return len(self._distinct(measures))

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> AggregatePlan:
        distinct = self._distinct(measures)
        part = _divide(share, len(distinct))
        m_rows = Fraction(ctx.unit.max_rows)
        statistics, noises = [], {}
        for measure, (kind, col, power) in distinct.values():
            if kind in ("rows", "nonnull"):
                stat = Statistic("rows") if kind == "rows" else Statistic("nonnull", col)
                unit = Fraction(1)
            else:
                assert measure.bounds is not None
                lo, hi = measure.bounds
                shift = Fraction(float((lo + hi) / 2)) if kind == "sumc" else Fraction(0)
                magnitude = max(abs(lo - shift), abs(hi - shift)) ** power
                k = grid_exponent(_noise_scale(m_rows * magnitude, part), magnitude)
                stat = Statistic("fixed_sum", col, lo, hi, shift, power, k)
                unit = Fraction(2) ** k
            noise = Noise.calibrate(m_rows * stat.row_bound(), part, unit)
            statistics.append(stat)
            noises[stat.key] = noise
        cost = _sum([n.cost() for n in noises.values()], share.notion)
        accuracy = {m.output_name: _accuracy(m, statistics, noises) for m in measures}
        ci95 = {m.output_name: noises[_own(m, statistics).key].ci95() for m in measures
                if m.kind in ("len", "count", "sum")}
        return AggregatePlan(self.name, tuple(measures), tuple(statistics), cost,
                             noise={_label(s): noises[s.key] for s in statistics}, accuracy=accuracy,
                             ci95=ci95, noises=noises)


def _divide(share: Budget, parts: int) -> Budget:
    if share.notion == "pure":
        return make("pure", share.epsilon / parts)  # type: ignore[union-attr]
    return make("zcdp", share.rho / parts)  # type: ignore[union-attr]


def _sum(costs: list[Budget], notion: str) -> Budget:
    first = sum((c.epsilon if c.notion == "pure" else c.rho for c in costs), Fraction(0))  # type: ignore[union-attr]
    return make("pure" if notion == "pure" else "zcdp", first)


def _label(s: Statistic) -> str:
    if s.kind in ("rows", "nonnull"):
        return "count(rows)" if s.kind == "rows" else f"count({s.column} not null)"
    centre = f" − {float(s.shift):g}" if s.shift else ""
    power = "²" if s.power == 2 else ""
    return f"Σ (clamp({s.column}){centre}){power}"


def _own(m: Measure, statistics: list[Statistic]) -> Statistic:
    """The statistic a len/count/sum measure releases directly."""
    kind = {"len": "rows", "count": "nonnull", "sum": "fixed_sum"}[m.kind]
    return next(s for s in statistics if s.kind == kind and (kind == "rows" or s.column == m.column)
                and (kind != "fixed_sum" or (s.shift == 0 and (s.lower, s.upper) == m.bounds)))


def _accuracy(m: Measure, statistics: list[Statistic], noises: dict[str, Noise]) -> str:
    if m.kind in ("len", "count", "sum"):
        return f"±{noises[_own(m, statistics).key].ci95():.4g} (95%)"
    sums = {s.power: noises[s.key] for s in statistics
            if s.kind == "fixed_sum" and s.column == m.column and s.shift != 0 and (s.lower, s.upper) == m.bounds}
    if m.kind == "mean":
        return f"≈ ±{sums[1].ci95():.4g}/n (95%, n = count of values)"
    root = "√" if m.kind == "std" else ""
    return f"≈ {root}(±{sums[2].ci95():.4g}/n) (95%, n = count of values; plus the mean's error)"
