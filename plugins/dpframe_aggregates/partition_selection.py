"""DP partition selection: which group keys found in the private data may be released.

Statistic: the number of distinct privacy units per group, u_g. After bounding, one unit touches at
most L0 = min(max_groups, max_rows) groups and adds 1 to each. A group is released iff u_g + Z_g ≥ τ.

* Pure-ε part: for groups present in both neighbours the vector (u_g) changes by ≤ 1 in ≤ L0 places
  (L1 = L0, L2 = √L0); discrete Laplace with t = L0/ε is ε-DP, discrete Gaussian with σ² = L0/(2ρ) is
  ρ-zCDP.
* δ part: a group that exists only because of the added unit has u_g ≤ 1, so it is released with
  probability ≤ P[Z ≥ τ − 1]; over its ≤ L0 groups, δ ≤ L0·P[Z ≥ τ − 1]. For discrete Laplace
  P[Z ≥ k] = e^{−k/t}/(1 + e^{−1/t}) (k ≥ 1); for the discrete Gaussian, P[Z ≥ k] ≤ e^{−k²/(2σ²)}
  (it is σ-subgaussian, CKS20 Prop. 3). τ is the smallest integer meeting the target δ, plus one, computed
  in exact rationals from a rational upper bound of ln(L0/δ) (:func:`log_ratio_up`), so it is conservative
  at every ε, δ and max_groups.
Measures released for the selected groups are noised independently; together this is the standard
argument of Korolova et al. 2009 / Wilson et al. 2020 (total: (ε_sel + ε_measures, δ)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpframe import accounting as acc
from dpframe.budgets import ApproxDP, Budget, PureDP, make, up
from dpframe.errors import BudgetError
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.noise import RandomSource

KEEP = "__keep"


def sqrt_up(n: int) -> Fraction:
    """A rational ≥ √n (exact when n is a perfect square)."""
    r = math.isqrt(n)
    return Fraction(r) if r * r == n else Fraction(math.isqrt(n * 10**12) + 1, 10**6)


def log_ratio_up(l0: int, delta: Fraction) -> Fraction:
    """A rational ≥ ln(l0/δ), for any δ > 0 the analyst may pick.

    ``math.log`` of an int (also one beyond the float range) is within an ulp of the true value; the three logs
    are summed with a margin of 10⁻¹² of their total size, far above the float rounding.

    Example:
        >>> 0 < log_ratio_up(1, Fraction(1, 10**6)) - Fraction(13.815510557964274) < Fraction(1, 10**9)
        True

    """
    parts = (math.log(l0), math.log(delta.numerator), math.log(delta.denominator))
    return Fraction(parts[0] - parts[1] + parts[2]) + Fraction(sum(map(abs, parts)) + 1) / 10**12


def laplace_threshold(l0: int, scale: Fraction, delta: Fraction) -> int:
    """Smallest τ with l0·P[Z ≥ τ − 1] ≤ δ for discrete Laplace(t = scale), plus one for safety.

    τ − 1 ≥ t·(ln(l0/δ) − ln(1 + e^{−1/t})), computed in exact rationals from an upper bound of the logs (the
    product with t was a float: at t ≈ 2⁵⁶ its rounding alone moved τ by hundreds). ln(1 + e^{−1/t}) is taken at
    1/t capped at 40 (beyond, it is below 10⁻¹⁷, inside the 10⁻¹² margin: the bound is 0), so no scale, however
    far outside the float range, meets a float division or overflow.

    Example:
        >>> laplace_threshold(1, Fraction(1), Fraction(1, 10**6))
        16
        >>> laplace_threshold(1, Fraction(1, 10**400), Fraction(1, 10**6))   # a unit-only group needs noise ≥ 2
        3

    """
    inv = float(min(1 / scale, Fraction(40)))
    small = max(Fraction(0), Fraction(math.log1p(math.exp(-inv))) - Fraction(1, 10**12))  # ≤ ln(1 + e^{−1/t})
    return max(1, math.ceil(scale * (log_ratio_up(l0, delta) - small))) + 2


def gaussian_threshold(l0: int, sigma2: Fraction, delta: Fraction) -> int:
    """Smallest τ with l0·exp(−(τ − 1)²/(2σ²)) ≤ δ, plus one for safety.

    (τ − 1)² ≥ 2σ²·ln(l0/δ), with the smallest integer root of an exact rational upper bound.

    Example:
        >>> gaussian_threshold(1, Fraction(1), Fraction(1, 10**6))
        8

    """
    x = 2 * sigma2 * log_ratio_up(l0, delta)
    k = math.isqrt(math.ceil(x))
    return max(1, k + (k * k < x)) + 2


def _threshold(l0: int, sensitivity: Fraction, share: Budget, delta: Fraction) -> int:
    """τ for ``l0`` groups per unit at this share (the noise calibrated to ``sensitivity``)."""
    noise = Noise.calibrate(sensitivity, share)
    if noise.distribution == "discrete_laplace":
        return laplace_threshold(l0, noise.scale, delta)
    return gaussian_threshold(l0, noise.scale, delta)


@dataclass
class SelectionPlan(MechanismPlan):
    """Noisy distinct-unit counts against a threshold."""

    selection_noise: Noise | None = None
    threshold: int = 0

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.selection_noise is not None
        units = np.asarray(stats[Statistic("units").key], dtype=np.int64)
        noisy = units + self.selection_noise.sample(units.size, rng)
        return {KEEP: noisy >= self.threshold}

    def no_intervals(self) -> dict[str, str]:
        """None: its output is the mask of released groups, not a released column."""
        return {}


class PartitionSelection:
    """Thresholded discrete Laplace (approx DP) or discrete Gaussian (approx zCDP) key selection."""

    name = "partition_selection"
    handles = frozenset({"partition_selection"})
    notions = frozenset({"approx", "zcdp"})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        """Nothing to check: the statistic is always available."""

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        """One part."""
        return 1

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> SelectionPlan:
        if isinstance(share, PureDP):
            raise BudgetError("selecting private group keys needs δ > 0, and a pure-DP share has none",
                              argument="budget", fix="give public keys with group_by(..., keys=...)")
        delta = share.delta  # type: ignore[union-attr]
        if delta <= 0:
            raise BudgetError("selecting private group keys needs δ > 0", argument="budget",
                              fix="give public keys with group_by(..., keys=...), or a budget with delta > 0")
        l0 = ctx.unit.groups_per_unit
        pure = make("pure", share.epsilon) if isinstance(share, ApproxDP) else make("zcdp", share.rho)  # type: ignore[union-attr]
        # L1 = l0 for the Laplace part; L2 = √l0 (rounded up to a rational) for the Gaussian part.
        noise = Noise.calibrate(Fraction(l0) if pure.notion == "pure" else sqrt_up(l0), pure)
        tau = _threshold(l0, Fraction(l0) if pure.notion == "pure" else sqrt_up(l0), pure, delta)
        cost = make(share.notion, share.epsilon if share.notion == "approx" else share.rho, delta)  # type: ignore[union-attr]
        note = (f"partition selection: a group is released only when its noisy count of privacy units reaches "
                f"τ = {tau} (a group with about {tau} units is released half of the time; smaller groups are "
                f"suppressed, larger ones almost always kept); a unit touches ≤ {l0} groups")
        notes = [note]
        if l0 > 1:
            one = _threshold(1, Fraction(1), pure, delta)
            default = " (the default: max_rows)" if ctx.unit.max_groups is None else ""
            notes.append(f"partition selection: max_groups={l0}{default} multiplies the selection noise; with "
                         f"max_groups=1 the threshold would be τ = {one} units. If each unit belongs to one group (or "
                         "a few), say so: dp.PrivacyUnit(..., max_groups=1)")
        # Approximate: with probability ≤ δ a unit-only group is released; otherwise the noisy-count curve.
        # Floats rounded up (a δ below 5e-324 becomes the smallest float, not 0): the curve never under-reports.
        curve = (acc.approx(up(share.epsilon), up(delta)) if isinstance(share, ApproxDP)  # type: ignore[union-attr]
                 else acc.zcdp(up(share.rho), up(delta)))  # type: ignore[union-attr]
        return SelectionPlan(self.name, tuple(measures), (Statistic("units"),), cost,
                             noise={"distinct units per group": noise}, notes=tuple(notes), outputs=(KEEP,),
                             privacy=(curve,), selection_noise=noise, threshold=tau)
