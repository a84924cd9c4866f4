"""Moments of the Gaussian sparse vector (thesis Ch. 7, digest 004 §5.2, with the digest's corrections).

:func:`gaussian_svt_log_moments` bounds E_z[P[ν ≥ T + z]^{−γ}] for discrete Gaussian threshold noise z and
query noise ν, the moment in the c = 1 nonnegative-query bound (7.2); :func:`log_binomial_sum` counts the
outputs of a length-capped stream (Thm 7.2.7). Every piece is an upper bound (see the functions).

Example:
    >>> round(log_binomial_sum(3, 1), 6)       # log(1 + 3)
    1.386294

"""

from __future__ import annotations

import math

import numpy as np

from dpframe.accounting.numerics.common import Array, special
from dpframe.errors import BudgetError
from dpframe.sealed import frozen_array

#: Orders γ of the Hölder step in (7.2), as fractions of the way from 1 to (σ₂/σ₁)² (where the moment diverges).
SVT_GAMMA_FRACTIONS = frozen_array([0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65,
                                     0.7, 0.75, 0.8, 0.85, 0.9])

_TERMS = 64          # pmf terms summed exactly before a tail is bounded by an integral
_MOMENT_POINTS = 40_000   # beyond this many integers z, the moment sum is bounded block by block


def log_norm_bounds(s: float) -> tuple[float, float]:
    """(lower, upper) bounds of log Σ_{x∈ℤ} exp(−x²/(2s²)) (direct sum + integral tail; Poisson summation)."""
    sp = special()
    x = np.arange(1, _TERMS + 1, dtype=np.float64)
    direct = 1 + 2 * float(np.exp(-x * x / (2 * s * s)).sum())
    # Σ_{x>J} f(x) ≤ ∫_J^∞ f (f decreasing); Poisson: Z = √(2π)s·Σ_k exp(−2π²s²k²) ≥ √(2π)s
    upper = direct + 2 * s * math.sqrt(2 * math.pi) * float(sp.ndtr(-_TERMS / s))
    root = math.sqrt(2 * math.pi) * s
    q = math.exp(-2 * math.pi ** 2 * s * s)
    if q < 0.5:
        upper = min(upper, root * (1 + 2 * q / (1 - q)))
    return math.log(max(direct, root)), math.log(upper)


def log_tail_lower(m: Array, s: float) -> Array:
    """Lower bounds of log P[ν ≥ m] for ν ~ N_ℤ(0, s²) and integers m (float64 array)."""
    sp = special()
    log_low, log_up = log_norm_bounds(s)
    j = np.arange(_TERMS + 1, dtype=np.float64)
    out = np.empty(m.shape)
    pos = m >= 0
    n = np.where(pos, m, -m + 1)        # m < 0: P[ν ≥ m] = 1 − P[ν ≥ |m| + 1]
    out_n = np.empty(m.shape)
    for lo in range(0, m.size, 4096):
        nn = n[lo:lo + 4096]
        x = nn[:, None] + j[None, :]
        head = sp.logsumexp(-x * x / (2 * s * s), axis=1)
        out_n[lo:lo + 4096] = head
    log_root = math.log(s * math.sqrt(2 * math.pi))
    # m ≥ 0: Σ_{x>m+J} f(x) ≥ ∫_{m+J+1}^∞ f (each f(x) ≥ ∫_x^{x+1} f), over Z ≤ e^{log_up}
    tail_low = log_root + sp.log_ndtr(-(n + _TERMS + 1) / s)
    low = np.logaddexp(out_n, tail_low) - log_up
    # m < 0: P[ν ≥ |m|+1] ≤ (Σ_{x=n}^{n+J} f + ∫_{n+J}^∞ f)/Z with Z ≥ e^{log_low}; and P[ν ≥ m] ≥ P[ν ≥ 0] > 1/2
    tail_up = log_root + sp.log_ndtr(-(n + _TERMS) / s)
    up = np.minimum(np.logaddexp(out_n, tail_up) - log_low, 0.0)
    with np.errstate(divide="ignore"):
        neg = np.maximum(np.log(-np.expm1(up)), math.log(0.5))
    out[pos] = low[pos]
    out[~pos] = neg[~pos]
    return out


def gaussian_svt_log_moments(sigma1: float, sigma2: float, threshold: int, gammas: Array) -> Array:
    """Upper bounds of log M_γ = log E_{z∼N_ℤ(0,σ₁²)}[P[ν ≥ T + z]^{−γ}], ν ∼ N_ℤ(0, σ₂²), for each γ.

    M_γ bounds E_z[E[K|z]^γ] of a c = 1 sparse vector on nonnegative queries (see
    :func:`gaussian_sparse_vector`); it is finite iff γ < (σ₂/σ₁)². Computed in log space (M_γ is
    astronomically large when T ≫ σ₁) as a sum over the integers z, every piece an upper bound: the pmf
    of z over a lower bound of its normaliser, the tail probability from below (64 exact terms plus an
    integral), integers beyond ±40 widths of the summand by geometric bounds (the summand is log-concave
    there), and — when σ₁ is large — blocks of integers each bounded by its largest pmf value times its
    largest P[·]^{−γ}.

    Example (thesis digest O-16 is the continuous σ₁ = 1, σ₂ = √3, γ = 2: 12.9644 at T = 0, 161.4347 at T = 1;
    σ₁ = 100 on the integers is close to it):
        >>> [round(float(v), 2) for v in np.exp(gaussian_svt_log_moments(100.0, 100 * 3 ** 0.5, 0, np.array([2.0])))]
        [12.91]

    """
    s1, s2 = float(sigma1), float(sigma2)
    g = np.asarray(gammas, dtype=np.float64)
    if np.any(g <= 1) or np.any(g * s1 * s1 >= s2 * s2):
        raise BudgetError("the moment is finite only for 1 < γ < (σ₂/σ₁)²", argument="gammas",
                          fix="pass orders between 1 and (σ₂/σ₁)²")
    if abs(threshold) > 2**52 or max(s1, s2) > 2**40:   # beyond exact float integers: the vacuous bound
        return np.full(g.shape, math.inf)
    bar = float(threshold)
    log_z1_low, _ = log_norm_bounds(s1)
    _, log_z2_up = log_norm_bounds(s2)
    gmax = float(g.max())
    kappa = 1 / (s1 * s1) - gmax / (s2 * s2)
    z_peak = gmax * bar * s1 * s1 / (s2 * s2 - gmax * s1 * s1)
    zlo = -math.ceil(40 * s1) - 1
    zhi = math.ceil(max(z_peak, 0.0) + 40 / math.sqrt(kappa)) + 1
    z0 = max(zhi, -bar)        # T + z ≥ 0 from here on
    n = zhi - zlo + 1
    width = max(1, math.ceil(n / _MOMENT_POINTS))
    a = np.arange(zlo, zhi + 1, width, dtype=np.float64)
    b = np.minimum(a + width - 1, zhi)
    nearest = np.clip(0.0, a, b)
    log_p = np.log(b - a + 1) - nearest * nearest / (2 * s1 * s1) - log_z1_low
    log_s = log_tail_lower(bar + b, s2)
    left_s = float(log_tail_lower(np.array([bar + zlo]), s2)[0])
    out = np.empty(g.shape)
    for i, gamma in enumerate(g.flat):
        parts = list(log_p - gamma * log_s)
        # z < zlo: pmf tail Σ_{j≥1} exp(−(zlo−j)²/2σ₁²) ≤ exp(−zlo²/2σ₁²)·r/(1−r), r = exp(−|zlo|/σ₁²); P ≥ P[ν ≥ T+zlo]
        t = -zlo / (s1 * s1)
        parts.append(-zlo * zlo / (2 * s1 * s1) - t - math.log(-math.expm1(-t)) - log_z1_low - gamma * left_s)
        # zhi < z < z0 (T + z < 0, so P ≥ P[ν ≥ 0] > 1/2): summand ≤ 2^γ·pmf; the pmf's right tail as on the left
        t = zhi / (s1 * s1)
        parts.append(gamma * math.log(2) - zhi * zhi / (2 * s1 * s1) - t - math.log(-math.expm1(-t)) - log_z1_low)
        # z ≥ z0 (T + z ≥ 0; P ≥ pmf(T+z)): summand ≤ exp(G(z)), G(z) = −z²/2σ₁² + γ((T+z)²/2σ₂² + log Z₂) − log Z₁,
        # concave, decreasing beyond its peak z_peak < zhi ≤ z0: Σ_{z≥z0} ≤ exp(G(z0))/(1−r), r = exp(G'(z0)) < 1
        big = -z0 * z0 / (2 * s1 * s1) + gamma * ((bar + z0) ** 2 / (2 * s2 * s2) + log_z2_up) - log_z1_low
        slope = -z0 / (s1 * s1) + gamma * (bar + z0) / (s2 * s2)
        assert slope < 0
        parts.append(big - math.log(-math.expm1(slope)))
        out.flat[i] = float(special().logsumexp(np.array(parts))) + 1e-9   # + 1e-9: float rounding (upward)
    return out


def log_binomial_sum(k: int, c: int) -> float:
    """The log of Σ_{j=0}^{min(c,k)} C(k, j), the number of outputs of a c-positive, length-k stream."""
    if c >= k:
        return k * math.log(2)
    j = np.arange(c + 1, dtype=np.float64)
    sp = special()
    terms = sp.gammaln(k + 1) - sp.gammaln(j + 1) - sp.gammaln(k - j + 1)
    return float(sp.logsumexp(terms))
