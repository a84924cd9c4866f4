"""Exact Bernoulli decisions ``U < exp(-x)``: a certified float64 fast path and an exact fallback.

The samplers (:mod:`dpframe.noise.samplers`) reduce every random decision to comparing a uniform
U ∈ [0, 1) — an infinite string of fair bits — with a threshold p = exp(-x). Drawing the first 63
bits of U as an integer ``u`` places U in the cell [u, u + 1)·2⁻⁶³. Whenever the cell lies wholly
below or wholly above p the decision is known; that is decided here in vectorised float64 with
*certified* error bounds. In the rare remaining case (the cell straddles p, or the bounds are too
loose to tell — probability about 2⁻⁴⁰ per decision) the decision is made exactly by
:class:`LazyUniform`, which draws more bits of U and compares with :mod:`decimal` bounds of p at
growing precision. So every decision is the exact indicator ``U < p`` of the exact U: floats only
ever skip work whose outcome they have proved.

**The fast path** (:func:`exp_neg`). For x̂ ≥ 0 (a float64 within 2⁻⁴³ of the true x), let
K = ⌊x̂·2⁴⁸⌋ < 2⁵⁵ with base-2048 digits k₀..k₄. Then exp(-K·2⁻⁴⁸) = ∏ᵢ Eᵢ[kᵢ] with
Eᵢ[j] = exp(-j·2^(11i-48)), five tables of 2048 floats built once from 480-bit fixed-point integers
and rounded once to float64 (relative error ≤ 2⁻⁵³ + 2⁻⁸⁰). Every float64 operation used is an
IEEE-754 ``+ − × floor`` or a conversion, each with relative error ≤ u = 2⁻⁵² in any rounding mode
for the normal numbers involved (all values here are ≥ e⁻⁶¹ or exactly 0). Hence the product p̂ of
the five entries (4 multiplications) is within (1 + u)⁹ − 1 < 2⁻⁴⁸·⁸ of exp(-K·2⁻⁴⁸), and since the
true x lies in [K·2⁻⁴⁸ − 2⁻⁴³, (K + 1)·2⁻⁴⁸ + 2⁻⁴³]::

    p̂·(1 − 2⁻⁴²·⁹) ≤ exp(-x) ≤ p̂·(1 + 2⁻⁴²·⁹).

A caller may multiply p̂ once more by a float within u of an exact factor (the next Laplace
threshold) and still has |p − p̂| ≤ 2⁻⁴²·⁵·p̂: that is the bound :func:`decide` assumes. For
x̂ > :data:`X_MAX` the fast path returns p̂ = 0, meaning p < e⁻⁵⁹·⁹⁹ < 2⁻⁸⁶ — below every cell but
the first (u = 0), which :func:`decide` leaves undecided. (Subnormal p̂, from a caller's factor, carry
an absolute error below 2⁻¹⁰⁷⁴: immaterial against cells of 2⁻⁶³.)

**The decision** (:func:`decide`). With û = fl(u)·2⁻⁶³ (|û − u·2⁻⁶³| ≤ u·û): "U < p" is certain
when fl(û + 2⁻⁶²) < fl(p̂·(1 − 2⁻⁴¹)), since then (u + 1)·2⁻⁶³ ≤ (û + 2⁻⁶²)(1 + 2⁻⁵¹·⁹) <
p̂(1 − 2⁻⁴¹)(1 + 2⁻⁵⁰) < p̂(1 − 2⁻⁴²·⁵) ≤ p; "U ≥ p" is certain when û > fl(p̂·(1 + 2⁻⁴¹)), since
then u·2⁻⁶³ ≥ û/(1 + u) > p̂(1 + 2⁻⁴¹)(1 − 2⁻⁵⁰) > p̂(1 + 2⁻⁴²·⁵) ≥ p. (For p̂ = 0 the second test
is u ≥ 1, and p < 2⁻⁸⁶ < 2⁻⁶³ ≤ U.) A comparison is left undecided with probability about
2⁻⁴⁰·p — or, for thresholds packed closer than that, about one over their spacing times 2⁻⁴⁰.

**The fallback** (:class:`LazyUniform`, :func:`exp_neg_bounds`). Decimal's ``exp`` is correctly
rounded (half-even; Python's documentation), so stepping one unit outward gives rigorous bounds;
x is first rounded outward (floor/ceiling contexts), and every Decimal operation runs in a context of
this module's own (never the application's global one). U is extended 64 bits at a time. Since p is
irrational for rational x ≠ 0 (Lindemann) — and p = 1 for x = 0 is decided at once — the loop ends
with probability 1.

Example:
    >>> import numpy as np
    >>> p = exp_neg(np.array([0.0, 1.0, 100.0]))
    >>> [round(float(v), 12) for v in p]
    [1.0, 0.367879441171, 0.0]
    >>> yes, no = decide(np.array([0.1, 0.9]), p[1:2].repeat(2))
    >>> yes.tolist(), no.tolist()
    ([True, False], [False, True])

"""

from __future__ import annotations

import decimal
import functools
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpframe.noise.random import RandomSource

__all__ = ["X_MAX", "LazyUniform", "decide", "exp_neg", "exp_neg_bounds", "uniform_cells"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

X_MAX = 60.0
"""Above this x̂ the fast path returns 0 (the true p is below 2⁻⁸⁶)."""

_FRAC_BITS = 48
_DIGIT_BITS = 11
_DIGITS = 5
_FIXED_BITS = 480
_MASK = np.int64((1 << _DIGIT_BITS) - 1)
_SHIFTS = [np.int64(_DIGIT_BITS * i) for i in range(_DIGITS)]   # (numpy scalars: no conversion per call)
_LOWER = 1.0 - 2.0**-41      # margins of decide(): wider than the certified 2^-42.5
_UPPER = 1.0 + 2.0**-41
_CELL = 2.0**-62             # more than one cell (2^-63) on top of û's rounding
_MASK63 = np.uint64(2**63 - 1)
_LN2_ABOVE = Fraction(6932, 10000)   # > ln 2


@functools.cache
def _tables() -> tuple[FloatArray, ...]:
    """Eᵢ[j] = exp(-j·2^(11i-48)) for i < 5, j < 2048, each within 2⁻⁵³ + 2⁻⁸⁰ (relative) of the truth.

    Built from a₁ = ⌊2⁴⁸⁰·exp(-2^(11i-48))⌋ (Decimal, 170 digits) and aⱼ = ⌊aⱼ₋₁·a₁/2⁴⁸⁰⌋: each step
    loses less than 2 units, so aⱼ is within 2j units of 2⁴⁸⁰·Eᵢ[j] ≥ 2⁴⁸⁰·e⁻¹²⁸ > 2²⁹⁴ units; the
    final ``int / int`` is correctly rounded (CPython's true division of integers).
    """
    one = 1 << _FIXED_BITS
    tables = []
    ctx = _context(170, decimal.ROUND_HALF_EVEN)     # its own context: the application's never applies
    for i in range(_DIGITS):
        step = ctx.power(2, _DIGIT_BITS * i - _FRAC_BITS)                    # exact at 170 digits
        a1 = int(ctx.multiply(ctx.exp(step.copy_negate()), Decimal(one)))
        values, a = [1.0], one
        for _ in range(1, 1 << _DIGIT_BITS):
            a = (a * a1) >> _FIXED_BITS
            values.append(a / one)
        tables.append(np.array(values, dtype=np.float64))
    return tuple(tables)


def exp_neg(x: FloatArray) -> FloatArray:
    """p̂ with |exp(-x_true) − p̂| ≤ 2⁻⁴²·⁹·p̂, for float64 ``x`` ≥ 0 within 2⁻⁴³ of x_true (0 above X_MAX).

    Negative x̂ (a true x ≥ 0 rounded below zero) count as 0. No NaN allowed (callers route them to
    the exact fallback).

    Example:
        >>> float(exp_neg(np.array([2.0**-48]))[0]) == float(np.exp(-(2.0**-48)))
        True

    """
    tables = _tables()
    k = (np.clip(x, 0.0, X_MAX) * 2.0**_FRAC_BITS).astype(np.int64)    # truncation = floor here
    p = tables[0].take(k & _MASK)
    digit = np.empty_like(k)
    for i in range(1, _DIGITS):
        np.right_shift(k, _SHIFTS[i], out=digit)
        digit &= _MASK
        p *= tables[i].take(digit)
    p[x > X_MAX] = 0.0
    return p


def uniform_cells(words: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """The low 63 bits ``u`` of each word (U's first 63 bits) and û = fl(u)·2⁻⁶³."""
    u = (words & _MASK63).view(np.int64)
    return u, u.astype(np.float64) * 2.0**-63


def decide(u_hat: FloatArray, p_hat: FloatArray) -> tuple[BoolArray, BoolArray]:
    """(surely U < p, surely U ≥ p) for U in the cell of ``u_hat`` and |p − p̂| ≤ 2⁻⁴²·⁵·p̂ (see module).

    Example:
        >>> decide(np.array([0.5]), np.array([0.5]))        # straddling: neither is certain
        (array([False]), array([False]))

    """
    return (u_hat + _CELL) < p_hat * _LOWER, u_hat > p_hat * _UPPER


def exp_neg_bounds(x: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """Rational bounds lo ≤ exp(-x) ≤ hi, about ``digits`` significant digits apart (or [0, 2^(-4·digits)]).

    For x ≥ 4·digits·ln 2 the bounds are [0, 2^(-4·digits)] (valid, and tight enough for every comparison
    with fewer than 4·digits bits); a caller needing more raises ``digits``. So a huge x (say 2⁹⁰⁰) never
    builds a Decimal or Fraction of that size. Decimal arithmetic runs in contexts of its own (never the
    application's).

    Example:
        >>> lo, hi = exp_neg_bounds(Fraction(1), 30)
        >>> lo < Fraction(36787944117144232159552377016146, 10**32) < hi, float(hi - lo) < 1e-29
        (True, True)

    """
    if x == 0:
        return Fraction(1), Fraction(1)
    if x >= 4 * digits * _LN2_ABOVE:             # exp(-x) ≤ 2^(-4·digits): enough until a caller asks for more
        return Fraction(0), Fraction(1, 1 << (4 * digits))
    ctx = _context(digits, decimal.ROUND_HALF_EVEN)
    num, den = Decimal(x.numerator), Decimal(x.denominator)
    x_lo = _context(digits, decimal.ROUND_FLOOR).divide(num, den)
    x_hi = _context(digits, decimal.ROUND_CEILING).divide(num, den)
    # copy_negate is exact (unary minus would round in the application's global context); exp is correctly
    # rounded, so one unit outward is safe
    lo = ctx.next_minus(ctx.exp(x_hi.copy_negate()))
    hi = ctx.next_plus(ctx.exp(x_lo.copy_negate()))
    return max(Fraction(lo), Fraction(0)), Fraction(hi)


def _context(digits: int, rounding: str) -> decimal.Context:
    return decimal.Context(prec=digits, rounding=rounding, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX, traps=[])


class LazyUniform:
    """A uniform U ∈ [0, 1) known by its first ``bits`` bits, extended from ``rng`` 64 bits at a time.

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> U = LazyUniform(2**62, 63, SeededRandomSource(0))           # U ∈ [1/2, 1/2 + 2⁻⁶³)
        >>> U.below(lambda digits: exp_neg_bounds(Fraction(1, 2), digits))   # e^-½ ≈ 0.607
        True

    """

    def __init__(self, prefix: int, bits: int, rng: RandomSource) -> None:
        self.prefix, self.bits, self._rng = prefix, bits, rng

    def below(self, bounds: Callable[[int], tuple[Fraction, Fraction]]) -> bool:
        """Exactly ``U < p``, given ``bounds(digits)`` → (lo, hi) ∋ p that tighten as ``digits`` grows.

        ``bounds`` receives public values only: the number of digits asked for.
        """
        digits = 40
        while True:
            lo, hi = bounds(digits)
            a = Fraction(self.prefix, 1 << self.bits)
            b = a + Fraction(1, 1 << self.bits)
            if b <= lo:
                return True
            if a >= hi:
                return False
            if hi - lo < b - a:
                self.prefix = (self.prefix << 64) | int(self._rng.random_uint64(1)[0])
                self.bits += 64
            else:
                digits *= 2
