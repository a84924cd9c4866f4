"""RDP closed forms of the base mechanisms and the RDP → (ε, δ) conversions.

Closed forms (sensitivity-normalised; digest ``research/004_modern_accounting.md`` §1.3):

* Gaussian / any ρ-zCDP mechanism: ε(α) = αρ (ρ = Δ²/(2σ²) for the Gaussian).
* Laplace with ε = Δ/b: ε(α) = ε + log1p((α−1)·expm1((1−2α)ε)/(2α−1))/(α−1).
* Binary pair (p, 1−p) vs (q, 1−q): D_α = log(p^α q^{1−α} + (1−p)^α (1−q)^{1−α})/(α−1).
* Pure ε-DP (Bun & Steinke 2016): the binary pair of randomized response with p = e^ε/(1+e^ε).
* Discrete Laplace(t) shifted by an integer Δ: geometric sums.

**Rounding.** Each closed form is evaluated in floats and then rounded *outward*: the value returned is at least
the exact divergence (a curve never under-reports). The float error of a closed form is a few ulps of the
magnitudes it adds, divided by α − 1 (:func:`round_up_rdp`); where those magnitudes cancel (a tiny ε: e.g.
``log(inner) − log1p(e^{−1/t})``, both ≈ log 2) the margin is far above the value itself, so an ε-DP mechanism's
curve is also capped by αε²/2 (ε-DP implies ε²/2-zCDP, Bun & Steinke 2016, Prop. 3.3), rounded up: tight for small
ε. The linear curve αρ is rounded up too, by one ulp exactly where the float product is below αρ.
:func:`rdp_discrete_laplace_bounds` gives the matching lower bound (the engine's floor for declared curves).

Conversions: the standard one, ε(α) + log(1/δ)/(α − 1) (Mironov 2017, Prop. 3), and the improved one,
ε(α) + log(1 − 1/α) − (log δ + log α)/(α − 1) (Balle et al. 2020; Canonne, Kamath & Steinke 2020,
Prop. 12).

Example:
    >>> import numpy as np
    >>> float(rdp_linear(0.125)(np.array([4.0]))[0])
    0.5
    >>> c = best_epsilon(np.array([2.0, 4.0, 8.0]), np.array([0.1, 0.2, 0.4]), 1e-5)
    >>> c.rule, c.alpha
    ('improved', 8.0)

"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from dpframe.accounting.numerics.common import Array, Fn
from dpframe.sealed import frozen_array

#: Unit roundoff of a float64 (2⁻⁵³).
_U = 2.0 ** -53
#: How many units of roundoff of the added magnitudes the margin of a closed form allows (at most 1.6 were needed
#: over 3,000 random (ε, α, Δ, t) against 80-digit references; tests/adversarial/test_review52e checks a grid).
_ULPS = 8.0
_TINY = float(np.finfo(np.float64).smallest_subnormal)

Conversion = Literal["best", "standard", "improved"]

#: The default grid of Rényi orders (dp_accounting's, extended at the top).
RDP_ORDERS = frozen_array(np.concatenate([np.arange(1.1, 11.0, 0.1), np.arange(11, 64, dtype=np.float64),
                                          np.array([80.0, 128, 256, 512, 1024])]))


def rdp_linear(rho: float) -> Fn:
    """ε(α) = αρ (Gaussian with ρ = Δ²/(2σ²), any ρ-zCDP mechanism); ρ may be +∞ (vacuous).

    Rounded up: the float product is raised by one ulp exactly where it is below the exact αρ (an exact product,
    as 4 · 0.125, is kept).
    """
    return lambda a: product_up(np.asarray(a, dtype=np.float64), rho)


#: Veltkamp's splitting constant 2²⁷ + 1 (a float is split into two halves of 26 bits whose products are exact).
_SPLIT = 134217729.0


def product_up(a: Array, b: float) -> Array:
    """a·b rounded toward +∞ (Dekker's exact product gives the rounding error's sign; exact products are kept).

    Where the error cannot be found exactly (huge values, where splitting overflows, or products near the subnormal
    range) the product is raised by one ulp anyway.

    Example:
        >>> [float(v) for v in product_up(np.array([4.0, 3.0]), 0.125)], float(product_up(np.array([3.0]), 0.1)[0])
        ([0.5, 0.375], 0.30000000000000004)

    """
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * b
        ca, cb = _SPLIT * a, _SPLIT * b
        ah, bh = ca - (ca - a), cb - (cb - b)
        al, bl = a - ah, b - bh
        err = ((ah * bh - p) + ah * bl + al * bh) + al * bl        # exactly a·b − p when nothing over/underflows
        unsure = ~np.isfinite(err) | (np.abs(p) < 2.0 ** -960) | (np.abs(p) > 2.0 ** 960)
        raise_ = ((err > 0) | unsure) & (a != 0) & (b != 0)
        return np.asarray(np.where(raise_, np.nextafter(p, np.inf), p))


def sum_up(values: Iterable[float]) -> float:
    """The exact sum of ``values``, rounded toward +∞ (+∞ if one is).

    Example:
        >>> sum_up([1.0, 1e-17]) > 1.0, sum_up([0.5, 0.25]), sum_up([1.0, math.inf])
        (True, 0.75, inf)

    """
    exact = Fraction(0)
    for v in values:
        if not math.isfinite(v):
            return math.inf
        exact += Fraction(v)
    return _float_up(exact)


def dot_up(pairs: Iterable[tuple[float, float]]) -> float:
    """Σ a·b over ``pairs`` (a repetition count times a δ0, a pure ε or a ρ), exactly, rounded toward +∞.

    ``math.fsum`` of the float products rounds each product and the sum to nearest: below the exact sum about half the
    time. Every a·b here is ≥ 0; an infinite one makes the sum +∞.

    Example:
        >>> dot_up([(1, 1.0), (3, 1e-17)]) > 1.0, dot_up([(2, 0.25), (1, 0.5)])
        (True, 1.0)

    """
    exact = Fraction(0)
    for a, b in pairs:
        if not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        exact += Fraction(a) * Fraction(b)
    return _float_up(exact)


def difference_down(a: float, b: float) -> float:
    """The difference a − b rounded toward −∞ (what is left of a δ after the δ0 parts: never more than is left).

    Example:
        >>> difference_down(1e-5, 1e-6) <= 9e-6, difference_down(0.5, 0.25)
        (True, 0.25)

    """
    exact = Fraction(a) - Fraction(b)
    value = float(exact)
    return math.nextafter(value, -math.inf) if Fraction(value) > exact else value


def _float_up(exact: Fraction) -> float:
    """The least float ≥ ``exact`` (+∞ beyond floats)."""
    try:
        value = float(exact)
    except OverflowError:
        return math.inf
    return math.nextafter(value, math.inf) if Fraction(value) < exact else value


def half_square_ratio_up(d: float, s: float) -> float:
    """Δ²/(2σ²) rounded toward +∞ (ρ of the Gaussian; μ = Δ/σ squared in floats can be an ulp below it).

    Example:
        >>> half_square_ratio_up(1.0, 1.0), half_square_ratio_up(1.0, 3.0) > 1 / 18
        (0.5, True)

    """
    return _float_up(Fraction(d) ** 2 / (2 * Fraction(s) ** 2))


def root_sum_squares_up(terms: Iterable[tuple[float, float, float]]) -> float:
    """√(Σ t·(a/b)²) over ``(a, b, t)`` rounded toward +∞: μ = Δ/σ of composed or repeated Gaussians.

    ``math.hypot`` and ``math.sqrt`` of a float sum round to nearest (below the exact root about half the time); here
    the sum of squares is exact and the root is moved up to the least float whose square is at least it.

    Example:
        >>> root_sum_squares_up([(3.0, 1.0, 1), (4.0, 1.0, 1)]), root_sum_squares_up([(1.0, 1.0, 2)]) ** 2 >= 2
        (5.0, True)

    """
    exact = Fraction(0)
    for a, b, t in terms:
        exact += Fraction(t) * (Fraction(a) / Fraction(b)) ** 2
    root = math.sqrt(_float_up(exact))
    while math.isfinite(root) and Fraction(root) ** 2 < exact:
        root = math.nextafter(root, math.inf)
    return root


def round_up_rdp(value: Array | float, magnitude: Array | float, a: Array | float) -> Array:
    """``value`` plus a margin for its float error: at least the exact value whenever the error is within it.

    :data:`_ULPS` ulps of ``magnitude`` (the sum of the absolute values of the terms the numerator added) over
    α − 1, and of the value itself.

    Example:
        >>> v = float(round_up_rdp(0.5, 0.0, 2.0))
        >>> 0.5 < v < 0.5 + 1e-14
        True

    """
    with np.errstate(all="ignore"):
        return np.asarray(value + _ULPS * _U * (np.asarray(magnitude) / (np.asarray(a) - 1) + np.abs(value)))




def _pure_cap(half: float, a: Array) -> Array:
    """α·``half`` rounded up, ``half`` ≥ ε²/2 (:func:`half_square_ratio_up`): the RDP bound of any ε-DP mechanism.

    ε-DP ⇒ ε²/2-zCDP; tight as ε → 0. (Squared in floats, ε below about 1.5·10⁻¹⁶² gave a subnormal or zero
    square, and the cap fell up to 10⁻⁵ relatively below αε²/2, or to 0.)
    """
    return product_up(np.asarray(a, dtype=np.float64), half)


def rdp_laplace(eps: float) -> Fn:
    """Laplace with ε = Δ/b: ε + log1p((α−1)·expm1((1−2α)ε)/(2α−1))/(α−1)."""
    half = half_square_ratio_up(eps, 1.0)

    def f(a: Array) -> Array:
        with np.errstate(over="ignore"):
            tail = np.log1p((a - 1) * np.expm1((1 - 2 * a) * eps) / (2 * a - 1))
            value = round_up_rdp(eps + tail / (a - 1), a * eps + np.abs(tail), a)
            return np.asarray(np.minimum(value, _pure_cap(half, a)))

    return f


def rdp_binary(lp: float, l1p: float, lq: float, l1q: float, rest: float = -math.inf) -> Fn:
    """D_α((p, 1−p) ‖ (q, 1−q)) from logs of the four probabilities.

    ``rest``: the log of mass both share (outputs with the same probability under both, as k-ary
    randomized response's other values).
    """
    def f(a: Array) -> Array:
        with np.errstate(invalid="ignore"):
            x1, x2 = a * lp + (1 - a) * lq, a * l1p + (1 - a) * l1q
            both = np.logaddexp(x1, x2)
            num = np.logaddexp(both, rest)
            # the magnitudes the exponents added (a term that is −∞ is exactly 0 in the sum: no error)
            size = (np.where(np.isfinite(x1), a * abs(lp) + (a - 1) * abs(lq), 0.0)
                    + np.where(np.isfinite(x2), a * abs(l1p) + (a - 1) * abs(l1q), 0.0)
                    + (abs(rest) if math.isfinite(rest) else 0.0) + np.abs(num))
            return np.asarray(np.where(np.isfinite(num), round_up_rdp(num / (a - 1), size, a), num / (a - 1)))

    return f


def rdp_pure(eps: float) -> Fn:
    """(1/(α−1)) log[(sinh(αε) − sinh((α−1)ε))/sinh(ε)]: randomized response with p = e^ε/(1+e^ε), capped at ε."""
    p = -float(np.logaddexp(0.0, -eps))        # log p
    q = -float(np.logaddexp(0.0, eps))         # log (1 − p)
    rr = rdp_binary(p, q, q, p)
    half = half_square_ratio_up(eps, 1.0)
    return lambda a: np.minimum(np.minimum(rr(a), eps), _pure_cap(half, a))


def rdp_discrete_laplace(t: float, d: int) -> Fn:
    """Discrete Laplace(t) (pmf ∝ e^{−|k|/t}) shifted by the integer Δ = ``d``: exact by geometric sums, rounded up."""
    bounds = rdp_discrete_laplace_bounds(t, d)
    return lambda a: bounds(a)[1]


def rdp_discrete_laplace_bounds(t: float, d: int) -> Callable[[Array], tuple[Array, Array]]:
    """(lower, upper) bounds at each order of the exact D_α(DLap(t) ‖ DLap(t) + Δ), Δ = ``d``.

    The float error is taken off and added on; the upper one is also capped by α(Δ/t)²/2, the lower one at ≥ 0.

    Example:
        >>> import numpy as np
        >>> lo, hi = rdp_discrete_laplace_bounds(1e9, 1)(np.array([2.0]))   # exact: 1.0000000000e-18 (≈ αε²/2)
        >>> float(lo[0]) <= 1e-18 <= float(hi[0]) < 1.0000001e-18
        True

    """
    half = half_square_ratio_up(d, t)       # (Δ/t)²/2, exactly rounded up

    def f(a: Array) -> tuple[Array, Array]:
        with np.errstate(over="ignore", invalid="ignore"):
            k = (2 * a - 1) / t
            # middle sum Σ_{k=1}^{Δ−1} r^k with r = e^{−(2α−1)/t}, written with expm1 (all terms ≥ 0)
            mid = np.exp(-k) * (-np.expm1(-k * (d - 1))) / (-np.expm1(-k)) if d > 1 else np.zeros_like(a)
            inner = 1 + np.exp(-(2 * a - 1) * (d / t)) + (-math.expm1(-1 / t)) * mid
            shift = (a - 1) * (d / t)
            log_inner = np.log(inner)
            value = np.asarray((shift + log_inner - math.log1p(math.exp(-1 / t))) / (a - 1))
            size = shift + np.abs(log_inner) + 1.0
            hi = round_up_rdp(value, size, a)
            lo = 2 * value - hi
            ok = np.isfinite(value)
            return (np.where(ok, np.maximum(lo, 0.0), 0.0),
                    np.where(ok, np.minimum(hi, _pure_cap(half, a)), math.inf))

    return f


def conversions(alpha: Array, rdp: Array, delta: float) -> tuple[Array, Array]:
    """(standard, improved) ε at ``delta`` for each order (improved clamped at ≥ 0).

    In logs: −ln δ, not ln(1/δ) (1/δ overflows to ∞ below δ = 5.6·10⁻³⁰⁹, where a finite ε exists).

    Example:
        >>> std, _ = conversions(np.array([2.0]), np.array([1.0]), 5e-324)
        >>> round(float(std[0]), 3)                # 1 + 744.44: finite at the least subnormal
        745.44

    """
    std = rdp - math.log(delta) / (alpha - 1)
    imp = rdp + np.log1p(-1 / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1)
    return std, np.maximum(imp, 0.0)


def delta_conversions(alpha: Array, rdp: Array, epsilon: float) -> tuple[Array, Array]:
    """(standard, improved) δ at ``epsilon`` for each order (capped at 1), rounded up.

    The exponents are rounded to nearest, off by a few ulps of (α − 1)(|ε(α)| + ε); 10⁻¹² of that (and of 1) is
    added to them, so that δ is never below the exact conversion of the float RDP values (and a δ that underflows
    is the least positive float, not 0).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        margin = 1e-12 * (1 + (alpha - 1) * (np.abs(rdp) + abs(epsilon)) + np.log(alpha))
        x_std = (alpha - 1) * (rdp - epsilon) + margin
        x_imp = (alpha - 1) * (rdp - epsilon + np.log1p(-1 / alpha)) - np.log(alpha) + margin
        # e^x below the least float (x < −745) underflows to 0: the least positive float is above it
        std, imp = (np.where(x > -np.inf, np.maximum(np.exp(x), _TINY), 0.0) for x in (x_std, x_imp))
    return np.minimum(std, 1.0), np.minimum(imp, 1.0)


def conversion_margin(epsilon: float, alpha: float, delta: float) -> float:
    """What to add to a conversion's ε at order ``alpha`` and ``delta`` so that it is never below the exact value.

    The conversions add float terms rounded to nearest (a few ulps each, below the exact value as often as above),
    and the RDP values summed into ε(α) carry as many: 10⁻¹² of the terms' size at that order covers them.

    Example:
        >>> conversion_margin(1.0, 2.0, 1e-5) < 1e-10
        True

    """
    return 1e-12 * (epsilon + abs(math.log1p(-1 / alpha)) + (abs(math.log(delta)) + math.log(alpha)) / (alpha - 1))


@dataclass(frozen=True)
class Converted:
    """The result of a conversion: ε, the order and the rule that gave it."""

    epsilon: float
    alpha: float
    rule: str


def best_epsilon(alpha: Array, rdp: Array, delta: float, conversion: Conversion = "best") -> Converted:
    """The smallest ε over ``alpha`` by the chosen conversion rule(s)."""
    std, imp = conversions(alpha, rdp, delta)
    options = []
    if conversion in ("best", "standard"):
        i = int(np.nanargmin(std))
        options.append(Converted(float(std[i]), float(alpha[i]), "standard"))
    if conversion in ("best", "improved"):
        i = int(np.nanargmin(imp))
        options.append(Converted(float(imp[i]), float(alpha[i]), "improved"))
    return min(options, key=lambda c: c.epsilon)
