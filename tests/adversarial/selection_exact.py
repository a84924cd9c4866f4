"""The exact δ of partition selection, to about 10⁻⁷⁰ relative (Decimal at 90 digits, no sampling).

Partition selection releases a group iff u_g + Z ≥ τ. Against D′ = D plus one unit whose L0 groups are all new
(u = 1 each, absent from D), the hockey-stick divergence at the selection's ε is exactly the probability that
some new group is released, 1 − (1 − P[Z ≥ τ − 1])^L0; every other neighbour pair gives at most that
(``plugins/dpframe_aggregates/partition_selection.py``, docs/guarantees.md). The selection is (ε, δ)-DP iff
:func:`selection_delta` ≤ δ.

* Discrete Laplace(t): P[Z ≥ k] = e^{−k/t}/(1 + e^{−1/t}) for k ≥ 0, 1 − e^{−(1−k)/t}/(1 + e^{−1/t}) below.
* Discrete Gaussian(σ²): P[Z ≥ k] = Σ_{z≥k} e^{−z²/(2σ²)} / Σ_z e^{−z²/(2σ²)}, summed term by term (each term the
  previous times a ratio, so only multiplications) until a term is below 10⁻⁷⁵ of the sum, then the rest bounded
  by the geometric series w(z)/(1 − e^{−z/σ²}) and added (an upper bound of the tail; the normaliser, the same
  sum over all z, is within 10⁻⁷⁰ of exact). Meant for σ² up to about 10⁵ (a few thousand terms).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

PREC = 90
_SMALL = Decimal(10) ** -75


def dec(x: Fraction | int | float) -> Decimal:
    """``x`` as a Decimal at the current precision."""
    x = Fraction(x)
    return Decimal(x.numerator) / Decimal(x.denominator)


def _log1m(p: Decimal) -> Decimal:
    """ln(1 − p) for 0 ≤ p < 1, by its series where 1 − p would lose p's digits."""
    if p > Decimal("1e-12"):
        return (1 - p).ln()
    total, term, n = Decimal(0), p, 1
    while term > _SMALL * p:
        total -= term / n
        term *= p
        n += 1
    return total


def _one_minus_exp(x: Decimal) -> Decimal:
    """1 − e^x for x ≤ 0, by its series where e^x is within 10⁻¹² of 1."""
    if x < Decimal("-1e-12"):
        return 1 - x.exp()
    total, term, n = Decimal(0), x, 1
    while abs(term) > _SMALL * abs(x):
        total -= term
        n += 1
        term = term * x / n
    return total


def any_released(l0: int, p: Decimal) -> Decimal:
    """1 − (1 − p)^l0: the probability that one of ``l0`` independent groups, each kept with ``p``, is kept."""
    return Decimal(1) if p >= 1 else _one_minus_exp(l0 * _log1m(p))


def per_group_delta(l0: int, delta: Fraction) -> Decimal:
    """δ₁ = 1 − (1 − δ)^{1/l0}: ``any_released(l0, δ₁)`` = δ."""
    return _one_minus_exp(_log1m(dec(delta)) / l0)


def laplace_tail(t: Fraction, k: int) -> Decimal:
    """P[Z ≥ k] for discrete Laplace with scale t (P[Z = z] ∝ e^{−|z|/t})."""
    s = dec(t)
    q = (-1 / s).exp()
    if k >= 0:
        return (-(Decimal(k) / s)).exp() / (1 + q)
    return 1 - (-(Decimal(1 - k) / s)).exp() / (1 + q)


def _gauss_sum(s2: Decimal, k: int) -> Decimal:
    """Σ_{z ≥ k} e^{−z²/(2σ²)} (k ≥ 0), with an upper bound of what is left after the last term summed."""
    w = (-(Decimal(k) ** 2) / (2 * s2)).exp()
    ratio = (-Decimal(2 * k + 1) / (2 * s2)).exp()      # w(z + 1)/w(z) at z = k
    step = (-1 / s2).exp()                              # and that ratio's ratio
    total, z = Decimal(0), k
    while True:
        total += w
        w, ratio, z = w * ratio, ratio * step, z + 1
        if w < _SMALL * total:
            return total + w / (1 - (-(Decimal(z) / s2)).exp())


def gaussian_tail(sigma2: Fraction, k: int) -> Decimal:
    """P[Z ≥ k] for the discrete Gaussian with parameter σ² (P[Z = z] ∝ e^{−z²/(2σ²)})."""
    s2 = dec(sigma2)
    norm = 1 + 2 * _gauss_sum(s2, 1)
    return _gauss_sum(s2, k) / norm if k >= 0 else 1 - _gauss_sum(s2, 1 - k) / norm


def selection_delta(kind: str, l0: int, scale: Fraction, tau: int) -> Decimal:
    """The exact δ of partition selection with threshold ``tau``: 1 − (1 − P[Z ≥ τ − 1])^l0.

    ``kind`` is "discrete_laplace" (``scale`` = t) or "discrete_gaussian" (``scale`` = σ²).

    Example:
        >>> from decimal import localcontext
        >>> from fractions import Fraction
        >>> with localcontext() as ctx:
        ...     ctx.prec = PREC
        ...     float(selection_delta("discrete_laplace", 1, Fraction(1), 15)) < 1e-6 < float(
        ...         selection_delta("discrete_laplace", 1, Fraction(1), 14))
        True

    """
    tail = laplace_tail if kind == "discrete_laplace" else gaussian_tail
    return any_released(l0, tail(scale, tau - 1))


def normal_tail(x: Decimal) -> Decimal:
    """Q(x) = P[N(0, 1) ≥ x] for x ≥ 0: e^{−y²}·Σ 2ⁿy^{2n+1}/(2n+1)!! (erf, y = x/√2; all terms positive) below
    x = 3, the Mills ratio's continued fraction φ(x)/(x + 1/(x + 2/(x + ...))) (3000 levels) from 3 on."""
    phi = (-(x * x) / 2).exp() / (2 * _pi()).sqrt()
    if x >= 3:
        frac = x
        for n in range(3000, 0, -1):
            frac = x + n / frac
        return phi / frac
    y = x / Decimal(2).sqrt()
    total, term, n = Decimal(0), y, 0
    while term > _SMALL * (total + term):
        total += term
        n += 1
        term = term * 2 * y * y / (2 * n + 1)
    erf = 2 / _pi().sqrt() * (-(y * y)).exp() * total
    return (1 - erf) / 2


def _pi() -> Decimal:
    """π at the current precision (Machin: 16 arctan(1/5) − 4 arctan(1/239))."""
    def arctan_inv(n: int) -> Decimal:
        x, total, k = Decimal(1) / n, Decimal(0), 0
        term = x
        while abs(term) > _SMALL * _SMALL:
            total += term / (2 * k + 1) * (-1) ** k
            k += 1
            term = term / (n * n)
        return total
    return 16 * arctan_inv(5) - 4 * arctan_inv(239)


def gaussian_tail_bounds(sigma2: Fraction, k: int) -> tuple[Decimal, Decimal]:
    """(lower, upper) bounds of P[Z ≥ k] (k ≥ 1, σ² ≥ 4) from Euler–Maclaurin to order 4, for σ² beyond
    :func:`gaussian_tail`'s reach: Σ_{z≥k} f(z) = ∫_k^∞ f + f(k)/2 − f′(k)/12 + f‴(k)/720 ± V/720 (V: the variation of
    f‴ on [k, ∞), from its extrema at σ√(3 ∓ √6)), over √(2πσ²) ≤ N ≤ √(2πσ²)(1 + 3e^{−2π²σ²}) (Poisson)."""
    s2 = dec(sigma2)
    s = s2.sqrt()
    pi = _pi()

    def f3(z: Decimal) -> Decimal:      # f‴(z), f(z) = e^{−z²/(2σ²)}
        return z / (s2 * s2) * (3 - z * z / s2) * (-(z * z) / (2 * s2)).exp()

    kk = Decimal(k)
    a, b = s * (3 - Decimal(6).sqrt()).sqrt(), s * (3 + Decimal(6).sqrt()).sqrt()
    points = [kk, *[e for e in (a, b) if e > kk]]
    values = [f3(p) for p in points] + [Decimal(0)]
    variation = sum(abs(u - v) for u, v in zip(values, values[1:]))
    f = (-(kk * kk) / (2 * s2)).exp()
    integral = s * (2 * pi).sqrt() * normal_tail(kk / s)
    middle = integral + f / 2 + kk * f / (12 * s2) + f3(kk) / 720
    root = (2 * pi * s2).sqrt()
    return (middle - variation / 720) / (root * (1 + 3 * (-2 * pi * pi * s2).exp())), (middle + variation / 720) / root


def gaussian_tail_range(sigma2: Fraction, k: int) -> tuple[Decimal, Decimal]:
    """(lower, upper) bounds of P[Z ≥ k] for the discrete Gaussian at any σ²: the lattice sum (both) up to
    σ² = 10⁵, :func:`gaussian_tail_bounds` beyond (relatively within about 10⁻⁹ of each other there; k ≤ 0 by
    symmetry, P[Z ≥ k] = 1 − P[Z ≥ 1 − k])."""
    if sigma2 <= 10**5:
        exact = gaussian_tail(sigma2, k)
        return exact, exact
    if k < 1:
        low, up = gaussian_tail_bounds(sigma2, 1 - k)
        return 1 - up, 1 - low
    return gaussian_tail_bounds(sigma2, k)
