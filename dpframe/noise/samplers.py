"""Exact, vectorized samplers for discrete Laplace and discrete Gaussian noise.

The algorithms are those of Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential
Privacy" (NeurIPS 2020; "CKS20" below): Algorithm 1 (Bernoulli(exp(-γ)) for rational γ), Algorithm 2
(discrete Laplace with rational scale) and Algorithm 3 (discrete Gaussian with rational σ²). Every
accept/reject decision is an exact integer comparison ``U < n`` with ``U`` uniform on ``[0, d)`` (a
Bernoulli(n/d) draw), or a fair bit; no floating-point ``exp``/``log`` ever decides anything. Floats
are used only to size batches and in :func:`discrete_laplace_tail` / :func:`discrete_laplace_variance`,
which are reporting helpers, not samplers.

The samplers work on numpy arrays of candidates with "still active" index sets and loop over rejection
rounds, whose number is small in expectation (a logarithmic number of rounds per batch). Integers that
fit in 64 bits are handled natively; larger ones (huge denominators, or the square in the Gaussian
acceptance test) use exact two-limb (128-bit) integer arithmetic or, beyond that, Python ints in object
arrays. Nothing is ever rounded.

Parameters (``gamma``, ``scale``, ``sigma2``) are exact rationals: ``int``, ``fractions.Fraction`` (or
any ``numbers.Rational``), ``decimal.Decimal`` or ``float``. A float is converted *exactly* to the
binary fraction it stores (``0.1`` becomes ``3602879701896397/36028797018963968``), so pass
``Fraction(1, 10)`` when you mean one tenth. NaN and infinities are rejected.

Example:
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource, discrete_laplace
    >>> z = discrete_laplace(Fraction(7, 2), 1000, SeededRandomSource(0))
    >>> z.dtype, z.shape
    (dtype('int64'), (1000,))

"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from numbers import Rational
from typing import Any

import numpy as np
import numpy.typing as npt

from dpframe.noise.random import RandomSource, check_size

__all__ = [
    "MAX_GAUSSIAN_SIGMA2",
    "MAX_LAPLACE_SCALE",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "discrete_laplace_tail",
    "discrete_laplace_variance",
]

#: What the samplers accept as an exact rational parameter (floats and Decimals are converted exactly).
RationalLike = Fraction | int | float | Decimal | np.integer[Any] | np.floating[Any]

IntArray = npt.NDArray[Any]  # int64, or object (Python ints) when values may exceed 64 bits
BoolArray = npt.NDArray[np.bool_]
Index = npt.NDArray[np.intp]

_INT64_MAX = 2**63 - 1
_MASK64 = 2**64 - 1

#: Largest accepted discrete Laplace scale. Outputs are int64; at this scale a draw exceeds 2**63 in
#: magnitude with probability about exp(-64) ≈ 1.6e-28 (if it ever happens, OverflowError is raised).
MAX_LAPLACE_SCALE = Fraction(2**57)
#: Largest accepted discrete Gaussian σ² (σ ≤ 2**55), for the same int64 reason.
MAX_GAUSSIAN_SIGMA2 = Fraction(2**110)


# --------------------------------------------------------------------------------------------------
# Parameter handling


def _exact(value: object, name: str) -> Fraction:
    """``value`` as an exact Fraction; floats/Decimals converted exactly, NaN/inf rejected."""
    fix = "pass a finite rational such as Fraction(1, 2) or an int"
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a rational number, got a bool; {fix}")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(float(value)):
            raise ValueError(f"{name} must be finite, got {value!r}; {fix}")
        return Fraction(float(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{name} must be finite, got {value!r}; {fix}")
        return Fraction(value)
    raise TypeError(f"{name} must be an int, Fraction, Decimal or float, got {type(value).__name__}; {fix}")


def _positive(value: object, name: str, maximum: Fraction | None = None) -> Fraction:
    x = _exact(value, name)
    if x <= 0:
        raise ValueError(f"{name} must be > 0, got {x}; pass a positive rational such as Fraction(1, 2)")
    if maximum is not None and x > maximum:
        raise ValueError(f"{name} must be <= {maximum} (int64 outputs), got {x}; "
                         f"rescale the statistic so that less noise (in grid units) is needed")
    return x


def _check_rng(rng: object) -> RandomSource:
    if not (hasattr(rng, "random_uint64") and hasattr(rng, "uniform_below")):
        raise TypeError(f"rng must be a dpframe RandomSource, got {type(rng).__name__}; "
                        f"pass dpframe.noise.default_source() (numpy generators are not accepted)")
    return rng  # type: ignore[return-value]


def _float(x: Fraction) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


# --------------------------------------------------------------------------------------------------
# Elementary exact draws


def _bits(n: int, rng: RandomSource) -> BoolArray:
    """``n`` fair coins (True with probability exactly 1/2), 64 per random word."""
    words = np.ascontiguousarray(rng.random_uint64(-(-n // 64)), dtype=np.uint64)
    return np.unpackbits(words.view(np.uint8))[:n].astype(bool)


def _bernoulli_inv(K: int, n: int, rng: RandomSource) -> BoolArray:
    """``n`` Bernoulli(1/K) draws: ``uniform_below(K) == 0``."""
    if K == 1:
        return np.ones(n, dtype=bool)
    if K == 2:
        return _bits(n, rng)
    return np.asarray(rng.uniform_below(K, n) == 0, dtype=bool)


def _bernoulli_exp_one(n: int, rng: RandomSource) -> BoolArray:
    """``n`` Bernoulli(exp(-1)) draws: CKS20 Algorithm 1 with γ = 1, vectorized over rounds."""
    out = np.empty(n, dtype=bool)
    idx: Index = np.arange(n)
    K = 2  # round K = 1 draws Bernoulli(γ/1) = Bernoulli(1), which always continues
    while idx.size:
        a = _bernoulli_inv(K, idx.size, rng)
        out[idx[~a]] = K % 2 == 1
        idx = idx[a]
        K += 1
    return out


def _geometric_exp1(n: int, rng: RandomSource) -> npt.NDArray[np.int64]:
    """``n`` draws of V with P[V = v] = (1 - e^-1) e^-v: successes of Bernoulli(e^-1) before a failure."""
    v = np.zeros(n, dtype=np.int64)
    idx: Index = np.arange(n)
    while idx.size:
        idx = idx[_bernoulli_exp_one(idx.size, rng)]
        v[idx] += 1
    return v


def _bernoulli_exp_parts(k: IntArray, has_frac: BoolArray,
                         frac: Callable[[Index], BoolArray], rng: RandomSource) -> BoolArray:
    """Bernoulli(exp(-(k_i + f_i))) for integers k_i >= 0 and f_i in [0, 1) (CKS20 Algorithm 1).

    ``frac(idx)`` returns independent Bernoulli(f_i) draws for the elements ``idx``; ``has_frac`` is
    False exactly where f_i = 0. exp(-(k + f)) = exp(-1)^k · exp(-f): element i needs k_i successes
    of Bernoulli(exp(-1)) and then one success of the von Neumann loop for exp(-f_i), in which round
    K draws Bernoulli(f_i / K) as the product of independent Bernoulli(1/K) and Bernoulli(f_i).
    """
    n = k.shape[0]
    alive = np.ones(n, dtype=bool)
    idx: Index = np.flatnonzero(np.asarray(k > 0, dtype=bool))
    j = 0
    while idx.size:  # integer part: element i survives round j < k_i with probability e^-1
        ok = _bernoulli_exp_one(idx.size, rng)
        alive[idx[~ok]] = False
        idx = idx[ok]
        j += 1
        idx = idx[np.asarray(k[idx] > j, dtype=bool)]
    idx = np.flatnonzero(alive & has_frac)  # f = 0 gives exp(0) = 1: nothing to draw
    K = 1
    while idx.size:  # fractional part: loop until A = 0; the output is 1 iff that round K is odd
        a = _bernoulli_inv(K, idx.size, rng)
        a[a] = frac(idx[a])
        if K % 2 == 0:
            alive[idx[~a]] = False
        idx = idx[a]
        K += 1
    return alive


def _divmod_exact(num: IntArray, den: int) -> tuple[IntArray, IntArray]:
    """(num // den, num % den) for an int64 or object array ``num >= 0``; int64 results when they fit."""
    k: IntArray
    r: IntArray
    if num.dtype == object:
        k = num // den
        r = num - k * den
        if num.size and int(k.max()) <= _INT64_MAX:
            k = k.astype(np.int64)
        if den <= _INT64_MAX:
            r = r.astype(np.int64)
    elif den > _INT64_MAX:
        k, r = np.zeros(num.shape[0], dtype=np.int64), num
    else:
        k, r = np.divmod(num, np.int64(den))
    return k, r


def _bernoulli_exp_kr(k: IntArray, r: IntArray, den: int, rng: RandomSource) -> BoolArray:
    """Bernoulli(exp(-(k_i + r_i/den))) for integer arrays k >= 0 and 0 <= r < den."""

    def frac(idx: Index) -> BoolArray:  # Bernoulli(r/den) = [U < r], U uniform on [0, den)
        return np.asarray(rng.uniform_below(den, idx.size) < r[idx], dtype=bool)

    return _bernoulli_exp_parts(k, np.asarray(r != 0, dtype=bool), frac, rng)


def bernoulli_exp_ratio(num: IntArray, den: int, rng: RandomSource) -> BoolArray:
    """One Bernoulli(exp(-num_i / den)) per element: an int64 or object array ``num >= 0``, an int ``den >= 1``.

    Exact (the algorithm of :func:`bernoulli_exp`, vectorised over different γᵢ = numᵢ/den).

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> bernoulli_exp_ratio(np.array([0, 0, 10**6]), 3, SeededRandomSource(0)).tolist()
        [True, True, False]

    """
    k, r = _divmod_exact(num, den)
    return _bernoulli_exp_kr(k, r, den, rng)


def bernoulli_exp(gamma: RationalLike, size: int, rng: RandomSource) -> BoolArray:
    """``size`` independent draws of Bernoulli(exp(-gamma)) for a rational ``gamma >= 0``.

    Correctness (CKS20 Algorithm 1): write γ = k + f with k = floor(γ), f in [0, 1). For f, run the
    von Neumann loop K = 1, 2, ...: draw A ~ Bernoulli(f/K) (as Bernoulli(1/K)·Bernoulli(f), each an
    exact comparison ``uniform_below(d) < n``) and stop at the first A = 0; the probability of stopping
    after exactly K trials is f^(K-1)/(K-1)! - f^K/K!, so P[K odd] = Σ (-f)^j/j! = exp(-f). The integer
    part multiplies k independent Bernoulli(exp(-1)) draws, made by the same loop with γ = 1, so the
    output is True with probability exp(-1)^k · exp(-f) = exp(-γ) exactly.

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource
        >>> bernoulli_exp(Fraction(1, 3), 4, SeededRandomSource(0)).dtype
        dtype('bool')
        >>> bool(bernoulli_exp(0, 10, SeededRandomSource(0)).all())
        True

    """
    g = _exact(gamma, "gamma")
    if g < 0:
        raise ValueError(f"gamma must be >= 0, got {g}; pass a non-negative rational such as Fraction(1, 3)")
    size = check_size(size)
    rng = _check_rng(rng)
    den = g.denominator
    whole, rem = divmod(g.numerator, den)
    k = np.full(size, whole, dtype=np.int64 if whole <= _INT64_MAX else object)

    def frac(idx: Index) -> BoolArray:
        return np.asarray(rng.uniform_below(den, idx.size) < rem, dtype=bool)

    return _bernoulli_exp_parts(k, np.full(size, rem != 0), frac, rng)


# --------------------------------------------------------------------------------------------------
# Discrete Laplace (CKS20 Algorithm 2)


def _fill(size: int, rate: float,
          candidates: Callable[[int], npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
    """Collect ``size`` accepted draws from batches of iid candidates (``rate`` only sizes batches)."""
    out = np.empty(size, dtype=np.int64)
    filled = 0
    rate = min(max(rate, 0.05), 1.0)
    while filled < size:
        need = size - filled
        got = candidates(int(need / rate * 1.03) + 16)
        take = min(need, got.size)
        out[filled:filled + take] = got[:take]  # accepted candidates are iid: the first `take` are iid too
        filled += take
    return out


def _laplace_rate(t: int, s: int) -> float:
    """Approximate acceptance rate of one Algorithm 2 attempt (batch sizing only)."""
    inv_t = _float(Fraction(1, t))
    if t == 1:
        p_keep_u = 1.0
    elif inv_t < 1e-9:
        p_keep_u = 1 - math.exp(-1)
    else:
        p_keep_u = (1 - math.exp(-1)) / (-math.expm1(-inv_t) / inv_t)
    p_zero = -math.expm1(-_float(Fraction(s, t)))
    return p_keep_u * (1 - p_zero / 2)


def _fold(u: IntArray, v: npt.NDArray[np.int64], t: int, s: int) -> npt.NDArray[np.int64]:
    """floor((u + t·v) / s) exactly, as int64 (int64 arithmetic when it cannot overflow, else Python ints)."""
    n = u.shape[0]
    vmax = int(v.max()) if n else 0
    if u.dtype != object and t * (vmax + 1) <= _INT64_MAX:  # u < t, so u + t·v < t·(vmax + 1)
        x = u + np.int64(t) * v
        y: IntArray = x // np.int64(s) if s <= _INT64_MAX else np.zeros(n, dtype=np.int64)
        return y
    y = (u.astype(object) + v.astype(object) * t) // s
    if n and int(y.max()) > _INT64_MAX:
        raise OverflowError("a discrete Laplace draw does not fit in int64; use a smaller scale")
    out: npt.NDArray[np.int64] = y.astype(np.int64)
    return out


def _laplace_candidates(t: int, s: int, m: int, rng: RandomSource) -> npt.NDArray[np.int64]:
    """One vectorized attempt of CKS20 Algorithm 2 on ``m`` candidates (scale t/s); returns the accepted."""
    u: IntArray
    if t == 1:
        u = np.zeros(m, dtype=np.int64)
    else:
        u = rng.uniform_below(t, m)
        u = u[_bernoulli_exp_kr(np.zeros(m, dtype=np.int64), u, t, rng)]  # P[U = u | kept] ∝ exp(-u/t)
    n = u.shape[0]
    v = _geometric_exp1(n, rng)  # P[V = v] ∝ exp(-v)
    y = _fold(u, v, t, s)  # Y = floor((U + tV)/s)
    neg = _bits(n, rng)
    keep = ~(neg & (y == 0))  # "-0" is rejected so that 0 is not counted twice
    z: npt.NDArray[np.int64] = np.where(neg, -y, y)[keep]
    return z


def _laplace(t: int, s: int, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
    return _fill(size, _laplace_rate(t, s), lambda m: _laplace_candidates(t, s, m, rng))


def discrete_laplace(scale: RationalLike, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
    """``size`` independent draws Z with P[Z = x] ∝ exp(-|x| / scale), as int64.

    ``scale`` = t/s is an exact positive rational (a float is converted exactly), at most
    :data:`MAX_LAPLACE_SCALE`. Adding Z to an integer statistic of L1 sensitivity Δ is (Δ/scale)-DP.

    Correctness (CKS20 Algorithm 2): U uniform on {0, ..., t-1} is kept with probability exp(-U/t)
    (Algorithm 1), so P[U = u] ∝ exp(-u/t); V counts Bernoulli(exp(-1)) successes before the first
    failure, so P[V = v] ∝ exp(-v). Then X = U + tV has P[X = x] ∝ exp(-x/t) on x >= 0 (each x has one
    (u, v)), and Y = floor(X/s) sums s consecutive terms: P[Y = y] ∝ exp(-ys/t). A fair sign B gives
    ±Y; rejecting (B = negative, Y = 0) and restarting leaves every z ≠ 0 with mass ∝ exp(-|z|s/t)/2
    and z = 0 with mass ∝ 1/2, i.e. P[Z = z] ∝ exp(-|z|/scale) exactly. Rejected attempts are retried
    with fresh randomness, and accepted candidates of a batch are iid, so the output is iid.

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource
        >>> z = discrete_laplace(Fraction(1, 3), 5, SeededRandomSource(0))
        >>> z.dtype, len(z)
        (dtype('int64'), 5)

    """
    lam = _positive(scale, "scale", MAX_LAPLACE_SCALE)
    size = check_size(size)
    return _laplace(lam.numerator, lam.denominator, size, _check_rng(rng))


def discrete_laplace_variance(scale: RationalLike) -> float:
    """Variance of the discrete Laplace with this scale t: 2 e^{-1/t} / (1 - e^{-1/t})².

    Computed as ``2·exp(-x) / expm1(-x)**2`` with x = 1/t (accurate for all t), and by the series
    2t² - 1/6 when x < 1e-8. A reporting helper: floats, never used to sample.

    Example:
        >>> round(discrete_laplace_variance(1), 6)
        1.841347
        >>> round(discrete_laplace_variance(1000) / 2e6, 6)
        1.0

    """
    lam = _positive(scale, "scale")
    x = _float(1 / lam)
    if x > 1e-8:
        q = math.exp(-x) if x < 800 else 0.0
        d = -math.expm1(-x)
        return 2 * q / (d * d)
    return _float(2 * lam * lam) - 1 / 6


def discrete_laplace_tail(scale: RationalLike, k: int) -> float:
    """P[Z >= k] for Z discrete Laplace with scale t: e^{-k/t} / (1 + e^{-1/t}) for k >= 1.

    Evaluated in log space, ``exp(-k/t - log1p(exp(-1/t)))``, with k/t formed exactly before the one
    rounding to float, so it neither overflows nor loses relative accuracy in the far tail. For k <= 0
    it returns 1 - P[Z >= 1 - k] (symmetry). P[|Z| >= k] is twice the value for k >= 1.

    Example:
        >>> round(discrete_laplace_tail(1, 1), 6)   # e^-1 / (1 + e^-1)
        0.268941
        >>> discrete_laplace_tail(10, 10_000) < 1e-300
        True

    """
    lam = _positive(scale, "scale")
    if isinstance(k, bool):
        raise TypeError("k must be an int, got a bool; pass an integer threshold")
    try:
        kk = operator.index(k)
    except TypeError:
        raise TypeError(f"k must be an int, got {type(k).__name__}; pass an integer threshold") from None
    if kk <= 0:
        return 1.0 - discrete_laplace_tail(lam, 1 - kk)
    log_p = -_float(Fraction(kk) / lam) - math.log1p(math.exp(-_float(1 / lam)))
    return math.exp(log_p) if log_p > -800 else 0.0


# --------------------------------------------------------------------------------------------------
# Discrete Gaussian (CKS20 Algorithm 3)


def _uniform_below_128(bound: int, n: int, rng: RandomSource) -> tuple[npt.NDArray[np.uint64], ...]:
    """``n`` exact uniform draws in [0, bound), bound < 2**127, as (high, low) 64-bit limbs."""
    if bound <= 2**63:
        return np.zeros(n, dtype=np.uint64), rng.uniform_below(bound, n).astype(np.uint64)
    b_hi, b_lo = np.uint64(bound >> 64), np.uint64(bound & _MASK64)
    hi = rng.uniform_below(int(b_hi) + 1, n).astype(np.uint64)
    lo = np.array(rng.random_uint64(n), dtype=np.uint64)
    bad = np.flatnonzero((hi == b_hi) & (lo >= b_lo))  # uniform on [0, (b_hi+1)·2^64), keep < bound
    while bad.size:
        hi[bad] = rng.uniform_below(int(b_hi) + 1, bad.size)
        lo[bad] = rng.random_uint64(bad.size)
        bad = bad[(hi[bad] == b_hi) & (lo[bad] >= b_lo)]
    return hi, lo


def _square_u128(x: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """x² as (high, low) 64-bit limbs, exactly, for 0 <= x < 2**62."""
    h, low = x >> np.uint64(32), x & np.uint64(0xFFFFFFFF)  # x = h·2^32 + low, h < 2^30
    ll, cross = low * low, np.uint64(2) * h * low           # ll < 2^64, cross = 2·h·low < 2^63
    sq_lo = ll + (cross << np.uint64(32))                   # wraps mod 2^64; the carry is added below
    sq_hi = h * h + (cross >> np.uint64(32)) + (sq_lo < ll).astype(np.uint64)
    return sq_hi, sq_lo


def _floor_square_div(x: npt.NDArray[np.uint64], D: int, kmax: int) -> npt.NDArray[np.int64]:
    """floor(x² / D) for 0 <= x with x² // D <= kmax, by integer thresholds (no wide products needed).

    x² >= j·D  <=>  x >= ceil(sqrt(j·D)), so floor(x²/D) counts the thresholds ceil(sqrt(j·D)) <= x.
    """
    roots = np.array([math.isqrt(j * D - 1) + 1 for j in range(1, kmax + 1)], dtype=np.uint64)
    return np.searchsorted(roots, x, side="right").astype(np.int64)


def _limbs(values: list[int]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    return (np.array([v >> 64 for v in values], dtype=np.uint64),
            np.array([v & _MASK64 for v in values], dtype=np.uint64))


def _sum_less_u128(a_hi: npt.NDArray[np.uint64], a_lo: npt.NDArray[np.uint64], b_hi: npt.NDArray[np.uint64],
                   b_lo: npt.NDArray[np.uint64], c_hi: npt.NDArray[np.uint64],
                   c_lo: npt.NDArray[np.uint64]) -> BoolArray:
    """Exactly a + b < c for 128-bit limb pairs with a + b < 2**128."""
    s_lo = a_lo + b_lo
    s_hi = a_hi + b_hi + (s_lo < a_lo).astype(np.uint64)
    out: BoolArray = (s_hi < c_hi) | ((s_hi == c_hi) & (s_lo < c_lo))
    return out


def _accept_wide(absm: npt.NDArray[np.uint64], D: int, kmax: int, rng: RandomSource) -> BoolArray:
    """Bernoulli(exp(-m²/D)) for |m| < 2**62, D < 2**126, m²/D <= kmax, in exact 128-bit limbs."""
    k = _floor_square_div(absm, D, kmax)
    sq_hi, sq_lo = _square_u128(absm)
    kd_hi, kd_lo = _limbs([j * D for j in range(kmax + 1)])
    has_frac = (sq_hi != kd_hi[k]) | (sq_lo != kd_lo[k])

    def frac(idx: Index) -> BoolArray:
        # Bernoulli(r/D) with r = m² - kD: U < r  <=>  U + kD < m²  (U uniform on [0, D)).
        u_hi, u_lo = _uniform_below_128(D, idx.size, rng)
        kk = k[idx]
        return _sum_less_u128(u_hi, u_lo, kd_hi[kk], kd_lo[kk], sq_hi[idx], sq_lo[idx])

    return _bernoulli_exp_parts(k, has_frac, frac, rng)


def _gaussian_accept(a: npt.NDArray[np.int64], A: int, P: int, D: int, rng: RandomSource) -> BoolArray:
    """Bernoulli(exp(-(a·A - P)² / D)) per element, choosing the cheapest exact arithmetic."""
    if a.size == 0:
        return np.zeros(0, dtype=bool)
    M = max(int(a.max()) * A - P, P)  # max |m| over the batch (m ranges over [-P, amax·A - P])
    if M >= 2**62 or A > _INT64_MAX:
        mo = a.astype(object) * A - P
        return bernoulli_exp_ratio(mo * mo, D, rng)
    m = a * np.int64(A) - np.int64(P)  # a·A <= M + P <= 2M < 2^63
    if M * M <= _INT64_MAX and D <= _INT64_MAX:
        return bernoulli_exp_ratio(m * m, D, rng)
    kmax = M * M // D
    absm = np.abs(m).astype(np.uint64)
    if D < 2**126 and kmax <= 2**14:
        return _accept_wide(absm, D, kmax, rng)
    mo = absm.astype(object)
    return bernoulli_exp_ratio(mo * mo, D, rng)


def _gaussian_rate(sigma2: Fraction, t: int) -> float:
    """Approximate acceptance rate of Algorithm 3 (batch sizing only)."""
    s2 = max(float(sigma2), 1e-300)
    sigma = math.sqrt(s2)
    if sigma >= 2:
        norm_g = math.sqrt(2 * math.pi) * sigma
    else:
        norm_g = 1 + 2 * sum(math.exp(-y * y / (2 * s2)) for y in range(1, 61))
    norm_l = 1 / math.tanh(1 / (2 * t))
    return norm_g * math.exp(-s2 / (2 * t * t)) / norm_l


def discrete_gaussian(sigma2: RationalLike, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
    """``size`` independent draws Z with P[Z = x] ∝ exp(-x² / (2·sigma2)), as int64.

    ``sigma2`` is an exact positive rational (a float is converted exactly), at most
    :data:`MAX_GAUSSIAN_SIGMA2`. Adding Z to an integer statistic of L2 sensitivity Δ is
    (Δ²/(2σ²))-zCDP (CKS20 Thm. 14). The variance of Z is strictly less than σ² (CKS20 Cor. 9), so σ²
    is a safe upper bound for accuracy reporting.

    Correctness (CKS20 Algorithm 3): with t = floor(σ) + 1, draw Y from the discrete Laplace with scale
    t (Algorithm 2) and accept it with probability exp(-(|Y| - σ²/t)² / (2σ²)) (Algorithm 1). Expanding,
    exp(-|y|/t) · exp(-(|y| - σ²/t)²/(2σ²)) = exp(-y²/(2σ²)) · exp(-σ²/(2t²)), whose second factor
    does not depend on y, so accepted values have P[Z = y] ∝ exp(-y²/(2σ²)) exactly. With σ² = p/q
    the exponent is m²/D for the integers m = |Y|·q·t - p and D = 2·p·q·t² (both divided by
    g = gcd(q·t, p), g² respectively), so the test is an exact integer Bernoulli(exp(-m²/D)).

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource
        >>> z = discrete_gaussian(Fraction(9, 2), 5, SeededRandomSource(0))
        >>> z.dtype, len(z)
        (dtype('int64'), 5)

    """
    s2 = _positive(sigma2, "sigma2", MAX_GAUSSIAN_SIGMA2)
    size = check_size(size)
    rng = _check_rng(rng)
    p, q = s2.numerator, s2.denominator
    t = math.isqrt(p // q) + 1  # floor(sqrt(p/q)) = isqrt(floor(p/q))
    g = math.gcd(q * t, p)
    A, P, D = q * t // g, p // g, 2 * p * q * t * t // (g * g)

    def candidates(m: int) -> npt.NDArray[np.int64]:
        y = _laplace(t, 1, m, rng)
        out: npt.NDArray[np.int64] = y[_gaussian_accept(np.abs(y), A, P, D, rng)]
        return out

    return _fill(size, _gaussian_rate(s2, t), candidates)
