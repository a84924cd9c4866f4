"""DP partition selection: which group keys found in the private data may be released.

Statistic: the number of distinct privacy units per group, u_g. After bounding, one unit touches at
most L0 = min(max_groups, max_rows) groups and adds 1 to each. A group is released iff u_g + Z_g ≥ τ
(``>=``, :meth:`SelectionPlan.release`). Proof (docs/guarantees.md, "Partition selection"): let D′ = D plus one
unit, which adds 1 to m groups of D and creates k new ones (m + k ≤ L0; a group of D has u_g ≥ 1, a new one
u_g = 1, since null unit ids are dropped and a group exists only through its rows).

* Groups of D: the vector (u_g) moves by 1 in m ≤ L0 places (L1 ≤ L0, L2 ≤ √L0): discrete Laplace with
  t = L0/ε is ε-DP, discrete Gaussian with σ² = L0/(2ρ) is ρ-zCDP (thresholding is post-processing).
* New groups: absent from M(D), each released from D′ independently with probability p = P[Z ≥ τ − 1].
  With P_E the output on the groups of D, P[M(D′) ∈ S] ≤ P_E′(S) + (1 − (1 − p)^k) ≤ e^ε·P[M(D) ∈ S] +
  (1 − (1 − p)^k), and P[M(D) ∈ S] − e^ε·P[M(D′) ∈ S] ≤ P_E(S) − (1 − p)^k·P_E(S) ≤ 1 − (1 − p)^k. At m = 0,
  k = L0 the first is an equality for S = "a new group is released": the selection is (ε, δ)-DP (or
  δ-approximately ρ-zCDP) **if and only if** 1 − (1 − p)^L0 ≤ δ, i.e. p ≤ δ₁ = 1 − (1 − δ)^{1/L0}.
* Discrete Laplace: P[Z ≥ k] = e^{−k/t}/(1 + e^{−1/t}) for k ≥ 0 exactly, so τ = 1 + max(1, ⌈t·(ℓ −
  ln(1 + e^{−1/t}))⌉) with ℓ ≥ ln(1/δ₁) (:func:`per_group_log_up`): the smallest τ ≥ 2 meeting it, up to the
  10⁻¹² margins of ℓ. Discrete Gaussian: P[Z ≥ k] ≤ e^{−k²/(2σ²)} (σ-subgaussian, CKS20 Prop. 3), so
  τ = 1 + max(1, ⌈√(2σ²·ℓ)⌉): sufficient, not exact (the exact tail is smaller). Both in exact rationals.
  No margin is added on top: τ − 1 below these values breaks the condition (Laplace; tests/adversarial/
  test_review52d.py computes the exact δ of both noises). τ ≥ 2 is a floor: τ = 1 could meet the condition
  only at δ ≥ 1/2.
Measures released for the selected groups are noised independently; the two bounds above hold with ε the
whole query's (the part on groups of D composes), so the total is (ε_sel + ε_measures, δ) (Korolova et al.
2009 / Wilson et al. 2020).
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


def per_group_log_up(l0: int, delta: Fraction) -> Fraction:
    """A rational ≥ ln(1/δ₁), δ₁ = 1 − (1 − δ)^{1/l0}, and ≤ :func:`log_ratio_up` (δ₁ ≥ δ/l0).

    δ₁ is the probability per group at which l0 independent new groups are released, any of them, with
    probability exactly δ.

    δ₁ = −expm1(−a/l0), a = −ln(1 − δ): for δ ≤ 1/2, a = −log1p(−float(δ)) (condition number ≤ 2); above,
    a = ln(denominator) − ln(denominator − numerator) of the exact δ (a ≥ ln 2, the logs' ulps are ≤ 10⁻¹² of
    it). Each float step is within a few ulps, so ln(1/δ₁) is within 10⁻¹² of the float result; 10⁻⁹ is added.
    Where float(δ) or a/l0 is below 10⁻³⁰⁰, or l0 ≥ 10³⁰⁰, it is :func:`log_ratio_up` (also an upper bound).

    Example:
        >>> round(float(log_ratio_up(1000, Fraction(1, 2)) - per_group_log_up(1000, Fraction(1, 2))), 3)  # ln(2 ln 2)
        0.326
        >>> per_group_log_up(1, Fraction(1, 10**6)) == log_ratio_up(1, Fraction(1, 10**6))   # δ₁ = δ exactly
        True

    """
    base = log_ratio_up(l0, delta)
    if l0 >= 10**300:                  # a float division by it would overflow (a ZCDP budget's ρ reaches 10³⁰⁰)
        return base
    if delta <= Fraction(1, 2):
        d = float(delta)
        if d < 1e-300:
            return base
        a = -math.log1p(-d)
    else:
        a = math.log(delta.denominator) - math.log(delta.denominator - delta.numerator)
    b = a / l0
    if b < 1e-300:
        return base
    log_inv = -math.log(-math.expm1(-b))
    return min(base, Fraction(log_inv) + Fraction(1, 10**9) + Fraction(abs(log_inv)) / 10**12)


def laplace_threshold(l0: int, scale: Fraction, delta: Fraction) -> int:
    """Smallest τ ≥ 2 with 1 − (1 − P[Z ≥ τ − 1])^l0 ≤ δ for discrete Laplace(t = scale) (up to ℓ's margin).

    P[Z ≥ k] = e^{−k/t}/(1 + e^{−1/t}) (k ≥ 0) ≤ δ₁ ⇔ k ≥ t·(ln(1/δ₁) − ln(1 + e^{−1/t})): τ − 1 is the ceiling
    of that, at least 1, computed in exact rationals from ℓ ≥ ln(1/δ₁) (:func:`per_group_log_up`; the product
    with t was a float: at t ≈ 2⁵⁶ its rounding alone moved τ by hundreds). ln(1 + e^{−1/t}) is taken at 1/t
    capped at 40 (beyond, it is below 10⁻¹⁷, inside the 10⁻¹² margin: the bound is 0), so no scale, however
    far outside the float range, meets a float division or overflow.

    Example:
        >>> laplace_threshold(1, Fraction(1), Fraction(1, 10**6))   # ⌈13.8155 − 0.3133⌉ + 1
        15
        >>> laplace_threshold(1, Fraction(1, 10**400), Fraction(1, 10**6))   # a unit-only group needs noise ≥ 1
        2

    """
    inv = float(min(1 / scale, Fraction(40)))
    small = max(Fraction(0), Fraction(math.log1p(math.exp(-inv))) - Fraction(1, 10**12))  # ≤ ln(1 + e^{−1/t})
    return max(1, math.ceil(scale * (per_group_log_up(l0, delta) - small))) + 1


def gaussian_threshold(l0: int, sigma2: Fraction, delta: Fraction) -> int:
    """Smallest τ ≥ 2 with exp(−(τ − 1)²/(2σ²)) ≤ δ₁ = 1 − (1 − δ)^{1/l0} (the subgaussian tail bound).

    (τ − 1)² ≥ 2σ²·ln(1/δ₁), with the smallest integer root of an exact rational upper bound
    (:func:`per_group_log_up`).

    Example:
        >>> gaussian_threshold(1, Fraction(1), Fraction(1, 10**6))   # ⌈√(2·13.8155)⌉ + 1
        7

    """
    x = 2 * sigma2 * per_group_log_up(l0, delta)
    k = math.isqrt(math.ceil(x))
    return max(1, k + (k * k < x)) + 1


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
