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
* Discrete Laplace: P[Z ≥ k] = e^{−k/t}/(1 + e^{−1/t}) for k ≥ 0 exactly, so τ = 1 + max(0, ⌈t·(ℓ −
  ln(1 + e^{−1/t}))⌉) with ℓ ≥ ln(1/δ₁) (:func:`per_group_log_up`): the smallest τ ≥ 1 meeting it, up to the
  10⁻¹² margins of ℓ.
* Discrete Gaussian (review 53d; it was the subgaussian e^{−k²/(2σ²)}, up to 2.2× too high): P[Z ≥ k] = S(k)/N,
  S(k) = Σ_{z≥k} f(z), N = Σ_z f(z), f(z) = e^{−z²/(2σ²)}. τ − 1 is the smallest k ≥ 1 with ln U(k) + m ≤ −ℓ,
  U(k) ≥ S(k)/N (:func:`gaussian_threshold`): N ≥ √(2πσ²) (Poisson summation: N = √(2πσ²)·Σ_n e^{−2π²σ²n²}, every
  term positive; the partial sum |z| ≤ 20 below σ² = 4); S(k) summed term by term up to σ² = 10⁴, past the
  terms a geometric bound (:func:`_log_tail_direct`); above, Euler–Maclaurin to order 4 with its remainder,
  |R| ≤ (1/720)·∫|f⁗| (:func:`_log_tail_em`). m = 10⁻⁹ + 10⁻¹²·ℓ covers the floats. Past σ² = 10³⁰⁰: the
  subgaussian bound.
* No margin is added on top: τ − 1 below these values breaks the condition (tests/adversarial/selection_exact.py
  computes the exact δ: test_review52d.py, test_review53d.py, test_review55g.py). τ = 1 (k = 0) meets the condition
  only at δ > 1/2 (P[Z ≥ 0] > ½ for both noises): it is taken where it does, as any other k.
* zCDP: the claim is δ-approximate ρ-zCDP (Bun & Steinke 2016, Def. 8.1): the events E = everything (on D) and
  E′ = "no new group is released" (on D′, probability (1 − p)^k ≥ 1 − δ), under which the output is the
  thresholded noisy counts of D's groups, ρ-zCDP. An E′ with a finite Rényi divergence to M(D) must exclude every
  release of a new group (M(D) never has one), so P[E′] ≤ (1 − p)^L0: the same iff. The plan's curve is
  ``acc.zcdp(ρ, δ)``: δ + (1 − δ)·(ρ-zCDP's profile), and a session reports (ε, δ + δ_CKS(ε)).
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
from dpframe.accounting.numerics.common import special
from dpframe.budgets import ApproxDP, Budget, PureDP, make, up
from dpframe.errors import BudgetError
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.noise import RandomSource
from dpframe.sealed import plain_cache

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
    """Smallest τ ≥ 1 with 1 − (1 − P[Z ≥ τ − 1])^l0 ≤ δ for discrete Laplace(t = scale) (up to ℓ's margin).

    P[Z ≥ k] = e^{−k/t}/(1 + e^{−1/t}) (k ≥ 0) ≤ δ₁ ⇔ k ≥ t·(ln(1/δ₁) − ln(1 + e^{−1/t})): τ − 1 is the ceiling of
    that, at least 0 (k = 0, τ = 1, only where δ₁ ≥ P[Z ≥ 0] > ½: a δ above ½), computed in exact rationals from ℓ ≥
    ln(1/δ₁) (:func:`per_group_log_up`; the product with t was a float: at t ≈ 2⁵⁶ its rounding alone moved τ by
    hundreds). ln(1 + e^{−1/t}) is taken at 1/t capped at 40 (beyond, it is below 10⁻¹⁷, inside the 10⁻¹² margin:
    the bound is 0), so no scale, however far outside the float range, meets a float division or overflow.

    Example:
        >>> laplace_threshold(1, Fraction(1), Fraction(1, 10**6))   # ⌈13.8155 − 0.3133⌉ + 1
        15
        >>> laplace_threshold(1, Fraction(1, 10**400), Fraction(1, 10**6))   # a unit-only group needs noise ≥ 1
        2
        >>> laplace_threshold(1, Fraction(1), Fraction(9, 10))    # P[Z ≥ 0] = 1/(1 + e⁻¹) = 0.73 ≤ δ₁ = 0.9
        1

    """
    inv = float(min(1 / scale, Fraction(40)))
    small = max(Fraction(0), Fraction(math.log1p(math.exp(-inv))) - Fraction(1, 10**12))  # ≤ ln(1 + e^{−1/t})
    return max(0, math.ceil(scale * (per_group_log_up(l0, delta) - small))) + 1


DIRECT_MAX = 10**4
"""σ² up to this: the tail is a sum over the lattice; above, Euler–Maclaurin with its remainder bound."""

EM_MAX = 10**300
"""σ² above this (beyond the float range): the subgaussian bound."""

_A, _B = math.sqrt(3 - math.sqrt(6)), math.sqrt(3 + math.sqrt(6))   # where g(y) = y(3 − y²)φ(y) peaks, dips


def _phi3(y: float) -> float:
    """g(y) = y(3 − y²)φ(y): f'''(σy)·σ³/f-scale, f(z) = e^{−z²/(2σ²)} (see :func:`_log_tail_em`)."""
    return y * (3 - y * y) * math.exp(-y * y / 2) / math.sqrt(2 * math.pi)


def _log_norm_low(s2: float) -> float:
    """A lower bound of ln N, N = Σ_z e^{−z²/(2σ²)} (before the float margin of :func:`gaussian_threshold`).

    Poisson summation: N = √(2πσ²)·Σ_n e^{−2π²σ²n²} ≥ √(2πσ²), within 2e^{−2π²σ²} (10⁻³³ at σ² = 4); below σ² = 4,
    the terms |z| ≤ 20 (each omitted one is below e^{−50} of the sum).
    """
    if s2 >= 4:
        return 0.5 * math.log(2 * math.pi * s2)
    z = np.arange(1, 21, dtype=np.float64)
    return math.log1p(2 * float(np.exp(-z * z / (2 * s2)).sum()))


def _log_tail_direct(k: int, s2: float) -> float:
    """An upper bound of ln Σ_{z≥k} e^{−z²/(2σ²)} (k ≥ 1): the lattice terms, and a geometric bound past them.

    Σ_{z≥k} = e^{−k²/(2σ²)}·Σ_{j≥0} e^{−(2kj + j²)/(2σ²)}: the terms j ≤ J (J: the first whose exponent is ≥ 50),
    then Σ_{z≥Z} w(z) ≤ w(Z)/(1 − e^{−(2Z+1)/(2σ²)}) at Z = k + J + 1 (w(z + 1)/w(z) = e^{−(2z+1)/(2σ²)} falls).
    """
    jmax = math.ceil(math.sqrt(k * k + 100 * s2)) - k
    j = np.arange(jmax + 1, dtype=np.float64)
    head = float(np.exp(-(2 * k * j + j * j) / (2 * s2)).sum())
    z = k + jmax + 1
    rest = math.exp(-(z * z - k * k) / (2 * s2)) / -math.expm1(-(2 * z + 1) / (2 * s2))
    return -(k * k) / (2 * s2) + math.log(head + rest)


def _log_tail_em(k: int, s2: float) -> float:
    """An upper bound of ln P[Z ≥ k] from Euler–Maclaurin (σ² ≥ 4, k ≥ 1; x = k/σ, Q the normal tail).

    With f(z) = e^{−z²/(2σ²)}, S = Σ_{z≥k} f(z) = ∫_k^∞ f + f(k)/2 − f′(k)/12 + f‴(k)/720 + R, |R| ≤ V/720, V the
    total variation of f‴ on [k, ∞) (Euler–Maclaurin to order 4: |R| ≤ |B₄|/4!·∫|f⁗|). Over N ≥ σ√(2π):
    P[Z ≥ k] ≤ Q(x) + φ(x)·(1/(2σ) + x/(12σ²)) + (g(x) + V_g(x))/(720σ⁴), g(y) = y(3 − y²)φ(y) (f‴(σy) =
    √(2π)·g(y)/σ³), V_g its variation on [x, ∞): g rises to g(a) at a = √(3 − √6), falls to g(b) < 0 at
    b = √(3 + √6), then rises to 0; g + V_g = 0 from b on.
    """
    sp = special()
    s = math.sqrt(s2)
    x = k / s
    log_q = float(sp.log_ndtr(-x))
    ratio = math.exp(-x * x / 2 - 0.5 * math.log(2 * math.pi) - log_q)     # φ(x)/Q(x)
    if x >= _B:
        extra = 0.0
    elif x >= _A:
        extra = 2 * (_phi3(x) - _phi3(_B))
    else:
        extra = 2 * (_phi3(_A) - _phi3(_B))
    rel = ratio * (1 / (2 * s) + x / (12 * s2))
    if extra:                                                           # x < b: Q(x) > 0.0098
        rel += extra / (720 * s2) / s2 / math.exp(log_q)
    return log_q + math.log1p(rel)


def _log_tail_up(k: int, s2: float) -> float:
    """An upper bound of ln P[Z ≥ k], k ≥ 1, before the float margin (:func:`gaussian_threshold`)."""
    if s2 <= DIRECT_MAX:
        return _log_tail_direct(k, s2) - _log_norm_low(s2)
    return _log_tail_em(k, s2)


def subgaussian_threshold(l0: int, sigma2: Fraction, delta: Fraction) -> int:
    """Smallest τ ≥ 2 with exp(−(τ − 1)²/(2σ²)) ≤ δ₁ (σ-subgaussian tail, CKS20 Prop. 3), in exact rationals.

    Example:
        >>> subgaussian_threshold(1, Fraction(1), Fraction(1, 10**6))   # ⌈√(2·13.8155)⌉ + 1
        7

    """
    x = 2 * sigma2 * per_group_log_up(l0, delta)
    k = math.isqrt(math.ceil(x))
    return max(1, k + (k * k < x)) + 1


@plain_cache(maxsize=256)
def gaussian_threshold(l0: int, sigma2: Fraction, delta: Fraction) -> int:
    """Smallest τ ≥ 1 with 1 − (1 − P[Z ≥ τ − 1])^l0 ≤ δ for the discrete Gaussian N_ℤ(0, σ²) (up to margins).

    τ = 1 where P[Z ≥ 0] ≤ δ₁ (:func:`_zero_passes`: only at a δ above ½); else τ ≥ 2, as follows.

    The condition is P[Z ≥ τ − 1] ≤ δ₁ = 1 − (1 − δ)^{1/l0}; it is checked as ln U(k) + m ≤ −ℓ with ℓ ≥ ln(1/δ₁)
    (:func:`per_group_log_up`), U(k) ≥ P[Z ≥ k] (the lattice sum over a lower bound of the lattice total up to σ² =
    10⁴, :func:`_log_tail_direct`; Euler–Maclaurin with its remainder above, :func:`_log_tail_em`) and m = 10⁻⁹ +
    10⁻¹²·ℓ, far above the floats' error (each a few ulps of terms ≤ 50 + ℓ, summed over ≤ 2000 terms). τ − 1 is the
    smallest k passing (bisection below the subgaussian :func:`subgaussian_threshold`, which is the answer where
    nothing smaller passes, and beyond σ² = 10³⁰⁰). Exact on the test grid up to σ² = 10¹⁴; beyond, up to 2¹¹⁰ (the
    largest σ² the sampler takes), sound and either exact or τ − 1 achieving δ within 10⁻⁸ of it (the margins, ≈
    2·10⁻⁹, and one step of k: past σ² ≈ 10¹⁸ floats cannot tell k from k + 1, so τ may be up to 10⁻⁹·σ above the
    smallest; tests/adversarial/test_review55g.py). Cached (a bisection of up to ~60 tail evaluations, each ≤ 2000
    terms: planning calls it for every query and explain note).

    Example:
        >>> gaussian_threshold(1, Fraction(1), Fraction(1, 10**6))   # P[Z ≥ 5] = 1.5e-6, P[Z ≥ 6] = 6.1e-9
        7
        >>> gaussian_threshold(1, Fraction(100), Fraction(1, 10**6)), subgaussian_threshold(1, Fraction(100),
        ...                                                                                Fraction(1, 10**6))
        (50, 54)

    """
    if _zero_passes(l0, sigma2, delta):
        return 1
    sub = subgaussian_threshold(l0, sigma2, delta) - 1
    if sub <= 1 or sigma2 > EM_MAX or sigma2 < Fraction(1, 10**6) or (sigma2 <= DIRECT_MAX and sub >= 2**40):
        return sub + 1
    ell = float(per_group_log_up(l0, delta))
    target = -ell - 1e-9 - 1e-12 * ell
    s2 = float(sigma2)
    lo, hi = 0, sub                     # the answer k is in (lo, hi]: k = hi passes (subgaussian)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _log_tail_up(mid, s2) <= target:
            hi = mid
        else:
            lo = mid
    return hi + 1


def _zero_passes(l0: int, sigma2: Fraction, delta: Fraction) -> bool:
    """Whether P[Z ≥ 0] ≤ δ₁ for N_ℤ(0, σ²), so that τ = 1 is sound (only at a δ above ½: P[Z ≥ 0] > ½).

    P[Z ≥ 0] = (N + 1)/(2N) = ½ + 1/(2N) (the lattice is symmetric, the term z = 0 is 1), at most ½ + e^{−L}/2
    with L ≤ ln N (:func:`_log_norm_low`; N grows with σ², so beyond 10³⁰⁰ its value there); checked, as every k,
    with the margin m = 10⁻⁹ + 10⁻¹²·ℓ above ln(1/δ₁)'s upper bound ℓ.

    Example:
        >>> _zero_passes(1, Fraction(1), Fraction(9, 10)), _zero_passes(1, Fraction(1), Fraction(1, 2))
        (True, False)

    """
    ell = float(per_group_log_up(l0, delta))
    if ell >= math.log(2):              # δ₁ ≤ ½ < P[Z ≥ 0]
        return False
    log_n = _log_norm_low(float(min(sigma2, Fraction(EM_MAX))))
    return math.log(0.5) + math.log1p(math.exp(-log_n)) + 1e-9 + 1e-12 * ell <= -ell


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
    """Thresholded discrete Laplace (approx DP) or discrete Gaussian (approx zCDP) key selection.

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups) (a new unit creates ≤ ``max_groups`` new keys). Guarantee: (ε, δ)-DP or δ-approximate
    ρ-zCDP (proof: ``docs/guarantees.md``, Proofs of the calibration formulas).
    """

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
